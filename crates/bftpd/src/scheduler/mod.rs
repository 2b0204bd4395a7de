//! The scheduler: owns time. It sleeps until the next due job or a notification (a submit, a
//! finished attempt, a cancel), starts due jobs within the global limit, and turns the end of
//! each attempt into the job's next state: finished, requeued with backoff, or settled.
//!
//! What happens *inside* an attempt (FTP sessions, the per-file ledger) is the
//! [`Executor`]'s business; the scheduler only sees how the attempt ended.

pub mod retention;
pub(crate) mod space;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_core::retry::{ExhaustedBy, RetryDecision};
use bftp_core::{JobEvent, JobOutcome, JobState, MemberState, Timestamp};
use bftp_store::{HistoryEvent, Job, JobId, StoreError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::clock::{Clock, Jitter};
use crate::metrics::{AttemptFailure, Metrics};
use crate::store::Store;

/// How an attempt ended, as far as scheduling is concerned. The executor has already
/// recorded each member's result durably.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnd {
    /// Every member is terminal.
    Complete,
    /// Members are still pending and the failure is worth retrying.
    Transient { reason: String },
    /// The job cannot succeed (login refused, source directory missing, no file matches,
    /// FXP refused by both servers): every pending member fails with the reason.
    JobPermanent { reason: String },
    /// Stopped by a cancel, or by shutdown (aborted after the grace period, or drained
    /// between two files), before it ended.
    Interrupted,
    /// Stopped before a new file at a start gate (a window closed): the job waits, this
    /// attempt not counted (RULES.md §16.4).
    Wait(bftp_core::window::Wait),
}

/// Asked before a due job starts (RULES.md §16.4, §16.5): `Some(wait)` defers the job to
/// `wait.until` without a try counted, its status saying why. Implemented over the hosts'
/// windows and breakers (`attempt::gates`), so the scheduler knows nothing of hosts.
pub trait StartGate: Send + Sync {
    fn wait_for(&self, job: &Job, now: Timestamp) -> Option<bftp_core::window::Wait>;
}

impl From<crate::lanes::walk::WalkEnd> for AttemptEnd {
    fn from(end: crate::lanes::walk::WalkEnd) -> AttemptEnd {
        use crate::lanes::walk::WalkEnd;
        match end {
            WalkEnd::Permanent { reason } => AttemptEnd::JobPermanent { reason },
            WalkEnd::Transient { reason } => AttemptEnd::Transient { reason },
        }
    }
}

/// How the scheduler tells a running attempt to stop.
#[derive(Debug, Clone, Default)]
pub struct AttemptSignals {
    /// Stop now: a cancel, or the end of the grace period at shutdown.
    pub abort: CancellationToken,
    /// Shutdown began: let the work in flight finish within the grace period, start no more.
    pub drain: CancellationToken,
}

pub type AttemptFuture = Pin<Box<dyn Future<Output = AttemptEnd> + Send>>;

/// Runs one attempt of one job.
pub trait Executor: Send + Sync + 'static {
    fn attempt(&self, job: Job, attempt: u32, signals: AttemptSignals) -> AttemptFuture;
}

#[derive(Debug, Clone, Copy)]
pub struct SchedulerLimits {
    /// Jobs running at once.
    pub max_running_jobs: usize,
    /// After shutdown begins, how long running attempts may go on before they are aborted.
    pub grace: Duration,
}

/// With nothing queued, the scheduler still looks at the queue this often.
const IDLE_LOOK: Duration = Duration::from_secs(3600);

pub struct Scheduler {
    store: Store,
    executor: Arc<dyn Executor>,
    limits: SchedulerLimits,
    wake: Notify,
    running: Mutex<HashMap<JobId, CancellationToken>>,
    /// Each running attempt's own drain signal (a child of the shutdown's): a lost lease
    /// stops the attempt as a shutdown would, leaving the destination to the node that holds
    /// the job now, never as a cancel, which would clean up the destination.
    drains: Mutex<HashMap<JobId, CancellationToken>>,
    tracker: TaskTracker,
    /// Notified whenever a job may have become final (its report is due): the postman's bell.
    finals: Arc<Notify>,
    /// The same for the watches: a watch's next poll waits for its last job to be final.
    watch_bell: Arc<Notify>,
    metrics: Arc<Metrics>,
    clock: Clock,
    /// The draw behind each retry's ±10% jitter.
    jitter: Jitter,
    /// Asked before each start ([`StartGate`]); none: every due job starts.
    gate: std::sync::RwLock<Option<Arc<dyn StartGate>>>,
}

impl Scheduler {
    pub fn new(
        store: Store,
        executor: Arc<dyn Executor>,
        metrics: Arc<Metrics>,
        limits: SchedulerLimits,
        clock: Clock,
        jitter: Jitter,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            store,
            executor,
            limits,
            wake: Notify::new(),
            running: Mutex::new(HashMap::new()),
            drains: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            finals: Arc::new(Notify::new()),
            watch_bell: Arc::new(Notify::new()),
            metrics,
            clock,
            jitter,
            gate: std::sync::RwLock::new(None),
        })
    }

    /// The start gate asked before each due job starts.
    pub fn set_gate(&self, gate: Arc<dyn StartGate>) {
        *self.gate.write().unwrap_or_else(|p| p.into_inner()) = Some(gate);
    }

    /// Rings when a job may have become final (an attempt ended, a cancel).
    pub fn finals(&self) -> Arc<Notify> {
        self.finals.clone()
    }

    /// Rings when a job may have become final, for the watches.
    pub fn watch_bell(&self) -> Arc<Notify> {
        self.watch_bell.clone()
    }

    /// Whether an attempt of the job is still under way (also after a cancel, until it stops).
    pub fn is_running(&self, id: JobId) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&id)
    }

    /// Something changed (a submit, a cancel): look at the queue again.
    pub fn notify(&self) {
        self.wake.notify_one();
    }

    /// Stops the running attempt of a job that was just cancelled in the store.
    pub fn cancel(&self, id: JobId) {
        if let Some(token) = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            token.cancel();
        }
        self.notify();
        self.finals.notify_one();
        self.watch_bell.notify_one();
    }

    fn running_count(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Jobs left `Running` by a crash or a hard stop go back to the queue, due now: their
    /// unfinished members are done again (an overlap, never a gap).
    pub async fn recover(&self) -> Result<usize, StoreError> {
        let clock = self.clock.clone();
        self.store
            .call(move |store| {
                let ids = store.running_jobs()?;
                for id in &ids {
                    let at = clock.now();
                    let job = store.get(*id)?.ok_or(StoreError::NotFound(*id))?;
                    let detail = format!(
                        "bftpd restarted during attempt {}; unfinished members will be done again",
                        job.attempts
                    );
                    match store.apply(
                        *id,
                        JobEvent::Requeue {
                            next_attempt_at: at,
                        },
                        at,
                        Some(detail),
                    ) {
                        Ok(_) => {}
                        // A shared store: another node took the job over meanwhile.
                        Err(
                            StoreError::InvalidTransition { .. } | StoreError::LeaseLost { .. },
                        ) => continue,
                        Err(e) => return Err(e),
                    }
                    tracing::info!(job = id.0, "recovered an interrupted attempt");
                }
                Ok(ids.len())
            })
            .await
    }

    /// Runs until `shutdown` fires, then gives running attempts `grace` before aborting them.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let attempts_token = CancellationToken::new();
        if self.store.cluster().is_some() {
            tokio::spawn(Arc::clone(&self).stop_lost_attempts(shutdown.clone()));
        }
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let next = match self.start_due(&attempts_token, &shutdown).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::error!(error = %e, "the scheduler cannot read the queue; retrying in 5 s");
                    Some(self.clock.now().saturating_add(Duration::from_secs(5)))
                }
            };
            let next = next.unwrap_or_else(|| self.clock.now().saturating_add(IDLE_LOOK));
            // A shared store: other nodes' submits and leases that ran out are seen by looking
            // again.
            let next = match self.store.cluster().map(|c| c.poll_interval()) {
                Some(p) => next.min(self.clock.now().saturating_add(p)),
                None => next,
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = self.clock.sleep_until(next) => {}
            }
        }
        self.tracker.close();
        if tokio::time::timeout(self.limits.grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = self.running_count(),
                "grace period over: aborting running attempts; they stay queued"
            );
            attempts_token.cancel();
            self.tracker.wait().await;
        }
    }

    /// A shared store: the attempt of a job whose lease this node lost (another node took it
    /// over, or it was cancelled after a takeover) stops at once, as at shutdown; the store
    /// refuses its writes anyway. The attempt of a job cancelled on another node straight
    /// from this node's hold stops as a local cancel does: ABOR, the partial file deleted
    /// where the copy's kind allows, the attempt counted, its transcript kept (the store let
    /// the job go, so those writes are not fenced).
    async fn stop_lost_attempts(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            for id in self
                .store
                .cluster()
                .map(|c| c.lost_leases())
                .unwrap_or_default()
            {
                tracing::warn!(job = id.0, "lease lost: stopping this node's attempt");
                if let Some(d) = self
                    .drains
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&id)
                {
                    d.cancel();
                }
                self.cancel(id);
            }
            let cancelled = self.store.cluster().map(|c| c.cancelled_elsewhere());
            for id in cancelled.unwrap_or_default() {
                tracing::info!(
                    job = id.0,
                    "cancelled on another node: stopping this node's attempt as a cancel"
                );
                self.cancel(id);
            }
        }
    }

    /// Starts what is due and fits; returns when to look again (the next due time, if any).
    async fn start_due(
        self: &Arc<Self>,
        parent: &CancellationToken,
        drain: &CancellationToken,
    ) -> Result<Option<Timestamp>, StoreError> {
        let free = self
            .limits
            .max_running_jobs
            .saturating_sub(self.running_count());
        if free == 0 {
            // Full: a finishing attempt wakes us. (Not even a look at the queue: a shared
            // store's `due` claims what it returns.)
            return Ok(None);
        }
        if !crate::scheduler::space::room_for_attempts(&*self.store) {
            return Ok(Some(
                self.clock.now().saturating_add(Duration::from_secs(5)),
            ));
        }
        let t = self.clock.now();
        let due = self.store.call(move |store| store.due(t, free)).await?;
        // Started together: their durable start records share a group commit, instead of
        // one flush after another while free slots wait.
        let starts = due
            .into_iter()
            .filter(|(_, id)| {
                !self
                    .running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(id)
            })
            .map(|(_, id)| self.start(id, parent, drain));
        for started in futures_util::future::join_all(starts).await {
            started?;
        }
        let next = self.store.call(|store| store.next_due()).await?;
        // Due but not started (no free slot): a finishing attempt will wake us.
        Ok(next.filter(|n| {
            *n > self.clock.now() || self.running_count() < self.limits.max_running_jobs
        }))
    }

    async fn start(
        self: &Arc<Self>,
        id: JobId,
        parent: &CancellationToken,
        drain: &CancellationToken,
    ) -> Result<(), StoreError> {
        let t = self.clock.now();
        let gate = self.gate.read().unwrap_or_else(|p| p.into_inner()).clone();
        let started = self
            .store
            .call(move |store| -> Result<Option<(Job, u32)>, StoreError> {
                let Some(job) = store.get(id)? else {
                    return Ok(None);
                };
                let JobState::Queued { .. } = job.state else {
                    return Ok(None);
                };
                // A job whose deadline passed while it waited (say, the daemon was down) ends here.
                if t > job.spec.start_at.saturating_add(job.spec.retry.deadline) {
                    store.settle_and_finish(
                        id,
                        MemberState::FailedRetriesExhausted,
                        t,
                        Some("the retry deadline passed before the next attempt".into()),
                    )?;
                    return Ok(None);
                }
                // A closed window or a host that is down: the job waits, no try counted.
                if let Some(wait) = gate.and_then(|g| g.wait_for(&job, t)) {
                    let until = job.spec.retry.wait_until(job.spec.start_at, wait.until);
                    return match store.defer(id, until, Some(wait), t) {
                        Ok(_)
                        | Err(
                            StoreError::InvalidTransition { .. } | StoreError::LeaseLost { .. },
                        ) => Ok(None),
                        Err(e) => Err(e),
                    };
                }
                let attempt = job.attempts + 1;
                match store.apply(id, JobEvent::Start { attempt }, t, None) {
                    Ok(job) => Ok(Some((job, attempt))),
                    // Cancelled between the due read and now.
                    Err(StoreError::InvalidTransition { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        let Some((job, attempt)) = started else {
            // Finished for its deadline, or cancelled meanwhile: either way a report may be due.
            self.finals.notify_one();
            self.watch_bell.notify_one();
            self.watch_bell.notify_one();
            return Ok(());
        };
        let token = parent.child_token();
        let drain = drain.child_token();
        self.drains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, drain.clone());
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, token.clone());
        // Every event of the attempt, the engine's included, carries the job id.
        let span = tracing::info_span!("attempt", job = id.0, attempt);
        span.in_scope(|| tracing::info!(job = id.0, attempt, "attempt started"));
        self.metrics.attempt_started();
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            let end = me.executor.attempt(job.clone(), attempt, AttemptSignals { abort: token.clone(), drain }).await;
            match me.conclude(&job, attempt, end).await {
                Ok(()) => {}
                Err(e @ StoreError::LeaseLost { .. }) => {
                    tracing::warn!(job = id.0, error = %e, "this node's lease ended during the attempt; the node that holds the job now finishes it");
                }
                Err(e) => {
                    tracing::error!(job = id.0, error = %e, "cannot record the end of an attempt; the job stays running until restart recovery (or, on a shared store, until its lease runs out)");
                    if let Some(cluster) = me.store.cluster() {
                        cluster.abandon(id);
                    }
                }
            }
            tracing::info!(job = id.0, attempt, "attempt over");
            me.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            me.drains.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            me.notify();
            me.finals.notify_one();
            me.watch_bell.notify_one();
        }.instrument(span));
        Ok(())
    }

    /// Turns the end of an attempt into the job's next state, durably.
    async fn conclude(&self, job: &Job, attempt: u32, end: AttemptEnd) -> Result<(), StoreError> {
        let id = job.id;
        let policy = job.spec.retry;
        let start_at = job.spec.start_at;
        let jitter = (self.jitter)();
        let metrics = self.metrics.clone();
        let clock = self.clock.clone();
        self.store.call(move |store| {
            let t = clock.now();
            let result = match end {
                AttemptEnd::Complete => {
                    let members = store.members(id)?;
                    let outcome = JobOutcome::from_members(members.iter().map(|m| &m.state));
                    store.apply(id, JobEvent::Finish { outcome }, t, None).map(|_| ())
                }
                AttemptEnd::JobPermanent { reason } => {
                    metrics.attempt_failed(AttemptFailure::JobPermanent);
                    store.settle_and_finish(id, MemberState::FailedPermanent, t, Some(reason)).map(|_| ())
                }
                AttemptEnd::Transient { reason } => match policy.decide(attempt, start_at, t, jitter) {
                    RetryDecision::RetryAt(next) => {
                        tracing::info!(job = id.0, attempt, next = %next, %reason, "attempt failed; will retry");
                        metrics.attempt_failed(AttemptFailure::Requeued);
                        store.apply(id, JobEvent::Requeue { next_attempt_at: next }, t, Some(reason)).map(|_| ())
                    }
                    RetryDecision::Exhausted(by) => {
                        metrics.attempt_failed(AttemptFailure::Exhausted);
                        let why = match by {
                            ExhaustedBy::MaxAttempts => format!("{reason}; no attempts left ({attempt} of {})", policy.max_attempts),
                            ExhaustedBy::Deadline => format!("{reason}; the next attempt would fall after the deadline"),
                        };
                        store.settle_and_finish(id, MemberState::FailedRetriesExhausted, t, Some(why)).map(|_| ())
                    }
                },
                AttemptEnd::Wait(wait) => {
                    tracing::info!(job = id.0, attempt, until = %wait.until, "{}; the attempt does not count", wait.text());
                    let until = policy.wait_until(start_at, wait.until);
                    store.defer(id, until, Some(wait), t).map(|_| ())
                }
                AttemptEnd::Interrupted => {
                    // A cancel already moved the job; a shutdown leaves it due again at once.
                    match store.get(id)? {
                        Some(Job { state: JobState::Running { .. }, .. }) => store
                            .apply(id, JobEvent::Requeue { next_attempt_at: t }, t, Some("interrupted by shutdown, or by the end of this node's lease".into()))
                            .map(|_| ()),
                        _ => Ok(()),
                    }
                }
            };
            match result {
                // Cancelled while the attempt ran: the cancel wins.
                Err(StoreError::InvalidTransition { .. }) => {
                    store.append_history(id, HistoryEvent { at: t, kind: "attempt-ended".into(), detail: Some("after the job was cancelled".into()) })
                }
                other => other,
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    //! The schedule itself, on a paused tokio clock: every attempt's start time is asserted to
    //! the millisecond, and a 4-attempt backoff of an hour runs in milliseconds.

    use super::*;
    use crate::testkit::{self, T0};
    use bftp_core::RetryPolicy;
    use bftp_store::MemberUpdate;

    const MIN: Duration = Duration::from_secs(60);

    /// An executor that ends each attempt as its script says and notes when it started; past
    /// the script, it copies the one member and completes.
    struct Scripted {
        store: Arc<dyn bftp_store::JobStore>,
        clock: Clock,
        ends: Mutex<Vec<AttemptEnd>>,
        started: Mutex<Vec<(u32, Timestamp)>>,
    }

    impl Executor for Scripted {
        fn attempt(&self, job: Job, attempt: u32, _signals: AttemptSignals) -> AttemptFuture {
            let now = self.clock.now();
            self.started.lock().unwrap().push((attempt, now));
            let mut ends = self.ends.lock().unwrap();
            if !ends.is_empty() {
                let end = ends.remove(0);
                return Box::pin(async move { end });
            }
            let copied = MemberUpdate {
                state: Some(MemberState::Succeeded),
                ..MemberUpdate::default()
            };
            self.store.update_member(job.id, 0, copied, now).unwrap();
            Box::pin(async { AttemptEnd::Complete })
        }
    }

    fn transient() -> AttemptEnd {
        AttemptEnd::Transient {
            reason: "426 connection closed".into(),
        }
    }

    /// Runs one job through the scheduler until it is final; returns the attempts' start
    /// times and the final job.
    async fn run_job(retry: RetryPolicy, ends: Vec<AttemptEnd>) -> (Vec<(u32, Timestamp)>, Job) {
        let (_dir, store) = testkit::store();
        let clock = Clock::following_tokio(T0);
        let executor = Arc::new(Scripted {
            store: store.clone(),
            clock: clock.clone(),
            ends: Mutex::new(ends),
            started: Mutex::new(vec![]),
        });
        let scheduler = Scheduler::new(
            store.clone().into(),
            executor.clone(),
            Arc::new(Metrics::new()),
            SchedulerLimits {
                max_running_jobs: 4,
                grace: Duration::from_secs(1),
            },
            clock.clone(),
            Arc::new(|| 0.0),
        );
        let id = testkit::submit_one_file_job(&*store, retry);
        let stop = CancellationToken::new();
        let running = tokio::spawn(scheduler.clone().run(stop.clone()));
        let job = loop {
            let job = store.get(id).unwrap().unwrap();
            if matches!(job.state, JobState::Finished { .. }) {
                break job;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        stop.cancel();
        running.await.unwrap();
        let started = executor.started.lock().unwrap().clone();
        (started, job)
    }

    fn at(d: Duration) -> Timestamp {
        T0.saturating_add(d)
    }

    /// A gate closed until `open`: each job asked before then waits for it.
    struct ClosedUntil(Timestamp, Mutex<u32>);

    impl StartGate for ClosedUntil {
        fn wait_for(&self, _job: &Job, now: Timestamp) -> Option<bftp_core::window::Wait> {
            *self.1.lock().unwrap() += 1;
            (now < self.0).then_some(bftp_core::window::Wait {
                reason: bftp_core::window::WaitReason::Window,
                host: None,
                until: self.0,
            })
        }
    }

    /// A scheduler on a paused clock at `T0` whose attempts the returned `Scripted` runs
    /// (each ends as scripted, by default complete), for the start gate's tests.
    fn gated(store: &Arc<dyn bftp_store::JobStore>) -> (Clock, Arc<Scripted>, Arc<Scheduler>) {
        let clock = Clock::following_tokio(T0);
        let executor = Arc::new(Scripted {
            store: store.clone(),
            clock: clock.clone(),
            ends: Mutex::new(vec![]),
            started: Mutex::new(vec![]),
        });
        let scheduler = Scheduler::new(
            store.clone().into(),
            executor.clone(),
            Arc::new(Metrics::new()),
            SchedulerLimits {
                max_running_jobs: 4,
                grace: Duration::from_secs(1),
            },
            clock.clone(),
            Arc::new(|| 0.0),
        );
        (clock, executor, scheduler)
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_that_opens_after_the_deadline_ends_the_job_at_its_deadline() {
        let (_dir, store) = testkit::store();
        let (clock, executor, scheduler) = gated(&store);
        // Closed for a day; the job's deadline is an hour.
        scheduler.set_gate(Arc::new(ClosedUntil(at(24 * 60 * MIN), Mutex::new(0))));
        let retry = RetryPolicy {
            first_interval: MIN,
            factor: 2.0,
            cap: MIN,
            max_attempts: 3,
            deadline: Duration::from_secs(3600),
        };
        let id = testkit::submit_one_file_job(&*store, retry);
        let stop = CancellationToken::new();
        let running = tokio::spawn(scheduler.clone().run(stop.clone()));
        let job = loop {
            let job = store.get(id).unwrap().unwrap();
            if job.state.is_final() {
                break job;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let ended = clock.now();
        stop.cancel();
        running.await.unwrap();
        assert!(executor.started.lock().unwrap().is_empty());
        assert_eq!(job.attempts, 0);
        // At the deadline (and the second of the loop's look), not when the gate opens.
        assert!(ended <= at(61 * MIN), "ended at {ended:?}");
        assert!(
            matches!(
                job.state,
                JobState::Finished {
                    outcome: JobOutcome::Failed,
                    ..
                }
            ),
            "{:?}",
            job.state
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_gated_job_waits_without_a_try_and_starts_when_it_opens() {
        let (_dir, store) = testkit::store();
        let (_clock, executor, scheduler) = gated(&store);
        let gate = Arc::new(ClosedUntil(at(7 * MIN), Mutex::new(0)));
        scheduler.set_gate(gate.clone());
        let retry = RetryPolicy {
            first_interval: MIN,
            factor: 2.0,
            cap: MIN,
            max_attempts: 1,
            deadline: Duration::from_secs(86_400),
        };
        let id = testkit::submit_one_file_job(&*store, retry);
        let stop = CancellationToken::new();
        let running = tokio::spawn(scheduler.clone().run(stop.clone()));
        tokio::time::sleep(MIN).await;
        let waiting = store.get(id).unwrap().unwrap();
        assert_eq!(
            (
                waiting.state,
                waiting.attempts,
                waiting.waiting.map(|w| w.until)
            ),
            (
                JobState::Queued {
                    next_attempt_at: at(7 * MIN)
                },
                0,
                Some(at(7 * MIN))
            )
        );
        let job = loop {
            let job = store.get(id).unwrap().unwrap();
            if job.state.is_final() {
                break job;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        stop.cancel();
        running.await.unwrap();
        // One look while closed, one when it opened; the only try is the one that ran.
        assert_eq!(*gate.1.lock().unwrap(), 2);
        assert_eq!(executor.started.lock().unwrap().clone(), [(1, at(7 * MIN))]);
        assert!(matches!(
            job.state,
            JobState::Finished {
                outcome: JobOutcome::Succeeded,
                ..
            }
        ));
        assert_eq!(job.attempts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_from_the_first_interval_up_to_the_cap() {
        let retry = RetryPolicy {
            first_interval: 10 * MIN,
            factor: 2.0,
            cap: 30 * MIN,
            max_attempts: 5,
            deadline: Duration::from_secs(86_400),
        };
        let (started, job) = run_job(
            retry,
            vec![transient(), transient(), transient(), transient()],
        )
        .await;
        // Delays 10, 20, then capped at 30 and 30 minutes.
        let want = [0, 10, 30, 60, 90].map(|m| at(MIN * m));
        let got: Vec<Timestamp> = started.iter().map(|(_, t)| *t).collect();
        assert_eq!(got, want);
        assert_eq!(
            started.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert!(
            matches!(job.state, JobState::Finished { outcome: JobOutcome::Succeeded, at: t } if t == at(90 * MIN)),
            "{:?}",
            job.state
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_attempt_exhausts_the_job_at_max_attempts() {
        let retry = RetryPolicy {
            first_interval: Duration::from_secs(90),
            factor: 3.0,
            cap: Duration::from_secs(3600),
            max_attempts: 3,
            deadline: Duration::from_secs(86_400),
        };
        let (started, job) = run_job(retry, vec![transient(); 5]).await;
        let want = [0, 90, 90 + 270].map(|s| at(Duration::from_secs(s)));
        assert_eq!(started.iter().map(|(_, t)| *t).collect::<Vec<_>>(), want);
        assert!(
            matches!(job.state, JobState::Finished { outcome: JobOutcome::Failed, at: t } if t == want[2]),
            "{:?}",
            job.state
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_starts_after_the_deadline() {
        // The third attempt would be due at 10 + 20 = 30 min, past the 25 min deadline.
        let retry = RetryPolicy {
            first_interval: 10 * MIN,
            factor: 2.0,
            cap: Duration::from_secs(3600),
            max_attempts: 10,
            deadline: 25 * MIN,
        };
        let (started, job) = run_job(retry, vec![transient(); 5]).await;
        assert_eq!(
            started.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            [at(Duration::ZERO), at(10 * MIN)]
        );
        assert!(
            matches!(job.state, JobState::Finished { outcome: JobOutcome::Failed, at: t } if t == at(10 * MIN)),
            "{:?}",
            job.state
        );
    }
}
