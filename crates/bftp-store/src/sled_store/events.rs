//! The event log on sled (`events.rs`): four trees written through [`SledStore::write`], so
//! the content digest, backup and verify cover them.
//!
//! | tree         | key                         | value                  |
//! |--------------|-----------------------------|------------------------|
//! | `events`     | seq (u64)                   | event record           |
//! | `event_ids`  | event id (UTF-8)            | seq (u64)              |
//! | `event_due`  | due (u64 ms), seq           | empty (while due)      |
//! | `event_jobs` | job id, seq                 | empty                  |
//!
//! `meta` holds `next_event_seq` (absent until the first event: 1).

use sled::IVec;

use super::members::tx_settle_pending;
use super::write::tx_job;
use super::{abort, OrAbort, SledStore, Tx, TxResult, EMPTY};
use crate::error::{backend, StoreError};
use crate::events::{self, Event, NewEvent};
use crate::keys;
use crate::record::{decode, encode, EventV1, JobV1};
use crate::types::{DeliveryTry, JobId};
use bftp_core::{MemberState, Timestamp};

const META_NEXT_EVENT_SEQ: &[u8] = b"next_event_seq";

fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

fn pair_key(a: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&a.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn seq_of_pair(what: &'static str, k: &[u8]) -> Result<u64, StoreError> {
    Ok(keys::trailing_id(what, k, 16)?.0)
}

/// Puts `rec` in the log unless an event with its id is there: its sequence number, and
/// whether it was written now.
pub(super) fn tx_put_event(tx: &Tx<'_>, rec: &EventV1) -> TxResult<(u64, bool)> {
    if let Some(v) = tx.event_ids.get(rec.id.as_bytes())? {
        let seq = keys::u64_value("event id", rec.id.as_bytes(), &v).or_abort()?;
        return Ok((seq, false));
    }
    let seq = match tx.meta.get(META_NEXT_EVENT_SEQ)? {
        Some(v) => keys::u64_value("meta", META_NEXT_EVENT_SEQ, &v).or_abort()?,
        None => 1,
    };
    tx.meta
        .insert(META_NEXT_EVENT_SEQ, &(seq + 1).to_be_bytes()[..])?;
    tx.event_ids.insert(rec.id.as_bytes(), &seq_key(seq)[..])?;
    tx_event_write(tx, seq, rec, None)?;
    if let Some(job) = rec.job {
        tx.event_jobs.insert(&pair_key(job, seq)[..], EMPTY)?;
    }
    Ok((seq, true))
}

/// Writes event `seq`'s record and moves its due-index entry from `old_due`.
fn tx_event_write(tx: &Tx<'_>, seq: u64, rec: &EventV1, old_due: Option<u64>) -> TxResult<()> {
    if let Some(at) = old_due {
        tx.event_due.remove(&pair_key(at, seq))?;
    }
    if let Some(at) = rec.due {
        tx.event_due.insert(&pair_key(at, seq)[..], EMPTY)?;
    }
    tx.events.insert(&seq_key(seq)[..], encode(rec))?;
    Ok(())
}

/// The events of a job's write that made it final (`rec`, as written): a watch's job counts
/// its members that succeeded (`settled`: every member's state when the write read them).
pub(super) fn tx_final_events(
    tx: &Tx<'_>,
    id: JobId,
    rec: &JobV1,
    settled: Option<&[MemberState]>,
    now: Timestamp,
) -> TxResult<()> {
    let delivered = match (rec.watch, settled) {
        (None, _) => 0,
        (Some(_), Some(states)) => events::delivered(states),
        (Some(_), None) => {
            let states = tx_settle_pending(tx, id, rec.members, MemberState::Pending, None, now)?;
            events::delivered(&states)
        }
    };
    for e in events::final_events(id, rec, delivered, now) {
        tx_put_event(tx, &e)?;
    }
    Ok(())
}

/// The event of one member's change from `before` to `after`, if it makes one.
pub(super) fn tx_member_event(
    tx: &Tx<'_>,
    id: JobId,
    index: u32,
    before: MemberState,
    after: MemberState,
    now: Timestamp,
) -> TxResult<()> {
    if !events::member_may_event(before, after) {
        return Ok(());
    }
    let rec = tx_job(tx, id)?;
    if let Some(e) = events::member_event(id, &rec, index, before, after, now) {
        tx_put_event(tx, &e)?;
    }
    Ok(())
}

/// The keys of a job's entries in `event_jobs`, read outside a removal's transaction.
pub(super) fn job_event_keys(store: &SledStore, id: JobId) -> Result<Vec<IVec>, StoreError> {
    store
        .t
        .event_jobs
        .scan_prefix(keys::job(id))
        .keys()
        .map(|k| k.map_err(backend("remove_jobs")))
        .collect()
}

/// Removes the events named by `event_jobs` keys `ks` (a removed job's), with their index
/// entries.
pub(super) fn tx_remove_events(tx: &Tx<'_>, ks: &[IVec]) -> TxResult<()> {
    for k in ks {
        let seq = seq_of_pair("event job index", k).or_abort()?;
        if let Some(v) = tx.events.get(seq_key(seq))? {
            let rec: EventV1 = decode("event", &seq_key(seq), &v).or_abort()?;
            if let Some(at) = rec.due {
                tx.event_due.remove(&pair_key(at, seq))?;
            }
            tx.event_ids.remove(rec.id.as_bytes())?;
            tx.events.remove(&seq_key(seq))?;
        }
        tx.event_jobs.remove(k)?;
    }
    Ok(())
}

impl SledStore {
    fn read_event(&self, op: &'static str, seq: u64) -> Result<Option<Event>, StoreError> {
        match self.t.events.get(seq_key(seq)).map_err(backend(op))? {
            Some(v) => Ok(Some(
                decode::<EventV1>("event", &seq_key(seq), &v)?.to_api(seq)?,
            )),
            None => Ok(None),
        }
    }

    fn indexed_event(
        &self,
        op: &'static str,
        what: &'static str,
        k: &[u8],
    ) -> Result<Event, StoreError> {
        let seq = seq_of_pair(what, k)?;
        self.read_event(op, seq)?
            .ok_or_else(|| keys::corrupt_key(what, k, "names an event the log does not have"))
    }

    pub(super) fn put_event_now(&self, e: NewEvent) -> Result<(Event, bool), StoreError> {
        let rec = EventV1::new(&e);
        let (seq, new) = self.write("put_event", |tx| tx_put_event(tx, &rec))?;
        let ev = self
            .guarded("put_event", || self.read_event("put_event", seq))?
            .ok_or_else(|| keys::corrupt_key("event id", e.id.as_bytes(), "names no event"))?;
        Ok((ev, new))
    }

    pub(super) fn read_events_after(
        &self,
        after: u64,
        owner: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.guarded("events_after", || {
            let mut out = Vec::new();
            let Some(from) = after.checked_add(1) else {
                return Ok(out);
            };
            for kv in self.t.events.range(seq_key(from)..) {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = kv.map_err(backend("events_after"))?;
                let seq = keys::trailing_id("event", &k, 8)?.0;
                let rec: EventV1 = decode("event", &k, &v)?;
                if owner.is_none_or(|o| o == rec.owner) {
                    out.push(rec.to_api(seq)?);
                }
            }
            Ok(out)
        })
    }

    pub(super) fn read_events_due(
        &self,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.guarded("events_due", || {
            self.t
                .event_due
                .range(..=pair_key(until.0, u64::MAX))
                .keys()
                .take(limit)
                .map(|k| {
                    self.indexed_event(
                        "events_due",
                        "event due index",
                        &k.map_err(backend("events_due"))?,
                    )
                })
                .collect()
        })
    }

    pub(super) fn read_event_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.guarded("event_next_due", || {
            match self
                .t
                .event_due
                .first()
                .map_err(backend("event_next_due"))?
            {
                Some((k, _)) => {
                    seq_of_pair("event due index", &k)?;
                    let at = keys::u64_value("event due index", &k, &k[..8])?;
                    Ok(Some(Timestamp(at)))
                }
                None => Ok(None),
            }
        })
    }

    pub(super) fn write_event_delivery(
        &self,
        seq: u64,
        tries: Vec<(String, DeliveryTry)>,
        now: Timestamp,
    ) -> Result<Event, StoreError> {
        self.write("record_event_delivery", |tx| {
            let k = seq_key(seq);
            let Some(v) = tx.events.get(k)? else {
                return abort(StoreError::EventNotFound(seq));
            };
            let mut rec: EventV1 = decode("event", &k, &v).or_abort()?;
            let old_due = rec.due;
            if rec.apply(&tries, now) {
                tx_event_write(tx, seq, &rec, old_due)?;
            }
            rec.to_api(seq).or_abort()
        })
    }

    pub(super) fn read_events_of_job(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        self.guarded("events_of_job", || {
            self.t
                .event_jobs
                .scan_prefix(keys::job(id))
                .keys()
                .map(|k| {
                    self.indexed_event(
                        "events_of_job",
                        "event job index",
                        &k.map_err(backend("events_of_job"))?,
                    )
                })
                .collect()
        })
    }

    /// Every event record and index entry decodes (`SledStore::verify`): the bytes read.
    pub(super) fn verify_events(&self) -> Result<u64, StoreError> {
        let mut bytes = 0u64;
        for kv in self.t.events.iter() {
            let (k, v) = kv.map_err(backend("verify"))?;
            let seq = keys::trailing_id("event", &k, 8)?.0;
            decode::<EventV1>("event", &k, &v)?.to_api(seq)?;
            bytes += (k.len() + v.len()) as u64;
        }
        for kv in self.t.event_ids.iter() {
            let (k, v) = kv.map_err(backend("verify"))?;
            keys::u64_value("event id", &k, &v)?;
            bytes += (k.len() + v.len()) as u64;
        }
        for (what, tree) in [
            ("event due index", &self.t.event_due),
            ("event job index", &self.t.event_jobs),
        ] {
            for k in tree.iter().keys() {
                let k = k.map_err(backend("verify"))?;
                seq_of_pair(what, &k)?;
                bytes += k.len() as u64;
            }
        }
        Ok(bytes)
    }
}
