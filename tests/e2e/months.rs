//! The store over months (issue 17): retention of old final jobs, a full disk, backup and
//! restore, against the real bftpd, real FTP servers and a real SMTP listener.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, text, Bftpd};
use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};
use serde_json::Value;

use crate::scheduler::{content, status, submit, wait_final};

/// The value of the sample line `series VALUE` of a /metrics text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn metrics(d: &Bftpd) -> String {
    let (code, body) = http(d.socket(), "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(code, 200, "{body}");
    body
}

fn keyword_hits(d: &Bftpd, k: &str) -> usize {
    let o = d.bftp(&["--json", "status", "--keyword", k]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["jobs"].as_array().map_or(0, Vec::len)
}

/// Polls `f` until it holds (bounded).
fn wait_until(d: &Bftpd, what: &str, limit: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what} not within {limit:?}\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A burst of jobs finishes and is mailed; once `keep_finished` (3 s) has passed, retention
/// removes them with everything of theirs, and nothing unfinished: a queued job (due next
/// year) and a finished job whose report is still pending stay. A removed job's request key
/// makes a new job; its keyword finds nothing.
#[test]
fn retention_removes_old_final_jobs_and_nothing_unfinished() {
    let mut sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/f.dat", &content("f", 10_000)).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(|dir| {
        Bftpd::mail_config(dir, sink.port(), "[store]\nkeep_finished = \"3s\"\n")
    })
    .unwrap();
    let queued = submit(
        &d,
        &src,
        &dst,
        "out/f.dat",
        "in/q.dat",
        &["--start", "in 300days", "--keyword", "later"],
    );
    let burst: Vec<u64> = (0..12)
        .map(|i| {
            let key = format!("burst-{i}");
            submit(
                &d,
                &src,
                &dst,
                "out/f.dat",
                &format!("in/b{i}.dat"),
                &["--keyword", "burst", "--request-key", &key],
            )
        })
        .collect();
    for &id in &burst {
        assert_eq!(
            wait_final(&d, id, Duration::from_secs(60))["outcome"],
            "succeeded"
        );
    }
    wait_until(
        &d,
        "the burst's reports delivered",
        Duration::from_secs(30),
        || {
            burst
                .iter()
                .all(|&id| status(&d, id)["report"]["state"] == "delivered")
        },
    );
    let full = metrics(&d);
    // The last job's report cannot be delivered (451, retried): it stays pending.
    sink.set_reply(Some("451 4.3.0 try again later")).unwrap();
    let pending = submit(
        &d,
        &src,
        &dst,
        "out/f.dat",
        "in/p.dat",
        &["--keyword", "pending"],
    );
    wait_final(&d, pending, Duration::from_secs(60));

    wait_until(&d, "the burst removed", Duration::from_secs(30), || {
        sample(&metrics(&d), "bftp_store_jobs_removed_total") == Some(12.0)
    });
    let after = metrics(&d);
    for &id in &burst {
        let o = d.bftp(&["status", &id.to_string()]);
        assert_eq!(
            o.status.code(),
            Some(5),
            "job {id} should be gone: {}",
            text(&o)
        );
    }
    assert_eq!(keyword_hits(&d, "burst"), 0);
    // Nothing unfinished touched, however old it is by then.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(status(&d, queued)["state"], "queued");
    let p = status(&d, pending);
    assert_eq!(
        (p["state"].as_str(), p["report"]["state"].as_str()),
        (Some("finished"), Some("pending")),
        "{p:#}"
    );
    assert_eq!(keyword_hits(&d, "later") + keyword_hits(&d, "pending"), 2);
    assert_eq!(
        sample(&full, "bftp_jobs{state=\"finished\"}"),
        Some(12.0),
        "{full}"
    );
    assert_eq!(
        sample(&after, "bftp_jobs{state=\"finished\"}"),
        Some(1.0),
        "{after}"
    );
    assert!(
        sample(&after, "bftp_store_disk_bytes").is_some_and(|b| b > 0.0),
        "{after}"
    );

    // The request key of a removed job makes a new job.
    let again = submit(
        &d,
        &src,
        &dst,
        "out/f.dat",
        "in/b0.dat",
        &["--keyword", "burst", "--request-key", "burst-0"],
    );
    assert!(!burst.contains(&again) && again > pending, "{again}");
    assert_eq!(keyword_hits(&d, "burst"), 1);
    sink.stop();
}
