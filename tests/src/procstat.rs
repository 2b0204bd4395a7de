//! What the benchmarks read of processes and of the machine from /proc: CPU seconds
//! (own and reaped children's), RSS, I/O, the machine's busy jiffies and load, and the master
//! process of a test FTP server (to count its sessions' CPU).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::FtpServer;

fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes no pointers.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The fields of /proc/PID/stat after `(comm)`: state is [0], ppid [1], utime [11], stime
/// [12], cutime [13], cstime [14].
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("odd /proc stat")? + 1..];
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

fn ticks(f: &[String], i: usize) -> Result<f64> {
    Ok(f.get(i).context("short /proc stat")?.parse::<u64>()? as f64 / clock_ticks())
}

/// CPU seconds (own; with `reaped`, also its waited-for children's) of a process.
pub fn cpu_seconds(pid: u32, reaped: bool) -> Result<f64> {
    let f = stat_fields(pid)?;
    let own = ticks(&f, 11)? + ticks(&f, 12)?;
    Ok(if reaped {
        own + ticks(&f, 13)? + ticks(&f, 14)?
    } else {
        own
    })
}

/// rchar and wchar of /proc/PID/io (also readable for a zombie, before it is reaped).
pub fn proc_io(pid: u32) -> Result<(u64, u64)> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    let field = |name: &str| -> Result<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .context("io field")?
            .trim()
            .parse()
            .context("io value")
    };
    Ok((field("rchar:")?, field("wchar:")?))
}

/// write_bytes of /proc/PID/io: what the process made the kernel write to storage (counted
/// when the page is dirtied), not what it wrote to sockets.
pub fn proc_write_bytes(pid: u32) -> Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .context("write_bytes")?
        .trim()
        .parse()
        .context("write_bytes value")
}

pub fn status_kib(pid: u32, key: &str) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{key} of {pid}"))
}

fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            stat_fields(p).is_ok_and(|f| f.get(1).is_some_and(|pp| pp == &pid.to_string()))
        })
        .collect()
}

pub fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// TCP connections in TIME_WAIT on this machine (network namespace), IPv4 and IPv6, from
/// /proc/net/tcp{,6} (state 06).
pub fn time_wait_count() -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| {
            s.lines()
                .skip(1)
                .filter(|l| l.split_whitespace().nth(3) == Some("06"))
                .count()
        })
        .sum()
}

/// The all-CPU line of /proc/stat: user nice system idle iowait irq softirq steal ...
fn all_cpu_jiffies() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect()
}

/// Jiffies all CPUs were ready but the hypervisor ran something else (steal), from
/// /proc/stat: a neighbour's load on a virtual machine, which no process here pays for.
pub fn steal_jiffies() -> u64 {
    all_cpu_jiffies().get(7).copied().unwrap_or(0)
}

/// (busy, total) jiffies of all CPUs, from /proc/stat.
pub fn cpu_jiffies() -> (u64, u64) {
    let v = all_cpu_jiffies();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The process listening on `server`'s control port: its master (the one of the socket's
/// holders whose parent is not one).
pub fn server_master(server: &FtpServer) -> Option<u32> {
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(server.host().octets()),
        server.port()
    );
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&want.as_str()) && f.get(3) == Some(&"0A")).then(|| f[9].to_string())
    })?;
    let link = format!("socket:[{inode}]");
    let holders: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|t| t.to_str() == Some(&link))
                })
            })
        })
        .collect();
    holders.iter().copied().find(|&pid| {
        stat_fields(pid)
            .ok()
            .and_then(|f| f.get(1)?.parse::<u32>().ok())
            .is_none_or(|pp| !holders.contains(&pp))
    })
}

/// A server's CPU so far: its master and every session it reaped. Waits (10 s at most)
/// for the sessions of the last run to be gone and reaped (not even zombies), so that
/// they count.
pub fn server_cpu(master: Option<u32>) -> f64 {
    let Some(pid) = master else { return f64::NAN };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = children_of(pid);
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "warning: server {pid} still has sessions {left:?}: their CPU is not counted"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cpu_seconds(pid, true).unwrap_or(f64::NAN)
}

/// The three load averages, as /proc/loadavg writes them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
