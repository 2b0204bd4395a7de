//! [`SledStore`]: the [`JobStore`] of a single daemon, on sled 0.34.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sled::transaction::{
    ConflictableTransactionError, ConflictableTransactionResult, TransactionError, Transactional,
    TransactionalTree, UnabortableTransactionError,
};
use sled::IVec;

use bftp_core::refusal::{observe, RefusalKey, RefusalMemory, Sighting};
use bftp_core::{JobEvent, JobState, MemberState, Timestamp};

use crate::digest::Digest;
use crate::durable::GroupCommit;
use crate::error::{backend, StoreError};
use crate::files::{self, SledFlush, Watermark};
use crate::keys;
use crate::plan::{self, Listing, Plan};
use crate::record::{
    decode, encode, job_to_api, HistoryV1, JobV1, MemberV1, OutboxStateV1, OutboxV1, RefusalV1,
    RequestV1, TranscriptV1, RECORD_VERSION,
};
use crate::types::{
    AttemptTranscript, DeliveryTry, HistoryEvent, Job, JobFilter, JobId, Member, MemberUpdate,
    NewJob, NewMember, OutboxEntry, StateCounts, StateFilter, Submitted, Walk,
};
use crate::JobStore;
use bftp_core::retention::Keep;

mod backup;
mod pages;
mod retention;

pub use backup::BackupReport;

/// The schema version this code reads and writes (kept in the `meta` tree): 2, members in
/// pages (`pages.rs`). A store of schema 1 (one entry per member) is upgraded at open.
pub const SCHEMA_VERSION: u32 = 2;

/// Never reorder: a tree's position is hashed into the content digest of its entries.
const TREES: [&str; 13] = [
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
}

impl Trees {
    /// Every tree, in [`TREES`] order.
    fn all(&self) -> [&sled::Tree; 13] {
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

/// Opens sled's database in `dir`; sled's failures become the store's errors. A lock held is
/// tried again for up to a second: sled lets go of its file lock from a background thread
/// after its last handle is dropped, so this process (which opens sled twice, and tests that
/// edit the database raw) can find its own lock still held for a moment.
fn open_db(config: &sled::Config, dir: &Path) -> Result<sled::Db, StoreError> {
    let mut tries = 0;
    loop {
        match no_panic(|| config.open()) {
            Ok(Ok(db)) => return Ok(db),
            Ok(Err(sled::Error::Io(e))) if e.to_string().contains("could not acquire lock") => {
                if tries == 20 {
                    return Err(StoreError::Locked {
                        path: dir.to_path_buf(),
                    });
                }
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(Err(e)) => return Err(damaged(dir, format!("sled cannot open it: {e}"))),
            Err(msg) => {
                return Err(damaged(
                    dir,
                    format!("sled panicked while recovering it: {msg}"),
                ))
            }
        }
    }
}

/// Hands memory the allocator holds free back to the system; glibc keeps it otherwise, and
/// the process's resident size stays at its peak. The crate's one unsafe call.
#[allow(unsafe_code)]
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Runs `f`, turning a panic of the storage engine into `Err(message)`.
fn no_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| crate::panic_message(&*p))
}

impl SledStore {
    /// Opens the store in `dir`, creating it (mode 0700) if it does not exist.
    // Long on purpose: the checks at open in the order that makes each error precise
    // (foreign files, watermark and meta, the digest scan, the reopen for work, the fsyncs).
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<SledStore, StoreError> {
        files::create_dir(dir)?;
        let listing = files::names(dir)?;
        let foreign: Vec<String> = listing
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !files::is_ours(n))
            .collect();
        if !foreign.is_empty() {
            return Err(StoreError::NotAStore {
                path: dir.to_path_buf(),
                found: format!("it holds other files ({})", foreign.join(", ")),
            });
        }
        let watermark = Watermark::read(dir)?;
        let db_path = dir.join("db");

        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(opts.cache_capacity_bytes);
        let db = open_db(&config, dir)?;

        let has_meta = db.tree_names().iter().any(|n| n.as_ref() == b"meta");
        if !has_meta {
            if watermark.is_some() {
                return Err(damaged(
                    dir,
                    "it was initialised (bftp-watermark exists) but the database holds no bftp data: \
                     the db file was truncated or overwritten",
                ));
            }
            let foreign_trees = db.tree_names().len() > 1 || !db.is_empty();
            if foreign_trees {
                return Err(StoreError::NotAStore {
                    path: dir.to_path_buf(),
                    found: "it holds a sled database of another program".into(),
                });
            }
            // No watermark and no meta: nothing was ever acknowledged from this directory
            // (the watermark is written before `open` returns), so an interrupted first start
            // is simply started again.
        }
        let t = Self::open_trees(&db, dir)?;
        if !has_meta {
            initialise(&t)?;
        }
        let (seq, schema) = check_meta(&t.meta, dir)?;
        // The cheap check first: a lost tail is named as such, and nothing is written to a
        // database that lost one (check_digest may add a digest).
        if let Some(w) = watermark {
            if seq < w {
                return Err(damaged(
                    dir,
                    format!(
                        "the database ends at commit {seq} but commit {w} was durable before: \
                         the db file lost data (truncated, overwritten, or replaced by an older copy). \
                         If an older copy was restored on purpose, remove {} to accept it",
                        dir.join(files::WATERMARK).display()
                    ),
                ));
            }
        }
        check_digest(&t, dir)?;
        // The scan left sled's cache holding every page it read (its limit is soft: about
        // 90 MiB more for 100,000 jobs). That instance is closed, the memory handed back to
        // the system, and the store opened afresh for work (0.1 s for 100,000 jobs).
        db.flush().map_err(backend("open"))?;
        drop(t);
        drop(db);
        release_free_memory();
        let db = open_db(&config, dir)?;
        let t = Self::open_trees(&db, dir)?;

        // sled fsyncs neither `conf` nor the directory entries it created.
        db.flush().map_err(backend("open"))?;
        let db_file = std::fs::File::open(&db_path).map_err(|source| StoreError::Io {
            op: "open",
            path: db_path.clone(),
            source,
        })?;
        db_file.sync_all().map_err(|source| StoreError::Io {
            op: "fsync",
            path: db_path.clone(),
            source,
        })?;
        files::sync_file(&dir.join("conf"))?;
        files::sync_dir(&dir.join("blobs"))?;
        files::sync_dir(dir)?;
        let watermark = Watermark::establish(dir, seq)?;

        let flusher = SledFlush {
            db: db.clone(),
            meta: t.meta.clone(),
            dir: dir.to_path_buf(),
            db_file,
            watermark,
            watermark_interval: opts.watermark_interval,
            dir_names: files::names(dir)?,
            blob_names: files::names(&dir.join("blobs"))?,
            durable_seq: seq,
            recorded_seq: seq,
            last_record: Instant::now(),
        };
        let commit = GroupCommit::start(flusher).map_err(|source| StoreError::Io {
            op: "start the flush thread for",
            path: dir.to_path_buf(),
            source,
        })?;
        let store = SledStore {
            dir: dir.to_path_buf(),
            db,
            t,
            commit,
            min_free: opts.min_free_bytes,
            roomy_until: std::sync::Mutex::new(None),
            backup_lock: std::sync::RwLock::new(()),
        };
        if schema < SCHEMA_VERSION {
            store.upgrade_members()?;
        }
        if opts.verify_on_open {
            let report = store.verify()?;
            tracing::info!(dir = %dir.display(), jobs = report.jobs, members = report.members, "store verified");
        }
        Ok(store)
    }

    fn open_trees(db: &sled::Db, dir: &Path) -> Result<Trees, StoreError> {
        let open = |name: &str| -> Result<sled::Tree, StoreError> {
            match no_panic(|| db.open_tree(name)) {
                Ok(r) => r.map_err(backend("open")),
                Err(msg) => Err(damaged(
                    dir,
                    format!("sled panicked opening tree {name}: {msg}"),
                )),
            }
        };
        let [meta, jobs, members, history, requests, owners, keywords, states, due, outbox, outbox_due, transcripts, refusals] =
            TREES;
        Ok(Trees {
            meta: open(meta)?,
            jobs: open(jobs)?,
            members: open(members)?,
            history: open(history)?,
            requests: open(requests)?,
            owners: open(owners)?,
            keywords: open(keywords)?,
            states: open(states)?,
            due: open(due)?,
            outbox: open(outbox)?,
            outbox_due: open(outbox_due)?,
            transcripts: open(transcripts)?,
            refusals: open(refusals)?,
        })
    }

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

    /// One transaction over all trees, with the commit counter bumped, then waits until it is
    /// durable. A refusal (`f` aborts) wrote nothing and returns at once.
    fn write<R>(
        &self,
        op: &'static str,
        f: impl Fn(&Tx<'_>) -> TxResult<R>,
    ) -> Result<R, StoreError> {
        self.guarded(op, || {
            self.commit.check(op)?;
            self.check_space(op, matches!(op, "submit" | "freeze_members"))?;
            let backup = self.backup_lock.read().unwrap_or_else(|p| p.into_inner());
            // sled implements `Transactional` for tuples of at most 9 trees; a slice has no limit.
            let trees = self.t.all();
            let r = trees[..].transaction(|v: &Vec<TransactionalTree>| {
                let meta = &v[0];
                let seq = match meta.get(keys::META_SEQ)? {
                    Some(v) => keys::u64_value("meta", keys::META_SEQ, &v).or_abort()?,
                    None => return abort(keys::corrupt_key("meta", keys::META_SEQ, "missing")),
                };
                meta.insert(keys::META_SEQ, &(seq + 1).to_be_bytes()[..])?;
                let before = match meta.get(keys::META_DIGEST)? {
                    Some(v) => Digest::decode(&v).or_abort()?,
                    None => return abort(keys::corrupt_key("meta", keys::META_DIGEST, "missing")),
                };
                let digest = Cell::new(before);
                let tree = |id: usize| TxTree {
                    tree: &v[id],
                    id: id as u8,
                    digest: &digest,
                };
                let tx = Tx {
                    meta,
                    jobs: tree(1),
                    members: tree(2),
                    history: tree(3),
                    requests: tree(4),
                    owners: tree(5),
                    keywords: tree(6),
                    states: tree(7),
                    due: tree(8),
                    outbox: tree(9),
                    outbox_due: tree(10),
                    transcripts: tree(11),
                    refusals: tree(12),
                };
                let value = f(&tx)?;
                if digest.get() != before {
                    meta.insert(keys::META_DIGEST, &digest.get().0[..])?;
                }
                Ok(value)
            });
            drop(backup);
            let value = match r {
                Ok(v) => v,
                Err(TransactionError::Abort(e)) => return Err(e),
                Err(TransactionError::Storage(e)) => return Err(backend(op)(e)),
            };
            self.commit.wait_durable(op)?;
            Ok(value)
        })
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

    fn read_job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let k = keys::job(id);
        match self.t.jobs.get(k).map_err(backend("get"))? {
            Some(v) => Ok(Some(job_to_api(id, &decode("job", &k, &v)?)?)),
            None => Ok(None),
        }
    }

    /// The ids in an index under `prefix`, ascending, those after `after` only.
    fn index_ids(
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

    fn require_job(&self, id: JobId) -> Result<(), StoreError> {
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
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // Last flush and the final watermark, before sled itself closes.
        self.commit.shutdown();
    }
}

fn initialise(t: &Trees) -> Result<(), StoreError> {
    t.meta
        .transaction(|meta| {
            meta.insert(keys::META_MAGIC, keys::MAGIC_VALUE)?;
            meta.insert(keys::META_SCHEMA, &SCHEMA_VERSION.to_be_bytes()[..])?;
            meta.insert(keys::META_NEXT_ID, &1u64.to_be_bytes()[..])?;
            meta.insert(keys::META_SEQ, &1u64.to_be_bytes()[..])?;
            meta.insert(keys::META_DIGEST, &Digest::default().0[..])?;
            Ok::<_, ConflictableTransactionError<()>>(())
        })
        .map_err(|e| match e {
            TransactionError::Abort(()) => unreachable!("the initialisation never aborts"),
            TransactionError::Storage(e) => backend("initialise")(e),
        })
}

/// Checks the magic and the schema version; returns the commit counter and the schema.
fn check_meta(meta: &sled::Tree, dir: &Path) -> Result<(u64, u32), StoreError> {
    let get = |k: &[u8]| meta.get(k).map_err(backend("open"));
    if get(keys::META_MAGIC)?.as_deref() != Some(keys::MAGIC_VALUE) {
        return Err(StoreError::NotAStore {
            path: dir.to_path_buf(),
            found: "its database has no bftp-store mark".into(),
        });
    }
    let missing = |k: &[u8]| {
        damaged(
            dir,
            format!("the meta tree has no {:?}", String::from_utf8_lossy(k)),
        )
    };
    let schema = get(keys::META_SCHEMA)?.ok_or_else(|| missing(keys::META_SCHEMA))?;
    let schema = keys::u32_value("meta", keys::META_SCHEMA, &schema)?;
    if schema > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: schema,
            supported: SCHEMA_VERSION,
        });
    }
    // Schema 1 (one entry per member) is upgraded once open (`SledStore::upgrade_members`).
    if schema < 1 {
        return Err(damaged(dir, format!("unknown schema version {schema}")));
    }
    let next = get(keys::META_NEXT_ID)?.ok_or_else(|| missing(keys::META_NEXT_ID))?;
    keys::u64_value("meta", keys::META_NEXT_ID, &next)?;
    let seq = get(keys::META_SEQ)?.ok_or_else(|| missing(keys::META_SEQ))?;
    Ok((keys::u64_value("meta", keys::META_SEQ, &seq)?, schema))
}

/// Recomputes the content digest and compares it with the one the transactions kept. A store
/// written before the digest existed gets one.
fn check_digest(t: &Trees, dir: &Path) -> Result<(), StoreError> {
    let actual = match no_panic(|| t.content_digest()) {
        Ok(r) => r?,
        Err(msg) => {
            return Err(damaged(
                dir,
                format!("sled panicked while reading it: {msg}"),
            ))
        }
    };
    match t.meta.get(keys::META_DIGEST).map_err(backend("open"))? {
        None => {
            t.meta
                .insert(keys::META_DIGEST, &actual.0[..])
                .map_err(backend("open"))?;
            Ok(())
        }
        Some(v) => {
            let kept = Digest::decode(&v)?;
            if kept == actual {
                Ok(())
            } else {
                Err(damaged(
                    dir,
                    format!(
                        "its records do not add up to the digest written with them \
                         (kept {kept}, found {actual}): records were lost or went back to older \
                         versions, the db file was damaged. Restore the store from a backup"
                    ),
                ))
            }
        }
    }
}

// ---- pieces of transactions ----

fn tx_job(tx: &Tx<'_>, id: JobId) -> TxResult<JobV1> {
    let k = keys::job(id);
    match tx.jobs.get(k)? {
        Some(v) => decode("job", &k, &v).or_abort(),
        None => abort(StoreError::NotFound(id)),
    }
}

fn tx_put_job(tx: &Tx<'_>, id: JobId, rec: &JobV1) -> TxResult<()> {
    tx.jobs.insert(&keys::job(id)[..], encode(rec))?;
    Ok(())
}

/// The raw member records of page `page` of job `id` (empty when there is no such page).
fn tx_page(tx: &Tx<'_>, id: JobId, page: u32) -> TxResult<Vec<Vec<u8>>> {
    let k = keys::member(id, page);
    match tx.members.get(k)? {
        Some(v) => Ok(pages::decode(&k, &v)
            .or_abort()?
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect()),
        None => Ok(Vec::new()),
    }
}

/// Moves the `count` schema-1 member entries of job `id` into pages (nothing when one of its
/// entries is a page already: the job has moved). A member whose entry is gone (a removal
/// cut off part way: the digest checked at open says no entry was lost otherwise) becomes a
/// hole in its page, and a page of holes is not written.
fn tx_upgrade_job(tx: &Tx<'_>, id: JobId, count: u32) -> TxResult<()> {
    let mut records = Vec::with_capacity(count as usize);
    for index in 0..count {
        match tx.members.get(keys::member(id, index))? {
            Some(v) if pages::is_page(&v) => return Ok(()),
            v => records.push(v.map(|v| v.to_vec()).unwrap_or_default()),
        }
    }
    for (page, chunk) in records.chunks(pages::PAGE as usize).enumerate() {
        let key = keys::member(id, page as u32);
        if chunk.iter().all(Vec::is_empty) {
            tx.members.remove(&key)?;
        } else {
            tx.members.insert(&key[..], pages::encode(chunk))?;
        }
    }
    for index in pages::pages(count)..count {
        tx.members.remove(&keys::member(id, index))?;
    }
    Ok(())
}

/// Writes members `start..` of job `id` from `members`, filling the last page first.
fn tx_append_members(
    tx: &Tx<'_>,
    id: JobId,
    start: u32,
    members: &[NewMember],
    now: Timestamp,
) -> TxResult<()> {
    let mut index = start;
    let mut rest = members;
    while !rest.is_empty() {
        let (key, slot) = pages::place(id, index);
        let mut page = if slot == 0 {
            Vec::new()
        } else {
            tx_page(tx, id, index / pages::PAGE)?
        };
        if page.len() != slot {
            return abort(keys::corrupt_key(
                "member page",
                &key,
                format!("holds {} members, expected {slot}", page.len()),
            ));
        }
        let take = rest.len().min(pages::PAGE as usize - slot);
        page.extend(rest[..take].iter().map(|m| encode(&MemberV1::new(m, now))));
        tx.members.insert(&key[..], pages::encode(&page))?;
        rest = &rest[take..];
        index += take as u32;
    }
    Ok(())
}

/// Moves the indexes of job `id` from state `old` (None: new job) to `new`.
fn tx_reindex(tx: &Tx<'_>, id: JobId, old: Option<&JobState>, new: &JobState) -> TxResult<()> {
    if let Some(old) = old {
        tx.states.remove(&keys::state(old, id))?;
        if let JobState::Queued { next_attempt_at } = old {
            tx.due.remove(&keys::due(*next_attempt_at, id))?;
        }
    }
    tx.states.insert(&keys::state(new, id)[..], EMPTY)?;
    if let JobState::Queued { next_attempt_at } = new {
        tx.due.insert(&keys::due(*next_attempt_at, id)[..], EMPTY)?;
    }
    Ok(())
}

/// Every pending member of the job becomes `to`; returns the states of all members after.
fn tx_settle_pending(
    tx: &Tx<'_>,
    id: JobId,
    count: u32,
    to: MemberState,
    detail: Option<&str>,
    now: Timestamp,
) -> TxResult<Vec<MemberState>> {
    let mut all = Vec::with_capacity(count as usize);
    for page in 0..pages::pages(count) {
        let key = keys::member(id, page);
        let mut records = tx_page(tx, id, page)?;
        let want = (count - page * pages::PAGE).min(pages::PAGE) as usize;
        if records.len() != want {
            return abort(keys::corrupt_key(
                "member page",
                &key,
                format!(
                    "holds {} members, expected {want}: the job has {count} members",
                    records.len()
                ),
            ));
        }
        let mut changed = false;
        for record in &mut records {
            let mut m: MemberV1 = decode("member", &key, record).or_abort()?;
            if plan::settle(&mut m, to, detail, now) {
                *record = encode(&m);
                changed = true;
            }
            all.push(m.state.to_api());
        }
        if changed {
            tx.members.insert(&key[..], pages::encode(&records))?;
        }
    }
    Ok(all)
}

/// Writes a report's outbox record and moves its due-index entry from `old_next` (the
/// record's previous next try) to its new one.
fn tx_outbox_put(tx: &Tx<'_>, id: JobId, rec: &OutboxV1, old_next: Option<u64>) -> TxResult<()> {
    if let Some(at) = old_next {
        tx.outbox_due.remove(&keys::due(Timestamp(at), id)[..])?;
    }
    if let (OutboxStateV1::Pending, Some(at)) = (rec.state, rec.next) {
        tx.outbox_due
            .insert(&keys::due(Timestamp(at), id)[..], EMPTY)?;
    }
    tx.outbox.insert(&keys::job(id)[..], encode(rec))?;
    Ok(())
}

/// Writes `plan` for job `id` (`plan.rs`): the pending members settled, the new members
/// (`members`) appended, the indexes moved, the report put in the outbox, the history
/// entries, and the job's record.
fn tx_write(
    tx: &Tx<'_>,
    id: JobId,
    plan: &Plan,
    members: &[NewMember],
    now: Timestamp,
) -> TxResult<()> {
    if let Some(to) = plan.settle {
        tx_settle_pending(tx, id, plan.rec.members, to, None, now)?;
    }
    if let Some(start) = plan.append_at {
        tx_append_members(tx, id, start, members, now)?;
    }
    if let Some((old, new)) = &plan.moved {
        tx_reindex(tx, id, Some(old), new)?;
    }
    if let Some(report) = &plan.report {
        tx_outbox_put(tx, id, report, None)?;
    }
    for (seq, h) in &plan.history {
        tx.history.insert(&keys::history(id, *seq)[..], encode(h))?;
    }
    tx_put_job(tx, id, &plan.rec)
}

impl JobStore for SledStore {
    fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        let count = plan::member_count(job.members.len())?;
        self.write("submit", |tx| {
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

            let mut plan = plan::submit(&job, count);
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
        })
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
}

/// Members moved into pages per upgrade transaction (a larger job moves alone, whole).
const UPGRADE_BATCH: u32 = 4096;

impl SledStore {
    /// Upgrades a schema-1 store (one entry per member) to pages: every job's members move in
    /// one transaction with the others of its batch, and the last transaction records schema
    /// 2. A crash in between leaves some jobs moved, whole, and the rest not; the next open
    /// goes on from there (a job whose first entry is a page has moved).
    fn upgrade_members(&self) -> Result<(), StoreError> {
        let mut jobs = Vec::new();
        for kv in self.t.jobs.iter() {
            let (k, v) = kv.map_err(backend("upgrade"))?;
            let id = keys::trailing_id("job", &k, 8)?;
            let rec: JobV1 = decode("job", &k, &v)?;
            if rec.members > 0 {
                jobs.push((id, rec.members));
            }
        }
        let mut batch: Vec<(JobId, u32)> = Vec::new();
        let mut size = 0;
        let mut moved = 0u64;
        let mut flush = |batch: &mut Vec<(JobId, u32)>| -> Result<(), StoreError> {
            self.write("upgrade", |tx| {
                for &(id, count) in batch.iter() {
                    tx_upgrade_job(tx, id, count)?;
                }
                Ok(())
            })?;
            moved += batch.iter().map(|&(_, n)| u64::from(n)).sum::<u64>();
            batch.clear();
            Ok(())
        };
        for (id, count) in jobs {
            if size + count > UPGRADE_BATCH && !batch.is_empty() {
                flush(&mut batch)?;
                size = 0;
            }
            batch.push((id, count));
            size += count;
        }
        if !batch.is_empty() {
            flush(&mut batch)?;
        }
        self.write("upgrade", |tx| {
            tx.meta
                .insert(keys::META_SCHEMA, &SCHEMA_VERSION.to_be_bytes()[..])?;
            Ok(())
        })?;
        tracing::info!(dir = %self.dir.display(), members = moved, "store upgraded to schema {SCHEMA_VERSION}: members in pages");
        Ok(())
    }

    fn read_outbox(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        let k = keys::job(id);
        match self.t.outbox.get(k).map_err(backend("outbox"))? {
            Some(v) => Ok(Some(decode::<OutboxV1>("outbox", &k, &v)?.to_api(id)?)),
            None => Ok(None),
        }
    }
}

/// The smallest id greater than `after`; `None` when there is none.
fn first_after(after: Option<JobId>) -> Option<JobId> {
    match after {
        None => Some(JobId(0)),
        Some(a) => a.0.checked_add(1).map(JobId),
    }
}

fn due_entry(k: &IVec) -> Result<(Timestamp, JobId), StoreError> {
    let id = keys::trailing_id("due index", k, 16)?;
    let at = keys::u64_value("due index", k, &k[..8])?;
    Ok((Timestamp(at), id))
}

/// The index of the first member of the page stored at key `k`.
fn page_first(k: &IVec) -> Result<u32, StoreError> {
    if k.len() != 12 {
        return Err(keys::corrupt_key(
            "member page",
            k,
            format!("key is {} bytes, expected 12", k.len()),
        ));
    }
    let page = keys::u32_value("member page", k, &k[8..])?;
    page.checked_mul(pages::PAGE).ok_or_else(|| {
        keys::corrupt_key(
            "member page",
            k,
            format!("page {page} is past the last member"),
        )
    })
}

/// One member's change inside a write transaction (see `JobStore::update_member`).
/// How long a look at the store's disk that found `free` bytes (with `reserve` to keep)
/// stands for the next files an attempt starts: with more than twice the reserve free, a
/// quarter second; nearer the reserve, none (every file start looks). A disk filling from
/// twice the reserve to under it within the quarter second lets a few more files start; they
/// are recorded, as the file in flight always is: a result's write keeps looking every time,
/// and is refused only below half the reserve.
fn look_stands(free: u64, reserve: u64) -> Option<Duration> {
    (free / 2 > reserve).then_some(Duration::from_millis(250))
}

/// Member changes inside a write transaction (see `JobStore::update_members`), each page
/// read and written once however many of its members change; with `answer`, the members as
/// changed, in the order of `updates` (else none).
fn tx_update_members(
    tx: &Tx<'_>,
    id: JobId,
    updates: &[(u32, MemberUpdate)],
    now: Timestamp,
    answer: bool,
) -> TxResult<Vec<Member>> {
    let mut by_page: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (n, (index, _)) in updates.iter().enumerate() {
        by_page.entry(index / pages::PAGE).or_default().push(n);
    }
    let mut out: Vec<Option<Member>> = vec![None; if answer { updates.len() } else { 0 }];
    for (page, ns) in by_page {
        let key = keys::member(id, page);
        let mut records = tx_page(tx, id, page)?;
        for n in ns {
            let (index, update) = &updates[n];
            let (_, slot) = pages::place(id, *index);
            let Some(record) = records.get_mut(slot).filter(|r| !pages::is_hole(r)) else {
                if tx.jobs.get(keys::job(id))?.is_none() {
                    return abort(StoreError::NotFound(id));
                }
                return abort(StoreError::MemberNotFound {
                    job: id,
                    index: *index,
                });
            };
            let mut m: MemberV1 = decode("member", &key, record).or_abort()?;
            if let Err(e) = m.apply(id, *index, update, now) {
                return abort(e);
            }
            *record = encode(&m);
            if answer {
                out[n] = Some(m.to_api(*index));
            }
        }
        tx.members.insert(&key[..], pages::encode(&records))?;
    }
    Ok(out.into_iter().flatten().collect())
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
