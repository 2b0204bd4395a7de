//! The event log (issue 31): the events a change writes in its own transaction, the
//! idempotent put, delivery rounds per target, owner scoping, and retention.

use super::*;
use bftp_core::event::EventKind;
use bftp_core::retention::Keep;
use bftp_store::{Event, NewEvent, WatchId};

fn ids(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.id.clone()).collect()
}

fn all(store: &dyn JobStore) -> Vec<Event> {
    store.events_after(0, None, 1000).unwrap()
}

fn failed(s: MemberState) -> MemberUpdate {
    MemberUpdate {
        state: Some(s),
        ..MemberUpdate::default()
    }
}

fn a_jobs_end_writes_its_event_with_the_report_and_nothing_before(fx: &Fixture) {
    let store = fx.open();
    let a = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
    let b = store.submit(with_members(job(2), &["b"])).unwrap().job().id;
    let c = store
        .submit(with_members(job(1), &["c", "d"]))
        .unwrap()
        .job()
        .id;
    for id in [a, b, c] {
        store
            .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
            .unwrap();
    }
    store
        .apply(
            c,
            JobEvent::Requeue {
                next_attempt_at: at(600),
            },
            at(62),
            None,
        )
        .unwrap();
    assert!(all(&*store).is_empty(), "no final state yet: no event");
    store
        .apply(
            a,
            JobEvent::Finish {
                outcome: JobOutcome::Succeeded,
            },
            at(70),
            None,
        )
        .unwrap();
    store.apply(b, JobEvent::Cancel, at(71), None).unwrap();
    store
        .settle_and_finish(c, MemberState::FailedPermanent, at(72), Some("530".into()))
        .unwrap();
    let ev = all(&*store);
    assert_eq!(
        ids(&ev),
        [
            format!("job-{a}-final"),
            format!("job-{b}-final"),
            format!("job-{c}-final")
        ],
        "members settled in bulk make no member.failed"
    );
    let kinds: Vec<EventKind> = ev.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::JobFinished,
            EventKind::JobCancelled,
            EventKind::JobFinished
        ]
    );
    assert!(ev.windows(2).all(|w| w[0].seq < w[1].seq), "{ev:?}");
    for (e, (id, owner, t)) in ev
        .iter()
        .zip([(a, 1, at(70)), (b, 2, at(71)), (c, 1, at(72))])
    {
        assert_eq!(
            (e.job, e.watch, e.member, e.owner_uid, e.created_at, e.due),
            (Some(id), None, None, owner, t, Some(t))
        );
        assert!(e.deliveries.is_empty());
        assert_eq!(store.events_of_job(id).unwrap(), vec![e.clone()]);
    }
    // Owner scoping and paging.
    assert_eq!(
        ids(&store.events_after(0, Some(2), 10).unwrap()),
        [format!("job-{b}-final")]
    );
    assert_eq!(
        ids(&store.events_after(ev[0].seq, None, 1).unwrap()),
        [format!("job-{b}-final")]
    );
    assert!(store.events_after(ev[2].seq, None, 10).unwrap().is_empty());
    // Due: the earliest first, up to the time asked.
    assert_eq!(store.event_next_due().unwrap(), Some(at(70)));
    assert_eq!(
        ids(&store.events_due(at(71), 10).unwrap()),
        [format!("job-{a}-final"), format!("job-{b}-final")]
    );
}

fn a_member_failed_permanently_is_an_event_of_its_write(fx: &Fixture) {
    let store = fx.open();
    let id = store
        .submit(with_members(job(3), &["a", "b", "c", "d"]))
        .unwrap()
        .job()
        .id;
    store
        .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    store
        .update_member(id, 0, failed(MemberState::Succeeded), at(62))
        .unwrap();
    store
        .update_member(id, 1, failed(MemberState::FailedPermanent), at(63))
        .unwrap();
    store
        .update_members(
            id,
            vec![
                (2, failed(MemberState::FailedRetriesExhausted)),
                (3, failed(MemberState::FailedPermanent)),
            ],
            at(64),
        )
        .unwrap();
    let ev = store.events_of_job(id).unwrap();
    assert_eq!(
        ids(&ev),
        [
            format!("job-{id}-member-1-failed"),
            format!("job-{id}-member-3-failed")
        ]
    );
    assert!(ev
        .iter()
        .all(|e| e.kind == EventKind::MemberFailed && e.owner_uid == 3));
    assert_eq!((ev[0].member, ev[0].created_at), (Some(1), at(63)));
    assert_eq!((ev[1].member, ev[1].created_at), (Some(3), at(64)));
    // The same state written again is no new event.
    let _ = store.update_member(id, 1, failed(MemberState::FailedPermanent), at(65));
    assert_eq!(store.events_of_job(id).unwrap().len(), 2);
}

fn late(watch: u64, owner: u32, t: Timestamp) -> NewEvent {
    NewEvent::of(bftp_core::event::watch_late(watch, t), owner, t)
}

fn a_put_event_is_written_once_per_id(fx: &Fixture) {
    let store = fx.open();
    let (first, new) = store.put_event(late(4, 9, at(100))).unwrap();
    assert!(new);
    assert_eq!(
        (
            first.kind,
            first.watch,
            first.job,
            first.owner_uid,
            first.due
        ),
        (
            EventKind::WatchLate,
            Some(WatchId(4)),
            None,
            9,
            Some(at(100))
        )
    );
    // The same alarm raised again (later, from another node or after a restart).
    let (again, new) = store.put_event(late(4, 9, at(100))).unwrap();
    assert!(!new);
    assert_eq!(again, first);
    let mut later = late(4, 9, at(100));
    later.created_at = at(130);
    assert_eq!(store.put_event(later).unwrap(), (first.clone(), false));
    let (next, new) = store.put_event(late(4, 9, at(200))).unwrap();
    assert!(new && next.seq > first.seq);
    assert_eq!(all(&*store).len(), 2);
}

fn delivery_rounds_move_each_target_and_the_events_due_time(fx: &Fixture) {
    let store = fx.open();
    let (e, _) = store.put_event(late(1, 1, at(10))).unwrap();
    let (other, _) = store.put_event(late(2, 1, at(11))).unwrap();
    let fail = |t| DeliveryTry::Failed {
        error: "HTTP 500".into(),
        next_try_at: t,
    };
    let after = store
        .record_event_delivery(
            e.seq,
            vec![
                ("https://a.example/h?k=1".into(), DeliveryTry::Delivered),
                ("https://b.example/h".into(), fail(at(40))),
            ],
            at(12),
        )
        .unwrap();
    assert_eq!(after.due, Some(at(40)));
    assert_eq!(after.deliveries.len(), 2);
    assert_eq!(
        after.deliveries[0].state,
        OutboxState::Delivered { at: at(12) }
    );
    assert_eq!(
        (
            after.deliveries[1].state,
            after.deliveries[1].tries,
            after.deliveries[1].next_try_at
        ),
        (OutboxState::Pending, 1, Some(at(40)))
    );
    assert_eq!(after.deliveries[1].last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(
        ids(&store.events_due(at(39), 10).unwrap()),
        std::slice::from_ref(&other.id)
    );
    assert_eq!(
        ids(&store.events_due(at(40), 10).unwrap()),
        [other.id.clone(), e.id.clone()]
    );
    // The delivered target stays delivered; the other gives up: the event is done.
    let done = store
        .record_event_delivery(
            e.seq,
            vec![
                ("https://a.example/h?k=1".into(), fail(at(99))),
                (
                    "https://b.example/h".into(),
                    DeliveryTry::GaveUp {
                        error: "gave up".into(),
                    },
                ),
            ],
            at(41),
        )
        .unwrap();
    assert_eq!(done.due, None);
    assert_eq!(
        done.deliveries[0].state,
        OutboxState::Delivered { at: at(12) }
    );
    assert_eq!(done.deliveries[1].state, OutboxState::GaveUp { at: at(41) });
    assert_eq!(done.deliveries[1].tries, 2);
    // A round without targets ends an event.
    let none = store
        .record_event_delivery(other.seq, vec![], at(42))
        .unwrap();
    assert_eq!(none.due, None);
    assert!(store.events_due(at(1_000_000), 10).unwrap().is_empty());
    assert_eq!(store.event_next_due().unwrap(), None);
    assert!(matches!(
        store.record_event_delivery(9_999, vec![], at(43)),
        Err(StoreError::EventNotFound(9_999))
    ));
    // Kept over a reopen.
    drop(store);
    let store = fx.open();
    assert_eq!(store.events_after(0, None, 10).unwrap()[0], done);
}

fn a_removed_jobs_events_go_with_it(fx: &Fixture) {
    let store = fx.open();
    let gone = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
    let kept = store.submit(with_members(job(1), &["b"])).unwrap().job().id;
    for id in [gone, kept] {
        store
            .update_member(id, 0, failed(MemberState::FailedPermanent), at(5))
            .unwrap();
        store
            .settle_and_finish(id, MemberState::FailedPermanent, at(10), None)
            .unwrap();
    }
    store
        .record_delivery(gone, DeliveryTry::Delivered, at(11))
        .unwrap();
    store.put_event(late(7, 1, at(12))).unwrap();
    assert_eq!(all(&*store).len(), 5);
    let up = store.upkeep().expect("both stores keep themselves up");
    let keep = Keep::For(std::time::Duration::from_secs(60));
    let (ids_, _) = up.removable_jobs(at(100), keep, None, 100).unwrap();
    assert_eq!(ids_, [gone], "the other's report is pending");
    assert_eq!(up.remove_jobs(&ids_, at(100), keep, 100).unwrap(), 1);
    assert!(store.events_of_job(gone).unwrap().is_empty());
    assert_eq!(store.events_of_job(kept).unwrap().len(), 2);
    assert_eq!(
        all(&*store).len(),
        3,
        "the kept job's two and the watch's alarm"
    );
    // The removed job's ids are free again only in name: a new job has a new id anyway.
    drop(store);
    let store = fx.open();
    assert_eq!(all(&*store).len(), 3);
}

both_stores!(
    a_jobs_end_writes_its_event_with_the_report_and_nothing_before,
    a_member_failed_permanently_is_an_event_of_its_write,
    a_put_event_is_written_once_per_id,
    delivery_rounds_move_each_target_and_the_events_due_time,
    a_removed_jobs_events_go_with_it,
);
