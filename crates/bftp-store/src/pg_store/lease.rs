//! Leases: the heartbeat that renews this node's leases, the one rule for when a held job
//! counts as lost or cancelled here ([`lease_end`]), and the bookkeeping of held jobs.

use super::reach;
use super::{id_of, job_id, lease_interval, Inner};
use crate::error::StoreError;
use crate::types::JobId;
use deadpool_postgres::Transaction;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// How long `open` waits for this node's presence lock (a killed previous life's session
/// ends within moments).
pub(super) const PRESENCE_WAIT: Duration = Duration::from_secs(10);

/// Renews the node's lease and the leases of its running jobs every third of the lease, on a
/// connection of its own: a pool busy with long transactions (or exhausted) must not make a
/// live node's leases run out. All of the node's job leases are renewed by one statement, and
/// a renewal that comes later than a third of the lease after the last one is logged with its
/// delay, so a lost lease can be told apart from a stalled node.
pub(super) async fn heartbeat(inner: Arc<Inner>, config: tokio_postgres::Config) {
    let every = (inner.lease / 3).max(Duration::from_millis(100));
    let mut conn: Option<tokio_postgres::Client> = None;
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            conn = connect_for_heartbeat(&config).await;
        }
        let Some(client) = &conn else {
            tracing::warn!("cannot renew leases: the database is unreachable");
            continue;
        };
        inner.renew_node(client).await;
        let held: Vec<(JobId, i64)> = inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|(id, h)| (*id, h.epoch))
            .collect();
        if held.is_empty() {
            last_renewal = tokio::time::Instant::now();
            continue;
        }
        let late = last_renewal.elapsed().saturating_sub(every);
        if late > every {
            tracing::warn!(
                late_ms = late.as_millis() as u64,
                lease_ms = inner.lease.as_millis() as u64,
                "renewing leases later than planned (this node or its database is stalled)"
            );
        }
        let ids: Vec<i64> = held.iter().map(|(id, _)| id_of(*id)).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, e)| *e).collect();
        // The database's new lease runs from its `now()`, later than this: a renewal
        // confirmed gives this node's own deadline from here (`bftp_core::lease`).
        let sent = Instant::now();
        // A queued job claimed by `due` and not started yet is not renewed: its claim runs out
        // by itself if the node does not start it. A lease that already ran out is not renewed
        // either: another node may be taking the job over right now. The jobs not renewed are
        // read in the same statement, from one snapshot: a job started (or finished) by this
        // node between a renewal and a later look must not pass for lost.
        let seen = client
            .query(
                "WITH h AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS h(id, epoch)),
                 r AS (UPDATE jobs j SET lease_until = now() + make_interval(secs => $4)
                       FROM h
                       WHERE j.id = h.id AND j.epoch = h.epoch AND j.lease_node = $3
                         AND j.state = 2 AND j.lease_until > now()
                       RETURNING j.id)
                 SELECT h.id, h.epoch, j.state, j.epoch,
                        COALESCE(j.lease_until > now(), false)
                 FROM h LEFT JOIN jobs j ON j.id = h.id
                 WHERE h.id NOT IN (SELECT id FROM r)",
                &[&ids, &epochs, &inner.node, &lease_interval(inner.lease)],
            )
            .await;
        let seen = match seen {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew leases");
                conn = None;
                continue;
            }
        };
        let since_renewal = last_renewal.elapsed();
        last_renewal = tokio::time::Instant::now();
        let not_renewed: Vec<JobId> = seen.iter().map(|r| job_id(r, 0)).collect();
        inner.renewed(
            held.iter()
                .filter(|(id, _)| !not_renewed.contains(id))
                .map(|(id, epoch)| (*id, *epoch)),
            bftp_core::lease::deadline(sent, inner.lease),
        );
        for r in &seen {
            let (id, held) = (job_id(r, 0), r.get::<_, i64>(1));
            let now = Seen {
                state: r.get(2),
                epoch: r.get(3),
                lease_alive: r.get(4),
            };
            match lease_end(held, &now) {
                None => {}
                Some(LeaseEnd::Lost) => inner.mark_lost(id, held, &now, since_renewal),
                Some(LeaseEnd::CancelledHere) => inner.mark_cancelled(id, held),
            }
        }
    }
}

/// What the heartbeat read of a job it holds and did not renew: the job's state code and
/// epoch (`None`: the job is gone) and whether its lease still runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    state: Option<i16>,
    epoch: Option<i64>,
    lease_alive: bool,
}

/// How a node's hold on a job ended, as the heartbeat saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseEnd {
    /// Another node may hold the job (or it is gone): stop as at shutdown, touch nothing.
    Lost,
    /// Cancelled on another node straight from this node's hold: nobody else ran it since,
    /// so what the attempt left on the destination is its own, and it stops as a local
    /// cancel does, cleaning up (RULES.md §6).
    CancelledHere,
}

/// Whether a node that holds a job at epoch `held` has lost it, from what the heartbeat saw
/// of it. The one rule for it:
/// - cancelled at the epoch after ours: the cancel came straight from our hold (a cancel
///   moves the epoch on by one; a takeover by two, its requeue and its claim): cancelled here;
/// - another epoch (someone took the job over, or cancelled it after), or no job: lost;
/// - queued at our epoch: a claim not started yet, which runs out by itself: kept;
/// - running at our epoch with a live lease: kept (started after the renewal's look);
/// - running at our epoch whose lease ran out: lost, another node may be taking it over;
/// - final at our epoch cannot happen (a final write moves the epoch on): lost.
pub(super) fn lease_end(held: i64, seen: &Seen) -> Option<LeaseEnd> {
    if seen.state == Some(4) && seen.epoch == held.checked_add(1) {
        return Some(LeaseEnd::CancelledHere);
    }
    if seen.epoch != Some(held) {
        return Some(LeaseEnd::Lost);
    }
    match seen.state {
        Some(1) => None,
        Some(2) if seen.lease_alive => None,
        _ => Some(LeaseEnd::Lost),
    }
}

/// The heartbeat's own connection, or `None` (logged) when the database cannot be reached.
pub(super) async fn connect_for_heartbeat(
    config: &tokio_postgres::Config,
) -> Option<tokio_postgres::Client> {
    match tokio::time::timeout(Duration::from_secs(5), config.connect(NoTls)).await {
        Ok(Ok((client, connection))) => {
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "the heartbeat's connection ended");
                }
            });
            Some(client)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot connect to renew leases");
            None
        }
        Err(_) => {
            tracing::warn!("cannot connect to renew leases: no answer within 5 s");
            None
        }
    }
}

impl Inner {
    /// Marks the lease on `id` at `epoch` lost, unless this node moved the epoch on itself
    /// and has not released the job yet ([`Held::releasing`]). `seen` and `since_renewal` are
    /// logged, to tell a late renewal from a job taken over or cancelled elsewhere.
    pub(super) fn mark_lost(&self, id: JobId, epoch: i64, seen: &Seen, since_renewal: Duration) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&id) {
            if h.epoch == epoch && !h.lost && !h.releasing {
                h.lost = true;
                h.cell.lose();
                tracing::warn!(
                    job = id.0,
                    epoch,
                    seen_state = seen.state,
                    seen_epoch = seen.epoch,
                    lease_alive = seen.lease_alive,
                    since_renewal_ms = since_renewal.as_millis() as u64,
                    "lease lost: another node took the job over or it was cancelled elsewhere"
                );
                self.lost.lock().unwrap_or_else(|p| p.into_inner()).push(id);
            }
        }
    }

    /// Renewals the database confirmed (`(job, epoch)` as sent) move each job's own deadline
    /// on to `deadline`.
    pub(super) fn renewed(&self, jobs: impl Iterator<Item = (JobId, i64)>, deadline: Instant) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for (id, epoch) in jobs {
            if let Some(h) = held.get(&id).filter(|h| h.epoch == epoch && !h.lost) {
                h.cell.renew(deadline);
            }
        }
    }

    /// The job held at `epoch` was cancelled on another node straight from this node's
    /// hold: let go (later writes carry no epoch, as after this node's own cancel: the
    /// attempt's clean-up is recorded), and handed to the scheduler, which stops the attempt
    /// as a cancel. Not while this node's own write is ending the lease.
    pub(super) fn mark_cancelled(&self, id: JobId, epoch: i64) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = held.get(&id) else {
            return;
        };
        if h.epoch != epoch || h.lost || h.releasing {
            return;
        }
        h.cell.end();
        held.remove(&id);
        tracing::info!(
            job = id.0,
            epoch,
            "the job was cancelled on another node: stopping this node's attempt as a cancel"
        );
        self.cancelled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
    }

    /// Commits a write that ends this node's lease on `id` (its epoch moves on) and lets the
    /// job go. From before the commit until the job has left `held`, the heartbeat sees the
    /// new epoch as this node's own doing, not as a loss; a failed commit changed nothing.
    pub(super) async fn commit_release(
        &self,
        tx: Transaction<'_>,
        op: &'static str,
        id: JobId,
    ) -> Result<(), StoreError> {
        self.set_releasing(id, true);
        match tx.commit().await {
            Ok(()) => {
                #[cfg(feature = "test-hooks")]
                tokio::time::sleep(self.hold_before_release).await;
                self.release(id);
                Ok(())
            }
            Err(e) => {
                self.set_releasing(id, false);
                Err(reach::commit_failed(op)(e))
            }
        }
    }

    pub(super) fn set_releasing(&self, id: JobId, on: bool) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&id) {
            h.releasing = on;
        }
    }

    pub(super) fn epoch_of(&self, id: JobId) -> Option<i64> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .map(|h| h.epoch)
    }

    pub(super) fn release(&self, id: JobId) {
        let gone = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Some(h) = gone {
            h.cell.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_a_held_lease_counts_as_lost_or_cancelled_here() {
        let seen = |state, epoch, lease_alive| Seen {
            state,
            epoch,
            lease_alive,
        };
        let (lost, here) = (Some(LeaseEnd::Lost), Some(LeaseEnd::CancelledHere));
        #[rustfmt::skip]
        let table: &[(&str, Seen, Option<LeaseEnd>)] = &[
            ("claimed, not started yet",                 seen(Some(1), Some(7), true),  None),
            ("claimed, its claim ran out, still ours",   seen(Some(1), Some(7), false), None),
            ("started after the renewal looked",         seen(Some(2), Some(7), true),  None),
            ("running, our lease ran out",               seen(Some(2), Some(7), false), lost),
            ("taken over: queued at a new epoch",        seen(Some(1), Some(8), false), lost),
            ("taken over and running at a new epoch",    seen(Some(2), Some(8), true),  lost),
            ("finished (the epoch moved on)",            seen(Some(3), Some(8), false), lost),
            ("final at our epoch (cannot happen)",       seen(Some(4), Some(7), false), lost),
            ("the job is gone",                          seen(None, None, false),       lost),
            // A cancel moves the epoch on by one: nobody ran the job between our hold and it.
            ("cancelled elsewhere straight from our hold", seen(Some(4), Some(8), false), here),
            // A takeover (requeue, claim) came first: the files are another node's now.
            ("cancelled after a takeover",               seen(Some(4), Some(9), false), lost),
            ("cancelled after a takeover's requeue",     seen(Some(4), Some(10), false), lost),
        ];
        for (case, s, end) in table {
            assert_eq!(lease_end(7, s), *end, "{case}");
        }
    }
}
