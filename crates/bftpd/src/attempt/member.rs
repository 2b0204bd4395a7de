//! One member's life, step by step: resolve, fence, resume point, copy, prove, record.

use super::*;

/// One member's state through its steps: the job's spec, the member as the attempt found
/// it, its paths, and a unique copy's hold on its destination directory.
pub(super) struct MemberCtx<'a> {
    pub(super) spec: &'a JobSpec,
    pub(super) m: &'a Member,
    pub(super) attempt: u32,
    pub(super) src_path: String,
    /// The copy's request, completed by the fence (the source's size) and the copy (the
    /// channel a STOU announces its names on).
    pub(super) req: CopyRequest,
    /// A unique copy holds its destination directory from the resolution to the clean-up:
    /// no other STOU of this daemon runs into it meanwhile.
    pub(super) dir: Option<DirGuard>,
}

impl MemberCtx<'_> {
    pub(super) fn dir(&self) -> Option<&DirGuard> {
        self.dir.as_ref()
    }
}

impl Run {
    /// One member: resolve an interrupted attempt's intent, fence, copy, prove, record.
    /// `Ok(Some(pending))`: it stays pending for a retry; `Err`: the attempt ends.
    pub(super) async fn member(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        attempt: u32,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let mut mc = self.member_ctx(spec, m, attempt).await?;
        // Resolve: an intent an interrupted attempt left is settled before anything else.
        if let Some(intent) = &m.intent {
            if let Some(settled) = self.resolve(pair, &mc, intent).await? {
                return Ok(settled);
            }
        }
        if spec.disposition == Disposition::Delete {
            return self.delete_member(pair, &mc).await;
        }
        // Fence the unrepeatable effects before they happen.
        let source_size = match self.fence(pair, &mut mc).await? {
            Ok(size) if spec.dest_command == DestCommand::Unique => size,
            Ok(_) => None,
            Err(settled) => return Ok(settled),
        };
        // A large replace copy is resumable: it goes on where a cut one stopped.
        self.resume_point(pair, &mut mc).await?;
        // Copy.
        let (result, unique) = self.copy_announced(pair, &mut mc, source_size).await?;
        let mut outcome = self.copied(pair, &mc, result, &unique).await?;
        self.keep(outcome.take_transcript());
        let report = outcome.report().clone();
        self.resumed(&mc, &report).await;
        if let Some(routing) = self.routing.get() {
            routing.routed(&report).await;
        }
        let mut replies = replies(m, &report);
        // Prove.
        let proven = self.prove(pair, &mc, &outcome).await;
        // Record.
        let summary = self.summarize(pair, &mc, outcome, &report, unique).await?;
        let change = ledger::record(summary, proven, spec.dest_command, spec.disposition);
        if let Some(level) = change.proof {
            replies.proof = Some(level.as_str().to_owned());
        }
        self.apply(pair, &mc, change, replies, report.duration)
            .await
    }

    /// The member's context; a unique copy first waits for its destination directory.
    pub(super) async fn member_ctx<'a>(
        &self,
        spec: &'a JobSpec,
        m: &'a Member,
        attempt: u32,
    ) -> Result<MemberCtx<'a>, AttemptEnd> {
        let src_path = source_path(spec, &m.name);
        let req = copy_request(spec, &m.name);
        let dir = match (spec.dest_command, &spec.destination) {
            (DestCommand::Unique, Some(d)) if spec.disposition != Disposition::Delete => {
                let key = DirKey::new(&d.host, d.port, &d.user, &req.dest_path);
                let guard = self.ctx.hosts.unique.lock(key).await;
                if self.drain.is_cancelled() || self.abort.is_cancelled() {
                    return Err(AttemptEnd::Interrupted);
                }
                Some(guard)
            }
            _ => None,
        };
        Ok(MemberCtx {
            spec,
            m,
            attempt,
            src_path,
            req,
            dir,
        })
    }
}
