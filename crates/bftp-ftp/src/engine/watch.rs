//! A watch's listing (RULES.md §15, SPEC §15): the watched directory listed once per poll
//! (its whole tree, each directory once, for a recursive watch), every plain file with the
//! facts that make its identity, for `bftp_core::watch::poll`.
//!
//! - Each directory is listed as a tree's walk lists it ([`Pair::list_dir`]: MLSD where FEAT
//!   offers MLST, else `LIST -a` in the `ls -l` format), so names go through the same checks
//!   (refused names, names holding a secret) and kinds are told the same way. Links and
//!   special files are reported in `skipped`, never followed; without `recursive`, so are
//!   subdirectories. A directory whose MLSD `unique` fact was already seen (the same
//!   directory reached again through a link the server follows) is reported, not listed
//!   twice.
//! - A subdirectory that cannot be listed (refused, cut short, too large) is named in
//!   `unlisted` with its reason in `skipped`: what the checkpoint holds below it is neither
//!   taken nor pruned. The root failing, or the connection lost, is the error.
//! - Facts: MLSD gives `size`, `modify` and `unique`. LIST's display time is never a fact (it
//!   is in the server's zone, to the minute, and turns into a year after six months), so on
//!   a server without MLSD (vsftpd) a file is asked SIZE and MDTM, pipelined a window at a
//!   time, unless the checkpoint holds it with the same LIST hint (its size and display date,
//!   `bftp_core::watch::needs_facts`): then the checkpoint's facts are reused and the poll
//!   costs one LIST per directory. A refused SIZE falls back to LIST's size; a refused MDTM
//!   leaves the modify time unknown (size only). A transient refusal of either gives the
//!   file the checkpoint's facts (or none: the poll ignores it this time) and no hint, so it
//!   is asked again at the next poll, and a hiccup never turns into a new identity.

use std::collections::{BTreeMap, VecDeque};

use bftp_core::reply::{CommandKind, Disposition};
use bftp_core::watch::{needs_facts, Entry, Facts, Listing, Seen};
use bftp_core::TransferType;

use super::listing::{join, SIZE_WINDOW};
use super::tree::{DirListing, HiddenNames, TreeEntry, TreeKind, WalkMethod};
use super::{size_answer_of, ListError, Pair, RejectedName, SizeAnswer};
use crate::parse::{parse_mdtm_reply, Reply};
use crate::transcript::{Side, Transcript};

/// What [`Pair::watch_listing`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchListing {
    /// Every plain file (path relative to the watched directory: `a.csv`, `sub/b.csv`) with
    /// its facts, and the subdirectories that could not be listed.
    pub listing: Listing,
    /// LIST only: (path, hint) for each file whose facts may be reused while its LIST line
    /// shows the same size and date (the checkpoint entry's `hint`). A file whose SIZE or
    /// MDTM met a transient refusal has none: it is asked again next time.
    pub hints: Vec<(String, String)>,
    /// Names refused by the checks (path relative to the watched directory, escaped).
    pub refused: Vec<RejectedName>,
    /// (path, why) of what is not a file of the listing: directories of a watch that is not
    /// recursive, links, special files, a directory reached twice, directories not listed.
    pub skipped: Vec<(String, String)>,
    /// How the watched directory was listed.
    pub method: WalkMethod,
    pub transcript: Transcript,
}

/// Files per window of questions: a SIZE and an MDTM each, [`SIZE_WINDOW`] commands a window.
const FACTS_WINDOW: usize = SIZE_WINDOW / 2;

/// What one listed directory gives a watch's listing.
#[derive(Debug, Default, PartialEq, Eq)]
struct Sorted {
    /// Plain files, by their path relative to the watched directory.
    files: Vec<(String, TreeEntry)>,
    /// Subdirectories to list (recursive watch only).
    subdirs: Vec<String>,
    skipped: Vec<(String, String)>,
    refused: Vec<RejectedName>,
}

/// `rel/name`, or `name` at the watched directory itself.
fn rel_join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_owned()
    } else {
        format!("{rel}/{name}")
    }
}

/// Sorts the listing of directory `rel` (relative to the watched directory; `""` for
/// itself). `seen` holds the MLSD `unique` facts of the directories met so far, each with
/// the first path that had it: a directory met again by its fact (through a link the server
/// follows) is reported, not listed again. A subdirectory deeper than `max_depth` is
/// reported, not listed. Pure.
fn sort_dir(
    rel: &str,
    listing: &DirListing,
    recursive: bool,
    seen: &mut BTreeMap<String, String>,
    max_depth: usize,
) -> Sorted {
    let mut out = Sorted::default();
    if let Some(u) = &listing.unique {
        seen.entry(u.clone()).or_insert_with(|| rel.to_owned());
    }
    for e in &listing.entries {
        let path = rel_join(rel, &e.name);
        match &e.kind {
            TreeKind::File => out.files.push((path, e.clone())),
            TreeKind::Dir if !recursive => out
                .skipped
                .push((path, "a directory: the watch is not recursive".into())),
            TreeKind::Dir if path.split('/').count() > max_depth => out.skipped.push((
                path,
                format!("a directory deeper than {max_depth} levels (max_tree_depth): not listed"),
            )),
            TreeKind::Dir => match e.unique.as_ref().and_then(|u| seen.get(u)) {
                Some(first) => {
                    let first = if first.is_empty() { "." } else { first };
                    out.skipped.push((
                        path,
                        format!(
                            "the directory {first:?} again (the same MLSD unique fact, reached \
                             through a link): not listed twice"
                        ),
                    ))
                }
                None => {
                    if let Some(u) = &e.unique {
                        seen.insert(u.clone(), path.clone());
                    }
                    out.subdirs.push(path);
                }
            },
            TreeKind::Symlink { target } => {
                let to = if target.is_empty() {
                    String::new()
                } else {
                    format!(" to {target:?}")
                };
                out.skipped
                    .push((path, format!("a symbolic link{to}: reported, not followed")))
            }
            TreeKind::Special(what) => out
                .skipped
                .push((path, format!("not a plain file or directory ({what})"))),
        }
    }
    if listing.hidden == HiddenNames::NotShown {
        out.skipped.push((
            bftp_core::tree::hidden_member(rel),
            "names starting with a dot are not listed here: the server ignores LIST -a".into(),
        ));
    }
    for r in &listing.rejected {
        out.refused.push(RejectedName {
            line: rel_join(rel, &r.line),
            reason: r.reason.clone(),
            matched: r.matched,
        });
    }
    out
}

/// The checkpoint's facts for a LIST file whose LIST line still shows what it showed when
/// they were asked (the same hint); `None`: the file must be asked SIZE and MDTM.
fn reused(known: &BTreeMap<String, Entry>, path: &str, hint: Option<&str>) -> Option<Facts> {
    let entry = known.get(path)?;
    let hint = hint?;
    (!needs_facts(Some(entry), hint)).then(|| entry.facts.clone())
}

/// What a SIZE or MDTM question gave.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer<T> {
    Got(T),
    /// Refused for good (not offered, no such file, an unreadable number): the same answer
    /// next time, so what the file's facts are without it is stable.
    Refused,
    /// A transient refusal: the next poll may get the answer.
    Trouble,
}

fn size_answer(answer: SizeAnswer) -> Answer<u64> {
    match answer {
        SizeAnswer::Size(size) => Answer::Got(size),
        SizeAnswer::Unavailable(_) | SizeAnswer::NoFile(_) => Answer::Refused,
        SizeAnswer::Failed(_, disposition) if disposition.is_permanent() => Answer::Refused,
        SizeAnswer::Failed(..) => Answer::Trouble,
    }
}

/// An MDTM reply as the server's `YYYYMMDDHHMMSS[.sss]` (canonical: [`crate::parse::ModifyTime::to_rfc3659`]).
fn mdtm_answer(reply: &Reply, disposition: Disposition) -> Answer<String> {
    match disposition {
        Disposition::Done => match parse_mdtm_reply(&reply.text()) {
            Ok(time) => Answer::Got(time.to_rfc3659()),
            Err(_) => Answer::Refused,
        },
        Disposition::NotSupported | Disposition::Permanent(_) => Answer::Refused,
        Disposition::Transient(_) | Disposition::Preliminary | Disposition::Continue(_) => {
            Answer::Trouble
        }
    }
}

/// A file's facts from its SIZE and MDTM answers, and whether they may be reused while its
/// LIST line stays the same. A refused SIZE: LIST's size; a refused MDTM: no modify time. A
/// transient refusal: no facts this time (the poll leaves the file and its checkpoint entry
/// as they are and asks again next time), never the checkpoint's: the file was asked
/// because its LIST line changed, so it may be changing, and old facts would let it be
/// taken as stable.
fn asked_facts(
    list_size: Option<u64>,
    size: Answer<u64>,
    modified: Answer<String>,
) -> (Facts, bool) {
    if size == Answer::Trouble || modified == Answer::Trouble {
        return (Facts::default(), false);
    }
    let facts = Facts {
        size: match size {
            Answer::Got(size) => Some(size),
            _ => list_size,
        },
        modified: match modified {
            Answer::Got(time) => Some(time),
            _ => None,
        },
        unique: None,
    };
    (facts, true)
}

/// The MDTM argument for `path`: vsftpd reads `MDTM YYYYMMDDHHMMSS name` as "set the modify
/// time of `name`", so a path that starts with fourteen digits and a space is sent as
/// `./path`.
fn mdtm_argument(path: &str) -> String {
    let b = path.as_bytes();
    if b.len() > 14 && b[..14].iter().all(u8::is_ascii_digit) && b[14] == b' ' {
        format!("./{path}")
    } else {
        path.to_owned()
    }
}

impl Pair {
    /// One listing of the watched directory `dir` on the source (see the module docs):
    /// every plain file with its facts (paths relative to `dir`), what was skipped and
    /// refused, the LIST hints, the transcript. `known` is the watch's checkpoint: on a
    /// server without MLSD, its facts are reused for a file whose LIST line is unchanged.
    pub async fn watch_listing(
        &mut self,
        dir: &str,
        recursive: bool,
        known: &BTreeMap<String, Entry>,
    ) -> Result<WatchListing, ListError> {
        let root = self.watched_dir(dir).await?;
        let scrubber = self.recorder.scrubber().clone();
        let mut out = WatchListing {
            listing: Listing::default(),
            hints: Vec::new(),
            refused: Vec::new(),
            skipped: Vec::new(),
            method: root.method,
            transcript: Transcript::default(),
        };
        let max_depth = self.limits.max_tree_depth;
        let max_files = self.limits.max_tree_members;
        let mut seen = BTreeMap::new();
        let mut files: Vec<(String, TreeEntry)> = Vec::new();
        let mut queue: VecDeque<(String, Option<DirListing>)> =
            VecDeque::from([(String::new(), Some(root))]);
        while let Some((rel, listed)) = queue.pop_front() {
            let listed = match listed {
                Some(listed) => listed,
                None => match self.watched_dir(&join(dir, &rel)).await {
                    Ok(listed) => listed,
                    // The connection is gone: not a property of this directory.
                    Err(e) if self.dead_reason().is_some() => return Err(e),
                    Err(e) => {
                        let why = scrubber.scrub(&format!("not listed: {e}"));
                        self.note(Side::Source, &format!("{rel:?} {why}"));
                        out.listing.unlisted.push(rel.clone());
                        out.skipped.push((rel, why));
                        continue;
                    }
                },
            };
            let sorted = sort_dir(&rel, &listed, recursive, &mut seen, max_depth);
            if files.len() + sorted.files.len() > max_files {
                let why = format!(
                    "not listed: more than {max_files} files in the watch (max_tree_members)"
                );
                out.listing.unlisted.push(rel.clone());
                out.skipped.push((rel, why));
                continue;
            }
            files.extend(sorted.files);
            queue.extend(sorted.subdirs.into_iter().map(|d| (d, None)));
            out.refused.extend(sorted.refused);
            out.skipped.extend(
                sorted
                    .skipped
                    .into_iter()
                    .map(|(path, why)| (path, scrubber.scrub(&why))),
            );
        }
        out.listing.files = match out.method {
            WalkMethod::Mlsd => files
                .into_iter()
                .map(|(path, e)| Seen {
                    path,
                    facts: Facts {
                        size: e.size,
                        modified: e.modified.map(|m| m.to_rfc3659()),
                        unique: e.unique,
                    },
                })
                .collect(),
            WalkMethod::List => self.list_facts(dir, files, known, &mut out.hints).await?,
        };
        out.transcript = self.recorder.take();
        Ok(out)
    }

    /// One directory of the watch, as [`Pair::list_dir`] lists it. A LIST without its `.`
    /// entry may not be a directory's listing at all: vsftpd answers `LIST -a` of a missing
    /// directory with an empty listing (as for an empty one), and of one it cannot open with
    /// that directory's own line (as `ls -ld` would). CWD tells them apart, so a watched
    /// directory that is gone or unreadable is an error, never an empty listing that would
    /// prune the checkpoint, nor a subdirectory of its own name.
    async fn watched_dir(&mut self, path: &str) -> Result<DirListing, ListError> {
        let listed = self.read_dir(path).await?;
        if listed.method == WalkMethod::List && listed.hidden == HiddenNames::NotShown {
            self.check_directory(path).await?;
        }
        Ok(listed)
    }

    /// The facts of LIST files: the checkpoint's where the hint is unchanged, else SIZE and
    /// MDTM, [`FACTS_WINDOW`] files at a time.
    async fn list_facts(
        &mut self,
        dir: &str,
        files: Vec<(String, TreeEntry)>,
        known: &BTreeMap<String, Entry>,
        hints: &mut Vec<(String, String)>,
    ) -> Result<Vec<Seen>, ListError> {
        let mut facts: Vec<Option<Facts>> = Vec::with_capacity(files.len());
        let mut ask = Vec::new();
        for (i, (path, e)) in files.iter().enumerate() {
            let reuse = reused(known, path, e.hint.as_deref());
            if reuse.is_some() {
                if let Some(hint) = &e.hint {
                    hints.push((path.clone(), hint.clone()));
                }
            } else {
                ask.push(i);
            }
            facts.push(reuse);
        }
        if !ask.is_empty() {
            if let Err((result, disposition)) =
                self.ensure_type(Side::Source, TransferType::Image).await
            {
                return Err(self.list_failure("TYPE", result, disposition));
            }
        }
        for window in ask.chunks(FACTS_WINDOW) {
            let mut lines = Vec::with_capacity(2 * window.len());
            for &i in window {
                let full = join(dir, &files[i].0);
                lines.push(format!("SIZE {full}"));
                lines.push(format!("MDTM {}", mdtm_argument(&full)));
            }
            let replies = self.pipelined(&lines).await?;
            let mut replies = replies.into_iter();
            for &i in window {
                let (Some(size), Some(mdtm)) = (replies.next(), replies.next()) else {
                    break;
                };
                let (path, e) = &files[i];
                let result = Ok(size);
                let disposition = self.classify(Side::Source, CommandKind::Size, &result);
                let size = size_answer(size_answer_of(result, disposition));
                let result = Ok(mdtm);
                let disposition = self.classify(Side::Source, CommandKind::Mdtm, &result);
                let modified = match &result {
                    Ok(reply) => mdtm_answer(reply, disposition),
                    Err(_) => Answer::Trouble,
                };
                let (got, reusable) = asked_facts(e.size, size, modified);
                match (&e.hint, reusable) {
                    (Some(hint), true) => hints.push((path.clone(), hint.clone())),
                    (None, true) => {}
                    (_, false) => self.note(
                        Side::Source,
                        &format!(
                            "{path:?}: SIZE or MDTM met a transient refusal; its facts are \
                             asked again at the next listing"
                        ),
                    ),
                }
                facts[i] = Some(got);
            }
        }
        Ok(files
            .into_iter()
            .zip(facts)
            .map(|((path, _), facts)| Seen {
                path,
                facts: facts.unwrap_or_default(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
