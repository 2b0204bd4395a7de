//! Member pages: the sled store keeps a job's members [`PAGE`] to a sled entry (store schema
//! 2), not one entry each (schema 1).
//!
//! Why: every sled entry written costs sled about as much CPU as the copy of a small file
//! (its page-cache link, its log write, the transaction's buffers), and a queued job wrote
//! each of its members twice (frozen, then recorded). A page is written once per
//! transaction however many of its members change in it, so a 2,000-file job's freeze and
//! its grouped records write a few dozen entries instead of 4,000.
//!
//! A page is `MAGIC`, then each member as a 4-byte big-endian length and its record (the
//! same JSON member record as before, with its own version `v`). The page of member `i` is
//! at key `(job, i / PAGE)`, in slot `i % PAGE`; every page but a job's last holds exactly
//! [`PAGE`] members, and a job's pages hold exactly its `members` count. A member record
//! always starts with `{`, so a page is never taken for one, nor one for a page (the
//! upgrade from schema 1 relies on that to tell a job already upgraded). An empty record is
//! a hole: a member whose schema-1 entry a removal had taken when the upgrade came (the
//! removal of a job with many members goes in several transactions); it is not listed, and a
//! change to it is refused as to a member that does not exist. Holes count as slots; a page
//! that would hold nothing but holes is not written, so such a job (final, being removed)
//! lacks that page.

use crate::error::StoreError;
use crate::keys;
use crate::types::JobId;

/// Members per page. A page of 32 finished members is about 10 KiB.
pub(crate) const PAGE: u32 = 32;

/// First byte of every page.
const MAGIC: u8 = 0xB2;

/// The page key and slot of member `index`.
pub(crate) fn place(id: JobId, index: u32) -> ([u8; 12], usize) {
    (keys::member(id, index / PAGE), (index % PAGE) as usize)
}

/// Number of pages that hold `count` members.
pub(crate) fn pages(count: u32) -> u32 {
    count.div_ceil(PAGE)
}

/// Whether a stored value is a page (and not a schema-1 member record).
pub(crate) fn is_page(v: &[u8]) -> bool {
    v.first() == Some(&MAGIC)
}

/// Whether a page's record is a hole (see the module's text).
pub(crate) fn is_hole(record: &[u8]) -> bool {
    record.is_empty()
}

/// A page's records, in slot order.
pub(crate) fn encode<R: AsRef<[u8]>>(records: &[R]) -> Vec<u8> {
    let len = records.iter().map(|r| 4 + r.as_ref().len()).sum::<usize>();
    let mut out = Vec::with_capacity(1 + len);
    out.push(MAGIC);
    for r in records {
        let r = r.as_ref();
        // A member record is far below 4 GiB (its fields are bounded by the API's limits).
        out.extend_from_slice(&(r.len() as u32).to_be_bytes());
        out.extend_from_slice(r);
    }
    out
}

/// The records of the page stored at `key`, in slot order (at most [`PAGE`]).
pub(crate) fn decode<'a>(key: &[u8], v: &'a [u8]) -> Result<Vec<&'a [u8]>, StoreError> {
    let corrupt = |reason: &str| keys::corrupt_key("member page", key, reason.to_string());
    if !is_page(v) {
        return Err(corrupt("not a member page"));
    }
    let mut rest = &v[1..];
    let mut out = Vec::with_capacity(PAGE as usize);
    while !rest.is_empty() {
        if out.len() == PAGE as usize {
            return Err(corrupt("more members than a page holds"));
        }
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(corrupt("truncated length"));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            return Err(corrupt("truncated member record"));
        }
        let (record, tail) = tail.split_at(len);
        out.push(record);
        rest = tail;
    }
    if out.is_empty() {
        return Err(corrupt("an empty page"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_its_records_in_order() {
        let records: Vec<Vec<u8>> = vec![
            b"{\"a\":1}".to_vec(),
            Vec::new(),
            b"{}".to_vec(),
            vec![b'{'; 300],
        ];
        let page = encode(&records);
        assert!(is_page(&page));
        let back = decode(b"k", &page).unwrap();
        assert_eq!(back, records);
        // The empty record is a hole, and only it.
        let holes: Vec<bool> = back.iter().map(|r| is_hole(r)).collect();
        assert_eq!(holes, [false, true, false, false]);
        // A schema-1 member record is never a page.
        assert!(!is_page(b"{\"v\":1}"));
    }

    #[test]
    fn members_map_onto_pages_and_slots() {
        let id = JobId(7);
        assert_eq!(place(id, 0), (keys::member(id, 0), 0));
        assert_eq!(
            place(id, PAGE - 1),
            (keys::member(id, 0), PAGE as usize - 1)
        );
        assert_eq!(place(id, PAGE), (keys::member(id, 1), 0));
        assert_eq!(place(id, 5 * PAGE + 3), (keys::member(id, 5), 3));
        let table = [(0, 0), (1, 1), (PAGE, 1), (PAGE + 1, 2), (2 * PAGE, 2)];
        for (count, want) in table {
            assert_eq!(pages(count), want, "{count} members");
        }
    }

    #[test]
    fn a_damaged_page_is_corrupt_not_a_panic() {
        let good = encode(&[b"{}".as_slice(), b"{\"x\":2}".as_slice()]);
        let too_many = encode(&vec![b"{}".as_slice(); PAGE as usize + 1]);
        let cases: [(&str, &[u8]); 5] = [
            ("a member record", b"{\"v\":1}"),
            ("an empty page", &[MAGIC]),
            ("a truncated length", &good[..3]),
            ("a truncated record", &good[..good.len() - 1]),
            ("one member too many", &too_many),
        ];
        for (what, v) in cases {
            let e = decode(b"k", v).unwrap_err();
            assert!(matches!(e, StoreError::Corrupt { .. }), "{what}: {e:?}");
        }
    }
}
