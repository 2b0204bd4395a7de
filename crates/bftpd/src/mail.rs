//! The postman: delivers the reports of final jobs from the store's outbox (RULES.md §4.6).
//!
//! The store writes a job's outbox entry in the same transaction that finishes or cancels
//! it; the postman renders the report from what the store holds (the job, its ledger, its
//! history, the last attempt's transcript) at each try, so nothing but the entry itself
//! needs to be durable. Delivery is at least once: a crash after the relay accepted the
//! message and before the store recorded it sends it again, with the same Message-ID (made
//! of the job id and the entry's creation time), so the copy is recognizable.
//!
//! Transient failures (4yz, refused connections, timeouts) are retried with the outbox's own
//! backoff (`[mail.retry]`) until `give_up_after`; permanent ones (5yz, a sendmail refusal,
//! a mailbox that cannot be written) give the report up at once. Either way `bftp status`
//! shows where the report stands.

use std::sync::Arc;
use std::time::Duration;

use bftp_core::Timestamp;
use bftp_mail::{MailConfig, Mailer, SendError};
use bftp_store::{DeliveryTry, JobId, JobStore, OutboxEntry, OutboxState, StoreError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::{Clock, Jitter};
use crate::metrics::{Metrics, ReportResult};
use crate::secrets::Secrets;
use crate::store::Store;
pub use crate::views::report::MailSettings;

/// Reports looked at per trip to the store.
const BATCH: usize = 16;
/// Members read per trip to the store while a report is built: what bounds the memory a
/// report of any size takes besides its compressed ledger.
const MEMBERS_PAGE: usize = 1024;
/// How long a report waits for the attempt of a just-cancelled job to wind down.
const WAIT_FOR_ATTEMPT: Duration = Duration::from_secs(1);
/// After a store error, the postman looks again this much later.
const STORE_RETRY: Duration = Duration::from_secs(5);
/// With no report pending, the postman still looks at the outbox this often.
const IDLE_LOOK: Duration = Duration::from_secs(3600);

/// Delivers due reports until shutdown.
pub struct Postman {
    pub store: Store,
    pub secrets: Arc<Secrets>,
    pub settings: MailSettings,
    pub config: MailConfig,
    pub mailer: Mailer,
    pub scheduler: Arc<crate::scheduler::Scheduler>,
    /// Notified when a job becomes final.
    pub wake: Arc<Notify>,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    /// The draw behind each retry's jitter.
    pub jitter: Jitter,
}

impl Postman {
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => break,
                // A delivery cut by shutdown stays pending: it is sent again after the restart.
                r = self.deliver_due() => r,
            };
            let next = next.unwrap_or_else(|e| {
                tracing::error!(error = %e, "the postman cannot read the outbox; retrying soon");
                Some(self.clock.now().saturating_add(STORE_RETRY))
            });
            let next = next.unwrap_or_else(|| self.clock.now().saturating_add(IDLE_LOOK));
            // A shared store: reports finished on other nodes are seen by looking again.
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
    }

    /// Tries every due report once; returns when the next one is due.
    async fn deliver_due(&self) -> Result<Option<Timestamp>, StoreError> {
        loop {
            let t = self.clock.now();
            let due = self.store.call(move |s| s.outbox_due(t, BATCH)).await?;
            let full = due.len() == BATCH;
            for entry in due {
                let id = entry.job;
                // Every event of the delivery carries the job id.
                let span = tracing::info_span!("report", job = id.0);
                let result = self.try_one(&entry).instrument(span.clone()).await;
                let at = self.clock.now();
                let recorded = self
                    .store
                    .call(move |s| s.record_delivery(id, result, at))
                    .instrument(span.clone())
                    .await?;
                span.in_scope(|| match recorded.state {
                    OutboxState::Delivered { .. } => {
                        self.metrics.report(ReportResult::Delivered);
                        tracing::info!(job = id.0, tries = recorded.tries, "report delivered")
                    }
                    OutboxState::GaveUp { .. } => {
                        self.metrics.report(ReportResult::GaveUp);
                        tracing::error!(
                            job = id.0,
                            tries = recorded.tries,
                            error = recorded.last_error.as_deref().unwrap_or(""),
                            "report given up"
                        )
                    }
                    OutboxState::Pending => {}
                });
            }
            if !full {
                break;
            }
        }
        self.store.call(|s| s.outbox_next_due()).await
    }

    async fn try_one(&self, entry: &OutboxEntry) -> DeliveryTry {
        let id = entry.job;
        if self.scheduler.is_running(id) {
            // A cancelled job's attempt is still stopping: its ledger may change yet.
            return DeliveryTry::Postponed {
                next_try_at: self.clock.now().saturating_add(WAIT_FOR_ATTEMPT),
            };
        }
        let fail = |error: String| self.failed(entry, error);
        let (envelope, message) = match self.compose(entry).await {
            Ok(m) => m,
            Err(Compose::Store(e)) => return fail(format!("cannot read the job: {e}")),
            Err(Compose::Refused(error)) => return DeliveryTry::GaveUp { error },
            Err(Compose::NotWanted(why)) => {
                tracing::debug!(job = id.0, "{why}");
                return DeliveryTry::GaveUp { error: why };
            }
        };
        tracing::debug!(job = id.0, to = ?envelope.to(), bytes = message.len(), "delivering the report");
        match self.mailer.send_raw(&envelope, &message).await {
            Ok(()) => DeliveryTry::Delivered,
            Err(SendError::Permanent { reason }) => DeliveryTry::GaveUp { error: reason },
            Err(SendError::Transient { reason }) => {
                tracing::warn!(job = id.0, tries = entry.tries + 1, error = %reason, "report not delivered; will retry");
                fail(reason)
            }
        }
    }

    /// A transient failure: the next try, or the end when `give_up_after` has passed.
    fn failed(&self, entry: &OutboxEntry, error: String) -> DeliveryTry {
        let t = self.clock.now();
        let elapsed = t.saturating_duration_since(entry.created_at);
        let jitter = (self.jitter)();
        match bftp_mail::next_delay(entry.tries + 1, elapsed, &self.config.retry, jitter) {
            Some(wait) => DeliveryTry::Failed {
                error,
                next_try_at: t.saturating_add(wait),
            },
            None => DeliveryTry::GaveUp {
                error: format!(
                    "{error}; still undelivered after {}",
                    humantime::format_duration(self.config.retry.give_up_after)
                ),
            },
        }
    }

    /// The message of a report, rendered from what the store holds now, with its envelope.
    /// Built on the blocking pool, never on a runtime worker (bftpd has one by default: a
    /// report built there would stop the API, the scheduler and every copy until it is done).
    async fn compose(
        &self,
        entry: &OutboxEntry,
    ) -> Result<(lettre::address::Envelope, Vec<u8>), Compose> {
        let secrets = self.secrets.clone();
        let (settings, entry) = (self.settings.clone(), entry.clone());
        self.store
            .call(move |store| Ok(report_message(store, &secrets, &settings, &entry)))
            .await
            .unwrap_or_else(|e| Err(Compose::Store(e)))
    }
}

/// The report of `entry`'s job as the bytes of a message, read from the store
/// [`MEMBERS_PAGE`] members at a time: the time it takes is linear in the job's members and
/// the memory it holds is a page, the text's bounded lists and the compressed ledger
/// (`bftp_mail::ReportBuilder`). Blocking. Public for the benchmark (`bench-report`).
pub fn report_message(
    store: &dyn JobStore,
    secrets: &Secrets,
    settings: &MailSettings,
    entry: &OutboxEntry,
) -> Result<(lettre::address::Envelope, Vec<u8>), Compose> {
    let id: JobId = entry.job;
    let job = store
        .get(id)
        .and_then(|j| j.ok_or(StoreError::NotFound(id)))
        .map_err(Compose::Store)?;
    if let Some(watch) = job.watch {
        if let Some(w) = store.watch(watch).map_err(Compose::Store)? {
            if !bftp_core::watch::mails_report(&w.settings.notify_on, &job.state) {
                return Err(Compose::NotWanted(format!(
                    "not mailed: watch {} mails its jobs' reports on {}",
                    watch.0, w.settings.notify_on
                )));
            }
        }
    }
    let to = settings.recipients(&job).map_err(Compose::Refused)?;
    if to.is_empty() {
        return Err(Compose::NotWanted(
            "not mailed: the job's notify names webhooks only".into(),
        ));
    }
    let history = store.history(id).map_err(Compose::Store)?;
    let transcript = store
        .transcript(id)
        .map_err(Compose::Store)?
        .map(|t| t.lines)
        .unwrap_or_default();
    // The report is about the job, not about its own delivery: no `report` in its view.
    let header = crate::views::job_view(&job, &[], &history);
    let clear = secrets.clear_texts(&job.spec);
    let mut builder = bftp_mail::ReportBuilder::new(header, &transcript, &clear);
    let mut from = 0;
    loop {
        let page = store
            .members_page(id, from, MEMBERS_PAGE)
            .map_err(Compose::Store)?;
        let Some(last) = page.last() else { break };
        from = last.index + 1;
        // The members' views, as the job's view makes them.
        let views = crate::views::job_view(&job, &page, &[]).members;
        views.into_iter().for_each(|m| builder.push(m));
        if page.len() < MEMBERS_PAGE {
            break;
        }
    }
    let report = builder.finish();
    let envelope = bftp_mail::Envelope {
        from: settings.from.clone(),
        to,
        message_id: settings.message_id(entry),
        date: entry.created_at.to_system(),
    };
    let message = bftp_mail::build_message(&report, &envelope)
        .map_err(|e| Compose::Refused(format!("cannot build the message: {e}")))?;
    drop(report);
    Ok((message.envelope().clone(), message.formatted()))
}

/// Why a report's message could not be made.
#[derive(Debug)]
pub enum Compose {
    Store(StoreError),
    /// The report can never be sent as it is (no mailbox, an address lettre refuses).
    Refused(String),
    /// A watch's job whose report the watch does not mail (`notify_on`): settled without a
    /// message, and the reason kept as the entry's last error.
    NotWanted(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, T0};
    use bftp_core::{JobEvent, JobOutcome, RetryPolicy};
    use bftp_mail::{MailRetry, TransportConfig};

    /// Runs the postman against a final job whose mail can never be handed over (a sendmail
    /// that does not exist: a transient failure, at once), on a paused clock, until the report
    /// is given up.
    async fn give_up_schedule(retry: MailRetry) -> OutboxEntry {
        let (dir, store) = testkit::store();
        let id = testkit::submit_one_file_job(&*store, RetryPolicy::default());
        store
            .apply(id, JobEvent::Start { attempt: 1 }, T0, None)
            .unwrap();
        let finish = JobEvent::Finish {
            outcome: JobOutcome::Failed,
        };
        store.apply(id, finish, T0, None).unwrap();
        let config = MailConfig {
            transport: TransportConfig::Sendmail {
                command: dir.path().join("no-such-sendmail"),
                timeout: Duration::from_secs(5),
            },
            retry,
            ..MailConfig::default()
        };
        struct Idle;
        impl crate::scheduler::Executor for Idle {
            fn attempt(
                &self,
                _: bftp_store::Job,
                _: u32,
                _: crate::scheduler::AttemptSignals,
            ) -> crate::scheduler::AttemptFuture {
                Box::pin(async { crate::scheduler::AttemptEnd::Complete })
            }
        }
        let clock = Clock::following_tokio(T0);
        let metrics = Arc::new(Metrics::new());
        let limits = crate::scheduler::SchedulerLimits {
            max_running_jobs: 1,
            grace: Duration::from_secs(1),
        };
        let scheduler = crate::scheduler::Scheduler::new(
            store.clone().into(),
            Arc::new(Idle),
            metrics.clone(),
            limits,
            clock.clone(),
            Arc::new(|| 0.0),
        );
        let postman = Arc::new(Postman {
            store: store.clone().into(),
            secrets: Arc::new(Secrets::load_or_create(&dir.path().join("secret.key")).unwrap()),
            settings: MailSettings::new(&config),
            mailer: Mailer::new(&config).unwrap(),
            config,
            wake: scheduler.finals(),
            scheduler,
            metrics,
            clock,
            jitter: Arc::new(|| 0.0),
        });
        let stop = CancellationToken::new();
        let running = tokio::spawn(postman.run(stop.clone()));
        let entry = loop {
            let entry = store.outbox_entry(id).unwrap().unwrap();
            if !matches!(entry.state, OutboxState::Pending) {
                break entry;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        stop.cancel();
        running.await.unwrap();
        entry
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_is_retried_with_backoff_and_given_up_on_time() {
        let retry = MailRetry {
            first_interval: Duration::from_secs(60),
            factor: 2.0,
            cap: Duration::from_secs(300),
            give_up_after: Duration::from_secs(1000),
        };
        let entry = give_up_schedule(retry).await;
        // Tries at 0, 60, 180, 420 and 720 s (waits 60, 120, 240, then capped at 300); the
        // next would come at 1020 s, past give_up_after: the fifth failure gives it up.
        assert_eq!(entry.tries, 5);
        assert_eq!(
            entry.state,
            OutboxState::GaveUp {
                at: T0.saturating_add(Duration::from_secs(720))
            }
        );
        let error = entry.last_error.unwrap_or_default();
        assert!(error.contains("no-such-sendmail"), "{error}");
        assert!(error.contains("still undelivered after 16m 40s"), "{error}");
    }

    /// A webhook in `notify` is no mailbox: the report goes to the mailboxes beside it, and a
    /// job that names webhooks only is not mailed at all (not even to its owner).
    #[test]
    fn the_report_is_mailed_to_the_mailboxes_only_and_not_for_webhooks_alone() {
        let (dir, store) = testkit::store();
        let secrets = Secrets::load_or_create(&dir.path().join("secret.key")).unwrap();
        let s = settings("bftp@example.org", true);
        let finished = |notify: &[&str]| {
            let notify = notify.iter().map(|n| n.to_string()).collect();
            let id =
                testkit::submit_one_file_job_notifying(&*store, RetryPolicy::default(), notify);
            store
                .apply(id, JobEvent::Start { attempt: 1 }, T0, None)
                .unwrap();
            let finish = JobEvent::Finish {
                outcome: JobOutcome::Failed,
            };
            store.apply(id, finish, T0, None).unwrap();
            store.outbox_entry(id).unwrap().unwrap()
        };
        let both = finished(&[
            "ops@example.org",
            "https://hooks.example.org/in?token=t0ken",
        ]);
        let (envelope, message) = report_message(&*store, &secrets, &s, &both).unwrap();
        let to: Vec<String> = envelope.to().iter().map(|a| a.to_string()).collect();
        assert_eq!(to, ["ops@example.org"]);
        let text = String::from_utf8_lossy(&message);
        assert!(!text.contains("t0ken"), "{text}");
        let only = finished(&["https://hooks.example.org/in"]);
        match report_message(&*store, &secrets, &s, &only) {
            Err(Compose::NotWanted(why)) => assert!(why.contains("webhooks only"), "{why}"),
            other => panic!("{:?}", other.map(|(e, _)| e)),
        }
        let job = store.get(only.job).unwrap().unwrap();
        assert_eq!(s.recipients(&job), Ok(vec![]));
        assert_eq!(
            crate::views::job_view(&job, &[], &[]).notify,
            ["https://hooks.example.org/in"]
        );
    }

    fn entry(state: OutboxState) -> OutboxEntry {
        OutboxEntry {
            job: JobId(42),
            created_at: Timestamp(1_764_500_000_000),
            tries: 2,
            next_try_at: Some(Timestamp(1_764_500_060_000)),
            state,
            last_error: Some("451 later".into()),
            updated_at: Timestamp(1_764_500_000_000),
        }
    }

    fn settings(from: &str, enabled: bool) -> MailSettings {
        MailSettings::new(&MailConfig {
            from: from.into(),
            enabled,
            ..MailConfig::default()
        })
    }

    #[test]
    fn message_ids_are_stable_and_use_the_senders_domain() {
        let s = settings("BFTP <bftp@files.example.org>", true);
        assert_eq!(s.id_domain, "files.example.org");
        let e = entry(OutboxState::Pending);
        assert_eq!(
            s.message_id(&e),
            "<bftp.job-42.1764500000000@files.example.org>"
        );
        // A later try (more tries, another error) keeps the id.
        let mut later = e.clone();
        later.tries = 7;
        later.last_error = None;
        assert_eq!(s.message_id(&later), s.message_id(&e));
        assert_eq!(settings("nobody", true).id_domain, "localhost");
    }
}
