//! Looking after a PostgreSQL store (issue 27): the database away, retention, backup and
//! restore, against real bftpd nodes and a real PostgreSQL.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, text, Bftpd};
use bftp_tests::postgres;
use serde_json::Value;

use crate::pg_nodes::node_config;
use crate::service::Notify;

/// `bftp submit` (a job due next year) on `d`: the exit code and the output.
fn try_submit(d: &Bftpd, name: &str) -> (Option<i32>, String) {
    let o = d.bftp_env(
        None,
        &[
            "submit",
            "ftp://u@127.0.0.1:2121/out/a.bin",
            &format!("ftp://u@127.0.0.1:2122/in/{name}"),
            "--start",
            "in 300days",
        ],
        &[("BFTP_SOURCE_PASSWORD", "pw"), ("BFTP_DEST_PASSWORD", "pw")],
    );
    (o.status.code(), text(&o))
}

/// While the database is down, a submit is refused with HTTP 503 and exit code 10, saying the
/// store cannot be reached and nothing was stored (it was HTTP 500 "internal error", exit 1).
/// A node started while the database is down does not exit: it tells systemd it waits (no
/// READY), stops cleanly at SIGTERM, and once the database is back becomes ready by itself.
#[test]
fn with_the_database_away_submits_get_503_and_a_starting_node_waits_for_it() {
    // A cluster of this test's own: it is stopped.
    let cluster = postgres::Cluster::private();
    let url = cluster.fresh_database();
    let db = postgres::Cluster::db_of(&url).to_string();
    let a = Bftpd::start_with(node_config(&url, "a", None)).unwrap();
    let key = a.state_dir().join("secret.key");
    let (code, out) = try_submit(&a, "before.bin");
    assert_eq!(code, Some(0), "{out}");

    cluster.stop("fast").unwrap();
    let (code, out) = try_submit(&a, "away.bin");
    assert_eq!(code, Some(10), "{out}\n{}", a.logs());
    assert!(
        out.contains("cannot be reached") && out.contains("nothing was stored"),
        "{out}"
    );
    assert!(out.contains("HTTP 503"), "{out}");
    let o = a.bftp(&["--json", "status"]);
    assert_eq!(o.status.code(), Some(10), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(v["kind"], "store_unavailable", "{v:#}");

    // A node starting now waits, says so to systemd, and is not ready.
    let mut b = Bftpd::prepare(node_config(&url, "b", Some(&key))).unwrap();
    let notify = Notify::bind(b.dir());
    b.set_env("NOTIFY_SOCKET", notify.path.to_str().unwrap());
    b.spawn().unwrap();
    let first = notify.recv(Duration::from_secs(30));
    let first = first.unwrap_or_else(|| panic!("no word to systemd: {}", b.logs()));
    assert!(
        first.contains("STATUS=waiting for the job store's database")
            && first.contains("EXTEND_TIMEOUT_USEC=")
            && !first.contains("READY=1"),
        "{first}"
    );
    let second = notify.recv(Duration::from_secs(30)).unwrap_or_default();
    assert!(second.contains("STATUS=waiting"), "{second}\n{}", b.logs());
    assert!(http(b.socket(), "GET", "/v1/health", None, &[]).is_err());
    // SIGTERM while it waits: a clean, prompt exit.
    let stopped = Instant::now();
    let st = b.terminate(Duration::from_secs(10)).unwrap();
    assert!(st.success(), "{st}: {}", b.logs());
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    assert!(
        b.logs().contains("stopped while waiting for the job store"),
        "{}",
        b.logs()
    );

    // Started again while the database is down; the database comes back: it becomes ready.
    b.spawn().unwrap();
    assert!(notify
        .recv(Duration::from_secs(30))
        .is_some_and(|m| m.contains("STATUS=waiting")));
    cluster.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match notify.recv(Duration::from_secs(5)) {
            Some(m) if m.contains("READY=1") => break,
            _ => assert!(Instant::now() < deadline, "never ready: {}", b.logs()),
        }
    }
    b.wait_ready(Duration::from_secs(10)).unwrap();
    let (code, out) = try_submit(&b, "after.bin");
    assert_eq!(code, Some(0), "{out}\n{}", b.logs());
    // The refused submit left nothing behind.
    assert_eq!(cluster.psql(&db, "SELECT count(*) FROM jobs").unwrap(), "2");
}
