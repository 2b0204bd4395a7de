//! Jobs: submit, reads, the writes that move a job (each asks `plan.rs`), claims of due jobs
//! and the takeover of jobs whose lease ran out.

use super::reach;
use super::sql::Sql;
use super::write::{decode_job_row, tx_job, tx_put_job, tx_settle_pending, tx_write};
use super::{due_at, id_of, job_id, lease_interval, ms, state_code, Held, Inner};
use crate::error::StoreError;
use crate::keys;
use crate::plan::{self};
use crate::record::{decode, encode, job_to_api, HistoryV1, JobV1};
use crate::types::{HistoryEvent, Job, JobFilter, JobId, NewJob, StateCounts, Submitted};
use bftp_core::{JobEvent, JobState, MemberState, Timestamp};
use deadpool_postgres::Transaction;
use std::time::Instant;

impl Inner {
    pub(super) async fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        const OP: &str = "submit";
        let count = plan::member_count(job.members.len())?;
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let submitted = tx_submit(&tx, OP, &job, count).await?;
        if let Submitted::Created(_) = submitted {
            tx.commit().await.map_err(reach::commit_failed(OP))?;
        }
        Ok(submitted)
    }

    pub(super) async fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let c = self.client("get").await?;
        let row = c
            .maybe_row(
                "get",
                "SELECT id, rec FROM jobs WHERE id = $1",
                &[&id_of(id)],
            )
            .await?;
        row.as_ref().map(decode_job_row).transpose()
    }

    pub(super) async fn list_after(
        &self,
        filter: JobFilter,
        after: Option<JobId>,
    ) -> Result<Vec<Job>, StoreError> {
        let limit = filter.limit.map_or(i64::MAX, |l| l as i64);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let c = self.client("list").await?;
        let state = filter.state.map(|s| i16::from(keys::state_code(s)));
        let rows = c
            .rows(
                "list",
                "SELECT id, rec FROM jobs
                 WHERE id > $1
                   AND ($2::bigint IS NULL OR owner = $2)
                   AND ($3::bytea IS NULL OR keyword = $3)
                   AND ($4::smallint IS NULL OR state = $4)
                 ORDER BY id LIMIT $5",
                &[
                    &after.map_or(0, id_of),
                    &filter.owner.map(i64::from),
                    &filter.keyword_hash.map(|h| h.0.to_vec()),
                    &state,
                    &limit,
                ],
            )
            .await?;
        rows.iter().map(decode_job_row).collect()
    }

    pub(super) async fn require_job(
        &self,
        c: &deadpool_postgres::Object,
        op: &'static str,
        id: JobId,
    ) -> Result<(), StoreError> {
        let row = c
            .maybe_row(op, "SELECT 1 FROM jobs WHERE id = $1", &[&id_of(id)])
            .await?;
        if row.is_none() {
            return Err(StoreError::NotFound(id));
        }
        Ok(())
    }

    pub(super) async fn history(&self, id: JobId) -> Result<Vec<HistoryEvent>, StoreError> {
        let c = self.client("history").await?;
        self.require_job(&c, "history", id).await?;
        let rows = c
            .rows(
                "history",
                "SELECT seq, rec FROM history WHERE job = $1 ORDER BY seq",
                &[&id_of(id)],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let seq = r.get::<_, i32>(0) as u32;
                Ok(
                    decode::<HistoryV1>("history", &keys::history(id, seq), r.get::<_, &[u8]>(1))?
                        .to_api(),
                )
            })
            .collect()
    }

    pub(super) async fn apply(
        &self,
        id: JobId,
        event: JobEvent,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        const OP: &str = "apply";
        // A start renews the lease from the transaction's `now()`, later than this.
        let sent = Instant::now();
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let rec = tx_job(&tx, OP, id).await?;
        let plan = plan::event(id, rec, event, now, detail.as_deref())?;
        if matches!(event, JobEvent::Requeue { .. }) && self.epoch_of(id).is_none() {
            // Requeued by a node that does not hold it (a restart recovering its previous
            // life's jobs): only while no other node's lease is running.
            let free: bool = tx
                .row(
                    OP,
                    "SELECT lease_node IS NULL OR lease_node = $2 OR lease_until < now()
                     FROM jobs WHERE id = $1",
                    &[&id_of(id), &self.node],
                )
                .await?
                .get(0);
            if !free {
                return Err(StoreError::LeaseLost {
                    op: OP,
                    detail: format!("job {id} is under another node's lease"),
                });
            }
        }
        if let JobEvent::Start { .. } = event {
            if self.epoch_of(id).is_none() {
                // Started without a claim (a single node that never called `due`): claim now.
                let epoch: i64 = tx
                    .row(
                        OP,
                        "UPDATE jobs SET epoch = epoch + 1, lease_node = $2,
                             lease_until = now() + make_interval(secs => $3)
                         WHERE id = $1 RETURNING epoch",
                        &[&id_of(id), &self.node, &lease_interval(self.lease)],
                    )
                    .await?
                    .get(0);
                tx.exec(
                    OP,
                    "SELECT set_config('bftp.epoch', $1, true)",
                    &[&epoch.to_string()],
                )
                .await?;
                self.held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id, Held::new(epoch, sent, self.lease));
            } else {
                tx.exec(
                    OP,
                    "UPDATE jobs SET lease_until = now() + make_interval(secs => $2) WHERE id = $1",
                    &[&id_of(id), &lease_interval(self.lease)],
                )
                .await?;
            }
        }
        tx_write(&tx, OP, id, &plan, &[], now).await?;
        if event == JobEvent::Cancel {
            // Cancelled while another node runs it: the report is that node's to mail, once
            // its attempt has stopped and written its clean-up and transcript (its postman
            // postpones it until then); if that node is gone, the claim runs out after a
            // lease and any node mails it.
            tx.exec(
                OP,
                "UPDATE outbox o SET claim_node = j.lease_node,
                     claim_until = now() + make_interval(secs => $3)
                 FROM jobs j
                 WHERE o.job = $1 AND j.id = $1 AND j.state = 2
                   AND j.lease_node <> $2 AND j.lease_until > now()",
                &[&id_of(id), &self.node, &lease_interval(self.lease)],
            )
            .await?;
        }
        let release = !matches!(plan.state(), JobState::Running { .. });
        tx_put_job(&tx, OP, id, &plan.rec, release).await?;
        if release {
            self.commit_release(tx, OP, id).await?;
        } else {
            tx.commit().await.map_err(reach::commit_failed(OP))?;
            if matches!(event, JobEvent::Start { .. }) {
                self.renewed(
                    self.epoch_of(id).map(|e| (id, e)).into_iter(),
                    bftp_core::lease::deadline(sent, self.lease),
                );
            }
        }
        job_to_api(id, &plan.rec)
    }

    pub(super) async fn settle_and_finish(
        &self,
        id: JobId,
        pending_become: MemberState,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        const OP: &str = "settle_and_finish";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let rec = tx_job(&tx, OP, id).await?;
        let detail = detail.as_deref();
        let states =
            tx_settle_pending(&tx, OP, id, rec.members, pending_become, detail, now).await?;
        let plan = plan::finish(id, rec, &states, now, detail)?;
        tx_write(&tx, OP, id, &plan, &[], now).await?;
        tx_put_job(&tx, OP, id, &plan.rec, true).await?;
        self.commit_release(tx, OP, id).await?;
        job_to_api(id, &plan.rec)
    }

    pub(super) async fn append_history(
        &self,
        id: JobId,
        event: HistoryEvent,
    ) -> Result<(), StoreError> {
        const OP: &str = "append_history";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let plan = plan::history(tx_job(&tx, OP, id).await?, &event);
        tx_write(&tx, OP, id, &plan, &[], event.at).await?;
        tx_put_job(&tx, OP, id, &plan.rec, false).await?;
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    /// Running jobs whose lease ran out go back to the queue, due at `now`: their node died,
    /// hung or lost the database. The history says whose lease it was.
    pub(super) async fn take_over(&self, now: Timestamp) -> Result<(), StoreError> {
        const OP: &str = "take over";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let rows = tx
            .rows(
                OP,
                "SELECT id, rec, lease_node FROM jobs
                 WHERE state = 2 AND (lease_until IS NULL OR lease_until < now())
                 ORDER BY id LIMIT 64 FOR UPDATE SKIP LOCKED",
                &[],
            )
            .await?;
        for row in &rows {
            let id = job_id(row, 0);
            let rec: JobV1 = decode("job", &keys::job(id), row.get::<_, &[u8]>(1))?;
            let node: Option<String> = row.get(2);
            let plan = plan::take_over(id, rec, &self.node, node.as_deref(), now)?;
            tx_write(&tx, OP, id, &plan, &[], now).await?;
            tx_put_job(&tx, OP, id, &plan.rec, true).await?;
            tracing::info!(
                job = id.0,
                from = node.as_deref().unwrap_or(""),
                "took over a job whose lease ran out"
            );
        }
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    pub(super) async fn due(
        &self,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<(Timestamp, JobId)>, StoreError> {
        const OP: &str = "due";
        self.take_over(until).await?;
        let c = self.client(OP).await?;
        // Each claim's lease runs from the statement's `now()`, later than this.
        let sent = Instant::now();
        let rows = c
            .rows(
                OP,
                "UPDATE jobs j SET epoch = j.epoch + 1, lease_node = $3,
                     lease_until = now() + make_interval(secs => $4)
                 FROM (SELECT id FROM jobs
                       WHERE state = 1 AND due_at <= $1
                         AND (lease_node IS NULL OR lease_until < now() OR lease_node = $3)
                       ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) c
                 WHERE j.id = c.id
                 RETURNING j.id, j.due_at, j.epoch",
                &[
                    &ms(until),
                    &(limit as i64),
                    &self.node,
                    &lease_interval(self.lease),
                ],
            )
            .await?;
        let mut out: Vec<(Timestamp, JobId)> = Vec::with_capacity(rows.len());
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            let id = job_id(&r, 0);
            let at = Timestamp(r.get::<_, Option<i64>>(1).unwrap_or(0).max(0) as u64);
            held.insert(id, Held::new(r.get(2), sent, self.lease));
            out.push((at, id));
        }
        out.sort();
        Ok(out)
    }

    pub(super) async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let c = self.client("next_due").await?;
        let row = c
            .row(
                "next_due",
                "SELECT min(due_at) FROM jobs WHERE state = 1
                   AND (lease_node IS NULL OR lease_until < now() OR lease_node = $1)",
                &[&self.node],
            )
            .await?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|t| Timestamp(t.max(0) as u64)))
    }

    pub(super) async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        let c = self.client("count_by_state").await?;
        let rows = c
            .rows(
                "count_by_state",
                "SELECT state, count(*) FROM jobs GROUP BY state",
                &[],
            )
            .await?;
        let mut counts = StateCounts::default();
        for r in rows {
            let n = r.get::<_, i64>(1).max(0) as u64;
            match r.get::<_, i16>(0) {
                1 => counts.queued = n,
                2 => counts.running = n,
                3 => counts.finished = n,
                4 => counts.cancelled = n,
                _ => {}
            }
        }
        Ok(counts)
    }

    pub(super) async fn running_jobs(&self) -> Result<Vec<JobId>, StoreError> {
        let c = self.client("running_jobs").await?;
        let rows = c
            .rows(
                "running_jobs",
                "SELECT id FROM jobs WHERE state = 2 AND lease_node = $1 ORDER BY id",
                &[&self.node],
            )
            .await?;
        Ok(rows.iter().map(|r| job_id(r, 0)).collect())
    }
}

/// A new job (`JobStore::submit`) inside transaction `tx`, `count` from
/// `plan::member_count`. An `Existing` job wrote nothing.
pub(super) async fn tx_submit(
    tx: &Transaction<'_>,
    op: &'static str,
    job: &NewJob,
    count: u32,
) -> Result<Submitted, StoreError> {
    if let Some(rk) = &job.request {
        // The key's row first: a second submit of the key, on any node, waits here for
        // the first one's transaction and then finds its job.
        let inserted = tx
            .exec(
                op,
                "INSERT INTO requests (key_hash, job, fingerprint) VALUES ($1, NULL, $2)
                 ON CONFLICT (key_hash) DO NOTHING",
                &[&&rk.key_hash.0[..], &&rk.fingerprint.0[..]],
            )
            .await?;
        if inserted == 0 {
            let row = tx
                .row(
                    op,
                    "SELECT r.job, r.fingerprint, j.rec FROM requests r
                     LEFT JOIN jobs j ON j.id = r.job WHERE r.key_hash = $1",
                    &[&&rk.key_hash.0[..]],
                )
                .await?;
            let existing = row.get::<_, Option<i64>>(0).map(|j| JobId(j.max(0) as u64));
            let fp: &[u8] = row.get(1);
            let Some(existing) = existing else {
                return Err(keys::corrupt_key("request", &rk.key_hash.0, "names no job"));
            };
            if fp != rk.fingerprint.0 {
                return Err(StoreError::RequestKeyConflict { job: existing });
            }
            let rec: Option<&[u8]> = row.get(2);
            let Some(rec) = rec else {
                return Err(keys::corrupt_key(
                    "request",
                    &rk.key_hash.0,
                    format!("names job {existing}, which does not exist"),
                ));
            };
            let rec: JobV1 = decode("job", &keys::job(existing), rec)?;
            return Ok(Submitted::Existing(job_to_api(existing, &rec)?));
        }
    }
    let plan = plan::submit(job, count);
    let state = plan.state();
    let id = tx
        .row(
            op,
            "INSERT INTO jobs (owner, keyword, state, due_at, rec) VALUES ($1, $2, $3, $4, $5)
             RETURNING id",
            &[
                &i64::from(job.owner_uid),
                &job.keyword_hash.as_ref().map(|h| h.0.to_vec()),
                &state_code(&state),
                &due_at(&state),
                &encode(&plan.rec),
            ],
        )
        .await?;
    let id = job_id(&id, 0);
    if let Some(rk) = &job.request {
        tx.exec(
            op,
            "UPDATE requests SET job = $2 WHERE key_hash = $1",
            &[&&rk.key_hash.0[..], &id_of(id)],
        )
        .await?;
    }
    tx_write(tx, op, id, &plan, &job.members, job.created_at).await?;
    tx_put_job(tx, op, id, &plan.rec, false).await?;
    Ok(Submitted::Created(job_to_api(id, &plan.rec)?))
}
