//! What a caller asks of a pair between copies: a file's size (the evidence that resolves an
//! interrupted append), its modify time and whether a server offers `REST STREAM` (what a
//! resumable copy needs), DELE and RMD; and [`ActionError`], what such a question ends in.

use bftp_core::reply::{CommandKind, Disposition};

use super::{index, outcome, Pair, SizeAnswer};
use crate::parse::Reply;
use crate::session::SessionError;
use crate::transcript::Side;

impl Pair {
    /// SIZE of `path` on `side`, in image type: the evidence the scheduler needs to
    /// resolve an interrupted APPE (RULES.md §4.3). `Ok(None)`: 550, no such file.
    /// A server without SIZE is an error ([`ActionError::NotSupported`]), never a
    /// size of 0: an append must not be repeated on a guess.
    pub async fn size(&mut self, side: Side, path: &str) -> Result<Option<u64>, ActionError> {
        self.before_action().await;
        self.usable_for(side, "SIZE", path)?;
        match self.size_answer(side, path).await {
            SizeAnswer::Size(size) => Ok(Some(size)),
            SizeAnswer::NoFile(_) => Ok(None),
            SizeAnswer::Unavailable(reason) => Err(ActionError::NotSupported {
                side,
                host: self.host(side).to_owned(),
                command: "SIZE".into(),
                reason,
            }),
            SizeAnswer::Failed(result, disposition) => {
                Err(self.action_error(side, "SIZE", result, disposition))
            }
        }
    }

    /// The modify time of `path` on `side` (MDTM, RFC 3659: `YYYYMMDDHHMMSS[.sss]`), as the
    /// server wrote it: what shows a source unchanged between two tries of a resumable copy.
    /// `None`: no such file, no MDTM, or an answer that is not a time.
    pub async fn modified(&mut self, side: Side, path: &str) -> Option<String> {
        self.before_action().await;
        self.usable_for(side, "MDTM", path).ok()?;
        let result = self.exchange(side, &format!("MDTM {path}")).await;
        let reply = result.ok().filter(|r| r.code().get() == 213)?;
        let text = reply.text();
        let time = text.trim();
        let digits = time.split('.').next().unwrap_or("");
        (digits.len() == 14 && time.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then(|| time.to_owned())
    }

    /// Whether `side` offers `REST STREAM` (RFC 3659) in its FEAT, asked once.
    pub async fn offers_rest(&mut self, side: Side) -> bool {
        if self.rest_stream[index(side)].is_none() {
            self.before_action().await;
            self.ask_features(side).await;
        }
        self.rest_stream[index(side)].unwrap_or(false)
    }

    /// DELE `path` on `side` (the source of a `move` once the copy is proven, a
    /// partial STOU file): the 2yz reply, or the refusal (a 550 may mean "already
    /// gone" or "not allowed": the reply says which).
    pub async fn delete(&mut self, side: Side, path: &str) -> Result<Reply, ActionError> {
        self.before_action().await;
        self.usable_for(side, "DELE", path)?;
        let result = self.exchange(side, &format!("DELE {path}")).await;
        match (self.classify(side, CommandKind::Dele, &result), result) {
            (Disposition::Done, Ok(reply)) => Ok(reply),
            (disposition, result) => Err(self.action_error(side, "DELE", result, disposition)),
        }
    }

    /// RMD `path` on `side` (an emptied source directory of a moved tree): the 2yz reply,
    /// or the refusal (a directory not empty is refused by the server, and stays).
    pub async fn remove_dir(&mut self, side: Side, path: &str) -> Result<Reply, ActionError> {
        self.before_action().await;
        self.usable_for(side, "RMD", path)?;
        let result = self.exchange(side, &format!("RMD {path}")).await;
        match (self.classify(side, CommandKind::Other, &result), result) {
            (Disposition::Done, Ok(reply)) => Ok(reply),
            (disposition, result) => Err(self.action_error(side, "RMD", result, disposition)),
        }
    }

    /// An action between copies needs both connections free: steps done ahead for a next
    /// copy are called off first (a failure to log in again shows as a closed pair).
    pub(super) async fn before_action(&mut self) {
        self.next_hint = None;
        if self
            .settle_ahead("another command before the next copy")
            .await
            .is_err()
        {
            self.dead = Some("logging in again after calling off a transfer failed".into());
        }
    }

    pub(super) fn usable_for(
        &self,
        side: Side,
        command: &str,
        path: &str,
    ) -> Result<(), ActionError> {
        if let Some(reason) = self.dead_reason() {
            return Err(ActionError::Closed { reason });
        }
        crate::parse::check_argument(path).map_err(|error| ActionError::BadPath {
            side,
            command: command.to_owned(),
            path: path.to_owned(),
            error,
        })
    }

    pub(super) fn action_error(
        &self,
        side: Side,
        command: &str,
        result: Result<Reply, SessionError>,
        disposition: Disposition,
    ) -> ActionError {
        let host = self.host(side).to_owned();
        let command = command.to_owned();
        match result {
            Ok(reply) => ActionError::Refused {
                side,
                host,
                command,
                reply,
                disposition,
            },
            Err(error) => ActionError::Session {
                side,
                host,
                command,
                disposition,
                error: Box::new(error),
            },
        }
    }
}

/// Why [`Pair::size`] or [`Pair::delete`] gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("the connection pair was closed ({reason}); open a new one")]
    Closed { reason: String },
    #[error("{side} server {host}: {command} answered {reply}")]
    Refused {
        side: Side,
        host: String,
        command: String,
        reply: Reply,
        disposition: Disposition,
    },
    #[error("{side} server {host}: {command}: {error}")]
    Session {
        side: Side,
        host: String,
        command: String,
        disposition: Disposition,
        error: Box<SessionError>,
    },
    #[error("{side} server {host} offers no {command}: {reason}")]
    NotSupported {
        side: Side,
        host: String,
        command: String,
        reason: String,
    },
    #[error("{command} {path:?} on the {side}: {error}")]
    BadPath {
        side: Side,
        command: String,
        path: String,
        error: crate::parse::NameError,
    },
}

impl ActionError {
    /// The retry decision (RULES.md §5).
    pub fn disposition(&self) -> Disposition {
        match self {
            ActionError::Closed { .. } => outcome::connection_gone(),
            ActionError::Refused { disposition, .. } | ActionError::Session { disposition, .. } => {
                *disposition
            }
            ActionError::NotSupported { .. } => Disposition::NotSupported,
            ActionError::BadPath { .. } => {
                Disposition::Permanent(bftp_core::reply::PermanentKind::NameNotAllowed)
            }
        }
    }
}
