//! One poll of one watch (see the room's docs for the order).

use std::collections::{BTreeMap, HashMap, HashSet};

use bftp_core::watch::{Entry, Ignored, Poll, Wait};
use bftp_core::{JobSpec, Timestamp};
use bftp_ftp::{Pair, ServerLogin};
use bftp_store::{
    Job, JobId, Member, NewJob, NewMember, PollRecord, Watch, WatchId, WatchNote, WatchStatus,
};

use super::Watcher;
use crate::hosts::pool::{Acquired, Origin, PoolKey};

/// At most this many files of a poll are named on the watch (the counts count them all).
const MAX_NOTES: usize = 50;

impl Watcher {
    /// Polls watch `id` if this node holds it and its last job is final. `true`: not now (its
    /// last job is still under way, another node holds it, or the store failed): the watch is
    /// left alone for a while rather than looked at again at once.
    pub(super) async fn poll_one(&self, id: WatchId) -> bool {
        let started = std::time::Instant::now();
        let now = self.clock.now();
        let (node, until) = (self.node.clone(), self.hold_until(now, None));
        let held = self
            .store
            .call(move |s| match s.hold_watch(id, &node, now, until)? {
                true => s.watch(id),
                false => Ok(None),
            })
            .await;
        let w = match held {
            Ok(Some(w)) if !w.paused => w,
            Ok(Some(_)) => return false,
            // Held by another node (or removed): its holder polls it.
            Ok(None) => return true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hold the watch; trying again at its next look");
                return true;
            }
        };
        let mut status = w.status.clone();
        if let Some(job) = status.current_job {
            match self.last_job(job).await {
                Ok(Some((job, _))) if !job.state.is_final() => return true,
                Ok(Some((job, members))) => fold(&mut status, &job, &members),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the watch's last job");
                    return true;
                }
            }
            status.current_job = None;
        }
        if self.alarm_if_due(&w, &status, now).await {
            status.last_alarm = Some(now);
        }
        if self.digest_if_due(&w, &status, now).await {
            status.last_digest = Some(now);
            status.digest_base = [
                status.polls,
                status.delivered,
                status.failed,
                status.repeats,
            ];
        }
        status.polls += 1;
        status.last_poll = Some(now);
        status.next_poll =
            now.saturating_add(std::time::Duration::from_millis(w.settings.every_ms.max(1)));
        let mut held = None;
        let mut repeats = Vec::new();
        let record = match self.observe(&w, &mut status, now, &mut held).await {
            Ok((record, r)) => {
                repeats = r;
                record
            }
            Err(why) => {
                tracing::warn!(error = %why, "the watch's poll failed; it polls again at its next tick");
                status.last_error = Some(why);
                PollRecord {
                    status,
                    put: Vec::new(),
                    prune: Vec::new(),
                    job: None,
                }
            }
        };
        let made = record.job.is_some();
        let mut failed_status = record.status.clone();
        let taken = record.job.as_ref().map_or(0, |j| j.members.len());
        // The hold renewed first: a long listing must not let it lapse under the write.
        let (node, renewed) = (self.node.clone(), self.clock.now());
        let until = self.hold_until(renewed, Some(w.settings.every_ms));
        let recorded = self
            .store
            .call(move |s| {
                // Lost meanwhile: `record_poll` refuses the write (another node holds it).
                s.hold_watch(id, &node, renewed, until)?;
                let (watch, job) = s.record_poll(id, record)?;
                // The job's history names the files it copies again, so its report does.
                if let (Some(job), false) = (&job, repeats.is_empty()) {
                    s.append_history(job.id, repeat_event(id, &repeats, renewed))?;
                }
                Ok((watch, job))
            })
            .await;
        // The poll's wall time, from its hold to its record written (bench-watch reads it).
        tracing::debug!(
            taken,
            took_ms = started.elapsed().as_millis() as u64,
            "the watch polled"
        );
        match recorded {
            Ok((_, Some(job))) if made => {
                tracing::info!(
                    job = job.id.0,
                    files = job.member_count,
                    "the watch made a job"
                );
                self.scheduler.notify();
                self.keep_pair(held, job.id).await;
            }
            Ok(_) => drop_pair(held).await,
            Err(e) => {
                tracing::warn!(error = %e, "the watch's poll could not be recorded; nothing of it counts");
                drop_pair(held).await;
                // The watch says so, unless another node holds it now (its polls go on).
                if !matches!(e, bftp_store::StoreError::LeaseLost { .. }) {
                    failed_status.last_error = Some(format!("the poll could not be recorded: {e}"));
                    let record = PollRecord {
                        status: failed_status,
                        put: Vec::new(),
                        prune: Vec::new(),
                        job: None,
                    };
                    let _ = self.store.call(move |s| s.record_poll(id, record)).await;
                }
            }
        }
        false
    }

    /// Until when a look at `now` holds a watch: the store's lease, or the watch's interval
    /// when longer, so the holder keeps it from one poll to the next; another node takes it
    /// over once that passed without a look.
    fn hold_until(&self, now: Timestamp, every_ms: Option<u64>) -> Timestamp {
        let every = std::time::Duration::from_millis(every_ms.unwrap_or(0));
        now.saturating_add(self.hold.max(every))
    }

    async fn last_job(
        &self,
        id: JobId,
    ) -> Result<Option<(Job, Vec<Member>)>, bftp_store::StoreError> {
        self.store
            .call(move |s| match s.get(id)? {
                Some(job) if job.state.is_final() => {
                    let members = s.members(id)?;
                    Ok(Some((job, members)))
                }
                Some(job) => Ok(Some((job, Vec::new()))),
                None => Ok(None),
            })
            .await
    }

    /// The listing and what the rule makes of it: the record to write. `Err`: why the poll
    /// could not list (the watch's last error; nothing else is written).
    async fn observe(
        &self,
        w: &Watch,
        status: &mut WatchStatus,
        now: Timestamp,
        held: &mut Option<Held>,
    ) -> Result<(PollRecord, Vec<String>), String> {
        let spec = self
            .secrets
            .unseal_spec(&w.spec)
            .map_err(|e| format!("the watch's passwords cannot be read: {e}"))?;
        let id = w.id;
        let checkpoint = self
            .store
            .call(move |s| s.watch_checkpoint(id))
            .await
            .map_err(|e| format!("the watch's checkpoint cannot be read: {e}"))?;
        let (key, mut pair, slots) = self.pair(w, &spec).await?;
        let dir = spec.source.path.clone();
        let started = self.clock.now();
        let listed = pair
            .watch_listing(&dir, w.settings.recursive, &checkpoint)
            .await;
        let finished = self.clock.now();
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                pair.mark_errored();
                *held = Some((key, pair, slots));
                return Err(format!(
                    "the source directory {dir:?} could not be listed: {e}"
                ));
            }
        };
        let settings = bftp_core::watch::Settings {
            patterns: w.settings.patterns.clone(),
            ignore: w.settings.ignore.clone(),
            settle_ms: w.settings.settle_ms,
            ready: w.settings.ready.clone(),
            list_facts: listed.method == bftp_ftp::WalkMethod::List,
        };
        let mut poll = bftp_core::watch::poll_observed(
            &checkpoint,
            &listed.listing,
            started,
            finished,
            &settings,
        );
        let mut notes = Vec::new();
        let refused_dirs = self
            .make_dirs(&mut pair, &spec, &mut poll, &checkpoint, &mut notes)
            .await;
        with_hints(&mut poll, &checkpoint, &listed.hints);
        *held = Some((key, pair, slots));

        // What the user sees of this poll.
        for (path, wait) in &poll.waiting {
            notes.push(match wait {
                Wait::Settling { ready_at, .. } => note(path, "settling", ready_at.to_rfc3339()),
                Wait::NoMarker { marker } => note(path, "no_marker", marker.clone()),
            });
        }
        for (path, why) in &poll.ignored {
            notes.push(note(
                path,
                "ignored",
                match why {
                    Ignored::Pattern { pattern } => pattern.clone(),
                    Ignored::Marker => "marker".into(),
                    Ignored::NoFacts => "no_facts".into(),
                },
            ));
        }
        for r in &listed.refused {
            notes.push(note(&r.line, "refused", r.reason.clone()));
        }
        for (path, why) in &listed.skipped {
            notes.push(note(path, "skipped", why.clone()));
        }
        status.waiting = count(poll.waiting.len());
        status.ignored = count(poll.ignored.len());
        status.refused = count(listed.refused.len() + listed.listing.unlisted.len() + refused_dirs);
        status.repeats += poll.repeats.len() as u64;
        notes.truncate(MAX_NOTES);
        status.notes = notes;
        status.last_error = None;
        for path in &poll.repeats {
            tracing::warn!(path = %path, "taken again: an earlier job of the watch ended without settling it");
        }
        // Repeats first: the notes are cut at MAX_NOTES.
        let mut repeats: Vec<WatchNote> = poll
            .repeats
            .iter()
            .map(|p| {
                note(
                    p,
                    "repeat",
                    "taken again: an earlier job ended without settling it".into(),
                )
            })
            .collect();
        repeats.append(&mut status.notes);
        repeats.truncate(MAX_NOTES);
        status.notes = repeats;
        let job = (!poll.take.is_empty()).then(|| self.job_of(w, &spec, &poll, now));
        let record = PollRecord {
            status: status.clone(),
            put: poll.put,
            prune: poll.prune,
            job,
        };
        Ok((record, poll.repeats))
    }

    /// The job a poll makes: the watch's template over the files taken, its members given.
    fn job_of(&self, w: &Watch, template: &JobSpec, poll: &Poll, now: Timestamp) -> NewJob {
        let mut spec = template.clone();
        spec.source.path = super::files_of(&template.source.path);
        if let Some(dst) = spec.destination.as_mut() {
            if !dst.path.is_empty() && !dst.path.ends_with('/') {
                dst.path.push('/');
            }
        }
        spec.recursive = false;
        spec.start_at = now;
        NewJob {
            owner_uid: w.owner_uid,
            spec: self.secrets.seal_spec(&spec),
            keyword_hash: w.keyword_hash,
            request: None,
            created_at: now,
            members: poll
                .take
                .iter()
                .map(|s| NewMember {
                    name: s.path.clone(),
                    size: s.facts.size,
                    modified: s.facts.modified.clone(),
                    refused: None,
                })
                .collect(),
            watch: Some(w.id),
        }
    }

    /// A logged-in pair for the listing: a kept one of the same owner and logins, or a new
    /// one on the host slots. The job the poll makes takes it back from the pool.
    async fn pair(&self, w: &Watch, spec: &JobSpec) -> Result<Held, String> {
        let src = ServerLogin::from_endpoint(&spec.source);
        let dst = spec
            .destination
            .as_ref()
            .map(ServerLogin::from_endpoint)
            .unwrap_or_else(|| src.clone());
        let key = PoolKey::new(w.owner_uid, &src, &dst, spec.params);
        // A server that refuses the login for too many connections teaches its host a lower
        // limit, and the poll waits for a slot under it (RULES.md §16.3).
        let mut pause = crate::hosts::TooMany::default();
        loop {
            match self.hosts.acquire_pair(&key, &src.host, &dst.host).await {
                Acquired::Kept(pair, slots, _) => return Ok((key, *pair, slots)),
                Acquired::Slots(slots) => {
                    match Pair::open(&src, &dst, spec.params, &self.limits, self.check.clone())
                        .await
                    {
                        Ok(pair) => return Ok((key, pair, slots)),
                        Err(e) if self.hosts.refused(&e, Some(&slots)).await => {
                            drop(slots);
                            pause.wait(&self.hosts, &e).await;
                        }
                        Err(e) => return Err(format!("cannot log in: {e}")),
                    }
                }
            }
        }
    }

    /// The poll made a job: its first attempt takes the pair from the pool (no new login).
    async fn keep_pair(&self, held: Option<Held>, job: JobId) {
        if let Some((key, pair, slots)) = held {
            let origin = Origin::new(self.clock.now(), job);
            self.hosts.pool.put(key, pair, slots, origin).await;
        }
    }

    /// A recursive watch's files below DST_DIR need their directories: each poll makes those
    /// of the files it takes (MKD, or found there), so one a consumer removed meanwhile is
    /// made again before a copy would fail into it. A directory that cannot be made leaves
    /// the files below it untaken this time, each named on the watch. Returns how many were
    /// refused.
    async fn make_dirs(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        poll: &mut Poll,
        checkpoint: &BTreeMap<String, Entry>,
        notes: &mut Vec<WatchNote>,
    ) -> usize {
        let Some(dst) = spec.destination.as_ref() else {
            return 0;
        };
        let mut needed: Vec<String> = Vec::new();
        for s in &poll.take {
            let mut at = 0;
            while let Some(i) = s.path[at..].find('/') {
                let dir = s.path[..at + i].to_string();
                if !needed.contains(&dir) {
                    needed.push(dir);
                }
                at += i + 1;
            }
        }
        needed.sort();
        let mut failed: Vec<(String, String)> = Vec::new();
        for dir in needed {
            if failed
                .iter()
                .any(|(f, _)| dir.starts_with(&format!("{f}/")))
            {
                continue;
            }
            let path = crate::lanes::paths::join_path(&dst.path, &dir);
            if let Err(e) = pair.make_dir(&path).await {
                failed.push((dir, e.to_string()));
            }
        }
        if failed.is_empty() {
            return 0;
        }
        let under = |p: &str| failed.iter().find(|(d, _)| p.starts_with(&format!("{d}/")));
        let withdrawn: HashSet<String> = poll
            .take
            .iter()
            .filter(|s| under(&s.path).is_some())
            .map(|s| s.path.clone())
            .collect();
        for path in &withdrawn {
            if let Some((dir, why)) = under(path) {
                notes.push(note(
                    path,
                    "refused",
                    format!("the destination directory {dir:?} could not be made: {why}"),
                ));
            }
        }
        withdraw(poll, checkpoint, &withdrawn);
        withdrawn.len()
    }
}

/// Files named in a job's history (and so its report) as taken again, at most this many
/// (the count is always whole).
const MAX_REPEATS_NAMED: usize = 100;

/// The history line of a job that copies files again: an earlier job of the watch ended
/// without settling them (a crash before its record, a cancel, retries exhausted), so the
/// copy may repeat one already made.
fn repeat_event(watch: WatchId, repeats: &[String], at: Timestamp) -> bftp_store::HistoryEvent {
    let mut named: Vec<&str> = repeats
        .iter()
        .take(MAX_REPEATS_NAMED)
        .map(String::as_str)
        .collect();
    let more = repeats.len().saturating_sub(named.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    named.sort_unstable();
    bftp_store::HistoryEvent {
        at,
        kind: "repeat".into(),
        detail: Some(format!(
            "watch {}: {} file(s) taken again, which an earlier job of the watch did not settle (the copy may repeat one already made): {}{tail}",
            watch.0,
            repeats.len(),
            named.join(", ")
        )),
    }
}

/// A pair a poll logged in, its pool key and its host slots, while the poll runs.
pub(super) type Held = (PoolKey, Pair, crate::hosts::Slots);

/// No job to hand the pair to: it is closed and its slots given back.
async fn drop_pair(held: Option<Held>) {
    if let Some((_, pair, slots)) = held {
        pair.close().await;
        drop(slots);
    }
}

fn note(path: &str, kind: &str, detail: String) -> WatchNote {
    WatchNote {
        path: path.to_owned(),
        kind: kind.to_owned(),
        detail,
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Files taken out of a poll again (their destination directory could not be made): not
/// copied, and their entries as if not taken, so the next poll takes them.
fn withdraw(poll: &mut Poll, checkpoint: &BTreeMap<String, Entry>, paths: &HashSet<String>) {
    poll.take.retain(|s| !paths.contains(&s.path));
    poll.repeats.retain(|p| !paths.contains(p));
    poll.put.retain_mut(|(path, e)| {
        if !paths.contains(path) {
            return true;
        }
        e.taken = e.taken.saturating_sub(1);
        checkpoint.get(path) != Some(e)
    });
}

/// A server without MLSD: each entry written keeps the LIST line it was asked for, and a
/// settled entry whose line changed (its display time went to the year form) keeps the new
/// line, so its facts are not asked again at every poll.
fn with_hints(poll: &mut Poll, checkpoint: &BTreeMap<String, Entry>, hints: &[(String, String)]) {
    if hints.is_empty() {
        return;
    }
    let hints: HashMap<&str, &str> = hints
        .iter()
        .map(|(p, h)| (p.as_str(), h.as_str()))
        .collect();
    let written: HashSet<String> = poll.put.iter().map(|(p, _)| p.clone()).collect();
    for (path, e) in &mut poll.put {
        if let Some(h) = hints.get(path.as_str()) {
            e.hint = Some((*h).to_owned());
        }
    }
    for (path, hint) in &hints {
        if written.contains(*path) {
            continue;
        }
        if let Some(e) = checkpoint.get(*path) {
            if e.hint.as_deref() != Some(*hint) {
                poll.put.push((
                    (*path).to_owned(),
                    Entry {
                        hint: Some((*hint).to_owned()),
                        ..e.clone()
                    },
                ));
            }
        }
    }
}

/// What a final job of the watch settled, added to the watch's figures.
fn fold(status: &mut WatchStatus, job: &Job, members: &[Member]) {
    let mut delivered = 0;
    for m in members {
        match bftp_core::watch::outcome_of(m.state) {
            Some(bftp_core::watch::Outcome::Delivered) => delivered += 1,
            Some(_) => status.failed += 1,
            None => {}
        }
    }
    status.delivered += delivered;
    if delivered > 0 {
        status.last_delivery = Some(match job.state {
            bftp_core::JobState::Finished { at, .. } | bftp_core::JobState::Cancelled { at } => at,
            _ => job.updated_at,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::watch::{Facts, Seen};

    fn entry(taken: u32, hint: Option<&str>) -> Entry {
        Entry {
            facts: Facts {
                size: Some(1),
                modified: Some("20260101000000".into()),
                unique: None,
            },
            since: Timestamp(1),
            outcome: None,
            hint: hint.map(str::to_owned),
            taken,
        }
    }

    #[test]
    fn a_withdrawn_file_is_as_if_not_taken() {
        let checkpoint = BTreeMap::from([("d/a".to_string(), entry(0, None))]);
        let mut poll = Poll {
            take: vec![
                Seen {
                    path: "d/a".into(),
                    facts: entry(0, None).facts,
                },
                Seen {
                    path: "b".into(),
                    facts: entry(0, None).facts,
                },
            ],
            put: vec![("d/a".into(), entry(1, None)), ("b".into(), entry(1, None))],
            ..Poll::default()
        };
        withdraw(&mut poll, &checkpoint, &HashSet::from(["d/a".to_string()]));
        assert_eq!(poll.take.len(), 1);
        assert_eq!(poll.put, [("b".to_string(), entry(1, None))]);
    }

    #[test]
    fn hints_ride_on_the_entries_written_and_a_changed_line_is_kept() {
        let checkpoint = BTreeMap::from([
            ("old".to_string(), entry(1, Some("1 Jul  1 07:10"))),
            ("same".to_string(), entry(1, Some("1 Jul  2 07:10"))),
        ]);
        let mut poll = Poll {
            put: vec![("new".into(), entry(0, None))],
            ..Poll::default()
        };
        let hints = [
            ("new".to_string(), "1 Dec  1 10:00".to_string()),
            ("old".to_string(), "1 Jul  1  2025".to_string()),
            ("same".to_string(), "1 Jul  2 07:10".to_string()),
        ];
        with_hints(&mut poll, &checkpoint, &hints);
        assert_eq!(
            poll.put,
            [
                ("new".to_string(), entry(0, Some("1 Dec  1 10:00"))),
                ("old".to_string(), entry(1, Some("1 Jul  1  2025"))),
            ]
        );
    }
}
