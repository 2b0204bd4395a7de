//! The pieces of a PostgreSQL write transaction, among them the writing of a [`Plan`]
//! (`plan.rs`).

use super::sql::Sql;
use super::watches::tx_mark;
use super::{due_at, id_of, job_id, outbox_code, pg, state_code};
use crate::error::StoreError;
use crate::keys;
use crate::plan::{self, Plan};
use crate::record::{decode, encode, job_to_api, JobV1, MemberV1, OutboxV1};
use crate::types::{Job, JobId, Member, NewMember, OutboxEntry};
use bftp_core::{MemberState, Timestamp};
use deadpool_postgres::Transaction;
use tokio_postgres::Row;

/// Locks the job's row for this transaction; `NotFound` when there is no such job.
pub(super) async fn tx_lock_job(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
) -> Result<(), StoreError> {
    let sql = "SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE";
    match tx.maybe_row(op, sql, &[&id_of(id)]).await? {
        Some(_) => Ok(()),
        None => Err(StoreError::NotFound(id)),
    }
}

pub(super) async fn tx_job(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
) -> Result<JobV1, StoreError> {
    let row = tx
        .maybe_row(
            op,
            "SELECT rec FROM jobs WHERE id = $1 FOR UPDATE",
            &[&id_of(id)],
        )
        .await?;
    match row {
        Some(r) => decode("job", &keys::job(id), r.get::<_, &[u8]>(0)),
        None => Err(StoreError::NotFound(id)),
    }
}

/// Writes the job row; the write of a job that leaves `running` (or `queued` with a claim)
/// also ends its lease and moves its epoch on. Must be the transaction's last write of the
/// job: a later one would carry the old epoch.
pub(super) async fn tx_put_job(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    rec: &JobV1,
    release: bool,
) -> Result<(), StoreError> {
    let state = rec.state.to_api();
    let sql = if release {
        "UPDATE jobs SET rec = $2, state = $3, due_at = $4,
             epoch = epoch + 1, lease_node = NULL, lease_until = NULL WHERE id = $1"
    } else {
        "UPDATE jobs SET rec = $2, state = $3, due_at = $4 WHERE id = $1"
    };
    tx.execute(
        sql,
        &[
            &id_of(id),
            &encode(rec),
            &state_code(&state),
            &due_at(&state),
        ],
    )
    .await
    .map_err(pg(op))?;
    Ok(())
}

/// Writes `plan` for job `id` (`plan.rs`), all but the job's row: the pending members
/// settled, the new members (`members`) inserted, the report put in the outbox, the history
/// entries. The caller writes the row last ([`tx_put_job`]), after its own lease changes.
pub(super) async fn tx_write(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    plan: &Plan,
    members: &[NewMember],
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut settled = None;
    if let Some(to) = plan.settle {
        settled = Some(tx_settle_pending(tx, op, id, plan.rec.members, to, None, now).await?);
    }
    if let Some(start) = plan.append_at {
        tx_insert_members(tx, op, id, start, members, now).await?;
        if plan.rec.watch.is_some() {
            // A member born final (a refused name) settles its entry too.
            for m in members.iter().filter(|m| m.refused.is_some()) {
                let m = MemberV1::new(m, now);
                tx_mark(tx, op, plan.rec.watch, MemberState::Pending, &m).await?;
            }
        }
    }
    if let Some(report) = &plan.report {
        tx_outbox_new(tx, op, id, report).await?;
        super::events::tx_final_events(tx, op, id, &plan.rec, settled.as_deref(), now).await?;
    }
    for (seq, h) in &plan.history {
        tx.exec(
            op,
            "INSERT INTO history (job, seq, rec) VALUES ($1, $2, $3)",
            &[&id_of(id), &(*seq as i32), &encode(h)],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn tx_member(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    index: u32,
) -> Result<Option<MemberV1>, StoreError> {
    let row = tx
        .maybe_row(
            op,
            "SELECT rec FROM members WHERE job = $1 AND idx = $2",
            &[&id_of(id), &(index as i32)],
        )
        .await?;
    match row {
        Some(r) => decode("member", &keys::member(id, index), r.get::<_, &[u8]>(0)).map(Some),
        None => Ok(None),
    }
}

pub(super) async fn tx_put_member(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    index: u32,
    m: &MemberV1,
) -> Result<(), StoreError> {
    tx.exec(
        op,
        "UPDATE members SET rec = $3 WHERE job = $1 AND idx = $2",
        &[&id_of(id), &(index as i32), &encode(m)],
    )
    .await?;
    Ok(())
}

pub(super) async fn tx_insert_members(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    start: u32,
    members: &[NewMember],
    now: Timestamp,
) -> Result<(), StoreError> {
    for chunk in (0..members.len()).collect::<Vec<_>>().chunks(10_000) {
        let idx: Vec<i32> = chunk.iter().map(|i| (start as usize + *i) as i32).collect();
        let recs: Vec<Vec<u8>> = chunk
            .iter()
            .map(|i| encode(&MemberV1::new(&members[*i], now)))
            .collect();
        tx.exec(op, "INSERT INTO members (job, idx, rec) SELECT $1, i, r FROM unnest($2::int4[], $3::bytea[]) AS u(i, r)", &[&id_of(id), &idx, &recs])
.await?;
    }
    Ok(())
}

/// Every pending member of the job becomes `to`; returns the states of all members after.
/// A watch's checkpoint is not marked here: members settled in bulk (the job's end, a
/// cancel) ended for the job's sake, not their own, and the next poll takes them again
/// (RULES.md §15.5).
#[allow(clippy::too_many_arguments)]
pub(super) async fn tx_settle_pending(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    count: u32,
    to: MemberState,
    detail: Option<&str>,
    now: Timestamp,
) -> Result<Vec<MemberState>, StoreError> {
    let rows = tx
        .rows(
            op,
            "SELECT idx, rec FROM members WHERE job = $1 ORDER BY idx",
            &[&id_of(id)],
        )
        .await?;
    if rows.len() != count as usize {
        return Err(keys::corrupt_key(
            "member",
            &keys::job(id),
            format!("{} members found: the job has {count}", rows.len()),
        ));
    }
    let mut all = Vec::with_capacity(rows.len());
    for r in rows {
        let index = r.get::<_, i32>(0) as u32;
        let mut m: MemberV1 = decode("member", &keys::member(id, index), r.get::<_, &[u8]>(1))?;
        if plan::settle(&mut m, to, detail, now) {
            tx_put_member(tx, op, id, index, &m).await?;
        }
        all.push(m.state.to_api());
    }
    Ok(all)
}

pub(super) async fn tx_outbox_new(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    rec: &OutboxV1,
) -> Result<(), StoreError> {
    tx.exec(
        op,
        "INSERT INTO outbox (job, state, next_at, rec) VALUES ($1, $2, $3, $4)
         ON CONFLICT (job) DO UPDATE SET state = $2, next_at = $3, rec = $4,
             claim_node = NULL, claim_until = NULL",
        &[
            &id_of(id),
            &outbox_code(rec.state),
            &rec.next.map(|n| n as i64),
            &encode(rec),
        ],
    )
    .await?;
    Ok(())
}

pub(super) fn decode_job_row(row: &Row) -> Result<Job, StoreError> {
    let id = job_id(row, 0);
    job_to_api(id, &decode("job", &keys::job(id), row.get::<_, &[u8]>(1))?)
}

/// A member from a row of `idx, rec`.
pub(super) fn decode_member_row(id: JobId, r: &Row) -> Result<Member, StoreError> {
    let index = r.get::<_, i32>(0) as u32;
    let m: MemberV1 = decode("member", &keys::member(id, index), r.get::<_, &[u8]>(1))?;
    Ok(m.to_api(index))
}

pub(super) fn decode_outbox_row(row: &Row) -> Result<OutboxEntry, StoreError> {
    let id = job_id(row, 0);
    decode::<OutboxV1>("outbox", &keys::job(id), row.get::<_, &[u8]>(1))?.to_api(id)
}
