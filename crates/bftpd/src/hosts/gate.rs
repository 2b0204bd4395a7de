//! One host's count of this node's connections: how many are in use, how many of those a
//! server refused for having too many (their slots not yet given back), and the limit, which
//! moves when a limit is learned or raised (`crate::hosts::learned`). A semaphore whose size
//! changes: a lowered limit holds new takers back until enough slots came back; a raised
//! one lets them in at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GateState {
    pub in_use: usize,
    pub refused: usize,
    pub limit: usize,
}

pub(crate) struct Gate {
    /// Lower case.
    host: String,
    state: Mutex<GateState>,
    changed: Notify,
}

/// Slots taken on one gate, given back when dropped.
pub(crate) struct Permit {
    gate: Arc<Gate>,
    n: usize,
    /// Of these, the connections the server refused for having too many.
    refused: AtomicUsize,
}

impl Gate {
    pub(crate) fn new(host: &str, limit: usize) -> Arc<Gate> {
        Arc::new(Gate {
            host: host.to_owned(),
            state: Mutex::new(GateState {
                limit: limit.max(1),
                ..Default::default()
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn state(&self) -> GateState {
        *self.lock()
    }

    /// A new limit (at least 1): waiters look again.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.lock().limit = limit.max(1);
        self.changed.notify_waiters();
    }

    /// `n` slots if they are free now.
    pub(crate) fn try_take(self: &Arc<Self>, n: usize) -> Option<Permit> {
        let mut s = self.lock();
        // Never more than the whole limit at once (a limit lowered while a pair on one host
        // waited for two).
        let n = n.min(s.limit);
        if s.in_use + n > s.limit {
            return None;
        }
        s.in_use += n;
        Some(Permit {
            gate: self.clone(),
            n,
            refused: AtomicUsize::new(0),
        })
    }

    /// Waits for `n` slots (at most the limit: the caller asks for no more).
    pub(crate) async fn take(self: &Arc<Self>, n: usize) -> Permit {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(p) = self.try_take(n) {
                return p;
            }
            changed.await;
        }
    }
}

impl Permit {
    /// One connection of these was refused for too many: not counted as held (`held`) until
    /// its slot goes back. Marks at most `n`.
    pub(crate) fn mark_refused(&self) -> bool {
        let marked = self
            .refused
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r < self.n).then_some(r + 1)
            })
            .is_ok();
        if marked {
            self.gate.lock().refused += 1;
        }
        marked
    }

    /// The host these slots are on (lower case).
    pub(crate) fn host(&self) -> &str {
        &self.gate.host
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        {
            let mut s = self.gate.lock();
            s.in_use = s.in_use.saturating_sub(self.n);
            s.refused = s.refused.saturating_sub(*self.refused.get_mut());
        }
        self.gate.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lowered_limit_holds_takers_back_until_slots_come_back() {
        let g = Gate::new("h", 3);
        let a = g.try_take(1).unwrap();
        let b = g.try_take(2).unwrap();
        assert!(g.try_take(1).is_none());
        g.set_limit(1);
        drop(a);
        assert!(g.try_take(1).is_none(), "two in use, one allowed");
        let waiter = tokio::spawn({
            let g = g.clone();
            async move { g.take(1).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(b);
        let c = waiter.await.unwrap();
        assert_eq!(g.state().in_use, 1);
        g.set_limit(2);
        let d = g.try_take(1).expect("raised: room at once");
        assert!(c.mark_refused());
        assert!(!c.mark_refused(), "one slot, one refusal");
        assert_eq!(
            g.state(),
            GateState {
                in_use: 2,
                refused: 1,
                limit: 2
            }
        );
        drop((c, d));
        assert_eq!(
            g.state(),
            GateState {
                in_use: 0,
                refused: 0,
                limit: 2
            }
        );
    }
}
