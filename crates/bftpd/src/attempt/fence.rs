//! An attempt's fence on a shared store (RULES.md §4.8): the node's lease on the job, asked
//! before each command the attempt sends for it.
//!
//! The store keeps the lease (`bftp_store::LeaseCell`: renewed by the heartbeat with each
//! renewal the database confirms, lost with the job); the rule is `bftp_core::lease`. Past
//! the lease's deadline by this node's own clock, no command goes to either server (the
//! sessions' [`SendGate`]), no new file starts, and a copy in flight is stopped with ABOR
//! ([`LeaseGate::expired`]): whatever the heartbeat has or has not seen yet. A store of one
//! node has no lease, and no gate: nothing changes there.

use std::sync::Arc;
use std::time::Instant;

use bftp_core::lease::{Fenced, Lease};
use bftp_ftp::SendGate;
use bftp_store::LeaseCell;

#[derive(Debug)]
pub struct LeaseGate {
    cell: Arc<LeaseCell>,
}

impl LeaseGate {
    pub fn new(cell: Arc<LeaseCell>) -> LeaseGate {
        LeaseGate { cell }
    }

    /// Whether the attempt may send a command for the job now.
    pub fn check(&self) -> Result<(), Fenced> {
        self.cell.may_send()
    }

    /// Completes once the lease's deadline passed with no renewal confirmed meanwhile, or
    /// the lease is lost: a copy in flight then stops. Never, once the lease ended (the
    /// node let the job go, or it was cancelled straight from its hold: a cancel's
    /// clean-up follows).
    pub async fn expired(&self) {
        loop {
            match self.cell.get() {
                Lease::Held { deadline } if Instant::now() < deadline => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await
                }
                Lease::Held { .. } | Lease::Lost => return,
                Lease::Ended => std::future::pending().await,
            }
        }
    }
}

impl SendGate for LeaseGate {
    fn admit(&self) -> Result<(), String> {
        self.check().map_err(|f| f.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_copy_in_flight_is_stopped_at_the_deadline_unless_renewed() {
        let t0 = Instant::now();
        let cell = Arc::new(LeaseCell::held(t0 + Duration::from_millis(150)));
        let gate = LeaseGate::new(cell.clone());
        assert!(gate.check().is_ok());
        // A renewal before the deadline moves it on: the copy goes on past the first one.
        cell.renew(t0 + Duration::from_millis(300));
        gate.expired().await;
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(matches!(gate.check(), Err(Fenced::Expired { .. })));
        // A lease lost stops it at once; one ended (a cancel's clean-up) never.
        cell.lose();
        tokio::time::timeout(Duration::from_secs(1), gate.expired())
            .await
            .expect("lost: at once");
        let ended = Arc::new(LeaseCell::held(t0));
        ended.end();
        let gate = LeaseGate::new(ended);
        assert!(gate.check().is_ok());
        assert!(
            tokio::time::timeout(Duration::from_millis(100), gate.expired())
                .await
                .is_err()
        );
    }
}
