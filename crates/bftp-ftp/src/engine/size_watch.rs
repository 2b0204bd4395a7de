//! Seeing a copy's bytes from outside its pair. While a third-party transfer runs, the
//! servers say nothing about bytes on the pair's control connections (and a command sent
//! there then would be answered after the transfer, if at all); but the destination's
//! SIZE of the file being written, asked on a connection of its own, tells how far it
//! got. One login per watched copy, then a SIZE per look.

use bftp_core::TransferType;
use tokio::time::Instant;

use super::{size_on, SizeAnswer};
use crate::limits::{AddressCheck, Limits, ServerLogin};
use crate::session::{ConnectError, Session};
use crate::transcript::{Recorder, Side, TranscriptLimits};

/// A control connection to the destination that only asks SIZE.
pub struct SizeWatch {
    session: Session,
    current: Option<TransferType>,
    host: String,
    limits: Limits,
}

impl SizeWatch {
    /// Connects and logs in to `login` (the destination of the copy to watch).
    /// Every command of it, the login's too, goes only if `gate` admits it
    /// ([`crate::SendGate`]).
    pub async fn open(
        login: &ServerLogin,
        limits: &Limits,
        check: &dyn AddressCheck,
        gate: Option<std::sync::Arc<dyn crate::SendGate>>,
    ) -> Result<SizeWatch, ConnectError> {
        // Its lines are no part of the job's transcript: what it says is only a figure.
        let recorder = Recorder::new(
            TranscriptLimits {
                max_entries: 2,
                max_entry_chars: 80,
            },
            ServerLogin::scrubber(&[login]),
        );
        let session =
            Session::connect_gated(Side::Destination, login, limits, check, recorder, gate).await?;
        Ok(SizeWatch {
            session,
            current: None,
            host: login.host.clone(),
            limits: limits.clone(),
        })
    }

    /// The size of `path` now, in image type; `None` when SIZE does not tell (no such
    /// file yet, SIZE refused or unreadable, the connection gone).
    pub async fn size(&mut self, path: &str) -> Option<u64> {
        if !self.session.is_open() {
            return None;
        }
        let deadline = Instant::now() + self.limits.reply_timeout;
        let (answer, _) = size_on(
            &mut self.session,
            &mut self.current,
            &self.host,
            &self.limits,
            deadline,
            path,
        )
        .await;
        match answer {
            SizeAnswer::Size(size) => Some(size),
            _ => None,
        }
    }

    /// QUIT, bounded by the session's own timeouts.
    pub async fn close(mut self) {
        self.session.quit().await;
    }
}
