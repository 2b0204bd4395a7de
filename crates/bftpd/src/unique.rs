//! Unique (STOU) copies into one destination directory, across every job and `bftp
//! transfer` of the daemon: one at a time per directory, and a memory of the names the
//! servers announced to bftpd's sessions lately.
//!
//! Why: a server picks a STOU name without knowing what other sessions were told. Pure-FTPd
//! builds it from the second, the low byte of the microseconds and a per-session counter, so
//! two sessions can be told the same name, and when that name exists at the end of the upload
//! it stores the file as `NAME.1` without saying so; vsftpd tries `STOU.1`, `STOU.2`... and the
//! session that loses the race gets 553. Serialising bftpd's own STOUs per directory (host,
//! port, user, directory) means its sessions never race each other for a name; the memory of
//! announced names catches a name told twice anyway (two copies within one second), so that
//! the second member becomes `uncertain` instead of claiming the first one's file.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an announced name is remembered. Pure-FTPd's names differ from one second to the
/// next, and vsftpd never announces a name that exists: a collision between two copies of
/// bftpd is within seconds, and this is far longer.
const REMEMBER: Duration = Duration::from_secs(3600);

/// One destination directory: where STOU files land.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirKey {
    host: String,
    port: u16,
    user: String,
    dir: String,
}

impl DirKey {
    pub fn new(host: &str, port: u16, user: &str, dir: &str) -> DirKey {
        DirKey {
            host: host.to_ascii_lowercase(),
            port,
            user: user.to_owned(),
            dir: dir.trim_end_matches('/').to_owned(),
        }
    }
}

#[derive(Default)]
struct Dir {
    /// Held for the whole of one STOU copy and its clean-up.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Name announced -> who it was announced to, and when.
    names: Mutex<HashMap<String, (String, Instant)>>,
}

/// The daemon's unique-copy directories (shared like the per-host slots).
#[derive(Default)]
pub struct UniqueDirs {
    dirs: Mutex<HashMap<DirKey, Arc<Dir>>>,
}

/// The right to run one STOU copy into a directory, and its memory of names.
pub struct DirGuard {
    _held: tokio::sync::OwnedMutexGuard<()>,
    dir: Arc<Dir>,
}

impl UniqueDirs {
    /// Waits until no other STOU copy of this daemon runs into `key`.
    pub async fn lock(&self, key: DirKey) -> DirGuard {
        let dir = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            dirs.entry(key).or_default().clone()
        };
        let held = dir.lock.clone().lock_owned().await;
        DirGuard { _held: held, dir }
    }
}

impl DirGuard {
    /// Records that `name` was announced to `owner`; `Some(other)` when it was announced to
    /// someone else lately (then it stays theirs).
    pub fn claim(&self, name: &str, owner: &str) -> Option<String> {
        let now = Instant::now();
        let mut names = self.dir.names.lock().unwrap_or_else(|p| p.into_inner());
        names.retain(|_, (_, at)| now.duration_since(*at) < REMEMBER);
        match names.get(name) {
            Some((other, _)) if other != owner => Some(other.clone()),
            _ => {
                names.insert(name.to_owned(), (owner.to_owned(), now));
                None
            }
        }
    }

    /// `name`, announced to `owner`, names no file any more: forget it.
    pub fn release(&self, name: &str, owner: &str) {
        let mut names = self.dir.names.lock().unwrap_or_else(|p| p.into_inner());
        if names.get(name).is_some_and(|(o, _)| o == owner) {
            names.remove(name);
        }
    }

    /// Who else (than `owner`) was told `name` lately.
    pub fn claimed_by_other(&self, name: &str, owner: &str) -> Option<String> {
        let names = self.dir.names.lock().unwrap_or_else(|p| p.into_inner());
        names
            .get(name)
            .filter(|(other, at)| other != owner && at.elapsed() < REMEMBER)
            .map(|(other, _)| other.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_copy_per_directory_and_a_name_told_twice_stays_the_first_owners() {
        let dirs = Arc::new(UniqueDirs::default());
        let key = DirKey::new("Host", 21, "u", "in/");
        let first = dirs.lock(key.clone()).await;
        // The same directory (spelled another way) waits; another one does not.
        let again = DirKey::new("host", 21, "u", "in");
        let waiting = {
            let dirs = dirs.clone();
            tokio::spawn(async move { dirs.lock(again).await.claim("x", "b") })
        };
        let _other = dirs.lock(DirKey::new("host", 21, "u", "out")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        assert_eq!(first.claim("STOU.1", "a"), None);
        assert_eq!(first.claim("STOU.1", "a"), None);
        assert_eq!(first.claimed_by_other("STOU.1", "b"), Some("a".into()));
        assert_eq!(first.claimed_by_other("STOU.1", "a"), None);
        drop(first);
        assert_eq!(waiting.await.unwrap(), None);
        let g = dirs.lock(key).await;
        assert_eq!(g.claim("STOU.1", "b"), Some("a".into()));
        assert_eq!(g.claimed_by_other("x", "a"), Some("b".into()));
    }
}
