//! A nearly full disk on the control host: what bftpd does instead of losing anything.
//!
//! The store keeps a reserve of free space (`[store] min_free_mib`): below it a submit is
//! refused (HTTP 507), the scheduler starts no attempt and a running attempt starts no new
//! file; the file in flight finishes and its result is written (such writes are refused only
//! below half the reserve). The attempt then ends as a transient failure and the job is
//! retried with its backoff. All of it is looked up again at each step, so bftpd goes on by
//! itself once space is freed: nothing to restart, nothing damaged, because the storage
//! engine never met the full disk.

use bftp_store::{JobStore, StoreError};

use crate::scheduler::AttemptEnd;

/// The end of an attempt that must take no new file because the disk is nearly full.
pub(crate) fn no_room_for_files(store: &dyn JobStore) -> Option<AttemptEnd> {
    match store.upkeep().map_or(Ok(()), |u| u.space_for_new_work()) {
        Err(e @ StoreError::DiskFull { .. }) => Some(AttemptEnd::Transient {
            reason: format!("no new file started: {e}"),
        }),
        _ => None,
    }
}

/// Whether the scheduler may start attempts (it looks again a few seconds later if not).
pub(crate) fn room_for_attempts(store: &dyn JobStore) -> bool {
    match store.upkeep().map_or(Ok(()), |u| u.space_for_new_work()) {
        Err(e @ StoreError::DiskFull { .. }) => {
            tracing::warn!(error = %e, "no attempt started: the store's disk is nearly full");
            false
        }
        _ => true,
    }
}
