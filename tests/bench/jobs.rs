//! Benchmark of the scheduler (issue 4): many queued one-file jobs between two local servers.
//! Run with
//!   cargo build --release --workspace --bins
//!   BFTP_TEST_PROFILE=release cargo run --release -p bftp-tests --bin bench-jobs
//!
//! Two real FTP servers on loopback (source Pure-FTPd on 127.0.0.2, destination proFTPD on
//! 127.0.0.3; `--src`/`--dst` choose among vsftpd, proftpd, pure-ftpd), both with their
//! transfer log (xferlog). Every job logs in to both, so the servers' login cost is part of
//! every job: the test vsftpd checks the password through PAM against /etc/shadow, whose
//! yescrypt hash costs it tens of ms of CPU per login (more than all the rest of a job), while
//! Pure-FTPd and proFTPD check a SHA-512 crypt in their own password file; hence the
//! default. The source gets N distinct small files (`--jobs N`, default 10,000; `--quick`
//! is 500; `--size B`, default 1024 bytes). A fresh release bftpd (loopback allowed,
//! `[scheduler] max_running_jobs = --running`, default 32 (a one-file job mostly waits on
//! the servers: at 16 the machine was half idle and the rate 2,548/min), and `[ftp]
//! max_connections_per_host` large enough for all of them) gets N one-file jobs through its
//! API from 16 client threads, all with the same start time in the future (`--start-in S`,
//! default N/100 s, at least 10 s), so that the whole queue is there before the first is due.
//!
//! Measured:
//! - the submit phase apart (submits/s): it is not part of the job rate;
//! - from the common due time to the moment no job is queued or running: jobs per minute
//!   (also the best 10-second window, from the destination's xferlog as it grows);
//! - bftpd's CPU (utime+stime from /proc/PID/stat, before and after the run) per job;
//! - each server's CPU (its master and every session it reaped) per job, and the machine's
//!   busy share of its CPUs over the run;
//! - bftpd's peak RSS (VmHWM, the submit phase included) and its RSS after the run;
//! - the load average before and after.
//!
//! Checked: every job finished `succeeded` with one succeeded member and one attempt; every
//! destination file byte-identical to its source; and from the servers' transfer logs that
//! each file was sent exactly once by the source and stored exactly once by the destination
//! (no job ran twice), each transfer complete. The run is bounded (`--timeout S`, default
//! max(300, N/10) s); the servers and bftpd are killed at the end whatever happens.
//!
//! `--log LEVEL` is bftpd's log level (default info, what a deployment logs).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::daemon::{http, Bftpd};
use bftp_tests::procstat::{
    cpu_jiffies, cpu_seconds, loadavg, server_cpu, server_master, status_kib,
};
use bftp_tests::{Direction, FtpOptions, FtpServer, ServerKind, XferEntry};

const SRC_DIR: &str = "out";
const DST_DIR: &str = "in";
/// Passive ports of each server.
const PASSIVE_PORTS: u16 = 256;
/// Client threads of the submit phase.
const SUBMITTERS: usize = 16;

struct Args {
    jobs: usize,
    size: usize,
    running: usize,
    start_in: Option<u64>,
    timeout: Option<u64>,
    src: ServerKind,
    dst: ServerKind,
    log: String,
    /// `sled` or `postgres` (a fresh fsync'ing PostgreSQL cluster on loopback, one node).
    store: String,
}

fn kind(name: &str) -> Result<ServerKind> {
    ServerKind::ALL
        .into_iter()
        .find(|k| k.name() == name)
        .with_context(|| format!("unknown server {name:?}: vsftpd, proftpd or pure-ftpd"))
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        jobs: 10_000,
        size: 1024,
        running: 32,
        start_in: None,
        timeout: None,
        src: ServerKind::PureFtpd,
        dst: ServerKind::Proftpd,
        log: "info".into(),
        store: "sled".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--jobs" => a.jobs = val()?.parse()?,
            "--quick" => a.jobs = 500,
            "--size" => a.size = val()?.parse()?,
            "--running" => a.running = val()?.parse()?,
            "--start-in" => a.start_in = Some(val()?.parse()?),
            "--timeout" => a.timeout = Some(val()?.parse()?),
            "--src" => a.src = kind(&val()?)?,
            "--dst" => a.dst = kind(&val()?)?,
            "--log" => a.log = val()?,
            "--store" => a.store = val()?,
            "-h" | "--help" => {
                println!(
                    "bench-jobs [--jobs N | --quick] [--size BYTES] [--running M] \
                     [--start-in SECS] [--timeout SECS] [--src KIND] [--dst KIND] [--log LEVEL] [--store sled|postgres]"
                );
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

// ---- data ----

/// The contents of file `i`: distinct per file, cheap to regenerate for the check.
fn contents(i: usize, size: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = format!("file {i}\n").into_bytes();
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size);
    out
}

fn name(i: usize) -> String {
    format!("f-{i:06}.bin")
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since the epoch (days to civil date: H. Hinnant's
/// algorithm), for the API's `start`.
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

// ---- API ----

fn submit_all(
    sock: &Path,
    src: &FtpServer,
    dst: &FtpServer,
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
                            // A server's transient refusal (421, 425) is retried within the
                            // run, not 10 minutes later; such jobs are counted.
                            "retry": {"first_interval": "2s", "cap": "10s"},
                        })
                        .to_string();
                        let key = format!("bench-jobs-{i}");
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

/// How many jobs are in `state` (at most `limit` counted). `all=true` (we run as root) makes
/// the store use its state index: without it the owner index is used and every one of the
/// caller's jobs is read, which at 4 polls/s made these polls most of bftpd's CPU.
fn count(sock: &Path, state: &str, limit: usize) -> Result<usize> {
    let (st, body) = http(
        sock,
        "GET",
        &format!("/v1/jobs?state={state}&all=true&limit={limit}"),
        None,
        &[],
    )?;
    ensure!(st == 200, "list {state}: {st} {body}");
    let v: serde_json::Value = serde_json::from_str(&body)?;
    Ok(v["jobs"].as_array().map_or(0, Vec::len))
}

fn xferlog_lines(server: &FtpServer) -> usize {
    std::fs::read(server.xferlog())
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

/// Each of `names` exactly once, complete, in `direction`; nothing else.
fn exactly_once(
    entries: &[XferEntry],
    dir: &str,
    names: &[String],
    direction: Direction,
    who: &str,
) -> Result<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut problems = Vec::new();
    for e in entries {
        if e.direction != direction {
            problems.push(format!("unexpected {:?}: {}", e.direction, e.raw));
            continue;
        }
        if !e.complete {
            problems.push(format!("incomplete: {}", e.raw));
        }
        *seen.entry(e.path.as_str()).or_default() += 1;
    }
    let mut twice = 0;
    for n in names {
        let p = format!("/{dir}/{n}");
        match seen.remove(p.as_str()) {
            Some(1) => {}
            Some(k) => {
                twice += 1;
                problems.push(format!("{p} {k} times"));
            }
            None => problems.push(format!("{p} never")),
        }
    }
    for (p, k) in seen {
        problems.push(format!("unknown path {p} ({k} times)"));
    }
    if !problems.is_empty() {
        let shown: Vec<_> = problems.iter().take(20).collect();
        bail!(
            "{who} transfer log: {} problems ({twice} files transferred more than once): {shown:#?}",
            problems.len()
        );
    }
    Ok(twice)
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let a = parse_args()?;
    let n = a.jobs;
    println!(
        "bench-jobs: {n} one-file jobs of {} bytes, {} -> {}, max_running_jobs {}, log {}",
        a.size, a.src, a.dst, a.running, a.log
    );
    let load_before = loadavg();

    // Each job's data connection takes a passive port that then sits in TIME_WAIT; with the
    // default 32 ports the source refused PASV (425) now and then, and Pure-FTPd admits only
    // half as many sessions as it has passive ports (421 at 16).
    let src = FtpServer::start(
        a.src,
        FtpOptions {
            passive_ports: PASSIVE_PORTS,
            ..FtpOptions::default()
        },
    )?;
    let dst = FtpServer::start(
        a.dst,
        FtpOptions {
            host: std::net::Ipv4Addr::new(127, 0, 0, 3),
            passive_ports: PASSIVE_PORTS,
            ..FtpOptions::default()
        },
    )?;
    let names: Vec<String> = (0..n).map(name).collect();
    for (i, nm) in names.iter().enumerate() {
        src.put_file(&format!("{SRC_DIR}/{nm}"), &contents(i, a.size))?;
    }
    dst.mkdir(DST_DIR)?;

    let running = a.running;
    let log = a.log.clone();
    let (_cluster, store) = match a.store.as_str() {
        "sled" => (None, String::new()),
        "postgres" => {
            let c =
                bftp_tests::postgres::Cluster::private_durable().map_err(|e| anyhow::anyhow!(e))?;
            let url = c.fresh_database();
            (
                Some(c),
                format!("[store]\nkind = \"postgres\"\nurl = \"{url}\"\nnode = \"bench\"\npool_size = 16\n"),
            )
        }
        other => bail!("--store {other:?}: sled or postgres"),
    };
    println!("store: {}", a.store);
    let d = Bftpd::start_with(move |dir| {
        format!(
            "{}[scheduler]\nmax_running_jobs = {running}\n[ftp]\nmax_connections_per_host = {}\n{store}",
            Bftpd::default_config(dir).replace("level = \"debug\"", &format!("level = \"{log}\"")),
            2 * running + 8,
        )
    })?;
    let sock = d.socket().to_path_buf();
    let pid = d.pid().context("bftpd pid")?;

    // The submit phase, apart.
    let start_in = a.start_in.unwrap_or((n as u64 / 100).max(10));
    let due = epoch_secs() + start_in;
    let t_submit = Instant::now();
    let ids = submit_all(&sock, &src, &dst, n, &rfc3339(due))?;
    let submit_secs = t_submit.elapsed().as_secs_f64();
    let submit_rate = n as f64 / submit_secs;
    println!("submitted {n} jobs in {submit_secs:.1} s ({submit_rate:.0}/s, {SUBMITTERS} clients)");
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let due_at = Duration::from_secs(due);
    ensure!(
        now < due_at,
        "the submit phase overran the common start time by {:.1} s: give a larger --start-in",
        (now - due_at).as_secs_f64()
    );
    ensure!(
        count(&sock, "queued", n + 1)? == n,
        "not every job is queued before the start"
    );
    let rss_queued = status_kib(pid, "VmRSS:")?;
    let src_master = server_master(&src);
    let dst_master = server_master(&dst);
    ensure!(
        src_master.is_some() && dst_master.is_some(),
        "cannot find the server processes"
    );
    // Just before the due time: the baselines.
    std::thread::sleep(due_at - now - Duration::from_millis(300).min(due_at - now));
    let cpu0 = cpu_seconds(pid, false)?;
    let src0 = server_cpu(src_master);
    let dst0 = server_cpu(dst_master);
    let (busy0, total0) = cpu_jiffies();
    let load_start = loadavg();
    let wait = due_at.saturating_sub(SystemTime::now().duration_since(UNIX_EPOCH)?);
    std::thread::sleep(wait);
    let t0 = Instant::now();

    // The run: poll cheaply until nothing is queued or running.
    let limit = Duration::from_secs(a.timeout.unwrap_or((n as u64 / 10).max(300)));
    let mut samples: Vec<(f64, usize)> = Vec::new();
    let mut last_print = Instant::now();
    let mut rss_max = 0;
    // How many jobs were running at each poll before the last file was stored.
    let mut running_samples: Vec<usize> = Vec::new();
    let elapsed = loop {
        let el = t0.elapsed();
        let stored = xferlog_lines(&dst);
        samples.push((el.as_secs_f64(), stored));
        rss_max = rss_max.max(status_kib(pid, "VmRSS:").unwrap_or(0));
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            eprintln!(
                "  {:6.1} s: {stored} stored, load {}",
                el.as_secs_f64(),
                loadavg()
            );
        }
        let now_running = count(&sock, "running", running + 1)?;
        if stored < n {
            running_samples.push(now_running);
        }
        if stored >= n && count(&sock, "queued", 1)? == 0 && now_running == 0 {
            break el;
        }
        if el > limit {
            bail!(
                "not done after {limit:?}: {stored} of {n} stored, {} queued, {} running\n{}",
                count(&sock, "queued", n)?,
                count(&sock, "running", n)?,
                d.logs()
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        // Fast enough for the end, slow enough not to load the daemon.
        std::thread::sleep(Duration::from_millis(if stored + 50 >= n {
            20
        } else {
            250
        }));
    };
    let cpu1 = cpu_seconds(pid, false)?;
    let (busy1, total1) = cpu_jiffies();
    let load_end = loadavg();
    let src1 = server_cpu(src_master);
    let dst1 = server_cpu(dst_master);
    let hwm = status_kib(pid, "VmHWM:")?;
    let rss_end = status_kib(pid, "VmRSS:")?;

    // The checks.
    let (st, body) = http(
        &sock,
        "GET",
        &format!("/v1/jobs?state=finished&all=true&limit={}", n.min(10_000)),
        None,
        &[],
    )?;
    ensure!(st == 200, "list: {st}");
    let v: serde_json::Value = serde_json::from_str(&body)?;
    let mut views: Vec<serde_json::Value> = v["jobs"].as_array().cloned().unwrap_or_default();
    if n > 10_000 {
        views.clear();
        for id in &ids {
            let (st, body) = http(&sock, "GET", &format!("/v1/jobs/{id}"), None, &[])?;
            ensure!(st == 200, "job {id}: {st}");
            views.push(serde_json::from_str(&body)?);
        }
    }
    ensure!(views.len() == n, "{} finished jobs, not {n}", views.len());
    let mut retried = 0;
    let mut retry_reasons: HashMap<String, usize> = HashMap::new();
    for j in &views {
        ensure!(
            j["state"] == "finished" && j["outcome"] == "succeeded",
            "job not succeeded: {j:#}"
        );
        let m = j["members"].as_array().context("members")?;
        ensure!(
            m.len() == 1 && m[0]["state"] == "succeeded",
            "members: {j:#}"
        );
        if j["attempts"].as_u64() != Some(1) {
            retried += 1;
            for e in j["history"].as_array().into_iter().flatten() {
                if let Some(why) = e["detail"].as_str().filter(|_| e["event"] == "requeue") {
                    *retry_reasons.entry(why.to_string()).or_insert(0usize) += 1;
                }
            }
        }
    }
    for (i, nm) in names.iter().enumerate() {
        let got = dst.read_file(&format!("{DST_DIR}/{nm}"))?;
        ensure!(got == contents(i, a.size), "{DST_DIR}/{nm} differs");
    }
    let twice_src = exactly_once(
        &src.xferlog_entries()?,
        SRC_DIR,
        &names,
        Direction::Outgoing,
        &format!("source ({})", a.src),
    )?;
    let twice_dst = exactly_once(
        &dst.xferlog_entries()?,
        DST_DIR,
        &names,
        Direction::Incoming,
        &format!("destination ({})", a.dst),
    )?;

    // Best 10-second window of the destination's stores.
    let mut best = 0.0f64;
    for (i, &(t, k)) in samples.iter().enumerate() {
        if let Some(&(t2, k2)) = samples[i..].iter().find(|(t2, _)| *t2 - t >= 10.0) {
            best = best.max((k2 - k) as f64 / (t2 - t) * 60.0);
        }
    }
    let secs = elapsed.as_secs_f64();
    let per_min = n as f64 / secs * 60.0;
    let ms_per = |s: f64| s / n as f64 * 1e3;
    let busy = (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
    let ncpu = std::thread::available_parallelism().map_or(1, |p| p.get());
    let row = |k: &str, v: String| println!("| {k:<44} | {v:>28} |");
    println!();
    println!("| {:<44} | {:>28} |", "measure", "value");
    println!("|{}|{}|", "-".repeat(46), "-".repeat(30));
    row("jobs (one file each)", format!("{n} x {} B", a.size));
    row(
        "servers (source -> destination)",
        format!("{} -> {}", a.src, a.dst),
    );
    row("max_running_jobs", running.to_string());
    row(
        "submit phase",
        format!("{submit_secs:.1} s, {submit_rate:.0} jobs/s"),
    );
    row("first due -> last finished", format!("{secs:.1} s"));
    row("jobs per minute", format!("{per_min:.0}"));
    row("best 10 s window (dst xferlog)", format!("{best:.0}/min"));
    row(
        "jobs running (mean of the polls)",
        format!(
            "{:.1} of {running}",
            running_samples.iter().sum::<usize>() as f64 / running_samples.len().max(1) as f64
        ),
    );
    row(
        "bftpd CPU per job",
        format!("{:.2} ms ({:.1} s)", ms_per(cpu1 - cpu0), cpu1 - cpu0),
    );
    row(
        &format!("source ({}) CPU per job", a.src),
        format!("{:.2} ms ({:.1} s)", ms_per(src1 - src0), src1 - src0),
    );
    row(
        &format!("destination ({}) CPU per job", a.dst),
        format!("{:.2} ms ({:.1} s)", ms_per(dst1 - dst0), dst1 - dst0),
    );
    row(
        "machine CPU busy during the run",
        format!("{:.0}% of {ncpu} CPUs", busy * 100.0),
    );
    row(
        "bftpd RSS: queued / max in run / end",
        format!(
            "{:.1} / {:.1} / {:.1} MiB",
            rss_queued as f64 / 1024.0,
            rss_max as f64 / 1024.0,
            rss_end as f64 / 1024.0
        ),
    );
    row(
        "bftpd peak RSS (VmHWM)",
        format!("{:.1} MiB", hwm as f64 / 1024.0),
    );
    row("load average before setup", load_before);
    row("load average at the due time", load_start);
    row("load average at the end", load_end);
    row("jobs with more than one attempt", retried.to_string());
    row(
        "files sent twice (src) / stored twice (dst)",
        format!("{twice_src} / {twice_dst}"),
    );
    for (why, k) in &retry_reasons {
        println!("  retried {k}x: {why}");
    }
    println!();
    println!(
        "checked: {n} jobs succeeded; {n} destination files byte-identical; each file \
         retrieved exactly once from the source and stored exactly once on the destination \
         (transfer logs)"
    );
    println!(
        "goal 3000 jobs/min: {}",
        if per_min >= 3000.0 {
            "met".to_string()
        } else {
            format!("MISSED ({:.0}% of it)", per_min / 3000.0 * 100.0)
        }
    );
    Ok(())
}
