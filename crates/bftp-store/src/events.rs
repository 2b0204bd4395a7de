//! The event log (issue 31, RULES.md §16): what happened to jobs and watches, for webhooks
//! and `bftp events`. The API types, and what a write of the queue adds to the log (decided
//! by `bftp_core::event`, written by each store in the write's own transaction).

use bftp_core::event::{EventFact, EventKind};
use bftp_core::{JobState, MemberState, Timestamp};

use crate::record::{EventV1, JobV1};
use crate::types::{JobId, OutboxState, WatchId};

/// An event to put in the log ([`crate::JobStore::put_event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// Stable: a second event with the same id is not written.
    pub id: String,
    pub kind: EventKind,
    pub job: Option<JobId>,
    pub watch: Option<WatchId>,
    pub member: Option<u32>,
    /// The owner of the job or watch: who may read the event.
    pub owner_uid: u32,
    pub created_at: Timestamp,
}

impl NewEvent {
    pub fn of(fact: EventFact, owner_uid: u32, created_at: Timestamp) -> NewEvent {
        NewEvent {
            id: fact.id,
            kind: fact.kind,
            job: fact.job.map(JobId),
            watch: fact.watch.map(WatchId),
            member: fact.member,
            owner_uid,
            created_at,
        }
    }
}

/// An event of the log, with its deliveries so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its place in the log: increasing in the order events were written.
    pub seq: u64,
    pub id: String,
    pub kind: EventKind,
    pub job: Option<JobId>,
    pub watch: Option<WatchId>,
    pub member: Option<u32>,
    pub owner_uid: u32,
    pub created_at: Timestamp,
    /// When the deliverer looks at it next: `None` once every target it was sent to is
    /// delivered or given up (or it had no target when it was looked at).
    pub due: Option<Timestamp>,
    /// One per target it was sent to, in the order first tried.
    pub deliveries: Vec<EventDelivery>,
}

/// The delivery of one event to one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventDelivery {
    /// The target's address as given (the caller shows it without its query).
    pub target: String,
    pub state: OutboxState,
    pub tries: u32,
    pub next_try_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub updated_at: Timestamp,
}

/// The events a job's write adds when it makes the job final (`rec`, as written):
/// `bftp_core::event::events_of_final`, with `delivered` its members that succeeded.
pub(crate) fn final_events(id: JobId, rec: &JobV1, delivered: u64, now: Timestamp) -> Vec<EventV1> {
    let state: JobState = rec.state.to_api();
    bftp_core::event::events_of_final(id.0, rec.watch, &state, delivered)
        .into_iter()
        .map(|f| EventV1::new(&NewEvent::of(f, rec.owner, now)))
        .collect()
}

/// The event of a member's ledger write (`bftp_core::event::event_of_member_change`).
pub(crate) fn member_event(
    id: JobId,
    rec: &JobV1,
    index: u32,
    before: MemberState,
    after: MemberState,
    now: Timestamp,
) -> Option<EventV1> {
    bftp_core::event::event_of_member_change(id.0, rec.watch, index, before, after)
        .map(|f| EventV1::new(&NewEvent::of(f, rec.owner, now)))
}

/// Whether a member's change could make an event (asked before the job's record is read).
pub(crate) fn member_may_event(before: MemberState, after: MemberState) -> bool {
    bftp_core::event::event_of_member_change(0, None, 0, before, after).is_some()
}

/// How many of `states` succeeded: the files a watch's job delivered.
pub(crate) fn delivered(states: &[MemberState]) -> u64 {
    states
        .iter()
        .filter(|s| **s == MemberState::Succeeded)
        .count() as u64
}
