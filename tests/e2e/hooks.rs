//! Webhooks from the durable event log (issue 31) against the real bftpd and bftp binaries:
//! events arrive signed and verify, a receiver that fails or hangs gets the same event again,
//! a kill -9 between the state change and the delivery loses no event, `bftp events` is
//! owner-scoped, and `bftp status` shows a given-up delivery with why.
//!
//! The jobs here are cancelled before they are due: a cancel makes a job final (and writes
//! its `job.cancelled` event) without an FTP server.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{text, Bftpd, ALICE, BOB};
use bftp_tests::pki::Pki;
use bftp_tests::webhook::{verify, Received, Receiver, Reply};
use serde_json::Value;

const SRC: &str = "ftp://alice@127.0.0.1:2121/pub/data.bin";
const DST: &str = "ftp://bob@127.0.0.1:2122/incoming/";
const PW_ENV: &[(&str, &str)] = &[
    ("BFTP_SOURCE_PASSWORD", "src-pw-X7q"),
    ("BFTP_DEST_PASSWORD", "dst-pw-K9z"),
];

/// H2's receiver (HTTP and HTTPS with the tests' CA), with the daemon's logs in a failure.
fn wait_for(rx: &Receiver, n: usize, limit: Duration, d: &Bftpd) -> Vec<Received> {
    rx.wait_for(n, limit)
        .unwrap_or_else(|e| panic!("{e}\n{}", d.logs()))
}

fn header<'a>(r: &'a Received, name: &str) -> &'a str {
    r.header(name).unwrap_or("")
}

fn body(r: &Received) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn receiver(pki: &Pki, script: &[Reply]) -> Receiver {
    let rx = Receiver::start(pki).unwrap();
    rx.script(script.iter().cloned());
    rx
}

/// The test config with `[webhooks]` tuned to seconds, `https` to 127.0.0.1 checked against
/// the tests' CA (and `extra` after it).
fn config(dir: &std::path::Path, pki: &Pki, extra: &str) -> String {
    format!(
        "{}[webhooks]\ntimeout = \"1s\"\nretry_first = \"1s\"\nretry_max = \"2s\"\n\
         ca_files = {{ \"127.0.0.1\" = \"{}\" }}\n{extra}",
        Bftpd::default_config(dir),
        pki.ca_file().display()
    )
}

fn json(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// A job not due for an hour, notifying `notify`, cancelled at once: its `job.cancelled`
/// event is written in the cancel's transaction. Its id.
fn cancelled_job(d: &Bftpd, user: Option<&str>, notify: &[&str]) -> u64 {
    let mut args = vec!["--json", "submit", SRC, DST, "--start", "in 1h"];
    for n in notify {
        args.extend_from_slice(&["--notify", n]);
    }
    let o = d.bftp_env(user, &args, PW_ENV);
    assert_eq!(o.status.code(), Some(0), "submit failed: {}", text(&o));
    let id = json(&o)["job"]["id"].as_u64().unwrap();
    let o = d.bftp_env(user, &["cancel", &id.to_string()], &[]);
    assert_eq!(o.status.code(), Some(0), "cancel failed: {}", text(&o));
    id
}

fn status(d: &Bftpd, id: u64) -> Value {
    let o = d.bftp(&["--json", "status", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    json(&o)
}

/// Polls the job's first event until `done` holds of its deliveries (bounded).
fn wait_deliveries(d: &Bftpd, id: u64, done: impl Fn(&[Value]) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = status(d, id);
        let deliveries = v["events"][0]["deliveries"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if done(&deliveries) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "job {id}: deliveries not as wanted: {:#}\n{}",
            v["events"],
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn webhook_key(d: &Bftpd) -> Vec<u8> {
    std::fs::read(d.state_dir().join("webhook.key"))
        .unwrap()
        .trim_ascii()
        .to_vec()
}

#[test]
fn a_jobs_end_arrives_signed_and_the_signature_verifies() {
    let pki = Pki::new().unwrap();
    let rx = receiver(&pki, &[]);
    let d = Bftpd::start_with(|dir| config(dir, &pki, "")).unwrap();
    // Over HTTP and over HTTPS (the tests' CA, for 127.0.0.1).
    let (plain, tls) = (rx.http_url("/in?token=t0ken"), rx.https_url("/tls"));
    let id = cancelled_job(&d, None, &["ops@example.org", &plain, &tls]);
    let got = wait_for(&rx, 2, Duration::from_secs(20), &d);
    assert_eq!(got.iter().filter(|r| r.tls).count(), 1, "{got:?}");
    for r in &got {
        verify(r, &webhook_key(&d), Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("{:?}: {e:?}", r.header("bftp-signature")));
        assert_eq!(header(r, "bftp-event-id"), format!("job-{id}-final"));
        assert_eq!(header(r, "bftp-event-type"), "job.cancelled");
        let b = body(r);
        assert_eq!(b["schema"], "bftp.event.v1");
        assert_eq!(b["id"], format!("job-{id}-final"));
        assert_eq!(b["type"], "job.cancelled");
        assert_eq!(b["job"], id);
        assert_eq!(b["data"]["summary"]["state"], "cancelled", "{b:#}");
        let raw = String::from_utf8_lossy(&r.body);
        assert!(
            !raw.contains("src-pw-X7q") && !raw.contains("dst-pw-K9z"),
            "{raw}"
        );
    }
    // The deliveries as status shows them: the targets without their query.
    let v = wait_deliveries(&d, id, |ds| {
        ds.len() == 2 && ds.iter().all(|x| x["state"] == "delivered")
    });
    let dl = &v["events"][0]["deliveries"];
    assert_eq!(dl[0]["target"], rx.http_url("/in"));
    assert_eq!(dl[1]["target"], tls);
    assert_eq!(dl[0]["tries"], 1);
    assert!(!v.to_string().contains("t0ken"), "{v}");
}

#[test]
fn a_receiver_that_fails_or_hangs_gets_the_same_event_again() {
    let pki = Pki::new().unwrap();
    let failing = receiver(&pki, &[Reply::Status(500)]);
    let hanging = receiver(&pki, &[Reply::Hang]);
    let d = Bftpd::start_with(|dir| config(dir, &pki, "")).unwrap();
    let id = cancelled_job(
        &d,
        None,
        &[&failing.http_url("/a"), &hanging.http_url("/b")],
    );
    let a = wait_for(&failing, 2, Duration::from_secs(30), &d);
    let b = wait_for(&hanging, 2, Duration::from_secs(30), &d);
    let want = format!("job-{id}-final");
    for r in a.iter().chain(&b) {
        assert_eq!(header(r, "bftp-event-id"), want);
    }
    let v = wait_deliveries(&d, id, |ds| {
        ds.len() == 2 && ds.iter().all(|x| x["state"] == "delivered")
    });
    for dl in v["events"][0]["deliveries"].as_array().unwrap() {
        assert_eq!(dl["tries"], 2, "{dl}");
    }
}

/// The event is written with the cancel; bftpd is killed while its first delivery is in
/// flight (the receiver holds the request unanswered), before any try is recorded: after the
/// restart the receiver gets the same event again, and it is recorded delivered.
#[test]
fn a_kill9_between_the_change_and_the_delivery_loses_no_event() {
    let pki = Pki::new().unwrap();
    let rx = receiver(&pki, &[Reply::Hang]);
    let mut d = Bftpd::start_with(|dir| config(dir, &pki, "")).unwrap();
    let id = cancelled_job(&d, None, &[&rx.http_url("/in")]);
    wait_for(&rx, 1, Duration::from_secs(20), &d);
    d.kill9();
    d.restart_after_kill9().unwrap();
    let got = wait_for(&rx, 2, Duration::from_secs(30), &d);
    for r in &got {
        assert_eq!(header(r, "bftp-event-id"), format!("job-{id}-final"));
    }
    let v = wait_deliveries(&d, id, |ds| {
        ds.first().is_some_and(|x| x["state"] == "delivered")
    });
    assert_eq!(
        v["events"][0]["deliveries"][0]["tries"], 1,
        "the cut try was never recorded"
    );
}

#[test]
fn bftp_events_shows_only_the_callers_own_events() {
    let pki = Pki::new().unwrap();
    let d = Bftpd::start_with(|dir| config(dir, &pki, "")).unwrap();
    let a = cancelled_job(&d, Some(ALICE), &[]);
    let b = cancelled_job(&d, Some(BOB), &[]);
    let ids = |user: Option<&str>, args: &[&str]| -> Vec<String> {
        let mut all = vec!["--json", "events"];
        all.extend_from_slice(args);
        let o = d.bftp_env(user, &all, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(ids(Some(ALICE), &[]), [format!("job-{a}-final")]);
    assert_eq!(ids(Some(BOB), &[]), [format!("job-{b}-final")]);
    let o = d.bftp_env(Some(BOB), &["events", "--all"], &[]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "bob read every event: {}",
        text(&o)
    );
    assert_eq!(
        ids(None, &["--all"]),
        [format!("job-{a}-final"), format!("job-{b}-final")]
    );
    // From a sequence number on.
    let o = d.bftp(&["--json", "events", "--all"]);
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    let after = first["seq"].to_string();
    assert_eq!(
        ids(None, &["--all", "--after", &after]),
        [format!("job-{b}-final")]
    );
    // Followed: an event written later arrives on the open stream.
    let mut follow = std::process::Command::new(bftp_tests::daemon::bin("bftp"))
        .args(["--socket"])
        .arg(d.socket())
        .args(["--json", "events", "--all", "--follow", "--after", &after])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = follow.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(out)) {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let c = cancelled_job(&d, None, &[]);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let Ok(l) = lines.recv_timeout(Duration::from_secs(20)) else {
            break;
        };
        let v: Value = serde_json::from_str(&l).unwrap();
        seen.push(v["id"].as_str().unwrap().to_string());
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(seen, [format!("job-{b}-final"), format!("job-{c}-final")]);
}

#[test]
fn status_shows_a_given_up_delivery_and_why() {
    let pki = Pki::new().unwrap();
    let rx = receiver(&pki, &[Reply::Status(404)]);
    let d = Bftpd::start_with(|dir| config(dir, &pki, "")).unwrap();
    let id = cancelled_job(&d, None, &[&rx.http_url("/gone")]);
    let v = wait_deliveries(&d, id, |ds| {
        ds.first().is_some_and(|x| x["state"] == "gave_up")
    });
    let dl = &v["events"][0]["deliveries"][0];
    assert_eq!(dl["tries"], 1);
    let why = dl["last_error"].as_str().unwrap();
    assert!(why.contains("404"), "{why}");
    let o = d.bftp(&["status", &id.to_string()]);
    let t = text(&o);
    assert!(
        t.contains("webhook") && t.contains("gave_up") && t.contains("404"),
        "{t}"
    );
    assert_eq!(rx.count(), 1, "a permanent answer is not tried again");
}

/// A file the source refuses for good (550) is `member.failed` as soon as its ledger says so,
/// then the job's `job.finished`: both to the job's webhook, each signed with its own id.
#[test]
fn a_file_failed_permanently_gives_member_failed() {
    use bftp_tests::files::content;
    use bftp_tests::jobs::{submit, wait_final};
    use bftp_tests::{FtpOptions, FtpServer, ServerKind};
    let pki = Pki::new().unwrap();
    let rx = receiver(&pki, &[]);
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for n in ["a", "b"] {
        src.put_file(&format!("out/{n}.dat"), &content(n, 2_000))
            .unwrap();
    }
    // The session runs as bftp-ftp: mode 000 makes RETR of b.dat fail with 550.
    std::fs::set_permissions(
        src.path("out/b.dat"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(|dir| config(dir, &pki, "[ftp]\nreply_timeout = \"3s\"\n")).unwrap();
    let hook = rx.http_url("/in");
    let id = submit(&d, &src, &dst, "out/*.dat", "in/", &["--notify", &hook]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    let got = wait_for(&rx, 2, Duration::from_secs(20), &d);
    let mut ids: Vec<&str> = got.iter().map(|r| header(r, "bftp-event-id")).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            format!("job-{id}-final"),
            format!("job-{id}-member-1-failed")
        ]
    );
    let failed = got
        .iter()
        .find(|r| header(r, "bftp-event-type") == "member.failed")
        .map(body)
        .unwrap();
    assert_eq!(failed["data"]["member"]["name"], "b.dat", "{failed:#}");
    assert_eq!(
        failed["data"]["member"]["state"], "failed_permanent",
        "{failed:#}"
    );
    for r in &got {
        verify(r, &webhook_key(&d), Duration::from_secs(300)).unwrap();
    }
}

/// A watch's poll that delivers a file gives `watch.delivered` (besides its job's
/// `job.finished`) to the watch's webhook.
#[test]
fn a_watch_delivery_gives_watch_delivered() {
    use bftp_tests::files::content;
    use bftp_tests::watch::{add, wait_for};
    use bftp_tests::{FtpOptions, FtpServer, ServerKind};
    let pki = Pki::new().unwrap();
    let rx = receiver(&pki, &[]);
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("out/x.csv", &content("x", 1_000)).unwrap();
    let d = Bftpd::start_with(|dir| config(dir, &pki, "")).unwrap();
    let hook = rx.http_url("/w");
    let w = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        serde_json::json!({"settle": "0s", "job": {"notify": [hook]}}),
    );
    wait_for(&d, w, Duration::from_secs(30), "x.csv delivered", |v| {
        v["delivered"].as_u64() == Some(1)
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let delivered = loop {
        let got = rx.received();
        if let Some(r) = got
            .iter()
            .find(|r| header(r, "bftp-event-type") == "watch.delivered")
        {
            break body(r);
        }
        assert!(
            Instant::now() < deadline,
            "no watch.delivered\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(delivered["watch"], w, "{delivered:#}");
    assert_eq!(delivered["data"]["delivered"], 1, "{delivered:#}");
    assert_eq!(delivered["data"]["files"], serde_json::json!(["x.csv"]));
    let job = delivered["job"].as_u64().unwrap();
    assert_eq!(delivered["id"], format!("watch-{w}-job-{job}-delivered"));
}
