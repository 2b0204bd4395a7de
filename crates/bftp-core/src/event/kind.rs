//! Which changes of the ledger make an event, and the event's stable id.
//!
//! An event's id is decided by the fact alone, so that a write retried or an alarm raised
//! again names the same event (the store keeps one per id, and a receiver can drop a second
//! delivery by its id).

use crate::state::{JobState, MemberState};
use crate::time::Timestamp;

/// The schema name every event body carries.
pub const SCHEMA: &str = "bftp.event.v1";

/// What an event tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A job finished (whatever its outcome).
    JobFinished,
    /// A job was cancelled.
    JobCancelled,
    /// A member's ledger entry became failed permanently.
    MemberFailed,
    /// A watch's job ended with files delivered.
    WatchDelivered,
    /// A watch's expected file did not arrive by its deadline.
    WatchLate,
}

impl EventKind {
    pub const ALL: [EventKind; 5] = [
        EventKind::JobFinished,
        EventKind::JobCancelled,
        EventKind::MemberFailed,
        EventKind::WatchDelivered,
        EventKind::WatchLate,
    ];

    /// The name on the wire (`type` in the body, `Bftp-Event-Type`), and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::JobFinished => "job.finished",
            EventKind::JobCancelled => "job.cancelled",
            EventKind::MemberFailed => "member.failed",
            EventKind::WatchDelivered => "watch.delivered",
            EventKind::WatchLate => "watch.late",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the event is about a job (its body's data is the job's report).
    pub fn is_job(self) -> bool {
        matches!(self, EventKind::JobFinished | EventKind::JobCancelled)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event a change makes: its kind, its stable id, and what it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFact {
    pub kind: EventKind,
    pub id: String,
    pub job: Option<u64>,
    pub watch: Option<u64>,
    pub member: Option<u32>,
}

/// The events of a job that became final (`new`, the state written): `job.finished` or
/// `job.cancelled`, and for a job a watch's poll made (`watch`) that delivered at least one
/// file (`delivered`, its members that succeeded) also `watch.delivered`. None for a state
/// that is not final.
pub fn events_of_final(
    job: u64,
    watch: Option<u64>,
    new: &JobState,
    delivered: u64,
) -> Vec<EventFact> {
    let kind = match new {
        JobState::Finished { .. } => EventKind::JobFinished,
        JobState::Cancelled { .. } => EventKind::JobCancelled,
        JobState::Queued { .. } | JobState::Running { .. } => return Vec::new(),
    };
    let mut out = vec![EventFact {
        kind,
        id: format!("job-{job}-final"),
        job: Some(job),
        watch,
        member: None,
    }];
    if let (Some(w), true) = (watch, delivered > 0) {
        out.push(EventFact {
            kind: EventKind::WatchDelivered,
            id: format!("watch-{w}-job-{job}-delivered"),
            job: Some(job),
            watch: Some(w),
            member: None,
        });
    }
    out
}

/// The event of one member's ledger write from `old` to `new`: `member.failed` when the
/// write makes it failed permanently (not when it was already). Members settled in bulk at
/// the job's end make none: the job's own event tells.
pub fn event_of_member_change(
    job: u64,
    watch: Option<u64>,
    index: u32,
    old: MemberState,
    new: MemberState,
) -> Option<EventFact> {
    (new == MemberState::FailedPermanent && old != MemberState::FailedPermanent).then(|| {
        EventFact {
            kind: EventKind::MemberFailed,
            id: format!("job-{job}-member-{index}-failed"),
            job: Some(job),
            watch,
            member: Some(index),
        }
    })
}

/// A watch's late-arrival alarm for the deadline `deadline`: raised again for the same
/// deadline, it is the same event.
pub fn watch_late(watch: u64, deadline: Timestamp) -> EventFact {
    EventFact {
        kind: EventKind::WatchLate,
        id: format!("watch-{watch}-late-{}", deadline.0 / 1000),
        job: None,
        watch: Some(watch),
        member: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::JobOutcome;

    const T: Timestamp = Timestamp(1_700_000_000_123);

    #[test]
    fn wire_names_round_trip_and_are_the_designs() {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "job.finished",
                "job.cancelled",
                "member.failed",
                "watch.delivered",
                "watch.late"
            ]
        );
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(EventKind::parse("job.final"), None);
        assert_eq!(SCHEMA, "bftp.event.v1");
    }

    #[test]
    fn a_final_state_makes_the_jobs_event_and_a_watch_delivery() {
        let finished = JobState::Finished {
            outcome: JobOutcome::Partial,
            at: T,
        };
        let cancelled = JobState::Cancelled { at: T };
        let queued = JobState::Queued { next_attempt_at: T };
        let running = JobState::Running {
            attempt: 1,
            started_at: T,
        };
        // (state, watch, delivered, ids)
        #[rustfmt::skip]
        let table: &[(JobState, Option<u64>, u64, &[&str])] = &[
            (finished,  None,    0, &["job-7-final"]),
            (finished,  None,    3, &["job-7-final"]),
            (finished,  Some(2), 0, &["job-7-final"]),
            (finished,  Some(2), 1, &["job-7-final", "watch-2-job-7-delivered"]),
            (cancelled, None,    0, &["job-7-final"]),
            (cancelled, Some(2), 4, &["job-7-final", "watch-2-job-7-delivered"]),
            (queued,    Some(2), 4, &[]),
            (running,   None,    4, &[]),
        ];
        for (state, watch, delivered, ids) in table {
            let ev = events_of_final(7, *watch, state, *delivered);
            let got: Vec<&str> = ev.iter().map(|e| e.id.as_str()).collect();
            assert_eq!(got, *ids, "{state:?} {watch:?} {delivered}");
            if let Some(first) = ev.first() {
                let kind = if matches!(state, JobState::Cancelled { .. }) {
                    EventKind::JobCancelled
                } else {
                    EventKind::JobFinished
                };
                assert_eq!(
                    (first.kind, first.job, first.watch),
                    (kind, Some(7), *watch)
                );
            }
            if let Some(second) = ev.get(1) {
                assert_eq!(second.kind, EventKind::WatchDelivered);
                assert_eq!((second.job, second.watch), (Some(7), *watch));
            }
        }
    }

    #[test]
    fn only_a_write_that_makes_a_member_failed_permanently_is_an_event() {
        use MemberState::*;
        #[rustfmt::skip]
        let table: &[(MemberState, MemberState, bool)] = &[
            (Pending,                FailedPermanent,        true),
            (Uncertain,              FailedPermanent,        true),
            (FailedRetriesExhausted, FailedPermanent,        true),
            (FailedPermanent,        FailedPermanent,        false),
            (Pending,                FailedRetriesExhausted, false),
            (Pending,                Succeeded,              false),
            (Pending,                Cancelled,              false),
            (Pending,                Refused,                false),
            (FailedPermanent,        Succeeded,              false),
        ];
        for (old, new, event) in table {
            let e = event_of_member_change(7, Some(2), 11, *old, *new);
            assert_eq!(e.is_some(), *event, "{old:?} -> {new:?}");
            if let Some(e) = e {
                assert_eq!(e.id, "job-7-member-11-failed");
                assert_eq!(e.kind, EventKind::MemberFailed);
                assert_eq!((e.job, e.watch, e.member), (Some(7), Some(2), Some(11)));
            }
        }
    }

    #[test]
    fn a_late_alarm_is_named_by_its_deadline_in_seconds() {
        let a = watch_late(3, Timestamp(1_700_000_000_000));
        let b = watch_late(3, Timestamp(1_700_000_000_999));
        assert_eq!(a.id, "watch-3-late-1700000000");
        assert_eq!(a, b);
        assert_ne!(a.id, watch_late(3, Timestamp(1_700_000_001_000)).id);
        assert_eq!(
            (a.kind, a.job, a.watch),
            (EventKind::WatchLate, None, Some(3))
        );
    }
}
