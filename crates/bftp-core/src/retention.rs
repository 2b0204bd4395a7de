//! Which jobs the store may forget: the one retention rule, pure.
//!
//! A job is removed only once nothing can still happen to it or be asked of it by bftpd: it is
//! final (finished or cancelled), its report is no longer waiting to be mailed, and it became
//! final longer ago than the operator keeps jobs. A queued or running job, or one whose report
//! is pending, is never removed, however old.

use std::time::Duration;

use crate::state::JobState;
use crate::time::Timestamp;

/// How long final jobs are kept (`[store] keep_finished`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Never removed.
    Forever,
    /// Removed once final for longer than this.
    For(Duration),
}

/// Where the job's report stands, as far as retention cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// No report exists (a job that became final before reports were kept; or not final).
    None,
    /// Still to be mailed: the job must stay, the postman reads it at each try.
    Pending,
    /// Delivered, or given up: it never changes again.
    Done,
}

/// Whether the store may remove the job now.
pub fn removable(state: &JobState, report: Report, now: Timestamp, keep: Keep) -> bool {
    let final_at = match state {
        JobState::Finished { at, .. } | JobState::Cancelled { at } => *at,
        JobState::Queued { .. } | JobState::Running { .. } => return false,
    };
    if report == Report::Pending {
        return false;
    }
    match keep {
        Keep::Forever => false,
        Keep::For(d) => final_at.saturating_add(d) <= now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::JobOutcome;

    #[test]
    fn the_rule_table() {
        let day = Duration::from_secs(86_400);
        let t = Timestamp(10 * 86_400_000);
        let (old, young) = (Timestamp(t.0 - 2 * 86_400_000), Timestamp(t.0 - 3_600_000));
        let fin = |at| JobState::Finished {
            outcome: JobOutcome::Succeeded,
            at,
        };
        let failed = |at| JobState::Finished {
            outcome: JobOutcome::Failed,
            at,
        };
        let cancelled = |at| JobState::Cancelled { at };
        let queued = JobState::Queued {
            next_attempt_at: old,
        };
        let running = JobState::Running {
            attempt: 3,
            started_at: old,
        };
        use Report::*;
        #[rustfmt::skip]
        let rows: &[(&str, JobState, Report, Keep, bool)] = &[
            ("finished long ago, report delivered",   fin(old),       Done,    Keep::For(day), true),
            ("failed long ago, report given up",      failed(old),    Done,    Keep::For(day), true),
            ("cancelled long ago, report done",       cancelled(old), Done,    Keep::For(day), true),
            ("final before reports existed",          fin(old),       None,    Keep::For(day), true),
            ("report still pending",                  fin(old),       Pending, Keep::For(day), false),
            ("cancelled, report pending",             cancelled(old), Pending, Keep::For(day), false),
            ("final too recently",                    fin(young),     Done,    Keep::For(day), false),
            ("final exactly keep ago",                fin(Timestamp(t.0 - 86_400_000)), Done, Keep::For(day), true),
            ("a millisecond short of keep",           fin(Timestamp(t.0 - 86_399_999)), Done, Keep::For(day), false),
            ("kept forever",                          fin(old),       Done,    Keep::Forever,  false),
            ("queued, however old",                   queued,         None,    Keep::For(Duration::ZERO), false),
            ("running, however old",                  running,        None,    Keep::For(Duration::ZERO), false),
            ("keep of zero, report done",             fin(t),         Done,    Keep::For(Duration::ZERO), true),
            ("final in the future (clock went back)", fin(Timestamp(t.0 + 1)), Done, Keep::For(Duration::ZERO), false),
        ];
        for (what, state, report, keep, want) in rows {
            assert_eq!(removable(state, *report, t, *keep), *want, "{what}");
        }
    }
}
