//! One member's life, step by step: resolve, fence, copy, prove, record.

use super::*;

impl Run {
    /// One member: resolve an interrupted attempt's intent, fence, copy, record.
    /// `Ok(Some(pending))`: it stays pending for a retry; `Err`: the attempt ends.
    pub(super) async fn member(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        attempt: u32,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let index = m.index;
        let src_path = source_path(spec, &m.name);
        let mut req = copy_request(spec, &m.name);
        // A unique copy holds its destination directory from the resolution to the clean-up:
        // no other STOU of this daemon runs into it meanwhile.
        let dir = match (spec.dest_command, &spec.destination) {
            (DestCommand::Unique, Some(d)) if spec.disposition != Disposition::Delete => {
                let key = DirKey::new(&d.host, d.port, &d.user, &req.dest_path);
                let guard = self.hosts.unique.lock(key).await;
                if self.drain.is_cancelled() || self.abort.is_cancelled() {
                    return Err(AttemptEnd::Interrupted);
                }
                Some(guard)
            }
            _ => None,
        };
        let dir = dir.as_ref();
        if let Some(intent) = &m.intent {
            if let Some(settled) = self.resolve(pair, spec, m, intent, dir).await? {
                return Ok(settled);
            }
        }
        if spec.disposition == Disposition::Delete {
            self.update(
                index,
                MemberUpdate {
                    attempts: Some(m.attempts + 1),
                    intent: Some(Some(Intent::Delete {
                        path: Some(src_path.clone()),
                    })),
                    ..Default::default()
                },
            )
            .await
            .map_err(store_failed)?;
            return self.delete_only(pair, m, &src_path, false).await;
        }
        // Fence the unrepeatable effects before they happen.
        let unique_source_size = match self.fence(pair, spec, m, &mut req).await? {
            Ok(size) if spec.dest_command == DestCommand::Unique => size,
            Ok(_) => None,
            Err(settled) => return Ok(settled),
        };
        let (result, announced, collided) = self
            .copy_announced(pair, m, &mut req, unique_source_size, dir)
            .await?;
        // Past this node's lease nothing more is sent for the file, not even its proof: it
        // stays as the copy left it, for the node that holds the job next (RULES.md §4.8).
        if let Some(end) = self.fenced() {
            self.keep(match result {
                Ok(mut outcome) => outcome.take_transcript(),
                Err(e) => e.transcript,
            });
            self.aborted(pair, spec, m, &req, &announced, unique_source_size, dir)
                .await;
            return Err(end);
        }
        let outcome = match result {
            Ok(o) => o,
            Err(e) if self.abort.is_cancelled() => {
                self.keep(e.transcript.clone());
                self.aborted(pair, spec, m, &req, &announced, unique_source_size, dir)
                    .await;
                return Err(AttemptEnd::Interrupted);
            }
            Err(e) => {
                self.keep(e.transcript.clone());
                // A job-level failure in the middle of a copy: an append or STOU may be half
                // done; its intent stays for the next attempt to resolve.
                if spec.dest_command != DestCommand::Replace {
                    let _ = self
                        .update(
                            index,
                            MemberUpdate {
                                attempts: Some(m.attempts + 1),
                                ..Default::default()
                            },
                        )
                        .await;
                }
                return Err(pair_failed(&e));
            }
        };
        let mut outcome = outcome;
        self.keep(outcome.take_transcript());
        let report = outcome.report().clone();
        let mut replies = replies(m, &report);
        let proven = self.prove(pair, spec, m, &req, &src_path, &outcome).await;
        let unique = UniqueCopy {
            announced: &announced,
            collided,
            source_size: unique_source_size,
            dir,
        };
        let summary = self
            .summarize(pair, spec, m, &req, outcome, &report, unique, attempt)
            .await?;
        let unique_copy = spec.dest_command == DestCommand::Unique;
        let summary = with_proof(summary, proven, unique_copy, &mut replies);
        let change = ledger::record(summary, spec.dest_command, spec.disposition);
        self.apply(
            pair,
            spec.dest_command,
            m,
            &src_path,
            change,
            replies,
            report.duration,
            attempt,
        )
        .await
    }
}
