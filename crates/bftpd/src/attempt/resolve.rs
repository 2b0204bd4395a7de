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
        pair: &mut impl Conn,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt::conn::fake::{self, FakePair, Says};
    use crate::testkit;
    use bftp_core::RetryPolicy;

    /// What the step returned.
    #[derive(Debug, PartialEq)]
    enum Got {
        /// The effect did not happen: do the member again.
        Again,
        /// Settled (or left as the resolution wrote it).
        Settled,
        /// Left pending, the intent kept for a later attempt.
        Pending,
    }

    struct Row {
        name: &'static str,
        disposition: Disposition,
        dest_command: DestCommand,
        intent: Intent,
        pair: FakePair,
        got: Got,
        state: MemberState,
        intent_after: bool,
        /// In the member's detail afterwards ("" when none is expected).
        detail: &'static str,
        stored_as: Option<&'static str>,
        sent: &'static [&'static str],
    }

    fn pair(size_src: Option<Says>, size_dst: Option<Says>, dele_src: Option<Says>) -> FakePair {
        FakePair {
            size_src,
            size_dst,
            dele_src,
            sent: Vec::new(),
        }
    }

    fn rows() -> Vec<Row> {
        use Says::*;
        let append = Intent::Append {
            before: 10,
            source_size: 5,
        };
        let dele = Intent::Delete {
            path: Some("a.bin".into()),
        };
        let copy = Disposition::Copy;
        vec![
            Row {
                name: "an append that grew by the source happened: succeeded",
                disposition: copy,
                dest_command: DestCommand::Append,
                intent: append.clone(),
                pair: pair(None, Some(Size(15)), None),
                got: Got::Settled,
                state: MemberState::Succeeded,
                intent_after: false,
                detail: "",
                stored_as: None,
                sent: &["SIZE destination b/a.bin"],
            },
            Row {
                name: "an append that left the size before did not happen: again",
                disposition: copy,
                dest_command: DestCommand::Append,
                intent: append.clone(),
                pair: pair(None, Some(Size(10)), None),
                got: Got::Again,
                state: MemberState::Pending,
                intent_after: false,
                detail: "",
                stored_as: None,
                sent: &["SIZE destination b/a.bin"],
            },
            Row {
                name: "an append of another size cannot be told: uncertain",
                disposition: copy,
                dest_command: DestCommand::Append,
                intent: append.clone(),
                pair: pair(None, Some(Size(12)), None),
                got: Got::Settled,
                state: MemberState::Uncertain,
                intent_after: false,
                detail: "",
                stored_as: None,
                sent: &["SIZE destination b/a.bin"],
            },
            Row {
                name: "no SIZE now: the intent stays for a later attempt",
                disposition: copy,
                dest_command: DestCommand::Append,
                intent: append.clone(),
                pair: pair(None, Some(Gone), None),
                got: Got::Pending,
                state: MemberState::Pending,
                intent_after: true,
                detail: "",
                stored_as: None,
                sent: &["SIZE destination b/a.bin"],
            },
            Row {
                name: "a move's append that happened: the source is deleted",
                disposition: Disposition::Move,
                dest_command: DestCommand::Append,
                intent: append,
                pair: pair(None, Some(Size(15)), Some(Deleted)),
                got: Got::Settled,
                state: MemberState::Succeeded,
                intent_after: false,
                detail: "source deleted",
                stored_as: None,
                sent: &["SIZE destination b/a.bin", "DELE source a.bin"],
            },
            Row {
                name: "a move's DELE again, the source gone: deleted before",
                disposition: Disposition::Move,
                dest_command: DestCommand::Replace,
                intent: dele.clone(),
                pair: pair(Some(NoFile), None, Some(Refused(550))),
                got: Got::Settled,
                state: MemberState::Pending,
                intent_after: false,
                detail: "source already deleted",
                stored_as: None,
                sent: &["DELE source a.bin", "SIZE source a.bin"],
            },
            Row {
                name: "a move's DELE refused for now, the source still there: stays",
                disposition: Disposition::Move,
                dest_command: DestCommand::Replace,
                intent: dele.clone(),
                pair: pair(Some(Size(3)), None, Some(Refused(450))),
                got: Got::Pending,
                state: MemberState::Pending,
                intent_after: true,
                detail: "source not deleted",
                stored_as: None,
                sent: &["DELE source a.bin", "SIZE source a.bin"],
            },
            Row {
                name: "a delete job's file found gone: deleted before the restart",
                disposition: Disposition::Delete,
                dest_command: DestCommand::Replace,
                intent: dele,
                pair: pair(Some(NoFile), None, Some(Refused(550))),
                got: Got::Settled,
                state: MemberState::Succeeded,
                intent_after: false,
                detail: "deleted before bftpd restarted",
                stored_as: None,
                sent: &["DELE source a.bin", "SIZE source a.bin"],
            },
            Row {
                name: "a STOU's announced name with the source's size: succeeded under it",
                disposition: copy,
                dest_command: DestCommand::Unique,
                intent: Intent::Unique {
                    source_size: Some(5),
                    announced: Some("a.bin.1".into()),
                },
                pair: pair(None, Some(Size(5)), None),
                got: Got::Settled,
                state: MemberState::Succeeded,
                intent_after: false,
                detail: "",
                stored_as: Some("a.bin.1"),
                sent: &["SIZE destination b/a.bin.1"],
            },
        ]
    }

    #[tokio::test]
    async fn an_interrupted_intent_is_settled_from_what_the_servers_show() {
        for mut row in rows() {
            let (_dir, store) = testkit::store();
            let id = testkit::submit_one_file_job(&*store, RetryPolicy::default());
            let set = MemberUpdate {
                intent: Some(Some(row.intent.clone())),
                ..Default::default()
            };
            store.update_member(id, 0, set, testkit::T0).unwrap();
            let run = fake::run(store.clone(), id);
            let job = store.get(id).unwrap().unwrap();
            let mut spec = run.ctx.secrets.unseal_spec(&job.spec).unwrap();
            spec.disposition = row.disposition;
            spec.dest_command = row.dest_command;
            let m = store.members(id).unwrap().remove(0);
            let mc = run.member_ctx(&spec, &m, 2).await.unwrap();
            let got = match run.resolve(&mut row.pair, &mc, &row.intent).await {
                Ok(None) => Got::Again,
                Ok(Some(None)) => Got::Settled,
                Ok(Some(Some(_))) => Got::Pending,
                Err(end) => panic!("{}: the attempt ended: {end:?}", row.name),
            };
            let after = store.members(id).unwrap().remove(0);
            let detail = after.detail.clone().unwrap_or_default();
            assert_eq!(got, row.got, "{}", row.name);
            assert_eq!(after.state, row.state, "{}", row.name);
            assert_eq!(
                after.intent.is_some(),
                row.intent_after,
                "{}: {:?}",
                row.name,
                after.intent
            );
            assert!(detail.contains(row.detail), "{}: {detail}", row.name);
            assert_eq!(after.stored_as.as_deref(), row.stored_as, "{}", row.name);
            assert_eq!(row.pair.sent, row.sent, "{}", row.name);
        }
    }
}
