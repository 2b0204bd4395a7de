//! Members in pages (`pages.rs`) inside transactions: appending, settling, changing, and the
//! upgrade of a schema-1 store.

use super::events::tx_member_event;
use super::pages;
use super::watches::tx_mark;
use super::write::tx_job;
use super::OrAbort;
use super::{abort, SledStore, Tx, TxResult, SCHEMA_VERSION};
use crate::error::{backend, StoreError};
use crate::keys;
use crate::plan::{self};
use crate::record::{decode, encode, JobV1, MemberV1};
use crate::types::{JobId, Member, MemberUpdate, NewMember};
use bftp_core::{MemberState, Timestamp};
use sled::IVec;

/// The raw member records of page `page` of job `id` (empty when there is no such page).
pub(super) fn tx_page(tx: &Tx<'_>, id: JobId, page: u32) -> TxResult<Vec<Vec<u8>>> {
    let k = keys::member(id, page);
    match tx.members.get(k)? {
        Some(v) => Ok(pages::decode(&k, &v)
            .or_abort()?
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect()),
        None => Ok(Vec::new()),
    }
}

/// Writes members `start..` of job `id` from `members`, filling the last page first.
pub(super) fn tx_append_members(
    tx: &Tx<'_>,
    id: JobId,
    start: u32,
    members: &[NewMember],
    now: Timestamp,
) -> TxResult<()> {
    let mut index = start;
    let mut rest = members;
    while !rest.is_empty() {
        let (key, slot) = pages::place(id, index);
        let mut page = if slot == 0 {
            Vec::new()
        } else {
            tx_page(tx, id, index / pages::PAGE)?
        };
        if page.len() != slot {
            return abort(keys::corrupt_key(
                "member page",
                &key,
                format!("holds {} members, expected {slot}", page.len()),
            ));
        }
        let take = rest.len().min(pages::PAGE as usize - slot);
        page.extend(rest[..take].iter().map(|m| encode(&MemberV1::new(m, now))));
        tx.members.insert(&key[..], pages::encode(&page))?;
        rest = &rest[take..];
        index += take as u32;
    }
    Ok(())
}

/// Every pending member of the job becomes `to`; returns the states of all members after.
/// A watch's checkpoint is not marked here: members settled in bulk (the job's end, a
/// cancel) ended for the job's sake, not their own, and the next poll takes them again
/// (RULES.md §15.5).
pub(super) fn tx_settle_pending(
    tx: &Tx<'_>,
    id: JobId,
    count: u32,
    to: MemberState,
    detail: Option<&str>,
    now: Timestamp,
) -> TxResult<Vec<MemberState>> {
    let mut all = Vec::with_capacity(count as usize);
    for page in 0..pages::pages(count) {
        let key = keys::member(id, page);
        let mut records = tx_page(tx, id, page)?;
        let want = (count - page * pages::PAGE).min(pages::PAGE) as usize;
        if records.len() != want {
            return abort(keys::corrupt_key(
                "member page",
                &key,
                format!(
                    "holds {} members, expected {want}: the job has {count} members",
                    records.len()
                ),
            ));
        }
        let mut changed = false;
        for record in &mut records {
            let mut m: MemberV1 = decode("member", &key, record).or_abort()?;
            if plan::settle(&mut m, to, detail, now) {
                *record = encode(&m);
                changed = true;
            }
            all.push(m.state.to_api());
        }
        if changed {
            tx.members.insert(&key[..], pages::encode(&records))?;
        }
    }
    Ok(all)
}

/// Member changes inside a write transaction (see `JobStore::update_members`), each page
/// read and written once however many of its members change; with `answer`, the members as
/// changed, in the order of `updates` (else none).
pub(super) fn tx_update_members(
    tx: &Tx<'_>,
    id: JobId,
    updates: &[(u32, MemberUpdate)],
    now: Timestamp,
    answer: bool,
) -> TxResult<Vec<Member>> {
    let mut by_page: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (n, (index, _)) in updates.iter().enumerate() {
        by_page.entry(index / pages::PAGE).or_default().push(n);
    }
    let mut out: Vec<Option<Member>> = vec![None; if answer { updates.len() } else { 0 }];
    // The job's watch, read once a member reaches an outcome (`None`: not read yet).
    let mut watch: Option<Option<u64>> = None;
    for (page, ns) in by_page {
        let key = keys::member(id, page);
        let mut records = tx_page(tx, id, page)?;
        for n in ns {
            let (index, update) = &updates[n];
            let (_, slot) = pages::place(id, *index);
            let Some(record) = records.get_mut(slot).filter(|r| !pages::is_hole(r)) else {
                if tx.jobs.get(keys::job(id))?.is_none() {
                    return abort(StoreError::NotFound(id));
                }
                return abort(StoreError::MemberNotFound {
                    job: id,
                    index: *index,
                });
            };
            let mut m: MemberV1 = decode("member", &key, record).or_abort()?;
            let before = m.state.to_api();
            if let Err(e) = m.apply(id, *index, update, now) {
                return abort(e);
            }
            *record = encode(&m);
            tx_member_event(tx, id, *index, before, m.state.to_api(), now)?;
            if plan::settles_checkpoint(before, &m) {
                let w = match watch {
                    Some(w) => w,
                    None => *watch.insert(tx_job(tx, id)?.watch),
                };
                tx_mark(tx, w, before, &m)?;
            }
            if answer {
                out[n] = Some(m.to_api(*index));
            }
        }
        tx.members.insert(&key[..], pages::encode(&records))?;
    }
    Ok(out.into_iter().flatten().collect())
}

/// The index of the first member of the page stored at key `k`.
pub(super) fn page_first(k: &IVec) -> Result<u32, StoreError> {
    if k.len() != 12 {
        return Err(keys::corrupt_key(
            "member page",
            k,
            format!("key is {} bytes, expected 12", k.len()),
        ));
    }
    let page = keys::u32_value("member page", k, &k[8..])?;
    page.checked_mul(pages::PAGE).ok_or_else(|| {
        keys::corrupt_key(
            "member page",
            k,
            format!("page {page} is past the last member"),
        )
    })
}

/// Members moved into pages per upgrade transaction (a larger job moves alone, whole).
pub(super) const UPGRADE_BATCH: u32 = 4096;

impl SledStore {
    /// Upgrades a schema-1 store (one entry per member) to pages: every job's members move in
    /// one transaction with the others of its batch, and the last transaction records schema
    /// 2. A crash in between leaves some jobs moved, whole, and the rest not; the next open
    /// goes on from there (a job whose first entry is a page has moved).
    pub(super) fn upgrade_members(&self) -> Result<(), StoreError> {
        let mut jobs = Vec::new();
        for kv in self.t.jobs.iter() {
            let (k, v) = kv.map_err(backend("upgrade"))?;
            let id = keys::trailing_id("job", &k, 8)?;
            let rec: JobV1 = decode("job", &k, &v)?;
            if rec.members > 0 {
                jobs.push((id, rec.members));
            }
        }
        let mut batch: Vec<(JobId, u32)> = Vec::new();
        let mut size = 0;
        let mut moved = 0u64;
        let mut flush = |batch: &mut Vec<(JobId, u32)>| -> Result<(), StoreError> {
            self.write("upgrade", |tx| {
                for &(id, count) in batch.iter() {
                    tx_upgrade_job(tx, id, count)?;
                }
                Ok(())
            })?;
            moved += batch.iter().map(|&(_, n)| u64::from(n)).sum::<u64>();
            batch.clear();
            Ok(())
        };
        for (id, count) in jobs {
            if size + count > UPGRADE_BATCH && !batch.is_empty() {
                flush(&mut batch)?;
                size = 0;
            }
            batch.push((id, count));
            size += count;
        }
        if !batch.is_empty() {
            flush(&mut batch)?;
        }
        self.write("upgrade", |tx| {
            tx.meta
                .insert(keys::META_SCHEMA, &SCHEMA_VERSION.to_be_bytes()[..])?;
            Ok(())
        })?;
        tracing::info!(dir = %self.dir.display(), members = moved, "store upgraded to schema {SCHEMA_VERSION}: members in pages");
        Ok(())
    }
}

/// Moves the `count` schema-1 member entries of job `id` into pages (nothing when one of its
/// entries is a page already: the job has moved). A member whose entry is gone (a removal
/// cut off part way: the digest checked at open says no entry was lost otherwise) becomes a
/// hole in its page, and a page of holes is not written.
pub(super) fn tx_upgrade_job(tx: &Tx<'_>, id: JobId, count: u32) -> TxResult<()> {
    let mut records = Vec::with_capacity(count as usize);
    for index in 0..count {
        match tx.members.get(keys::member(id, index))? {
            Some(v) if pages::is_page(&v) => return Ok(()),
            v => records.push(v.map(|v| v.to_vec()).unwrap_or_default()),
        }
    }
    for (page, chunk) in records.chunks(pages::PAGE as usize).enumerate() {
        let key = keys::member(id, page as u32);
        if chunk.iter().all(Vec::is_empty) {
            tx.members.remove(&key)?;
        } else {
            tx.members.insert(&key[..], pages::encode(chunk))?;
        }
    }
    for index in pages::pages(count)..count {
        tx.members.remove(&keys::member(id, index))?;
    }
    Ok(())
}
