//! Benchmark of whole directory trees (issue 16): a recursive bftp job against lftp's
//! `mirror` with FXP, between the same two real servers, on loopback and over a far control
//! connection, in one run. Run with
//!   cargo build --workspace --bins && cargo run -p bftp-tests --bin bench-tree
//! (`BFTP_TEST_PROFILE=release` takes bftpd and bftp from target/release instead).
//!
//! The source tree (on source proFTPD at 127.0.0.2, destination Pure-FTPd at 127.0.0.3;
//! `BENCH_SRC`/`BENCH_DST` choose among vsftpd, proftpd, pure-ftpd) has `BENCH_ENTRIES`
//! entries (default 10,000) in three levels: `BENCH_FANOUT` (default 10) top directories,
//! each with that many subdirectories, and files of `BENCH_SIZE` bytes (default 4 KiB) in
//! the top directories and their subdirectories. `BENCH_RTTS` (default `0,20`) lists the
//! control round trips in ms: 0 connects straight to the servers, any other runs through a
//! delay proxy (`bftp_tests::DelayProxy`) per server delaying half of it each way; the data
//! connections between the servers stay direct.
//!
//! For each round trip and each tool (`bftp`: `bftp submit --recursive`, one queued job,
//! timed from the submit to the job's end; `lftp`: `mirror` with `ftp:use-fxp` and
//! `ftp:fxp-force`), both with `BENCH_PAIRS` (default 4) transfers at once:
//! - a clean run: files/s, the controller's CPU (bftpd's utime+stime from /proc; lftp's own
//!   rusage, taken with wait4), its peak RSS (bftpd's VmHWM; lftp's ru_maxrss);
//! - a kill run (unless `BENCH_KILL=0`): once `BENCH_KILL_AT` (default 0.33) of the files
//!   have arrived, the controller is killed with SIGKILL, 100 ms later started again (bftpd
//!   on its state directory; lftp with the same `mirror` command), and the time from that
//!   start to the next file the destination server logs as received (its xferlog, a complete
//!   incoming transfer) is the resume time; if no file arrives before the job ends, the time
//!   to its end, marked so. `copies` counts complete incoming transfers in the destination's
//!   xferlog during the run: more than the files means files copied twice.
//!
//! After every run the destination tree is checked against the source: the same set of
//! directories and files (relative paths), each file with the source's sha256.
//!
//! `transfer` (in `BENCH_TOOLS`, default `lftp,bftp,transfer`) times `bftp transfer
//! --recursive`, the same tree walked in memory and copied in the foreground; it has no kill
//! run (a foreground transfer killed loses its run).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::{contents, env_or, server_kind};
use bftp_tests::daemon::{bin, http, text, Bftpd};
use bftp_tests::procstat::{cpu_seconds, loadavg, status_kib};
use bftp_tests::{DelayProxy, FtpOptions, FtpServer, ServerKind};

const SRC_TREE: &str = "tree";
const DST_PARENT: &str = "in";
const DST_TREE: &str = "in/tree";

/// The source tree: its directories and files (relative to the tree's root).
struct Layout {
    dirs: Vec<String>,
    files: Vec<String>,
}

/// `fanout` top directories with `fanout` subdirectories each, and the rest of `entries` as
/// files spread over all of them (one in `fanout + 1` in a top directory, the rest below).
fn layout(entries: usize, fanout: usize) -> Result<Layout> {
    let fanout = fanout.max(1);
    let mut dirs = Vec::new();
    for t in 0..fanout {
        dirs.push(format!("d{t:03}"));
        for s in 0..fanout {
            dirs.push(format!("d{t:03}/s{s:03}"));
        }
    }
    ensure!(
        entries > dirs.len(),
        "BENCH_ENTRIES={entries} leaves no room for files beside {} directories",
        dirs.len()
    );
    let files = (0..entries - dirs.len())
        .map(|i| {
            let top = i % fanout;
            let sub = (i / fanout) % (fanout + 1);
            if sub == fanout {
                format!("d{top:03}/f{i:06}.dat")
            } else {
                format!("d{top:03}/s{sub:03}/f{i:06}.dat")
            }
        })
        .collect();
    Ok(Layout { dirs, files })
}

/// Every directory and every file's sha256 below `root`, by relative path.
#[derive(PartialEq, Eq)]
struct TreeSums {
    dirs: BTreeSet<String>,
    files: BTreeMap<String, String>,
}

fn tree_sums(root: &Path) -> Result<TreeSums> {
    let mut dirs = BTreeSet::new();
    let mut names = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let e = e?;
            let p = e.path();
            let rel = p.strip_prefix(root)?.to_string_lossy().into_owned();
            let t = e.file_type()?;
            if t.is_dir() {
                dirs.insert(rel);
                todo.push(p);
            } else {
                names.push(rel);
            }
        }
    }
    names.sort();
    let mut files = BTreeMap::new();
    for chunk in names.chunks(500) {
        let o = Command::new("sha256sum")
            .arg("--")
            .args(chunk)
            .current_dir(root)
            .output()
            .context("sha256sum")?;
        ensure!(o.status.success(), "sha256sum failed in {}", root.display());
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let (sum, name) = line.split_once("  ").context("sha256sum line")?;
            files.insert(name.to_owned(), sum.to_owned());
        }
    }
    Ok(TreeSums { dirs, files })
}

/// What differs between the source's tree and the destination's, or Ok.
fn compare(src: &TreeSums, dst_root: &Path) -> Result<(), String> {
    let dst = tree_sums(dst_root).map_err(|e| format!("{e:#}"))?;
    if *src == dst {
        return Ok(());
    }
    let missing = src.files.keys().filter(|k| !dst.files.contains_key(*k));
    let extra = dst.files.keys().filter(|k| !src.files.contains_key(*k));
    let differ = src
        .files
        .iter()
        .filter(|(k, v)| dst.files.get(*k).is_some_and(|d| d != *v))
        .count();
    Err(format!(
        "{} files missing, {} extra, {differ} with another sha256; directories: {} missing, {} extra",
        missing.count(),
        extra.count(),
        src.dirs.difference(&dst.dirs).count(),
        dst.dirs.difference(&src.dirs).count(),
    ))
}

/// Counts complete incoming transfers in a server's xferlog as it grows, reading only what
/// was appended since the last look. The line format: a 5-field date, seconds, host, bytes,
/// the file name (spaces allowed), then 9 fields of which the 3rd is the direction (`i`) and
/// the 9th the completion (`c`).
struct Arrivals {
    path: PathBuf,
    offset: u64,
    partial: String,
    count: u64,
}

impl Arrivals {
    fn new(path: PathBuf) -> Arrivals {
        Arrivals {
            path,
            offset: 0,
            partial: String::new(),
            count: 0,
        }
    }

    /// Complete incoming transfers logged so far.
    fn poll(&mut self) -> Result<u64> {
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self.count),
            Err(e) => return Err(e).context("opening the xferlog"),
        };
        if f.metadata()?.len() <= self.offset {
            return Ok(self.count);
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        while let Some(nl) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=nl).collect();
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() >= 18 {
                let tail = &fields[fields.len() - 9..];
                if tail[2] == "i" && tail[8] == "c" {
                    self.count += 1;
                }
            }
        }
        Ok(self.count)
    }
}

/// CPU seconds and peak RSS (KiB) of one waited-for child, from wait4's rusage.
fn wait_rusage(child: &Child) -> Result<(bool, f64, u64)> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid, writing into the two locals only.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    ensure!(r > 0, "wait4: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok((
        ok,
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_maxrss.max(0) as u64,
    ))
}

/// Whether a child not yet reaped has exited, without reaping it (so wait4 still can).
fn has_exited(child: &Child) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child's pid with WNOWAIT leaves it to be reaped later.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            child.id(),
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is set (non-zero) by waitid when the child has exited.
    r == 0 && unsafe { info.si_pid() } != 0
}

struct Row {
    rtt: Duration,
    tool: &'static str,
    files: usize,
    wall: f64,
    cpu: f64,
    rss_kib: u64,
    check: Result<(), String>,
}

struct Resume {
    rtt: Duration,
    tool: &'static str,
    killed_after: u64,
    /// From the restart until the controller answers (bftpd's API); lftp has nothing to wait for.
    ready: Option<f64>,
    resume: f64,
    to_end: bool,
    copies: u64,
    wall: f64,
    check: Result<(), String>,
}

struct Bench {
    src: FtpServer,
    dst: FtpServer,
    source: TreeSums,
    files: usize,
    pairs: usize,
    kill_at: f64,
    limit: Duration,
}

/// Where the controller connects for one round trip.
struct Route {
    rtt: Duration,
    src_port: u16,
    dst_port: u16,
}

impl Bench {
    fn clean(&self) -> Result<()> {
        let dir = self.dst.path(DST_PARENT);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        self.dst.mkdir(DST_PARENT)?;
        Ok(())
    }

    fn verify(&self) -> Result<(), String> {
        compare(&self.source, &self.dst.path(DST_TREE))
    }

    fn arrivals(&self) -> Result<Arrivals> {
        let mut a = Arrivals::new(self.dst.xferlog());
        a.poll()?;
        Ok(a)
    }

    fn bftp_url(s: &FtpServer, port: u16, path: &str) -> String {
        format!("ftp://{}@{}:{port}/{path}", s.user(), s.host())
    }

    fn bftpd(&self) -> Result<Bftpd> {
        Bftpd::start_with(|dir| {
            Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"warn\"")
                + &format!(
                    "[ftp]\nparallel_pairs = {}\nmax_connections_per_host = 40\n",
                    self.pairs
                )
        })
    }

    fn env(&self) -> [(&str, &str); 2] {
        [
            ("BFTP_SOURCE_PASSWORD", self.src.password()),
            ("BFTP_DEST_PASSWORD", self.dst.password()),
        ]
    }

    fn submit(&self, d: &Bftpd, route: &Route) -> Result<u64> {
        let source = Self::bftp_url(&self.src, route.src_port, SRC_TREE);
        let dest = Self::bftp_url(&self.dst, route.dst_port, DST_TREE);
        let o = d.bftp_env(
            None,
            &["--json", "submit", "--recursive", &source, &dest],
            &self.env(),
        );
        ensure!(o.status.success(), "submit: {}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
        v["job"]["id"].as_u64().context("no job id")
    }

    /// The job's outcome once it is finished, or None. Lists only finished jobs: empty (and
    /// cheap for the daemon) until this one is.
    fn finished(d: &Bftpd, id: u64) -> Result<Option<String>> {
        let (st, body) = http(
            d.socket(),
            "GET",
            "/v1/jobs?state=finished&all=true&limit=10",
            None,
            &[],
        )?;
        ensure!(st == 200, "list: {st} {body}");
        let v: serde_json::Value = serde_json::from_str(&body)?;
        Ok(v["jobs"].as_array().and_then(|jobs| {
            jobs.iter()
                .find(|j| j["id"].as_u64() == Some(id))
                .map(|j| j["outcome"].as_str().unwrap_or("?").to_owned())
        }))
    }

    fn wait_job(&self, d: &Bftpd, id: u64, deadline: Instant) -> Result<Result<(), String>> {
        loop {
            if let Some(outcome) = Self::finished(d, id)? {
                return Ok(if outcome == "succeeded" {
                    Ok(())
                } else {
                    Err(format!("job {id}: {outcome}"))
                });
            }
            ensure!(Instant::now() < deadline, "job {id} not done in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn bftp(&self, route: &Route) -> Result<Row> {
        self.clean()?;
        let d = self.bftpd()?;
        let pid = d.pid().context("bftpd pid")?;
        let cpu = cpu_seconds(pid, false)?;
        let start = Instant::now();
        let id = self.submit(&d, route)?;
        let mut check = self.wait_job(&d, id, start + self.limit)?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid, false)? - cpu;
        let rss_kib = status_kib(pid, "VmHWM:")?;
        if check.is_ok() {
            check = self.verify();
        }
        Ok(Row {
            rtt: route.rtt,
            tool: "bftp queued",
            files: self.files,
            wall,
            cpu,
            rss_kib,
            check,
        })
    }

    /// Polls the destination's arrivals until `until` of them since `base`, or `stop` says so.
    fn watch(
        &self,
        arrivals: &mut Arrivals,
        base: u64,
        until: u64,
        deadline: Instant,
        mut stop: impl FnMut() -> Result<bool>,
    ) -> Result<u64> {
        let mut last_stop = Instant::now();
        loop {
            let n = arrivals.poll()? - base;
            if n >= until {
                return Ok(n);
            }
            if last_stop.elapsed() >= Duration::from_millis(50) {
                last_stop = Instant::now();
                if stop()? {
                    return Ok(arrivals.poll()? - base);
                }
            }
            ensure!(Instant::now() < deadline, "no progress in time");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn kill_at(&self) -> u64 {
        ((self.files as f64 * self.kill_at) as u64).clamp(1, self.files as u64)
    }

    fn bftp_kill(&self, route: &Route) -> Result<Resume> {
        self.clean()?;
        let mut arrivals = self.arrivals()?;
        let base = arrivals.count;
        let mut d = self.bftpd()?;
        let start = Instant::now();
        let deadline = start + self.limit;
        let id = self.submit(&d, route)?;
        let killed_after = self.watch(&mut arrivals, base, self.kill_at(), deadline, || {
            Ok(Self::finished(&d, id)?.is_some())
        })?;
        d.kill9();
        // Transfers between the servers that were under way may still end; let them.
        std::thread::sleep(Duration::from_millis(100));
        let before = arrivals.poll()?;
        let restart = Instant::now();
        d.launch()?;
        let ready = restart.elapsed().as_secs_f64();
        let mut ended = false;
        let n = self.watch(&mut arrivals, before, 1, deadline, || {
            ended = Self::finished(&d, id)?.is_some();
            Ok(ended)
        })?;
        let resume = restart.elapsed().as_secs_f64();
        let mut check = self.wait_job(&d, id, deadline)?;
        let wall = start.elapsed().as_secs_f64();
        if check.is_ok() {
            check = self.verify();
        }
        Ok(Resume {
            rtt: route.rtt,
            tool: "bftp queued",
            killed_after,
            ready: Some(ready),
            resume,
            to_end: n == 0,
            copies: arrivals.poll()? - base,
            wall,
            check,
        })
    }

    fn lftp_command(&self, route: &Route, home: &Path) -> Result<Command> {
        let url = |s: &FtpServer, port: u16, path: &str| {
            format!(
                "ftp://{}:{}@{}:{port}/{path}",
                s.user(),
                s.password(),
                s.host()
            )
        };
        let script = format!(
            "set ftp:use-fxp yes; set ftp:fxp-force yes; set ftp:ssl-allow no; \
             set mirror:parallel-transfer-count {}; mirror {} {}",
            self.pairs,
            url(&self.src, route.src_port, SRC_TREE),
            url(&self.dst, route.dst_port, DST_TREE)
        );
        let mut c = Command::new("lftp");
        c.arg("-c")
            .arg(script)
            .env("HOME", home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Ok(c)
    }

    fn lftp_failed(child: &mut Child) -> String {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        format!("lftp failed: {}", err.trim())
    }

    fn lftp(&self, route: &Route) -> Result<Row> {
        self.clean()?;
        let home = tempfile::Builder::new().prefix("bench-lftp-").tempdir()?;
        let start = Instant::now();
        let mut child = self.lftp_command(route, home.path())?.spawn()?;
        // Read stderr only once lftp is done: it writes little.
        let (ok, cpu, rss_kib) = wait_rusage(&child)?;
        let wall = start.elapsed().as_secs_f64();
        let check = if ok {
            self.verify()
        } else {
            Err(Self::lftp_failed(&mut child))
        };
        Ok(Row {
            rtt: route.rtt,
            tool: "lftp mirror",
            files: self.files,
            wall,
            cpu,
            rss_kib,
            check,
        })
    }

    fn lftp_kill(&self, route: &Route) -> Result<Resume> {
        self.clean()?;
        let home = tempfile::Builder::new().prefix("bench-lftp-").tempdir()?;
        let mut arrivals = self.arrivals()?;
        let base = arrivals.count;
        let start = Instant::now();
        let deadline = start + self.limit;
        let mut first = self.lftp_command(route, home.path())?.spawn()?;
        let killed_after = self.watch(&mut arrivals, base, self.kill_at(), deadline, || {
            Ok(has_exited(&first))
        })?;
        first.kill()?;
        wait_rusage(&first)?;
        std::thread::sleep(Duration::from_millis(100));
        let before = arrivals.poll()?;
        let restart = Instant::now();
        let mut second = self.lftp_command(route, home.path())?.spawn()?;
        let n = self.watch(&mut arrivals, before, 1, deadline, || {
            Ok(has_exited(&second))
        })?;
        let resume = restart.elapsed().as_secs_f64();
        let (ok, _, _) = wait_rusage(&second)?;
        let wall = start.elapsed().as_secs_f64();
        let check = if ok {
            self.verify()
        } else {
            Err(Self::lftp_failed(&mut second))
        };
        Ok(Resume {
            rtt: route.rtt,
            tool: "lftp mirror",
            killed_after,
            ready: None,
            resume,
            to_end: n == 0,
            copies: arrivals.poll()? - base,
            wall,
            check,
        })
    }

    /// `bftp transfer --recursive`: not built; its answer, which should say so.
    /// `bftp transfer --recursive`: the tree walked and copied in the foreground, timed from
    /// the command's start to its exit.
    fn transfer(&self, route: &Route) -> Result<Row> {
        self.clean()?;
        let d = self.bftpd()?;
        let pid = d.pid().context("bftpd pid")?;
        let cpu = cpu_seconds(pid, false)?;
        let source = Self::bftp_url(&self.src, route.src_port, SRC_TREE);
        let dest = Self::bftp_url(&self.dst, route.dst_port, DST_TREE);
        let start = Instant::now();
        let o = d.bftp_env(
            None,
            &["transfer", "--recursive", &source, &dest],
            &self.env(),
        );
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid, false)? - cpu;
        let rss_kib = status_kib(pid, "VmHWM:")?;
        let check = if o.status.success() {
            self.verify()
        } else {
            let out = text(&o);
            Err(format!(
                "bftp transfer exited {:?}: {}",
                o.status.code(),
                out.lines().last().unwrap_or("")
            ))
        };
        Ok(Row {
            rtt: route.rtt,
            tool: "bftp transfer",
            files: self.files,
            wall,
            cpu,
            rss_kib,
            check,
        })
    }
}

fn check_text(c: &Result<(), String>) -> &'static str {
    if c.is_ok() {
        "ok"
    } else {
        "FAILED"
    }
}

fn main() -> Result<()> {
    let src_kind = server_kind("BENCH_SRC", ServerKind::Proftpd)?;
    let dst_kind = server_kind("BENCH_DST", ServerKind::PureFtpd)?;
    let entries: usize = env_or("BENCH_ENTRIES", 10_000);
    let fanout: usize = env_or("BENCH_FANOUT", 10);
    let size: usize = env_or("BENCH_SIZE", 4096);
    let pairs: usize = env_or("BENCH_PAIRS", 4);
    let kill = env_or("BENCH_KILL", 1u8) != 0;
    let kill_at: f64 = env_or("BENCH_KILL_AT", 0.33);
    let limit = Duration::from_secs(env_or("BENCH_TIMEOUT", 1800));
    let tools = env_or("BENCH_TOOLS", "lftp,bftp,transfer".to_string());
    let rtts: Vec<u64> = env_or("BENCH_RTTS", "0,20".to_string())
        .split(',')
        .map(|s| s.trim().parse().context("BENCH_RTTS: ms, comma-separated"))
        .collect::<Result<_>>()?;
    let _ = (bin("bftpd"), bin("bftp"));

    let roots = Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir());
    let opts = |last: u8| FtpOptions {
        host: std::net::Ipv4Addr::new(127, 0, 0, last),
        passive_ports: 2000,
        parent: roots.clone(),
        ..FtpOptions::default()
    };
    let src = FtpServer::start(src_kind, opts(2))?;
    let dst = FtpServer::start(dst_kind, opts(3))?;
    let tree = layout(entries, fanout)?;
    for d in &tree.dirs {
        src.mkdir(&format!("{SRC_TREE}/{d}"))?;
    }
    for (i, f) in tree.files.iter().enumerate() {
        src.put_file(&format!("{SRC_TREE}/{f}"), &contents(i, size))?;
    }
    let source = tree_sums(&src.path(SRC_TREE))?;
    ensure!(source.files.len() == tree.files.len() && source.dirs.len() == tree.dirs.len());
    println!(
        "source {src_kind} {}, destination {dst_kind} {}; tree of {entries} entries: {} \
         directories in 3 levels, {} files of {size} B; {pairs} transfers at once; \
         control round trips {rtts:?} ms; bftpd/bftp from target/{}; {} CPUs, loadavg {}",
        src.addr(),
        dst.addr(),
        tree.dirs.len() + 1,
        tree.files.len(),
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "debug".into()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
    );
    let bench = Bench {
        files: tree.files.len(),
        src,
        dst,
        source,
        pairs,
        kill_at,
        limit,
    };

    let mut rows = Vec::new();
    let mut resumes = Vec::new();
    for &ms in &rtts {
        let rtt = Duration::from_millis(ms);
        let mut proxies = Vec::new();
        let route = if ms == 0 {
            Route {
                rtt,
                src_port: bench.src.port(),
                dst_port: bench.dst.port(),
            }
        } else {
            proxies.push(DelayProxy::for_server(&bench.src, rtt / 2)?);
            proxies.push(DelayProxy::for_server(&bench.dst, rtt / 2)?);
            Route {
                rtt,
                src_port: proxies[0].port(),
                dst_port: proxies[1].port(),
            }
        };
        for tool in tools.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let row = match tool {
                "lftp" => bench.lftp(&route)?,
                "bftp" => bench.bftp(&route)?,
                "transfer" => bench.transfer(&route)?,
                other => bail!("BENCH_TOOLS: unknown tool {other} (lftp, bftp, transfer)"),
            };
            eprintln!(
                "{} at {ms} ms: {:.2} s, tree {}",
                row.tool,
                row.wall,
                match &row.check {
                    Ok(()) => "identical".to_string(),
                    Err(e) => format!("FAILED: {e}"),
                }
            );
            rows.push(row);
            // A foreground transfer killed loses its run: nothing to resume.
            if kill && tool != "transfer" {
                let r = match tool {
                    "lftp" => bench.lftp_kill(&route)?,
                    _ => bench.bftp_kill(&route)?,
                };
                eprintln!(
                    "{} at {ms} ms, killed: resumed in {:.2} s, tree {}",
                    r.tool,
                    r.resume,
                    match &r.check {
                        Ok(()) => "identical".to_string(),
                        Err(e) => format!("FAILED: {e}"),
                    }
                );
                resumes.push(r);
            }
        }
    }

    println!(
        "\n{:<7} {:<12} {:>7} {:>8} {:>9} {:>10} {:>10}  tree",
        "rtt", "tool", "files", "files/s", "wall s", "ctl CPU s", "peak RSS"
    );
    for r in &rows {
        println!(
            "{:<7} {:<12} {:>7} {:>8.1} {:>9.2} {:>10.2} {:>7} MiB  {}",
            format!("{} ms", r.rtt.as_millis()),
            r.tool,
            r.files,
            r.files as f64 / r.wall,
            r.wall,
            r.cpu,
            r.rss_kib / 1024,
            check_text(&r.check)
        );
    }
    if !resumes.is_empty() {
        println!(
            "\nkill -9 of the controller once {:.0}% of the files had arrived; resume = from the \
             restart to the next file the destination logged (\"end\": to the end of the job)",
            bench.kill_at * 100.0
        );
        println!(
            "{:<7} {:<12} {:>8} {:>8} {:>11} {:>8} {:>9}  tree",
            "rtt", "tool", "killed@", "ready s", "resume s", "copies", "wall s"
        );
        for r in &resumes {
            println!(
                "{:<7} {:<12} {:>8} {:>8} {:>7.2} {:<3} {:>8} {:>9.2}  {}",
                format!("{} ms", r.rtt.as_millis()),
                r.tool,
                r.killed_after,
                r.ready.map_or("-".into(), |s| format!("{s:.2}")),
                r.resume,
                if r.to_end { "end" } else { "" },
                r.copies,
                r.wall,
                check_text(&r.check)
            );
        }
        println!(
            "copies: complete incoming transfers the destination logged in the run ({} files: \
             more means files copied again after the kill)",
            bench.files
        );
    }
    for r in &rows {
        if let Err(e) = &r.check {
            println!("{} at {} ms: {e}", r.tool, r.rtt.as_millis());
        }
    }
    for r in &resumes {
        if let Err(e) = &r.check {
            println!("{} at {} ms (killed): {e}", r.tool, r.rtt.as_millis());
        }
    }
    Ok(())
}
