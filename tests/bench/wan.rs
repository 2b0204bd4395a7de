//! Benchmark of third-party copies over a far control connection (issue 14): run with
//!   cargo build --release -p bftpd -p bftp && cargo run --release -p bftp-tests --bin bench-wan
//! It runs target/release's bftpd and bftp (`BFTP_TEST_PROFILE=debug` takes target/debug's;
//! the header line names the binaries): figures are of release builds.
//!
//! Two real FTP servers on loopback (source vsftpd on 127.0.0.2, destination proFTPD on
//! 127.0.0.3; `BENCH_SRC`/`BENCH_DST` choose among vsftpd, proftpd, pure-ftpd), each behind a
//! delay proxy (`bftp_tests::delay`) on its own address: every control connection of the
//! controller pays `BENCH_DELAY_MS` (default 10) each way, a round trip of twice that, while
//! the data connections between the servers stay direct. `BENCH_DELAY_MS=0` runs without the
//! proxies (loopback).
//!
//! `BENCH_FILES` (default 300) files of `BENCH_SIZE` bytes (default 4 KiB) are copied, in one
//! run, by each of `BENCH_TOOLS` (default all of them):
//! - `lftp1`, `lftp4`: `lftp -c 'set ftp:use-fxp yes; set ftp:fxp-force yes; mirror SRC DST'`,
//!   the second with `set mirror:parallel-transfer-count 4`;
//! - `bftp1`, `bftp4`, `bftp16`: `bftp transfer` through a fresh bftpd with that many
//!   `parallel_pairs` (and `max_connections_per_host` 40, so that 16 pairs fit);
//! - `queued4`: the same files as one queued job (`bftp submit`, 4 pairs), timed from the
//!   submit to the job's end (polled every 10 ms over the API);
//! - `jobs`: `BENCH_JOBS` (default 100) one-file jobs submitted one after another (each its
//!   own job, the daemon's default `[ftp]` and `[scheduler]` settings): jobs per minute, from
//!   the first submit to the last job's end.
//!
//! Every run is checked: each file at the destination with the source's sha256 (sha256sum
//! of both directories), nothing else there. Printed per run: files/s, wall, the controller's
//! CPU (bftpd utime+stime; lftp's rusage), both servers' CPU (`srv`: their masters' own
//! and reaped sessions' times; on a 2-core machine it says whether the servers' logins and
//! data connections, not the controller, use the machine), and two measures of the control round trips per
//! file per pair: `rt(wall)` = wall x pairs / (files x RTT) (what the delay cost, per pair),
//! and `turns` = client sends that followed a server reply, counted by the proxies on both
//! connections, per file (logins included).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::{children_cpu, contents, env_or, server_kind, sums};
use bftp_tests::daemon::{bin, Bftpd, KeepAlive};
use bftp_tests::procstat::{cpu_seconds, server_cpu, server_master};
use bftp_tests::{DelayProxy, FtpOptions, FtpServer, ServerKind};

const SRC_DIR: &str = "small";
const DST_DIR: &str = "dst";
/// How long the servers are left alone before each run (see [`Bench::run`]).
const AT_REST: Duration = Duration::from_secs(2);

struct Row {
    tool: String,
    pairs: usize,
    files: usize,
    wall: f64,
    cpu: f64,
    /// Both servers' CPU over the run (their masters' own and reaped sessions' times).
    srv: f64,
    turns: u64,
    check: Result<(), String>,
}

struct Bench {
    src: FtpServer,
    dst: FtpServer,
    /// Where the controller connects: the proxies, or the servers themselves.
    src_port: u16,
    dst_port: u16,
    proxies: Vec<DelayProxy>,
    masters: [Option<u32>; 2],
    files: usize,
    jobs: usize,
    rtt: Duration,
    limit: Duration,
}

impl Bench {
    fn servers_cpu(&self) -> f64 {
        self.masters.iter().map(|m| server_cpu(*m)).sum()
    }

    fn turns(&self) -> u64 {
        self.proxies.iter().map(DelayProxy::turns).sum()
    }

    fn url(&self, server: &FtpServer, port: u16, path: &str) -> String {
        format!("ftp://{}@{}:{port}/{path}", server.user(), server.host())
    }

    fn clean(&self) -> Result<()> {
        let dir = self.dst.path(DST_DIR);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        self.dst.mkdir(DST_DIR)?;
        Ok(())
    }

    fn verify(&self, want: usize) -> Result<()> {
        let src = sums(&self.src.path(SRC_DIR))?;
        let dst = sums(&self.dst.path(DST_DIR))?;
        let src: BTreeMap<_, _> = src.into_iter().take(want).collect();
        if src != dst {
            let missing = src.keys().filter(|k| !dst.contains_key(*k)).count();
            let differ = src
                .iter()
                .filter(|(k, v)| dst.get(*k).is_some_and(|d| d != *v))
                .count();
            bail!(
                "{missing} missing, {differ} with another sha256, {} at the destination",
                dst.len()
            );
        }
        Ok(())
    }

    fn bftpd(&self, pairs: usize) -> Result<Bftpd> {
        Bftpd::start_with(|dir| {
            Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"warn\"")
                + &format!(
                    "[ftp]\nparallel_pairs = {pairs}\nmax_connections_per_host = 40\n\
                     [scheduler]\nmax_running_jobs = 32\n"
                )
        })
    }

    fn run(&self, tool: &str) -> Result<Row> {
        self.clean()?;
        // Every run starts with servers at rest: proFTPD's standalone daemon accepts late
        // (0.1-0.4 s, measured) a connection that comes while it reaps sessions that have
        // just ended, so a run that began right after the one before it ended would pay
        // that on its first login, and a short run pays it in full.
        std::thread::sleep(AT_REST);
        let turns = self.turns();
        let srv = self.servers_cpu();
        let mut row = match tool {
            "lftp1" => self.lftp(1),
            "lftp4" => self.lftp(4),
            "bftp1" => self.bftp(1),
            "bftp4" => self.bftp(4),
            "bftp16" => self.bftp(16),
            "queued4" => self.queued(4),
            "jobs" => self.one_file_jobs(),
            other => bail!("unknown tool {other}"),
        }?;
        row.turns = self.turns() - turns;
        row.srv = self.servers_cpu() - srv;
        if row.check.is_ok() {
            row.check = self.verify(row.files).map_err(|e| format!("{e:#}"));
        }
        Ok(row)
    }

    fn lftp(&self, parallel: usize) -> Result<Row> {
        let home = tempfile::Builder::new().prefix("bench-lftp-").tempdir()?;
        let url = |s: &FtpServer, port: u16, path: &str| {
            format!(
                "ftp://{}:{}@{}:{port}/{path}",
                s.user(),
                s.password(),
                s.host()
            )
        };
        let mut script =
            String::from("set ftp:use-fxp yes; set ftp:fxp-force yes; set ftp:ssl-allow no; ");
        if parallel > 1 {
            write!(script, "set mirror:parallel-transfer-count {parallel}; ")?;
        }
        write!(
            script,
            "mirror {} {}",
            url(&self.src, self.src_port, SRC_DIR),
            url(&self.dst, self.dst_port, DST_DIR)
        )?;
        let cpu = children_cpu();
        let start = Instant::now();
        let o = Command::new("lftp")
            .arg("-c")
            .arg(&script)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .output()?;
        let wall = start.elapsed().as_secs_f64();
        let check = if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "lftp failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        };
        Ok(Row {
            tool: if parallel == 1 {
                "lftp seq".into()
            } else {
                format!("lftp par{parallel}")
            },
            pairs: parallel,
            files: self.files,
            wall,
            cpu: children_cpu() - cpu,
            srv: 0.0,
            turns: 0,
            check,
        })
    }

    fn bftp(&self, pairs: usize) -> Result<Row> {
        let d = self.bftpd(pairs)?;
        let pid = d.pid().context("bftpd pid")?;
        let source = self.url(&self.src, self.src_port, &format!("{SRC_DIR}/*"));
        let dest = self.url(&self.dst, self.dst_port, &format!("{DST_DIR}/"));
        let home = d.dir().join("home");
        std::fs::create_dir_all(&home)?;
        let cpu = cpu_seconds(pid, false)?;
        let start = Instant::now();
        let o = Command::new(bin("bftp"))
            .arg("--socket")
            .arg(d.socket())
            .args(["--json", "transfer", &source, &dest])
            .env("HOME", &home)
            .env("BFTP_SOURCE_PASSWORD", self.src.password())
            .env("BFTP_DEST_PASSWORD", self.dst.password())
            .stdin(Stdio::null())
            .output()?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid, false)? - cpu;
        let check = if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "bftp transfer failed: {} {}",
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .last()
                    .unwrap_or(""),
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        };
        Ok(Row {
            tool: format!("bftp p{pairs}"),
            pairs,
            files: self.files,
            wall,
            cpu,
            srv: 0.0,
            turns: 0,
            check,
        })
    }

    /// `bftp --json submit`: the job's id.
    fn submit(&self, d: &Bftpd, source: &str, dest: &str) -> Result<u64> {
        let o = d.bftp_env(
            None,
            &["--json", "submit", source, dest],
            &[
                ("BFTP_SOURCE_PASSWORD", self.src.password()),
                ("BFTP_DEST_PASSWORD", self.dst.password()),
            ],
        );
        ensure!(
            o.status.success(),
            "submit: {}",
            bftp_tests::daemon::text(&o)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
        v["job"]["id"].as_u64().context("no job id")
    }

    /// Polls until every job in `ids` is finished: Err with the first that did not succeed.
    /// Polls the list of finished jobs, not each job's view: a running 2,000-member job's
    /// view every 10 ms would cost the daemon more than its copies (the list holds a job,
    /// with its members, only once it is finished: one view, at the end). One connection
    /// kept alive, as a polling client keeps it: a new one per poll (an accept, a connection
    /// task, its teardown, a hundred times a second) was billed to the job.
    fn wait_all(&self, d: &Bftpd, ids: &[u64]) -> Result<Result<(), String>> {
        let deadline = Instant::now() + self.limit;
        let limit = ids.len() + 10;
        let mut conn = KeepAlive::open(d.socket())?;
        loop {
            ensure!(
                Instant::now() < deadline,
                "jobs not done after {:?}",
                self.limit
            );
            let path = format!("/v1/jobs?state=finished&all=true&limit={limit}");
            let (st, body) = conn.request("GET", &path, "", &[])?;
            ensure!(st == 200, "list: {st} {body}");
            let v: serde_json::Value = serde_json::from_str(&body)?;
            let done: Vec<&serde_json::Value> = v["jobs"]
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let finished = |id: u64| done.iter().find(|j| j["id"].as_u64() == Some(id));
            if ids.iter().all(|&id| finished(id).is_some()) {
                for &id in ids {
                    if let Some(j) = finished(id) {
                        if j["outcome"] != "succeeded" {
                            return Ok(Err(format!("job {id}: {}", j["outcome"])));
                        }
                    }
                }
                return Ok(Ok(()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn queued(&self, pairs: usize) -> Result<Row> {
        let d = self.bftpd(pairs)?;
        let pid = d.pid().context("bftpd pid")?;
        let source = self.url(&self.src, self.src_port, &format!("{SRC_DIR}/*"));
        let dest = self.url(&self.dst, self.dst_port, &format!("{DST_DIR}/"));
        let cpu = cpu_seconds(pid, false)?;
        let start = Instant::now();
        let id = self.submit(&d, &source, &dest)?;
        let check = self.wait_all(&d, &[id])?;
        let wall = start.elapsed().as_secs_f64();
        Ok(Row {
            tool: format!("queued p{pairs}"),
            pairs,
            files: self.files,
            wall,
            cpu: cpu_seconds(pid, false)? - cpu,
            srv: 0.0,
            turns: 0,
            check,
        })
    }

    fn one_file_jobs(&self) -> Result<Row> {
        // The daemon's own defaults ([ftp] and [scheduler]): what a deployment runs.
        let d = Bftpd::start_with(|dir| {
            Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"warn\"")
        })?;
        let pid = d.pid().context("bftpd pid")?;
        let dest = self.url(&self.dst, self.dst_port, &format!("{DST_DIR}/"));
        let cpu = cpu_seconds(pid, false)?;
        let start = Instant::now();
        let mut ids = Vec::new();
        for i in 0..self.jobs {
            let source = self.url(&self.src, self.src_port, &format!("{SRC_DIR}/{}", name(i)));
            ids.push(self.submit(&d, &source, &dest)?);
        }
        let check = self.wait_all(&d, &ids)?;
        let wall = start.elapsed().as_secs_f64();
        Ok(Row {
            tool: "one-file jobs".into(),
            pairs: 1,
            files: self.jobs,
            wall,
            cpu: cpu_seconds(pid, false)? - cpu,
            srv: 0.0,
            turns: 0,
            check,
        })
    }
}

fn name(i: usize) -> String {
    format!("f{i:06}.dat")
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let src_kind = server_kind("BENCH_SRC", ServerKind::Vsftpd)?;
    let dst_kind = server_kind("BENCH_DST", ServerKind::Proftpd)?;
    let delay = Duration::from_millis(env_or("BENCH_DELAY_MS", 10));
    let files: usize = env_or("BENCH_FILES", 300);
    let size: usize = env_or("BENCH_SIZE", 4096);
    let jobs: usize = env_or("BENCH_JOBS", 100);
    let tools = env_or(
        "BENCH_TOOLS",
        "lftp1,lftp4,bftp1,bftp4,bftp16,queued4,jobs".to_string(),
    );
    let limit = Duration::from_secs(env_or("BENCH_TIMEOUT", 600));
    let _ = (bin("bftpd"), bin("bftp"));
    let roots = Some(std::path::PathBuf::from("/dev/shm")).filter(|d| d.is_dir());
    let opts = |last: u8| FtpOptions {
        host: std::net::Ipv4Addr::new(127, 0, 0, last),
        passive_ports: 2000,
        parent: roots.clone(),
        ..FtpOptions::default()
    };
    let src = FtpServer::start(src_kind, opts(2))?;
    let dst = FtpServer::start(dst_kind, opts(3))?;
    for i in 0..files.max(jobs) {
        src.put_file(&format!("{SRC_DIR}/{}", name(i)), &contents(i, size))?;
    }
    let mut proxies = Vec::new();
    let (src_port, dst_port) = if delay.is_zero() {
        (src.port(), dst.port())
    } else {
        proxies.push(DelayProxy::for_server(&src, delay)?);
        proxies.push(DelayProxy::for_server(&dst, delay)?);
        (proxies[0].port(), proxies[1].port())
    };
    let rtt = 2 * delay;
    println!(
        "source {src_kind} {}, destination {dst_kind} {}; control round trip {rtt:?} \
         (delay proxies on ports {src_port}/{dst_port}); {files} files of {size} B; \
         bftpd and bftp: {} ({} build); {} CPUs, loadavg {}",
        src.addr(),
        dst.addr(),
        bin("bftpd").display(),
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let bench = Bench {
        masters: [server_master(&src), server_master(&dst)],
        src,
        dst,
        src_port,
        dst_port,
        proxies,
        // The source directory holds this many: a mirror copies them all.
        files: files.max(jobs),
        jobs,
        rtt,
        limit,
    };
    let mut rows = Vec::new();
    for tool in tools.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let row = bench.run(tool)?;
        eprintln!(
            "{}: {:.2} s, {}",
            row.tool,
            row.wall,
            match &row.check {
                Ok(()) => "sha256 identical".to_string(),
                Err(e) => format!("FAILED: {e}"),
            }
        );
        rows.push(row);
    }
    println!(
        "\n{:<14} {:>7} {:>8} {:>9} {:>10} {:>10} {:>9} {:>9}  check",
        "tool", "files", "files/s", "wall s", "ctl CPU s", "srv CPU s", "rt(wall)", "turns"
    );
    for r in &rows {
        let rt = if bench.rtt.is_zero() {
            "-".to_string()
        } else {
            format!(
                "{:.2}",
                r.wall * r.pairs as f64 / (r.files as f64 * bench.rtt.as_secs_f64())
            )
        };
        println!(
            "{:<14} {:>7} {:>8.1} {:>9.2} {:>10.3} {:>10.3} {:>9} {:>9.2}  {}",
            r.tool,
            r.files,
            r.files as f64 / r.wall,
            r.wall,
            r.cpu,
            r.srv,
            rt,
            r.turns as f64 / r.files as f64,
            if r.check.is_ok() { "ok" } else { "FAILED" }
        );
    }
    if let Some(jobs) = rows.iter().find(|r| r.tool == "one-file jobs") {
        println!(
            "one-file jobs: {:.0} jobs/min",
            jobs.files as f64 * 60.0 / jobs.wall
        );
    }
    // A tool run more than once (`BENCH_TOOLS=bftp4,queued4,bftp4,queued4`) is judged on all
    // its runs together: files over summed wall time, summed CPU over files.
    let runs = |t: &str| -> Option<(f64, f64, f64)> {
        let of: Vec<&Row> = rows.iter().filter(|r| r.tool == t).collect();
        (!of.is_empty()).then(|| {
            let sum = |f: fn(&Row) -> f64| of.iter().map(|r| f(r)).sum::<f64>();
            (sum(|r| r.files as f64), sum(|r| r.wall), sum(|r| r.cpu))
        })
    };
    let rate = |t: &str| runs(t).map(|(files, wall, _)| files / wall);
    for (a, b, goal) in [
        ("bftp p1", "lftp seq", 2.0),
        ("bftp p4", "lftp par4", 2.0),
        ("bftp p16", "lftp par4", 10.0),
        ("queued p4", "bftp p4", 1.0 / 1.2),
    ] {
        if let (Some(x), Some(y)) = (rate(a), rate(b)) {
            println!(
                "{a} / {b}: {:.2}x (goal {goal:.2}x) -> {}",
                x / y,
                if x / y >= goal { "met" } else { "NOT met" }
            );
        }
    }
    // A queued job's controller CPU per file against the foreground copy's. The goal (at
    // most 1.2x) is set on loopback (`BENCH_DELAY_MS=0`, 2,000 files): far away, a job's
    // fixed costs (submit, freeze, report) are spread over fewer files a second.
    if let (Some((qf, _, qc)), Some((tf, _, tc))) = (runs("queued p4"), runs("bftp p4")) {
        let x = (qc / qf) / (tc / tf);
        let verdict = if !bench.rtt.is_zero() {
            "(goal set on loopback)"
        } else if x <= 1.2 {
            "(goal at most 1.20x) -> met"
        } else {
            "(goal at most 1.20x) -> NOT met"
        };
        println!("queued p4 / bftp p4, ctl CPU per file: {x:.2}x {verdict}");
    }
    Ok(())
}
