//! Reads outside transactions: the full check of every record, jobs, indexes, reports.

use super::members::page_first;
use super::pages;
use super::{SledStore, VerifyReport};
use crate::error::{backend, StoreError};
use crate::keys;
use crate::record::{
    decode, job_to_api, HistoryV1, JobV1, MemberV1, OutboxV1, PairV1, RefusalV1, RequestV1,
    TranscriptV1, WatchFileV1, WatchV1,
};
use crate::types::{Job, JobId, OutboxEntry};
use bftp_core::Timestamp;
use sled::IVec;

impl SledStore {
    /// Reads and decodes every record and index key. Damage is `Corrupt`, `Backend` or
    /// `Panicked`, never a panic.
    pub fn verify(&self) -> Result<VerifyReport, StoreError> {
        self.guarded("verify", || {
            let mut r = VerifyReport::default();
            for kv in self.t.jobs.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                let id = keys::trailing_id("job", &k, 8)?;
                job_to_api(id, &decode::<JobV1>("job", &k, &v)?)?;
                r.jobs += 1;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.members.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                page_first(&k)?;
                for record in pages::decode(&k, &v)? {
                    if !pages::is_hole(record) {
                        decode::<MemberV1>("member", &k, record)?;
                        r.members += 1;
                    }
                }
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.history.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                decode::<HistoryV1>("history", &k, &v)?;
                r.history += 1;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.requests.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                decode::<RequestV1>("request", &k, &v)?.fingerprint(&k)?;
                r.requests += 1;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.outbox.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                let id = keys::trailing_id("outbox", &k, 8)?;
                decode::<OutboxV1>("outbox", &k, &v)?.to_api(id)?;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.transcripts.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                decode::<TranscriptV1>("transcript", &k, &v)?;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.refusals.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                decode::<RefusalV1>("refusal", &k, &v)?.to_core(&k)?;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.pairs.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                decode::<PairV1>("pair", &k, &v)?;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.watches.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                let id = crate::types::WatchId(keys::trailing_id("watch", &k, 8)?.0);
                decode::<WatchV1>("watch", &k, &v)?.to_api(id)?;
                r.bytes += (k.len() + v.len()) as u64;
            }
            for kv in self.t.watch_files.iter() {
                let (k, v) = kv.map_err(backend("verify"))?;
                keys::watch_file_path(&k)?;
                decode::<WatchFileV1>("watch file", &k, &v)?;
                r.bytes += (k.len() + v.len()) as u64;
            }
            r.bytes += self.verify_events()?;
            self.verify_limits(&mut r)?;
            let indexes: [(&'static str, &sled::Tree, usize); 5] = [
                ("owners index", &self.t.owners, 12),
                ("keywords index", &self.t.keywords, 40),
                ("states index", &self.t.states, 9),
                ("due index", &self.t.due, 16),
                ("outbox due index", &self.t.outbox_due, 16),
            ];
            for (what, tree, len) in indexes {
                for k in tree.iter().keys() {
                    let k = k.map_err(backend("verify"))?;
                    keys::trailing_id(what, &k, len)?;
                    r.index_entries += 1;
                    r.bytes += k.len() as u64;
                }
            }
            Ok(r)
        })
    }

    pub(super) fn read_job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let k = keys::job(id);
        match self.t.jobs.get(k).map_err(backend("get"))? {
            Some(v) => Ok(Some(job_to_api(id, &decode("job", &k, &v)?)?)),
            None => Ok(None),
        }
    }

    /// The ids in an index under `prefix`, ascending, those after `after` only.
    pub(super) fn index_ids(
        &self,
        what: &'static str,
        tree: &sled::Tree,
        prefix: &[u8],
        key_len: usize,
        after: Option<JobId>,
    ) -> Box<dyn Iterator<Item = Result<JobId, StoreError>>> {
        let Some(start) = first_after(after) else {
            return Box::new(std::iter::empty());
        };
        let prefix = prefix.to_vec();
        let from = [&prefix[..], &start.0.to_be_bytes()].concat();
        Box::new(
            tree.range(from..)
                .keys()
                .take_while(move |k| k.as_ref().map_or(true, |k| k.starts_with(&prefix)))
                .map(move |k| {
                    let k = k.map_err(backend("list"))?;
                    keys::trailing_id(what, &k, key_len)
                }),
        )
    }

    pub(super) fn require_job(&self, id: JobId) -> Result<(), StoreError> {
        if self
            .t
            .jobs
            .contains_key(keys::job(id))
            .map_err(backend("get"))?
        {
            Ok(())
        } else {
            Err(StoreError::NotFound(id))
        }
    }

    pub(super) fn read_outbox(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        let k = keys::job(id);
        match self.t.outbox.get(k).map_err(backend("outbox"))? {
            Some(v) => Ok(Some(decode::<OutboxV1>("outbox", &k, &v)?.to_api(id)?)),
            None => Ok(None),
        }
    }
}

/// The smallest id greater than `after`; `None` when there is none.
pub(super) fn first_after(after: Option<JobId>) -> Option<JobId> {
    match after {
        None => Some(JobId(0)),
        Some(a) => a.0.checked_add(1).map(JobId),
    }
}

pub(super) fn due_entry(k: &IVec) -> Result<(Timestamp, JobId), StoreError> {
    let id = keys::trailing_id("due index", k, 16)?;
    let at = keys::u64_value("due index", k, &k[..8])?;
    Ok((Timestamp(at), id))
}
