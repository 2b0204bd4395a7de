//! Test support for the end-to-end tests: real FTP servers (vsftpd, proFTPD, Pure-FTPd) and a
//! real SMTP sink (aiosmtpd), each started per test on a free loopback port in a temporary
//! directory and killed on drop, plus a raw FTP control client to drive servers by hand,
//! and the helpers the e2e modules share (`jobs`, `files`, `engine`, `nodes`, `tree`,
//! `report`, `notify`), and a webhook receiver (`webhook`).
//!
//! Needs root and what `tests/install-deps` installs; a missing piece is an error that says
//! so, never a skipped test.

pub mod bench;
pub mod capture;
pub mod daemon;
pub mod delay;
pub mod engine;
pub mod files;
pub mod ftpserver;
pub mod hostile;
pub mod jobs;
pub mod measure;
pub mod nodes;
pub mod notify;
pub mod pki;
pub mod procstat;

/// The PostgreSQL test cluster (the `bftp-testpg` crate, which bftp-store's tests use too).
pub use bftp_testpg as postgres;
pub mod rawftp;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod smtp;
pub mod sockdiag;
pub mod tree;
pub mod watch;
pub mod webhook;

pub use delay::DelayProxy;
pub use ftpserver::{Direction, FtpOptions, FtpServer, ServerKind, ServerTls, XferEntry};
pub use rawftp::{RawFtp, Reply};
pub use smtp::{Mail, SmtpSink};

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Deterministic bytes that are not all alike, so a shifted or truncated copy shows; another
/// `seed` gives other bytes. The one generator of the tests' file contents.
pub fn payload(len: usize, seed: u8) -> Vec<u8> {
    let mut x = u32::from(seed) | 0x0100;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as u8
        })
        .collect()
}

/// Where `tests/install-deps` unpacks the FTP servers (override: `BFTP_TESTDEPS`).
pub fn testdeps_prefix() -> PathBuf {
    std::env::var_os("BFTP_TESTDEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/bftp-testdeps"))
}

/// How long a server may take to answer its first greeting.
const STARTUP_DEADLINE: Duration = Duration::from_secs(15);
/// How often readiness is polled while waiting for a listener to appear.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Ports handed out by this process and not yet released, so two tests never pick the same
/// one between probing it and the server binding it.
static TAKEN_PORTS: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A string no other server in this machine's test runs shows in its greeting: proves that
/// the process answering on a port is the one we started, not a neighbour that won a race.
fn unique_token(what: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "bftp-test-{what}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A cheap pseudo-random number (no need for a `rand` dependency to scatter port ranges).
fn scatter() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A port free on `ip` right now (bind port 0), reserved in this process until released.
fn reserve_free_port(ip: IpAddr) -> Result<u16> {
    for _ in 0..50 {
        let port = TcpListener::bind((ip, 0))
            .with_context(|| format!("binding {ip}:0"))?
            .local_addr()?
            .port();
        if reserve_ports(&[port]) {
            return Ok(port);
        }
    }
    bail!("no free port on {ip}")
}

/// Reserves all of `ports` or none; false if one is already reserved.
fn reserve_ports(ports: &[u16]) -> bool {
    let mut taken = TAKEN_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    if ports.iter().any(|p| taken.contains(p)) {
        return false;
    }
    taken.extend(ports);
    true
}

fn release_ports(ports: impl IntoIterator<Item = u16>) {
    let mut taken = TAKEN_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(taken) = taken.as_mut() {
        for p in ports {
            taken.remove(&p);
        }
    }
}

/// `count` consecutive ports free on `ip`, below Linux's ephemeral range (32768..) so that no
/// outgoing connection takes one while a server relies on it. Reserved until released.
fn reserve_port_range(ip: IpAddr, count: u16) -> Result<std::ops::RangeInclusive<u16>> {
    const LOW: u16 = 10_000;
    const HIGH: u16 = 32_000;
    let blocks = u64::from((HIGH - LOW) / count);
    for _ in 0..200 {
        let start = LOW + (scatter() % blocks) as u16 * count;
        let ports: Vec<u16> = (start..start + count).collect();
        if !ports.iter().all(|&p| TcpListener::bind((ip, p)).is_ok()) {
            continue;
        }
        if reserve_ports(&ports) {
            return Ok(start..=start + count - 1);
        }
    }
    bail!("no range of {count} free ports on {ip}")
}

/// Waits until `addr` accepts a connection that greets with a 220 line containing `token`,
/// then says QUIT (FTP and SMTP alike). Fails early if `child` exits.
/// Waits until `addr` accepts a TCP connection (for servers whose greeting is inside TLS).
fn wait_for_listener(child: &Child, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + STARTUP_DEADLINE;
    loop {
        if has_exited(child) {
            bail!("exited before it was ready on {addr}");
        }
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(POLL_INTERVAL),
            Err(e) => bail!("nothing listening on {addr} after {STARTUP_DEADLINE:?}: {e}"),
        }
    }
}

fn wait_for_greeting(child: &Child, addr: SocketAddr, token: &str) -> Result<()> {
    let deadline = Instant::now() + STARTUP_DEADLINE;
    loop {
        if has_exited(child) {
            bail!("exited before it was ready on {addr}");
        }
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(stream) => return check_greeting(stream, addr, token),
            Err(_) if Instant::now() < deadline => std::thread::sleep(POLL_INTERVAL),
            Err(e) => bail!("nothing listening on {addr} after {STARTUP_DEADLINE:?}: {e}"),
        }
    }
}

fn check_greeting(stream: TcpStream, addr: SocketAddr, token: &str) -> Result<()> {
    stream.set_read_timeout(Some(STARTUP_DEADLINE))?;
    stream.set_write_timeout(Some(STARTUP_DEADLINE))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut greeting = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            bail!("{addr} closed the connection during its greeting {greeting:?}");
        }
        greeting.push_str(&line);
        if line.len() >= 4 && line.as_bytes()[3] == b' ' {
            break;
        }
    }
    if !greeting.starts_with("220") || !greeting.contains(token) {
        bail!("{addr} is not the server we started (greeting {greeting:?}, token {token})");
    }
    let mut stream = stream;
    stream.write_all(b"QUIT\r\n")?;
    let mut bye = String::new();
    reader.read_line(&mut bye)?;
    Ok(())
}

/// Whether `child` has exited, without reaping it: while it is an unreaped zombie its pid
/// cannot be reused, which keeps `kill_tree` safe.
fn has_exited(child: &Child) -> bool {
    let pid: libc::id_t = child.id();
    // SAFETY: siginfo_t is plain data, valid when zeroed; waitid writes into it only.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc != 0 || info.si_pid() != 0
    }
}

/// SIGKILL for a server and every process it forked, then reaps it.
///
/// Not a process-group kill: vsftpd's sessions call setsid(2) and leave the group. So the
/// tree is found through /proc and frozen first (SIGSTOP, until every member shows as
/// stopped): a stopped process can neither fork a child we would miss nor reap one whose pid
/// could then be reused, so the pids we finally SIGKILL are exactly the tree's.
fn kill_tree(child: &mut Child) {
    if let Ok(root) = libc::pid_t::try_from(child.id()) {
        signal(root, libc::SIGSTOP);
        let mut frozen: HashSet<libc::pid_t> = HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let table = process_table();
            let tree = descendants(root, &table);
            let mut new = false;
            for &pid in &tree {
                if frozen.insert(pid) {
                    signal(pid, libc::SIGSTOP);
                    new = true;
                }
            }
            let all_stopped = tree
                .iter()
                .chain([&root])
                .all(|pid| table.get(pid).is_none_or(|p| p.stopped));
            if (!new && all_stopped) || Instant::now() >= deadline {
                break;
            }
            std::thread::yield_now();
        }
        for &pid in &frozen {
            signal(pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) takes no pointers; see kill_tree for why the pid is the intended one.
    unsafe {
        libc::kill(pid, sig);
    }
}

struct ProcEntry {
    ppid: libc::pid_t,
    /// Stopped, or already dead (a zombie cannot fork either).
    stopped: bool,
}

/// Every process visible in /proc, by pid.
fn process_table() -> std::collections::HashMap<libc::pid_t, ProcEntry> {
    let mut table = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(ppid) = ppid.parse() else { continue };
        let stopped = matches!(state, "T" | "t" | "Z" | "X");
        table.insert(pid, ProcEntry { ppid, stopped });
    }
    table
}

fn descendants(
    root: libc::pid_t,
    table: &std::collections::HashMap<libc::pid_t, ProcEntry>,
) -> Vec<libc::pid_t> {
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for (&pid, p) in table {
            if p.ppid == parent {
                found.push(pid);
                queue.push(pid);
            }
        }
    }
    found
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}
