//! Looking after a PostgreSQL store (issue 27): the database away, retention, backup and
//! restore, against real bftpd nodes and a real PostgreSQL.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, text, Bftpd};
use bftp_tests::nodes::node_config;
use bftp_tests::notify::Notify;
use bftp_tests::postgres;
use serde_json::Value;

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
    let mut answered = false;
    loop {
        match notify.recv(Duration::from_secs(5)) {
            Some(m) if m.contains("READY=1") => break,
            Some(m) if m.contains("STATUS=the job store's database") && m.contains("answered") => {
                answered = true
            }
            _ => assert!(Instant::now() < deadline, "never ready: {}", b.logs()),
        }
    }
    assert!(answered, "the waiting status was never replaced");
    b.wait_ready(Duration::from_secs(10)).unwrap();
    let (code, out) = try_submit(&b, "after.bin");
    assert_eq!(code, Some(0), "{out}\n{}", b.logs());
    // The refused submit left nothing behind.
    assert_eq!(cluster.psql(&db, "SELECT count(*) FROM jobs").unwrap(), "2");
}

/// The value of the sample line `series VALUE` of a node's /metrics text.
fn metric(d: &Bftpd, series: &str) -> f64 {
    let (code, body) = http(d.socket(), "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(code, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Retention on PostgreSQL (it did nothing there: `keep_finished` was ignored with a log
/// line): two nodes with `keep_finished = "3s"` remove the final, reported jobs with every
/// row of theirs, once each (the removed counts of the two nodes add up to the jobs), and
/// nothing unfinished: a queued job and a finished job whose report is pending stay. A
/// removed job's request key makes a new job.
#[test]
fn retention_on_postgres_removes_old_final_jobs_once_over_two_nodes() {
    use bftp_tests::files::content;
    use bftp_tests::jobs::{status, submit, wait_final};
    use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};
    let url = postgres::fresh_database();
    let db = postgres::Cluster::db_of(&url).to_string();
    let mut sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/f.dat", &content("f", 10_000)).unwrap();
    dst.mkdir("in").unwrap();
    let port = sink.port();
    let config = |node: &str, key: Option<&std::path::Path>| {
        let node_config =
            bftp_tests::nodes::node_config_plus(&url, node, key, "keep_finished = \"3s\"\n");
        move |dir: &std::path::Path| {
            node_config(dir).replace(
                &Bftpd::default_config(dir),
                &Bftpd::mail_config(dir, port, ""),
            )
        }
    };
    let a = Bftpd::start_with(config("ra", None)).unwrap();
    let key = a.state_dir().join("secret.key");
    let b = Bftpd::start_with(config("rb", Some(&key))).unwrap();
    let nodes = [&a, &b];
    let queued = submit(
        &a,
        &src,
        &dst,
        "out/f.dat",
        "in/q.dat",
        &["--start", "in 300days"],
    );
    let burst: Vec<u64> = (0..6)
        .map(|i| {
            let key = format!("burst-{i}");
            let extra = ["--keyword", "burst", "--request-key", &key];
            submit(
                nodes[i % 2],
                &src,
                &dst,
                "out/f.dat",
                &format!("in/b{i}.dat"),
                &extra,
            )
        })
        .collect();
    for &id in &burst {
        assert_eq!(
            wait_final(&a, id, Duration::from_secs(60))["outcome"],
            "succeeded"
        );
    }
    let delivered = Instant::now() + Duration::from_secs(30);
    while !burst
        .iter()
        .all(|&id| status(&a, id)["report"]["state"] == "delivered")
    {
        assert!(
            Instant::now() < delivered,
            "reports not delivered\n{}",
            a.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    sink.set_reply(Some("451 4.3.0 try again later")).unwrap();
    let pending = submit(&b, &src, &dst, "out/f.dat", "in/p.dat", &[]);
    wait_final(&b, pending, Duration::from_secs(60));

    let removed = || {
        metric(&a, "bftp_store_jobs_removed_total") + metric(&b, "bftp_store_jobs_removed_total")
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    while removed() < 6.0 {
        assert!(
            Instant::now() < deadline,
            "{} removed\n--- a ---\n{}\n--- b ---\n{}",
            removed(),
            a.logs(),
            b.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let list = burst
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    for table in [
        "jobs",
        "members",
        "history",
        "requests",
        "outbox",
        "transcripts",
    ] {
        let col = if table == "jobs" { "id" } else { "job" };
        let n = postgres::cluster()
            .psql(
                &db,
                &format!("SELECT count(*) FROM {table} WHERE {col} IN ({list})"),
            )
            .unwrap();
        assert_eq!(n, "0", "{table} keeps rows of removed jobs");
    }
    for &id in &burst {
        let o = b.bftp(&["status", &id.to_string()]);
        assert_eq!(o.status.code(), Some(5), "job {id}: {}", text(&o));
    }
    // Nothing unfinished goes, however old; no job is counted twice.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(removed(), 6.0);
    assert_eq!(status(&b, queued)["state"], "queued");
    let p = status(&a, pending);
    assert_eq!(
        (p["state"].as_str(), p["report"]["state"].as_str()),
        (Some("finished"), Some("pending")),
        "{p:#}"
    );
    let again = submit(
        &b,
        &src,
        &dst,
        "out/f.dat",
        "in/b0.dat",
        &["--keyword", "burst", "--request-key", "burst-0"],
    );
    assert!(!burst.contains(&again) && again > pending, "{again}");
    sink.stop();
}

/// `bftpd backup` of a node on PostgreSQL (it answered HTTP 500 "this store does not
/// support backup"): the directory holds a `pg_dump` of the database, the key and the config.
/// Restored as the README says (`pg_restore` into a new database, the key into the state
/// directory of a node that names it), a node starts with every job: the finished one and
/// its keyword, and the one that was running, which it takes over and finishes (so it opens
/// the passwords sealed before the backup).
#[test]
fn a_backup_of_a_postgres_node_restores_into_another_database_with_every_job() {
    use bftp_tests::files::content;
    use bftp_tests::jobs::{status, submit, wait_final};
    use bftp_tests::{FtpOptions, FtpServer, ServerKind};
    let src = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            max_rate: Some(100_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/small.dat", &content("small", 1_000))
        .unwrap();
    src.put_file("out/slow.dat", &content("slow", 400_000))
        .unwrap();
    dst.mkdir("in").unwrap();
    let url = postgres::fresh_database();
    let mut a = Bftpd::start_with(node_config(&url, "a", None)).unwrap();
    let finished = submit(
        &a,
        &src,
        &dst,
        "out/small.dat",
        "in/small.dat",
        &["--keyword", "kept"],
    );
    assert_eq!(
        wait_final(&a, finished, Duration::from_secs(60))["outcome"],
        "succeeded"
    );
    let running = submit(
        &a,
        &src,
        &dst,
        "out/slow.dat",
        "in/slow.dat",
        &["--retry-first", "1s"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(&a, running)["state"] != "running" {
        assert!(Instant::now() < deadline, "not running\n{}", a.logs());
        std::thread::sleep(Duration::from_millis(100));
    }

    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().join("b1");
    let backup = || {
        std::process::Command::new(bftp_tests::daemon::bin("bftpd"))
            .args(["backup", "--config"])
            .arg(a.config_path())
            .arg(&dir)
            .output()
            .unwrap()
    };
    let o = backup();
    assert!(o.status.success(), "{}\n{}", text(&o), a.logs());
    let answer: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(answer["jobs"], 2, "{answer:#}");
    let dump = dir.join("store/bftp.pgdump");
    assert_eq!(
        answer["database_dump"],
        dump.to_str().unwrap(),
        "{answer:#}"
    );
    assert!(dump.exists() && dir.join("secret.key").exists());
    let config = std::fs::read_to_string(dir.join("bftpd.toml")).unwrap();
    assert!(config.contains("kind = \"postgres\""), "{config}");
    let o = backup();
    assert!(
        !o.status.success() && text(&o).contains("not empty"),
        "{}",
        text(&o)
    );
    a.kill9();

    // Another database, as after losing the first: restored from the dump.
    let url2 = postgres::fresh_database();
    postgres::cluster()
        .restore(postgres::Cluster::db_of(&url2), &dump)
        .unwrap();
    let b = Bftpd::start_with(node_config(&url2, "b", Some(&dir.join("secret.key")))).unwrap();
    assert_eq!(status(&b, finished)["outcome"], "succeeded");
    let o = b.bftp(&["--json", "status", "--keyword", "kept"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(v["jobs"].as_array().map(Vec::len), Some(1), "{v:#}");
    let done = wait_final(&b, running, Duration::from_secs(60));
    assert_eq!(done["outcome"], "succeeded", "{done:#}\n{}", b.logs());
    assert_eq!(
        dst.read_file("in/slow.dat").unwrap(),
        content("slow", 400_000)
    );
    let new = submit(&b, &src, &dst, "out/small.dat", "in/new.dat", &[]);
    assert!(new > running, "{new}");
}
