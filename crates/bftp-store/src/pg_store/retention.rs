//! Retention on PostgreSQL: which final jobs may go (`bftp_core::retention::removable`, the
//! same rule as sled's, checked again inside every transaction that removes anything) and
//! their removal.
//!
//! Every table that holds something per job is named here: `jobs`, `members`, `history`,
//! `requests`, `outbox` and `transcripts`. `refusals`, `pairs`, the connection slots and the
//! STOU names are per server (or pair of servers), not per job, and stay.
//!
//! What a running node needs is never waited for or held long: a removal is one node at a
//! time (a session advisory lock, tried, never waited for: the other nodes skip their
//! window), each transaction removes at most `batch` members and history rows of one final
//! job, takes that job's row with `NOWAIT` (a job another session holds is left for the next
//! pass) and gives up any other lock after a second (`lock_timeout`). A final job has no
//! lease and no node writes it any more, so these locks are on rows nobody else needs.

use bftp_core::retention::{removable, Keep, Report};
use bftp_core::Timestamp;
use tokio_postgres::Client;

use super::sql::Sql;
use super::{id_of, job_id, pg, reach, Inner};
use crate::error::StoreError;
use crate::keys;
use crate::record::{decode, JobV1};
use crate::types::{JobId, StateFilter};

/// The advisory lock a node holds while it removes jobs (the migrations' is 4242020215).
const RETENTION_LOCK: i64 = 4_242_020_216;

/// SQLSTATE `lock_not_available`: `NOWAIT` or `lock_timeout` gave up on a lock.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The migration that lets a job's request keys be found (and its row deleted) without a
/// scan of every request key.
pub(super) const MIGRATION: &str = "CREATE INDEX requests_job ON requests (job);";

/// What one removal transaction did.
enum Step {
    /// This node removed the job now.
    Removed,
    /// Part of its members and history went; more transactions follow.
    More,
    /// The rule no longer lets it go, it was gone already (another node removed it), or its
    /// row is held by another session: nothing was written.
    Left,
}

fn report_of(outbox_state: Option<i16>) -> Report {
    match outbox_state {
        None => Report::None,
        Some(0) => Report::Pending,
        Some(_) => Report::Done,
    }
}

fn is_final_code(state: i16) -> bool {
    [StateFilter::Finished, StateFilter::Cancelled]
        .iter()
        .any(|f| i16::from(keys::state_code(*f)) == state)
}

fn lock_not_available(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|d| d.code().code() == LOCK_NOT_AVAILABLE)
}

impl Inner {
    pub(super) async fn removable_jobs(
        &self,
        now: Timestamp,
        keep: Keep,
        after: Option<JobId>,
        scan: usize,
    ) -> Result<(Vec<JobId>, Option<JobId>), StoreError> {
        const OP: &str = "removable_jobs";
        if keep == Keep::Forever {
            return Ok((Vec::new(), None));
        }
        let scan = scan.max(1);
        let c = self.client(OP).await?;
        let rows = c
            .rows(
                OP,
                "SELECT j.id, j.state, j.rec, o.state FROM jobs j
                     LEFT JOIN outbox o ON o.job = j.id
                     WHERE j.id > $1 ORDER BY j.id LIMIT $2",
                &[&after.map_or(0, id_of), &(scan as i64)],
            )
            .await?;
        let mut out = Vec::new();
        for r in &rows {
            let id = job_id(r, 0);
            if !is_final_code(r.get(1)) {
                continue;
            }
            let rec: JobV1 = decode("job", &keys::job(id), r.get::<_, &[u8]>(2))?;
            if removable(&rec.state.to_api(), report_of(r.get(3)), now, keep) {
                out.push(id);
            }
        }
        let next = if rows.len() == scan {
            rows.last().map(|r| job_id(r, 0))
        } else {
            None
        };
        Ok((out, next))
    }

    pub(super) async fn remove_jobs(
        &self,
        ids: Vec<JobId>,
        now: Timestamp,
        keep: Keep,
        batch: usize,
    ) -> Result<u64, StoreError> {
        const OP: &str = "remove_jobs";
        if ids.is_empty() {
            return Ok(0);
        }
        let mut c = self.client(OP).await?;
        let locked: bool = c
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RETENTION_LOCK])
            .await
            .map_err(pg(OP))?
            .get(0);
        if !locked {
            tracing::debug!("retention: another node is removing jobs; leaving this window to it");
            return Ok(0);
        }
        let removed = remove_each(&mut c, &ids, now, keep, batch.max(1)).await;
        let unlocked = c
            .query_one("SELECT pg_advisory_unlock($1)", &[&RETENTION_LOCK])
            .await
            .map(|r| r.get::<_, bool>(0));
        if !matches!(unlocked, Ok(true)) {
            // The lock must not stay with a connection the pool hands out again: closing it
            // ends the session, and the lock with it.
            tracing::warn!("retention: cannot give back its advisory lock; closing the connection");
            drop(deadpool_postgres::Object::take(c));
        }
        removed
    }
}

async fn remove_each(
    c: &mut Client,
    ids: &[JobId],
    now: Timestamp,
    keep: Keep,
    batch: usize,
) -> Result<u64, StoreError> {
    let mut removed = 0;
    for &id in ids {
        loop {
            match remove_step(c, id, now, keep, batch).await? {
                Step::Removed => {
                    removed += 1;
                    break;
                }
                Step::More => continue,
                Step::Left => break,
            }
        }
    }
    Ok(removed)
}

/// One transaction: the rule checked again on the job's row (taken without waiting), then up
/// to `batch` of its members and history rows removed, and with the last of them the job's
/// row and everything else kept for it.
async fn remove_step(
    c: &mut Client,
    id: JobId,
    now: Timestamp,
    keep: Keep,
    batch: usize,
) -> Result<Step, StoreError> {
    const OP: &str = "remove_jobs";
    let tx = c.transaction().await.map_err(pg(OP))?;
    tx.batch_execute("SET LOCAL lock_timeout = '1s'")
        .await
        .map_err(pg(OP))?;
    let row = tx
        .query_opt(
            "SELECT j.rec, o.state FROM jobs j LEFT JOIN outbox o ON o.job = j.id
             WHERE j.id = $1 FOR UPDATE OF j NOWAIT",
            &[&id_of(id)],
        )
        .await;
    let row = match row {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(Step::Left),
        Err(e) if lock_not_available(&e) => return Ok(Step::Left),
        Err(e) => return Err(pg(OP)(e)),
    };
    let rec: JobV1 = decode("job", &keys::job(id), row.get::<_, &[u8]>(0))?;
    if !removable(&rec.state.to_api(), report_of(row.get(1)), now, keep) {
        return Ok(Step::Left);
    }
    let budget = i64::try_from(batch).unwrap_or(i64::MAX);
    let run = |sql: &'static str, limit: Option<i64>| {
        let tx = &tx;
        async move {
            let r = match limit {
                Some(l) => tx.execute(sql, &[&id_of(id), &l]).await,
                None => tx.execute(sql, &[&id_of(id)]).await,
            };
            match r {
                Ok(n) => Ok(Some(n)),
                Err(e) if lock_not_available(&e) => Ok(None),
                Err(e) => Err(pg(OP)(e)),
            }
        }
    };
    let Some(members) = run(
        "DELETE FROM members WHERE job = $1 AND idx IN
           (SELECT idx FROM members WHERE job = $1 ORDER BY idx LIMIT $2)",
        Some(budget),
    )
    .await?
    else {
        return Ok(Step::Left);
    };
    let left = budget - members as i64;
    let history = if left > 0 {
        let Some(n) = run(
            "DELETE FROM history WHERE job = $1 AND seq IN
               (SELECT seq FROM history WHERE job = $1 ORDER BY seq LIMIT $2)",
            Some(left),
        )
        .await?
        else {
            return Ok(Step::Left);
        };
        n as i64
    } else {
        0
    };
    let last = (members as i64) + history < budget;
    if last {
        for sql in [
            "DELETE FROM requests WHERE job = $1",
            "DELETE FROM outbox WHERE job = $1",
            "DELETE FROM transcripts WHERE job = $1",
            "DELETE FROM events WHERE job = $1",
            "DELETE FROM jobs WHERE id = $1",
        ] {
            if run(sql, None).await?.is_none() {
                return Ok(Step::Left);
            }
        }
    }
    tx.commit().await.map_err(reach::commit_failed(OP))?;
    Ok(if last { Step::Removed } else { Step::More })
}
