//! What a copy's ledger entry becomes, and writing it.

use super::*;

/// A copy's ledger entry's counts and the servers' last replies, whatever the outcome.
pub(super) fn replies(m: &Member, report: &bftp_ftp::AttemptReport) -> MemberUpdate {
    MemberUpdate {
        attempts: Some(m.attempts + 1),
        source_reply: last(
            report
                .source_final
                .as_ref()
                .or(report.source_reply.as_ref()),
        ),
        dest_reply: last(
            report
                .destination_final
                .as_ref()
                .or(report.destination_reply.as_ref()),
        ),
        ..Default::default()
    }
}

/// A copy's summary with its proof: a proven success names its proof (in the member's
/// `proof` and after its evidence); a digest mismatch or a proof short of what the job needs
/// is a transient failure instead; for a unique copy, whose file stays (a second STOU would
/// make a second file, and a mismatched name may be another's), `uncertain`.
pub(super) fn with_proof(
    summary: ledger::Outcome,
    proven: Option<crate::lanes::proof::Proven>,
    unique: bool,
    replies: &mut MemberUpdate,
) -> ledger::Outcome {
    use crate::lanes::proof::Proven;
    match (summary, proven) {
        (
            ledger::Outcome::Succeeded {
                bytes,
                size,
                evidence,
                stored_as,
            },
            Some(proven),
        ) => match proven {
            Proven::Ok { level, words } => {
                replies.proof = Some(level.as_str().to_owned());
                let evidence = match words {
                    Some(words) => format!("{evidence}; {words}"),
                    None => evidence,
                };
                ledger::Outcome::Succeeded {
                    bytes,
                    size,
                    evidence,
                    stored_as,
                }
            }
            Proven::Mismatch { failure, deleted } => ledger::Outcome::Transient {
                destination: ledger::Destination {
                    touched: true,
                    kept: (!deleted && unique).then(|| failure.clone()),
                },
                failure,
                cause: ledger::Cause::Other,
            },
            Proven::Short { failure } => ledger::Outcome::Transient {
                destination: ledger::Destination {
                    touched: true,
                    kept: unique.then(|| format!("{failure}: the stored file is kept")),
                },
                failure,
                cause: ledger::Cause::Other,
            },
        },
        (summary, _) => summary,
    }
}

pub(super) fn source_size(check: &bftp_ftp::SizeCheck) -> Option<u64> {
    match check {
        bftp_ftp::SizeCheck::Equal { source, .. } => Some(*source),
        bftp_ftp::SizeCheck::TextType { source, .. } => *source,
        bftp_ftp::SizeCheck::NotAvailable(_) => None,
    }
}

impl Run {
    /// What the ledger needs to know of a copy's outcome beyond the outcome itself, for
    /// `bftp_core::ledger::record`: whether the name a unique copy was stored under is
    /// another's, which files a failed unique copy left and kept (those provably ours are
    /// deleted here), and whether a transient refusal came back unchanged (recorded in the
    /// capability memory; a refusal it settles left nothing on the destination to look at).
    pub(super) async fn summarize(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        outcome: CopyOutcome,
        report: &bftp_ftp::AttemptReport,
        unique: UniqueCopy,
    ) -> Result<ledger::Outcome, AttemptEnd> {
        let m = mc.m;
        let data_connection = data_connection_failed(&outcome);
        Ok(match outcome {
            CopyOutcome::Succeeded {
                bytes,
                size_check,
                stou_name,
                ..
            } => {
                let stored_as = match stou_name {
                    Some(name) => {
                        let mut also_given_to = unique.collided;
                        if !unique.announced.contains(&name) {
                            if let Some(other) = self.claim(mc.dir(), m, &name).await {
                                also_given_to.get_or_insert(other);
                            }
                        }
                        Some(ledger::StoredAs {
                            name,
                            also_given_to,
                        })
                    }
                    None => None,
                };
                ledger::Outcome::Succeeded {
                    bytes,
                    // The size SIZE gave the copy, where the listing gave none (a
                    // single-file job's member is known before any SIZE).
                    size: source_size(&size_check).filter(|_| m.size.is_none()),
                    evidence: crate::views::engine::evidence(&size_check),
                    stored_as,
                }
            }
            CopyOutcome::Permanent { failure, .. } => {
                let destination = self.left(pair, mc, report, &unique, false).await;
                ledger::Outcome::Permanent {
                    failure: failure.to_string(),
                    destination,
                }
            }
            CopyOutcome::Transient { kind, failure, .. } => {
                // The same failure of this name again: the name is one the server never
                // stores as asked.
                let settled = self
                    .settle_name(mc, kind, &failure)
                    .await
                    .map_err(store_failed)?;
                if let Some(settled) = settled {
                    return Ok(ledger::Outcome::RepeatedRefusal {
                        state: settled.state,
                        detail: settled.detail,
                    });
                }
                // The same refusal again from this server: its configuration, not a moment.
                let settled = self
                    .settle_repeated(pair, mc, kind, &failure, report)
                    .await
                    .map_err(store_failed)?;
                if let Some(settled) = settled {
                    return Ok(ledger::Outcome::RepeatedRefusal {
                        state: settled.state,
                        detail: settled.detail,
                    });
                }
                let mismatch = matches!(failure, bftp_ftp::Failure::SizeMismatch { .. });
                let destination = self.left(pair, mc, report, &unique, mismatch).await;
                let cause = if data_connection {
                    ledger::Cause::DataConnection
                } else if matches!(kind, TransientKind::UniqueNameTaken) {
                    ledger::Cause::UniqueNameTaken
                } else {
                    ledger::Cause::Other
                };
                ledger::Outcome::Transient {
                    failure: failure.to_string(),
                    destination,
                    cause,
                }
            }
        })
    }
}

impl Run {
    /// What a failed copy left on the destination; a unique copy's files are settled first
    /// ([`Run::unique_left`]: deleted where provably ours, else kept, and why).
    pub(super) async fn left(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        report: &bftp_ftp::AttemptReport,
        unique: &UniqueCopy,
        mismatch: bool,
    ) -> ledger::Destination {
        let kept = if mc.spec.dest_command == DestCommand::Unique {
            self.unique_left(pair, mc, report, unique, mismatch).await
        } else {
            None
        };
        ledger::Destination {
            touched: report.destination_touched,
            kept,
        }
    }
}

impl Run {
    /// Writes a copy's ledger change and counts the file (a failure before the write, a
    /// success once it is durable); then the DELE of a `move`'s source, whose intent the
    /// success wrote. `Some`: the member stays pending, and why.
    pub(super) async fn apply(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        change: ledger::Change,
        replies: MemberUpdate,
        duration: Duration,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let (m, src_path, attempt) = (mc.m, mc.src_path.as_str(), mc.attempt);
        let dest_command = mc.spec.dest_command;
        let intent = match change.intent {
            ledger::IntentChange::Clear => Some(None),
            ledger::IntentChange::Keep => None,
            ledger::IntentChange::DeleteSource => Some(Some(Intent::Delete {
                path: Some(src_path.to_owned()),
            })),
        };
        let u = MemberUpdate {
            state: match change.next {
                ledger::Next::Settled(state) => Some(state),
                ledger::Next::Pending { .. } => None,
            },
            bytes: change.bytes,
            size: change.size,
            detail: Some(change.detail.clone()),
            intent,
            stored_as: change.stored_as,
            tls: pair.tls_summary(),
            ..replies
        };
        match change.next {
            ledger::Next::Settled(MemberState::Succeeded) => {}
            ledger::Next::Settled(state) => {
                let counted = FileResult::FailedPermanent.unless_uncertain(Some(state));
                self.ctx.metrics.file(counted, duration, None);
            }
            ledger::Next::Pending { .. } => {
                self.ctx.metrics.file(FileResult::Transient, duration, None)
            }
        }
        // A replace copy's success with nothing to do after it: nothing waits for its
        // record, so it joins the attempt's grouped writes (`crate::attempt::ledger_batch`).
        let grouped = change.next == ledger::Next::Settled(MemberState::Succeeded)
            && change.intent == ledger::IntentChange::Clear
            && m.intent.is_none()
            && dest_command == DestCommand::Replace;
        if grouped {
            self.batch
                .push(m.index, u)
                .map_err(|e| AttemptEnd::Transient {
                    reason: format!("the daemon could not record progress: {e}"),
                })?;
        } else {
            self.update(m.index, u).await.map_err(store_failed)?;
        }
        match change.next {
            ledger::Next::Settled(MemberState::Succeeded) => {}
            ledger::Next::Settled(_) => return Ok(None),
            ledger::Next::Pending { second_try } => {
                return Ok(Some(Pending {
                    reason: change.detail,
                    again: second_try,
                }))
            }
        }
        self.ctx
            .metrics
            .file(FileResult::Succeeded, duration, change.bytes);
        tracing::info!(job = self.id.0, member = %m.name, attempt, "file copied");
        if change.intent == ledger::IntentChange::DeleteSource {
            return self
                .delete_source(pair, m.index, src_path, &change.detail)
                .await;
        }
        Ok(None)
    }
}
