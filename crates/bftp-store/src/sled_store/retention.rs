//! Retention in the sled store: which final jobs may go (`bftp_core::retention::removable`,
//! checked again inside every transaction that removes anything) and their removal.
//!
//! Every tree that holds something per job is named here: `jobs`, `members`, `history`,
//! `requests`, `owners`, `keywords`, `states`, `due` (empty for a final job), `outbox`,
//! `outbox_due` (empty once the report is done), `transcripts`, and the job's events
//! (`events`, `event_ids`, `event_due`, `event_jobs`: they go with the job). The `refusals` tree (per
//! server) and the `pairs` tree (per pair of servers) are not per job, and stay.

use std::collections::HashMap;

use bftp_core::retention::{removable, Keep, Report};

use super::pages::PAGE;
use super::reads::first_after;
use super::{SledStore, Tx, TxResult};
use crate::error::{backend, StoreError};
use crate::keys;
use crate::record::{decode, unhex, JobV1, OutboxStateV1, OutboxV1, RequestV1};
use crate::types::JobId;
use bftp_core::Timestamp;
use sled::IVec;

/// What one removal transaction did.
enum Step {
    /// The job is gone (removed now, or before).
    Removed,
    /// Part of its members and history went; more transactions follow.
    More,
    /// The rule no longer lets it go (or it never did): nothing was written.
    Kept,
}

fn report_of(outbox: Option<&[u8]>, id: JobId) -> Result<Report, StoreError> {
    let Some(v) = outbox else {
        return Ok(Report::None);
    };
    let rec: OutboxV1 = decode("outbox", &keys::job(id), v)?;
    Ok(match rec.state {
        OutboxStateV1::Pending => Report::Pending,
        OutboxStateV1::Delivered | OutboxStateV1::GaveUp => Report::Done,
    })
}

impl SledStore {
    pub(super) fn scan_removable(
        &self,
        now: Timestamp,
        keep: Keep,
        after: Option<JobId>,
        scan: usize,
    ) -> Result<(Vec<JobId>, Option<JobId>), StoreError> {
        self.guarded("removable_jobs", || {
            let mut out = Vec::new();
            if keep == Keep::Forever {
                return Ok((out, None));
            }
            let Some(start) = first_after(after) else {
                return Ok((out, None));
            };
            let mut last = None;
            for (n, kv) in self.t.jobs.range(keys::job(start)..).enumerate() {
                if n == scan {
                    return Ok((out, last));
                }
                let (k, v) = kv.map_err(backend("removable_jobs"))?;
                let id = keys::trailing_id("job", &k, 8)?;
                last = Some(id);
                let rec: JobV1 = decode("job", &k, &v)?;
                let outbox = self
                    .t
                    .outbox
                    .get(keys::job(id))
                    .map_err(backend("removable_jobs"))?;
                if removable(
                    &rec.state.to_api(),
                    report_of(outbox.as_deref(), id)?,
                    now,
                    keep,
                ) {
                    out.push(id);
                }
            }
            Ok((out, None))
        })
    }

    pub(super) fn remove_removable(
        &self,
        ids: &[JobId],
        now: Timestamp,
        keep: Keep,
        batch: usize,
    ) -> Result<u64, StoreError> {
        let batch = batch.max(1);
        let mut legacy: Option<HashMap<u64, Vec<IVec>>> = None;
        let mut removed = 0;
        for &id in ids {
            loop {
                // Jobs written before their record named its request key: one scan of the
                // `requests` tree finds theirs, for all of `ids` at once.
                let needs_scan = legacy.is_none()
                    && match self
                        .t
                        .jobs
                        .get(keys::job(id))
                        .map_err(backend("remove_jobs"))?
                    {
                        Some(v) => decode::<JobV1>("job", &keys::job(id), &v)?.rk.is_none(),
                        None => false,
                    };
                if needs_scan {
                    legacy = Some(self.requests_by_job(ids)?);
                }
                let request_keys: Vec<IVec> = legacy
                    .as_ref()
                    .and_then(|m| m.get(&id.0).cloned())
                    .unwrap_or_default();
                // The entries to remove in this transaction, read outside it (a transaction
                // cannot scan); a final job gains no member and no history, so they stay true.
                // A page of members counts as the members it can hold.
                let prefix = keys::job(id);
                let mut parts: Vec<IVec> = Vec::new();
                let page_budget = (batch / PAGE as usize).max(1);
                for k in self.t.members.scan_prefix(prefix).keys().take(page_budget) {
                    parts.push(k.map_err(backend("remove_jobs"))?);
                }
                let members = parts.len();
                let history_budget = if members < page_budget {
                    batch.saturating_sub(members * PAGE as usize)
                } else {
                    0
                };
                for k in self
                    .t
                    .history
                    .scan_prefix(prefix)
                    .keys()
                    .take(history_budget)
                {
                    parts.push(k.map_err(backend("remove_jobs"))?);
                }
                let last = members < page_budget && parts.len() - members < history_budget;
                let events = if last {
                    super::events::job_event_keys(self, id)?
                } else {
                    Vec::new()
                };
                let step = self.write("remove_jobs", |tx| {
                    remove_step(
                        tx,
                        id,
                        now,
                        keep,
                        &parts[..members],
                        &parts[members..],
                        last,
                        &request_keys,
                        &events,
                    )
                })?;
                match step {
                    Step::Removed => {
                        removed += 1;
                        break;
                    }
                    Step::More => continue,
                    Step::Kept => break,
                }
            }
        }
        Ok(removed)
    }

    /// The request keys naming each of `ids`.
    fn requests_by_job(&self, ids: &[JobId]) -> Result<HashMap<u64, Vec<IVec>>, StoreError> {
        let wanted: std::collections::HashSet<u64> = ids.iter().map(|i| i.0).collect();
        let mut out: HashMap<u64, Vec<IVec>> = HashMap::new();
        for kv in self.t.requests.iter() {
            let (k, v) = kv.map_err(backend("remove_jobs"))?;
            let rec: RequestV1 = decode("request", &k, &v)?;
            if wanted.contains(&rec.job) {
                out.entry(rec.job).or_default().push(k);
            }
        }
        Ok(out)
    }
}

/// One transaction of a removal: the rule checked again, then `members` and `history`
/// removed, and with the `last` of them the job's record and every index entry.
#[allow(clippy::too_many_arguments)]
fn remove_step(
    tx: &Tx<'_>,
    id: JobId,
    now: Timestamp,
    keep: Keep,
    members: &[IVec],
    history: &[IVec],
    last: bool,
    legacy_requests: &[IVec],
    events: &[IVec],
) -> TxResult<Step> {
    let k = keys::job(id);
    let Some(v) = tx.jobs.get(k)? else {
        return Ok(Step::Removed);
    };
    let rec: JobV1 = decode("job", &k, &v).map_err(super::ConflictableTransactionError::Abort)?;
    let outbox = tx.outbox.get(k)?;
    let report =
        report_of(outbox.as_deref(), id).map_err(super::ConflictableTransactionError::Abort)?;
    let state = rec.state.to_api();
    if !removable(&state, report, now, keep) {
        return Ok(Step::Kept);
    }
    for m in members {
        tx.members.remove(m)?;
    }
    for h in history {
        tx.history.remove(h)?;
    }
    if !last {
        return Ok(Step::More);
    }
    // A request key names this job only if its record says so: a key reused after an
    // earlier removal names the newer job and stays.
    let mut request_keys: Vec<Vec<u8>> = legacy_requests.iter().map(|k| k.to_vec()).collect();
    if let Some(h) = rec.rk.as_deref().and_then(unhex) {
        request_keys.push(h);
    }
    for rk in &request_keys {
        if let Some(v) = tx.requests.get(rk)? {
            let r: RequestV1 =
                decode("request", rk, &v).map_err(super::ConflictableTransactionError::Abort)?;
            if r.job == id.0 {
                tx.requests.remove(rk)?;
            }
        }
    }
    tx.owners.remove(&keys::owner(rec.owner, id))?;
    if let Some(h) = rec.kw.as_deref().and_then(unhex) {
        if let Ok(h) = <[u8; 32]>::try_from(h.as_slice()) {
            tx.keywords
                .remove(&keys::keyword(&crate::types::KeyHash(h), id))?;
        }
    }
    tx.states.remove(&keys::state(&state, id))?;
    if let Some(v) = &outbox {
        let o: OutboxV1 =
            decode("outbox", &k, v).map_err(super::ConflictableTransactionError::Abort)?;
        if let Some(at) = o.next {
            tx.outbox_due.remove(&keys::due(Timestamp(at), id))?;
        }
    }
    tx.outbox.remove(&k)?;
    tx.transcripts.remove(&k)?;
    super::events::tx_remove_events(tx, events)?;
    tx.jobs.remove(&k)?;
    Ok(Step::Removed)
}
