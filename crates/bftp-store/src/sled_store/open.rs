//! Opening a sled store: the checks at open (foreign files, the watermark, the meta tree,
//! the content digest) and the reopen for work.

use super::{damaged, no_panic, SledStore, StoreOptions, Trees, SCHEMA_VERSION, TREES};
use crate::digest::Digest;
use crate::durable::GroupCommit;
use crate::error::{backend, StoreError};
use crate::files::{self, SledFlush, Watermark};
use crate::keys;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use std::path::Path;
use std::time::{Duration, Instant};

/// Opens sled's database in `dir`; sled's failures become the store's errors. A lock held is
/// tried again for up to a second: sled lets go of its file lock from a background thread
/// after its last handle is dropped, so this process (which opens sled twice, and tests that
/// edit the database raw) can find its own lock still held for a moment.
pub(super) fn open_db(config: &sled::Config, dir: &Path) -> Result<sled::Db, StoreError> {
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
pub(super) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
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

    pub(super) fn open_trees(db: &sled::Db, dir: &Path) -> Result<Trees, StoreError> {
        let open = |name: &str| -> Result<sled::Tree, StoreError> {
            match no_panic(|| db.open_tree(name)) {
                Ok(r) => r.map_err(backend("open")),
                Err(msg) => Err(damaged(
                    dir,
                    format!("sled panicked opening tree {name}: {msg}"),
                )),
            }
        };
        let [meta, jobs, members, history, requests, owners, keywords, states, due, outbox, outbox_due, transcripts, refusals, pairs, watches, watch_files, events, event_ids, event_due, event_jobs, host_limits] =
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
            pairs: open(pairs)?,
            watches: open(watches)?,
            watch_files: open(watch_files)?,
            events: open(events)?,
            event_ids: open(event_ids)?,
            event_due: open(event_due)?,
            event_jobs: open(event_jobs)?,
            host_limits: open(host_limits)?,
        })
    }
}

pub(super) fn initialise(t: &Trees) -> Result<(), StoreError> {
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
pub(super) fn check_meta(meta: &sled::Tree, dir: &Path) -> Result<(u64, u32), StoreError> {
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
pub(super) fn check_digest(t: &Trees, dir: &Path) -> Result<(), StoreError> {
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
