//! Resolve an intent an interrupted attempt left (`bftp_core::intent::resolve`).

use super::*;

impl Run {
    pub(super) async fn succeed(
        &self,
        spec: &JobSpec,
        m: &Member,
        bytes: Option<u64>,
        detail: String,
        stored_as: Option<String>,
    ) -> Result<(), AttemptEnd> {
        let intent = if spec.disposition == Disposition::Move {
            Some(Some(Intent::Delete {
                path: Some(source_path(spec, &m.name)),
            }))
        } else {
            Some(None)
        };
        self.update(
            m.index,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                bytes,
                detail: Some(detail),
                intent,
                stored_as,
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(())
    }
}

impl Run {
    /// An intent left by an interrupted attempt, settled from what the servers show now
    /// (the rules are `bftp_core::intent::resolve`). `Some`: the member is settled (or waits
    /// for a later attempt); `None`: the effect did not happen, do the member again.
    pub(super) async fn resolve(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        intent: &Intent,
    ) -> Result<Option<Option<Pending>>, AttemptEnd> {
        let (spec, m, dir) = (mc.spec, mc.m, mc.dir());
        let index = m.index;
        let req = copy_request(spec, &m.name);
        let target = intent.target(&req.dest_path);
        let size = match &target {
            Some(path) => Some(match pair.size(Side::Destination, path).await {
                Ok(Some(n)) => Probe::Size(n),
                Ok(None) => Probe::Absent,
                Err(e) => Probe::Failed {
                    reason: e.to_string(),
                    transient: e.disposition().is_transient(),
                },
            }),
            None => None,
        };
        let announced = match intent {
            Intent::Unique {
                announced: Some(n), ..
            } => Some(n.as_str()),
            _ => None,
        };
        let claimed_by_other = match announced {
            Some(n) => self.claim(dir, m, n).await,
            None => None,
        };
        let evidence = Evidence {
            size,
            claimed_by_other,
        };
        let decision = bftp_core::intent::resolve(intent, &evidence);
        match decision {
            Decision::DeleteAgain => {
                let path = match intent {
                    Intent::Delete { path: Some(p) } => p.clone(),
                    _ => source_path(spec, &m.name),
                };
                let settled = if spec.disposition == Disposition::Delete {
                    self.delete_only(pair, m, &path, true).await?
                } else {
                    let detail = m.detail.as_deref().unwrap_or("copied");
                    self.delete_source(pair, index, &path, detail).await?
                };
                Ok(Some(settled))
            }
            Decision::Done { bytes, evidence } => {
                let stored_as = announced.map(str::to_owned);
                self.succeed(spec, m, Some(bytes), evidence.clone(), stored_as)
                    .await?;
                if spec.disposition == Disposition::Move {
                    let path = source_path(spec, &m.name);
                    return Ok(Some(
                        self.delete_source(pair, index, &path, &evidence).await?,
                    ));
                }
                Ok(Some(None))
            }
            Decision::NotDone { .. } => {
                if let Some(n) = announced {
                    self.release(dir, m, n).await;
                }
                self.update(
                    index,
                    MemberUpdate {
                        intent: Some(None),
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
                Ok(None)
            }
            Decision::Uncertain { reason } => {
                self.ctx
                    .metrics
                    .file(FileResult::Uncertain, Duration::ZERO, None);
                self.update(
                    index,
                    MemberUpdate {
                        state: Some(MemberState::Uncertain),
                        intent: Some(None),
                        detail: Some(reason),
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
                Ok(Some(None))
            }
            Decision::AskLater { reason } => Ok(Some(Some(reason.into()))),
        }
    }
}
