//! Relays through a running bftpd (RULES.md §14), driven by `bftp` against stock vsftpd,
//! proFTPD and Pure-FTPd (FXP refused, as they ship): jobs under the shipped default `auto`
//! relay byte-exact and say so per file, the pair memory spares the next job the third-party
//! tries, a hash proof the servers cannot give is met by the relayed stream's hash, and a
//! relay cut by kill -9 of bftpd goes on from the destination's size where both servers
//! allow it and starts again where they do not.

use std::process::Command;
use std::time::Duration;

use bftp_tests::daemon::Bftpd;
use bftp_tests::jobs::{config_plus, submit, wait_final};
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

use ServerKind::{Proftpd, PureFtpd, Vsftpd};

fn stock(kind: ServerKind) -> FtpServer {
    FtpServer::start(
        kind,
        FtpOptions {
            fxp: false,
            ..FtpOptions::default()
        },
    )
    .unwrap()
}

/// The PORT and EPRT commands a server's own log shows (vsftpd's protocol log, proFTPD's
/// ExtendedLog).
fn ports_logged(server: &FtpServer) -> usize {
    let log = std::fs::read_to_string(server.log_file()).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("PORT ") || l.contains("EPRT "))
        .count()
}

fn members(v: &Value) -> Vec<Value> {
    v["members"].as_array().cloned().unwrap_or_default()
}

fn sha256_hex(data: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, data).unwrap();
    let out = Command::new("sha256sum").arg(&f).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Two wildcard jobs between stock vsftpd and stock proFTPD under the shipped `auto`: the
/// first tries the third party, is refused, relays every file byte-exact and says so per
/// file; the second goes straight to the relay from the pair memory: neither server gets a
/// PORT or EPRT from it.
#[test]
fn wildcard_jobs_relay_under_auto_and_the_second_sends_no_port() {
    let src = stock(Vsftpd);
    let dst = stock(Proftpd);
    let mut files = Vec::new();
    for i in 0..12 {
        let data = payload(4096 + i * 7, i as u8);
        src.put_file(&format!("out/f{i:02}.bin"), &data).unwrap();
        files.push((format!("f{i:02}.bin"), data));
    }
    let big = payload(3 * 1024 * 1024 + 5, 99);
    src.put_file("out/big.bin", &big).unwrap();
    files.push(("big.bin".into(), big));
    dst.mkdir("in1").unwrap();
    dst.mkdir("in2").unwrap();
    let d = Bftpd::start().unwrap();

    let id = submit(&d, &src, &dst, "out/*.bin", "in1/", &[]);
    let v = wait_final(&d, id, Duration::from_secs(90));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    for (name, data) in &files {
        assert_eq!(
            &dst.read_file(&format!("in1/{name}")).unwrap(),
            data,
            "{name}"
        );
    }
    for m in members(&v) {
        let route = &m["route"];
        assert_eq!(route["path"], "relay", "{m:#}");
        assert_eq!(route["reason"], "refused", "{m:#}");
        let detail = route["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("refused"), "no refusing reply: {m:#}");
    }
    let tried = ports_logged(&src) + ports_logged(&dst);
    assert!(tried > 0, "the first job never tried the third party");

    let id = submit(&d, &src, &dst, "out/*.bin", "in2/", &[]);
    let v = wait_final(&d, id, Duration::from_secs(90));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    for (name, data) in &files {
        assert_eq!(
            &dst.read_file(&format!("in2/{name}")).unwrap(),
            data,
            "{name}"
        );
    }
    for m in members(&v) {
        assert_eq!(m["route"]["path"], "relay", "{m:#}");
        assert_eq!(m["route"]["reason"], "remembered", "{m:#}");
        assert!(m["route"]["seen"].is_string(), "{m:#}");
    }
    assert_eq!(
        ports_logged(&src) + ports_logged(&dst),
        tried,
        "the second job sent PORT or EPRT to a pair remembered as refusing"
    );
}

/// A recursive job between stock Pure-FTPd and stock vsftpd relays the whole tree; under
/// `fxp` the same job fails for good, naming the server settings.
#[test]
fn a_tree_relays_under_auto_and_fails_under_fxp() {
    let src = stock(PureFtpd);
    let dst = stock(Vsftpd);
    let tree = [
        ("t/a.bin", payload(10_000, 1)),
        ("t/sub/b.bin", payload(200_000, 2)),
        ("t/sub/deeper/c.bin", payload(1, 3)),
    ];
    for (path, data) in &tree {
        src.put_file(path, data).unwrap();
    }
    dst.mkdir("copy").unwrap();
    let d = Bftpd::start().unwrap();
    let id = submit(&d, &src, &dst, "t", "copy/", &["--recursive"]);
    let v = wait_final(&d, id, Duration::from_secs(90));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    for (path, data) in &tree {
        let copied = path.replacen("t/", "copy/", 1);
        assert_eq!(&dst.read_file(&copied).unwrap(), data, "{copied}");
    }
    assert!(
        members(&v).iter().all(|m| m["route"]["path"] == "relay"),
        "{v:#}"
    );

    let id = submit(
        &d,
        &src,
        &dst,
        "t",
        "copy2/",
        &["--recursive", "--data-path", "fxp"],
    );
    let v = wait_final(&d, id, Duration::from_secs(90));
    assert_eq!(v["outcome"], "failed", "{v:#}");
    let shown = v.to_string();
    assert!(shown.contains("pasv_promiscuous=YES"), "{v:#}");
}

/// `--proof hash` between servers without HASH (stock vsftpd and Pure-FTPd): met by relaying
/// with the stream hashed; the ledger names the hash proof and keeps the stream's SHA-256,
/// which is the file's. With relays forbidden the same job cannot start.
#[test]
fn a_hash_proof_the_servers_cannot_give_is_met_by_the_relayed_stream() {
    let src = stock(Vsftpd);
    let dst = stock(PureFtpd);
    let data = payload(1_500_000, 42);
    src.put_file("out/h.bin", &data).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let id = submit(
        &d,
        &src,
        &dst,
        "out/h.bin",
        "in/h.bin",
        &["--proof", "hash"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(dst.read_file("in/h.bin").unwrap(), data);
    let m = &members(&v)[0];
    assert_eq!(m["proof"], "hash", "{m:#}");
    assert_eq!(m["route"]["path"], "relay", "{m:#}");
    assert_eq!(m["route"]["reason"], "proof", "{m:#}");
    assert_eq!(m["route"]["sha256"], sha256_hex(&data), "{m:#}");
    assert_eq!(m["route"]["bytes"], data.len() as u64, "{m:#}");

    let d = Bftpd::start_with(config_plus("[ftp]\nrelay = false\n")).unwrap();
    let id = submit(
        &d,
        &src,
        &dst,
        "out/h.bin",
        "in/h2.bin",
        &["--proof", "hash"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "failed", "{v:#}");
    assert!(
        dst.read_file("in/h2.bin").is_err(),
        "a file moved without its proof"
    );
}

/// A relay cut by kill -9 of bftpd, three times: the job ends byte-exact. Where both servers
/// take `REST` (vsftpd to Pure-FTPd) it went on from the destination's size (the job's
/// history says from where, the destination's log shows REST); stock proFTPD refuses a
/// restarted STOR, so there the copy started again and the history says why.
#[test]
fn a_relay_cut_by_kill_9_goes_on_where_both_servers_allow_it() {
    let src = FtpServer::start(
        Vsftpd,
        FtpOptions {
            fxp: false,
            max_rate: Some(3_000_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let data = payload(12 * 1024 * 1024, 77);
    src.put_file("out/cut.bin", &data).unwrap();
    for (dst_kind, resumes) in [(PureFtpd, true), (Proftpd, false)] {
        let dst = stock(dst_kind);
        dst.mkdir("in").unwrap();
        let mut d = Bftpd::start_with(config_plus("[ftp]\nresume_from = 1048576\n")).unwrap();
        let id = submit(
            &d,
            &src,
            &dst,
            "out/cut.bin",
            "in/cut.bin",
            &["--retry-first", "1s", "--retry-cap", "1s"],
        );
        let mut cut_at = Vec::new();
        for _ in 0..3 {
            // Cut once some bytes are there (and before the end).
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let before = dst.read_file("in/cut.bin").map(|f| f.len()).unwrap_or(0);
            while std::time::Instant::now() < deadline {
                let now = dst.read_file("in/cut.bin").map(|f| f.len()).unwrap_or(0);
                if now > before + 1_000_000 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            cut_at.push(dst.read_file("in/cut.bin").map(|f| f.len()).unwrap_or(0));
            d.kill9();
            d.restart_after_kill9().unwrap();
        }
        let v = wait_final(&d, id, Duration::from_secs(120));
        assert_eq!(v["outcome"], "succeeded", "{dst_kind}: {v:#}");
        assert!(
            dst.read_file("in/cut.bin").unwrap() == data,
            "{dst_kind}: differs"
        );
        let history = v["history"].to_string();
        if resumes {
            assert!(
                history.contains("resumed"),
                "{dst_kind}: {history} (cut at {cut_at:?})"
            );
            let log = std::fs::read_to_string(src.log_file()).unwrap_or_default();
            assert!(log.contains("REST "), "the source's log shows no REST");
        } else {
            assert!(history.contains("restarted"), "{dst_kind}: {history}");
        }
    }
}

/// A relaying pair holds a data connection on each host besides its control connection, and
/// the per-host limit counts both: with 4 connections per host and 4 pairs per job, a job
/// relaying from the start opens 2 pairs (2 × 2 connections on each server), not 4.
#[test]
fn a_relaying_job_counts_its_data_connections_in_the_per_host_limit() {
    let src = stock(Vsftpd);
    // On a host of its own: each server's slots are its own.
    let dst = FtpServer::start(
        Proftpd,
        FtpOptions {
            fxp: false,
            host: std::net::Ipv4Addr::new(127, 0, 0, 3),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    for i in 0..16 {
        src.put_file(&format!("out/s{i:02}.bin"), &payload(20_000, i as u8))
            .unwrap();
    }
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(config_plus(
        "[ftp]\nmax_connections_per_host = 4\nparallel_pairs = 4\npool_max_idle = 0\n",
    ))
    .unwrap();
    let id = submit(
        &d,
        &src,
        &dst,
        "out/*.bin",
        "in/",
        &["--data-path", "relay"],
    );
    let v = wait_final(&d, id, Duration::from_secs(90));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    let log = std::fs::read_to_string(src.log_file()).unwrap_or_default();
    let logins = log.lines().filter(|l| l.contains("\"USER ")).count();
    assert_eq!(
        logins, 2,
        "pairs opened to the source (each relaying pair holds 2 of its 4 slots)"
    );
}

/// A source that changed while its copy was cut off: the next try does not go on from the
/// destination's size (the bytes there are the old file's), it starts again, the history
/// says why, and the destination ends with the new file.
#[test]
fn a_source_changed_since_the_cut_starts_the_copy_again() {
    let src = FtpServer::start(
        Vsftpd,
        FtpOptions {
            fxp: false,
            max_rate: Some(3_000_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = stock(PureFtpd);
    dst.mkdir("in").unwrap();
    let old = payload(9 * 1024 * 1024, 5);
    src.put_file("out/moving.bin", &old).unwrap();
    let mut d = Bftpd::start_with(config_plus("[ftp]\nresume_from = 1048576\n")).unwrap();
    let id = submit(
        &d,
        &src,
        &dst,
        "out/moving.bin",
        "in/moving.bin",
        &["--retry-first", "1s", "--retry-cap", "1s"],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while dst.read_file("in/moving.bin").map(|f| f.len()).unwrap_or(0) < 1_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the copy never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.kill9();
    // The source grows while bftpd is down.
    let new = [old.clone(), payload(100_000, 6)].concat();
    src.put_file("out/moving.bin", &new).unwrap();
    d.restart_after_kill9().unwrap();
    let v = wait_final(&d, id, Duration::from_secs(120));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert!(
        dst.read_file("in/moving.bin").unwrap() == new,
        "not the new file"
    );
    let history = v["history"].to_string();
    assert!(
        history.contains("restarted") && history.contains("the source changed"),
        "{history}"
    );
    assert!(!history.contains("\"resumed\""), "{history}");
}
