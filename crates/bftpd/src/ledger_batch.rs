//! Grouped ledger writes for one attempt: the records of plain copies that finish close
//! together go to the store in one transaction and one flush (`JobStore::update_members`),
//! instead of a transaction and a flush each.
//!
//! Only a record nothing waits for is grouped: a replace copy's success, with no intent to
//! clear and no source to delete after it (bftpd's `Run::apply` decides). Such a member, if
//! the daemon dies before its record is durable, is still pending in the ledger and is simply
//! copied again (a replace copy is safe to repeat, and nothing was recorded that did not
//! happen). Every other change (failures, intents, a `move`'s success before its DELE) is
//! still written and made durable before the next step, as before.
//!
//! One writer task per attempt takes whatever records are waiting, writes them at once, and
//! meanwhile the next ones gather: no timer, no added delay for a lone record. The attempt
//! ends only after [`Batch::finish`]: every grouped record is durable before the job's
//! outcome is.

use std::sync::{Arc, Mutex};

use bftp_store::{JobId, JobStore, MemberUpdate};
use tokio::sync::mpsc;

use crate::clock::Clock;

/// The grouped writes of one attempt.
pub struct Batch {
    store: Arc<dyn JobStore>,
    clock: Clock,
    id: JobId,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tx: Option<mpsc::UnboundedSender<(u32, MemberUpdate)>>,
    writer: Option<tokio::task::JoinHandle<()>>,
    /// The first grouped write that failed, as text (the attempt ends on it).
    failed: Option<String>,
    /// Members recorded through the batch, and transactions used (for tests).
    written: (u64, u64),
}

impl Batch {
    pub fn new(store: Arc<dyn JobStore>, clock: Clock, id: JobId) -> Arc<Batch> {
        Arc::new(Batch {
            store,
            clock,
            id,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a member's record; `Err` when an earlier grouped write failed (the attempt
    /// should end: the store cannot keep records).
    pub fn push(self: &Arc<Self>, index: u32, update: MemberUpdate) -> Result<(), String> {
        let mut st = self.state();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        if st.tx.is_none() {
            let (tx, rx) = mpsc::unbounded_channel();
            st.tx = Some(tx);
            st.writer = Some(tokio::spawn(Arc::clone(self).write_all(rx)));
        }
        if let Some(tx) = &st.tx {
            // The writer lives until `finish` drops the sender: the send cannot fail.
            let _ = tx.send((index, update));
        }
        Ok(())
    }

    async fn write_all(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<(u32, MemberUpdate)>) {
        while let Some(first) = rx.recv().await {
            let mut group = vec![first];
            while let Ok(more) = rx.try_recv() {
                group.push(more);
            }
            let n = group.len() as u64;
            let (store, id, now) = (self.store.clone(), self.id, self.clock.now());
            let result = crate::on_store(&store, move |s| s.update_members(id, group, now)).await;
            let mut st = self.state();
            match result {
                Ok(_) => {
                    st.written.0 += n;
                    st.written.1 += 1;
                }
                Err(e) => {
                    st.failed.get_or_insert(e.to_string());
                    return;
                }
            }
        }
    }

    /// Waits until every queued record is durable; the first failure of a grouped write.
    pub async fn finish(&self) -> Result<(), String> {
        let writer = {
            let mut st = self.state();
            st.tx = None;
            st.writer.take()
        };
        if let Some(writer) = writer {
            let _ = writer.await;
        }
        match self.state().failed.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Members recorded through the batch, and the transactions that took them.
    #[cfg(test)]
    pub fn written(&self) -> (u64, u64) {
        self.state().written
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
        let batch = Batch::new(store.clone(), Clock::system(), id);
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

    #[tokio::test]
    async fn a_failed_grouped_write_fails_the_next_push_and_finish() {
        let (_dir, store) = crate::testkit::store();
        let id = crate::testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let batch = Batch::new(store, Clock::system(), id);
        // No member 7: the store refuses the write.
        batch.push(7, MemberUpdate::default()).unwrap();
        assert!(batch.finish().await.is_err());
        assert!(batch.push(0, MemberUpdate::default()).is_err());
    }
}
