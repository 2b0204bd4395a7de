//! How bftpd reads what servers say and what it does with it (issue 11): multi-line replies
//! whose inner lines carry other codes, a passive reply naming a privileged port, a refusal
//! that comes back unchanged. The real CLI and daemon, the scripted server where a real one
//! will not misbehave on cue, real servers on the other side.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::jobs::{status, submit, wait_final};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// `bftp --json <command> SOURCE DEST` with each side's (URL, password): the output and
/// the JSON values it printed, one per line.
fn run(
    d: &Bftpd,
    command: &str,
    (source, source_password): (&str, &str),
    (dest, dest_password): (&str, &str),
) -> (std::process::Output, Vec<Value>) {
    let o = d.bftp_env(
        None,
        &["--json", command, source, dest],
        &[
            ("BFTP_SOURCE_PASSWORD", source_password),
            ("BFTP_DEST_PASSWORD", dest_password),
        ],
    );
    // One document (verify), or one value per line (transfer's events).
    let values = match serde_json::from_slice(&o.stdout) {
        Ok(v) => vec![v],
        Err(_) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
    };
    (o, values)
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A greeting `220-Hello`, `230 not really`, `220 ready` is one reply (RFC 959 §4.2: it ends
/// at the line with the first line's code and a space), and so is a 230 after PASS whose
/// inner lines start with 331, 530 and 421: `bftp verify` passes and `bftp transfer` copies
/// the file, with the scripted server on either side and vsftpd on the other.
#[test]
fn replies_with_inner_code_lines_are_read_whole_at_the_greeting_and_the_login() {
    const GREETING: &str = "220-Hello\n230 not really\n220 ready";
    const LOGGED_IN: &str =
        "230-Welcome\n331 not asking for a password\n530 not refused\n421 not closing\n230 Logged in";
    let data = payload(70_000, 11);
    let hostile = |script: Script| {
        HostileServer::start(
            script
                .host(std::net::Ipv4Addr::new(127, 0, 0, 5))
                .user("h", "h-pw")
                .greeting(Action::reply(GREETING))
                .login_reply(LOGGED_IN),
        )
        .unwrap()
    };
    let vsftpd = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    vsftpd.put_file("out/v.bin", &data).unwrap();
    vsftpd.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();

    // The scripted server as the source.
    let src = hostile(Script::new().file("/out/h.bin", data.clone()));
    let source = (src.url("out/h.bin"), src.password().to_owned());
    let dest = (vsftpd.url("in/"), vsftpd.password().to_owned());
    let (o, v) = run(&d, "verify", (&source.0, &source.1), (&dest.0, &dest.1));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        v.first().map(|v| &v["ok"]),
        Some(&Value::Bool(true)),
        "{}",
        text(&o)
    );
    let (o, events) = run(&d, "transfer", (&source.0, &source.1), (&dest.0, &dest.1));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "file" && e["name"] == "h.bin" && e["state"] == "succeeded"),
        "{}",
        text(&o)
    );
    assert_eq!(vsftpd.read_file("in/h.bin").unwrap(), data);
    assert!(src.observed().saw("RETR"), "{:?}", src.commands());

    // The scripted server as the destination.
    let dst = hostile(Script::new().dir("/in"));
    let source = (vsftpd.url("out/v.bin"), vsftpd.password().to_owned());
    let dest = (dst.url("in/"), dst.password().to_owned());
    let (o, _) = run(&d, "transfer", (&source.0, &source.1), (&dest.0, &dest.1));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(dst.stored("/in/v.bin"), Some(data));
}

/// A passive reply naming a port below 1024 is refused (RFC 2577 bounce protection) and the
/// other role order is tried: PASV to vsftpd, PORT to the scripted source, which connects
/// out. The copy succeeds, and the fallback taken is in the file's result.
#[test]
fn a_privileged_passive_port_on_one_side_swaps_the_roles() {
    let data = payload(50_000, 3);
    let src = HostileServer::start(
        Script::new()
            .host(std::net::Ipv4Addr::new(127, 0, 0, 5))
            .user("src", "src-pw")
            .file("/out/p.bin", data.clone())
            .on("PASV", Action::PasvPort(21))
            .on("EPSV", Action::PasvPort(21)),
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let (o, events) = run(
        &d,
        "transfer",
        (&src.url("out/p.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let file = events
        .iter()
        .find(|e| e["event"] == "file" && e["name"] == "p.bin")
        .unwrap_or_else(|| panic!("no result for p.bin: {}", text(&o)));
    assert_eq!(file["state"], "succeeded", "{file}");
    let fallbacks = file["fallbacks"].to_string();
    assert!(
        fallbacks.contains("RolesSwapped") && fallbacks.contains("bounce protection"),
        "{file}"
    );
    assert_eq!(dst.read_file("in/p.bin").unwrap(), data);
    // The source was told PORT (and connected out); no PORT ever named port 21.
    let commands = src.commands();
    assert!(
        commands.iter().any(|c| c.starts_with("PORT ")),
        "{commands:?}"
    );
    assert!(
        src.data_connections_to().iter().all(|a| a.port() >= 1024),
        "{:?}",
        src.data_connections_to()
    );
}

/// Both servers announce a privileged port: both role orders are refused, and the job fails
/// for good at its first attempt with a reason that names the bounce protection and both
/// servers, not after its retries.
#[test]
fn a_privileged_passive_port_on_both_sides_fails_for_good_naming_both() {
    let src = HostileServer::start(
        Script::new()
            .host(std::net::Ipv4Addr::new(127, 0, 0, 5))
            .user("src", "src-pw")
            .file("/out/p.bin", payload(5000, 1))
            .on("PASV", Action::PasvPort(21)),
    )
    .unwrap();
    let dst = HostileServer::start(
        Script::new()
            .host(std::net::Ipv4Addr::new(127, 0, 0, 6))
            .user("dst", "dst-pw")
            .dir("/in")
            .on("PASV", Action::PasvPort(1023)),
    )
    .unwrap();
    let d = Bftpd::start().unwrap();
    let id = bftp_tests::jobs::submit_urls(
        &d,
        (&src.url("out/p.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
        &[
            "--retry-first",
            "1s",
            "--retry-cap",
            "1s",
            "--max-attempts",
            "5",
        ],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(
        (v["outcome"].as_str(), v["attempts"].as_u64()),
        (Some("failed"), Some(1)),
        "{v:#}"
    );
    let all = v.to_string();
    for needle in [
        "bounce protection",
        "source server 127.0.0.5",
        "port 21 ",
        "destination server 127.0.0.6",
        "port 1023 ",
    ] {
        assert!(all.contains(needle), "{needle:?} not in {v:#}");
    }
    for server in [&src, &dst] {
        let commands = server.commands();
        assert!(
            !commands
                .iter()
                .any(|c| c.starts_with("PORT") || c.starts_with("EPRT")),
            "{commands:?}"
        );
    }
    assert_eq!(dst.stored("/in/p.bin"), None);
    eprintln!("both ports privileged: {v:#}");
}

/// proFTPD in its stock configuration (`AllowStoreRestart off`) answers APPE with
/// `451 ...: Append/Restart not permitted, try again`. The first attempt takes it as
/// transient and remembers it for that server; bftpd restarts; the second attempt gets the
/// same refusal, unchanged, and the member ends `failed_permanent` naming the setting, long
/// before the job's ten attempts. The destination file is untouched.
#[test]
fn a_refusal_that_repeats_unchanged_ends_the_member_for_good_across_a_restart() {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    src.put_file("out/more.txt", b"more lines\n").unwrap();
    dst.put_file("in/log.txt", b"kept\n").unwrap();
    let mut d = Bftpd::start().unwrap();
    let id = submit(
        &d,
        &src,
        &dst,
        "out/more.txt",
        "in/log.txt",
        &[
            "--dest-command",
            "append",
            "--retry-first",
            "6s",
            "--retry-cap",
            "6s",
            "--max-attempts",
            "10",
        ],
    );
    // The first attempt's refusal, recorded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let v = status(&d, id);
        if v["members"][0]["detail"]
            .as_str()
            .is_some_and(|t| t.contains("451"))
        {
            break v;
        }
        assert!(Instant::now() < deadline, "no 451 yet: {v:#}\n{}", d.logs());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(first["members"][0]["state"], "pending", "{first:#}");
    d.terminate(Duration::from_secs(20)).unwrap();
    d.launch().unwrap();
    let after = status(&d, id);
    assert_eq!(
        after["attempts"].as_u64(),
        Some(1),
        "the second attempt ran before the restart: {after:#}"
    );

    let v = wait_final(&d, id, Duration::from_secs(60));
    let member = &v["members"][0];
    assert_eq!(
        (
            v["outcome"].as_str(),
            v["attempts"].as_u64(),
            member["state"].as_str()
        ),
        (Some("failed"), Some(2), Some("failed_permanent")),
        "{v:#}"
    );
    let detail = member["detail"].as_str().unwrap_or_default();
    for needle in [
        "APPE",
        "451",
        "Append/Restart not permitted",
        "on 2 attempts",
        "AllowStoreRestart on",
    ] {
        assert!(detail.contains(needle), "{needle:?} not in {detail}");
    }
    assert_eq!(dst.read_file("in/log.txt").unwrap(), b"kept\n");
    eprintln!("append onto stock proFTPD: {detail}");
}
