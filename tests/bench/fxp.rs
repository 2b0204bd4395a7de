//! Benchmark of third-party (FXP) copies, bftp against lftp: run with
//!   cargo build --release --bins && cargo run --release -p bftp-tests --bin bench-fxp
//!
//! Two real FTP servers on loopback (source vsftpd, destination proFTPD; `BENCH_SRC` and
//! `BENCH_DST` choose among vsftpd, proftpd, pure-ftpd), two data sets:
//! - one big file (`BENCH_BIG_MIB`, default 1024 MiB) of a fast non-repeating pattern,
//! - many small files (`BENCH_SMALL`, default 2,000) of 4 KiB each,
//!
//! each copied by four controllers:
//! - `bftp p1`: `bftp transfer` through a fresh release bftpd with `[ftp] parallel_pairs = 1`,
//! - `bftp p4`: the same with `parallel_pairs = 4` (the default),
//! - `lftp seq`: `lftp -c 'set ftp:use-fxp yes; set ftp:fxp-force yes; set ftp:ssl-allow no;
//!   mirror SRC DST'` (the big file is alone in its directory),
//! - `lftp par4`: the same with `set mirror:parallel-transfer-count 4`.
//!
//! For each, over the wall time of the command (`bftp` or `lftp`): files/s and MB/s; the
//! controller's CPU seconds (bftpd: utime+stime delta from /proc/PID/stat, the `bftp` CLI
//! apart from its wait4 rusage; lftp: its wait4 rusage, children included); the two servers'
//! CPU (their master's own and reaped children's times); the controller's peak RSS (bftpd
//! VmHWM of a fresh daemon per run; lftp and bftp VmHWM sampled every 5 ms); the controller's
//! /proc/PID/io rchar+wchar delta (NOT an upper bound on its network traffic: recv(2) on a
//! socket does not count in rchar, and wchar also holds bftpd's log and its event stream to
//! `bftp`); and, exactly, the TCP payload the controller sent and received: a tap thread dups
//! every TCP socket of the controller as it appears (pidfd_getfd(2), every `BENCH_TAP_MS`
//! ms, default 2; 0 turns it off) and reads TCP_INFO bytes_acked/bytes_received after the
//! run. The tap costs CPU, so it runs only in a traffic round (`#` 0, one run per tool) before
//! the timed rounds, whose rates and CPU the goals use. Each run is checked (every file there with the same size, the small ones compared
//! in full, the big one compared in full), the destination is emptied and `sync` run before
//! the next, and each run is bounded by `BENCH_TIMEOUT` seconds (default 600).
//!
//! Runs must not pay for the ones before them. Two effects did that, each up to 2-3x in CPU
//! per file: TIME_WAIT connections (each run waits, at most `BENCH_SETTLE` seconds, default
//! 70, until at most 200 are left; the servers get `BENCH_PASSIVE_PORTS` passive ports,
//! default 4,000, instead of the tests' 32), and ext4 skipping recently freed inodes (the
//! destination's earlier copies are moved aside, deleted only at the end).
//!
//! Also printed: bftp's phases (start to the listing, listing to the last file), and the FTP
//! commands per file each server received (from vsftpd's protocol log and proFTPD's
//! ExtendedLog; Pure-FTPd logs none), which is where the round trips go.
//!
//! On a loaded machine the numbers vary from run to run: `BENCH_ROUNDS=N` runs the four
//! controllers N times, interleaved, and judges the goals on the medians. Under CPU
//! saturation the column that varies least is CPU/file (controller, CLI and both servers).
//!
//! `BENCH_DATA=big,small` and `BENCH_TOOLS=bftp1,bftp4,lftp1,lftp4` pick a subset;
//! `BENCH_LOG` is bftpd's log level (default info). For a profile: `BENCH_LFTP_DEBUG=DIR`
//! writes lftp's debug logs there, `BENCH_STRACE=DIR` bftpd's and lftp's timed network
//! system calls, `BENCH_PERF=DIR` a perf profile of bftpd (both slow them down: not for the
//! numbers).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::{
    bftp_outcome, clean_destination, env_list, env_or, event, server_kind, settle, write_big,
    write_small,
};
use bftp_tests::daemon::{bin, Bftpd};
use bftp_tests::measure::{run_child, ChildRun, Tap, TcpTotals};
use bftp_tests::procstat::{
    cpu_jiffies, cpu_seconds, load1, proc_io, server_cpu, server_master, status_kib, steal_jiffies,
};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

/// Size of each small file.
const SMALL_SIZE: usize = 4096;
/// Where the data sets live on the source, and where copies go on the destination.
const BIG_DIR: &str = "big";
const BIG_NAME: &str = "big.bin";
const SMALL_DIR: &str = "small";
const DST_DIR: &str = "dst";
/// Where earlier runs' copies wait on the destination until the end (see `clean_destination`).
const TRASH_DIR: &str = "dst-done";
/// A run starts once at most this many TCP connections are in TIME_WAIT (or `BENCH_SETTLE`
/// seconds have passed).
const SETTLED_TIME_WAIT: usize = 200;

// ---- the data ----

fn same_contents(a: &Path, b: &Path) -> Result<()> {
    const CHUNK: usize = 4 << 20;
    let (mut fa, mut fb) = (File::open(a)?, File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut pos = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        ensure!(na == nb, "lengths differ near byte {pos}");
        if na == 0 {
            return Ok(());
        }
        if ba[..na] != bb[..nb] {
            let i = ba.iter().zip(&bb).position(|(x, y)| x != y).unwrap_or(0);
            bail!("contents differ at byte {}", pos + i as u64);
        }
        pos += na as u64;
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

// ---- server command logs ----

/// FTP commands a server received, by verb, from its protocol log (vsftpd: `FTP command:`
/// lines of log_ftp_protocol; proFTPD: its ExtendedLog, a line a command). None for
/// Pure-FTPd, which logs only to syslog.
struct CommandLog {
    path: Option<PathBuf>,
    kind: ServerKind,
}

impl CommandLog {
    fn new(server: &FtpServer) -> CommandLog {
        let path = match server.kind() {
            ServerKind::PureFtpd => None,
            _ => Some(server.log_file()),
        };
        CommandLog {
            path,
            kind: server.kind(),
        }
    }

    fn offset(&self) -> u64 {
        self.path
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len())
    }

    /// Verbs counted from `from` to the end of the log.
    fn verbs_since(&self, from: u64) -> Option<BTreeMap<String, u64>> {
        let path = self.path.as_ref()?;
        let mut f = File::open(path).ok()?;
        f.seek(SeekFrom::Start(from)).ok()?;
        let mut text = String::new();
        f.read_to_string(&mut text).ok()?;
        let mut verbs = BTreeMap::new();
        for line in text.lines() {
            let command = match self.kind {
                // ... [pid 12] [bftp-ftp] FTP command: Client "127.0.0.1", "RETR x"
                ServerKind::Vsftpd => line
                    .split_once("FTP command: Client ")
                    .and_then(|(_, r)| r.split_once(", \""))
                    .map(|(_, c)| c),
                // 127.0.0.1 UNKNOWN bftp-ftp [30/Nov/2026:12:00:00 +0000] "RETR x" 150 -
                _ => line.split_once('"').map(|(_, c)| c),
            };
            let Some(command) = command else { continue };
            let verb = command
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect::<String>()
                .to_ascii_uppercase();
            if !verb.is_empty() {
                *verbs.entry(verb).or_insert(0) += 1;
            }
        }
        Some(verbs)
    }
}

// ---- the runs ----

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Data {
    Big,
    Small,
}

impl Data {
    fn label(self) -> &'static str {
        match self {
            Data::Big => "big",
            Data::Small => "small",
        }
    }
    fn src_dir(self) -> &'static str {
        match self {
            Data::Big => BIG_DIR,
            Data::Small => SMALL_DIR,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    Bftp(usize),
    Lftp(usize),
}

impl Tool {
    fn label(self) -> String {
        match self {
            Tool::Bftp(n) => format!("bftp p{n}"),
            Tool::Lftp(1) => "lftp seq".into(),
            Tool::Lftp(n) => format!("lftp par{n}"),
        }
    }
    fn key(self) -> String {
        match self {
            Tool::Bftp(n) => format!("bftp{n}"),
            Tool::Lftp(n) => format!("lftp{n}"),
        }
    }
}

/// bftp's phases, from the arrival times of its events.
#[derive(Clone, Copy, Debug)]
struct Phases {
    /// Start to the `listed` event: connect, log in, list (and per-file probes).
    listed: f64,
    first_file: f64,
    last_file: f64,
}

/// One measured run.
struct Row {
    data: Data,
    tool: Tool,
    round: usize,
    files: u64,
    bytes: u64,
    wall: f64,
    ctl_cpu: f64,
    /// The `bftp` CLI (bftp runs only).
    cli_cpu: Option<f64>,
    cli_rss_kib: Option<u64>,
    /// Source and destination server CPU.
    srv_cpu: (f64, f64),
    ctl_rss_kib: u64,
    ctl_rchar: u64,
    ctl_wchar: u64,
    tcp: Option<TcpTotals>,
    /// What bftpd wrote to its log during the run.
    log_bytes: Option<u64>,
    phases: Option<Phases>,
    load: (f64, f64),
    /// TCP connections in TIME_WAIT when the run started.
    time_wait: usize,
    busy: f64,
    /// Share of all CPU time the hypervisor gave to others (steal).
    steal: f64,
    check: Result<(), String>,
    src_verbs: Option<BTreeMap<String, u64>>,
    dst_verbs: Option<BTreeMap<String, u64>>,
}

impl Row {
    fn new(run: &ChildRun) -> Row {
        Row {
            data: Data::Big,
            tool: Tool::Bftp(1),
            round: 1,
            files: 0,
            bytes: 0,
            wall: run.wall.as_secs_f64(),
            ctl_cpu: 0.0,
            cli_cpu: None,
            cli_rss_kib: None,
            srv_cpu: (0.0, 0.0),
            ctl_rss_kib: 0,
            ctl_rchar: 0,
            ctl_wchar: 0,
            tcp: None,
            log_bytes: None,
            phases: None,
            load: (0.0, 0.0),
            time_wait: 0,
            busy: 0.0,
            steal: 0.0,
            check: Ok(()),
            src_verbs: None,
            dst_verbs: None,
        }
    }
    fn ok(&self) -> bool {
        self.check.is_ok()
    }
    fn files_per_s(&self) -> f64 {
        self.files as f64 / self.wall
    }
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall
    }
    fn io(&self) -> u64 {
        self.ctl_rchar + self.ctl_wchar
    }
    /// The controller's network traffic as a share of the bytes copied: TCP payload when
    /// tapped, else the /proc io counters.
    fn traffic_ratio(&self) -> f64 {
        let b = self.tcp.map_or(self.io(), |t| t.bytes());
        b as f64 / self.bytes as f64
    }
}

struct Bench {
    src: FtpServer,
    dst: FtpServer,
    src_log: CommandLog,
    dst_log: CommandLog,
    src_master: Option<u32>,
    dst_master: Option<u32>,
    small: usize,
    big_bytes: u64,
    small_bytes: u64,
    limit: Duration,
    tap: Option<Duration>,
    log_level: String,
    /// How long a run waits for earlier runs' TIME_WAIT connections to go (`BENCH_SETTLE`).
    settle: Duration,
    /// Whether this run is the traffic run (round 0), the only one with the tap.
    tap_on: std::cell::Cell<bool>,
}

impl Bench {
    fn tap(&self) -> Option<Duration> {
        self.tap.filter(|_| self.tap_on.get())
    }

    fn data_files(&self, data: Data) -> (u64, u64) {
        match data {
            Data::Big => (1, self.big_bytes),
            Data::Small => (self.small as u64, self.small_bytes),
        }
    }

    fn control_ports(&self) -> [u16; 2] {
        [self.src.port(), self.dst.port()]
    }

    fn clean_destination(&self) -> Result<()> {
        clean_destination(&self.dst, DST_DIR, TRASH_DIR)
    }

    /// Every source file is at the destination with the same bytes, and nothing else is.
    fn verify(&self, data: Data) -> Result<()> {
        let src_dir = self.src.path(data.src_dir());
        let dst_dir = self.dst.path(DST_DIR);
        let names = |d: &Path| -> Result<BTreeSet<String>> {
            std::fs::read_dir(d)?
                .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
                .collect()
        };
        let want = names(&src_dir)?;
        let have = names(&dst_dir)?;
        if want != have {
            let missing = want.difference(&have).count();
            let extra: Vec<&String> = have.difference(&want).take(5).collect();
            bail!(
                "{missing} of {} files missing at the destination, extra: {extra:?}",
                want.len()
            );
        }
        for name in &want {
            let (a, b) = (src_dir.join(name), dst_dir.join(name));
            let (la, lb) = (std::fs::metadata(&a)?.len(), std::fs::metadata(&b)?.len());
            ensure!(
                la == lb,
                "{name}: {lb} bytes at the destination, {la} at the source"
            );
            match data {
                Data::Small => ensure!(
                    std::fs::read(&a)? == std::fs::read(&b)?,
                    "{name}: contents differ"
                ),
                Data::Big => same_contents(&a, &b).with_context(|| name.clone())?,
            }
        }
        Ok(())
    }

    fn run(&self, data: Data, tool: Tool) -> Result<Row> {
        self.clean_destination()?;
        let time_wait = settle(self.settle, SETTLED_TIME_WAIT);
        let (files, bytes) = self.data_files(data);
        let (src_off, dst_off) = (self.src_log.offset(), self.dst_log.offset());
        let srv_before = (server_cpu(self.src_master), server_cpu(self.dst_master));
        let load_before = load1();
        let jiffies = cpu_jiffies();
        let steal = steal_jiffies();
        let mut row = match tool {
            Tool::Bftp(pairs) => self.run_bftp(data, pairs)?,
            Tool::Lftp(parallel) => self.run_lftp(data, parallel)?,
        };
        let now = cpu_jiffies();
        row.busy = (now.0 - jiffies.0) as f64 / (now.1 - jiffies.1).max(1) as f64;
        row.steal = (steal_jiffies() - steal) as f64 / (now.1 - jiffies.1).max(1) as f64;
        row.load = (load_before, load1());
        row.time_wait = time_wait;
        let srv_after = (server_cpu(self.src_master), server_cpu(self.dst_master));
        row.srv_cpu = (srv_after.0 - srv_before.0, srv_after.1 - srv_before.1);
        row.data = data;
        row.tool = tool;
        row.files = files;
        row.bytes = bytes;
        if row.check.is_ok() {
            row.check = self.verify(data).map_err(|e| format!("{e:#}"));
        }
        row.src_verbs = self.src_log.verbs_since(src_off);
        row.dst_verbs = self.dst_log.verbs_since(dst_off);
        Ok(row)
    }

    fn run_bftp(&self, data: Data, pairs: usize) -> Result<Row> {
        let level = &self.log_level;
        let d = Bftpd::start_with(|dir| {
            Bftpd::default_config(dir).replace("level = \"debug\"", &format!("level = \"{level}\""))
                + &format!("[ftp]\nparallel_pairs = {pairs}\n")
        })?;
        let pid = d.pid().context("bftpd pid")?;
        let home = d.dir().join("home");
        std::fs::create_dir_all(&home)?;
        let source = match data {
            Data::Big => self.src.url(&format!("{BIG_DIR}/{BIG_NAME}")),
            Data::Small => self.src.url(&format!("{SMALL_DIR}/*")),
        };
        let dest = self.dst.url(&format!("{DST_DIR}/"));
        let err_path = d.dir().join("bftp.err");
        let mut cmd = Command::new(bin("bftp"));
        cmd.arg("--socket")
            .arg(d.socket())
            .args(["--json", "transfer", &source, &dest])
            .env("HOME", &home)
            .env("BFTP_SOURCE_PASSWORD", self.src.password())
            .env("BFTP_DEST_PASSWORD", self.dst.password())
            .stdin(Stdio::null())
            .stderr(File::create(&err_path)?);
        let ports = self.control_ports();
        let tap = match self.tap() {
            Some(interval) => Some(Tap::start(pid, interval, ports)?),
            None => None,
        };
        // BENCH_STRACE=DIR: bftpd's network system calls, timed; BENCH_PERF=DIR: a perf
        // profile of bftpd; both for a profile, not for the numbers.
        let mut profilers = Vec::new();
        if let Ok(dir) = std::env::var("BENCH_STRACE") {
            let out = format!("{dir}/bftpd-{}-p{pairs}.strace", data.label());
            let trace = "trace=network,read,write,writev";
            profilers.push(
                Command::new("strace")
                    .args(["-f", "-tt", "-T", "-s", "120", "-e", trace, "-o", &out])
                    .args(["-p", &pid.to_string()])
                    .stderr(Stdio::null())
                    .spawn()?,
            );
        }
        if let Ok(dir) = std::env::var("BENCH_PERF") {
            let out = format!("{dir}/bftpd-{}-p{pairs}.perf", data.label());
            profilers.push(
                Command::new("perf")
                    .args(["record", "-g", "-F", "2000", "-o", &out])
                    .args(["-p", &pid.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?,
            );
        }
        if !profilers.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
        let log_before = d.logs().len() as u64;
        let cpu_before = cpu_seconds(pid, false)?;
        let io_before = proc_io(pid)?;
        let run = run_child(&mut cmd, self.limit, None)?;
        let cpu_after = cpu_seconds(pid, false)?;
        let io_after = proc_io(pid)?;
        let hwm = status_kib(pid, "VmHWM:")?;
        let tcp = tap.map(Tap::finish);
        let log_after = d.logs().len() as u64;
        for mut child in profilers {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let _ = child.wait();
        }
        let check = bftp_outcome(&run, self.data_files(data).0).map_err(|e| {
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            format!("{e}; stderr: {}", err.trim())
        });
        Ok(Row {
            ctl_cpu: cpu_after - cpu_before,
            cli_cpu: Some(run.cpu),
            cli_rss_kib: Some(run.hwm_kib),
            ctl_rss_kib: hwm,
            ctl_rchar: io_after.0 - io_before.0,
            ctl_wchar: io_after.1 - io_before.1,
            tcp,
            log_bytes: Some(log_after.saturating_sub(log_before)),
            phases: phases(&run.lines),
            check,
            ..Row::new(&run)
        })
    }

    fn lftp_url(server: &FtpServer, path: &str) -> String {
        format!(
            "ftp://{}:{}@{}:{}/{}",
            server.user(),
            server.password(),
            server.host(),
            server.port(),
            path
        )
    }

    fn run_lftp(&self, data: Data, parallel: usize) -> Result<Row> {
        let home = tempfile::Builder::new().prefix("bench-lftp-").tempdir()?;
        let mut script = String::new();
        if let Ok(dir) = std::env::var("BENCH_LFTP_DEBUG") {
            write!(
                script,
                "debug -t -o {dir}/lftp-{}-{parallel}.log 9; ",
                data.label()
            )?;
        }
        script.push_str("set ftp:use-fxp yes; set ftp:fxp-force yes; set ftp:ssl-allow no; ");
        if parallel > 1 {
            write!(script, "set mirror:parallel-transfer-count {parallel}; ")?;
        }
        write!(
            script,
            "mirror {} {}",
            Self::lftp_url(&self.src, data.src_dir()),
            Self::lftp_url(&self.dst, DST_DIR)
        )?;
        let err_path = home.path().join("lftp.err");
        let mut cmd = match std::env::var("BENCH_STRACE") {
            Ok(dir) => {
                let mut c = Command::new("strace");
                let out = format!("{dir}/lftp-{}-{parallel}.strace", data.label());
                c.args(["-f", "-tt", "-T", "-s", "120"])
                    .args(["-e", "trace=network,read,write,writev,select,poll"])
                    .args(["-o", &out, "lftp"]);
                c
            }
            Err(_) => Command::new("lftp"),
        };
        cmd.arg("-c")
            .arg(&script)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .stderr(File::create(&err_path)?);
        let ports = self.control_ports();
        let run = run_child(&mut cmd, self.limit, self.tap().map(|i| (i, ports)))?;
        let check = if run.timed_out {
            Err(format!("timed out after {:?}", self.limit))
        } else if !run.success {
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            let out: Vec<&str> = run.lines.iter().map(|(_, l)| l.as_str()).collect();
            Err(format!("lftp failed: {} {}", out.join(" "), err.trim()))
        } else {
            Ok(())
        };
        Ok(Row {
            ctl_cpu: run.cpu,
            ctl_rss_kib: run.hwm_kib,
            ctl_rchar: run.rchar,
            ctl_wchar: run.wchar,
            tcp: run.tcp,
            check,
            ..Row::new(&run)
        })
    }
}

fn phases(lines: &[(Duration, String)]) -> Option<Phases> {
    let at = |kind: &str| -> Vec<f64> {
        lines
            .iter()
            .filter(|(_, l)| event(l).is_some_and(|v| v["event"] == kind))
            .map(|(t, _)| t.as_secs_f64())
            .collect()
    };
    let files = at("file");
    Some(Phases {
        listed: *at("listed").first()?,
        first_file: *files.first()?,
        last_file: *files.last()?,
    })
}

// ---- the report ----

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 10 << 20 => format!("{:.1}MiB", b as f64 / 1048576.0),
        b if b >= 10 << 10 => format!("{:.1}KiB", b as f64 / 1024.0),
        b => format!("{b}B"),
    }
}

/// A share as a percentage with 3 significant digits (0.0000843% for a big file).
fn percent(share: f64) -> String {
    let p = share * 100.0;
    let decimals = if p >= 1.0 || p == 0.0 {
        3
    } else {
        (2.0 - p.log10().floor()).clamp(3.0, 9.0) as usize
    };
    format!("{p:.decimals$}%")
}

fn table(rows: &[Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<5} {:<9} {:>2} {:>5} {:>7} {:>7} {:>6} {:>7} {:>7} {:>11} {:>8} {:>7} {:>7} {:>10} {:>10} {:>8} {:>5} {:>9}  check",
        "data",
        "tool",
        "#",
        "files",
        "wall s",
        "files/s",
        "MB/s",
        "ctl CPU",
        "CLI CPU",
        "srv CPU s/d",
        "CPU/file",
        "ctl RSS",
        "CLI RSS",
        "proc r+w",
        "TCP tx+rx",
        "TCP/copy",
        "busy",
        "load1",
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:<5} {:<9} {:>2} {:>5} {:>7.2} {:>7.1} {:>6.1} {:>6.2}s {:>7} {:>5.2}/{:<5.2} {:>6.2}ms {:>6.1}M {:>7} {:>10} {:>10} {:>8} {:>4.0}% {:>4.1}-{:<4.1}  {}",
            r.data.label(),
            r.tool.label(),
            r.round,
            r.files,
            r.wall,
            r.files_per_s(),
            r.mb_per_s(),
            r.ctl_cpu,
            r.cli_cpu.map_or("-".into(), |c| format!("{c:.2}s")),
            r.srv_cpu.0,
            r.srv_cpu.1,
            all_cpu_per_file(r) * 1e3,
            mib(r.ctl_rss_kib),
            r.cli_rss_kib
                .map_or("-".into(), |k| format!("{:.1}M", mib(k))),
            human_bytes(r.io()),
            r.tcp.map_or("-".into(), |t| human_bytes(t.bytes())),
            r.tcp.map_or("-".into(), |_| percent(r.traffic_ratio())),
            r.busy * 100.0,
            r.load.0,
            r.load.1,
            match &r.check {
                Ok(()) => "identical".to_string(),
                Err(e) => format!("FAILED: {e}"),
            }
        );
    }
    t
}

fn details(rows: &[Row]) -> String {
    let mut t = String::new();
    for r in rows {
        let _ = write!(t, "{:<5} {:<9}", r.data.label(), r.tool.label());
        if let Some(tcp) = r.tcp {
            let _ = write!(
                t,
                " TCP: {} sockets ({} control), sent {} received {}, {:.0} B/file;",
                tcp.sockets,
                tcp.control,
                human_bytes(tcp.sent),
                human_bytes(tcp.received),
                tcp.bytes() as f64 / r.files as f64
            );
        }
        let _ = write!(
            t,
            " proc io: rchar {} wchar {}",
            human_bytes(r.ctl_rchar),
            human_bytes(r.ctl_wchar)
        );
        if let Some(log) = r.log_bytes {
            let _ = write!(t, " (log {})", human_bytes(log));
        }
        if let Some(p) = r.phases {
            let copy = p.last_file - p.listed;
            let _ = write!(
                t,
                "; phases: listed at {:.2} s, first file at {:.2} s, last at {:.2} s: copying {:.2} s = {:.2} ms/file",
                p.listed,
                p.first_file,
                p.last_file,
                copy,
                copy * 1e3 / r.files as f64
            );
        }
        let total = r.ctl_cpu + r.cli_cpu.unwrap_or(0.0) + r.srv_cpu.0 + r.srv_cpu.1;
        let _ = writeln!(
            t,
            "; CPU all parties {:.2} s = {:.2} ms/file; TIME_WAIT at start {}; steal {:.1}%",
            total,
            total * 1e3 / r.files as f64,
            r.time_wait,
            r.steal * 100.0
        );
    }
    t
}

fn verbs_line(verbs: &Option<BTreeMap<String, u64>>, files: u64) -> String {
    let Some(v) = verbs else {
        return "(no protocol log)".into();
    };
    let total: u64 = v.values().sum();
    let mut s = format!("{:.2}/file:", total as f64 / files as f64);
    let mut sorted: Vec<(&String, &u64)> = v.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (verb, n) in sorted {
        let _ = write!(s, " {verb} {n}");
    }
    s
}

fn commands(rows: &[Row], src: ServerKind, dst: ServerKind) -> String {
    let mut t = String::new();
    for r in rows {
        let _ = writeln!(
            t,
            "{:<5} {:<9} source ({src}) {}\n{:16}destination ({dst}) {}",
            r.data.label(),
            r.tool.label(),
            verbs_line(&r.src_verbs, r.files),
            "",
            verbs_line(&r.dst_verbs, r.files),
        );
    }
    t
}

const TOOLS: [Tool; 4] = [Tool::Bftp(1), Tool::Bftp(4), Tool::Lftp(1), Tool::Lftp(4)];

/// The median of `metric` over the verified runs of `tool` on `data` (over the rounds).
/// The median of `metric` over the timed rounds (1..) of `tool` on `data`.
fn median(rows: &[Row], data: Data, tool: Tool, metric: impl Fn(&Row) -> f64) -> Option<f64> {
    median_where(rows, data, tool, |r| r.round >= 1, metric)
}

fn median_where(
    rows: &[Row],
    data: Data,
    tool: Tool,
    which: impl Fn(&Row) -> bool,
    metric: impl Fn(&Row) -> f64,
) -> Option<f64> {
    let mut v: Vec<f64> = rows
        .iter()
        .filter(|r| r.data == data && r.tool == tool && r.ok() && which(r))
        .map(metric)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn all_cpu_per_file(r: &Row) -> f64 {
    (r.ctl_cpu + r.cli_cpu.unwrap_or(0.0) + r.srv_cpu.0 + r.srv_cpu.1) / r.files as f64
}

fn goals(rows: &[Row], rounds: usize) -> String {
    let mut t = String::new();
    if rounds > 1 {
        let _ = writeln!(t, "(rates and CPU: medians over the {rounds} timed rounds)");
    }
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    for data in [Data::Big, Data::Small] {
        for tool in TOOLS {
            // From the traffic run (TCP_INFO) where there is one, else /proc/PID/io.
            let tapped = rows.iter().any(|r| r.tcp.is_some());
            let which = |r: &Row| !tapped || r.tcp.is_some();
            if let Some(ratio) = median_where(rows, data, tool, which, Row::traffic_ratio) {
                let _ = writeln!(
                    t,
                    "controller traffic < 0.1% of copied, {} {}: {} -> {}",
                    data.label(),
                    tool.label(),
                    percent(ratio),
                    verdict(ratio < 0.001)
                );
            }
        }
    }
    let lftp_big = median(rows, Data::Big, Tool::Lftp(1), Row::mb_per_s);
    for pairs in [1, 4] {
        if let (Some(b), Some(l)) = (
            median(rows, Data::Big, Tool::Bftp(pairs), Row::mb_per_s),
            lftp_big,
        ) {
            let _ = writeln!(
                t,
                "big file at least as fast as lftp seq: bftp p{pairs} {b:.1} MB/s vs {l:.1} MB/s ({:.2}x) -> {}",
                b / l,
                verdict(b >= l)
            );
        }
    }
    let lftp_seq = median(rows, Data::Small, Tool::Lftp(1), Row::files_per_s);
    let lftp_par = median(rows, Data::Small, Tool::Lftp(4), Row::files_per_s);
    for pairs in [1, 4] {
        let Some(b) = median(rows, Data::Small, Tool::Bftp(pairs), Row::files_per_s) else {
            continue;
        };
        if let Some(l) = lftp_seq {
            let _ = writeln!(
                t,
                "small files >= 2x lftp seq: bftp p{pairs} {b:.0} files/s vs 2 x {l:.0} ({:.2}x lftp) -> {}",
                b / l,
                verdict(b >= 2.0 * l)
            );
        }
        if let (4, Some(l)) = (pairs, lftp_par) {
            let _ = writeln!(
                t,
                "small files >= lftp par4 at equal parallelism: bftp p4 {b:.0} files/s vs {l:.0} ({:.2}x) -> {}",
                b / l,
                verdict(b >= l)
            );
        }
    }
    for tool in TOOLS {
        if let Some(c) = median(rows, Data::Small, tool, all_cpu_per_file) {
            let _ = writeln!(
                t,
                "(CPU per small file, controller + CLI + both servers: {} {:.2} ms)",
                tool.label(),
                c * 1e3
            );
        }
    }
    t
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let src_kind = server_kind("BENCH_SRC", ServerKind::Vsftpd)?;
    let dst_kind = server_kind("BENCH_DST", ServerKind::Proftpd)?;
    let big_mib: u64 = env_or("BENCH_BIG_MIB", 1024);
    let small: usize = env_or("BENCH_SMALL", 2000);
    let limit = Duration::from_secs(env_or("BENCH_TIMEOUT", 600));
    let tap_ms: u64 = env_or("BENCH_TAP_MS", 2);
    let want_data = env_list("BENCH_DATA", "big,small");
    let want_tools = env_list("BENCH_TOOLS", "bftp1,bftp4,lftp1,lftp4");
    let log_level = env_or("BENCH_LOG", "info".to_string());
    let rounds: usize = env_or("BENCH_ROUNDS", 1).max(1);
    let passive_ports: u16 = env_or("BENCH_PASSIVE_PORTS", 4000).clamp(2, 10_000);
    let settle = Duration::from_secs(env_or("BENCH_SETTLE", 70));
    // The servers' files on a tmpfs by default: creating and deleting thousands of files on
    // ext4 costs the destination server more after each run (see `clean_destination`), so
    // a disk file system measures the file system's history more than the controllers.
    let roots = match std::env::var("BENCH_ROOTS") {
        Ok(dir) if dir.is_empty() => None,
        Ok(dir) => Some(PathBuf::from(dir)),
        Err(_) => Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir()),
    };
    ensure!(
        Command::new("lftp")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "lftp missing: run tests/install-deps"
    );
    // Both binaries must be there (release builds, unless BFTP_TEST_PROFILE says).
    let _ = (bin("bftpd"), bin("bftp"));

    let out = &mut std::io::stdout();
    // A wide passive port range, as a real server has: with the tests' 32 ports, each run
    // leaves thousands of TIME_WAIT connections on the same few (address, port) pairs, and
    // the active server's connect(2) then searches the ephemeral range for a free 4-tuple:
    // the next run's CPU per file tripled (measured), whichever controller ran it.
    let opts = || FtpOptions {
        passive_ports,
        parent: roots.clone(),
        ..FtpOptions::default()
    };
    let src = FtpServer::start(src_kind, opts())?;
    let dst = FtpServer::start(dst_kind, opts())?;
    let t = Instant::now();
    let wants = |d: Data| want_data.iter().any(|w| w == d.label());
    let big_bytes = if wants(Data::Big) {
        write_big(&src, &format!("{BIG_DIR}/{BIG_NAME}"), big_mib)?
    } else {
        0
    };
    let small_bytes = if wants(Data::Small) {
        write_small(&src, SMALL_DIR, small, SMALL_SIZE)?
    } else {
        0
    };
    writeln!(
        out,
        "source {src_kind} on {}, destination {dst_kind} on {}, files under {}; data written \
         in {:.1} s: {:.0} MiB file, {} x {SMALL_SIZE} B files; {} CPUs, loadavg {}",
        src.addr(),
        dst.addr(),
        roots
            .as_deref()
            .map_or("the temporary directory".into(), |d| d
                .display()
                .to_string()),
        t.elapsed().as_secs_f64(),
        big_bytes as f64 / 1048576.0,
        small_bytes as usize / SMALL_SIZE,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    )?;
    let bench = Bench {
        src_log: CommandLog::new(&src),
        dst_log: CommandLog::new(&dst),
        src_master: server_master(&src),
        dst_master: server_master(&dst),
        src,
        dst,
        small,
        big_bytes,
        small_bytes,
        limit,
        tap: (tap_ms > 0).then(|| Duration::from_millis(tap_ms)),
        log_level,
        settle,
        tap_on: std::cell::Cell::new(false),
    };
    let mut rows = Vec::new();
    for data in [Data::Big, Data::Small] {
        if !wants(data) {
            continue;
        }
        // Round 0 (with the tap): each tool once, for the traffic figures only. Sampling
        // the controller's sockets every 2 ms took ~15% off the CPU-bound parallel runs
        // (bftp p4 757 -> 892 files/s without it), so the timed rounds run without it.
        // Rounds interleave the tools, so that a change of the machine's load hits all.
        let first = if bench.tap.is_some() { 0 } else { 1 };
        for round in first..=rounds {
            bench.tap_on.set(round == 0);
            for tool in TOOLS {
                if !want_tools.contains(&tool.key()) {
                    continue;
                }
                let mut row = bench.run(data, tool)?;
                row.round = round;
                // Progress on stderr, as each run ends.
                eprintln!(
                    "{} {} #{round}: {:.2} s, {}",
                    data.label(),
                    tool.label(),
                    row.wall,
                    match &row.check {
                        Ok(()) => "identical".to_string(),
                        Err(e) => format!("FAILED: {e}"),
                    }
                );
                rows.push(row);
            }
        }
    }
    bench.clean_destination()?;
    std::fs::remove_dir_all(bench.dst.path(TRASH_DIR))?;

    writeln!(out)?;
    write!(out, "{}", table(&rows))?;
    writeln!(
        out,
        "(MB = 10^6 B; rates over the command's wall time; ctl = bftpd or lftp, CLI = the bftp \
         process; srv = source/destination server CPU s; CPU/file = ctl+CLI+srv CPU per file; RSS = peak (bftpd VmHWM, fresh daemon \
         per run; lftp and bftp VmHWM sampled every 5 ms); proc r+w = /proc/PID/io rchar+wchar delta (misses \
         socket recv(2)); TCP = payload over the controller's own TCP connections (TCP_INFO); \
         busy = all CPUs, whole machine; load1 before-after; # 0 = the traffic run, TCP tap on, \
         not in the medians)"
    )?;
    writeln!(out, "\ndetails:")?;
    write!(out, "{}", details(&rows))?;
    writeln!(out, "\nFTP commands received per file:")?;
    write!(out, "{}", commands(&rows, src_kind, dst_kind))?;
    writeln!(out, "\ngoals:")?;
    write!(out, "{}", goals(&rows, rounds))?;
    Ok(())
}
