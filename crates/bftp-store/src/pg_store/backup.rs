//! `Upkeep::backup` on PostgreSQL: `pg_dump` of the database, in its custom format, into
//! the backup's store directory. `pg_dump` reads the whole database in one snapshot, so the
//! copy is the store as of one moment; nobody waits for it (it takes no lock a write needs).
//! The newest `pg_dump` installed is used (`/usr/lib/postgresql/N/bin`, then `PATH`): it
//! must be at least as new as the server. Where there is none, or it fails, the error names
//! the exact command to run instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::PgStore;
use crate::error::StoreError;
use crate::files;
use crate::sled_store::BackupReport;

/// The dump's file name in the backup's store directory.
pub const DUMP_FILE: &str = "bftp.pgdump";

/// Where `pg_dump` connects: the store's URL (never holding a password) and the password,
/// handed over in `PGPASSWORD`.
#[derive(Clone)]
pub(super) struct DumpTarget {
    pub(super) url: String,
    pub(super) password: Option<String>,
}

/// The newest `pg_dump` of Debian's packages, else the one on `PATH`.
fn pg_dump_binary() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin/pg_dump");
            bin.exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("pg_dump"))
            .find(|p| p.exists())
    })
}

/// The command an operator runs to take the copy by hand: the store's URL holds no password
/// (`PgOptions::check_url`), and the password is named, never shown.
fn dump_command(file: &Path, url: &str, with_password: bool) -> String {
    format!(
        "pg_dump --format=custom --file={} --dbname='{url}'{}",
        file.display(),
        if with_password {
            " (with PGPASSWORD set to the first line of [store] password_file)"
        } else {
            ""
        }
    )
}

impl PgStore {
    pub(super) fn dump_into(&self, dest: &Path) -> Result<BackupReport, StoreError> {
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
            Err(source) => {
                return Err(StoreError::Io {
                    op: "inspect the backup directory",
                    path: dest.to_path_buf(),
                    source,
                })
            }
        }
        files::create_dir(dest)?;
        let file = dest.join(DUMP_FILE);
        let command = dump_command(&file, &self.dump.url, self.dump.password.is_some());
        let Some(bin) = pg_dump_binary() else {
            return Err(StoreError::DumpFailed {
                reason: "no pg_dump is installed (Debian: postgresql-client)".into(),
                command,
            });
        };
        let jobs = self.with(|i| async move {
            let c = i.client("backup").await?;
            let n: i64 = c
                .query_one("SELECT count(*) FROM jobs", &[])
                .await
                .map_err(super::pg("backup"))?
                .get(0);
            Ok(n.max(0) as u64)
        })?;
        let mut cmd = Command::new(&bin);
        cmd.arg("--format=custom")
            .arg(format!("--file={}", file.display()))
            .arg(format!("--dbname={}", self.dump.url))
            .env_remove("PGPASSWORD")
            .stdin(Stdio::null());
        if let Some(p) = &self.dump.password {
            cmd.env("PGPASSWORD", p);
        }
        let out = cmd.output().map_err(|e| StoreError::DumpFailed {
            reason: format!("cannot run {}: {e}", bin.display()),
            command: command.clone(),
        })?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&file);
            return Err(StoreError::DumpFailed {
                reason: format!(
                    "{} {}: {}",
                    bin.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                command,
            });
        }
        files::sync_file(&file)?;
        files::sync_dir(dest)?;
        Ok(BackupReport {
            jobs,
            entries: 0,
            seq: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_to_run_by_hand_names_the_file_and_the_database_never_the_password() {
        let file = std::path::Path::new("/var/backups/b1/store/bftp.pgdump");
        let url = "postgres://bftpd@db.example.org:5432/bftp";
        assert_eq!(
            super::dump_command(file, url, false),
            "pg_dump --format=custom --file=/var/backups/b1/store/bftp.pgdump \
             --dbname='postgres://bftpd@db.example.org:5432/bftp'"
        );
        let with = super::dump_command(file, url, true);
        assert!(with.ends_with("(with PGPASSWORD set to the first line of [store] password_file)"));
    }
}
