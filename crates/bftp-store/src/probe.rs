//! What the storage engine costs on its own, for `bench-queue`: sled transactions and
//! flushes without any of the store's logic, on the caller's directory.

use std::path::Path;
use std::time::{Duration, Instant};

use sled::Transactional;

use crate::error::{backend, StoreError};

/// Commits per second of a bare loop, one writer: a transaction inserting one entry of
/// `value_len` bytes into each of three trees, then sled's `flush()`, then (with `fdatasync`)
/// an fdatasync of the database file, as the store's group commit does. In a fresh
/// subdirectory of `dir`, removed afterwards.
pub fn bare_sled_commit_rate(
    dir: &Path,
    dur: Duration,
    value_len: usize,
    fdatasync: bool,
) -> Result<f64, StoreError> {
    let path = dir.join(format!("bare-sled-probe-{}", fdatasync as u8));
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { op, path, source }
    };
    let db = sled::Config::new()
        .path(&path)
        .open()
        .map_err(backend("probe"))?;
    let trees = [
        db.open_tree("a").map_err(backend("probe"))?,
        db.open_tree("b").map_err(backend("probe"))?,
        db.open_tree("c").map_err(backend("probe"))?,
    ];
    let file = std::fs::File::open(path.join("db")).map_err(io("open", &path))?;
    let value = vec![0x5au8; value_len];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        let key = n.to_be_bytes();
        (&trees[0], &trees[1], &trees[2])
            .transaction(|(a, b, c)| {
                a.insert(&key[..], &value[..])?;
                b.insert(&key[..], &value[..])?;
                c.insert(&key[..], &[][..])?;
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => backend("probe")(e),
                sled::transaction::TransactionError::Abort(()) => StoreError::Unsupported {
                    op: "an aborted probe transaction",
                },
            })?;
        db.flush().map_err(backend("probe"))?;
        if fdatasync {
            file.sync_data().map_err(io("fdatasync", &path))?;
        }
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(trees);
    drop(db);
    let _ = std::fs::remove_dir_all(&path);
    Ok(rate)
}
