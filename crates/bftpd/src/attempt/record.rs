//! What a copy's ledger entry becomes, and writing it.

use super::*;

/// A copy's ledger entry's counts, the servers' last replies and how the bytes travelled
/// (`crate::lanes::route::travelled`: a copy that sent no data command leaves the file's
/// route as it was), whatever the outcome.
pub(super) fn replies(m: &Member, report: &bftp_ftp::AttemptReport) -> MemberUpdate {
    let travelled = crate::lanes::route::travelled(report);
    let (relayed_bytes, stream_sha256) = travelled
        .as_ref()
        .map_or((None, None), |t| (t.relayed_bytes, t.stream_sha256.clone()));
    MemberUpdate {
        route: travelled.map(|t| t.route),
        relayed_bytes,
        stream_sha256,
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

/// What a copy's ledger change writes ([`entry`]).
pub(super) struct Entry {
    /// The member's update.
    pub(super) update: MemberUpdate,
    /// A replace copy's success with nothing to do after it: nothing waits for its record,
    /// so it joins the attempt's grouped writes (`crate::attempt::ledger_batch`).
    pub(super) grouped: bool,
    /// How a failure counts, before its write; `None` for a success, counted once durable.
    pub(super) counted: Option<FileResult>,
}

/// The record step's rule: a copy's ledger change (`bftp_core::ledger::record`) as the
/// member's update over its `replies` (counts, last replies, TLS), with a `move`'s source
/// path in the `Dele` intent; whether it is grouped; how it counts.
pub(super) fn entry(
    change: &ledger::Change,
    m: &Member,
    dest_command: DestCommand,
    src_path: &str,
    replies: MemberUpdate,
) -> Entry {
    let intent = match change.intent {
        ledger::IntentChange::Clear => Some(None),
        ledger::IntentChange::Keep => None,
        ledger::IntentChange::DeleteSource => Some(Some(Intent::Delete {
            path: Some(src_path.to_owned()),
        })),
    };
    let update = MemberUpdate {
        state: match change.next {
            ledger::Next::Settled(state) => Some(state),
            ledger::Next::Pending { .. } => None,
        },
        bytes: change.bytes,
        size: change.size,
        detail: Some(change.detail.clone()),
        intent,
        stored_as: change.stored_as.clone(),
        ..replies
    };
    let counted = match change.next {
        ledger::Next::Settled(MemberState::Succeeded) => None,
        ledger::Next::Settled(state) => {
            Some(FileResult::FailedPermanent.unless_uncertain(Some(state)))
        }
        ledger::Next::Pending { .. } => Some(FileResult::Transient),
    };
    let grouped = change.next == ledger::Next::Settled(MemberState::Succeeded)
        && change.intent == ledger::IntentChange::Clear
        && m.intent.is_none()
        && dest_command == DestCommand::Replace;
    Entry {
        update,
        grouped,
        counted,
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
        // A resumable copy's base goes once the member settles (whatever its end).
        let resumable = mc.req.resume_at.is_some() || m.resume.is_some();
        let settled = matches!(change.next, ledger::Next::Settled(_));
        let replies = MemberUpdate {
            tls: pair.tls_summary(),
            resume: (resumable && settled).then_some(None),
            ..replies
        };
        let entry = entry(&change, m, dest_command, src_path, replies);
        if let Some(counted) = entry.counted {
            self.ctx.metrics.file(counted, duration, None);
        }
        let routed = entry.update.route.clone().map(|route| {
            let succeeded = change.next == ledger::Next::Settled(MemberState::Succeeded);
            (route, succeeded, entry.update.relayed_bytes)
        });
        if entry.grouped {
            self.batch
                .push(m.index, entry.update)
                .map_err(|e| AttemptEnd::Transient {
                    reason: format!("the daemon could not record progress: {e}"),
                })?;
        } else {
            self.update(m.index, entry.update)
                .await
                .map_err(store_failed)?;
        }
        // Once recorded, as a success is counted.
        if let Some((route, succeeded, relayed_bytes)) = routed {
            self.ctx.metrics.routed(&route, succeeded, relayed_bytes);
        }
        match change.next {
            ledger::Next::Settled(MemberState::Succeeded) => {}
            ledger::Next::Settled(_) => {
                if resumable && mc.spec.dest_command == DestCommand::Replace {
                    // Kept for a next try that will not come: a failed copy's partial file
                    // goes, as a replace copy's always did.
                    self.drop_partial(pair, &mc.req.dest_path).await;
                }
                return Ok(None);
            }
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

impl Run {
    /// Deletes a resumable copy's partial file once its member ended without it (best
    /// effort: noted in the attempt's transcript either way).
    async fn drop_partial(&self, pair: &mut Pair, path: &str) {
        let said = match pair.delete(Side::Destination, path).await {
            Ok(reply) => format!("partial file {path:?} of a resumable copy deleted ({reply})"),
            Err(e) => format!("partial file {path:?} of a resumable copy NOT deleted: {e}"),
        };
        pair.note(Side::Destination, &said);
        self.keep(pair.take_transcript());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::ledger::{Change, IntentChange, Next};

    struct Row {
        name: &'static str,
        change: Change,
        /// The member had an intent before the copy (an interrupted one's, resolved).
        had_intent: bool,
        dest_command: DestCommand,
        state: Option<MemberState>,
        /// The intent written: `None` keeps it.
        intent: Option<Option<Intent>>,
        grouped: bool,
        counted: Option<&'static str>,
    }

    fn change(next: Next, intent: IntentChange) -> Change {
        Change {
            next,
            intent,
            detail: "what happened".into(),
            bytes: Some(5),
            size: None,
            stored_as: None,
            proof: None,
        }
    }

    fn rows() -> Vec<Row> {
        let succeeded = Next::Settled(MemberState::Succeeded);
        vec![
            Row {
                name: "a replace copy's success: grouped, counted once durable",
                change: change(succeeded, IntentChange::Clear),
                had_intent: false,
                dest_command: DestCommand::Replace,
                state: Some(MemberState::Succeeded),
                intent: Some(None),
                grouped: true,
                counted: None,
            },
            Row {
                name: "a success after a resolved intent: written at once",
                change: change(succeeded, IntentChange::Clear),
                had_intent: true,
                dest_command: DestCommand::Replace,
                state: Some(MemberState::Succeeded),
                intent: Some(None),
                grouped: false,
                counted: None,
            },
            Row {
                name: "an append's success: written at once",
                change: change(succeeded, IntentChange::Clear),
                had_intent: false,
                dest_command: DestCommand::Append,
                state: Some(MemberState::Succeeded),
                intent: Some(None),
                grouped: false,
                counted: None,
            },
            Row {
                name: "a move's success: the source's DELE intent, written at once",
                change: change(succeeded, IntentChange::DeleteSource),
                had_intent: false,
                dest_command: DestCommand::Replace,
                state: Some(MemberState::Succeeded),
                intent: Some(Some(Intent::Delete {
                    path: Some("src/a.bin".into()),
                })),
                grouped: false,
                counted: None,
            },
            Row {
                name: "a permanent failure: counted failed before its write",
                change: change(
                    Next::Settled(MemberState::FailedPermanent),
                    IntentChange::Clear,
                ),
                had_intent: false,
                dest_command: DestCommand::Replace,
                state: Some(MemberState::FailedPermanent),
                intent: Some(None),
                grouped: false,
                counted: Some("FailedPermanent"),
            },
            Row {
                name: "an uncertain member: counted uncertain",
                change: change(Next::Settled(MemberState::Uncertain), IntentChange::Clear),
                had_intent: false,
                dest_command: DestCommand::Unique,
                state: Some(MemberState::Uncertain),
                intent: Some(None),
                grouped: false,
                counted: Some("Uncertain"),
            },
            Row {
                name: "pending with its intent kept: no state, counted transient",
                change: change(Next::Pending { second_try: false }, IntentChange::Keep),
                had_intent: false,
                dest_command: DestCommand::Append,
                state: None,
                intent: None,
                grouped: false,
                counted: Some("Transient"),
            },
        ]
    }

    /// Issue 29: the member's entry says how the copy travelled, with a relay's evidence;
    /// a copy that sent no data command says nothing (the last route stands).
    #[test]
    fn the_entry_carries_how_the_copy_travelled() {
        use bftp_core::route::{RelayReason, Route};
        let m = NewMember {
            name: "a.bin".into(),
            size: None,
            modified: None,
            refused: None,
        }
        .as_written(0, crate::testkit::T0);
        let relay = Route::Relay(RelayReason::Refused {
            reply: "425 Can't build data connection".into(),
        });
        let report = bftp_ftp::AttemptReport {
            route: Some(relay.clone()),
            relayed: Some(bftp_ftp::RelayStats {
                bytes: 5,
                sha256: Some("ef".repeat(32)),
                mover: bftp_ftp::Mover::Kernel,
                tls: [false, false],
            }),
            ..Default::default()
        };
        let succeeded = change(Next::Settled(MemberState::Succeeded), IntentChange::Clear);
        let e = entry(
            &succeeded,
            &m,
            DestCommand::Replace,
            "src/a.bin",
            replies(&m, &report),
        );
        assert_eq!(
            (
                e.update.route,
                e.update.relayed_bytes,
                e.update.stream_sha256
            ),
            (Some(relay), Some(5), Some("ef".repeat(32)))
        );
        let none = replies(&m, &bftp_ftp::AttemptReport::default());
        let e = entry(&succeeded, &m, DestCommand::Replace, "src/a.bin", none);
        assert_eq!(
            (
                e.update.route,
                e.update.relayed_bytes,
                e.update.stream_sha256
            ),
            (None, None, None)
        );
    }

    #[test]
    fn a_copys_ledger_change_becomes_the_members_entry() {
        for row in rows() {
            let new = NewMember {
                name: "a.bin".into(),
                size: None,
                modified: None,
                refused: None,
            };
            let m = Member {
                intent: row.had_intent.then_some(Intent::Delete { path: None }),
                ..new.as_written(0, crate::testkit::T0)
            };
            let replies = MemberUpdate {
                attempts: Some(1),
                ..Default::default()
            };
            let e = entry(&row.change, &m, row.dest_command, "src/a.bin", replies);
            assert_eq!(e.update.state, row.state, "{}", row.name);
            assert_eq!(e.update.intent, row.intent, "{}", row.name);
            assert_eq!(
                e.update.detail.as_deref(),
                Some("what happened"),
                "{}",
                row.name
            );
            assert_eq!(e.update.bytes, Some(5), "{}", row.name);
            assert_eq!(e.update.attempts, Some(1), "{}: the replies stay", row.name);
            assert_eq!(e.grouped, row.grouped, "{}", row.name);
            let counted = e.counted.map(|c| format!("{c:?}"));
            assert_eq!(counted.as_deref(), row.counted, "{}", row.name);
        }
    }
}
