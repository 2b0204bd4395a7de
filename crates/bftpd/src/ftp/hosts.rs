//! Per-host connection slots, shared by every transfer of the daemon.

use std::sync::Arc;

/// The slots one connection pair holds: one on each of its two hosts.
pub type Slots = Vec<tokio::sync::OwnedSemaphorePermit>;

/// Per-host connection limits, shared by every transfer of the daemon (RULES.md §6): a pair
/// takes one connection on each of its two hosts.
pub struct HostLimits {
    /// Connection pairs one job (or one foreground transfer) runs at once.
    pub parallel_pairs: usize,
    per_host: usize,
    hosts: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Unique (STOU) copies: one at a time per destination directory, daemon-wide.
    pub unique: crate::unique::UniqueDirs,
    /// Logged-in pairs kept between jobs, holding their slots (`crate::pool`).
    pub pool: Arc<crate::pool::PairPool>,
}

impl HostLimits {
    /// Without a pool of kept pairs.
    pub fn new(parallel_pairs: usize, per_host: usize) -> Arc<HostLimits> {
        let none = crate::pool::PoolSettings {
            max_idle: 0,
            idle_timeout: std::time::Duration::ZERO,
        };
        HostLimits::with_pool(parallel_pairs, per_host, none)
    }

    pub fn with_pool(
        parallel_pairs: usize,
        per_host: usize,
        pool: crate::pool::PoolSettings,
    ) -> Arc<HostLimits> {
        Arc::new(HostLimits {
            parallel_pairs: parallel_pairs.max(1),
            per_host: per_host.max(1),
            hosts: Default::default(),
            unique: Default::default(),
            pool: crate::pool::PairPool::new(pool),
        })
    }

    fn semaphore(&self, host: &str) -> Arc<tokio::sync::Semaphore> {
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(host.to_ascii_lowercase())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_host)))
            .clone()
    }

    /// Waits for a connection slot on both hosts. Hosts are taken in name order, so two
    /// pairs between the same hosts in opposite directions cannot deadlock.
    pub async fn acquire(&self, a: &str, b: &str) -> Slots {
        // Kept pairs of other jobs give their slots up rather than be waited for.
        if let Some(slots) = self.try_acquire(a, b) {
            return slots;
        }
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        let mut out = Vec::new();
        if a == b {
            if let Ok(p) = self
                .semaphore(&a)
                .acquire_many_owned(2.min(self.per_host as u32))
                .await
            {
                out.push(p);
            }
            return out;
        }
        let (first, second) = if a < b { (a, b) } else { (b, a) };
        for h in [first, second] {
            if let Ok(p) = self.semaphore(&h).acquire_owned().await {
                out.push(p);
            }
        }
        out
    }

    /// A slot on one host if one is free now: for a look at a copy's bytes, which never
    /// waits for a slot (and holds it only while the copy it watches runs).
    pub fn try_acquire_one(&self, host: &str) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.semaphore(&host.to_ascii_lowercase())
            .try_acquire_owned()
            .ok()
    }

    /// The slots of up to `want` extra pairs between `a` and `b` (a job's or a transfer's
    /// pairs after its first): only those free now, never waiting, so that no job holds up
    /// or starves another for more parallelism.
    pub fn extra_slots(&self, a: &str, b: &str, want: usize) -> Vec<Slots> {
        std::iter::from_fn(|| self.try_acquire(a, b))
            .take(want)
            .collect()
    }

    /// A slot on both hosts if both are free now, after closing kept pairs on them if
    /// needed (`crate::pool`); `None` otherwise (nothing held).
    pub fn try_acquire(&self, a: &str, b: &str) -> Option<Slots> {
        self.try_acquire_free(a, b).or_else(|| {
            self.pool
                .evict_touching(a, b)
                .then(|| self.try_acquire_free(a, b))
                .flatten()
        })
    }

    fn try_acquire_free(&self, a: &str, b: &str) -> Option<Slots> {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        if a == b {
            let n = 2.min(self.per_host as u32);
            return self
                .semaphore(&a)
                .try_acquire_many_owned(n)
                .ok()
                .map(|p| vec![p]);
        }
        let first = self.semaphore(&a).try_acquire_owned().ok()?;
        let second = self.semaphore(&b).try_acquire_owned().ok()?;
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
            .expect("one slot left on each host");
        assert!(hosts.try_acquire("a", "c").is_none(), "a is full");
        // The refused try took nothing on c: two pairs to c still fit.
        let c = hosts.try_acquire("c", "d").unwrap();
        let c2 = hosts.try_acquire("c", "e").unwrap();
        assert!(hosts.try_acquire("c", "f").is_none());
        drop((first, second, c, c2));
        assert!(hosts.try_acquire("a", "c").is_some());
        // A pair on one host takes two slots of it.
        let same = hosts.try_acquire("g", "g").unwrap();
        assert!(hosts.try_acquire("g", "h").is_none());
        drop(same);
    }

    #[tokio::test]
    async fn extra_slots_are_what_is_free_now() {
        let hosts = HostLimits::new(4, 3);
        let first = hosts.acquire("a", "b").await;
        assert_eq!(
            hosts.extra_slots("a", "b", 3).len(),
            2,
            "two slots left on a and b"
        );
        let held = hosts.extra_slots("a", "b", 1);
        assert_eq!(held.len(), 1, "no more than asked");
        assert_eq!(hosts.extra_slots("b", "a", 3).len(), 1);
        drop((first, held));
    }
}
