//! The event log on PostgreSQL (`events.rs` of the crate): a row per event, written in the
//! transaction of the change that makes it; due events claimed per node for a lease, as the
//! outbox's reports are.
//!
//! Sequence numbers come from a one-row counter locked by the writing transaction until it
//! commits, so that events become visible in the order of their numbers: a reader that has
//! seen event `n` never later finds an event numbered below `n` (`bftp events --follow`).

use super::reach;
use super::sql::Sql;
use super::write::tx_settle_pending;
use super::{id_of, lease_interval, ms, Inner};
use crate::error::StoreError;
use crate::events::{self, Event, NewEvent};
use crate::record::{decode, encode, EventV1, JobV1};
use crate::types::{DeliveryTry, JobId};
use bftp_core::{MemberState, Timestamp};
use deadpool_postgres::Transaction;
use tokio_postgres::Row;

/// Migration 8: the event log.
pub(super) const MIGRATION: &str = r#"
CREATE TABLE events (
    seq bigint PRIMARY KEY,
    id text NOT NULL UNIQUE,
    job bigint,
    owner bigint NOT NULL,
    due_at bigint,
    rec bytea NOT NULL,
    claim_node text,
    claim_until timestamptz
);
CREATE INDEX events_due ON events (due_at, seq) WHERE due_at IS NOT NULL;
CREATE INDEX events_job ON events (job, seq) WHERE job IS NOT NULL;
CREATE INDEX events_owner ON events (owner, seq);
CREATE TABLE event_seq (one boolean PRIMARY KEY DEFAULT true CHECK (one), n bigint NOT NULL);
INSERT INTO event_seq (one, n) VALUES (true, 0);
"#;

fn decode_event_row(r: &Row) -> Result<Event, StoreError> {
    let seq = r.get::<_, i64>(0).max(0) as u64;
    decode::<EventV1>("event", &seq.to_be_bytes(), r.get::<_, &[u8]>(1))?.to_api(seq)
}

/// Puts `rec` in the log unless an event with its id is there: its sequence number, and
/// whether it was written now.
pub(super) async fn tx_put_event(
    tx: &Transaction<'_>,
    op: &'static str,
    rec: &EventV1,
) -> Result<(u64, bool), StoreError> {
    if let Some(r) = tx
        .maybe_row(op, "SELECT seq FROM events WHERE id = $1", &[&rec.id])
        .await?
    {
        return Ok((r.get::<_, i64>(0).max(0) as u64, false));
    }
    let seq: i64 = tx
        .row(op, "UPDATE event_seq SET n = n + 1 RETURNING n", &[])
        .await?
        .get(0);
    let n = tx
        .exec(
            op,
            "INSERT INTO events (seq, id, job, owner, due_at, rec) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (id) DO NOTHING",
            &[
                &seq,
                &rec.id,
                &rec.job.map(|j| j as i64),
                &i64::from(rec.owner),
                &rec.due.map(|d| d as i64),
                &encode(rec),
            ],
        )
        .await?;
    if n == 0 {
        // Another transaction wrote the same id meanwhile (it committed first).
        let r = tx
            .row(op, "SELECT seq FROM events WHERE id = $1", &[&rec.id])
            .await?;
        return Ok((r.get::<_, i64>(0).max(0) as u64, false));
    }
    Ok((seq.max(0) as u64, true))
}

/// The events of a job's write that made it final (`rec`, as written).
pub(super) async fn tx_final_events(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    rec: &JobV1,
    settled: Option<&[MemberState]>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let delivered = match (rec.watch, settled) {
        (None, _) => 0,
        (Some(_), Some(states)) => events::delivered(states),
        (Some(_), None) => {
            let states =
                tx_settle_pending(tx, op, id, rec.members, MemberState::Pending, None, now).await?;
            events::delivered(&states)
        }
    };
    for e in events::final_events(id, rec, delivered, now) {
        tx_put_event(tx, op, &e).await?;
    }
    Ok(())
}

/// The event of one member's change, if it makes one (`rec`: the job's record).
#[allow(clippy::too_many_arguments)]
pub(super) async fn tx_member_event(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    rec: &JobV1,
    index: u32,
    before: MemberState,
    after: MemberState,
    now: Timestamp,
) -> Result<(), StoreError> {
    if let Some(e) = events::member_event(id, rec, index, before, after, now) {
        tx_put_event(tx, op, &e).await?;
    }
    Ok(())
}

impl Inner {
    pub(super) async fn put_event(&self, e: NewEvent) -> Result<(Event, bool), StoreError> {
        const OP: &str = "put_event";
        let rec = EventV1::new(&e);
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let (seq, new) = tx_put_event(&tx, OP, &rec).await?;
        let row = tx
            .row(
                OP,
                "SELECT seq, rec FROM events WHERE seq = $1",
                &[&(seq as i64)],
            )
            .await?;
        let ev = decode_event_row(&row)?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok((ev, new))
    }

    pub(super) async fn events_after(
        &self,
        after: u64,
        owner: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let c = self.client("events_after").await?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match owner {
            Some(o) => {
                c.rows(
                    "events_after",
                    "SELECT seq, rec FROM events WHERE owner = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                    &[&i64::from(o), &after, &limit],
                )
                .await?
            }
            None => {
                c.rows(
                    "events_after",
                    "SELECT seq, rec FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                    &[&after, &limit],
                )
                .await?
            }
        };
        rows.iter().map(decode_event_row).collect()
    }

    /// Claims the due events for this node for one lease.
    pub(super) async fn events_due(
        &self,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let c = self.client("events_due").await?;
        let rows = c
            .rows(
                "events_due",
                "UPDATE events e SET claim_node = $3,
                     claim_until = now() + make_interval(secs => $4)
                 FROM (SELECT seq FROM events
                       WHERE due_at IS NOT NULL AND due_at <= $1
                         AND (claim_node IS NULL OR claim_until < now() OR claim_node = $3)
                       ORDER BY due_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) c
                 WHERE e.seq = c.seq
                 RETURNING e.seq, e.rec, e.due_at",
                &[
                    &ms(until),
                    &(limit as i64),
                    &self.node,
                    &lease_interval(self.lease),
                ],
            )
            .await?;
        let mut out = rows
            .iter()
            .map(|r| Ok((r.get::<_, Option<i64>>(2), decode_event_row(r)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        out.sort_by_key(|(due, e)| (*due, e.seq));
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }

    pub(super) async fn event_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let c = self.client("event_next_due").await?;
        let row = c
            .row(
                "event_next_due",
                "SELECT min(due_at) FROM events WHERE due_at IS NOT NULL
                   AND (claim_node IS NULL OR claim_until < now() OR claim_node = $1)",
                &[&self.node],
            )
            .await?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|t| Timestamp(t.max(0) as u64)))
    }

    pub(super) async fn record_event_delivery(
        &self,
        seq: u64,
        tries: Vec<(String, DeliveryTry)>,
        now: Timestamp,
    ) -> Result<Event, StoreError> {
        const OP: &str = "record_event_delivery";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let key = i64::try_from(seq).unwrap_or(i64::MAX);
        let Some(row) = tx
            .maybe_row(
                OP,
                "SELECT rec FROM events WHERE seq = $1 FOR UPDATE",
                &[&key],
            )
            .await?
        else {
            return Err(StoreError::EventNotFound(seq));
        };
        let mut rec: EventV1 = decode("event", &seq.to_be_bytes(), row.get::<_, &[u8]>(0))?;
        rec.apply(&tries, now);
        tx.exec(
            OP,
            "UPDATE events SET rec = $2, due_at = $3, claim_node = NULL, claim_until = NULL
             WHERE seq = $1",
            &[&key, &encode(&rec), &rec.due.map(|d| d as i64)],
        )
        .await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        rec.to_api(seq)
    }

    pub(super) async fn events_of_job(&self, job: JobId) -> Result<Vec<Event>, StoreError> {
        let c = self.client("events_of_job").await?;
        let rows = c
            .rows(
                "events_of_job",
                "SELECT seq, rec FROM events WHERE job = $1 ORDER BY seq",
                &[&id_of(job)],
            )
            .await?;
        rows.iter().map(decode_event_row).collect()
    }
}
