//! Unique (STOU) copies into one destination directory, across every job and `bftp
//! transfer` of the daemon and, with a store shared by several nodes, of all nodes: one at a
//! time per directory, and a memory of the names the servers announced to bftpd's sessions
//! lately.
//!
//! Why: a server picks a STOU name without knowing what other sessions were told. Pure-FTPd
//! builds it from the second, the low byte of the microseconds and a per-session counter, so
//! two sessions can be told the same name, and when that name exists at the end of the upload
//! it stores the file as `NAME.1` without saying so; vsftpd tries `STOU.1`, `STOU.2`... and the
//! session that loses the race gets 553. Serialising bftpd's own STOUs per directory (host,
//! port, user, directory) means its sessions never race each other for a name; the memory of
//! announced names catches a name told twice anyway (two copies within one second), so that
//! the second member becomes `uncertain` instead of claiming the first one's file.
//!
//! With a shared store (`HostSlots`) both hold over all nodes: the directory is also a slot
//! of its own key taken with a limit of one (after this daemon's lock; a database that does
//! not answer counts as taken: never unserialised), held until the guard drops, and the
//! names are remembered in the database instead of here. A name the database cannot be
//! asked about counts as another's: the member becomes `uncertain`, never the claimer of a
//! file that may not be its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bftp_store::HostSlots;

use super::slots::{take_in_cluster, wait_for_release, ClusterHold, CLUSTER_BACKOFF};

/// How long an announced name is remembered. Pure-FTPd's names differ from one second to the
/// next, and vsftpd never announces a name that exists: a collision between two copies of
/// bftpd is within seconds, and this is far longer.
const REMEMBER: Duration = Duration::from_secs(3600);

/// Who a name counts as told to when the shared store cannot say.
const UNANSWERED: &str = "perhaps another copy (the shared store did not answer)";

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

    /// The directory's key in the shared store: its slot "host" and the key of its names.
    /// It cannot be a host name (it holds spaces) and no two directories share one (the
    /// user's length says where the user ends; the URL refuses NUL, which the database
    /// would too).
    fn shared(&self) -> String {
        let DirKey {
            host,
            port,
            user,
            dir,
        } = self;
        format!("stou {host}:{port} {}:{user} {dir}", user.len())
    }
}

#[derive(Default)]
struct Dir {
    /// Held for the whole of one STOU copy and its clean-up.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Name announced -> who it was announced to, and when (without a shared store).
    names: Mutex<HashMap<String, (String, Instant)>>,
}

/// The daemon's unique-copy directories (shared like the per-host slots).
#[derive(Default)]
pub struct UniqueDirs {
    dirs: Mutex<HashMap<DirKey, Arc<Dir>>>,
    /// The store's count of all nodes, when it is shared.
    cluster: Option<Arc<dyn HostSlots>>,
}

/// The right to run one STOU copy into a directory, and its memory of names.
pub struct DirGuard {
    // Dropped in this order: the slot of all nodes, then this daemon's lock.
    shared: Option<Shared>,
    _held: tokio::sync::OwnedMutexGuard<()>,
    dir: Arc<Dir>,
}

/// A directory held over all nodes: its slot and its key in the shared store.
struct Shared {
    _slot: ClusterHold,
    slots: Arc<dyn HostSlots>,
    key: String,
}

impl UniqueDirs {
    /// `cluster`: the store's count of all nodes (`Cluster::host_slots`), if shared.
    pub fn new(cluster: Option<Arc<dyn HostSlots>>) -> UniqueDirs {
        UniqueDirs {
            dirs: Default::default(),
            cluster,
        }
    }

    /// Waits until no other STOU copy of this daemon, and with a shared store of any node,
    /// runs into `key`. The slot of all nodes is looked at again when a node announces a
    /// release, or after a backoff (20 ms doubling to 2 s).
    pub async fn lock(&self, key: DirKey) -> DirGuard {
        let dir = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            dirs.entry(key.clone()).or_default().clone()
        };
        let held = dir.lock.clone().lock_owned().await;
        let shared = match &self.cluster {
            None => None,
            Some(c) => {
                let key = key.shared();
                let mut backoff = CLUSTER_BACKOFF.0;
                loop {
                    let seen = c.generation();
                    if let Some(slot) = take_in_cluster(c.clone(), vec![key.clone()], 1).await {
                        break Some(Shared {
                            _slot: slot,
                            slots: c.clone(),
                            key,
                        });
                    }
                    wait_for_release(c.as_ref(), seen, &mut backoff).await;
                }
            }
        };
        DirGuard {
            shared,
            _held: held,
            dir,
        }
    }
}

impl DirGuard {
    /// Records that `name` was announced to `owner`; `Some(other)` when it was announced to
    /// someone else lately (then it stays theirs).
    pub async fn claim(&self, name: &str, owner: &str) -> Option<String> {
        if let Some(s) = &self.shared {
            let (name, owner) = (name.to_owned(), owner.to_owned());
            return s
                .ask("claim", move |c, key| {
                    c.claim_name(key, &name, &owner, REMEMBER)
                })
                .await
                .unwrap_or_else(|| Some(UNANSWERED.into()));
        }
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

    /// `name`, announced to `owner`, names no file any more: forget it. (Where the shared
    /// store cannot be told, it stays remembered: later copies told it become uncertain.)
    pub async fn release(&self, name: &str, owner: &str) {
        if let Some(s) = &self.shared {
            let (name, owner) = (name.to_owned(), owner.to_owned());
            s.ask("release", move |c, key| c.release_name(key, &name, &owner))
                .await;
            return;
        }
        let mut names = self.dir.names.lock().unwrap_or_else(|p| p.into_inner());
        if names.get(name).is_some_and(|(o, _)| o == owner) {
            names.remove(name);
        }
    }

    /// Who else (than `owner`) was told `name` lately.
    pub async fn claimed_by_other(&self, name: &str, owner: &str) -> Option<String> {
        if let Some(s) = &self.shared {
            let (name, owner) = (name.to_owned(), owner.to_owned());
            return s
                .ask("look up", move |c, key| {
                    c.name_claimed_by_other(key, &name, &owner, REMEMBER)
                })
                .await
                .unwrap_or_else(|| Some(UNANSWERED.into()));
        }
        let names = self.dir.names.lock().unwrap_or_else(|p| p.into_inner());
        names
            .get(name)
            .filter(|(other, at)| other != owner && at.elapsed() < REMEMBER)
            .map(|(other, _)| other.clone())
    }
}

impl Shared {
    /// One blocking call to the shared store's memory of names; `None` (logged) when it did
    /// not answer.
    async fn ask<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&dyn HostSlots, &str) -> Result<T, bftp_store::StoreError> + Send + 'static,
    ) -> Option<T> {
        let (slots, key) = (self.slots.clone(), self.key.clone());
        let error = match crate::store::off_runtime(what, move || f(slots.as_ref(), &key)).await {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(%error, dir = %self.key, "cannot {what} a STOU name in the shared store");
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use bftp_store::{SlotHold, StoreError};

    /// A store's count of all nodes in memory: slot keys, names; `down` makes every call
    /// fail as a database that does not answer.
    #[derive(Default)]
    struct FakeSlots {
        taken: Mutex<HashMap<i64, String>>,
        next: AtomicU64,
        generation: AtomicU64,
        names: Mutex<HashMap<(String, String), String>>,
        down: AtomicBool,
    }

    impl FakeSlots {
        fn up(&self) -> Result<(), StoreError> {
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Unsupported {
                    op: "a database that is down",
                });
            }
            Ok(())
        }
    }

    impl HostSlots for FakeSlots {
        fn try_take(
            &self,
            hosts: &[String],
            per_host: u32,
        ) -> Result<Option<SlotHold>, StoreError> {
            self.up()?;
            let mut taken = self.taken.lock().unwrap();
            let used = taken.values().filter(|h| **h == hosts[0]).count();
            if hosts.len() != 1 || used >= per_host as usize {
                return Ok(None);
            }
            let id = self.next.fetch_add(1, Ordering::SeqCst) as i64;
            taken.insert(id, hosts[0].clone());
            Ok(Some(SlotHold { ids: vec![id] }))
        }
        fn release(&self, hold: SlotHold) {
            let mut taken = self.taken.lock().unwrap();
            for id in hold.ids {
                taken.remove(&id);
            }
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        fn generation(&self) -> u64 {
            self.generation.load(Ordering::SeqCst)
        }
        fn want(&self, _: &[String]) {
            panic!("a STOU directory is never announced as wanted");
        }
        fn wanted(&self) -> Vec<String> {
            Vec::new()
        }
        fn claim_name(
            &self,
            dir: &str,
            name: &str,
            owner: &str,
            _: Duration,
        ) -> Result<Option<String>, StoreError> {
            self.up()?;
            let mut names = self.names.lock().unwrap();
            let o = names
                .entry((dir.to_owned(), name.to_owned()))
                .or_insert_with(|| owner.to_owned());
            Ok((o != owner).then(|| o.clone()))
        }
        fn release_name(&self, dir: &str, name: &str, owner: &str) -> Result<(), StoreError> {
            self.up()?;
            let mut names = self.names.lock().unwrap();
            let k = (dir.to_owned(), name.to_owned());
            if names.get(&k).is_some_and(|o| o == owner) {
                names.remove(&k);
            }
            Ok(())
        }
        fn name_claimed_by_other(
            &self,
            dir: &str,
            name: &str,
            owner: &str,
            _: Duration,
        ) -> Result<Option<String>, StoreError> {
            self.up()?;
            let names = self.names.lock().unwrap();
            Ok(names
                .get(&(dir.to_owned(), name.to_owned()))
                .filter(|o| *o != owner)
                .cloned())
        }
    }

    /// Two nodes (two daemons' `UniqueDirs`) on one shared store: one STOU copy at a time
    /// in a directory over both, a name told to one node's copy is another's to the other
    /// node, and a store that does not answer serialises (waits) and claims nothing.
    #[tokio::test]
    async fn with_a_shared_store_one_copy_over_all_nodes_and_the_names_are_the_stores() {
        let shared = Arc::new(FakeSlots::default());
        let a = Arc::new(UniqueDirs::new(Some(shared.clone())));
        let b = Arc::new(UniqueDirs::new(Some(shared.clone())));
        let key = DirKey::new("h", 21, "u", "in");
        let first = a.lock(key.clone()).await;
        assert_eq!(first.claim("stou.1", "job 1").await, None);
        let waiting = {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move { b.lock(key).await.claim("stou.1", "job 2").await })
        };
        let _other = b.lock(DirKey::new("h", 21, "u", "out")).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "b waits for a's copy into in");
        drop(first);
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("b runs once a's copy is over")
                .unwrap()
                .as_deref(),
            Some("job 1"),
            "stou.1 was told to a's job first"
        );
        let g = b.lock(key.clone()).await;
        assert_eq!(
            g.claimed_by_other("stou.1", "job 2").await.as_deref(),
            Some("job 1")
        );
        drop(g);
        let g = a.lock(key.clone()).await;
        g.release("stou.1", "job 1").await;
        assert_eq!(g.claimed_by_other("stou.1", "job 2").await, None);

        // The store does not answer: a name counts as another's, and the directory as
        // taken (never a copy unserialised).
        shared.down.store(true, Ordering::SeqCst);
        assert!(g.claim("stou.2", "job 3").await.is_some());
        assert!(g.claimed_by_other("stou.2", "job 3").await.is_some());
        drop(g);
        let blocked = {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move { drop(b.lock(key).await) })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !blocked.is_finished(),
            "no copy while the store does not answer"
        );
        shared.down.store(false, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), blocked)
            .await
            .expect("taken once the store answers")
            .unwrap();
    }

    #[tokio::test]
    async fn one_copy_per_directory_and_a_name_told_twice_stays_the_first_owners() {
        let dirs = Arc::new(UniqueDirs::default());
        let key = DirKey::new("Host", 21, "u", "in/");
        let first = dirs.lock(key.clone()).await;
        // The same directory (spelled another way) waits; another one does not.
        let again = DirKey::new("host", 21, "u", "in");
        let waiting = {
            let dirs = dirs.clone();
            tokio::spawn(async move { dirs.lock(again).await.claim("x", "b").await })
        };
        let _other = dirs.lock(DirKey::new("host", 21, "u", "out")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        assert_eq!(first.claim("STOU.1", "a").await, None);
        assert_eq!(first.claim("STOU.1", "a").await, None);
        assert_eq!(
            first.claimed_by_other("STOU.1", "b").await,
            Some("a".into())
        );
        assert_eq!(first.claimed_by_other("STOU.1", "a").await, None);
        drop(first);
        assert_eq!(waiting.await.unwrap(), None);
        let g = dirs.lock(key).await;
        assert_eq!(g.claim("STOU.1", "b").await, Some("a".into()));
        assert_eq!(g.claimed_by_other("x", "a").await, Some("b".into()));
    }
}
