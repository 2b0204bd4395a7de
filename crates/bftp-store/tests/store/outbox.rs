//! The report in the outbox and the last attempt's transcript.

use super::*;

fn finish_and_cancel_put_the_report_in_the_outbox_in_the_same_step(fx: &Fixture) {
    let store = fx.open();
    let a = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
    let b = store.submit(with_members(job(1), &["b"])).unwrap().job().id;
    let c = store.submit(with_members(job(1), &["c"])).unwrap().job().id;
    for id in [a, b, c] {
        store
            .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
            .unwrap();
    }
    // A requeue is no final state: no report.
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
    assert_eq!(store.outbox_entry(c).unwrap(), None);
    assert_eq!(
        store.outbox_entry(a).unwrap(),
        None,
        "running: no report yet"
    );

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
    for (id, t) in [(a, at(70)), (b, at(71)), (c, at(72))] {
        let e = store.outbox_entry(id).unwrap().unwrap();
        assert_eq!(
            (e.job, e.created_at, e.tries, e.next_try_at, e.state),
            (id, t, 0, Some(t), OutboxState::Pending)
        );
    }
    let due: Vec<JobId> = store
        .outbox_due(at(71), 10)
        .unwrap()
        .iter()
        .map(|e| e.job)
        .collect();
    assert_eq!(due, [a, b], "due at or before 71, earliest first");
    assert_eq!(store.outbox_next_due().unwrap(), Some(at(70)));
    assert_eq!(store.outbox_pending().unwrap(), 3);
}

fn delivery_tries_move_the_report_and_a_final_report_stays_final(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
    store.apply(id, JobEvent::Cancel, at(70), None).unwrap();

    let failed = store
        .record_delivery(
            id,
            DeliveryTry::Failed {
                error: "connection refused".into(),
                next_try_at: at(100),
            },
            at(71),
        )
        .unwrap();
    assert_eq!((failed.tries, failed.next_try_at), (1, Some(at(100))));
    assert_eq!(failed.last_error.as_deref(), Some("connection refused"));
    assert_eq!(store.outbox_due(at(99), 10).unwrap(), []);
    assert_eq!(store.outbox_next_due().unwrap(), Some(at(100)));

    let postponed = store
        .record_delivery(
            id,
            DeliveryTry::Postponed {
                next_try_at: at(101),
            },
            at(100),
        )
        .unwrap();
    assert_eq!(
        (postponed.tries, postponed.next_try_at),
        (1, Some(at(101))),
        "a postponement is no try"
    );

    let delivered = store
        .record_delivery(id, DeliveryTry::Delivered, at(102))
        .unwrap();
    assert_eq!(
        (delivered.tries, delivered.state, delivered.next_try_at),
        (2, OutboxState::Delivered { at: at(102) }, None)
    );
    assert_eq!(store.outbox_next_due().unwrap(), None);
    assert_eq!(store.outbox_pending().unwrap(), 0);

    // A late failure report (a second deliverer, a retry racing a success) changes nothing.
    let again = store
        .record_delivery(
            id,
            DeliveryTry::GaveUp {
                error: "550".into(),
            },
            at(103),
        )
        .unwrap();
    assert_eq!(again, delivered);
    assert_eq!(store.outbox_entry(id).unwrap(), Some(delivered));

    assert!(matches!(
        store.record_delivery(JobId(99), DeliveryTry::Delivered, at(104)),
        Err(StoreError::NoReport(JobId(99)))
    ));
}

fn a_given_up_report_leaves_the_outbox_queue(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
    store.apply(id, JobEvent::Cancel, at(70), None).unwrap();
    let e = store
        .record_delivery(
            id,
            DeliveryTry::GaveUp {
                error: "550 no such user".into(),
            },
            at(71),
        )
        .unwrap();
    assert_eq!(e.state, OutboxState::GaveUp { at: at(71) });
    assert_eq!(store.outbox_due(Timestamp(u64::MAX), 10).unwrap(), []);
}

fn outbox_and_transcript_survive_a_reopen(fx: &Fixture) {
    let (entry, transcript) = {
        let store = fx.open();
        let id = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
        store
            .apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
            .unwrap();
        let t = AttemptTranscript {
            attempt: 1,
            lines: vec!["source> USER a".into(), "source> PASS ****".into()],
        };
        store.set_transcript(id, t.clone()).unwrap();
        store
            .apply(
                id,
                JobEvent::Finish {
                    outcome: JobOutcome::Succeeded,
                },
                at(62),
                None,
            )
            .unwrap();
        let e = store
            .record_delivery(
                id,
                DeliveryTry::Failed {
                    error: "451".into(),
                    next_try_at: at(90),
                },
                at(63),
            )
            .unwrap();
        (e, t)
    };
    let store = fx.open();
    assert_eq!(store.outbox_entry(JobId(1)).unwrap(), Some(entry.clone()));
    assert_eq!(store.outbox_due(at(90), 10).unwrap(), [entry]);
    assert_eq!(store.transcript(JobId(1)).unwrap(), Some(transcript));
    fx.verify();
}

fn a_new_transcript_replaces_the_last_one(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(with_members(job(1), &["a"])).unwrap().job().id;
    assert_eq!(store.transcript(id).unwrap(), None);
    for attempt in [1, 2] {
        store
            .set_transcript(
                id,
                AttemptTranscript {
                    attempt,
                    lines: vec![format!("attempt {attempt}")],
                },
            )
            .unwrap();
    }
    let t = store.transcript(id).unwrap().unwrap();
    assert_eq!((t.attempt, t.lines), (2, vec!["attempt 2".to_string()]));
    assert!(matches!(
        store.set_transcript(
            JobId(42),
            AttemptTranscript {
                attempt: 1,
                lines: vec![]
            }
        ),
        Err(StoreError::NotFound(JobId(42)))
    ));
}

both_stores!(
    finish_and_cancel_put_the_report_in_the_outbox_in_the_same_step,
    delivery_tries_move_the_report_and_a_final_report_stays_final,
    a_given_up_report_leaves_the_outbox_queue,
    outbox_and_transcript_survive_a_reopen,
    a_new_transcript_replaces_the_last_one,
);
