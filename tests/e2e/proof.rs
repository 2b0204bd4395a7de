//! Issue 16: a proof per file, the strongest the pair allows, against the real bftpd and real
//! servers: proFTPD with mod_digest on both sides proves every file by hash; a digest that
//! does not match (a scripted source reporting a wrong one) fails the copy, removes the bad
//! destination file and is retried; vsftpd pairs give `size`, and `--proof hash` on them is
//! refused with the reason, at verify and at submit.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::files::content;
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::jobs::{status, submit, submit_urls, wait_final};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

fn proftpd_with_digest() -> FtpServer {
    FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            digest: true,
            ..FtpOptions::default()
        },
    )
    .unwrap()
}

fn members(v: &Value) -> &Vec<Value> {
    v["members"].as_array().unwrap()
}

/// How many `verb` commands a proFTPD answered, from its ExtendedLog: `... "HASH a.dat" 213 -`
/// (some commands, DELE and OPTS among them, are logged a second time without a code).
fn proftpd_commands(server: &FtpServer, verb: &str) -> usize {
    let log = std::fs::read_to_string(server.log_file()).unwrap_or_default();
    let prefix = format!("\"{verb} ");
    log.lines()
        .filter_map(|l| l.split_once(&prefix))
        .filter(|(_, rest)| {
            rest.rsplit_once("\" ")
                .is_some_and(|(_, tail)| tail.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count()
}

fn sha256_hex(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// proFTPD with mod_digest on both sides: every file of a `move` is `hash`-proven (both
/// servers asked HASH, the digests equal in the member's detail), only then is its source
/// deleted; `bftp status` shows the proof, and `bftp verify` says which proof the pair allows.
#[test]
fn proftpd_pair_with_mod_digest_proves_every_file_by_hash() {
    let src = proftpd_with_digest();
    let dst = proftpd_with_digest();
    let names = ["a.dat", "b c.dat", "ü.dat"];
    for (i, n) in names.iter().enumerate() {
        src.put_file(&format!("out/{n}"), &content(n, 1000 + i * 70_000))
            .unwrap();
    }
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();

    let env = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let o = d.bftp_env(
        None,
        &[
            "--json",
            "verify",
            "--proof",
            "hash",
            &src.url("out/*.dat"),
            &dst.url("in/"),
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let proof = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "proof")
        .unwrap_or_else(|| panic!("no proof check: {v:#}"));
    assert_eq!(proof["ok"], true, "{proof}");
    assert_eq!(
        proof["detail"], "hash (SHA-512: source HASH, destination HASH)",
        "{proof}"
    );

    let id = submit(
        &d,
        &src,
        &dst,
        "out/*.dat",
        "in/",
        &["--move", "--proof", "hash"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(v["proof"], "hash", "{v:#}");
    assert_eq!(members(&v).len(), names.len(), "{v:#}");
    for m in members(&v) {
        assert_eq!(m["state"], "succeeded", "{m:#}");
        assert_eq!(m["proof"], "hash", "{m:#}");
        let detail = m["detail"].as_str().unwrap();
        assert!(detail.contains("SHA-512 digests equal ("), "{m:#}");
    }
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            dst.read_file(&format!("in/{n}")).unwrap(),
            content(n, 1000 + i * 70_000),
            "{n}"
        );
        assert!(!src.path(&format!("out/{n}")).exists(), "{n}: source kept");
    }
    // Both servers were asked, once per file.
    assert_eq!(proftpd_commands(&src, "HASH"), names.len(), "source log");
    assert_eq!(
        proftpd_commands(&dst, "HASH"),
        names.len(),
        "destination log"
    );

    // `bftp transfer` proves the same way, each file's event naming its proof.
    let o = d.bftp_env(
        None,
        &[
            "--json",
            "transfer",
            "--proof",
            "hash",
            &dst.url("in/*.dat"),
            &src.url("out/"),
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let events: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let files: Vec<&Value> = events.iter().filter(|e| e["event"] == "file").collect();
    assert_eq!(files.len(), names.len(), "{events:#?}");
    for f in files {
        assert_eq!(f["proof"], "hash", "{f:#}");
        assert!(
            f["evidence"]
                .as_str()
                .unwrap()
                .contains("SHA-512 digests equal"),
            "{f:#}"
        );
    }

    let o = d.bftp(&["status", &id.to_string()]);
    let shown = text(&o);
    assert!(shown.contains("PROOF"), "{shown}");
    let proven = shown
        .lines()
        .filter(|l| l.contains("succeeded") && l.contains(" hash "))
        .count();
    assert_eq!(proven, names.len(), "{shown}");
}

/// A scripted source whose XSHA256 reports a wrong digest the first time: the copy to a real
/// proFTPD (mod_digest, HASH) is caught, its destination file deleted (DELE in the server's
/// log), the member left pending; the next attempt copies again and the digests agree.
#[test]
fn a_wrong_digest_fails_the_copy_removes_the_file_and_is_retried() {
    let data = content("p.bin", 50_000);
    let right = sha256_hex(&data);
    let wrong = format!("{}0", &right[..63]);
    let wrong = if wrong == right {
        format!("{}1", &right[..63])
    } else {
        wrong
    };
    let script = Script::new()
        .user("src", "src-pw")
        .features([
            "EPSV",
            "MLST type*;size*;modify*;",
            "PASV",
            "SIZE",
            "XSHA256",
        ])
        .file("/out/p.bin", data.clone())
        .on(
            "XSHA256",
            Action::Sequence(vec![
                Action::reply(format!("250 {}", wrong.to_ascii_uppercase())),
                Action::reply(format!(
                    "250-Computing SHA256 digest\n250 {}",
                    right.to_ascii_uppercase()
                )),
            ]),
        );
    let src = HostileServer::start(script).unwrap();
    let dst = proftpd_with_digest();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/p.bin"), src.password()),
        (&dst.url("in/p.bin"), dst.password()),
        &[
            "--retry-first",
            "1s",
            "--retry-cap",
            "1s",
            "--max-attempts",
            "3",
        ],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(v["attempts"], 2, "{v:#}");
    let m = &members(&v)[0];
    assert_eq!(m["proof"], "hash", "{m:#}");
    assert!(
        m["detail"]
            .as_str()
            .unwrap()
            .contains("SHA-256 digests equal"),
        "{m:#}"
    );
    // The first attempt's bad file was deleted before the second copy.
    assert_eq!(proftpd_commands(&dst, "DELE"), 1, "destination log");
    assert_eq!(proftpd_commands(&dst, "HASH"), 2, "destination log");
    let history = v["history"].to_string();
    assert!(history.contains("digests differ"), "{v:#}");
    assert_eq!(dst.read_file("in/p.bin").unwrap(), data);
}

/// vsftpd has SIZE and no hash command: its copies are `size`-proven; `--proof hash` on a pair
/// with vsftpd is refused with the reason at verify, and the job submitted with it fails
/// before any file moves.
#[test]
fn vsftpd_pairs_prove_by_size_and_refuse_a_required_hash() {
    // Third party only: under `auto` a relay with the stream hashed meets the requirement
    // (`relay_jobs::a_hash_proof_the_servers_cannot_give_is_met_by_the_relayed_stream`).
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = proftpd_with_digest();
    src.put_file("out/a.dat", &content("a.dat", 3000)).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();

    let id = submit(&d, &src, &dst, "out/a.dat", "in/", &[]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(members(&v)[0]["proof"], "size", "{v:#}");

    let env = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let o = d.bftp_env(
        None,
        &[
            "verify",
            "--proof",
            "hash",
            "--data-path",
            "fxp",
            &src.url("out/a.dat"),
            &dst.url("in/b.dat"),
        ],
        &env,
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("requires a hash proof"), "{out}");
    assert!(
        out.contains("the source server offers no hash command"),
        "{out}"
    );

    let id = submit(
        &d,
        &src,
        &dst,
        "out/a.dat",
        "in/b.dat",
        &["--proof", "hash", "--data-path", "fxp"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "failed", "{v:#}");
    let m = &members(&v)[0];
    assert_ne!(m["state"], "succeeded", "{m:#}");
    let all = v.to_string();
    assert!(all.contains("requires a hash proof"), "{v:#}");
    assert!(
        all.contains("the source server offers no hash command"),
        "{v:#}"
    );
    assert!(!dst.path("in/b.dat").exists(), "no file moved");
    assert_eq!(status(&d, id)["proof"], "hash");

    let o = d.bftp_env(
        None,
        &[
            "transfer",
            "--proof",
            "hash",
            "--data-path",
            "fxp",
            &src.url("out/a.dat"),
            &dst.url("in/c.dat"),
        ],
        &env,
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("requires a hash proof"), "{}", text(&o));
    assert!(!dst.path("in/c.dat").exists(), "no file moved");
}

/// Hashing takes the server time: a HASH reply (`213-Computing...` first) that comes after
/// more than the reply timeout is waited for when the file is large (the wait grows with
/// the size), and a server that never answers fails the proof after the reply timeout plus
/// the size's share, not never.
#[test]
fn a_slow_hash_reply_is_waited_for_by_size_and_a_silent_one_is_not_forever() {
    use bftp_core::proof::{Algorithm, HashCommand, HashPlan};
    use bftp_ftp::{HashProof, Limits, Pair, HASH_RATE_FLOOR};
    use bftp_tests::scenario::{block_on, hostile_login, open};

    let hex = "ab".repeat(32);
    let large = 3 * HASH_RATE_FLOOR; // 3 s more than the reply timeout
    let server = |hash: Action| {
        HostileServer::start(
            Script::new()
                .user("u", "u-pw")
                .features(["EPSV", "PASV", "SIZE", "HASH SHA-256;SHA-1*"])
                .on("OPTS", Action::reply("200 SHA-256"))
                .on("HASH", hash),
        )
        .unwrap()
    };
    let slow = format!("213-Computing SHA-256 digest\n213 SHA-256 0-{large} {hex} big.bin");
    let src = server(Action::Sequence(vec![
        Action::delayed(Duration::from_secs(2), Action::reply(slow)),
        Action::Silence,
    ]));
    let dst = server(Action::reply(format!(
        "213 SHA-256 0-{large} {hex} big.bin"
    )));
    let limits = Limits {
        reply_timeout: Duration::from_secs(1),
        transfer_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let plan = HashPlan {
        algorithm: Algorithm::Sha256,
        source: HashCommand::Hash,
        destination: HashCommand::Hash,
    };
    block_on(async {
        let mut pair: Pair = open(&hostile_login(&src), &hostile_login(&dst), &limits)
            .await
            .unwrap();
        let t = std::time::Instant::now();
        let p = pair
            .prove_hash(&plan, "big.bin", "big.bin", Some(large))
            .await;
        assert_eq!(
            p,
            HashProof::Equal {
                algorithm: Algorithm::Sha256,
                digest: hex.clone()
            }
        );
        assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());

        let t = std::time::Instant::now();
        let p = pair
            .prove_hash(&plan, "small.bin", "small.bin", Some(10))
            .await;
        let waited = t.elapsed();
        assert!(
            matches!(
                p,
                HashProof::Failed {
                    side: bftp_ftp::Side::Source,
                    ..
                }
            ),
            "{p:?}"
        );
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_secs(4),
            "{waited:?}"
        );
    });
}

/// Issue 14 meets issue 16: on one pair, a copy's next file may start ahead (pipelining) only
/// when nothing goes out between the two copies. A hash proof sends HASH after each copy, so
/// a multi-file copy job between proFTPDs with mod_digest on a single pair must keep every
/// reply in step: every file hash-proven, once per file on each side, bytes right.
#[test]
fn hash_proofs_between_pipelined_copies_stay_in_step() {
    let src = proftpd_with_digest();
    let dst = proftpd_with_digest();
    let names: Vec<String> = (0..6).map(|i| format!("f{i}.dat")).collect();
    for (i, n) in names.iter().enumerate() {
        src.put_file(&format!("out/{n}"), &content(n, 2000 + i * 10_000))
            .unwrap();
    }
    dst.mkdir("in").unwrap();
    let d =
        Bftpd::start_with(bftp_tests::jobs::config_plus("[ftp]\nparallel_pairs = 1\n")).unwrap();
    let id = submit(&d, &src, &dst, "out/*.dat", "in/", &["--proof", "hash"]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(members(&v).len(), names.len(), "{v:#}");
    for m in members(&v) {
        assert_eq!(m["state"], "succeeded", "{m:#}");
        assert_eq!(m["proof"], "hash", "{m:#}");
        assert_eq!(m["attempts"], 1, "{m:#}");
    }
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            dst.read_file(&format!("in/{n}")).unwrap(),
            content(n, 2000 + i * 10_000),
            "{n}"
        );
    }
    assert_eq!(proftpd_commands(&src, "HASH"), names.len(), "source log");
    assert_eq!(
        proftpd_commands(&dst, "HASH"),
        names.len(),
        "destination log"
    );
}
