//! Backup of a running daemon: `bftpd backup --config FILE DIR` asks the daemon (over its
//! socket, as root or the admin group) to write into DIR, a new or empty directory:
//! `DIR/store`, a consistent copy of the store (`Upkeep::backup`: every job as of one
//! moment between two transactions, with its watermark; on PostgreSQL a `pg_dump` of the
//! database, `DIR/store/bftp.pgdump`), `DIR/secret.key`, the key that the store's passwords
//! are sealed with (mode 0600), and `DIR/bftpd.toml`, the config the client was given (it
//! holds no password: `password_file`s are not copied). Restoring sled is copying `store/`
//! and `secret.key` into another state directory before bftpd starts there; PostgreSQL is
//! `pg_restore` into a database, and `secret.key` into each node's state directory. Either
//! way the jobs that were running when the copy was taken are requeued (or taken over) and
//! resolved from their intents, as after a crash.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use crate::api::identity::Caller;
use crate::api::{ApiError, Shared};

#[derive(Debug, Serialize, Deserialize)]
pub struct BackupRequest {
    /// Absolute path of a new or empty directory, written by the daemon's user.
    pub dir: PathBuf,
    /// The text of the daemon's config, as the client read it: kept beside the copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct BackupResponse {
    pub dir: PathBuf,
    pub jobs: u64,
    pub entries: u64,
    /// The store commit the copy ends at (sled; 0 on PostgreSQL).
    pub commit: u64,
    /// The `pg_dump` of a PostgreSQL store's database (custom format, for `pg_restore`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_dump: Option<PathBuf>,
}

/// `POST /v1/admin/backup`.
pub async fn handle(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    Json(req): Json<BackupRequest>,
) -> Result<Json<BackupResponse>, ApiError> {
    if !caller.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only root and the admin group may take a backup",
        ));
    }
    if !req.dir.is_absolute() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!(
                "the backup directory {} is not an absolute path",
                req.dir.display()
            ),
        ));
    }
    let (store, key, dir) = (app.store.clone(), app.key_file.clone(), req.dir.clone());
    let database_dump = store
        .cluster()
        .map(|_| req.dir.join("store").join(bftp_store::PG_DUMP_FILE));
    let config = req.config.clone();
    let report = crate::store::off_runtime("backup", move || {
        write_backup(store.shared().as_ref(), &key, &dir, config)
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "backup_failed", e))?;
    tracing::info!(dir = %req.dir.display(), jobs = report.jobs, uid = caller.uid, "backup written");
    Ok(Json(BackupResponse {
        dir: req.dir,
        jobs: report.jobs,
        entries: report.entries,
        commit: report.seq,
        database_dump,
    }))
}

fn write_backup(
    store: &dyn bftp_store::JobStore,
    key: &Path,
    dir: &Path,
    config: Option<String>,
) -> Result<bftp_store::BackupReport, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    if std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .next()
        .is_some()
    {
        return Err(format!(
            "{} is not empty: a backup goes into a new or empty directory",
            dir.display()
        ));
    }
    let report = store
        .upkeep()
        .ok_or(bftp_store::StoreError::Unsupported { op: "backup" })
        .and_then(|u| u.backup(&dir.join("store")))
        .map_err(|e| e.to_string())?;
    let bytes =
        std::fs::read(key).map_err(|e| format!("reading the key file {}: {e}", key.display()))?;
    write_new(&dir.join("secret.key"), &bytes)?;
    if let Some(text) = config {
        write_new(&dir.join("bftpd.toml"), text.as_bytes())?;
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("writing {}: {e}", dir.display()))?;
    Ok(report)
}

/// A new file of mode 0600 holding `bytes`, synced.
fn write_new(target: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(target)
        .map_err(|e| format!("creating {}: {e}", target.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("writing {}: {e}", target.display()))
}

/// The client side, for `bftpd backup`: one request over the daemon's socket. Returns the
/// daemon's answer (status and body).
pub fn request(socket: &Path, dir: &Path, config: Option<String>) -> Result<(u16, String), String> {
    let body = serde_json::to_string(&BackupRequest {
        dir: dir.to_path_buf(),
        config,
    })
    .map_err(|e| e.to_string())?;
    let mut s = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| format!("cannot reach bftpd at {}: {e}", socket.display()))?;
    let req = format!(
        "POST /v1/admin/backup HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
    let status = resp
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            format!(
                "bftpd sent no HTTP answer: {:?}",
                resp.chars().take(80).collect::<String>()
            )
        })?;
    let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // A chunked answer: the JSON is the one line that starts with '{'.
    let body = body
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or(body)
        .to_string();
    Ok((status, body))
}
