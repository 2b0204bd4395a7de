//! The tests' file contents: distinct bytes per file name, and big files written and
//! measured without holding them in memory.

use std::path::Path;

/// Distinct contents per file, so a file copied under another's name shows.
pub fn content(name: &str, len: usize) -> Vec<u8> {
    let mut x = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Deterministic bytes, written in chunks (no big file in memory): one random MiB, with
/// every 4 KiB page stamped with its offset, so that no two pages of the file are equal.
pub fn write_payload(path: &Path, size: u64, seed: u64) {
    use std::io::Write;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    let mut out = std::io::BufWriter::new(file);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    let mut buf = vec![0u8; 1 << 20];
    for word in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        word.copy_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    let mut offset = 0u64;
    while offset < size {
        for (i, page) in buf.chunks_mut(4096).enumerate() {
            page[..8].copy_from_slice(&(offset + (i as u64) * 4096).to_le_bytes());
        }
        let n = (size - offset).min(buf.len() as u64) as usize;
        out.write_all(&buf[..n]).unwrap();
        offset += n as u64;
    }
    out.flush().unwrap();
}

pub fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

pub const BIG: u64 = 300 << 20;
