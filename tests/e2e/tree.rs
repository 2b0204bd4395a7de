//! Issue 16 (directory trees): one directory of a source tree listed with each entry's kind,
//! against the real servers: MLSD on proFTPD and Pure-FTPd, LIST in the `ls -l` format on
//! vsftpd (which has no MLSD), so that a walk can tell files, directories, symbolic links and
//! special files apart on each. Names with spaces and UTF-8, an empty directory and a link.

use bftp_ftp::{TreeKind, WalkMethod};
use bftp_tests::engine::{image, open};
use bftp_tests::scenario::block_on;
use bftp_tests::tree::{check_tree_copy, listed_events, tree_sums, PAIRS};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

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

/// Issue 16: `bftp submit --recursive SRC_DIR DST_DIR` copies a tree of three levels (empty
/// directories, names with spaces and UTF-8, a symbolic link, a hard link) between every
/// ordered pair of the real servers (LIST on vsftpd, MLSD on the others), all six jobs at
/// once: the destination tree equals the source's by sha256 but for the link, which is a
/// `refused` member (reported, not followed); every file is a member by its path relative
/// to the root; each directory was frozen once (`listed` events). `slow::tree` does the same
/// with about 2,000 entries.
#[test]
fn a_recursive_job_copies_a_whole_tree_between_each_pair() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::jobs::{submit, wait_final};
    let d = Bftpd::start().unwrap();
    let files = [
        "a.dat",
        "b c.dat",
        "\u{fc}n\u{ef}code.dat",
        "one/x.dat",
        "one/two words/y.dat",
        "one/two words/three/z z.dat",
        "\u{e9}t\u{e9}/w.dat",
    ];
    let servers: Vec<FtpServer> = [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ]
    .into_iter()
    .map(|kind| {
        let s = FtpServer::start(kind, FtpOptions::default()).unwrap();
        for (i, f) in files.iter().enumerate() {
            let body = bftp_tests::files::content(f, 100 + i * 997);
            s.put_file(&format!("tree/{f}"), &body).unwrap();
        }
        s.mkdir("tree/empty").unwrap();
        s.mkdir("tree/one/empty too").unwrap();
        std::os::unix::fs::symlink("one", s.path("tree/link")).unwrap();
        std::fs::hard_link(s.path("tree/a.dat"), s.path("tree/one/hard.dat")).unwrap();
        s.mkdir("in").unwrap();
        s
    })
    .collect();
    let of = |k: ServerKind| servers.iter().find(|s| s.kind() == k).unwrap();
    let jobs: Vec<(ServerKind, ServerKind, u64)> = PAIRS
        .iter()
        .map(|&(s, t)| {
            let dst = format!("in/from {}", s.name());
            (
                s,
                t,
                submit(
                    &d,
                    of(s),
                    of(t),
                    "tree",
                    &dst,
                    // A data port the server finds taken (425, six pairs at once on three
                    // servers) is transient: tried again in a second, not in ten minutes.
                    &["--recursive", "--retry-first", "1s", "--retry-factor", "1"],
                ),
            )
        })
        .collect();
    for (s, t, id) in jobs {
        let v = wait_final(&d, id, std::time::Duration::from_secs(120));
        let what = format!("{s} -> {t}");
        assert_eq!(v["recursive"], true, "{what}: {v:#}");
        assert_eq!(
            v["outcome"], "partial",
            "{what}: the link is not copied: {v:#}"
        );
        let dst_root = of(t).path(&format!("in/from {}", s.name()));
        let members = check_tree_copy(&what, &v, &of(s).path("tree"), &dst_root);
        assert_eq!(members, files.len() + 2, "{what}: {v:#}");
        // Seven directories (the root, two empty), each frozen once.
        assert_eq!(listed_events(&v).len(), 7, "{what}: {v:#}");
    }
}

/// Issue 16: a directory's listing is frozen when it is read. The source's second top
/// directory cannot be listed at first (mode 000), so the first attempt freezes the root and
/// the first top directory, then fails at the second (a transient failure); then a file is
/// added to each frozen directory, and a directory with a file under the unreadable one and
/// under a subdirectory of the first (neither walked yet), and the second is made readable.
/// The retry copies the new directories' files, not the files added to frozen directories.
#[test]
fn a_file_added_to_a_frozen_directory_is_not_copied_a_directory_under_one_not_walked_is() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::jobs::{status, submit, wait_final};
    use std::os::unix::fs::PermissionsExt;
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for f in ["top.dat", "a/a.dat", "a/deep/d.dat", "b/b.dat"] {
        src.put_file(&format!("tree/{f}"), f.as_bytes()).unwrap();
    }
    let b = src.path("tree/b");
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o000)).unwrap();
    dst.mkdir("in").unwrap();
    let id = submit(
        &d,
        &src,
        &dst,
        "tree",
        "in/copy",
        &["--recursive", "--retry-first", "1s", "--retry-factor", "1"],
    );
    // Wait for the refused listing of b, with the root and a frozen.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(src.log_file()).unwrap_or_default();
        let refused = log
            .lines()
            .any(|l| l.contains("\"MLSD tree/b\" 5") || l.contains("\"MLSD tree/b\" 4"));
        let v = status(&d, id);
        if refused {
            let listed: Vec<&str> = listed_events(&v)
                .iter()
                .map(|h| h["detail"].as_str().unwrap())
                .collect();
            assert_eq!(listed.len(), 2, "{v:#}");
            assert!(listed[0].contains("directory \".\""), "{listed:?}");
            assert!(listed[1].contains("directory \"a\""), "{listed:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{log}\n{v:#}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    src.put_file("tree/late.dat", b"after the root was frozen")
        .unwrap();
    src.put_file("tree/a/late.dat", b"after a was frozen")
        .unwrap();
    src.put_file("tree/a/deep/new/n.dat", b"under a/deep, not walked yet")
        .unwrap();
    src.put_file("tree/b/new/m.dat", b"under b, not walked yet")
        .unwrap();
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v = wait_final(&d, id, std::time::Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    let mut names: Vec<&str> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "a/a.dat",
            "a/deep/d.dat",
            "a/deep/new/n.dat",
            "b/b.dat",
            "b/new/m.dat",
            "top.dat"
        ],
        "{v:#}"
    );
    assert!(!dst.path("in/copy/late.dat").exists());
    assert!(!dst.path("in/copy/a/late.dat").exists());
    assert_eq!(
        dst.read_file("in/copy/b/new/m.dat").unwrap(),
        b"under b, not walked yet"
    );
    // Each directory frozen once: root, a, b, a/deep, b/new, a/deep/new.
    assert_eq!(listed_events(&v).len(), 6, "{v:#}");
}

/// Issue 16, loops: proFTPD with `ShowSymlinks off` lists a symbolic link to a directory as
/// a directory (`type=dir`) with its target's `unique` fact, so a link back to an ancestor
/// would be walked forever (to the depth limit) and a second path to a directory copied
/// twice. The walk reports each as a `refused` member naming the directory it is, and walks
/// neither: only the real files are copied, each once.
#[test]
fn a_directory_reached_again_through_a_followed_link_is_reported_not_walked() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::jobs::{submit, wait_final};
    let src = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            proftpd_extra: "ShowSymlinks off\n".into(),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("tree/a/file.dat", b"once").unwrap();
    src.put_file("tree/b/other.dat", b"b").unwrap();
    std::os::unix::fs::symlink("..", src.path("tree/a/up")).unwrap();
    std::os::unix::fs::symlink("../a", src.path("tree/b/to a")).unwrap();
    dst.mkdir("in").unwrap();
    // The server really shows both links as directories.
    let listing = block_on(async {
        let mut pair = open(&src, &dst, image()).await.unwrap();
        pair.list_dir("tree/a").await.unwrap()
    });
    let up = listing.entries.iter().find(|e| e.name == "up").unwrap();
    assert_eq!(up.kind, TreeKind::Dir, "{listing:#?}");
    assert!(up.unique.is_some(), "{listing:#?}");

    let d = Bftpd::start().unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/copy", &["--recursive"]);
    let v = wait_final(&d, id, std::time::Duration::from_secs(60));
    let mut got: Vec<(String, String, String)> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["state"].as_str().unwrap().to_owned(),
                m["detail"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    got.sort();
    let names: Vec<(&str, &str)> = got
        .iter()
        .map(|(n, s, _)| (n.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("a/file.dat", "succeeded"),
            ("a/up", "refused"),
            ("b/other.dat", "succeeded"),
            ("b/to a", "refused"),
        ],
        "{v:#}"
    );
    assert!(
        got[1].2.contains("the directory \".\" again"),
        "{}",
        got[1].2
    );
    assert!(
        got[3].2.contains("the directory \"a\" again"),
        "{}",
        got[3].2
    );
    assert_eq!(v["outcome"], "partial", "{v:#}");
    // Three directories walked: the root, a, b.
    assert_eq!(listed_events(&v).len(), 3, "{v:#}");
    assert_eq!(dst.read_file("in/copy/a/file.dat").unwrap(), b"once");
    assert!(!dst.path("in/copy/b/to a").exists());
}

/// A small tree for the foreground commands: files at two levels, a name with a space, an
/// empty directory, and a symbolic link.
fn small_tree(s: &FtpServer) {
    for (f, body) in [
        ("tree/a.dat", &b"alpha"[..]),
        ("tree/b c.dat", b"with a space"),
        ("tree/sub/x.dat", b"below"),
        ("tree/sub/deeper/y y.dat", b"two below"),
    ] {
        s.put_file(f, body).unwrap();
    }
    s.mkdir("tree/empty").unwrap();
    std::os::unix::fs::symlink("x.dat", s.path("tree/sub/link")).unwrap();
}

/// Issue 16: `bftp transfer --recursive SRC_DIR DST_DIR` walks the tree in the foreground by
/// the queued job's rules, on vsftpd (LIST) to proFTPD and on Pure-FTPd (MLSD) to vsftpd:
/// the destination tree equals the source's by sha256 (the empty directory made, the name
/// with a space copied) but for the link, which is a `SKIP ... refused` line saying it was
/// not followed; a line per file; exit 8 because one entry was refused.
#[test]
fn transfer_recursive_copies_a_tree_and_reports_the_link_not_followed() {
    use bftp_tests::daemon::{text, Bftpd};
    let d = Bftpd::start().unwrap();
    for (s, t) in [
        (ServerKind::Vsftpd, ServerKind::Proftpd),
        (ServerKind::PureFtpd, ServerKind::Vsftpd),
    ] {
        let src = FtpServer::start(s, FtpOptions::default()).unwrap();
        let dst = FtpServer::start(t, FtpOptions::default()).unwrap();
        small_tree(&src);
        dst.mkdir("in").unwrap();
        let o = d.bftp_env(
            None,
            &[
                "transfer",
                "--recursive",
                &src.url("tree"),
                &dst.url("in/copy"),
            ],
            &[
                ("BFTP_SOURCE_PASSWORD", src.password()),
                ("BFTP_DEST_PASSWORD", dst.password()),
            ],
        );
        let out = text(&o);
        let what = format!("{s} -> {t}");
        assert_eq!(o.status.code(), Some(8), "{what}: {out}");
        let source = tree_sums(&src.path("tree"));
        let dest = tree_sums(&dst.path("in/copy"));
        assert_eq!(dest.dirs, source.dirs, "{what}: {out}");
        assert_eq!(dest.files, source.files, "{what}: {out}");
        assert!(dest.links.is_empty(), "{what}: {dest:?}");
        let stdout = String::from_utf8_lossy(&o.stdout);
        let skip: Vec<&str> = stdout.lines().filter(|l| l.starts_with("SKIP")).collect();
        assert_eq!(skip.len(), 1, "{what}: {out}");
        assert!(
            skip[0].contains("sub/link  refused")
                && skip[0].contains("symbolic link")
                && skip[0].contains("not followed"),
            "{what}: {out}"
        );
        for f in ["a.dat", "b c.dat", "sub/x.dat", "sub/deeper/y y.dat"] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with("ok    ") && l.contains(&format!("  {f}  succeeded"))),
                "{what}: no line for {f}: {out}"
            );
        }
        assert!(
            stdout.contains("5 files: 4 succeeded, 0 failed, 1 refused"),
            "{what}: {out}"
        );
    }
    // Without the link, the same tree copies with exit 0.
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    small_tree(&src);
    std::fs::remove_file(src.path("tree/sub/link")).unwrap();
    let o = d.bftp_env(
        None,
        &["transfer", "-r", &src.url("tree"), &dst.url("copy")],
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        tree_sums(&dst.path("copy")),
        tree_sums(&src.path("tree")),
        "{}",
        text(&o)
    );
}

/// Issue 16: `bftp verify --recursive` walks the whole source tree (not only its top
/// directory) and says what a copy would make, copy and refuse, and which proof the pair
/// allows.
#[test]
fn verify_recursive_walks_the_whole_tree_and_names_what_it_would_refuse() {
    use bftp_tests::daemon::{text, Bftpd};
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    small_tree(&src);
    let o = d.bftp_env(
        None,
        &[
            "--json",
            "verify",
            "--recursive",
            &src.url("tree"),
            &dst.url(""),
        ],
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let check = |name: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name:?} check: {v:#}"))
            .clone()
    };
    let tree = check("source tree");
    let detail = tree["detail"].as_str().unwrap();
    // The root, empty, sub, sub/deeper; four files (5 + 12 + 5 + 9 bytes); the link.
    assert!(
        detail.starts_with(
            "4 directories (the root included) and 4 files (31 bytes listed) would be copied; \
             1 entry refused (reported, not copied): \"sub/link\": a symbolic link"
        ),
        "{detail}"
    );
    assert!(detail.contains("not followed"), "{detail}");
    assert_eq!(tree["ok"], true, "{v:#}");
    assert!(
        check("proof")["detail"].as_str().unwrap().len() > 3,
        "{v:#}"
    );
    // A source that is not a directory fails the walk.
    let o = d.bftp_env(
        None,
        &["verify", "-r", &src.url("tree/nope"), &dst.url("")],
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
}

/// The MKD commands proFTPD's ExtendedLog holds (any reply), by path.
fn mkds(server: &FtpServer) -> Vec<String> {
    let log = std::fs::read_to_string(server.log_file()).unwrap_or_default();
    log.lines()
        .filter_map(|l| {
            l.split_once("\"MKD ")?
                .1
                .rsplit_once("\" ")
                .map(|(p, _)| p.to_owned())
        })
        .collect()
}

/// Issue 16: a recursive job killed (kill -9) during its copies, after it made its
/// destination directories, does not make them again when it resumes: the directories made
/// (or found existing) are remembered with the walk. The destination proFTPD's command log
/// holds each directory's MKD once over the kill and the restart, and the tree arrives whole.
#[test]
fn a_resumed_recursive_job_does_not_make_its_directories_again() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::files::content;
    use bftp_tests::jobs::{submit, wait_final};
    use bftp_tests::Direction;
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    const DIRS: usize = 30;
    const FILES: usize = 12;
    for d in 0..DIRS {
        for f in 0..FILES {
            let name = format!("tree/d{d}/f{f}.dat");
            src.put_file(&name, &content(&name, 500 + f)).unwrap();
        }
    }
    src.mkdir("tree/d0/empty").unwrap();
    dst.mkdir("in").unwrap();
    let arrivals = || {
        dst.xferlog_entries()
            .unwrap_or_default()
            .iter()
            .filter(|e| e.direction == Direction::Incoming && e.complete)
            .count()
    };
    let mut d = Bftpd::start().unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/copy", &["--recursive"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while arrivals() == 0 {
        assert!(std::time::Instant::now() < deadline, "no file arrived");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    d.kill9();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let at_kill = arrivals();
    assert!(
        at_kill < DIRS * FILES,
        "the job ended before the kill ({at_kill} files): nothing left to resume"
    );
    let before = mkds(&dst);
    // The root, the 30 directories and the empty one, each once.
    assert_eq!(before.len(), DIRS + 2, "{before:#?}");
    d.launch().unwrap();
    let v = wait_final(&d, id, std::time::Duration::from_secs(120));
    assert_eq!(v["outcome"], "succeeded", "{}", v["counts"]);
    let after = mkds(&dst);
    assert_eq!(
        after,
        before,
        "the resumed job made its directories again ({} MKDs after the restart)",
        after.len() - before.len()
    );
    check_tree_copy("resumed", &v, &src.path("tree"), &dst.path("in/copy"));
    eprintln!(
        "{} directories: {} MKDs before the kill ({at_kill} of {} files copied), {} after",
        DIRS + 2,
        before.len(),
        DIRS * FILES,
        after.len() - before.len()
    );
}

/// Issue 27 item 11: names Pure-FTPd can never store as asked end their member instead of
/// being retried until the attempts run out. A backslash is refused with 553 (permanent at
/// once); a trailing space is stored as `_`, so after its 226 the destination has no file
/// under the name: the same failure of the same name on a second attempt ends the member,
/// naming the trait of the name, while the rest of the tree is copied.
#[test]
fn a_name_the_destination_never_stores_as_asked_ends_its_member() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::jobs::{submit, wait_final};
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for (f, body) in [
        ("tree/back\\slash.dat", &b"backslash"[..]),
        ("tree/trail ", b"trailing space"),
        ("tree/ok.dat", b"fine"),
        ("tree/sub/deep.dat", b"below"),
    ] {
        src.put_file(f, body).unwrap();
    }
    let id = submit(
        &d,
        &src,
        &dst,
        "tree",
        "copy",
        &[
            "--recursive",
            "--retry-first",
            "1s",
            "--retry-factor",
            "1",
            "--max-attempts",
            "8",
        ],
    );
    let v = wait_final(&d, id, std::time::Duration::from_secs(90));
    let member = |name: &str| {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no member {name:?}: {v:#}"))
            .clone()
    };
    assert_eq!(v["outcome"], "partial", "{v:#}");
    for ok in ["ok.dat", "sub/deep.dat"] {
        assert_eq!(member(ok)["state"], "succeeded", "{v:#}");
    }
    let back = member("back\\slash.dat");
    assert_eq!(back["state"], "failed_permanent", "{v:#}");
    assert_eq!(back["attempts"], 1, "a 553 is not retried: {v:#}");
    assert_eq!(back["dest_reply"]["code"], 553, "{v:#}");
    let trail = member("trail ");
    assert_eq!(trail["state"], "failed_permanent", "{v:#}");
    assert_eq!(trail["attempts"], 2, "ended at its second sighting: {v:#}");
    let detail = trail["detail"].as_str().unwrap();
    assert!(
        detail.contains("no file under that name")
            && detail.contains("on 2 attempts")
            && detail.contains("Pure-FTPd stores it as `_`"),
        "{detail}"
    );
    assert_eq!(v["attempts"], 2, "{v:#}");
    // What Pure-FTPd made of the name: under its own name, left alone (not provably ours).
    assert_eq!(dst.read_file("copy/trail_").unwrap(), b"trailing space");
    assert_eq!(dst.read_file("copy/ok.dat").unwrap(), b"fine");
}

/// Issue 27 item 13: proFTPD's MLSD lists a FIFO as `type=file` (its `UNIX.mode` has no type
/// bits), and the copy then failed with "not a regular file". The walk asks LIST about a
/// directory's empty "files" and reports the FIFO as a special file, refused with its
/// reason like every special file; an empty plain file is still copied.
#[test]
fn a_fifo_proftpd_lists_as_a_file_is_reported_as_a_special_file() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::jobs::{submit, wait_final};
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    src.put_file("tree/a.dat", b"alpha").unwrap();
    src.put_file("tree/sub/empty.dat", b"").unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(src.path("tree/sub/pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let id = submit(&d, &src, &dst, "tree", "copy", &["--recursive"]);
    let v = wait_final(&d, id, std::time::Duration::from_secs(60));
    let state = |name: &str| {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no member {name:?}: {v:#}"))
            .clone()
    };
    assert_eq!(v["outcome"], "partial", "{v:#}");
    assert_eq!(state("a.dat")["state"], "succeeded", "{v:#}");
    assert_eq!(state("sub/empty.dat")["state"], "succeeded", "{v:#}");
    let pipe = state("sub/pipe");
    assert_eq!(pipe["state"], "refused", "{v:#}");
    assert!(
        pipe["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not a plain file or directory (type p)")),
        "{v:#}"
    );
    assert_eq!(pipe["attempts"], 0, "never sent in a RETR: {v:#}");
    assert_eq!(dst.read_file("copy/sub/empty.dat").unwrap(), b"");
    assert!(!dst.path("copy/sub/pipe").exists());
}

/// Issue 27 item 13: a `move` of a tree removes the source directories it emptied, deepest
/// first (RMD), and keeps the root the user named and any directory holding something not
/// moved (here a symbolic link, reported and never moved).
#[test]
fn a_moved_tree_leaves_no_emptied_source_directory_behind() {
    use bftp_tests::daemon::Bftpd;
    use bftp_tests::jobs::{submit, wait_final};
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for (f, body) in [
        ("tree/a.dat", &b"alpha"[..]),
        ("tree/sub/x.dat", b"below"),
        ("tree/sub/deeper/y.dat", b"two below"),
        ("tree/keep/z.dat", b"beside a link"),
    ] {
        src.put_file(f, body).unwrap();
    }
    src.mkdir("tree/empty").unwrap();
    std::os::unix::fs::symlink("z.dat", src.path("tree/keep/link")).unwrap();
    let id = submit(&d, &src, &dst, "tree", "copy", &["--recursive", "--move"]);
    let v = wait_final(&d, id, std::time::Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "the link is refused: {v:#}");
    assert_eq!(
        dst.read_file("copy/sub/deeper/y.dat").unwrap(),
        b"two below"
    );
    for gone in ["tree/a.dat", "tree/sub", "tree/empty", "tree/keep/z.dat"] {
        assert!(!src.path(gone).exists(), "{gone} is still there: {v:#}");
    }
    assert!(src.path("tree").is_dir(), "the root stays");
    assert!(src.path("tree/keep/link").is_symlink(), "the link stays");
    let log = std::fs::read_to_string(src.log_file()).unwrap();
    let at = |needle: &str| {
        log.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in the source's log:\n{log}"))
    };
    assert!(
        at("\"RMD tree/sub/deeper\" 250") < at("\"RMD tree/sub\" 250"),
        "children before parents:\n{log}"
    );
    assert!(!log.contains("RMD tree/keep"), "{log}");
    assert!(!log.contains("\"RMD tree\""), "{log}");
}
