//! Benchmark of webhook delivery (issue 31): N finished one-file jobs, each with a webhook
//! target and a mailbox in its `--notify`; events delivered per second and the latency from a
//! job's finish to the receipt of its event, against the mailed report of the same jobs to
//! the SMTP sink in the same run, side by side. Run with
//!   cargo build --release --workspace --bins
//!   BFTP_TEST_PROFILE=release cargo run --release -p bftp-tests --bin bench-hooks [-- --jobs N]
//!
//! Two real FTP servers on loopback (source Pure-FTPd on 127.0.0.2, destination proFTPD on
//! 127.0.0.3, as in bench-jobs), N small files (`--jobs N`, default 10,000, or
//! `BENCH_HOOKS_JOBS`; `--quick` is 500). The webhook receiver is the tests' HTTPS receiver
//! (`bftp_tests::webhook`, a certificate from the test CA, which `[webhooks] ca_files` names),
//! the mail goes to aiosmtpd (`bftp_tests::smtp`). bftpd runs with `[policy] allow_loopback
//! = true`, a JSON log, `[scheduler] max_running_jobs = --running` (default 32). All jobs
//! are submitted with one start time in the future, so that the queue is whole before the
//! first is due; then the run lasts until every job's `job.finished` event and report have
//! arrived (bounded by `--timeout S`), or, with `--mail-grace S`, until every event and S
//! seconds more (a report not arrived by then counts as later than any that did).
//!
//! A job's finish time is the time of bftpd's `attempt over` log line for it (written after
//! the transaction that finishes the job and writes its event and its report's outbox entry;
//! microseconds), and, as a cross-check, `finished_at` of its status (whole seconds, so the
//! latency from it is up to 1 s longer). An event's receipt is the receiver's arrival time of
//! its first request (`Bftp-Event-Id: job-ID-final`); a report's is the modify time of its
//! file in the sink's spool (its Message-ID names the job).
//!
//! Measured per channel: how many arrived, the rate (arrivals per second over the span from
//! the first job's finish to the last arrival, and over the arrivals' own span), the latency
//! p50/p99/max, and the jobs' own finish rate, which bounds both. Checked: every job
//! succeeded; every event arrived, is a `bftp.event.v1` `job.finished` of its job, and its
//! signature verifies with the daemon's key file; every report arrived.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::env_or;
use bftp_tests::daemon::{http, Bftpd};
use bftp_tests::pki::Pki;
use bftp_tests::webhook::{verify, Receiver};
use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};

const SRC_DIR: &str = "out";
const DST_DIR: &str = "in";
const PASSIVE_PORTS: u16 = 256;
const SUBMITTERS: usize = 16;
const MAILBOX: &str = "bench@bftp-test.invalid";

struct Args {
    jobs: usize,
    running: usize,
    timeout: Option<u64>,
    /// How long to go on waiting for reports once every event is in; `None`: until all.
    mail_grace: Option<u64>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        jobs: env_or("BENCH_HOOKS_JOBS", 10_000),
        running: 32,
        timeout: None,
        mail_grace: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--jobs" => a.jobs = val()?.parse()?,
            "--quick" => a.jobs = 500,
            "--running" => a.running = val()?.parse()?,
            "--timeout" => a.timeout = Some(val()?.parse()?),
            "--mail-grace" => a.mail_grace = Some(val()?.parse()?),
            "-h" | "--help" => {
                println!("bench-hooks [--jobs N | --quick] [--running M] [--timeout SECS] [--mail-grace SECS]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    ensure!(
        a.jobs > 0 && a.running > 0,
        "--jobs and --running must be > 0"
    );
    Ok(a)
}

fn name(i: usize) -> String {
    format!("f-{i:06}.bin")
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn rfc3339_secs(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

fn parse_time(s: &str) -> Option<f64> {
    humantime::parse_rfc3339_weak(s).ok().map(epoch)
}

fn submit_all(
    sock: &Path,
    src: &FtpServer,
    dst: &FtpServer,
    hook: &str,
    jobs: usize,
    start: &str,
) -> Result<Vec<u64>> {
    let next = AtomicUsize::new(0);
    let ids: Vec<AtomicU64> = (0..jobs).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..SUBMITTERS)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= jobs {
                            return Ok(());
                        }
                        let body = serde_json::json!({
                            "source": {"host": src.host().to_string(), "port": src.port(),
                                "user": src.user(), "password": src.password(),
                                "path": format!("{SRC_DIR}/{}", name(i))},
                            "destination": {"host": dst.host().to_string(), "port": dst.port(),
                                "user": dst.user(), "password": dst.password(),
                                "path": format!("{DST_DIR}/")},
                            "start": start,
                            "notify": [hook, MAILBOX],
                            "retry": {"first_interval": "2s", "cap": "10s"},
                        })
                        .to_string();
                        let key = format!("bench-hooks-{i}");
                        let (status, resp) = http(
                            sock,
                            "POST",
                            "/v1/jobs",
                            Some(&body),
                            &[("Idempotency-Key", &key)],
                        )?;
                        ensure!(status == 201, "submit {i}: {status} {resp}");
                        let v: serde_json::Value = serde_json::from_str(&resp)?;
                        ids[i].store(
                            v["job"]["id"].as_u64().context("no job id")?,
                            Ordering::Relaxed,
                        );
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("submitter panicked")?;
        }
        Ok(())
    })?;
    Ok(ids.into_iter().map(AtomicU64::into_inner).collect())
}

/// Each job's last `attempt over` log line's time (Unix seconds).
fn finish_times_from_log(logs: &str) -> HashMap<u64, f64> {
    let mut out = HashMap::new();
    for line in logs.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["fields"]["message"] != "attempt over" {
            continue;
        }
        if let (Some(job), Some(t)) = (
            v["fields"]["job"].as_u64(),
            v["timestamp"].as_str().and_then(parse_time),
        ) {
            out.insert(job, t);
        }
    }
    out
}

/// The job a report is about, from its Message-ID `<bftp.job-ID.TIME@...>`.
fn report_job(message: &str) -> Option<u64> {
    let at = message.find("<bftp.job-")? + "<bftp.job-".len();
    let rest = &message[at..];
    rest[..rest.find('.')?].parse().ok()
}

struct Channel {
    name: &'static str,
    /// Job id -> arrival (Unix seconds), first arrival only.
    arrivals: HashMap<u64, f64>,
}

struct Stats {
    count: usize,
    rate_from_first_finish: f64,
    rate_own_span: f64,
    p50: f64,
    p99: f64,
    max: f64,
    p99_status: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn stats(
    ch: &Channel,
    finish_log: &HashMap<u64, f64>,
    finish_status: &HashMap<u64, f64>,
    first_finish: f64,
) -> Stats {
    // A job whose message has not arrived counts as later than everything that did.
    let mut lat: Vec<f64> = finish_log
        .iter()
        .map(|(job, f)| ch.arrivals.get(job).map_or(f64::INFINITY, |at| at - f))
        .collect();
    lat.sort_by(f64::total_cmp);
    let mut lat_status: Vec<f64> = finish_status
        .iter()
        .map(|(job, f)| ch.arrivals.get(job).map_or(f64::INFINITY, |at| at - f))
        .collect();
    lat_status.sort_by(f64::total_cmp);
    let first = ch.arrivals.values().copied().fold(f64::MAX, f64::min);
    let last = ch.arrivals.values().copied().fold(f64::MIN, f64::max);
    let n = ch.arrivals.len();
    Stats {
        count: n,
        rate_from_first_finish: n as f64 / (last - first_finish).max(1e-9),
        rate_own_span: n as f64 / (last - first).max(1e-9),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or(f64::NAN),
        p99_status: percentile(&lat_status, 0.99),
    }
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let a = parse_args()?;
    let n = a.jobs;
    println!(
        "bench-hooks: {n} one-file jobs, each notifying a webhook (HTTPS) and a mailbox; \
         max_running_jobs {}; bftpd profile {}",
        a.running,
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_default()
    );

    let src = FtpServer::start(
        ServerKind::PureFtpd,
        FtpOptions {
            passive_ports: PASSIVE_PORTS,
            ..FtpOptions::default()
        },
    )?;
    let dst = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            host: std::net::Ipv4Addr::new(127, 0, 0, 3),
            passive_ports: PASSIVE_PORTS,
            ..FtpOptions::default()
        },
    )?;
    for i in 0..n {
        src.put_file(
            &format!("{SRC_DIR}/{}", name(i)),
            &bftp_tests::bench::contents(i, 1024),
        )?;
    }
    dst.mkdir(DST_DIR)?;

    let pki = Pki::new()?;
    let receiver = Receiver::start(&pki)?;
    let sink = SmtpSink::start()?;
    let hook = receiver.https_url("/hook?token=bench");
    let running = a.running;
    let ca = pki.ca_file();
    let d = Bftpd::start_with(|dir| {
        let extra = format!(
            "[webhooks]\nca_files = {{ \"127.0.0.1\" = \"{}\" }}\n\
             [scheduler]\nmax_running_jobs = {running}\n\
             [ftp]\nmax_connections_per_host = {}\n",
            ca.display(),
            2 * running + 8
        );
        Bftpd::mail_config(dir, sink.port(), &extra).replace(
            "[log]\nlevel = \"debug\"\n",
            "[log]\nformat = \"json\"\nlevel = \"info\"\n",
        )
    })?;
    let sock = d.socket().to_path_buf();

    // The submit phase takes about 3 ms a job.
    let start_in = (n as u64 / 200).max(10);
    let due = epoch(SystemTime::now()) as u64 + start_in;
    let t_submit = Instant::now();
    let ids = submit_all(&sock, &src, &dst, &hook, n, &rfc3339_secs(due))?;
    println!(
        "submitted {n} jobs in {:.1} s; all due at {}",
        t_submit.elapsed().as_secs_f64(),
        rfc3339_secs(due)
    );
    ensure!(
        epoch(SystemTime::now()) < due as f64,
        "the submit phase overran the common start time"
    );

    // The run: until every event and every report has arrived.
    let limit = Duration::from_secs(a.timeout.unwrap_or((n as u64 / 5).max(300) + start_in));
    let t0 = Instant::now();
    let mut last_print = Instant::now();
    let mut events_done: Option<Instant> = None;
    loop {
        let (events, mails) = (receiver.count(), sink.count());
        if events >= n && mails >= n {
            break;
        }
        if events >= n {
            let since = *events_done.get_or_insert_with(Instant::now);
            if a.mail_grace
                .is_some_and(|g| since.elapsed() >= Duration::from_secs(g))
            {
                eprintln!("  every event is in; stopped waiting for reports at {mails} of {n}");
                break;
            }
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            eprintln!(
                "  {:6.1} s: {events} events, {mails} reports arrived",
                t0.elapsed().as_secs_f64()
            );
        }
        if t0.elapsed() > limit {
            bail!("not done after {limit:?}: {events} events, {mails} reports of {n}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A repeated delivery would come now; count it.
    std::thread::sleep(Duration::from_secs(1));

    // Finish times.
    let finish_log = finish_times_from_log(&d.logs());
    let mut finish_status = HashMap::new();
    for id in &ids {
        let (st, body) = http(&sock, "GET", &format!("/v1/jobs/{id}"), None, &[])?;
        ensure!(st == 200, "job {id}: {st}");
        let j: serde_json::Value = serde_json::from_str(&body)?;
        ensure!(
            j["state"] == "finished" && j["outcome"] == "succeeded",
            "job {id} did not succeed: {}",
            j["outcome"]
        );
        let at = j["finished_at"]
            .as_str()
            .and_then(parse_time)
            .context("finished_at")?;
        finish_status.insert(*id, at);
    }
    ensure!(
        ids.iter().all(|id| finish_log.contains_key(id)),
        "{} of {n} jobs have an `attempt over` log line",
        finish_log.len()
    );
    let first_finish = ids
        .iter()
        .filter_map(|id| finish_log.get(id))
        .copied()
        .fold(f64::MAX, f64::min);
    let last_finish = ids
        .iter()
        .filter_map(|id| finish_log.get(id))
        .copied()
        .fold(f64::MIN, f64::max);

    // The events: one job.finished per job, signed.
    let key = std::fs::read(d.state_dir().join("webhook.key"))?;
    let key = key.trim_ascii();
    let mut hooks = Channel {
        name: "webhook (HTTPS)",
        arrivals: HashMap::new(),
    };
    let mut repeats = 0;
    for r in receiver.received() {
        let id = r.header("bftp-event-id").unwrap_or("").to_string();
        let job: u64 = id
            .strip_prefix("job-")
            .and_then(|s| s.strip_suffix("-final"))
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("an event that is no job's end: {id:?}"))?;
        ensure!(r.header("bftp-event-type") == Some("job.finished"), "{id}");
        verify(&r, key, Duration::from_secs(600)).map_err(|e| anyhow::anyhow!("{id}: {e}"))?;
        let body: serde_json::Value = serde_json::from_slice(&r.body)?;
        ensure!(
            body["schema"] == "bftp.event.v1" && body["job"] == job,
            "{id}: {body}"
        );
        // In arrival order: the first arrival stays.
        match hooks.arrivals.entry(job) {
            std::collections::hash_map::Entry::Occupied(_) => repeats += 1,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(epoch(r.at));
            }
        }
    }
    let mut mail = Channel {
        name: "mail (SMTP sink)",
        arrivals: HashMap::new(),
    };
    for (at, message) in sink.arrivals() {
        let job = report_job(&message).context("a message without a report's Message-ID")?;
        mail.arrivals.entry(job).or_insert(epoch(at));
    }
    ensure!(
        hooks.arrivals.len() == n,
        "{} distinct events",
        hooks.arrivals.len()
    );
    ensure!(
        mail.arrivals.len() == n || a.mail_grace.is_some(),
        "{} distinct reports",
        mail.arrivals.len()
    );

    let h = stats(&hooks, &finish_log, &finish_status, first_finish);
    let m = stats(&mail, &finish_log, &finish_status, first_finish);
    let finish_rate = n as f64 / (last_finish - first_finish).max(1e-9);
    println!();
    println!(
        "| {:<48} | {:>18} | {:>18} |",
        "measure", hooks.name, mail.name
    );
    println!("|{}|{}|{}|", "-".repeat(50), "-".repeat(20), "-".repeat(20));
    let row = |k: &str, a: String, b: String| println!("| {k:<48} | {a:>18} | {b:>18} |");
    row(
        "arrived (one per job)",
        format!("{} of {n}", h.count),
        format!("{} of {n}", m.count),
    );
    row(
        "per second, first finish -> last arrival",
        format!("{:.1}", h.rate_from_first_finish),
        format!("{:.1}", m.rate_from_first_finish),
    );
    row(
        "per second, first -> last arrival",
        format!("{:.1}", h.rate_own_span),
        format!("{:.1}", m.rate_own_span),
    );
    let ms = |s: f64| {
        if s.is_finite() {
            format!("{:.0} ms", s * 1e3)
        } else {
            "not arrived".to_string()
        }
    };
    row("latency finish -> receipt p50", ms(h.p50), ms(m.p50));
    row("latency finish -> receipt p99", ms(h.p99), ms(m.p99));
    row("latency finish -> receipt max", ms(h.max), ms(m.max));
    row(
        "p99 from status finished_at (whole seconds)",
        ms(h.p99_status),
        ms(m.p99_status),
    );
    println!();
    println!(
        "jobs finished at {finish_rate:.1}/s ({n} in {:.1} s), which bounds both rates; \
         {repeats} events arrived more than once",
        last_finish - first_finish
    );
    println!(
        "checked: {n} jobs succeeded; each job's job.finished event arrived, schema \
         bftp.event.v1, signature verified with the daemon's key; {} of the {n} reports arrived{}",
        m.count,
        if m.count < n {
            " (stopped waiting: --mail-grace)"
        } else {
            ""
        }
    );
    Ok(())
}
