//! The slow engine group (`cargo test -p bftp-tests --test e2e -- slow::engine::`): 100 MiB
//! third-party copies compared byte for byte, each server once as the source.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{ensure, Result};
use bftp_core::DestCommand;
use bftp_ftp::{CopyOutcome, SizeCheck};
use bftp_tests::engine::{expect_success, open, start};
use bftp_tests::scenario::{block_on, request};
use bftp_tests::ServerKind::{self, Proftpd, PureFtpd, Vsftpd};

const SIZE: u64 = 100 << 20;
const CHUNK: usize = 1 << 20;

/// Deterministic, non-repeating bytes written in chunks (no 100 MiB in memory).
fn write_payload(path: &Path, size: u64) -> Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut buf = vec![0u8; CHUNK];
    let mut left = size;
    while left > 0 {
        for word in buf.chunks_mut(8) {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            word.copy_from_slice(&v[..word.len()]);
        }
        let n = left.min(CHUNK as u64) as usize;
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    out.flush()?;
    Ok(())
}

/// The offset of the first differing byte, if any.
fn first_difference(a: &Path, b: &Path) -> Result<Option<u64>> {
    let (mut fa, mut fb) = (File::open(a)?, File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut offset = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        if let Some(i) = ba[..na.min(nb)]
            .iter()
            .zip(&bb[..na.min(nb)])
            .position(|(x, y)| x != y)
        {
            return Ok(Some(offset + i as u64));
        }
        if na != nb {
            return Ok(Some(offset + na.min(nb) as u64));
        }
        if na == 0 {
            return Ok(None);
        }
        offset += na as u64;
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

fn hundred_mib(src_kind: ServerKind, dst_kind: ServerKind) -> Result<()> {
    let src = start(src_kind)?;
    let dst = start(dst_kind)?;
    src.put_file("/big/data.bin", b"")?;
    write_payload(&src.path("/big/data.bin"), SIZE)?;
    dst.mkdir("/in")?;
    let started = Instant::now();
    let outcome = block_on(async {
        let mut pair = open(&src, &dst, bftp_tests::engine::image()).await?;
        let outcome = pair
            .copy(&request(
                "/big/data.bin",
                "/in/data.bin",
                DestCommand::Replace,
            ))
            .await?;
        pair.close().await;
        anyhow::Ok(outcome)
    })?;
    expect_success(&outcome, "100 MiB copy")?;
    let CopyOutcome::Succeeded {
        bytes, size_check, ..
    } = &outcome
    else {
        unreachable!("checked above")
    };
    ensure!(*bytes == Some(SIZE), "{outcome:?}");
    ensure!(
        matches!(size_check, SizeCheck::Equal { source, destination, .. } if *source == SIZE && *destination == SIZE),
        "{size_check:?}"
    );
    let diff = first_difference(&src.path("/big/data.bin"), &dst.path("/in/data.bin"))?;
    ensure!(diff.is_none(), "copies differ from byte {diff:?}");
    eprintln!(
        "{src_kind} -> {dst_kind}: {SIZE} bytes in {:?}",
        started.elapsed()
    );
    Ok(())
}

#[test]
fn hundred_mib_vsftpd_to_proftpd_byte_for_byte() -> Result<()> {
    hundred_mib(Vsftpd, Proftpd)
}

#[test]
fn hundred_mib_proftpd_to_pure_ftpd_byte_for_byte() -> Result<()> {
    hundred_mib(Proftpd, PureFtpd)
}

#[test]
fn hundred_mib_pure_ftpd_to_vsftpd_byte_for_byte() -> Result<()> {
    hundred_mib(PureFtpd, Vsftpd)
}
