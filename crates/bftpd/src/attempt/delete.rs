//! DELE of a source file: a `move`'s source after its copy, a `delete` job's file.

use super::*;

/// What a DELE of a source file did, with SIZE as the evidence when it was refused.
pub(super) enum Dele {
    Deleted(bftp_ftp::parse::Reply),
    /// Refused, and SIZE says there is no such file.
    Absent(ActionError),
    /// Refused, and the file is still there. `retry`: the refusal was transient.
    Refused {
        refused: ActionError,
        retry: bool,
    },
    /// Refused, and SIZE cannot tell whether the file is there.
    Unknown {
        refused: ActionError,
        size: ActionError,
        retry: bool,
    },
}

impl Dele {
    pub(super) fn retry(&self) -> bool {
        matches!(
            self,
            Dele::Refused { retry: true, .. } | Dele::Unknown { retry: true, .. }
        )
    }
}

pub(super) async fn dele(pair: &mut impl Conn, path: &str) -> Dele {
    let refused = match pair.delete(Side::Source, path).await {
        Ok(reply) => return Dele::Deleted(reply),
        Err(e) => e,
    };
    // On a dead pair SIZE is an error that asks for a retry.
    match pair.size(Side::Source, path).await {
        Ok(None) => Dele::Absent(refused),
        Ok(Some(_)) => {
            let retry = refused.disposition().is_transient();
            Dele::Refused { refused, retry }
        }
        Err(size) => {
            let retry = refused.disposition().is_transient() || size.disposition().is_transient();
            Dele::Unknown {
                refused,
                size,
                retry,
            }
        }
    }
}

impl std::fmt::Display for Dele {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dele::Deleted(reply) => write!(f, "deleted ({reply})"),
            Dele::Absent(refused) => write!(f, "no such file ({refused})"),
            Dele::Refused { refused, .. } => write!(f, "not deleted: {refused}"),
            Dele::Unknown { refused, size, .. } => write!(
                f,
                "not deleted ({refused}), and SIZE cannot tell whether it is still there ({size})"
            ),
        }
    }
}

impl Run {
    /// A `delete` job's file: its `Dele` intent, durable before the DELE.
    pub(super) async fn delete_member(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let m = mc.m;
        self.update(
            m.index,
            MemberUpdate {
                attempts: Some(m.attempts + 1),
                intent: Some(Some(Intent::Delete {
                    path: Some(mc.src_path.clone()),
                })),
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        self.delete_only(pair, m, &mc.src_path, false).await
    }

    /// `move`: the copy is proven and recorded (with the `Dele` intent); now the source goes.
    /// `evidence` is the member's detail so far (the copy's evidence), kept in front of what
    /// happened to the source. After a restart the intent is resolved again: a DELE that
    /// reached the server before the crash makes this one answer 550, and SIZE then finds
    /// no file, which settles the member instead of retrying it until the job is exhausted.
    pub(super) async fn delete_source(
        &self,
        pair: &mut impl Conn,
        index: u32,
        path: &str,
        evidence: &str,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let result = dele(pair, path).await;
        let note = match &result {
            Dele::Deleted(_) => "source deleted".to_string(),
            Dele::Absent(refused) => {
                format!("source already deleted (DELE now answers: {refused})")
            }
            other => format!("source {other}"),
        };
        let detail = Some(format!("{evidence}; {note}"));
        if result.retry() {
            // The intent stays: the next attempt deletes again.
            self.update(
                index,
                MemberUpdate {
                    detail,
                    ..Default::default()
                },
            )
            .await
            .map_err(store_failed)?;
            return Ok(Some(format!("copied, but the {note}").into()));
        }
        if !matches!(result, Dele::Deleted(_)) {
            tracing::warn!(job = self.id.0, path, "{note}");
        }
        self.update(
            index,
            MemberUpdate {
                intent: Some(None),
                detail,
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(None)
    }

    /// A `delete` job's file, its `Dele` intent recorded. `resumed`: the intent was there
    /// before this attempt, so a file found gone was deleted by the interrupted one.
    pub(super) async fn delete_only(
        &self,
        pair: &mut impl Conn,
        m: &Member,
        path: &str,
        resumed: bool,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let result = dele(pair, path).await;
        let reply = |r: &bftp_ftp::parse::Reply| {
            Some(LastReply {
                code: Some(r.code().get()),
                text: format!("DELE: {}", r.text()),
            })
        };
        let mut u = MemberUpdate {
            detail: Some(result.to_string()),
            intent: Some(None),
            ..Default::default()
        };
        match &result {
            Dele::Deleted(r) => {
                u.state = Some(MemberState::Succeeded);
                u.source_reply = reply(r);
            }
            Dele::Absent(_) if resumed => {
                u.state = Some(MemberState::Succeeded);
                u.detail = Some(format!("deleted before bftpd restarted: {result}"));
            }
            _ if result.retry() => {
                self.update(
                    m.index,
                    MemberUpdate {
                        detail: u.detail,
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
                return Ok(Some(result.to_string().into()));
            }
            _ => u.state = Some(MemberState::FailedPermanent),
        }
        if let Dele::Absent(ActionError::Refused { reply: r, .. })
        | Dele::Refused {
            refused: ActionError::Refused { reply: r, .. },
            ..
        }
        | Dele::Unknown {
            refused: ActionError::Refused { reply: r, .. },
            ..
        } = &result
        {
            u.source_reply = reply(r);
        }
        self.update(m.index, u).await.map_err(store_failed)?;
        Ok(None)
    }
}
