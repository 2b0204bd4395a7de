//! Benchmark of TLS third-party copies (issue 13): run with
//!   cargo build --release -p bftpd -p bftp && cargo run --release -p bftp-tests --bin bench-tls
//! (`BFTP_TEST_PROFILE=debug` uses the debug bftpd/bftp instead).
//!
//! Two real FTP servers on loopback with explicit FTPS (AUTH TLS demanded before USER) and
//! certificates from a test CA (`bftp_tests::pki`): source on 127.0.0.2, destination on
//! 127.0.0.3, both proFTPD by default (`BENCH_SRC`/`BENCH_DST`: vsftpd, proftpd, pure-ftpd;
//! the pair needs a proFTPD, the only one that can be the TLS client of a data connection
//! after SSCN ON). Two workloads, each copied in one run by every tool of `BENCH_TOOLS`:
//! - `big`: one file of `BENCH_BIG` bytes (default 1 GiB);
//! - `small`: `BENCH_FILES` (default 2,000) files of `BENCH_SIZE` bytes (default 4 KiB).
//!
//! Tools (default `lftp,bftp,queued`): `lftp` (`mirror` with `ftp:ssl-force`,
//! `ftp:ssl-protect-data`, `ftp:ssl-protect-fxp`, `ftp:use-fxp`, `ftp:fxp-force`,
//! `ssl:ca-file` the test CA, and `mirror:parallel-transfer-count` `BENCH_PARALLEL`),
//! `lftp-noprot` (the same without `ftp:ssl-protect-fxp`: lftp then moves FXP data in clear
//! although `ftp:ssl-protect-data` is set, which the servers' logs show), `bftp` (`bftp transfer` through a fresh
//! bftpd with `parallel_pairs` `BENCH_PARALLEL`, default 4, `--tls required --data-tls
//! required`, the CA in `[ftp.tls]`), `queued` (the same as one queued job, `bftp submit`,
//! timed from the submit to the job's end, polled every 10 ms).
//!
//! Every run is checked: each destination file's sha256 equals the source's, nothing else
//! there. And what each tool really did is read from the servers' own logs for the run:
//! the TLS data connections proFTPD's TLSLog records (as TLS client after SSCN ON, one line
//! "making TLS connection for data connection" for each; as TLS server "data connection
//! accepted", logged for a session's first data connection only, so it is shown but not
//! counted), and the `PROT P`, `PROT C`, `SSCN ON` and `CPSV` commands proFTPD's
//! ExtendedLog records. A copy counts as encrypted only if the TLS client side made at least
//! one TLS data connection per file (`BENCH_LOG_DIR`: where each run's new log lines are
//! written, to read them). Printed per run: files/s, MB/s, wall, the controller's CPU
//! (bftpd utime+stime plus the bftp CLI's; lftp's rusage).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_tests::bench::{children_cpu, env_or, server_kind, sums, tls_hosts};
use bftp_tests::daemon::{bin, http, Bftpd};
use bftp_tests::pki::{Flaw, Pki};
use bftp_tests::procstat::cpu_seconds;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

const DST_DIR: &str = "dst";

/// Deterministic contents: `len` bytes of xorshift from `seed`, written to `out` in chunks.
fn write_contents(out: &mut impl std::io::Write, seed: u64, len: u64) -> Result<()> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut left = len;
    let mut buf = Vec::with_capacity(1 << 20);
    while left > 0 {
        buf.clear();
        while buf.len() < (1 << 20) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.extend_from_slice(&x.to_le_bytes());
        }
        let n = left.min(buf.len() as u64);
        out.write_all(&buf[..n as usize])?;
        left -= n;
    }
    Ok(())
}

/// The length of each of a server's logs, to read what one run added.
struct LogMarks(Vec<(PathBuf, u64)>);

impl LogMarks {
    fn of(servers: &[&FtpServer]) -> LogMarks {
        let mut v = Vec::new();
        for s in servers {
            for p in [tls_log(s), s.log_file()] {
                let len = std::fs::metadata(&p).map_or(0, |m| m.len());
                v.push((p, len));
            }
        }
        LogMarks(v)
    }

    /// What the logs gained since the mark: TLS data handshakes and protection commands.
    fn evidence(&self) -> Evidence {
        let mut e = Evidence::default();
        for (path, from) in &self.0 {
            let Ok(all) = std::fs::read(path) else {
                continue;
            };
            let new = String::from_utf8_lossy(all.get(*from as usize..).unwrap_or_default());
            if let Ok(dir) = std::env::var("BENCH_LOG_DIR") {
                let name = path.to_string_lossy().replace('/', "_");
                let _ = std::fs::write(Path::new(&dir).join(name), new.as_bytes());
            }
            for l in new.lines() {
                if l.contains("data connection accepted") {
                    e.accepted += 1;
                } else if l.contains("making TLS connection for data connection") {
                    e.made += 1;
                } else if l.contains("\"PROT P\"") {
                    e.prot_p += 1;
                } else if l.contains("\"PROT C\"") {
                    e.prot_c += 1;
                } else if l.contains("\"SSCN ON\"") {
                    e.sscn += 1;
                } else if l.contains("\"CPSV\"") {
                    e.cpsv += 1;
                }
            }
        }
        e
    }
}

/// proFTPD's TLSLog (see `FtpServer::proftpd_tls`): beside the xferlog.
fn tls_log(s: &FtpServer) -> PathBuf {
    s.xferlog().with_file_name("tls.log")
}

#[derive(Default, Debug)]
struct Evidence {
    /// TLS server side (first data connection of a session only).
    accepted: usize,
    /// TLS client side (SSCN ON): one per data connection.
    made: usize,
    prot_p: usize,
    prot_c: usize,
    sscn: usize,
    cpsv: usize,
}

impl Evidence {
    fn handshakes(&self) -> usize {
        self.made
    }

    fn summary(&self, files: usize) -> String {
        let verdict = if self.handshakes() >= files {
            "encrypted"
        } else if self.handshakes() == 0 {
            "CLEAR"
        } else {
            "PARTLY clear"
        };
        format!(
            "{verdict}: {} TLS data connections made by the SSCN client ({} first-of-session \
             accepted by the TLS server), PROT P {}, PROT C {}, SSCN ON {}, CPSV {}",
            self.made, self.accepted, self.prot_p, self.prot_c, self.sscn, self.cpsv
        )
    }
}

struct Workload {
    name: &'static str,
    dir: &'static str,
    files: usize,
    bytes: u64,
}

struct Row {
    workload: &'static str,
    tool: String,
    files: usize,
    bytes: u64,
    wall: f64,
    cpu: f64,
    evidence: Evidence,
    check: Result<(), String>,
}

struct Bench {
    src: FtpServer,
    dst: FtpServer,
    pki: Pki,
    parallel: usize,
    limit: Duration,
}

impl Bench {
    fn url(&self, server: &FtpServer, path: &str) -> String {
        format!(
            "ftp://{}@{}:{}/{path}",
            server.user(),
            server.host(),
            server.port()
        )
    }

    fn clean(&self) -> Result<()> {
        let dir = self.dst.path(DST_DIR);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        self.dst.mkdir(DST_DIR)?;
        Ok(())
    }

    fn verify(&self, w: &Workload) -> Result<()> {
        let src = sums(&self.src.path(w.dir))?;
        let dst = sums(&self.dst.path(DST_DIR))?;
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

    fn bftpd(&self) -> Result<Bftpd> {
        let hosts = tls_hosts(&[&self.src, &self.dst], &self.pki.ca_file());
        let pairs = self.parallel;
        Bftpd::start_with(|dir| {
            Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"warn\"")
                + &format!(
                    "[ftp]\nparallel_pairs = {pairs}\nmax_connections_per_host = 40\n\
                     [scheduler]\nmax_running_jobs = 32\n{hosts}"
                )
        })
    }

    fn run(&self, w: &Workload, tool: &str) -> Result<Row> {
        self.clean()?;
        let marks = LogMarks::of(&[&self.src, &self.dst]);
        let (label, wall, cpu, mut check) = match tool {
            "lftp" => self.lftp(w, true),
            "lftp-noprot" => self.lftp(w, false),
            "bftp" => self.bftp(w),
            "queued" => self.queued(w),
            other => bail!("unknown tool {other}"),
        }?;
        // proFTPD writes its logs as each session's commands end; the sessions are closed.
        std::thread::sleep(Duration::from_millis(200));
        let evidence = marks.evidence();
        if check.is_ok() {
            check = self.verify(w).map_err(|e| format!("{e:#}"));
        }
        Ok(Row {
            workload: w.name,
            tool: label,
            files: w.files,
            bytes: w.bytes,
            wall,
            cpu,
            evidence,
            check,
        })
    }

    /// `protect_fxp`: `ftp:ssl-protect-fxp`, without which lftp asks no SSCN and its FXP data
    /// moves in clear whatever `ftp:ssl-protect-data` says.
    fn lftp(
        &self,
        w: &Workload,
        protect_fxp: bool,
    ) -> Result<(String, f64, f64, Result<(), String>)> {
        let home = tempfile::Builder::new().prefix("bench-lftp-").tempdir()?;
        let url = |s: &FtpServer, path: &str| {
            format!(
                "ftp://{}:{}@{}:{}/{path}",
                s.user(),
                s.password(),
                s.host(),
                s.port()
            )
        };
        let mut script = String::new();
        write!(
            script,
            "set ftp:ssl-force yes; set ftp:ssl-protect-data yes; set ftp:ssl-protect-fxp {}; \
             set ftp:use-fxp yes; set ftp:fxp-force yes; \
             set ssl:ca-file {}; set ssl:verify-certificate yes; \
             set mirror:parallel-transfer-count {}; mirror {} {}",
            if protect_fxp { "yes" } else { "no" },
            self.pki.ca_file().display(),
            self.parallel,
            url(&self.src, w.dir),
            url(&self.dst, DST_DIR)
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
        let label = if protect_fxp {
            format!("lftp par{}", self.parallel)
        } else {
            "lftp noprot".to_string()
        };
        Ok((label, wall, children_cpu() - cpu, check))
    }

    fn bftp(&self, w: &Workload) -> Result<(String, f64, f64, Result<(), String>)> {
        let d = self.bftpd()?;
        let pid = d.pid().context("bftpd pid")?;
        let source = self.url(&self.src, &format!("{}/*", w.dir));
        let dest = self.url(&self.dst, &format!("{DST_DIR}/"));
        let home = d.dir().join("home");
        std::fs::create_dir_all(&home)?;
        let cpu = cpu_seconds(pid, false)? + children_cpu();
        let start = Instant::now();
        let o = Command::new(bin("bftp"))
            .arg("--socket")
            .arg(d.socket())
            .args(["--json", "transfer", &source, &dest])
            .args(["--tls", "required", "--data-tls", "required"])
            .env("HOME", &home)
            .env("BFTP_SOURCE_PASSWORD", self.src.password())
            .env("BFTP_DEST_PASSWORD", self.dst.password())
            .stdin(Stdio::null())
            .output()?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid, false)? + children_cpu() - cpu;
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
        Ok((format!("bftp p{}", self.parallel), wall, cpu, check))
    }

    /// Polls the job list until job `id` is finished: Err if it did not succeed.
    fn wait(&self, d: &Bftpd, id: u64) -> Result<Result<(), String>> {
        let deadline = Instant::now() + self.limit;
        loop {
            ensure!(
                Instant::now() < deadline,
                "job not done after {:?}",
                self.limit
            );
            let (st, body) = http(
                d.socket(),
                "GET",
                "/v1/jobs?state=finished&all=true&limit=10",
                None,
                &[],
            )?;
            ensure!(st == 200, "list: {st} {body}");
            let v: serde_json::Value = serde_json::from_str(&body)?;
            let job = v["jobs"]
                .as_array()
                .and_then(|a| a.iter().find(|j| j["id"].as_u64() == Some(id)));
            if let Some(j) = job {
                return Ok(if j["outcome"] == "succeeded" {
                    Ok(())
                } else {
                    Err(format!("job {id}: {}", j["outcome"]))
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn queued(&self, w: &Workload) -> Result<(String, f64, f64, Result<(), String>)> {
        let d = self.bftpd()?;
        let pid = d.pid().context("bftpd pid")?;
        let source = self.url(&self.src, &format!("{}/*", w.dir));
        let dest = self.url(&self.dst, &format!("{DST_DIR}/"));
        let cpu = cpu_seconds(pid, false)? + children_cpu();
        let start = Instant::now();
        let o = d.bftp_env(
            None,
            &[
                "--json",
                "submit",
                &source,
                &dest,
                "--tls",
                "required",
                "--data-tls",
                "required",
            ],
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
        let id = v["job"]["id"].as_u64().context("no job id")?;
        let check = self.wait(&d, id)?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid, false)? + children_cpu() - cpu;
        Ok((format!("queued p{}", self.parallel), wall, cpu, check))
    }
}

fn main() -> Result<()> {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let src_kind = server_kind("BENCH_SRC", ServerKind::Proftpd)?;
    let dst_kind = server_kind("BENCH_DST", ServerKind::Proftpd)?;
    let big: u64 = env_or("BENCH_BIG", 1 << 30);
    let files: usize = env_or("BENCH_FILES", 2000);
    let size: u64 = env_or("BENCH_SIZE", 4096);
    let parallel: usize = env_or("BENCH_PARALLEL", 4);
    let tools = env_or("BENCH_TOOLS", "lftp,bftp,queued".to_string());
    let workloads = env_or("BENCH_WORKLOADS", "big,small".to_string());
    let limit = Duration::from_secs(env_or("BENCH_TIMEOUT", 1800));
    let _ = (bin("bftpd"), bin("bftp"));
    let pki = Pki::new()?;
    // The tree lives in memory where it can: the disk is not what is measured.
    let roots = Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir());
    let start = |kind: ServerKind, last: u8| -> Result<FtpServer> {
        let (tls, _) = pki.server(&format!("{}-{last}", kind.name()), Flaw::None, true)?;
        FtpServer::start(
            kind,
            FtpOptions {
                host: std::net::Ipv4Addr::new(127, 0, 0, last),
                passive_ports: 2000,
                parent: roots.clone(),
                tls: Some(tls),
                ..FtpOptions::default()
            },
        )
    };
    let src = start(src_kind, 2)?;
    let dst = start(dst_kind, 3)?;
    let mut all = Vec::new();
    for name in workloads.split(',').map(str::trim) {
        all.push(match name {
            "big" => {
                let path = src.put_file("big/big.dat", b"")?;
                let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
                write_contents(&mut f, 1, big)?;
                f.flush()?;
                Workload {
                    name: "big",
                    dir: "big",
                    files: 1,
                    bytes: big,
                }
            }
            "small" => {
                for i in 0..files {
                    let mut data = Vec::new();
                    write_contents(&mut data, i as u64 + 2, size)?;
                    src.put_file(&format!("small/f{i:06}.dat"), &data)?;
                }
                Workload {
                    name: "small",
                    dir: "small",
                    files,
                    bytes: files as u64 * size,
                }
            }
            "" => continue,
            other => bail!("BENCH_WORKLOADS: unknown workload {other} (big, small)"),
        });
    }
    println!(
        "source {src_kind} {}, destination {dst_kind} {}; explicit FTPS, TLS before USER; \
         big: 1 file of {big} B; small: {files} files of {size} B; parallel {parallel}; \
         bftp profile {}; {} CPUs, loadavg {}",
        src.addr(),
        dst.addr(),
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_default(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let bench = Bench {
        src,
        dst,
        pki,
        parallel,
        limit,
    };
    let mut rows = Vec::new();
    for w in &all {
        for tool in tools.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let row = bench.run(w, tool)?;
            eprintln!(
                "{} {}: {:.2} s, {}; {}",
                row.workload,
                row.tool,
                row.wall,
                match &row.check {
                    Ok(()) => "sha256 identical".to_string(),
                    Err(e) => format!("FAILED: {e}"),
                },
                row.evidence.summary(row.files)
            );
            rows.push(row);
        }
    }
    println!(
        "\n{:<6} {:<11} {:>6} {:>9} {:>8} {:>8} {:>10}  {:<10} {:<6}",
        "load", "tool", "files", "files/s", "MB/s", "wall s", "ctl CPU s", "data", "sha256"
    );
    for r in &rows {
        println!(
            "{:<6} {:<11} {:>6} {:>9.1} {:>8.1} {:>8.2} {:>10.3}  {:<10} {:<6}",
            r.workload,
            r.tool,
            r.files,
            r.files as f64 / r.wall,
            r.bytes as f64 / 1e6 / r.wall,
            r.wall,
            r.cpu,
            if r.evidence.handshakes() >= r.files {
                "encrypted"
            } else if r.evidence.handshakes() == 0 {
                "CLEAR"
            } else {
                "partly"
            },
            if r.check.is_ok() { "ok" } else { "FAILED" }
        );
    }
    println!("\nwhat the servers' logs show of each run:");
    for r in &rows {
        println!(
            "{:<6} {:<11} {}",
            r.workload,
            r.tool,
            r.evidence.summary(r.files)
        );
    }
    Ok(())
}
