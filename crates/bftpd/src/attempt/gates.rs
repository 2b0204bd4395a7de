//! The start gates in a job's life (RULES.md §16.4, §16.5): the scheduler's [`StartGate`]
//! over the hosts' windows and breakers (here, since `hosts` knows nothing of the
//! scheduler), the window watch of a running attempt, and what a failed login tells the
//! breaker.

use std::sync::{Arc, Mutex};

use bftp_core::window::{Failure, Now, Wait};
use bftp_core::Timestamp;
use bftp_ftp::{ConnectError, JobFailure, PairError, SessionError, Side};
use bftp_store::Job;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::hosts::gates::Gates;
use crate::scheduler::StartGate;

/// The scheduler's gate: a closed window, then a server that is down.
pub struct JobGates(pub Arc<Gates>);

impl StartGate for JobGates {
    fn wait_for(&self, job: &Job, now: Timestamp) -> Option<Wait> {
        let s = &job.spec;
        self.0.wait_for(
            job.id,
            (&s.source.host, s.source.port),
            s.destination.as_ref().map(|d| (d.host.as_str(), d.port)),
            job.attempts == 0,
            now,
        )
    }
}

/// An attempt's watch on its windows: when the window closes, no new file starts (the
/// attempt's own `drain`) and, with `hard`, the copy in flight is aborted as at the end of
/// a shutdown's grace (`abort` with `drain` set: no clean-up, resumed later where it can
/// be); the attempt then ends `AttemptEnd::Wait` until the window opens again.
pub(super) struct WindowWatch {
    /// Why the attempt stopped, once the window closed.
    pub stopped: Arc<Mutex<Option<Wait>>>,
    /// Ends the watch with the attempt.
    pub done: CancellationToken,
}

impl WindowWatch {
    /// `None`: no window applies, or it never closes. A window already closed stops the
    /// attempt before its first file.
    pub fn start(
        gates: &Arc<Gates>,
        job: &Job,
        clock: &Clock,
        drain: &CancellationToken,
        abort: &CancellationToken,
    ) -> Option<WindowWatch> {
        let (src, dst) = (
            job.spec.source.host.clone(),
            job.spec.destination.as_ref().map(|d| d.host.clone()),
        );
        let look = gates.windows.look(&src, dst.as_deref(), clock.now());
        let closes_at = match look.now {
            Now::Open { closes_at: None } => return None,
            Now::Open { closes_at: Some(t) } => t,
            Now::Closed { .. } => clock.now(),
        };
        let watch = WindowWatch {
            stopped: Arc::default(),
            done: CancellationToken::new(),
        };
        let (stopped, done) = (watch.stopped.clone(), watch.done.clone());
        let (gates, clock, drain, abort) =
            (gates.clone(), clock.clone(), drain.clone(), abort.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = done.cancelled() => return,
                () = clock.sleep_until(closes_at) => {}
            }
            let now = clock.now();
            let look = gates.windows.look(&src, dst.as_deref(), now);
            // The instant it closes: the wait is until it opens again.
            let wait = look.wait().or_else(|| {
                gates
                    .windows
                    .look(
                        &src,
                        dst.as_deref(),
                        now.saturating_add(std::time::Duration::from_millis(1)),
                    )
                    .wait()
            });
            let Some(wait) = wait else { return };
            tracing::info!(until = %wait.until, hard = look.hard, "the window closed: no new file starts");
            *stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some(wait);
            drain.cancel();
            if look.hard {
                abort.cancel();
            }
        });
        Some(watch)
    }

    pub fn stopped(&self) -> Option<Wait> {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What a failed pair opening tells the breaker: which side's server, and how it failed
/// (`None`: nothing about a server's being up, such as a refused address). `too_many`: the
/// learned limits' rule of a refusal for too many connections (`HostLimits::is_too_many`),
/// which says the server is busy, not down.
pub(super) fn failure_of(
    e: &PairError,
    too_many: impl Fn(&ConnectError) -> bool,
) -> Option<(Side, Failure)> {
    let JobFailure::Connect { side, error } = &e.failure else {
        return None;
    };
    let failure = match error {
        ConnectError::Session(
            SessionError::Dns { .. }
            | SessionError::Connect { .. }
            | SessionError::Io { .. }
            | SessionError::Timeout { .. }
            | SessionError::Malformed { .. }
            | SessionError::Closed { .. },
        ) => Failure::Unreachable,
        ConnectError::Refused { reply, .. } if e.is_transient() => {
            if too_many(error) {
                Failure::TooManyConnections
            } else {
                Failure::TransientReply
            }
        }
        _ => Failure::Permanent,
    };
    Some((*side, failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair whose source refused the login with `reply` ("CODE text"), transiently.
    fn refusal(reply: &str) -> PairError {
        use bftp_core::reply::{Disposition, ReplyCode, TransientKind};
        use bftp_ftp::parse::Reply;
        let (code, text) = reply.split_once(' ').expect("CODE text");
        let disposition = Disposition::Transient(TransientKind::Reconnect);
        PairError {
            failure: JobFailure::Connect {
                side: Side::Source,
                error: ConnectError::Refused {
                    host: "ftp.example.org".into(),
                    command: "greeting",
                    reply: Reply::new(
                        ReplyCode::new(code.parse().expect("a code")).expect("a reply code"),
                        vec![text.into()],
                    ),
                    disposition,
                },
            },
            disposition,
            transcript: Default::default(),
        }
    }

    #[test]
    fn a_busy_server_is_not_a_down_one() {
        let hosts = crate::hosts::HostLimits::new(1, 4);
        for (reply, busy) in [
            ("421 Too many connections (2) from this IP", true),
            ("530 Sorry, the maximum number of clients (5) from your host are already connected.", true),
            ("421 There are too many connected users, please try later.", true),
            ("421 Service not available, closing control connection", false),
            ("421 Timeout.", false),
        ] {
            let e = refusal(reply);
            let (side, failure) = failure_of(&e, |c| hosts.is_too_many(c)).expect("a login failure");
            assert_eq!(side, Side::Source, "{reply}");
            let want = if busy { Failure::TooManyConnections } else { Failure::TransientReply };
            assert_eq!(failure, want, "{reply}");
        }
    }
}
