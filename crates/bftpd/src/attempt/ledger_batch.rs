//! Grouped ledger writes for one attempt: the records of plain copies that finish close
//! together go to the store in one transaction and one flush (`JobStore::update_members`),
//! instead of a transaction and a flush each.
//!
//! Only a record nothing waits for is grouped: a replace copy's success, with no intent to
//! clear and no source to delete after it (`attempt::record::entry` decides). Such a member, if
//! the daemon dies before its record is durable, is still pending in the ledger and is simply
//! copied again (a replace copy is safe to repeat, and nothing was recorded that did not
//! happen). Every other change (failures, intents, a `move`'s success before its DELE) is
//! still written and made durable before the next step, as before.
//!
//! One writer task per attempt takes whatever records are waiting and writes them in one
//! transaction; the next write begins at least [`PACE`] after the previous one began, so that
//! on a fast network (hundreds of files a second) a flush takes the records of many files
//! instead of two or three: each flush (sled's write-out, `sync_file_range`, `fdatasync`,
//! the threads it wakes) cost more CPU than the copy of a small file itself. A record after a
//! pause is written at once. The attempt ends only after [`Batch::finish`], which writes what
//! is waiting without waiting for the pace: every grouped record is durable before the job's
//! outcome is. A crash loses at most the grouped records of the last pace, members that are
//! then still pending and are copied again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_store::{JobId, MemberUpdate};
use tokio::sync::{mpsc, Notify};

use crate::clock::Clock;
use crate::store::Store;

/// Least time from the start of one grouped write to the start of the next.
pub const PACE: Duration = Duration::from_millis(100);

/// The grouped writes of one attempt.
pub struct Batch {
    store: Store,
    clock: Clock,
    id: JobId,
    state: Mutex<State>,
    /// What the writer task shares with the batch (the writer does not hold the batch: a
    /// batch dropped without `finish` closes the channel, and the writer writes what is
    /// left and ends).
    shared: Arc<Shared>,
}

#[derive(Default)]
struct State {
    tx: Option<mpsc::UnboundedSender<(u32, MemberUpdate)>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    /// Set by `finish`: write what is waiting without waiting for the pace.
    finishing: AtomicBool,
    wake: Notify,
    result: Mutex<Written>,
}

#[derive(Default)]
struct Written {
    /// The first grouped write that failed, as text (the attempt ends on it).
    failed: Option<String>,
    /// Members recorded through the batch, and transactions used (for tests).
    counts: (u64, u64),
}

impl Shared {
    fn result(&self) -> std::sync::MutexGuard<'_, Written> {
        self.result.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Batch {
    pub fn new(store: Store, clock: Clock, id: JobId) -> Arc<Batch> {
        Arc::new(Batch {
            store,
            clock,
            id,
            state: Mutex::default(),
            shared: Arc::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a member's record; `Err` when an earlier grouped write failed (the attempt
    /// should end: the store cannot keep records).
    pub fn push(self: &Arc<Self>, index: u32, update: MemberUpdate) -> Result<(), String> {
        if let Some(e) = &self.shared.result().failed {
            return Err(e.clone());
        }
        let mut st = self.state();
        if st.tx.is_none() {
            let (tx, rx) = mpsc::unbounded_channel();
            st.tx = Some(tx);
            let writer = write_all(
                self.store.clone(),
                self.clock.clone(),
                self.id,
                self.shared.clone(),
                rx,
            );
            st.writer = Some(tokio::spawn(writer));
        }
        if let Some(tx) = &st.tx {
            // The writer lives until `finish` drops the sender: the send cannot fail.
            let _ = tx.send((index, update));
        }
        Ok(())
    }

    /// Waits until every queued record is durable; the first failure of a grouped write.
    pub async fn finish(&self) -> Result<(), String> {
        let writer = {
            let mut st = self.state();
            st.tx = None;
            st.writer.take()
        };
        self.shared.finishing.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(writer) = writer {
            let _ = writer.await;
        }
        match self.shared.result().failed.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Members recorded through the batch, and the transactions that took them.
    #[cfg(test)]
    pub fn written(&self) -> (u64, u64) {
        self.shared.result().counts
    }
}

/// The writer task: whatever records wait, in one transaction, at most once per [`PACE`]
/// (at once after a pause, and at once once the batch is finishing or dropped).
async fn write_all(
    store: Store,
    clock: Clock,
    id: JobId,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<(u32, MemberUpdate)>,
) {
    let mut next = tokio::time::Instant::now();
    while let Some(first) = rx.recv().await {
        if !shared.finishing.load(Ordering::Acquire) {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = shared.wake.notified() => {}
            }
        }
        next = tokio::time::Instant::now() + PACE;
        let mut group = vec![first];
        while let Ok(more) = rx.try_recv() {
            group.push(more);
        }
        let n = group.len() as u64;
        let now = clock.now();
        let result = store.call(move |s| s.update_members(id, group, now)).await;
        let mut w = shared.result();
        match result {
            Ok(_) => {
                w.counts.0 += n;
                w.counts.1 += 1;
            }
            Err(e) => {
                w.failed.get_or_insert(e.to_string());
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::{MemberState, RetryPolicy};

    #[tokio::test]
    async fn queued_records_are_all_durable_after_finish_in_fewer_transactions() {
        let (_dir, store) = crate::testkit::store();
        let id = crate::testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let batch = Batch::new(store.clone().into(), Clock::system(), id);
        // The job has one member; record it three times, as three quick successes would
        // be (the last write wins, and every one is in the store's history of writes).
        for bytes in [1, 2, 3] {
            batch
                .push(
                    0,
                    MemberUpdate {
                        state: Some(MemberState::Succeeded),
                        bytes: Some(bytes),
                        ..Default::default()
                    },
                )
                .unwrap();
        }
        batch.finish().await.unwrap();
        let (members, transactions) = batch.written();
        assert_eq!(members, 3);
        assert!(
            (1..=3).contains(&transactions),
            "{transactions} transactions"
        );
        let m = &store.members(id).unwrap()[0];
        assert_eq!(m.state, MemberState::Succeeded);
        assert_eq!(m.bytes, Some(3), "applied in order");
    }

    /// Records that come faster than the pace share transactions; `finish` does not wait
    /// for the pace.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_closer_than_the_pace_share_a_write_and_finish_does_not_wait() {
        let (_dir, store) = crate::testkit::store();
        let id = crate::testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let batch = Batch::new(store.clone().into(), Clock::system(), id);
        let update = |bytes| MemberUpdate {
            state: Some(MemberState::Succeeded),
            bytes: Some(bytes),
            ..Default::default()
        };
        // 20 records 10 ms apart: 200 ms, two paces. Written one by one, that is about 20
        // transactions.
        for bytes in 0..20 {
            batch.push(0, update(bytes)).unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        batch.push(0, update(99)).unwrap();
        let t = std::time::Instant::now();
        batch.finish().await.unwrap();
        let waited = t.elapsed();
        let (members, transactions) = batch.written();
        assert_eq!(members, 21);
        assert!(
            transactions <= 6,
            "{transactions} transactions for 21 records"
        );
        // With a pace of 0, it would be a limit of 0.
        assert!(
            waited < Duration::from_millis(75),
            "finish waited {waited:?} for the pace"
        );
        assert_eq!(store.members(id).unwrap()[0].bytes, Some(99));
    }

    #[tokio::test]
    async fn a_failed_grouped_write_fails_the_next_push_and_finish() {
        let (_dir, store) = crate::testkit::store();
        let id = crate::testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let batch = Batch::new(store.into(), Clock::system(), id);
        // No member 7: the store refuses the write.
        batch.push(7, MemberUpdate::default()).unwrap();
        assert!(batch.finish().await.is_err());
        assert!(batch.push(0, MemberUpdate::default()).is_err());
    }
}
