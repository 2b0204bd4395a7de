//! Issue 27 (items 7 to 10): what independent testing of trees found. A tree's listing never
//! hides a name silently (vsftpd's dot-files: `LIST -a`, and a server that ignores `-a` is
//! a `refused` member `DIR/.*`); a listing the server cut short, one over `[ftp]
//! max_listing_bytes`, a directory too deep or one that would pass `max_tree_members` is
//! refused by name, with the setting, and the rest of the tree is copied in the same attempt;
//! a directory the destination will not make fails only the files under it.

use std::time::Duration;

use bftp_ftp::{HiddenNames, TreeKind, WalkMethod};
use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::engine::{image, open};
use bftp_tests::jobs::{config_plus, submit, wait_final};
use bftp_tests::scenario::block_on;
use bftp_tests::tree::check_tree_copy;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// A directory with hidden names and names that look like options of `ls`.
fn hidden_tree(s: &FtpServer) {
    s.put_file("top/.hidden", b"hidden").unwrap();
    s.put_file("top/.dotdir/inside.dat", b"inside").unwrap();
    s.put_file("top/-a", b"dash a").unwrap();
    s.put_file("top/-la x", b"dash la").unwrap();
    s.put_file("top/plain.dat", b"plain").unwrap();
}

/// Item 7: each server shows a tree's hidden names: MLSD on proFTPD and Pure-FTPd, `LIST -a`
/// on vsftpd (whose plain LIST hides them: `force_dot_files` is off by default), with the
/// `.` entry as the proof that `-a` was honoured; `-a` and `-la x` are names, not options;
/// a directory named `-d` is listed as a directory. A proFTPD that neither offers MLSD
/// (`FactsAdvertise off`) nor honours `-a` (`ListOptions "" strict`) is listed with plain
/// LIST, and the listing says hidden names were not shown.
#[test]
fn each_server_lists_hidden_names_and_a_server_that_cannot_is_named() {
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let strict = FtpOptions {
        proftpd_extra: "FactsAdvertise off\nListOptions \"\" strict\n".into(),
        ..FtpOptions::default()
    };
    // proFTPD listed with LIST: it honours -a, and takes `LIST -a -d` for two options (and
    // drops the connection), so a path starting with `-` must go as `./-d`.
    let list_only = FtpOptions {
        proftpd_extra: "FactsAdvertise off\n".into(),
        ..FtpOptions::default()
    };
    for (kind, opts) in [
        (ServerKind::Vsftpd, FtpOptions::default()),
        (ServerKind::Proftpd, FtpOptions::default()),
        (ServerKind::PureFtpd, FtpOptions::default()),
        (ServerKind::Proftpd, list_only),
        (ServerKind::Proftpd, strict),
    ] {
        let shows = !opts.proftpd_extra.contains("strict");
        let method = if kind == ServerKind::Vsftpd || opts.proftpd_extra.contains("Facts") {
            WalkMethod::List
        } else {
            WalkMethod::Mlsd
        };
        let src = FtpServer::start(kind, opts).unwrap();
        hidden_tree(&src);
        src.put_file("-d/in.dat", b"in").unwrap();
        let (top, dashed) = block_on(async {
            let mut pair = open(&src, &dst, image()).await.unwrap();
            let top = pair.list_dir("top").await.unwrap();
            let dashed = pair.list_dir("-d").await.unwrap();
            (top, dashed)
        });
        let what = format!("{kind} ({method:?}, hidden names shown: {shows})");
        assert!(top.rejected.is_empty(), "{what}: {top:#?}");
        assert_eq!(top.method, method, "{what}");
        let mut names: Vec<(&str, &TreeKind)> = top
            .entries
            .iter()
            .map(|e| (e.name.as_str(), &e.kind))
            .collect();
        names.sort_by_key(|(n, _)| *n);
        let mut want = vec![
            ("-a", &TreeKind::File),
            ("-la x", &TreeKind::File),
            ("plain.dat", &TreeKind::File),
        ];
        if shows {
            want.extend([(".dotdir", &TreeKind::Dir), (".hidden", &TreeKind::File)]);
            want.sort_by_key(|(n, _)| *n);
            assert_eq!(top.hidden, HiddenNames::Shown, "{what}");
        } else {
            assert_eq!(top.hidden, HiddenNames::NotShown, "{what}");
        }
        assert_eq!(names, want, "{what}");
        let inside: Vec<&str> = dashed.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(inside, ["in.dat"], "{what}: {dashed:#?}");
    }
}

/// Item 7: a recursive job from vsftpd copies the dot-files and dot-directories (it lost
/// every one before: vsftpd's LIST hides them unless asked with `-a`), and `verify -r`
/// counts them. From a proFTPD that cannot be asked, the visible files are copied and a
/// `refused` member `.*` says that the directory's hidden names were not listed: the job is
/// `partial`, not `succeeded`.
#[test]
fn a_tree_from_vsftpd_keeps_its_hidden_files_and_a_server_that_hides_them_is_named() {
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    hidden_tree(&src);
    dst.mkdir("in").unwrap();
    let env = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let o = d.bftp_env(
        None,
        &["--json", "verify", "-r", &src.url("top"), &dst.url("in")],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let tree = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "source tree")
        .unwrap()
        .clone();
    let detail = tree["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("2 directories (the root included) and 5 files"),
        "{detail}"
    );
    let id = submit(&d, &src, &dst, "top", "in/top", &["--recursive"]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    let members = check_tree_copy(
        "vsftpd -> proftpd",
        &v,
        &src.path("top"),
        &dst.path("in/top"),
    );
    assert_eq!(members, 5, "{v:#}");

    let strict = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            proftpd_extra: "FactsAdvertise off\nListOptions \"\" strict\n".into(),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    hidden_tree(&strict);
    let id = submit(&d, &strict, &dst, "top", "in/strict", &["--recursive"]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    let mut names = bftp_tests::jobs::member_names(&v);
    names.sort();
    assert_eq!(names, ["-a", "-la x", ".*", "plain.dat"], "{v:#}");
    let hidden = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == ".*")
        .unwrap();
    assert_eq!(hidden["state"], "refused", "{hidden:#}");
    assert!(
        hidden["detail"].as_str().unwrap().contains("LIST -a"),
        "{hidden:#}"
    );
    // `bftp transfer -r` and `verify -r` say it too.
    let env = [
        ("BFTP_SOURCE_PASSWORD", strict.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let (from, to) = (strict.url("top"), dst.url("in/again"));
    let o = d.bftp_env(None, &["transfer", "-r", &from, &to], &env);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(
        text(&o).contains("3 succeeded, 0 failed, 1 refused"),
        "{}",
        text(&o)
    );
    let o = d.bftp_env(None, &["verify", "-r", &from, &to], &env);
    assert!(
        text(&o).contains("\".*\": the source server ignored LIST -a"),
        "{}",
        text(&o)
    );
}

/// Item 8: Pure-FTPd caps a listing (`-L 7:5` here; its stock cap is 10000) and says so in
/// its final reply (`226 Output truncated to 7 matches`). The directory over the cap is a
/// `refused` member naming the server's setting, its files are not frozen, and everything
/// else is copied in the same attempt: the job ends `partial`, after one attempt. A wildcard
/// job on that directory fails for good, saying the listing was cut.
#[test]
fn a_listing_the_server_cut_short_refuses_its_directory_and_the_rest_is_copied() {
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(
        ServerKind::PureFtpd,
        FtpOptions {
            pure_ftpd_args: vec!["-L".into(), "7:5".into()],
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    src.put_file("tree/top.txt", b"top").unwrap();
    src.put_file("tree/ok/f1.txt", b"f1").unwrap();
    for i in 0..8 {
        src.put_file(&format!("tree/big/f{i}.dat"), b"big").unwrap();
    }
    dst.mkdir("in").unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/tree", &["--recursive"]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    assert_eq!(v["attempts"], 1, "{v:#}");
    let state = |name: &str| {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no member {name:?}: {v:#}"))
            .clone()
    };
    assert_eq!(state("top.txt")["state"], "succeeded", "{v:#}");
    assert_eq!(state("ok/f1.txt")["state"], "succeeded", "{v:#}");
    let big = state("big");
    assert_eq!(big["state"], "refused", "{v:#}");
    let why = big["detail"].as_str().unwrap();
    assert!(why.contains("Output truncated to 7 matches"), "{why}");
    assert!(why.contains("LimitRecursion"), "{why}");
    assert_eq!(v["members"].as_array().unwrap().len(), 3, "{v:#}");
    assert_eq!(dst.read_file("in/tree/ok/f1.txt").unwrap(), b"f1");

    let id = submit(&d, &src, &dst, "tree/big/*.dat", "in", &[]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "failed", "{v:#}");
    assert_eq!(v["attempts"], 1, "{v:#}");
    let said = v.to_string();
    assert!(said.contains("cut the listing short"), "{v:#}");
}

/// Item 9: proFTPD refuses `MKD bad*dir` (`550 ... Invalid directory name`). Only the files
/// under it fail, for good, naming the reply; `top.txt` and `ok/f1.txt` are copied, in one
/// attempt. `bftp transfer --recursive` does the same.
#[test]
fn a_directory_the_destination_refuses_fails_only_the_files_under_it() {
    let d = Bftpd::start().unwrap();
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    for f in ["top.txt", "ok/f1.txt", "bad*dir/x.txt", "bad*dir/sub/y.txt"] {
        src.put_file(&format!("tree/{f}"), f.as_bytes()).unwrap();
    }
    dst.mkdir("in").unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/tree", &["--recursive"]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    assert_eq!(v["attempts"], 1, "{v:#}");
    for m in v["members"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        if name.starts_with("bad*dir/") {
            assert_eq!(m["state"], "failed_permanent", "{m:#}");
            let why = m["detail"].as_str().unwrap();
            assert!(why.contains("550"), "{why}");
            assert!(why.contains("Invalid directory name"), "{why}");
        } else {
            assert_eq!(m["state"], "succeeded", "{m:#}");
        }
    }
    assert_eq!(v["members"].as_array().unwrap().len(), 4, "{v:#}");
    assert_eq!(dst.read_file("in/tree/top.txt").unwrap(), b"top.txt");
    assert_eq!(dst.read_file("in/tree/ok/f1.txt").unwrap(), b"ok/f1.txt");

    let o = d.bftp_env(
        None,
        &[
            "transfer",
            "--recursive",
            &src.url("tree"),
            &dst.url("in/again"),
        ],
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(8), "{out}");
    assert!(out.contains("4 files: 2 succeeded, 2 failed"), "{out}");
    assert_eq!(dst.read_file("in/again/ok/f1.txt").unwrap(), b"ok/f1.txt");
}

/// Item 10: the tree limits are settings, and each refuses a directory, named with its
/// setting, not the job: a listing over `max_listing_bytes` (it failed the whole job, as a
/// transient failure retried for days, `small.txt` with it), a directory deeper than
/// `max_tree_depth`, and one whose entries would take the job over `max_tree_members`. The
/// rest is copied in one attempt; the job ends `partial`.
#[test]
fn each_tree_limit_is_a_setting_and_refuses_a_directory_not_the_job() {
    let d = Bftpd::start_with(config_plus(
        "[ftp]\nmax_listing_bytes = 2000\nmax_tree_depth = 2\nmax_tree_members = 6\n",
    ))
    .unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("tree/small.txt", b"small").unwrap();
    // Over 2,000 bytes of MLSD (about 200 bytes a line on proFTPD).
    for i in 0..20 {
        src.put_file(&format!("tree/big/f{i:02}.dat"), b"b")
            .unwrap();
    }
    src.put_file("tree/a/b/c/deep.txt", b"deep").unwrap();
    src.put_file("tree/a/b/shallow.txt", b"shallow").unwrap();
    // Six files: with the two members before them (`small.txt`, `big`), more than 6.
    for i in 0..6 {
        src.put_file(&format!("tree/many/m{i}.dat"), b"m").unwrap();
    }
    dst.mkdir("in").unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/tree", &["--recursive"]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    assert_eq!(v["attempts"], 1, "{v:#}");
    let got: Vec<(String, String, String)> = v["members"]
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
    let of = |name: &str| {
        got.iter()
            .find(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("no member {name:?}: {got:#?}"))
    };
    assert_eq!(of("small.txt").1, "succeeded", "{got:#?}");
    assert_eq!(of("a/b/shallow.txt").1, "succeeded", "{got:#?}");
    for (name, setting) in [
        ("big", "[ftp] max_listing_bytes"),
        ("a/b/c", "[ftp] max_tree_depth"),
        ("many", "[ftp] max_tree_members"),
    ] {
        let (_, state, why) = of(name);
        assert_eq!(state, "refused", "{name}: {got:#?}");
        assert!(why.contains(setting), "{name}: {why}");
    }
    assert_eq!(got.len(), 5, "{got:#?}");
    assert_eq!(dst.read_file("in/tree/small.txt").unwrap(), b"small");
}

/// Item 7, a server that refuses `-a` rather than ignoring it (a scripted server: none of
/// the three real ones does): `501` to `LIST -a`, then the plain `LIST` is used, and the
/// listing says hidden names were not shown. Before, `LIST -a` refused would have failed
/// the walk.
#[test]
fn a_server_that_refuses_list_a_is_listed_plainly_and_said_to_hide_names() {
    use bftp_tests::hostile::{Action, HostileServer, Script};
    use bftp_tests::scenario::{hostile_login, open as open_logins};
    let listing = b"-rw-r--r--   1 u g 5 Dec  1 10:00 a.dat\r\n\
drwxr-xr-x   2 u g 4096 Dec  1 10:00 sub\r\n"
        .to_vec();
    let script = |host: [u8; 4], user: &str| {
        Script::new()
            .host(host.into())
            .user(user, format!("{user}-pw"))
            .data_timeout(Duration::from_secs(5))
    };
    let src = HostileServer::start(script([127, 0, 0, 5], "src").without_mlsd().on(
        "LIST",
        Action::Sequence(vec![
            Action::reply("501 -a: unknown option"),
            Action::ServeData(listing),
        ]),
    ))
    .unwrap();
    let dst = HostileServer::start(script([127, 0, 0, 6], "dst")).unwrap();
    let limits = bftp_ftp::Limits {
        reply_timeout: Duration::from_secs(5),
        ..bftp_ftp::Limits::default()
    };
    let got = block_on(async {
        let mut pair = open_logins(&hostile_login(&src), &hostile_login(&dst), &limits).await?;
        let got = pair.list_dir("/pub").await;
        pair.close().await;
        anyhow::Ok(got)
    })
    .unwrap()
    .unwrap();
    assert_eq!(got.method, WalkMethod::List);
    assert_eq!(got.hidden, HiddenNames::NotShown, "{got:#?}");
    let names: Vec<&str> = got.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.dat", "sub"], "{got:#?}");
    let lists: Vec<String> = src
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("LIST"))
        .collect();
    assert_eq!(lists, ["LIST -a /pub", "LIST /pub"]);
}
