//! The store's own view of a job: what goes in, what comes out. These are API types of the
//! store, not its disk format (that is `record/`), so either can change alone.

use std::fmt;
use std::str::FromStr;

use bftp_core::{
    DestCommand, Disposition, FtpParams, Intent, JobState, MemberState, RetryPolicy, Timestamp,
};

/// A job's number, from the store's own counter: never reused, also after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for JobId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(JobId)
    }
}

/// A watch's number, from the store's own counter (apart from jobs'): never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchId(pub u64);

impl fmt::Display for WatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for WatchId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(WatchId)
    }
}

/// A watch's own settings (SPEC §15), beside its template job spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchSettings {
    /// How often the watched directory is listed.
    pub every_ms: u64,
    /// A file is the watch's when its name matches one of these; empty: every name (no
    /// hidden names, as `*`).
    pub patterns: Vec<String>,
    /// ...and none of these (already defaulted by the caller).
    pub ignore: Vec<String>,
    /// How long a file's facts must stay the same before it is taken.
    pub settle_ms: u64,
    pub ready: Option<bftp_core::watch::Ready>,
    pub recursive: bool,
    /// `failure`, `always` or `never`.
    pub notify_on: String,
    /// The user's words for when files are expected (`daily 05:00`, `6h`), parsed by the
    /// daemon.
    pub expect: Option<String>,
    /// A daily digest mail of what the watch did.
    pub digest: bool,
}

/// What the polls of a watch found: written by each poll, computed by the daemon.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchStatus {
    pub polls: u64,
    pub last_poll: Option<Timestamp>,
    pub next_poll: Timestamp,
    pub last_error: Option<String>,
    /// The job the last poll made, until a later poll sees it final.
    pub current_job: Option<JobId>,
    /// The last [`WATCH_JOBS_KEPT`] jobs the watch made, newest last: kept by the store
    /// ([`crate::JobStore::record_poll`]).
    pub jobs: Vec<JobId>,
    /// Totals, added by the poll that sees a job final.
    pub delivered: u64,
    pub failed: u64,
    pub repeats: u64,
    /// As of the last poll.
    pub waiting: u32,
    pub ignored: u32,
    pub refused: u32,
    pub last_delivery: Option<Timestamp>,
    pub last_alarm: Option<Timestamp>,
    /// The files of the last poll that were not taken, and why (bounded by the caller).
    pub notes: Vec<WatchNote>,
    /// When the last daily digest was sent, and the totals then (polls, delivered, failed,
    /// repeats): the next digest tells what changed since.
    pub last_digest: Option<Timestamp>,
    pub digest_base: [u64; 4],
}

/// One file of a poll that was not taken: its path, `kind` (`settling`, `no_marker`,
/// `ignored`, `refused`, `skipped`) and a detail.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchNote {
    pub path: String,
    pub kind: String,
    pub detail: String,
}

/// How many of the jobs a watch made its status names ([`WatchStatus::jobs`]).
pub const WATCH_JOBS_KEPT: usize = 20;

/// A watch to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewWatch {
    pub owner_uid: u32,
    /// The template of the jobs its polls make: the source path is the watched directory,
    /// the destination path the directory files go to.
    pub spec: SealedSpec,
    pub settings: WatchSettings,
    pub keyword_hash: Option<KeyHash>,
    pub created_at: Timestamp,
}

/// A stored watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    pub id: WatchId,
    pub owner_uid: u32,
    pub spec: SealedSpec,
    pub settings: WatchSettings,
    pub keyword_hash: Option<KeyHash>,
    pub created_at: Timestamp,
    pub paused: bool,
    pub status: WatchStatus,
}

/// One poll of a watch, written in one transaction by [`crate::JobStore::record_poll`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollRecord {
    /// The watch's status after the poll. `jobs` is the store's (the caller's is not
    /// read): with a `job`, the store pushes it to `jobs` and makes it `current_job`.
    pub status: WatchStatus,
    /// Checkpoint entries written (`bftp_core::watch::Poll::put`).
    pub put: Vec<(String, bftp_core::watch::Entry)>,
    /// Checkpoint entries removed (`bftp_core::watch::Poll::prune`).
    pub prune: Vec<String>,
    /// The job the poll makes, its members given (so frozen); its `watch` is set to the
    /// watch by the store.
    pub job: Option<NewJob>,
}

/// A keyed hash computed by the daemon (of a keyword, a request key, a request's parameters).
/// The clear value never reaches the store.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({}…)", crate::record::hex(&self.0[..6]))
    }
}

/// An encrypted secret (FTP password, ACCT), opaque to the store, stored byte for byte.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed(pub Vec<u8>);

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sealed({} bytes)", self.0.len())
    }
}

/// `bftp_core::Endpoint` with its secrets sealed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedEndpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Sealed>,
    pub acct: Option<Sealed>,
    pub path: String,
    /// The side's TLS policies (every job stored before TLS: all off).
    pub tls: bftp_core::EndpointTls,
}

/// `bftp_core::JobSpec` with sealed secrets and without the keyword (only its hash is kept,
/// in [`NewJob::keyword_hash`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedSpec {
    pub source: SealedEndpoint,
    pub destination: Option<SealedEndpoint>,
    pub disposition: Disposition,
    pub dest_command: DestCommand,
    pub params: FtpParams,
    pub start_at: Timestamp,
    /// Durations are kept to the millisecond.
    pub retry: RetryPolicy,
    pub notify: Vec<String>,
    pub keyword_present: bool,
    /// The weakest proof the job accepts (see `JobSpec::proof`).
    pub proof: Option<bftp_core::proof::ProofLevel>,
    /// A recursive job (see `JobSpec::recursive`).
    pub recursive: bool,
    /// The data path the job asked for (see `JobSpec::data_path`); `None`: the daemon's.
    pub data_path: Option<bftp_core::route::DataPath>,
}

/// The idempotency key of a submission (RULES.md §4.5), both parts hashed by the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestKey {
    pub key_hash: KeyHash,
    /// Hash of the request's parameters: the same key with another fingerprint is refused.
    pub fingerprint: KeyHash,
}

/// A job to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    pub owner_uid: u32,
    pub spec: SealedSpec,
    pub keyword_hash: Option<KeyHash>,
    pub request: Option<RequestKey>,
    pub created_at: Timestamp,
    /// The members of a single-file job, known at submit. Empty for a wildcard job, whose
    /// membership is frozen later by [`crate::JobStore::freeze_members`].
    pub members: Vec<NewMember>,
    /// The watch whose poll made this job (`None` for every other job): its members'
    /// outcomes settle that watch's checkpoint (RULES.md §15).
    pub watch: Option<WatchId>,
}

/// A stored job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    pub owner_uid: u32,
    pub spec: SealedSpec,
    pub state: JobState,
    /// The number of the last attempt started (0 before the first).
    pub attempts: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub keyword_hash: Option<KeyHash>,
    pub member_count: u32,
    /// True once the membership is fixed: at submit when members were given, else after
    /// `freeze_members` (RULES.md §4.4: later attempts never list again).
    pub members_frozen: bool,
    /// The watch whose poll made this job (`None` for every other job).
    pub watch: Option<WatchId>,
    /// Why the queued job waits at a start gate, and until when (`JobStore::defer`); `None`
    /// once its state moved.
    pub waiting: Option<bftp_core::window::Wait>,
}

/// One file of a job, as listed (name, and size and modify time where MLSD/SIZE/MDTM gave them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMember {
    pub name: String,
    pub size: Option<u64>,
    pub modified: Option<String>,
    /// A listed name that was refused, and why: the member is frozen `refused`, with this
    /// reason as its detail, and `name` is only its escaped display form.
    pub refused: Option<String>,
}

/// The last reply of one server for one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastReply {
    /// `None` for a reply that had no numeric code.
    pub code: Option<u16>,
    pub text: String,
}

/// One file of a job and its ledger entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// 0-based, in the order of the frozen membership.
    pub index: u32,
    pub name: String,
    pub size: Option<u64>,
    pub modified: Option<String>,
    pub state: MemberState,
    pub attempts: u32,
    pub bytes: Option<u64>,
    pub source_reply: Option<LastReply>,
    pub dest_reply: Option<LastReply>,
    pub detail: Option<String>,
    /// An unrepeatable effect about to be attempted and the evidence to resolve it after a
    /// crash (see `bftp_core::intent`).
    pub intent: Option<Intent>,
    /// The name a unique (STOU) copy was stored as, once it is proven: the member's claim
    /// on that destination file, which no other member may make.
    pub stored_as: Option<String>,
    pub updated_at: Timestamp,
    /// The TLS of the copy that last touched this file: each side's control connection,
    /// whether the data moved encrypted and which server was the TLS client.
    pub tls: Option<bftp_core::tls::CopyTls>,
    /// What proved the copy (`hash`, `size`, `replies`), once it is succeeded.
    pub proof: Option<String>,
    /// How the bytes of the copy that last touched this file travelled: third party (either
    /// role order) or through bftpd, and why (RULES.md §14).
    pub route: Option<bftp_core::route::Route>,
    /// A relayed copy: the bytes bftpd counted as it relayed them.
    pub relayed_bytes: Option<u64>,
    /// A relayed copy: the SHA-256 (lower-case hex) bftpd computed over the stream, when it
    /// did.
    pub stream_sha256: Option<String>,
    /// What a resumable copy of this file began from, until the file is copied (see
    /// `bftp_core::resume`).
    pub resume: Option<bftp_core::resume::Base>,
}

/// The fields of a member to change; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberUpdate {
    /// A terminal state is final: moving a terminal member to any other state is refused.
    pub state: Option<MemberState>,
    pub attempts: Option<u32>,
    pub bytes: Option<u64>,
    pub size: Option<u64>,
    pub source_reply: Option<LastReply>,
    pub dest_reply: Option<LastReply>,
    pub detail: Option<String>,
    /// `Some(None)` clears the intent once it is resolved.
    pub intent: Option<Option<Intent>>,
    pub stored_as: Option<String>,
    pub tls: Option<bftp_core::tls::CopyTls>,
    pub proof: Option<String>,
    /// How the copy travelled. `route`, `relayed_bytes` and `stream_sha256` are one record:
    /// an update with a `route` replaces all three (a `None` evidence field then clears
    /// it: a later third-party copy has no relay evidence); without a `route` the other two
    /// are ignored.
    pub route: Option<bftp_core::route::Route>,
    pub relayed_bytes: Option<u64>,
    pub stream_sha256: Option<String>,
    /// `Some(Some(base))` records what a resumable copy begins from; `Some(None)` clears it.
    pub resume: Option<Option<bftp_core::resume::Base>>,
}

/// One line of a job's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEvent {
    pub at: Timestamp,
    /// `submitted`, `start`, `requeue`, `finish`, `cancel`, `members`, or a kind the daemon
    /// appends itself (`recovered`, ...).
    pub kind: String,
    pub detail: Option<String>,
}

impl HistoryEvent {
    /// The first event of every job, as `submit` writes it.
    pub fn submitted(at: Timestamp) -> HistoryEvent {
        HistoryEvent {
            at,
            kind: "submitted".into(),
            detail: None,
        }
    }
}

/// The state part of a [`JobFilter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateFilter {
    Queued,
    Running,
    Finished,
    Cancelled,
}

impl StateFilter {
    pub fn of(state: &JobState) -> StateFilter {
        match state {
            JobState::Queued { .. } => StateFilter::Queued,
            JobState::Running { .. } => StateFilter::Running,
            JobState::Finished { .. } => StateFilter::Finished,
            JobState::Cancelled { .. } => StateFilter::Cancelled,
        }
    }
}

/// Which jobs [`crate::JobStore::list`] returns, in id order. All conditions must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// `None`: every owner's jobs (admin).
    pub owner: Option<u32>,
    pub keyword_hash: Option<KeyHash>,
    pub state: Option<StateFilter>,
    pub limit: Option<usize>,
}

/// The outcome of a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    Created(Job),
    /// The request key was seen before with the same parameters: this is that job.
    Existing(Job),
}

impl Submitted {
    pub fn job(&self) -> &Job {
        match self {
            Submitted::Created(j) | Submitted::Existing(j) => j,
        }
    }
    pub fn into_job(self) -> Job {
        match self {
            Submitted::Created(j) | Submitted::Existing(j) => j,
        }
    }
}

/// Number of jobs in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateCounts {
    pub queued: u64,
    pub running: u64,
    pub finished: u64,
    pub cancelled: u64,
}

/// Where a job's report stands in the outbox (RULES.md §4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboxState {
    /// Waiting for its next delivery try, at [`OutboxEntry::next_try_at`].
    Pending,
    /// Accepted by the mail transport.
    Delivered { at: Timestamp },
    /// Refused for good (a permanent SMTP reply), or still undelivered when the daemon's
    /// give-up time passed.
    GaveUp { at: Timestamp },
}

impl OutboxState {
    pub fn as_str(&self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Delivered { .. } => "delivered",
            OutboxState::GaveUp { .. } => "gave_up",
        }
    }
}

/// The report of a job that reached a final state: written in the same transaction as the
/// finish or the cancel, so no final job is ever without one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxEntry {
    pub job: JobId,
    /// When the job became final: with the job id, what the report's Message-ID is made of,
    /// so every delivery try of the report carries the same one.
    pub created_at: Timestamp,
    /// Delivery tries so far.
    pub tries: u32,
    /// The next try, while pending.
    pub next_try_at: Option<Timestamp>,
    pub state: OutboxState,
    /// Why the last try failed.
    pub last_error: Option<String>,
    pub updated_at: Timestamp,
}

/// The result of one delivery try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryTry {
    Delivered,
    /// A transient failure: try again at `next_try_at`.
    Failed {
        error: String,
        next_try_at: Timestamp,
    },
    /// A permanent failure, or the give-up time passed.
    GaveUp {
        error: String,
    },
    /// Not tried (the job's attempt is still winding down): look again at `next_try_at`.
    /// Counts no try.
    Postponed {
        next_try_at: Timestamp,
    },
}

/// The bounded transcript of a job's last attempt (PASS masked by the engine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptTranscript {
    pub attempt: u32,
    pub lines: Vec<String>,
}

/// A recursive job's walk of its source tree: the directories still to list (in the order
/// they will be listed: parents before children) and those listed, each frozen with its files
/// as members. Directories are relative to the job's root (`""` is the root).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    pub frontier: Vec<String>,
    pub listed: Vec<String>,
    /// MLSD `unique` facts seen so far, each with the first directory that showed it.
    pub unique: std::collections::BTreeMap<String, String>,
    /// The destination directories made (or found existing) so far, relative to the root
    /// (`""`: the destination root itself): a later attempt does not make them again.
    pub made: std::collections::BTreeSet<String>,
}

impl Walk {
    /// The walk of a tree not listed yet: the root alone in the frontier.
    pub fn start() -> Walk {
        Walk {
            frontier: vec![String::new()],
            ..Walk::default()
        }
    }

    /// Records directory `dir` listed (see [`record_listed`]).
    pub fn record(&mut self, dir: &str, subdirs: &[String], unique: &[(String, String)]) -> bool {
        record_listed(
            &mut self.frontier,
            &mut self.listed,
            &mut self.unique,
            dir,
            subdirs,
            unique,
        )
    }
}

/// The frontier rule of a walk, for the durable one and the one in memory alike: moves `dir`
/// from the frontier (`todo`) to the listed directories (`done`), queues its subdirectories
/// not queued or listed yet at the end (breadth first: parents before children), and keeps
/// the `unique` facts its listing showed (fact, directory), a fact seen before keeping its
/// first directory. `false`, and no change: `dir` is not in the frontier, it was listed
/// before and is never recorded twice.
pub(crate) fn record_listed(
    todo: &mut Vec<String>,
    done: &mut Vec<String>,
    facts: &mut std::collections::BTreeMap<String, String>,
    dir: &str,
    subdirs: &[String],
    unique: &[(String, String)],
) -> bool {
    let Some(at) = todo.iter().position(|d| d == dir) else {
        return false;
    };
    todo.remove(at);
    done.push(dir.to_owned());
    for sub in subdirs {
        if !done.contains(sub) && !todo.contains(sub) {
            todo.push(sub.clone());
        }
    }
    for (fact, d) in unique {
        facts.entry(fact.clone()).or_insert_with(|| d.clone());
    }
    true
}

#[cfg(test)]
mod walk_tests {
    use super::*;

    /// The frontier rule, one row per case: frontier and listed before, the directory
    /// recorded and its subdirectories; whether it is recorded, frontier and listed after.
    #[test]
    fn the_frontier_rule() {
        type Row<'a> = (
            &'a [&'a str],
            &'a [&'a str],
            &'a str,
            &'a [&'a str],
            bool,
            &'a [&'a str],
            &'a [&'a str],
        );
        let table: &[Row] = &[
            // The root: its subdirectories queued in the order given.
            (&[""], &[], "", &["b", "a"], true, &["b", "a"], &[""]),
            // Children join the end: breadth first.
            (
                &["a", "b"],
                &[""],
                "a",
                &["a/c"],
                true,
                &["b", "a/c"],
                &["", "a"],
            ),
            // Not in the frontier (listed before): nothing changes.
            (&["b"], &["", "a"], "a", &["a/x"], false, &["b"], &["", "a"]),
            // A subdirectory queued or listed already is not queued again.
            (
                &["a", "b"],
                &[""],
                "a",
                &["b", "", "a/c"],
                true,
                &["b", "a/c"],
                &["", "a"],
            ),
        ];
        for (todo, done, dir, subs, recorded, todo_after, done_after) in table {
            let mut walk = Walk {
                frontier: todo.iter().map(|s| s.to_string()).collect(),
                listed: done.iter().map(|s| s.to_string()).collect(),
                ..Walk::default()
            };
            let subs: Vec<String> = subs.iter().map(|s| s.to_string()).collect();
            let facts = [("U".to_string(), dir.to_string())];
            assert_eq!(
                walk.record(dir, &subs, &facts),
                *recorded,
                "{dir:?} {todo:?}"
            );
            assert_eq!(walk.frontier, *todo_after, "{dir:?} {todo:?}");
            assert_eq!(walk.listed, *done_after, "{dir:?} {todo:?}");
            assert_eq!(walk.unique.contains_key("U"), *recorded);
        }
        // A fact seen before keeps its first directory.
        let mut walk = Walk::start();
        walk.unique.insert("U".into(), "first".into());
        walk.record("", &[], &[("U".into(), "".into())]);
        assert_eq!(walk.unique["U"], "first");
    }
}
