//! The deliverer: sends the events of the store's log to their webhook targets (SPEC §16).
//!
//! The store writes an event in the transaction of the change it tells of; the deliverer
//! looks for due events (woken when a job becomes final, and every [`IDLE_LOOK`] at most for
//! the events written mid-attempt or by the watcher), decides their targets at each try (the
//! job's or the watch's `notify` URLs, plus `[webhooks] urls`), renders the body from the
//! store (`body.rs`), sends it to every target still pending through the sender, and records
//! the round: each target delivered, tried again later (`bftp_core::event::after_try`:
//! `retry_first` doubling to `retry_max`), or given up (a permanent answer, or past
//! `give_up_after`). Delivery is at least once: a crash between a receiver's answer and the
//! record sends the event again, with the same id.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bftp_core::event::{after_try, is_webhook, Backoff, EventKind, TryOutcome, Verdict};
use bftp_core::Timestamp;
use bftp_store::{DeliveryTry, Event, JobStore, OutboxState, StoreError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::Clock;
use crate::secrets::Secrets;
use crate::store::Store;

/// Events looked at per trip to the store (and sent at once).
const BATCH: usize = 16;
/// How long an event of a just-cancelled job waits for the attempt to wind down.
const WAIT_FOR_ATTEMPT: Duration = Duration::from_secs(1);
/// After a store error, the deliverer looks again this much later.
const STORE_RETRY: Duration = Duration::from_secs(5);
/// The deliverer looks at the log at least this often: events written mid-attempt (a member
/// failed) and by the watcher ring no bell.
pub const IDLE_LOOK: Duration = Duration::from_secs(1);

/// One try of sending one event's body to one target (the HTTP sender, `send.rs`).
pub trait Post: Send + Sync + 'static {
    fn post<'a>(
        &'a self,
        target: &'a str,
        event_id: &'a str,
        kind: &'a str,
        body: &'a [u8],
        now: Timestamp,
    ) -> Pin<Box<dyn Future<Output = TryOutcome> + Send + 'a>>;
}

impl Post for crate::hooks::send::Sender {
    fn post<'a>(
        &'a self,
        target: &'a str,
        event_id: &'a str,
        kind: &'a str,
        body: &'a [u8],
        now: Timestamp,
    ) -> Pin<Box<dyn Future<Output = TryOutcome> + Send + 'a>> {
        use crate::hooks::send::Sent;
        Box::pin(async move {
            match self.send(target, event_id, kind, body, now).await {
                Sent::Delivered { .. } => TryOutcome::Delivered,
                Sent::Transient { why } => TryOutcome::Transient(why),
                Sent::Permanent { why } => TryOutcome::Permanent(why),
            }
        })
    }
}

/// What the deliverer takes from `[webhooks]`.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Targets of every event, besides the job's or watch's own.
    pub urls: Vec<String>,
    pub max_body_bytes: usize,
    pub backoff: Backoff,
}

/// Delivers due events until shutdown.
pub struct Deliverer {
    pub store: Store,
    pub secrets: Arc<Secrets>,
    pub settings: Settings,
    pub post: Arc<dyn Post>,
    /// Whether a job's attempt is still under way (its ledger may change yet).
    pub running: Arc<dyn Fn(bftp_store::JobId) -> bool + Send + Sync>,
    /// Rung when a job may have become final.
    pub wake: Arc<Notify>,
    pub clock: Clock,
}

impl Deliverer {
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => break,
                // A round cut by shutdown is not recorded: its events are sent again.
                r = self.deliver_due() => r,
            };
            let now = self.clock.now();
            let next = next.unwrap_or_else(|e| {
                tracing::error!(error = %e, "the deliverer cannot read the event log; retrying soon");
                Some(now.saturating_add(STORE_RETRY))
            });
            let idle = now.saturating_add(IDLE_LOOK);
            let next = next.map_or(idle, |n| n.min(idle));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = self.clock.sleep_until(next) => {}
            }
        }
    }

    /// Tries every due event once; returns when the next one is due.
    pub async fn deliver_due(&self) -> Result<Option<Timestamp>, StoreError> {
        loop {
            let t = self.clock.now();
            let due = self.store.call(move |s| s.events_due(t, BATCH)).await?;
            let full = due.len() == BATCH;
            let rounds = due.into_iter().map(|ev| {
                let span = tracing::info_span!("event", id = %ev.id, seq = ev.seq);
                self.round(ev).instrument(span)
            });
            for r in futures_util::future::join_all(rounds).await {
                r?;
            }
            if !full {
                break;
            }
        }
        self.store.call(|s| s.event_next_due()).await
    }

    /// One round of an event: every target still pending and due, tried once, recorded.
    async fn round(&self, ev: Event) -> Result<(), StoreError> {
        let now = self.clock.now();
        let (targets, body) = {
            let (secrets, settings, e) = (self.secrets.clone(), self.settings.clone(), ev.clone());
            self.store
                .call(move |s| {
                    let targets = targets_of(s, &settings, &e)?;
                    let body =
                        crate::hooks::body::render(s, &secrets, &e, settings.max_body_bytes)?;
                    Ok((targets, body))
                })
                .await?
        };
        // A delivery still pending to a target the event no longer has (taken out of
        // `[webhooks] urls`, or its watch removed) is given up: left pending, it would keep
        // the event due at once, and the deliverer looking at it again in a loop.
        let dropped: Vec<(String, DeliveryTry)> = ev
            .deliveries
            .iter()
            .filter(|d| d.state == OutboxState::Pending && !targets.contains(&d.target))
            .map(|d| {
                let error = "no longer a target of this event ([webhooks] urls changed, or its \
                             watch was removed)"
                    .to_string();
                (d.target.clone(), DeliveryTry::GaveUp { error })
            })
            .collect();
        let pending: Vec<String> = targets
            .into_iter()
            .filter(|t| match ev.deliveries.iter().find(|d| &d.target == t) {
                None => true,
                Some(d) => {
                    d.state == OutboxState::Pending && d.next_try_at.is_none_or(|n| n <= now)
                }
            })
            .collect();
        let postpone = ev.kind.is_job() && ev.job.is_some_and(|j| (self.running)(j));
        let mut tries = Vec::with_capacity(pending.len() + dropped.len());
        tries.extend(dropped);
        if postpone {
            let next_try_at = now.saturating_add(WAIT_FOR_ATTEMPT);
            tries.extend(
                pending
                    .into_iter()
                    .map(|t| (t, DeliveryTry::Postponed { next_try_at })),
            );
        } else {
            let sends = pending.iter().map(|t| {
                let before = ev
                    .deliveries
                    .iter()
                    .find(|d| &d.target == t)
                    .map_or(0, |d| d.tries);
                let body = &body;
                let ev = &ev;
                async move {
                    let outcome = self.post.post(t, &ev.id, ev.kind.as_str(), body, now).await;
                    let at = self.clock.now();
                    let verdict = after_try(
                        outcome,
                        before + 1,
                        ev.created_at,
                        at,
                        &self.settings.backoff,
                    );
                    (t.clone(), verdict)
                }
            });
            for (t, verdict) in futures_util::future::join_all(sends).await {
                let shown = bftp_core::event::shown_entry(&t);
                let result = match verdict {
                    Verdict::Delivered => {
                        tracing::info!(target = %shown, "event delivered");
                        DeliveryTry::Delivered
                    }
                    Verdict::Retry { at, why } => {
                        tracing::warn!(target = %shown, error = %why, "event not delivered; will retry");
                        DeliveryTry::Failed {
                            error: why,
                            next_try_at: at,
                        }
                    }
                    Verdict::GiveUp { why } => {
                        tracing::error!(target = %shown, error = %why, "event given up");
                        DeliveryTry::GaveUp { error: why }
                    }
                };
                tries.push((t, result));
            }
        }
        let seq = ev.seq;
        let at = self.clock.now();
        self.store
            .call(move |s| s.record_event_delivery(seq, tries, at))
            .await?;
        Ok(())
    }
}

/// An event's targets, decided at each try: the URLs among the `notify` of its job (or, for
/// a watch's alarm, of its watch), then `[webhooks] urls`, each once, in that order.
fn targets_of(
    store: &dyn JobStore,
    settings: &Settings,
    ev: &Event,
) -> Result<Vec<String>, StoreError> {
    let notify = match (ev.kind, ev.job, ev.watch) {
        (EventKind::WatchLate, _, Some(w)) => store.watch(w)?.map(|w| w.spec.notify),
        (_, Some(j), _) => store.get(j)?.map(|j| j.spec.notify),
        _ => None,
    }
    .unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for t in notify
        .iter()
        .filter(|n| is_webhook(n))
        .chain(&settings.urls)
    {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, T0};
    use bftp_core::{JobEvent, JobOutcome, RetryPolicy};
    use std::sync::Mutex;

    /// A receiver per target: answers taken from its script in turn (the last one repeated),
    /// and the ids and bodies it was sent.
    #[derive(Default)]
    struct Fake {
        script: Mutex<Vec<(String, Vec<TryOutcome>)>>,
        got: Mutex<Vec<(String, String, Vec<u8>)>>,
    }

    impl Post for Fake {
        fn post<'a>(
            &'a self,
            target: &'a str,
            event_id: &'a str,
            _kind: &'a str,
            body: &'a [u8],
            _now: Timestamp,
        ) -> Pin<Box<dyn Future<Output = TryOutcome> + Send + 'a>> {
            self.got
                .lock()
                .unwrap()
                .push((target.into(), event_id.into(), body.to_vec()));
            let mut script = self.script.lock().unwrap();
            let answers = &mut script.iter_mut().find(|(t, _)| t == target).unwrap().1;
            let a = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0].clone()
            };
            Box::pin(async move { a })
        }
    }

    fn backoff() -> Backoff {
        Backoff {
            first: Duration::from_secs(5),
            max: Duration::from_secs(20),
            give_up_after: Duration::from_secs(60),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_delivery_to_a_target_no_longer_listed_is_given_up_not_looked_at_again() {
        let (dir, store) = testkit::store();
        let id = testkit::submit_one_file_job_notifying(&*store, RetryPolicy::default(), vec![]);
        store
            .apply(id, JobEvent::Start { attempt: 1 }, T0, None)
            .unwrap();
        let finish = JobEvent::Finish {
            outcome: JobOutcome::Succeeded,
        };
        store.apply(id, finish, T0, None).unwrap();
        let fake = Arc::new(Fake::default());
        *fake.script.lock().unwrap() = vec![(
            "https://gone.example/".into(),
            vec![TryOutcome::Transient("HTTP 503".into())],
        )];
        let deliverer = |urls: Vec<String>| Deliverer {
            store: store.clone().into(),
            secrets: Arc::new(Secrets::load_or_create(&dir.path().join("secret.key")).unwrap()),
            settings: Settings {
                urls,
                max_body_bytes: 1 << 20,
                backoff: backoff(),
            },
            post: fake.clone(),
            running: Arc::new(|_| false),
            wake: Arc::new(Notify::new()),
            clock: Clock::following_tokio(T0),
        };
        let ev = store.events_of_job(id).unwrap().remove(0);
        deliverer(vec!["https://gone.example/".into()])
            .round(ev)
            .await
            .unwrap();
        let ev = store.events_of_job(id).unwrap().remove(0);
        assert_eq!(ev.deliveries[0].state, OutboxState::Pending);
        assert!(ev.due.is_some());
        // The operator takes the target out of [webhooks] urls and restarts.
        tokio::time::sleep(Duration::from_secs(10)).await;
        deliverer(vec![]).round(ev).await.unwrap();
        let ev = store.events_of_job(id).unwrap().remove(0);
        assert_eq!(ev.deliveries[0].state.as_str(), "gave_up");
        let why = ev.deliveries[0].last_error.clone().unwrap();
        assert!(why.contains("no longer a target"), "{why}");
        assert!(ev.due.is_none(), "the event is still due: {:?}", ev.due);
        assert_eq!(fake.got.lock().unwrap().len(), 1, "tried again");
    }

    #[tokio::test(start_paused = true)]
    async fn each_target_is_retried_with_backoff_until_delivered_or_given_up() {
        let (dir, store) = testkit::store();
        let notify = vec![
            "ops@example.org".to_string(),
            "https://ok.example/in?token=s3cret".to_string(),
            "https://flaky.example/in".to_string(),
            "https://down.example/in".to_string(),
        ];
        let id = testkit::submit_one_file_job_notifying(&*store, RetryPolicy::default(), notify);
        store
            .apply(id, JobEvent::Start { attempt: 1 }, T0, None)
            .unwrap();
        let finish = JobEvent::Finish {
            outcome: JobOutcome::Failed,
        };
        store.apply(id, finish, T0, None).unwrap();
        let t = |s: &str| TryOutcome::Transient(s.into());
        let fake = Arc::new(Fake::default());
        *fake.script.lock().unwrap() = vec![
            (
                "https://ok.example/in?token=s3cret".into(),
                vec![TryOutcome::Delivered],
            ),
            (
                "https://flaky.example/in".into(),
                vec![t("HTTP 500"), t("timed out"), TryOutcome::Delivered],
            ),
            (
                "https://down.example/in".into(),
                vec![t("connection refused")],
            ),
            (
                "https://all.example/".into(),
                vec![TryOutcome::Permanent("HTTP 404".into())],
            ),
        ];
        let clock = Clock::following_tokio(T0);
        let d = Arc::new(Deliverer {
            store: store.clone().into(),
            secrets: Arc::new(Secrets::load_or_create(&dir.path().join("secret.key")).unwrap()),
            settings: Settings {
                urls: vec!["https://all.example/".into()],
                max_body_bytes: 1 << 20,
                backoff: backoff(),
            },
            post: fake.clone(),
            running: Arc::new(|_| false),
            wake: Arc::new(Notify::new()),
            clock: clock.clone(),
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(d.run(stop.clone()));
        let ev = loop {
            let ev = store.events_of_job(id).unwrap().remove(0);
            if ev.due.is_none() {
                break ev;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        stop.cancel();
        task.await.unwrap();
        let summary: Vec<(&str, &str, u32)> = ev
            .deliveries
            .iter()
            .map(|d| (d.target.as_str(), d.state.as_str(), d.tries))
            .collect();
        assert_eq!(
            summary,
            [
                ("https://ok.example/in?token=s3cret", "delivered", 1),
                ("https://flaky.example/in", "delivered", 3),
                // Tries at 0, 5, 15, 35 and 55 s (waits 5, 10, 20, 20): the next, at 75 s,
                // would start past give_up_after (60 s), so the fifth failure gives it up.
                ("https://down.example/in", "gave_up", 5),
                ("https://all.example/", "gave_up", 1),
            ]
        );
        let why = ev.deliveries[2].last_error.clone().unwrap();
        assert!(
            why.contains("connection refused") && why.contains("gave up"),
            "{why}"
        );
        assert_eq!(
            ev.deliveries[2].state,
            OutboxState::GaveUp {
                at: T0.saturating_add(Duration::from_secs(55))
            }
        );
        // Every try of the event carried its one id; the body is the signed-over JSON.
        let got = fake.got.lock().unwrap();
        assert!(got
            .iter()
            .all(|(_, eid, _)| *eid == format!("job-{id}-final")));
        assert_eq!(got.len(), 1 + 3 + 5 + 1);
        let body: serde_json::Value = serde_json::from_slice(&got[0].2).unwrap();
        assert_eq!(body["schema"], "bftp.event.v1");
        assert_eq!(body["type"], "job.finished");
        assert_eq!(body["job"], id.0);
        assert_eq!(body["data"]["schema"], "bftp-report/1");
        assert_eq!(body["data"]["summary"]["outcome"], "failed");
        // No mailbox is a target.
        assert!(!got.iter().any(|(t, _, _)| t.contains("ops@")));
    }
}
