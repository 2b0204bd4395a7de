//! Group commit: a write is acknowledged only after a flush that *started after it* has
//! completed, and one flusher thread runs those flushes back to back, so concurrent writers
//! share one flush+fsync instead of paying for one each.
//!
//! Any flush failure poisons the store for good: after a failed fsync the kernel may have
//! dropped the dirty pages and cleared the error, so a later successful fsync proves nothing
//! about earlier writes (the PostgreSQL "fsyncgate" lesson).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::error::StoreError;

/// What the flusher thread runs.
pub(crate) trait Flush: Send + 'static {
    /// Makes every write committed before the call durable.
    fn flush(&mut self) -> Result<(), String>;
    /// Runs after the waiters of a flush were released (bookkeeping off the commit path).
    fn after_flush(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Runs once when the store closes, after the last flush.
    fn close(&mut self) -> Result<(), String> {
        Ok(())
    }
}

#[derive(Default)]
struct State {
    /// Highest flush number some writer waits for.
    requested: u64,
    /// Number of flushes begun; flush `n` is the n-th.
    started: u64,
    /// Highest flush number completed successfully.
    completed: u64,
    failure: Option<String>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The lock guards plain counters; a panic elsewhere leaves them consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl GroupCommit {
    pub(crate) fn start(flusher: impl Flush) -> Result<GroupCommit, std::io::Error> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("bftp-store-flush".into())
            .spawn(move || run(&s, flusher))?;
        Ok(GroupCommit {
            shared,
            thread: Some(thread),
        })
    }

    /// Refuses writes once a flush has failed.
    pub(crate) fn check(&self, op: &'static str) -> Result<(), StoreError> {
        match &self.shared.lock().failure {
            Some(reason) => Err(StoreError::NotDurable {
                op,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Blocks until everything the caller committed before this call is durable.
    pub(crate) fn wait_durable(&self, op: &'static str) -> Result<(), StoreError> {
        let mut st = self.shared.lock();
        // Flushes up to `started` may have begun before the caller's write; the next one
        // begins after this lock is released, hence after the write.
        let target = st.started + 1;
        st.requested = st.requested.max(target);
        self.shared.work.notify_one();
        while st.completed < target && st.failure.is_none() {
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match &st.failure {
            Some(reason) => Err(StoreError::NotDurable {
                op,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Marks the store unusable for writes (after a panic in the storage engine).
    pub(crate) fn poison(&self, reason: String) {
        let mut st = self.shared.lock();
        st.failure.get_or_insert(reason);
        self.shared.done.notify_all();
    }

    /// Number of flushes done so far (for tests and the benchmark).
    pub(crate) fn flushes(&self) -> u64 {
        self.shared.lock().completed
    }

    /// Serves the pending requests, runs `close`, stops the thread.
    pub(crate) fn shutdown(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.work.notify_one();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the store's flush thread panicked");
            }
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn guarded(what: &str, f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!("{what} panicked: {}", crate::panic_message(&*p))),
    }
}

fn run(shared: &Shared, mut flusher: impl Flush) {
    loop {
        let mut st = shared.lock();
        while st.requested <= st.started && !st.shutdown {
            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.requested <= st.started {
            // Shutting down with nobody waiting: one last flush so a clean close loses
            // nothing, then the close hook (which records the final watermark).
            let poisoned = st.failure.is_some();
            drop(st);
            if !poisoned {
                let r = guarded("flush", || flusher.flush())
                    .and_then(|()| guarded("close", || flusher.close()));
                if let Err(e) = r {
                    tracing::error!(error = %e, "closing the store");
                }
            }
            return;
        }
        st.started += 1;
        let n = st.started;
        let poisoned = st.failure.is_some();
        drop(st);

        let r = if poisoned {
            Err(String::new())
        } else {
            guarded("flush", || flusher.flush())
        };
        let mut st = shared.lock();
        match r {
            Ok(()) => st.completed = n,
            Err(e) => {
                if !e.is_empty() {
                    tracing::error!(error = %e, "store flush failed; refusing further writes");
                }
                st.failure.get_or_insert(e);
            }
        }
        let ok = st.failure.is_none();
        drop(st);
        shared.done.notify_all();
        if ok {
            if let Err(e) = guarded("after_flush", || flusher.after_flush()) {
                tracing::error!(error = %e, "store bookkeeping after a flush failed; refusing further writes");
                shared.lock().failure.get_or_insert(e);
                shared.done.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::time::Duration;

    /// A flush that takes a while and counts itself, standing in for an fsync.
    struct Slow {
        flushes: Arc<AtomicUsize>,
        /// The "committed" counter as of the start of the last flush.
        writes: Arc<AtomicU64>,
        durable: Arc<AtomicU64>,
        fail_at: Option<usize>,
    }

    impl Flush for Slow {
        fn flush(&mut self) -> Result<(), String> {
            let seen = self.writes.load(Ordering::SeqCst);
            let n = self.flushes.fetch_add(1, Ordering::SeqCst) + 1;
            std::thread::sleep(Duration::from_millis(5));
            if Some(n) == self.fail_at {
                return Err("disk on fire".into());
            }
            self.durable.fetch_max(seen, Ordering::SeqCst);
            Ok(())
        }
    }

    fn slow(fail_at: Option<usize>) -> (Slow, Arc<AtomicUsize>, Arc<AtomicU64>, Arc<AtomicU64>) {
        let (f, w, d) = (
            Arc::default(),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        (
            Slow {
                flushes: Arc::clone(&f),
                writes: Arc::clone(&w),
                durable: Arc::clone(&d),
                fail_at,
            },
            f,
            w,
            d,
        )
    }

    #[test]
    fn every_waiter_sees_its_write_durable_and_writers_share_flushes() {
        let (s, flushes, writes, durable) = slow(None);
        let gc = Arc::new(GroupCommit::start(s).unwrap());
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (gc, writes, durable) =
                    (Arc::clone(&gc), Arc::clone(&writes), Arc::clone(&durable));
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let mine = writes.fetch_add(1, Ordering::SeqCst) + 1;
                        gc.wait_durable("test").unwrap();
                        assert!(
                            durable.load(Ordering::SeqCst) >= mine,
                            "acknowledged before durable"
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = flushes.load(Ordering::SeqCst);
        assert!(n < 16 * 20 / 2, "{n} flushes for 320 writes: no grouping");
    }

    #[test]
    fn a_failed_flush_poisons_every_later_write() {
        let (s, _, writes, _) = slow(Some(2));
        let gc = GroupCommit::start(s).unwrap();
        writes.fetch_add(1, Ordering::SeqCst);
        gc.wait_durable("one").unwrap();
        let e = gc.wait_durable("two").unwrap_err();
        assert!(
            matches!(e, StoreError::NotDurable { op: "two", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("disk on fire"));
        assert!(gc.check("three").is_err());
        assert!(gc.wait_durable("four").is_err());
    }
}
