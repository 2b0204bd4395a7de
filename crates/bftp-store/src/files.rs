//! The store directory on disk: what sled 0.34 writes there, the watermark file, and the
//! flush that makes a commit durable.
//!
//! sled 0.34 writes `conf` (its settings, never fsynced), `db` (the log and pages; its
//! `flush()` ends with `sync_file_range`, which neither flushes the drive's cache nor waits
//! for metadata), `blobs/<lsn>` (values too large for a segment, never fsynced) and
//! `snap.<lsn>` (fsynced, renamed into place). [`SledFlush`] therefore adds an `fdatasync` of
//! `db`, an fsync of every new blob, and an fsync of a directory whose listing changed.
//!
//! sled 0.34 also recovers a truncated or overwritten `db` *silently*, as an empty or shorter
//! database. The watermark file `bftp-watermark` is the tripwire: it holds a commit number
//! known to be durable, and a database whose own commit counter is lower has lost data.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::durable::Flush;
use crate::error::StoreError;
use crate::keys;

pub(crate) const WATERMARK: &str = "bftp-watermark";
const WATERMARK_TMP: &str = "bftp-watermark.tmp";
const WATERMARK_MAGIC: &[u8; 8] = b"BFTPWM01";
const WATERMARK_LEN: usize = 24;

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { op, path, source }
}

/// Names sled 0.34 and this store create in the directory. Anything else means the directory
/// is something else.
pub(crate) fn is_ours(name: &str) -> bool {
    matches!(
        name,
        "db" | "conf" | "blobs" | WATERMARK | WATERMARK_TMP | "lost+found"
    ) || name.starts_with("snap.")
}

pub(crate) fn create_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::fs::PermissionsExt;
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {
            if m.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    dir = %dir.display(),
                    mode = format!("{:o}", m.permissions().mode() & 0o777),
                    "the store directory is open to other users; it should be mode 0700"
                );
            }
            Ok(())
        }
        Ok(_) => Err(StoreError::NotAStore {
            path: dir.to_path_buf(),
            found: "it is not a directory".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Jobs hold sealed passwords and keyword hashes: owner only.
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io("create the store directory", dir))?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent)?;
            }
            Ok(())
        }
        Err(e) => Err(io("inspect the store directory", dir)(e)),
    }
}

pub(crate) fn names(dir: &Path) -> Result<BTreeSet<OsString>, StoreError> {
    fs::read_dir(dir)
        .and_then(|it| it.map(|e| e.map(|e| e.file_name())).collect())
        .map_err(io("list", dir))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync directory", dir))
}

pub(crate) fn sync_file(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync", path))
}

/// The watermark: `BFTPWM01`, the commit number (u64 LE), its complement (u64 LE).
pub(crate) struct Watermark {
    path: PathBuf,
    file: File,
}

impl Watermark {
    /// `Ok(None)` when the file does not exist (a fresh or pre-watermark directory).
    pub(crate) fn read(dir: &Path) -> Result<Option<u64>, StoreError> {
        let path = dir.join(WATERMARK);
        let mut buf = Vec::new();
        match File::open(&path) {
            Ok(mut f) => f.read_to_end(&mut buf).map_err(io("read", &path))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", &path)(e)),
        };
        let damaged = |what: &str| StoreError::Damaged {
            path: path.clone(),
            reason: format!("the watermark file {what}"),
        };
        if buf.len() != WATERMARK_LEN || &buf[..8] != WATERMARK_MAGIC {
            return Err(damaged("is not a bftp watermark"));
        }
        let seq = u64::from_le_bytes(buf[8..16].try_into().unwrap_or_default());
        let check = u64::from_le_bytes(buf[16..24].try_into().unwrap_or_default());
        if seq != !check {
            return Err(damaged("fails its check"));
        }
        Ok(Some(seq))
    }

    fn bytes(seq: u64) -> [u8; WATERMARK_LEN] {
        let mut b = [0u8; WATERMARK_LEN];
        b[..8].copy_from_slice(WATERMARK_MAGIC);
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b[16..].copy_from_slice(&(!seq).to_le_bytes());
        b
    }

    /// Creates (write, fsync, rename, fsync dir) or opens the file and records `seq`.
    pub(crate) fn establish(dir: &Path, seq: u64) -> Result<Watermark, StoreError> {
        let path = dir.join(WATERMARK);
        if !path.exists() {
            let tmp = dir.join(WATERMARK_TMP);
            let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
            f.write_all(&Self::bytes(seq))
                .and_then(|()| f.sync_all())
                .map_err(io("write", &tmp))?;
            fs::rename(&tmp, &path).map_err(io("rename into place", &path))?;
            sync_dir(dir)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut w = Watermark { path, file };
        w.record(seq)
            .map_err(|reason| StoreError::NotDurable { op: "open", reason })?;
        Ok(w)
    }

    /// Overwrites the 24 bytes in place: one sector, written whole or not at all.
    pub(crate) fn record(&mut self, seq: u64) -> Result<(), String> {
        self.file
            .write_all_at(&Self::bytes(seq), 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }
}

/// The flush the group commit runs: sled's flush, then the fsyncs sled leaves out, then now
/// and then the watermark.
pub(crate) struct SledFlush {
    pub db: sled::Db,
    pub meta: sled::Tree,
    pub dir: PathBuf,
    pub db_file: File,
    pub watermark: Watermark,
    pub watermark_interval: Duration,
    pub dir_names: BTreeSet<OsString>,
    pub blob_names: BTreeSet<OsString>,
    /// Commit number as of the start of the last successful flush: durable.
    pub durable_seq: u64,
    pub recorded_seq: u64,
    pub last_record: Instant,
}

impl SledFlush {
    fn current_seq(&self) -> Result<u64, String> {
        match self.meta.get(keys::META_SEQ) {
            Ok(Some(v)) => keys::u64_value("meta", keys::META_SEQ, &v).map_err(|e| e.to_string()),
            Ok(None) => Err("the meta tree lost its commit counter".into()),
            Err(e) => Err(format!("reading the commit counter: {e}")),
        }
    }

    fn sync_new_files(&mut self) -> Result<(), String> {
        let blobs = self.dir.join("blobs");
        let now = names(&blobs).map_err(|e| e.to_string())?;
        if now != self.blob_names {
            for name in now.difference(&self.blob_names) {
                sync_file(&blobs.join(name)).map_err(|e| e.to_string())?;
            }
            sync_dir(&blobs).map_err(|e| e.to_string())?;
            self.blob_names = now;
        }
        let now = names(&self.dir).map_err(|e| e.to_string())?;
        if now != self.dir_names {
            sync_dir(&self.dir).map_err(|e| e.to_string())?;
            self.dir_names = now;
        }
        Ok(())
    }
}

impl Flush for SledFlush {
    fn flush(&mut self) -> Result<(), String> {
        // Every commit numbered up to `seq` completed before sled's flush began.
        let seq = self.current_seq()?;
        self.db.flush().map_err(|e| format!("sled flush: {e}"))?;
        self.db_file
            .sync_data()
            .map_err(|e| format!("fdatasync {}: {e}", self.dir.join("db").display()))?;
        self.sync_new_files()?;
        self.durable_seq = seq;
        Ok(())
    }

    fn after_flush(&mut self) -> Result<(), String> {
        if self.durable_seq > self.recorded_seq
            && self.last_record.elapsed() >= self.watermark_interval
        {
            self.watermark.record(self.durable_seq)?;
            self.recorded_seq = self.durable_seq;
            self.last_record = Instant::now();
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), String> {
        if self.durable_seq > self.recorded_seq {
            self.watermark.record(self.durable_seq)?;
            self.recorded_seq = self.durable_seq;
        }
        Ok(())
    }
}
