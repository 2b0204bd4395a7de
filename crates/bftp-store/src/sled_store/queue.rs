//! [`JobStore`] for [`SledStore`]: each write reads, asks `plan.rs`, and writes the plan in
//! one transaction (`write.rs`).

use super::members::{page_first, tx_settle_pending, tx_update_members};
use super::pages;
use super::reads::{due_entry, first_after};
use super::write::{tx_job, tx_outbox_put, tx_put_job, tx_reindex, tx_write};
use super::OrAbort;
use super::{abort, look_stands, BackupReport, SledStore, Tx, TxResult, EMPTY};
use crate::error::{backend, StoreError};
use crate::keys;
use crate::plan::{self, Listing};
use crate::record::{
    decode, encode, job_to_api, HistoryV1, JobV1, MemberV1, OutboxV1, PairV1, RefusalV1, RequestV1,
    TranscriptV1, RECORD_VERSION,
};
use crate::types::{
    AttemptTranscript, DeliveryTry, HistoryEvent, Job, JobFilter, JobId, Member, MemberUpdate,
    NewJob, NewMember, NewWatch, OutboxEntry, PollRecord, StateCounts, StateFilter, Submitted,
    Walk, Watch, WatchId,
};
use crate::{JobStore, Upkeep};
use bftp_core::hostlimit::HostLimit;
use bftp_core::refusal::{observe, RefusalKey, RefusalMemory, Sighting};
use bftp_core::retention::Keep;
use bftp_core::route::{PairKey, PairMemory};
use bftp_core::{JobEvent, MemberState, Timestamp};
use std::path::Path;
use std::time::Instant;

use crate::events::{Event, NewEvent};

impl JobStore for SledStore {
    fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        let count = plan::member_count(job.members.len())?;
        self.write("submit", |tx| tx_submit(tx, &job, count))
    }

    fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        self.guarded("get", || self.read_job(id))
    }

    fn list_after(&self, filter: &JobFilter, after: Option<JobId>) -> Result<Vec<Job>, StoreError> {
        self.guarded("list", || {
            let limit = filter.limit.unwrap_or(usize::MAX);
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            let keep = |j: &Job| {
                filter.owner.is_none_or(|o| j.owner_uid == o)
                    && filter
                        .keyword_hash
                        .is_none_or(|h| j.keyword_hash == Some(h))
                    && filter.state.is_none_or(|s| StateFilter::of(&j.state) == s)
            };
            // The most selective index first: a keyword names few jobs, an owner more.
            let ids: Box<dyn Iterator<Item = Result<JobId, StoreError>>> =
                if let Some(h) = &filter.keyword_hash {
                    Box::new(self.index_ids("keywords index", &self.t.keywords, &h.0, 40, after))
                } else if let Some(uid) = filter.owner {
                    Box::new(self.index_ids(
                        "owners index",
                        &self.t.owners,
                        &uid.to_be_bytes(),
                        12,
                        after,
                    ))
                } else if let Some(s) = filter.state {
                    Box::new(self.index_ids(
                        "states index",
                        &self.t.states,
                        &[keys::state_code(s)],
                        9,
                        after,
                    ))
                } else {
                    let Some(start) = first_after(after) else {
                        return Ok(out);
                    };
                    for kv in self.t.jobs.range(keys::job(start)..) {
                        let (k, v) = kv.map_err(backend("list"))?;
                        let id = keys::trailing_id("job", &k, 8)?;
                        out.push(job_to_api(id, &decode("job", &k, &v)?)?);
                        if out.len() >= limit {
                            break;
                        }
                    }
                    return Ok(out);
                };
            for id in ids {
                let id = id?;
                let job = self.read_job(id)?.ok_or_else(|| StoreError::Corrupt {
                    what: "index",
                    key: id.to_string(),
                    reason: "an index names a job that does not exist".into(),
                })?;
                if keep(&job) {
                    out.push(job);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok(out)
        })
    }

    fn history(&self, id: JobId) -> Result<Vec<HistoryEvent>, StoreError> {
        self.guarded("history", || {
            self.require_job(id)?;
            self.t
                .history
                .scan_prefix(keys::job(id))
                .map(|kv| {
                    let (k, v) = kv.map_err(backend("history"))?;
                    Ok(decode::<HistoryV1>("history", &k, &v)?.to_api())
                })
                .collect()
        })
    }

    fn members(&self, id: JobId) -> Result<Vec<Member>, StoreError> {
        self.guarded("members", || {
            self.require_job(id)?;
            let mut out = Vec::new();
            for kv in self.t.members.scan_prefix(keys::job(id)) {
                let (k, v) = kv.map_err(backend("members"))?;
                let first = page_first(&k)?;
                for (slot, record) in pages::decode(&k, &v)?.into_iter().enumerate() {
                    if pages::is_hole(record) {
                        continue;
                    }
                    let m: MemberV1 = decode("member", &k, record)?;
                    out.push(m.to_api(first + slot as u32));
                }
            }
            Ok(out)
        })
    }

    fn members_page(&self, id: JobId, from: u32, limit: usize) -> Result<Vec<Member>, StoreError> {
        self.guarded("members", || {
            self.require_job(id)?;
            let mut out = Vec::new();
            let start = pages::place(id, from).0;
            let end = keys::member(id, u32::MAX);
            for kv in self.t.members.range(start..=end) {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = kv.map_err(backend("members"))?;
                let first = page_first(&k)?;
                for (slot, record) in pages::decode(&k, &v)?.into_iter().enumerate() {
                    let index = first + slot as u32;
                    if index < from || pages::is_hole(record) || out.len() >= limit {
                        continue;
                    }
                    let m: MemberV1 = decode("member", &k, record)?;
                    out.push(m.to_api(index));
                }
            }
            Ok(out)
        })
    }

    fn apply(
        &self,
        id: JobId,
        event: JobEvent,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        self.write("apply", |tx| {
            let rec = tx_job(tx, id)?;
            let plan = plan::event(id, rec, event, now, detail.as_deref()).or_abort()?;
            tx_write(tx, id, &plan, &[], now)?;
            job_to_api(id, &plan.rec).or_abort()
        })
    }

    fn settle_and_finish(
        &self,
        id: JobId,
        pending_become: MemberState,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        self.write("settle_and_finish", |tx| {
            let rec = tx_job(tx, id)?;
            let detail = detail.as_deref();
            let states = tx_settle_pending(tx, id, rec.members, pending_become, detail, now)?;
            let plan = plan::finish(id, rec, &states, now, detail).or_abort()?;
            tx_write(tx, id, &plan, &[], now)?;
            job_to_api(id, &plan.rec).or_abort()
        })
    }

    fn freeze_members(
        &self,
        id: JobId,
        members: Vec<NewMember>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let count = plan::member_count(members.len())?;
        self.write("freeze_members", |tx| {
            let plan = plan::freeze(id, tx_job(tx, id)?, count, now).or_abort()?;
            tx_write(tx, id, &plan, &members, now)
        })
    }

    fn update_member(
        &self,
        id: JobId,
        index: u32,
        update: MemberUpdate,
        now: Timestamp,
    ) -> Result<Member, StoreError> {
        let updates = [(index, update)];
        self.write("update_member", |tx| {
            let mut changed = tx_update_members(tx, id, &updates, now, true)?;
            Ok(changed.remove(0))
        })
    }

    fn update_members(
        &self,
        id: JobId,
        updates: Vec<(u32, MemberUpdate)>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.write("update_members", |tx| {
            tx_update_members(tx, id, &updates, now, false).map(drop)
        })
    }

    fn append_history(&self, id: JobId, event: HistoryEvent) -> Result<(), StoreError> {
        self.write("append_history", |tx| {
            let plan = plan::history(tx_job(tx, id)?, &event);
            tx_write(tx, id, &plan, &[], event.at)
        })
    }

    fn due(&self, until: Timestamp, limit: usize) -> Result<Vec<(Timestamp, JobId)>, StoreError> {
        self.guarded("due", || {
            self.t
                .due
                .range(..=keys::due(until, JobId(u64::MAX)))
                .keys()
                .take(limit)
                .map(|k| due_entry(&k.map_err(backend("due"))?))
                .collect()
        })
    }

    fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.guarded("next_due", || {
            match self.t.due.first().map_err(backend("next_due"))? {
                Some((k, _)) => Ok(Some(due_entry(&k)?.0)),
                None => Ok(None),
            }
        })
    }

    fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.guarded("count_by_state", || {
            let count = |f: StateFilter| -> Result<u64, StoreError> {
                let mut n = 0;
                for k in self.t.states.scan_prefix([keys::state_code(f)]).keys() {
                    k.map_err(backend("count_by_state"))?;
                    n += 1;
                }
                Ok(n)
            };
            Ok(StateCounts {
                queued: count(StateFilter::Queued)?,
                running: count(StateFilter::Running)?,
                finished: count(StateFilter::Finished)?,
                cancelled: count(StateFilter::Cancelled)?,
            })
        })
    }

    fn running_jobs(&self) -> Result<Vec<JobId>, StoreError> {
        self.guarded("running_jobs", || {
            self.index_ids(
                "states index",
                &self.t.states,
                &[keys::state_code(StateFilter::Running)],
                9,
                None,
            )
            .collect()
        })
    }

    fn outbox_entry(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        self.guarded("outbox_entry", || self.read_outbox(id))
    }

    fn outbox_due(&self, until: Timestamp, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.guarded("outbox_due", || {
            let mut out = Vec::new();
            for k in self
                .t
                .outbox_due
                .range(..=keys::due(until, JobId(u64::MAX)))
                .keys()
                .take(limit)
            {
                let (_, id) = due_entry(&k.map_err(backend("outbox_due"))?)?;
                match self.read_outbox(id)? {
                    Some(e) => out.push(e),
                    None => {
                        return Err(keys::corrupt_key(
                            "outbox due index",
                            &keys::job(id),
                            "names a report the outbox does not have",
                        ))
                    }
                }
            }
            Ok(out)
        })
    }

    fn outbox_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.guarded("outbox_next_due", || {
            match self
                .t
                .outbox_due
                .first()
                .map_err(backend("outbox_next_due"))?
            {
                Some((k, _)) => Ok(Some(due_entry(&k)?.0)),
                None => Ok(None),
            }
        })
    }

    fn outbox_pending(&self) -> Result<u64, StoreError> {
        self.guarded("outbox_pending", || Ok(self.t.outbox_due.len() as u64))
    }

    fn record_delivery(
        &self,
        id: JobId,
        result: DeliveryTry,
        now: Timestamp,
    ) -> Result<OutboxEntry, StoreError> {
        self.write("record_delivery", |tx| {
            let k = keys::job(id);
            let mut rec: OutboxV1 = match tx.outbox.get(k)? {
                Some(v) => decode("outbox", &k, &v).or_abort()?,
                None => return abort(StoreError::NoReport(id)),
            };
            let old_next = rec.next;
            if !rec.apply(&result, now) {
                return rec.to_api(id).or_abort();
            }
            tx_outbox_put(tx, id, &rec, old_next)?;
            rec.to_api(id).or_abort()
        })
    }

    fn set_transcript(&self, id: JobId, transcript: AttemptTranscript) -> Result<(), StoreError> {
        let value = encode(&TranscriptV1 {
            v: RECORD_VERSION,
            attempt: transcript.attempt,
            lines: transcript.lines,
        });
        self.write("set_transcript", |tx| {
            if tx.jobs.get(keys::job(id))?.is_none() {
                return abort(StoreError::NotFound(id));
            }
            tx.transcripts.insert(&keys::job(id)[..], value.clone())?;
            Ok(())
        })
    }

    fn is_empty(&self) -> Result<bool, StoreError> {
        self.guarded("is_empty", || Ok(self.t.jobs.is_empty()))
    }

    fn key_fingerprint(&self) -> Result<Option<[u8; 32]>, StoreError> {
        self.guarded("key_fingerprint", || {
            let k = keys::META_KEY_FINGERPRINT;
            match self.t.meta.get(k).map_err(backend("key_fingerprint"))? {
                Some(v) => <[u8; 32]>::try_from(v.as_ref()).map(Some).map_err(|_| {
                    keys::corrupt_key("meta", k, format!("{} bytes, not 32", v.len()))
                }),
                None => Ok(None),
            }
        })
    }

    fn set_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<(), StoreError> {
        self.write("set_key_fingerprint", |tx| {
            tx.meta
                .insert(keys::META_KEY_FINGERPRINT, &fingerprint[..])?;
            Ok(())
        })
    }

    fn transcript(&self, id: JobId) -> Result<Option<AttemptTranscript>, StoreError> {
        self.guarded("transcript", || {
            let k = keys::job(id);
            match self.t.transcripts.get(k).map_err(backend("transcript"))? {
                Some(v) => Ok(Some(decode::<TranscriptV1>("transcript", &k, &v)?.to_api())),
                None => Ok(None),
            }
        })
    }

    fn refusal(&self, key: &RefusalKey) -> Result<Option<RefusalMemory>, StoreError> {
        self.guarded("refusal", || {
            let k = keys::refusal(key);
            match self.t.refusals.get(&k).map_err(backend("refusal"))? {
                Some(v) => Ok(Some(decode::<RefusalV1>("refusal", &k, &v)?.to_core(&k)?)),
                None => Ok(None),
            }
        })
    }

    fn record_refusal(
        &self,
        key: &RefusalKey,
        seen: &Sighting,
        now: Timestamp,
    ) -> Result<RefusalMemory, StoreError> {
        let k = keys::refusal(key);
        self.write("record_refusal", |tx| {
            let previous = match tx.refusals.get(&k)? {
                Some(v) => Some(
                    decode::<RefusalV1>("refusal", &k, &v)
                        .and_then(|r| r.to_core(&k))
                        .or_abort()?,
                ),
                None => None,
            };
            let memory = observe(previous.as_ref(), seen, now);
            tx.refusals
                .insert(&k, encode(&RefusalV1::from_core(&memory)))?;
            Ok(memory)
        })
    }

    fn pair_memory(&self, key: &PairKey) -> Result<Option<PairMemory>, StoreError> {
        self.guarded("pair_memory", || {
            let k = keys::pair(key);
            match self.t.pairs.get(&k).map_err(backend("pair_memory"))? {
                Some(v) => Ok(Some(decode::<PairV1>("pair", &k, &v)?.to_core())),
                None => Ok(None),
            }
        })
    }

    fn remember_pair(&self, key: &PairKey, memory: &PairMemory) -> Result<(), StoreError> {
        let k = keys::pair(key);
        self.write("remember_pair", |tx| {
            if let Some(v) = tx.pairs.get(&k)? {
                let kept = decode::<PairV1>("pair", &k, &v).or_abort()?;
                if kept.seen > memory.seen.0 {
                    return Ok(());
                }
            }
            tx.pairs.insert(&k, encode(&PairV1::from_core(memory)))?;
            Ok(())
        })
    }

    fn forget_pair(&self, key: &PairKey) -> Result<bool, StoreError> {
        let k = keys::pair(key);
        // Nothing to forget costs no write (and no flush). A memory written right after this
        // look stays, as if this forget had come first.
        let kept = self.guarded("forget_pair", || {
            self.t
                .pairs
                .contains_key(&k)
                .map_err(backend("forget_pair"))
        })?;
        if !kept {
            return Ok(false);
        }
        self.write("forget_pair", |tx| {
            let kept = tx.pairs.get(&k)?.is_some();
            tx.pairs.remove(&k)?;
            Ok(kept)
        })
    }

    fn walk(&self, id: JobId) -> Result<Walk, StoreError> {
        let k = keys::job(id);
        let rec: JobV1 = self.guarded("walk", || {
            match self.t.jobs.get(k).map_err(backend("get"))? {
                Some(v) => decode("job", &k, &v),
                None => Err(StoreError::NotFound(id)),
            }
        })?;
        Ok(plan::walk_of(&rec))
    }

    fn record_directory(
        &self,
        id: JobId,
        dir: &str,
        files: Vec<NewMember>,
        subdirs: Vec<String>,
        unique: Vec<(String, String)>,
        now: Timestamp,
    ) -> Result<Walk, StoreError> {
        self.write("record_directory", |tx| {
            let rec = tx_job(tx, id)?;
            match plan::directory(id, rec, dir, files.len(), &subdirs, &unique, now).or_abort()? {
                Listing::Known(walk) => Ok(walk),
                Listing::Record(plan, walk) => {
                    tx_write(tx, id, &plan, &files, now)?;
                    Ok(walk)
                }
            }
        })
    }

    fn record_made_dirs(&self, id: JobId, dirs: Vec<String>) -> Result<(), StoreError> {
        self.write("record_made_dirs", |tx| {
            match plan::made_dirs(tx_job(tx, id)?, &dirs) {
                Some(rec) => tx_put_job(tx, id, &rec),
                None => Ok(()),
            }
        })
    }

    fn create_watch(&self, w: NewWatch) -> Result<Watch, StoreError> {
        self.create_watch_(w)
    }

    fn watch(&self, id: WatchId) -> Result<Option<Watch>, StoreError> {
        self.watch_(id)
    }

    fn watches(&self, owner: Option<u32>) -> Result<Vec<Watch>, StoreError> {
        self.watches_(owner)
    }

    fn pause_watch(&self, id: WatchId, paused: bool) -> Result<Option<Watch>, StoreError> {
        self.pause_watch_(id, paused)
    }

    fn remove_watch(&self, id: WatchId) -> Result<bool, StoreError> {
        self.remove_watch_(id)
    }

    fn watch_checkpoint(
        &self,
        id: WatchId,
    ) -> Result<std::collections::BTreeMap<String, bftp_core::watch::Entry>, StoreError> {
        self.watch_checkpoint_(id)
    }

    fn record_poll(
        &self,
        id: WatchId,
        poll: PollRecord,
    ) -> Result<(Watch, Option<Job>), StoreError> {
        self.record_poll_(id, poll)
    }

    /// One node: every watch that exists is this node's.
    fn hold_watch(
        &self,
        id: WatchId,
        _node: &str,
        _now: Timestamp,
        _until: Timestamp,
    ) -> Result<bool, StoreError> {
        self.hold_watch_(id)
    }

    fn learn_host_limit(&self, limit: &HostLimit) -> Result<(), StoreError> {
        self.learn_limit(limit)
    }

    fn host_limits(&self) -> Result<Vec<HostLimit>, StoreError> {
        self.all_limits()
    }

    fn host_limit(&self, host: &str) -> Result<Option<HostLimit>, StoreError> {
        self.one_limit(host)
    }

    fn raise_host_limit(
        &self,
        seen: &HostLimit,
        to: Option<&HostLimit>,
    ) -> Result<bool, StoreError> {
        self.raise_limit(seen, to)
    }

    fn upkeep(&self) -> Option<&dyn Upkeep> {
        Some(self)
    }

    fn put_event(&self, event: NewEvent) -> Result<(Event, bool), StoreError> {
        self.put_event_now(event)
    }

    fn events_after(
        &self,
        after: u64,
        owner: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.read_events_after(after, owner, limit)
    }

    fn events_due(&self, until: Timestamp, limit: usize) -> Result<Vec<Event>, StoreError> {
        self.read_events_due(until, limit)
    }

    fn event_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.read_event_next_due()
    }

    fn record_event_delivery(
        &self,
        seq: u64,
        tries: Vec<(String, DeliveryTry)>,
        now: Timestamp,
    ) -> Result<Event, StoreError> {
        self.write_event_delivery(seq, tries, now)
    }

    fn events_of_job(&self, job: JobId) -> Result<Vec<Event>, StoreError> {
        self.read_events_of_job(job)
    }

    fn defer(
        &self,
        id: JobId,
        until: Timestamp,
        wait: Option<bftp_core::window::Wait>,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.defer_job(id, until, wait, now)
    }
}

/// A new job (`JobStore::submit`) inside a write transaction, `count` from
/// `plan::member_count`.
pub(super) fn tx_submit(tx: &Tx<'_>, job: &NewJob, count: u32) -> TxResult<Submitted> {
    if let Some(rk) = &job.request {
        if let Some(v) = tx.requests.get(rk.key_hash.0)? {
            let rec: RequestV1 = decode("request", &rk.key_hash.0, &v).or_abort()?;
            let existing = JobId(rec.job);
            if rec.fingerprint(&rk.key_hash.0).or_abort()? != rk.fingerprint {
                return abort(StoreError::RequestKeyConflict { job: existing });
            }
            let k = keys::job(existing);
            let Some(v) = tx.jobs.get(k)? else {
                return abort(keys::corrupt_key(
                    "request",
                    &rk.key_hash.0,
                    format!("names job {existing}, which does not exist"),
                ));
            };
            let rec: JobV1 = decode("job", &k, &v).or_abort()?;
            return Ok(Submitted::Existing(job_to_api(existing, &rec).or_abort()?));
        }
    }
    let id = match tx.meta.get(keys::META_NEXT_ID)? {
        Some(v) => JobId(keys::u64_value("meta", keys::META_NEXT_ID, &v).or_abort()?),
        None => return abort(keys::corrupt_key("meta", keys::META_NEXT_ID, "missing")),
    };
    tx.meta
        .insert(keys::META_NEXT_ID, &(id.0 + 1).to_be_bytes()[..])?;

    let mut plan = plan::submit(job, count);
    tx.owners
        .insert(&keys::owner(job.owner_uid, id)[..], EMPTY)?;
    if let Some(h) = &job.keyword_hash {
        tx.keywords.insert(&keys::keyword(h, id)[..], EMPTY)?;
    }
    tx_reindex(tx, id, None, &plan.state())?;
    if let Some(rk) = &job.request {
        tx.requests.insert(
            &rk.key_hash.0[..],
            encode(&RequestV1::new(&rk.fingerprint, id)),
        )?;
    }
    plan.rec.rk = job
        .request
        .as_ref()
        .map(|rk| crate::record::hex(&rk.key_hash.0));
    tx_write(tx, id, &plan, &job.members, job.created_at)?;
    Ok(Submitted::Created(job_to_api(id, &plan.rec).or_abort()?))
}

impl Upkeep for SledStore {
    fn removable_jobs(
        &self,
        now: Timestamp,
        keep: Keep,
        after: Option<JobId>,
        scan: usize,
    ) -> Result<(Vec<JobId>, Option<JobId>), StoreError> {
        self.scan_removable(now, keep, after, scan)
    }

    fn remove_jobs(
        &self,
        ids: &[JobId],
        now: Timestamp,
        keep: Keep,
        batch: usize,
    ) -> Result<u64, StoreError> {
        self.remove_removable(ids, now, keep, batch)
    }

    fn disk_size(&self) -> Result<Option<u64>, StoreError> {
        self.size_on_disk().map(Some)
    }

    fn space_for_new_work(&self) -> Result<(), StoreError> {
        // Asked before every file an attempt starts: a look that found plenty stands a while.
        let now = Instant::now();
        let mut until = self.roomy_until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_some_and(|u| now < u) {
            return Ok(());
        }
        *until = None;
        if let Some(free) = self.look_at_space("new work", true)? {
            *until = look_stands(free, self.min_free).map(|d| now + d);
        }
        Ok(())
    }

    fn backup(&self, dir: &Path) -> Result<BackupReport, StoreError> {
        self.backup_into(dir)
    }
}
