//! Webhooks from the durable event log (issue 31) against the real bftpd and bftp binaries:
//! events arrive signed and verify, a receiver that fails or hangs gets the same event again,
//! a kill -9 between the state change and the delivery loses no event, `bftp events` is
//! owner-scoped, and `bftp status` shows a given-up delivery with why.
//!
//! The jobs here are cancelled before they are due: a cancel makes a job final (and writes
//! its `job.cancelled` event) without an FTP server.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{text, Bftpd, ALICE, BOB};
use serde_json::Value;

const SRC: &str = "ftp://alice@127.0.0.1:2121/pub/data.bin";
const DST: &str = "ftp://bob@127.0.0.1:2122/incoming/";
const PW_ENV: &[(&str, &str)] = &[
    ("BFTP_SOURCE_PASSWORD", "src-pw-X7q"),
    ("BFTP_DEST_PASSWORD", "dst-pw-K9z"),
];

/// What the receiver answers a request with.
#[derive(Clone, Copy, Debug)]
enum Reply {
    Status(u16),
    /// No answer: the connection is held open until the sender gives up.
    Hang,
}

#[derive(Clone, Debug)]
struct Got {
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .unwrap_or("")
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A minimal HTTP/1.1 receiver on loopback: records every request, answers from its script
/// (then 200).
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    fn start(script: &[Reply]) -> Receiver {
        Receiver::on(TcpListener::bind("127.0.0.1:0").unwrap(), script)
    }

    fn on(listener: TcpListener, script: &[Reply]) -> Receiver {
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
        let (g, s) = (got.clone(), script);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (g, s) = (g.clone(), s.clone());
                std::thread::spawn(move || serve(conn, &g, &s));
            }
        });
        Receiver { addr, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn received(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    fn wait_for(&self, n: usize, limit: Duration, d: &Bftpd) -> Vec<Got> {
        let deadline = Instant::now() + limit;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} requests after {limit:?}\n{}",
                got.len(),
                d.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn serve(conn: TcpStream, got: &Mutex<Vec<Got>>, script: &Mutex<VecDeque<Reply>>) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut headers = HashMap::new();
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    got.lock().unwrap().push(Got { headers, body });
    let reply = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Status(200));
    match reply {
        Reply::Status(code) => {
            let mut w = conn;
            let _ = write!(
                w,
                "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Reply::Hang => std::thread::sleep(Duration::from_secs(30)),
    }
}

/// The test config with `[webhooks]` tuned to seconds (and `extra` after it).
fn config(dir: &std::path::Path, extra: &str) -> String {
    format!(
        "{}[webhooks]\ntimeout = \"1s\"\nretry_first = \"1s\"\nretry_max = \"2s\"\n{extra}",
        Bftpd::default_config(dir)
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

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn a_jobs_end_arrives_signed_and_the_signature_verifies() {
    let rx = Receiver::start(&[]);
    let d = Bftpd::start_with(|dir| config(dir, "")).unwrap();
    let hook = rx.url("/in?token=t0ken");
    let id = cancelled_job(&d, None, &["ops@example.org", &hook]);
    let got = rx.wait_for(1, Duration::from_secs(20), &d);
    let r = &got[0];
    let sig = r.header("bftp-signature");
    bftp_core::event::verify(
        sig,
        &webhook_key(&d),
        &r.body,
        now_secs(),
        Duration::from_secs(300),
    )
    .unwrap_or_else(|e| panic!("{sig}: {e:?}"));
    assert_eq!(r.header("bftp-event-id"), format!("job-{id}-final"));
    assert_eq!(r.header("bftp-event-type"), "job.cancelled");
    let body = r.json();
    assert_eq!(body["schema"], "bftp.event.v1");
    assert_eq!(body["id"], format!("job-{id}-final"));
    assert_eq!(body["type"], "job.cancelled");
    assert_eq!(body["job"], id);
    assert_eq!(body["data"]["summary"]["state"], "cancelled", "{body:#}");
    let raw = String::from_utf8_lossy(&r.body);
    assert!(
        !raw.contains("src-pw-X7q") && !raw.contains("dst-pw-K9z"),
        "{raw}"
    );
    // The delivery as status shows it: the target without its query.
    let v = wait_deliveries(&d, id, |ds| {
        ds.first().is_some_and(|x| x["state"] == "delivered")
    });
    let dl = &v["events"][0]["deliveries"][0];
    assert_eq!(dl["target"], rx.url("/in"));
    assert_eq!(dl["tries"], 1);
    assert!(!v.to_string().contains("t0ken"), "{v}");
}

#[test]
fn a_receiver_that_fails_or_hangs_gets_the_same_event_again() {
    let failing = Receiver::start(&[Reply::Status(500)]);
    let hanging = Receiver::start(&[Reply::Hang]);
    let d = Bftpd::start_with(|dir| config(dir, "")).unwrap();
    let id = cancelled_job(&d, None, &[&failing.url("/a"), &hanging.url("/b")]);
    let a = failing.wait_for(2, Duration::from_secs(30), &d);
    let b = hanging.wait_for(2, Duration::from_secs(30), &d);
    let want = format!("job-{id}-final");
    for r in a.iter().chain(&b) {
        assert_eq!(r.header("bftp-event-id"), want);
    }
    let v = wait_deliveries(&d, id, |ds| {
        ds.len() == 2 && ds.iter().all(|x| x["state"] == "delivered")
    });
    for dl in v["events"][0]["deliveries"].as_array().unwrap() {
        assert_eq!(dl["tries"], 2, "{dl}");
    }
}

#[test]
fn a_kill9_between_the_change_and_the_delivery_loses_no_event() {
    // The receiver's port, reserved and closed: nothing listens while the job is cancelled.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut d = Bftpd::start_with(|dir| config(dir, "")).unwrap();
    let id = cancelled_job(&d, None, &[&format!("http://{port}/in")]);
    d.kill9();
    let rx = Receiver::on(TcpListener::bind(port).unwrap(), &[]);
    d.restart_after_kill9().unwrap();
    let got = rx.wait_for(1, Duration::from_secs(30), &d);
    assert_eq!(got[0].header("bftp-event-id"), format!("job-{id}-final"));
    wait_deliveries(&d, id, |ds| {
        ds.first().is_some_and(|x| x["state"] == "delivered")
    });
}

#[test]
fn bftp_events_shows_only_the_callers_own_events() {
    let d = Bftpd::start_with(|dir| config(dir, "")).unwrap();
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
}

#[test]
fn status_shows_a_given_up_delivery_and_why() {
    let rx = Receiver::start(&[Reply::Status(404)]);
    let d = Bftpd::start_with(|dir| config(dir, "")).unwrap();
    let id = cancelled_job(&d, None, &[&rx.url("/gone")]);
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
    assert_eq!(
        rx.received().len(),
        1,
        "a permanent answer is not tried again"
    );
}

/// A file the source refuses for good (550) is `member.failed` as soon as its ledger says so,
/// then the job's `job.finished`: both to the job's webhook, each signed with its own id.
#[test]
fn a_file_failed_permanently_gives_member_failed() {
    use bftp_tests::files::content;
    use bftp_tests::jobs::{submit, wait_final};
    use bftp_tests::{FtpOptions, FtpServer, ServerKind};
    let rx = Receiver::start(&[]);
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
    let d = Bftpd::start_with(|dir| config(dir, "[ftp]\nreply_timeout = \"3s\"\n")).unwrap();
    let hook = rx.url("/in");
    let id = submit(&d, &src, &dst, "out/*.dat", "in/", &["--notify", &hook]);
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    let got = rx.wait_for(2, Duration::from_secs(20), &d);
    let mut ids: Vec<&str> = got.iter().map(|r| r.header("bftp-event-id")).collect();
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
        .find(|r| r.header("bftp-event-type") == "member.failed")
        .unwrap()
        .json();
    assert_eq!(failed["data"]["member"]["name"], "b.dat", "{failed:#}");
    assert_eq!(
        failed["data"]["member"]["state"], "failed_permanent",
        "{failed:#}"
    );
    for r in &got {
        bftp_core::event::verify(
            r.header("bftp-signature"),
            &webhook_key(&d),
            &r.body,
            now_secs(),
            Duration::from_secs(300),
        )
        .unwrap();
    }
}

/// A watch's poll that delivers a file gives `watch.delivered` (besides its job's
/// `job.finished`) to the watch's webhook.
#[test]
fn a_watch_delivery_gives_watch_delivered() {
    use bftp_tests::files::content;
    use bftp_tests::watch::{add, wait_for};
    use bftp_tests::{FtpOptions, FtpServer, ServerKind};
    let rx = Receiver::start(&[]);
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("out/x.csv", &content("x", 1_000)).unwrap();
    let d = Bftpd::start_with(|dir| config(dir, "")).unwrap();
    let hook = rx.url("/w");
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
            .find(|r| r.header("bftp-event-type") == "watch.delivered")
        {
            break r.json();
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
