//! Watches (SPEC §15): a recurring transfer of what is new in a source directory.
//!
//! Routes:
//! - `POST /v1/watches` with [`WatchRequest`] → 201 [`WatchView`]; 400 for bad input, 403 for
//!   a host the policy forbids or a relay the daemon does not make.
//! - `GET /v1/watches?all=true` → [`WatchList`] (the caller's watches; `all` for admins).
//! - `GET /v1/watches/{id}` → [`WatchView`]; 404 also for another user's watch.
//! - `POST /v1/watches/{id}/pause`, `POST /v1/watches/{id}/resume` → [`WatchView`].
//! - `DELETE /v1/watches/{id}` → 204: the watch and its checkpoint are removed; the jobs it
//!   made stay.

use serde::{Deserialize, Serialize};

use crate::{EndpointView, SubmitRequest};

/// A new watch. `job` is the job every poll makes, as for `POST /v1/jobs`: its source path is
/// the watched directory, its destination path the directory files are copied into, and
/// `disposition` `move` deletes each source file once its copy is proven. `job.start` and
/// `job.recursive` are not used (see `recursive` here).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchRequest {
    pub job: SubmitRequest,
    /// How often the source is listed (humantime: `10m`, `1h`).
    pub every: String,
    /// The watch's files are those whose name matches one of these (default `*`: every
    /// name not starting with a dot).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
    /// The whole tree below the directory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
    /// How long a file must stay the same size and modify time, by bftpd's clock, before it
    /// is taken (humantime; default `30s`; `0s` takes it at first sight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<String>,
    /// Names never taken, besides the defaults (`*.part`, `*.tmp`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
    /// Without the default ignore patterns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_default_ignore: bool,
    /// A file is taken only once a file of this name exists in its directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_marker: Option<String>,
    /// A file `F` is taken only once `F` + this suffix exists (`.done`, `.ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_suffix: Option<String>,
    /// When a job of the watch mails its report: `failure` (default: a job with a file not
    /// copied), `always`, `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_on: Option<String>,
    /// The late-arrival alarm: `daily HH:MM` (UTC) or an interval (`6h`): one mail to the
    /// notify addresses when no new file was delivered by then, once per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// A daily digest: one mail a day (after midnight UTC) of what the watch did the day
    /// before, to the notify addresses (else the owner).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub digest: bool,
}

/// A ready marker as fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyView {
    /// `beside` (a file of `name` in the same directory) or `suffix` (the file's name
    /// followed by `name`).
    pub kind: String,
    pub name: String,
}

/// One file of the last poll that was not taken, and why, as fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchNoteView {
    /// The path below the watched directory (escaped for a refused name).
    pub path: String,
    /// `settling`, `no_marker`, `ignored`, `refused`, `skipped`.
    pub kind: String,
    /// `settling`: when the file may be taken (RFC 3339); `no_marker`: the marker awaited;
    /// `ignored`: the pattern or `marker`/`no_facts`; `refused`/`skipped`: the reason.
    pub detail: String,
}

/// A watch as shown back: never a password.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchView {
    pub id: u64,
    pub owner_uid: u32,
    /// `active` or `paused`.
    pub state: String,
    pub created_at: String,
    pub source: EndpointView,
    pub destination: EndpointView,
    /// humantime, e.g. `10m`.
    pub every: String,
    pub patterns: Vec<String>,
    pub recursive: bool,
    pub settle: String,
    pub ignore: Vec<String>,
    pub ready: Option<ReadyView>,
    /// `copy` or `move`.
    pub disposition: String,
    pub dest_command: String,
    pub notify: Vec<String>,
    pub notify_on: String,
    pub expect: Option<String>,
    /// Whether a daily digest is mailed.
    #[serde(default)]
    pub digest: bool,
    /// When the last digest was mailed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_digest_at: Option<String>,
    pub has_keyword: bool,
    /// The weakest proof each copy needs, if any.
    pub proof: Option<String>,
    /// The data path its jobs ask for; absent: the daemon's default.
    pub data_path_asked: Option<String>,
    pub polls: u64,
    pub last_poll_at: Option<String>,
    pub next_poll_at: Option<String>,
    /// Why the last poll could not list or make its job, if it could not.
    pub last_error: Option<String>,
    /// The job the last poll made, while it is not final.
    pub current_job: Option<u64>,
    /// The last jobs the watch made, newest last.
    pub jobs: Vec<u64>,
    /// Files copied and proven, over the watch's life.
    pub delivered: u64,
    /// Files that failed for good (reported, not tried again until their content changes).
    pub failed: u64,
    /// Files given to a job again after an earlier job ended without settling them.
    pub repeats: u64,
    /// As of the last poll.
    pub waiting: u32,
    pub ignored: u32,
    pub refused: u32,
    pub last_delivery_at: Option<String>,
    /// The files of the last poll that were not taken (at most a few dozen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<WatchNoteView>,
    /// With several nodes on one store: the node that polls the watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchList {
    pub watches: Vec<WatchView>,
}

/// Query of `GET /v1/watches`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchListQuery {
    /// Admins only: every user's watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
}
