//! Several nodes on one PostgreSQL store: claims, leases, takeover and the fence the
//! database keeps against a node whose lease ran out.

mod common;

use std::time::{Duration, Instant};

use bftp_core::lease::{Fenced, Lease};

use bftp_core::{JobEvent, JobOutcome, MemberState};
use bftp_store::{
    AttemptTranscript, Cluster, DeliveryTry, JobId, JobStore, MemberUpdate, PgOptions, PgStore,
    StoreError, Submitted,
};
use common::*;

fn node(url: &str, name: &str, lease: Duration) -> PgStore {
    let mut o = PgOptions::new(url, name);
    o.pool_size = 2;
    o.lease = lease;
    PgStore::open(o).unwrap()
}

fn succeeded() -> MemberUpdate {
    MemberUpdate {
        state: Some(MemberState::Succeeded),
        ..MemberUpdate::default()
    }
}

fn epoch(url: &str, id: JobId) -> String {
    let c = pgcluster::cluster();
    c.psql(
        pgcluster::Cluster::db_of(url),
        &format!("SELECT epoch FROM jobs WHERE id = {}", id.0),
    )
    .unwrap()
}

#[test]
fn a_node_whose_lease_ran_out_cannot_write_and_another_takes_the_job_over() {
    let url = pgcluster::fresh_database();
    let c = pgcluster::cluster();
    let db = pgcluster::Cluster::db_of(&url).to_string();
    let a = node(&url, "node-a", Duration::from_secs(3));
    let b = node(&url, "node-b", Duration::from_secs(30));
    let id = a
        .submit(with_members(job(1), &["x", "y"]))
        .unwrap()
        .job()
        .id;

    // a claims it; b finds nothing while a holds it.
    assert_eq!(a.due(at(60), 10).unwrap(), [(at(60), id)]);
    assert_eq!(b.due(at(60), 10).unwrap(), []);
    a.apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    a.update_member(id, 0, succeeded(), at(62)).unwrap();
    assert_eq!(b.due(at(63), 10).unwrap(), []);
    assert_eq!(a.job_node(id).unwrap().as_deref(), Some("node-a"));
    let held = epoch(&url, id);
    // a's own deadline for it (RULES.md §4.8): a lease less the margin from before the start.
    let lease = a.lease(id).expect("a holds the job");
    let Lease::Held { deadline } = lease.get() else {
        panic!("{:?}", lease.get())
    };
    let left = deadline.saturating_duration_since(Instant::now());
    assert!(left <= Duration::from_millis(2_700), "{left:?}");
    assert!(lease.may_send().is_ok());
    assert!(b.lease(id).is_none(), "b holds nothing");

    // a stops renewing (as a paused node does): its lease runs out.
    c.psql(
        &db,
        &format!(
            "UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = {}",
            id.0
        ),
    )
    .unwrap();
    assert!(
        pgcluster::wait_for(Duration::from_secs(5), || a.lost_leases() == [id]),
        "a's heartbeat must notice its lease ran out"
    );
    assert_eq!(lease.get(), Lease::Lost);
    assert_eq!(lease.may_send(), Err(Fenced::Lost));
    assert!(a.cancelled_elsewhere().is_empty());

    // b takes it over: back to the queue, due now, then claimed by b.
    assert_eq!(b.due(at(70), 10).unwrap(), [(at(70), id)]);
    let history: Vec<String> = b.history(id).unwrap().into_iter().map(|h| h.kind).collect();
    assert_eq!(history, ["submitted", "start", "taken-over"]);
    b.apply(id, JobEvent::Start { attempt: 2 }, at(71), None)
        .unwrap();
    assert_eq!(b.job_node(id).unwrap().as_deref(), Some("node-b"));

    // Every late write of a is refused, and changes nothing.
    let before = (
        b.get(id).unwrap(),
        b.members(id).unwrap(),
        b.history(id).unwrap(),
    );
    let refused = |r: Result<(), StoreError>| {
        assert!(
            matches!(r, Err(StoreError::LeaseLost { .. })),
            "a stale write must be refused: {r:?}"
        )
    };
    refused(a.update_member(id, 1, succeeded(), at(72)).map(|_| ()));
    refused(
        a.apply(
            id,
            JobEvent::Finish {
                outcome: JobOutcome::Succeeded,
            },
            at(72),
            None,
        )
        .map(|_| ()),
    );
    refused(
        a.settle_and_finish(id, MemberState::FailedPermanent, at(72), None)
            .map(|_| ()),
    );
    refused(a.set_transcript(
        id,
        AttemptTranscript {
            attempt: 1,
            lines: vec!["late".into()],
        },
    ));
    refused(a.append_history(
        id,
        bftp_store::HistoryEvent {
            at: at(72),
            kind: "late".into(),
            detail: None,
        },
    ));
    assert_eq!(
        (
            b.get(id).unwrap(),
            b.members(id).unwrap(),
            b.history(id).unwrap()
        ),
        before
    );
    assert_eq!(
        b.outbox_entry(id).unwrap(),
        None,
        "no report from a stale finish"
    );

    // The database itself refuses a write that carries the old epoch, whoever sends it.
    let raw = c.psql(
        &db,
        &format!(
            "BEGIN; SELECT set_config('bftp.epoch', '{held}', true); \
             UPDATE members SET rec = rec WHERE job = {}; COMMIT;",
            id.0
        ),
    );
    let e = raw.expect_err("the trigger must refuse a stale epoch");
    assert!(e.contains("stale lease epoch"), "{e}");

    // b, the holder, finishes the job normally.
    b.update_member(id, 1, succeeded(), at(73)).unwrap();
    let done = b
        .apply(
            id,
            JobEvent::Finish {
                outcome: JobOutcome::Succeeded,
            },
            at(74),
            None,
        )
        .unwrap();
    assert!(done.state.is_final());
    assert!(b.outbox_entry(id).unwrap().is_some());
}

#[test]
fn sixteen_submits_of_one_key_on_three_nodes_make_one_job() {
    let url = pgcluster::fresh_database();
    let nodes: Vec<std::sync::Arc<PgStore>> = (0..3)
        .map(|i| std::sync::Arc::new(node(&url, &format!("n{i}"), Duration::from_secs(10))))
        .collect();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let (s, barrier) = (nodes[i % 3].clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                s.submit(with_request(job(7), 42, 43)).unwrap()
            })
        })
        .collect();
    let results: Vec<Submitted> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let created = results
        .iter()
        .filter(|r| matches!(r, Submitted::Created(_)))
        .count();
    assert_eq!(created, 1);
    let id = results[0].job().id;
    assert!(results.iter().all(|r| r.job().id == id));
    assert_eq!(nodes[2].count_by_state().unwrap().queued, 1);
}

#[test]
fn a_due_job_is_claimed_by_one_node_and_a_due_report_by_one_node() {
    let url = pgcluster::fresh_database();
    let a = node(&url, "a", Duration::from_secs(10));
    let b = node(&url, "b", Duration::from_secs(10));
    let ids: Vec<JobId> = (0..6)
        .map(|_| a.submit(with_members(job(1), &["f"])).unwrap().job().id)
        .collect();
    let mut got_a: Vec<JobId> = a
        .due(at(60), 3)
        .unwrap()
        .into_iter()
        .map(|(_, i)| i)
        .collect();
    let got_b: Vec<JobId> = b
        .due(at(60), 10)
        .unwrap()
        .into_iter()
        .map(|(_, i)| i)
        .collect();
    assert_eq!(got_a.len(), 3);
    assert_eq!(got_b.len(), 3);
    got_a.extend(&got_b);
    got_a.sort();
    assert_eq!(got_a, ids, "each job claimed by exactly one node");
    // b cannot start a job that a claimed, a can.
    let mine = ids.iter().find(|i| !got_b.contains(i)).copied().unwrap();
    a.apply(mine, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    a.update_member(mine, 0, succeeded(), at(62)).unwrap();
    a.apply(
        mine,
        JobEvent::Finish {
            outcome: JobOutcome::Succeeded,
        },
        at(63),
        None,
    )
    .unwrap();
    // Its report: claimed by the first node to look, not by the other meanwhile.
    assert_eq!(b.outbox_due(at(100), 10).unwrap().len(), 1);
    assert_eq!(a.outbox_due(at(100), 10).unwrap(), []);
    assert_eq!(a.outbox_next_due().unwrap(), None);
    b.record_delivery(mine, bftp_store::DeliveryTry::Delivered, at(101))
        .unwrap();
    assert_eq!(b.outbox_pending().unwrap(), 0);
}

#[test]
fn migrations_are_versioned_and_a_newer_schema_is_refused() {
    let url = pgcluster::fresh_database();
    assert_eq!(
        PgStore::schema_version_at(&PgOptions::new(&url, "x")).unwrap(),
        0
    );
    drop(node(&url, "a", Duration::from_secs(10)));
    assert_eq!(
        PgStore::schema_version_at(&PgOptions::new(&url, "x")).unwrap(),
        bftp_store::PG_SCHEMA_VERSION
    );
    // A second open applies nothing again.
    drop(node(&url, "b", Duration::from_secs(10)));
    let c = pgcluster::cluster();
    let db = pgcluster::Cluster::db_of(&url);
    assert_eq!(
        c.psql(db, "SELECT count(*) FROM bftp_schema").unwrap(),
        bftp_store::PG_SCHEMA_VERSION.to_string()
    );
    c.psql(db, "INSERT INTO bftp_schema (version) VALUES (999)")
        .unwrap();
    let e = PgStore::open(PgOptions::new(&url, "c")).unwrap_err();
    assert!(
        matches!(e, StoreError::SchemaTooNew { found: 999, .. }),
        "{e:?}"
    );
}

#[test]
fn the_password_from_the_options_is_used_to_log_in() {
    let c = pgcluster::cluster();
    let url = c.password_database("s3cret-pw");
    let with = |password: Option<&str>| {
        let mut o = PgOptions::new(&url, "node-pw");
        o.pool_size = 1;
        o.password = password.map(str::to_string);
        PgStore::open(o)
    };
    for wrong in [None, Some("not-it")] {
        let e = with(wrong).expect_err("a login without the right password must fail");
        let text = format!("{e}: {:?}", std::error::Error::source(&e));
        assert!(
            text.contains("password authentication failed") || text.contains("password missing"),
            "the reason must say why: {text}"
        );
    }
    let store = with(Some("s3cret-pw")).expect("the password from the options logs in");
    let id = store.submit(job(1)).unwrap().job().id;
    assert_eq!(store.get(id).unwrap().map(|j| j.id), Some(id));
}

#[test]
fn a_busy_pool_does_not_let_a_live_nodes_lease_run_out() {
    let url = pgcluster::fresh_database();
    let db = pgcluster::Cluster::db_of(&url).to_string();
    // One pool connection, a 1 s lease: the heartbeat renews every third of a second.
    let mut o = PgOptions::new(&url, "node-a");
    o.pool_size = 1;
    o.lease = Duration::from_secs(1);
    let a = std::sync::Arc::new(PgStore::open(o).unwrap());
    let b = node(&url, "node-b", Duration::from_secs(30));
    let id = a
        .submit(with_members(job(1), &["x", "y"]))
        .unwrap()
        .job()
        .id;
    assert_eq!(a.due(at(60), 10).unwrap(), [(at(60), id)]);
    a.apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    let held = epoch(&url, id);

    // A read of a waits 3 s (3 leases) on a locked table, holding a's only pool connection
    // all that time (and no lock on the job's row); b looks for jobs to take over meanwhile.
    let locker = {
        let db = db.clone();
        std::thread::spawn(move || {
            pgcluster::cluster()
                .psql(
                    &db,
                    "BEGIN; LOCK TABLE members IN ACCESS EXCLUSIVE MODE; \
                     SELECT pg_sleep(3); COMMIT;",
                )
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let reader = {
        let a = a.clone();
        std::thread::spawn(move || a.members(id).map(|m| m.len()))
    };
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            b.due(at(63), 10).unwrap(),
            [],
            "b took over a live node's job"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    locker.join().unwrap();
    assert_eq!(reader.join().unwrap().unwrap(), 2);
    a.update_member(id, 0, succeeded(), at(64))
        .expect("a still holds its lease");
    assert_eq!(b.due(at(64), 10).unwrap(), []);
    assert!(a.lost_leases().is_empty(), "a gave up a lease it held");
    assert_eq!(epoch(&url, id), held, "the job was never taken over");
    assert_eq!(a.job_node(id).unwrap().as_deref(), Some("node-a"));
}

fn take(n: &PgStore, hosts: &[&str]) -> Option<bftp_store::SlotHold> {
    let slots = n.host_slots().expect("a shared store has slots");
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    slots.try_take(&hosts, 2).unwrap()
}

fn rows(url: &str, host: &str) -> String {
    pgcluster::cluster()
        .psql(
            pgcluster::Cluster::db_of(url),
            &format!("SELECT count(*) FROM host_slots WHERE host = '{host}'"),
        )
        .unwrap()
}

/// Polls `f` for up to `limit`.
fn within(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Slots count over both nodes, a take is all or nothing, and a release makes the slot
/// another node's (and announces it: the generation moves).
#[test]
fn host_slots_count_over_all_nodes_and_a_release_hands_one_on() {
    let url = pgcluster::fresh_database();
    let a = node(&url, "a", Duration::from_secs(10));
    let b = node(&url, "b", Duration::from_secs(10));
    let two = take(&a, &["h", "h"]).expect("two slots on h");
    assert_eq!(two.ids.len(), 2);
    assert!(take(&b, &["h"]).is_none(), "h is full over both nodes");
    assert!(take(&b, &["g", "h"]).is_none());
    assert_eq!(rows(&url, "g"), "0", "a refused take holds nothing");
    let g = take(&b, &["g", "g"]).expect("g is free");
    let b_slots = b.host_slots().unwrap();
    let seen = b_slots.generation();
    a.host_slots().unwrap().release(two);
    assert!(within(Duration::from_secs(5), || b_slots.generation() != seen));
    assert!(
        take(&b, &["h", "h"]).is_some(),
        "both of a's slots came back"
    );
    drop(g);
}

/// A node that is gone (its connections closed, as after kill -9) gives its slots back once
/// its lease ran out, not before; a node whose presence session still lives (a paused
/// node: its FTP sessions may be open too) keeps them past its lease, until that session
/// ends.
#[test]
fn a_dead_nodes_slots_come_back_after_its_lease_a_paused_nodes_do_not() {
    let url = pgcluster::fresh_database();
    let lease = Duration::from_secs(2);
    let a = node(&url, "a", lease);
    let b = node(&url, "b", Duration::from_secs(10));
    let _held = take(&a, &["h", "h"]).unwrap();
    drop(a);
    // What is left of a's lease from its last renewal (made before it died, at a moment the
    // test cannot see): the slots must not come back before that has run out.
    let died = std::time::Instant::now();
    let left = pgcluster::cluster()
        .psql(
            pgcluster::Cluster::db_of(&url),
            "SELECT extract(epoch FROM lease_until - now()) FROM bftp_nodes WHERE node = 'a'",
        )
        .unwrap();
    let left = Duration::from_secs_f64(left.parse::<f64>().unwrap().max(0.0));
    assert!(
        left > Duration::ZERO && left <= lease,
        "a's lease: {left:?} left"
    );
    assert!(take(&b, &["h"]).is_none(), "a's lease still runs");
    assert!(within(Duration::from_secs(10), || take(&b, &["h"]).is_some()));
    let after = died.elapsed();
    assert!(
        after >= left,
        "taken back after {after:?}, before the {left:?} left of the lease ran out"
    );

    // c pauses: its presence session stays (here a psql session holding c's presence
    // lock after c itself is gone, as a stopped process keeps its sockets).
    let c = node(&url, "c", lease);
    let _held = take(&c, &["p", "p"]).unwrap();
    drop(c);
    let cl = pgcluster::cluster();
    let db = pgcluster::Cluster::db_of(&url);
    let mut paused = cl
        .psql_session(db, "SELECT pg_advisory_lock(4242, hashtext('c'))")
        .unwrap();
    assert!(within(Duration::from_secs(5), || {
        cl.psql(
            db,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 4242 \
             AND objid = hashtext('c')::oid AND granted",
        )
        .unwrap()
            == "1"
    }));
    std::thread::sleep(lease * 2);
    assert!(
        take(&b, &["p"]).is_none(),
        "a paused node's slots stay taken"
    );
    let _ = paused.kill();
    let _ = paused.wait();
    assert!(within(Duration::from_secs(5), || take(&b, &["p"]).is_some()));
}

#[test]
fn jobs_started_while_the_heartbeat_looks_are_not_taken_for_lost() {
    let url = pgcluster::fresh_database();
    // A 600 ms lease: the heartbeat looks every 200 ms, while 120 claimed jobs are started
    // one by one over about 500 ms. A look that renews the running jobs and then, in a later
    // query, finds a just-started job no longer queued must not count it as lost.
    let a = node(&url, "node-a", Duration::from_millis(600));
    let ids: Vec<JobId> = (0..120)
        .map(|_| a.submit(with_members(job(1), &["x"])).unwrap().job().id)
        .collect();
    assert_eq!(a.due(at(60), 200).unwrap().len(), ids.len());
    for id in &ids {
        a.apply(*id, JobEvent::Start { attempt: 1 }, at(61), None)
            .unwrap();
        std::thread::sleep(Duration::from_millis(4));
    }
    // Two more looks, with every job running.
    std::thread::sleep(Duration::from_millis(450));
    assert_eq!(
        a.lost_leases(),
        [],
        "a live node took its own jobs for lost"
    );
    for id in &ids {
        a.update_member(*id, 0, succeeded(), at(62))
            .expect("the node still holds the job");
    }
}

#[test]
fn jobs_this_node_finishes_while_the_heartbeat_looks_are_not_taken_for_lost() {
    let url = pgcluster::fresh_database();
    // A 600 ms lease, looked at every 200 ms; each write that ends a lease holds 500 ms
    // between its commit and letting the job go, so a look falls in that moment: the job's
    // epoch has moved on in the database while this node still holds it at the old one.
    let mut o = PgOptions::new(&url, "node-a");
    o.pool_size = 4;
    o.lease = Duration::from_millis(600);
    o.hold_before_release = Duration::from_millis(500);
    let a = PgStore::open(o).unwrap();
    let ids: Vec<JobId> = (0..3)
        .map(|_| a.submit(with_members(job(1), &["x"])).unwrap().job().id)
        .collect();
    assert_eq!(a.due(at(60), 10).unwrap().len(), ids.len());
    for id in &ids {
        a.apply(*id, JobEvent::Start { attempt: 1 }, at(61), None)
            .unwrap();
    }
    // One finishes, one is requeued for a retry, one is cancelled here: each moves the
    // epoch on and lets the lease go.
    a.update_member(ids[0], 0, succeeded(), at(62)).unwrap();
    a.apply(
        ids[0],
        JobEvent::Finish {
            outcome: JobOutcome::Succeeded,
        },
        at(63),
        None,
    )
    .unwrap();
    a.apply(
        ids[1],
        JobEvent::Requeue {
            next_attempt_at: at(120),
        },
        at(63),
        None,
    )
    .unwrap();
    a.settle_and_finish(ids[2], MemberState::Cancelled, at(63), None)
        .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(
        a.lost_leases(),
        [],
        "a live node took the jobs it let go itself for lost"
    );
}

/// The STOU names a server announced, remembered over all nodes: a name node a's owner
/// claimed is another's to node b (claimed, or looked at), stays a's, and once a releases
/// it, b may claim it. A directory's lock key taken with one slot lets one node at a time.
#[test]
fn stou_names_and_directory_locks_hold_over_all_nodes() {
    let url = pgcluster::fresh_database();
    let a = node(&url, "a", Duration::from_secs(10));
    let b = node(&url, "b", Duration::from_secs(10));
    let (sa, sb) = (a.host_slots().unwrap(), b.host_slots().unwrap());
    let keep = Duration::from_secs(3600);
    let dir = "stou h:21 1:u /in";
    let (ja, jb) = ("job 1 file \"a\"", "job 2 file \"b\"");
    assert_eq!(sa.claim_name(dir, "stou.1", ja, keep).unwrap(), None);
    assert_eq!(sa.claim_name(dir, "stou.1", ja, keep).unwrap(), None);
    assert_eq!(
        sb.claim_name(dir, "stou.1", jb, keep).unwrap().as_deref(),
        Some(ja),
        "told to a first: a's"
    );
    assert_eq!(
        sb.name_claimed_by_other(dir, "stou.1", jb, keep)
            .unwrap()
            .as_deref(),
        Some(ja),
        "and still a's after b's claim"
    );
    assert_eq!(
        sa.name_claimed_by_other(dir, "stou.1", ja, keep).unwrap(),
        None
    );
    assert_eq!(
        sb.claim_name("stou h:21 1:u /out", "stou.1", jb, keep)
            .unwrap(),
        None,
        "another directory"
    );
    // b releasing a's name changes nothing; a's release does.
    sb.release_name(dir, "stou.1", jb).unwrap();
    assert!(sb
        .name_claimed_by_other(dir, "stou.1", jb, keep)
        .unwrap()
        .is_some());
    sa.release_name(dir, "stou.1", ja).unwrap();
    assert_eq!(
        sb.name_claimed_by_other(dir, "stou.1", jb, keep).unwrap(),
        None
    );
    assert_eq!(sb.claim_name(dir, "stou.1", jb, keep).unwrap(), None);
    assert_eq!(
        sa.claim_name(dir, "stou.1", ja, keep).unwrap().as_deref(),
        Some(jb)
    );
    // A name older than the memory is nobody's any more.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        sa.claim_name(dir, "stou.1", ja, Duration::from_millis(10))
            .unwrap(),
        None
    );

    // The directory's lock: its key with one slot, one node at a time.
    let key = vec![dir.to_string()];
    let held = sa.try_take(&key, 1).unwrap().expect("free");
    assert!(sb.try_take(&key, 1).unwrap().is_none(), "a holds it");
    assert!(sa.try_take(&key, 1).unwrap().is_none(), "one at a time");
    let seen = sb.generation();
    sa.release(held);
    assert!(within(Duration::from_secs(5), || sb.generation() != seen));
    assert!(sb.try_take(&key, 1).unwrap().is_some(), "b's turn");
}

/// The key fingerprint on a shared store: the first one recorded stands, however many nodes
/// race to record theirs; a later node learns it instead of replacing it.
#[test]
fn the_first_key_fingerprint_recorded_stands_over_racing_nodes() {
    let url = pgcluster::fresh_database();
    let nodes: Vec<PgStore> = (0..4)
        .map(|i| node(&url, &format!("k{i}"), Duration::from_secs(30)))
        .collect();
    let barrier = std::sync::Barrier::new(nodes.len());
    let stood: Vec<[u8; 32]> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    n.adopt_key_fingerprint([i as u8 + 1; 32]).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = stood[0];
    assert!(stood.iter().all(|f| *f == first), "{stood:?}");
    assert!((1..=4).any(|i| first == [i; 32]), "{first:?}");
    for n in &nodes {
        assert_eq!(n.key_fingerprint().unwrap(), Some(first));
        assert_eq!(n.adopt_key_fingerprint([9; 32]).unwrap(), first);
    }
}

/// The heartbeat's renewals move a node's own deadline on: a lease held for minutes of work
/// stays open to its attempt's commands.
#[test]
fn renewals_the_database_confirms_move_the_nodes_own_deadline_on() {
    let url = pgcluster::fresh_database();
    let a = node(&url, "node-a", Duration::from_secs(1));
    let id = a.submit(with_members(job(1), &["x"])).unwrap().job().id;
    assert_eq!(a.due(at(60), 10).unwrap(), [(at(60), id)]);
    a.apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    let lease = a.lease(id).unwrap();
    let first = match lease.get() {
        Lease::Held { deadline } => deadline,
        other => panic!("{other:?}"),
    };
    // Three lease lengths later, still open, with a deadline later than the first.
    std::thread::sleep(Duration::from_secs(3));
    assert!(lease.may_send().is_ok(), "{:?}", lease.get());
    assert!(
        matches!(lease.get(), Lease::Held { deadline } if deadline > first + Duration::from_secs(2))
    );
    // Its own final write lets the job go: the lease ended, not lost.
    a.apply(
        id,
        JobEvent::Finish {
            outcome: JobOutcome::Succeeded,
        },
        at(62),
        None,
    )
    .unwrap();
    assert_eq!(lease.get(), Lease::Ended);
    assert!(a.lease(id).is_none());
}

/// A job cancelled on another node straight from this node's hold is let go as cancelled,
/// not lost: the attempt's clean-up is written (its count, its transcript), as after a
/// local cancel. Cancelled after a takeover, it is lost: the files are the other node's.
#[test]
fn a_cancel_on_another_node_is_told_apart_from_a_takeover() {
    let url = pgcluster::fresh_database();
    let a = node(&url, "node-a", Duration::from_secs(1));
    let c = node(&url, "node-c", Duration::from_secs(30));
    let id = a
        .submit(with_members(job(1), &["x", "y"]))
        .unwrap()
        .job()
        .id;
    assert_eq!(a.due(at(60), 10).unwrap(), [(at(60), id)]);
    a.apply(id, JobEvent::Start { attempt: 1 }, at(61), None)
        .unwrap();
    let lease = a.lease(id).unwrap();
    c.apply(id, JobEvent::Cancel, at(62), None).unwrap();
    // The report is a's to mail, once its attempt has stopped: c does not take it, and a's
    // postponing keeps it a's.
    assert!(c.outbox_due(at(100), 10).unwrap().is_empty());
    assert_eq!(a.outbox_due(at(100), 10).unwrap().len(), 1);
    a.record_delivery(
        id,
        DeliveryTry::Postponed {
            next_try_at: at(62),
        },
        at(62),
    )
    .unwrap();
    assert!(c.outbox_due(at(100), 10).unwrap().is_empty());
    assert!(
        pgcluster::wait_for(Duration::from_secs(5), || !c
            .outbox_due(at(100), 10)
            .unwrap()
            .is_empty()),
        "a's claim runs out after a lease (a gone): c mails it then"
    );
    assert!(
        pgcluster::wait_for(Duration::from_secs(5), || a.cancelled_elsewhere() == [id]),
        "a's heartbeat must see the cancel"
    );
    assert!(
        a.lost_leases().is_empty(),
        "a cancel straight from a's hold is no loss"
    );
    assert_eq!(lease.get(), Lease::Ended);
    assert!(lease.may_send().is_ok(), "the cancel's clean-up may speak");
    // The attempt's clean-up is recorded.
    let counted = MemberUpdate {
        attempts: Some(1),
        detail: Some("cancelled during the copy; the partial file was deleted".into()),
        ..MemberUpdate::default()
    };
    a.update_member(id, 1, counted, at(63)).unwrap();
    a.set_transcript(
        id,
        AttemptTranscript {
            attempt: 1,
            lines: vec!["destination> ABOR".into()],
        },
    )
    .unwrap();
    let m = &c.members(id).unwrap()[1];
    assert_eq!((m.attempts, m.state), (1, MemberState::Cancelled));
    assert_eq!(
        c.transcript(id).unwrap().unwrap().lines,
        ["destination> ABOR"]
    );

    // Taken over first (a's lease ran out, b claimed it), then cancelled: lost.
    let b = node(&url, "node-b", Duration::from_secs(30));
    let id = a.submit(with_members(job(2), &["z"])).unwrap().job().id;
    let claimed: Vec<JobId> = a
        .due(at(70), 10)
        .unwrap()
        .into_iter()
        .map(|(_, j)| j)
        .collect();
    assert_eq!(claimed, [id]);
    a.apply(id, JobEvent::Start { attempt: 1 }, at(71), None)
        .unwrap();
    let lease = a.lease(id).unwrap();
    let cl = pgcluster::cluster();
    let db = pgcluster::Cluster::db_of(&url).to_string();
    // The lease is made to run out and b takes over within one heartbeat of a (a third of
    // its lease): a may see the takeover or the cancel after it, never a cancel of its own.
    cl.psql(
        &db,
        &format!(
            "UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = {}",
            id.0
        ),
    )
    .unwrap();
    let _ = b.due(at(72), 10).unwrap();
    c.apply(id, JobEvent::Cancel, at(73), None).unwrap();
    assert!(
        pgcluster::wait_for(Duration::from_secs(5), || a.lost_leases() == [id]),
        "a must count the job lost"
    );
    assert!(a.cancelled_elsewhere().is_empty());
    assert_eq!(lease.get(), Lease::Lost);
    let count = MemberUpdate {
        attempts: Some(1),
        ..MemberUpdate::default()
    };
    let late = a.update_member(id, 0, count, at(74));
    assert!(
        matches!(late, Err(StoreError::LeaseLost { .. })),
        "{late:?}"
    );
}
