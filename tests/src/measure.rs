//! A benchmark's measured child process (wall time, CPU from wait4, peak RSS sampled from
//! /proc, I/O counters, its stdout lines with their arrival times, all under a time limit)
//! and the TCP tap that counts the payload over a process's own TCP connections.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::procstat::{proc_io, status_kib};

/// Payload bytes over the TCP connections of a process.
#[derive(Clone, Copy, Default, Debug)]
pub struct TcpTotals {
    pub sockets: u32,
    /// Connections to one of `control_ports` (the servers' control ports).
    pub control: u32,
    pub sent: u64,
    pub received: u64,
}

impl TcpTotals {
    pub fn bytes(&self) -> u64 {
        self.sent + self.received
    }
}

/// Counts the TCP payload of a process: scans /proc/PID/fd every `interval`, takes a
/// duplicate of each new TCP socket (pidfd_getfd(2)), and once the process no longer has it
/// (or at the end) reads its TCP_INFO bytes_acked/bytes_received and closes the duplicate.
/// Two costs: a socket opened and closed between two scans is missed (the count of sockets
/// says so), and the duplicate delays the FIN of a socket the process closed by up to two
/// intervals (held to the end, it would stall a server that waits for the client's FIN,
/// as proFTPD does after a listing, for its 10 s TimeoutLinger).
pub struct Tap {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<TcpTotals>,
}

fn getsockopt_int(fd: &OwnedFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid out-parameters of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

fn is_tcp(fd: &OwnedFd) -> bool {
    let domain = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN);
    let proto = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL);
    matches!(domain, Some(libc::AF_INET | libc::AF_INET6)) && proto == Some(libc::IPPROTO_TCP)
}

fn inode_of(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and out-parameter.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some(st.st_ino)
}

pub fn pidfd_open(pid: u32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes no pointers; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    ensure!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just returned by pidfd_open and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// What the tap holds of one socket.
struct Held {
    fd: OwnedFd,
    /// Taken while the socket was surely connected (a reset one has no peer).
    peer: Option<u16>,
    /// Whole scans of the fd table in a row that did not find it.
    misses: u8,
}

impl Held {
    fn add_to(self, totals: &mut TcpTotals, control_ports: &[u16]) {
        // SAFETY: zeroed tcp_info is a valid out-parameter; len says its size.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: a valid fd and out-parameters.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return;
        }
        if std::env::var_os("BENCH_TAP_DEBUG").is_some() {
            eprintln!(
                "tap: peer port {:?} state {} sent {} received {}",
                self.peer.or_else(|| peer_port(&self.fd)),
                info.tcpi_state,
                info.tcpi_bytes_acked,
                info.tcpi_bytes_received
            );
        }
        totals.sockets += 1;
        totals.sent += info.tcpi_bytes_acked;
        totals.received += info.tcpi_bytes_received;
        if self
            .peer
            .or_else(|| peer_port(&self.fd))
            .is_some_and(|p| control_ports.contains(&p))
        {
            totals.control += 1;
        }
    }
}

/// The socket inodes in a process's fd table, with an fd number of each; None when the
/// table could not be read whole (an fd closed while being read, the process gone).
fn socket_fds(pid: u32) -> Option<BTreeMap<u64, i32>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()? {
        let e = e.ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        let inode = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok());
        let num = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
        if let (Some(inode), Some(num)) = (inode, num) {
            out.insert(inode, num);
        }
    }
    Some(out)
}

impl Tap {
    pub fn start(pid: u32, interval: Duration, control_ports: [u16; 2]) -> Result<Tap> {
        let pidfd = pidfd_open(pid)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut totals = TcpTotals::default();
            let mut seen = HashSet::new();
            let mut held: BTreeMap<u64, Held> = BTreeMap::new();
            loop {
                let last = flag.load(Ordering::SeqCst);
                let scan = socket_fds(pid);
                let now = scan.clone().unwrap_or_default();
                for (&inode, &num) in &now {
                    if seen.contains(&inode) {
                        continue;
                    }
                    // SAFETY: pidfd_getfd(2) takes no pointers; a non-negative result
                    // is a new fd we own.
                    let fd =
                        unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), num, 0) };
                    if fd < 0 {
                        continue;
                    }
                    // SAFETY: a new fd nothing else owns.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
                    // The fd number may have been reused since the readlink: trust the dup.
                    let Some(real) = inode_of(&fd) else { continue };
                    if seen.insert(real) && is_tcp(&fd) {
                        let peer = peer_port(&fd);
                        held.insert(
                            real,
                            Held {
                                fd,
                                peer,
                                misses: 0,
                            },
                        );
                    }
                }
                // Gone: missing from two whole scans in a row (or the end).
                if let Some(scan) = &scan {
                    for (inode, h) in held.iter_mut() {
                        h.misses = if scan.contains_key(inode) {
                            0
                        } else {
                            h.misses + 1
                        };
                    }
                }
                let gone: Vec<u64> = held
                    .iter()
                    .filter(|(_, h)| last || h.misses >= 2)
                    .map(|(i, _)| *i)
                    .collect();
                for inode in gone {
                    if let Some(h) = held.remove(&inode) {
                        h.add_to(&mut totals, &control_ports);
                    }
                }
                if last {
                    return totals;
                }
                std::thread::sleep(interval);
            }
        });
        Ok(Tap { stop, thread })
    }

    /// One last scan; every socket still held is counted and released.
    pub fn finish(self) -> TcpTotals {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

fn peer_port(fd: &OwnedFd) -> Option<u16> {
    // SAFETY: zeroed sockaddr_storage is a valid out-parameter; len says its size.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: valid fd and out-parameters.
    let r = unsafe {
        libc::getpeername(
            fd.as_raw_fd(),
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel filled a sockaddr_in.
            let sin: &libc::sockaddr_in =
                unsafe { &*(&ss as *const _ as *const libc::sockaddr_in) };
            Some(u16::from_be(sin.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel filled a sockaddr_in6.
            let sin6: &libc::sockaddr_in6 =
                unsafe { &*(&ss as *const _ as *const libc::sockaddr_in6) };
            Some(u16::from_be(sin6.sin6_port))
        }
        _ => None,
    }
}

/// What a child command cost, measured by its parent.
pub struct ChildRun {
    pub wall: Duration,
    pub success: bool,
    pub timed_out: bool,
    /// user+system seconds, its waited-for children included (wait4's rusage).
    pub cpu: f64,
    /// Its peak RSS (VmHWM), sampled every 5 ms until it exits. Not ru_maxrss: that also
    /// holds the RSS of the image the child was forked from (this benchmark's).
    pub hwm_kib: u64,
    /// /proc/PID/io of the exited (zombie) process.
    pub rchar: u64,
    pub wchar: u64,
    /// Its stdout lines, with when each arrived (since the start).
    pub lines: Vec<(Duration, String)>,
    /// Its own TCP traffic, when tapped.
    pub tcp: Option<TcpTotals>,
}

/// Runs `cmd` to its end, or SIGKILLs it after `limit`: waits on a pidfd (sampling its
/// VmHWM every 5 ms), reads the zombie's I/O counters, then reaps it with wait4 for its
/// rusage.
pub fn run_child(
    cmd: &mut Command,
    limit: Duration,
    tap: Option<(Duration, [u16; 2])>,
) -> Result<ChildRun> {
    cmd.stdout(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let pid = child.id();
    let tapped = match tap {
        Some((interval, ports)) => Some(Tap::start(pid, interval, ports)?),
        None => None,
    };
    let stdout = child.stdout.take().context("stdout")?;
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .map(|l| (start.elapsed(), l))
            .collect::<Vec<_>>()
    });
    let pidfd = pidfd_open(pid)?;
    // The name it has once it runs the program (before the exec it is a copy of us).
    let comm: String = Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect())
        .unwrap_or_default();
    let mut hwm_kib = 0;
    let mut timed_out = false;
    loop {
        let execed = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim_end() == comm);
        if execed {
            hwm_kib = hwm_kib.max(status_kib(pid, "VmHWM:").unwrap_or(0));
        }
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() && !timed_out {
            timed_out = true;
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let mut pfd = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, 5) as libc::c_int;
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, ms) } > 0 {
            break;
        }
    }
    let wall = start.elapsed();
    let (rchar, wchar) = proc_io(pid).unwrap_or_default();
    let tcp = tapped.map(Tap::finish);
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: reaps our own child; status and ru are valid out-parameters.
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut ru) };
    ensure!(
        r == pid as libc::pid_t,
        "wait4: {}",
        std::io::Error::last_os_error()
    );
    // Reaped here: std's Child must not wait for it again (it does not on drop).
    drop(child);
    let lines = reader.join().unwrap_or_default();
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(ChildRun {
        wall,
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        timed_out,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        hwm_kib,
        rchar,
        wchar,
        lines,
        tcp,
    })
}
