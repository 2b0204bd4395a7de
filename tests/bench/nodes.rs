//! Benchmark of several bftpd nodes on one PostgreSQL store (issue 15), with the FTP servers
//! far from the nodes. Run with
//!   cargo build --release -p bftpd -p bftp
//!   BFTP_TEST_PROFILE=release cargo run --release -p bftp-tests --bin bench-nodes
//!
//! Two real FTP servers on loopback (source Pure-FTPd on 127.0.0.2, destination proFTPD on
//! 127.0.0.3, as bench-jobs), each behind a delay proxy (`bftp_tests::delay`) on its own
//! address: every control connection pays `BENCH_DELAY_MS` (default 10) each way, a round
//! trip of 20 ms, while the data connections between the servers stay direct. One fsync'ing
//! PostgreSQL cluster on loopback, a fresh database per run.
//!
//! In one run, for each of `BENCH_RUNS` (default `sled1,pg1,pg2,pg3`): that many nodes (a
//! sled node alone for `sled1`), each with `[scheduler] max_running_jobs = BENCH_RUNNING`
//! (default 4) and `[ftp] max_connections_per_host = BENCH_PER_HOST` (default 200, so the
//! cluster-wide limit is not the bottleneck; it is still counted over the nodes, one
//! `host_slots` row per connection). `BENCH_JOBS` (default 600) one-file jobs
//! (`BENCH_SIZE` bytes, default 1 KiB) are submitted round-robin to the nodes' APIs from 8
//! client threads, all due at one start time in the future, and the run is timed from that
//! start to the moment the last job finished.
//!
//! Printed per run: the submit latency (median and 99th percentile, per HTTP submit), jobs
//! per minute, the speed-up over one PostgreSQL node, each node's CPU (utime+stime over the
//! run) and the machine's busy share of its CPUs (2 cores here: when that is near 100 %,
//! CPU, not the round trips, bounds the rate).
//!
//! Checked: every job finished `succeeded` with one attempt, and every destination file is
//! byte-identical to its source.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::env_or;
use bftp_tests::daemon::{http, Bftpd};
use bftp_tests::procstat::{cpu_jiffies, cpu_seconds};
use bftp_tests::{DelayProxy, FtpOptions, FtpServer, ServerKind};

const SUBMITTERS: usize = 8;
const PASSIVE_PORTS: u16 = 256;

fn contents(run: usize, i: usize, size: usize) -> Vec<u8> {
    let mut x = ((run * 1_000_003 + i) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = format!("run {run} file {i}\n").into_bytes();
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size);
    out
}

fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since the epoch (H. Hinnant's days-to-civil).
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

struct Far {
    src: FtpServer,
    dst: FtpServer,
    src_proxy: DelayProxy,
    dst_proxy: DelayProxy,
}

struct Row {
    name: String,
    nodes: usize,
    submit_p50: f64,
    submit_p99: f64,
    wall: f64,
    per_min: f64,
    node_cpu: Vec<f64>,
    busy: f64,
}

/// The nodes of one run: `nodes` bftpd on `store` (empty: sled), sharing the first one's key.
fn start_nodes(store: &str, nodes: usize, running: usize, per_host: usize) -> Result<Vec<Bftpd>> {
    let mut out: Vec<Bftpd> = Vec::new();
    let mut key: Option<PathBuf> = None;
    for i in 0..nodes {
        let store = store.replace("NODE", &format!("bench-{i}"));
        let key_from = key.clone();
        let d = Bftpd::start_with(move |dir| {
            if let Some(key) = key_from {
                let state = dir.join("state");
                std::os::unix::fs::DirBuilderExt::mode(
                    std::fs::DirBuilder::new().recursive(true),
                    0o700,
                )
                .create(&state)
                .expect("state dir");
                std::fs::copy(key, state.join("secret.key")).expect("key copy");
            }
            format!(
                "{}[scheduler]\nmax_running_jobs = {running}\n[ftp]\nmax_connections_per_host = {per_host}\n{store}",
                Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"info\""),
            )
        })?;
        if key.is_none() {
            key = Some(d.state_dir().join("secret.key"));
        }
        out.push(d);
    }
    Ok(out)
}

fn run_one(far: &Far, run: usize, name: &str, store: &str, nodes: usize) -> Result<Row> {
    let jobs: usize = env_or("BENCH_JOBS", 600);
    let size: usize = env_or("BENCH_SIZE", 1024);
    let running: usize = env_or("BENCH_RUNNING", 4);
    let per_host: usize = env_or("BENCH_PER_HOST", 200);
    let (sdir, ddir) = (format!("r{run}"), format!("d{run}"));
    for i in 0..jobs {
        far.src
            .put_file(&format!("{sdir}/f{i:05}"), &contents(run, i, size))?;
    }
    far.dst.mkdir(&ddir)?;
    let ds = start_nodes(store, nodes, running, per_host)?;
    let socks: Vec<PathBuf> = ds.iter().map(|d| d.socket().to_path_buf()).collect();
    let pids: Vec<u32> = ds
        .iter()
        .map(|d| d.pid().context("bftpd pid"))
        .collect::<Result<_>>()?;

    let start_in = (jobs as u64 / 50).max(8);
    let due = epoch_secs() + start_in;
    let start = rfc3339(due);
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(jobs));
    let done = AtomicU64::new(0);
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
                            "source": {"host": far.src.host().to_string(),
                                "port": far.src_proxy.port(),
                                "user": far.src.user(), "password": far.src.password(),
                                "path": format!("{sdir}/f{i:05}")},
                            "destination": {"host": far.dst.host().to_string(),
                                "port": far.dst_proxy.port(),
                                "user": far.dst.user(), "password": far.dst.password(),
                                "path": format!("{ddir}/")},
                            "start": start,
                            "retry": {"first_interval": "2s", "cap": "10s"},
                        })
                        .to_string();
                        let t = Instant::now();
                        let (status, resp) = http(
                            &socks[i % socks.len()],
                            "POST",
                            "/v1/jobs",
                            Some(&body),
                            &[],
                        )?;
                        let took = t.elapsed().as_secs_f64();
                        ensure!(status == 201, "submit {i}: {status} {resp}");
                        lat.lock().unwrap_or_else(|p| p.into_inner()).push(took);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("submitter panicked")?;
        }
        Ok(())
    })?;
    let mut lat = lat.into_inner().unwrap_or_else(|p| p.into_inner());
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] * 1000.0;
    let (submit_p50, submit_p99) = (pct(0.5), pct(0.99));
    let due_at = Duration::from_secs(due);
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    ensure!(now < due_at, "the submit phase overran the start time");
    std::thread::sleep(due_at - now - Duration::from_millis(200).min(due_at - now));
    let cpu0: Vec<f64> = pids
        .iter()
        .map(|&p| cpu_seconds(p, false))
        .collect::<Result<_>>()?;
    let (busy0, total0) = cpu_jiffies();
    let wait = due_at.saturating_sub(SystemTime::now().duration_since(UNIX_EPOCH)?);
    std::thread::sleep(wait);
    let t0 = Instant::now();
    let limit = Duration::from_secs(600);
    let mut polls = 0usize;
    let wall = loop {
        // Cheap polls (one job at most each), spread over the nodes' APIs: the full list
        // is read once, at the end.
        let sock = &socks[polls % socks.len()];
        polls += 1;
        if count(sock, "queued", 1)? == 0 && count(sock, "running", 1)? == 0 {
            break t0.elapsed().as_secs_f64();
        }
        if t0.elapsed() > limit {
            bail!("{name}: not done after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let cpu1: Vec<f64> = pids
        .iter()
        .map(|&p| cpu_seconds(p, false))
        .collect::<Result<_>>()?;
    let (busy1, total1) = cpu_jiffies();

    // The checks.
    let (st, body) = http(
        &socks[0],
        "GET",
        &format!("/v1/jobs?state=finished&all=true&limit={}", jobs + 1),
        None,
        &[],
    )?;
    ensure!(st == 200, "list: {st}");
    let v: serde_json::Value = serde_json::from_str(&body)?;
    let views = v["jobs"].as_array().cloned().unwrap_or_default();
    ensure!(
        views.len() == jobs,
        "{} finished jobs, not {jobs}",
        views.len()
    );
    let bad = views
        .iter()
        .filter(|j| j["outcome"] != "succeeded" || j["attempts"] != 1)
        .count();
    ensure!(
        bad == 0,
        "{name}: {bad} jobs not succeeded at their first attempt"
    );
    for i in 0..jobs {
        let got = far.dst.read_file(&format!("{ddir}/f{i:05}"))?;
        ensure!(
            got == contents(run, i, size),
            "{name}: {ddir}/f{i:05} differs"
        );
    }
    drop(ds);
    Ok(Row {
        name: name.into(),
        nodes,
        submit_p50,
        submit_p99,
        wall,
        per_min: jobs as f64 / wall * 60.0,
        node_cpu: cpu1.iter().zip(&cpu0).map(|(a, b)| a - b).collect(),
        busy: (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64,
    })
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let delay = Duration::from_millis(env_or("BENCH_DELAY_MS", 10));
    let runs: String = env_or("BENCH_RUNS", "sled1,pg1,pg2,pg3".to_string());
    println!(
        "bench-nodes: {} one-file jobs a run, control round trip {} ms, max_running_jobs {} a \
         node, max_connections_per_host {} (over all nodes)",
        env_or("BENCH_JOBS", 600usize),
        2 * delay.as_millis(),
        env_or("BENCH_RUNNING", 4usize),
        env_or("BENCH_PER_HOST", 200usize),
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
    let far = Far {
        src_proxy: DelayProxy::for_server(&src, delay)?,
        dst_proxy: DelayProxy::for_server(&dst, delay)?,
        src,
        dst,
    };
    let cluster =
        bftp_tests::postgres::Cluster::private_durable().map_err(|e| anyhow::anyhow!(e))?;
    let mut rows = Vec::new();
    for (run, spec) in runs.split(',').map(str::trim).enumerate() {
        let (kind, n) = spec.split_at(spec.find(|c: char| c.is_ascii_digit()).unwrap_or(0));
        let nodes: usize = n.parse().with_context(|| format!("{spec}: sled1 or pgN"))?;
        let store = match kind {
            "sled" => {
                ensure!(nodes == 1, "{spec}: a sled store has one node");
                String::new()
            }
            "pg" => format!(
                "[store]\nkind = \"postgres\"\nurl = \"{}\"\nnode = \"NODE\"\npool_size = 8\npoll = \"200ms\"\n",
                cluster.fresh_database()
            ),
            other => bail!("{other}: sled or pg"),
        };
        let row = run_one(&far, run, spec, &store, nodes)?;
        println!(
            "  {spec}: {:.0} jobs/min ({:.1} s), submit p50 {:.1} ms p99 {:.1} ms",
            row.per_min, row.wall, row.submit_p50, row.submit_p99
        );
        rows.push(row);
    }
    let one = rows
        .iter()
        .find(|r| r.name == "pg1")
        .map(|r| r.per_min)
        .unwrap_or(f64::NAN);
    println!();
    println!(
        "{:<6} {:>5} {:>9} {:>8} {:>13} {:>13} {:>8} {:>22} {:>6}",
        "run",
        "nodes",
        "jobs/min",
        "x pg1",
        "submit p50 ms",
        "submit p99 ms",
        "wall s",
        "node CPU s (each)",
        "busy"
    );
    for r in &rows {
        let cpus: Vec<String> = r.node_cpu.iter().map(|c| format!("{c:.1}")).collect();
        println!(
            "{:<6} {:>5} {:>9.0} {:>8.2} {:>13.1} {:>13.1} {:>8.1} {:>22} {:>5.0}%",
            r.name,
            r.nodes,
            r.per_min,
            r.per_min / one,
            r.submit_p50,
            r.submit_p99,
            r.wall,
            cpus.join(" / "),
            r.busy * 100.0
        );
    }
    if let Some(three) = rows.iter().find(|r| r.name == "pg3") {
        let x = three.per_min / one;
        println!(
            "goal pg3 >= 2.5 x pg1: {} ({x:.2} x)",
            if x >= 2.5 { "met" } else { "NOT met" }
        );
    }
    Ok(())
}
