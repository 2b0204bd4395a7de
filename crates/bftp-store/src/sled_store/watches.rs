//! Watches (RULES.md §15) on sled: the `watches` tree (one record per watch) and the
//! `watch_files` tree (one checkpoint entry per watch and path), both written through
//! [`SledStore::write`] so the content digest covers them. One node: every watch is held.

use std::collections::BTreeMap;

use super::queue::tx_submit;
use super::OrAbort;
use super::{abort, SledStore, Tx, TxResult};
use crate::error::{backend, StoreError};
use crate::keys;
use crate::plan;
use crate::record::{decode, encode, MemberV1, WatchFileV1, WatchStatusV1, WatchV1};
use crate::types::{Job, JobId, NewWatch, PollRecord, Watch, WatchId};
use bftp_core::watch::Entry;
use bftp_core::MemberState;

/// The checkpoint rule in a member's transaction (`plan::checkpoint_key`): a member of a
/// watch's job (`watch`) that reached an outcome from `before` settles its entry, when the
/// entry still holds the content the member copied.
pub(super) fn tx_mark(
    tx: &Tx<'_>,
    watch: Option<u64>,
    before: MemberState,
    m: &MemberV1,
) -> TxResult<()> {
    let Some((w, path)) = plan::checkpoint_key(watch, before, m) else {
        return Ok(());
    };
    let k = keys::watch_file(w, path);
    let entry = match tx.watch_files.get(&k)? {
        Some(v) => Some(
            decode::<WatchFileV1>("watch file", &k, &v)
                .or_abort()?
                .to_core(),
        ),
        None => None,
    };
    if let Some(e) = plan::checkpoint_mark(entry.as_ref(), m) {
        tx.watch_files
            .insert(&k, encode(&WatchFileV1::from_core(&e)))?;
    }
    Ok(())
}

fn tx_watch(tx: &Tx<'_>, id: WatchId) -> TxResult<Option<WatchV1>> {
    let k = keys::watch(id);
    match tx.watches.get(k)? {
        Some(v) => Ok(Some(decode("watch", &k, &v).or_abort()?)),
        None => Ok(None),
    }
}

fn tx_put_watch(tx: &Tx<'_>, id: WatchId, rec: &WatchV1) -> TxResult<()> {
    tx.watches.insert(&keys::watch(id)[..], encode(rec))?;
    Ok(())
}

impl SledStore {
    pub(super) fn create_watch_(&self, w: NewWatch) -> Result<Watch, StoreError> {
        let rec = WatchV1::new(&w);
        self.write("create_watch", |tx| {
            let id = match tx.meta.get(keys::META_NEXT_WATCH_ID)? {
                Some(v) => {
                    WatchId(keys::u64_value("meta", keys::META_NEXT_WATCH_ID, &v).or_abort()?)
                }
                None => WatchId(1),
            };
            tx.meta
                .insert(keys::META_NEXT_WATCH_ID, &(id.0 + 1).to_be_bytes()[..])?;
            tx_put_watch(tx, id, &rec)?;
            rec.to_api(id).or_abort()
        })
    }

    pub(super) fn watch_(&self, id: WatchId) -> Result<Option<Watch>, StoreError> {
        self.guarded("watch", || {
            let k = keys::watch(id);
            match self.t.watches.get(k).map_err(backend("watch"))? {
                Some(v) => Ok(Some(decode::<WatchV1>("watch", &k, &v)?.to_api(id)?)),
                None => Ok(None),
            }
        })
    }

    pub(super) fn watches_(&self, owner: Option<u32>) -> Result<Vec<Watch>, StoreError> {
        self.guarded("watches", || {
            let mut out = Vec::new();
            for kv in self.t.watches.iter() {
                let (k, v) = kv.map_err(backend("watches"))?;
                let id = WatchId(keys::trailing_id("watch", &k, 8)?.0);
                let rec: WatchV1 = decode("watch", &k, &v)?;
                if owner.is_none_or(|o| o == rec.owner) {
                    out.push(rec.to_api(id)?);
                }
            }
            Ok(out)
        })
    }

    pub(super) fn pause_watch_(
        &self,
        id: WatchId,
        paused: bool,
    ) -> Result<Option<Watch>, StoreError> {
        self.write("pause_watch", |tx| {
            let Some(mut rec) = tx_watch(tx, id)? else {
                return Ok(None);
            };
            if rec.paused != paused {
                rec.paused = paused;
                tx_put_watch(tx, id, &rec)?;
            }
            Ok(Some(rec.to_api(id).or_abort()?))
        })
    }

    /// The keys of a watch's checkpoint entries, as the tree holds them now.
    fn checkpoint_keys(&self, id: WatchId) -> Result<Vec<sled::IVec>, StoreError> {
        self.t
            .watch_files
            .scan_prefix(keys::watch(id))
            .keys()
            .map(|k| k.map_err(backend("remove_watch")))
            .collect()
    }

    pub(super) fn remove_watch_(&self, id: WatchId) -> Result<bool, StoreError> {
        // A transaction cannot scan: the entries are listed first and removed with the watch;
        // any a poll wrote in between go in a second transaction (no poll writes once the
        // watch is gone).
        let listed = self.guarded("remove_watch", || self.checkpoint_keys(id))?;
        let existed = self.write("remove_watch", |tx| {
            let existed = tx.watches.get(keys::watch(id))?.is_some();
            tx.watches.remove(&keys::watch(id))?;
            for k in &listed {
                tx.watch_files.remove(k)?;
            }
            Ok(existed)
        })?;
        let late = self.guarded("remove_watch", || self.checkpoint_keys(id))?;
        if !late.is_empty() {
            self.write("remove_watch", |tx| {
                for k in &late {
                    tx.watch_files.remove(k)?;
                }
                Ok(())
            })?;
        }
        Ok(existed)
    }

    pub(super) fn watch_checkpoint_(
        &self,
        id: WatchId,
    ) -> Result<BTreeMap<String, Entry>, StoreError> {
        self.guarded("watch_checkpoint", || {
            let mut out = BTreeMap::new();
            for kv in self.t.watch_files.scan_prefix(keys::watch(id)) {
                let (k, v) = kv.map_err(backend("watch_checkpoint"))?;
                let path = keys::watch_file_path(&k)?;
                let rec: WatchFileV1 = decode("watch file", &k, &v)?;
                out.insert(path, rec.to_core());
            }
            Ok(out)
        })
    }

    pub(super) fn record_poll_(
        &self,
        id: WatchId,
        poll: PollRecord,
    ) -> Result<(Watch, Option<Job>), StoreError> {
        let PollRecord {
            status,
            put,
            prune,
            job,
        } = poll;
        let job = job.map(|mut j| {
            j.watch = Some(id);
            j
        });
        let count = match &job {
            Some(j) => Some(plan::member_count(j.members.len())?),
            None => None,
        };
        let put: Vec<(Vec<u8>, Vec<u8>)> = put
            .iter()
            .map(|(p, e)| (keys::watch_file(id, p), encode(&WatchFileV1::from_core(e))))
            .collect();
        self.write("record_poll", |tx| {
            let Some(mut rec) = tx_watch(tx, id)? else {
                return abort(StoreError::WatchNotFound(id));
            };
            for p in &prune {
                tx.watch_files.remove(&keys::watch_file(id, p))?;
            }
            for (k, v) in &put {
                tx.watch_files.insert(k, v.clone())?;
            }
            let made = match (&job, count) {
                (Some(j), Some(n)) => Some(tx_submit(tx, j, n)?.into_job()),
                _ => None,
            };
            let kept = rec
                .status
                .jobs
                .iter()
                .copied()
                .map(JobId)
                .collect::<Vec<_>>();
            let status = plan::polled(&kept, status.clone(), made.as_ref().map(|j| j.id));
            rec.status = WatchStatusV1::from_api(&status);
            tx_put_watch(tx, id, &rec)?;
            Ok((rec.to_api(id).or_abort()?, made))
        })
    }

    pub(super) fn hold_watch_(&self, id: WatchId) -> Result<bool, StoreError> {
        self.guarded("hold_watch", || {
            self.t
                .watches
                .contains_key(keys::watch(id))
                .map_err(backend("hold_watch"))
        })
    }
}
