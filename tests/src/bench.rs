//! Pieces every benchmark program uses: settings from the environment, file contents, sums
//! of a directory's files, and the CPU of reaped children.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::ServerKind;

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
