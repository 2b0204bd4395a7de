//! The upgrade of a schema-1 store (one sled entry per member) to schema 2 (members in pages
//! of 32), at open: every member reads back as it was, the upgrade survives being cut off
//! between two jobs, and the store it leaves opens again with a digest that adds up.

mod common;

use std::path::Path;

use bftp_core::{JobEvent, JobOutcome, MemberState, Timestamp};
use bftp_store::{JobId, JobStore, LastReply, Member, MemberUpdate, SCHEMA_VERSION};
use common::*;

const PAGE_MAGIC: u8 = 0xB2;

/// Rewrites the pages of the jobs in `jobs` as schema 1 had them (one entry per member,
/// keyed by job and index), marks the store schema 1 and drops its digest (a store from
/// before the digest gets one at open), as a bftpd of schema 1 would have left it.
fn as_schema_1(dir: &Path, jobs: &[JobId]) {
    let db = sled::open(dir).unwrap();
    let members = db.open_tree("members").unwrap();
    for id in jobs {
        let prefix = id.0.to_be_bytes();
        let pages: Vec<_> = members.scan_prefix(prefix).map(Result::unwrap).collect();
        for (k, _) in &pages {
            members.remove(k).unwrap();
        }
        for (k, v) in pages {
            let page = u32::from_be_bytes(k[8..12].try_into().unwrap());
            assert_eq!(v[0], PAGE_MAGIC, "a schema-2 page");
            let mut rest = &v[1..];
            let mut slot = 0;
            while !rest.is_empty() {
                let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                let record = &rest[4..4 + len];
                assert_eq!(record[0], b'{', "a member record");
                let index = page * 32 + slot;
                let key = [&prefix[..], &index.to_be_bytes()[..]].concat();
                members.insert(key, record).unwrap();
                rest = &rest[4 + len..];
                slot += 1;
            }
        }
    }
    let meta = db.open_tree("meta").unwrap();
    meta.insert("schema", &1u32.to_be_bytes()[..]).unwrap();
    meta.remove("digest").unwrap();
    db.flush().unwrap();
}

fn schema(dir: &Path) -> u32 {
    let db = sled::open(dir).unwrap();
    let v = db
        .open_tree("meta")
        .unwrap()
        .get("schema")
        .unwrap()
        .unwrap();
    u32::from_be_bytes(v[..].try_into().unwrap())
}

fn entries(dir: &Path) -> usize {
    sled::open(dir).unwrap().open_tree("members").unwrap().len()
}

/// Three jobs: 70 members (three pages, the last partial) with some recorded, one member,
/// and none; their members as read.
fn three_jobs(dir: &Path) -> (Vec<JobId>, Vec<Vec<Member>>) {
    let store = open(dir);
    let names: Vec<String> = (0..70).map(|i| format!("f{i:03}.dat")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let big = store
        .submit(with_members(job(1000), &names))
        .unwrap()
        .job()
        .id;
    let one = store
        .submit(with_members(job(1000), &["one.dat"]))
        .unwrap()
        .job()
        .id;
    let none = store.submit(job(1001)).unwrap().job().id;
    let done = |detail: &str| MemberUpdate {
        state: Some(MemberState::Succeeded),
        attempts: Some(1),
        bytes: Some(4096),
        dest_reply: Some(LastReply {
            code: Some(226),
            text: "Transfer complete".into(),
        }),
        detail: Some(detail.into()),
        ..Default::default()
    };
    let t = Timestamp(1_796_040_000_000);
    store
        .update_members(
            big,
            vec![(0, done("a")), (33, done("b")), (69, done("c"))],
            t,
        )
        .unwrap();
    store.update_member(one, 0, done("d"), t).unwrap();
    store
        .apply(one, JobEvent::Start { attempt: 1 }, t, None)
        .unwrap();
    let outcome = JobOutcome::Succeeded;
    store
        .apply(one, JobEvent::Finish { outcome }, t, None)
        .unwrap();
    let ids = vec![big, one, none];
    let members = ids.iter().map(|&id| store.members(id).unwrap()).collect();
    (ids, members)
}

#[test]
fn a_schema_1_store_opens_as_schema_2_with_every_member_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, before) = three_jobs(dir.path());
    assert_eq!(before[0].len(), 70);
    assert_eq!(before[0][33].detail.as_deref(), Some("b"));
    assert_eq!(entries(dir.path()), 3 + 1, "pages before");
    as_schema_1(dir.path(), &ids);
    assert_eq!(
        entries(dir.path()),
        70 + 1,
        "one entry per member in schema 1"
    );

    let store = open(dir.path());
    for (id, want) in ids.iter().zip(&before) {
        assert_eq!(&store.members(*id).unwrap(), want, "job {id}");
    }
    let r = store.verify().unwrap();
    assert_eq!((r.jobs, r.members), (3, 71));
    // The upgraded store is written as any other: a change lands on its page.
    let t = Timestamp(1_796_040_100_000);
    let u = MemberUpdate {
        state: Some(MemberState::FailedPermanent),
        ..Default::default()
    };
    assert_eq!(store.update_member(ids[0], 64, u, t).unwrap().index, 64);
    drop(store);
    assert_eq!(schema(dir.path()), SCHEMA_VERSION);
    assert_eq!(entries(dir.path()), 3 + 1, "pages after");
    // The digest the upgrade kept adds up: the store opens again, and nothing moves twice.
    let store = open(dir.path());
    let after = store.members(ids[0]).unwrap();
    assert_eq!(after[64].state, MemberState::FailedPermanent);
    assert_eq!(after[..64], before[0][..64]);
}

#[test]
fn an_upgrade_cut_off_between_jobs_goes_on_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, before) = three_jobs(dir.path());
    // The big job moved to pages already, the one-member job not: as a crash between the
    // two upgrade transactions leaves it (schema still 1).
    as_schema_1(dir.path(), &ids[1..2]);
    assert_eq!(schema(dir.path()), 1);
    let store = open(dir.path());
    for (id, want) in ids.iter().zip(&before) {
        assert_eq!(&store.members(*id).unwrap(), want, "job {id}");
    }
    drop(store);
    assert_eq!(schema(dir.path()), SCHEMA_VERSION);
    assert_eq!(entries(dir.path()), 3 + 1);
}

#[test]
fn members_a_cut_off_removal_had_taken_stay_gone_and_the_rest_keep_their_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, before) = three_jobs(dir.path());
    as_schema_1(dir.path(), &ids);
    // A removal of the big job cut off after its first transaction: members 0..40 gone (a
    // removal goes through the keys in order), the job and the rest still there.
    {
        let db = sled::open(dir.path()).unwrap();
        let members = db.open_tree("members").unwrap();
        for index in 0..40u32 {
            let key = [&ids[0].0.to_be_bytes()[..], &index.to_be_bytes()[..]].concat();
            members.remove(key).unwrap();
        }
        db.flush().unwrap();
    }
    let store = open(dir.path());
    let left = store.members(ids[0]).unwrap();
    assert_eq!(left, before[0][40..], "members 40..70, at their indexes");
    assert_eq!(store.members(ids[1]).unwrap(), before[1]);
    // A member that is gone stays gone: a change to it is refused, as before the upgrade.
    let u = MemberUpdate {
        state: Some(MemberState::FailedPermanent),
        ..Default::default()
    };
    let e = store.update_member(ids[0], 3, u, Timestamp(1_796_040_100_000));
    assert!(
        matches!(
            e,
            Err(bftp_store::StoreError::MemberNotFound { index: 3, .. })
        ),
        "{e:?}"
    );
    assert_eq!(store.verify().unwrap().members, 30 + 1);
    drop(store);
    // Page 0 was all holes: not written. Pages 1 and 2 hold the rest.
    assert_eq!(entries(dir.path()), 2 + 1);
    let store = open(dir.path());
    assert_eq!(store.members(ids[0]).unwrap(), before[0][40..]);
}

/// The frozen schema-1 store in `tests/fixtures/store_schema1` (see the fixtures' README),
/// copied: the upgrade must read yesterday's queue as it was written.
#[test]
fn the_frozen_schema_1_store_opens_with_its_members_as_written() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store_schema1");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    assert_eq!(schema(dir.path()), 1);
    assert_eq!(entries(dir.path()), 40 + 1);
    let store = open(dir.path());
    let m = store.members(JobId(1)).unwrap();
    assert_eq!(m.len(), 40);
    for (i, m) in m.iter().enumerate() {
        assert_eq!(
            (m.index, m.name.as_str()),
            (i as u32, &*format!("f{i:03}.dat"))
        );
        assert_eq!(m.size, Some(1000 + i as u64));
        let want = match i {
            0 | 33 => MemberState::Succeeded,
            39 => MemberState::FailedPermanent,
            _ => MemberState::Pending,
        };
        assert_eq!(m.state, want, "member {i}");
    }
    assert_eq!(m[33].detail.as_deref(), Some("thirty-three"));
    assert_eq!(m[33].dest_reply.as_ref().map(|r| r.code), Some(Some(226)));
    let done = store.members(JobId(2)).unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].name.as_str(), done[0].state),
        ("f100.dat", MemberState::Succeeded)
    );
    // The queued job goes on in the new layout: its members settle as a failed job's would.
    let t = Timestamp(1_796_040_200_000);
    store
        .apply(JobId(1), JobEvent::Start { attempt: 1 }, t, None)
        .unwrap();
    let job = store
        .settle_and_finish(
            JobId(1),
            MemberState::FailedPermanent,
            t,
            Some("gave up".into()),
        )
        .unwrap();
    assert!(job.state.is_final(), "{job:?}");
    let m = store.members(JobId(1)).unwrap();
    assert_eq!(m[5].state, MemberState::FailedPermanent);
    assert_eq!(m[33].state, MemberState::Succeeded);
    drop(store);
    assert_eq!(schema(dir.path()), SCHEMA_VERSION);
    assert_eq!(entries(dir.path()), 2 + 1);
    assert_eq!(open(dir.path()).verify().unwrap().members, 41);
}

/// A store written before the pair memory existed (the frozen one: no `pairs` tree) takes a
/// pair memory, and opens again with it: the new tree joins the content digest without
/// upsetting the digest of what was there.
#[test]
fn a_store_from_before_the_pair_memory_takes_one_and_opens_again() {
    use bftp_core::route::{PairKey, PairMemory};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store_schema1");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let key = PairKey::new(("a.example", 21), ("b.example", 21));
    let m = PairMemory {
        reply: "500 Illegal PORT command.".into(),
        seen: Timestamp(1_796_040_200_000),
    };
    {
        let store = open(dir.path());
        assert_eq!(store.pair_memory(&key).unwrap(), None);
        store.remember_pair(&key, &m).unwrap();
    }
    let store = open(dir.path());
    assert_eq!(store.pair_memory(&key).unwrap(), Some(m));
    assert_eq!(store.members(JobId(1)).unwrap().len(), 40);
    store.verify().unwrap();
}
