//! The daemon's caps on relays (SPEC §14): how many run at once, and how many bytes per
//! second all of them move together. One [`RelayGate`] is shared by every pair of a daemon.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The caps shared by all relays of a daemon.
#[derive(Debug)]
pub struct RelayGate {
    at_once: Arc<Semaphore>,
    max_at_once: usize,
    rate: Option<Rate>,
}

/// A place among the relays that may run at once, held while one runs.
#[derive(Debug)]
pub struct RelayPermit {
    _permit: OwnedSemaphorePermit,
}

impl RelayGate {
    /// At most `max_at_once` relays at once (at least one), moving at most
    /// `bytes_per_second` together (`None`: no cap).
    pub fn new(max_at_once: usize, bytes_per_second: Option<u64>) -> Arc<Self> {
        let max_at_once = max_at_once.max(1);
        Arc::new(Self {
            at_once: Arc::new(Semaphore::new(max_at_once)),
            max_at_once,
            rate: bytes_per_second.filter(|&r| r > 0).map(Rate::new),
        })
    }

    /// No caps beyond one very large number of relays at once.
    pub fn unlimited() -> Arc<Self> {
        Self::new(Semaphore::MAX_PERMITS, None)
    }

    pub fn max_at_once(&self) -> usize {
        self.max_at_once
    }

    pub fn bytes_per_second(&self) -> Option<u64> {
        self.rate.as_ref().map(|r| r.per_second)
    }

    /// Relays running now.
    pub fn running(&self) -> usize {
        self.max_at_once
            .saturating_sub(self.at_once.available_permits())
    }

    /// Waits for a place among the relays that may run at once.
    pub async fn admit(&self) -> RelayPermit {
        let permit = Arc::clone(&self.at_once)
            .acquire_owned()
            .await
            .expect("the relay semaphore is never closed");
        RelayPermit { _permit: permit }
    }

    /// Waits until `bytes` more may be moved under the daemon's rate cap.
    pub(crate) async fn take(&self, bytes: usize) {
        if let Some(rate) = &self.rate {
            rate.take(bytes as u64).await;
        }
    }

    /// The most bytes one step of a mover should move under the rate cap (a tenth of a
    /// second's worth, at least 4 KiB), so that the relays share the rate fairly.
    pub(crate) fn step(&self, wanted: usize) -> usize {
        match &self.rate {
            Some(rate) => wanted.min(((rate.per_second / 10) as usize).max(4096)),
            None => wanted,
        }
    }
}

/// A token bucket: `per_second` tokens a second, at most a quarter second's worth saved.
#[derive(Debug)]
struct Rate {
    per_second: u64,
    /// Tokens (bytes) available now (negative: owed) and when that was computed.
    state: Mutex<(f64, Instant)>,
}

impl Rate {
    fn new(per_second: u64) -> Self {
        Self {
            per_second,
            state: Mutex::new((0.0, Instant::now())),
        }
    }

    async fn take(&self, bytes: u64) {
        let wait = {
            let mut state = self.state.lock().await;
            let now = Instant::now();
            let rate = self.per_second as f64;
            let burst = rate / 4.0;
            let tokens = (state.0 + now.duration_since(state.1).as_secs_f64() * rate).min(burst);
            let tokens = tokens - bytes as f64;
            *state = (tokens, now);
            if tokens >= 0.0 {
                None
            } else {
                Some(Duration::from_secs_f64(-tokens / rate))
            }
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_once_is_a_cap() {
        let gate = RelayGate::new(2, None);
        let a = gate.admit().await;
        let _b = gate.admit().await;
        assert_eq!(gate.running(), 2);
        let third = tokio::time::timeout(Duration::from_millis(50), gate.admit()).await;
        assert!(third.is_err(), "a third relay waited");
        drop(a);
        let third = tokio::time::timeout(Duration::from_millis(500), gate.admit()).await;
        assert!(third.is_ok(), "a place came free");
    }

    #[tokio::test]
    async fn the_rate_cap_spaces_the_bytes() {
        let gate = RelayGate::new(4, Some(1_000_000));
        let started = Instant::now();
        // 600 KB at 1 MB/s: at least 0.6 s (nothing is saved up front; a bucket that
        // never refilled would take forever, one without a cap no time).
        for _ in 0..60 {
            gate.take(10_000).await;
        }
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(590) && took <= Duration::from_millis(3000),
            "{took:?}"
        );
        assert_eq!(gate.step(1 << 20), 100_000);
        assert_eq!(RelayGate::new(1, None).step(1 << 20), 1 << 20);
    }
}
