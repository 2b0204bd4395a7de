//! The seam between a member's steps and its pair: the commands the resolve and delete steps
//! send, which a test fakes (as [`crate::lanes::Work::Conn`] is for the lanes), so that the
//! steps' rules are table-tested without FTP servers.

use bftp_ftp::parse::Reply;
use bftp_ftp::{ActionError, Pair, Side};

/// The commands a step sends on its pair.
pub(super) trait Conn {
    /// SIZE of `path` on `side`: `None` when there is no such file.
    async fn size(&mut self, side: Side, path: &str) -> Result<Option<u64>, ActionError>;
    /// DELE of `path` on `side`.
    async fn delete(&mut self, side: Side, path: &str) -> Result<Reply, ActionError>;
}

impl Conn for Pair {
    async fn size(&mut self, side: Side, path: &str) -> Result<Option<u64>, ActionError> {
        Pair::size(self, side, path).await
    }

    async fn delete(&mut self, side: Side, path: &str) -> Result<Reply, ActionError> {
        Pair::delete(self, side, path).await
    }
}

/// A pair that answers from a script, and an attempt around a test's store, for the steps'
/// table tests.
#[cfg(test)]
pub(super) mod fake {
    use std::sync::{Arc, Mutex};

    use bftp_core::reply::{Disposition, PermanentKind, ReplyCode, TransientKind};
    use bftp_ftp::parse::Reply;
    use bftp_ftp::{ActionError, Side};
    use bftp_store::{JobId, JobStore};

    use super::Conn;
    use crate::attempt::{AttemptCtx, Run};

    /// What the fake server says to one command.
    #[derive(Clone, Copy, Debug)]
    pub enum Says {
        /// SIZE: the file has this size.
        Size(u64),
        /// SIZE: 550, no such file.
        NoFile,
        /// DELE: 250.
        Deleted,
        /// A refusal with this code (5yz permanent, 4yz transient).
        Refused(u16),
        /// The connection is gone.
        Gone,
    }

    /// Answers SIZE and DELE per side from a script; every command sent is noted.
    #[derive(Default)]
    pub struct FakePair {
        pub size_src: Option<Says>,
        pub size_dst: Option<Says>,
        pub dele_src: Option<Says>,
        pub sent: Vec<String>,
    }

    fn refused(side: Side, command: &str, code: u16) -> ActionError {
        let disposition = if code >= 500 {
            Disposition::Permanent(PermanentKind::FileUnavailable)
        } else {
            Disposition::Transient(TransientKind::FileBusy)
        };
        ActionError::Refused {
            side,
            host: "fake".into(),
            command: command.into(),
            reply: Reply::new(ReplyCode::new(code).unwrap(), vec!["no".into()]),
            disposition,
        }
    }

    fn gone() -> ActionError {
        ActionError::Closed {
            reason: "the fake connection is gone".into(),
        }
    }

    impl Conn for FakePair {
        async fn size(&mut self, side: Side, path: &str) -> Result<Option<u64>, ActionError> {
            self.sent.push(format!("SIZE {side} {path}"));
            let says = match side {
                Side::Source => self.size_src,
                Side::Destination => self.size_dst,
            };
            match says {
                Some(Says::Size(n)) => Ok(Some(n)),
                Some(Says::NoFile) => Ok(None),
                Some(Says::Refused(code)) => Err(refused(side, "SIZE", code)),
                _ => Err(gone()),
            }
        }

        async fn delete(&mut self, side: Side, path: &str) -> Result<Reply, ActionError> {
            self.sent.push(format!("DELE {side} {path}"));
            match (side, self.dele_src) {
                (Side::Source, Some(Says::Deleted)) => Ok(Reply::new(
                    ReplyCode::new(250).unwrap(),
                    vec!["deleted".into()],
                )),
                (_, Some(Says::Refused(code))) => Err(refused(side, "DELE", code)),
                _ => Err(gone()),
            }
        }
    }

    /// An attempt of job `id` in `store`, with no connection of its own.
    pub fn run(store: Arc<dyn JobStore>, id: JobId) -> Run {
        let store: crate::store::Store = store.into();
        let clock = crate::clock::Clock::system();
        let ctx = AttemptCtx {
            store: store.clone(),
            secrets: Arc::new(crate::secrets::Secrets::from_master(&[7; 32])),
            limits: bftp_ftp::Limits::default(),
            check: Arc::new(bftp_ftp::AllowAll),
            hosts: crate::hosts::HostLimits::new(1, 1),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            live: Arc::default(),
            watch_progress: false,
            clock: clock.clone(),
            pairs: crate::hosts::pairs::PairMemories::new(
                store.clone(),
                crate::hosts::pairs::DEFAULT_EXPIRY,
            ),
            resume_from: None,
            data_paths: Default::default(),
            gates: None,
        };
        Run {
            ctx: Arc::new(ctx),
            drain: Default::default(),
            abort: Default::default(),
            id,
            log: Arc::default(),
            claims: Mutex::default(),
            first: Mutex::default(),
            batch: crate::attempt::ledger_batch::Batch::new(store, clock, id),
            gate: None,
            routing: std::sync::OnceLock::new(),
        }
    }
}
