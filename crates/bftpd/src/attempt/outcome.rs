//! What the ledger needs to know of a copy's outcome beyond the outcome itself, for
//! `bftp_core::ledger::record`: the unique name's owner, what a failed copy left, a refusal
//! that came back unchanged.

use super::*;

/// The source's size as SIZE told the copy, if it did.
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
