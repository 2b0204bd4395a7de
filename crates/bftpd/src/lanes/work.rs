//! The queue of files that the connection pairs of one job attempt (or of one foreground
//! `bftp transfer`) share, with one second try for a file whose data connection failed.
//!
//! A data connection that did not open (425) or broke (426) is often about that one
//! connection: a passive port still in TIME_WAIT for the active side's fixed data port
//! (Pure-FTPd answers `425 ... Cannot assign requested address`), a port taken meanwhile.
//! Such a file goes to the back of the queue and is tried once more, no sooner than
//! [`SECOND_TRY_AFTER`], instead of waiting for the job's next attempt (10 minutes by
//! default) or failing a foreground transfer. When a second try fails too, the data path
//! itself is broken: the second tries still queued are not made, and their first failure
//! stands, so a dead path costs a few extra tries, not twice the work.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bftp_core::reply::TransientKind;
use bftp_ftp::CopyOutcome;
use tokio::time::Instant;

/// How long a file whose data connection failed waits before its second try.
pub const SECOND_TRY_AFTER: Duration = Duration::from_secs(1);

/// One file in the queue.
pub struct Entry<T> {
    pub item: T,
    /// For a second try: not before then, and why the first try failed (which stands if
    /// the second try is not made).
    pub second: Option<(Instant, String)>,
}

impl<T> Entry<T> {
    /// Until a second try's time (at once for a first try), or until `interrupted`
    /// completes: then `false`.
    pub async fn wait(&self, interrupted: impl std::future::Future<Output = ()>) -> bool {
        let Some((at, _)) = &self.second else {
            return true;
        };
        tokio::select! {
            () = tokio::time::sleep_until(*at) => true,
            () = interrupted => false,
        }
    }
}

/// What to do with an entry just taken from the queue.
pub enum Next<T> {
    /// Copy it; for a second try, not before its time ([`Entry::wait`]).
    Copy(Entry<T>),
    /// A second try that is no longer made: the first failure stands.
    Dropped { item: T, reason: String },
}

pub struct WorkQueue<T> {
    entries: Mutex<VecDeque<Entry<T>>>,
    /// Cleared when a second try failed again.
    second_tries: AtomicBool,
}

impl<T> WorkQueue<T> {
    pub fn new(items: impl IntoIterator<Item = T>) -> WorkQueue<T> {
        WorkQueue {
            entries: Mutex::new(
                items
                    .into_iter()
                    .map(|item| Entry { item, second: None })
                    .collect(),
            ),
            second_tries: AtomicBool::new(true),
        }
    }

    fn entries(&self) -> MutexGuard<'_, VecDeque<Entry<T>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next entry, or `None` when the queue is empty.
    pub fn pop(&self) -> Option<Next<T>> {
        let entry = self.entries().pop_front()?;
        Some(match entry.second {
            Some((_, reason)) if !self.second_tries.load(Ordering::Acquire) => Next::Dropped {
                item: entry.item,
                reason,
            },
            _ => Next::Copy(entry),
        })
    }

    /// The next entry if it is a first try (a second try waits for its time: it is never
    /// taken ahead), for a lane that sends its first commands ahead of time.
    pub fn pop_first_try(&self) -> Option<Entry<T>> {
        let mut entries = self.entries();
        if entries.front().is_some_and(|e| e.second.is_none()) {
            entries.pop_front()
        } else {
            None
        }
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// An entry taken and not worked on goes back to the front.
    pub fn put_back(&self, entry: Entry<T>) {
        self.entries().push_front(entry);
    }

    /// Queues the second try of `item`, whose first try failed for `reason`.
    pub fn try_again(&self, item: T, reason: String) {
        self.entries().push_back(Entry {
            item,
            second: Some((Instant::now() + SECOND_TRY_AFTER, reason)),
        });
    }

    /// A second try failed as the first did: no more second tries in this queue.
    pub fn second_try_failed(&self) {
        self.second_tries.store(false, Ordering::Release);
    }

    /// The entries no lane took (they all stopped).
    pub fn into_left(self) -> VecDeque<Entry<T>> {
        self.entries.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

/// A data connection that did not open (425) or broke (426): worth a second try where
/// repeating the copy is safe.
pub fn data_connection_failed(outcome: &CopyOutcome) -> bool {
    matches!(
        outcome,
        CopyOutcome::Transient {
            kind: TransientKind::DataConnection,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(q: WorkQueue<&'static str>) -> Vec<&'static str> {
        q.into_left().into_iter().map(|e| e.item).collect()
    }

    #[test]
    fn an_entry_taken_ahead_goes_back_to_the_front() {
        let q = WorkQueue::new(["a", "b", "c"]);
        let a = q.pop_first_try().expect("a");
        assert_eq!(a.item, "a");
        q.put_back(a);
        assert_eq!(names(q), ["a", "b", "c"]);
    }

    #[test]
    fn a_second_try_is_never_taken_ahead() {
        let q = WorkQueue::new(["a"]);
        let Some(Next::Copy(a)) = q.pop() else {
            panic!("a first");
        };
        q.try_again(a.item, "425".into());
        assert!(q.pop_first_try().is_none(), "it waits for its time");
        assert_eq!(names(q), ["a"]);
    }
}
