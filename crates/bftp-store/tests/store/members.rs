//! A job's members: the freeze, updates, pages, proofs, and the walk of a recursive job.

use super::*;

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

/// Issue 29: how a file's copy travelled, and what bftpd counted and hashed of a relayed
/// stream, are stored and read back as written, across a reopen; a later third-party copy
/// replaces a relay's evidence; an update without a route leaves it.
fn a_members_route_round_trips(fx: &Fixture) {
    use bftp_core::route::{RelayReason, Route};
    let relay = Route::Relay(RelayReason::Remembered {
        reply: "425 Can't open data connection.".into(),
        seen: at(50),
    });
    let sha = "0123456789abcdef".repeat(4);
    let id = {
        let store = fx.open();
        let id = store
            .submit(with_members(job(1), &["a", "b", "c"]))
            .unwrap()
            .job()
            .id;
        let u = MemberUpdate {
            state: Some(MemberState::Succeeded),
            route: Some(relay.clone()),
            relayed_bytes: Some(1 << 33),
            stream_sha256: Some(sha.clone()),
            ..Default::default()
        };
        let m = store.update_member(id, 0, u, at(70)).unwrap();
        assert_eq!(
            (
                m.route.as_ref(),
                m.relayed_bytes,
                m.stream_sha256.as_deref()
            ),
            (Some(&relay), Some(1 << 33), Some(sha.as_str()))
        );
        let relayed = MemberUpdate {
            route: Some(Route::Relay(RelayReason::Asked)),
            relayed_bytes: Some(5),
            ..Default::default()
        };
        store.update_member(id, 1, relayed, at(71)).unwrap();
        let swapped = MemberUpdate {
            route: Some(Route::FxpRolesSwapped),
            ..Default::default()
        };
        store.update_member(id, 1, swapped, at(72)).unwrap();
        let other = MemberUpdate {
            detail: Some("x".into()),
            ..Default::default()
        };
        store.update_member(id, 1, other, at(73)).unwrap();
        id
    };
    let store = fx.open();
    let members = store.members(id).unwrap();
    let routes: Vec<_> = members
        .iter()
        .map(|m| (m.route.clone(), m.relayed_bytes, m.stream_sha256.clone()))
        .collect();
    assert_eq!(
        routes,
        [
            (Some(relay), Some(1 << 33), Some(sha)),
            (Some(Route::FxpRolesSwapped), None, None),
            (None, None, None),
        ]
    );
    fx.verify();
}

both_stores!(
    membership_is_frozen_once,
    member_updates_set_fields_and_terminal_states_are_final,
    members_read_in_pages_are_the_members_in_order,
    required_and_recorded_proofs_survive_a_reopen,
    a_walk_freezes_each_directory_once_and_the_membership_at_its_end,
    made_destination_directories_are_remembered_with_the_walk,
    a_members_route_round_trips,
);
