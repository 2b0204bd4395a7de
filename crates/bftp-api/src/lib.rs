//! The HTTP/JSON contract between `bftp` (and `curl --unix-socket`) and `bftpd`.
//!
//! These are wire types, separate from the core model and the store's records, so that
//! either side can change without breaking the other. Every field name here is part of the
//! stable `--json` output.
//!
//! Routes (all JSON; errors are [`ErrorBody`] with an HTTP status):
//! - `POST /v1/jobs` with [`SubmitRequest`]; header `Idempotency-Key`. 201 [`SubmitResponse`]
//!   for a new job, 200 for the same key and parameters again, 409 for the same key with other
//!   parameters, 400 for bad input, 403 for a host the policy forbids or a relay the daemon
//!   does not make (`[ftp] relay = false`).
//! - `GET /v1/jobs?keyword=K&state=S&all=true` → [`JobList`] (the caller's jobs; `all` for admins).
//! - `GET /v1/jobs/{id}` → [`JobView`]; 404 also for another user's job.
//! - `POST /v1/jobs/{id}/cancel` → [`JobView`]; 409 if it already finished.
//! - `POST /v1/verify` with [`SubmitRequest`] → [`VerifyResponse`]: the daemon logs in to both
//!   servers and checks the job without transferring (RULES.md §7).
//! - `POST /v1/transfer` with [`SubmitRequest`] → a stream of [`TransferEvent`]s, one JSON
//!   object per line (`application/x-ndjson`): a foreground copy without the queue. Closing
//!   the connection aborts it.
//! - `POST /v1/watches`, `GET /v1/watches`, `GET /v1/watches/{id}`, `POST
//!   /v1/watches/{id}/pause|resume`, `DELETE /v1/watches/{id}`: watches, recurring transfers
//!   of what is new in a directory (see [`WatchRequest`], [`WatchView`]).
//! - `GET /v1/events?after=SEQ&all=true` → [`EventLogPage`]: the event log (webhook events
//!   with their deliveries), the caller's own (`all` for admins); with `follow=true`
//!   server-sent events (`text/event-stream`: `id` the sequence number, `event` the type,
//!   `data` an [`EventLogView`]) that go on as events are written.
//! - `GET /v1/health` → [`Health`].
//! - `GET /metrics` → Prometheus text (exposition format 0.0.4), not JSON: counters and
//!   gauges without job data (README, "Metrics and logs").
//!
//! Stability: within `/v1` fields are only added; removing or renaming one needs `/v2`.

use serde::{Deserialize, Serialize};

mod events;
pub use events::{DeliveryView, EventLogPage, EventLogView, EventsQuery};
mod hosts;
pub use hosts::{BreakerView, HostList, HostView, LearnedLimitView};
mod watch;
pub use watch::{ReadyView, WatchList, WatchListQuery, WatchNoteView, WatchRequest, WatchView};

/// The header carrying the request key (RULES.md §4.5).
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
pub const API_PREFIX: &str = "/v1";

/// One side of a transfer as the user gives it. Its `Debug` masks the password and ACCT.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Absent means `anonymous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acct: Option<String>,
    /// Relative to the login directory unless it starts with `/`.
    pub path: String,
    /// TLS on the control connection: `required`, `preferred` or `off`; absent means the
    /// daemon's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// TLS on data connections with this server (PROT P), same words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_tls: Option<String>,
    /// Implicit FTPS (an `ftps://` URL): TLS from the first byte.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implicit_tls: bool,
}

impl std::fmt::Debug for EndpointSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mask = |o: &Option<String>| o.as_ref().map(|_| "****");
        f.debug_struct("EndpointSpec")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &mask(&self.password))
            .field("acct", &mask(&self.acct))
            .field("path", &self.path)
            .field("tls", &self.tls)
            .field("data_tls", &self.data_tls)
            .field("implicit_tls", &self.implicit_tls)
            .finish()
    }
}

/// Retry policy overrides; absent fields take the daemon's defaults. Durations in humantime
/// syntax (`10m`, `4h`, `2days`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub source: EndpointSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<EndpointSpec>,
    /// `copy` (default), `move`, `delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposition: Option<String>,
    /// `replace` (default), `append`, `unique`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_command: Option<String>,
    /// `A`, `E`, `I` (default), `L n`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_type: Option<String>,
    /// `S` (default), `B`, `C`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `F` (default), `R`, `P`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structure: Option<String>,
    /// RFC 3339 time or relative (`in 2h`); absent means now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    #[serde(default)]
    pub retry: RetrySpec,
    #[serde(default)]
    pub notify: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyword: Option<String>,
    /// The weakest proof of each copy the job accepts: `hash`, `size` or `replies`; absent,
    /// whatever the pair of servers can give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// The source path is a directory: copy its whole tree, each file by its path below it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
    /// How the file bytes travel: `fxp` (server to server only), `relay` (always through
    /// bftpd), `auto` (server to server first, through bftpd when the pair refuses it);
    /// absent: the daemon's default. Absent, it is not part of the request's fingerprint, so
    /// a request key sent before data paths existed still matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// False when an earlier submit with the same request key made this job.
    pub created: bool,
    pub job: JobView,
}

/// An endpoint as shown back: never a password.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub path: String,
    pub has_password: bool,
    pub has_acct: bool,
    /// `ftp://user@host:port/path`, without the password.
    pub url: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryView {
    pub first_interval: String,
    pub factor: f64,
    pub cap: String,
    pub max_attempts: u32,
    pub deadline: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplyView {
    pub code: Option<u16>,
    pub text: String,
}

/// One file of a job: its ledger line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemberView {
    pub index: u32,
    pub name: String,
    /// `pending`, `succeeded`, `failed_permanent`, `failed_retries_exhausted`, `cancelled`,
    /// `uncertain`, `refused` (a listed name bftpd will not send in a command: CR, LF, NUL,
    /// `..`, a path outside the listed directory; `name` is then shown escaped, `\r`,
    /// `\n`, `\0`, `\xNN`, and `detail` says why).
    pub state: String,
    pub attempts: u32,
    pub size: Option<u64>,
    pub bytes: Option<u64>,
    pub source_reply: Option<ReplyView>,
    pub dest_reply: Option<ReplyView>,
    pub detail: Option<String>,
    pub updated_at: String,
    /// What proved the copy of a succeeded file: `hash` (both servers' digests of one
    /// algorithm agree), `size` (SIZE agrees) or `replies` (both final replies only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// While this file is being copied by a running attempt: how far it is. Kept in the
    /// daemon's memory only, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
    /// The TLS of this file's last copy: each side's control connection (version, how the
    /// certificate was checked), and whether the data moved encrypted, with the TLS client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsView>,
    /// How the bytes of this file's last copy travelled: third party, or through bftpd and
    /// why. Absent for a file no copy of which sent a data command (and in members recorded
    /// before routes were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteView>,
}

/// How a copy's bytes travelled (RULES.md §14), as fields (see [`RouteView::describe`] for
/// the line people read). `reason`, `detail`, `bytes` and `sha256` are `null` where they do
/// not apply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteView {
    /// `fxp` (third party, PASV to the source), `fxp_roles_swapped` (third party, PASV to
    /// the destination) or `relay` (through bftpd).
    pub path: String,
    /// Why a relay: `asked` (the job's data path), `refused` (the servers refused the third
    /// party in both role orders), `remembered` (the pair was remembered as refusing it),
    /// `data_tls` (the data TLS policy could be met on two legs but not between the servers).
    #[serde(default)]
    pub reason: Option<String>,
    /// The reply that refused the third party (`refused`, `remembered`), or why the data TLS
    /// policy needed a relay (`data_tls`).
    #[serde(default)]
    pub detail: Option<String>,
    /// `remembered`: when the pair's refusal was seen (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<String>,
    /// A relay: the bytes bftpd counted as it moved them.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// A relay: the SHA-256 (lower-case hex) bftpd computed over the stream, when it did.
    #[serde(default)]
    pub sha256: Option<String>,
}

impl RouteView {
    /// The line people read, made from the fields: `fxp`, `fxp roles swapped`, `relay
    /// (refused: 425 Can't open data connection); 4096 bytes relayed, SHA-256 ab12…`.
    pub fn describe(&self) -> String {
        let path = match self.path.as_str() {
            "fxp_roles_swapped" => "fxp roles swapped",
            other => other,
        };
        let reason = self.reason.as_deref().map(|r| match r {
            "data_tls" => "data TLS",
            other => other,
        });
        let mut out = match (reason, &self.detail, &self.seen) {
            (None, _, _) => path.to_owned(),
            (Some(r), None, _) => format!("{path} ({r})"),
            (Some(r), Some(d), None) => format!("{path} ({r}: {d})"),
            (Some(r), Some(d), Some(seen)) => format!("{path} ({r}: {d}, seen {seen})"),
        };
        let evidence: Vec<String> = [
            self.bytes.map(|b| format!("{b} bytes relayed")),
            self.sha256.as_ref().map(|h| format!("SHA-256 {h}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !evidence.is_empty() {
            out.push_str("; ");
            out.push_str(&evidence.join(", "));
        }
        out
    }
}

/// The TLS of a copy, as fields (see [`TlsView::describe`] for the sentence people read).
/// A side absent neither used nor asked for TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ControlTlsView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<ControlTlsView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataTlsView>,
}

/// One control connection's TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlTlsView {
    /// `tls`, or `clear` (the policy asked for TLS and the server did not accept AUTH TLS).
    pub state: String,
    /// `TLS 1.3`, `TLS 1.2` (with `tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How the server's certificate was checked (with `tls`): `system_roots`, `ca_file`,
    /// `pinned` or `insecure` (not checked, an explicit per-host setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    /// The CA file, for `ca_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The pinned certificate's SHA-256 (hex), for `pinned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_sha256: Option<String>,
}

/// What a copy's data connection got.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataTlsView {
    /// Whether the bytes moved through TLS between the servers.
    pub encrypted: bool,
    /// The server that was the TLS client (`source` or `destination`), when encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client: Option<String>,
    /// Why the data moved in clear although a policy asked for TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_reason: Option<String>,
}

impl TlsView {
    /// The one sentence people read, made from the fields: `source control TLS 1.3 (CA file
    /// /etc/ca.pem); destination control in clear (no AUTH TLS); data encrypted (TLS
    /// client: destination)`.
    pub fn describe(&self) -> String {
        let control = |side: &str, c: &ControlTlsView| {
            if c.state != "tls" {
                return format!("{side} control in clear (no AUTH TLS)");
            }
            let check = match c.certificate.as_deref() {
                Some("system_roots") => "system roots".to_owned(),
                Some("ca_file") => format!("CA file {}", c.ca_file.as_deref().unwrap_or("?")),
                Some("pinned") => format!(
                    "pinned SHA-256 {}",
                    c.pinned_sha256.as_deref().unwrap_or("?")
                ),
                Some("insecure") => "INSECURE: certificate not checked".to_owned(),
                Some(other) => other.to_owned(),
                None => "certificate check unknown".to_owned(),
            };
            format!(
                "{side} control {} ({check})",
                c.version.as_deref().unwrap_or("TLS")
            )
        };
        let data = |d: &DataTlsView| match (d.encrypted, &d.tls_client, &d.clear_reason) {
            (true, Some(side), _) => format!("data encrypted (TLS client: {side})"),
            (true, None, _) => "data encrypted".to_owned(),
            (false, _, Some(why)) => format!("data in clear: {why}"),
            (false, _, None) => "data in clear".to_owned(),
        };
        [
            self.source.as_ref().map(|c| control("source", c)),
            self.destination.as_ref().map(|c| control("destination", c)),
            self.data.as_ref().map(data),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// A file being copied right now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressView {
    /// `preparing`, `transferring`, `checking`, `finishing` (after the copy: a `move`'s
    /// DELE of the source, the ledger entry).
    pub phase: String,
    /// When this file's copy began (RFC 3339).
    pub started_at: String,
    /// Seconds since `started_at`, at the time of the answer.
    pub elapsed_seconds: f64,
    /// When bytes began to flow between the servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transferring_since: Option<String>,
    /// Bytes on the destination so far, as its SIZE answered on a separate connection;
    /// absent where no such look was possible (a STOU name not known yet, no free
    /// connection slot, SIZE refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_so_far: Option<u64>,
    /// When `bytes_so_far` was seen (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_seen_at: Option<String>,
    /// Bytes per second since bytes began to flow, from `bytes_so_far`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_second: Option<f64>,
}

/// How many of a job's files are in each state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCounts {
    pub files: u32,
    pub pending: u32,
    pub succeeded: u32,
    /// `failed_permanent` and `failed_retries_exhausted`.
    pub failed: u32,
    pub cancelled: u32,
    pub uncertain: u32,
    pub refused: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    pub at: String,
    pub event: String,
    pub detail: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    pub owner_uid: u32,
    /// `queued`, `running`, `finished`, `cancelled`.
    pub state: String,
    /// For finished jobs: `succeeded`, `partial`, `failed`; `cancelled` for cancelled ones.
    pub outcome: Option<String>,
    pub next_attempt_at: Option<String>,
    /// The attempt under way, for a running job.
    pub attempt: Option<u32>,
    /// Attempts started so far.
    pub attempts: u32,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    pub source: EndpointView,
    pub destination: Option<EndpointView>,
    pub disposition: String,
    pub dest_command: String,
    pub transfer_type: String,
    pub mode: String,
    pub structure: String,
    pub start_at: String,
    pub retry: RetryView,
    pub notify: Vec<String>,
    /// The keyword itself is stored only as a keyed hash and cannot be shown.
    pub has_keyword: bool,
    /// The weakest proof the job accepts (`hash`, `size`), if it requires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// A recursive job: the source is a directory tree. Absent: not recursive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
    /// The data path the job runs with under the daemon's configuration now: `fxp`, `relay`
    /// or `auto` (what it asked for, else the daemon's default; `fxp` where the daemon
    /// forbids relays). Absent where the daemon's configuration is not at hand (a mailed
    /// report's view).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_path: String,
    /// The data path the job asked for (`fxp`, `relay`, `auto`); absent: none, the job
    /// takes the daemon's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_path_asked: Option<String>,
    pub members: Vec<MemberView>,
    /// The members counted by state.
    #[serde(default)]
    pub counts: MemberCounts,
    pub history: Vec<EventView>,
    /// The mailed report, once the job is final (RULES.md §4.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportView>,
    /// With several nodes on one store: the node running the job (whose lease it is under).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The watch whose poll made this job; absent for every other job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<u64>,
    /// The job's events (issue 31) with their webhook deliveries; absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventLogView>,
    /// A queued job waiting at a start gate (RULES.md §16.4, §16.5): why, and until when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingView>,
}

/// Why a queued job waits at a start gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingView {
    /// `window` (a time window of its hosts is closed) or `host_down` (a server is down
    /// and probed; the job starts as soon as a probe reaches it).
    pub reason: String,
    /// The server (`host:port`) or the window's hosts, when one is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// RFC 3339: the window's opening, or the next probe.
    pub until: String,
    /// The same in words: "waiting for the window, opens at ...".
    pub text: String,
}

/// Where a final job's report stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportView {
    /// `pending`, `delivered`, `gave_up`, or `disabled` (pending, but mail is off in bftpd's
    /// config).
    pub state: String,
    pub message_id: String,
    pub recipients: Vec<String>,
    pub tries: u32,
    /// While pending.
    pub next_try_at: Option<String>,
    /// When it was delivered or given up.
    pub at: Option<String>,
    /// Why the last try failed.
    pub last_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    pub jobs: Vec<JobView>,
}

/// Query of `GET /v1/jobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyword: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Admins only: every user's jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// One check of `bftp verify`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckView {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// True when every check passed.
    pub ok: bool,
    pub checks: Vec<CheckView>,
    /// Commands and replies of both control connections, PASS masked.
    pub transcript: Vec<String>,
    /// Which way the job's file bytes would travel, and why (SPEC §14). Absent when the
    /// checks stopped before the data connections (a login failed, a server refused TYPE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_path: Option<DataPathVerdictView>,
}

/// `bftp verify`'s finding about the data path: words, for scripts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPathVerdictView {
    /// What the job asked for: `fxp`, `relay`, `auto`; null: nothing, the daemon's default.
    pub asked: Option<String>,
    /// The path the job would run with: `fxp`, `relay` or `auto` (what it asked for, else
    /// the daemon's default; `fxp` where the daemon forbids relays).
    pub path: String,
    /// How a copy would travel: `fxp` (PASV to the source, PORT to the destination),
    /// `fxp_roles_swapped` (PASV to the destination), `relay` (through bftpd), or `none`
    /// (no copy could start: the job would fail).
    pub would_take: String,
    /// Why: `accepted` (a PASV and a PORT to it were accepted), `asked` (the job's path is
    /// `relay`), `refused` (`auto`: both role orders were refused, so a relay), `fxp_only`
    /// (both role orders were refused and the path allows no relay), `no_passive` (a relay
    /// needs PASV or EPSV on both servers, and one refused both).
    pub reason: String,
    /// The replies behind the reason (the refusals, for `refused`), for people.
    pub detail: String,
}

impl DataPathVerdictView {
    /// One line for people: `relay: the path is auto (the daemon's default); third party
    /// refused: 500 Illegal PORT command.`
    pub fn describe(&self) -> String {
        let path = match &self.asked {
            Some(asked) if *asked == self.path => format!("the job asked for {asked}"),
            Some(asked) => format!("the job asked for {asked}, runs as {}", self.path),
            None => format!("the path is {} (the daemon's default)", self.path),
        };
        let why = match self.reason.as_str() {
            "accepted" => "a PASV and a PORT to it were accepted".to_owned(),
            "asked" => "a relay was asked for, and both servers accept passive mode".to_owned(),
            "refused" => "the servers refused the third party".to_owned(),
            "fxp_only" => {
                "the servers refused the third party, and the path allows no relay".to_owned()
            }
            "no_passive" => "a relay needs passive mode on both servers".to_owned(),
            other => other.to_owned(),
        };
        let mut line = format!("{}: {path}; {why}", self.would_take);
        if !self.detail.is_empty() {
            line.push_str(": ");
            line.push_str(&self.detail);
        }
        line
    }
}

/// One line of the `POST /v1/transfer` stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TransferEvent {
    /// The files the job covers (for a wildcard: what the listing matched), and the names a
    /// server listed that were refused (CR/LF/NUL, `..`, foreign paths).
    Listed {
        files: Vec<String>,
        rejected: Vec<String>,
    },
    /// A file's phase: `preparing`, `transferring`, `checking`. Only for a copy that has
    /// run 500 ms, and at most every 500 ms (the `file` result is the per-file record).
    Progress { name: String, phase: String },
    /// A file is done, one way or the other.
    File(FileResult),
    /// The last line.
    Summary(TransferSummary),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileResult {
    pub name: String,
    /// `succeeded`, `failed_permanent` or `failed_transient`.
    pub state: String,
    pub bytes: Option<u64>,
    /// How the copy was proven: `sizes equal (N bytes)`, or why SIZE could not be compared.
    pub evidence: Option<String>,
    /// The name the destination chose, for `unique` (STOU).
    pub stored_as: Option<String>,
    pub source_reply: Option<ReplyView>,
    pub dest_reply: Option<ReplyView>,
    pub fallbacks: Vec<String>,
    pub detail: Option<String>,
    pub seconds: f64,
    /// The copy's TLS, as [`MemberView::tls`] (boxed: most copies have none, and an event
    /// stays small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Box<TlsView>>,
    /// What proved a succeeded copy: `hash`, `size` or `replies`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// How the copy's bytes travelled, as [`MemberView::route`] (boxed, as `tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Box<RouteView>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferSummary {
    pub files: u32,
    pub succeeded: u32,
    pub failed: u32,
    /// Entries of a tree (`--recursive`) not copied by rule: symbolic links, special files,
    /// unsafe names, a directory reached twice or too deep. Counted in `files`. Absent: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: u32,
    pub bytes: u64,
    pub seconds: f64,
    /// A failure of the whole transfer (login refused, FXP refused by both servers...).
    pub error: Option<String>,
    /// The transcript of a failed login or listing, PASS masked.
    pub transcript: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
    pub version: String,
}

/// The [`ErrorBody::kind`] of a request refused because the job store's database cannot be
/// reached (HTTP 503): nothing was stored, and the same request may be sent again later.
pub const STORE_UNAVAILABLE: &str = "store_unavailable";

/// Every error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable: `invalid_request`, `forbidden_host`, `relay_forbidden` (HTTP 403:
    /// the job asks for a relay and the daemon's `[ftp] relay` is false), `forbidden`, `not_found`,
    /// `conflict`, `unavailable`, `store_unavailable` (HTTP 503: the job store's database
    /// cannot be reached, nothing was stored), `insufficient_storage`, `internal`; the CLI
    /// adds `permission_denied` for its own socket errors.
    pub kind: String,
    /// For people; never contains a password.
    pub message: String,
    /// The job concerned, where there is one (e.g. the job a conflicting request key made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29: the request fingerprint (RULES.md §4.5) is a hash of the request's JSON. A
    /// request that gives no data path encodes as it did before data paths existed, so its
    /// request key still matches; one that gives a data path carries it.
    #[test]
    fn a_request_without_a_data_path_encodes_as_before() {
        let mut req = SubmitRequest {
            source: EndpointSpec {
                host: "src".into(),
                path: "a".into(),
                ..Default::default()
            },
            destination: Some(EndpointSpec {
                host: "dst".into(),
                path: "b".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let before = r#"{"source":{"host":"src","path":"a"},"destination":{"host":"dst","path":"b"},"retry":{},"notify":[]}"#;
        assert_eq!(serde_json::to_string(&req).unwrap(), before);
        req.data_path = Some("relay".into());
        let with = serde_json::to_string(&req).unwrap();
        assert!(with.ends_with(r#","data_path":"relay"}"#), "{with}");
        let back: SubmitRequest = serde_json::from_str(before).unwrap();
        assert_eq!(back.data_path, None);
    }

    /// Issue 27 item 14: the TLS sentence is made from the fields, one way for every field.
    #[test]
    fn the_tls_sentence_is_made_from_the_fields() {
        let tls = |version: &str, check: &str| ControlTlsView {
            state: "tls".into(),
            version: Some(version.into()),
            certificate: Some(check.into()),
            ..ControlTlsView::default()
        };
        let clear = ControlTlsView {
            state: "clear".into(),
            ..ControlTlsView::default()
        };
        let data = |encrypted, client: Option<&str>, why: Option<&str>| DataTlsView {
            encrypted,
            tls_client: client.map(str::to_owned),
            clear_reason: why.map(str::to_owned),
        };
        let table: Vec<(TlsView, &str)> = vec![
            (
                TlsView {
                    source: Some(ControlTlsView {
                        ca_file: Some("/etc/ca.pem".into()),
                        ..tls("TLS 1.3", "ca_file")
                    }),
                    destination: Some(clear.clone()),
                    data: Some(data(true, Some("destination"), None)),
                },
                "source control TLS 1.3 (CA file /etc/ca.pem); destination control in clear \
                 (no AUTH TLS); data encrypted (TLS client: destination)",
            ),
            (
                TlsView {
                    source: Some(tls("TLS 1.2", "system_roots")),
                    destination: Some(ControlTlsView {
                        pinned_sha256: Some("ab01".into()),
                        ..tls("TLS 1.3", "pinned")
                    }),
                    data: Some(data(false, None, Some("no SSCN on either side"))),
                },
                "source control TLS 1.2 (system roots); destination control TLS 1.3 (pinned \
                 SHA-256 ab01); data in clear: no SSCN on either side",
            ),
            (
                TlsView {
                    destination: Some(tls("TLS 1.3", "insecure")),
                    data: Some(data(false, None, None)),
                    ..TlsView::default()
                },
                "destination control TLS 1.3 (INSECURE: certificate not checked); data in clear",
            ),
            (
                TlsView {
                    data: Some(data(true, None, None)),
                    ..TlsView::default()
                },
                "data encrypted",
            ),
        ];
        for (view, sentence) in table {
            assert_eq!(view.describe(), sentence);
            // The JSON is fields: it round-trips and holds no sentence.
            let json = serde_json::to_string(&view).unwrap();
            assert!(!json.contains("control"), "{json}");
            assert_eq!(serde_json::from_str::<TlsView>(&json).unwrap(), view);
        }
    }

    /// Issue 29: a route's line is made from its fields; its JSON has every field the
    /// contract names, `null` where it does not apply.
    #[test]
    fn the_route_line_is_made_from_the_fields() {
        let fxp = RouteView {
            path: "fxp".into(),
            ..RouteView::default()
        };
        let refused = RouteView {
            path: "relay".into(),
            reason: Some("refused".into()),
            detail: Some("425 Can't open data connection.".into()),
            bytes: Some(4096),
            sha256: Some("ab12".into()),
            ..RouteView::default()
        };
        let table: Vec<(RouteView, &str)> = vec![
            (fxp.clone(), "fxp"),
            (
                RouteView {
                    path: "fxp_roles_swapped".into(),
                    ..RouteView::default()
                },
                "fxp roles swapped",
            ),
            (
                refused.clone(),
                "relay (refused: 425 Can't open data connection.); 4096 bytes relayed, SHA-256 ab12",
            ),
            (
                RouteView {
                    path: "relay".into(),
                    reason: Some("asked".into()),
                    bytes: Some(0),
                    ..RouteView::default()
                },
                "relay (asked); 0 bytes relayed",
            ),
            (
                RouteView {
                    path: "relay".into(),
                    reason: Some("remembered".into()),
                    detail: Some("500 Illegal PORT command.".into()),
                    seen: Some("2026-12-01T07:00:00Z".into()),
                    ..RouteView::default()
                },
                "relay (remembered: 500 Illegal PORT command., seen 2026-12-01T07:00:00Z)",
            ),
            (
                RouteView {
                    path: "relay".into(),
                    reason: Some("data_tls".into()),
                    detail: Some("no SSCN on either side".into()),
                    ..RouteView::default()
                },
                "relay (data TLS: no SSCN on either side)",
            ),
        ];
        for (view, line) in table {
            assert_eq!(view.describe(), line);
            let json = serde_json::to_string(&view).unwrap();
            assert_eq!(serde_json::from_str::<RouteView>(&json).unwrap(), view);
        }
        assert_eq!(
            serde_json::to_value(&fxp).unwrap(),
            serde_json::json!({"path": "fxp", "reason": null, "detail": null, "bytes": null, "sha256": null})
        );
        assert_eq!(
            serde_json::to_value(&refused).unwrap(),
            serde_json::json!({"path": "relay", "reason": "refused",
                "detail": "425 Can't open data connection.", "bytes": 4096, "sha256": "ab12"})
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<SubmitRequest, _> =
            serde_json::from_str(r#"{"source":{"host":"h","path":"p"},"bogus":1}"#);
        assert!(r.unwrap_err().to_string().contains("bogus"));
    }

    #[test]
    fn debug_masks_secrets() {
        let e = EndpointSpec {
            host: "h".into(),
            password: Some("pw-123".into()),
            acct: Some("ac-9".into()),
            path: "p".into(),
            ..Default::default()
        };
        let d = format!(
            "{:?}",
            SubmitRequest {
                source: e,
                ..Default::default()
            }
        );
        assert!(
            !d.contains("pw-123") && !d.contains("ac-9") && d.contains("****"),
            "{d}"
        );
    }

    #[test]
    fn minimal_submit_parses_with_defaults() {
        let r: SubmitRequest =
            serde_json::from_str(r#"{"source":{"host":"h","path":"p"}}"#).unwrap();
        assert_eq!(r.source.port, None);
        assert!(r.notify.is_empty());
        assert_eq!(r.retry, RetrySpec::default());
    }
}
