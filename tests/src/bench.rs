//! Pieces every benchmark program uses: settings from the environment, file contents (the
//! FXP and relay benchmarks' big file and small files), sums of a directory's files, the CPU
//! of reaped children, a destination emptied and the machine settled between runs, and the
//! outcome of a `bftp --json transfer`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::measure::ChildRun;
use crate::procstat::time_wait_count;
use crate::{FtpServer, ServerKind};

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list setting, items trimmed.
pub fn env_list(name: &str, default: &str) -> Vec<String> {
    env_or(name, default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

pub fn server_kind(name: &str, default: ServerKind) -> Result<ServerKind> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => ServerKind::ALL
            .into_iter()
            .find(|k| k.name() == v.trim())
            .with_context(|| format!("{name}={v}: not one of vsftpd, proftpd, pure-ftpd")),
    }
}

/// Deterministic, distinct contents of file `i`.
pub fn contents(i: usize, size: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(size + 8);
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size);
    out
}

/// `sha256sum` of every file in `dir`, by name.
pub fn sums(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    names.sort();
    let mut out = BTreeMap::new();
    for chunk in names.chunks(500) {
        let o = Command::new("sha256sum")
            .args(chunk)
            .current_dir(dir)
            .output()
            .context("sha256sum")?;
        ensure!(o.status.success(), "sha256sum failed in {}", dir.display());
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let (sum, name) = line.split_once("  ").context("sha256sum line")?;
            out.insert(name.to_owned(), sum.to_owned());
        }
    }
    Ok(out)
}

/// user+system seconds of this process's reaped children so far.
pub fn children_cpu() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into ru only.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `len` bytes of splitmix64 from `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&splitmix(&mut s).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The big file at `rel` on `src`, `mib` MiB: a 1 MiB pseudo-random block, stamped every
/// 4 KiB with the block number and offset, so that no two 4 KiB pieces of the file are
/// equal (a misplaced or repeated piece shows in the compare). 1 MiB writes: disk speed, no
/// /dev/urandom, no holes. Returns its size.
pub fn write_big(src: &FtpServer, rel: &str, mib: u64) -> Result<u64> {
    const BLOCK: usize = 1 << 20;
    if let Some((dir, _)) = rel.rsplit_once('/') {
        src.mkdir(dir)?;
    }
    let path = src.path(rel);
    let mut block = pattern(0xb16_f11e, BLOCK);
    let mut f = std::io::BufWriter::with_capacity(BLOCK, File::create(&path)?);
    for i in 0..mib {
        for off in (0..BLOCK).step_by(4096) {
            let stamp = (i << 20 | off as u64) ^ 0x5a5a_5a5a_5a5a_5a5a;
            block[off..off + 8].copy_from_slice(&stamp.to_le_bytes());
        }
        f.write_all(&block)?;
    }
    f.into_inner()?.sync_all()?;
    // Owned like the root, so the server's session may read it.
    let root = std::fs::metadata(src.root())?;
    std::os::unix::fs::chown(&path, Some(root.uid()), Some(root.gid()))?;
    Ok(mib * BLOCK as u64)
}

/// `count` files of `size` bytes in `dir` on `src` (`f000000.dat`, ...), each its own
/// pattern. Returns their total size.
pub fn write_small(src: &FtpServer, dir: &str, count: usize, size: usize) -> Result<u64> {
    for i in 0..count {
        src.put_file(&format!("{dir}/f{i:06}.dat"), &pattern(i as u64 + 1, size))?;
    }
    Ok((count * size) as u64)
}

/// An empty directory `dir` on `dst`, and nothing dirty in the page cache from the previous
/// run to be written back during the next.
///
/// The previous run's small files are moved aside into `trash`, not deleted: ext4's inode
/// allocator skips inodes freed in the last 30 s (`recently_deleted`, reading each one's
/// block), and after a delete of thousands of files the destination server's CPU per
/// created file doubled (perf: proFTPD's time in `recently_deleted` and `find_get_block`),
/// so the order of the runs, not the controller, decided the result. Delete `trash` at the
/// end.
pub fn clean_destination(dst: &FtpServer, dir: &str, trash: &str) -> Result<()> {
    let path = dst.path(dir);
    if path.exists() {
        let trash = dst.path(trash);
        std::fs::create_dir_all(&trash)?;
        // Big files go now: a few inodes, and gigabytes of disk.
        for entry in std::fs::read_dir(&path)? {
            let entry = entry?;
            if entry.metadata()?.len() > 1 << 20 {
                std::fs::remove_file(entry.path())?;
            }
        }
        let n = std::fs::read_dir(&trash)?.count();
        std::fs::rename(&path, trash.join(n.to_string()))?;
    }
    dst.mkdir(dir)?;
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    Ok(())
}

/// Waits (at most `limit`) until at most `settled` TCP connections are in TIME_WAIT: an
/// active server's bind(2) of its data socket searches past every local port they hold, and
/// a run right after another paid up to 3x the CPU per file (measured), so without this the
/// order of the runs decides the winner. Returns the count at start.
pub fn settle(limit: Duration, settled: usize) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let n = time_wait_count();
        if n <= settled || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A line of `bftp --json` output as JSON, if it is one.
pub fn event(line: &str) -> Option<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(line).ok()
}

/// The CLI's exit and its summary event: every one of `files` succeeded.
pub fn bftp_outcome(run: &ChildRun, files: u64) -> Result<(), String> {
    if run.timed_out {
        return Err("timed out".into());
    }
    let summary = run
        .lines
        .iter()
        .rev()
        .find_map(|(_, l)| event(l).filter(|v| v["event"] == "summary"))
        .ok_or_else(|| format!("no summary from bftp (exit ok: {})", run.success))?;
    let (n, ok) = (summary["files"].as_u64(), summary["succeeded"].as_u64());
    if !run.success || n != Some(files) || ok != Some(files) {
        return Err(format!("bftp summary: {summary}"));
    }
    Ok(())
}

/// bftpd's `[ftp.tls]` section trusting the test CA at `ca_file` for each of `servers`.
pub fn tls_hosts(servers: &[&FtpServer], ca_file: &Path) -> String {
    let mut hosts = String::from("[ftp.tls]\n");
    for s in servers {
        hosts.push_str(&format!(
            "[[ftp.tls.hosts]]\nhost = \"{}\"\nca_file = \"{}\"\n",
            s.host(),
            ca_file.display()
        ));
    }
    hosts
}
