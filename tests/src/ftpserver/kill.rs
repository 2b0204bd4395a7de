//! Stopping a test server for good: its process tree frozen and killed through pidfds, and
//! its listening socket waited for until it is free again (moved out of `ftpserver/mod.rs`).

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::{KILL_DEADLINE, KILL_POLL, REBIND_DEADLINE};

/// A process of a frozen tree, told apart from a later one that reuses its pid by its start
/// time, and signalled through its pidfd (None only if pidfd_open failed for the root).
pub(super) struct Frozen {
    pid: libc::pid_t,
    start: u64,
    pub(super) pidfd: Option<std::os::fd::OwnedFd>,
}

/// What `/proc/<pid>/stat` says of a process.
struct ProcStat {
    /// `R`, `S`, `T`, `Z`, ...
    state: char,
    ppid: libc::pid_t,
    /// Clock ticks since boot.
    start: u64,
}

/// None once the process has been reaped.
fn proc_stat(pid: libc::pid_t) -> Option<ProcStat> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the start time is
    // field 22, the 20th after comm.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `p` has exited: reaped, a zombie (which holds no files or sockets any more), or
/// its pid now taken by another process.
fn is_gone(p: &Frozen) -> bool {
    match proc_stat(p.pid) {
        None => true,
        Some(stat) => matches!(stat.state, 'Z' | 'X') || stat.start != p.start,
    }
}

/// A pidfd for `pid`: it keeps naming that process, even once the pid is reused.
fn pidfd_open(pid: libc::pid_t) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open(2) takes no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: a non-negative result is a new fd that nothing else owns.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

pub(super) fn pidfd_signal(pidfd: &std::os::fd::OwnedFd, sig: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: a null siginfo is allowed (the kernel fills in an SI_USER one).
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// SIGSTOPs `root` and every process it forked until all show as stopped (or 2 s have
/// passed), as [`crate::kill_tree`] does before its SIGKILLs, and returns them, root first,
/// with the pidfds to kill them by: a stopped process can neither fork nor exit nor reap a
/// child, so once all are stopped the list is the whole tree.
///
/// Each process is stopped through a pidfd, after checking that the process the pidfd names
/// is the child of one already in the tree: a pid seen in /proc may belong to a process that
/// has since exited, been reaped (by a parent not yet stopped), and been reused by someone
/// else's process.
pub(super) fn freeze_tree(root: libc::pid_t) -> Vec<Frozen> {
    // The root is our unreaped child: its pid cannot be reused.
    let Some(stat) = proc_stat(root) else {
        return Vec::new();
    };
    crate::signal(root, libc::SIGSTOP);
    let mut tree = vec![Frozen {
        pid: root,
        start: stat.start,
        pidfd: pidfd_open(root),
    }];
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let table = crate::process_table();
        let mut new = false;
        for pid in crate::descendants(root, &table) {
            if tree.iter().any(|p| p.pid == pid) {
                continue;
            }
            let Some(pidfd) = pidfd_open(pid) else {
                continue;
            };
            // Read after pidfd_open: if the pid still has a parent in the tree, the pidfd
            // names this very process.
            let Some(stat) = proc_stat(pid) else {
                continue;
            };
            if !tree.iter().any(|p| p.pid == stat.ppid) {
                continue;
            }
            pidfd_signal(&pidfd, libc::SIGSTOP);
            tree.push(Frozen {
                pid,
                start: stat.start,
                pidfd: Some(pidfd),
            });
            new = true;
        }
        let all_stopped = tree
            .iter()
            .all(|p| table.get(&p.pid).is_none_or(|e| e.stopped));
        if (!new && all_stopped) || Instant::now() >= deadline {
            return tree;
        }
        std::thread::yield_now();
    }
}

/// Waits until every process of the killed `tree` has exited and the `listener` socket is
/// closed. A process holding the socket that was not in the tree is also ours (the socket
/// was our server's): say a Pure-FTPd privilege-separation helper whose session ended just
/// before the kill, so that it had already been handed to init. It gets a SIGKILL too.
pub(super) fn wait_released(
    tree: &[Frozen],
    listener: Option<u64>,
    deadline: Instant,
) -> Result<()> {
    loop {
        let alive: Vec<&Frozen> = tree.iter().filter(|p| !is_gone(p)).collect();
        let open = listener.filter(|&inode| socket_exists(inode));
        let holders = open.map(socket_holders).unwrap_or_default();
        if let Some(inode) = open {
            for &pid in &holders {
                kill_holder(pid, inode);
            }
        }
        if alive.is_empty() && open.is_none() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let states: Vec<String> = alive
                .iter()
                .map(|p| match proc_stat(p.pid) {
                    Some(stat) => format!("{} ({})", p.pid, stat.state),
                    None => format!("{}", p.pid),
                })
                .collect();
            bail!(
                "after {KILL_DEADLINE:?}, killed processes still alive: [{}]; listening socket \
                 still open: {open:?}, held by {holders:?}",
                states.join(", ")
            );
        }
        std::thread::sleep(KILL_POLL);
    }
}

/// The socket inodes of the TCP sockets listening on `addr`: asked of the kernel by
/// `sock_diag` (listeners only), else read from /proc/net/tcp, whose many TIME_WAIT lines
/// after a long run make it slow.
fn listening_inodes(addr: SocketAddr) -> Vec<u64> {
    let SocketAddr::V4(addr) = addr else {
        return Vec::new();
    };
    if let Some(sockets) = crate::sockdiag::tcp_sockets(1 << crate::sockdiag::TCP_LISTEN) {
        return sockets
            .into_iter()
            .filter(|s| s.local == addr)
            .map(|s| s.inode)
            .collect();
    }
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
    // inode ...", the address as the hex of the in-memory (network order) u32.
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(&"0A"), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9))
        else {
            continue;
        };
        let Some((ip, port)) = local.split_once(':') else {
            continue;
        };
        let (Ok(ip), Ok(port), Ok(inode)) = (
            u32::from_str_radix(ip, 16),
            u16::from_str_radix(port, 16),
            inode.parse(),
        ) else {
            continue;
        };
        if Ipv4Addr::from(ip.to_ne_bytes()) == *addr.ip() && port == addr.port() {
            found.push(inode);
        }
    }
    found
}

/// Whether `inode` is still a TCP socket, in any state: by `sock_diag`, asking for every
/// state a socket with an inode can be in (TIME_WAIT and half-open request sockets have
/// none), else from /proc/net/tcp.
fn socket_exists(inode: u64) -> bool {
    if let Some(sockets) = crate::sockdiag::tcp_sockets(crate::sockdiag::states_with_inodes()) {
        return sockets.iter().any(|s| s.inode == inode);
    }
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let inode = inode.to_string();
    table
        .lines()
        .skip(1)
        .any(|line| line.split_whitespace().nth(9) == Some(inode.as_str()))
}

/// The socket inodes `pid` holds open.
fn socket_inodes(pid: libc::pid_t) -> Vec<u64> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The socket the (frozen) server listens on at `addr`: one that it holds, not a neighbour's
/// on the same port.
pub(super) fn listening_socket(tree: &[Frozen], addr: SocketAddr) -> Option<u64> {
    let listening = listening_inodes(addr);
    tree.iter()
        .flat_map(|p| socket_inodes(p.pid))
        .find(|inode| listening.contains(inode))
}

/// Every process holding the socket `inode` open.
fn socket_holders(inode: u64) -> Vec<libc::pid_t> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&pid| socket_inodes(pid).contains(&inode))
        .collect()
}

/// SIGKILL to `pid` if it holds the socket `inode`, through a pidfd so that the signal
/// cannot reach another process that took the pid in between.
fn kill_holder(pid: libc::pid_t, inode: u64) {
    let Some(pidfd) = pidfd_open(pid) else {
        return;
    };
    // The pidfd names the process that had the pid when it was opened: if the pid holds the
    // socket now, it is that process (one that reused the pid could not have our socket).
    if socket_inodes(pid).contains(&inode) {
        pidfd_signal(&pidfd, libc::SIGKILL);
    }
}

/// Waits until `addr` can be bound as the servers bind it (SO_REUSEADDR, so TIME_WAIT
/// leftovers of old connections do not count), i.e. nothing listens there any more.
pub(super) fn wait_bindable(addr: SocketAddr, deadline: Instant) -> Result<()> {
    use socket2::{Domain, Socket, Type};
    loop {
        let result = Socket::new(Domain::for_address(addr), Type::STREAM, None).and_then(|s| {
            s.set_reuse_address(true)?;
            s.bind(&addr.into())
        });
        match result {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                let held: Vec<String> = listening_inodes(addr)
                    .into_iter()
                    .map(|inode| format!("socket {inode} held by {:?}", socket_holders(inode)))
                    .collect();
                bail!(
                    "port still in use after {REBIND_DEADLINE:?}: {e} (listening: {})",
                    held.join("; ")
                );
            }
            Err(_) => std::thread::sleep(KILL_POLL),
        }
    }
}
