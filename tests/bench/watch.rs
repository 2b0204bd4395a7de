//! Benchmark of watches (issue 30, RULES.md §15): what a poll of a big directory costs
//! bftpd, in steady state, against the same files copied by a one-off wildcard job, the
//! listing's parse alone, and lftp's `mirror --only-newer`. Run with
//!   cargo build --release -p bftpd -p bftp --bins
//!   BFTP_TEST_PROFILE=release cargo run --release -p bftp-tests --bin bench-watch
//!
//! Source proFTPD (MLSD) at 127.0.0.2 with `BFTP_BENCH_FILES` (default 100,000) files of
//! `BFTP_BENCH_SIZE` bytes (default 64) in `out/`, written straight into its root;
//! destination Pure-FTPd at 127.0.0.3. bftpd reaches both through a delay proxy
//! (`bftp_tests::DelayProxy`) of `BFTP_BENCH_RTT_MS` (default 20) round trip on the control
//! connections; the data connections between the servers stay direct. bftpd runs with its
//! default sled store in a temporary state directory.
//!
//! 1. Baseline: a watch over `out/` (every `BFTP_BENCH_EVERY`, default 2s, settle 0s) is
//!    added; its first poll finds every file new. That poll is measured (wall time from the
//!    daemon's own `took_ms`, CPU and store bytes across it); its job is then delivered with
//!    the proxies at 0 ms (setup, not measured), and the proxies go back to the round trip.
//! 2. `BFTP_BENCH_ROUNDS` (default 3) rounds: `BFTP_BENCH_ROUND` (default 1,000) new files
//!    are renamed into `out/` at once; the round ends when the watch's `delivered` grew by
//!    them. Per round: the poll's wall time (bftpd's debug line "the watch polled",
//!    `took_ms`: from the poll's hold to its record written, listing and job included), the
//!    round's wall time, bftpd's CPU and `/proc/PID/io` write_bytes across the round (the
//!    poll, its job's copies, and the idle polls of the round).
//! 3. Idle polls: `BFTP_BENCH_IDLE_POLLS` (default 5) polls with nothing new: CPU, store
//!    bytes and wall time per poll.
//! 4. The comparison: round 1's files copied again by `bftp submit` of the wildcard
//!    `out/r1-*.dat` into another directory (the watch paused): wall, CPU, bytes written.
//! 5. The listing's parse alone: the MLSD data of `out/` fetched once (straight, no proxy)
//!    and parsed in this process with `bftp_ftp::parse::listing::parse_mlsd` (best of 5).
//! 6. lftp `mirror --only-newer` from the source (through the proxy) into a local directory
//!    seeded on disk with a copy of `out/` (lftp cannot FXP into a directory it mirrors
//!    from scratch faster than the setup allows): a round of new files timed; then a file
//!    moved in with a modify time two years old and a file still being written: whether
//!    lftp takes each, and what a watch with `settle 3s` does with the same two files.
//! 7. The checkpoint, read after bftpd stopped through `JobStore::watch_checkpoint`: its
//!    entries and their bytes as the sled store writes them (key + JSON record).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_store::{JobStore, SledStore, StoreOptions, WatchId};
use bftp_tests::bench::{env_or, pattern};
use bftp_tests::daemon::{bin, http, text, Bftpd};
use bftp_tests::procstat::{cpu_seconds, loadavg, proc_write_bytes};
use bftp_tests::{DelayProxy, FtpOptions, FtpServer, ServerKind};
use serde_json::{json, Value};

const SRC_DIR: &str = "out";
const STAGING: &str = "staging";
const DST_DIR: &str = "in";
const CMP_DIR: &str = "cmp";
const LATE_DIR: &str = "late";

struct Settings {
    files: usize,
    size: usize,
    per_round: usize,
    rounds: usize,
    rtt: Duration,
    every: String,
    idle_polls: u64,
    pairs: usize,
    limit: Duration,
}

/// What bftpd spent across a stretch: wall seconds, CPU seconds, bytes written to storage.
#[derive(Clone, Copy, Default)]
struct Cost {
    wall: f64,
    cpu: f64,
    written: u64,
}

/// A mark to measure a stretch of bftpd's life from.
struct Mark {
    at: Instant,
    cpu: f64,
    written: u64,
}

struct Bench {
    s: Settings,
    src: FtpServer,
    dst: FtpServer,
    src_proxy: DelayProxy,
    dst_proxy: DelayProxy,
    d: Bftpd,
    pid: u32,
    /// Bytes of bftpd's log already read for "the watch polled" lines.
    log_seen: usize,
}

/// One "the watch polled" line: files taken, the poll's wall time.
struct Polled {
    taken: u64,
    took_ms: u64,
}

impl Bench {
    fn mark(&self) -> Result<Mark> {
        Ok(Mark {
            at: Instant::now(),
            cpu: cpu_seconds(self.pid, false)?,
            written: proc_write_bytes(self.pid)?,
        })
    }

    fn since(&self, m: &Mark) -> Result<Cost> {
        Ok(Cost {
            wall: m.at.elapsed().as_secs_f64(),
            cpu: cpu_seconds(self.pid, false)? - m.cpu,
            written: proc_write_bytes(self.pid)? - m.written,
        })
    }

    /// The polls bftpd logged since the last call.
    fn polled(&mut self) -> Vec<Polled> {
        let logs = self.d.logs();
        let new = &logs[self.log_seen.min(logs.len())..];
        // Only whole lines: the last may still be being written.
        let end = new.rfind('\n').map_or(0, |i| i + 1);
        let out = new[..end]
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["fields"]["message"] == "the watch polled")
            .map(|v| Polled {
                taken: v["fields"]["taken"].as_u64().unwrap_or(0),
                took_ms: v["fields"]["took_ms"].as_u64().unwrap_or(0),
            })
            .collect();
        self.log_seen += end;
        out
    }

    fn endpoint(s: &FtpServer, port: u16, path: &str) -> Value {
        json!({
            "host": s.host().to_string(),
            "port": port,
            "user": s.user(),
            "password": s.password(),
            "path": path,
        })
    }

    fn add_watch(&self, dst_dir: &str, every: &str, extra: Value) -> Result<u64> {
        let mut req = json!({
            "every": every,
            "job": {
                "source": Self::endpoint(&self.src, self.src_proxy.port(), SRC_DIR),
                "destination": Self::endpoint(&self.dst, self.dst_proxy.port(), dst_dir),
            },
        });
        if let Value::Object(fields) = extra {
            for (k, v) in fields {
                req[k] = v;
            }
        }
        let (code, body) = http(
            self.d.socket(),
            "POST",
            "/v1/watches",
            Some(&req.to_string()),
            &[],
        )?;
        ensure!(code == 201, "adding the watch: {code} {body}");
        let v: Value = serde_json::from_str(&body)?;
        v["id"].as_u64().context("no watch id")
    }

    fn show(&self, id: u64) -> Result<Value> {
        let (code, body) = http(
            self.d.socket(),
            "GET",
            &format!("/v1/watches/{id}"),
            None,
            &[],
        )?;
        ensure!(code == 200, "watch {id}: {code} {body}");
        Ok(serde_json::from_str(&body)?)
    }

    fn pause(&self, id: u64, paused: bool) -> Result<()> {
        let verb = if paused { "pause" } else { "resume" };
        let (code, body) = http(
            self.d.socket(),
            "POST",
            &format!("/v1/watches/{id}/{verb}"),
            None,
            &[],
        )?;
        ensure!(code == 200, "{verb} watch {id}: {code} {body}");
        Ok(())
    }

    /// Waits (polling the view every `every`) until `cond` holds of the watch's view.
    fn wait_watch(
        &self,
        id: u64,
        what: &str,
        every: Duration,
        mut cond: impl FnMut(&Value) -> bool,
    ) -> Result<Value> {
        let deadline = Instant::now() + self.s.limit;
        loop {
            let w = self.show(id)?;
            if cond(&w) {
                return Ok(w);
            }
            if Instant::now() >= deadline {
                bail!("watch {id}: {what}: not in {:?}: {w:#}", self.s.limit);
            }
            std::thread::sleep(every);
        }
    }

    fn delivered(w: &Value) -> u64 {
        w["delivered"].as_u64().unwrap_or(0)
    }

    fn set_rtt(&self, rtt: Duration) {
        self.src_proxy.set_delay(rtt / 2);
        self.dst_proxy.set_delay(rtt / 2);
    }

    /// `count` new files of round `tag` written into the staging directory, then renamed
    /// into `out/` at once (so one poll sees them all). Returns their names.
    fn stage(&self, tag: &str, count: usize) -> Result<Vec<String>> {
        let names: Vec<String> = (0..count).map(|i| format!("{tag}-{i:06}.dat")).collect();
        for (i, n) in names.iter().enumerate() {
            self.src.put_file(
                &format!("{STAGING}/{n}"),
                &pattern(0x7a7 ^ (i as u64) << 8 ^ tag.len() as u64, self.s.size),
            )?;
        }
        Ok(names)
    }

    fn move_in(&self, names: &[String]) -> Result<()> {
        for n in names {
            std::fs::rename(
                self.src.path(&format!("{STAGING}/{n}")),
                self.src.path(&format!("{SRC_DIR}/{n}")),
            )?;
        }
        Ok(())
    }
}

/// The MLSD data of `dir` on `server`, fetched straight (no proxy).
fn mlsd_bytes(server: &FtpServer, dir: &str) -> Result<Vec<u8>> {
    let mut ftp = server.login()?;
    ftp.set_timeout(Duration::from_secs(120))?;
    ftp.expect("TYPE I", 200)?;
    let addr = ftp.pasv()?;
    ftp.send(&format!("MLSD {dir}"))?;
    let mut data = TcpStream::connect(addr)?;
    let r = ftp.reply()?;
    ensure!(r.code == 150 || r.code == 125, "MLSD: {r:?}");
    let mut out = Vec::new();
    data.read_to_end(&mut out)?;
    let r = ftp.reply()?;
    ensure!(r.code == 226 || r.code == 250, "MLSD end: {r:?}");
    Ok(out)
}

/// The bytes the sled store holds for one checkpoint entry: its key (the watch id, 8
/// bytes, and the path) and its JSON record (`WatchFileV1`: the same fields, the same
/// omissions).
fn record_bytes(path: &str, e: &bftp_core::watch::Entry) -> usize {
    let mut rec = serde_json::Map::new();
    rec.insert("v".into(), json!(1));
    if let Some(s) = e.facts.size {
        rec.insert("size".into(), json!(s));
    }
    if let Some(m) = &e.facts.modified {
        rec.insert("mtime".into(), json!(m));
    }
    if let Some(u) = &e.facts.unique {
        rec.insert("unique".into(), json!(u));
    }
    rec.insert("since".into(), json!(e.since.0));
    if let Some(o) = e.outcome {
        rec.insert("outcome".into(), json!(o.as_str()));
    }
    if let Some(h) = &e.hint {
        rec.insert("hint".into(), json!(h));
    }
    rec.insert("taken".into(), json!(e.taken));
    8 + path.len() + Value::Object(rec).to_string().len()
}

/// CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into ts only.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => todo.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn file_count(dir: &Path) -> Result<usize> {
    Ok(std::fs::read_dir(dir)?.count())
}

/// CPU seconds of one waited-for child (wait4's rusage), and whether it exited 0.
fn wait_rusage(child: &Child) -> Result<(bool, f64)> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid, writing into the two locals only.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    ensure!(r > 0, "wait4: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok((ok, tv(ru.ru_utime) + tv(ru.ru_stime)))
}

/// `lftp mirror --only-newer` of `out/` on the source (through its proxy) into `local`:
/// wall and CPU seconds.
fn lftp_mirror(b: &Bench, local: &Path, home: &Path) -> Result<Cost> {
    let script = format!(
        "set ftp:ssl-allow no; set ftp:use-mlsd yes; set mirror:parallel-transfer-count {}; \
         mirror --only-newer ftp://{}:{}@{}:{}/{SRC_DIR} {}",
        b.s.pairs,
        b.src.user(),
        b.src.password(),
        b.src.host(),
        b.src_proxy.port(),
        local.display()
    );
    let start = Instant::now();
    let mut child = Command::new("lftp")
        .arg("-c")
        .arg(script)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("lftp")?;
    let (ok, cpu) = wait_rusage(&child)?;
    let wall = start.elapsed().as_secs_f64();
    if !ok {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        bail!("lftp failed: {}", err.trim());
    }
    Ok(Cost {
        wall,
        cpu,
        written: 0,
    })
}

fn kib(b: u64) -> String {
    format!("{:.0} KiB", b as f64 / 1024.0)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

struct Round {
    poll_ms: Option<u64>,
    polls: usize,
    cost: Cost,
}

fn main() -> Result<()> {
    let s = Settings {
        files: env_or("BFTP_BENCH_FILES", 100_000),
        size: env_or("BFTP_BENCH_SIZE", 64),
        per_round: env_or("BFTP_BENCH_ROUND", 1000),
        rounds: env_or("BFTP_BENCH_ROUNDS", 3usize).max(1),
        rtt: Duration::from_millis(env_or("BFTP_BENCH_RTT_MS", 20)),
        every: env_or("BFTP_BENCH_EVERY", "2s".to_string()),
        idle_polls: env_or("BFTP_BENCH_IDLE_POLLS", 5u64).max(1),
        pairs: env_or("BFTP_BENCH_PAIRS", 4),
        limit: Duration::from_secs(env_or("BFTP_BENCH_TIMEOUT", 3600)),
    };
    let _ = (bin("bftpd"), bin("bftp"));
    let roots = Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir());
    let opts = |last: u8| FtpOptions {
        host: std::net::Ipv4Addr::new(127, 0, 0, last),
        passive_ports: 2000,
        parent: roots.clone(),
        ..FtpOptions::default()
    };
    let src = FtpServer::start(ServerKind::Proftpd, opts(2))?;
    let dst = FtpServer::start(ServerKind::PureFtpd, opts(3))?;
    src.mkdir(SRC_DIR)?;
    src.mkdir(STAGING)?;
    for d in [DST_DIR, CMP_DIR, LATE_DIR] {
        dst.mkdir(d)?;
    }
    let made = Instant::now();
    for i in 0..s.files {
        src.put_file(
            &format!("{SRC_DIR}/f{i:06}.dat"),
            &pattern(i as u64, s.size),
        )?;
    }
    eprintln!(
        "{} files written in {:.1} s",
        s.files,
        made.elapsed().as_secs_f64()
    );
    let src_proxy = DelayProxy::for_server(&src, s.rtt / 2)?;
    let dst_proxy = DelayProxy::for_server(&dst, s.rtt / 2)?;
    let pairs = s.pairs;
    let d = Bftpd::start_with(|dir| {
        Bftpd::default_config(dir).replace(
            "level = \"debug\"",
            "level = \"warn,bftpd::watch=debug\"\nformat = \"json\"",
        ) + &format!(
            "[ftp]\nparallel_pairs = {pairs}\nmax_connections_per_host = 40\n\
             max_listing_bytes = 268435456\n"
        )
    })?;
    let pid = d.pid().context("bftpd pid")?;
    let store_dir = d.state_dir().join("store");
    println!(
        "source proFTPD {} (MLSD), destination Pure-FTPd {}, control round trip {} ms \
         (delay proxy; data direct); {} files of {} B in {SRC_DIR}/; rounds of {} new files; \
         watch every {}, settle 0s; bftpd/bftp from target/{}, sled store; {} CPUs, loadavg {}",
        src.addr(),
        dst.addr(),
        s.rtt.as_millis(),
        s.files,
        s.size,
        s.per_round,
        s.every,
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "debug".into()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
    );
    let mut b = Bench {
        s,
        src,
        dst,
        src_proxy,
        dst_proxy,
        d,
        pid,
        log_seen: 0,
    };
    let store_before = dir_bytes(&store_dir);

    // 1. The baseline: the first poll, every file new.
    let m = b.mark()?;
    let id = b.add_watch(
        DST_DIR,
        &b.s.every.clone(),
        json!({"settle": "0s", "ignore": ["late-*"]}),
    )?;
    // The poll's own line comes once its record is written (its job with it).
    let deadline = Instant::now() + b.s.limit;
    let mut first = Vec::new();
    while !first.iter().any(|p: &Polled| p.taken > 0) {
        ensure!(Instant::now() < deadline, "no first poll: {}", b.show(id)?);
        std::thread::sleep(Duration::from_millis(10));
        first.extend(b.polled());
    }
    let first_cost = b.since(&m)?;
    let w = b.show(id)?;
    ensure!(
        w["last_error"].is_null(),
        "the first poll failed: {}",
        w["last_error"]
    );
    let first_ms = first.iter().find(|p| p.taken > 0).map(|p| p.took_ms);
    let first_taken = first.iter().map(|p| p.taken).max().unwrap_or(0);
    eprintln!("first poll: {first_taken} files taken in {first_ms:?} ms; delivering them at 0 ms");
    b.set_rtt(Duration::ZERO);
    let t = Instant::now();
    let files = b.s.files as u64;
    b.wait_watch(id, "the baseline delivered", Duration::from_secs(1), |w| {
        Bench::delivered(w) >= files
    })?;
    let baseline_delivery = t.elapsed().as_secs_f64();
    b.set_rtt(b.s.rtt);
    eprintln!("baseline delivered in {baseline_delivery:.1} s (at 0 ms, setup)");

    // 2. Steady-state rounds.
    let mut rounds = Vec::new();
    let mut round_names = Vec::new();
    for r in 1..=b.s.rounds {
        let w = b.wait_watch(id, "idle", Duration::from_millis(100), |w| {
            w["current_job"].is_null()
        })?;
        let base = Bench::delivered(&w);
        let names = b.stage(&format!("r{r}"), b.s.per_round)?;
        b.polled();
        let m = b.mark()?;
        b.move_in(&names)?;
        let want = base + names.len() as u64;
        b.wait_watch(id, "the round delivered", Duration::from_millis(100), |w| {
            Bench::delivered(w) >= want
        })?;
        let cost = b.since(&m)?;
        let polled = b.polled();
        let round = Round {
            poll_ms: polled.iter().find(|p| p.taken > 0).map(|p| p.took_ms),
            polls: polled.len(),
            cost,
        };
        eprintln!(
            "round {r}: poll {:?} ms, delivered in {:.2} s",
            round.poll_ms, cost.wall
        );
        rounds.push(round);
        round_names.push(names);
    }

    // 3. Idle polls: nothing new.
    b.wait_watch(id, "idle", Duration::from_millis(100), |w| {
        w["current_job"].is_null()
    })?;
    let p0 = b.show(id)?["polls"].as_u64().unwrap_or(0);
    b.wait_watch(id, "the next poll", Duration::from_millis(20), |w| {
        w["polls"].as_u64().unwrap_or(0) > p0
    })?;
    b.polled();
    let m = b.mark()?;
    let p1 = b.show(id)?["polls"].as_u64().unwrap_or(0);
    let want = p1 + b.s.idle_polls;
    b.wait_watch(id, "idle polls", Duration::from_millis(20), |w| {
        w["polls"].as_u64().unwrap_or(0) >= want
    })?;
    let idle = b.since(&m)?;
    let idle_polls = b.polled();
    let idle_n = idle_polls.len().max(1) as f64;
    let idle_ms = idle_polls.iter().map(|p| p.took_ms).sum::<u64>() as f64 / idle_n;
    let idle_cpu = idle.cpu / idle_n;
    let idle_written = idle.written as f64 / idle_n;

    // 4. The comparison: round 1's files by a one-off wildcard job, the watch paused.
    b.pause(id, true)?;
    let url = |s: &FtpServer, port: u16, path: &str| {
        format!("ftp://{}@{}:{port}/{path}", s.user(), s.host())
    };
    let source = url(&b.src, b.src_proxy.port(), &format!("{SRC_DIR}/r1-*.dat"));
    let dest = url(&b.dst, b.dst_proxy.port(), &format!("{CMP_DIR}/"));
    let m = b.mark()?;
    let o = b.d.bftp_env(
        None,
        &["--json", "submit", &source, &dest],
        &[
            ("BFTP_SOURCE_PASSWORD", b.src.password()),
            ("BFTP_DEST_PASSWORD", b.dst.password()),
        ],
    );
    ensure!(o.status.success(), "submit: {}", text(&o));
    let job: Value = serde_json::from_slice(&o.stdout)?;
    let job_id = job["job"]["id"].as_u64().context("no job id")?;
    let deadline = Instant::now() + b.s.limit;
    let outcome = loop {
        let (st, body) = http(
            b.d.socket(),
            "GET",
            "/v1/jobs?state=finished&all=true&limit=10",
            None,
            &[],
        )?;
        ensure!(st == 200, "list: {st} {body}");
        let v: Value = serde_json::from_str(&body)?;
        let found = v["jobs"].as_array().and_then(|jobs| {
            jobs.iter()
                .find(|j| j["id"].as_u64() == Some(job_id))
                .map(|j| j["outcome"].as_str().unwrap_or("?").to_owned())
        });
        if let Some(o) = found {
            break o;
        }
        ensure!(Instant::now() < deadline, "job {job_id} not done in time");
        std::thread::sleep(Duration::from_millis(100));
    };
    let submit = b.since(&m)?;
    let cmp_files = file_count(&b.dst.path(CMP_DIR))?;
    ensure!(
        outcome == "succeeded" && cmp_files == b.s.per_round,
        "the wildcard job: {outcome}, {cmp_files} files"
    );

    // 5. The listing's parse alone.
    let fetch = Instant::now();
    let listing = mlsd_bytes(&b.src, &format!("/{SRC_DIR}"))?;
    let fetch_s = fetch.elapsed().as_secs_f64();
    // CPU time of this thread (as the poll's is bftpd's CPU), and wall time; best of 5.
    let (mut parse_s, mut parse_wall) = (f64::MAX, f64::MAX);
    let mut parsed = 0;
    for _ in 0..5 {
        let (t, c) = (Instant::now(), thread_cpu());
        let l = bftp_ftp::parse::listing::parse_mlsd(&listing, &format!("/{SRC_DIR}"));
        parse_s = parse_s.min(thread_cpu() - c);
        parse_wall = parse_wall.min(t.elapsed().as_secs_f64());
        parsed = l.entries.len();
        drop(l);
    }

    // 6. lftp, from a local copy seeded on disk.
    let scratch = tempfile::Builder::new().prefix("bench-watch-").tempdir()?;
    let local = scratch.path().join("mirror");
    let home = scratch.path().join("home");
    std::fs::create_dir(&home)?;
    let cp = Command::new("cp")
        .arg("-a")
        .arg(b.src.path(SRC_DIR))
        .arg(&local)
        .output()?;
    ensure!(cp.status.success(), "cp -a: {}", text(&cp));
    let names = b.stage("lftp", b.s.per_round)?;
    b.move_in(&names)?;
    let lftp_round = lftp_mirror(&b, &local, &home)?;
    let lftp_got = names.iter().filter(|n| local.join(n).is_file()).count();
    // The watch takes them too (not measured), so that its checkpoint holds every file.
    let base = Bench::delivered(&b.show(id)?);
    b.pause(id, false)?;
    let want = base + names.len() as u64;
    b.wait_watch(
        id,
        "the lftp round delivered",
        Duration::from_millis(200),
        |w| Bench::delivered(w) >= want,
    )?;
    // The two awkward files: one moved in with an old modify time, one still being written.
    b.src
        .put_file(&format!("{STAGING}/late-old.dat"), &pattern(7, 4096))?;
    let touch = Command::new("touch")
        .arg("-d")
        .arg("2 years ago")
        .arg(b.src.path(&format!("{STAGING}/late-old.dat")))
        .output()?;
    ensure!(touch.status.success(), "touch: {}", text(&touch));
    b.move_in(&["late-old.dat".to_string()])?;
    let growing = b
        .src
        .put_file(&format!("{SRC_DIR}/late-growing.dat"), b"")?;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, growing) = (stop.clone(), growing.clone());
        std::thread::spawn(move || -> Result<()> {
            let mut f = std::fs::OpenOptions::new().append(true).open(&growing)?;
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                f.write_all(&pattern(1000 + i, 4096))?;
                f.flush()?;
                i += 1;
                std::thread::sleep(Duration::from_millis(250));
            }
            Ok(())
        })
    };
    let late = b.add_watch(
        LATE_DIR,
        "1s",
        json!({"settle": "3s", "patterns": ["late-*"]}),
    )?;
    std::thread::sleep(Duration::from_secs(1));
    lftp_mirror(&b, &local, &home)?;
    let lftp_old = local.join("late-old.dat").is_file();
    let lftp_half = local.join("late-growing.dat").is_file();
    // Writing goes on at least 6 s more (six polls of the settle watch): bftpd must not copy.
    let writing_until = Instant::now() + Duration::from_secs(6);
    let mut bftpd_half = false;
    while Instant::now() < writing_until {
        bftpd_half |= b.dst.path(&format!("{LATE_DIR}/late-growing.dat")).exists();
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    let w = b.wait_watch(late, "the late files", Duration::from_millis(200), |w| {
        Bench::delivered(w) >= 2
    })?;
    let late_jobs = w["jobs"].as_array().map_or(0, Vec::len);
    let bftpd_old = b.dst.path(&format!("{LATE_DIR}/late-old.dat")).is_file();
    let whole =
        b.dst.read_file(&format!("{LATE_DIR}/late-growing.dat"))? == std::fs::read(&growing)?;

    // 7. The checkpoint, bftpd stopped.
    let present = file_count(&b.src.path(SRC_DIR))?;
    let watched = present - 2; // the two late-* files are ignored by the main watch
    b.d.terminate(Duration::from_secs(30))?;
    let store_after = dir_bytes(&store_dir);
    let store = SledStore::open(&store_dir, StoreOptions::default())?;
    let cp = store.watch_checkpoint(WatchId(id))?;
    let entries = cp.len();
    let cp_bytes: usize = cp.iter().map(|(p, e)| record_bytes(p, e)).sum();
    let one_record = cp
        .iter()
        .find(|(p, _)| p.starts_with('f'))
        .map_or(0, |(p, e)| record_bytes(p, e));
    drop(store);

    // The table.
    let poll_cpu = rounds.iter().map(|r| r.cost.cpu).sum::<f64>() / rounds.len() as f64;
    let poll_written = rounds.iter().map(|r| r.cost.written).sum::<u64>() / rounds.len() as u64;
    let poll_wall = rounds.iter().map(|r| r.cost.wall).sum::<f64>() / rounds.len() as f64;
    println!("\nfirst poll ({first_taken} files new): {} ms (bftpd's took_ms: listing, rule, a job of {first_taken} members written), CPU {:.2} s, store written {}; its delivery (setup, at 0 ms): {baseline_delivery:.1} s",
        first_ms.map_or("?".into(), |m| m.to_string()), first_cost.cpu, kib(first_cost.written));
    println!("\nsteady state: rounds of {} new files among {}+ (round = from the rename into {SRC_DIR}/ to `delivered` grown by them)", b.s.per_round, b.s.files);
    println!(
        "{:<6} {:>9} {:>6} {:>9} {:>9} {:>12}",
        "round", "poll ms", "polls", "wall s", "CPU s", "written"
    );
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "{:<6} {:>9} {:>6} {:>9.2} {:>9.3} {:>12}",
            i + 1,
            r.poll_ms.map_or("?".into(), |m| m.to_string()),
            r.polls,
            r.cost.wall,
            r.cost.cpu,
            kib(r.cost.written)
        );
    }
    println!(
        "{:<6} {:>9.0} {:>6} {:>9} {:>9.3} {:>12}   (per poll, {} polls with nothing new)",
        "idle",
        idle_ms,
        "",
        "",
        idle_cpu,
        kib(idle_written as u64),
        idle_polls.len()
    );
    println!(
        "\n{:<34} {:>9} {:>9} {:>12}",
        "the same new files", "wall s", "CPU s", "written"
    );
    println!(
        "{:<34} {:>9.2} {:>9.3} {:>12}",
        "watch round (poll + job, mean)",
        poll_wall,
        poll_cpu,
        kib(poll_written)
    );
    println!(
        "{:<34} {:>9.2} {:>9.3} {:>12}",
        "bftp submit out/r1-*.dat (one-off)",
        submit.wall,
        submit.cpu,
        kib(submit.written)
    );
    println!(
        "{:<34} {:>9.2} {:>9.3} {:>12}",
        "lftp mirror --only-newer (to disk)", lftp_round.wall, lftp_round.cpu, "-"
    );
    println!(
        "ratios: watch round / one-off submit: wall {:.2}x, CPU {:.2}x, written {:.2}x; lftp / watch round wall {:.2}x \
         (lftp fetched {lftp_got}/{} new files into a local directory, {} at once; bftp copies server to server)",
        poll_wall / submit.wall,
        poll_cpu / submit.cpu,
        poll_written as f64 / submit.written.max(1) as f64,
        lftp_round.wall / poll_wall,
        b.s.per_round,
        b.s.pairs,
    );
    println!(
        "\nthe listing: {} B of MLSD, {parsed} entries, fetched straight (no proxy) in {:.2} s, \
         parse_mlsd alone {:.1} ms CPU, {:.1} ms wall (best of 5, this process)",
        listing.len(),
        fetch_s,
        parse_s * 1e3,
        parse_wall * 1e3
    );
    println!(
        "the checkpoint: {entries} entries for {watched} files watched ({present} in {SRC_DIR}/), {} as stored (key + JSON record; one record {one_record} B); sled directory {} -> {}",
        kib(cp_bytes as u64),
        kib(store_before),
        kib(store_after)
    );
    println!("\n{:<62} {:>7} {:>7}", "two awkward files", "lftp", "bftpd");
    println!(
        "{:<62} {:>7} {:>7}",
        "(a) moved in with a modify time 2 years old: taken",
        yes(lftp_old),
        yes(bftpd_old)
    );
    println!(
        "{:<62} {:>7} {:>7}",
        "(b) still being written: a copy taken while it grew",
        yes(lftp_half),
        yes(bftpd_half)
    );
    println!(
        "bftpd: a watch with settle 3s over late-*: delivered 2 in {late_jobs} job(s), late-growing.dat whole: {}",
        yes(whole)
    );

    let ratio = idle_cpu / parse_s;
    let cp_goal = 1.5 * watched as f64 * one_record as f64;
    println!("\n{:<58} {:>14} {:>8}", "goal", "figure", "");
    println!(
        "{:<58} {:>13.2}x {:>8}",
        "idle poll CPU / parse CPU <= 2x",
        ratio,
        met(ratio <= 2.0)
    );
    println!(
        "{:<58} {:>13.2}x {:>8}",
        "checkpoint bytes / (files x one record) <= 1.5x",
        cp_bytes as f64 / (watched as f64 * one_record as f64),
        met(cp_bytes as f64 <= cp_goal)
    );
    println!(
        "{:<58} {:>14} {:>8}",
        "checkpoint entries ~ files present",
        format!("{entries}/{watched}"),
        met(entries == watched)
    );
    println!(
        "{:<58} {:>14} {:>8}",
        "old modify time moved in: delivered",
        yes(bftpd_old),
        met(bftpd_old)
    );
    println!(
        "{:<58} {:>14} {:>8}",
        "file being written: not taken (settle 3s), then whole",
        format!("{}/{}", yes(!bftpd_half), yes(whole)),
        met(!bftpd_half && whole)
    );
    Ok(())
}
