//! A job's state changes: transitions, the due index, history, settling and finishing.

use super::*;

fn transitions_move_the_due_index_and_write_history(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(job(1)).unwrap().job().id;
    let start = at(60);
    assert_eq!(store.due(Timestamp(start.0 - 1), 10).unwrap(), []);
    assert_eq!(store.due(start, 10).unwrap(), [(start, id)]);
    assert_eq!(store.next_due().unwrap(), Some(start));

    let j = store
        .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    assert_eq!(
        j.state,
        JobState::Running {
            attempt: 1,
            started_at: at(61)
        }
    );
    assert_eq!((j.attempts, j.updated_at), (1, at(61)));
    assert_eq!(store.due(at(10_000), 10).unwrap(), []);
    assert_eq!(store.next_due().unwrap(), None);
    assert_eq!(store.running_jobs().unwrap(), [id]);

    let retry_at = at(700);
    store
        .apply(
            id,
            JobEvent::Requeue {
                next_attempt_at: retry_at,
            },
            at(70),
            Some("421 from source".into()),
        )
        .unwrap();
    assert_eq!(store.due(at(10_000), 10).unwrap(), [(retry_at, id)]);
    assert_eq!(store.running_jobs().unwrap(), []);

    let j = store
        .apply(id, JobEvent::Start { attempt: 2 }, at(701), None)
        .unwrap();
    assert_eq!(j.attempts, 2);
    let j = store
        .apply(
            id,
            JobEvent::Finish {
                outcome: JobOutcome::Succeeded,
            },
            at(750),
            None,
        )
        .unwrap();
    assert_eq!(
        j.state,
        JobState::Finished {
            outcome: JobOutcome::Succeeded,
            at: at(750)
        }
    );
    assert_eq!(store.due(Timestamp(u64::MAX), 10).unwrap(), []);
    assert_eq!(store.running_jobs().unwrap(), []);
    assert_eq!(
        store.count_by_state().unwrap(),
        StateCounts {
            finished: 1,
            ..Default::default()
        }
    );

    let h = store.history(id).unwrap();
    let got: Vec<(&str, Timestamp, Option<&str>)> = h
        .iter()
        .map(|e| (e.kind.as_str(), e.at, e.detail.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("submitted", T0, None),
            ("start", at(61), None),
            ("requeue", at(70), Some("421 from source")),
            ("start", at(701), None),
            ("finish", at(750), None),
        ]
    );
}

fn due_is_ordered_by_time_then_id_and_limited(fx: &Fixture) {
    let store = fx.open();
    for secs in [300, 100, 200, 100] {
        let mut j = job(1);
        j.spec.start_at = at(secs);
        store.submit(j).unwrap();
    }
    assert_eq!(
        store.due(at(250), 10).unwrap(),
        [
            (at(100), JobId(2)),
            (at(100), JobId(4)),
            (at(200), JobId(3))
        ]
    );
    assert_eq!(
        store.due(at(1000), 2).unwrap(),
        [(at(100), JobId(2)), (at(100), JobId(4))]
    );
    assert_eq!(store.next_due().unwrap(), Some(at(100)));
}

fn an_invalid_transition_is_a_refusal_and_changes_nothing(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(job(1)).unwrap().job().id;
    store.apply(id, JobEvent::Cancel, at(5), None).unwrap();
    let before = (store.get(id).unwrap(), store.history(id).unwrap());
    let cases = [
        (JobEvent::Start { attempt: 1 }, "start"),
        (JobEvent::Cancel, "cancel"),
        (
            JobEvent::Requeue {
                next_attempt_at: at(9),
            },
            "requeue",
        ),
        (
            JobEvent::Finish {
                outcome: JobOutcome::Failed,
            },
            "finish",
        ),
    ];
    for (event, name) in cases {
        match store.apply(id, event, at(6), None) {
            Err(StoreError::InvalidTransition {
                job,
                source: InvalidTransition { from, event },
            }) => {
                assert_eq!((job, from, event), (id, "cancelled", name));
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert_eq!((store.get(id).unwrap(), store.history(id).unwrap()), before);
    assert!(store.due(Timestamp(u64::MAX), 10).unwrap().is_empty());

    let e = store
        .apply(JobId(77), JobEvent::Cancel, at(6), None)
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(JobId(77))), "{e:?}");
}

fn cancel_marks_pending_members_cancelled_in_the_same_step(fx: &Fixture) {
    let store = fx.open();
    let id = store
        .submit(with_members(job(1), &["a", "b", "c"]))
        .unwrap()
        .job()
        .id;
    store
        .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    let done = MemberUpdate {
        state: Some(MemberState::Succeeded),
        bytes: Some(10),
        ..Default::default()
    };
    store.update_member(id, 0, done, at(62)).unwrap();
    let j = store
        .apply(id, JobEvent::Cancel, at(63), Some("by uid 1".into()))
        .unwrap();
    assert_eq!(j.state, JobState::Cancelled { at: at(63) });
    assert_eq!(
        member_states(&*store, id),
        [
            MemberState::Succeeded,
            MemberState::Cancelled,
            MemberState::Cancelled
        ]
    );
    assert_eq!(store.members(id).unwrap()[1].updated_at, at(63));
    assert_eq!(kinds(&*store, id), ["submitted", "start", "cancel"]);
    assert_eq!(store.running_jobs().unwrap(), []);
}

fn settle_and_finish_fails_the_pending_members_and_derives_the_outcome(fx: &Fixture) {
    let store = fx.open();
    let id = store
        .submit(with_members(job(1), &["a", "b", "c"]))
        .unwrap()
        .job()
        .id;
    store
        .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    store
        .update_member(
            id,
            1,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                ..Default::default()
            },
            at(62),
        )
        .unwrap();
    let j = store
        .settle_and_finish(
            id,
            MemberState::FailedRetriesExhausted,
            at(63),
            Some("20 attempts".into()),
        )
        .unwrap();
    assert_eq!(
        j.state,
        JobState::Finished {
            outcome: JobOutcome::Partial,
            at: at(63)
        }
    );
    let ms = store.members(id).unwrap();
    assert_eq!(
        ms.iter().map(|m| m.state).collect::<Vec<_>>(),
        [
            MemberState::FailedRetriesExhausted,
            MemberState::Succeeded,
            MemberState::FailedRetriesExhausted
        ]
    );
    assert_eq!(ms[0].detail.as_deref(), Some("20 attempts"));
    assert_eq!(ms[1].detail, None);

    // A job-level failure with no member succeeded (login refused).
    let id2 = store.submit(with_members(job(1), &["x"])).unwrap().job().id;
    let j = store
        .settle_and_finish(
            id2,
            MemberState::FailedPermanent,
            at(64),
            Some("530 Login incorrect.".into()),
        )
        .unwrap();
    assert_eq!(
        j.state,
        JobState::Finished {
            outcome: JobOutcome::Failed,
            at: at(64)
        }
    );
    // Finished is final.
    let e = store
        .settle_and_finish(id2, MemberState::FailedPermanent, at(65), None)
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidTransition { .. }), "{e:?}");
}

fn the_daemon_can_append_its_own_history(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(job(1)).unwrap().job().id;
    let ev = HistoryEvent {
        at: at(5),
        kind: "recovered".into(),
        detail: Some("restart".into()),
    };
    store.append_history(id, ev.clone()).unwrap();
    store
        .apply(id, JobEvent::Start { attempt: 1 }, at(6), None)
        .unwrap();
    assert_eq!(kinds(&*store, id), ["submitted", "recovered", "start"]);
    assert_eq!(store.history(id).unwrap()[1], ev);
    assert!(matches!(
        store.append_history(JobId(5), ev),
        Err(StoreError::NotFound(JobId(5)))
    ));
    assert!(matches!(
        store.history(JobId(5)),
        Err(StoreError::NotFound(JobId(5)))
    ));
    assert!(matches!(
        store.members(JobId(5)),
        Err(StoreError::NotFound(JobId(5)))
    ));
}

both_stores!(
    transitions_move_the_due_index_and_write_history,
    due_is_ordered_by_time_then_id_and_limited,
    an_invalid_transition_is_a_refusal_and_changes_nothing,
    cancel_marks_pending_members_cancelled_in_the_same_step,
    settle_and_finish_fails_the_pending_members_and_derives_the_outcome,
    the_daemon_can_append_its_own_history,
);
