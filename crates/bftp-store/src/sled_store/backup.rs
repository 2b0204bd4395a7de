//! A consistent copy of a running store (`Upkeep::backup`).
//!
//! Every write of the store is one transaction taken under the read side of `backup_lock`;
//! the copy takes the write side, so it sees the store between two transactions: every
//! entry of every tree, the commit counter and the content digest together. It writes them
//! into a new sled database in another directory, flushes and fsyncs it, and gives it a
//! watermark at the copied commit, so the copy opens as any store does (magic, schema,
//! watermark and digest checked). Writers wait while the copy is taken (about a second per
//! 20,000 jobs); readers do not.

use std::path::Path;

use super::open::open_db;
use super::{SledStore, TREES};
use crate::error::{backend, StoreError};
use crate::files::{self, Watermark};
use crate::keys;

/// What a backup copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupReport {
    pub jobs: u64,
    /// Entries of every tree, `meta` included.
    pub entries: u64,
    /// The commit the copy ends at.
    pub seq: u64,
}

impl SledStore {
    pub(super) fn backup_into(&self, dest: &Path) -> Result<BackupReport, StoreError> {
        let io = |op: &'static str| {
            let path = dest.to_path_buf();
            move |source| StoreError::Io { op, path, source }
        };
        match std::fs::read_dir(dest) {
            Ok(mut it) => {
                if it.next().is_some() {
                    return Err(StoreError::NotAStore {
                        path: dest.to_path_buf(),
                        found: "it is not empty: a backup goes into a new or empty directory"
                            .into(),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("inspect the backup directory")(e)),
        }
        files::create_dir(dest)?;
        let config = sled::Config::new().path(dest).cache_capacity(8 << 20);
        let copy = open_db(&config, dest)?;
        let mut report = BackupReport::default();
        {
            let _writers_wait = self.backup_lock.write().unwrap_or_else(|p| p.into_inner());
            for (name, tree) in TREES.iter().zip(self.t.all()) {
                let target = copy.open_tree(name).map_err(backend("backup"))?;
                let mut batch = sled::Batch::default();
                let mut n = 0;
                for kv in tree.iter() {
                    let (k, v) = kv.map_err(backend("backup"))?;
                    batch.insert(k, v);
                    n += 1;
                    if n % 4096 == 0 {
                        target
                            .apply_batch(std::mem::take(&mut batch))
                            .map_err(backend("backup"))?;
                    }
                }
                target.apply_batch(batch).map_err(backend("backup"))?;
                report.entries += n;
                if *name == "jobs" {
                    report.jobs = n;
                }
            }
            let seq = self
                .t
                .meta
                .get(keys::META_SEQ)
                .map_err(backend("backup"))?
                .ok_or_else(|| keys::corrupt_key("meta", keys::META_SEQ, "missing"))?;
            report.seq = keys::u64_value("meta", keys::META_SEQ, &seq)?;
        }
        copy.flush().map_err(backend("backup"))?;
        drop(copy);
        files::sync_file(&dest.join("db"))?;
        files::sync_file(&dest.join("conf"))?;
        if dest.join("blobs").exists() {
            files::sync_dir(&dest.join("blobs"))?;
        }
        files::sync_dir(dest)?;
        Watermark::establish(dest, report.seq)?;
        Ok(report)
    }
}
