//! A sled write: one transaction over all trees, durable before it returns, and the pieces
//! transactions are made of, among them the writing of a [`Plan`] (`plan.rs`).

use super::events::tx_final_events;
use super::members::{tx_append_members, tx_settle_pending};
use super::watches::tx_mark;
use super::OrAbort;
use super::{abort, SledStore, Tx, TxResult, TxTree, EMPTY};
use crate::digest::Digest;
use crate::error::{backend, StoreError};
use crate::keys;
use crate::plan::Plan;
use crate::record::{decode, encode, JobV1, MemberV1, OutboxStateV1, OutboxV1};
use crate::types::{JobId, NewMember};
use bftp_core::{JobState, MemberState, Timestamp};
use sled::transaction::{TransactionError, Transactional, TransactionalTree};
use std::cell::Cell;

impl SledStore {
    /// One transaction over all trees, with the commit counter bumped, then waits until it is
    /// durable. A refusal (`f` aborts) wrote nothing and returns at once.
    pub(super) fn write<R>(
        &self,
        op: &'static str,
        f: impl Fn(&Tx<'_>) -> TxResult<R>,
    ) -> Result<R, StoreError> {
        self.guarded(op, || {
            self.commit.check(op)?;
            self.check_space(
                op,
                matches!(
                    op,
                    "submit" | "freeze_members" | "record_poll" | "create_watch"
                ),
            )?;
            let backup = self.backup_lock.read().unwrap_or_else(|p| p.into_inner());
            // sled implements `Transactional` for tuples of at most 9 trees; a slice has no limit.
            let trees = self.t.all();
            let r = trees[..].transaction(|v: &Vec<TransactionalTree>| {
                let meta = &v[0];
                let seq = match meta.get(keys::META_SEQ)? {
                    Some(v) => keys::u64_value("meta", keys::META_SEQ, &v).or_abort()?,
                    None => return abort(keys::corrupt_key("meta", keys::META_SEQ, "missing")),
                };
                meta.insert(keys::META_SEQ, &(seq + 1).to_be_bytes()[..])?;
                let before = match meta.get(keys::META_DIGEST)? {
                    Some(v) => Digest::decode(&v).or_abort()?,
                    None => return abort(keys::corrupt_key("meta", keys::META_DIGEST, "missing")),
                };
                let digest = Cell::new(before);
                let tree = |id: usize| TxTree {
                    tree: &v[id],
                    id: id as u8,
                    digest: &digest,
                };
                let tx = Tx {
                    meta,
                    jobs: tree(1),
                    members: tree(2),
                    history: tree(3),
                    requests: tree(4),
                    owners: tree(5),
                    keywords: tree(6),
                    states: tree(7),
                    due: tree(8),
                    outbox: tree(9),
                    outbox_due: tree(10),
                    transcripts: tree(11),
                    refusals: tree(12),
                    pairs: tree(13),
                    watches: tree(14),
                    watch_files: tree(15),
                    events: tree(16),
                    event_ids: tree(17),
                    event_due: tree(18),
                    event_jobs: tree(19),
                    host_limits: tree(20),
                };
                let value = f(&tx)?;
                if digest.get() != before {
                    meta.insert(keys::META_DIGEST, &digest.get().0[..])?;
                }
                Ok(value)
            });
            drop(backup);
            let value = match r {
                Ok(v) => v,
                Err(TransactionError::Abort(e)) => return Err(e),
                Err(TransactionError::Storage(e)) => return Err(backend(op)(e)),
            };
            self.commit.wait_durable(op)?;
            Ok(value)
        })
    }
}

// ---- pieces of transactions ----

pub(super) fn tx_job(tx: &Tx<'_>, id: JobId) -> TxResult<JobV1> {
    let k = keys::job(id);
    match tx.jobs.get(k)? {
        Some(v) => decode("job", &k, &v).or_abort(),
        None => abort(StoreError::NotFound(id)),
    }
}

pub(super) fn tx_put_job(tx: &Tx<'_>, id: JobId, rec: &JobV1) -> TxResult<()> {
    tx.jobs.insert(&keys::job(id)[..], encode(rec))?;
    Ok(())
}

/// Moves the indexes of job `id` from state `old` (None: new job) to `new`.
pub(super) fn tx_reindex(
    tx: &Tx<'_>,
    id: JobId,
    old: Option<&JobState>,
    new: &JobState,
) -> TxResult<()> {
    if let Some(old) = old {
        tx.states.remove(&keys::state(old, id))?;
        if let JobState::Queued { next_attempt_at } = old {
            tx.due.remove(&keys::due(*next_attempt_at, id))?;
        }
    }
    tx.states.insert(&keys::state(new, id)[..], EMPTY)?;
    if let JobState::Queued { next_attempt_at } = new {
        tx.due.insert(&keys::due(*next_attempt_at, id)[..], EMPTY)?;
    }
    Ok(())
}

/// Writes a report's outbox record and moves its due-index entry from `old_next` (the
/// record's previous next try) to its new one.
pub(super) fn tx_outbox_put(
    tx: &Tx<'_>,
    id: JobId,
    rec: &OutboxV1,
    old_next: Option<u64>,
) -> TxResult<()> {
    if let Some(at) = old_next {
        tx.outbox_due.remove(&keys::due(Timestamp(at), id)[..])?;
    }
    if let (OutboxStateV1::Pending, Some(at)) = (rec.state, rec.next) {
        tx.outbox_due
            .insert(&keys::due(Timestamp(at), id)[..], EMPTY)?;
    }
    tx.outbox.insert(&keys::job(id)[..], encode(rec))?;
    Ok(())
}

/// Writes `plan` for job `id` (`plan.rs`): the pending members settled, the new members
/// (`members`) appended, the indexes moved, the report put in the outbox with the events of
/// the job's end, the history entries, and the job's record.
pub(super) fn tx_write(
    tx: &Tx<'_>,
    id: JobId,
    plan: &Plan,
    members: &[NewMember],
    now: Timestamp,
) -> TxResult<()> {
    let mut settled = None;
    if let Some(to) = plan.settle {
        settled = Some(tx_settle_pending(tx, id, plan.rec.members, to, None, now)?);
    }
    if let Some(start) = plan.append_at {
        tx_append_members(tx, id, start, members, now)?;
        if plan.rec.watch.is_some() {
            // A member born final (a refused name) settles its entry too.
            for m in members.iter().filter(|m| m.refused.is_some()) {
                let m = MemberV1::new(m, now);
                tx_mark(tx, plan.rec.watch, MemberState::Pending, &m)?;
            }
        }
    }
    if let Some((old, new)) = &plan.moved {
        tx_reindex(tx, id, Some(old), new)?;
    }
    if let Some(report) = &plan.report {
        tx_outbox_put(tx, id, report, None)?;
        tx_final_events(tx, id, &plan.rec, settled.as_deref(), now)?;
    }
    for (seq, h) in &plan.history {
        tx.history.insert(&keys::history(id, *seq)[..], encode(h))?;
    }
    tx_put_job(tx, id, &plan.rec)
}
