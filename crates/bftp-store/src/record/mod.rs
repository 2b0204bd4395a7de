//! The disk format: one JSON record per value, each with its schema version `v`.
//!
//! Records are the store's own types, converted to and from the API types in `types.rs` with
//! explicit word tables, so renaming a variant in `bftp-core` cannot silently change what is
//! on disk. A frozen record of every kind lives in `tests/fixtures/` and must keep decoding.
//!
//! Upgrading: add `JobV2`, keep `JobV1` and its fixture, decode both in `decode_job`.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use bftp_core::{
    DestCommand, Disposition, FileStructure, FtpParams, JobOutcome, JobState, MemberState,
    RetryPolicy, Timestamp, TransferMode, TransferType,
};

use crate::error::StoreError;
use crate::types::{
    AttemptTranscript, DeliveryTry, HistoryEvent, Job, JobId, KeyHash, LastReply, Member,
    MemberUpdate, OutboxEntry, OutboxState, Sealed, SealedEndpoint, SealedSpec,
};

mod copy;
mod event;
mod hostlimit;
mod intent;
mod memory;
mod outbox;
mod wait;
mod watch;
pub(crate) use copy::{CopyTlsV1, ResumeV1, RouteV1};
pub(crate) use event::EventV1;
pub(crate) use hostlimit::HostLimitV1;
use intent::intent_field;
pub(crate) use intent::IntentV1;
pub(crate) use memory::{PairV1, RefusalV1};
pub(crate) use outbox::{OutboxStateV1, OutboxV1};
pub(crate) use wait::WaitV1;
pub(crate) use watch::{WatchFileV1, WatchStatusV1, WatchV1};

/// The record version this code writes. Also the schema version in the `meta` tree.
pub(crate) const RECORD_VERSION: u32 = 1;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct JobV1 {
    pub v: u32,
    pub owner: u32,
    pub spec: SpecV1,
    pub state: StateV1,
    pub attempts: u32,
    pub created: u64,
    pub updated: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kw: Option<String>,
    pub members: u32,
    pub frozen: bool,
    /// Number of history records, i.e. the next history sequence number.
    pub hist: u32,
    /// The request key hash (hex) the job was submitted with, so that retention removes its
    /// `requests` entry without a scan. Absent in jobs written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rk: Option<String>,
    /// A recursive job's walk, once begun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk: Option<WalkV1>,
    /// The watch whose poll made the job; absent for every other job (and in every record
    /// written before watches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<u64>,
    /// Why the queued job waits at a start gate (RULES.md §16.4, §16.5); cleared whenever
    /// its state moves. Absent for every other job and in records written before gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitV1>,
}

/// A recursive job's walk: directories to list, directories listed (relative to the root).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub(crate) struct WalkV1 {
    pub todo: Vec<String>,
    pub done: Vec<String>,
    /// MLSD `unique` facts seen, each with the directory that has it (absent in walks
    /// written before they were kept, and in walks over LIST).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub unique: std::collections::BTreeMap<String, String>,
    /// The destination directories made or found existing, relative to the root (`""`: the
    /// destination root), sorted (absent in walks written before they were kept: every
    /// directory is then made again, which is harmless).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub made: Vec<String>,
}

impl WalkV1 {
    pub(crate) fn start() -> WalkV1 {
        WalkV1 {
            todo: vec![String::new()],
            done: Vec::new(),
            unique: Default::default(),
            made: Vec::new(),
        }
    }

    /// Moves `dir` from the frontier to the listed directories, queues its subdirectories
    /// not seen yet and keeps the `unique` facts its listing showed (fact, directory), a
    /// fact seen before keeping its first directory. `false` (and no change): `dir` is not
    /// in the frontier, it was frozen before and is never frozen twice.
    pub(crate) fn record(
        &mut self,
        dir: &str,
        subdirs: &[String],
        unique: &[(String, String)],
    ) -> bool {
        crate::types::record_listed(
            &mut self.todo,
            &mut self.done,
            &mut self.unique,
            dir,
            subdirs,
            unique,
        )
    }

    /// Adds destination directories made (or found existing); `false` when all were known.
    pub(crate) fn record_made(&mut self, dirs: &[String]) -> bool {
        let before = self.made.len();
        for d in dirs {
            if let Err(at) = self.made.binary_search(d) {
                self.made.insert(at, d.clone());
            }
        }
        self.made.len() != before
    }

    /// The history line of one directory frozen.
    pub(crate) fn listed_detail(dir: &str, files: usize, subdirs: usize) -> String {
        format!(
            "directory {:?}: {} file{}, {} subdirector{}",
            if dir.is_empty() { "." } else { dir },
            files,
            if files == 1 { "" } else { "s" },
            subdirs,
            if subdirs == 1 { "y" } else { "ies" }
        )
    }

    /// The history line of the membership frozen at the walk's end.
    pub(crate) fn frozen_detail(&self, members: u32) -> String {
        format!(
            "{members} member{} frozen from {} director{}",
            if members == 1 { "" } else { "s" },
            self.done.len(),
            if self.done.len() == 1 { "y" } else { "ies" }
        )
    }

    pub(crate) fn to_api(&self) -> crate::types::Walk {
        crate::types::Walk {
            frontier: self.todo.clone(),
            listed: self.done.clone(),
            unique: self.unique.clone(),
            made: self.made.iter().cloned().collect(),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct SpecV1 {
    pub src: EndpointV1,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<EndpointV1>,
    pub disp: String,
    pub cmd: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub mode: String,
    pub stru: String,
    pub start: u64,
    pub retry: RetryV1,
    pub notify: Vec<String>,
    pub kw: bool,
    /// The weakest proof the job accepts: `hash`, `size`, `replies`; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// A recursive job (the source path is a directory tree).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
    /// The data path the job asked for: `fxp`, `relay`, `auto`; absent (and in every record
    /// written before data paths): the daemon's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_path: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct EndpointV1 {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Sealed bytes, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acct: Option<String>,
    pub path: String,
    /// TLS policies; absent in every record written before TLS (then all off).
    #[serde(default, skip_serializing_if = "TlsV1::is_off")]
    pub tls: TlsV1,
}

/// A side's TLS policies as words (`required`, `preferred`, `off`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TlsV1 {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub control: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implicit: bool,
}

impl TlsV1 {
    fn is_off(&self) -> bool {
        *self == TlsV1::default()
    }

    fn from_api(t: &bftp_core::EndpointTls) -> TlsV1 {
        let word = |p: bftp_core::TlsPolicy| match p {
            bftp_core::TlsPolicy::Off => String::new(),
            other => other.as_str().to_owned(),
        };
        TlsV1 {
            control: word(t.control),
            data: word(t.data),
            implicit: t.implicit,
        }
    }

    fn to_api(&self) -> Result<bftp_core::EndpointTls, String> {
        let policy = |w: &str| -> Result<bftp_core::TlsPolicy, String> {
            if w.is_empty() {
                return Ok(bftp_core::TlsPolicy::Off);
            }
            w.parse()
                .map_err(|e: bftp_core::tls::UnknownTlsPolicy| e.to_string())
        };
        Ok(bftp_core::EndpointTls {
            control: policy(&self.control)?,
            data: policy(&self.data)?,
            implicit: self.implicit,
        })
    }
}

/// Durations in milliseconds.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RetryV1 {
    pub first_ms: u64,
    pub factor: f64,
    pub cap_ms: u64,
    pub max_attempts: u32,
    pub deadline_ms: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(tag = "s", rename_all = "lowercase")]
pub(crate) enum StateV1 {
    Queued { next: u64 },
    Running { attempt: u32, started: u64 },
    Finished { outcome: OutcomeV1, at: u64 },
    Cancelled { at: u64 },
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OutcomeV1 {
    Succeeded,
    Partial,
    Failed,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct MemberV1 {
    pub v: u32,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<String>,
    pub state: MemberStateV1,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_reply: Option<ReplyV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_reply: Option<ReplyV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// An [`IntentV1`] record; in records written before it existed, a JSON string of the
    /// daemon's own (read by [`intent_field`], never written).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "intent_field"
    )]
    pub intent: Option<IntentV1>,
    /// The name a unique copy was stored as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    pub updated: u64,
    /// What TLS the last copy of this file had, as the sentence records written before
    /// [`CopyTlsV1`] kept (read and kept as it is, never written anew: the sentence is no
    /// data to read fields from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// What TLS the last copy of this file had, as fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_tls: Option<CopyTlsV1>,
    /// What proved the copy: `hash`, `size` or `replies`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// How the last copy of this file travelled, with a relay's evidence (absent in records
    /// written before routes were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteV1>,
    /// What a resumable copy of this file began from (`bftp_core::resume::Base`), until the
    /// file is copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeV1>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MemberStateV1 {
    Pending,
    Succeeded,
    FailedPermanent,
    FailedRetriesExhausted,
    Cancelled,
    Uncertain,
    /// Added within v1: a word more, so every older member record decodes unchanged.
    Refused,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ReplyV1 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    pub text: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct HistoryV1 {
    pub v: u32,
    pub at: u64,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RequestV1 {
    pub v: u32,
    /// Fingerprint hash, hex.
    pub fp: String,
    pub job: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct TranscriptV1 {
    pub v: u32,
    pub attempt: u32,
    pub lines: Vec<String>,
}

pub(crate) fn encode<T: Serialize>(r: &T) -> Vec<u8> {
    // Plain structs of strings and numbers: serialisation to a Vec cannot fail.
    serde_json::to_vec(r).expect("record serialises")
}

#[derive(Deserialize)]
struct VersionProbe {
    v: u32,
}

/// A stored record: every one carries its version `v`.
pub(crate) trait Versioned {
    fn version(&self) -> u32;
}

macro_rules! versioned {
    ($($t:ty),*) => {
        $(impl Versioned for $t {
            fn version(&self) -> u32 {
                self.v
            }
        })*
    };
}
versioned!(
    JobV1,
    MemberV1,
    HistoryV1,
    RequestV1,
    OutboxV1,
    TranscriptV1,
    RefusalV1,
    PairV1,
    WatchV1,
    WatchFileV1,
    EventV1
);

/// Decodes a record of version [`RECORD_VERSION`]. A record of another version, or one that
/// does not parse, is `Corrupt` with the reason. The record is parsed once; only one that
/// does not parse is looked at again, for its version (a record of a later version may not
/// parse as this one, and is named for its version, not as garbage).
pub(crate) fn decode<T: DeserializeOwned + Versioned>(
    what: &'static str,
    key: &[u8],
    bytes: &[u8],
) -> Result<T, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what,
        key: hex(key),
        reason,
    };
    let version = |v: u32| {
        corrupt(format!(
            "record version {v}, this program reads version {RECORD_VERSION}"
        ))
    };
    match serde_json::from_slice::<T>(bytes) {
        Ok(r) if r.version() == RECORD_VERSION => Ok(r),
        Ok(r) => Err(version(r.version())),
        Err(e) => match serde_json::from_slice::<VersionProbe>(bytes) {
            Ok(VersionProbe { v }) if v != RECORD_VERSION => Err(version(v)),
            _ => Err(corrupt(format!("undecodable: {e}"))),
        },
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(DIGITS[(x >> 4) as usize] as char);
        s.push(DIGITS[(x & 15) as usize] as char);
    }
    s
}

pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() & 1 == 1 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

fn unhex32(s: &str) -> Option<KeyHash> {
    unhex(s)?.try_into().ok().map(KeyHash)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---- API types to records ----

impl JobV1 {
    pub(crate) fn new(
        owner: u32,
        spec: &SealedSpec,
        keyword_hash: Option<&KeyHash>,
        state: &JobState,
        created: Timestamp,
        members: u32,
    ) -> JobV1 {
        JobV1 {
            v: RECORD_VERSION,
            owner,
            spec: SpecV1::from_api(spec),
            state: StateV1::from_api(state),
            attempts: 0,
            created: created.0,
            updated: created.0,
            kw: keyword_hash.map(|h| hex(&h.0)),
            members,
            frozen: members > 0,
            hist: 0,
            rk: None,
            walk: None,
            watch: None,
            wait: None,
        }
    }
}

impl SpecV1 {
    pub(crate) fn from_api(s: &SealedSpec) -> SpecV1 {
        let r = &s.retry;
        SpecV1 {
            src: EndpointV1::from_api(&s.source),
            dst: s.destination.as_ref().map(EndpointV1::from_api),
            disp: match s.disposition {
                Disposition::Copy => "copy",
                Disposition::Move => "move",
                Disposition::Delete => "delete",
            }
            .into(),
            cmd: match s.dest_command {
                DestCommand::Replace => "replace",
                DestCommand::Append => "append",
                DestCommand::Unique => "unique",
            }
            .into(),
            ty: match s.params.transfer_type {
                TransferType::Ascii => "A".into(),
                TransferType::Ebcdic => "E".into(),
                TransferType::Image => "I".into(),
                TransferType::Local(n) => format!("L {n}"),
            },
            mode: match s.params.mode {
                TransferMode::Stream => "S",
                TransferMode::Block => "B",
                TransferMode::Compressed => "C",
            }
            .into(),
            stru: match s.params.structure {
                FileStructure::File => "F",
                FileStructure::Record => "R",
                FileStructure::Page => "P",
            }
            .into(),
            start: s.start_at.0,
            retry: RetryV1 {
                first_ms: ms(r.first_interval),
                factor: r.factor,
                cap_ms: ms(r.cap),
                max_attempts: r.max_attempts,
                deadline_ms: ms(r.deadline),
            },
            notify: s.notify.clone(),
            kw: s.keyword_present,
            proof: s.proof.map(|p| p.as_str().to_owned()),
            recursive: s.recursive,
            data_path: s.data_path.map(|p| p.as_str().to_owned()),
        }
    }
}

impl EndpointV1 {
    fn from_api(e: &SealedEndpoint) -> EndpointV1 {
        EndpointV1 {
            host: e.host.clone(),
            port: e.port,
            user: e.user.clone(),
            pass: e.password.as_ref().map(|s| hex(&s.0)),
            acct: e.acct.as_ref().map(|s| hex(&s.0)),
            path: e.path.clone(),
            tls: TlsV1::from_api(&e.tls),
        }
    }
}

impl StateV1 {
    pub(crate) fn from_api(s: &JobState) -> StateV1 {
        match *s {
            JobState::Queued { next_attempt_at } => StateV1::Queued {
                next: next_attempt_at.0,
            },
            JobState::Running {
                attempt,
                started_at,
            } => StateV1::Running {
                attempt,
                started: started_at.0,
            },
            JobState::Finished { outcome, at } => StateV1::Finished {
                outcome: match outcome {
                    JobOutcome::Succeeded => OutcomeV1::Succeeded,
                    JobOutcome::Partial => OutcomeV1::Partial,
                    JobOutcome::Failed => OutcomeV1::Failed,
                },
                at: at.0,
            },
            JobState::Cancelled { at } => StateV1::Cancelled { at: at.0 },
        }
    }

    pub(crate) fn to_api(self) -> JobState {
        match self {
            StateV1::Queued { next } => JobState::Queued {
                next_attempt_at: Timestamp(next),
            },
            StateV1::Running { attempt, started } => JobState::Running {
                attempt,
                started_at: Timestamp(started),
            },
            StateV1::Finished { outcome, at } => JobState::Finished {
                outcome: match outcome {
                    OutcomeV1::Succeeded => JobOutcome::Succeeded,
                    OutcomeV1::Partial => JobOutcome::Partial,
                    OutcomeV1::Failed => JobOutcome::Failed,
                },
                at: Timestamp(at),
            },
            StateV1::Cancelled { at } => JobState::Cancelled { at: Timestamp(at) },
        }
    }
}

impl MemberStateV1 {
    pub(crate) fn from_api(s: MemberState) -> MemberStateV1 {
        match s {
            MemberState::Pending => MemberStateV1::Pending,
            MemberState::Succeeded => MemberStateV1::Succeeded,
            MemberState::FailedPermanent => MemberStateV1::FailedPermanent,
            MemberState::FailedRetriesExhausted => MemberStateV1::FailedRetriesExhausted,
            MemberState::Cancelled => MemberStateV1::Cancelled,
            MemberState::Uncertain => MemberStateV1::Uncertain,
            MemberState::Refused => MemberStateV1::Refused,
        }
    }

    pub(crate) fn to_api(self) -> MemberState {
        match self {
            MemberStateV1::Pending => MemberState::Pending,
            MemberStateV1::Succeeded => MemberState::Succeeded,
            MemberStateV1::FailedPermanent => MemberState::FailedPermanent,
            MemberStateV1::FailedRetriesExhausted => MemberState::FailedRetriesExhausted,
            MemberStateV1::Cancelled => MemberState::Cancelled,
            MemberStateV1::Uncertain => MemberState::Uncertain,
            MemberStateV1::Refused => MemberState::Refused,
        }
    }
}

impl ReplyV1 {
    pub(crate) fn from_api(r: &LastReply) -> ReplyV1 {
        ReplyV1 {
            code: r.code,
            text: r.text.clone(),
        }
    }
    fn to_api(&self) -> LastReply {
        LastReply {
            code: self.code,
            text: self.text.clone(),
        }
    }
}

impl crate::types::NewMember {
    /// The member as `submit` and `freeze_members` write it at `now`, at `index`: what a read
    /// right after the write returns (a submit's answer is built from it, without the read).
    pub fn as_written(&self, index: u32, now: Timestamp) -> Member {
        MemberV1::new(self, now).to_api(index)
    }
}

impl MemberV1 {
    /// Applies one member change (every field `update` sets; `None` leaves a field as it
    /// is) at `now`: the one place both stores change a member. A terminal member keeps its
    /// state: `Err` names it, and nothing is changed.
    pub(crate) fn apply(
        &mut self,
        job: JobId,
        index: u32,
        u: &MemberUpdate,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        if let Some(s) = u.state {
            let cur = self.state.to_api();
            if cur.is_terminal() && s != cur {
                return Err(StoreError::MemberIsTerminal {
                    job,
                    index,
                    state: cur.as_str(),
                });
            }
            self.state = MemberStateV1::from_api(s);
        }
        if let Some(a) = u.attempts {
            self.attempts = a;
        }
        if let Some(b) = u.bytes {
            self.bytes = Some(b);
        }
        if let Some(s) = u.size {
            self.size = Some(s);
        }
        if let Some(r) = &u.source_reply {
            self.src_reply = Some(ReplyV1::from_api(r));
        }
        if let Some(r) = &u.dest_reply {
            self.dst_reply = Some(ReplyV1::from_api(r));
        }
        if let Some(d) = &u.detail {
            self.detail = Some(d.clone());
        }
        if let Some(i) = &u.intent {
            self.intent = i.as_ref().map(IntentV1::from_api);
        }
        if let Some(n) = &u.stored_as {
            self.stored = Some(n.clone());
        }
        if let Some(t) = &u.tls {
            self.copy_tls = Some(CopyTlsV1::from_api(t));
            self.tls = None;
        }
        if let Some(p) = &u.proof {
            self.proof = Some(p.clone());
        }
        if let Some(r) = &u.resume {
            self.resume = r.as_ref().map(ResumeV1::from_api);
        }
        // The route and its evidence are one record, replaced whole.
        if let Some(r) = &u.route {
            self.route = Some(RouteV1::from_api(
                r,
                u.relayed_bytes,
                u.stream_sha256.clone(),
            ));
        }
        self.updated = now.0;
        Ok(())
    }

    pub(crate) fn new(m: &crate::types::NewMember, now: Timestamp) -> MemberV1 {
        MemberV1 {
            v: RECORD_VERSION,
            name: m.name.clone(),
            size: m.size,
            mtime: m.modified.clone(),
            // A refused name is final from the start, its reason the detail.
            state: if m.refused.is_some() {
                MemberStateV1::Refused
            } else {
                MemberStateV1::Pending
            },
            attempts: 0,
            bytes: None,
            src_reply: None,
            dst_reply: None,
            detail: m.refused.clone(),
            intent: None,
            stored: None,
            updated: now.0,
            tls: None,
            copy_tls: None,
            proof: None,
            route: None,
            resume: None,
        }
    }

    pub(crate) fn to_api(&self, index: u32) -> Member {
        Member {
            index,
            name: self.name.clone(),
            size: self.size,
            modified: self.mtime.clone(),
            state: self.state.to_api(),
            attempts: self.attempts,
            bytes: self.bytes,
            source_reply: self.src_reply.as_ref().map(ReplyV1::to_api),
            dest_reply: self.dst_reply.as_ref().map(ReplyV1::to_api),
            detail: self.detail.clone(),
            intent: self.intent.as_ref().map(IntentV1::to_api),
            stored_as: self.stored.clone(),
            updated_at: Timestamp(self.updated),
            tls: self.copy_tls.as_ref().map(CopyTlsV1::to_api),
            proof: self.proof.clone(),
            route: self.route.as_ref().and_then(RouteV1::to_api),
            relayed_bytes: self.route.as_ref().and_then(|r| r.bytes),
            stream_sha256: self.route.as_ref().and_then(|r| r.sha256.clone()),
            resume: self.resume.as_ref().map(ResumeV1::to_api),
        }
    }
}

impl HistoryV1 {
    pub(crate) fn new(at: Timestamp, kind: &str, detail: Option<&str>) -> HistoryV1 {
        HistoryV1 {
            v: RECORD_VERSION,
            at: at.0,
            kind: kind.to_string(),
            detail: detail.map(str::to_string),
        }
    }
    pub(crate) fn to_api(&self) -> HistoryEvent {
        HistoryEvent {
            at: Timestamp(self.at),
            kind: self.kind.clone(),
            detail: self.detail.clone(),
        }
    }
}

impl RequestV1 {
    pub(crate) fn new(fingerprint: &KeyHash, job: JobId) -> RequestV1 {
        RequestV1 {
            v: RECORD_VERSION,
            fp: hex(&fingerprint.0),
            job: job.0,
        }
    }
    pub(crate) fn fingerprint(&self, key: &[u8]) -> Result<KeyHash, StoreError> {
        unhex32(&self.fp).ok_or_else(|| StoreError::Corrupt {
            what: "request",
            key: hex(key),
            reason: format!("fingerprint {:?} is not 64 hex digits", self.fp),
        })
    }
}

impl TranscriptV1 {
    pub(crate) fn to_api(&self) -> AttemptTranscript {
        AttemptTranscript {
            attempt: self.attempt,
            lines: self.lines.clone(),
        }
    }
}

// ---- records to API types ----

/// Turns a decoded job record into the API type; a field that does not parse is `Corrupt`.
// Long on purpose: a field-by-field conversion; splitting it would only scatter the fields.
pub(crate) fn job_to_api(id: JobId, r: &JobV1) -> Result<Job, StoreError> {
    let key = crate::keys::job(id);
    let bad = |reason: String| StoreError::Corrupt {
        what: "job",
        key: hex(&key),
        reason,
    };
    let keyword_hash = keyword_to_api(&r.kw, &bad)?;
    Ok(Job {
        id,
        owner_uid: r.owner,
        spec: spec_to_api(&r.spec, &bad)?,
        state: r.state.to_api(),
        attempts: r.attempts,
        created_at: Timestamp(r.created),
        updated_at: Timestamp(r.updated),
        keyword_hash,
        member_count: r.members,
        members_frozen: r.frozen,
        watch: r.watch.map(crate::types::WatchId),
        waiting: r.wait.as_ref().and_then(WaitV1::to_api),
    })
}

/// A decoded spec record as the API type; a field that does not parse is `bad(reason)`.
pub(crate) fn spec_to_api(
    s: &SpecV1,
    bad: &dyn Fn(String) -> StoreError,
) -> Result<SealedSpec, StoreError> {
    let disposition = match s.disp.as_str() {
        "copy" => Disposition::Copy,
        "move" => Disposition::Move,
        "delete" => Disposition::Delete,
        other => return Err(bad(format!("unknown disposition {other:?}"))),
    };
    let dest_command = match s.cmd.as_str() {
        "replace" => DestCommand::Replace,
        "append" => DestCommand::Append,
        "unique" => DestCommand::Unique,
        other => return Err(bad(format!("unknown destination command {other:?}"))),
    };
    let transfer_type = match s.ty.as_str() {
        "A" => TransferType::Ascii,
        "E" => TransferType::Ebcdic,
        "I" => TransferType::Image,
        other => match other.strip_prefix("L ").and_then(|n| n.parse::<u8>().ok()) {
            Some(n) => TransferType::Local(n),
            None => return Err(bad(format!("unknown TYPE {other:?}"))),
        },
    };
    let mode = match s.mode.as_str() {
        "S" => TransferMode::Stream,
        "B" => TransferMode::Block,
        "C" => TransferMode::Compressed,
        other => return Err(bad(format!("unknown MODE {other:?}"))),
    };
    let structure = match s.stru.as_str() {
        "F" => FileStructure::File,
        "R" => FileStructure::Record,
        "P" => FileStructure::Page,
        other => return Err(bad(format!("unknown STRU {other:?}"))),
    };
    let endpoint = |e: &EndpointV1, side: &str| -> Result<SealedEndpoint, StoreError> {
        let seal = |h: &Option<String>, what: &str| -> Result<Option<Sealed>, StoreError> {
            h.as_deref()
                .map(|h| {
                    unhex(h)
                        .map(Sealed)
                        .ok_or_else(|| bad(format!("{side} {what} is not hex")))
                })
                .transpose()
        };
        Ok(SealedEndpoint {
            host: e.host.clone(),
            port: e.port,
            user: e.user.clone(),
            password: seal(&e.pass, "password")?,
            acct: seal(&e.acct, "ACCT")?,
            path: e.path.clone(),
            tls: e
                .tls
                .to_api()
                .map_err(|m| bad(format!("{side} TLS: {m}")))?,
        })
    };
    Ok(SealedSpec {
        source: endpoint(&s.src, "source")?,
        destination: s
            .dst
            .as_ref()
            .map(|d| endpoint(d, "destination"))
            .transpose()?,
        disposition,
        dest_command,
        params: FtpParams {
            transfer_type,
            mode,
            structure,
        },
        start_at: Timestamp(s.start),
        retry: RetryPolicy {
            first_interval: Duration::from_millis(s.retry.first_ms),
            factor: s.retry.factor,
            cap: Duration::from_millis(s.retry.cap_ms),
            max_attempts: s.retry.max_attempts,
            deadline: Duration::from_millis(s.retry.deadline_ms),
        },
        notify: s.notify.clone(),
        keyword_present: s.kw,
        proof: s
            .proof
            .as_deref()
            .map(|p| {
                p.parse::<bftp_core::proof::ProofLevel>()
                    .map_err(|_| bad(format!("unknown proof {p:?}")))
            })
            .transpose()?,
        recursive: s.recursive,
        data_path: s
            .data_path
            .as_deref()
            .map(|p| {
                p.parse::<bftp_core::route::DataPath>()
                    .map_err(|_| bad(format!("unknown data path {p:?}")))
            })
            .transpose()?,
    })
}

/// A keyword hash as recorded (hex), decoded.
pub(crate) fn keyword_to_api(
    kw: &Option<String>,
    bad: &dyn Fn(String) -> StoreError,
) -> Result<Option<KeyHash>, StoreError> {
    Ok(match kw {
        None => None,
        Some(h) => Some(
            unhex32(h).ok_or_else(|| bad(format!("keyword hash {h:?} is not 64 hex digits")))?,
        ),
    })
}

#[cfg(test)]
mod tests;
