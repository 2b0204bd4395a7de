//! The event log's views (issue 31, SPEC §16): an event with its webhook deliveries, as a
//! job's view, `GET /v1/events` and `bftp events` show it.

use serde::{Deserialize, Serialize};

/// An event of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLogView {
    /// Its place in the log (`GET /v1/events?after=`).
    pub seq: u64,
    /// Stable: the same fact is always the same id (`Bftp-Event-Id`).
    pub id: String,
    /// `job.finished`, `job.cancelled`, `member.failed`, `watch.delivered`, `watch.late`.
    #[serde(rename = "type")]
    pub kind: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub owner_uid: u32,
    /// One per webhook target it was sent to (none before its first try, or with no target).
    #[serde(default)]
    pub deliveries: Vec<DeliveryView>,
}

/// The delivery of one event to one webhook target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryView {
    /// The target as shown: `scheme://host[:port]/path`, never its query.
    pub target: String,
    /// `pending`, `delivered` or `gave_up`.
    pub state: String,
    pub tries: u32,
    /// While pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_try_at: Option<String>,
    /// When it was delivered or given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Why the last try failed (and, given up, why it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `GET /v1/events`: events after a sequence number, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLogPage {
    pub events: Vec<EventLogView>,
}

/// Query of `GET /v1/events`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events with a greater sequence number (default 0: from the start).
    #[serde(default)]
    pub after: u64,
    /// Every owner's events (admins only).
    #[serde(default)]
    pub all: bool,
    /// Keep the response open and send events as they come (server-sent events).
    #[serde(default)]
    pub follow: bool,
    /// At most this many (default and maximum 1000) per page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}
