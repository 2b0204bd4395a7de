//! Which source directories a `move` of a tree removes once its files are moved (RULES.md
//! §2): every directory the walk listed below the root whose every member (file, link,
//! special file, refused name, at any depth) was moved, deepest first so that a parent
//! comes after its children. The root stays: the user named it, and it may be a directory
//! others put files into. Pure: the caller passes the walk's directories and the members.

use crate::MemberState;

/// The directories to remove (relative to the root), deepest first. `dirs`: the directories
/// the walk listed (`""` is the root); `members`: each member's name (relative to the root)
/// and state. A directory with no member under it (empty at the walk) is removed too: the
/// walk saw it empty, and a file put there since makes the RMD fail, which leaves it.
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
                .filter(|(name, _)| name.starts_with(&prefix))
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
    use MemberState as S;

    #[test]
    fn emptied_directories_deepest_first_never_the_root() {
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
                    ("d", S::Pending),
                ],
                vec!["a/b/c", "a/b", "a", "d", "e", "f"],
            ),
            (vec![("a/b/c/z", S::Cancelled)], vec!["d", "e", "f"]),
        ];
        for (members, want) in table {
            assert_eq!(emptied_dirs(dirs, &members), want, "{members:?}");
        }
    }
}
