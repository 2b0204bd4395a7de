//! `Run::run`: one attempt, from the pool to its end.

use super::*;

impl Run {
    /// The attempt, phase by phase: the first pair (from the pool), the proof check, the
    /// walk of a tree, the freeze of the members, the extra pairs, the lanes, the flush of
    /// the grouped records, the end.
    pub(super) async fn run(self, job: Job, attempt: u32) -> AttemptEnd {
        match self.phases(&job, attempt).await {
            Ok(end) | Err(end) => end,
        }
    }

    async fn phases(&self, job: &Job, attempt: u32) -> Result<AttemptEnd, AttemptEnd> {
        let spec = self.unseal(job)?;
        if self.nothing_left(job).await? {
            return Ok(AttemptEnd::Complete);
        }
        let dst_host = spec
            .destination
            .as_ref()
            .map_or(spec.source.host.as_str(), |d| d.host.as_str());
        let routing = crate::lanes::routing::Routing::plan(
            &spec,
            self.ctx.data_paths.effective_data_path(&spec),
            self.ctx.pairs.clone(),
            self.ctx.hosts.relay_gate().clone(),
            self.ctx.clock.clone(),
        )
        .await;
        // One routing per attempt: set once, here.
        let _ = self.routing.set(routing);
        let pair = self.first_pair(&spec, job.owner_uid, dst_host).await?;
        let (pair, members) = self.before_files(pair, &spec, job).await?;
        let work: VecDeque<Member> = members.into_iter().filter(needs_work).collect();
        let openings = self.openings(pair, &spec, dst_host, work.len()).await;
        let members = Members {
            run: self,
            spec: &spec,
            attempt,
        };
        let ran = crate::lanes::run(&members, openings, WorkQueue::new(work)).await;
        self.flush().await?;
        Ok(self.end(ran, &spec, job.owner_uid, dst_host).await)
    }

    fn unseal(&self, job: &Job) -> Result<JobSpec, AttemptEnd> {
        self.ctx
            .secrets
            .unseal_spec(&job.spec)
            .map_err(|e| AttemptEnd::JobPermanent {
                reason: format!("the job's passwords cannot be read: {e}"),
            })
    }

    /// An attempt interrupted after its last member (a crash before the job's finish was
    /// recorded) has nothing left to do: no connection is needed to say so.
    async fn nothing_left(&self, job: &Job) -> Result<bool, AttemptEnd> {
        if !job.members_frozen {
            return Ok(false);
        }
        let id = self.id;
        match self.ctx.store.call(move |s| s.members(id)).await {
            Ok(members) => Ok(!members.iter().any(needs_work)),
            Err(e) => Err(store_failed(e)),
        }
    }

    /// The first pair: a kept pair of this owner, servers and logins, or slots held while
    /// this attempt has connections open (see `crate::hosts::pool`) and a pair opened. A
    /// server that refuses it for too many connections teaches its host a lower limit, and
    /// the pair waits for a slot under it and tries again: no failed try (RULES.md §16.3).
    async fn first_pair(
        &self,
        spec: &JobSpec,
        owner: u32,
        dst_host: &str,
    ) -> Result<Pair, AttemptEnd> {
        let id = self.id;
        let src_login = ServerLogin::from_endpoint(&spec.source);
        let dst_login = spec
            .destination
            .as_ref()
            .map(ServerLogin::from_endpoint)
            .unwrap_or_else(|| src_login.clone());
        let key = crate::hosts::pool::PoolKey::new(owner, &src_login, &dst_login, spec.params);
        let mut pause = crate::hosts::TooMany::default();
        loop {
            if let Some(end) = self.fenced() {
                return Err(end);
            }
            let acquired = self
                .ctx
                .hosts
                .acquire_pair(&key, &spec.source.host, dst_host)
                .await;
            match acquired {
                crate::hosts::pool::Acquired::Kept(mut pair, slots, origin) => {
                    pair.set_label("p1");
                    pair.set_gate(self.send_gate());
                    if let Some(routing) = self.routing.get() {
                        routing.ready(&mut pair);
                    }
                    *self.first.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((key, slots, origin.used_by(id)));
                    return Ok(*pair);
                }
                crate::hosts::pool::Acquired::Slots(slots) => {
                    let opened = self.open(spec, "p1").await;
                    if let Err(e) = &opened {
                        if self.ctx.hosts.refused(e, Some(&slots)).await {
                            self.keep(e.transcript.clone());
                            drop(slots);
                            // The wait for a slot is no failed try, but it ends at the job's
                            // deadline: a server that stays full ends the job as §5 says,
                            // instead of holding a running place for ever.
                            let deadline = spec.start_at.saturating_add(spec.retry.deadline);
                            if self.ctx.clock.now() > deadline {
                                return Err(AttemptEnd::Transient {
                                    reason: format!(
                                        "{}; the job's deadline passed while it waited for a \
                                         connection slot",
                                        e.failure
                                    ),
                                });
                            }
                            // A stop or a cancel does not wait for the pause.
                            tokio::select! {
                                () = pause.wait(&self.ctx.hosts, e) => {}
                                () = self.drain.cancelled() => return Err(AttemptEnd::Interrupted),
                                () = self.abort.cancelled() => return Err(AttemptEnd::Interrupted),
                            }
                            continue;
                        }
                    }
                    let origin = crate::hosts::pool::Origin::new(self.ctx.clock.now(), id);
                    *self.first.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((key, slots, origin));
                    return opened.map_err(|e| {
                        self.keep(e.transcript.clone());
                        pair_failed(&e)
                    });
                }
            }
        }
    }

    /// A proof the pair cannot give fails the job before any file moves.
    async fn proof_check(&self, pair: &mut Pair, spec: &JobSpec) -> Result<(), AttemptEnd> {
        if spec.proof.is_none() || spec.disposition == Disposition::Delete {
            return Ok(());
        }
        let Some(routing) = self.routing.get() else {
            return Ok(());
        };
        match crate::lanes::proof::check_required(pair, spec, routing.may_relay()).await {
            Ok(false) => Ok(()),
            Ok(true) => {
                let why = "the servers offer no common hash: bftpd hashes each relayed stream";
                pair.note(Side::Source, why);
                routing.relay_for_proof(why);
                routing.ready(pair);
                Ok(())
            }
            Err(reason) => {
                self.keep(pair.take_transcript());
                Err(AttemptEnd::JobPermanent { reason })
            }
        }
    }

    /// Before any file moves: the proof check, a tree's walk (its directories made), a
    /// single-file job's freeze; then the members to work on. `Err`: the attempt ends, and
    /// the pair is closed.
    async fn before_files(
        &self,
        pair: Pair,
        spec: &JobSpec,
        job: &Job,
    ) -> Result<(Pair, Vec<Member>), AttemptEnd> {
        let mut pair = pair;
        let ready = self.prepare(&mut pair, spec, job).await;
        let (made, frozen_now) = match ready {
            Ok(ready) => ready,
            Err(end) => {
                self.close(pair).await;
                return Err(end);
            }
        };
        let id = self.id;
        let members = match frozen_now {
            Some(m) => m,
            None => self
                .ctx
                .store
                .call(move |s| s.members(id))
                .await
                .map_err(store_failed)?,
        };
        self.load_claims(&members);
        let members = self.blocked(members, &made).await.map_err(store_failed)?;
        Ok((pair, members))
    }

    /// The proof check, the walk, the freeze. A job frozen just now has its members as this
    /// attempt wrote them: no read back.
    async fn prepare(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        job: &Job,
    ) -> Result<(crate::lanes::walk::MadeDirs, Option<Vec<Member>>), AttemptEnd> {
        self.proof_check(pair, spec).await?;
        let made = self.walk(pair, spec).await?;
        if spec.recursive || job.members_frozen {
            return Ok((made, None));
        }
        match self.freeze(pair, spec).await {
            Ok(members) => Ok((made, Some(members))),
            Err(end) => {
                pair.mark_errored();
                Err(end)
            }
        }
    }

    /// A tree: the whole tree is frozen before any file moves; then its directories are
    /// made. Nothing for a single-file job.
    async fn walk(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
    ) -> Result<crate::lanes::walk::MadeDirs, AttemptEnd> {
        if !spec.recursive {
            return Ok(crate::lanes::walk::MadeDirs::default());
        }
        let id = self.id;
        let clock = self.ctx.clock.clone();
        let walked = crate::lanes::walk::walk(
            &self.ctx.store,
            id,
            pair,
            spec,
            move || clock.now(),
            |t| self.keep(t.clone()),
        )
        .await;
        let dirs = match walked {
            Ok(walk) => {
                crate::lanes::walk::make_dirs(pair, spec, &walk, Some((&self.ctx.store, id))).await
            }
            Err(end) => Err(end),
        };
        self.keep(pair.take_transcript());
        dirs.map_err(AttemptEnd::from)
    }

    /// The first pair's lane, and more pairs for a multi-file job, up to `parallel_pairs`,
    /// on the slots free now (see `crate::lanes`); each logs in while the first one already
    /// works.
    async fn openings<'a>(
        &'a self,
        pair: Pair,
        spec: &'a JobSpec,
        dst_host: &str,
        files: usize,
    ) -> Vec<crate::lanes::Opening<'a, Pair, crate::hosts::Slots>> {
        let lanes = self.ctx.hosts.parallel_pairs.min(files).max(1);
        let hosts = &self.ctx.hosts;
        let relaying = self.routing.get().is_some_and(|r| r.relaying());
        let src_host = &spec.source.host;
        // A relaying pair holds a data connection on each host besides its control
        // connection: it counts two slots on each (the first pair's second one when one is
        // free; the first pair relays either way).
        let mut first_slots = crate::hosts::Slots::default();
        if relaying {
            if let Some(data) = hosts.extra_slots(src_host, dst_host, 1).await.pop() {
                first_slots = first_slots.with(data);
            }
        }
        let mut openings = vec![crate::lanes::ready(pair, first_slots)];
        let per_pair = if relaying { 2 } else { 1 };
        let mut taken = hosts
            .extra_slots(src_host, dst_host, (lanes - 1) * per_pair)
            .await;
        let mut extra = Vec::new();
        while taken.len() >= per_pair {
            let slots = taken.pop().expect("one at least");
            extra.push(match per_pair {
                2 => slots.with(taken.pop().expect("two at least")),
                _ => slots,
            });
        }
        for (n, slots) in extra.into_iter().enumerate() {
            let (run, label) = (self, format!("p{}", n + 2));
            openings.push(crate::lanes::opening(async move {
                if run.fenced().is_some() {
                    return None;
                }
                match run.open(spec, &label).await {
                    Ok(p) => Some((p, slots)),
                    // One pair fewer; the first pair still does the work. A refusal for
                    // too many connections lowers the host's limit (RULES.md §16.3).
                    Err(e) => {
                        run.ctx.hosts.refused(&e, Some(&slots)).await;
                        run.keep(e.transcript.clone());
                        None
                    }
                }
            }));
        }
        openings
    }

    /// Every grouped record durable before the attempt's outcome is.
    async fn flush(&self) -> Result<(), AttemptEnd> {
        self.batch.finish().await.map_err(|e| {
            tracing::error!(error = %e, "store write failed during an attempt");
            AttemptEnd::Transient {
                reason: format!("the daemon could not record progress: {e}"),
            }
        })
    }

    /// The attempt's end from its lanes': a job-level permanent failure decides it, whatever
    /// else happened; a moved tree that is complete has its emptied directories removed.
    async fn end(
        &self,
        ran: crate::lanes::Ran<AttemptEnd>,
        spec: &JobSpec,
        owner: u32,
        dst_host: &str,
    ) -> AttemptEnd {
        let mut ends = ran.ends.into_iter();
        let first = ends.next();
        let end = match first {
            Some(e @ AttemptEnd::JobPermanent { .. }) => Some(e),
            first => ends
                .find(|e| matches!(e, AttemptEnd::JobPermanent { .. }))
                .or(first),
        };
        match (end, ran.failed) {
            (Some(end), _) => end,
            (None, None) => {
                if spec.recursive && spec.disposition == Disposition::Move {
                    self.remove_emptied_dirs(spec, owner, dst_host).await;
                }
                AttemptEnd::Complete
            }
            (None, Some(reason)) => AttemptEnd::Transient { reason },
        }
    }
}

impl Run {
    /// The pending members under a destination directory that could not be made fail for
    /// good, with its reply (RULES.md §10); the others are returned, to be copied.
    pub(super) async fn blocked(
        &self,
        members: Vec<Member>,
        made: &crate::lanes::walk::MadeDirs,
    ) -> Result<Vec<Member>, StoreError> {
        if made.failed.is_empty() {
            return Ok(members);
        }
        let (blocked, rest): (Vec<_>, Vec<_>) = members.into_iter().partition(|m| {
            m.state == MemberState::Pending && m.intent.is_none() && made.blocked(&m.name).is_some()
        });
        let updates: Vec<(u32, MemberUpdate)> = blocked
            .iter()
            .map(|m| {
                let u = MemberUpdate {
                    state: Some(MemberState::FailedPermanent),
                    detail: made.blocked(&m.name),
                    ..Default::default()
                };
                (m.index, u)
            })
            .collect();
        let (id, now) = (self.id, self.ctx.clock.now());
        self.ctx
            .store
            .call(move |s| s.update_members(id, updates, now))
            .await?;
        Ok(rest)
    }
}

impl Run {
    /// A moved tree's emptied source directories (`bftp_core::tree::emptied_dirs`: listed by
    /// the walk, below the root, every member under them moved), deepest first, with RMD on
    /// the first pair, or a kept one. A refused RMD (a file put there since) leaves the
    /// directory: noted in the transcript, not an error. Best effort: an attempt that ends
    /// before (a crash) leaves them, as a job whose files are all final has nothing to redo.
    pub(super) async fn remove_emptied_dirs(&self, spec: &JobSpec, owner: u32, dst_host: &str) {
        let id = self.id;
        let Ok((walk, members)) = self
            .ctx
            .store
            .call(move |s| Ok((s.walk(id)?, s.members(id)?)))
            .await
        else {
            return;
        };
        let states: Vec<(&str, MemberState)> =
            members.iter().map(|m| (m.name.as_str(), m.state)).collect();
        let dirs = bftp_core::tree::emptied_dirs(walk.listed.iter().map(String::as_str), &states);
        if dirs.is_empty() {
            return;
        }
        let src_login = ServerLogin::from_endpoint(&spec.source);
        let dst_login = spec
            .destination
            .as_ref()
            .map(ServerLogin::from_endpoint)
            .unwrap_or_else(|| src_login.clone());
        let key = crate::hosts::pool::PoolKey::new(owner, &src_login, &dst_login, spec.params);
        let (mut pair, slots, origin) = match self
            .ctx
            .hosts
            .acquire_pair(&key, &spec.source.host, dst_host)
            .await
        {
            crate::hosts::pool::Acquired::Kept(mut pair, slots, origin) => {
                // The RMDs are effects: under this job's fence, as every command of it.
                pair.set_gate(self.send_gate());
                (*pair, slots, origin)
            }
            crate::hosts::pool::Acquired::Slots(slots) => match self.open(spec, "p1").await {
                Ok(pair) => (
                    pair,
                    slots,
                    crate::hosts::pool::Origin::new(self.ctx.clock.now(), id),
                ),
                Err(e) => {
                    self.ctx.hosts.refused(&e, Some(&slots)).await;
                    self.keep(e.transcript.clone());
                    return;
                }
            },
        };
        pair.set_label("p1");
        for dir in &dirs {
            let path = crate::lanes::paths::source_path(spec, dir);
            if let Err(e) = pair.remove_dir(Side::Source, &path).await {
                pair.note(Side::Source, &format!("{path} stays: {e}"));
            }
        }
        *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, slots, origin));
        self.close(pair).await;
    }
}
