//! The copy itself, with each name a STOU announces recorded as it comes; and a copy
//! aborted by a cancel or the end of the shutdown grace.

use super::*;

/// The source's size as SIZE told the copy, if it did.
/// The next name a STOU announced; never, for a copy without a channel.
pub(super) async fn recv_some(
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
    /// result, the names announced, and who else a name was already told to.
    pub(super) async fn copy_announced(
        &self,
        pair: &mut Pair,
        m: &Member,
        req: &mut CopyRequest,
        source_size: Option<u64>,
        dir: Option<&DirGuard>,
    ) -> Result<Announcements, AttemptEnd> {
        // Only a STOU announces names; other copies have no channel to listen on.
        let mut names = (req.dest_command == DestCommand::Unique).then(|| {
            let (announce, names) = bftp_ftp::Announce::channel();
            req.announce = Some(announce);
            names
        });
        // The names the destination announced to this copy, each recorded in the intent as
        // soon as it came (the copy waits for that before the source sends a byte), and
        // whether one of them was told to someone else too.
        let mut announced: Vec<String> = Vec::new();
        let mut collided: Option<String> = None;
        let result = {
            let copy = pair.copy_or_abort(req, self.stop_copy(), "the attempt was aborted");
            tokio::pin!(copy);
            loop {
                tokio::select! {
                    r = &mut copy => break r,
                    Some(a) = recv_some(&mut names) => {
                        if let Some(other) = self.claim(dir, m, &a.name).await {
                            collided.get_or_insert(other);
                        }
                        announced.push(a.name.clone());
                        self.set_intent(m.index, Intent::Unique {
                            source_size,
                            announced: Some(a.name),
                        })
                        .await?;
                        let _ = a.recorded.send(());
                    }
                }
            }
        };
        Ok((result, announced, collided))
    }
}

impl Run {
    /// A copy aborted by a cancel or the end of the shutdown grace: the attempt counts. On a
    /// cancel (the member will not be tried again) the partial destination file goes, as
    /// after a failed copy: a replace copy's always, a unique copy's when it is provably
    /// ours; an append's never (its size before is in the intent, and the file was there).
    /// At shutdown the member is done again after the restart, which settles the file.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn aborted(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        req: &CopyRequest,
        announced: &[String],
        source_size: Option<u64>,
        dir: Option<&DirGuard>,
    ) {
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
                            .settle_partial(pair, spec, m, name, source_size, dir, false)
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
