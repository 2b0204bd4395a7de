//! Watches (RULES.md §15): the task that polls each watch when it is due, one poll at a time
//! per watch, and the poll itself (`poll.rs`).
//!
//! The order of one poll is the NNTP seeds' rule: hold the watch (one node at a time), see
//! that the job the last poll made is final (polls never overlap) and fold what it settled
//! into the watch's figures, take the observation (one listing of the source), decide with
//! `bftp_core::watch::poll`, then write the decision, the new job and the status in one
//! store transaction (`JobStore::record_poll`). Identities join the checkpoint only when
//! their member's end is written (by the store, in that member's transaction).

mod poll;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_core::Timestamp;
use bftp_store::{Watch, WatchId};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::hosts::HostLimits;
use crate::metrics::Metrics;
use crate::secrets::Secrets;
use crate::store::Store;

/// With no watch due sooner, the task looks at the store this often (new watches are
/// announced by the API's bell; another node's are found here).
const IDLE_LOOK: Duration = Duration::from_secs(30);

/// What the watcher needs of the daemon.
pub struct Watcher {
    pub store: Store,
    pub secrets: Arc<Secrets>,
    pub hosts: Arc<HostLimits>,
    pub limits: bftp_ftp::Limits,
    pub check: Arc<dyn bftp_ftp::AddressCheck>,
    pub scheduler: Arc<crate::scheduler::Scheduler>,
    /// Rung by the API (a watch added, resumed) and when a poll ends.
    pub bell: Arc<Notify>,
    /// Rung by the scheduler when a job may have become final.
    ended: Arc<Notify>,
    pub clock: Clock,
    pub metrics: Arc<Metrics>,
    /// This node's name (the store's, when shared; else `local`).
    pub node: String,
    /// How long a look holds a watch (`[store] lease`, or the watch's interval when longer):
    /// another node takes over a watch whose holder stopped looking for that long.
    hold: Duration,
    /// Watches whose poll is under way here.
    busy: Mutex<HashSet<WatchId>>,
    /// Watches left alone until a time: their last job is not final yet (a job's end clears
    /// them all), another node holds them, or the store failed.
    parked: Mutex<HashMap<WatchId, Timestamp>>,
    /// Mail for the late-arrival alarms (`None` when `[mail]` is off: no alarm is sent,
    /// and the watch's log says so).
    alarm: Option<Alarm>,
}

/// A watch whose job runs is looked at again this often even if no job's end is heard.
const PARKED: Duration = Duration::from_secs(5);

impl Watcher {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        secrets: Arc<Secrets>,
        hosts: Arc<HostLimits>,
        limits: bftp_ftp::Limits,
        check: Arc<dyn bftp_ftp::AddressCheck>,
        scheduler: Arc<crate::scheduler::Scheduler>,
        clock: Clock,
        metrics: Arc<Metrics>,
        alarm: Option<Alarm>,
        hold: Duration,
    ) -> Arc<Watcher> {
        let node = store
            .cluster()
            .map(|c| c.node())
            .unwrap_or_else(|| "local".into());
        let ended = scheduler.watch_bell();
        Arc::new(Watcher {
            bell: Arc::new(Notify::new()),
            ended,
            parked: Mutex::new(HashMap::new()),
            alarm,
            hold,
            store,
            secrets,
            hosts,
            limits,
            check,
            scheduler,
            clock,
            metrics,
            node,
            busy: Mutex::new(HashSet::new()),
        })
    }

    /// Polls due watches until `stop`; a poll under way at the stop is abandoned (nothing of
    /// it was written: its listing is taken again at the next start).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let tasks = tokio_util::task::TaskTracker::new();
        loop {
            let bell = self.bell.notified();
            tokio::pin!(bell);
            bell.as_mut().enable();
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let now = self.clock.now();
            let next = match self.store.call(|s| s.watches(None)).await {
                Ok(watches) => self.start_due(&watches, now, &tasks, &stop),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the watches; looking again soon");
                    now.saturating_add(Duration::from_secs(5))
                }
            };
            let until = next.min(now.saturating_add(IDLE_LOOK));
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.clock.sleep_until(until) => {}
                () = &mut bell => {}
                () = &mut ended => self.parked().clear(),
            }
        }
        tasks.close();
        tasks.wait().await;
    }

    /// Starts a poll of each due watch not already under way; returns when the next one is due.
    fn start_due(
        self: &Arc<Self>,
        watches: &[Watch],
        now: Timestamp,
        tasks: &tokio_util::task::TaskTracker,
        stop: &CancellationToken,
    ) -> Timestamp {
        let mut next = now.saturating_add(IDLE_LOOK);
        for w in watches.iter().filter(|w| !w.paused) {
            if !bftp_core::watch::poll_due(w.status.next_poll, w.settings.every_ms, now) {
                next = next.min(w.status.next_poll);
                continue;
            }
            if let Some(&until) = self.parked().get(&w.id) {
                if until > now {
                    next = next.min(until);
                    continue;
                }
            }
            if !self.busy().insert(w.id) {
                continue;
            }
            let (me, id, stop) = (self.clone(), w.id, stop.clone());
            tasks.spawn(async move {
                let span = tracing::info_span!("watch", watch = id.0);
                let _ = tracing::Instrument::instrument(
                    async {
                        tokio::select! {
                            () = stop.cancelled() => {}
                            parked = me.poll_one(id) => {
                                let mut p = me.parked();
                                match parked {
                                    true => p.insert(id, me.clock.now().saturating_add(PARKED)),
                                    false => p.remove(&id),
                                };
                            }
                        }
                    },
                    span,
                )
                .await;
                me.busy().remove(&id);
                // Its next poll time changed: look again.
                me.bell.notify_one();
            });
        }
        next
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashSet<WatchId>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, HashMap<WatchId, Timestamp>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Something changed (a watch added or resumed): look again now.
    pub fn notify(&self) {
        self.bell.notify_one();
    }
}

/// What sends a watch's late-arrival alarm.
pub struct Alarm {
    pub mailer: bftp_mail::Mailer,
    pub settings: crate::views::report::MailSettings,
}

impl Watcher {
    /// The late-arrival alarm of `w`, when one is due (`bftp_core::watch::expect`): mailed
    /// to the watch's notify addresses (else its owner). `true`: sent, so the period has its
    /// alarm.
    async fn alarm_if_due(
        &self,
        w: &Watch,
        status: &bftp_store::WatchStatus,
        now: Timestamp,
    ) -> bool {
        let Some(words) = &w.settings.expect else {
            return false;
        };
        let Ok(expect) = expect_of(words) else {
            return false;
        };
        let Some(deadline) = bftp_core::watch::expect::alarm_due(
            expect,
            w.created_at,
            status.last_delivery,
            status.last_alarm,
            now,
        ) else {
            return false;
        };
        // The `watch.late` event (issue 31), whether or not mail is on: its id is the
        // deadline's, so an alarm raised again for the same deadline is the same event.
        let event = bftp_store::NewEvent::of(
            bftp_core::event::watch_late(w.id.0, deadline),
            w.owner_uid,
            now,
        );
        if let Err(e) = self.store.call(move |s| s.put_event(event)).await {
            tracing::error!(error = %e, "cannot write the watch.late event; the alarm waits for the next poll");
            return false;
        }
        let Some(alarm) = &self.alarm else {
            tracing::warn!(expect = %words, "no file delivered in time, but [mail] is off: no alarm mailed");
            return true;
        };
        let last = status
            .last_delivery
            .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339());
        let subject = format!(
            "bftp watch {}: no new file by {}",
            w.id.0,
            deadline.to_rfc3339()
        );
        let text = format!(
            "Watch {id} ({route}) expects new files ({words}).\n\
             No file was delivered by {deadline}.\n\
             Last delivery: {last}. Polls so far: {polls}. Last error: {error}.\n\
             This alarm is sent once for this period.\n",
            id = w.id.0,
            route = route(w),
            deadline = deadline.to_rfc3339(),
            polls = status.polls,
            error = status.last_error.as_deref().unwrap_or("none"),
        );
        let sent = alarm.send(w, "alarm", deadline, &subject, &text, now).await;
        if sent {
            tracing::info!(deadline = %deadline.to_rfc3339(), "late-arrival alarm sent");
        }
        sent
    }

    /// The daily digest of `w`, when one is due (`bftp_core::watch::expect::digest_due`): what
    /// the watch did since the last digest. `true`: sent (or nobody to send it to: the day
    /// is done either way); `false`: not sent, tried again at the next poll.
    async fn digest_if_due(
        &self,
        w: &Watch,
        status: &bftp_store::WatchStatus,
        now: Timestamp,
    ) -> bool {
        if !w.settings.digest {
            return false;
        }
        let Some(midnight) =
            bftp_core::watch::expect::digest_due(w.created_at, status.last_digest, now)
        else {
            return false;
        };
        let Some(alarm) = &self.alarm else {
            return true;
        };
        let [polls, delivered, failed, repeats] = status.digest_base;
        let since = status.last_digest.unwrap_or(w.created_at).to_rfc3339();
        let subject = format!(
            "bftp watch {}: {} delivered, {} failed since {since}",
            w.id.0,
            status.delivered.saturating_sub(delivered),
            status.failed.saturating_sub(failed),
        );
        let jobs: Vec<String> = status.jobs.iter().map(|j| j.0.to_string()).collect();
        let text = format!(
            "Watch {id} ({route}), from {since} to {midnight}:\n\
             polls: {p}\nfiles delivered: {d}\nfiles failed: {f}\nfiles taken again (repeats): {r}\n\
             waiting, ignored, refused at the last poll: {waiting}, {ignored}, {refused}\n\
             last delivery: {last}\nlast error: {error}\nlast jobs: {jobs}\n",
            id = w.id.0,
            route = route(w),
            midnight = midnight.to_rfc3339(),
            p = status.polls.saturating_sub(polls),
            d = status.delivered.saturating_sub(delivered),
            f = status.failed.saturating_sub(failed),
            r = status.repeats.saturating_sub(repeats),
            waiting = status.waiting,
            ignored = status.ignored,
            refused = status.refused,
            last = status
                .last_delivery
                .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339()),
            error = status.last_error.as_deref().unwrap_or("none"),
            jobs = if jobs.is_empty() { "none".into() } else { jobs.join(", ") },
        );
        alarm
            .send(w, "digest", midnight, &subject, &text, now)
            .await
    }
}

impl Alarm {
    /// Mails a notice about `w` (`kind`: `alarm`, `digest`; `stamp` makes its Message-ID) to
    /// its notify addresses, else its owner. `false`: not sent, to be tried again at the
    /// next poll.
    async fn send(
        &self,
        w: &Watch,
        kind: &str,
        stamp: Timestamp,
        subject: &str,
        text: &str,
        now: Timestamp,
    ) -> bool {
        let to = match self
            .settings
            .recipients_of(&w.spec.notify, w.owner_uid, "watch")
        {
            // Webhooks only: the watch asked for no mail.
            Ok(to) if to.is_empty() => return true,
            Ok(to) => to,
            Err(e) => {
                tracing::warn!(error = %e, kind, "the watch's mail has nobody to go to");
                return true;
            }
        };
        let env = bftp_mail::Envelope {
            from: self.settings.from.clone(),
            to,
            message_id: format!(
                "<bftp.watch-{}.{kind}.{}@{}>",
                w.id.0, stamp.0, self.settings.id_domain
            ),
            date: now.to_system(),
        };
        let message = match bftp_mail::build_watch_notice(w.id.0, subject, text, &env) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, kind, "the watch's mail cannot be made");
                return true;
            }
        };
        match self.mailer.send(&message).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = ?e, kind, "the watch's mail was not sent; trying again at the next poll");
                false
            }
        }
    }
}

/// `SOURCE to DESTINATION` of a watch, without passwords.
fn route(w: &Watch) -> String {
    format!(
        "{} to {}",
        endpoint_url(&w.spec.source),
        w.spec
            .destination
            .as_ref()
            .map_or_else(String::new, endpoint_url)
    )
}

/// An endpoint's URL without its password.
fn endpoint_url(e: &bftp_store::SealedEndpoint) -> String {
    bftp_core::Endpoint {
        host: e.host.clone(),
        port: e.port,
        user: e.user.clone(),
        password: None,
        acct: None,
        path: e.path.clone(),
        tls: e.tls,
    }
    .display_url()
}

/// The wildcard of every file in a watched directory, as a watch's job names its source
/// (`out` and `out/` give `out/*`, the login directory `*`, the root `/*`).
pub fn files_of(dir: &str) -> String {
    let trimmed = dir.trim_end_matches('/');
    if trimmed.is_empty() && dir.starts_with('/') {
        "/*".into()
    } else {
        crate::lanes::paths::join_path(trimmed, "*")
    }
}

/// A watch's `expect` words: `daily HH:MM` (UTC) or an interval (humantime).
pub fn expect_of(words: &str) -> Result<bftp_core::watch::expect::Expect, String> {
    use bftp_core::watch::expect::{parse_daily, Expect};
    if let Some(e) = parse_daily(words) {
        return Ok(e);
    }
    match humantime::parse_duration(words.trim()) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(Expect::Every {
            ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        }),
        _ => Err(format!(
            "expect {words:?}: write \"daily HH:MM\" (UTC) or an interval such as \"6h\""
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn files_of_a_directory() {
        for (dir, files) in [
            ("out", "out/*"),
            ("out/", "out/*"),
            ("", "*"),
            ("/", "/*"),
            ("/srv/in//", "/srv/in/*"),
        ] {
            assert_eq!(super::files_of(dir), files, "{dir:?}");
        }
    }
}
