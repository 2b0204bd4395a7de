//! The job's members: the freeze of a single-file job's listing, and the members as the
//! lanes' work.

use super::*;

impl Run {
    /// RULES.md §4.4: the first successful listing, matched by us, durable before any member
    /// moves. The members as written (what a read right after would give).
    pub(super) async fn freeze(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
    ) -> Result<Vec<Member>, AttemptEnd> {
        let mut listing = pair
            .list_source(spec.source.dir(), spec.source.file_name())
            .await
            .map_err(|e| {
                if e.disposition().is_permanent() {
                    AttemptEnd::JobPermanent {
                        reason: format!("listing the source: {e}"),
                    }
                } else {
                    AttemptEnd::Transient {
                        reason: format!("listing the source: {e}"),
                    }
                }
            })?;
        self.keep(std::mem::take(&mut listing.transcript));
        for r in &listing.rejected {
            tracing::warn!(job = self.id.0, line = %r.line, reason = %r.reason, "a listed name was refused");
        }
        // A refused name that matches the pattern is a file of the job that will not be
        // copied: it becomes a `refused` member, so the job cannot read as succeeded.
        let refused: Vec<NewMember> = listing
            .rejected
            .iter()
            .filter(|r| r.matched)
            .map(|r| NewMember {
                name: r.line.clone(),
                size: None,
                modified: None,
                refused: Some(format!("refused: the source listed this name, which bftpd does not send in a command: {}", r.reason)),
            })
            .collect();
        if listing.members.is_empty() && refused.is_empty() {
            return Err(AttemptEnd::JobPermanent {
                reason: format!("no file matches {:?}", spec.source.path),
            });
        }
        // Name order: the ledger reads the same whatever order the server listed in.
        let mut members: Vec<NewMember> = listing
            .members
            .iter()
            .map(|l| NewMember {
                name: l.name.clone(),
                size: l.size,
                modified: l.modified.as_ref().map(|m| m.to_string()),
                refused: None,
            })
            .chain(refused)
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let id = self.id;
        let now = self.ctx.clock.now();
        let written: Vec<Member> = members
            .iter()
            .enumerate()
            .map(|(i, m)| m.as_written(i as u32, now))
            .collect();
        self.ctx
            .store
            .call(move |s| s.freeze_members(id, members, now))
            .await
            .map_err(store_failed)?;
        Ok(written)
    }
}

/// An attempt's members, as the lanes' caller (see [`crate::lanes`]): a member is
/// [`Run::member`], beside its live progress; the ledger is written as it happens.
pub(super) struct Members<'a> {
    pub(super) run: &'a Run,
    pub(super) spec: &'a JobSpec,
    pub(super) attempt: u32,
}

impl crate::lanes::Item for Member {
    fn name(&self) -> &str {
        &self.name
    }
}

impl crate::lanes::Work for Members<'_> {
    type Conn = Pair;
    type Item = Member;
    type End = AttemptEnd;

    /// Shutdown drains (the file in flight finishes, no other starts), a cancel, or the
    /// end of this node's lease (RULES.md §4.8).
    fn interrupted(&self) -> Option<AttemptEnd> {
        if let Some(end) = self.run.fenced() {
            return Some(end);
        }
        if self.run.drain.is_cancelled() || self.run.abort.is_cancelled() {
            return Some(AttemptEnd::Interrupted);
        }
        // A nearly full disk: no new file; what is in flight finishes and is recorded.
        crate::scheduler::space::no_room_for_files(&*self.run.ctx.store)
    }

    async fn interruption(&self) {
        tokio::select! {
            () = self.run.drain.cancelled() => {}
            () = self.run.abort.cancelled() => {}
        }
    }

    fn usable(&self, pair: &Pair) -> bool {
        pair.is_usable()
    }

    /// The same label again, the old pair's last lines kept.
    async fn reopen(&self, mut old: Pair) -> Result<Pair, AttemptEnd> {
        self.run.keep(old.take_transcript());
        if let Some(end) = self.run.fenced() {
            return Err(end);
        }
        let label = old.label().unwrap_or_else(|| "p?".into());
        match self.run.open(self.spec, &label).await {
            Ok(pair) => Ok(pair),
            Err(e) => {
                // The lane's slots are held by the lanes: the refused connection is one of them.
                self.run.ctx.hosts.refused(&e, None).await;
                self.run.keep(e.transcript.clone());
                Err(pair_failed(&e))
            }
        }
    }

    async fn item(&self, pair: &mut Pair, m: Member, _second: bool) -> Step<Member, AttemptEnd> {
        let (run, spec) = (self.run, self.spec);
        // Before the file's first command, whatever it is (a file started ahead too).
        if let Some(end) = run.fenced() {
            return Step::End(end);
        }
        crate::lanes::proof::learn(pair, spec).await;
        // A copy's progress, in memory for the views, while it is worked on.
        let result = if spec.destination.is_some() {
            let follow = crate::attempt::live::follow(
                run.ctx.live.clone(),
                run.id,
                m.index,
                pair.progress(),
                run.look(spec, &m),
            );
            let result = tokio::select! {
                biased;
                result = run.member(pair, spec, &m, self.attempt) => result,
                never = follow => match never {},
            };
            run.ctx.live.end(run.id, m.index);
            result
        } else {
            run.member(pair, spec, &m, self.attempt).await
        };
        match result {
            Ok(None) => Step::Done,
            // The ledger has it pending; its second try starts from there.
            Ok(Some(Pending { reason, again })) => Step::Failed {
                item: Member {
                    attempts: m.attempts + 1,
                    detail: Some(reason.clone()),
                    intent: None,
                    ..m
                },
                reason,
                again,
            },
            Err(end) => Step::End(end),
        }
    }

    /// Nothing to add: the ledger has the member pending with its reason, and the reason
    /// becomes the attempt's.
    async fn stands(&self, _m: Member, _reason: &str) -> Result<(), AttemptEnd> {
        Ok(())
    }

    async fn close(&self, pair: Pair) {
        self.run.close(pair).await
    }

    /// Only a plain copy's next member may be started ahead: a replace copy with no intent
    /// to settle first (an intent, APPE, STOU or a `move` have ledger writes or other
    /// commands between members), with the request its own `member` would make.
    fn hint(&self, pair: &mut Pair, next: Option<&Member>) {
        let spec = self.spec;
        let plain = spec.disposition == Disposition::Copy
            && spec.dest_command == DestCommand::Replace
            && spec.destination.is_some();
        pair.expect_next(
            next.filter(|m| plain && m.intent.is_none())
                .map(|m| copy_request(spec, &m.name)),
        );
    }

    fn in_flight(&self, pair: &Pair) -> bool {
        pair.in_flight()
    }
}
