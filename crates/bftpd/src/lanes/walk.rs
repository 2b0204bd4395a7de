//! A recursive job's walk of its source tree, and the destination directories it needs.
//!
//! The walk lists one directory at a time from the durable frontier (`JobStore::walk`), parents
//! before children, and freezes each listing in one store transaction with its files as
//! members (`JobStore::record_directory`) before the next directory is listed; a crash resumes
//! at the first directory not frozen, and a frozen directory is never listed again. A file
//! added to a frozen directory later is not the job's; a directory added under one not yet
//! listed is. Symbolic links and special files become `refused` members (reported, never
//! followed or copied); so do listing lines refused by the name checks. A directory that a
//! limit stops (deeper than `[ftp] max_tree_depth`, a listing over `max_listing_bytes`, one
//! the server cut short, one that would pass `max_tree_members`) is a `refused` member named
//! by its path, its files not frozen (`bftp_core::tree`): the rest of the walk goes on. A
//! directory listed without its hidden names (a server that ignores `LIST -a`) gets a
//! `refused` member `DIR/.*` saying so, frozen with its listing. The whole
//! walk ends before any file moves; then every listed directory is made on the destination,
//! parents first, an existing one counting as made; one the destination refuses for good
//! fails the members under it, not the job ([`MadeDirs::failed`]).

use std::collections::BTreeMap;

use bftp_core::tree::{DirRefusal, HiddenNames};
use bftp_core::{JobSpec, Timestamp};
use bftp_ftp::{DirListing, ListError, Pair, TreeKind};
use bftp_store::{JobId, JobStore, NewMember, StoreError, Walk};

use crate::lanes::paths::join_path;
use crate::store::Store;

/// Why a walk, or the making of its directories, stops the attempt: the attempt's end is
/// the caller's to decide (an attempt makes it its `AttemptEnd`; `bftp transfer` its error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEnd {
    /// No later attempt gets further (a refused listing, a tree too large for one job).
    Permanent { reason: String },
    /// Worth another attempt (a lost connection, a store that could not record).
    Transient { reason: String },
}

impl WalkEnd {
    pub fn reason(self) -> String {
        match self {
            WalkEnd::Permanent { reason } | WalkEnd::Transient { reason } => reason,
        }
    }
}

/// What one listed directory contributes: its members and its subdirectories (relative to
/// the job's root).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sorted {
    pub members: Vec<NewMember>,
    pub subdirs: Vec<String>,
    /// The MLSD `unique` facts to keep with the walk: (fact, directory).
    pub unique: Vec<(String, String)>,
}

fn refused(name: String, why: String) -> NewMember {
    NewMember {
        name,
        size: None,
        modified: None,
        refused: Some(why),
    }
}

impl Sorted {
    /// What a refused directory contributes: itself, a `refused` member named by its path
    /// (`.` for the root), with the reason; no file of it, no subdirectory.
    fn refused_dir(dir: &str, why: &DirRefusal) -> Sorted {
        let name = if dir.is_empty() { "." } else { dir };
        Sorted {
            members: vec![refused(name.to_owned(), why.to_string())],
            ..Sorted::default()
        }
    }
}

/// The members and subdirectories of directory `dir` (relative to the root) from its
/// listing, in name order; a subdirectory deeper than `max_depth` is refused. `seen` holds
/// the MLSD `unique` facts the walk has seen so far, each with the first directory that had
/// it. Pure.
///
/// The loop rule: a listed directory whose `unique` fact is already known (seen anywhere in
/// the job: on the path from the root, as the listed directory itself, or as another
/// directory already queued or walked) is the same directory reached a second way, through a
/// link the server follows: it is a `refused` member naming the directory it is, not walked
/// again. A listing without the fact (LIST, or MLSD without `unique`) cannot loop here:
/// links are then shown as links and never followed.
pub fn sort(
    dir: &str,
    listing: &DirListing,
    seen: &BTreeMap<String, String>,
    max_depth: usize,
) -> Sorted {
    let mut out = Sorted::default();
    let mut known: BTreeMap<&str, String> =
        seen.iter().map(|(u, d)| (u.as_str(), d.clone())).collect();
    if let Some(u) = &listing.unique {
        if !known.contains_key(u.as_str()) {
            known.insert(u, dir.to_owned());
            out.unique.push((u.clone(), dir.to_owned()));
        }
    }
    let depth = |p: &str| p.split('/').count();
    for e in &listing.entries {
        let rel = join_path(dir, &e.name);
        match &e.kind {
            TreeKind::File => out.members.push(NewMember {
                name: rel,
                size: e.size,
                modified: None,
                refused: None,
            }),
            TreeKind::Dir if depth(&rel) > max_depth => out.members.push(refused(
                rel,
                DirRefusal::TooDeep { max: max_depth }.to_string(),
            )),
            TreeKind::Dir => match e.unique.as_deref() {
                Some(u) => match known.get(u) {
                    Some(first) => {
                        let first = if first.is_empty() { "." } else { first };
                        out.members.push(refused(
                            rel,
                            format!(
                                "refused: the directory {first:?} again (the same MLSD unique \
                                 fact, reached through a link): a loop or a second path, not \
                                 walked again"
                            ),
                        ))
                    }
                    None => {
                        known.insert(u, rel.clone());
                        out.unique.push((u.to_owned(), rel.clone()));
                        out.subdirs.push(rel);
                    }
                },
                None => out.subdirs.push(rel),
            },
            TreeKind::Symlink { target } => {
                let to = if target.is_empty() {
                    String::new()
                } else {
                    format!(" to {target:?}")
                };
                out.members.push(refused(
                    rel,
                    format!("refused: a symbolic link{to}: reported, not followed"),
                ))
            }
            TreeKind::Special(what) => out.members.push(refused(
                rel,
                format!("refused: not a plain file or directory ({what}): not copied"),
            )),
        }
    }
    if listing.hidden == HiddenNames::NotShown {
        out.members.push(refused(
            bftp_core::tree::hidden_member(dir),
            bftp_core::tree::HIDDEN_NOT_LISTED.to_owned(),
        ));
    }
    for r in listing.rejected.iter() {
        out.members.push(refused(
            join_path(dir, &r.line),
            format!(
                "refused: the source listed this name, which bftpd does not send in a command: {}",
                r.reason
            ),
        ));
    }
    out.members.sort_by(|a, b| a.name.cmp(&b.name));
    out.subdirs.sort();
    out
}

/// Walks the rest of the job's tree (see the module docs): lists each directory of the
/// frontier and freezes it. `keep` receives each listing's transcript.
pub async fn walk(
    store: &Store,
    id: JobId,
    pair: &mut Pair,
    spec: &JobSpec,
    now: impl Fn() -> Timestamp,
    keep: impl Fn(&bftp_ftp::Transcript),
) -> Result<Walk, WalkEnd> {
    let root = spec.source_root().to_owned();
    let mut walk = stored(store, move |s| s.walk(id)).await?;
    let mut members = stored(store, move |s| s.get(id))
        .await?
        .map_or(0, |j| j.member_count as usize);
    while let Some(dir) = walk.frontier.first().cloned() {
        let listed = list(pair, &root, &dir).await;
        if let Ok(l) = &listed {
            keep(&l.transcript);
        }
        let sorted = settle(&dir, listed, &walk.unique, members, pair.limits()).map_err(
            |(reason, permanent)| {
                if permanent {
                    WalkEnd::Permanent { reason }
                } else {
                    WalkEnd::Transient { reason }
                }
            },
        )?;
        members += sorted.members.len();
        let at = now();
        walk = stored(store, move |s| {
            s.record_directory(id, &dir, sorted.members, sorted.subdirs, sorted.unique, at)
        })
        .await?;
    }
    Ok(walk)
}

/// What directory `dir` contributes to the walk, from its listing or the reason it has none:
/// a limit or a cut listing refuses the directory (the walk goes on); any other failure
/// ends the walk (`Err`: why, and whether it is permanent: only the root's own permanent
/// refusal is, a subdirectory may be readable next time). `members`: how many the walk froze
/// before it.
fn settle(
    dir: &str,
    listed: Result<DirListing, (String, ListError)>,
    seen: &BTreeMap<String, String>,
    members: usize,
    limits: &bftp_ftp::Limits,
) -> Result<Sorted, (String, bool)> {
    let sorted = match listed {
        Ok(listing) => sort(dir, &listing, seen, limits.max_tree_depth),
        Err((_, ListError::TooLarge { limit })) => {
            Sorted::refused_dir(dir, &DirRefusal::TooLarge { limit })
        }
        Err((_, ListError::Truncated { cut })) => Sorted::refused_dir(dir, &DirRefusal::Cut(cut)),
        Err((path, e)) => {
            let permanent = e.disposition().is_permanent() && dir.is_empty();
            return Err((
                format!("listing the source directory {path:?}: {e}"),
                permanent,
            ));
        }
    };
    let max = limits.max_tree_members;
    if members + sorted.members.len() > max {
        let files = sorted.members.len() + sorted.subdirs.len();
        return Ok(Sorted::refused_dir(
            dir,
            &DirRefusal::TooManyMembers { files, max },
        ));
    }
    Ok(sorted)
}

/// Lists directory `dir` (relative to `root`); an error with the path listed.
async fn list(pair: &mut Pair, root: &str, dir: &str) -> Result<DirListing, (String, ListError)> {
    let path = if dir.is_empty() {
        root.to_owned()
    } else {
        join_path(root, dir)
    };
    pair.list_dir(&path).await.map_err(|e| (path, e))
}

/// A whole tree walked in memory, by the rules of the durable walk ([`sort`], [`settle`] and
/// the frontier of [`Walk::record`]), for `bftp transfer` and `bftp verify`: nothing is
/// kept, so a run cut off is lost.
#[derive(Debug, Default)]
pub struct Tree {
    pub walk: Walk,
    /// Every member, in walk order: files, and the refused entries with their reasons.
    pub members: Vec<NewMember>,
}

/// Walks the tree below `root` in memory (see [`Tree`]), with the pair's limits.
/// `Err`: why, and whether it is permanent.
pub async fn walk_in_memory(pair: &mut Pair, root: &str) -> Result<Tree, (String, bool)> {
    let mut tree = Tree {
        walk: Walk::start(),
        ..Tree::default()
    };
    while let Some(dir) = tree.walk.frontier.first().cloned() {
        let listed = list(pair, root, &dir).await;
        let limits = pair.limits();
        let sorted = settle(&dir, listed, &tree.walk.unique, tree.members.len(), limits)?;
        tree.walk.record(&dir, &sorted.subdirs, &sorted.unique);
        tree.members.extend(sorted.members);
    }
    Ok(tree)
}

/// How long made directories may wait to be recorded: a kill loses at most this much of
/// the MKDs, and a tree of thousands of directories costs a store write per interval, not
/// one per directory.
const MADE_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// The destination directories that could not be made, for good: each (relative to the
/// root) with the reason, naming the destination's reply. The members under one of them
/// fail with it (`bftp_core::tree::blocked_by`); the others are copied.
#[derive(Debug, Default)]
pub struct MadeDirs {
    pub failed: Vec<(String, String)>,
}

impl MadeDirs {
    /// The directories that failed, for [`bftp_core::tree::blocked_by`].
    pub fn failed_dirs(&self) -> Vec<String> {
        self.failed.iter().map(|(d, _)| d.clone()).collect()
    }

    /// Why member `name` cannot be stored, if a directory above it was not made.
    pub fn blocked(&self, name: &str) -> Option<String> {
        let dirs = self.failed_dirs();
        let dir = bftp_core::tree::blocked_by(name, &dirs)?;
        self.failed
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, why)| why.clone())
    }
}

/// Makes the destination root and every listed directory, parents first (the walk's order),
/// but those `walk.made` says an earlier attempt made already. With a store, the directories
/// made are remembered there ([`JobStore::record_made_dirs`]), every [`MADE_FLUSH`] and at
/// the end (also when a MKD fails): a resumed job does not make them again. A directory the
/// destination refuses for good is not fatal: it and every directory below it are in
/// [`MadeDirs::failed`]; the root refused, or a transient failure, ends the attempt.
pub async fn make_dirs(
    pair: &mut Pair,
    spec: &JobSpec,
    walk: &Walk,
    store: Option<(&Store, JobId)>,
) -> Result<MadeDirs, WalkEnd> {
    let root = spec
        .destination
        .as_ref()
        .map(|d| d.path.trim_end_matches('/').to_owned())
        .unwrap_or_default();
    let mut todo = Vec::new();
    if !root.is_empty() && root != "/" {
        todo.push((String::new(), root.clone()));
    }
    for dir in walk.listed.iter().filter(|d| !d.is_empty()) {
        todo.push((dir.clone(), join_path(&root, dir)));
    }
    let mut made = Vec::new();
    let mut out = MadeDirs::default();
    let mut since = std::time::Instant::now();
    let mut failed = None;
    for (dir, path) in todo {
        if walk.made.contains(&dir) {
            continue;
        }
        if let Some(above) = out.blocked(&dir) {
            let why = format!("not made: a directory above it was not: {above}");
            out.failed.push((dir, why));
            continue;
        }
        if let Err(e) = pair.make_dir(&path).await {
            let reason = format!("making the destination directory {path:?}: {e}");
            if e.disposition().is_permanent() && !dir.is_empty() {
                out.failed.push((dir, reason));
                continue;
            }
            failed = Some(if e.disposition().is_permanent() {
                WalkEnd::Permanent { reason }
            } else {
                WalkEnd::Transient { reason }
            });
            break;
        }
        made.push(dir);
        if let Some((store, id)) = store {
            if since.elapsed() >= MADE_FLUSH {
                let dirs = std::mem::take(&mut made);
                stored(store, move |s| s.record_made_dirs(id, dirs)).await?;
                since = std::time::Instant::now();
            }
        }
    }
    if let Some((store, id)) = store.filter(|_| !made.is_empty()) {
        stored(store, move |s| s.record_made_dirs(id, made)).await?;
    }
    failed.map_or(Ok(out), Err)
}

/// A store call of the walk, its failure as the attempt's end.
async fn stored<T: Send + 'static>(
    store: &Store,
    f: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, WalkEnd> {
    match store.call(f).await {
        Ok(v) => Ok(v),
        // The store's own bound (`[ftp] max_tree_members` is at most it, but each directory
        // refused past it is one more member): no later attempt gets further.
        Err(e @ StoreError::TooManyMembers { .. }) => Err(WalkEnd::Permanent {
            reason: format!("the tree is too large for one job: {e}"),
        }),
        Err(e) => Err(WalkEnd::Transient {
            reason: format!("the daemon could not record the walk: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_ftp::{RejectedName, TreeEntry, WalkMethod};

    #[test]
    fn a_listing_sorts_into_members_subdirectories_and_refusals() {
        let e = |name: &str, kind: TreeKind| TreeEntry {
            name: name.into(),
            kind,
            size: Some(3),
            unique: None,
            modified: None,
            hint: None,
        };
        let listing = DirListing {
            entries: vec![
                e("b.dat", TreeKind::File),
                e("sub", TreeKind::Dir),
                e("a b.dat", TreeKind::File),
                e(
                    "link",
                    TreeKind::Symlink {
                        target: "b.dat".into(),
                    },
                ),
                e("fifo", TreeKind::Special("type p".into())),
            ],
            rejected: vec![RejectedName {
                line: "bad\\rname".into(),
                reason: "CR".into(),
                matched: true,
            }],
            method: WalkMethod::List,
            hidden: HiddenNames::Shown,
            unique: None,
            transcript: Default::default(),
        };
        let s = sort("top", &listing, &BTreeMap::new(), 64);
        assert_eq!(s.subdirs, ["top/sub"]);
        let names: Vec<(&str, bool)> = s
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.refused.is_some()))
            .collect();
        assert_eq!(
            names,
            [
                ("top/a b.dat", false),
                ("top/b.dat", false),
                ("top/bad\\rname", true),
                ("top/fifo", true),
                ("top/link", true),
            ]
        );
        let link = s.members.iter().find(|m| m.name == "top/link").unwrap();
        assert!(link
            .refused
            .as_ref()
            .unwrap()
            .contains("symbolic link to \"b.dat\""));
        // At the root, names stay as listed; too deep a directory is not walked.
        let deep = "d/".repeat(63) + "d";
        let s = sort(&deep, &listing, &BTreeMap::new(), 64);
        assert!(s.subdirs.is_empty());
        assert!(s
            .members
            .iter()
            .any(|m| m.name.ends_with("/sub")
                && m.refused.as_ref().unwrap().contains("max_tree_depth")));
        assert_eq!(sort("", &listing, &BTreeMap::new(), 64).subdirs, ["sub"]);
        // The depth is a setting: 2 levels refuse `top/sub`.
        let s = sort("top", &listing, &BTreeMap::new(), 1);
        assert!(s.subdirs.is_empty());
    }

    /// What a directory contributes when its listing is refused or over a limit: one
    /// `refused` member named by its path (`.` for the root), naming the setting, and no
    /// file or subdirectory; a failure that is no limit ends the walk (permanent only at the
    /// root).
    #[test]
    fn a_limit_refuses_the_directory_and_other_failures_end_the_walk() {
        let limits = bftp_ftp::Limits {
            max_tree_members: 3,
            ..bftp_ftp::Limits::default()
        };
        let seen = BTreeMap::new();
        let cut = bftp_core::tree::listing_cut("226 Output truncated to 5 matches", 5).unwrap();
        let file = |name: &str| TreeEntry {
            name: name.into(),
            kind: TreeKind::File,
            size: Some(1),
            unique: None,
            modified: None,
            hint: None,
        };
        let listing = |n: usize| DirListing {
            entries: (0..n).map(|i| file(&format!("f{i}"))).collect(),
            rejected: vec![],
            method: WalkMethod::List,
            hidden: HiddenNames::NotShown,
            unique: None,
            transcript: Default::default(),
        };
        // (directory, listing, members before) -> the refused member and its setting
        type Row<'a> = (
            &'a str,
            Result<DirListing, (String, ListError)>,
            usize,
            &'a str,
            &'a str,
        );
        let rows: Vec<Row> = vec![
            (
                "big",
                Err(("/big".into(), ListError::TooLarge { limit: 10 })),
                0,
                "big",
                "max_listing_bytes",
            ),
            (
                "",
                Err(("/".into(), ListError::Truncated { cut: cut.clone() })),
                0,
                ".",
                "LimitRecursion",
            ),
            ("many", Ok(listing(3)), 1, "many", "max_tree_members"),
        ];
        for (dir, listed, before, name, setting) in rows {
            let sorted = settle(dir, listed, &seen, before, &limits).unwrap();
            assert!(sorted.subdirs.is_empty(), "{dir}");
            assert_eq!(sorted.members.len(), 1, "{dir}");
            assert_eq!(sorted.members[0].name, name);
            let why = sorted.members[0].refused.as_deref().unwrap();
            assert!(why.contains(setting), "{dir}: {why}");
        }
        // Within the limit: the files, and the member that says hidden names were not
        // listed (the member limit counts it too).
        let sorted = settle("ok", Ok(listing(2)), &seen, 0, &limits).unwrap();
        let names: Vec<(&str, bool)> = sorted
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.refused.is_some()))
            .collect();
        assert_eq!(names, [("ok/.*", true), ("ok/f0", false), ("ok/f1", false)]);
        // Not a limit: the walk ends, permanent only for the root.
        let gone = || ListError::DirectoryMissing {
            dir: "x".into(),
            reply: bftp_ftp::parse::Reply::new(
                bftp_core::reply::ReplyCode::new(550).unwrap(),
                vec!["gone".into()],
            ),
        };
        let (why, permanent) =
            settle("", Err(("/t".into(), gone())), &seen, 0, &limits).unwrap_err();
        assert!(permanent);
        assert!(
            why.starts_with("listing the source directory \"/t\": "),
            "{why}"
        );
        let sub = settle("sub", Err(("/t/sub".into(), gone())), &seen, 0, &limits);
        assert!(!sub.unwrap_err().1);
    }

    /// The loop rule, one row per case: the listed directory (`dir`, its own unique fact),
    /// its subdirectories (name, unique fact), the facts seen before; what is walked, what is
    /// refused (and as which directory), and the facts kept.
    #[test]
    fn a_directory_already_seen_by_its_unique_fact_is_reported_not_walked() {
        type Row<'a> = (
            &'a str,
            Option<&'a str>,
            &'a [(&'a str, Option<&'a str>)],
            &'a [(&'a str, &'a str)],
            &'a [&'a str],
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, &'a str)],
        );
        let table: &[Row] = &[
            // No facts (LIST): everything walked, nothing kept.
            (
                "",
                None,
                &[("a", None), ("b", None)],
                &[],
                &["a", "b"],
                &[],
                &[],
            ),
            // The root and two distinct subdirectories: all walked, all kept.
            (
                "",
                Some("R"),
                &[("a", Some("A")), ("b", Some("B"))],
                &[],
                &["a", "b"],
                &[],
                &[("R", ""), ("A", "a"), ("B", "b")],
            ),
            // A link back to the root (proFTPD with ShowSymlinks off lists it as a dir).
            (
                "a",
                Some("A"),
                &[("up", Some("R")), ("c", Some("C"))],
                &[("R", ""), ("A", "a")],
                &["a/c"],
                &[("a/up", ".")],
                &[("C", "a/c")],
            ),
            // A link to the listed directory itself.
            (
                "a",
                Some("A"),
                &[("self", Some("A"))],
                &[("R", ""), ("A", "a")],
                &[],
                &[("a/self", "a")],
                &[],
            ),
            // A second path to a directory seen elsewhere in the job (not an ancestor).
            (
                "b",
                Some("B"),
                &[("to c", Some("C"))],
                &[("R", ""), ("A", "a"), ("B", "b"), ("C", "a/c")],
                &[],
                &[("b/to c", "a/c")],
                &[],
            ),
            // Two names for one directory in the same listing: the first (in listing order)
            // is walked.
            (
                "",
                None,
                &[("x", Some("X")), ("y", Some("X"))],
                &[],
                &["x"],
                &[("y", "x")],
                &[("X", "x")],
            ),
        ];
        for (dir, own, subs, seen, walked, refused, kept) in table {
            let listing = DirListing {
                entries: subs
                    .iter()
                    .map(|(name, unique)| TreeEntry {
                        name: (*name).into(),
                        kind: TreeKind::Dir,
                        size: None,
                        unique: unique.map(Into::into),
                        modified: None,
                        hint: None,
                    })
                    .collect(),
                rejected: vec![],
                method: WalkMethod::Mlsd,
                hidden: HiddenNames::Shown,
                unique: own.map(Into::into),
                transcript: Default::default(),
            };
            let seen: BTreeMap<String, String> = seen
                .iter()
                .map(|(u, d)| ((*u).into(), (*d).into()))
                .collect();
            let s = sort(dir, &listing, &seen, 64);
            let row = format!("{dir:?} {subs:?} seen {seen:?}");
            assert_eq!(s.subdirs, *walked, "{row}");
            let got: Vec<(&str, &str)> = s
                .members
                .iter()
                .map(|m| (m.name.as_str(), m.refused.as_deref().unwrap()))
                .collect();
            assert_eq!(got.len(), refused.len(), "{row}: {got:?}");
            for ((name, why), (want_name, first)) in got.iter().zip(refused.iter()) {
                assert_eq!(name, want_name, "{row}");
                assert!(
                    why.contains(&format!("the directory {first:?} again")),
                    "{row}: {why}"
                );
                assert!(why.contains("not walked again"), "{row}: {why}");
            }
            let kept: Vec<(String, String)> = kept
                .iter()
                .map(|(u, d)| ((*u).into(), (*d).into()))
                .collect();
            assert_eq!(s.unique, kept, "{row}");
        }
    }
}
