//! Benchmark of relayed copies (issue 29): bftpd moves the bytes itself when both servers
//! refuse third-party (FXP) transfers, against lftp copying through the client. Run with
//!   cargo build --release -p bftpd -p bftp -p bftp-tests --bin bench-relay
//!   cargo run --release -p bftp-tests --bin bench-relay
//! It runs target/release's bftpd and bftp (`BFTP_TEST_PROFILE=debug` takes target/debug's).
//!
//! Two stock FTP servers with FXP refused (`FtpOptions { fxp: false }`: vsftpd without
//! `port_promiscuous`/`pasv_promiscuous`, proFTPD without `AllowForeignAddress`), source
//! vsftpd on 127.0.0.2 and destination proFTPD on 127.0.0.3 (`BENCH_SRC`/`BENCH_DST`: vsftpd,
//! proftpd, pure-ftpd), files on `/dev/shm`. Two data sets (`BENCH_DATA`, default `big,small`):
//! - `big`: one file of `BENCH_BIG_MIB` MiB (default 1024),
//! - `small`: `BENCH_SMALL` files (default 2,000) of 4 KiB.
//!
//! Tools (`BENCH_TOOLS`, default `bftp1,bftp4,lftp1,lftp4`):
//! - `bftp1`, `bftp4`: `bftp --json transfer SRC DST --data-path relay` through a fresh bftpd
//!   per run with `[ftp] parallel_pairs` 1 or 4 (`BENCH_BFTPD_EXTRA`: TOML appended to its
//!   configuration, e.g. relay settings; `BENCH_DATA_PATH`: `auto`, `fxp`, or `none` for no
//!   flag at all, instead of `relay`; `BENCH_SERVER_FXP=1` lets the servers accept FXP, to
//!   set a relay beside a third-party copy: the goals are the relay's);
//! - `lftp1`, `lftp4`: `lftp -c 'set ftp:use-fxp no; set ftp:ssl-allow no; mirror SRC DST'`
//!   (lftp reads from the source and writes to the destination itself), the second with
//!   `mirror --parallel=4`.
//!
//! Each data set is copied at every control round trip of `BENCH_RTT_MS` (default `0,20`):
//! 0 is plain loopback; otherwise each server's control port is fronted by a delay proxy
//! (`bftp_tests::delay`, half the RTT each way) and both tools log in through it. Only the
//! control connections are delayed, for both tools alike: the data connections go from the
//! controller (bftpd or lftp) straight to the servers' passive ports, undelayed, as with two
//! servers near the controller's data path but far from where it is commanded. A relay and a
//! copy through the client both carry every byte twice over loopback.
//!
//! `BENCH_TLS=1` adds a round with TLS legs: both servers with explicit FTPS (TLS demanded
//! before USER, test CA from `bftp_tests::pki`), bftp with `--tls required --data-tls
//! required`, lftp with `ftp:ssl-force`, `ftp:ssl-protect-data` and the CA in `ssl:ca-file`.
//! `BENCH_TLS=only` runs that round alone, at the RTTs of `BENCH_TLS_RTT_MS` (default 0: lftp
//! takes about 60 ms a small file over TLS on loopback).
//!
//! Measured per run, over the wall time of the command (`bftp` or `lftp`): files/s, MB/s
//! (10^6 B), the controller's CPU seconds (bftpd: utime+stime delta from /proc/PID/stat,
//! plus the `bftp` CLI's wait4 rusage, shown apart too; lftp: its wait4 rusage), the
//! controller's peak RSS (bftpd: VmHWM of the fresh daemon; lftp and the CLI: VmHWM sampled
//! every 5 ms) and both servers' CPU. Every copy is checked: sha256 of each destination file
//! equal to the source's, nothing else there. A run that fails (a bftp without
//! `--data-path`, a refused relay, a timeout) is reported as failed and the bench goes on.
//!
//! The goals, printed as PASS/MISS lines (against the best lftp run of the same data set,
//! legs and RTT: its lowest wall time and its lowest CPU): plain legs, 1 GiB: relay wall time
//! <= 0.8x lftp's and controller CPU (bftpd + CLI) <= 0.3x lftp's; at 20 ms RTT, small files:
//! relay p4 files/s >= 2x lftp `mirror --parallel=4`; bftpd's peak RSS for the big file within
//! 4 MiB or 25% of its peak RSS for the 4 KiB files (p1 both: one pair, so the same buffers;
//! independent of the file size); TLS legs, 1 GiB: controller CPU <= 1.0x lftp's.
//!
//! Fairness between runs (as bench-fxp): the destination is emptied (small files moved aside,
//! deleted at the end) and `sync` run before each run, which then waits (at most
//! `BENCH_SETTLE` s, default 70) until at most 200 TCP connections are left in TIME_WAIT and
//! leaves the servers alone for 2 s; servers offer `BENCH_PASSIVE_PORTS` passive ports
//! (default 4,000). `BENCH_ROUNDS=N` runs the tools N times, interleaved, and judges on
//! medians. Each run is bounded by `BENCH_TIMEOUT` seconds (default 600). A quick check:
//! `BENCH_RTT_MS=0 BENCH_BIG_MIB=64 BENCH_SMALL=200 BENCH_SETTLE=5`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::{
    bftp_outcome, clean_destination, env_list, env_or, server_kind, settle, sums, tls_hosts,
    write_big, write_small,
};
use bftp_tests::daemon::{bin, Bftpd};
use bftp_tests::measure::run_child;
use bftp_tests::pki::{Flaw, Pki};
use bftp_tests::procstat::{cpu_seconds, server_cpu, server_master, status_kib};
use bftp_tests::{DelayProxy, FtpOptions, FtpServer, ServerKind};

const SMALL_SIZE: usize = 4096;
const BIG_DIR: &str = "big";
const BIG_NAME: &str = "big.bin";
const SMALL_DIR: &str = "small";
const DST_DIR: &str = "dst";
/// Where earlier runs' small files wait on the destination until the end.
const TRASH_DIR: &str = "dst-done";
/// A run starts once at most this many TCP connections are in TIME_WAIT.
const SETTLED_TIME_WAIT: usize = 200;
/// How long the servers are left alone before each run: proFTPD accepts late (0.1-0.4 s) a
/// connection that comes while it reaps sessions that just ended (see bench-wan).
const AT_REST: Duration = Duration::from_secs(2);
/// The longest failure message in the tables (the whole one is printed below them).
const SHORT_ERROR: usize = 60;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Legs {
    Plain,
    Tls,
}

impl Legs {
    fn label(self) -> &'static str {
        match self {
            Legs::Plain => "plain",
            Legs::Tls => "TLS",
        }
    }
}

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
    /// bftp relay with this many parallel pairs.
    Bftp(usize),
    /// lftp through the client, sequential (1) or `mirror --parallel=N`.
    Lftp(usize),
}

impl Tool {
    const ALL: [Tool; 4] = [Tool::Bftp(1), Tool::Bftp(4), Tool::Lftp(1), Tool::Lftp(4)];

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

/// One measured run.
struct Row {
    legs: Legs,
    rtt_ms: u64,
    data: Data,
    tool: Tool,
    round: usize,
    files: u64,
    bytes: u64,
    wall: f64,
    /// bftpd's or lftp's CPU seconds.
    ctl_cpu: f64,
    /// The `bftp` CLI's (bftp runs only).
    cli_cpu: Option<f64>,
    /// bftpd's or lftp's peak RSS.
    ctl_rss_kib: u64,
    cli_rss_kib: Option<u64>,
    /// Both servers' CPU seconds.
    srv_cpu: f64,
    check: Result<(), String>,
}

impl Row {
    fn ok(&self) -> bool {
        self.check.is_ok()
    }
    fn files_per_s(&self) -> f64 {
        self.files as f64 / self.wall
    }
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall
    }
    /// The controller's whole CPU: bftpd and its CLI, or lftp.
    fn cpu(&self) -> f64 {
        self.ctl_cpu + self.cli_cpu.unwrap_or(0.0)
    }
    fn rss_mib(&self) -> f64 {
        self.ctl_rss_kib as f64 / 1024.0
    }
}

/// Two servers with FXP refused, the data on the source, and the source's sums.
struct Site {
    legs: Legs,
    src: FtpServer,
    dst: FtpServer,
    /// The test CA, for TLS legs.
    pki: Option<Pki>,
    masters: [Option<u32>; 2],
    big_bytes: u64,
    small: usize,
    /// sha256 of every source file, by data set.
    sums: BTreeMap<&'static str, BTreeMap<String, String>>,
}

/// Where the controller connects: the delay proxies, or the servers themselves.
struct Reach {
    rtt_ms: u64,
    ports: [u16; 2],
    _proxies: Vec<DelayProxy>,
}

struct Settings {
    src_kind: ServerKind,
    dst_kind: ServerKind,
    big_mib: u64,
    small: usize,
    data: Vec<Data>,
    tools: Vec<Tool>,
    rtts: Vec<u64>,
    /// The RTTs of the TLS round.
    tls_rtts: Vec<u64>,
    rounds: usize,
    limit: Duration,
    settle: Duration,
    passive_ports: u16,
    roots: Option<PathBuf>,
    bftpd_extra: String,
    /// `--data-path` of the bftp runs; None: no flag.
    data_path: Option<String>,
    /// Whether the servers accept third-party transfers.
    server_fxp: bool,
}

impl Settings {
    fn rtts_of(&self, legs: Legs) -> &[u64] {
        match legs {
            Legs::Plain => &self.rtts,
            Legs::Tls => &self.tls_rtts,
        }
    }
}

impl Site {
    fn start(s: &Settings, legs: Legs) -> Result<Site> {
        let pki = match legs {
            Legs::Tls => Some(Pki::new()?),
            Legs::Plain => None,
        };
        let start = |kind: ServerKind, last: u8| -> Result<FtpServer> {
            let tls = match &pki {
                Some(pki) => Some(
                    pki.server(&format!("{}-{last}", kind.name()), Flaw::None, true)?
                        .0,
                ),
                None => None,
            };
            FtpServer::start(
                kind,
                FtpOptions {
                    fxp: s.server_fxp,
                    host: std::net::Ipv4Addr::new(127, 0, 0, last),
                    passive_ports: s.passive_ports,
                    parent: s.roots.clone(),
                    tls,
                    ..FtpOptions::default()
                },
            )
            .with_context(|| format!("starting {kind} with {} legs", legs.label()))
        };
        let src = start(s.src_kind, 2)?;
        let dst = start(s.dst_kind, 3)?;
        let t = Instant::now();
        let mut sums_by = BTreeMap::new();
        let mut big_bytes = 0;
        if s.data.contains(&Data::Big) {
            big_bytes = write_big(&src, &format!("{BIG_DIR}/{BIG_NAME}"), s.big_mib)?;
            sums_by.insert(Data::Big.label(), sums(&src.path(BIG_DIR))?);
        }
        if s.data.contains(&Data::Small) {
            write_small(&src, SMALL_DIR, s.small, SMALL_SIZE)?;
            sums_by.insert(Data::Small.label(), sums(&src.path(SMALL_DIR))?);
        }
        println!(
            "{} legs: source {} {}, destination {} {}, FXP {} by both; data written and \
             summed in {:.1} s",
            legs.label(),
            s.src_kind,
            src.addr(),
            s.dst_kind,
            dst.addr(),
            if s.server_fxp { "accepted" } else { "refused" },
            t.elapsed().as_secs_f64()
        );
        Ok(Site {
            legs,
            masters: [server_master(&src), server_master(&dst)],
            src,
            dst,
            pki,
            big_bytes,
            small: s.small,
            sums: sums_by,
        })
    }

    fn reach(&self, rtt_ms: u64) -> Result<Reach> {
        if rtt_ms == 0 {
            return Ok(Reach {
                rtt_ms,
                ports: [self.src.port(), self.dst.port()],
                _proxies: Vec::new(),
            });
        }
        // Half the round trip each way.
        let delay = Duration::from_micros(rtt_ms * 500);
        let proxies = vec![
            DelayProxy::for_server(&self.src, delay)?,
            DelayProxy::for_server(&self.dst, delay)?,
        ];
        Ok(Reach {
            rtt_ms,
            ports: [proxies[0].port(), proxies[1].port()],
            _proxies: proxies,
        })
    }

    fn data_files(&self, data: Data) -> (u64, u64) {
        match data {
            Data::Big => (1, self.big_bytes),
            Data::Small => (self.small as u64, (self.small * SMALL_SIZE) as u64),
        }
    }

    fn servers_cpu(&self) -> f64 {
        self.masters.iter().map(|m| server_cpu(*m)).sum()
    }

    /// Every source file at the destination with the same sha256, nothing else there.
    fn verify(&self, data: Data) -> Result<()> {
        let want = &self.sums[data.label()];
        let have = sums(&self.dst.path(DST_DIR))?;
        if *want != have {
            let missing = want.keys().filter(|k| !have.contains_key(*k)).count();
            let differ = want
                .iter()
                .filter(|(k, v)| have.get(*k).is_some_and(|d| d != *v))
                .count();
            bail!(
                "sha256: {missing} of {} missing, {differ} differ, {} at the destination",
                want.len(),
                have.len()
            );
        }
        Ok(())
    }
}

/// `text` cut to `max` characters, on one line.
fn short(text: &str, max: usize) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= max {
        one
    } else {
        one.chars().take(max - 3).collect::<String>() + "..."
    }
}

/// What went wrong with a bftp run, in words: a bftp without the flag says so first.
fn bftp_failure(outcome: String, stderr: &str) -> String {
    if stderr.contains("--data-path") && stderr.contains("unexpected argument") {
        return format!(
            "this bftp has no --data-path (the relay is not wired in yet): {}",
            short(stderr, 200)
        );
    }
    format!("{outcome}; stderr: {}", short(stderr, 400))
}

struct Bench<'a> {
    s: &'a Settings,
}

impl Bench<'_> {
    fn run(&self, site: &Site, reach: &Reach, data: Data, tool: Tool) -> Result<Row> {
        clean_destination(&site.dst, DST_DIR, TRASH_DIR)?;
        settle(self.s.settle, SETTLED_TIME_WAIT);
        std::thread::sleep(AT_REST);
        let (files, bytes) = site.data_files(data);
        let srv = site.servers_cpu();
        let mut row = match tool {
            Tool::Bftp(pairs) => self.bftp(site, reach, data, pairs)?,
            Tool::Lftp(parallel) => self.lftp(site, reach, data, parallel)?,
        };
        row.srv_cpu = site.servers_cpu() - srv;
        row.legs = site.legs;
        row.rtt_ms = reach.rtt_ms;
        row.data = data;
        row.tool = tool;
        row.files = files;
        row.bytes = bytes;
        if row.ok() {
            row.check = site.verify(data).map_err(|e| format!("{e:#}"));
        }
        Ok(row)
    }

    fn source_path(data: Data) -> String {
        match data {
            Data::Big => format!("{BIG_DIR}/{BIG_NAME}"),
            Data::Small => format!("{SMALL_DIR}/*"),
        }
    }

    fn bftp(&self, site: &Site, reach: &Reach, data: Data, pairs: usize) -> Result<Row> {
        let tls = match &site.pki {
            Some(pki) => tls_hosts(&[&site.src, &site.dst], &pki.ca_file()),
            None => String::new(),
        };
        let extra = &self.s.bftpd_extra;
        let d = Bftpd::start_with(|dir| {
            Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"warn\"")
                + &format!(
                    "[ftp]\nparallel_pairs = {pairs}\nmax_connections_per_host = 40\n{tls}{extra}\n"
                )
        })?;
        let pid = d.pid().context("bftpd pid")?;
        let home = d.dir().join("home");
        std::fs::create_dir_all(&home)?;
        let url = |server: &FtpServer, port: u16, path: &str| {
            format!("ftp://{}@{}:{port}/{path}", server.user(), server.host())
        };
        let source = url(&site.src, reach.ports[0], &Self::source_path(data));
        let dest = url(&site.dst, reach.ports[1], &format!("{DST_DIR}/"));
        let err_path = d.dir().join("bftp.err");
        let mut cmd = Command::new(bin("bftp"));
        cmd.arg("--socket")
            .arg(d.socket())
            .args(["--json", "transfer", &source, &dest])
            .env("HOME", &home)
            .env("BFTP_SOURCE_PASSWORD", site.src.password())
            .env("BFTP_DEST_PASSWORD", site.dst.password())
            .stdin(Stdio::null())
            .stderr(File::create(&err_path)?);
        if let Some(path) = &self.s.data_path {
            cmd.args(["--data-path", path]);
        }
        if site.legs == Legs::Tls {
            cmd.args(["--tls", "required", "--data-tls", "required"]);
        }
        let cpu_before = cpu_seconds(pid, false)?;
        let run = run_child(&mut cmd, self.s.limit, None)?;
        let ctl_cpu = cpu_seconds(pid, false)? - cpu_before;
        let hwm = status_kib(pid, "VmHWM:")?;
        let check = bftp_outcome(&run, site.data_files(data).0)
            .map_err(|e| bftp_failure(e, &std::fs::read_to_string(&err_path).unwrap_or_default()));
        Ok(Row {
            legs: site.legs,
            rtt_ms: 0,
            data,
            tool: Tool::Bftp(pairs),
            round: 1,
            files: 0,
            bytes: 0,
            wall: run.wall.as_secs_f64(),
            ctl_cpu,
            cli_cpu: Some(run.cpu),
            ctl_rss_kib: hwm,
            cli_rss_kib: Some(run.hwm_kib),
            srv_cpu: 0.0,
            check,
        })
    }

    fn lftp(&self, site: &Site, reach: &Reach, data: Data, parallel: usize) -> Result<Row> {
        let home = tempfile::Builder::new().prefix("bench-lftp-").tempdir()?;
        let url = |s: &FtpServer, port: u16, path: &str| {
            format!(
                "ftp://{}:{}@{}:{port}/{path}",
                s.user(),
                s.password(),
                s.host()
            )
        };
        let mut script = String::from("set ftp:use-fxp no; ");
        match &site.pki {
            Some(pki) => write!(
                script,
                "set ftp:ssl-force yes; set ftp:ssl-protect-data yes; \
                 set ssl:ca-file {}; set ssl:verify-certificate yes; ",
                pki.ca_file().display()
            )?,
            None => script.push_str("set ftp:ssl-allow no; "),
        }
        script.push_str("mirror ");
        if parallel > 1 {
            write!(script, "--parallel={parallel} ")?;
        }
        write!(
            script,
            "{} {}",
            url(&site.src, reach.ports[0], data.src_dir()),
            url(&site.dst, reach.ports[1], DST_DIR)
        )?;
        let err_path = home.path().join("lftp.err");
        let mut cmd = Command::new("lftp");
        cmd.arg("-c")
            .arg(&script)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .stderr(File::create(&err_path)?);
        let run = run_child(&mut cmd, self.s.limit, None)?;
        let check = if run.timed_out {
            Err(format!("timed out after {:?}", self.s.limit))
        } else if !run.success {
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            let out: Vec<&str> = run.lines.iter().map(|(_, l)| l.as_str()).collect();
            Err(format!(
                "lftp failed: {}",
                short(&format!("{} {err}", out.join(" ")), 400)
            ))
        } else {
            Ok(())
        };
        Ok(Row {
            legs: site.legs,
            rtt_ms: 0,
            data,
            tool: Tool::Lftp(parallel),
            round: 1,
            files: 0,
            bytes: 0,
            wall: run.wall.as_secs_f64(),
            ctl_cpu: run.cpu,
            cli_cpu: None,
            ctl_rss_kib: run.hwm_kib,
            cli_rss_kib: None,
            srv_cpu: 0.0,
            check,
        })
    }
}

// ---- the report ----

fn median(mut v: Vec<f64>) -> Option<f64> {
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

/// The rows of one table: one legs, RTT and data set.
fn of(rows: &[Row], legs: Legs, rtt_ms: u64, data: Data) -> Vec<&Row> {
    rows.iter()
        .filter(|r| r.legs == legs && r.rtt_ms == rtt_ms && r.data == data)
        .collect()
}

/// The median of `metric` over the verified runs of `tool` among `rows`.
fn med(rows: &[&Row], tool: Tool, metric: impl Fn(&Row) -> f64) -> Option<f64> {
    median(
        rows.iter()
            .filter(|r| r.tool == tool && r.ok())
            .map(|r| metric(r))
            .collect(),
    )
}

/// The best of the lftp runs' medians (lowest): what bftp is held against.
fn lftp_best(rows: &[&Row], metric: impl Fn(&Row) -> f64 + Copy) -> Option<(f64, String)> {
    Tool::ALL
        .into_iter()
        .filter(|t| matches!(t, Tool::Lftp(_)))
        .filter_map(|t| med(rows, t, metric).map(|v| (v, t.label())))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

fn table(rows: &[&Row], data: Data) -> String {
    let mut t = String::new();
    // CPU per byte for the big file, per file for the small ones.
    let (unit, per): (&str, fn(&Row) -> String) = match data {
        Data::Big => ("CPU/GB", |r| {
            format!("{:.2}s", r.cpu() * 1e9 / r.bytes as f64)
        }),
        Data::Small => ("CPU/file", |r| {
            format!("{:.2}ms", r.cpu() * 1e3 / r.files as f64)
        }),
    };
    // A failed run's rates mean nothing (the files may not be there).
    let rate = |r: &Row, v: f64| {
        if r.ok() {
            format!("{v:.1}")
        } else {
            "-".into()
        }
    };
    let _ = writeln!(
        t,
        "  {:<15} {:>2} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  check",
        "tool",
        "#",
        "files",
        "wall s",
        "files/s",
        "MB/s",
        "ctl CPU",
        "(CLI)",
        "ctl RSS",
        "(CLI)",
        "srv CPU",
        unit,
    );
    for r in rows {
        let check = match &r.check {
            Ok(()) => "sha256 identical".to_string(),
            Err(e) => format!("FAILED: {}", short(e, SHORT_ERROR)),
        };
        let _ = writeln!(
            t,
            "  {:<15} {:>2} {:>5} {:>8.2} {:>8} {:>8} {:>7.2}s {:>8} {:>7.1}M {:>8} {:>7.2}s {:>8}  {check}",
            r.tool.label(),
            r.round,
            r.files,
            r.wall,
            rate(r, r.files_per_s()),
            rate(r, r.mb_per_s()),
            r.cpu(),
            r.cli_cpu.map_or("-".into(), |c| format!("{c:.2}s")),
            r.rss_mib(),
            r.cli_rss_kib
                .map_or("-".into(), |k| format!("{:.1}M", k as f64 / 1024.0)),
            r.srv_cpu,
            per(r),
        );
    }
    t
}

/// A goal's line: PASS, MISS, or why it cannot be judged.
fn goal(t: &mut String, what: &str, judged: Option<(bool, String)>) {
    let _ = match judged {
        Some((true, how)) => writeln!(t, "PASS {what}: {how}"),
        Some((false, how)) => writeln!(t, "MISS {what}: {how}"),
        None => writeln!(t, "MISS {what}: not measured (a run missing or failed)"),
    };
}

fn goals(rows: &[Row], s: &Settings) -> String {
    let mut t = String::new();
    let wall = |r: &Row| r.wall;
    let cpu = |r: &Row| r.cpu();
    let bftp: Vec<Tool> = s
        .tools
        .iter()
        .copied()
        .filter(|t| matches!(t, Tool::Bftp(_)))
        .collect();
    if bftp.is_empty() {
        let _ = writeln!(t, "(no bftp tool in BENCH_TOOLS: nothing to judge)");
    }
    for legs in [Legs::Plain, Legs::Tls] {
        for &rtt in s.rtts_of(legs) {
            let big = of(rows, legs, rtt, Data::Big);
            let small = of(rows, legs, rtt, Data::Small);
            if big.is_empty() && small.is_empty() {
                continue;
            }
            let at = format!("{} legs, RTT {rtt} ms", legs.label());
            for &tool in &bftp {
                let name = tool.label();
                if !big.is_empty() && legs == Legs::Plain {
                    let judged =
                        med(&big, tool, wall)
                            .zip(lftp_best(&big, wall))
                            .map(|(b, (l, which))| {
                                (
                                    b <= 0.8 * l,
                                    format!("{b:.2} s vs {which} {l:.2} s = {:.2}x", b / l),
                                )
                            });
                    goal(
                        &mut t,
                        &format!("{at}, big: {name} wall <= 0.8x lftp"),
                        judged,
                    );
                }
                if !big.is_empty() {
                    let limit = if legs == Legs::Plain { 0.3 } else { 1.0 };
                    let judged =
                        med(&big, tool, cpu)
                            .zip(lftp_best(&big, cpu))
                            .map(|(b, (l, which))| {
                                (
                                    b <= limit * l,
                                    format!("{b:.2} s vs {which} {l:.2} s = {:.2}x", b / l),
                                )
                            });
                    goal(
                        &mut t,
                        &format!("{at}, big: {name} controller CPU <= {limit:.1}x lftp"),
                        judged,
                    );
                }
            }
            if !small.is_empty() && bftp.contains(&Tool::Bftp(4)) {
                let rate = |r: &Row| r.files_per_s();
                let judged = med(&small, Tool::Bftp(4), rate)
                    .zip(med(&small, Tool::Lftp(4), rate))
                    .map(|(b, l)| {
                        (
                            b >= 2.0 * l,
                            format!("{b:.1} files/s vs lftp par4 {l:.1} = {:.2}x", b / l),
                        )
                    });
                if rtt == 20 {
                    goal(
                        &mut t,
                        &format!("{at}, small: bftp p4 >= 2x lftp par4"),
                        judged,
                    );
                } else if let Some((_, how)) = judged {
                    let _ = writeln!(
                        t,
                        "info {at}, small: bftp p4 vs lftp par4 (goal set at 20 ms): {how}"
                    );
                }
            }
            // Peak RSS independent of the file size: one pair for both data sets.
            if !big.is_empty() && !small.is_empty() && bftp.contains(&Tool::Bftp(1)) {
                let rss = |r: &Row| r.rss_mib();
                let judged = med(&big, Tool::Bftp(1), rss)
                    .zip(med(&small, Tool::Bftp(1), rss))
                    .map(|(b, sm)| {
                        (
                            b <= (sm * 1.25).max(sm + 4.0),
                            format!(
                                "bftpd {b:.1} MiB for one {:.0} MiB file vs {sm:.1} MiB for \
                                 {}-byte files (within 4 MiB or 25%)",
                                s.big_mib, SMALL_SIZE
                            ),
                        )
                    });
                goal(
                    &mut t,
                    &format!("{at}: bftp p1 peak RSS independent of the file size"),
                    judged,
                );
            }
        }
    }
    t
}

fn parse_tools(keys: &[String]) -> Result<Vec<Tool>> {
    keys.iter()
        .map(|k| {
            Tool::ALL
                .into_iter()
                .find(|t| t.key() == *k)
                .with_context(|| format!("BENCH_TOOLS: unknown tool {k} (bftp1,bftp4,lftp1,lftp4)"))
        })
        .collect()
}

fn parse_data(keys: &[String]) -> Result<Vec<Data>> {
    keys.iter()
        .map(|k| match k.as_str() {
            "big" => Ok(Data::Big),
            "small" => Ok(Data::Small),
            other => bail!("BENCH_DATA: unknown data set {other} (big, small)"),
        })
        .collect()
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let tls = env_or("BENCH_TLS", "0".to_string());
    let legs: Vec<Legs> = match tls.trim() {
        "" | "0" | "no" => vec![Legs::Plain],
        "1" | "yes" => vec![Legs::Plain, Legs::Tls],
        "only" => vec![Legs::Tls],
        other => bail!("BENCH_TLS={other}: 0, 1 or only"),
    };
    let s = Settings {
        src_kind: server_kind("BENCH_SRC", ServerKind::Vsftpd)?,
        dst_kind: server_kind("BENCH_DST", ServerKind::Proftpd)?,
        big_mib: env_or("BENCH_BIG_MIB", 1024),
        small: env_or("BENCH_SMALL", 2000),
        data: parse_data(&env_list("BENCH_DATA", "big,small"))?,
        tools: parse_tools(&env_list("BENCH_TOOLS", "bftp1,bftp4,lftp1,lftp4"))?,
        rtts: env_list("BENCH_RTT_MS", "0,20")
            .iter()
            .map(|v| v.parse().with_context(|| format!("BENCH_RTT_MS: {v}")))
            .collect::<Result<_>>()?,
        tls_rtts: env_list("BENCH_TLS_RTT_MS", "0")
            .iter()
            .map(|v| v.parse().with_context(|| format!("BENCH_TLS_RTT_MS: {v}")))
            .collect::<Result<_>>()?,
        rounds: env_or("BENCH_ROUNDS", 1usize).max(1),
        limit: Duration::from_secs(env_or("BENCH_TIMEOUT", 600)),
        settle: Duration::from_secs(env_or("BENCH_SETTLE", 70)),
        passive_ports: env_or("BENCH_PASSIVE_PORTS", 4000u16).clamp(2, 10_000),
        // The servers' files in memory where possible: the disk is not what is measured.
        roots: Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir()),
        bftpd_extra: env_or("BENCH_BFTPD_EXTRA", String::new()),
        data_path: match env_or("BENCH_DATA_PATH", "relay".to_string()).trim() {
            "" | "none" => None,
            path => Some(path.to_string()),
        },
        server_fxp: env_or("BENCH_SERVER_FXP", 0u8) == 1,
    };
    ensure!(
        Command::new("lftp")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|st| st.success()),
        "lftp missing: run tests/install-deps"
    );
    // Both binaries must be there when bftp runs (release builds, unless BFTP_TEST_PROFILE).
    let bftp = match s.tools.iter().any(|t| matches!(t, Tool::Bftp(_))) {
        true => {
            let _ = bin("bftpd");
            format!(
                "{} ({} build) with {}",
                bin("bftp").display(),
                std::env::var("BFTP_TEST_PROFILE").unwrap_or_default(),
                s.data_path
                    .as_ref()
                    .map_or("no --data-path".into(), |p| format!("--data-path {p}"))
            )
        }
        false => "not run".into(),
    };
    println!(
        "bench-relay: {} MiB file and {} x {SMALL_SIZE} B files; RTTs {:?} ms (control \
         connections only); tools {}; {} round(s); bftp {bftp}; files under {}; \
         {} CPUs, loadavg {}",
        s.big_mib,
        s.small,
        s.rtts,
        s.tools
            .iter()
            .map(|t| t.label())
            .collect::<Vec<_>>()
            .join(", "),
        s.rounds,
        s.roots
            .as_deref()
            .map_or("the temporary directory".into(), |d| d
                .display()
                .to_string()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let bench = Bench { s: &s };
    let mut rows = Vec::new();
    for &l in &legs {
        let site = Site::start(&s, l)?;
        for &rtt in s.rtts_of(l) {
            let reach = site.reach(rtt)?;
            for &data in &s.data {
                for round in 1..=s.rounds {
                    for &tool in &s.tools {
                        let mut row = bench.run(&site, &reach, data, tool)?;
                        row.round = round;
                        eprintln!(
                            "{} RTT {rtt} ms {} {} #{round}: {:.2} s, {}",
                            l.label(),
                            data.label(),
                            tool.label(),
                            row.wall,
                            match &row.check {
                                Ok(()) => "sha256 identical".to_string(),
                                Err(e) => format!("FAILED: {e}"),
                            }
                        );
                        rows.push(row);
                    }
                }
            }
        }
        clean_destination(&site.dst, DST_DIR, TRASH_DIR)?;
        std::fs::remove_dir_all(site.dst.path(TRASH_DIR))?;
    }

    for &l in &legs {
        for &rtt in s.rtts_of(l) {
            for &data in &s.data {
                let these = of(&rows, l, rtt, data);
                println!(
                    "\n{} legs, control RTT {rtt} ms, {}:",
                    l.label(),
                    match data {
                        Data::Big => format!("1 file of {} MiB", s.big_mib),
                        Data::Small => format!("{} files of {SMALL_SIZE} B", s.small),
                    }
                );
                print!("{}", table(&these, data));
            }
        }
    }
    println!(
        "\n(MB = 10^6 B; rates over the command's wall time; ctl CPU = bftpd + the bftp CLI \
         (CLI alone in brackets), or lftp; ctl RSS = peak: bftpd's VmHWM (fresh daemon per \
         run), lftp's and the CLI's sampled every 5 ms; srv CPU = both servers; CPU/GB = ctl \
         CPU per 10^9 B copied, CPU/file = per file)"
    );
    let failures: Vec<&Row> = rows.iter().filter(|r| !r.ok()).collect();
    if !failures.is_empty() {
        println!("\nfailed runs:");
        for r in failures {
            println!(
                "{} RTT {} ms {} {} #{}: {}",
                r.legs.label(),
                r.rtt_ms,
                r.data.label(),
                r.tool.label(),
                r.round,
                r.check.as_ref().err().map_or("", |e| e.as_str())
            );
        }
    }
    println!(
        "\ngoals (bftp with {}; against the best lftp run: lowest wall, lowest CPU; medians \
         over rounds):",
        s.data_path
            .as_ref()
            .map_or("no --data-path".into(), |p| format!("--data-path {p}"))
    );
    print!("{}", goals(&rows, &s));
    Ok(())
}
