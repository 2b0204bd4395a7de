//! The FTP side of bftp: parsing what servers say ([`parse`], pure), one control
//! connection ([`session`], which reads every reply with our own parser), and the
//! third-party transfer engine ([`engine`]): a [`Pair`] of sessions that copies files
//! server to server, lists the source, and verifies a job before it runs; and the byte
//! mover ([`relay`](mod@relay)) that carries a file between two data connections through bftpd.

pub mod engine;
pub mod limits;
pub mod parse;
pub mod relay;
pub mod session;
pub mod tls;
pub mod transcript;

pub use engine::{
    hash_wait, verify, ActionError, Announce, Announced, AttemptReport, Check, CopyOutcome,
    CopyRequest, DataTls, DirListing, Failure, Fallback, HashProof, HiddenNames, JobFailure,
    LastReply, ListError, ListMethod, Listed, Listing, Pair, PairError, Progress, RejectedName,
    RelayStats, SizeCheck, SizeWatch, Skipped, TreeEntry, TreeKind, VerifyReport, VerifyRequest,
    WalkMethod, WatchListing, CHECK_SOURCE_FILE, HASH_RATE_FLOOR,
};
pub use engine::{
    DataPathVerdict, PathReason, WouldTake, CHECK_DATA_CONNECTION, CHECK_RELAY_CONNECTIONS,
};
pub use limits::{AddressCheck, AllowAll, Limits, ServerLogin};
pub use parse::{AddressError, FactError, MlsdError, NameError, ReplyError};
pub use relay::{
    relay, relay_io, Mover, RelayError, RelayGate, RelayOptions, RelayPermit, Relayed,
};
pub use session::{ConnectError, SendGate, Session, SessionError};
pub use transcript::{Entry, EntryKind, Side, Transcript, TranscriptLimits};

/// Everything that can fail in the parsers. They return their own, narrower enums;
/// this one gathers them for callers that do not care which parser failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Reply(#[from] ReplyError),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Fact(#[from] FactError),
    #[error(transparent)]
    Mlsd(#[from] MlsdError),
}
