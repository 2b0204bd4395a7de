//! The one work loop of a job attempt and of a foreground `bftp transfer`.
//!
//! Up to `parallel_pairs` lanes, each owning one connection pair, take items from one
//! [`WorkQueue`] until it is empty. What one item is worked into is the caller's
//! ([`Work::item`]: an attempt's member and its ledger, a transfer's copy and its events);
//! the loop around it is here, once:
//! - a lane begins when its pair is open; a pair that failed to open is one lane fewer (the
//!   others do its share);
//! - a pair that became unusable (a connection lost) is opened again before the next item,
//!   on the slots the lane holds;
//! - a job-level end in one lane ([`Step::End`]) stops every other lane after the item it
//!   has in flight, which is always finished (and recorded) first;
//! - a file whose data connection failed and whose repeat is safe gets one second try, at the
//!   back of the queue ([`crate::lanes::work`]), whose wait an interruption (shutdown, cancel) ends.
//!
//! - a lane takes the item after the one it works on ahead of time and tells its connection
//!   ([`Work::hint`]), so that a copy can send the next one's first commands with its own
//!   (bftp-ftp's `pipeline.rs`); once it did ([`Work::in_flight`]), that item is worked on next
//!   even if an interruption or a stop came meanwhile (it is a file in flight); an item taken
//!   ahead and not worked on goes back to the front of the queue.
//!
//! Extra pairs take only the per-host connection slots free at that moment and never wait
//! for one ([`crate::hosts::HostLimits::extra_slots`]): a job's first pair waits for its turn
//! like any other, but a job never holds up, or starves, another for more parallelism.

pub mod paths;
pub mod proof;
pub mod route;
pub mod routing;
pub mod walk;
pub mod work;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::BoxFuture;

use crate::lanes::work::{Next, WorkQueue};

/// An item of the queue, named in logs and in the reason an attempt is retried.
pub trait Item {
    fn name(&self) -> &str;
}

/// What the work on one item came to.
pub enum Step<T, E> {
    /// The item is finished with, whatever its result.
    Done,
    /// Not done, for `reason`. `again`: its data connection failed and a repeat is safe, so
    /// `item` (as it should be tried again) gets one second try, unless this was it or a
    /// second try in this queue failed already. Otherwise its failure stands
    /// ([`Work::stands`]).
    Failed {
        item: T,
        reason: String,
        again: bool,
    },
    /// A job-level end: this lane stops, and the others after their item in flight.
    End(E),
}

/// The caller's side of the loop: its connections, its items, its ends.
pub(crate) trait Work {
    /// What one lane owns: a connection pair (a fake one in tests).
    type Conn;
    type Item: Item;
    /// Why the lanes stopped early.
    type End;

    /// `Some`: no lane starts another item (shutdown or cancel), and this is its end.
    fn interrupted(&self) -> Option<Self::End>;
    /// Completes when an interruption begins: it ends a second try's wait.
    async fn interruption(&self);
    fn usable(&self, conn: &Self::Conn) -> bool;
    /// A new connection in place of an unusable one; `Err` ends the lane (and stops the
    /// others).
    async fn reopen(&self, old: Self::Conn) -> Result<Self::Conn, Self::End>;
    /// One item. `second`: its second try.
    async fn item(
        &self,
        conn: &mut Self::Conn,
        item: Self::Item,
        second: bool,
    ) -> Step<Self::Item, Self::End>;
    /// An item's failure stands: it got no second try, or its second try failed too.
    async fn stands(&self, item: Self::Item, reason: &str) -> Result<(), Self::End>;
    async fn close(&self, conn: Self::Conn);
    /// Which item the lane works on after the one it starts now (`None`: none known).
    fn hint(&self, _conn: &mut Self::Conn, _next: Option<&Self::Item>) {}
    /// Whether the connection already started the item given with [`Work::hint`].
    fn in_flight(&self, _conn: &Self::Conn) -> bool {
        false
    }
}

/// How the lanes ended.
pub struct Ran<E> {
    /// The job-level ends, in lane order.
    pub ends: Vec<E>,
    /// `name: reason` of a failure that stands: the first lane's last one, or else the first
    /// second try that no lane took (they all stopped).
    pub failed: Option<String>,
}

/// A lane's pair as it opens, with what the lane holds while it runs (its host slots).
pub type Opening<'a, C, G> = BoxFuture<'a, Option<(C, G)>>;

/// Runs one lane per opening over `queue` until the queue is empty, an interruption, or a
/// job-level end.
pub(crate) async fn run<W: Work, G>(
    work: &W,
    openings: Vec<Opening<'_, W::Conn, G>>,
    queue: WorkQueue<W::Item>,
) -> Ran<W::End> {
    let shared = Shared {
        queue,
        stop: AtomicBool::new(false),
        lanes: openings.len(),
    };
    let lanes =
        futures_util::future::join_all(openings.into_iter().map(|o| lane(work, o, &shared))).await;
    let mut ran = Ran {
        ends: Vec::new(),
        failed: None,
    };
    for (end, failed) in lanes {
        ran.ends.extend(end);
        ran.failed = ran.failed.or(failed);
    }
    if ran.failed.is_none() {
        ran.failed = shared.queue.into_left().into_iter().find_map(|e| {
            e.second
                .map(|(_, reason)| format!("{}: {reason}", e.item.name()))
        });
    }
    ran
}

struct Shared<T> {
    queue: WorkQueue<T>,
    /// Set by a job-level end in one lane: the others stop after their item in flight.
    stop: AtomicBool,
    /// How many lanes share the queue.
    lanes: usize,
}

/// One lane: its job-level end, and `name: reason` of its last failure that stands.
async fn lane<W: Work, G>(
    work: &W,
    opening: Opening<'_, W::Conn, G>,
    shared: &Shared<W::Item>,
) -> (Option<W::End>, Option<String>) {
    // Held while the lane runs.
    let Some((mut conn, _held)) = opening.await else {
        return (None, None);
    };
    let stop = || shared.stop.store(true, Ordering::Release);
    let mut failed = None;
    // The item after the one in work, taken ahead (see the module's notes).
    let mut ahead: Option<crate::lanes::work::Entry<W::Item>> = None;
    let end = loop {
        // An item already started on the connection is worked on whatever came meanwhile.
        let in_flight = ahead.is_some() && work.in_flight(&conn);
        if !in_flight {
            if let Some(end) = work.interrupted() {
                break Some(end);
            }
            if shared.stop.load(Ordering::Acquire) {
                break None;
            }
        }
        let entry = match ahead.take() {
            Some(entry) => entry,
            None => match shared.queue.pop() {
                None => break None,
                Some(Next::Dropped { item, reason }) => {
                    failed = Some(format!("{}: {reason}", item.name()));
                    if let Err(end) = work.stands(item, &reason).await {
                        stop();
                        break Some(end);
                    }
                    continue;
                }
                Some(Next::Copy(entry)) => entry,
            },
        };
        if !entry.wait(work.interruption()).await {
            if let Some((_, reason)) = &entry.second {
                failed = Some(format!("{}: {reason}", entry.item.name()));
            }
            break work.interrupted();
        }
        let second = entry.second.is_some();
        if !work.usable(&conn) {
            conn = match work.reopen(conn).await {
                Ok(c) => c,
                Err(end) => {
                    stop();
                    return (Some(end), failed);
                }
            };
        }
        // Only while every lane has an item of its own: taking ahead must not leave a
        // lane without work (four files on four pairs run on four pairs).
        if work.interrupted().is_none()
            && !shared.stop.load(Ordering::Acquire)
            && shared.queue.len() >= shared.lanes
        {
            ahead = shared.queue.pop_first_try();
        }
        work.hint(&mut conn, ahead.as_ref().map(|e| &e.item));
        match work.item(&mut conn, entry.item, second).await {
            Step::Done => {}
            Step::Failed {
                item,
                reason,
                again: true,
            } if !second => {
                tracing::info!(file = %item.name(), %reason, "file to be tried again");
                shared.queue.try_again(item, reason);
            }
            Step::Failed {
                item,
                reason,
                again,
            } => {
                if again {
                    shared.queue.second_try_failed();
                }
                failed = Some(format!("{}: {reason}", item.name()));
                if let Err(end) = work.stands(item, &reason).await {
                    stop();
                    break Some(end);
                }
            }
            Step::End(end) => {
                stop();
                break Some(end);
            }
        }
    };
    if let Some(entry) = ahead {
        shared.queue.put_back(entry);
    }
    work.close(conn).await;
    (end, failed)
}

/// Waits for nothing: a caller that is never interrupted.
pub async fn never() {
    std::future::pending::<()>().await
}

/// A lane whose pair is open already.
pub fn ready<'a, C: Send + 'a, G: Send + 'a>(conn: C, held: G) -> Opening<'a, C, G> {
    Box::pin(std::future::ready(Some((conn, held))))
}

/// A lane whose pair opens in `f`.
pub fn opening<'a, C, G, F>(f: F) -> Opening<'a, C, G>
where
    F: Future<Output = Option<(C, G)>> + Send + 'a,
{
    Box::pin(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    impl Item for String {
        fn name(&self) -> &str {
            self
        }
    }

    /// A pair: which one (a reopened pair is another), and whether it still works.
    struct Conn {
        id: usize,
        usable: bool,
    }

    type Fake = dyn Fn(&mut Conn, &str, bool) -> Step<String, &'static str> + Send + Sync;

    /// The loop's caller, with a fake per-item closure; it records what the loop asked.
    struct Lanes {
        item: Box<Fake>,
        interrupted: AtomicBool,
        interrupt: tokio::sync::Notify,
        opened: AtomicUsize,
        /// (item, second try, the pair's id), in the order the items were worked on.
        worked: Mutex<Vec<(String, bool, usize)>>,
        stood: Mutex<Vec<String>>,
        closed: Mutex<Vec<usize>>,
        /// The next item each `item` call was told of, in order.
        hints: Mutex<Vec<Option<String>>>,
        /// What `in_flight` answers.
        started_ahead: AtomicBool,
        /// Working on this item interrupts the lanes.
        interrupt_on: Mutex<Option<String>>,
    }

    impl Lanes {
        fn new(
            item: impl Fn(&mut Conn, &str, bool) -> Step<String, &'static str> + Send + Sync + 'static,
        ) -> Lanes {
            Lanes {
                item: Box::new(item),
                interrupted: AtomicBool::new(false),
                interrupt: tokio::sync::Notify::new(),
                opened: AtomicUsize::new(0),
                worked: Mutex::default(),
                stood: Mutex::default(),
                closed: Mutex::default(),
                hints: Mutex::default(),
                started_ahead: AtomicBool::new(false),
                interrupt_on: Mutex::default(),
            }
        }

        fn conn(&self) -> Conn {
            Conn {
                id: self.opened.fetch_add(1, Ordering::SeqCst),
                usable: true,
            }
        }

        async fn run(&self, lanes: usize, items: &[&str]) -> Ran<&'static str> {
            let openings = (0..lanes).map(|_| ready(self.conn(), ())).collect();
            run(
                self,
                openings,
                WorkQueue::new(items.iter().map(|s| s.to_string())),
            )
            .await
        }

        fn worked(&self) -> Vec<(String, bool, usize)> {
            self.worked.lock().unwrap().clone()
        }
    }

    impl Work for Lanes {
        type Conn = Conn;
        type Item = String;
        type End = &'static str;

        fn interrupted(&self) -> Option<&'static str> {
            self.interrupted
                .load(Ordering::SeqCst)
                .then_some("interrupted")
        }
        async fn interruption(&self) {
            self.interrupt.notified().await
        }
        fn usable(&self, conn: &Conn) -> bool {
            conn.usable
        }
        async fn reopen(&self, _old: Conn) -> Result<Conn, &'static str> {
            Ok(self.conn())
        }
        async fn item(
            &self,
            conn: &mut Conn,
            item: String,
            second: bool,
        ) -> Step<String, &'static str> {
            // Every item takes a turn of the runtime, as a copy does: the lanes interleave.
            tokio::task::yield_now().await;
            if self.interrupt_on.lock().unwrap().as_deref() == Some(item.as_str()) {
                self.interrupted.store(true, Ordering::SeqCst);
            }
            self.worked
                .lock()
                .unwrap()
                .push((item.clone(), second, conn.id));
            (self.item)(conn, &item, second)
        }
        fn hint(&self, _conn: &mut Conn, next: Option<&String>) {
            self.hints.lock().unwrap().push(next.cloned());
        }
        fn in_flight(&self, _conn: &Conn) -> bool {
            self.started_ahead.load(Ordering::SeqCst)
        }
        async fn stands(&self, item: String, _reason: &str) -> Result<(), &'static str> {
            self.stood.lock().unwrap().push(item);
            Ok(())
        }
        async fn close(&self, conn: Conn) {
            self.closed.lock().unwrap().push(conn.id);
        }
    }

    fn failed(item: &str, again: bool) -> Step<String, &'static str> {
        Step::Failed {
            item: item.to_string(),
            reason: "425 no data connection".into(),
            again,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_data_connection_gets_one_second_try_after_a_second() {
        let lanes = Lanes::new(|_, item, _| match item {
            "a" => failed(item, true),
            _ => Step::Done,
        });
        let t = tokio::time::Instant::now();
        let ran = lanes.run(1, &["a", "b"]).await;
        assert_eq!(
            lanes.worked(),
            [
                ("a".into(), false, 0),
                ("b".into(), false, 0),
                ("a".into(), true, 0)
            ]
        );
        assert!(t.elapsed() >= crate::lanes::work::SECOND_TRY_AFTER);
        assert_eq!(
            *lanes.stood.lock().unwrap(),
            ["a"],
            "the second failure stands, once"
        );
        assert_eq!(ran.failed.as_deref(), Some("a: 425 no data connection"));
        assert!(ran.ends.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_failed_second_try_the_queued_ones_are_not_made() {
        let lanes = Lanes::new(|_, item, _| failed(item, true));
        lanes.run(1, &["a", "b"]).await;
        // b's second try is dropped once a's failed: its first failure stands untried.
        assert_eq!(
            lanes.worked(),
            [
                ("a".into(), false, 0),
                ("b".into(), false, 0),
                ("a".into(), true, 0)
            ]
        );
        assert_eq!(*lanes.stood.lock().unwrap(), ["a", "b"]);
    }

    #[tokio::test]
    async fn a_failure_that_is_not_a_data_connection_gets_no_second_try() {
        let lanes = Lanes::new(|_, item, _| failed(item, false));
        let ran = lanes.run(1, &["a"]).await;
        assert_eq!(lanes.worked(), [("a".into(), false, 0)]);
        assert_eq!(*lanes.stood.lock().unwrap(), ["a"]);
        assert_eq!(ran.failed.as_deref(), Some("a: 425 no data connection"));
    }

    #[tokio::test]
    async fn a_job_level_end_stops_the_other_lanes_after_their_item() {
        let lanes = Lanes::new(|_, item, _| match item {
            "c" => Step::End("login refused"),
            _ => Step::Done,
        });
        let ran = lanes.run(2, &["a", "b", "c", "d", "e", "f"]).await;
        // Lane 0 takes a (and b ahead), lane 1 c (and d ahead). c ends the job while lane 0
        // has b in flight, which it finishes; d, taken ahead but not started, never is.
        let names: Vec<String> = lanes.worked().into_iter().map(|w| w.0).collect();
        assert_eq!(names, ["a", "c", "b"]);
        assert_eq!(ran.ends, ["login refused"]);
        let mut closed = lanes.closed.lock().unwrap().clone();
        closed.sort();
        assert_eq!(closed, [0, 1], "both lanes closed their pairs");
    }

    #[tokio::test]
    async fn an_unusable_pair_is_opened_again_before_the_next_item() {
        let lanes = Lanes::new(|conn, item, _| {
            if item == "a" {
                conn.usable = false;
            }
            Step::Done
        });
        lanes.run(1, &["a", "b", "c"]).await;
        assert_eq!(
            lanes.worked(),
            [
                ("a".into(), false, 0),
                ("b".into(), false, 1),
                ("c".into(), false, 1)
            ]
        );
        assert_eq!(*lanes.closed.lock().unwrap(), [1]);
    }

    #[tokio::test]
    async fn a_pair_that_did_not_open_is_one_lane_fewer() {
        let lanes = Lanes::new(|_, _, _| Step::Done);
        let openings = vec![ready(lanes.conn(), ()), opening(async { None })];
        let queue = WorkQueue::new(["a", "b"].map(String::from));
        let ran = run(&lanes, openings, queue).await;
        assert_eq!(lanes.worked().len(), 2);
        assert!(lanes.worked().iter().all(|w| w.2 == 0));
        assert!(ran.ends.is_empty() && ran.failed.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_interruption_ends_the_wait_for_a_second_try() {
        let lanes = Lanes::new(|_, item, _| failed(item, true));
        let t = tokio::time::Instant::now();
        let interrupt = async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            lanes.interrupted.store(true, Ordering::SeqCst);
            lanes.interrupt.notify_one();
        };
        let (ran, ()) = tokio::join!(lanes.run(1, &["a"]), interrupt);
        assert!(
            t.elapsed() < crate::lanes::work::SECOND_TRY_AFTER,
            "no wait for the second try"
        );
        assert_eq!(lanes.worked(), [("a".into(), false, 0)]);
        assert_eq!(ran.ends, ["interrupted"]);
        assert_eq!(ran.failed.as_deref(), Some("a: 425 no data connection"));
        assert!(lanes.stood.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_interruption_starts_no_other_item() {
        let lanes = Lanes::new(|_, _, _| Step::Done);
        lanes.interrupted.store(true, Ordering::SeqCst);
        let ran = lanes.run(2, &["a"]).await;
        assert!(lanes.worked().is_empty());
        assert_eq!(ran.ends, ["interrupted", "interrupted"]);
    }

    #[tokio::test]
    async fn each_item_is_told_the_next_one_of_its_lane() {
        let lanes = Lanes::new(|_, _, _| Step::Done);
        lanes.run(1, &["a", "b", "c"]).await;
        assert_eq!(
            *lanes.hints.lock().unwrap(),
            [Some("b".to_string()), Some("c".into()), None]
        );
        let names: Vec<String> = lanes.worked().into_iter().map(|w| w.0).collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn an_item_started_ahead_is_finished_after_an_interruption() {
        let lanes = Lanes::new(|_, _, _| Step::Done);
        *lanes.interrupt_on.lock().unwrap() = Some("a".into());
        lanes.started_ahead.store(true, Ordering::SeqCst);
        let ran = lanes.run(1, &["a", "b", "c"]).await;
        let names: Vec<String> = lanes.worked().into_iter().map(|w| w.0).collect();
        assert_eq!(names, ["a", "b"], "b was in flight; c never started");
        assert_eq!(ran.ends, ["interrupted"]);
    }

    #[tokio::test]
    async fn an_item_taken_ahead_but_not_started_goes_back_to_the_queue() {
        let lanes = Lanes::new(|_, _, _| Step::Done);
        *lanes.interrupt_on.lock().unwrap() = Some("a".into());
        let ran = lanes.run(1, &["a", "b", "c"]).await;
        let names: Vec<String> = lanes.worked().into_iter().map(|w| w.0).collect();
        assert_eq!(names, ["a"]);
        assert_eq!(ran.ends, ["interrupted"]);
    }

    #[tokio::test]
    async fn taking_ahead_leaves_no_lane_without_an_item() {
        let lanes = Lanes::new(|_, _, _| Step::Done);
        lanes.run(4, &["a", "b", "c", "d"]).await;
        let mut pairs: Vec<usize> = lanes.worked().into_iter().map(|w| w.2).collect();
        pairs.sort_unstable();
        assert_eq!(pairs, [0, 1, 2, 3], "one item on each of the four pairs");
    }
}
