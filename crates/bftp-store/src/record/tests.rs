use super::*;
use bftp_core::Intent;

#[test]
fn a_delivery_try_changes_the_outbox_entry_by_the_table() {
    let t0 = Timestamp(1_000);
    let now = Timestamp(5_000);
    let later = Timestamp(9_000);
    let err = || "421 busy".to_string();
    // (try, starting state, changed?, tries, state, next, done, err)
    type Row = (
        DeliveryTry,
        OutboxStateV1,
        bool,
        u32,
        OutboxStateV1,
        Option<u64>,
        Option<u64>,
        Option<String>,
    );
    #[rustfmt::skip]
    let rows: Vec<Row> = vec![
        (DeliveryTry::Delivered, OutboxStateV1::Pending, true, 1, OutboxStateV1::Delivered, None, Some(now.0), None),
        (DeliveryTry::Failed { error: err(), next_try_at: later }, OutboxStateV1::Pending, true, 1, OutboxStateV1::Pending, Some(later.0), None, Some(err())),
        (DeliveryTry::GaveUp { error: err() }, OutboxStateV1::Pending, true, 1, OutboxStateV1::GaveUp, None, Some(now.0), Some(err())),
        (DeliveryTry::Postponed { next_try_at: later }, OutboxStateV1::Pending, true, 0, OutboxStateV1::Pending, Some(later.0), None, None),
        (DeliveryTry::Failed { error: err(), next_try_at: later }, OutboxStateV1::Delivered, false, 0, OutboxStateV1::Delivered, None, Some(t0.0), None),
        (DeliveryTry::Delivered, OutboxStateV1::GaveUp, false, 0, OutboxStateV1::GaveUp, None, Some(t0.0), None),
    ];
    for (i, (try_, start, changed, tries, state, next, done, e)) in rows.into_iter().enumerate() {
        let mut rec = OutboxV1::new(t0);
        if start != OutboxStateV1::Pending {
            rec.state = start;
            rec.done = Some(t0.0);
            rec.next = None;
        }
        assert_eq!(rec.apply(&try_, now), changed, "row {i}");
        assert_eq!(
            (rec.tries, rec.state, rec.next, rec.done, rec.err.clone()),
            (tries, state, next, done, e),
            "row {i}"
        );
        assert_eq!(rec.updated, if changed { now.0 } else { t0.0 }, "row {i}");
    }
}

/// Yesterday's queue must stay readable: these files are frozen. If a change to the
/// records makes this test fail, add a new record version instead of editing a fixture.
#[test]
fn frozen_v1_fixtures_decode() {
    let job: JobV1 = decode(
        "job",
        b"fixture",
        include_bytes!("../../tests/fixtures/job_v1.json"),
    )
    .unwrap();
    let api = job_to_api(JobId(7), &job).unwrap();
    assert_eq!(api.owner_uid, 1000);
    assert_eq!(api.spec.source.host, "ftp.example.org");
    assert_eq!(
        api.spec.source.password,
        Some(Sealed(vec![0xde, 0xad, 0xbe, 0xef]))
    );
    assert_eq!(api.spec.destination.as_ref().unwrap().port, 2121);
    assert_eq!(api.spec.disposition, Disposition::Move);
    assert_eq!(api.spec.dest_command, DestCommand::Append);
    assert_eq!(api.spec.params.transfer_type, TransferType::Local(8));
    assert_eq!(api.spec.params.mode, TransferMode::Block);
    assert_eq!(api.spec.params.structure, FileStructure::Record);
    assert_eq!(api.spec.retry.first_interval, Duration::from_secs(600));
    assert_eq!(api.spec.retry.factor, 1.5);
    // Written before data paths: the daemon's default.
    assert_eq!(api.spec.data_path, None);
    assert_eq!(
        api.state,
        JobState::Running {
            attempt: 2,
            started_at: Timestamp(1_796_040_100_000)
        }
    );
    assert_eq!(api.keyword_hash, Some(KeyHash([0x11; 32])));
    assert!(api.members_frozen);
    assert_eq!(api.member_count, 2);
    // Written before watches: no watch made it.
    assert_eq!(api.watch, None);

    let m: MemberV1 = decode(
        "member",
        b"fixture",
        include_bytes!("../../tests/fixtures/member_v1.json"),
    )
    .unwrap();
    let m = m.to_api(1);
    assert_eq!(m.state, MemberState::FailedPermanent);
    assert_eq!(m.dest_reply.unwrap().code, Some(550));
    assert_eq!(m.source_reply.unwrap().code, None);

    // Intents were JSON strings inside the member record before they had a record type.
    let m: MemberV1 = decode(
        "member",
        b"fixture",
        include_bytes!("../../tests/fixtures/member_v1_legacy_intent.json"),
    )
    .unwrap();
    assert_eq!(
        m.to_api(0).intent,
        Some(Intent::Append {
            before: 100,
            source_size: 4096
        })
    );
    for (legacy, want) in [
        (
            r#""{\"op\":\"stou\"}""#,
            Intent::Unique {
                source_size: None,
                announced: None,
            },
        ),
        (r#""{\"op\":\"dele\"}""#, Intent::Delete { path: None }),
    ] {
        let rec = format!(
            r#"{{"v":1,"name":"a","state":"pending","attempts":1,"intent":{legacy},"updated":1}}"#
        );
        let m: MemberV1 = decode("member", b"k", rec.as_bytes()).unwrap();
        assert_eq!(m.to_api(0).intent, Some(want), "{rec}");
    }

    let h: HistoryV1 = decode(
        "history",
        b"fixture",
        include_bytes!("../../tests/fixtures/history_v1.json"),
    )
    .unwrap();
    assert_eq!(h.to_api().kind, "requeue");

    let o: OutboxV1 = decode(
        "outbox",
        b"fixture",
        include_bytes!("../../tests/fixtures/outbox_v1.json"),
    )
    .unwrap();
    let o = o.to_api(JobId(7)).unwrap();
    assert_eq!(
        o.state,
        OutboxState::Delivered {
            at: Timestamp(1_796_040_400_000)
        }
    );
    assert_eq!((o.tries, o.next_try_at), (2, None));
    assert_eq!(o.created_at, Timestamp(1_796_040_300_000));

    let t: TranscriptV1 = decode(
        "transcript",
        b"fixture",
        include_bytes!("../../tests/fixtures/transcript_v1.json"),
    )
    .unwrap();
    let t = t.to_api();
    assert_eq!(t.attempt, 3);
    assert_eq!(t.lines[1], "[      3 ms] source> PASS ****");

    let f: RefusalV1 = decode(
        "refusal",
        b"fixture",
        include_bytes!("../../tests/fixtures/refusal_v1.json"),
    )
    .unwrap();
    let f = f.to_core(b"fixture").unwrap();
    assert_eq!(
        (f.code.get(), f.count, f.last_job, f.last_attempt),
        (451, 2, 7, 2)
    );
    assert_eq!(f.text, "<path>: Append/Restart not permitted, try again");
    assert_eq!(
        (f.first_seen, f.last_seen),
        (Timestamp(1_796_040_300_000), Timestamp(1_796_040_400_000))
    );

    let p: PairV1 = decode(
        "pair",
        b"fixture",
        include_bytes!("../../tests/fixtures/pair_v1.json"),
    )
    .unwrap();
    let p = p.to_core();
    assert_eq!(p.reply, "500 Illegal PORT command.");
    assert_eq!(p.seen, Timestamp(1_796_040_300_000));

    let r: RequestV1 = decode(
        "request",
        b"fixture",
        include_bytes!("../../tests/fixtures/request_v1.json"),
    )
    .unwrap();
    assert_eq!(r.fingerprint(b"k").unwrap(), KeyHash([0x22; 32]));
    assert_eq!(r.job, 7);
}

/// The records of watches: frozen like the others, and a watch and an entry read back as
/// written.
#[test]
fn frozen_watch_fixtures_decode_and_watches_roundtrip() {
    use crate::types::{NewWatch, Watch, WatchId};
    use bftp_core::watch::{Entry, Facts, Outcome, Ready};
    let w: WatchV1 = decode(
        "watch",
        b"fixture",
        include_bytes!("../../tests/fixtures/watch_v1.json"),
    )
    .unwrap();
    let api = w.to_api(WatchId(3)).unwrap();
    assert_eq!(
        (api.id, api.owner_uid, api.paused),
        (WatchId(3), 1000, true)
    );
    assert_eq!(api.spec.source.path, "/outgoing/daily");
    assert_eq!(api.spec.disposition, Disposition::Move);
    assert_eq!(api.keyword_hash, Some(KeyHash([0x11; 32])));
    assert_eq!(api.created_at, Timestamp(1_796_040_000_000));
    let s = &api.settings;
    assert_eq!((s.every_ms, s.settle_ms), (300_000, 60_000));
    assert_eq!(
        (s.patterns.as_slice(), s.ignore.len()),
        (&["*.csv".to_string()][..], 2)
    );
    assert_eq!(s.ready, Some(Ready::Suffix(".done".into())));
    assert!(s.recursive);
    assert_eq!(s.notify_on, "failure");
    assert_eq!(s.expect.as_deref(), Some("daily 05:00"));
    let st = &api.status;
    assert_eq!(st.polls, 12);
    assert_eq!(st.next_poll, Timestamp(1_796_043_600_000));
    assert_eq!(st.current_job, Some(JobId(41)));
    assert_eq!(st.jobs, [JobId(38), JobId(40), JobId(41)]);
    assert_eq!(
        (
            st.delivered,
            st.failed,
            st.repeats,
            st.waiting,
            st.ignored,
            st.refused
        ),
        (30, 1, 2, 3, 4, 1)
    );
    assert_eq!(st.last_alarm, Some(Timestamp(1_796_042_000_000)));

    let f: WatchFileV1 = decode(
        "watch file",
        b"fixture",
        include_bytes!("../../tests/fixtures/watch_file_v1.json"),
    )
    .unwrap();
    let e = f.to_core();
    assert_eq!(
        e,
        Entry {
            facts: Facts {
                size: Some(1_320_000),
                modified: Some("20261201050312.250".into()),
                unique: Some("803U1A2B".into()),
            },
            since: Timestamp(1_796_040_060_000),
            outcome: Some(Outcome::Delivered),
            hint: Some("1320000 Dec  1 05:03".into()),
            taken: 2,
        }
    );

    // Back and forth: what is written reads back the same.
    let again: Watch = {
        let mut rec = WatchV1::new(&NewWatch {
            owner_uid: api.owner_uid,
            spec: api.spec.clone(),
            settings: api.settings.clone(),
            keyword_hash: api.keyword_hash,
            created_at: api.created_at,
        });
        rec.paused = true;
        rec.status = WatchStatusV1::from_api(&api.status);
        let rec: WatchV1 = decode("watch", b"k", &encode(&rec)).unwrap();
        rec.to_api(WatchId(3)).unwrap()
    };
    assert_eq!(again, api);
    for outcome in [None, Some(Outcome::Failed), Some(Outcome::Uncertain)] {
        let e = Entry {
            facts: Facts::default(),
            outcome,
            hint: None,
            ..e.clone()
        };
        let rec: WatchFileV1 =
            decode("watch file", b"k", &encode(&WatchFileV1::from_core(&e))).unwrap();
        assert_eq!(rec.to_core(), e);
    }
    // A new watch: its first poll due when it is created.
    let fresh = WatchV1::new(&NewWatch {
        owner_uid: 1,
        spec: api.spec.clone(),
        settings: Default::default(),
        keyword_hash: None,
        created_at: Timestamp(5),
    });
    let fresh = fresh.to_api(WatchId(1)).unwrap();
    assert_eq!(
        (fresh.status.next_poll, fresh.paused),
        (Timestamp(5), false)
    );
}

#[test]
fn intents_roundtrip_and_a_bad_legacy_intent_is_corrupt() {
    for i in [
        Intent::Append {
            before: 1,
            source_size: 2,
        },
        Intent::Unique {
            source_size: Some(3),
            announced: Some("STOU.1".into()),
        },
        Intent::Unique {
            source_size: None,
            announced: None,
        },
        Intent::Delete {
            path: Some("out/a".into()),
        },
    ] {
        let mut m = MemberV1::new(
            &crate::types::NewMember {
                name: "a".into(),
                size: None,
                modified: None,
                refused: None,
            },
            Timestamp(1),
        );
        m.intent = Some(IntentV1::from_api(&i));
        let back: MemberV1 = decode("member", b"k", &encode(&m)).unwrap();
        assert_eq!(back.to_api(0).intent, Some(i));
    }
    let bad = br#"{"v":1,"name":"a","state":"pending","attempts":1,"intent":"APPE x","updated":1}"#;
    assert!(matches!(
        decode::<MemberV1>("member", b"k", bad),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn every_state_and_enum_roundtrips() {
    let states = [
        JobState::Queued {
            next_attempt_at: Timestamp(5),
        },
        JobState::Running {
            attempt: 3,
            started_at: Timestamp(6),
        },
        JobState::Finished {
            outcome: JobOutcome::Succeeded,
            at: Timestamp(7),
        },
        JobState::Finished {
            outcome: JobOutcome::Partial,
            at: Timestamp(7),
        },
        JobState::Finished {
            outcome: JobOutcome::Failed,
            at: Timestamp(7),
        },
        JobState::Cancelled { at: Timestamp(8) },
    ];
    for s in states {
        let bytes = encode(&StateV1::from_api(&s));
        let back: StateV1 = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.to_api(), s);
    }
    use MemberState::*;
    for m in [
        Pending,
        Succeeded,
        FailedPermanent,
        FailedRetriesExhausted,
        Cancelled,
        Uncertain,
        Refused,
    ] {
        let bytes = encode(&MemberStateV1::from_api(m));
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            format!("\"{}\"", m.as_str())
        );
        let back: MemberStateV1 = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.to_api(), m);
    }
}

#[test]
fn bad_records_are_corrupt_not_panics() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "undecodable"),
        (b"\xff\x00garbage", "undecodable"),
        (b"{\"v\":2}", "record version 2"),
        (b"{\"v\":1}", "missing field"),
        (b"[1,2,3]", "undecodable"),
    ];
    for (bytes, needle) in cases {
        let e = decode::<JobV1>("job", b"\x00\x01", bytes).unwrap_err();
        match &e {
            StoreError::Corrupt {
                what: "job",
                key,
                reason,
            } => {
                assert_eq!(key, "0001");
                assert!(reason.contains(needle), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    let mut job: JobV1 = decode(
        "job",
        b"k",
        include_bytes!("../../tests/fixtures/job_v1.json"),
    )
    .unwrap();
    // A record of another version is refused for its version whether or not it also
    // parses as this version's record.
    let mut later = job.clone();
    later.v = RECORD_VERSION + 1;
    let e = decode::<JobV1>("job", b"k", &encode(&later)).unwrap_err();
    assert!(e.to_string().contains("record version 2"), "{e}");
    job.spec.ty = "Q".into();
    let e = job_to_api(JobId(1), &job).unwrap_err().to_string();
    assert!(e.contains("unknown TYPE \"Q\""), "{e}");
    job.spec.ty = "I".into();
    job.spec.data_path = Some("fxp2".into());
    let e = job_to_api(JobId(1), &job).unwrap_err().to_string();
    assert!(e.contains("unknown data path \"fxp2\""), "{e}");
}

/// Issue 29: a member's route is fields, each variant read back as written; an old
/// record without one loads with none; a word this code does not know reads as absent;
/// the route and its relay evidence are replaced whole.
#[test]
fn a_resume_base_is_recorded_kept_and_cleared() {
    let new = crate::types::NewMember {
        name: "big".into(),
        size: Some(9),
        modified: None,
        refused: None,
    };
    let mut m = MemberV1::new(&new, Timestamp(1));
    assert_eq!(m.to_api(0).resume, None);
    let base = bftp_core::resume::Base {
        size: 9,
        modified: Some("20261206080000".into()),
        dest_before: None,
    };
    let set = MemberUpdate {
        resume: Some(Some(base.clone())),
        ..Default::default()
    };
    m.apply(JobId(1), 0, &set, Timestamp(2)).unwrap();
    let back: MemberV1 = decode("member", b"k", &encode(&m)).unwrap();
    assert_eq!(back.to_api(0).resume, Some(base.clone()));
    // Another change leaves it.
    let mut m = back;
    let other = MemberUpdate {
        attempts: Some(2),
        ..Default::default()
    };
    m.apply(JobId(1), 0, &other, Timestamp(3)).unwrap();
    assert_eq!(m.to_api(0).resume, Some(base));
    let clear = MemberUpdate {
        resume: Some(None),
        ..Default::default()
    };
    m.apply(JobId(1), 0, &clear, Timestamp(4)).unwrap();
    assert_eq!(m.to_api(0).resume, None);
    assert!(!String::from_utf8(encode(&m)).unwrap().contains("resume"));
}

#[test]
fn routes_roundtrip_and_old_or_unknown_ones_read_as_absent() {
    use bftp_core::route::{RelayReason, Route};
    let old: MemberV1 = decode(
        "member",
        b"fixture",
        include_bytes!("../../tests/fixtures/member_v1.json"),
    )
    .unwrap();
    let old = old.to_api(1);
    assert_eq!(
        (old.route, old.relayed_bytes, old.stream_sha256),
        (None, None, None)
    );

    let routes = [
        Route::Fxp,
        Route::FxpRolesSwapped,
        Route::Relay(RelayReason::Asked),
        Route::Relay(RelayReason::Refused {
            reply: "425 Can't open data connection".into(),
        }),
        Route::Relay(RelayReason::Remembered {
            reply: "500 Illegal PORT command".into(),
            seen: Timestamp(1_796_040_000_000),
        }),
        Route::Relay(RelayReason::DataTls {
            detail: "no SSCN on either side".into(),
        }),
        Route::Relay(RelayReason::Proof {
            detail: "no common hash".into(),
        }),
    ];
    let new = crate::types::NewMember {
        name: "a".into(),
        size: None,
        modified: None,
        refused: None,
    };
    for route in routes {
        let mut m = MemberV1::new(&new, Timestamp(1));
        let u = MemberUpdate {
            route: Some(route.clone()),
            relayed_bytes: route.is_relay().then_some(4096),
            stream_sha256: route.is_relay().then(|| "ab".repeat(32)),
            ..Default::default()
        };
        m.apply(JobId(1), 0, &u, Timestamp(2)).unwrap();
        let back: MemberV1 = decode("member", b"k", &encode(&m)).unwrap();
        let api = back.to_api(0);
        assert_eq!(api.route.as_ref(), Some(&route));
        assert_eq!(api.relayed_bytes, u.relayed_bytes, "{route}");
        assert_eq!(api.stream_sha256, u.stream_sha256, "{route}");
        // An update without a route leaves it, whatever evidence it carries.
        let mut again = back.clone();
        let stray = MemberUpdate {
            relayed_bytes: Some(1),
            ..Default::default()
        };
        again.apply(JobId(1), 0, &stray, Timestamp(3)).unwrap();
        assert_eq!(again.route, back.route);
    }
    // A later third-party copy's route replaces a relay's evidence.
    let mut m = MemberV1::new(&new, Timestamp(1));
    let relayed = MemberUpdate {
        route: Some(Route::Relay(RelayReason::Asked)),
        relayed_bytes: Some(10),
        stream_sha256: Some("cd".repeat(32)),
        ..Default::default()
    };
    m.apply(JobId(1), 0, &relayed, Timestamp(2)).unwrap();
    let fxp = MemberUpdate {
        route: Some(Route::Fxp),
        ..Default::default()
    };
    m.apply(JobId(1), 0, &fxp, Timestamp(3)).unwrap();
    let api = m.to_api(0);
    assert_eq!(
        (api.route, api.relayed_bytes, api.stream_sha256),
        (Some(Route::Fxp), None, None)
    );

    // Words this code does not know, or a reason without its field: no route, the
    // evidence still read.
    for rec in [
        r#"{"path":"carrier_pigeon"}"#,
        r#"{"path":"relay"}"#,
        r#"{"path":"relay","reason":"whim","bytes":7}"#,
        r#"{"path":"relay","reason":"refused","bytes":7}"#,
        r#"{"path":"relay","reason":"remembered","detail":"425 no"}"#,
    ] {
        let json = format!(
            r#"{{"v":1,"name":"a","state":"succeeded","attempts":1,"updated":5,"route":{rec},"later":true}}"#
        );
        let m: MemberV1 = decode("member", b"k", json.as_bytes()).unwrap();
        let api = m.to_api(0);
        assert_eq!(api.route, None, "{rec}");
        assert_eq!(
            api.relayed_bytes,
            rec.contains("bytes").then_some(7),
            "{rec}"
        );
    }
}

#[test]
fn hex_roundtrip() {
    assert_eq!(hex(&[0, 1, 0xab, 0xff]), "0001abff");
    assert_eq!(unhex("0001abff"), Some(vec![0, 1, 0xab, 0xff]));
    assert_eq!(unhex("0001ABFF"), Some(vec![0, 1, 0xab, 0xff]));
    assert_eq!(unhex("abc"), None);
    assert_eq!(unhex("zz"), None);
    assert_eq!(unhex(""), Some(vec![]));
}
