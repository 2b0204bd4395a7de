//! `bftp verify` and `bftp transfer` end to end: the real CLI, the real daemon, real servers.

use std::time::Duration;

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

fn servers() -> (FtpServer, FtpServer) {
    (
        FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap(),
        FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap(),
    )
}

fn pw_env<'a>(src: &'a FtpServer, dst: &'a FtpServer) -> [(&'static str, &'a str); 2] {
    [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ]
}

/// `bftp --json transfer SOURCE_PATTERN DEST` through `d`, which must exit 0: the
/// output (for messages) and its events, one JSON value per line.
fn json_transfer(
    d: &Bftpd,
    src: &FtpServer,
    dst: &FtpServer,
    pattern: &str,
    dest: &str,
) -> (String, Vec<Value>) {
    let (o, events) = transfer_urls(
        d,
        (&src.url(pattern), src.password()),
        (&dst.url(dest), dst.password()),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    (out, events)
}

/// `bftp --json transfer SOURCE DEST` with each side's (URL, password), for servers of any
/// kind (the scripted one included), whatever its exit: the output and its events.
fn transfer_urls(
    d: &Bftpd,
    (source, source_password): (&str, &str),
    (dest, dest_password): (&str, &str),
) -> (std::process::Output, Vec<Value>) {
    let o = d.bftp_env(
        None,
        &["--json", "transfer", source, dest],
        &[
            ("BFTP_SOURCE_PASSWORD", source_password),
            ("BFTP_DEST_PASSWORD", dest_password),
        ],
    );
    let events = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (o, events)
}

#[test]
fn transfer_copies_server_to_server_and_reports_each_file() {
    let (src, dst) = servers();
    dst.mkdir("in").unwrap();
    let a: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    src.put_file("data/a.bin", &a).unwrap();
    src.put_file("data/b.bin", b"second file").unwrap();
    src.put_file("data/skip.txt", b"not matched").unwrap();
    let d = Bftpd::start().unwrap();
    let (out, events) = json_transfer(&d, &src, &dst, "data/*.bin", "in/");
    let summary = events.last().unwrap();
    assert_eq!(
        (
            summary["event"].as_str(),
            summary["files"].as_u64(),
            summary["succeeded"].as_u64()
        ),
        (Some("summary"), Some(2), Some(2)),
        "{out}"
    );
    let files: Vec<&Value> = events.iter().filter(|e| e["event"] == "file").collect();
    assert!(
        files
            .iter()
            .all(|f| f["evidence"].as_str().unwrap_or("").contains("sizes equal")),
        "{out}"
    );
    assert_eq!(dst.read_file("in/a.bin").unwrap(), a);
    assert_eq!(dst.read_file("in/b.bin").unwrap(), b"second file");
    assert!(
        dst.read_file("in/skip.txt").is_err(),
        "a file outside the pattern was copied"
    );
    assert!(!out.contains(src.password()), "a password in the output");
    assert!(
        !d.logs().contains(src.password()),
        "a password in the daemon's log"
    );
}

/// Many small files: each is proven (sizes equal, though the copy reused the listing's
/// source size), and the event stream carries a phase only for a copy that has run
/// 500 ms: a quick copy is reported by its `file` result alone.
#[test]
fn transfer_of_many_small_files_coalesces_phase_events() {
    let (src, dst) = servers();
    dst.mkdir("in").unwrap();
    let count = 40;
    for i in 0..count {
        src.put_file(&format!("many/f{i:02}.dat"), &vec![i as u8; 1000 + i])
            .unwrap();
    }
    src.mkdir("many/dir.dat").unwrap();
    let d = Bftpd::start().unwrap();
    let (out, events) = json_transfer(&d, &src, &dst, "many/*.dat", "in/");
    let files: Vec<&Value> = events.iter().filter(|e| e["event"] == "file").collect();
    assert_eq!(files.len(), count, "{out}");
    assert!(
        files
            .iter()
            .all(|f| f["evidence"].as_str().unwrap_or("").contains("sizes equal")),
        "{out}"
    );
    for e in events.iter().filter(|e| e["event"] == "progress") {
        let took = files
            .iter()
            .find(|f| f["name"] == e["name"])
            .and_then(|f| f["seconds"].as_f64())
            .unwrap_or(0.0);
        assert!(
            took >= 0.45,
            "a phase event for a copy of {took} s: {e}\n{out}"
        );
    }
    for i in 0..count {
        assert_eq!(
            dst.read_file(&format!("in/f{i:02}.dat")).unwrap(),
            vec![i as u8; 1000 + i]
        );
    }
}

#[test]
fn transfer_of_a_missing_file_fails_with_the_servers_reply() {
    let (src, dst) = servers();
    let d = Bftpd::start().unwrap();
    let o = d.bftp_env(
        None,
        &["transfer", &src.url("nope.bin"), &dst.url("")],
        &pw_env(&src, &dst),
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("550"), "the 550 is shown: {}", text(&o));
}

#[test]
fn verify_passes_for_a_good_job_and_names_the_failing_check() {
    let (src, dst) = servers();
    src.put_file("f.bin", b"x").unwrap();
    let d = Bftpd::start().unwrap();
    let o = d.bftp_env(
        None,
        &["--json", "verify", &src.url("f.bin"), &dst.url("")],
        &pw_env(&src, &dst),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["checks"].as_array().unwrap().len() >= 5, "{v}");

    let o = d.bftp_env(
        None,
        &["verify", &src.url("f.bin"), &dst.url("")],
        &[
            ("BFTP_SOURCE_PASSWORD", "wrong"),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("source login"), "{}", text(&o));
    assert!(!text(&o).contains(dst.password()), "{}", text(&o));
}

#[test]
fn the_host_policy_applies_to_verify_and_transfer() {
    let (src, dst) = servers();
    let d = Bftpd::start_with(|dir| {
        Bftpd::default_config(dir).replace("allow_loopback = true", "allow_loopback = false")
    })
    .unwrap();
    for cmd in ["verify", "transfer"] {
        let o = d.bftp_env(
            None,
            &[cmd, &src.url("f.bin"), &dst.url("")],
            &pw_env(&src, &dst),
        );
        assert_eq!(o.status.code(), Some(4), "{cmd}: {}", text(&o));
        assert!(text(&o).contains("loopback"), "{cmd}: {}", text(&o));
    }
}

/// `bftp transfer` gives a file whose data connection did not open (the scripted
/// destination answers the first STOR with Pure-FTPd's `425 ... Cannot assign requested
/// address`) a second try a second later, as an attempt does: the transfer succeeds. When
/// every data connection is refused, the first file's second try fails too, the other files
/// get none, and each is reported with its failure.
#[test]
fn transfer_tries_a_refused_data_connection_once_more() {
    use bftp_tests::hostile::{Action, HostileServer, Script};
    const REFUSED: &str =
        "425 Could not open data connection to port 14434: Cannot assign requested address";
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let names = ["r-0.bin", "r-1.bin", "r-2.bin"];
    for n in names {
        src.put_file(&format!("out/{n}"), n.repeat(1000).as_bytes())
            .unwrap();
    }
    // One pair: the files go in name order, so the n-th STOR is known.
    let d = Bftpd::start_with(|dir| {
        format!("{}[ftp]\nparallel_pairs = 1\n", Bftpd::default_config(dir))
    })
    .unwrap();
    let run = |stor: Action| {
        let dst = HostileServer::start(
            Script::new()
                .user("dst", "dst-pw")
                .dir("/in")
                .on("STOR", stor),
        )
        .unwrap();
        let (o, events) = transfer_urls(
            &d,
            (&src.url("out/r-*.bin"), src.password()),
            (&dst.url("in/"), dst.password()),
        );
        let stors = dst
            .commands()
            .iter()
            .filter(|c| c.starts_with("STOR"))
            .count();
        (o, events, stors, dst)
    };

    let (o, events, stors, dst) = run(Action::Sequence(vec![Action::reply(REFUSED)]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let files: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["event"] == "file")
        .map(|e| (e["name"].as_str().unwrap(), e["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        files,
        [
            ("r-1.bin", "succeeded"),
            ("r-2.bin", "succeeded"),
            ("r-0.bin", "succeeded")
        ],
        "{}",
        text(&o)
    );
    let summary = events.last().unwrap();
    assert_eq!(
        (summary["files"].as_u64(), summary["succeeded"].as_u64()),
        (Some(3), Some(3)),
        "{summary}"
    );
    assert_eq!(stors, 4, "{:#?}", dst.commands());
    for n in names {
        assert_eq!(
            dst.stored(&format!("/in/{n}")),
            Some(n.repeat(1000).into_bytes())
        );
    }

    let (o, events, stors, dst) = run(Action::reply(REFUSED));
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    let mut failed: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "file")
        .inspect(|e| {
            assert!(
                e["state"] == "failed_transient"
                    && e["detail"].as_str().is_some_and(|t| t.contains("425")),
                "{e}"
            )
        })
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, names, "{}", text(&o));
    let summary = events.last().unwrap();
    assert_eq!(
        (summary["files"].as_u64(), summary["failed"].as_u64()),
        (Some(3), Some(3)),
        "{summary}"
    );
    assert_eq!(stors, 4, "{:#?}", dst.commands());
}

/// A copy that takes longer than the 500 ms coalescing interval shows its phase on the event
/// stream while it runs: the scripted source waits 1.5 s before each RETR, so each file's
/// `progress` event comes before its `file` result; a file's progress names that file.
#[test]
fn transfer_shows_the_phase_of_a_slow_copy_while_it_runs() {
    use bftp_tests::hostile::{Action, HostileServer, Script};
    let names = ["s-0.bin", "s-1.bin"];
    let mut script = Script::new().user("src", "src-pw").on(
        "RETR",
        Action::delayed(Duration::from_millis(1500), Action::Default),
    );
    for n in names {
        script = script.file(&format!("/out/{n}"), n.repeat(500));
    }
    let src = HostileServer::start(script).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let (o, events) = transfer_urls(
        &d,
        (&src.url("out/s-*.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for n in names {
        let at = |kind: &str| {
            events
                .iter()
                .position(|e| e["event"] == kind && e["name"] == n)
        };
        let (progress, file) = (at("progress"), at("file"));
        assert!(
            progress.is_some() && progress < file,
            "{n}: progress at {progress:?}, result at {file:?}: {}",
            text(&o)
        );
    }
}

/// A listed file gone by the time its copy starts: the source is asked before the
/// destination is touched, so the destination's old file stays (a STOR first would truncate
/// it, and the failed copy's cleanup would then remove it).
#[test]
fn transfer_leaves_the_destination_alone_when_a_listed_file_is_gone() {
    use bftp_tests::hostile::{Action, HostileServer, Script};
    let gone = "550 g.bin: No such file or directory";
    let src = HostileServer::start(
        Script::new()
            .user("src", "src-pw")
            .file("/out/g.bin", vec![7u8; 2000])
            .on("SIZE", Action::reply(gone))
            .on("RETR", Action::reply(gone)),
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    dst.put_file("in/g.bin", b"the destination's own copy")
        .unwrap();
    let d = Bftpd::start().unwrap();
    let (o, events) = transfer_urls(
        &d,
        (&src.url("out/*.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    let file = events
        .iter()
        .find(|e| e["event"] == "file" && e["name"] == "g.bin")
        .unwrap_or_else(|| panic!("no result for g.bin: {}", text(&o)));
    assert!(file.to_string().contains("550"), "{file}");
    assert_eq!(
        dst.read_file("in/g.bin").unwrap(),
        b"the destination's own copy",
        "{}",
        text(&o)
    );
    assert!(!src.observed().saw("RETR"), "{:?}", src.commands());
}

/// The extra pairs of a transfer log in only once the first pair has: a wrong password
/// reaches the server once, not once per pair (4, the default). The scripted destination
/// greets after 300 ms, so pairs that did not wait would all be at their USER by then.
#[test]
fn transfer_with_a_wrong_password_logs_in_once_however_many_pairs_it_may_use() {
    use bftp_tests::hostile::{Action, HostileServer, Script};
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    for n in ["a", "b", "c", "d", "e", "f"] {
        src.put_file(&format!("out/{n}.dat"), n.as_bytes()).unwrap();
    }
    let dst = HostileServer::start(Script::new().user("dst", "dst-pw").dir("/in").greeting(
        Action::delayed(Duration::from_millis(300), Action::reply("220 ready")),
    ))
    .unwrap();
    let d = Bftpd::start().unwrap();
    let (o, _) = transfer_urls(
        &d,
        (&src.url("out/*.dat"), src.password()),
        (&dst.url("in/"), "not-the-password"),
    );
    let out = text(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("PASS"), "{out}");
    std::thread::sleep(Duration::from_millis(500));
    let commands = dst.commands();
    let users = commands.iter().filter(|c| c.starts_with("USER")).count();
    let passes = commands.iter().filter(|c| c.starts_with("PASS")).count();
    assert_eq!((users, passes), (1, 1), "{commands:?}");
    assert!(dst.files().is_empty());
}
