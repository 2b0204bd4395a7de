//! Opening: fresh, foreign, locked, newer, damaged directories; and a crash right after an
//! acknowledged write.
//!
//! sled 0.34 recovers a truncated or overwritten `db` file silently, as a shorter or empty
//! database; these tests pin down that the store turns that into an error instead.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use bftp_store::{JobFilter, JobId, JobStore, SledStore, StoreError, StoreOptions};
use common::*;

fn open_err(dir: &Path) -> StoreError {
    match std::panic::catch_unwind(|| SledStore::open(dir, StoreOptions::default())) {
        Ok(Ok(_)) => panic!("opening {} succeeded", dir.display()),
        Ok(Err(e)) => e,
        Err(_) => panic!("opening {} panicked", dir.display()),
    }
}

/// A store with enough jobs to span several of sled's segments, closed cleanly.
fn filled(dir: &Path, jobs: usize) {
    let store = open(dir);
    std::thread::scope(|s| {
        for t in 0..8 {
            let store = &store;
            s.spawn(move || {
                for _ in 0..jobs / 8 {
                    store
                        .submit(with_members(
                            job(t),
                            &["file-with-a-long-enough-name.dat"; 3],
                        ))
                        .unwrap();
                }
            });
        }
    });
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A fresh copy of one closed store of 2000 jobs, filled once per test binary.
fn filled_2000() -> tempfile::TempDir {
    static TEMPLATE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        let t = tempfile::tempdir().unwrap();
        filled(t.path(), 2000);
        t
    });
    let copy = tempfile::tempdir().unwrap();
    copy_dir(template.path(), copy.path());
    copy
}

fn db_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("db")).unwrap().len()
}

#[test]
fn a_fresh_directory_is_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("state/store");
    drop(open(&dir));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.contains(&"bftp-watermark".to_string()), "{names:?}");
    assert!(names.contains(&"db".to_string()), "{names:?}");
}

#[test]
fn a_directory_of_something_else_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, StoreError::NotAStore { found, .. } if found.contains("notes.txt")),
        "{e:?}"
    );

    let file = dir.path().join("notes.txt");
    assert!(matches!(open_err(&file), StoreError::NotAStore { .. }));

    let other = tempfile::tempdir().unwrap();
    {
        let db = sled::open(other.path()).unwrap();
        db.open_tree("their-data")
            .unwrap()
            .insert("k", "v")
            .unwrap();
        db.flush().unwrap();
    }
    let e = open_err(other.path());
    assert!(
        matches!(&e, StoreError::NotAStore { found, .. } if found.contains("another program")),
        "{e:?}"
    );
}

#[test]
fn an_interrupted_first_start_starts_again() {
    // sled created its files, then the process died before the store was initialised.
    let dir = tempfile::tempdir().unwrap();
    drop(sled::open(dir.path()).unwrap());
    assert!(db_len(dir.path()) > 0);
    let store = open(dir.path());
    assert_eq!(store.submit(job(1)).unwrap().job().id, JobId(1));
}

#[test]
fn a_second_open_finds_the_store_locked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let e = open_err(dir.path());
    assert!(matches!(e, StoreError::Locked { .. }), "{e:?}");
    drop(store);
    drop(open(dir.path()));
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert("schema", &99u32.to_be_bytes()[..])
            .unwrap();
        db.flush().unwrap();
    }
    let e = open_err(dir.path());
    assert!(
        matches!(
            e,
            StoreError::SchemaTooNew {
                found: 99,
                supported: bftp_store::SCHEMA_VERSION
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("newer"), "{e}");
}

#[test]
fn a_truncated_db_file_is_damage_not_an_empty_queue() {
    for keep in [0u64, 100, 4096] {
        let dir = tempfile::tempdir().unwrap();
        filled(dir.path(), 200);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("db"))
            .unwrap();
        f.set_len(keep).unwrap();
        drop(f);
        let e = open_err(dir.path());
        assert!(
            matches!(e, StoreError::Damaged { .. }),
            "keep {keep}: {e:?}"
        );
    }
}

/// Opens a damaged store: either an error that says so, or every job intact. Never a
/// panic, never a silently shorter queue. Returns whether it was an error.
fn damage_or_intact(dir: &Path, jobs: usize, what: &str) -> bool {
    match std::panic::catch_unwind(|| SledStore::open(dir, StoreOptions::default())) {
        Err(_) => panic!("{what}: open panicked"),
        Ok(Err(e)) => {
            assert!(
                matches!(
                    e,
                    StoreError::Damaged { .. }
                        | StoreError::Corrupt { .. }
                        | StoreError::Backend { .. }
                ),
                "{what}: {e:?}"
            );
            true
        }
        Ok(Ok(store)) => {
            let all = store.list(&JobFilter::default());
            let all = all.unwrap_or_else(|e| panic!("{what}: opened, then {e}"));
            assert_eq!(all.len(), jobs, "{what}: opened with jobs missing");
            for j in &all {
                assert_eq!(store.members(j.id).unwrap().len(), 3, "{what}");
            }
            store
                .verify()
                .unwrap_or_else(|e| panic!("{what}: opened, then {e}"));
            false
        }
    }
}

#[test]
fn a_db_file_cut_short_is_damage_not_a_shorter_queue() {
    let mut errors = 0;
    for keep in [0.3, 0.5, 0.8] {
        let dir = filled_2000();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("db"))
            .unwrap();
        f.set_len((db_len(dir.path()) as f64 * keep) as u64)
            .unwrap();
        drop(f);
        errors += damage_or_intact(dir.path(), 2000, &format!("cut to {keep}")) as usize;
    }
    assert!(errors > 0, "no cut was noticed at all");
}

/// Overwritten bytes may land in space sled no longer uses; then every job must be there.
/// sled recovers some overwrites as older versions of the pages hit (a hundred jobs fewer, a
/// job with a member fewer, about 1 in 150 offsets), which only the content digest notices.
#[test]
fn bytes_overwritten_in_the_middle_of_the_db_are_damage_or_harmless() {
    let mut errors = 0;
    for at in [0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9] {
        let dir = filled_2000();
        let len = db_len(dir.path());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("db"))
            .unwrap();
        f.seek(SeekFrom::Start((len as f64 * at) as u64)).unwrap();
        f.write_all(&[0xab; 4096]).unwrap();
        drop(f);
        errors += damage_or_intact(dir.path(), 2000, &format!("overwrite at {at}")) as usize;
    }
    assert!(errors > 0, "no overwrite was noticed at all");
}

#[test]
fn garbage_over_the_start_of_the_db_is_damage_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path(), 200);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("db"))
        .unwrap();
    f.write_all(&[0xab; 64]).unwrap();
    drop(f);
    let e = open_err(dir.path());
    assert!(matches!(e, StoreError::Damaged { .. }), "{e:?}");
}

#[test]
fn a_db_file_replaced_by_garbage_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path(), 200);
    std::fs::write(dir.path().join("db"), vec![0x5a; 1 << 20]).unwrap();
    let e = open_err(dir.path());
    assert!(matches!(e, StoreError::Damaged { .. }), "{e:?}");
}

#[test]
fn garbage_in_conf_is_damage() {
    for garbage in [&b"garbage garbage\nmore: garbage\n"[..], &[0xff; 40][..]] {
        let dir = tempfile::tempdir().unwrap();
        filled(dir.path(), 16);
        std::fs::write(dir.path().join("conf"), garbage).unwrap();
        let e = open_err(dir.path());
        assert!(matches!(e, StoreError::Damaged { .. }), "{e:?}");
    }
}

#[test]
fn a_damaged_watermark_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path(), 16);
    std::fs::write(
        dir.path().join("bftp-watermark"),
        b"BFTPWM01 but then not a number",
    )
    .unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, StoreError::Damaged { reason, .. } if reason.contains("watermark")),
        "{e:?}"
    );
}

#[test]
fn an_older_copy_of_the_db_is_detected_and_can_be_accepted_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    filled(dir.path(), 16);
    for name in ["db", "conf"] {
        std::fs::copy(dir.path().join(name), copy.path().join(name)).unwrap();
    }
    filled(dir.path(), 16);
    for name in ["db", "conf"] {
        std::fs::copy(copy.path().join(name), dir.path().join(name)).unwrap();
    }
    let e = open_err(dir.path());
    assert!(
        matches!(&e, StoreError::Damaged { reason, .. } if reason.contains("remove")),
        "{e:?}"
    );
    std::fs::remove_file(dir.path().join("bftp-watermark")).unwrap();
    let store = open(dir.path());
    assert_eq!(store.list(&JobFilter::default()).unwrap().len(), 16);
}

#[test]
fn an_undecodable_record_is_corrupt_at_open_and_at_read() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.submit(job(1)).unwrap();
        store.submit(job(1)).unwrap();
    }
    {
        // Intact bytes this code cannot decode (as a bug or a newer writer would leave them):
        // the digest is taken out so that it is recomputed over them, as for a store written
        // before the digest existed, and the record is what open finds wrong.
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("jobs")
            .unwrap()
            .insert(2u64.to_be_bytes(), &b"{\"v\":1,\"owner\":\"x\"}"[..])
            .unwrap();
        db.open_tree("meta").unwrap().remove("digest").unwrap();
        db.flush().unwrap();
    }
    let verifying = StoreOptions {
        verify_on_open: true,
        ..Default::default()
    };
    let e = SledStore::open(dir.path(), verifying).unwrap_err();
    assert!(
        matches!(&e, StoreError::Corrupt { what: "job", key, .. } if key == "0000000000000002"),
        "{e:?}"
    );

    let store = open(dir.path());
    assert!(matches!(
        store.verify(),
        Err(StoreError::Corrupt { what: "job", .. })
    ));
    assert!(store.get(JobId(1)).unwrap().is_some());
    let e = store.get(JobId(2)).unwrap_err();
    assert!(
        matches!(e, StoreError::Corrupt { what: "job", .. }),
        "{e:?}"
    );
    assert!(matches!(
        store.list(&JobFilter::default()),
        Err(StoreError::Corrupt { .. })
    ));
    let e = store
        .apply(JobId(2), bftp_core::JobEvent::Cancel, at(1), None)
        .unwrap_err();
    assert!(
        matches!(e, StoreError::Corrupt { what: "job", .. }),
        "{e:?}"
    );
}

/// The child half of `acknowledged_submits_survive_an_abort`: runs only when the parent sets
/// the variable, submits, prints what was acknowledged, and aborts with no clean-up at all.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("BFTP_STORE_CRASH_DIR") else {
        return;
    };
    let store = open(Path::new(&dir));
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for t in 0..8 {
            let (store, out) = (&store, &out);
            s.spawn(move || {
                for _ in 0..25 {
                    let id = store.submit(job(t)).unwrap().job().id;
                    let mut out = out.lock().unwrap();
                    writeln!(out, "acked {id}").unwrap();
                    out.flush().unwrap();
                }
            });
        }
    });
    let id = store.submit(with_request(job(99), 5, 6)).unwrap().job().id;
    let mut out = out.lock().unwrap();
    writeln!(out, "acked {id}").unwrap();
    out.flush().unwrap();
    std::process::abort();
}

#[test]
fn acknowledged_submits_survive_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("BFTP_STORE_CRASH_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the child must die by abort: {out:?}"
    );
    let acked: Vec<JobId> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("acked ").map(|i| &l[i + 6..]))
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(
        acked.len(),
        201,
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let store = open(dir.path());
    for id in &acked {
        assert!(
            store.get(*id).unwrap().is_some(),
            "job {id} was acknowledged, then lost"
        );
    }
    let last = store.submit(with_request(job(99), 5, 6)).unwrap();
    assert!(
        matches!(last, bftp_store::Submitted::Existing(_)),
        "{last:?}"
    );
}

/// What sled's recovery does to an overwritten page, done on purpose: an entry lost, an entry
/// back at an older version, an entry that was never written. sled opens each of these
/// databases without complaint; the store must not.
#[test]
fn a_lost_or_reverted_entry_is_damage_though_sled_opens_it() {
    let raw = |dir: &Path, f: &dyn Fn(&sled::Db)| {
        let db = sled::open(dir).unwrap();
        f(&db);
        db.flush().unwrap();
    };
    // Job 1's members, all three on its first page.
    let page0 = [&1u64.to_be_bytes()[..], &0u32.to_be_bytes()[..]].concat();
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        for _ in 0..3 {
            store
                .submit(with_members(job(1), &["a", "b", "c"]))
                .unwrap();
        }
        // A watch with one checkpoint entry (and no job).
        let w = store
            .create_watch(bftp_store::NewWatch {
                owner_uid: 1,
                spec: spec(),
                settings: Default::default(),
                keyword_hash: None,
                created_at: at(1),
            })
            .unwrap();
        let entry = bftp_core::watch::Entry {
            facts: Default::default(),
            since: at(1),
            outcome: None,
            hint: None,
            taken: 0,
        };
        store
            .record_poll(
                w.id,
                bftp_store::PollRecord {
                    status: w.status,
                    put: vec![("a.csv".into(), entry)],
                    prune: vec![],
                    job: None,
                },
            )
            .unwrap();
        dir
    };
    type Damage<'a> = (&'a str, &'a dyn Fn(&sled::Db));
    let damage: [Damage; 4] = [
        ("a watch's checkpoint entry lost", &|db| {
            let files = db.open_tree("watch_files").unwrap();
            let k = files.iter().keys().next().unwrap().unwrap();
            files.remove(k).unwrap();
        }),
        ("a page of members lost", &|db| {
            db.open_tree("members").unwrap().remove(&page0).unwrap();
        }),
        ("a due-index entry lost", &|db| {
            let due = db.open_tree("due").unwrap();
            let k = due.iter().keys().next().unwrap().unwrap();
            due.remove(k).unwrap();
        }),
        ("a job that was never submitted", &|db| {
            let jobs = db.open_tree("jobs").unwrap();
            let v = jobs.get(1u64.to_be_bytes()).unwrap().unwrap();
            jobs.insert(9u64.to_be_bytes(), v).unwrap();
        }),
    ];
    for (what, f) in damage {
        let dir = fresh();
        raw(dir.path(), f);
        let e = open_err(dir.path());
        assert!(
            matches!(&e, StoreError::Damaged { reason, .. } if reason.contains("digest")),
            "{what}: {e:?}"
        );
    }

    // A job record back at its version from before a cancel: the job would run again.
    let dir = fresh();
    let before = std::cell::RefCell::new(None);
    raw(dir.path(), &|db| {
        *before.borrow_mut() = db
            .open_tree("jobs")
            .unwrap()
            .get(1u64.to_be_bytes())
            .unwrap();
    });
    {
        let store = open(dir.path());
        store
            .apply(JobId(1), bftp_core::JobEvent::Cancel, at(1), None)
            .unwrap();
        assert_eq!(store.list(&JobFilter::default()).unwrap().len(), 3);
    }
    let old = before.borrow().clone().unwrap();
    raw(dir.path(), &|db| {
        db.open_tree("jobs")
            .unwrap()
            .insert(1u64.to_be_bytes(), old.clone())
            .unwrap();
    });
    let e = open_err(dir.path());
    assert!(
        matches!(&e, StoreError::Damaged { reason, .. } if reason.contains("older versions")),
        "{e:?}"
    );
}

/// A store written before the digest existed gets one at its first open, and from then on
/// damage shows.
#[test]
fn a_store_without_a_digest_gets_one_and_is_checked_from_then_on() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path(), 16);
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("meta").unwrap().remove("digest").unwrap();
        db.flush().unwrap();
    }
    {
        let store = open(dir.path());
        assert_eq!(store.list(&JobFilter::default()).unwrap().len(), 16);
        store.submit(job(2)).unwrap();
    }
    drop(open(dir.path()));
    {
        let db = sled::open(dir.path()).unwrap();
        let jobs = db.open_tree("jobs").unwrap();
        let last = jobs.iter().keys().next_back().unwrap().unwrap();
        jobs.remove(last).unwrap();
        db.flush().unwrap();
    }
    let e = open_err(dir.path());
    assert!(
        matches!(&e, StoreError::Damaged { reason, .. } if reason.contains("digest")),
        "{e:?}"
    );
}

/// A database that lost its tail is named as such before its digest is looked at, and the
/// open writes nothing into it (not even the digest a store from before the digest gets).
#[test]
fn a_lost_tail_is_found_before_the_digest_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    filled(dir.path(), 16);
    for name in ["db", "conf"] {
        std::fs::copy(dir.path().join(name), copy.path().join(name)).unwrap();
    }
    {
        let db = sled::open(copy.path()).unwrap();
        db.open_tree("meta").unwrap().remove("digest").unwrap();
        db.flush().unwrap();
    }
    filled(dir.path(), 16);
    for name in ["db", "conf"] {
        std::fs::copy(copy.path().join(name), dir.path().join(name)).unwrap();
    }
    let e = open_err(dir.path());
    assert!(
        matches!(&e, StoreError::Damaged { reason, .. } if reason.contains("was durable before")),
        "{e:?}"
    );
    let db = sled::open(dir.path()).unwrap();
    assert_eq!(db.open_tree("meta").unwrap().get("digest").unwrap(), None);
}
