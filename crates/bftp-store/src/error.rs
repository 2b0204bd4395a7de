//! The one error type of the store.

use std::fmt;
use std::path::PathBuf;

use bftp_core::InvalidTransition;

use crate::types::{JobId, WatchId};

/// What went wrong in the store, and where.
///
/// Three families, which callers treat differently:
/// - refusals of the request (`NotFound`, `WatchNotFound`, `InvalidTransition`,
///   `RequestKeyConflict`, `MembersAlreadyFrozen`, `MemberNotFound`, `NoReport`,
///   `MemberIsTerminal`, `JobIsFinal`, `TooManyMembers`, `DiskFull`): nothing was
///   written, the store is fine;
/// - a store that cannot be opened (`NotAStore`, `Locked`, `Damaged`, `SchemaTooNew`, `Io`);
/// - storage failures at run time (`Backend`, `Corrupt`, `Panicked`, `NotDurable`): the
///   daemon should stop taking work. `Unreachable` (a shared store's database does not
///   answer) is one too, but nothing was written, and it passes once the database is back. After `NotDurable` or `Panicked` the store refuses every
///   further write, because a later flush succeeding proves nothing about the earlier one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} does not exist")]
    NotFound(JobId),

    #[error("watch {0} does not exist")]
    WatchNotFound(WatchId),

    #[error("job {job}: {source}")]
    InvalidTransition {
        job: JobId,
        #[source]
        source: InvalidTransition,
    },

    #[error("the request key was already used for job {job} with different parameters")]
    RequestKeyConflict { job: JobId },

    #[error("job {job} already has its membership frozen")]
    MembersAlreadyFrozen { job: JobId },

    #[error("job {job} has no member {index}")]
    MemberNotFound { job: JobId, index: u32 },

    #[error("job {0} has no report in the outbox")]
    NoReport(JobId),

    #[error("member {index} of job {job} is already {state}; a terminal member never changes state again")]
    MemberIsTerminal {
        job: JobId,
        index: u32,
        state: &'static str,
    },

    #[error("{count} members are more than one job may have ({max})")]
    TooManyMembers { count: usize, max: usize },

    #[error("job {job} is {state}; its membership can no longer change")]
    JobIsFinal { job: JobId, state: &'static str },

    #[error("{path} is not a bftp store: {found}")]
    NotAStore { path: PathBuf, found: String },

    #[error("the store at {path} is in use by another process (its lock is held)")]
    Locked { path: PathBuf },

    #[error("the store at {path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },

    #[error("the store's schema version {found} is newer than this program supports ({supported}); run a newer bftpd")]
    SchemaTooNew { found: u32, supported: u32 },

    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("corrupt {what} record (key {key}): {reason}")]
    Corrupt {
        what: &'static str,
        key: String,
        reason: String,
    },

    #[error("storage backend failed during {op}: {source}")]
    Backend {
        op: &'static str,
        #[source]
        source: BackendError,
    },

    #[error("storage backend panicked during {op}: {message}; the store refuses further writes")]
    Panicked { op: &'static str, message: String },

    #[error("{op} refused: this node's lease on the job has ended ({detail}); another node carries it now")]
    LeaseLost { op: &'static str, detail: String },

    #[error("{op} could not be made durable: {reason}; the store refuses further writes")]
    NotDurable { op: &'static str, reason: String },

    /// The shared store's database cannot be reached (refused, reset, shutting down, no
    /// answer in time) before anything was written: nothing was stored, and the same call may
    /// succeed once the database is back. (A connection lost while a commit was under way is
    /// `Backend`: whether that commit landed is not known.)
    #[error("{op}: the job store's database cannot be reached ({reason}); nothing was stored")]
    Unreachable { op: &'static str, reason: String },

    /// The PostgreSQL store's backup could not take the database's copy (no `pg_dump`, or it
    /// failed): `command` is what to run instead.
    #[error("the database's copy could not be taken ({reason}); take it with: {command}")]
    DumpFailed { reason: String, command: String },

    /// This store does not implement the operation (a default of the `JobStore` trait).
    #[error("this store does not support {op}")]
    Unsupported { op: &'static str },

    /// The store's filesystem has less free space than the write's reserve: nothing was
    /// written, and the store is fine; the write succeeds again once space is freed.
    #[error("{op} refused: the store's disk ({path}) has {free} bytes free, below the {reserve} bytes kept in reserve; free some space")]
    DiskFull {
        op: &'static str,
        path: PathBuf,
        free: u64,
        reserve: u64,
    },

    /// The event log has no event with this sequence number.
    #[error("event {0} does not exist")]
    EventNotFound(u64),
}

impl StoreError {
    /// True for the refusals that leave the store healthy (nothing was written).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::NotFound(_)
                | StoreError::WatchNotFound(_)
                | StoreError::EventNotFound(_)
                | StoreError::InvalidTransition { .. }
                | StoreError::RequestKeyConflict { .. }
                | StoreError::MembersAlreadyFrozen { .. }
                | StoreError::MemberNotFound { .. }
                | StoreError::NoReport(_)
                | StoreError::MemberIsTerminal { .. }
                | StoreError::JobIsFinal { .. }
                | StoreError::TooManyMembers { .. }
                | StoreError::DiskFull { .. }
        )
    }
}

/// The storage engine's own error, kept opaque so that no other crate depends on the engine.
pub struct BackendError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl BackendError {
    pub(crate) fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        BackendError(Box::new(e))
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

pub(crate) fn backend(op: &'static str) -> impl FnOnce(sled::Error) -> StoreError {
    move |e| StoreError::Backend {
        op,
        source: BackendError::new(e),
    }
}
