//! The retention task: removes the final jobs `[store] keep_finished` lets go, a window at a
//! time, in the background.
//!
//! Which jobs may go is one pure rule (`bftp_core::retention::removable`); the store checks it
//! again inside each removal transaction, so a job cancelled, finished or given a pending
//! report meanwhile is never taken. The task never holds the store for long: it reads a
//! window of `SCAN` jobs, removes what the rule lets go in transactions of at most `BATCH`
//! entries (each an ordinary store write, sharing the group commit with the API's and the
//! scheduler's writes), and sleeps `BREATHER` between windows. After a whole pass it sleeps
//! until the next, a quarter of `keep_finished` later (at least a second, at most ten
//! minutes). Time comes from the daemon's one [`Clock`]. On a store shared by several nodes
//! (PostgreSQL) every node runs this task, and the store lets one node remove at a time (the
//! others' windows remove nothing and count nothing).

use std::sync::Arc;
use std::time::Duration;

use bftp_core::retention::Keep;
use bftp_store::JobId;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::Store;

/// Jobs read per window.
pub const SCAN: usize = 256;
/// Most entries (members and history) one removal transaction removes.
pub const BATCH: usize = 512;
/// Pause between windows, so a long backlog leaves the store to others in between.
pub const BREATHER: Duration = Duration::from_millis(20);

pub struct Retention {
    pub store: Store,
    pub keep: Keep,
    pub clock: Clock,
    pub metrics: Arc<Metrics>,
}

/// The pause between two whole passes.
pub fn pass_interval(keep: Keep) -> Option<Duration> {
    match keep {
        Keep::Forever => None,
        Keep::For(d) => Some((d / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))),
    }
}

impl Retention {
    pub async fn run(self, stop: CancellationToken) {
        let Some(interval) = pass_interval(self.keep) else {
            return;
        };
        let mut after: Option<JobId> = None;
        loop {
            let pause = match self.window(after).await {
                Ok(Some(next)) => {
                    after = Some(next);
                    BREATHER
                }
                Ok(None) => {
                    after = None;
                    interval
                }
                Err(bftp_store::StoreError::Unsupported { op }) => {
                    // A store without retention: say so once.
                    tracing::warn!(op, "retention: this store keeps finished jobs; [store] keep_finished has no effect");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention: cannot remove old jobs now; trying again later");
                    interval
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One window: returns where the next starts (`None`: the pass is over).
    async fn window(&self, after: Option<JobId>) -> Result<Option<JobId>, bftp_store::StoreError> {
        let (now, keep) = (self.clock.now(), self.keep);
        let (ids, next) = self
            .store
            .call(move |s| {
                let op = "removable_jobs";
                let upkeep = s
                    .upkeep()
                    .ok_or(bftp_store::StoreError::Unsupported { op })?;
                upkeep.removable_jobs(now, keep, after, SCAN)
            })
            .await?;
        if !ids.is_empty() {
            let n = ids.len();
            let removed = self
                .store
                .call(move |s| {
                    let op = "remove_jobs";
                    let upkeep = s
                        .upkeep()
                        .ok_or(bftp_store::StoreError::Unsupported { op })?;
                    upkeep.remove_jobs(&ids, now, keep, BATCH)
                })
                .await?;
            if removed > 0 {
                self.metrics.jobs_removed(removed);
                tracing::info!(removed, looked_at = n, "retention removed old final jobs");
            }
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_come_a_quarter_of_keep_apart_within_bounds() {
        let s = Duration::from_secs;
        for (keep, want) in [
            (Keep::Forever, None),
            (Keep::For(s(2)), Some(s(1))),
            (Keep::For(s(40)), Some(s(10))),
            (Keep::For(s(30 * 86_400)), Some(s(600))),
        ] {
            assert_eq!(pass_interval(keep), want, "{keep:?}");
        }
    }
}
