//! `Upkeep::backup`: a consistent copy of a store in use opens as a store of its own.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bftp_store::{JobStore, SledStore, Upkeep};
use common::*;

#[test]
fn a_backup_taken_while_writers_run_opens_with_every_job_it_copied() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir.path().join("live")));
    for _ in 0..200 {
        store.submit(with_members(job(1), &["a", "b"])).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    store.submit(with_members(job(2), &["c"])).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let copy_dir = dir.path().join("backup");
    let report = store.backup(&copy_dir).unwrap();
    stop.store(true, Ordering::Relaxed);
    let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(report.jobs > 200, "{report:?}");
    let live = store.verify().unwrap();
    assert_eq!(live.jobs, 200 + written);
    // The copy opens (its watermark and content digest agree with its records) and holds
    // exactly the jobs of one moment: each with its members.
    let copy = SledStore::open(&copy_dir, Default::default()).unwrap();
    let r = copy.verify().unwrap();
    assert_eq!(r.jobs, report.jobs);
    assert_eq!(r.members, 400 + (report.jobs - 200));
    // The copy is a store of its own: it takes new jobs after the ones it copied.
    let next = copy.submit(job(3)).unwrap().job().id;
    assert_eq!(next.0, report.jobs + 1);
    // A backup never goes into a directory that holds something.
    assert!(store.backup(&copy_dir).is_err());
}

/// What the store remembers beside jobs (the refusal memory, the pair memory) is in the copy.
#[test]
fn a_backup_holds_the_memories_of_servers_and_pairs() {
    use bftp_core::refusal::{RefusalKey, Sighting};
    use bftp_core::reply::ReplyCode;
    use bftp_core::route::{PairKey, PairMemory};
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("live"));
    let pair = PairKey::new(("a.example", 21), ("b.example", 21));
    let memory = PairMemory {
        reply: "500 Illegal PORT command.".into(),
        seen: at(5),
    };
    store.remember_pair(&pair, &memory).unwrap();
    let server = RefusalKey::new("a.example", 21, "APPE");
    let seen = Sighting {
        code: ReplyCode::new(451).unwrap(),
        text: "try again".into(),
        job: 1,
        attempt: 1,
    };
    store.record_refusal(&server, &seen, at(6)).unwrap();
    let copy_dir = dir.path().join("backup");
    store.backup(&copy_dir).unwrap();
    let copy = SledStore::open(&copy_dir, Default::default()).unwrap();
    assert_eq!(copy.pair_memory(&pair).unwrap(), Some(memory));
    assert_eq!(copy.refusal(&server).unwrap().unwrap().text, "try again");
}

/// A watch with one checkpoint entry and one job made by its poll (held first, as a shared
/// store wants).
fn watched(store: &dyn JobStore) -> (bftp_store::Watch, bftp_store::Job) {
    use bftp_core::watch::{Entry, Facts};
    use bftp_store::{NewWatch, PollRecord, WatchSettings, WatchStatus};
    let w = store
        .create_watch(NewWatch {
            owner_uid: 1,
            spec: spec(),
            settings: WatchSettings {
                every_ms: 60_000,
                notify_on: "never".into(),
                ..WatchSettings::default()
            },
            keyword_hash: None,
            created_at: at(1),
        })
        .unwrap();
    let entry = Entry {
        facts: Facts {
            size: Some(3),
            modified: Some("20261201050000".into()),
            unique: None,
        },
        since: at(2),
        outcome: None,
        hint: None,
        taken: 1,
    };
    let node = store.cluster().map(|c| c.node()).unwrap_or_default();
    assert!(store.hold_watch(w.id, &node, at(1), at(100)).unwrap());
    let (w, job) = store
        .record_poll(
            w.id,
            PollRecord {
                status: WatchStatus {
                    polls: 1,
                    next_poll: at(61),
                    ..WatchStatus::default()
                },
                put: vec![("a.csv".into(), entry)],
                prune: vec![],
                job: Some(with_members(job(1), &["a.csv"])),
            },
        )
        .unwrap();
    (w, job.unwrap())
}

/// Watches and their checkpoints are in the copy, with the jobs they made linked.
#[test]
fn a_backup_holds_watches_and_their_checkpoints() {
    use bftp_store::{NewWatch, WatchSettings};
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("live"));
    let (w, job) = watched(&store);
    let checkpoint = store.watch_checkpoint(w.id).unwrap();
    assert_eq!(checkpoint.len(), 1);
    let copy_dir = dir.path().join("backup");
    store.backup(&copy_dir).unwrap();
    let copy = SledStore::open(&copy_dir, Default::default()).unwrap();
    copy.verify().unwrap();
    assert_eq!(copy.watch(w.id).unwrap(), Some(w.clone()));
    assert_eq!(copy.watch_checkpoint(w.id).unwrap(), checkpoint);
    assert_eq!(copy.get(job.id).unwrap().unwrap().watch, Some(w.id));
    // The copy numbers its next watch after the ones it copied.
    let next = copy
        .create_watch(NewWatch {
            owner_uid: 1,
            spec: spec(),
            settings: WatchSettings::default(),
            keyword_hash: None,
            created_at: at(5),
        })
        .unwrap();
    assert_eq!(next.id.0, w.id.0 + 1);
}

/// On PostgreSQL the copy is a dump of the whole database: the watches' tables are in it.
#[test]
fn a_postgres_backup_holds_the_watch_tables() {
    let url = pgcluster::fresh_database();
    let store = open_pg(&url, "test-node");
    watched(&store);
    let dir = tempfile::tempdir().unwrap();
    let copy_dir = dir.path().join("backup");
    store.backup(&copy_dir).unwrap();
    let restore = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/pg_restore"))
        .find(|p| p.exists())
        .expect("pg_restore");
    let out = std::process::Command::new(restore)
        .arg("--list")
        .arg(copy_dir.join(bftp_store::PG_DUMP_FILE))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toc = String::from_utf8_lossy(&out.stdout);
    for table in ["watches", "watch_files"] {
        assert!(
            toc.lines()
                .any(|l| l.contains("TABLE DATA") && l.contains(&format!(" {table} "))),
            "{table} not in the dump:\n{toc}"
        );
    }
}
