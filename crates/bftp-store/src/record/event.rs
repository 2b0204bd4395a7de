//! The record of an event of the log (`events.rs`) with its per-target deliveries.

use serde::{Deserialize, Serialize};

use bftp_core::event::EventKind;
use bftp_core::Timestamp;

use super::{OutboxStateV1, RECORD_VERSION};
use crate::error::StoreError;
use crate::events::{Event, EventDelivery, NewEvent};
use crate::types::{DeliveryTry, JobId, OutboxState, WatchId};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct EventV1 {
    pub v: u32,
    pub id: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub owner: u32,
    pub created: u64,
    /// When the deliverer looks at it next (ms); none once it is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<TargetV1>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct TargetV1 {
    pub url: String,
    pub state: OutboxStateV1,
    pub tries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<String>,
    pub updated: u64,
}

impl EventV1 {
    pub(crate) fn new(e: &NewEvent) -> EventV1 {
        EventV1 {
            v: RECORD_VERSION,
            id: e.id.clone(),
            kind: e.kind.as_str().to_string(),
            job: e.job.map(|j| j.0),
            watch: e.watch.map(|w| w.0),
            member: e.member,
            owner: e.owner_uid,
            created: e.created_at.0,
            due: Some(e.created_at.0),
            to: Vec::new(),
        }
    }

    /// Records one round of tries at `now`, one per target (a target not tried before joins
    /// the list); a target already delivered or given up stays as it is. The event is due
    /// again at the earliest next try of a target still pending, or never. Returns whether
    /// anything changed.
    pub(crate) fn apply(&mut self, tries: &[(String, DeliveryTry)], now: Timestamp) -> bool {
        let mut changed = false;
        for (url, result) in tries {
            let i = match self.to.iter().position(|t| &t.url == url) {
                Some(i) => i,
                None => {
                    self.to.push(TargetV1 {
                        url: url.clone(),
                        state: OutboxStateV1::Pending,
                        tries: 0,
                        next: None,
                        err: None,
                        updated: now.0,
                    });
                    self.to.len() - 1
                }
            };
            let t = &mut self.to[i];
            if t.state != OutboxStateV1::Pending {
                continue;
            }
            changed = true;
            t.updated = now.0;
            match result {
                DeliveryTry::Delivered => {
                    t.tries += 1;
                    t.state = OutboxStateV1::Delivered;
                    t.next = None;
                }
                DeliveryTry::Failed { error, next_try_at } => {
                    t.tries += 1;
                    t.err = Some(error.clone());
                    t.next = Some(next_try_at.0);
                }
                DeliveryTry::GaveUp { error } => {
                    t.tries += 1;
                    t.err = Some(error.clone());
                    t.state = OutboxStateV1::GaveUp;
                    t.next = None;
                }
                DeliveryTry::Postponed { next_try_at } => t.next = Some(next_try_at.0),
            }
        }
        let due = self
            .to
            .iter()
            .filter(|t| t.state == OutboxStateV1::Pending)
            .filter_map(|t| t.next)
            .min();
        if due != self.due {
            self.due = due;
            changed = true;
        }
        changed
    }

    pub(crate) fn to_api(&self, seq: u64) -> Result<Event, StoreError> {
        let kind = EventKind::parse(&self.kind).ok_or_else(|| StoreError::Corrupt {
            what: "event",
            key: super::hex(&seq.to_be_bytes()),
            reason: format!("unknown event type {:?}", self.kind),
        })?;
        Ok(Event {
            seq,
            id: self.id.clone(),
            kind,
            job: self.job.map(JobId),
            watch: self.watch.map(WatchId),
            member: self.member,
            owner_uid: self.owner,
            created_at: Timestamp(self.created),
            due: self.due.map(Timestamp),
            deliveries: self
                .to
                .iter()
                .map(|t| EventDelivery {
                    target: t.url.clone(),
                    state: match t.state {
                        OutboxStateV1::Pending => OutboxState::Pending,
                        OutboxStateV1::Delivered => OutboxState::Delivered {
                            at: Timestamp(t.updated),
                        },
                        OutboxStateV1::GaveUp => OutboxState::GaveUp {
                            at: Timestamp(t.updated),
                        },
                    },
                    tries: t.tries,
                    next_try_at: t.next.map(Timestamp),
                    last_error: t.err.clone(),
                    updated_at: Timestamp(t.updated),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev() -> EventV1 {
        EventV1::new(&NewEvent {
            id: "job-1-final".into(),
            kind: EventKind::JobFinished,
            job: Some(JobId(1)),
            watch: None,
            member: None,
            owner_uid: 5,
            created_at: Timestamp(100),
        })
    }

    #[test]
    fn a_round_of_tries_moves_each_target_and_the_event_is_due_at_the_earliest_pending() {
        let mut e = ev();
        assert_eq!(e.due, Some(100));
        let failed = |at| DeliveryTry::Failed {
            error: "HTTP 500".into(),
            next_try_at: Timestamp(at),
        };
        assert!(e.apply(
            &[
                ("https://a/".into(), DeliveryTry::Delivered),
                ("https://b/".into(), failed(300)),
                ("https://c/".into(), failed(200)),
            ],
            Timestamp(150),
        ));
        assert_eq!(e.due, Some(200));
        assert_eq!(
            e.to.iter().map(|t| (t.state, t.tries)).collect::<Vec<_>>(),
            [
                (OutboxStateV1::Delivered, 1),
                (OutboxStateV1::Pending, 1),
                (OutboxStateV1::Pending, 1)
            ]
        );
        // A late try of a delivered target changes nothing; c gives up.
        assert!(e.apply(
            &[
                ("https://a/".into(), failed(999)),
                (
                    "https://c/".into(),
                    DeliveryTry::GaveUp { error: "x".into() }
                ),
            ],
            Timestamp(250),
        ));
        assert_eq!(e.to[0].state, OutboxStateV1::Delivered);
        assert_eq!(e.to[2].state, OutboxStateV1::GaveUp);
        assert_eq!(e.due, Some(300));
        assert!(e.apply(
            &[("https://b/".into(), DeliveryTry::Delivered)],
            Timestamp(300)
        ));
        assert_eq!(e.due, None);
        assert!(!e.apply(
            &[("https://b/".into(), DeliveryTry::Delivered)],
            Timestamp(301)
        ));
        let api = e.to_api(9).unwrap();
        assert_eq!(api.deliveries[2].last_error.as_deref(), Some("x"));
        assert_eq!(api.deliveries[2].state.as_str(), "gave_up");
    }

    #[test]
    fn an_event_looked_at_without_targets_is_done() {
        let mut e = ev();
        assert!(e.apply(&[], Timestamp(120)));
        assert_eq!(e.due, None);
    }
}
