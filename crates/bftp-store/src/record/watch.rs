//! The records of watches (RULES.md §15): the watch itself (its template spec, settings and
//! status) and one record per checkpoint entry (`bftp_core::watch::Entry`), keyed by the
//! watch and the path.

use serde::{Deserialize, Serialize};

use bftp_core::watch::{Entry, Facts, Outcome, Ready};
use bftp_core::Timestamp;

use super::{hex, keyword_to_api, spec_to_api, SpecV1, RECORD_VERSION};
use crate::error::StoreError;
use crate::types::{JobId, NewWatch, Watch, WatchId, WatchSettings, WatchStatus};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct WatchV1 {
    pub v: u32,
    pub owner: u32,
    /// The template of the jobs its polls make.
    pub spec: SpecV1,
    /// The keyword hash, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kw: Option<String>,
    pub created: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    pub settings: WatchSettingsV1,
    pub status: WatchStatusV1,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct WatchSettingsV1 {
    pub every_ms: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
    pub settle_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyV1>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
    pub notify_on: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub digest: bool,
}

/// A ready marker: `{"beside": "READY"}` or `{"suffix": ".done"}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReadyV1 {
    Beside(String),
    Suffix(String),
}

/// Times in ms since the epoch; job ids as numbers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub(crate) struct WatchStatusV1 {
    #[serde(default)]
    pub polls: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_poll: Option<u64>,
    pub next_poll: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_job: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<u64>,
    #[serde(default)]
    pub delivered: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub repeats: u64,
    #[serde(default)]
    pub waiting: u32,
    #[serde(default)]
    pub ignored: u32,
    #[serde(default)]
    pub refused: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_alarm: Option<u64>,
    /// `[path, kind, detail]` of each file of the last poll not taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<[String; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_digest: Option<u64>,
    /// Polls, delivered, failed, repeats at the last digest.
    #[serde(default, skip_serializing_if = "is_zeros")]
    pub digest_base: [u64; 4],
}

fn is_zeros(a: &[u64; 4]) -> bool {
    a.iter().all(|n| *n == 0)
}

/// One checkpoint entry: the facts last seen at the path, since when, and what became of
/// that content.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct WatchFileV1 {
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The server's `YYYYMMDDHHMMSS[.sss]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<String>,
    /// MLSD's `unique` fact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<String>,
    pub since: u64,
    /// `delivered`, `failed`, `uncertain`; absent: not settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OutcomeWordV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(default)]
    pub taken: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OutcomeWordV1 {
    Delivered,
    Failed,
    Uncertain,
}

impl WatchFileV1 {
    pub(crate) fn from_core(e: &Entry) -> WatchFileV1 {
        WatchFileV1 {
            v: RECORD_VERSION,
            size: e.facts.size,
            mtime: e.facts.modified.clone(),
            unique: e.facts.unique.clone(),
            since: e.since.0,
            outcome: e.outcome.map(|o| match o {
                Outcome::Delivered => OutcomeWordV1::Delivered,
                Outcome::Failed => OutcomeWordV1::Failed,
                Outcome::Uncertain => OutcomeWordV1::Uncertain,
            }),
            hint: e.hint.clone(),
            taken: e.taken,
        }
    }

    pub(crate) fn to_core(&self) -> Entry {
        Entry {
            facts: Facts {
                size: self.size,
                modified: self.mtime.clone(),
                unique: self.unique.clone(),
            },
            since: Timestamp(self.since),
            outcome: self.outcome.map(|o| match o {
                OutcomeWordV1::Delivered => Outcome::Delivered,
                OutcomeWordV1::Failed => Outcome::Failed,
                OutcomeWordV1::Uncertain => Outcome::Uncertain,
            }),
            hint: self.hint.clone(),
            taken: self.taken,
        }
    }
}

impl WatchStatusV1 {
    pub(crate) fn from_api(s: &WatchStatus) -> WatchStatusV1 {
        WatchStatusV1 {
            polls: s.polls,
            last_poll: s.last_poll.map(|t| t.0),
            next_poll: s.next_poll.0,
            last_error: s.last_error.clone(),
            current_job: s.current_job.map(|j| j.0),
            jobs: s.jobs.iter().map(|j| j.0).collect(),
            delivered: s.delivered,
            failed: s.failed,
            repeats: s.repeats,
            waiting: s.waiting,
            ignored: s.ignored,
            refused: s.refused,
            last_delivery: s.last_delivery.map(|t| t.0),
            last_alarm: s.last_alarm.map(|t| t.0),
            notes: s
                .notes
                .iter()
                .map(|n| [n.path.clone(), n.kind.clone(), n.detail.clone()])
                .collect(),
            last_digest: s.last_digest.map(|t| t.0),
            digest_base: s.digest_base,
        }
    }

    fn to_api(&self) -> WatchStatus {
        WatchStatus {
            polls: self.polls,
            last_poll: self.last_poll.map(Timestamp),
            next_poll: Timestamp(self.next_poll),
            last_error: self.last_error.clone(),
            current_job: self.current_job.map(JobId),
            jobs: self.jobs.iter().copied().map(JobId).collect(),
            delivered: self.delivered,
            failed: self.failed,
            repeats: self.repeats,
            waiting: self.waiting,
            ignored: self.ignored,
            refused: self.refused,
            last_delivery: self.last_delivery.map(Timestamp),
            last_alarm: self.last_alarm.map(Timestamp),
            notes: self
                .notes
                .iter()
                .map(|[path, kind, detail]| crate::types::WatchNote {
                    path: path.clone(),
                    kind: kind.clone(),
                    detail: detail.clone(),
                })
                .collect(),
            last_digest: self.last_digest.map(Timestamp),
            digest_base: self.digest_base,
        }
    }
}

impl WatchSettingsV1 {
    fn from_api(s: &WatchSettings) -> WatchSettingsV1 {
        WatchSettingsV1 {
            every_ms: s.every_ms,
            patterns: s.patterns.clone(),
            ignore: s.ignore.clone(),
            settle_ms: s.settle_ms,
            ready: s.ready.as_ref().map(|r| match r {
                Ready::Beside(n) => ReadyV1::Beside(n.clone()),
                Ready::Suffix(x) => ReadyV1::Suffix(x.clone()),
            }),
            recursive: s.recursive,
            notify_on: s.notify_on.clone(),
            expect: s.expect.clone(),
            digest: s.digest,
        }
    }

    fn to_api(&self) -> WatchSettings {
        WatchSettings {
            every_ms: self.every_ms,
            patterns: self.patterns.clone(),
            ignore: self.ignore.clone(),
            settle_ms: self.settle_ms,
            ready: self.ready.as_ref().map(|r| match r {
                ReadyV1::Beside(n) => Ready::Beside(n.clone()),
                ReadyV1::Suffix(x) => Ready::Suffix(x.clone()),
            }),
            recursive: self.recursive,
            notify_on: self.notify_on.clone(),
            expect: self.expect.clone(),
            digest: self.digest,
        }
    }
}

impl WatchV1 {
    /// A new watch: unpaused, its first poll due when it is created.
    pub(crate) fn new(w: &NewWatch) -> WatchV1 {
        WatchV1 {
            v: RECORD_VERSION,
            owner: w.owner_uid,
            spec: SpecV1::from_api(&w.spec),
            kw: w.keyword_hash.map(|h| hex(&h.0)),
            created: w.created_at.0,
            paused: false,
            settings: WatchSettingsV1::from_api(&w.settings),
            status: WatchStatusV1 {
                next_poll: w.created_at.0,
                ..WatchStatusV1::default()
            },
        }
    }

    pub(crate) fn to_api(&self, id: WatchId) -> Result<Watch, StoreError> {
        let key = crate::keys::watch(id);
        let bad = |reason: String| StoreError::Corrupt {
            what: "watch",
            key: hex(&key),
            reason,
        };
        Ok(Watch {
            id,
            owner_uid: self.owner,
            spec: spec_to_api(&self.spec, &bad)?,
            settings: self.settings.to_api(),
            keyword_hash: keyword_to_api(&self.kw, &bad)?,
            created_at: Timestamp(self.created),
            paused: self.paused,
            status: self.status.to_api(),
        })
    }
}
