//! [`JobStore`] for [`PgStore`]: each call runs on the store's runtime (`PgStore::with`).

use super::sql::Sql;
use super::{id_of, pg, PgHostSlots, PgStore};
use crate::error::StoreError;
use crate::events::{Event, NewEvent};
use crate::types::{
    AttemptTranscript, DeliveryTry, HistoryEvent, Job, JobFilter, JobId, Member, MemberUpdate,
    NewJob, NewMember, NewWatch, OutboxEntry, PollRecord, StateCounts, Submitted, Walk, Watch,
    WatchId,
};
use crate::{Cluster, HostSlots, JobStore, LeaseCell, Upkeep};
use bftp_core::hostlimit::HostLimit;
use bftp_core::refusal::{RefusalKey, RefusalMemory, Sighting};
use bftp_core::route::{PairKey, PairMemory};
use bftp_core::{JobEvent, MemberState, Timestamp};
use std::sync::Arc;
use std::time::Duration;

impl JobStore for PgStore {
    fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        self.with(|i| async move { i.submit(job).await })
    }

    fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        self.with(|i| async move { i.get(id).await })
    }

    fn list_after(&self, filter: &JobFilter, after: Option<JobId>) -> Result<Vec<Job>, StoreError> {
        let filter = filter.clone();
        self.with(|i| async move { i.list_after(filter, after).await })
    }

    fn history(&self, id: JobId) -> Result<Vec<HistoryEvent>, StoreError> {
        self.with(|i| async move { i.history(id).await })
    }

    fn members(&self, id: JobId) -> Result<Vec<Member>, StoreError> {
        self.with(|i| async move { i.members(id).await })
    }

    fn members_page(&self, id: JobId, from: u32, limit: usize) -> Result<Vec<Member>, StoreError> {
        self.with(|i| async move { i.members_page(id, from, limit).await })
    }

    fn apply(
        &self,
        id: JobId,
        event: JobEvent,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        self.with(|i| async move { i.apply(id, event, now, detail).await })
    }

    fn settle_and_finish(
        &self,
        id: JobId,
        pending_become: MemberState,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        self.with(|i| async move { i.settle_and_finish(id, pending_become, now, detail).await })
    }

    fn freeze_members(
        &self,
        id: JobId,
        members: Vec<NewMember>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.with(|i| async move { i.freeze_members(id, members, now).await })
    }

    fn update_member(
        &self,
        id: JobId,
        index: u32,
        update: MemberUpdate,
        now: Timestamp,
    ) -> Result<Member, StoreError> {
        self.with(|i| async move { i.update_member(id, index, update, now).await })
    }

    fn append_history(&self, id: JobId, event: HistoryEvent) -> Result<(), StoreError> {
        self.with(|i| async move { i.append_history(id, event).await })
    }

    fn walk(&self, id: JobId) -> Result<Walk, StoreError> {
        self.with(|i| async move { i.walk(id).await })
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
        let dir = dir.to_owned();
        self.with(|i| async move {
            i.record_directory(id, dir, files, subdirs, unique, now)
                .await
        })
    }

    fn record_made_dirs(&self, id: JobId, dirs: Vec<String>) -> Result<(), StoreError> {
        self.with(|i| async move { i.record_made_dirs(id, dirs).await })
    }

    fn due(&self, until: Timestamp, limit: usize) -> Result<Vec<(Timestamp, JobId)>, StoreError> {
        self.with(|i| async move { i.due(until, limit).await })
    }

    fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|i| async move { i.next_due().await })
    }

    fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.with(|i| async move { i.count_by_state().await })
    }

    fn running_jobs(&self) -> Result<Vec<JobId>, StoreError> {
        self.with(|i| async move { i.running_jobs().await })
    }

    fn outbox_entry(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        self.with(|i| async move { i.outbox_entry(id).await })
    }

    fn outbox_due(&self, until: Timestamp, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.with(|i| async move { i.outbox_due(until, limit).await })
    }

    fn outbox_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|i| async move { i.outbox_next_due().await })
    }

    fn outbox_pending(&self) -> Result<u64, StoreError> {
        self.with(|i| async move { i.outbox_pending().await })
    }

    fn record_delivery(
        &self,
        id: JobId,
        result: DeliveryTry,
        now: Timestamp,
    ) -> Result<OutboxEntry, StoreError> {
        self.with(|i| async move { i.record_delivery(id, result, now).await })
    }

    fn set_transcript(&self, id: JobId, transcript: AttemptTranscript) -> Result<(), StoreError> {
        self.with(|i| async move { i.set_transcript(id, transcript).await })
    }

    fn transcript(&self, id: JobId) -> Result<Option<AttemptTranscript>, StoreError> {
        self.with(|i| async move { i.transcript(id).await })
    }

    fn is_empty(&self) -> Result<bool, StoreError> {
        self.with(|i| async move { i.is_empty().await })
    }

    fn key_fingerprint(&self) -> Result<Option<[u8; 32]>, StoreError> {
        self.with(|i| async move { i.key_fingerprint().await })
    }

    fn set_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<(), StoreError> {
        self.with(|i| async move { i.set_key_fingerprint(fingerprint).await })
    }

    fn adopt_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<[u8; 32], StoreError> {
        self.with(|i| async move { i.adopt_key_fingerprint(fingerprint).await })
    }

    fn refusal(&self, key: &RefusalKey) -> Result<Option<RefusalMemory>, StoreError> {
        let key = key.clone();
        self.with(|i| async move { i.refusal(key).await })
    }

    fn record_refusal(
        &self,
        key: &RefusalKey,
        seen: &Sighting,
        now: Timestamp,
    ) -> Result<RefusalMemory, StoreError> {
        let (key, seen) = (key.clone(), seen.clone());
        self.with(|i| async move { i.record_refusal(key, seen, now).await })
    }

    fn pair_memory(&self, key: &PairKey) -> Result<Option<PairMemory>, StoreError> {
        let key = key.clone();
        self.with(|i| async move { i.pair_memory(key).await })
    }

    fn remember_pair(&self, key: &PairKey, memory: &PairMemory) -> Result<(), StoreError> {
        let (key, memory) = (key.clone(), memory.clone());
        self.with(|i| async move { i.remember_pair(key, memory).await })
    }

    fn forget_pair(&self, key: &PairKey) -> Result<bool, StoreError> {
        let key = key.clone();
        self.with(|i| async move { i.forget_pair(key).await })
    }

    fn create_watch(&self, w: NewWatch) -> Result<Watch, StoreError> {
        self.with(|i| async move { i.create_watch(w).await })
    }

    fn watch(&self, id: WatchId) -> Result<Option<Watch>, StoreError> {
        self.with(|i| async move { i.watch(id).await })
    }

    fn watches(&self, owner: Option<u32>) -> Result<Vec<Watch>, StoreError> {
        self.with(|i| async move { i.watches(owner).await })
    }

    fn pause_watch(&self, id: WatchId, paused: bool) -> Result<Option<Watch>, StoreError> {
        self.with(|i| async move { i.pause_watch(id, paused).await })
    }

    fn remove_watch(&self, id: WatchId) -> Result<bool, StoreError> {
        self.with(|i| async move { i.remove_watch(id).await })
    }

    fn watch_checkpoint(
        &self,
        id: WatchId,
    ) -> Result<std::collections::BTreeMap<String, bftp_core::watch::Entry>, StoreError> {
        self.with(|i| async move { i.watch_checkpoint(id).await })
    }

    /// Refused (`LeaseLost`) unless this store's node holds the watch.
    fn record_poll(
        &self,
        id: WatchId,
        poll: PollRecord,
    ) -> Result<(Watch, Option<Job>), StoreError> {
        self.with(|i| async move { i.record_poll(id, poll).await })
    }

    fn hold_watch(
        &self,
        id: WatchId,
        node: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let node = node.to_owned();
        self.with(|i| async move { i.hold_watch(id, node, now, until).await })
    }

    fn put_event(&self, event: NewEvent) -> Result<(Event, bool), StoreError> {
        self.with(|i| async move { i.put_event(event).await })
    }

    fn events_after(
        &self,
        after: u64,
        owner: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.with(|i| async move { i.events_after(after, owner, limit).await })
    }

    fn events_due(&self, until: Timestamp, limit: usize) -> Result<Vec<Event>, StoreError> {
        self.with(|i| async move { i.events_due(until, limit).await })
    }

    fn event_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|i| async move { i.event_next_due().await })
    }

    fn record_event_delivery(
        &self,
        seq: u64,
        tries: Vec<(String, DeliveryTry)>,
        now: Timestamp,
    ) -> Result<Event, StoreError> {
        self.with(|i| async move { i.record_event_delivery(seq, tries, now).await })
    }

    fn events_of_job(&self, job: JobId) -> Result<Vec<Event>, StoreError> {
        self.with(|i| async move { i.events_of_job(job).await })
    }

    fn learn_host_limit(&self, limit: &HostLimit) -> Result<(), StoreError> {
        let limit = limit.clone();
        self.with(|i| async move { i.learn_host_limit(limit).await })
    }

    fn host_limits(&self) -> Result<Vec<HostLimit>, StoreError> {
        self.with(|i| async move { i.host_limits().await })
    }

    fn host_limit(&self, host: &str) -> Result<Option<HostLimit>, StoreError> {
        let host = host.to_owned();
        self.with(|i| async move { i.host_limit(host).await })
    }

    fn raise_host_limit(
        &self,
        seen: &HostLimit,
        to: Option<&HostLimit>,
    ) -> Result<bool, StoreError> {
        let (seen, to) = (seen.clone(), to.cloned());
        self.with(|i| async move { i.raise_host_limit(seen, to).await })
    }

    fn upkeep(&self) -> Option<&dyn Upkeep> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn Cluster> {
        Some(self)
    }

    fn defer(
        &self,
        id: JobId,
        until: Timestamp,
        wait: Option<bftp_core::window::Wait>,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.with(|i| async move { i.defer(id, until, wait, now).await })
    }
}

impl Upkeep for PgStore {
    fn removable_jobs(
        &self,
        now: Timestamp,
        keep: bftp_core::retention::Keep,
        after: Option<JobId>,
        scan: usize,
    ) -> Result<(Vec<JobId>, Option<JobId>), StoreError> {
        self.with(|i| async move { i.removable_jobs(now, keep, after, scan).await })
    }

    fn remove_jobs(
        &self,
        ids: &[JobId],
        now: Timestamp,
        keep: bftp_core::retention::Keep,
        batch: usize,
    ) -> Result<u64, StoreError> {
        let ids = ids.to_vec();
        self.with(|i| async move { i.remove_jobs(ids, now, keep, batch).await })
    }

    /// `pg_dump` of the database into `dir` (`pg_store/backup.rs`).
    fn backup(&self, dir: &std::path::Path) -> Result<crate::BackupReport, StoreError> {
        self.dump_into(dir)
    }

    /// The database's disk is the database server's to watch: always room here.
    fn space_for_new_work(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The database's size (`pg_database_size`): the whole database, bftp's tables and all.
    fn disk_size(&self) -> Result<Option<u64>, StoreError> {
        self.with(|i| async move {
            let c = i.client("disk_size").await?;
            let size: i64 = c
                .query_one("SELECT pg_database_size(current_database())", &[])
                .await
                .map_err(pg("disk_size"))?
                .get(0);
            Ok(Some(size.max(0) as u64))
        })
    }
}

impl Cluster for PgStore {
    fn lost_leases(&self) -> Vec<JobId> {
        std::mem::take(&mut *self.inner.lost.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn cancelled_elsewhere(&self) -> Vec<JobId> {
        std::mem::take(
            &mut *self
                .inner
                .cancelled
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    fn lease(&self, id: JobId) -> Option<Arc<LeaseCell>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .map(|h| h.cell.clone())
    }

    fn node(&self) -> String {
        self.inner.node.clone()
    }

    fn abandon(&self, id: JobId) {
        let mut held = self.inner.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&id) {
            h.lost = true;
            h.cell.lose();
        }
    }

    fn poll_interval(&self) -> Duration {
        self.inner.poll
    }

    fn host_slots(&self) -> Option<Arc<dyn HostSlots>> {
        let rt = self.rt.as_ref()?.handle().clone();
        Some(Arc::new(PgHostSlots {
            inner: self.inner.clone(),
            rt,
        }))
    }

    fn job_node(&self, id: JobId) -> Result<Option<String>, StoreError> {
        self.with(|i| async move {
            let c = i.client("job_node").await?;
            let row = c
                .maybe_row(
                    "job_node",
                    "SELECT lease_node FROM jobs WHERE id = $1 AND state = 2",
                    &[&id_of(id)],
                )
                .await?;
            Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
        })
    }
}
