//! The outbox entry of a job's report (moved out of `record/mod.rs`).

use super::*;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct OutboxV1 {
    pub v: u32,
    pub created: u64,
    pub tries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    pub state: OutboxStateV1,
    /// When it was delivered or given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<String>,
    pub updated: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OutboxStateV1 {
    Pending,
    Delivered,
    GaveUp,
}

impl OutboxV1 {
    pub(crate) fn new(now: Timestamp) -> OutboxV1 {
        OutboxV1 {
            v: RECORD_VERSION,
            created: now.0,
            tries: 0,
            next: Some(now.0),
            state: OutboxStateV1::Pending,
            done: None,
            err: None,
            updated: now.0,
        }
    }

    /// Records one delivery try at `now`: the one place both stores change a report's entry.
    /// A delivered or given-up report never changes again (`false`: nothing was changed); a
    /// postponed try counts no try.
    pub(crate) fn apply(&mut self, result: &DeliveryTry, now: Timestamp) -> bool {
        if self.state != OutboxStateV1::Pending {
            return false;
        }
        match result {
            DeliveryTry::Delivered => {
                self.tries += 1;
                self.state = OutboxStateV1::Delivered;
                self.done = Some(now.0);
                self.next = None;
            }
            DeliveryTry::Failed { error, next_try_at } => {
                self.tries += 1;
                self.err = Some(error.clone());
                self.next = Some(next_try_at.0);
            }
            DeliveryTry::GaveUp { error } => {
                self.tries += 1;
                self.err = Some(error.clone());
                self.state = OutboxStateV1::GaveUp;
                self.done = Some(now.0);
                self.next = None;
            }
            DeliveryTry::Postponed { next_try_at } => self.next = Some(next_try_at.0),
        }
        self.updated = now.0;
        true
    }

    pub(crate) fn to_api(&self, job: JobId) -> Result<OutboxEntry, StoreError> {
        let state = match (self.state, self.done) {
            (OutboxStateV1::Pending, _) => OutboxState::Pending,
            (OutboxStateV1::Delivered, Some(at)) => OutboxState::Delivered { at: Timestamp(at) },
            (OutboxStateV1::GaveUp, Some(at)) => OutboxState::GaveUp { at: Timestamp(at) },
            (_, None) => {
                return Err(StoreError::Corrupt {
                    what: "outbox",
                    key: hex(&crate::keys::job(job)),
                    reason: "a delivered or given-up report without its time".into(),
                })
            }
        };
        Ok(OutboxEntry {
            job,
            created_at: Timestamp(self.created),
            tries: self.tries,
            next_try_at: self.next.map(Timestamp),
            state,
            last_error: self.err.clone(),
            updated_at: Timestamp(self.updated),
        })
    }
}
