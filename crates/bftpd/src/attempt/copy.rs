//! The copy itself, with each name a STOU announces recorded as it comes; how a copy that
//! did not come back ends the member (or the attempt); and a copy aborted by a cancel or
//! the end of the shutdown grace.

use super::*;

/// The next name a STOU announced; never, for a copy without a channel.
async fn recv_some(
    names: &mut Option<tokio::sync::mpsc::UnboundedReceiver<bftp_ftp::Announced>>,
) -> Option<bftp_ftp::Announced> {
    match names {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Run {
    /// The copy, with each name a STOU announces recorded in the member's intent as soon as
    /// it comes (the copy waits for that before the source sends a byte) and claimed: the
    /// result, and what the STOUs announced (`source_size`: the source's size as fenced).
    pub(super) async fn copy_announced(
        &self,
        pair: &mut Pair,
        mc: &mut MemberCtx<'_>,
        source_size: Option<u64>,
    ) -> Result<(Result<CopyOutcome, PairError>, UniqueCopy), AttemptEnd> {
        // Only a STOU announces names; other copies have no channel to listen on.
        let mut names = (mc.req.dest_command == DestCommand::Unique).then(|| {
            let (announce, names) = bftp_ftp::Announce::channel();
            mc.req.announce = Some(announce);
            names
        });
        let mc = &*mc;
        // The names the destination announced to this copy, each recorded in the intent as
        // soon as it came (the copy waits for that before the source sends a byte), and
        // whether one of them was told to someone else too.
        let mut unique = UniqueCopy {
            announced: Vec::new(),
            collided: None,
            source_size,
        };
        let result = {
            let copy = pair.copy_or_abort(&mc.req, self.stop_copy(), "the attempt was aborted");
            tokio::pin!(copy);
            loop {
                tokio::select! {
                    r = &mut copy => break r,
                    Some(a) = recv_some(&mut names) => {
                        if let Some(other) = self.claim(mc.dir(), mc.m, &a.name).await {
                            unique.collided.get_or_insert(other);
                        }
                        unique.announced.push(a.name.clone());
                        self.set_intent(mc.m.index, Intent::Unique {
                            source_size,
                            announced: Some(a.name),
                        })
                        .await?;
                        let _ = a.recorded.send(());
                    }
                }
            }
        };
        Ok((result, unique))
    }

    /// The copy's outcome to prove and record; or the attempt ends: past this node's lease,
    /// on an abort, or on a job-level failure in the middle of the copy.
    pub(super) async fn copied(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        result: Result<CopyOutcome, PairError>,
        unique: &UniqueCopy,
    ) -> Result<CopyOutcome, AttemptEnd> {
        // Past this node's lease nothing more is sent for the file, not even its proof: it
        // stays as the copy left it, for the node that holds the job next (RULES.md §4.8).
        if let Some(end) = self.fenced() {
            self.keep(match result {
                Ok(mut outcome) => outcome.take_transcript(),
                Err(e) => e.transcript,
            });
            self.aborted(pair, mc, unique).await;
            return Err(end);
        }
        match result {
            Ok(o) => Ok(o),
            Err(e) if self.abort.is_cancelled() => {
                self.keep(e.transcript.clone());
                self.aborted(pair, mc, unique).await;
                Err(AttemptEnd::Interrupted)
            }
            Err(e) => {
                self.keep(e.transcript.clone());
                // A job-level failure in the middle of a copy: an append or STOU may be half
                // done; its intent stays for the next attempt to resolve.
                if mc.spec.dest_command != DestCommand::Replace {
                    let _ = self
                        .update(
                            mc.m.index,
                            MemberUpdate {
                                attempts: Some(mc.m.attempts + 1),
                                ..Default::default()
                            },
                        )
                        .await;
                }
                Err(pair_failed(&e))
            }
        }
    }

    /// A copy aborted by a cancel or the end of the shutdown grace: the attempt counts. On a
    /// cancel (the member will not be tried again) the partial destination file goes, as
    /// after a failed copy: a replace copy's always, a unique copy's when it is provably
    /// ours; an append's never (its size before is in the intent, and the file was there).
    /// At shutdown the member is done again after the restart, which settles the file.
    async fn aborted(&self, pair: &mut Pair, mc: &MemberCtx<'_>, unique: &UniqueCopy) {
        let (spec, m, req) = (mc.spec, mc.m, &mc.req);
        let announced = &unique.announced;
        let mut u = MemberUpdate {
            attempts: Some(m.attempts + 1),
            ..Default::default()
        };
        let cancelled = !self.drain.is_cancelled();
        if cancelled && spec.dest_command != DestCommand::Append {
            let note = match pair.reopen("to clean up after the cancel").await {
                Err(e) => Some(format!(
                    "cancelled during the copy; the partial file may remain: {e}"
                )),
                Ok(()) if spec.dest_command == DestCommand::Replace => {
                    Some(match pair.delete(Side::Destination, &req.dest_path).await {
                        Ok(_) => "cancelled during the copy; the partial file was deleted".into(),
                        Err(e) => format!(
                            "cancelled during the copy; the partial file {:?} was not deleted: {e}",
                            req.dest_path
                        ),
                    })
                }
                Ok(()) => {
                    let mut kept = Vec::new();
                    for name in announced {
                        if let Err(why) = self
                            .settle_partial(pair, mc, name, unique.source_size, false)
                            .await
                        {
                            kept.push(why);
                        }
                    }
                    (!announced.is_empty()).then(|| {
                        if kept.is_empty() {
                            "cancelled during the copy; the partial file was deleted".into()
                        } else {
                            format!("cancelled during the copy; {}", kept.join("; "))
                        }
                    })
                }
            };
            self.keep(pair.take_transcript());
            u.detail = note;
            if spec.dest_command == DestCommand::Unique {
                u.intent = Some(None);
            }
        }
        if let Err(e) = self.update(m.index, u).await {
            tracing::warn!(job = self.id.0, member = %m.name, error = %e, "cannot record the aborted copy");
        }
    }
}
