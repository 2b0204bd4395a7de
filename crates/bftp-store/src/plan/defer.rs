//! A job that waits at a start gate (RULES.md §16.4, §16.5): `JobStore::defer`.

use bftp_core::window::Wait;
use bftp_core::{InvalidTransition, JobEvent, JobState, Timestamp};

use super::Plan;
use crate::error::StoreError;
use crate::record::{JobV1, StateV1, WaitV1};
use crate::types::JobId;

/// The job waits until `until` for `wait` (`None`: no more, made due at `until`), without a
/// try counted: a queued job's next attempt moves (no backoff grows, no attempt starts); a
/// running one (its attempt stopped before a new file for a closed window) goes back to the
/// queue and that attempt is not counted (`attempts` back to the one before); a release
/// (`wait` `None`) of a running job is refused, as of a final one. A history
/// entry `waiting` says why when the reason or the host changed, not at each new probe.
pub(crate) fn defer(
    id: JobId,
    rec: JobV1,
    until: Timestamp,
    wait: Option<&Wait>,
    now: Timestamp,
) -> Result<Plan, StoreError> {
    let mut plan = Plan::of(rec);
    let old = plan.rec.state.to_api();
    let new_wait = wait.map(WaitV1::from_api);
    let same_reason = |a: &Option<WaitV1>| match (a, &new_wait) {
        (Some(a), Some(b)) => a.r == b.r && a.host == b.host,
        (None, None) => true,
        _ => false,
    };
    match old {
        JobState::Queued { .. } => {
            let changed = !same_reason(&plan.rec.wait);
            let new = JobState::Queued {
                next_attempt_at: until,
            };
            plan.rec.state = StateV1::from_api(&new);
            plan.rec.updated = now.0;
            if old != new {
                plan.moved = Some((old, new));
            }
            plan.rec.wait = new_wait;
            if let (true, Some(w)) = (changed, wait) {
                plan.note(now, "waiting", Some(&w.text()));
            }
        }
        // A release (`None`) is for queued jobs only: a running one is left to its attempt.
        JobState::Running { attempt, .. } if wait.is_some() => {
            plan.transition(
                id,
                JobEvent::Requeue {
                    next_attempt_at: until,
                },
                now,
            )?;
            plan.rec.attempts = attempt.saturating_sub(1);
            plan.rec.wait = new_wait;
            let why = wait.map(Wait::text).unwrap_or_default();
            let detail =
                format!("attempt {attempt} stopped before its next file and does not count; {why}");
            plan.note(now, "waiting", Some(&detail));
        }
        JobState::Running { .. } | JobState::Finished { .. } | JobState::Cancelled { .. } => {
            return Err(StoreError::InvalidTransition {
                job: id,
                source: InvalidTransition {
                    from: old.name(),
                    event: "defer",
                },
            })
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{rec, T};
    use bftp_core::window::WaitReason;
    use bftp_core::JobOutcome;

    fn wait(reason: WaitReason, host: &str, until: u64) -> Wait {
        Wait {
            reason,
            host: Some(host.into()),
            until: Timestamp(until),
        }
    }

    #[test]
    fn a_deferred_job_waits_without_a_try_and_says_why_once() {
        let queued = JobState::Queued { next_attempt_at: T };
        let down = wait(WaitReason::HostDown, "a", 500);
        let id = JobId(1);
        // Queued: the next attempt moves, the wait is kept, a history line.
        let p = defer(id, rec(queued, 2), Timestamp(500), Some(&down), T).unwrap();
        assert_eq!(
            p.state(),
            JobState::Queued {
                next_attempt_at: Timestamp(500)
            }
        );
        assert_eq!(p.rec.attempts, 0);
        assert_eq!(
            p.rec.wait.as_ref().and_then(WaitV1::to_api),
            Some(down.clone())
        );
        assert_eq!(p.history.len(), 1);
        assert_eq!(p.history[0].1.kind, "waiting");
        // The same reason again (the next probe): moved, no new line.
        let later = wait(WaitReason::HostDown, "a", 900);
        let p2 = defer(id, p.rec, Timestamp(900), Some(&later), T).unwrap();
        assert!(p2.history.is_empty());
        assert_eq!(p2.rec.wait.as_ref().and_then(WaitV1::to_api), Some(later));
        // Released: due at once, no wait.
        let p3 = defer(id, p2.rec, T, None, T).unwrap();
        assert_eq!(p3.state(), queued);
        assert!(p3.rec.wait.is_none() && p3.history.is_empty());
        // A start clears a wait.
        let p4 = defer(id, p3.rec, Timestamp(500), Some(&down), T).unwrap();
        let started =
            crate::plan::event(id, p4.rec, JobEvent::Start { attempt: 1 }, T, None).unwrap();
        assert!(started.rec.wait.is_none());
    }

    #[test]
    fn an_attempt_stopped_for_the_window_does_not_count() {
        let running = JobState::Running {
            attempt: 3,
            started_at: T,
        };
        let mut r = rec(running, 2);
        r.attempts = 3;
        let w = wait(WaitReason::Window, "a", 700);
        let p = defer(JobId(1), r, Timestamp(700), Some(&w), T).unwrap();
        assert_eq!(
            p.moved,
            Some((
                running,
                JobState::Queued {
                    next_attempt_at: Timestamp(700)
                }
            ))
        );
        assert_eq!(p.rec.attempts, 2);
        assert!(p.history[0]
            .1
            .detail
            .as_deref()
            .unwrap()
            .contains("does not count"));
        assert!(
            matches!(
                defer(JobId(1), rec(running, 2), T, None, T),
                Err(StoreError::InvalidTransition { .. })
            ),
            "a release leaves a running job to its attempt"
        );
        let done = JobState::Finished {
            outcome: JobOutcome::Succeeded,
            at: T,
        };
        assert!(matches!(
            defer(JobId(1), rec(done, 2), T, Some(&w), T),
            Err(StoreError::InvalidTransition { .. })
        ));
    }
}
