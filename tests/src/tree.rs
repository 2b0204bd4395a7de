//! Recursive (tree) jobs: a checksum of a server's tree, the check of a finished tree copy
//! against its source, the `listed` events of a job, and the six ordered server pairs.

use crate::ServerKind;

/// A recursive checksum of a server's tree: every directory, every file's sha256
/// (`sha256sum`) and every symbolic link's target, by path relative to `root`.
#[derive(Debug, PartialEq, Eq, Default)]
pub struct TreeSums {
    pub dirs: std::collections::BTreeSet<String>,
    pub files: std::collections::BTreeMap<String, String>,
    pub links: std::collections::BTreeMap<String, String>,
}

pub fn tree_sums(root: &std::path::Path) -> TreeSums {
    let mut out = TreeSums::default();
    let mut names = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.dirs.insert(rel);
                todo.push(p);
            } else if t.is_symlink() {
                let to = std::fs::read_link(&p).unwrap();
                out.links.insert(rel, to.to_string_lossy().into_owned());
            } else {
                names.push(rel);
            }
        }
    }
    for chunk in names.chunks(500) {
        let o = std::process::Command::new("sha256sum")
            .arg("--")
            .args(chunk)
            .current_dir(root)
            .output()
            .unwrap();
        assert!(o.status.success(), "sha256sum in {}", root.display());
        for line in String::from_utf8(o.stdout).unwrap().lines() {
            let (sum, name) = line.split_once("  ").unwrap();
            out.files.insert(name.to_owned(), sum.to_owned());
        }
    }
    assert_eq!(out.files.len(), names.len(), "a name sha256sum escaped");
    out
}

/// Checks a finished recursive job against its source tree: the destination holds every
/// directory and file of the source, each with the source's sha256, and nothing else; each
/// symbolic link is a `refused` member saying it was not followed and is absent from the
/// destination; every file is a `succeeded` member named by its path relative to the root,
/// once. Returns the number of members.
pub fn check_tree_copy(
    what: &str,
    v: &serde_json::Value,
    src_root: &std::path::Path,
    dst_root: &std::path::Path,
) -> usize {
    let source = tree_sums(src_root);
    let dest = tree_sums(dst_root);
    assert!(dest.links.is_empty(), "{what}: {:?}", dest.links);
    assert_eq!(dest.dirs, source.dirs, "{what}: directories");
    if dest.files != source.files {
        let missing: Vec<_> = source
            .files
            .iter()
            .filter(|(k, s)| dest.files.get(*k) != Some(s))
            .map(|(k, _)| k)
            .take(10)
            .collect();
        let extra: Vec<_> = dest
            .files
            .keys()
            .filter(|k| !source.files.contains_key(*k))
            .take(10)
            .collect();
        panic!(
            "{what}: files differ ({} source, {} destination); missing or different {missing:?}, extra {extra:?}",
            source.files.len(),
            dest.files.len()
        );
    }
    let members = v["members"].as_array().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for m in members {
        let name = m["name"].as_str().unwrap();
        assert!(seen.insert(name), "{what}: {name:?} twice in the ledger");
        assert!(!name.starts_with('/'), "{what}: {name:?} is not relative");
        if let Some(target) = source.links.get(name) {
            assert_eq!(m["state"], "refused", "{what}: {m:#}");
            let detail = m["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("symbolic link") && detail.contains("not followed"),
                "{what}: the link {name:?} (to {target:?}) is not reported as not followed: {m:#}"
            );
        } else {
            assert!(source.files.contains_key(name), "{what}: member {name:?}");
            assert_eq!(m["state"], "succeeded", "{what}: {m:#}");
        }
    }
    let want: std::collections::BTreeSet<&str> = source
        .files
        .keys()
        .chain(source.links.keys())
        .map(String::as_str)
        .collect();
    assert_eq!(seen, want, "{what}: the ledger's members");
    members.len()
}

/// The `listed` history events of a job, in order: each directory frozen.
pub fn listed_events(v: &serde_json::Value) -> Vec<&serde_json::Value> {
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["event"] == "listed")
        .collect()
}

/// The six ordered pairs of the three servers.
pub const PAIRS: [(ServerKind, ServerKind); 6] = [
    (ServerKind::Vsftpd, ServerKind::Proftpd),
    (ServerKind::Vsftpd, ServerKind::PureFtpd),
    (ServerKind::Proftpd, ServerKind::Vsftpd),
    (ServerKind::Proftpd, ServerKind::PureFtpd),
    (ServerKind::PureFtpd, ServerKind::Vsftpd),
    (ServerKind::PureFtpd, ServerKind::Proftpd),
];
