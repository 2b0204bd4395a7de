//! Per-host connection slots, shared by every transfer of the daemon and, on a store shared
//! by several nodes, counted over all of them; and what the daemon knows of hosts and pairs
//! of hosts (`pairs`: the pairs that refused the third party).

pub mod breaker;
mod check;
mod config;
mod gate;
pub mod gates;
mod learned;
pub mod pairs;
pub mod policy;
pub mod pool;
pub mod tls;
pub mod unique;

mod slots;

pub use check::PolicyCheck;
pub use config::{DataPathPolicy, FtpConfig, OverrideConfig};
pub use learned::{HostState, LearnSettings, TooMany};
pub use slots::Slots;
use slots::{take_in_cluster, wait_for_release, ClusterHold, CLUSTER_BACKOFF};

use std::sync::Arc;
use std::time::Duration;

use bftp_store::HostSlots;

use pool::PoolKey;

/// Per-host connection limits, shared by every transfer of the daemon (RULES.md §6): a pair
/// takes one connection on each of its two hosts. With a store shared by several nodes the
/// limit holds over all of them: a slot is taken here first, then in the store
/// (`HostSlots`), and both are needed.
pub struct HostLimits {
    /// Connection pairs one job (or one foreground transfer) runs at once.
    pub parallel_pairs: usize,
    /// `[ftp] max_connections_per_host`; a host that taught a lower limit has that one.
    per_host: usize,
    /// This node's count of each host's connections (lower case), at its limit.
    gates: std::sync::Mutex<std::collections::HashMap<String, Arc<gate::Gate>>>,
    /// The limits learned from the servers (`learned`).
    learned: learned::Learned,
    /// The count of all nodes, when the store is shared.
    cluster: Option<Arc<dyn HostSlots>>,
    /// Unique (STOU) copies: one at a time per destination directory, over all nodes.
    pub unique: crate::hosts::unique::UniqueDirs,
    /// Logged-in pairs kept between jobs, holding their slots (`crate::hosts::pool`).
    pub pool: Arc<crate::hosts::pool::PairPool>,
    /// The daemon-wide caps of relays (`[ftp] relay_max`, `relay_bytes_per_second`), shared
    /// by every pair of every job and foreground transfer.
    relay_gate: Arc<bftp_ftp::RelayGate>,
}

impl HostLimits {
    /// Waits for a kept pair of `key` or a slot on both hosts (`a`, `b`), whichever comes first;
    /// kept pairs of other keys that hold the slots it needs are closed, not waited for (also when
    /// one is kept while this job waits: keeping it wakes the job).
    pub async fn acquire_pair(&self, key: &PoolKey, a: &str, b: &str) -> pool::Acquired {
        let (hosts, pool) = (self, &self.pool);
        loop {
            // Registered before looking, so that a pair kept meanwhile wakes this job.
            let kept = pool.kept.notified();
            tokio::pin!(kept);
            kept.as_mut().enable();
            if let Some((pair, slots, origin)) = pool.take(key).await {
                return pool::Acquired::Kept(Box::new(pair), slots, origin);
            }
            // Closes kept pairs of other keys on these hosts if that frees a slot.
            if let Some(slots) = hosts.try_acquire(a, b).await {
                return pool::Acquired::Slots(slots);
            }
            tokio::select! {
                slots = hosts.acquire(a, b) => return pool::Acquired::Slots(slots),
                () = &mut kept => {}
            }
        }
    }

    /// Without a pool of kept pairs, counted by this daemon alone.
    pub fn new(parallel_pairs: usize, per_host: usize) -> Arc<HostLimits> {
        let none = crate::hosts::pool::PoolSettings {
            max_idle: 0,
            idle_timeout: std::time::Duration::ZERO,
        };
        HostLimits::with_pool(
            parallel_pairs,
            per_host,
            none,
            None,
            bftp_ftp::RelayGate::unlimited(),
        )
    }

    /// The daemon-wide caps of relays: a relay holds one of its places while it runs, and
    /// its bytes pass its rate (`bftp_ftp::RelayOptions::gate`, `Pair::set_relay_gate`).
    pub(crate) fn relay_gate(&self) -> &Arc<bftp_ftp::RelayGate> {
        &self.relay_gate
    }

    /// `cluster`: the store's count of all nodes (`Cluster::host_slots`), if shared;
    /// `relay_gate`: the daemon's caps of relays (`FtpConfig::relay_gate`).
    pub fn with_pool(
        parallel_pairs: usize,
        per_host: usize,
        pool: crate::hosts::pool::PoolSettings,
        cluster: Option<Arc<dyn HostSlots>>,
        relay_gate: Arc<bftp_ftp::RelayGate>,
    ) -> Arc<HostLimits> {
        Arc::new(HostLimits {
            parallel_pairs: parallel_pairs.max(1),
            per_host: per_host.max(1),
            gates: Default::default(),
            learned: Default::default(),
            unique: crate::hosts::unique::UniqueDirs::new(cluster.clone()),
            cluster,
            pool: crate::hosts::pool::PairPool::new(pool),
            relay_gate,
        })
    }

    fn gate(&self, host: &str) -> Arc<gate::Gate> {
        let host = host.to_ascii_lowercase();
        let limit = self.limit_of(&host);
        let mut m = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(host.clone())
            .or_insert_with(|| gate::Gate::new(&host, limit))
            .clone()
    }

    /// The slots a pair on one host takes there: two, or one where only one is allowed.
    fn same_host_slots(&self, host: &str) -> usize {
        2.min(self.limit_of(&host.to_ascii_lowercase()))
    }

    /// The hosts a pair between `a` and `b` takes a slot on, one entry a slot (the key the
    /// in-memory gates use: the host name in lower case).
    fn slot_hosts(&self, a: &str, b: &str) -> Vec<String> {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        if a == b {
            let n = self.same_host_slots(&a);
            vec![a; n]
        } else {
            vec![a, b]
        }
    }

    /// Takes `hosts` in the count of all nodes, if there is one, each at its own limit
    /// (learned limits differ by host): `Some(empty)` without one, `None` when a host is full
    /// there (or the database did not answer: never more connections than the limit); nothing
    /// is held then.
    async fn take_cluster(&self, hosts: Vec<String>) -> Option<Vec<ClusterHold>> {
        let Some(cluster) = self.cluster.clone() else {
            return Some(Vec::new());
        };
        // Hosts of one limit in one take (in name order), as before learned limits.
        let mut by_limit: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
        for h in hosts {
            let limit = u32::try_from(self.limit_of(&h)).unwrap_or(u32::MAX);
            by_limit.entry(limit).or_default().push(h);
        }
        let mut held = Vec::new();
        for (per_host, hosts) in by_limit {
            held.push(take_in_cluster(cluster.clone(), hosts, per_host).await?);
        }
        Some(held)
    }

    /// Waits for a connection slot on both hosts. Hosts are taken in name order, so two
    /// pairs between the same hosts in opposite directions cannot deadlock. With a count of
    /// all nodes, a full host there is looked at again when a node announces a release, or
    /// after a backoff (20 ms doubling to 2 s): never in a busy loop.
    pub async fn acquire(&self, a: &str, b: &str) -> Slots {
        let mut backoff = CLUSTER_BACKOFF.0;
        loop {
            let seen = self.cluster.as_ref().map(|c| c.generation());
            let local = match self.try_acquire_local(a, b).await {
                Some(l) => l,
                None => self.acquire_local(a, b).await,
            };
            if let Some(cluster) = self.take_cluster(self.slot_hosts(a, b)).await {
                return Slots {
                    _local: local,
                    _cluster: cluster,
                    more: Vec::new(),
                };
            }
            drop(local);
            if let Some(c) = &self.cluster {
                c.want(&self.slot_hosts(a, b));
            }
            // Kept pairs of this node on these hosts hold slots of the count of all nodes.
            if self.pool.evict_touching(a, b).await {
                backoff = CLUSTER_BACKOFF.0;
            }
            let (Some(c), Some(seen)) = (&self.cluster, seen) else {
                continue;
            };
            wait_for_release(c.as_ref(), seen, &mut backoff).await;
        }
    }

    /// With a count of all nodes: closes, as long as `self` lives, the kept pairs on hosts
    /// another node waits for (a kept idle pair would hold its slots there until its idle
    /// timeout). Each is closed with QUIT before its slots go back.
    pub fn spawn_give_way(self: &Arc<Self>) {
        if self.cluster.is_none() {
            return;
        }
        let hosts = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let Some(hosts) = hosts.upgrade() else { return };
                let Some(c) = &hosts.cluster else { return };
                for h in c.wanted() {
                    hosts.pool.close_touching(&h).await;
                }
            }
        });
    }

    /// Waits for this daemon's own slots on both hosts.
    async fn acquire_local(&self, a: &str, b: &str) -> Vec<gate::Permit> {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        let mut out = Vec::new();
        if a == b {
            out.push(self.gate(&a).take(self.same_host_slots(&a)).await);
            return out;
        }
        let (first, second) = if a < b { (a, b) } else { (b, a) };
        for h in [first, second] {
            out.push(self.gate(&h).take(1).await);
        }
        out
    }

    /// A slot on one host if one is free now: for a look at a copy's bytes, which never
    /// waits for a slot (and holds it only while the copy it watches runs).
    pub async fn try_acquire_one(&self, host: &str) -> Option<Slots> {
        let host = host.to_ascii_lowercase();
        let local = self.gate(&host).try_take(1)?;
        let cluster = self.take_cluster(vec![host]).await?;
        Some(Slots {
            _local: vec![local],
            _cluster: cluster,
            more: Vec::new(),
        })
    }

    /// The slots of up to `want` extra pairs between `a` and `b` (a job's or a transfer's
    /// pairs after its first): only those free now, never waiting, so that no job holds up
    /// or starves another for more parallelism.
    pub async fn extra_slots(&self, a: &str, b: &str, want: usize) -> Vec<Slots> {
        let mut out = Vec::new();
        while out.len() < want {
            match self.try_acquire(a, b).await {
                Some(s) => out.push(s),
                None => break,
            }
        }
        out
    }

    /// A slot on both hosts if both are free now, after closing kept pairs on them if
    /// needed (`crate::hosts::pool`); `None` otherwise (nothing held).
    pub async fn try_acquire(&self, a: &str, b: &str) -> Option<Slots> {
        let local = self.try_acquire_local(a, b).await?;
        let cluster = self.take_cluster(self.slot_hosts(a, b)).await?;
        Some(Slots {
            _local: local,
            _cluster: cluster,
            more: Vec::new(),
        })
    }

    /// This daemon's own slots on both hosts if free now, after closing kept pairs on them
    /// if needed.
    async fn try_acquire_local(&self, a: &str, b: &str) -> Option<Vec<gate::Permit>> {
        if let Some(free) = self.try_acquire_free(a, b) {
            return Some(free);
        }
        if self.pool.evict_touching(a, b).await {
            return self.try_acquire_free(a, b);
        }
        None
    }

    fn try_acquire_free(&self, a: &str, b: &str) -> Option<Vec<gate::Permit>> {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        if a == b {
            let n = self.same_host_slots(&a);
            return self.gate(&a).try_take(n).map(|p| vec![p]);
        }
        let first = self.gate(&a).try_take(1)?;
        let second = self.gate(&b).try_take(1)?;
        Some(vec![first, second])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn extra_pairs_take_only_free_slots_and_hold_nothing_when_refused() {
        let hosts = HostLimits::new(4, 2);
        let first = hosts.acquire("A", "b").await;
        let second = hosts
            .try_acquire("a", "B")
            .await
            .expect("one slot left on each host");
        assert!(hosts.try_acquire("a", "c").await.is_none(), "a is full");
        // The refused try took nothing on c: two pairs to c still fit.
        let c = hosts.try_acquire("c", "d").await.unwrap();
        let c2 = hosts.try_acquire("c", "e").await.unwrap();
        assert!(hosts.try_acquire("c", "f").await.is_none());
        drop((first, second, c, c2));
        assert!(hosts.try_acquire("a", "c").await.is_some());
        // A pair on one host takes two slots of it.
        let same = hosts.try_acquire("g", "g").await.unwrap();
        assert!(hosts.try_acquire("g", "h").await.is_none());
        drop(same);
    }

    #[tokio::test]
    async fn extra_slots_are_what_is_free_now() {
        let hosts = HostLimits::new(4, 3);
        let first = hosts.acquire("a", "b").await;
        assert_eq!(
            hosts.extra_slots("a", "b", 3).await.len(),
            2,
            "two slots left on a and b"
        );
        let held = hosts.extra_slots("a", "b", 1).await;
        assert_eq!(held.len(), 1, "no more than asked");
        assert_eq!(hosts.extra_slots("b", "a", 3).await.len(), 1);
        drop((first, held));
    }
}
