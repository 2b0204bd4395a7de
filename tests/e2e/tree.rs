//! Issue 16 (directory trees): one directory of a source tree listed with each entry's kind,
//! against the real servers: MLSD on proFTPD and Pure-FTPd, LIST in the `ls -l` format on
//! vsftpd (which has no MLSD), so that a walk can tell files, directories, symbolic links and
//! special files apart on each. Names with spaces and UTF-8, an empty directory and a link.

use bftp_ftp::{TreeKind, WalkMethod};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

use crate::engine::{block_on, image, open};

fn tree_on(kind: ServerKind) -> (FtpServer, FtpServer) {
    let src = FtpServer::start(kind, FtpOptions::default()).unwrap();
    src.put_file("top/a b.dat", b"12345").unwrap();
    src.put_file("top/\u{fc}ber.dat", b"x").unwrap();
    src.put_file("top/sub dir/deep.dat", b"deep").unwrap();
    src.mkdir("top/empty").unwrap();
    std::os::unix::fs::symlink("a b.dat", src.path("top/link")).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    (src, dst)
}

#[test]
fn each_server_lists_a_directory_with_the_kind_of_each_entry() {
    for kind in [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ] {
        let (src, dst) = tree_on(kind);
        let listing = block_on(async {
            let mut pair = open(&src, &dst, image()).await.unwrap();
            pair.list_dir("top").await.unwrap()
        });
        let want_method = if kind == ServerKind::Vsftpd {
            WalkMethod::List
        } else {
            WalkMethod::Mlsd
        };
        assert_eq!(listing.method, want_method, "{kind}");
        assert!(listing.rejected.is_empty(), "{kind}: {listing:#?}");
        let of = |name: &str| {
            listing
                .entries
                .iter()
                .find(|e| e.name == name)
                .unwrap_or_else(|| panic!("{kind}: no {name:?} in {listing:#?}"))
        };
        assert_eq!(of("a b.dat").kind, TreeKind::File, "{kind}");
        assert_eq!(of("a b.dat").size, Some(5), "{kind}");
        assert_eq!(of("\u{fc}ber.dat").kind, TreeKind::File, "{kind}");
        assert_eq!(of("sub dir").kind, TreeKind::Dir, "{kind}");
        assert_eq!(of("empty").kind, TreeKind::Dir, "{kind}");
        // Reported as a link, never as the file it points to. vsftpd's LIST names the target;
        // proFTPD's MLSD (`OS.unix=symlink`) and Pure-FTPd's (`OS.unix=slink:`) do not.
        let target = if kind == ServerKind::Vsftpd {
            "a b.dat"
        } else {
            ""
        };
        assert_eq!(
            of("link").kind,
            TreeKind::Symlink {
                target: target.into()
            },
            "{kind}"
        );
        assert_eq!(listing.entries.len(), 5, "{kind}: {listing:#?}");
    }
}

/// Every file and directory below `root` (relative paths; links left out: they are not
/// copied), with each file's contents.
fn tree_of(root: &std::path::Path) -> std::collections::BTreeMap<String, Option<Vec<u8>>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(format!("{rel}/"), None);
                todo.push(p);
            } else if t.is_file() {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// Issue 16: `bftp submit --recursive SRC_DIR DST_DIR` copies a tree of three levels (empty
/// directories, names with spaces and UTF-8, a symbolic link) between ordered pairs of real
/// servers (LIST on vsftpd, MLSD on the others): the destination tree equals the source's but
/// for the link, which is a `refused` member (reported, not followed); every file is a
/// member by its path relative to the root; each directory was frozen once (`listed` events).
#[test]
fn a_recursive_job_copies_a_whole_tree_between_each_pair() {
    use crate::scheduler::{submit, wait_final};
    use bftp_tests::daemon::Bftpd;
    let d = Bftpd::start().unwrap();
    for (s, t) in [
        (ServerKind::Vsftpd, ServerKind::Proftpd),
        (ServerKind::Proftpd, ServerKind::PureFtpd),
        (ServerKind::PureFtpd, ServerKind::Vsftpd),
    ] {
        let src = FtpServer::start(s, FtpOptions::default()).unwrap();
        let dst = FtpServer::start(t, FtpOptions::default()).unwrap();
        let files = [
            "a.dat",
            "b c.dat",
            "\u{fc}n\u{ef}code.dat",
            "one/x.dat",
            "one/two words/y.dat",
            "one/two words/three/z z.dat",
            "\u{e9}t\u{e9}/w.dat",
        ];
        for (i, f) in files.iter().enumerate() {
            let body = crate::scheduler::content(f, 100 + i * 997);
            src.put_file(&format!("tree/{f}"), &body).unwrap();
        }
        src.mkdir("tree/empty").unwrap();
        src.mkdir("tree/one/empty too").unwrap();
        std::os::unix::fs::symlink("a.dat", src.path("tree/link")).unwrap();
        dst.mkdir("in").unwrap();

        let env = [
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ];
        let o = d.bftp_env(
            None,
            &[
                "verify",
                "--recursive",
                &src.url("tree"),
                &dst.url("in/copy"),
            ],
            &env,
        );
        let out = bftp_tests::daemon::text(&o);
        assert!(
            out.contains("directory \"tree\" lists 7 entries (3 directories)"),
            "{s}: {out}"
        );
        let o = d.bftp_env(
            None,
            &[
                "transfer",
                "--recursive",
                &src.url("tree"),
                &dst.url("in/copy"),
            ],
            &env,
        );
        let out = bftp_tests::daemon::text(&o);
        assert_ne!(o.status.code(), Some(0), "{out}");
        assert!(out.contains("submit --recursive"), "{out}");

        let id = submit(&d, &src, &dst, "tree", "in/copy", &["--recursive"]);
        let v = wait_final(&d, id, std::time::Duration::from_secs(90));
        assert_eq!(v["recursive"], true, "{s} -> {t}: {v:#}");
        let members = v["members"].as_array().unwrap();
        let mut names: Vec<&str> = members
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        names.sort();
        let mut want: Vec<&str> = files.to_vec();
        want.push("link");
        want.sort();
        assert_eq!(names, want, "{s} -> {t}: {v:#}");
        for m in members {
            let want = if m["name"] == "link" {
                "refused"
            } else {
                "succeeded"
            };
            assert_eq!(m["state"], want, "{s} -> {t}: {m:#}");
        }
        assert_eq!(
            v["outcome"], "partial",
            "{s} -> {t}: the link is not copied: {v:#}"
        );
        let mut source_tree = tree_of(&src.path("tree"));
        source_tree.retain(|k, _| k != "link");
        assert_eq!(tree_of(&dst.path("in/copy")), source_tree, "{s} -> {t}");
        // Seven directories (the root, two empty), each frozen once.
        let listed = v["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["event"] == "listed")
            .count();
        assert_eq!(listed, 7, "{s} -> {t}: {v:#}");
    }
}
