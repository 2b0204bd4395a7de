//! The slots one pair holds, and the store's count of all nodes: taking slots there,
//! giving them back, waiting for a release.

use std::sync::Arc;
use std::time::Duration;

use bftp_store::{HostSlots, SlotHold};

/// The slots one connection pair (or one look at a copy) holds: one on each of its hosts, in
/// this daemon's count and, with a shared store, in the count of all nodes. Dropping it
/// gives them back: drop it only once its connections are closed.
#[derive(Default)]
pub struct Slots {
    // Held for their drop alone (and marked when a server refused one for too many).
    pub(super) _local: Vec<super::gate::Permit>,
    pub(super) _cluster: Vec<ClusterHold>,
    /// More slots held with these: a relaying pair's data connections, one on each host.
    pub(super) more: Vec<Slots>,
}

impl Slots {
    /// These slots and `more`, held and given back together.
    pub fn with(mut self, more: Slots) -> Slots {
        self.more.push(more);
        self
    }

    /// A connection on `host` (lower case) of these slots was refused for too many: it is
    /// not counted as held there while its slot is still taken. Whether one was marked.
    pub(super) fn mark_refused(&self, host: &str) -> bool {
        self._local
            .iter()
            .filter(|p| p.host() == host)
            .any(|p| p.mark_refused())
            || self.more.iter().any(|m| m.mark_refused(host))
    }
}

/// Slots taken in the store's count of all nodes, given back when dropped.
pub(crate) struct ClusterHold {
    slots: Arc<dyn HostSlots>,
    hold: SlotHold,
}

impl Drop for ClusterHold {
    fn drop(&mut self) {
        self.slots.release(std::mem::take(&mut self.hold));
    }
}

/// The first and the longest wait between two looks at a full host of all nodes, when no
/// release was announced meanwhile (a release wakes the waiters at once).
pub(crate) const CLUSTER_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_secs(2));

/// How often a waiter looks whether a release was announced (in memory, not the database).
const GENERATION_LOOK: Duration = Duration::from_millis(5);

/// Takes `hosts` in the store's count of all nodes, at most `per_host` a host: `None` when
/// one is full there, or when the database did not answer (counted as full).
pub(crate) async fn take_in_cluster(
    cluster: Arc<dyn HostSlots>,
    hosts: Vec<String>,
    per_host: u32,
) -> Option<ClusterHold> {
    // The hold is wrapped in the blocking task itself: if this future is dropped while the
    // task runs, the slots it took are given back when its answer is dropped.
    let taken = crate::store::off_runtime("take host slots", move || {
        cluster.try_take(&hosts, per_host).map(|h| {
            h.map(|hold| ClusterHold {
                slots: cluster.clone(),
                hold,
            })
        })
    })
    .await;
    match taken {
        Ok(Ok(hold)) => hold,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot take slots in the shared store");
            None
        }
        Err(_) => None,
    }
}

/// After a refused take in the count of all nodes (`seen`: its generation before the take):
/// waits until a node announces a release, or for `backoff`, which doubles (up to 2 s) when
/// nothing was announced meanwhile.
pub(crate) async fn wait_for_release(c: &dyn HostSlots, seen: u64, backoff: &mut Duration) {
    let until = tokio::time::Instant::now() + *backoff;
    while c.generation() == seen && tokio::time::Instant::now() < until {
        tokio::time::sleep(GENERATION_LOOK).await;
    }
    if c.generation() == seen {
        *backoff = (*backoff * 2).min(CLUSTER_BACKOFF.1);
    }
}
