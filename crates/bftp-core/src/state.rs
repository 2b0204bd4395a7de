//! Job and member states and the one transition function (RULES.md §3).

use std::fmt;

use crate::time::Timestamp;

/// Where a job is in its life. Each state carries the data that only it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for its next attempt.
    Queued { next_attempt_at: Timestamp },
    /// An attempt is under way (1-based).
    Running { attempt: u32, started_at: Timestamp },
    /// The daemon stopped scheduling work; `outcome` says how it went.
    Finished { outcome: JobOutcome, at: Timestamp },
    /// Cancelled by its owner (or an admin) before it finished.
    Cancelled { at: Timestamp },
}

/// How a finished job went. "Finished" never implies success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobOutcome {
    Succeeded,
    Partial,
    Failed,
}

impl JobOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Succeeded => "succeeded",
            JobOutcome::Partial => "partial",
            JobOutcome::Failed => "failed",
        }
    }

    /// The outcome that the terminal states of all members add up to.
    pub fn from_members<'a>(members: impl IntoIterator<Item = &'a MemberState>) -> JobOutcome {
        let (mut ok, mut all) = (0usize, 0usize);
        for m in members {
            all += 1;
            if *m == MemberState::Succeeded {
                ok += 1;
            }
        }
        match ok {
            0 => JobOutcome::Failed,
            n if n == all => JobOutcome::Succeeded,
            _ => JobOutcome::Partial,
        }
    }
}

impl JobState {
    /// The short name used in the API, the store's indexes and the CLI.
    pub fn name(&self) -> &'static str {
        match self {
            JobState::Queued { .. } => "queued",
            JobState::Running { .. } => "running",
            JobState::Finished { .. } => "finished",
            JobState::Cancelled { .. } => "cancelled",
        }
    }

    pub fn is_final(&self) -> bool {
        matches!(self, JobState::Finished { .. } | JobState::Cancelled { .. })
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobState::Finished { outcome, .. } => write!(f, "finished ({})", outcome.as_str()),
            other => f.write_str(other.name()),
        }
    }
}

/// The state of one file of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    Pending,
    Succeeded,
    FailedPermanent,
    FailedRetriesExhausted,
    Cancelled,
    /// An unrepeatable effect (APPE, STOU, DELE) whose outcome could not be established.
    Uncertain,
    /// A name the source listed that bftpd will not put in a command (CR, LF or NUL in it,
    /// a `..` component, a path outside the listed directory). Recorded when the membership
    /// is frozen, never tried: the job cannot be `succeeded` while such a file exists.
    Refused,
}

impl MemberState {
    pub fn is_terminal(self) -> bool {
        self != MemberState::Pending
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Pending => "pending",
            MemberState::Succeeded => "succeeded",
            MemberState::FailedPermanent => "failed_permanent",
            MemberState::FailedRetriesExhausted => "failed_retries_exhausted",
            MemberState::Cancelled => "cancelled",
            MemberState::Uncertain => "uncertain",
            MemberState::Refused => "refused",
        }
    }
}

/// What can happen to a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEvent {
    /// The scheduler starts attempt number `attempt`.
    Start {
        attempt: u32,
    },
    /// The attempt ended with work left (a retry), or the daemon restarted under it.
    Requeue {
        next_attempt_at: Timestamp,
    },
    /// Every member is terminal.
    Finish {
        outcome: JobOutcome,
    },
    Cancel,
}

impl JobEvent {
    pub fn name(&self) -> &'static str {
        match self {
            JobEvent::Start { .. } => "start",
            JobEvent::Requeue { .. } => "requeue",
            JobEvent::Finish { .. } => "finish",
            JobEvent::Cancel => "cancel",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {from} job cannot {event}")]
pub struct InvalidTransition {
    pub from: &'static str,
    pub event: &'static str,
}

/// The one transition function: every state change of a job goes through here.
pub fn transition(
    state: JobState,
    event: JobEvent,
    now: Timestamp,
) -> Result<JobState, InvalidTransition> {
    use JobEvent as E;
    use JobState as S;
    let invalid = || InvalidTransition {
        from: state.name(),
        event: event.name(),
    };
    match (state, event) {
        (S::Queued { .. }, E::Start { attempt }) if attempt >= 1 => Ok(S::Running {
            attempt,
            started_at: now,
        }),
        (S::Running { .. }, E::Requeue { next_attempt_at }) => Ok(S::Queued { next_attempt_at }),
        // A queued job can finish without an attempt, e.g. when its deadline passed while the
        // daemon was down.
        (S::Running { .. } | S::Queued { .. }, E::Finish { outcome }) => {
            Ok(S::Finished { outcome, at: now })
        }
        (S::Queued { .. } | S::Running { .. }, E::Cancel) => Ok(S::Cancelled { at: now }),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timestamp = Timestamp(42);

    #[test]
    fn transition_table() {
        let q = JobState::Queued {
            next_attempt_at: Timestamp(7),
        };
        let r = JobState::Running {
            attempt: 2,
            started_at: Timestamp(1),
        };
        let f = JobState::Finished {
            outcome: JobOutcome::Partial,
            at: Timestamp(1),
        };
        let c = JobState::Cancelled { at: Timestamp(1) };
        let start = JobEvent::Start { attempt: 3 };
        let requeue = JobEvent::Requeue {
            next_attempt_at: Timestamp(99),
        };
        let finish = JobEvent::Finish {
            outcome: JobOutcome::Succeeded,
        };
        let cancel = JobEvent::Cancel;
        let cases: &[(JobState, JobEvent, Option<JobState>)] = &[
            (
                q,
                start,
                Some(JobState::Running {
                    attempt: 3,
                    started_at: T,
                }),
            ),
            (q, JobEvent::Start { attempt: 0 }, None),
            (q, requeue, None),
            (
                q,
                finish,
                Some(JobState::Finished {
                    outcome: JobOutcome::Succeeded,
                    at: T,
                }),
            ),
            (q, cancel, Some(JobState::Cancelled { at: T })),
            (r, start, None),
            (
                r,
                requeue,
                Some(JobState::Queued {
                    next_attempt_at: Timestamp(99),
                }),
            ),
            (
                r,
                finish,
                Some(JobState::Finished {
                    outcome: JobOutcome::Succeeded,
                    at: T,
                }),
            ),
            (r, cancel, Some(JobState::Cancelled { at: T })),
            (f, start, None),
            (f, requeue, None),
            (f, finish, None),
            (f, cancel, None),
            (c, start, None),
            (c, requeue, None),
            (c, finish, None),
            (c, cancel, None),
        ];
        for (from, ev, want) in cases {
            let got = transition(*from, *ev, T);
            match want {
                Some(s) => assert_eq!(got, Ok(*s), "{from:?} + {ev:?}"),
                None => {
                    let e = got.expect_err("must be invalid");
                    assert_eq!((e.from, e.event), (from.name(), ev.name()));
                }
            }
        }
    }

    #[test]
    fn outcome_from_members() {
        use MemberState::*;
        assert_eq!(
            JobOutcome::from_members(&[Succeeded, Succeeded]),
            JobOutcome::Succeeded
        );
        assert_eq!(
            JobOutcome::from_members(&[Succeeded, FailedPermanent]),
            JobOutcome::Partial
        );
        assert_eq!(
            JobOutcome::from_members(&[Uncertain, FailedRetriesExhausted]),
            JobOutcome::Failed
        );
        // A refused name is a file that was not copied.
        assert_eq!(
            JobOutcome::from_members(&[Succeeded, Succeeded, Refused]),
            JobOutcome::Partial
        );
        assert_eq!(JobOutcome::from_members(&[Refused]), JobOutcome::Failed);
        assert_eq!(JobOutcome::from_members(&[]), JobOutcome::Failed);
    }

    #[test]
    fn only_pending_is_not_terminal() {
        use MemberState::*;
        for m in [
            Succeeded,
            FailedPermanent,
            FailedRetriesExhausted,
            Cancelled,
            Uncertain,
            Refused,
        ] {
            assert!(m.is_terminal(), "{m:?}");
        }
        assert!(!Pending.is_terminal());
    }
}
