//! Events for other programs (RULES.md §16, issue 31): what happened to a job or a watch,
//! written to the store's event log in the transaction of the change (`kind.rs`), and the
//! rule of a webhook delivery's tries (`delivery.rs`).

mod delivery;
mod kind;

pub use delivery::{after_try, Backoff, TryOutcome, Verdict};
pub use kind::{event_of_member_change, events_of_final, watch_late, EventFact, EventKind, SCHEMA};
