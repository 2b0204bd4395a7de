//! A recursive job's walk of its source tree, and the destination directories it needs.
//!
//! The walk lists one directory at a time from the durable frontier (`JobStore::walk`), parents
//! before children, and freezes each listing in one store transaction with its files as
//! members (`JobStore::record_directory`) before the next directory is listed; a crash resumes
//! at the first directory not frozen, and a frozen directory is never listed again. A file
//! added to a frozen directory later is not the job's; a directory added under one not yet
//! listed is. Symbolic links and special files become `refused` members (reported, never
//! followed or copied); so do listing lines refused by the name checks, and directories
//! deeper than [`MAX_DEPTH`] (not walked). The whole walk ends before any file moves; then
//! every listed directory is made on the destination, parents first, an existing one
//! counting as made.

use std::sync::Arc;

use bftp_core::{JobSpec, Timestamp};
use bftp_ftp::{DirListing, Pair, TreeKind};
use bftp_store::{JobId, JobStore, NewMember, StoreError, Walk};

use crate::ftp::join_path;
use crate::scheduler::AttemptEnd;

/// The deepest directory a walk lists, below the root.
pub const MAX_DEPTH: usize = 64;

/// What one listed directory contributes: its members and its subdirectories (relative to
/// the job's root).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sorted {
    pub members: Vec<NewMember>,
    pub subdirs: Vec<String>,
}

fn refused(name: String, why: String) -> NewMember {
    NewMember {
        name,
        size: None,
        modified: None,
        refused: Some(why),
    }
}

/// The members and subdirectories of directory `dir` (relative to the root) from its
/// listing, in name order. Pure.
pub fn sort(dir: &str, listing: &DirListing) -> Sorted {
    let mut out = Sorted::default();
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
            TreeKind::Dir if depth(&rel) > MAX_DEPTH => out.members.push(refused(
                rel,
                format!("refused: a directory more than {MAX_DEPTH} levels deep: not walked"),
            )),
            TreeKind::Dir => out.subdirs.push(rel),
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
    store: &Arc<dyn JobStore>,
    id: JobId,
    pair: &mut Pair,
    spec: &JobSpec,
    now: impl Fn() -> Timestamp,
    keep: impl Fn(&bftp_ftp::Transcript),
) -> Result<Walk, AttemptEnd> {
    let root = spec.source_root().to_owned();
    let mut walk = blocking(store, move |s| s.walk(id)).await?;
    while let Some(dir) = walk.frontier.first().cloned() {
        let path = if dir.is_empty() {
            root.clone()
        } else {
            join_path(&root, &dir)
        };
        let listing = pair.list_dir(&path).await.map_err(|e| {
            let reason = format!("listing the source directory {path:?}: {e}");
            if e.disposition().is_permanent() && dir.is_empty() {
                AttemptEnd::JobPermanent { reason }
            } else {
                AttemptEnd::Transient { reason }
            }
        })?;
        keep(&listing.transcript);
        let sorted = sort(&dir, &listing);
        let at = now();
        walk = blocking(store, move |s| {
            s.record_directory(id, &dir, sorted.members, sorted.subdirs, at)
        })
        .await?;
    }
    Ok(walk)
}

/// Makes the destination root and every listed directory, parents first (the walk's order).
pub async fn make_dirs(pair: &mut Pair, spec: &JobSpec, walk: &Walk) -> Result<(), AttemptEnd> {
    let root = spec
        .destination
        .as_ref()
        .map(|d| d.path.trim_end_matches('/').to_owned())
        .unwrap_or_default();
    let mut paths = Vec::new();
    if !root.is_empty() && root != "/" {
        paths.push(root.clone());
    }
    for dir in walk.listed.iter().filter(|d| !d.is_empty()) {
        paths.push(join_path(&root, dir));
    }
    for p in paths {
        if let Err(e) = pair.make_dir(&p).await {
            let reason = format!("making the destination directory {p:?}: {e}");
            return Err(if e.disposition().is_permanent() {
                AttemptEnd::JobPermanent { reason }
            } else {
                AttemptEnd::Transient { reason }
            });
        }
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    store: &Arc<dyn JobStore>,
    f: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, AttemptEnd> {
    let store = store.clone();
    match tokio::task::spawn_blocking(move || f(&*store)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(AttemptEnd::Transient {
            reason: format!("the daemon could not record the walk: {e}"),
        }),
        Err(e) => Err(AttemptEnd::Transient {
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
            transcript: Default::default(),
        };
        let s = sort("top", &listing);
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
        let deep = "d/".repeat(MAX_DEPTH - 1) + "d";
        let s = sort(&deep, &listing);
        assert!(s.subdirs.is_empty());
        assert!(s.members.iter().any(
            |m| m.name.ends_with("/sub") && m.refused.as_ref().unwrap().contains("levels deep")
        ));
        assert_eq!(sort("", &listing).subdirs, ["sub"]);
    }
}
