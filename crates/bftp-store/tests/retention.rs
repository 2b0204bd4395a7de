//! Retention through the `JobStore` trait: which jobs go, that everything kept for them goes
//! with them, and that nothing unfinished is touched.

mod common;

use std::time::Duration;

use bftp_core::retention::Keep;
use bftp_core::{JobEvent, JobOutcome, JobState, Timestamp};
use bftp_store::{
    AttemptTranscript, DeliveryTry, JobFilter, JobId, JobStore, KeyHash, NewJob, RequestKey,
    StateFilter, Submitted,
};
use common::*;

const KEEP: Keep = Keep::For(Duration::from_secs(60));

fn key(i: u32, tag: u8) -> KeyHash {
    let mut h = [tag; 32];
    h[..4].copy_from_slice(&i.to_be_bytes());
    KeyHash(h)
}

/// A job with members, a keyword and a request key of its own.
fn rich(i: u32, members: usize) -> NewJob {
    let names: Vec<String> = (0..members).map(|m| format!("f{m}.csv")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut j = with_members(job(1000 + i % 3), &names);
    j.keyword_hash = Some(key(i, 0xAA));
    j.request = Some(RequestKey {
        key_hash: key(i, 0xBB),
        fingerprint: key(i, 0xCC),
    });
    j
}

fn finish(store: &dyn JobStore, id: JobId, at: Timestamp) {
    store
        .apply(id, JobEvent::Start { attempt: 1 }, at, None)
        .unwrap();
    store
        .set_transcript(
            id,
            AttemptTranscript {
                attempt: 1,
                lines: vec!["226 done".into()],
            },
        )
        .unwrap();
    store
        .apply(
            id,
            JobEvent::Finish {
                outcome: JobOutcome::Succeeded,
            },
            at,
            None,
        )
        .unwrap();
}

fn deliver(store: &dyn JobStore, id: JobId, at: Timestamp) {
    store
        .record_delivery(id, DeliveryTry::Delivered, at)
        .unwrap();
}

/// Removes all that the rule lets go, as the daemon's task does: windows of `scan` jobs.
fn sweep(store: &dyn JobStore, now: Timestamp, keep: Keep, scan: usize, batch: usize) -> u64 {
    let store = store.upkeep().expect("both stores keep themselves up");
    let (mut after, mut removed) = (None, 0);
    loop {
        let (ids, next) = store.removable_jobs(now, keep, after, scan).unwrap();
        removed += store.remove_jobs(&ids, now, keep, batch).unwrap();
        match next {
            Some(n) => after = Some(n),
            None => return removed,
        }
    }
}

#[test]
fn only_old_final_jobs_with_their_report_done_go_and_everything_of_theirs_goes_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // 1..=40 finished and delivered (to go); 41..=50 finished, report pending; 51..=55
    // cancelled, report given up (to go); 56..=60 running; 61..=70 queued.
    let mut ids = Vec::new();
    for i in 1..=70u32 {
        ids.push(store.submit(rich(i, 3)).unwrap().job().id);
    }
    for &id in &ids[..50] {
        finish(&store, id, at(10));
    }
    for &id in &ids[..40] {
        deliver(&store, id, at(11));
    }
    for &id in &ids[50..55] {
        store.apply(id, JobEvent::Cancel, at(10), None).unwrap();
        store
            .record_delivery(
                id,
                DeliveryTry::GaveUp {
                    error: "550 no such user".into(),
                },
                at(11),
            )
            .unwrap();
    }
    for &id in &ids[55..60] {
        store
            .apply(id, JobEvent::Start { attempt: 1 }, at(10), None)
            .unwrap();
    }
    let before = store.verify().unwrap();

    // Too early: nothing goes.
    assert_eq!(sweep(&store, at(69), KEEP, 7, 100), 0);
    assert_eq!(store.verify().unwrap(), before);

    let removed = sweep(&store, at(71), KEEP, 7, 100);
    assert_eq!(removed, 45);
    for &id in ids[..40].iter().chain(&ids[50..55]) {
        assert_eq!(store.get(id).unwrap(), None, "job {id}");
        assert!(store.outbox_entry(id).unwrap().is_none());
        assert!(store.transcript(id).unwrap().is_none());
    }
    // What is left is exactly the 25 jobs kept, with all their records.
    let after = store.verify().unwrap();
    assert_eq!(after.jobs, 25);
    assert_eq!(after.members, 25 * 3);
    assert_eq!(after.requests, 25);
    let hist: u64 = ids[40..50]
        .iter()
        .chain(&ids[55..])
        .map(|&id| store.history(id).unwrap().len() as u64)
        .sum();
    assert_eq!(after.history, hist);
    // owners + keywords + states per job; due per queued job; outbox_due per pending report.
    assert_eq!(after.index_entries, 25 * 3 + 10 + 10);
    for &id in &ids[40..50] {
        let j = store.get(id).unwrap().unwrap();
        assert!(matches!(j.state, JobState::Finished { .. }));
        assert_eq!(store.members(id).unwrap().len(), 3);
        assert!(store.transcript(id).unwrap().is_some());
    }
    for &id in &ids[55..60] {
        assert!(matches!(
            store.get(id).unwrap().unwrap().state,
            JobState::Running { .. }
        ));
    }
    assert_eq!(store.running_jobs().unwrap(), ids[55..60].to_vec());
    assert_eq!(store.due(at(1_000_000), 100).unwrap().len(), 10);

    // A removed job's keyword finds nothing; its request key makes a new job.
    let by_kw = |i: u32| {
        store
            .list(&JobFilter {
                keyword_hash: Some(key(i, 0xAA)),
                ..JobFilter::default()
            })
            .unwrap()
    };
    assert!(by_kw(1).is_empty());
    assert_eq!(by_kw(41).len(), 1);
    assert!(store
        .list(&JobFilter {
            state: Some(StateFilter::Cancelled),
            ..JobFilter::default()
        })
        .unwrap()
        .is_empty());
    let again = store.submit(rich(1, 3)).unwrap();
    assert!(matches!(again, Submitted::Created(_)), "{again:?}");
    assert!(again.job().id.0 > 70, "ids are never reused: {again:?}");
    // The kept jobs' keys still name them.
    assert!(
        matches!(store.submit(rich(41, 3)).unwrap(), Submitted::Existing(j) if j.id == ids[40])
    );

    // The digest kept by the removals matches the records: the store opens again.
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.verify().unwrap().jobs, 26);
}

#[test]
fn a_job_of_many_members_goes_in_bounded_transactions_and_forever_keeps_all() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let big = store.submit(rich(1, 2_500)).unwrap().job().id;
    let small = store.submit(rich(2, 1)).unwrap().job().id;
    for id in [big, small] {
        finish(&store, id, at(0));
        deliver(&store, id, at(0));
    }
    assert_eq!(sweep(&store, at(1_000_000), Keep::Forever, 10, 100), 0);
    assert_eq!(store.verify().unwrap().jobs, 2);

    let flushes = store.flush_count();
    assert_eq!(sweep(&store, at(61), KEEP, 10, 1_000), 2);
    // 2,500 members and 5 history entries in batches of 1,000: three transactions for the
    // big job, one for the small one (each transaction waits for its own flush).
    let took = store.flush_count() - flushes;
    assert!((4..=5).contains(&took), "{took} flushes");
    let r = store.verify().unwrap();
    assert_eq!(
        (r.jobs, r.members, r.history, r.requests, r.index_entries),
        (0, 0, 0, 0, 0)
    );
}

/// sled does not shrink its file in place; it reuses the space removed jobs held. A store
/// under retention therefore stops growing: bursts like the first, each after the one before
/// was removed, need far less disk than the first did (measured: 6.8, 8.4, 8.9 MiB after
/// one, two, three bursts of 1,000 jobs; about 20 MiB without removal). (`bftpd backup` writes a compact copy.)
#[test]
fn after_a_burst_is_removed_the_next_burst_reuses_its_space() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let burst = |base: u32| {
        let mut ids = Vec::new();
        for i in 0..1_000u32 {
            ids.push(store.submit(rich(base + i, 8)).unwrap().job().id);
        }
        for &id in &ids {
            finish(&store, id, at(0));
            deliver(&store, id, at(0));
        }
    };
    burst(0);
    let first = store.size_on_disk().unwrap();
    assert_eq!(sweep(&store, at(61), KEEP, 256, 512), 1_000);
    let r = store.verify().unwrap();
    assert_eq!(
        (r.jobs, r.members, r.history, r.requests, r.index_entries),
        (0, 0, 0, 0, 0)
    );
    burst(10_000);
    let second = store.size_on_disk().unwrap();
    assert_eq!(sweep(&store, at(61), KEEP, 256, 512), 1_000);
    burst(20_000);
    let third = store.size_on_disk().unwrap();
    eprintln!("after the first burst {first} B, the second {second} B, the third {third} B");
    assert!(
        third < 2 * first,
        "{third} B after three bursts of 1,000 jobs: removed space not reused ({first} B after one; \
         without removal three bursts take about three times that)"
    );
}

/// Rows of each per-job table of a PostgreSQL store: jobs, members, history, requests,
/// outbox, transcripts.
fn pg_rows(url: &str) -> Vec<u64> {
    let out = pgcluster::cluster()
        .psql(
            pgcluster::Cluster::db_of(url),
            "SELECT (SELECT count(*) FROM jobs) || ' ' || (SELECT count(*) FROM members) || ' ' || \
             (SELECT count(*) FROM history) || ' ' || (SELECT count(*) FROM requests) || ' ' || \
             (SELECT count(*) FROM outbox) || ' ' || (SELECT count(*) FROM transcripts)",
        )
        .unwrap();
    out.split(' ').map(|n| n.parse().unwrap()).collect()
}

/// Waits until `sql` on the test's database answers `want` (another session took its lock).
fn until_pg(url: &str, sql: &str, want: &str) {
    let c = pgcluster::cluster();
    assert!(
        pgcluster::wait_for(Duration::from_secs(30), || c
            .psql(pgcluster::Cluster::db_of(url), sql)
            .is_ok_and(|v| v == want)),
        "{sql} never answered {want}"
    );
}

/// Retention on PostgreSQL (issue 27: it did nothing there): the same rule, every row of a
/// removed job gone (a job of 1,200 members in transactions of at most 500), nothing kept
/// touched; one node at a time (while another session holds the retention lock, nothing
/// goes); a job whose row another session holds is left for the next pass, not waited for.
#[test]
fn on_postgres_old_final_jobs_go_with_every_row_one_node_at_a_time_never_waiting() {
    let url = pgcluster::fresh_database();
    let c = pgcluster::cluster();
    let db = pgcluster::Cluster::db_of(&url).to_string();
    let store = open_pg(&url, "ra");
    // 1..=20 finished and delivered, 21 of 1,200 members too (to go); 22..=25 finished with
    // their report pending; 26..=28 queued.
    let mut ids = Vec::new();
    for i in 1..=28u32 {
        let members = if i == 21 { 1_200 } else { 3 };
        ids.push(store.submit(rich(i, members)).unwrap().job().id);
    }
    for &id in &ids[..25] {
        finish(&store, id, at(10));
    }
    for &id in &ids[..21] {
        deliver(&store, id, at(11));
    }
    let before = pg_rows(&url);
    assert_eq!(&before[..2], &[28, 27 * 3 + 1_200]);
    assert_eq!(sweep(&store, at(69), KEEP, 7, 500), 0, "too early");
    assert_eq!(sweep(&store, at(1_000), Keep::Forever, 7, 500), 0);
    assert_eq!(pg_rows(&url), before);

    // Another node removes: this one leaves its windows alone.
    let mut other = c
        .psql_session(&db, "SELECT pg_advisory_lock(4242020216)")
        .unwrap();
    let retention_lock = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                          AND objid::bigint = 4242020216 AND database = \
                          (SELECT oid FROM pg_database WHERE datname = current_database())";
    until_pg(&url, retention_lock, "1");
    assert_eq!(sweep(&store, at(71), KEEP, 7, 500), 0);
    assert_eq!(pg_rows(&url), before);
    other.kill().unwrap();
    other.wait().unwrap();
    until_pg(&url, retention_lock, "0");

    // A session holds job 3's row: it is left, not waited for.
    let mut holder = c
        .psql_session(
            &db,
            &format!(
                "BEGIN; SELECT 1 FROM jobs WHERE id = {} FOR UPDATE",
                ids[2].0
            ),
        )
        .unwrap();
    until_pg(
        &url,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' \
         AND datname = current_database()",
        "1",
    );
    let started = std::time::Instant::now();
    assert_eq!(sweep(&store, at(71), KEEP, 7, 500), 20);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    until_pg(
        &url,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' \
         AND datname = current_database()",
        "0",
    );
    assert_eq!(sweep(&store, at(71), KEEP, 7, 500), 1);

    for &id in &ids[..21] {
        assert_eq!(store.get(id).unwrap(), None, "job {id}");
    }
    // What is left: the 7 kept jobs with every row of theirs; nothing of the others.
    let hist: u64 = ids[21..]
        .iter()
        .map(|&id| store.history(id).unwrap().len() as u64)
        .sum();
    assert_eq!(pg_rows(&url), [7, 7 * 3, hist, 7, 4, 4]);
    for &id in &ids[21..25] {
        assert_eq!(store.members(id).unwrap().len(), 3);
        assert!(store.transcript(id).unwrap().is_some());
    }
    assert_eq!(store.due(at(1_000_000), 100).unwrap().len(), 3);
    // A removed job's request key makes a new job; a kept one's still names its job.
    let again = store.submit(rich(1, 3)).unwrap();
    assert!(matches!(again, Submitted::Created(_)), "{again:?}");
    assert!(again.job().id.0 > 28, "ids are never reused: {again:?}");
    assert!(
        matches!(store.submit(rich(22, 3)).unwrap(), Submitted::Existing(j) if j.id == ids[21])
    );
    let upkeep = store.upkeep().unwrap();
    assert!(upkeep.disk_size().unwrap().is_some_and(|b| b > 0));
}
