//! Key layout of the trees. Every number is big-endian so that byte order is numeric order:
//! an index scan returns ids ascending, the due index returns the earliest time first.
//!
//! | tree       | key                              | value          |
//! |------------|----------------------------------|----------------|
//! | `meta`     | `magic`, `schema`, `next_id`, `seq`, `digest` | see below |
//! | `jobs`     | id                               | job record     |
//! | `members`  | id, page (u32)                   | member page: members page x 32 .. +31 (`sled_store/pages.rs`) |
//! | `history`  | id, seq (u32)                    | history record |
//! | `requests` | request key hash (32)            | request record |
//! | `owners`   | uid (u32), id                    | empty          |
//! | `keywords` | keyword hash (32), id            | empty          |
//! | `states`   | state code (u8), id              | empty          |
//! | `due`      | next_attempt_at (u64 ms), id     | empty (only while queued) |
//! | `outbox`   | id                               | outbox record (a final job's report) |
//! | `outbox_due` | next_try_at (u64 ms), id       | empty (only while the report is pending) |
//! | `transcripts` | id                            | transcript record (the last attempt) |
//! | `refusals` | host length (u16), host, port (u16), command | refusal record (capability memory) |
//! | `pairs`    | source host length (u16), host, port (u16), destination host length (u16), host, port (u16) | pair record (a pair that refused the third party) |
//! | `watches`  | watch id                         | watch record   |
//! | `watch_files` | watch id, path (UTF-8 bytes)  | checkpoint entry record |
//!
//! `meta` also holds `next_watch_id` (absent until the first watch: 1).

use bftp_core::{JobState, Timestamp};

use crate::error::StoreError;
use crate::record::hex;
use crate::types::{JobId, KeyHash, StateFilter};

pub(crate) const META_MAGIC: &[u8] = b"magic";
pub(crate) const META_SCHEMA: &[u8] = b"schema";
pub(crate) const META_NEXT_ID: &[u8] = b"next_id";
/// Commit sequence: bumped by every transaction, compared with the watermark file at open.
pub(crate) const META_SEQ: &[u8] = b"seq";
/// The content digest of every other tree (`digest.rs`), kept by every transaction.
pub(crate) const META_DIGEST: &[u8] = b"digest";
/// A fingerprint of the daemon's secret key (a hash derived from it, never the key), so that
/// a missing or replaced key file is noticed before anything sealed is read with it.
pub(crate) const META_KEY_FINGERPRINT: &[u8] = b"key_fingerprint";
pub(crate) const MAGIC_VALUE: &[u8] = b"bftp-store";
/// The next watch id (watches are numbered apart from jobs).
pub(crate) const META_NEXT_WATCH_ID: &[u8] = b"next_watch_id";

pub(crate) fn watch(id: crate::types::WatchId) -> [u8; 8] {
    id.0.to_be_bytes()
}

/// A checkpoint entry: the watch, then the path's bytes (so a watch's entries are one
/// prefix, in path order).
pub(crate) fn watch_file(id: crate::types::WatchId, path: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + path.len());
    k.extend_from_slice(&id.0.to_be_bytes());
    k.extend_from_slice(path.as_bytes());
    k
}

/// The path of a checkpoint entry's key.
pub(crate) fn watch_file_path(key: &[u8]) -> Result<String, StoreError> {
    key.get(8..)
        .and_then(|p| std::str::from_utf8(p).ok())
        .map(str::to_owned)
        .ok_or_else(|| corrupt_key("watch file", key, "not a watch id and a UTF-8 path"))
}

/// A server's refusal memory: the host length-prefixed, so no host can run into the port.
pub(crate) fn refusal(key: &bftp_core::refusal::RefusalKey) -> Vec<u8> {
    let host = key.host.as_bytes();
    let len = u16::try_from(host.len()).unwrap_or(u16::MAX);
    let host = &host[..usize::from(len)];
    let mut k = Vec::with_capacity(4 + host.len() + key.command.len());
    k.extend_from_slice(&len.to_be_bytes());
    k.extend_from_slice(host);
    k.extend_from_slice(&key.port.to_be_bytes());
    k.extend_from_slice(key.command.as_bytes());
    k
}

/// An ordered pair's memory: each host length-prefixed, the source first, so that a→b is
/// another key than b→a and no host can run into a port.
pub(crate) fn pair(key: &bftp_core::route::PairKey) -> Vec<u8> {
    let mut k = Vec::new();
    for (host, port) in [&key.source, &key.destination] {
        let host = host.as_bytes();
        let len = u16::try_from(host.len()).unwrap_or(u16::MAX);
        k.extend_from_slice(&len.to_be_bytes());
        k.extend_from_slice(&host[..usize::from(len)]);
        k.extend_from_slice(&port.to_be_bytes());
    }
    k
}

pub(crate) fn job(id: JobId) -> [u8; 8] {
    id.0.to_be_bytes()
}

fn id_pair<const N: usize>(head: &[u8], id: JobId) -> [u8; N] {
    let mut k = [0u8; N];
    k[..head.len()].copy_from_slice(head);
    k[head.len()..].copy_from_slice(&id.0.to_be_bytes());
    k
}

pub(crate) fn member(id: JobId, index: u32) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&id.0.to_be_bytes());
    k[8..].copy_from_slice(&index.to_be_bytes());
    k
}

pub(crate) fn history(id: JobId, seq: u32) -> [u8; 12] {
    member(id, seq)
}

pub(crate) fn owner(uid: u32, id: JobId) -> [u8; 12] {
    id_pair(&uid.to_be_bytes(), id)
}

pub(crate) fn keyword(h: &KeyHash, id: JobId) -> [u8; 40] {
    id_pair(&h.0, id)
}

pub(crate) fn due(at: Timestamp, id: JobId) -> [u8; 16] {
    id_pair(&at.0.to_be_bytes(), id)
}

pub(crate) fn state_code(f: StateFilter) -> u8 {
    match f {
        StateFilter::Queued => 1,
        StateFilter::Running => 2,
        StateFilter::Finished => 3,
        StateFilter::Cancelled => 4,
    }
}

pub(crate) fn state(s: &JobState, id: JobId) -> [u8; 9] {
    id_pair(&[state_code(StateFilter::of(s))], id)
}

pub(crate) fn corrupt_key(what: &'static str, key: &[u8], reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        what,
        key: hex(key),
        reason: reason.into(),
    }
}

/// The job id at the end of an index key of `len` bytes.
pub(crate) fn trailing_id(what: &'static str, key: &[u8], len: usize) -> Result<JobId, StoreError> {
    if key.len() != len {
        return Err(corrupt_key(
            what,
            key,
            format!("key is {} bytes, expected {len}", key.len()),
        ));
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[len - 8..]);
    Ok(JobId(u64::from_be_bytes(b)))
}

pub(crate) fn u64_value(what: &'static str, key: &[u8], v: &[u8]) -> Result<u64, StoreError> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| corrupt_key(what, key, format!("value is {} bytes, expected 8", v.len())))?;
    Ok(u64::from_be_bytes(b))
}

pub(crate) fn u32_value(what: &'static str, key: &[u8], v: &[u8]) -> Result<u32, StoreError> {
    let b: [u8; 4] = v
        .try_into()
        .map_err(|_| corrupt_key(what, key, format!("value is {} bytes, expected 4", v.len())))?;
    Ok(u32::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::route::PairKey;

    #[test]
    fn pair_keys_are_ordered_and_no_host_runs_into_the_other() {
        let ab = pair(&PairKey::new(("a", 21), ("b", 21)));
        assert_ne!(ab, pair(&PairKey::new(("b", 21), ("a", 21))));
        assert_eq!(ab, pair(&PairKey::new(("A.", 21), ("[b]", 21))));
        assert_eq!(ab, [0, 1, b'a', 0, 21, 0, 1, b'b', 0, 21]);
        // The same bytes split differently between the two hosts are another pair.
        assert_ne!(
            pair(&PairKey::new(("ab", 21), ("c", 21))),
            pair(&PairKey::new(("a", 21), ("bc", 21)))
        );
    }
}
