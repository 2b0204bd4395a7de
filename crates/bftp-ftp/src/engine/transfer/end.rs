//! How a copy ends when it does not succeed: the other role order after a refusal, the
//! job-level FXP refusal, fallbacks, transient and permanent failures, and the outcome.

use super::*;

impl Attempt<'_> {
    /// This role order failed because a server refused the foreign address: try the
    /// other order, or give up with the settings to change.
    pub(super) async fn next_order(&mut self, refusal: Refusal) -> Phase {
        self.pair.note(refusal.side(), &refusal.to_string());
        self.refusals.push(refusal.clone());
        let Some(passive) = self.orders.pop_front() else {
            return self.fxp_refused();
        };
        if let Err(error) = self.reopen_closed(&refusal.to_string()).await {
            return Phase::Done(Err(error));
        }
        let job_type = self.pair.params.transfer_type;
        for side in [Side::Source, Side::Destination] {
            if let Err((result, disposition)) = self.pair.ensure_type(side, job_type).await {
                return self.fail(side, "TYPE", result, Some(disposition));
            }
        }
        self.fallback(Fallback::RolesSwapped {
            reason: refusal.to_string(),
        });
        Phase::Passive { passive }
    }

    /// Log in again on each closed connection.
    pub(super) async fn reopen_closed(&mut self, reason: &str) -> Result<(), PairError> {
        for side in [Side::Source, Side::Destination] {
            if !self.pair.session(side).is_open() {
                self.pair.reconnect(side, reason).await?;
                self.fallback(Fallback::Reconnected {
                    side,
                    reason: reason.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// A data command to the destination that did not start may still have created
    /// or truncated the file: a data-connection or local error (425, 426, 451, 452),
    /// or no reply at all. A refusal of the command itself (450, 5yz) has not.
    pub(super) fn refused(&mut self, side: Side, result: &Result<Reply, SessionError>) {
        if side != Side::Destination {
            return;
        }
        self.restart_refused(result);
        let maybe_created = match result {
            Ok(reply) => matches!(reply.code().get(), 100..=299 | 425 | 426 | 451 | 452),
            Err(_) => true,
        };
        if maybe_created {
            self.report.destination_touched = true;
        }
    }

    /// Both role orders were refused: a relay under `auto` (the refusal kept in the report
    /// for the pair's memory), else the job-level failure with the settings to change.
    pub(super) fn fxp_refused(&mut self) -> Phase {
        // No side offered a passive mode that may be used: no FXP setting would help.
        let no_passive = self.refusals.iter().all(|r| {
            matches!(
                r,
                Refusal::NoPassive { .. } | Refusal::PrivilegedPort { .. }
            )
        });
        let detail = self
            .refusals
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if !no_passive && self.pair.plan == Plan::FxpThenRelay {
            // `auto`: through bftpd instead, for this copy and the pair's later ones.
            let reason = RelayReason::Refused {
                reply: detail.clone(),
            };
            self.report.fxp_refused = Some(detail);
            self.pair.plan = Plan::Relay(reason.clone());
            return Phase::Relay { reason };
        }
        let failure = if no_passive {
            JobFailure::NoPassiveMode { detail }
        } else {
            JobFailure::FxpRefused {
                explanation: format!("{detail}. {FXP_SETTINGS}"),
                source_reply: self.pair.last[0].clone(),
                destination_reply: self.pair.last[1].clone(),
            }
        };
        Phase::Done(Err(PairError {
            failure,
            disposition: Disposition::Permanent(PermanentKind::CommandRejected),
            transcript: Default::default(),
        }))
    }

    pub(super) fn fallback(&mut self, fallback: Fallback) {
        let side = match &fallback {
            Fallback::ExtendedPassive { side, .. }
            | Fallback::ExtendedPort { side, .. }
            | Fallback::ForeignPasvHostIgnored { side, .. }
            | Fallback::SizeUnavailable { side, .. }
            | Fallback::Reconnected { side, .. } => *side,
            Fallback::PartialDeleted { .. } => Side::Destination,
            Fallback::RolesSwapped { .. } | Fallback::ListedWithNlst { .. } => Side::Source,
        };
        self.pair.note(side, &fallback.to_string());
        self.report.fallbacks.push(fallback);
    }

    /// The member fails with the reply (or session failure) of `side` to `command`.
    pub(super) fn fail(
        &mut self,
        side: Side,
        command: &str,
        result: Result<Reply, SessionError>,
        disposition: Option<Disposition>,
    ) -> Phase {
        let disposition = disposition.unwrap_or_else(|| {
            self.pair.classify(
                side,
                CommandKind::from_verb(&super::super::verb(command)),
                &result,
            )
        });
        let host = self.pair.host(side).to_owned();
        let command = super::super::verb(command);
        let failure = match result {
            Ok(reply) => Failure::Reply {
                side,
                host,
                command,
                reply,
            },
            Err(error) => Failure::Session {
                side,
                host,
                command,
                error,
            },
        };
        match disposition {
            Disposition::Permanent(kind) => self.permanent(kind, failure),
            Disposition::Transient(kind) => self.transient(kind, failure),
            // A positive or fallback reply where the sequence cannot go on (a 3yz to
            // RETR, a "not supported" for a needed command): a protocol error.
            _ => self.transient(TransientKind::Protocol, failure),
        }
    }

    pub(super) fn transient(&mut self, kind: TransientKind, failure: Failure) -> Phase {
        Phase::Done(Ok(CopyOutcome::Transient {
            kind,
            failure,
            connection_lost: false,
            report: AttemptReport::default(),
        }))
    }

    pub(super) fn permanent(&mut self, kind: PermanentKind, failure: Failure) -> Phase {
        Phase::Done(Ok(CopyOutcome::Permanent {
            kind,
            failure,
            report: AttemptReport::default(),
        }))
    }

    /// Leave the pair ready for the next member and fill in the report.
    pub(super) async fn finish(
        mut self,
        result: Result<CopyOutcome, PairError>,
    ) -> Result<CopyOutcome, PairError> {
        // Replies sent ahead and not claimed (a copy that failed after its RETR): read, so
        // that the connection is in step for the next command.
        self.pair.drain_owed(Side::Source).await;
        self.pair.drain_owed(Side::Destination).await;
        if !matches!(result, Ok(CopyOutcome::Succeeded { .. })) {
            self.pair.mark_errored();
        }
        self.pair.deadline = None;
        if self.report.destination_touched && !matches!(result, Ok(CopyOutcome::Succeeded { .. })) {
            self.clean_up().await;
        }
        if self.changed_directory && self.pair.session(Side::Destination).is_open() {
            let back = match self.pair.home(Side::Destination).await {
                Some(home) => format!("CWD {home}"),
                None => "CDUP".to_owned(),
            };
            let result = self.pair.exchange(Side::Destination, &back).await;
            if !matches!(result, Ok(ref r) if r.code().class() == bftp_core::reply::ReplyClass::Completion)
            {
                // The next member would land in the wrong directory: close instead.
                self.pair
                    .close_all("could not return to the login directory after STOU");
            }
        }
        // A 421, a transport failure or a protocol error means the control connection is
        // gone or out of step, even when our side of the socket still looks open: close the
        // pair so the caller reopens instead of spending the next member on a dead one.
        if matches!(&result, Ok(CopyOutcome::Transient { kind, .. }) if kind.connection_lost()) {
            self.pair
                .close_all("the server closed or desynchronised the control connection");
        }
        let usable = self.pair.is_usable();
        let mut report = std::mem::take(&mut self.report);
        report.source_reply = self.pair.last[0].take();
        report.destination_reply = self.pair.last[1].take();
        report.duration = self.started.elapsed();
        report.transcript = self.pair.recorder.take();
        let (path, bytes, success) = (
            self.request.source_path.clone(),
            match &result {
                Ok(CopyOutcome::Succeeded { bytes, .. }) => *bytes,
                _ => None,
            },
            matches!(result, Ok(CopyOutcome::Succeeded { .. })),
        );
        self.pair.progress.send_replace(Progress::Finished {
            path,
            bytes,
            success,
        });
        match result {
            Ok(mut outcome) => {
                match &mut outcome {
                    CopyOutcome::Succeeded { report: r, .. }
                    | CopyOutcome::Permanent { report: r, .. } => *r = report,
                    CopyOutcome::Transient {
                        report: r,
                        connection_lost,
                        ..
                    } => {
                        *r = report;
                        *connection_lost = !usable;
                    }
                }
                Ok(outcome)
            }
            Err(mut error) => {
                error.transcript = report.transcript;
                if !matches!(error.failure, JobFailure::FxpRefused { .. }) {
                    return Err(error);
                }
                if let JobFailure::FxpRefused {
                    source_reply,
                    destination_reply,
                    ..
                } = &mut error.failure
                {
                    *source_reply = report.source_reply.or(source_reply.take());
                    *destination_reply = report.destination_reply.or(destination_reply.take());
                }
                Err(error)
            }
        }
    }
}
