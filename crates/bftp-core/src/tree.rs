//! The rules of a recursive job's walk that decide what a directory is worth (RULES.md §10):
//! whether a listing is whole ([`listing_cut`]), whether it could show hidden names
//! ([`HiddenNames`]), why a directory is refused ([`DirRefusal`], naming the setting that
//! would let it through), and which members a directory that could not be made takes with
//! it ([`blocked_by`]).
//!
//! A listing that may be missing names is never frozen as the directory: a silent gap is the
//! one thing bftp promises never to leave. A refused directory is a `refused` member named by
//! its path (its files are not frozen: nothing of a cut listing is taken as the directory's),
//! so the job ends `partial`, with the reason and the setting, and the rest of the tree goes
//! on. Pure.
//!
//! And which source directories a `move` of a tree removes once its files are moved (RULES.md
//! §2, [`emptied_dirs`]): every directory the walk listed below the root whose every member
//! (file, link, special file, refused name or directory, at any depth) was moved, deepest
//! first so that a parent comes after its children. The root stays: the user named it, and
//! it may be a directory others put files into.

use crate::MemberState;

/// Whether a listing could show names starting with a dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HiddenNames {
    /// MLSD (RFC 3659 hides nothing), or `LIST -a` whose output held the `.` entry that only
    /// `ls -a` shows: the server honoured `-a`.
    Shown,
    /// The server ignored `LIST -a` (no `.` entry): names starting with a dot, if any, were
    /// not listed. The directory's other files are copied; a `refused` member
    /// ([`hidden_member`]) says so in the ledger, so the job cannot read `succeeded`.
    NotShown,
}

/// The name of the `refused` member that stands for a directory's hidden names when they
/// could not be listed: `DIR/.*` (no listed name can be it: `.*` starts with a dot, and no
/// name starting with a dot was listed there).
pub fn hidden_member(dir: &str) -> String {
    if dir.is_empty() {
        ".*".to_owned()
    } else {
        format!("{dir}/.*")
    }
}

/// Its reason.
pub const HIDDEN_NOT_LISTED: &str = "refused: the source server ignored LIST -a, so names \
     starting with a dot in this directory, if any, were not listed and are not copied (give \
     the server MLSD, or let it honour -a: proFTPD's ListOptions without \"strict\")";

impl HiddenNames {
    /// The rule for a `LIST -a` listing: `-a` was honoured when the output holds the
    /// directory's own `.` entry (every `ls -a` prints it, an empty directory included).
    pub fn of_list_a(saw_dot_entry: bool) -> HiddenNames {
        if saw_dot_entry {
            HiddenNames::Shown
        } else {
            HiddenNames::NotShown
        }
    }
}

/// A listing whose final reply (or its count) says it was cut short by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingCut {
    /// The final reply's words that say so.
    pub said: String,
    /// The server setting that sets the cap, where the wording is a known server's.
    pub setting: Option<&'static str>,
}

/// Pure-FTPd's cap on the entries of one listing (`-L files:depth`, `LimitRecursion` in
/// pure-ftpd.conf; 10000:5 unless set).
pub const PURE_FTPD_LIST_CAP: &str = "Pure-FTPd's -L (LimitRecursion in pure-ftpd.conf)";

/// Whether a listing was cut: its final reply (`text`, every line) says `truncated`
/// (Pure-FTPd: `226 Output truncated to 100000 matches`), or counts more entries than the
/// `lines` that arrived (Pure-FTPd: `226 9 matches total`). `None`: nothing says it was cut.
pub fn listing_cut(text: &str, lines: usize) -> Option<ListingCut> {
    let lower = text.to_ascii_lowercase();
    let said = |line: &str| line.trim().to_owned();
    for (line, low) in text.lines().zip(lower.lines()) {
        if low.contains("truncated") {
            let setting = low.contains("matches").then_some(PURE_FTPD_LIST_CAP);
            return Some(ListingCut {
                said: said(line),
                setting,
            });
        }
        if let Some(count) = matches_total(low) {
            if count > lines {
                return Some(ListingCut {
                    said: format!("{} (but {lines} entries arrived)", said(line)),
                    setting: Some(PURE_FTPD_LIST_CAP),
                });
            }
        }
    }
    None
}

/// `N` of `NNN N matches total` (Pure-FTPd's count of a listing's entries).
fn matches_total(line: &str) -> Option<usize> {
    let rest = line.trim_end().strip_suffix("matches total")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    words.last()?.parse().ok()
}

/// Why a directory of a tree is refused: not walked, its files not frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirRefusal {
    /// The server cut the listing (see [`listing_cut`]).
    Cut(ListingCut),
    /// The listing is over `[ftp] max_listing_bytes`.
    TooLarge { limit: usize },
    /// The directory is deeper than `[ftp] max_tree_depth`.
    TooDeep { max: usize },
    /// Its files would take the job over `[ftp] max_tree_members`.
    TooManyMembers { files: usize, max: usize },
}

impl std::fmt::Display for DirRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirRefusal::Cut(cut) => {
                write!(
                    f,
                    "refused: the server cut this directory's listing short ({:?}), so its \
                     files are not known; raise the server's listing limit",
                    cut.said
                )?;
                if let Some(setting) = cut.setting {
                    write!(f, " ({setting})")?;
                }
                f.write_str(": not walked")
            }
            DirRefusal::TooLarge { limit } => write!(
                f,
                "refused: the listing is larger than {limit} bytes ([ftp] max_listing_bytes): \
                 not walked"
            ),
            DirRefusal::TooDeep { max } => write!(
                f,
                "refused: a directory more than {max} levels deep ([ftp] max_tree_depth): not \
                 walked"
            ),
            DirRefusal::TooManyMembers { files, max } => write!(
                f,
                "refused: its {files} entries would take the job over {max} members ([ftp] \
                 max_tree_members): not walked"
            ),
        }
    }
}

/// The directory among `failed` (destination directories that could not be made, relative
/// to the root) that member `name` (relative to the root) lies under, if any: the member
/// cannot be stored and fails with that directory's reason; every other member is copied.
pub fn blocked_by<'a>(name: &str, failed: &'a [String]) -> Option<&'a str> {
    failed
        .iter()
        .find(|d| {
            !d.is_empty()
                && name
                    .strip_prefix(d.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .map(String::as_str)
}

/// The directories to remove (relative to the root), deepest first. `dirs`: the directories
/// the walk listed (`""` is the root); `members`: each member's name (relative to the root)
/// and state. A directory with no member under it (empty at the walk) is removed too: the
/// walk saw it empty, and a file put there since makes the RMD fail, which leaves it. A
/// member named by the directory itself (a directory refused whole: a cut listing, a tree
/// limit) keeps it: its files were never listed, let alone moved.
pub fn emptied_dirs<'a>(
    dirs: impl IntoIterator<Item = &'a str>,
    members: &[(&str, MemberState)],
) -> Vec<String> {
    let mut out: Vec<String> = dirs
        .into_iter()
        .filter(|d| !d.is_empty())
        .filter(|d| {
            let prefix = format!("{d}/");
            members
                .iter()
                .filter(|(name, _)| name == d || name.starts_with(&prefix))
                .all(|(_, state)| *state == MemberState::Succeeded)
        })
        .map(str::to_owned)
        .collect();
    // Deepest first; among equals, a stable order.
    out.sort_by(|a, b| {
        let depth = |s: &str| s.matches('/').count();
        depth(b).cmp(&depth(a)).then_with(|| a.cmp(b))
    });
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_cut_when_its_final_reply_or_its_count_says_so() {
        let pure = Some(PURE_FTPD_LIST_CAP);
        // (final reply, lines that arrived, cut?, setting)
        let rows: &[(&str, usize, bool, Option<&str>)] = &[
            ("226 Transfer complete", 5, false, None),
            ("226 Directory send OK.", 0, false, None),
            // Pure-FTPd, LIST (multi-line) and MLSD, whole.
            ("226-Options: -a -l \n226 9 matches total", 9, false, None),
            ("226 9 matches total", 9, false, None),
            ("226 0 matches total", 0, false, None),
            // Pure-FTPd's cap.
            ("226 Output truncated to 5 matches", 5, true, pure),
            (
                "226-Options: -a -l \n226 Output truncated to 100000 matches",
                100_000,
                true,
                pure,
            ),
            // Another server's wording: cut, no known setting.
            ("226 Listing truncated", 3, true, None),
            // The count says more than arrived (a cut data connection).
            ("226 9 matches total", 4, true, pure),
            // A count that is not one.
            ("226 many matches total", 1, false, None),
        ];
        for (text, lines, cut, setting) in rows {
            let got = listing_cut(text, *lines);
            assert_eq!(got.is_some(), *cut, "{text:?} {lines}");
            if let Some(c) = got {
                assert_eq!(c.setting, *setting, "{text:?}");
                assert!(!c.said.is_empty());
            }
        }
    }

    #[test]
    fn hidden_names_are_shown_only_when_the_dot_entry_proves_it() {
        assert_eq!(HiddenNames::of_list_a(true), HiddenNames::Shown);
        assert_eq!(HiddenNames::of_list_a(false), HiddenNames::NotShown);
        assert_eq!(hidden_member(""), ".*");
        assert_eq!(hidden_member("a/b"), "a/b/.*");
        assert!(HIDDEN_NOT_LISTED.starts_with("refused: "));
    }

    #[test]
    fn a_refusal_names_its_setting() {
        let rows = [
            (
                DirRefusal::Cut(listing_cut("226 Output truncated to 5 matches", 5).unwrap()),
                "LimitRecursion",
            ),
            (
                DirRefusal::TooLarge { limit: 10 },
                "[ftp] max_listing_bytes",
            ),
            (DirRefusal::TooDeep { max: 64 }, "[ftp] max_tree_depth"),
            (
                DirRefusal::TooManyMembers { files: 3, max: 2 },
                "[ftp] max_tree_members",
            ),
        ];
        for (r, setting) in rows {
            let text = r.to_string();
            assert!(text.starts_with("refused: "), "{text}");
            assert!(text.contains(setting), "{text}");
        }
    }

    #[test]
    fn a_directory_not_made_blocks_only_the_members_under_it() {
        let failed = vec!["bad*dir".to_owned(), "ok/no".to_owned()];
        let rows = [
            ("top.txt", None),
            ("ok/f1.txt", None),
            ("bad*dir/x", Some("bad*dir")),
            ("bad*dir/deep/y", Some("bad*dir")),
            ("bad*dirx/z", None),
            ("bad*dir", None),
            ("ok/no/f", Some("ok/no")),
            ("ok/none/f", None),
        ];
        for (name, want) in rows {
            assert_eq!(blocked_by(name, &failed), want, "{name}");
        }
        // The root (`""`) not made is a failure of the whole job, not a block.
        assert_eq!(blocked_by("a", &[String::new()]), None);
    }

    #[test]
    fn emptied_directories_deepest_first_never_the_root() {
        use MemberState as S;
        let dirs = ["", "a", "a/b", "a/b/c", "d", "e", "f"];
        // (members, directories removed)
        type Row = (Vec<(&'static str, MemberState)>, Vec<&'static str>);
        let table: Vec<Row> = vec![
            (
                vec![
                    ("top.dat", S::Succeeded),
                    ("a/x", S::Succeeded),
                    ("a/b/y", S::Succeeded),
                    ("a/b/c/z", S::Succeeded),
                    ("d/w", S::Succeeded),
                ],
                vec!["a/b/c", "a/b", "a", "d", "e", "f"],
            ),
            // A file not moved keeps its directory and every parent; its siblings' go.
            (
                vec![
                    ("a/x", S::Succeeded),
                    ("a/b/y", S::FailedPermanent),
                    ("a/b/c/z", S::Succeeded),
                    ("d/w", S::Pending),
                    ("e/link", S::Refused),
                    ("f/u", S::Uncertain),
                ],
                vec!["a/b/c"],
            ),
            // The root's own files decide nothing about subdirectories.
            (
                vec![
                    ("top.dat", S::FailedRetriesExhausted),
                    ("a/x", S::Succeeded),
                ],
                vec!["a/b/c", "a/b", "a", "d", "e", "f"],
            ),
            // A name that only starts like a directory is not under it.
            (
                vec![
                    ("ab/x", S::Pending),
                    ("a/x", S::Succeeded),
                    ("dd/w", S::Pending),
                ],
                vec!["a/b/c", "a/b", "a", "d", "e", "f"],
            ),
            (vec![("a/b/c/z", S::Cancelled)], vec!["d", "e", "f"]),
            // A directory refused whole (its own member) stays, and so do its parents; a
            // directory whose hidden names were not listed (`DIR/.*`) too.
            (vec![("a/b", S::Refused)], vec!["a/b/c", "d", "e", "f"]),
            (
                vec![("d/.*", S::Refused)],
                vec!["a/b/c", "a/b", "a", "e", "f"],
            ),
        ];
        for (members, want) in table {
            assert_eq!(emptied_dirs(dirs, &members), want, "{members:?}");
        }
    }
}
