//! Watches (RULES.md §15): the watch itself, a poll's one transaction, and the checkpoint
//! entry every member-writing path settles in the member's own transaction.

use super::*;
use bftp_core::watch::{Entry, Facts, Outcome, Ready};
use bftp_store::{Job, NewJob, NewWatch, PollRecord, WatchId, WatchSettings, WatchStatus};
use std::collections::BTreeMap;

const MTIME: &str = "20261201050000";

fn new_watch(owner: u32) -> NewWatch {
    let mut spec = spec();
    spec.source.path = "/pub/data".into();
    spec.destination.as_mut().unwrap().path = "/incoming".into();
    NewWatch {
        owner_uid: owner,
        spec,
        settings: WatchSettings {
            every_ms: 300_000,
            patterns: vec!["*.csv".into()],
            ignore: vec!["*.part".into()],
            settle_ms: 60_000,
            ready: Some(Ready::Beside("READY".into())),
            recursive: true,
            notify_on: "failure".into(),
            expect: Some("daily 05:00".into()),
            digest: true,
        },
        keyword_hash: Some(kh(4)),
        created_at: at(1),
    }
}

fn entry(size: u64) -> Entry {
    Entry {
        facts: Facts {
            size: Some(size),
            modified: Some(MTIME.into()),
            unique: None,
        },
        since: at(2),
        outcome: None,
        hint: None,
        taken: 1,
    }
}

/// The job a poll makes of `files` (name, size), as the daemon builds it.
fn poll_job(owner: u32, files: &[(&str, u64)]) -> NewJob {
    let mut j = job(owner);
    j.spec.source.path = "/pub/data/*".into();
    j.spec.destination.as_mut().unwrap().path = "/incoming/".into();
    j.members = files
        .iter()
        .map(|(name, size)| NewMember {
            name: name.to_string(),
            size: Some(*size),
            modified: Some(MTIME.into()),
            refused: None,
        })
        .collect();
    j
}

fn status(polls: u64) -> WatchStatus {
    WatchStatus {
        polls,
        last_poll: Some(at(polls)),
        next_poll: at(polls + 300),
        waiting: 1,
        ..WatchStatus::default()
    }
}

/// A poll that puts an entry for each file and makes a job of them.
fn poll_of(polls: u64, owner: u32, files: &[(&str, u64)]) -> PollRecord {
    PollRecord {
        status: status(polls),
        put: files
            .iter()
            .map(|(n, s)| (n.to_string(), entry(*s)))
            .collect(),
        prune: vec![],
        job: Some(poll_job(owner, files)),
    }
}

/// This store's node (`""` for sled, which ignores it).
fn node_of(store: &dyn JobStore) -> String {
    store.cluster().map(|c| c.node()).unwrap_or_default()
}

fn hold(store: &dyn JobStore, id: WatchId) {
    assert!(store
        .hold_watch(id, &node_of(store), at(0), at(100_000))
        .unwrap());
}

fn record(store: &dyn JobStore, id: WatchId, poll: PollRecord) -> Option<Job> {
    hold(store, id);
    store.record_poll(id, poll).unwrap().1
}

fn outcomes(store: &dyn JobStore, id: WatchId) -> BTreeMap<String, Option<Outcome>> {
    store
        .watch_checkpoint(id)
        .unwrap()
        .into_iter()
        .map(|(p, e)| (p, e.outcome))
        .collect()
}

fn state(s: MemberState) -> MemberUpdate {
    MemberUpdate {
        state: Some(s),
        ..MemberUpdate::default()
    }
}

fn watches_are_created_read_listed_paused_and_removed(fx: &Fixture) {
    let store = fx.open();
    let a = store.create_watch(new_watch(1)).unwrap();
    let b = store.create_watch(new_watch(1)).unwrap();
    let c = store.create_watch(new_watch(2)).unwrap();
    assert!(
        a.id < b.id && b.id < c.id,
        "{:?} {:?} {:?}",
        a.id,
        b.id,
        c.id
    );
    assert_eq!((a.owner_uid, a.paused), (1, false));
    assert_eq!(a.settings, new_watch(1).settings);
    assert_eq!(a.spec, new_watch(1).spec);
    assert_eq!(a.keyword_hash, Some(kh(4)));
    assert_eq!(a.status.next_poll, at(1), "the first poll is due at once");
    assert_eq!(a.status.polls, 0);
    assert_eq!(store.watch(a.id).unwrap(), Some(a.clone()));
    let ids = |store: &dyn JobStore, owner| -> Vec<WatchId> {
        store
            .watches(owner)
            .unwrap()
            .into_iter()
            .map(|w| w.id)
            .collect()
    };
    assert_eq!(ids(&*store, Some(1)), [a.id, b.id]);
    assert_eq!(ids(&*store, Some(2)), [c.id]);
    assert_eq!(ids(&*store, Some(3)), []);
    assert_eq!(ids(&*store, None), [a.id, b.id, c.id]);

    let paused = store.pause_watch(b.id, true).unwrap().unwrap();
    assert!(paused.paused);
    assert!(store.watch(b.id).unwrap().unwrap().paused);
    assert!(!store.pause_watch(b.id, false).unwrap().unwrap().paused);
    assert!(!store.watch(b.id).unwrap().unwrap().paused);
    store.pause_watch(b.id, true).unwrap();
    let missing = WatchId(c.id.0 + 100);
    assert_eq!(store.pause_watch(missing, true).unwrap(), None);
    assert_eq!(store.watch(missing).unwrap(), None);

    // Durable: a reopened store has them.
    drop(store);
    let store = fx.open();
    assert!(store.watch(b.id).unwrap().unwrap().paused);
    assert_eq!(store.watches(None).unwrap().len(), 3);

    // Removed with its checkpoint; the jobs it made stay.
    let made = record(&*store, a.id, poll_of(1, 1, &[("x.csv", 3), ("y.csv", 4)])).unwrap();
    record(&*store, b.id, poll_of(1, 1, &[("x.csv", 3)]));
    assert_eq!(store.watch_checkpoint(a.id).unwrap().len(), 2);
    assert!(store.remove_watch(a.id).unwrap());
    assert_eq!(store.watch(a.id).unwrap(), None);
    assert!(store.watch_checkpoint(a.id).unwrap().is_empty());
    assert!(!store.remove_watch(a.id).unwrap());
    assert_eq!(store.get(made.id).unwrap().unwrap().watch, Some(a.id));
    // The other watches and their checkpoints are untouched.
    assert_eq!(store.watch_checkpoint(b.id).unwrap().len(), 1);
    assert_eq!(ids(&*store, None), [b.id, c.id]);
    // A removed watch takes no poll.
    let e = store
        .record_poll(a.id, poll_of(2, 1, &[("z.csv", 1)]))
        .unwrap_err();
    assert!(
        matches!(e, StoreError::WatchNotFound(w) if w == a.id),
        "{e:?}"
    );
    assert!(!store
        .hold_watch(a.id, &node_of(&*store), at(0), at(10))
        .unwrap());
    if let Some(v) = fx.verify() {
        assert_eq!(v.jobs, 2);
    }
}

fn a_poll_writes_its_entries_job_and_status_in_one_transaction(fx: &Fixture) {
    let store = fx.open();
    let w = store.create_watch(new_watch(1)).unwrap().id;
    // A first poll: entries only (everything settling), no job.
    let first = PollRecord {
        status: status(1),
        put: vec![
            ("a.csv".into(), entry(1)),
            ("b.csv".into(), entry(2)),
            ("sub/c.csv".into(), entry(3)),
        ],
        prune: vec![],
        job: None,
    };
    hold(&*store, w);
    let (watch, job) = store.record_poll(w, first).unwrap();
    assert_eq!(job, None);
    assert_eq!(watch.status, status(1));
    assert_eq!(store.watch(w).unwrap().unwrap().status, status(1));
    assert_eq!(store.watch_checkpoint(w).unwrap().len(), 3);

    // The second: c pruned, a and b taken (their entries rewritten) in a job.
    let mut taken = entry(1);
    taken.taken = 2;
    let second = PollRecord {
        status: status(2),
        put: vec![("a.csv".into(), taken.clone()), ("b.csv".into(), entry(2))],
        prune: vec!["sub/c.csv".into()],
        job: Some(poll_job(1, &[("a.csv", 1), ("b.csv", 2)])),
    };
    let (watch, job) = store.record_poll(w, second).unwrap();
    let job = job.expect("the poll made a job");
    assert_eq!(job.watch, Some(w), "the job is linked to its watch");
    assert_eq!((job.member_count, job.members_frozen), (2, true));
    assert_eq!(job.spec.source.path, "/pub/data/*");
    assert!(matches!(job.state, JobState::Queued { .. }));
    assert_eq!(store.get(job.id).unwrap().unwrap(), job);
    assert_eq!(kinds(&*store, job.id), ["submitted"]);
    assert_eq!(
        store
            .members(job.id)
            .unwrap()
            .iter()
            .map(|m| (m.name.as_str(), m.size, m.modified.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("a.csv", Some(1), Some(MTIME)),
            ("b.csv", Some(2), Some(MTIME))
        ]
    );
    let mut want = status(2);
    want.current_job = Some(job.id);
    want.jobs = vec![job.id];
    assert_eq!(watch.status, want);
    assert_eq!(store.watch(w).unwrap().unwrap().status, want);
    let cp = store.watch_checkpoint(w).unwrap();
    assert_eq!(cp.keys().collect::<Vec<_>>(), ["a.csv", "b.csv"]);
    assert_eq!(cp["a.csv"], taken);

    // A poll refused inside its transaction (its job's request key was used with other
    // parameters) writes nothing: no prune, no put, no status.
    let other = store
        .submit(with_request(job_of(1), 9, 1))
        .unwrap()
        .job()
        .id;
    let refused = PollRecord {
        status: status(3),
        put: vec![("d.csv".into(), entry(4))],
        prune: vec!["a.csv".into()],
        job: Some(with_request(poll_job(1, &[("d.csv", 4)]), 9, 2)),
    };
    let e = store.record_poll(w, refused).unwrap_err();
    assert!(
        matches!(e, StoreError::RequestKeyConflict { job } if job == other),
        "{e:?}"
    );
    assert_eq!(store.watch_checkpoint(w).unwrap(), cp);
    assert_eq!(store.watch(w).unwrap().unwrap().status, want);

    // The status names the last 20 jobs, newest last; the watch a job names is the store's.
    let mut made = vec![job.id];
    for n in 0..20 {
        let mut j = poll_job(1, &[("e.csv", 5)]);
        j.watch = Some(WatchId(999));
        let (watch, job) = store
            .record_poll(
                w,
                PollRecord {
                    status: status(4 + n),
                    put: vec![],
                    prune: vec![],
                    job: Some(j),
                },
            )
            .unwrap();
        let job = job.unwrap();
        assert_eq!(job.watch, Some(w));
        made.push(job.id);
        assert_eq!(watch.status.current_job, Some(job.id));
    }
    let status = store.watch(w).unwrap().unwrap().status;
    assert_eq!(status.jobs, made[1..]);
    assert_eq!(status.polls, 23);
}

fn job_of(owner: u32) -> NewJob {
    with_members(job(owner), &["x"])
}

/// Every path that writes a member's state settles the checkpoint entry of a watch's job's
/// member that reaches an outcome, and only then.
fn a_members_outcome_settles_its_entry_on_every_path(fx: &Fixture) {
    use MemberState::*;
    let store = fx.open();
    let w = store.create_watch(new_watch(1)).unwrap().id;
    let other = store.create_watch(new_watch(1)).unwrap().id;
    // Another watch with the same paths: its entries never move.
    record(
        &*store,
        other,
        PollRecord {
            job: None,
            ..poll_of(1, 1, &[("a1", 1), ("b1", 1)])
        },
    );

    // Job A: update_member and update_members mark; settle_and_finish does not.
    let files = [
        ("a1", 1),
        ("a2", 2),
        ("a3", 3),
        ("a4", 4),
        ("a5", 5),
        ("a6", 6),
    ];
    let a = record(&*store, w, poll_of(1, 1, &files)).unwrap().id;
    store
        .apply(a, JobEvent::Start { attempt: 1 }, at(10), None)
        .unwrap();
    store.update_member(a, 0, state(Succeeded), at(11)).unwrap();
    store
        .update_members(
            a,
            vec![
                (1, state(FailedPermanent)),
                (2, state(Uncertain)),
                // Another field of a pending member: nothing settles.
                (
                    5,
                    MemberUpdate {
                        bytes: Some(3),
                        ..MemberUpdate::default()
                    },
                ),
            ],
            at(12),
        )
        .unwrap();
    // a5's content changed since the job took it: a later listing's facts are in its entry.
    record(
        &*store,
        w,
        PollRecord {
            status: status(2),
            put: vec![("a5".into(), entry(50))],
            prune: vec![],
            job: None,
        },
    );
    store
        .settle_and_finish(a, FailedPermanent, at(13), Some("gave up".into()))
        .unwrap();
    let got = outcomes(&*store, w);
    assert_eq!(got["a1"], Some(Outcome::Delivered), "update_member");
    assert_eq!(got["a2"], Some(Outcome::Failed), "update_members");
    assert_eq!(got["a3"], Some(Outcome::Uncertain), "update_members");
    // Settled in bulk by the job's end: not the member's own failure; the next poll takes
    // it again (RULES.md §15.5).
    assert_eq!(got["a4"], None, "settle_and_finish");
    assert_eq!(
        got["a5"], None,
        "content changed: not this member's to settle"
    );
    assert_eq!(got["a6"], None, "settle_and_finish");
    assert_eq!(
        store.watch_checkpoint(w).unwrap()["a5"].facts.size,
        Some(50)
    );
    // Only the outcome changed.
    assert_eq!(
        Entry {
            outcome: None,
            ..store.watch_checkpoint(w).unwrap()["a1"].clone()
        },
        entry(1)
    );

    // Job B: a refused name is settled at birth; retries exhausted and a cancel settle
    // nothing (the next poll takes them again).
    let mut j = poll_job(1, &[("b1", 1), ("b2", 2), ("b3", 3)]);
    j.members[1].refused = Some("name contains the byte 0x0d".into());
    let b = record(
        &*store,
        w,
        PollRecord {
            status: status(3),
            put: vec![
                ("b1".into(), entry(1)),
                ("b2".into(), entry(2)),
                ("b3".into(), entry(3)),
            ],
            prune: vec![],
            job: Some(j),
        },
    )
    .unwrap()
    .id;
    assert_eq!(
        outcomes(&*store, w)["b2"],
        Some(Outcome::Failed),
        "refused at birth"
    );
    store
        .update_member(b, 0, state(FailedRetriesExhausted), at(20))
        .unwrap();
    store.apply(b, JobEvent::Cancel, at(21), None).unwrap();
    assert_eq!(
        member_states(&*store, b),
        [FailedRetriesExhausted, Refused, Cancelled]
    );
    let got = outcomes(&*store, w);
    assert_eq!((got["b1"], got["b3"]), (None, None));

    // Job C: retries exhausted at the job's end settle nothing either.
    let c = record(&*store, w, poll_of(4, 1, &[("c1", 1)])).unwrap().id;
    store
        .apply(c, JobEvent::Start { attempt: 1 }, at(30), None)
        .unwrap();
    store
        .settle_and_finish(c, FailedRetriesExhausted, at(31), None)
        .unwrap();
    assert_eq!(outcomes(&*store, w)["c1"], None);

    // A job of no watch with the same names: nothing moves.
    let plain = store
        .submit(with_members(job(1), &["a5", "b1"]))
        .unwrap()
        .job()
        .id;
    assert_eq!(store.get(plain).unwrap().unwrap().watch, None);
    store
        .update_member(plain, 0, state(Succeeded), at(40))
        .unwrap();
    store
        .update_member(plain, 1, state(Succeeded), at(40))
        .unwrap();
    let got = outcomes(&*store, w);
    assert_eq!((got["a5"], got["b1"]), (None, None));
    assert!(outcomes(&*store, other).values().all(Option::is_none));

    // Removed with the watch, a later outcome of its job writes nothing and fails nothing.
    let d = record(&*store, w, poll_of(5, 1, &[("d1", 1)])).unwrap().id;
    assert!(store.remove_watch(w).unwrap());
    store.update_member(d, 0, state(Succeeded), at(50)).unwrap();
    assert!(store.watch_checkpoint(w).unwrap().is_empty());
    if let Some(v) = fx.verify() {
        assert!(v.jobs >= 5);
    }
}

/// Issue 31: a watch's job that ends with files delivered writes `watch.delivered` with its
/// `job.finished`, in the transaction of its end; one that delivered nothing does not.
fn a_watch_job_that_delivered_files_makes_a_watch_delivered_event(fx: &Fixture) {
    let store = fx.open();
    let w = store.create_watch(new_watch(6)).unwrap();
    let one = record(&*store, w.id, poll_of(1, 6, &[("a.csv", 1), ("b.csv", 2)])).unwrap();
    store
        .apply(one.id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    store
        .update_member(one.id, 0, state(MemberState::Succeeded), at(62))
        .unwrap();
    store
        .settle_and_finish(one.id, MemberState::FailedRetriesExhausted, at(63), None)
        .unwrap();
    let two = record(&*store, w.id, poll_of(2, 6, &[("c.csv", 3)])).unwrap();
    store.apply(two.id, JobEvent::Cancel, at(64), None).unwrap();
    let ev = store.events_after(0, Some(6), 10).unwrap();
    let got: Vec<(String, Option<WatchId>)> = ev.iter().map(|e| (e.id.clone(), e.watch)).collect();
    assert_eq!(
        got,
        [
            (format!("job-{}-final", one.id), Some(w.id)),
            (
                format!("watch-{}-job-{}-delivered", w.id, one.id),
                Some(w.id)
            ),
            (format!("job-{}-final", two.id), Some(w.id)),
        ]
    );
    assert_eq!(ev[1].kind, bftp_core::event::EventKind::WatchDelivered);
    assert_eq!(ev[1].job, Some(one.id));
}

both_stores!(
    a_watch_job_that_delivered_files_makes_a_watch_delivered_event,
    watches_are_created_read_listed_paused_and_removed,
    a_poll_writes_its_entries_job_and_status_in_one_transaction,
    a_members_outcome_settles_its_entry_on_every_path,
);

/// Two nodes on one PostgreSQL store: one holds a watch at a time, the other takes it over
/// once the holder's time has passed, and a node that does not hold it cannot write a poll.
#[test]
fn two_nodes_hold_a_watch_one_at_a_time() {
    let url = pgcluster::fresh_database();
    let a = open_pg(&url, "node-a");
    let b = open_pg(&url, "node-b");
    let w = a.create_watch(new_watch(1)).unwrap().id;
    let poll = || PollRecord {
        job: None,
        ..poll_of(1, 1, &[("x.csv", 1)])
    };
    // Never held: no node may write a poll.
    let e = a.record_poll(w, poll()).unwrap_err();
    assert!(matches!(e, StoreError::LeaseLost { .. }), "{e:?}");

    assert!(a.hold_watch(w, "node-a", at(0), at(60)).unwrap());
    assert!(!b.hold_watch(w, "node-b", at(10), at(70)).unwrap());
    assert!(
        a.hold_watch(w, "node-a", at(20), at(80)).unwrap(),
        "renewed"
    );
    let e = b.record_poll(w, poll()).unwrap_err();
    assert!(matches!(e, StoreError::LeaseLost { .. }), "{e:?}");
    assert!(
        b.watch_checkpoint(w).unwrap().is_empty(),
        "refused: nothing written"
    );
    assert_eq!(b.watch(w).unwrap().unwrap().status.polls, 0);
    a.record_poll(w, poll()).unwrap();
    assert_eq!(b.watch_checkpoint(w).unwrap().len(), 1);

    // a's time passes (it renews no more): b takes over, and a's late poll is refused.
    assert!(
        !b.hold_watch(w, "node-b", at(80), at(140)).unwrap(),
        "not before it ends"
    );
    assert!(b.hold_watch(w, "node-b", at(81), at(141)).unwrap());
    assert!(!a.hold_watch(w, "node-a", at(90), at(150)).unwrap());
    let e = a.record_poll(w, poll()).unwrap_err();
    assert!(matches!(e, StoreError::LeaseLost { .. }), "{e:?}");
    b.record_poll(w, poll()).unwrap();
    assert_eq!(a.watch(w).unwrap().unwrap().status.polls, 1);

    assert!(!a
        .hold_watch(WatchId(w.0 + 1), "node-a", at(0), at(60))
        .unwrap());
}
