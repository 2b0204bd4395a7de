//! FTPS (issue 13) against the real servers: explicit TLS on the control connections of all
//! three as source and destination, certificate refusals (no USER sent), servers without
//! AUTH TLS under `required`/`preferred`, a handshake that fails after 234, the bytes on the
//! wire (PASS never in clear), listings under PROT P.
//!
//! Certificates come from `bftp_tests::pki` (rcgen): a CA, and server certificates with IP
//! SANs for the loopback addresses the servers listen on.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::jobs::{submit_urls, wait_final};
use bftp_tests::pki::{Flaw, Pki};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// A server of `kind` with a good certificate, TLS required for the login.
fn tls_server(pki: &Pki, kind: ServerKind) -> FtpServer {
    let (tls, _) = pki.server(kind.name(), Flaw::None, true).unwrap();
    FtpServer::start(
        kind,
        FtpOptions {
            tls: Some(tls),
            ..FtpOptions::default()
        },
    )
    .unwrap()
}

/// The daemon's config with `[ftp.tls]` `extra` lines (host entries) appended.
fn daemon(tls_section: &str) -> Bftpd {
    let section = tls_section.to_owned();
    Bftpd::start_with(move |dir| format!("{}\n[ftp.tls]\n{section}", Bftpd::default_config(dir)))
        .unwrap()
}

/// Every test server listens on 127.0.0.2: one host entry with the test CA.
fn ca_entry(pki: &Pki) -> String {
    format!(
        "[[ftp.tls.hosts]]\nhost = \"127.0.0.2\"\nca_file = \"{}\"\n",
        pki.ca_file().display()
    )
}

fn transfer(
    d: &Bftpd,
    src: &FtpServer,
    s: &str,
    dst: &FtpServer,
    t: &str,
    extra: &[&str],
) -> (Option<i32>, String, Vec<Value>) {
    let mut args = vec!["--json", "transfer", &src.url(s), &dst.url(t)]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = d.bftp_env(
        None,
        &args,
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    let events = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (o.status.code(), text(&o), events)
}

/// The `tls` fields of a transfer's `file` event for `name` (issue 27 item 14: fields, not
/// a sentence).
fn file_tls(events: &[Value], name: &str) -> Value {
    events
        .iter()
        .find(|e| e["event"] == "file" && e["name"] == name)
        .map(|e| e["tls"].clone())
        .unwrap_or_default()
}

/// Whether `side`'s control connection in `tls` (a member's or a file event's `tls`) was TLS
/// 1.x, its certificate checked as `check`.
fn control_tls(tls: &Value, side: &str, check: &str) -> bool {
    let c = &tls[side];
    c["state"] == "tls"
        && c["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("TLS 1."))
        && c["certificate"] == check
}

/// Whether the data of `tls` was encrypted with `client` as the TLS client.
fn data_encrypted(tls: &Value, client: &str) -> bool {
    tls["data"]["encrypted"] == true && tls["data"]["tls_client"] == client
}

fn server_log(s: &FtpServer) -> String {
    std::fs::read_to_string(s.log_file()).unwrap_or_default()
}

/// Whether the server's own log shows a USER command (vsftpd's protocol log and proFTPD's
/// ExtendedLog record each command; Pure-FTPd's output has none in either case).
fn saw_user(s: &FtpServer) -> bool {
    server_log(s).lines().any(|l| l.contains("\"USER "))
}

#[test]
fn explicit_tls_on_all_three_servers_as_source_and_destination_of_jobs_and_transfers() {
    let pki = Pki::new().unwrap();
    let servers: Vec<FtpServer> = ServerKind::ALL
        .iter()
        .map(|k| tls_server(&pki, *k))
        .collect();
    let d = daemon(&ca_entry(&pki));
    // Queued jobs on a ring (each server once as source, once as destination), then
    // `bftp transfer` on the reverse ring.
    let mut jobs = Vec::new();
    for i in 0..3 {
        let (src, dst) = (&servers[i], &servers[(i + 1) % 3]);
        let data = bftp_tests::payload(200_000 + i * 1000, i as u8);
        src.put_file(&format!("out/job-{i}.bin"), &data).unwrap();
        dst.mkdir("in").unwrap();
        let id = submit_urls(
            &d,
            (&src.url(&format!("out/job-{i}.bin")), src.password()),
            (&dst.url("in/"), dst.password()),
            &["--tls", "required", "--data-tls", "off"],
        );
        jobs.push((id, i, data));
    }
    for (id, i, data) in &jobs {
        let v = wait_final(&d, *id, Duration::from_secs(60));
        let dst = &servers[(i + 1) % 3];
        assert_eq!(v["outcome"], "succeeded", "{v:#}\n{}", d.logs());
        assert_eq!(dst.read_file(&format!("in/job-{i}.bin")).unwrap(), *data);
        // The ledger names each side's TLS and the clear data.
        let tls = &v["members"][0]["tls"];
        assert!(
            control_tls(tls, "source", "ca_file") && control_tls(tls, "destination", "ca_file"),
            "{v:#}"
        );
        assert!(
            tls["source"]["ca_file"]
                .as_str()
                .is_some_and(|f| f.ends_with(".pem")),
            "{tls:#}"
        );
    }
    for i in 0..3 {
        let (src, dst) = (&servers[(i + 1) % 3], &servers[i]);
        let data = bftp_tests::payload(150_000 + i * 10, 10 + i as u8);
        src.put_file(&format!("out/t-{i}.bin"), &data).unwrap();
        let (code, out, events) = transfer(
            &d,
            src,
            &format!("out/t-{i}.bin"),
            dst,
            "in/",
            &["--tls", "required", "--data-tls", "off"],
        );
        assert_eq!(code, Some(0), "{} -> {}: {out}", src.kind(), dst.kind());
        assert_eq!(dst.read_file(&format!("in/t-{i}.bin")).unwrap(), data);
        let tls = file_tls(&events, &format!("t-{i}.bin"));
        assert!(control_tls(&tls, "destination", "ca_file"), "{out}");
    }
    // Each server demanded TLS before USER (vsftpd force_local_logins_ssl, proFTPD
    // TLSRequired ctrl, Pure-FTPd --tls=2), so every login above was encrypted.
    for s in &servers {
        assert!(
            saw_user(s) || s.kind() == ServerKind::PureFtpd,
            "{}",
            server_log(s)
        );
    }
    assert!(!d.logs().contains(servers[0].password()));
}

/// A server with a bad certificate, under `required`: a permanent failure that names the
/// host and the reason, and no USER reaches the server. The same server with its pinned
/// fingerprint is accepted.
#[test]
fn refused_certificates_fail_permanently_with_the_reason_and_send_no_user() {
    let pki = Pki::new().unwrap();
    let dst = tls_server(&pki, ServerKind::Proftpd);
    dst.mkdir("in").unwrap();
    let cases = [
        (Flaw::WrongName, "wrong name"),
        (Flaw::Expired, "expired"),
        (Flaw::UnknownIssuer, "unknown issuer"),
    ];
    let mut bad = Vec::new();
    for (flaw, _) in cases {
        let (tls, der) = pki.server(&format!("bad-{flaw:?}"), flaw, false).unwrap();
        let s = FtpServer::start(
            ServerKind::Vsftpd,
            FtpOptions {
                tls: Some(tls),
                ..FtpOptions::default()
            },
        )
        .unwrap();
        s.put_file("out/f.bin", b"bad cert source").unwrap();
        bad.push((s, der));
    }
    let d = daemon(&ca_entry(&pki));
    for ((s, _), (flaw, reason)) in bad.iter().zip(cases) {
        let id = submit_urls(
            &d,
            (&s.url("out/f.bin"), s.password()),
            (&dst.url("in/"), dst.password()),
            &["--tls", "required"],
        );
        let v = wait_final(&d, id, Duration::from_secs(30));
        let shown = v.to_string();
        assert_eq!(v["outcome"], "failed", "{flaw:?}: {v:#}");
        assert!(shown.contains("failed_permanent"), "{flaw:?}: {v:#}");
        assert!(shown.contains(reason), "{flaw:?}: {reason:?} not in {v:#}");
        assert!(
            shown.contains("127.0.0.2"),
            "{flaw:?}: host not named: {v:#}"
        );
        assert!(
            !saw_user(s),
            "{flaw:?}: USER reached the server:\n{}",
            server_log(s)
        );
        assert!(server_log(s).contains("AUTH TLS"), "{}", server_log(s));
    }
    // The wrong-name server with its certificate pinned: accepted.
    let (wrong, der) = &bad[0];
    let fp = bftp_ftp::tls::hex(&bftp_ftp::tls::fingerprint(der));
    let pinned = daemon(&format!(
        "[[ftp.tls.hosts]]\nhost = \"127.0.0.2\"\nfingerprint = \"{fp}\"\n"
    ));
    // The pin is for this host name, so the destination (same address, other certificate)
    // is not part of this run: copy to a clear destination.
    let plain = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    plain.mkdir("in").unwrap();
    let (code, out, _) = transfer(
        &pinned,
        wrong,
        "out/f.bin",
        &plain,
        "in/",
        &["--tls", "required,off"],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(plain.read_file("in/f.bin").unwrap(), b"bad cert source");
}

/// A server without TLS: under `required` a permanent failure before USER; under
/// `preferred` the copy runs in clear and says so.
#[test]
fn a_server_without_auth_tls_fails_under_required_and_runs_in_clear_under_preferred() {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/f.bin", b"clear server").unwrap();
    dst.mkdir("in").unwrap();
    let d = daemon("");
    let id = submit_urls(
        &d,
        (&src.url("out/f.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
        &["--tls", "required"],
    );
    let v = wait_final(&d, id, Duration::from_secs(30));
    assert_eq!(v["outcome"], "failed", "{v:#}");
    assert!(v.to_string().contains("failed_permanent"), "{v:#}");
    assert!(v.to_string().contains("does not offer"), "{v:#}");
    assert!(!saw_user(&src), "USER sent in clear:\n{}", server_log(&src));

    let (code, out, events) = transfer(&d, &src, "out/f.bin", &dst, "in/", &["--tls", "preferred"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(dst.read_file("in/f.bin").unwrap(), b"clear server");
    let tls = file_tls(&events, "f.bin");
    assert_eq!(
        tls["source"],
        serde_json::json!({"state": "clear"}),
        "the clear login is not reported: {out}"
    );
}

/// A server that accepts AUTH TLS and then cannot do TLS: the connection fails and is not
/// retried in clear, even under `preferred`; no USER is sent.
#[test]
fn a_failed_handshake_after_auth_tls_is_not_retried_in_clear() {
    let src = HostileServer::start(
        Script::new()
            .user("alice", "hostile-pw-9")
            .file("/f.bin", b"x".to_vec())
            .on("AUTH", Action::reply("234 go ahead")),
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    dst.mkdir("in").unwrap();
    let d = daemon("");
    let o = d.bftp_env(
        None,
        &[
            "--json",
            "transfer",
            &src.url("/f.bin"),
            &dst.url("in/"),
            "--tls",
            "preferred,off",
        ],
        &[
            ("BFTP_SOURCE_PASSWORD", "hostile-pw-9"),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    let out = text(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("not retried in clear"), "{out}");
    let commands = src.commands();
    assert!(
        commands.iter().any(|c| c.starts_with("AUTH")),
        "{commands:?}"
    );
    assert!(
        !commands
            .iter()
            .any(|c| c.starts_with("USER") || c.starts_with("PASS")),
        "a login was tried in clear: {commands:?}"
    );
}

/// A TCP relay that keeps every byte the client sent.
struct Capture {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Capture {
    fn start(to: SocketAddr, on: Ipv4Addr) -> Capture {
        let listener = TcpListener::bind((on, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let keep = sent.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(to) else {
                    return;
                };
                let keep = keep.clone();
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_read, mut c_write) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 || s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        keep.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                    let _ = s_write.shutdown(Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_read, &mut c_write);
                    let _ = c_write.shutdown(Shutdown::Write);
                });
            }
        });
        Capture { addr, sent }
    }

    fn bytes(&self) -> Vec<u8> {
        self.sent.lock().unwrap().clone()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The control connection's bytes, captured between bftpd and the server: under `required`
/// neither PASS nor the password crosses in clear (AUTH TLS does); with TLS off the same
/// capture does see them, so the check can fail.
#[test]
fn no_password_crosses_the_wire_in_clear_under_tls() {
    let pki = Pki::new().unwrap();
    let server = tls_server(&pki, ServerKind::Vsftpd);
    let plain = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    server.put_file("out/f.bin", b"captured").unwrap();
    plain.put_file("out/f.bin", b"captured").unwrap();
    let sink = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    sink.mkdir("in").unwrap();
    let d = daemon(&format!(
        "{}[[ftp.tls.hosts]]\nhost = \"127.0.0.1\"\nca_file = \"{}\"\n",
        ca_entry(&pki),
        pki.ca_file().display()
    ));
    let run = |target: &FtpServer, policy: &str| -> (Vec<u8>, String) {
        let cap = Capture::start(target.addr(), Ipv4Addr::LOCALHOST);
        let url = format!(
            "ftp://{}@127.0.0.1:{}/out/f.bin",
            target.user(),
            cap.addr.port()
        );
        let o = d.bftp_env(
            None,
            &[
                "--json",
                "verify",
                &url,
                &sink.url("in/"),
                "--tls",
                &format!("{policy},off"),
            ],
            &[
                ("BFTP_SOURCE_PASSWORD", target.password()),
                ("BFTP_DEST_PASSWORD", sink.password()),
            ],
        );
        let out = text(&o);
        std::thread::sleep(Duration::from_millis(200));
        (cap.bytes(), out)
    };
    let (encrypted, out) = run(&server, "required");
    assert!(
        contains(&encrypted, b"AUTH TLS"),
        "{out}\n{}",
        String::from_utf8_lossy(&encrypted)
    );
    assert!(!contains(&encrypted, b"PASS"), "PASS in clear");
    assert!(
        !contains(&encrypted, server.password().as_bytes()),
        "the password in clear"
    );
    assert!(!contains(&encrypted, b"USER"), "USER in clear");
    let (clear, out) = run(&plain, "off");
    assert!(
        contains(&clear, b"PASS "),
        "{out}\n{}",
        String::from_utf8_lossy(&clear)
    );
    assert!(contains(&clear, plain.password().as_bytes()));
}

/// A multi-file job's listing under data policy `preferred`: PROT P is in force on the
/// source, whose listing data connection is then TLS (vsftpd serves the listing only over
/// TLS after PROT P).
#[test]
fn the_source_listing_uses_tls_under_prot_p() {
    let pki = Pki::new().unwrap();
    let src = tls_server(&pki, ServerKind::Vsftpd);
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for n in ["a", "b"] {
        src.put_file(&format!("out/{n}.dat"), n.repeat(5000).as_bytes())
            .unwrap();
    }
    dst.mkdir("in").unwrap();
    let d = daemon(&ca_entry(&pki));
    let (code, out, events) = transfer(
        &d,
        &src,
        "out/*.dat",
        &dst,
        "in/",
        &["--tls", "required,off", "--data-tls", "preferred,off"],
    );
    assert_eq!(code, Some(0), "{out}");
    let summary = events.last().unwrap();
    assert_eq!(summary["succeeded"].as_u64(), Some(2), "{out}");
    let log = server_log(&src);
    let prot = log.find("PROT P").expect("no PROT P");
    let listing = ["MLSD", "NLST", "LIST"]
        .iter()
        .filter_map(|v| log[prot..].find(v))
        .min();
    assert!(listing.is_some(), "no listing after PROT P:\n{log}");
}

/// TLS FXP: every ordered pair with proFTPD (the one server that can be the TLS client of a
/// data connection, after SSCN ON) moves the bytes encrypted, exactly, and the file's
/// ledger line says so and names the TLS client; one pair moves a large file.
#[test]
fn tls_fxp_on_every_ordered_pair_with_proftpd_is_byte_exact_and_encrypted() {
    let pki = Pki::new().unwrap();
    let pro = tls_server(&pki, ServerKind::Proftpd);
    let vs = tls_server(&pki, ServerKind::Vsftpd);
    let pure = tls_server(&pki, ServerKind::PureFtpd);
    let pro2 = tls_server(&pki, ServerKind::Proftpd);
    let d = daemon(&ca_entry(&pki));
    let pairs: [(&FtpServer, &FtpServer, &str, usize); 5] = [
        (&vs, &pro, "destination", 300_000),
        (&pro, &pure, "source", 300_000),
        (&pure, &pro, "destination", 300_000),
        (&pro, &pro2, "source", 8 << 20),
        (&pro, &vs, "source", 300_000),
    ];
    for (i, (src, dst, client, len)) in pairs.into_iter().enumerate() {
        let data = bftp_tests::payload(len, 40 + i as u8);
        let name = format!("x-{i}.bin");
        src.put_file(&format!("out/{name}"), &data).unwrap();
        dst.mkdir("in").unwrap();
        let (code, out, events) = transfer(
            &d,
            src,
            &format!("out/{name}"),
            dst,
            "in/",
            &["--tls", "required", "--data-tls", "required"],
        );
        let what = format!("{} -> {}", src.kind(), dst.kind());
        assert_eq!(code, Some(0), "{what}: {out}");
        assert!(
            dst.read_file(&format!("in/{name}")).unwrap() == data,
            "{what}: bytes differ"
        );
        let tls = file_tls(&events, &name);
        assert!(data_encrypted(&tls, client), "{what}: {tls}\n{out}");
    }
}

/// vsftpd and Pure-FTPd can only be TLS servers of a data connection: under data policy
/// `required` their third-party copy (`--data-path fxp`) fails permanently with the
/// explanation (under `auto` it is relayed: see below); under `preferred` it moves in clear
/// and the file's ledger line says so.
#[test]
fn vsftpd_and_pure_ftpd_cannot_encrypt_their_data_required_fails_preferred_says_clear() {
    let pki = Pki::new().unwrap();
    let vs = tls_server(&pki, ServerKind::Vsftpd);
    let pure = tls_server(&pki, ServerKind::PureFtpd);
    let data = bftp_tests::payload(100_000, 77);
    vs.put_file("out/f.bin", &data).unwrap();
    pure.mkdir("in").unwrap();
    let d = daemon(&ca_entry(&pki));
    let id = submit_urls(
        &d,
        (&vs.url("out/f.bin"), vs.password()),
        (&pure.url("in/"), pure.password()),
        &[
            "--tls",
            "required",
            "--data-tls",
            "required",
            "--data-path",
            "fxp",
        ],
    );
    let v = wait_final(&d, id, Duration::from_secs(30));
    let shown = v.to_string();
    assert_eq!(v["outcome"], "failed", "{v:#}");
    assert!(shown.contains("failed_permanent"), "{v:#}");
    assert!(shown.contains("TLS client"), "no explanation: {v:#}");
    assert!(
        pure.read_file("in/f.bin").is_err(),
        "copied in clear under required"
    );

    let id = submit_urls(
        &d,
        (&vs.url("out/f.bin"), vs.password()),
        (&pure.url("in/"), pure.password()),
        &["--tls", "required", "--data-tls", "preferred"],
    );
    let v = wait_final(&d, id, Duration::from_secs(30));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(pure.read_file("in/f.bin").unwrap(), data);
    let tls = &v["members"][0]["tls"];
    assert_eq!(tls["data"]["encrypted"], false, "{v:#}");
    assert!(tls["data"]["clear_reason"].is_string(), "{v:#}");
}

/// `bftp verify` shows what each server offers (FEAT: AUTH TLS, PROT, SSCN, CPSV), what its
/// control connection got, and what the job's data would get; it fails when the data policy
/// requires TLS the pair cannot give.
#[test]
fn verify_shows_what_each_server_offers_and_what_the_data_would_get() {
    let pki = Pki::new().unwrap();
    let vs = tls_server(&pki, ServerKind::Vsftpd);
    let pro = tls_server(&pki, ServerKind::Proftpd);
    let pure = tls_server(&pki, ServerKind::PureFtpd);
    vs.put_file("out/f.bin", b"verify me").unwrap();
    pro.mkdir("in").unwrap();
    pure.mkdir("in").unwrap();
    let d = daemon(&ca_entry(&pki));
    let verify = |dst: &FtpServer| {
        let o = d.bftp_env(
            None,
            &[
                "--json",
                "verify",
                &vs.url("out/f.bin"),
                &dst.url("in/"),
                "--tls",
                "required",
                "--data-tls",
                "required",
            ],
            &[
                ("BFTP_SOURCE_PASSWORD", vs.password()),
                ("BFTP_DEST_PASSWORD", dst.password()),
            ],
        );
        let out = text(&o);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        let check = |name: &str| -> (bool, String) {
            let c = v["checks"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == name))
                .unwrap_or_else(|| panic!("no check {name:?}: {out}"));
            (
                c["ok"].as_bool().unwrap_or(false),
                c["detail"].as_str().unwrap_or("").to_owned(),
            )
        };
        (
            check("source TLS"),
            check("destination TLS"),
            check("data TLS"),
            out,
        )
    };
    let ((_, src), (_, dst), (ok, data), out) = verify(&pro);
    assert!(
        src.contains("AUTH TLS: yes") && src.contains("SSCN: no"),
        "{out}"
    );
    assert!(src.contains("control TLS 1."), "{out}");
    assert!(dst.contains("SSCN: yes"), "proFTPD offers SSCN: {out}");
    assert!(ok && data.contains("TLS client: destination"), "{out}");
    let (_, (_, dst), (ok, data), out) = verify(&pure);
    assert!(
        dst.contains("AUTH TLS: yes") && dst.contains("SSCN: no"),
        "{out}"
    );
    assert!(!ok && data.contains("TLS client"), "{out}");
}

/// Implicit FTPS (`ftps://`): proFTPD with `UseImplicitSSL` greets inside TLS; bftp speaks
/// TLS from the first byte, as source and as destination.
#[test]
fn implicit_tls_with_ftps_urls_on_proftpd() {
    let pki = Pki::new().unwrap();
    let (mut tls, _) = pki.server("implicit", Flaw::None, true).unwrap();
    tls.implicit = true;
    let imp = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            tls: Some(tls),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let plain = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let data = bftp_tests::payload(250_000, 99);
    imp.put_file("out/f.bin", &data).unwrap();
    plain.mkdir("in").unwrap();
    imp.mkdir("in").unwrap();
    let d = daemon(&ca_entry(&pki));
    let ftps = |s: &FtpServer, path: &str| s.url(path).replacen("ftp://", "ftps://", 1);
    let run = |source: String, dest: String, src_pw: &str, dst_pw: &str| {
        let o = d.bftp_env(
            None,
            &["--json", "transfer", &source, &dest, "--data-tls", "off"],
            &[
                ("BFTP_SOURCE_PASSWORD", src_pw),
                ("BFTP_DEST_PASSWORD", dst_pw),
            ],
        );
        let out = text(&o);
        let events: Vec<Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (o.status.code(), out, events)
    };
    let (code, out, events) = run(
        ftps(&imp, "out/f.bin"),
        plain.url("in/"),
        imp.password(),
        plain.password(),
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(plain.read_file("in/f.bin").unwrap(), data);
    assert!(
        control_tls(&file_tls(&events, "f.bin"), "source", "ca_file"),
        "{out}"
    );
    plain.put_file("out/g.bin", &data).unwrap();
    let (code, out, events) = run(
        plain.url("out/g.bin"),
        ftps(&imp, "in/"),
        plain.password(),
        imp.password(),
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(imp.read_file("in/g.bin").unwrap(), data);
    assert!(
        control_tls(&file_tls(&events, "g.bin"), "destination", "ca_file"),
        "{out}"
    );
}

/// Issue 13 meets issue 14: with encrypted data the first copy sets SSCN and PROT, and the
/// copies after it start ahead of each other (pipelining) with nothing sent between them; a
/// PROT or SSCN that had to change would first settle what went ahead. A multi-file job on
/// one pair (vsftpd -> proFTPD, proFTPD the TLS client) keeps every reply in step: every
/// file byte-exact and encrypted, each copied once.
#[test]
fn several_files_on_one_pair_with_encrypted_data_stay_in_step() {
    let pki = Pki::new().unwrap();
    let vs = tls_server(&pki, ServerKind::Vsftpd);
    let pro = tls_server(&pki, ServerKind::Proftpd);
    let section = ca_entry(&pki);
    let d = Bftpd::start_with(move |dir| {
        format!(
            "{}\n[ftp]\nparallel_pairs = 1\n[ftp.tls]\n{section}",
            Bftpd::default_config(dir)
        )
    })
    .unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| {
            (
                format!("m{i}.bin"),
                bftp_tests::payload(50_000 + i * 1000, i as u8),
            )
        })
        .collect();
    for (name, data) in &files {
        vs.put_file(&format!("out/{name}"), data).unwrap();
    }
    pro.mkdir("in").unwrap();
    let id = submit_urls(
        &d,
        (&vs.url("out/*.bin"), vs.password()),
        (&pro.url("in/"), pro.password()),
        &["--tls", "required", "--data-tls", "required"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    for m in v["members"].as_array().unwrap() {
        assert_eq!(m["attempts"], 1, "{m:#}");
        assert!(data_encrypted(&m["tls"], "destination"), "{m:#}");
    }
    for (name, data) in &files {
        assert!(
            pro.read_file(&format!("in/{name}")).unwrap() == *data,
            "{name}: bytes differ"
        );
    }
}

/// `insecure` is only an explicit per-host setting, and it is named: a server whose
/// certificate is refused otherwise (wrong name) is accepted with it, and the file's TLS line
/// says the certificate was not checked. A daemon with `forbid_off` refuses a submit that
/// asks for `off` on a side, saying why, and creates no job.
#[test]
fn insecure_is_named_in_the_ledger_and_forbid_off_refuses_off() {
    let pki = Pki::new().unwrap();
    let (tls, _) = pki.server("bad-name", Flaw::WrongName, false).unwrap();
    let s = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            tls: Some(tls),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    s.put_file("out/f.bin", b"insecure source").unwrap();
    let plain = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    plain.mkdir("in").unwrap();
    let d = daemon("[[ftp.tls.hosts]]\nhost = \"127.0.0.2\"\ninsecure = true\n");
    let id = submit_urls(
        &d,
        (&s.url("out/f.bin"), s.password()),
        (&plain.url("in/"), plain.password()),
        &["--tls", "required,off"],
    );
    let v = wait_final(&d, id, Duration::from_secs(30));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    let tls = &v["members"][0]["tls"];
    assert_eq!(tls["source"]["certificate"], "insecure", "not named: {v:#}");
    assert_eq!(plain.read_file("in/f.bin").unwrap(), b"insecure source");

    // Without the entry the same server is refused (the setting is what lets it through).
    let checked = daemon("");
    let id = submit_urls(
        &checked,
        (&s.url("out/f.bin"), s.password()),
        (&plain.url("in/"), plain.password()),
        &["--tls", "required,off"],
    );
    let v = wait_final(&checked, id, Duration::from_secs(30));
    assert_eq!(v["outcome"], "failed", "{v:#}");

    let strict = daemon("control = \"preferred\"\ndata = \"preferred\"\nforbid_off = true\n");
    let env = [
        ("BFTP_SOURCE_PASSWORD", s.password()),
        ("BFTP_DEST_PASSWORD", plain.password()),
    ];
    let o = strict.bftp_env(
        None,
        &[
            "--json",
            "submit",
            &s.url("out/f.bin"),
            &plain.url("in/"),
            "--tls",
            "required,off",
        ],
        &env,
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("forbid_off"), "{}", text(&o));
    let o = strict.bftp(&["--json", "status"]);
    assert!(
        !text(&o).contains("out/f.bin"),
        "a job was made: {}",
        text(&o)
    );
}

/// vsftpd and Pure-FTPd can never encrypt their data between each other, so under data
/// policy `required` a third party is impossible; under `auto` the copy goes through bftpd on
/// two `PROT P` legs, byte-exact, and a capture of the loopback interface sees none of the
/// file in clear. The same copy with the data policy `off` is seen (the check can fail).
#[test]
fn vsftpd_to_pure_ftpd_under_required_relays_on_two_encrypted_legs() {
    use bftp_tests::capture::Capture;
    let pki = Pki::new().unwrap();
    let vs = tls_server(&pki, ServerKind::Vsftpd);
    let pure = tls_server(&pki, ServerKind::PureFtpd);
    let marker = b"<bftp relay clear-text marker 42>";
    let data = marker.repeat(40_000);
    vs.put_file("out/f.bin", &data).unwrap();
    pure.mkdir("in").unwrap();
    let d = daemon(&ca_entry(&pki));
    let run = |data_tls: &str, name: &str| {
        let capture = Capture::start(marker).unwrap();
        let (code, out, events) = transfer(
            &d,
            &vs,
            "out/f.bin",
            &pure,
            &format!("in/{name}"),
            &[
                "--tls",
                "required",
                "--data-tls",
                data_tls,
                "--data-path",
                "auto",
            ],
        );
        let (seen, bytes) = capture.finish();
        assert_eq!(code, Some(0), "{out}");
        assert_eq!(
            pure.read_file(&format!("in/{name}")).unwrap(),
            data,
            "{out}"
        );
        let file = events
            .iter()
            .find(|e| e["event"] == "file")
            .cloned()
            .unwrap_or_default();
        (seen, bytes, file, out)
    };
    let (seen, bytes, file, out) = run("required", "f.bin");
    // The capture was watching: the file crossed loopback at least once while it ran.
    assert!(
        bytes >= data.len() as u64,
        "the capture saw only {bytes} bytes: {out}"
    );
    assert_eq!(seen, 0, "{seen} frames carried the file in clear: {out}");
    assert_eq!(file["route"]["path"], "relay", "{file:#}");
    assert_eq!(file["route"]["reason"], "data_tls", "{file:#}");
    assert_eq!(file["tls"]["data"]["encrypted"], true, "{file:#}");

    let (seen, _, file, out) = run("off", "clear.bin");
    // Both servers here allow a third party: the clear copy goes between them.
    assert!(
        seen > 0,
        "a copy in clear was not seen by the capture: {out}"
    );
    assert_eq!(file["route"]["path"], "fxp", "{file:#}");
}
