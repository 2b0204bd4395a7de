//! TYPE, MODE and STRU on each side of a pair (RULES.md §2): sent as the job says, with
//! FEAT in the same write while a session's features are unknown, and TYPE changed only when
//! a copy needs another.

use bftp_core::reply::{CommandKind, Disposition};
use bftp_core::TransferType;

use super::{feat_lines, index, verb, Pair, PairError};
use crate::parse::Reply;
use crate::session::SessionError;
use crate::transcript::Side;

impl Pair {
    /// TYPE, MODE and STRU as the job says (RULES.md §2), as custom commands: `TYPE A`,
    /// never `TYPE A N`, which some servers refuse; then FEAT, while `side`'s features are
    /// not known (a new session): it travels in the same write, so learning them costs no
    /// round trip of its own.
    pub(super) fn params_lines(&self, side: Side) -> Vec<(CommandKind, String)> {
        let mut lines = vec![
            (
                CommandKind::Type,
                format!("TYPE {}", self.params.transfer_type.ftp_arg()),
            ),
            (
                CommandKind::Mode,
                format!("MODE {}", self.params.mode.ftp_arg()),
            ),
            (
                CommandKind::Stru,
                format!("STRU {}", self.params.structure.ftp_arg()),
            ),
        ];
        if !self.proof.knows(side) {
            lines.push((CommandKind::Feat, "FEAT".to_owned()));
        }
        lines
    }

    /// TYPE, MODE and STRU (and FEAT, see [`Pair::params_lines`]) on `side`, sent together
    /// and answered in order: one round trip.
    pub(super) async fn set_params(&mut self, side: Side) -> Result<(), PairError> {
        let lines = self.params_lines(side);
        self.send_params(side, &lines).await?;
        self.read_params(side, &lines).await
    }

    /// The commands of [`Pair::set_params`] in one write; [`Pair::read_params`] reads
    /// their replies.
    pub(super) async fn send_params(
        &mut self,
        side: Side,
        lines: &[(CommandKind, String)],
    ) -> Result<(), PairError> {
        self.drain_owed(side).await;
        let batch: Vec<String> = lines.iter().map(|(_, l)| l.clone()).collect();
        if let Err(e) = self.session(side).send_batch(&batch).await {
            let result = Err(e);
            let (kind, line) = &lines[0];
            self.remember(side, &verb(line), &result);
            let disposition = self.classify(side, *kind, &result);
            return Err(self.job_error(side, line, result, disposition));
        }
        Ok(())
    }

    /// The replies to [`Pair::send_params`], every one read (the connection stays in step
    /// after a refusal); the first refusal of TYPE, MODE or STRU is the error. FEAT's
    /// features are learnt; a FEAT refused only means none are offered, as when it is
    /// asked alone.
    pub(super) async fn read_params(
        &mut self,
        side: Side,
        lines: &[(CommandKind, String)],
    ) -> Result<(), PairError> {
        let mut failed = None;
        for (kind, line) in lines {
            let deadline = self.reply_deadline();
            let result = self.read_reply(side, &verb(line), deadline).await;
            let closed = result.is_err();
            let disposition = self.classify(side, *kind, &result);
            if *kind == CommandKind::Feat && !closed {
                self.learn_features(side, feat_lines(&result, disposition));
            } else if disposition != Disposition::Done && failed.is_none() {
                failed = Some(self.job_error(side, line, result, disposition));
            }
            if closed {
                break;
            }
        }
        if let Some(error) = failed {
            return Err(error);
        }
        self.types[index(side)] = Some(self.params.transfer_type);
        Ok(())
    }

    /// Put `side` in TYPE `t` if it is not already.
    pub(super) async fn ensure_type(
        &mut self,
        side: Side,
        t: TransferType,
    ) -> Result<(), (Result<Reply, SessionError>, Disposition)> {
        if self.types[index(side)] == Some(t) {
            return Ok(());
        }
        let result = self.exchange(side, &format!("TYPE {}", t.ftp_arg())).await;
        match self.classify(side, CommandKind::Type, &result) {
            Disposition::Done => {
                self.types[index(side)] = Some(t);
                Ok(())
            }
            disposition => {
                self.types[index(side)] = None;
                Err((result, disposition))
            }
        }
    }
}
