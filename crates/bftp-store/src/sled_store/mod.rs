//! [`SledStore`]: the [`JobStore`](crate::JobStore) of a single daemon, on sled 0.34.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sled::transaction::{
    ConflictableTransactionError, ConflictableTransactionResult, TransactionalTree,
    UnabortableTransactionError,
};
use sled::IVec;

use crate::digest::Digest;
use crate::durable::GroupCommit;
use crate::error::{backend, StoreError};

mod backup;
mod events;
mod gates;
mod hostlimits;
mod members;
mod open;
mod pages;
mod queue;
mod reads;
mod retention;
mod watches;
mod write;

pub use backup::BackupReport;

/// The schema version this code reads and writes (kept in the `meta` tree): 2, members in
/// pages (`pages.rs`). A store of schema 1 (one entry per member) is upgraded at open.
pub const SCHEMA_VERSION: u32 = 2;

/// Never reorder: a tree's position is hashed into the content digest of its entries.
const TREES: [&str; 21] = [
    "meta",
    "jobs",
    "members",
    "history",
    "requests",
    "owners",
    "keywords",
    "states",
    "due",
    "outbox",
    "outbox_due",
    "transcripts",
    "refusals",
    "pairs",
    "watches",
    "watch_files",
    "events",
    "event_ids",
    "event_due",
    "event_jobs",
    "host_limits",
];

#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// sled's page cache. A soft limit: sled's resident memory is a multiple of it. Measured
    /// with 100,000 queued jobs, a process that wrote them holds 96/110/136 MiB RSS at
    /// 8/16/32 MiB (`examples/durability_bench.rs`); the daemon must stay under 150 MiB.
    pub cache_capacity_bytes: u64,
    /// Also decode every record at open ([`SledStore::verify`]), so a record this code cannot
    /// read shows at start rather than mid-run. Off by default: sled keeps what the scan
    /// read resident (about 110 MiB for 100,000 jobs) and 100,000 jobs take about 3 s more.
    /// (Every open reads every entry once anyway, for the content digest, on an instance of
    /// sled it then closes: 2 s for 100,000 jobs, 120 MiB at the peak, 44 MiB after.)
    pub verify_on_open: bool,
    /// How often at most the watermark file is rewritten (one extra fdatasync each time).
    pub watermark_interval: Duration,
    /// Free bytes kept on the store's filesystem: new work (a submit, a membership) is
    /// refused (`DiskFull`) below this, every other write below half of it, so the storage
    /// engine itself never meets a full disk (sled 0.34 cannot recover from a failed write
    /// without a restart). 0 turns the reserve off.
    pub min_free_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_capacity_bytes: 16 << 20,
            verify_on_open: false,
            watermark_interval: Duration::from_secs(1),
            min_free_bytes: 64 << 20,
        }
    }
}

/// What [`SledStore::verify`] read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub jobs: u64,
    pub members: u64,
    pub history: u64,
    pub requests: u64,
    pub index_entries: u64,
    /// Keys and values, in bytes.
    pub bytes: u64,
}

struct Trees {
    meta: sled::Tree,
    jobs: sled::Tree,
    members: sled::Tree,
    history: sled::Tree,
    requests: sled::Tree,
    owners: sled::Tree,
    keywords: sled::Tree,
    states: sled::Tree,
    due: sled::Tree,
    outbox: sled::Tree,
    outbox_due: sled::Tree,
    transcripts: sled::Tree,
    refusals: sled::Tree,
    /// Pairs of servers that refused the third party (`bftp_core::route::PairMemory`).
    pairs: sled::Tree,
    /// Watches (RULES.md §15).
    watches: sled::Tree,
    /// Watches' checkpoints: an entry per watch and path.
    watch_files: sled::Tree,
    /// The event log (`events.rs`): an event per sequence number.
    events: sled::Tree,
    /// Event id -> sequence number: an id is written once.
    event_ids: sled::Tree,
    /// Events due for delivery: (due, seq).
    event_due: sled::Tree,
    /// A job's events: (job, seq), so that retention removes them with the job.
    event_jobs: sled::Tree,
    /// Limits learned from the servers, per host (`hostlimits.rs`).
    host_limits: sled::Tree,
}

impl Trees {
    /// Every tree, in [`TREES`] order.
    fn all(&self) -> [&sled::Tree; 21] {
        [
            &self.meta,
            &self.jobs,
            &self.members,
            &self.history,
            &self.requests,
            &self.owners,
            &self.keywords,
            &self.states,
            &self.due,
            &self.outbox,
            &self.outbox_due,
            &self.transcripts,
            &self.refusals,
            &self.pairs,
            &self.watches,
            &self.watch_files,
            &self.events,
            &self.event_ids,
            &self.event_due,
            &self.event_jobs,
            &self.host_limits,
        ]
    }

    /// The content digest recomputed from every entry of every tree but `meta`.
    fn content_digest(&self) -> Result<Digest, StoreError> {
        let mut d = Digest::default();
        for (id, tree) in self.all().into_iter().enumerate().skip(1) {
            for kv in tree.iter() {
                let (k, v) = kv.map_err(backend("open"))?;
                d.toggle(id as u8, &k, &v);
            }
        }
        Ok(d)
    }
}

/// The trees inside one transaction. Every tree but `meta` is written through [`TxTree`], which
/// keeps the content digest current.
struct Tx<'a> {
    meta: &'a TransactionalTree,
    jobs: TxTree<'a>,
    members: TxTree<'a>,
    history: TxTree<'a>,
    requests: TxTree<'a>,
    owners: TxTree<'a>,
    keywords: TxTree<'a>,
    states: TxTree<'a>,
    due: TxTree<'a>,
    outbox: TxTree<'a>,
    outbox_due: TxTree<'a>,
    transcripts: TxTree<'a>,
    refusals: TxTree<'a>,
    pairs: TxTree<'a>,
    watches: TxTree<'a>,
    watch_files: TxTree<'a>,
    events: TxTree<'a>,
    event_ids: TxTree<'a>,
    event_due: TxTree<'a>,
    event_jobs: TxTree<'a>,
    host_limits: TxTree<'a>,
}

/// One tree in a transaction; its writes toggle their entries in the transaction's digest.
struct TxTree<'a> {
    tree: &'a TransactionalTree,
    /// The tree's position in [`TREES`], hashed into each of its entries.
    id: u8,
    digest: &'a Cell<Digest>,
}

type TxOp<T> = Result<T, UnabortableTransactionError>;

impl TxTree<'_> {
    fn get(&self, key: impl AsRef<[u8]>) -> TxOp<Option<IVec>> {
        self.tree.get(key)
    }

    fn insert(&self, key: &[u8], value: impl Into<IVec>) -> TxOp<()> {
        let value = value.into();
        let old = self.tree.insert(key, value.clone())?;
        let mut d = self.digest.get();
        if let Some(old) = old {
            d.toggle(self.id, key, &old);
        }
        d.toggle(self.id, key, &value);
        self.digest.set(d);
        Ok(())
    }

    fn remove(&self, key: &[u8]) -> TxOp<()> {
        if let Some(old) = self.tree.remove(key)? {
            let mut d = self.digest.get();
            d.toggle(self.id, key, &old);
            self.digest.set(d);
        }
        Ok(())
    }
}

const EMPTY: &[u8] = &[];

type TxResult<T> = ConflictableTransactionResult<T, StoreError>;

fn abort<T>(e: StoreError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

trait OrAbort<T> {
    fn or_abort(self) -> TxResult<T>;
}

impl<T> OrAbort<T> for Result<T, StoreError> {
    fn or_abort(self) -> TxResult<T> {
        self.map_err(ConflictableTransactionError::Abort)
    }
}

/// The store of one daemon: a sled database in a directory of its own.
///
/// Every write is one sled transaction, acknowledged only once durable (group commit, see
/// `durable.rs`). sled transactions take a process-wide lock: keep them short.
pub struct SledStore {
    dir: PathBuf,
    db: sled::Db,
    t: Trees,
    commit: GroupCommit,
    min_free: u64,
    /// Until when the last look at the disk for new work stands (see [`look_stands`]).
    roomy_until: std::sync::Mutex<Option<Instant>>,
    /// Writes hold the read side around their transaction; a backup holds the write side
    /// while it copies, so it sees the store between two transactions.
    backup_lock: std::sync::RwLock<()>,
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn damaged(dir: &Path, reason: impl Into<String>) -> StoreError {
    StoreError::Damaged {
        path: dir.to_path_buf(),
        reason: reason.into(),
    }
}

/// Runs `f`, turning a panic of the storage engine into `Err(message)`.
fn no_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| crate::panic_message(&*p))
}

impl SledStore {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of group-commit flushes (flush + fsync) done since open.
    pub fn flush_count(&self) -> u64 {
        self.commit.flushes()
    }

    /// Size of the database on disk, as sled counts it.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        self.guarded("size_on_disk", || {
            self.db.size_on_disk().map_err(backend("size_on_disk"))
        })
    }

    /// Runs `f`; a panic inside sled becomes `Panicked` and poisons the store for writes.
    fn guarded<R>(
        &self,
        op: &'static str,
        f: impl FnOnce() -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        match no_panic(f) {
            Ok(r) => r,
            Err(message) => {
                tracing::error!(op, %message, "storage engine panicked; refusing further writes");
                self.commit.poison(format!("{op} panicked: {message}"));
                Err(StoreError::Panicked { op, message })
            }
        }
    }

    /// Refuses `op` when the disk is below the reserve (`new_work`) or below half of it.
    /// A filesystem that cannot say how full it is counts as having room.
    fn check_space(&self, op: &'static str, new_work: bool) -> Result<(), StoreError> {
        self.look_at_space(op, new_work).map(|_| ())
    }

    /// [`Self::check_space`], with the bytes free where the filesystem said.
    fn look_at_space(&self, op: &'static str, new_work: bool) -> Result<Option<u64>, StoreError> {
        let reserve = if new_work {
            self.min_free
        } else {
            self.min_free / 2
        };
        if reserve == 0 {
            return Ok(None);
        }
        match fs2::available_space(&self.dir) {
            Ok(free) if free < reserve => Err(StoreError::DiskFull {
                op,
                path: self.dir.clone(),
                free,
                reserve,
            }),
            Ok(free) => Ok(Some(free)),
            Err(_) => Ok(None),
        }
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // Last flush and the final watermark, before sled itself closes.
        self.commit.shutdown();
    }
}

/// How long a look at the store's disk that found `free` bytes (with `reserve` to keep)
/// stands for the next files an attempt starts: with more than twice the reserve free, a
/// quarter second; nearer the reserve, none (every file start looks). A disk filling from
/// twice the reserve to under it within the quarter second lets a few more files start; they
/// are recorded, as the file in flight always is: a result's write keeps looking every time,
/// and is refused only below half the reserve.
fn look_stands(free: u64, reserve: u64) -> Option<Duration> {
    (free / 2 > reserve).then_some(Duration::from_millis(250))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_at_the_disk_stands_only_far_from_the_reserve() {
        const MIB: u64 = 1 << 20;
        let quarter = Some(Duration::from_millis(250));
        for (free, reserve, stands) in [
            (100 * MIB, 8 * MIB, quarter),
            (17 * MIB, 8 * MIB, quarter),
            (16 * MIB, 8 * MIB, None),
            (9 * MIB, 8 * MIB, None),
            (6 * MIB, 8 * MIB, None),
            (0, 8 * MIB, None),
            (u64::MAX, 8 * MIB, quarter),
        ] {
            assert_eq!(
                look_stands(free, reserve),
                stands,
                "{free} free, {reserve} kept"
            );
        }
    }
}
