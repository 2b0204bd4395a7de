//! What a write of the queue changes, decided once for both stores.
//!
//! Each store reads what a write needs (the job's record, its members' states), asks a
//! function of this module what to write, and writes that [`Plan`] in its own transaction
//! (`sled_store/write.rs`, `pg_store/write.rs`). The functions here are pure: no I/O, no
//! clock, no store. A refusal is an `Err` decided before anything is written; a store adds
//! only what is its own (sled's indexes and request entries, PostgreSQL's leases and claims).

use bftp_core::{transition, JobEvent, JobOutcome, JobState, MemberState, Timestamp};

use crate::error::StoreError;
use crate::record::{HistoryV1, JobV1, MemberStateV1, MemberV1, OutboxV1, StateV1, WalkV1};
use crate::types::{HistoryEvent, JobId, NewJob, Walk, WatchId, WatchStatus, WATCH_JOBS_KEPT};

mod defer;
pub(crate) use defer::defer;

/// Most members one job may have (one wildcard listing).
pub const MAX_MEMBERS: usize = 1_000_000;

/// One write of a job, as a store carries it out: every part in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// The job's record as it is written, last (its history counter past [`Plan::history`]).
    pub rec: JobV1,
    /// The job's state before and after, when it moves (the store moves its indexes).
    pub moved: Option<(JobState, JobState)>,
    /// History entries added, each with its sequence number.
    pub history: Vec<(u32, HistoryV1)>,
    /// Every pending member becomes this state (no detail) in the same transaction.
    pub settle: Option<MemberState>,
    /// The job's report, put in the outbox due now: the job became final.
    pub report: Option<OutboxV1>,
    /// The caller's new members are written from this index on, in order.
    pub append_at: Option<u32>,
}

impl Plan {
    fn of(rec: JobV1) -> Plan {
        Plan {
            rec,
            moved: None,
            history: Vec::new(),
            settle: None,
            report: None,
            append_at: None,
        }
    }

    /// Adds a history entry at the record's next sequence number.
    fn note(&mut self, at: Timestamp, kind: &str, detail: Option<&str>) {
        self.history
            .push((self.rec.hist, HistoryV1::new(at, kind, detail)));
        self.rec.hist += 1;
    }

    /// Moves the job by `event` through `bftp_core::transition`; a refused event is
    /// `InvalidTransition`. A final state puts the report in the outbox.
    fn transition(&mut self, id: JobId, event: JobEvent, now: Timestamp) -> Result<(), StoreError> {
        let old = self.rec.state.to_api();
        let new = transition(old, event, now)
            .map_err(|source| StoreError::InvalidTransition { job: id, source })?;
        if new.is_final() {
            self.report = Some(OutboxV1::new(now));
        }
        self.rec.state = StateV1::from_api(&new);
        self.rec.wait = None;
        self.rec.updated = now.0;
        self.moved = Some((old, new));
        Ok(())
    }

    /// The job's state after the plan.
    pub(crate) fn state(&self) -> JobState {
        self.rec.state.to_api()
    }
}

/// How many members a job may have: `n`, as the record counts it, or `TooManyMembers`.
pub(crate) fn member_count(n: usize) -> Result<u32, StoreError> {
    if n > MAX_MEMBERS {
        return Err(StoreError::TooManyMembers {
            count: n,
            max: MAX_MEMBERS,
        });
    }
    Ok(n as u32)
}

/// A new job (`count` from [`member_count`]): queued until its start, its members written
/// from index 0, a `submitted` history entry.
pub(crate) fn submit(job: &NewJob, count: u32) -> Plan {
    let state = JobState::Queued {
        next_attempt_at: job.spec.start_at,
    };
    let rec = JobV1::new(
        job.owner_uid,
        &job.spec,
        job.keyword_hash.as_ref(),
        &state,
        job.created_at,
        count,
    );
    let mut plan = Plan::of(rec);
    plan.rec.watch = job.watch.map(|w| w.0);
    plan.append_at = Some(0);
    let submitted = HistoryEvent::submitted(job.created_at);
    plan.note(submitted.at, &submitted.kind, None);
    plan
}

/// `event` applied to the job (`JobStore::apply`): `Start` sets the attempt count, `Cancel`
/// settles every pending member as cancelled, a final state puts the report in the outbox.
pub(crate) fn event(
    id: JobId,
    rec: JobV1,
    event: JobEvent,
    now: Timestamp,
    detail: Option<&str>,
) -> Result<Plan, StoreError> {
    let mut plan = Plan::of(rec);
    plan.transition(id, event, now)?;
    if let JobEvent::Start { attempt } = event {
        plan.rec.attempts = attempt;
    }
    if event == JobEvent::Cancel {
        plan.settle = Some(MemberState::Cancelled);
    }
    plan.note(now, event.name(), detail);
    Ok(plan)
}

/// One pending member settled as `to` (with `detail`, when given), the rule of
/// `JobStore::settle_and_finish` and of a cancel; `true` when it changed.
pub(crate) fn settle(
    m: &mut MemberV1,
    to: MemberState,
    detail: Option<&str>,
    now: Timestamp,
) -> bool {
    if m.state != MemberStateV1::Pending || to == MemberState::Pending {
        return false;
    }
    m.state = MemberStateV1::from_api(to);
    m.updated = now.0;
    if let Some(d) = detail {
        m.detail = Some(d.to_string());
    }
    true
}

/// The job finished with the outcome its members' `states` (after [`settle`]) add up to.
pub(crate) fn finish(
    id: JobId,
    rec: JobV1,
    states: &[MemberState],
    now: Timestamp,
    detail: Option<&str>,
) -> Result<Plan, StoreError> {
    let event = JobEvent::Finish {
        outcome: JobOutcome::from_members(states),
    };
    let mut plan = Plan::of(rec);
    plan.transition(id, event, now)?;
    plan.note(now, event.name(), detail);
    Ok(plan)
}

/// A running job whose lease ran out back in the queue, due `now` (PostgreSQL's takeover by
/// node `by` of node `from`'s job).
pub(crate) fn take_over(
    id: JobId,
    rec: JobV1,
    by: &str,
    from: Option<&str>,
    now: Timestamp,
) -> Result<Plan, StoreError> {
    let mut plan = Plan::of(rec);
    plan.transition(
        id,
        JobEvent::Requeue {
            next_attempt_at: now,
        },
        now,
    )?;
    let detail = format!(
        "taken over by node {by}: the lease of node {} ran out during attempt {}; \
         unfinished members will be done again",
        from.unwrap_or("(none)"),
        plan.rec.attempts
    );
    plan.note(now, "taken-over", Some(&detail));
    Ok(plan)
}

/// The membership fixed at `count` members (RULES.md §4.4), once, on a job not final.
pub(crate) fn freeze(
    id: JobId,
    rec: JobV1,
    count: u32,
    now: Timestamp,
) -> Result<Plan, StoreError> {
    if rec.frozen {
        return Err(StoreError::MembersAlreadyFrozen { job: id });
    }
    not_final(id, &rec)?;
    let mut plan = Plan::of(rec);
    plan.append_at = Some(0);
    plan.rec.members = count;
    plan.rec.frozen = true;
    let detail = format!("{count} member{} frozen", if count == 1 { "" } else { "s" });
    plan.note(now, "members", Some(&detail));
    Ok(plan)
}

fn not_final(id: JobId, rec: &JobV1) -> Result<(), StoreError> {
    let state = rec.state.to_api();
    if state.is_final() {
        return Err(StoreError::JobIsFinal {
            job: id,
            state: state.name(),
        });
    }
    Ok(())
}

/// What recording one directory of a walk does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Listing {
    /// The directory is not in the frontier (frozen before, or never queued): nothing is
    /// written; the walk as it is.
    Known(Walk),
    /// Write the plan (the directory's files appended as members); the walk after it.
    Record(Box<Plan>, Walk),
}

/// One directory of a recursive job's walk (`JobStore::record_directory`) with `files` files
/// (appended after the members frozen so far): a history entry for it, and the membership
/// frozen when the frontier is empty.
pub(crate) fn directory(
    id: JobId,
    rec: JobV1,
    dir: &str,
    files: usize,
    subdirs: &[String],
    unique: &[(String, String)],
    now: Timestamp,
) -> Result<Listing, StoreError> {
    not_final(id, &rec)?;
    let mut walk = match (&rec.walk, rec.frozen) {
        (Some(w), _) => w.clone(),
        (None, true) => return Err(StoreError::MembersAlreadyFrozen { job: id }),
        (None, false) => WalkV1::start(),
    };
    if !walk.record(dir, subdirs, unique) {
        return Ok(Listing::Known(walk.to_api()));
    }
    let count = member_count(rec.members as usize + files)?;
    let mut plan = Plan::of(rec);
    plan.append_at = Some(plan.rec.members);
    plan.rec.members = count;
    let detail = WalkV1::listed_detail(dir, files, subdirs.len());
    plan.note(now, "listed", Some(&detail));
    if walk.todo.is_empty() {
        plan.rec.frozen = true;
        let detail = walk.frozen_detail(count);
        plan.note(now, "members", Some(&detail));
    }
    let out = walk.to_api();
    plan.rec.walk = Some(walk);
    Ok(Listing::Record(Box::new(plan), out))
}

/// The walk of a job as read (`JobStore::walk`): a job not yet walked has the root alone in
/// its frontier; a job frozen without a walk (not recursive) has nothing to walk.
pub(crate) fn walk_of(rec: &JobV1) -> Walk {
    match (&rec.walk, rec.frozen) {
        (Some(w), _) => w.to_api(),
        (None, true) => Walk::default(),
        (None, false) => WalkV1::start().to_api(),
    }
}

/// Destination directories made, added to the job's walk: the record to write, or `None`
/// when there is nothing to write (no walk, or every directory known).
pub(crate) fn made_dirs(mut rec: JobV1, dirs: &[String]) -> Option<JobV1> {
    let walk = rec.walk.as_mut()?;
    walk.record_made(dirs).then_some(rec)
}

/// An event of the daemon's own appended to the job's history.
pub(crate) fn history(rec: JobV1, event: &HistoryEvent) -> Plan {
    let mut plan = Plan::of(rec);
    plan.note(event.at, &event.kind, event.detail.as_deref());
    plan
}

// ---- watches (RULES.md §15) ----

/// The checkpoint entry a member's change settles, when it settles one: the member is of a
/// watch's job (`watch`, the job record's), its state changed from `before`, and the new
/// state ends its content with an outcome (`bftp_core::watch::outcome_of`). The store reads
/// that entry and writes [`checkpoint_mark`] of it in the transaction that writes the member.
/// A member written at birth (a refused name) changes from `Pending`.
pub(crate) fn checkpoint_key(
    watch: Option<u64>,
    before: MemberState,
    after: &MemberV1,
) -> Option<(WatchId, &str)> {
    let w = watch?;
    settles_checkpoint(before, after).then_some((WatchId(w), after.name.as_str()))
}

/// Whether a member's change from `before` to `after` settles its content: the state
/// changed, to one with an outcome. (A store asks this before it reads the job's watch.)
pub(crate) fn settles_checkpoint(before: MemberState, after: &MemberV1) -> bool {
    let state = after.state.to_api();
    state != before && bftp_core::watch::outcome_of(state).is_some()
}

/// The entry to write for a member [`checkpoint_key`] named, from the entry the checkpoint
/// holds for its path (`None`: write nothing): `bftp_core::watch::settled` with the size and
/// modify time the member holds.
pub(crate) fn checkpoint_mark(
    entry: Option<&bftp_core::watch::Entry>,
    after: &MemberV1,
) -> Option<bftp_core::watch::Entry> {
    bftp_core::watch::settled(
        entry,
        after.size,
        after.mtime.as_deref(),
        after.state.to_api(),
    )
}

/// A watch's status after a poll: the caller's `status`, but its list of jobs is the
/// store's (`jobs`, the stored status's), with the job the poll made (`job`) the newest of
/// the last [`WATCH_JOBS_KEPT`] and the current job.
pub(crate) fn polled(jobs: &[JobId], mut status: WatchStatus, job: Option<JobId>) -> WatchStatus {
    status.jobs = jobs.to_vec();
    if let Some(id) = job {
        status.current_job = Some(id);
        status.jobs.retain(|j| *j != id);
        status.jobs.push(id);
        let over = status.jobs.len().saturating_sub(WATCH_JOBS_KEPT);
        status.jobs.drain(..over);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{NewMember, SealedEndpoint, SealedSpec};
    use bftp_core::{
        DestCommand, Disposition, FileStructure, FtpParams, RetryPolicy, TransferMode, TransferType,
    };

    pub(super) const T: Timestamp = Timestamp(1_000_000);
    const NOW: Timestamp = Timestamp(2_000_000);
    const ID: JobId = JobId(7);

    fn spec() -> SealedSpec {
        let end = SealedEndpoint {
            host: "h".into(),
            port: 21,
            user: "u".into(),
            password: None,
            acct: None,
            path: "/p".into(),
            tls: Default::default(),
        };
        SealedSpec {
            source: end.clone(),
            destination: Some(end),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams {
                transfer_type: TransferType::Image,
                mode: TransferMode::Stream,
                structure: FileStructure::File,
            },
            start_at: T,
            retry: RetryPolicy {
                first_interval: std::time::Duration::from_secs(60),
                factor: 2.0,
                cap: std::time::Duration::from_secs(600),
                max_attempts: 3,
                deadline: std::time::Duration::from_secs(3600),
            },
            notify: vec![],
            keyword_present: false,
            proof: None,
            recursive: false,
            data_path: None,
        }
    }

    pub(super) fn rec(state: JobState, members: u32) -> JobV1 {
        let mut r = JobV1::new(1, &spec(), None, &state, T, members);
        r.hist = 3;
        r
    }

    fn queued() -> JobState {
        JobState::Queued { next_attempt_at: T }
    }

    fn running() -> JobState {
        JobState::Running {
            attempt: 1,
            started_at: T,
        }
    }

    fn kinds(p: &Plan) -> Vec<(u32, &str, Option<&str>)> {
        p.history
            .iter()
            .map(|(seq, h)| (*seq, h.kind.as_str(), h.detail.as_deref()))
            .collect()
    }

    #[test]
    fn member_counts_stop_at_the_most_one_job_may_have() {
        for (n, ok) in [
            (0, true),
            (1, true),
            (MAX_MEMBERS, true),
            (MAX_MEMBERS + 1, false),
        ] {
            assert_eq!(member_count(n).is_ok(), ok, "{n}");
        }
    }

    #[test]
    fn a_new_job_is_queued_with_its_members_and_one_history_entry() {
        let job = NewJob {
            owner_uid: 1,
            spec: spec(),
            keyword_hash: None,
            request: None,
            created_at: T,
            members: vec![],
            watch: None,
        };
        for (count, frozen) in [(0, false), (2, true)] {
            let p = submit(&job, count);
            assert_eq!(p.state(), queued());
            assert_eq!(
                (p.rec.members, p.rec.frozen, p.rec.hist),
                (count, frozen, 1)
            );
            assert_eq!(kinds(&p), [(0, "submitted", None)]);
            assert_eq!((p.append_at, p.moved, p.settle), (Some(0), None, None));
            assert!(p.report.is_none());
        }
    }

    #[test]
    fn events_move_the_state_settle_on_cancel_and_report_when_final() {
        let start = JobEvent::Start { attempt: 1 };
        let finish = JobEvent::Finish {
            outcome: JobOutcome::Succeeded,
        };
        let cancelled = JobState::Cancelled { at: T };
        // (from, event, allowed, settles, reports, attempts after)
        type Row = (JobState, JobEvent, bool, Option<MemberState>, bool, u32);
        #[rustfmt::skip]
        let table: &[Row] = &[
            (queued(),  start,            true,  None,                         false, 1),
            (queued(),  JobEvent::Cancel, true,  Some(MemberState::Cancelled), true,  0),
            (running(), finish,           true,  None,                         true,  0),
            (running(), JobEvent::Cancel, true,  Some(MemberState::Cancelled), true,  0),
            (queued(),  finish,           true,  None,                         true,  0),
            (cancelled, start,            false, None,                         false, 0),
        ];
        for (from, ev, allowed, settles, reports, attempts) in table {
            let r = event(ID, rec(*from, 2), *ev, NOW, Some("why"));
            let Ok(p) = r else {
                assert!(!allowed, "{from:?} {ev:?}: {r:?}");
                assert!(matches!(r, Err(StoreError::InvalidTransition { .. })));
                continue;
            };
            assert!(allowed, "{from:?} {ev:?}");
            assert_eq!(p.settle, *settles, "{ev:?}");
            assert_eq!(p.report.is_some(), *reports, "{ev:?}");
            assert_eq!(p.rec.attempts, *attempts, "{ev:?}");
            assert_eq!(p.moved, Some((*from, p.state())));
            assert_eq!(p.rec.updated, NOW.0);
            assert_eq!(kinds(&p), [(3, ev.name(), Some("why"))]);
            assert_eq!(p.rec.hist, 4);
        }
    }

    #[test]
    fn settling_changes_only_pending_members() {
        use MemberState::*;
        // (member's state, becomes, detail, changed, state after)
        #[rustfmt::skip]
        let table: &[(MemberState, MemberState, Option<&str>, bool, MemberState)] = &[
            (Pending,   FailedPermanent,    Some("gave up"), true,  FailedPermanent),
            (Pending,   Cancelled, None,            true,  Cancelled),
            (Pending,   Pending,   Some("x"),       false, Pending),
            (Succeeded, FailedPermanent,    Some("gave up"), false, Succeeded),
            (FailedPermanent,    Cancelled, None,            false, FailedPermanent),
        ];
        for (from, to, detail, changed, after) in table {
            let mut m = MemberV1::new(
                &NewMember {
                    name: "a".into(),
                    size: None,
                    modified: None,
                    refused: None,
                },
                T,
            );
            m.state = MemberStateV1::from_api(*from);
            m.detail = Some("before".into());
            assert_eq!(
                settle(&mut m, *to, *detail, NOW),
                *changed,
                "{from:?} to {to:?}"
            );
            assert_eq!(m.state.to_api(), *after);
            let want_detail = if *changed {
                detail.unwrap_or("before")
            } else {
                "before"
            };
            assert_eq!(m.detail.as_deref(), Some(want_detail));
            assert_eq!(m.updated, if *changed { NOW.0 } else { T.0 });
        }
    }

    #[test]
    fn a_finish_takes_the_outcome_its_members_add_up_to() {
        use MemberState::*;
        #[rustfmt::skip]
        let table: &[(&[MemberState], JobOutcome)] = &[
            (&[Succeeded, Succeeded], JobOutcome::Succeeded),
            (&[Succeeded, FailedPermanent],    JobOutcome::Partial),
            (&[FailedPermanent, FailedPermanent],       JobOutcome::Failed),
        ];
        for (states, outcome) in table {
            let p = finish(ID, rec(running(), 2), states, NOW, Some("d")).unwrap();
            assert_eq!(
                p.state(),
                JobState::Finished {
                    outcome: *outcome,
                    at: NOW
                }
            );
            assert!(p.report.is_some());
            assert_eq!(kinds(&p), [(3, "finish", Some("d"))]);
        }
        let done = JobState::Cancelled { at: T };
        assert!(matches!(
            finish(ID, rec(done, 1), &[FailedPermanent], NOW, None),
            Err(StoreError::InvalidTransition { .. })
        ));
    }

    #[test]
    fn a_takeover_requeues_due_now_and_says_whose_lease_ran_out() {
        let mut r = rec(running(), 1);
        r.attempts = 2;
        let p = take_over(ID, r, "b", Some("a"), NOW).unwrap();
        assert_eq!(
            p.state(),
            JobState::Queued {
                next_attempt_at: NOW
            }
        );
        assert!(p.report.is_none());
        let detail = "taken over by node b: the lease of node a ran out during attempt 2; \
                      unfinished members will be done again";
        assert_eq!(kinds(&p), [(3, "taken-over", Some(detail))]);
        assert!(take_over(ID, rec(queued(), 1), "b", None, NOW).is_err());
    }

    #[test]
    fn a_membership_is_frozen_once_and_not_on_a_final_job() {
        let done = JobState::Cancelled { at: T };
        // (state, members already, count, result: Ok(detail) or the refusal)
        #[rustfmt::skip]
        let table: &[(JobState, u32, u32, Result<&str, &str>)] = &[
            (queued(),  0, 1, Ok("1 member frozen")),
            (running(), 0, 3, Ok("3 members frozen")),
            (queued(),  0, 0, Ok("0 members frozen")),
            (queued(),  2, 1, Err("frozen")),
            (done,      0, 1, Err("final")),
        ];
        for (state, already, count, want) in table {
            let r = freeze(ID, rec(*state, *already), *count, NOW);
            match (r, want) {
                (Ok(p), Ok(detail)) => {
                    assert_eq!((p.rec.members, p.rec.frozen), (*count, true));
                    assert_eq!((p.append_at, p.moved), (Some(0), None));
                    assert_eq!(kinds(&p), [(3, "members", Some(*detail))]);
                }
                (Err(StoreError::MembersAlreadyFrozen { .. }), Err("frozen")) => {}
                (Err(StoreError::JobIsFinal { .. }), Err("final")) => {}
                (r, want) => panic!("{state:?} {already}: {r:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_walk_records_each_directory_once_and_freezes_at_its_end() {
        let subdirs = vec!["d".to_string()];
        // The root: one subdirectory queued, two files appended at 0.
        let Listing::Record(p, w) =
            directory(ID, rec(queued(), 0), "", 2, &subdirs, &[], NOW).unwrap()
        else {
            panic!("the root is in the frontier");
        };
        assert_eq!(w.frontier, ["d"]);
        assert_eq!(
            (p.append_at, p.rec.members, p.rec.frozen),
            (Some(0), 2, false)
        );
        let listed = "directory \".\": 2 files, 1 subdirectory";
        assert_eq!(kinds(&p), [(3, "listed", Some(listed))]);
        // The root again: nothing to write.
        let again = directory(ID, p.rec.clone(), "", 2, &subdirs, &[], NOW).unwrap();
        assert_eq!(again, Listing::Known(w.clone()));
        // The last directory: its file appended after the two, the membership frozen.
        let Listing::Record(last, w) = directory(ID, p.rec, "d", 1, &[], &[], NOW).unwrap() else {
            panic!("d is in the frontier");
        };
        assert!(w.frontier.is_empty());
        assert_eq!(
            (last.append_at, last.rec.members, last.rec.frozen),
            (Some(2), 3, true)
        );
        let frozen = "3 members frozen from 2 directories";
        assert_eq!(
            kinds(&last),
            [
                (
                    4,
                    "listed",
                    Some("directory \"d\": 1 file, 0 subdirectories")
                ),
                (5, "members", Some(frozen))
            ]
        );
        assert_eq!(walk_of(&last.rec), w);
        // Refusals: a final job; a job frozen without a walk; too many members.
        let done = JobState::Cancelled { at: T };
        assert!(matches!(
            directory(ID, rec(done, 0), "", 0, &[], &[], NOW),
            Err(StoreError::JobIsFinal { .. })
        ));
        assert!(matches!(
            directory(ID, rec(queued(), 1), "", 0, &[], &[], NOW),
            Err(StoreError::MembersAlreadyFrozen { .. })
        ));
        assert!(matches!(
            directory(ID, rec(queued(), 0), "", MAX_MEMBERS + 1, &[], &[], NOW),
            Err(StoreError::TooManyMembers { .. })
        ));
    }

    #[test]
    fn walks_read_and_made_directories_by_the_table() {
        assert_eq!(walk_of(&rec(queued(), 0)).frontier, [""]);
        assert_eq!(walk_of(&rec(queued(), 2)), Walk::default());
        assert_eq!(made_dirs(rec(queued(), 0), &["a".into()]), None);
        let mut walked = rec(queued(), 0);
        walked.walk = Some(WalkV1::start());
        let after = made_dirs(walked, &["b".into(), "a".into()]).expect("new directories");
        assert_eq!(after.walk.as_ref().unwrap().made, ["a", "b"]);
        assert_eq!(made_dirs(after, &["a".into()]), None, "all known already");
    }

    /// The delivery rule of a watch (RULES.md §15), as every store's member write asks it:
    /// (the job's watch, the member's state before, after, the member's size, the entry's
    /// size and outcome (`None`: no entry), the outcome written, `None`: nothing written).
    #[test]
    fn a_member_settles_its_watch_entry_by_the_table() {
        use bftp_core::watch::{Entry, Facts, Outcome};
        use MemberState::*;
        type Row = (
            Option<u64>,
            MemberState,
            MemberState,
            Option<u64>,
            Option<(Option<u64>, Option<Outcome>)>,
            Option<Outcome>,
        );
        let fresh = Some((Some(5), None));
        #[rustfmt::skip]
        let table: &[Row] = &[
            (Some(3), Pending,   Succeeded,              Some(5), fresh, Some(Outcome::Delivered)),
            (Some(3), Pending,   FailedPermanent,        Some(5), fresh, Some(Outcome::Failed)),
            (Some(3), Pending,   Refused,                Some(5), fresh, Some(Outcome::Failed)),
            (Some(3), Pending,   Uncertain,              Some(5), fresh, Some(Outcome::Uncertain)),
            // Not settled: the next poll takes the content again.
            (Some(3), Pending,   Cancelled,              Some(5), fresh, None),
            (Some(3), Pending,   FailedRetriesExhausted, Some(5), fresh, None),
            (Some(3), Pending,   Pending,                Some(5), fresh, None),
            // Not a watch's job.
            (None,    Pending,   Succeeded,              Some(5), fresh, None),
            // The state did not change (another field of a final member).
            (Some(3), Succeeded, Succeeded,              Some(5), fresh, None),
            // The path holds other content now, or nothing.
            (Some(3), Pending,   Succeeded,              Some(5), Some((Some(6), None)), None),
            (Some(3), Pending,   Succeeded,              Some(6), fresh, None),
            (Some(3), Pending,   Succeeded,              Some(5), None, None),
            // Already marked so.
            (Some(3), Pending,   Succeeded,              Some(5), Some((Some(5), Some(Outcome::Delivered))), None),
            // An uncertain mark becomes delivered once proven.
            (Some(3), Uncertain, Succeeded,              Some(5), Some((Some(5), Some(Outcome::Uncertain))), Some(Outcome::Delivered)),
        ];
        for (i, (watch, before, after, size, entry, want)) in table.iter().enumerate() {
            let mut m = MemberV1::new(
                &NewMember {
                    name: "sub/a.csv".into(),
                    size: *size,
                    modified: Some("20261201050000".into()),
                    refused: None,
                },
                T,
            );
            m.state = MemberStateV1::from_api(*after);
            let entry = entry.map(|(size, outcome)| Entry {
                facts: Facts {
                    size,
                    modified: Some("20261201050000".into()),
                    unique: Some("u1".into()),
                },
                since: T,
                outcome,
                hint: Some("h".into()),
                taken: 2,
            });
            let key = checkpoint_key(*watch, *before, &m);
            if let Some((w, path)) = key {
                assert_eq!((w, path), (WatchId(3), "sub/a.csv"), "row {i}");
            }
            let written = key.and_then(|_| checkpoint_mark(entry.as_ref(), &m));
            assert_eq!(written.as_ref().and_then(|e| e.outcome), *want, "row {i}");
            if let (Some(w), Some(e)) = (&written, &entry) {
                // Only the outcome changes: facts, since, hint and taken stay.
                assert_eq!(
                    Entry {
                        outcome: e.outcome,
                        ..w.clone()
                    },
                    *e,
                    "row {i}"
                );
            }
        }
    }

    #[test]
    fn a_poll_makes_its_job_current_and_keeps_the_last_twenty() {
        let status = WatchStatus {
            polls: 4,
            current_job: Some(JobId(20)),
            jobs: vec![JobId(99)],
            ..WatchStatus::default()
        };
        let kept: Vec<JobId> = (1..=20).map(JobId).collect();
        // No job: the caller's status, the store's list of jobs.
        let same = polled(&kept, status.clone(), None);
        assert_eq!((same.current_job, &same.jobs), (Some(JobId(20)), &kept));
        let after = polled(&kept, status, Some(JobId(21)));
        assert_eq!(after.current_job, Some(JobId(21)));
        assert_eq!(after.jobs, (2..=21).map(JobId).collect::<Vec<_>>());
        assert_eq!(after.polls, 4);
        assert_eq!(
            polled(&[], WatchStatus::default(), Some(JobId(1))).jobs,
            [JobId(1)]
        );
    }

    #[test]
    fn the_daemons_own_history_entry_takes_the_next_number() {
        let e = HistoryEvent {
            at: NOW,
            kind: "recovered".into(),
            detail: Some("d".into()),
        };
        let p = history(rec(queued(), 0), &e);
        assert_eq!(kinds(&p), [(3, "recovered", Some("d"))]);
        assert_eq!((p.rec.hist, p.moved, p.append_at), (4, None, None));
    }
}
