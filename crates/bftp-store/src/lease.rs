//! [`LeaseCell`]: a node's lease on one job as the store keeps it and the attempt reads it.

use std::sync::Mutex;
use std::time::Instant;

use bftp_core::lease::{self, Fenced, Lease};

/// A node's lease on a job (`bftp_core::lease`), shared between the store, which renews it
/// or finds it lost or ended, and the job's attempt, which asks it before each command it
/// sends for the job. A store of one node has none: nothing to fence.
#[derive(Debug)]
pub struct LeaseCell(Mutex<Lease>);

impl LeaseCell {
    /// A lease held until `deadline` on this node's monotonic clock.
    pub fn held(deadline: Instant) -> LeaseCell {
        LeaseCell(Mutex::new(Lease::Held { deadline }))
    }

    pub fn get(&self) -> Lease {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a command for the job may be sent now.
    pub fn may_send(&self) -> Result<(), Fenced> {
        lease::may_send(self.get(), Instant::now())
    }

    /// A renewal the database confirmed, with the deadline it gives.
    pub fn renew(&self, deadline: Instant) {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *l = lease::renewed(*l, deadline);
    }

    /// Another node may hold the job now: for good.
    pub fn lose(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Lease::Lost;
    }

    /// The node let the job go by a write of its own, or the job was cancelled straight
    /// from its hold. A lost lease stays lost.
    pub fn end(&self) {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if *l != Lease::Lost {
            *l = Lease::Ended;
        }
    }
}
