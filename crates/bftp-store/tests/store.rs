//! Behaviour of the store through the `JobStore` trait.

mod common;

use std::sync::{Arc, Barrier};

use bftp_core::{InvalidTransition, JobEvent, JobOutcome, JobState, MemberState, Timestamp};
use bftp_store::{
    AttemptTranscript, DeliveryTry, HistoryEvent, JobFilter, JobId, JobStore, LastReply,
    MemberUpdate, NewMember, OutboxState, StateCounts, StateFilter, StoreError, Submitted,
};
use common::*;

fn kinds(store: &dyn JobStore, id: JobId) -> Vec<String> {
    store
        .history(id)
        .unwrap()
        .into_iter()
        .map(|h| h.kind)
        .collect()
}

fn member_states(store: &dyn JobStore, id: JobId) -> Vec<MemberState> {
    store
        .members(id)
        .unwrap()
        .into_iter()
        .map(|m| m.state)
        .collect()
}

fn submit_then_get_preserves_every_field(fx: &Fixture) {
    let store = fx.open();
    let mut new = with_members(job(1000), &["a.csv"]);
    new.keyword_hash = Some(kh(9));
    let created = match store.submit(new.clone()).unwrap() {
        Submitted::Created(j) => j,
        other => panic!("{other:?}"),
    };
    assert_eq!(created.id, JobId(1));
    assert_eq!(
        created.spec, new.spec,
        "spec, sealed bytes included, must come back as given"
    );
    assert_eq!(created.owner_uid, 1000);
    assert_eq!(
        created.state,
        JobState::Queued {
            next_attempt_at: new.spec.start_at
        }
    );
    assert_eq!(
        (created.attempts, created.created_at, created.updated_at),
        (0, T0, T0)
    );
    assert_eq!(created.keyword_hash, Some(kh(9)));
    assert_eq!((created.member_count, created.members_frozen), (1, true));
    assert_eq!(store.get(created.id).unwrap(), Some(created.clone()));
    assert_eq!(store.get(JobId(99)).unwrap(), None);

    let members = store.members(created.id).unwrap();
    assert_eq!(members.len(), 1);
    let m = &members[0];
    assert_eq!(
        (m.index, m.name.as_str(), m.size, m.state),
        (0, "a.csv", Some(5), MemberState::Pending)
    );
    assert_eq!(
        store.history(created.id).unwrap(),
        vec![HistoryEvent {
            at: T0,
            kind: "submitted".into(),
            detail: None
        }]
    );
}

fn ids_count_up_and_are_not_reused_after_reopen(fx: &Fixture) {
    {
        let store = fx.open();
        for want in 1..=3 {
            assert_eq!(store.submit(job(1)).unwrap().job().id, JobId(want));
        }
    }
    let store = fx.open();
    assert_eq!(store.submit(job(1)).unwrap().job().id, JobId(4));
}

fn request_key_same_fingerprint_is_the_same_job_other_fingerprint_is_refused(fx: &Fixture) {
    let store = fx.open();
    let first = store.submit(with_request(job(1), 1, 10)).unwrap();
    assert!(matches!(first, Submitted::Created(_)));
    let again = store.submit(with_request(job(1), 1, 10)).unwrap();
    assert_eq!(again, Submitted::Existing(first.job().clone()));

    let e = store.submit(with_request(job(1), 1, 11)).unwrap_err();
    assert!(
        matches!(e, StoreError::RequestKeyConflict { job: JobId(1) }),
        "{e:?}"
    );
    assert!(e.is_refusal());

    let other_key = store.submit(with_request(job(1), 2, 10)).unwrap();
    assert_eq!(other_key.job().id, JobId(2));
    assert_eq!(store.list(&JobFilter::default()).unwrap().len(), 2);
    assert_eq!(
        kinds(&*store, JobId(1)),
        ["submitted"],
        "a replay adds no history"
    );
}

fn sixteen_concurrent_submits_with_one_key_make_one_job(fx: &Fixture) {
    let store = fx.open();
    let barrier = Arc::new(Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                store.submit(with_request(job(7), 42, 43)).unwrap()
            })
        })
        .collect();
    let results: Vec<Submitted> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let created = results
        .iter()
        .filter(|r| matches!(r, Submitted::Created(_)))
        .count();
    assert_eq!(created, 1);
    assert!(results.iter().all(|r| r.job().id == JobId(1)));
    assert_eq!(store.list(&JobFilter::default()).unwrap().len(), 1);
}

fn concurrent_submits_without_keys_get_distinct_ids_and_share_flushes(fx: &Fixture) {
    let store = fx.open();
    let before = fx.flushes();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| store.submit(job(1)).unwrap().job().id)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<JobId> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, (1..=160).map(JobId).collect::<Vec<_>>());
    // sled's group commit: concurrent writers share flushes.
    if let (Some(before), Some(after)) = (before, fx.flushes()) {
        let flushes = after - before;
        assert!(
            flushes <= 160,
            "at most one flush per submit, got {flushes}"
        );
    }
}

fn keyword_index_finds_jobs_and_the_keyword_is_never_stored_in_clear(fx: &Fixture) {
    // The daemon hashes the keyword; the store must never see or write the clear text.
    let keyword = "zebra-keyword-5f0c1d";
    {
        let store = fx.open();
        let tagged = |owner, h| {
            let mut j = job(owner);
            j.keyword_hash = Some(kh(h));
            j
        };
        store.submit(tagged(1, 0xaa)).unwrap();
        store.submit(tagged(2, 0xaa)).unwrap();
        store.submit(tagged(1, 0xbb)).unwrap();
        store.submit(job(1)).unwrap();

        let ids = |f: JobFilter| {
            store
                .list(&f)
                .unwrap()
                .into_iter()
                .map(|j| j.id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(JobFilter {
                keyword_hash: Some(kh(0xaa)),
                ..Default::default()
            }),
            [1, 2]
        );
        assert_eq!(
            ids(JobFilter {
                keyword_hash: Some(kh(0xaa)),
                owner: Some(2),
                ..Default::default()
            }),
            [2]
        );
        let aa = JobFilter {
            keyword_hash: Some(kh(0xaa)),
            ..Default::default()
        };
        let page: Vec<u64> = store
            .list_after(&aa, Some(JobId(1)))
            .unwrap()
            .iter()
            .map(|j| j.id.0)
            .collect();
        assert_eq!(page, [2]);
        assert_eq!(
            ids(JobFilter {
                keyword_hash: Some(kh(0xbb)),
                ..Default::default()
            }),
            [3]
        );
        assert!(ids(JobFilter {
            keyword_hash: Some(kh(0xcc)),
            ..Default::default()
        })
        .is_empty());
    }
    assert!(!fx.stored_contains(keyword.as_bytes()));
    // The hash itself is what the index holds.
    assert!(fx.stored_contains(&[0xaa; 32]));
}

fn list_filters_by_owner_and_state_with_limit(fx: &Fixture) {
    let store = fx.open();
    for owner in [1, 2, 1, 1, 2] {
        store.submit(job(owner)).unwrap();
    }
    store
        .apply(JobId(3), JobEvent::Start { attempt: 1 }, at(100), None)
        .unwrap();
    store
        .apply(JobId(2), JobEvent::Cancel, at(100), None)
        .unwrap();
    let ids = |f: JobFilter| {
        store
            .list(&f)
            .unwrap()
            .into_iter()
            .map(|j| j.id.0)
            .collect::<Vec<_>>()
    };
    let cases: &[(JobFilter, &[u64])] = &[
        (JobFilter::default(), &[1, 2, 3, 4, 5]),
        (
            JobFilter {
                owner: Some(1),
                ..Default::default()
            },
            &[1, 3, 4],
        ),
        (
            JobFilter {
                owner: Some(2),
                ..Default::default()
            },
            &[2, 5],
        ),
        (
            JobFilter {
                owner: Some(3),
                ..Default::default()
            },
            &[],
        ),
        (
            JobFilter {
                owner: Some(1),
                limit: Some(2),
                ..Default::default()
            },
            &[1, 3],
        ),
        (
            JobFilter {
                limit: Some(0),
                ..Default::default()
            },
            &[],
        ),
        (
            JobFilter {
                limit: Some(4),
                ..Default::default()
            },
            &[1, 2, 3, 4],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Queued),
                ..Default::default()
            },
            &[1, 4, 5],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Running),
                ..Default::default()
            },
            &[3],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Cancelled),
                ..Default::default()
            },
            &[2],
        ),
        (
            JobFilter {
                state: Some(StateFilter::Finished),
                ..Default::default()
            },
            &[],
        ),
        (
            JobFilter {
                owner: Some(1),
                state: Some(StateFilter::Queued),
                ..Default::default()
            },
            &[1, 4],
        ),
        (
            JobFilter {
                owner: Some(2),
                state: Some(StateFilter::Queued),
                limit: Some(1),
                ..Default::default()
            },
            &[5],
        ),
    ];
    for (f, want) in cases {
        assert_eq!(ids(f.clone()), *want, "{f:?}");
    }
    assert_eq!(
        store.count_by_state().unwrap(),
        StateCounts {
            queued: 3,
            running: 1,
            finished: 0,
            cancelled: 1
        }
    );
}

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

fn membership_is_frozen_once(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(job(1)).unwrap().job().id;
    let j = store.get(id).unwrap().unwrap();
    assert_eq!((j.member_count, j.members_frozen), (0, false));
    let listed = vec![
        NewMember {
            name: "a.csv".into(),
            size: Some(1),
            modified: Some("20261130120000".into()),
            refused: None,
        },
        NewMember {
            name: "b.csv".into(),
            size: None,
            modified: None,
            refused: None,
        },
    ];
    store.freeze_members(id, listed.clone(), at(61)).unwrap();
    let j = store.get(id).unwrap().unwrap();
    assert_eq!((j.member_count, j.members_frozen), (2, true));
    let ms = store.members(id).unwrap();
    assert_eq!(
        ms.iter()
            .map(|m| (m.index, m.name.as_str(), m.size, m.modified.as_deref()))
            .collect::<Vec<_>>(),
        [
            (0, "a.csv", Some(1), Some("20261130120000")),
            (1, "b.csv", None, None)
        ]
    );
    let e = store
        .freeze_members(id, listed.clone(), at(62))
        .unwrap_err();
    assert!(
        matches!(e, StoreError::MembersAlreadyFrozen { job } if job == id),
        "{e:?}"
    );
    assert_eq!(store.members(id).unwrap().len(), 2);
    assert_eq!(
        store.history(id).unwrap().last().unwrap().detail.as_deref(),
        Some("2 members frozen")
    );

    // A refused name is frozen final, with its reason, and stays so.
    let with_refused = store.submit(job(1)).unwrap().job().id;
    let mut refused = listed.clone();
    refused.push(NewMember {
        name: "bad\\rname.csv".into(),
        size: None,
        modified: None,
        refused: Some("name contains the byte 0x0d".into()),
    });
    store.freeze_members(with_refused, refused, at(61)).unwrap();
    let ms = store.members(with_refused).unwrap();
    assert_eq!(
        ms.iter()
            .map(|m| (m.state, m.detail.as_deref()))
            .collect::<Vec<_>>(),
        [
            (MemberState::Pending, None),
            (MemberState::Pending, None),
            (MemberState::Refused, Some("name contains the byte 0x0d")),
        ]
    );
    let e = store
        .update_member(
            with_refused,
            2,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                ..Default::default()
            },
            at(62),
        )
        .unwrap_err();
    assert!(matches!(e, StoreError::MemberIsTerminal { .. }), "{e:?}");

    // An empty listing is a frozen membership too.
    let empty = store.submit(job(1)).unwrap().job().id;
    store.freeze_members(empty, vec![], at(61)).unwrap();
    assert!(matches!(
        store.freeze_members(empty, listed.clone(), at(62)),
        Err(StoreError::MembersAlreadyFrozen { .. })
    ));

    // Given at submit: frozen from the start.
    let single = store.submit(with_members(job(1), &["x"])).unwrap().job().id;
    assert!(matches!(
        store.freeze_members(single, listed.clone(), at(62)),
        Err(StoreError::MembersAlreadyFrozen { .. })
    ));

    let cancelled = store.submit(job(1)).unwrap().job().id;
    store
        .apply(cancelled, JobEvent::Cancel, at(61), None)
        .unwrap();
    let e = store.freeze_members(cancelled, listed, at(62)).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::JobIsFinal {
                state: "cancelled",
                ..
            }
        ),
        "{e:?}"
    );
}

fn member_updates_set_fields_and_terminal_states_are_final(fx: &Fixture) {
    let store = fx.open();
    let id = store
        .submit(with_members(job(1), &["a", "b"]))
        .unwrap()
        .job()
        .id;
    // Every field of a copy's TLS goes through the record and back.
    use bftp_core::tls::{CertificateCheck, ControlTls, CopyTls, DataProtection, TlsClient};
    let tls = CopyTls {
        source: Some(ControlTls::Tls {
            version: "TLS 1.3".into(),
            certificate: CertificateCheck::CaFile("/etc/bftp/ca.pem".into()),
        }),
        destination: Some(ControlTls::Clear),
        data: Some(DataProtection {
            encrypted: true,
            tls_client: Some(TlsClient::Destination),
            clear_reason: None,
        }),
    };
    let u = MemberUpdate {
        attempts: Some(1),
        bytes: Some(4096),
        source_reply: Some(LastReply {
            code: Some(226),
            text: "Transfer complete.".into(),
        }),
        dest_reply: Some(LastReply {
            code: None,
            text: "garbled".into(),
        }),
        detail: Some("sizes match".into()),
        intent: Some(Some(bftp_core::Intent::Append {
            before: 100,
            source_size: 4096,
        })),
        tls: Some(tls.clone()),
        proof: Some("hash".into()),
        ..Default::default()
    };
    let m = store.update_member(id, 0, u, at(70)).unwrap();
    assert_eq!(
        (m.tls.as_ref(), m.proof.as_deref()),
        (Some(&tls), Some("hash"))
    );
    assert_eq!(
        (m.attempts, m.bytes, m.updated_at, m.state),
        (1, Some(4096), at(70), MemberState::Pending)
    );
    assert_eq!(
        m.intent,
        Some(bftp_core::Intent::Append {
            before: 100,
            source_size: 4096
        })
    );
    assert_eq!(store.members(id).unwrap()[0], m);

    let m = store
        .update_member(
            id,
            0,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                intent: Some(None),
                ..Default::default()
            },
            at(71),
        )
        .unwrap();
    assert_eq!(
        (m.state, m.intent, m.bytes),
        (MemberState::Succeeded, None, Some(4096))
    );

    for back in [MemberState::Pending, MemberState::Uncertain] {
        let e = store
            .update_member(
                id,
                0,
                MemberUpdate {
                    state: Some(back),
                    ..Default::default()
                },
                at(72),
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::MemberIsTerminal {
                    index: 0,
                    state: "succeeded",
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // Same state again and other fields are fine on a terminal member.
    store
        .update_member(
            id,
            0,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                detail: Some("x".into()),
                ..Default::default()
            },
            at(73),
        )
        .unwrap();

    let e = store
        .update_member(id, 2, MemberUpdate::default(), at(72))
        .unwrap_err();
    assert!(
        matches!(e, StoreError::MemberNotFound { index: 2, .. }),
        "{e:?}"
    );
    let e = store
        .update_member(JobId(9), 0, MemberUpdate::default(), at(72))
        .unwrap_err();
    assert!(matches!(e, StoreError::NotFound(JobId(9))), "{e:?}");
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

fn reopening_after_drop_keeps_everything(fx: &Fixture) {
    let snapshot = |s: &dyn JobStore| {
        let jobs = s.list(&JobFilter::default()).unwrap();
        let detail: Vec<_> = jobs
            .iter()
            .map(|j| (s.history(j.id).unwrap(), s.members(j.id).unwrap()))
            .collect();
        (
            jobs,
            detail,
            s.due(Timestamp(u64::MAX), 100).unwrap(),
            s.count_by_state().unwrap(),
            s.running_jobs().unwrap(),
        )
    };
    let before = {
        let store = fx.open();
        let mut kw = with_request(with_members(job(1), &["a", "b"]), 1, 2);
        kw.keyword_hash = Some(kh(3));
        store.submit(kw).unwrap();
        store.submit(job(2)).unwrap();
        store.submit(job(3)).unwrap();
        store
            .apply(JobId(1), JobEvent::Start { attempt: 1 }, at(61), None)
            .unwrap();
        store
            .update_member(
                JobId(1),
                0,
                MemberUpdate {
                    state: Some(MemberState::Succeeded),
                    ..Default::default()
                },
                at(62),
            )
            .unwrap();
        store
            .apply(JobId(2), JobEvent::Cancel, at(63), None)
            .unwrap();
        store
            .freeze_members(
                JobId(3),
                vec![NewMember {
                    name: "z".into(),
                    size: None,
                    modified: None,
                    refused: None,
                }],
                at(64),
            )
            .unwrap();
        snapshot(&*store)
    };
    let store = fx.open();
    assert_eq!(snapshot(&*store), before);
    assert_eq!(
        store.submit(with_request(job(1), 1, 2)).unwrap(),
        Submitted::Existing(before.0[0].clone())
    );
    let kw = JobFilter {
        keyword_hash: Some(kh(3)),
        ..Default::default()
    };
    assert_eq!(store.list(&kw).unwrap().len(), 1);
    if let Some(v) = fx.verify() {
        assert_eq!((v.jobs, v.members, v.requests), (3, 3, 1));
    }
}

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

/// A store from before key fingerprints (jobs, no fingerprint) opens as it did; the
/// fingerprint recorded then survives a reopen next to the jobs, and the damage checks at
/// open (watermark, digest) still pass.
fn a_key_fingerprint_is_recorded_in_an_old_store_and_kept(fx: &Fixture) {
    let id = {
        let store = fx.open();
        assert!(store.is_empty().unwrap());
        assert_eq!(store.key_fingerprint().unwrap(), None);
        match store.submit(job(1000)).unwrap() {
            Submitted::Created(j) => j.id,
            other => panic!("{other:?}"),
        }
    };
    {
        // The old store: sealed data, no fingerprint yet.
        let store = fx.open();
        assert!(!store.is_empty().unwrap());
        assert_eq!(store.key_fingerprint().unwrap(), None);
        store.set_key_fingerprint([7; 32]).unwrap();
        assert_eq!(store.key_fingerprint().unwrap(), Some([7; 32]));
    }
    let store = fx.open();
    assert_eq!(store.key_fingerprint().unwrap(), Some([7; 32]));
    assert_eq!(store.get(id).unwrap().unwrap().spec, spec());
    store.set_key_fingerprint([8; 32]).unwrap();
    drop(store);
    assert_eq!(fx.open().key_fingerprint().unwrap(), Some([8; 32]));
}

/// The refusal memory (capability memory): one entry per server and command, counting the
/// attempts that got the same refusal, replaced by a different one, kept across a reopen and
/// checked by `verify`.
fn refusal_memory_counts_attempts_and_survives_a_reopen(fx: &Fixture) {
    use bftp_core::refusal::{RefusalKey, Sighting};
    use bftp_core::reply::ReplyCode;
    let key = RefusalKey::new("ftp.example.net", 21, "APPE");
    let other_port = RefusalKey::new("ftp.example.net", 2121, "APPE");
    let seen = |code: u16, text: &str, job: u64, attempt: u32| Sighting {
        code: ReplyCode::new(code).unwrap(),
        text: text.into(),
        job,
        attempt,
    };
    let refusal = "<path>: Append/Restart not permitted, try again";
    {
        let store = fx.open();
        assert_eq!(store.refusal(&key).unwrap(), None);
        let m = store
            .record_refusal(&key, &seen(451, refusal, 1, 1), at(10))
            .unwrap();
        assert_eq!(m.count, 1);
        // The same attempt (another file): still one.
        let m = store
            .record_refusal(&key, &seen(451, refusal, 1, 1), at(11))
            .unwrap();
        assert_eq!((m.count, m.last_seen), (1, at(11)));
        // Another port is another server.
        store
            .record_refusal(&other_port, &seen(451, "busy", 1, 1), at(12))
            .unwrap();
    }
    let store = fx.open();
    let kept = store.refusal(&key).unwrap().expect("kept across a reopen");
    assert_eq!(
        (kept.count, kept.first_seen, kept.last_seen),
        (1, at(10), at(11))
    );
    let m = store
        .record_refusal(&key, &seen(451, refusal, 1, 2), at(20))
        .unwrap();
    assert_eq!(
        (m.count, m.first_seen, m.text.as_str()),
        (2, at(10), refusal)
    );
    assert_eq!(store.refusal(&key).unwrap(), Some(m));
    assert_eq!(store.refusal(&other_port).unwrap().unwrap().text, "busy");
    // A different refusal replaces the memory.
    let m = store
        .record_refusal(&key, &seen(451, "Disk error", 1, 3), at(30))
        .unwrap();
    assert_eq!((m.count, m.first_seen), (1, at(30)));
    fx.verify();
}

/// A job's members read a page at a time are the members, in order, each once, whatever
/// the page size and wherever a page starts (the sled store's own pages hold 32).
fn members_read_in_pages_are_the_members_in_order(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(job(1)).unwrap().job().id;
    let listed: Vec<NewMember> = (0..100)
        .map(|i| NewMember {
            name: format!("f{i:03}"),
            size: Some(i),
            modified: None,
            refused: None,
        })
        .collect();
    store.freeze_members(id, listed, at(61)).unwrap();
    let all = store.members(id).unwrap();
    assert_eq!(all.len(), 100);
    for limit in [1, 7, 32, 33, 100, 1000] {
        let mut read = Vec::new();
        let mut from = 0;
        loop {
            let page = store.members_page(id, from, limit).unwrap();
            assert!(page.len() <= limit, "{limit}: a page of {}", page.len());
            let Some(last) = page.last() else { break };
            from = last.index + 1;
            read.extend(page);
        }
        assert_eq!(read, all, "pages of {limit}");
    }
    let tail = store.members_page(id, 95, 10).unwrap();
    let names: Vec<&str> = tail.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["f095", "f096", "f097", "f098", "f099"]);
    assert!(store.members_page(id, 100, 10).unwrap().is_empty());
    assert!(matches!(
        store.members_page(JobId(999_999), 0, 10),
        Err(StoreError::NotFound(_))
    ));
}

both_stores!(
    members_read_in_pages_are_the_members_in_order,
    required_and_recorded_proofs_survive_a_reopen,
    a_walk_freezes_each_directory_once_and_the_membership_at_its_end,
    made_destination_directories_are_remembered_with_the_walk,
    submit_then_get_preserves_every_field,
    ids_count_up_and_are_not_reused_after_reopen,
    request_key_same_fingerprint_is_the_same_job_other_fingerprint_is_refused,
    sixteen_concurrent_submits_with_one_key_make_one_job,
    concurrent_submits_without_keys_get_distinct_ids_and_share_flushes,
    keyword_index_finds_jobs_and_the_keyword_is_never_stored_in_clear,
    list_filters_by_owner_and_state_with_limit,
    transitions_move_the_due_index_and_write_history,
    due_is_ordered_by_time_then_id_and_limited,
    an_invalid_transition_is_a_refusal_and_changes_nothing,
    cancel_marks_pending_members_cancelled_in_the_same_step,
    settle_and_finish_fails_the_pending_members_and_derives_the_outcome,
    membership_is_frozen_once,
    member_updates_set_fields_and_terminal_states_are_final,
    the_daemon_can_append_its_own_history,
    reopening_after_drop_keeps_everything,
    finish_and_cancel_put_the_report_in_the_outbox_in_the_same_step,
    delivery_tries_move_the_report_and_a_final_report_stays_final,
    a_given_up_report_leaves_the_outbox_queue,
    outbox_and_transcript_survive_a_reopen,
    a_new_transcript_replaces_the_last_one,
    a_key_fingerprint_is_recorded_in_an_old_store_and_kept,
    refusal_memory_counts_attempts_and_survives_a_reopen,
);
/// Issue 16: a job's required proof and each member's proof are stored and read back, across
/// a reopen of the store.
fn required_and_recorded_proofs_survive_a_reopen(fx: &Fixture) {
    use bftp_core::proof::ProofLevel;
    let id = {
        let store = fx.open();
        let mut j = with_members(job(1), &["a", "b"]);
        j.spec.proof = Some(ProofLevel::Hash);
        let id = store.submit(j).unwrap().job().id;
        let u = MemberUpdate {
            state: Some(MemberState::Succeeded),
            proof: Some("hash".into()),
            ..Default::default()
        };
        store.update_member(id, 0, u, at(70)).unwrap();
        id
    };
    let store = fx.open();
    assert_eq!(
        store.get(id).unwrap().unwrap().spec.proof,
        Some(ProofLevel::Hash)
    );
    let members = store.members(id).unwrap();
    assert_eq!(members[0].proof.as_deref(), Some("hash"));
    assert_eq!(members[1].proof, None);
}

/// Issue 16: a recursive job's walk. Each directory's files are appended as members and its
/// subdirectories queued, in one transaction; a directory frozen once is never frozen again
/// (recording it a second time, as a resumed walk might, changes nothing); the membership is
/// frozen when the frontier is empty, and all of it survives a reopen.
fn a_walk_freezes_each_directory_once_and_the_membership_at_its_end(fx: &Fixture) {
    let nm = |name: &str| NewMember {
        name: name.into(),
        size: Some(1),
        modified: None,
        refused: None,
    };
    let id = {
        let store = fx.open();
        let id = store.submit(job(1)).unwrap().job().id;
        let w = store.walk(id).unwrap();
        assert_eq!((w.frontier, w.listed), (vec![String::new()], vec![]));
        let w = store
            .record_directory(
                id,
                "",
                vec![nm("a"), nm("b")],
                vec!["d1".into(), "d2".into()],
                vec![("u-root".into(), "".into()), ("u-d1".into(), "d1".into())],
                at(10),
            )
            .unwrap();
        assert_eq!(w.frontier, ["d1", "d2"]);
        // The root again (a walk resumed after a crash before it knew): nothing changes.
        let again = store
            .record_directory(
                id,
                "",
                vec![nm("a"), nm("b")],
                vec!["d1".into()],
                vec![],
                at(11),
            )
            .unwrap();
        assert_eq!(again, w);
        assert_eq!(store.members(id).unwrap().len(), 2);
        let w = store
            .record_directory(
                id,
                "d1",
                vec![nm("d1/c")],
                vec!["d1/e".into()],
                vec![],
                at(12),
            )
            .unwrap();
        assert_eq!(w.frontier, ["d2", "d1/e"]);
        assert!(!store.get(id).unwrap().unwrap().members_frozen);
        id
    };
    let store = fx.open();
    let w = store.walk(id).unwrap();
    assert_eq!(w.listed, ["", "d1"]);
    store
        .record_directory(id, "d2", vec![], vec![], vec![], at(13))
        .unwrap();
    let w = store
        .record_directory(id, "d1/e", vec![nm("d1/e/f")], vec![], vec![], at(14))
        .unwrap();
    assert!(w.frontier.is_empty());
    assert_eq!(w.listed, ["", "d1", "d2", "d1/e"]);
    assert_eq!(w.unique.get("u-d1").map(String::as_str), Some("d1"));
    assert_eq!(w.unique.len(), 2);
    let job = store.get(id).unwrap().unwrap();
    assert!(job.members_frozen);
    let names: Vec<String> = store
        .members(id)
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["a", "b", "d1/c", "d1/e/f"]);
    let e = store
        .record_directory(id, "x", vec![nm("x/y")], vec![], vec![], at(15))
        .unwrap();
    assert_eq!(e, w, "a directory not in the frontier changes nothing");
    assert_eq!(store.members(id).unwrap().len(), 4);
}

/// Issue 16: the destination directories a recursive job made are remembered with its walk
/// (sorted, each once, surviving a reopen), so that a resumed job does not make them again;
/// a job without a walk is left as it was.
fn made_destination_directories_are_remembered_with_the_walk(fx: &Fixture) {
    let (id, plain) = {
        let store = fx.open();
        let id = store.submit(job(1)).unwrap().job().id;
        let plain = store.submit(job(2)).unwrap().job().id;
        store
            .record_directory(id, "", vec![], vec!["b".into(), "a".into()], vec![], at(10))
            .unwrap();
        assert!(store.walk(id).unwrap().made.is_empty());
        store
            .record_made_dirs(id, vec!["".into(), "b".into()])
            .unwrap();
        store
            .record_made_dirs(id, vec!["b".into(), "a".into()])
            .unwrap();
        store.record_made_dirs(plain, vec!["x".into()]).unwrap();
        (id, plain)
    };
    let store = fx.open();
    let made: Vec<String> = store.walk(id).unwrap().made.into_iter().collect();
    assert_eq!(made, ["", "a", "b"]);
    assert!(store.walk(plain).unwrap().made.is_empty());
    assert_eq!(store.walk(plain).unwrap().frontier, [""]);
    fx.verify();
}
