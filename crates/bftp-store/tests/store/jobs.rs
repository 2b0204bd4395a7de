//! Submitting, reading and listing jobs: ids, request keys, keywords, filters.

use super::*;

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

/// Issue 29: the data path a job asked for is stored and read back, across a reopen; a job
/// that asked for none reads back as none (the daemon's default, applied when it runs).
fn asked_data_paths_survive_a_reopen(fx: &Fixture) {
    use bftp_core::route::DataPath;
    let ids: Vec<(JobId, Option<DataPath>)> = {
        let store = fx.open();
        [
            None,
            Some(DataPath::Fxp),
            Some(DataPath::Relay),
            Some(DataPath::Auto),
        ]
        .into_iter()
        .map(|path| {
            let mut j = job(1000);
            j.spec.data_path = path;
            (store.submit(j).unwrap().job().id, path)
        })
        .collect()
    };
    let store = fx.open();
    for (id, path) in ids {
        assert_eq!(store.get(id).unwrap().unwrap().spec.data_path, path);
    }
}

both_stores!(
    asked_data_paths_survive_a_reopen,
    submit_then_get_preserves_every_field,
    ids_count_up_and_are_not_reused_after_reopen,
    request_key_same_fingerprint_is_the_same_job_other_fingerprint_is_refused,
    sixteen_concurrent_submits_with_one_key_make_one_job,
    concurrent_submits_without_keys_get_distinct_ids_and_share_flushes,
    keyword_index_finds_jobs_and_the_keyword_is_never_stored_in_clear,
    list_filters_by_owner_and_state_with_limit,
    reopening_after_drop_keeps_everything,
);
