//! A resumable copy (RULES.md §14): a replace copy of a large file records what it begins
//! from (`bftp_core::resume::Base`: the source's size and modify time, the destination's size
//! before) durably before its first byte, and keeps its partial file when it is cut off; a
//! later try goes on from the destination's size when `bftp_core::resume::decide` allows,
//! and starts again otherwise. Each resumed span and each restart goes into the job's history.

use bftp_core::refusal::RefusalKey;
use bftp_core::resume::{self, Base, Decision};
use bftp_ftp::AttemptReport;
use bftp_store::HistoryEvent;

use super::*;

/// The refusal memory's key for a destination that refused a restarted STOR.
pub(super) const RESTART_COMMAND: &str = "REST+STOR";

impl Run {
    /// Makes `mc`'s copy resumable when it is a replace copy of a file of at least `[ftp]
    /// resume_from` bytes (or one that began as such): its offset from `resume::decide`, or
    /// 0 with a new base recorded first. `Err`: the attempt ends (the store failed).
    pub(super) async fn resume_point(
        &self,
        pair: &mut Pair,
        mc: &mut MemberCtx<'_>,
    ) -> Result<(), AttemptEnd> {
        let (spec, m) = (mc.spec, mc.m);
        let Some(threshold) = self.ctx.resume_from else {
            return Ok(());
        };
        // A job whose proof is the relayed stream's hash needs every byte to pass: a resumed
        // copy's stream is only the tail.
        let stream_hash = self.routing.get().is_some_and(|r| r.stream_hash());
        if spec.dest_command != DestCommand::Replace
            || spec.disposition == Disposition::Delete
            || stream_hash
        {
            return Ok(());
        }
        if m.resume.is_none() && m.size.is_some_and(|s| s < threshold) {
            return Ok(());
        }
        let (src, dst) = (mc.req.source_path.clone(), mc.req.dest_path.clone());
        // Errors here are the copy's to meet and report: it asks again.
        let Ok(Some(size)) = pair.size(Side::Source, &src).await else {
            return Ok(());
        };
        // Asked just now: the copy need not ask again.
        mc.req.source_size = Some(size);
        if m.resume.is_none() && size < threshold {
            return Ok(());
        }
        let modified = pair.modified(Side::Source, &src).await;
        let dest_size = pair.size(Side::Destination, &dst).await.ok().flatten();
        if let Some(base) = &m.resume {
            let now = resume::Now {
                size: Some(size),
                modified: modified.clone(),
                dest_size,
                rest: [
                    pair.offers_rest(Side::Source).await,
                    pair.offers_rest(Side::Destination).await,
                ],
                store_restart_refused: self.restart_refused(spec).await,
            };
            match resume::decide(base, &now) {
                Decision::Resume { offset } => {
                    // The history says so once both servers took the REST (`resumed`).
                    mc.req.resume_at = Some(offset);
                    return Ok(());
                }
                Decision::Restart { why } => {
                    self.history("restarted", format!("{}: {why}", m.name))
                        .await;
                }
            }
        }
        let base = (size >= threshold).then_some(Base {
            size,
            modified,
            dest_before: dest_size,
        });
        mc.req.resume_at = base.as_ref().map(|_| 0);
        if base.is_some() || m.resume.is_some() {
            // Durable before the first byte: a crash after it resumes from what it says.
            self.update(
                m.index,
                MemberUpdate {
                    resume: Some(base),
                    ..Default::default()
                },
            )
            .await
            .map_err(store_failed)?;
        }
        Ok(())
    }

    /// Whether the destination is remembered to refuse a restarted STOR.
    async fn restart_refused(&self, spec: &JobSpec) -> bool {
        let Some(d) = &spec.destination else {
            return false;
        };
        let key = RefusalKey::new(&d.host, d.port, RESTART_COMMAND);
        let now = self.ctx.clock.now();
        match self.ctx.store.call(move |s| s.refusal(&key)).await {
            Ok(Some(memory)) => {
                now.0.saturating_sub(memory.last_seen.0) <= bftp_core::refusal::MEMORY_WINDOW_MS
            }
            _ => false,
        }
    }

    /// After a resumable copy: the job's history says from where it went on (each resumed
    /// span), or that a server refused the resume; a destination's refusal is remembered, so
    /// that its next copies start again at once.
    pub(super) async fn resumed(&self, mc: &MemberCtx<'_>, report: &AttemptReport) {
        let name = &mc.m.name;
        if let (Some(offset), Some(size)) = (report.resumed_from, mc.req.source_size) {
            self.history(
                "resumed",
                format!("{name}: bytes {offset}..{size} moved after REST {offset}"),
            )
            .await;
        }
        let Some((side, refused)) = &report.resume_refused else {
            return;
        };
        self.history(
            "restarted",
            format!("{name}: {refused}; the next try starts again"),
        )
        .await;
        let (Side::Destination, Some(d)) = (side, &mc.spec.destination) else {
            return;
        };
        let key = RefusalKey::new(&d.host, d.port, RESTART_COMMAND);
        let reply = report
            .destination_reply
            .as_ref()
            .and_then(|r| r.code)
            .unwrap_or(bftp_core::reply::ReplyCode::new(451).expect("a valid code"));
        let sighting = bftp_core::refusal::Sighting {
            code: reply,
            text: bftp_core::refusal::comparable_text(refused, &[]),
            job: self.id.0,
            attempt: 0,
        };
        let now = self.ctx.clock.now();
        if let Err(e) = self
            .ctx
            .store
            .call(move |s| s.record_refusal(&key, &sighting, now))
            .await
        {
            tracing::warn!(error = %e, "the refusal of a resumed copy could not be remembered");
        }
    }

    /// One line of the job's history (best effort: the ledger holds the member's own).
    async fn history(&self, kind: &str, detail: String) {
        let id = self.id;
        let event = HistoryEvent {
            at: self.ctx.clock.now(),
            kind: kind.to_owned(),
            detail: Some(detail),
        };
        if let Err(e) = self
            .ctx
            .store
            .call(move |s| s.append_history(id, event))
            .await
        {
            tracing::warn!(error = %e, "a line of the job's history could not be written");
        }
    }
}
