//! A copy that resumes where a cut one stopped (RULES.md §14): `REST offset` to each server
//! right before its data command. The caller decides the offset (`bftp_core::resume`); a
//! server that refuses it ends the copy as transient (a data-connection kind: worth a second
//! try at once), its reply reported so that the caller does not ask again.

use super::*;

impl Attempt<'_> {
    /// `REST offset` to `side` before its data command when this copy resumes; 350 goes on.
    /// `Err`: the copy's end, the refusal in the report.
    pub(super) async fn rest(&mut self, side: Side) -> Result<(), Phase> {
        let Some(offset) = self.resume.filter(|&o| o > 0) else {
            return Ok(());
        };
        let line = format!("REST {offset}");
        let result = self.pair.exchange(side, &line).await;
        if matches!(&result, Ok(reply) if reply.code().get() == 350) {
            self.report.resumed_from = Some(offset);
            return Ok(());
        }
        self.report.resumed_from = None;
        self.report.resume_refused = Some((
            side,
            format!(
                "the {side} server {} answered {line}: {}",
                self.pair.host(side),
                describe(&result)
            ),
        ));
        // Not the file's fault, and not for good: the copy is worth another try at once,
        // which the caller makes without REST (it remembers the refusal).
        match result {
            Ok(reply) => Err(self.transient(
                TransientKind::DataConnection,
                Failure::Reply {
                    side,
                    host: self.pair.host(side).to_owned(),
                    command: "REST".into(),
                    reply,
                },
            )),
            Err(error) => Err(self.fail(side, &line, Err(error), None)),
        }
    }

    /// A storing command refused right after its `REST`: the destination will not take a
    /// restarted STOR (proFTPD's stock `AllowStoreRestart off`), reported for the caller.
    pub(super) fn restart_refused(&mut self, result: &Result<Reply, SessionError>) {
        if self.resume.unwrap_or(0) == 0 {
            return;
        }
        if let Ok(reply) = result {
            if reply.code().get() >= 400 {
                self.report.resumed_from = None;
                self.report.resume_refused = Some((
                    Side::Destination,
                    format!(
                        "the destination server {} refused {} after REST: {reply}",
                        self.pair.host(Side::Destination),
                        self.command_verb(Side::Destination)
                    ),
                ));
            }
        }
    }
}
