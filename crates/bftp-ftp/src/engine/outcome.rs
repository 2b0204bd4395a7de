//! What a copy ends with: per file, [`CopyOutcome`] with its evidence; per job,
//! [`PairError`].

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use bftp_core::reply::{Disposition, PermanentKind, ReplyCode, TransientKind, TransportFailure};

use crate::parse::{AddressError, NameError, Reply};
use crate::session::{ConnectError, SessionError};
use crate::transcript::{Side, Transcript};

/// The last thing a server said on its control connection (RULES.md §3: the member keeps
/// the last reply from each server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReply {
    /// The command it answered (`RETR`, `STOR`...; `greeting` for the greeting).
    pub command: String,
    /// `None` when no reply came: the text then says what happened instead.
    pub code: Option<ReplyCode>,
    pub text: String,
}

impl LastReply {
    pub(crate) fn from_reply(command: &str, reply: &Reply) -> Self {
        Self {
            command: command.to_owned(),
            code: Some(reply.code()),
            text: reply.text(),
        }
    }

    pub(crate) fn from_error(command: &str, error: &SessionError) -> Self {
        Self {
            command: command.to_owned(),
            code: None,
            text: error.to_string(),
        }
    }
}

impl fmt::Display for LastReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "{}: {code} {}", self.command, self.text),
            None => write!(f, "{}: {}", self.command, self.text),
        }
    }
}

/// A departure from the plain RFC 1068 Figure 2 sequence, noted for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// PASV went to the destination and PORT to the source.
    RolesSwapped { reason: String },
    /// EPSV instead of PASV on this (passive) side.
    ExtendedPassive { side: Side, reason: String },
    /// EPRT instead of PORT on this (active) side.
    ExtendedPort { side: Side, reason: String },
    /// A PASV reply named another host than the server's control connection; its
    /// host was ignored (RFC 2577), its port used with the control peer address.
    ForeignPasvHostIgnored {
        side: Side,
        announced: IpAddr,
        used: IpAddr,
    },
    /// No size evidence from this side.
    SizeUnavailable { side: Side, reason: String },
    /// A control connection was closed (a server fell silent) and opened again.
    Reconnected { side: Side, reason: String },
    /// The partial destination file of a failed copy was deleted (or not).
    PartialDeleted {
        path: String,
        deleted: bool,
        reply: String,
    },
    /// NLST instead of MLSD for the listing.
    ListedWithNlst { reason: String },
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::RolesSwapped { reason } => {
                write!(f, "roles swapped (PASV to the destination): {reason}")
            }
            Fallback::ExtendedPassive { side, reason } => {
                write!(f, "EPSV to the {side}: {reason}")
            }
            Fallback::ExtendedPort { side, reason } => write!(f, "EPRT to the {side}: {reason}"),
            Fallback::ForeignPasvHostIgnored {
                side,
                announced,
                used,
            } => write!(
                f,
                "the {side}'s PASV reply named {announced}; ignored, used its control address {used}"
            ),
            Fallback::SizeUnavailable { side, reason } => {
                write!(f, "no SIZE on the {side}: {reason}")
            }
            Fallback::Reconnected { side, reason } => {
                write!(f, "reconnected to the {side}: {reason}")
            }
            Fallback::PartialDeleted {
                path,
                deleted: true,
                reply,
            } => write!(f, "partial destination file {path:?} deleted ({reply})"),
            Fallback::PartialDeleted {
                path,
                deleted: false,
                reply,
            } => write!(f, "partial destination file {path:?} NOT deleted ({reply})"),
            Fallback::ListedWithNlst { reason } => write!(f, "listed with NLST: {reason}"),
        }
    }
}

/// The size evidence of a copy (RULES.md §4.2), decided by `bftp_core::evidence`.
pub use bftp_core::evidence::SizeCheck;

/// What went wrong in a copy, with the server, command and reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("{side} server {host}: {command} answered {reply}")]
    Reply {
        side: Side,
        host: String,
        command: String,
        reply: Reply,
    },
    #[error("{side} server {host}: {command}: {error}")]
    Session {
        side: Side,
        host: String,
        command: String,
        error: SessionError,
    },
    #[error("watchdog: no final reply from the {} within {waited:?}; control connections closed",
        silent.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" and the "))]
    Watchdog { silent: Vec<Side>, waited: Duration },
    #[error(
        "size mismatch after both servers reported success: source {source_size} bytes, \
         destination {destination} bytes, expected {expected}"
    )]
    SizeMismatch {
        source_size: u64,
        destination: u64,
        expected: u64,
    },
    #[error(
        "the {side} server {host} answered {command} with a privileged data port {port} (below 1024); \
         refused (RFC 2577 bounce protection)"
    )]
    PrivilegedPort {
        side: Side,
        host: String,
        command: String,
        port: u16,
    },
    #[error("the {side} server {host}: unusable {command} reply: {error}")]
    BadPassiveReply {
        side: Side,
        host: String,
        command: String,
        error: AddressError,
    },
    #[error("the destination reported the STOU name {name:?}, which cannot be used: {error}")]
    BadStouName { name: String, error: NameError },
    /// A relay through bftpd did not move the whole stream.
    #[error("the relay through bftpd stopped after {bytes} bytes: {error}")]
    Relay { error: String, bytes: u64 },
    #[error("{path:?} cannot be sent in a command: {error}")]
    BadPath { path: String, error: NameError },
    /// The destination confirmed the upload, then had no file under the name asked: it may
    /// have stored the bytes under a name of its own (Pure-FTPd turns a trailing space into
    /// `_`).
    #[error(
        "the destination server {host} confirmed the upload, then SIZE {name} answered \
         {reply}: the file is not under the name asked (the server may have stored it under \
         another name)"
    )]
    NotStoredAsNamed {
        host: String,
        name: String,
        reply: Reply,
    },
}

/// The evidence of one copy attempt, whatever its outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptReport {
    /// The last reply from the source server.
    pub source_reply: Option<LastReply>,
    /// The last reply from the destination server.
    pub destination_reply: Option<LastReply>,
    /// The final reply to the data command (RETR) on the source, if one came.
    pub source_final: Option<LastReply>,
    /// The final reply to the data command (STOR/APPE/STOU) on the destination.
    pub destination_final: Option<LastReply>,
    pub fallbacks: Vec<Fallback>,
    /// APPE: the destination size before the append (0 if the file did not exist),
    /// recorded before APPE was sent (RULES.md §4.3).
    pub destination_size_before: Option<u64>,
    /// APPE that failed: the destination size afterwards, where SIZE told.
    pub destination_size_after: Option<u64>,
    /// STOU: the name the destination reported, on failure too (the file may exist).
    pub stou_name: Option<String>,
    /// STOU that failed: every name a STOU of this copy announced (one per role order tried),
    /// whose file may exist. The engine never deletes a STOU's file: whether it is ours to
    /// delete depends on what the caller knows (the names its other copies claim).
    pub stou_left: Vec<String>,
    /// Whether the destination command (STOR/APPE/STOU) was accepted with a 1yz or
    /// 2yz: the destination file may have been changed.
    pub destination_touched: bool,
    /// How the bytes travelled, once a data command went out (`fxp`, roles swapped, or a
    /// relay and why).
    pub route: Option<bftp_core::route::Route>,
    /// The servers refused the third party in both role orders during this copy: the
    /// refusal, for the caller to remember for the pair (`bftp_core::route::PairMemory`).
    pub fxp_refused: Option<String>,
    /// A resumed copy: the offset both servers accepted with `REST` (only the bytes after it
    /// moved).
    pub resumed_from: Option<u64>,
    /// A resume was asked and a server refused it (`REST`, or the storing command after it):
    /// which server, and what it answered, for the caller's refusal memory.
    pub resume_refused: Option<(Side, String)>,
    /// A relayed copy: what bftpd counted and hashed as the bytes passed.
    pub relayed: Option<RelayStats>,
    pub duration: Duration,
    /// Commands and replies of this attempt on both connections (PASS masked). The
    /// first copy on a pair also holds the login.
    pub transcript: Transcript,
}

impl AttemptReport {
    pub fn last_reply(&self, side: Side) -> Option<&LastReply> {
        match side {
            Side::Source => self.source_reply.as_ref(),
            Side::Destination => self.destination_reply.as_ref(),
        }
    }
}

/// What bftpd saw of a relayed stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStats {
    /// Bytes bftpd wrote to the destination's data connection.
    pub bytes: u64,
    /// The SHA-256 of the whole stream (lower-case hex), when it was computed.
    pub sha256: Option<String>,
    /// Who moved the bytes: `kernel` or `user space`.
    pub mover: crate::relay::Mover,
    /// Each leg's data connection was TLS (`PROT P`): source, destination.
    pub tls: [bool; 2],
}

/// How one file's copy ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyOutcome {
    /// Both servers gave a final 2yz and, where SIZE works, the sizes agree.
    Succeeded {
        /// Bytes written to the destination, where SIZE told.
        bytes: Option<u64>,
        size_check: SizeCheck,
        /// STOU: the name the destination chose (RFC 1123 `FILE: name`), if it said.
        stou_name: Option<String>,
        report: AttemptReport,
    },
    /// May succeed later. `connection_lost`: the pair is closed; open a new one.
    Transient {
        kind: TransientKind,
        failure: Failure,
        connection_lost: bool,
        report: AttemptReport,
    },
    /// Will not succeed by retrying (for this file; the job goes on).
    Permanent {
        kind: PermanentKind,
        failure: Failure,
        report: AttemptReport,
    },
}

impl CopyOutcome {
    pub fn report(&self) -> &AttemptReport {
        match self {
            CopyOutcome::Succeeded { report, .. }
            | CopyOutcome::Transient { report, .. }
            | CopyOutcome::Permanent { report, .. } => report,
        }
    }

    /// Takes the report's transcript out, for a caller that keeps it elsewhere (the report
    /// is left with an empty one).
    pub fn take_transcript(&mut self) -> Transcript {
        let (CopyOutcome::Succeeded { report, .. }
        | CopyOutcome::Transient { report, .. }
        | CopyOutcome::Permanent { report, .. }) = self;
        std::mem::take(&mut report.transcript)
    }

    pub fn is_success(&self) -> bool {
        matches!(self, CopyOutcome::Succeeded { .. })
    }

    /// The failure, if any.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            CopyOutcome::Succeeded { .. } => None,
            CopyOutcome::Transient { failure, .. } | CopyOutcome::Permanent { failure, .. } => {
                Some(failure)
            }
        }
    }
}

/// A job-level failure: the condition is about the servers, not about one file, and
/// the pair is unusable (RULES.md §3: login refused, FXP refused by both servers,
/// connection failures).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobFailure {
    #[error("{side} server: {error}")]
    Connect { side: Side, error: ConnectError },
    #[error("{side} server {host}: {command} answered {reply}")]
    Refused {
        side: Side,
        host: String,
        command: String,
        reply: Reply,
    },
    #[error("{side} server {host}: {command}: {error}")]
    Session {
        side: Side,
        host: String,
        command: String,
        error: SessionError,
    },
    /// Both role orders were tried and each ended in a refusal of the foreign address.
    #[error("third-party transfer refused by both servers in both role orders: {explanation}")]
    FxpRefused {
        explanation: String,
        source_reply: Option<LastReply>,
        destination_reply: Option<LastReply>,
    },
    /// Neither server offered a passive data connection that may be used: PASV and EPSV
    /// refused, or a data port below 1024 announced (refused: RFC 2577 bounce protection).
    #[error("neither server offers a usable passive data connection: {detail}")]
    NoPassiveMode { detail: String },
    #[error("the connection pair was closed ({reason}); open a new one")]
    Closed { reason: String },
    /// The caller aborted the copy ([`Pair::copy_or_abort`](super::Pair::copy_or_abort)):
    /// ABOR was sent on both connections, which were then closed.
    #[error("the copy was aborted ({reason}): ABOR sent to both servers, connections closed")]
    Aborted { reason: String },
    /// The data policy requires TLS between the servers and no role order allows it.
    #[error("{explanation}")]
    DataTls { explanation: String },
}

/// A [`JobFailure`] with the retry decision and the transcript of what led to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{failure}")]
pub struct PairError {
    pub failure: JobFailure,
    pub disposition: Disposition,
    pub transcript: Transcript,
}

impl PairError {
    pub fn is_permanent(&self) -> bool {
        self.disposition.is_permanent()
    }

    pub fn is_transient(&self) -> bool {
        self.disposition.is_transient()
    }

    /// The server the failure is about, when it is about one.
    pub fn side(&self) -> Option<Side> {
        match &self.failure {
            JobFailure::Connect { side, .. }
            | JobFailure::Refused { side, .. }
            | JobFailure::Session { side, .. } => Some(*side),
            _ => None,
        }
    }
}

/// A disposition for "the pair is gone" (transient, reconnect).
pub(crate) fn connection_gone() -> Disposition {
    Disposition::Transient(TransientKind::Transport(TransportFailure::Eof))
}

/// Where a copy is, for a live progress line. The servers do not report bytes on the
/// control connection while a third-party transfer runs, and asking the destination
/// for SIZE on a second connection would cost a login per poll; so progress is the
/// phase and the time the transfer started, and the bytes at the end.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Progress {
    #[default]
    Idle,
    /// Sizes, roles, data connection set-up for `path`.
    Preparing { path: String },
    /// Both servers accepted their commands; bytes flow between them.
    Transferring {
        path: String,
        since: std::time::SystemTime,
    },
    /// Both final replies in; checking sizes.
    Checking { path: String },
    Finished {
        path: String,
        bytes: Option<u64>,
        success: bool,
    },
}
