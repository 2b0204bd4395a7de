//! Running it as a service (issue 6): Prometheus metrics, JSON logs carrying the job id,
//! the CLI's completions and man page, and `bftp status --watch`.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{bin, http, text, Bftpd};
use bftp_tests::jobs::{submit, wait_final};
use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};
use serde_json::Value;

const JOB_WAIT: Duration = Duration::from_secs(60);

/// Samples of the exposition text: `name{labels}` to value. Comments are checked for form.
fn scrape(d: &Bftpd) -> HashMap<String, f64> {
    let (status, body) = http(d.socket(), "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            if l.starts_with('#') {
                assert!(
                    l.starts_with("# HELP ") || l.starts_with("# TYPE "),
                    "not exposition format 0.0.4: {l}"
                );
                return None;
            }
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l}"));
            Some((
                series.to_string(),
                value.parse().unwrap_or_else(|_| panic!("{l}")),
            ))
        })
        .collect()
}

fn sample(m: &HashMap<String, f64>, series: &str) -> f64 {
    *m.get(series)
        .unwrap_or_else(|| panic!("no {series} in {m:#?}"))
}

fn servers() -> (FtpServer, FtpServer) {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    dst.mkdir("in").unwrap();
    (src, dst)
}

#[test]
fn metrics_count_a_job_from_submit_to_its_delivered_report() {
    let (src, dst) = servers();
    let data = vec![7u8; 54_321];
    src.put_file("out/f.bin", &data).unwrap();
    let sink = SmtpSink::start().unwrap();
    let d = Bftpd::start_with(|dir| Bftpd::mail_config(dir, sink.port(), "")).unwrap();

    let before = scrape(&d);
    for state in ["queued", "running", "finished", "cancelled"] {
        assert_eq!(
            sample(&before, &format!("bftp_jobs{{state=\"{state}\"}}")),
            0.0
        );
    }
    assert_eq!(sample(&before, "bftp_attempts_started_total"), 0.0);
    assert_eq!(sample(&before, "bftp_transfer_duration_seconds_count"), 0.0);
    // How copies travelled (issue 29): every path's series from the start.
    for path in ["fxp", "fxp_roles_swapped", "relay"] {
        assert_eq!(
            sample(&before, &format!("bftp_copies_total{{path=\"{path}\"}}")),
            0.0
        );
    }
    assert_eq!(sample(&before, "bftp_relay_bytes_total"), 0.0);

    let id = submit(&d, &src, &dst, "out/f.bin", "in/", &[]);
    let v = wait_final(&d, id, JOB_WAIT);
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    sink.wait_for(1, JOB_WAIT).unwrap();
    // The report is recorded as delivered just after the relay took it.
    let deadline = Instant::now() + JOB_WAIT;
    let m = loop {
        let m = scrape(&d);
        if sample(&m, "bftp_reports_total{result=\"delivered\"}") == 1.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "report not counted: {m:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(sample(&m, "bftp_jobs{state=\"finished\"}"), 1.0);
    assert_eq!(sample(&m, "bftp_jobs{state=\"queued\"}"), 0.0);
    assert_eq!(sample(&m, "bftp_jobs{state=\"running\"}"), 0.0);
    assert_eq!(sample(&m, "bftp_attempts_started_total"), 1.0);
    assert_eq!(sample(&m, "bftp_files_total{result=\"succeeded\"}"), 1.0);
    assert_eq!(
        sample(&m, "bftp_files_total{result=\"failed_permanent\"}"),
        0.0
    );
    assert_eq!(sample(&m, "bftp_transferred_bytes_total"), 54_321.0);
    assert_eq!(sample(&m, "bftp_transfer_duration_seconds_count"), 1.0);
    assert_eq!(
        sample(&m, "bftp_transfer_duration_seconds_bucket{le=\"+Inf\"}"),
        1.0
    );
    assert!(sample(&m, "bftp_transfer_duration_seconds_sum") > 0.0);
    assert_eq!(
        sample(&m, "bftp_attempt_failures_total{class=\"requeued\"}"),
        0.0
    );
    assert_eq!(sample(&m, "bftp_outbox_pending"), 0.0);
    assert_eq!(sample(&m, "bftp_reports_total{result=\"gave_up\"}"), 0.0);
    // Nothing about the job itself: no host, user or path in any series.
    let body = http(d.socket(), "GET", "/metrics", None, &[]).unwrap().1;
    for secret in ["127.0.0.1", "f.bin", src.password(), "bftp-ftp"] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
}

#[test]
fn metrics_count_a_retry_and_a_permanent_failure() {
    let (src, dst) = servers();
    let d = Bftpd::start().unwrap();
    // No such file: the copy fails for good. A wrong password: the login is refused, which
    // fails the job as a whole.
    let missing = submit(&d, &src, &dst, "out/none.bin", "in/", &[]);
    let v = wait_final(&d, missing, JOB_WAIT);
    assert_eq!(v["outcome"], "failed", "{v:#}");
    let m = scrape(&d);
    assert_eq!(sample(&m, "bftp_attempts_started_total"), 1.0);
    assert_eq!(
        sample(&m, "bftp_files_total{result=\"failed_permanent\"}")
            + sample(&m, "bftp_attempt_failures_total{class=\"job_permanent\"}"),
        1.0,
        "{m:#?}"
    );
    assert_eq!(sample(&m, "bftp_files_total{result=\"succeeded\"}"), 0.0);
    assert_eq!(sample(&m, "bftp_jobs{state=\"finished\"}"), 1.0);
    // Mail is off: the report stays in the outbox.
    assert_eq!(sample(&m, "bftp_outbox_pending"), 1.0);
}

/// The job id of a JSON log line: a field of the event or of a span it is in.
fn job_of(line: &Value) -> Option<u64> {
    line["fields"]["job"]
        .as_u64()
        .or_else(|| line["span"]["job"].as_u64())
        .or_else(|| {
            line["spans"]
                .as_array()?
                .iter()
                .find_map(|s| s["job"].as_u64())
        })
}

#[test]
fn json_logs_carry_the_job_id_on_every_line_of_an_attempt_and_no_password() {
    let (src, dst) = servers();
    src.put_file("out/a.bin", b"aaaa").unwrap();
    src.put_file("out/b.bin", b"bbbbbbbb").unwrap();
    let sink = SmtpSink::start().unwrap();
    let d = Bftpd::start_with(|dir| {
        // The engine's phases are traced: they must carry the id too.
        Bftpd::mail_config(dir, sink.port(), "").replace(
            "[log]\nlevel = \"debug\"\n",
            "[log]\nformat = \"json\"\nlevel = \"debug,bftp_ftp=trace\"\n",
        )
    })
    .unwrap();
    let id = submit(&d, &src, &dst, "out/*.bin", "in/", &[]);
    let v = wait_final(&d, id, JOB_WAIT);
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    sink.wait_for(1, JOB_WAIT).unwrap();
    // The postman logs after recording the delivery.
    let deadline = Instant::now() + JOB_WAIT;
    while !d.logs().contains("report delivered") {
        assert!(Instant::now() < deadline, "{}", d.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs = d.logs();
    assert!(
        !logs.contains(src.password()),
        "a password in the log:\n{logs}"
    );
    let lines: Vec<Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for l in &lines {
        let target = l["target"].as_str().unwrap_or_default();
        let in_span = l["spans"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["name"] == "attempt" || s["name"] == "report")
        });
        // In a run of one job, these parts speak only of it.
        let part = ["bftpd::attempt", "bftpd::scheduler", "bftp_ftp"]
            .into_iter()
            .find(|p| target.starts_with(p));
        if part.is_some() || in_span {
            assert_eq!(job_of(l), Some(id), "a line of the job without its id: {l}");
        }
        if let Some(p) = part {
            *seen.entry(p).or_default() += 1;
        }
        if l["fields"]["message"] == "report delivered" {
            assert_eq!(l["span"]["name"], "report", "{l}");
        }
    }
    for part in ["bftpd::attempt", "bftpd::scheduler", "bftp_ftp"] {
        assert!(
            seen.get(part).is_some_and(|n| *n > 0),
            "no {part} line:\n{logs}"
        );
    }
    let started = lines
        .iter()
        .find(|l| l["fields"]["message"] == "attempt started")
        .unwrap_or_else(|| panic!("{logs}"));
    assert_eq!(started["span"]["name"], "attempt");
    assert_eq!(started["span"]["job"], id);
    assert_eq!(started["span"]["attempt"], 1);
}

#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    let run = |args: &[&str]| {
        let o = Command::new(bin("bftp"))
            .args(args)
            .env("BFTP_SOCKET", "/nonexistent/bftpd.sock")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        assert!(script.len() > 1000, "{shell}: {script}");
        for sub in ["submit", "status", "cancel", "verify", "transfer", "man"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let page = run(&["man"]);
    assert!(page.contains(".TH bftp 1"), "{page}");
    for sub in ["submit", "status", "cancel", "verify", "transfer"] {
        assert!(
            page.contains(&format!("bftp\\-{sub}(1)")),
            "no {sub}: {page}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    run(&["man", "--dir", dir.path().to_str().unwrap()]);
    let status = std::fs::read_to_string(dir.path().join("bftp-status.1")).unwrap();
    assert!(status.contains("\\-\\-watch"), "{status}");
    let o = Command::new(bin("bftp"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// `bftp --socket S ARGS` with stdout to a file (not a terminal), killed after `limit`.
fn bftp_bounded(d: &Bftpd, args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(bin("bftp"))
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "bftp {args:?} still running after {limit:?}: {}",
                std::fs::read_to_string(out.path()).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), std::fs::read_to_string(out.path()).unwrap())
}

#[test]
fn status_watch_follows_a_job_until_it_is_final() {
    let (src, dst) = servers();
    src.put_file("out/w.bin", &vec![1u8; 10_000]).unwrap();
    let d = Bftpd::start().unwrap();
    // Due a little later, so that the watch sees it queued first.
    let id = submit(&d, &src, &dst, "out/w.bin", "in/", &["--start", "in 2s"]);
    let id_s = id.to_string();
    let (code, out) = bftp_bounded(
        &d,
        &["--json", "status", &id_s, "--watch", "--interval", "200ms"],
        JOB_WAIT,
    );
    assert_eq!(code, Some(0), "{out}");
    let snapshots: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(snapshots.len() >= 2, "{out}");
    assert_eq!(snapshots[0]["state"], "queued", "{out}");
    let last = snapshots.last().unwrap();
    assert_eq!(last["state"], "finished", "{out}");
    assert_eq!(last["outcome"], "succeeded", "{out}");
    // One line per change: no two consecutive snapshots are the same.
    assert!(snapshots.windows(2).all(|w| w[0] != w[1]), "{out}");

    // A final job: one snapshot, in text, and done.
    let (code, out) = bftp_bounded(&d, &["status", &id_s, "--watch"], JOB_WAIT);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("finished"), "{out}");
    assert!(
        !out.contains('\x1b'),
        "a terminal sequence into a file: {out:?}"
    );
}
