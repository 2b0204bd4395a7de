//! The slow scheduler group (`cargo test -p bftp-tests --test e2e -- slow::scheduler::`), run
//! by tests/run with the slow group: bftpd killed with SIGKILL at random moments while it works.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bftp_tests::daemon::Bftpd;
use bftp_tests::files::content;
use bftp_tests::jobs::{config_plus, member_names, status, submit};
use bftp_tests::rng::{seed, Rng};
use bftp_tests::{Direction, FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// Kills while work is still outstanding, at least.
const KILLS: usize = 40;
/// Files per job.
const REPLACE_FILES: usize = 200;
const APPEND_FILES: usize = 150;
const MOVE_FILES: usize = 150;

fn prefix(name: &str) -> Vec<u8> {
    format!("PREFIX of {name}: known bytes before the append\n").into_bytes()
}

/// One job of the run: its files (name, content) and where they live.
struct Job {
    id: u64,
    dir: &'static str,
    files: Vec<(String, Vec<u8>)>,
}

fn make_files(rng: &mut Rng, src: &FtpServer, dir: &str, n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let name = format!("f{i:03}.dat");
            // A few hundred KiB, varied.
            let data = content(
                &format!("{dir}/{name}"),
                rng.range(64 << 10, 512 << 10) as usize,
            );
            src.put_file(&format!("{dir}/{name}"), &data).unwrap();
            (name, data)
        })
        .collect()
}

fn is_final(v: &Value) -> bool {
    v["state"] == "finished" || v["state"] == "cancelled"
}

/// What must hold at every moment, checked while bftpd is dead: no source of `move` is gone
/// without an identical copy, and no append destination holds more than prefix + content.
fn check_invariants(when: &str, src: &FtpServer, dst: &FtpServer, append: &Job, mv: &Job) {
    for (name, data) in &mv.files {
        let rel = format!("{}/{name}", mv.dir);
        if !src.path(&rel).exists() {
            let copy = dst.read_file(&rel).unwrap_or_default();
            assert!(
                copy == *data,
                "{when}: the source {rel} is gone but its copy has {} of {} bytes{}",
                copy.len(),
                data.len(),
                if copy.len() == data.len() {
                    " (different bytes)"
                } else {
                    ""
                }
            );
        }
    }
    for (name, data) in &append.files {
        let rel = format!("{}/{name}", append.dir);
        let got = dst.read_file(&rel).unwrap();
        let want = [prefix(name), data.clone()].concat();
        assert!(
            got.len() <= want.len() && want.starts_with(&got),
            "{when}: {rel} holds {} bytes, not a prefix of the {} of prefix + content",
            got.len(),
            want.len()
        );
    }
}

/// RULES.md §4.3: 20+ SIGKILLs of bftpd at random moments during three wildcard jobs (replace,
/// append onto a known prefix, move). After the restarts every replace member succeeded with
/// identical bytes and none was skipped; no append duplicated data (prefix + content exactly
/// once, or `uncertain` with prefix + at most the content once); no source of the move was deleted
/// before its copy was proven.
#[test]
fn kill9_at_random_moments_neither_skips_nor_duplicates_nor_deletes_unproven_sources() {
    kill9_at_random_moments(true);
}

/// The same with both servers refusing the third party (stock): every copy is relayed
/// through bftpd (RULES.md §14), and the same rules hold (an interrupted relayed APPE is
/// resolved from the destination's size as a third-party one is).
#[test]
fn kill9_at_random_moments_during_relays_neither_skips_nor_duplicates() {
    kill9_at_random_moments(false);
}

fn kill9_at_random_moments(fxp: bool) {
    let seed = seed();
    eprintln!("seed {seed} (BFTP_TEST_SEED={seed} replays the file sizes and kill moments)");
    let mut rng = Rng(seed);
    let started = Instant::now();
    let options = FtpOptions {
        fxp,
        ..FtpOptions::default()
    };
    let src = FtpServer::start(ServerKind::PureFtpd, options.clone()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, options).unwrap();
    let replace_files = make_files(&mut rng, &src, "r", REPLACE_FILES);
    let append_files = make_files(&mut rng, &src, "a", APPEND_FILES);
    let move_files = make_files(&mut rng, &src, "m", MOVE_FILES);
    dst.mkdir("r").unwrap();
    dst.mkdir("m").unwrap();
    for (name, _) in &append_files {
        dst.put_file(&format!("a/{name}"), &prefix(name)).unwrap();
    }
    let mut d = Bftpd::start_with(config_plus("")).unwrap();
    let retry = [
        "--retry-first",
        "1s",
        "--retry-cap",
        "2s",
        "--max-attempts",
        "100",
        "--deadline",
        "1h",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        retry.iter().copied().chain(extra.iter().copied()).collect()
    };
    let replace = Job {
        id: submit(&d, &src, &dst, "r/*.dat", "r/", &with(&[])),
        dir: "r",
        files: replace_files,
    };
    let append = Job {
        id: submit(
            &d,
            &src,
            &dst,
            "a/*.dat",
            "a/",
            &with(&["--dest-command", "append"]),
        ),
        dir: "a",
        files: append_files,
    };
    let mv = Job {
        id: submit(
            &d,
            &src,
            &dst,
            "m/*.dat",
            "m/",
            &with(&["--disposition", "move"]),
        ),
        dir: "m",
        files: move_files,
    };
    let jobs = [&replace, &append, &mv];

    // Kill moments are drawn in progress, not in time, so that they spread over the run on
    // any machine: after a random number of files received (the destination's transfer
    // log), plus a random few milliseconds into the next one.
    let total = REPLACE_FILES + APPEND_FILES + MOVE_FILES;
    let per_life = (total / KILLS / 2) as u64;
    let received = || {
        dst.xferlog_entries()
            .unwrap()
            .iter()
            .filter(|e| e.direction == Direction::Incoming)
            .count() as u64
    };
    let mut kills = 0;
    let mut done_early = false;
    while kills < KILLS && !done_early {
        let target = received() + rng.range(0, 2 * per_life);
        let extra = Duration::from_millis(rng.range(0, 40));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut polls = 0u32;
        while received() < target {
            polls += 1;
            if polls.is_multiple_of(100) && jobs.iter().all(|j| is_final(&status(&d, j.id))) {
                done_early = true;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no progress to {target} files received in 60 s\n{}",
                d.logs()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(extra);
        d.kill9();
        kills += 1;
        check_invariants(&format!("after kill {kills}"), &src, &dst, &append, &mv);
        d.launch().unwrap();
    }
    let kill_phase = started.elapsed();
    assert!(!done_early, "only {kills} kills before the jobs were done");
    let deadline = Instant::now() + Duration::from_secs(120);
    let views: Vec<Value> = jobs
        .iter()
        .map(|j| loop {
            let v = status(&d, j.id);
            if is_final(&v) {
                break v;
            }
            assert!(
                Instant::now() < deadline,
                "job {} not final: {v:#}\n{}",
                j.id,
                d.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        })
        .collect();
    check_invariants("at the end", &src, &dst, &append, &mv);
    let attempts: Vec<u64> = views
        .iter()
        .map(|v| v["attempts"].as_u64().unwrap())
        .collect();
    eprintln!(
        "{kills} kills in {kill_phase:?}; done after {:?}; attempts per job {attempts:?}",
        started.elapsed()
    );

    // Replace: everything, identical, nothing skipped.
    let (v, job) = (&views[0], &replace);
    let want: Vec<String> = job.files.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        member_names(v),
        want,
        "the frozen membership is the listing"
    );
    assert_eq!(v["outcome"], "succeeded", "{}", summary(v));
    for (name, data) in &job.files {
        assert!(
            dst.read_file(&format!("r/{name}")).unwrap() == *data,
            "r/{name} differs"
        );
    }
    if !fxp {
        let relayed = v["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["route"]["path"] == "relay")
            .count();
        assert_eq!(relayed, job.files.len(), "not every file was relayed");
    }

    // Append: never more than once.
    let (v, job) = (&views[1], &append);
    assert_eq!(
        member_names(v),
        job.files.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
    );
    let mut uncertain = Vec::new();
    for (m, (name, data)) in v["members"].as_array().unwrap().iter().zip(&job.files) {
        let got = dst.read_file(&format!("a/{name}")).unwrap();
        let (p, full) = (prefix(name), [prefix(name), data.clone()].concat());
        match m["state"].as_str() {
            Some("succeeded") => assert!(
                got == full,
                "a/{name} succeeded but holds {} bytes, want {}: {m:#}",
                got.len(),
                full.len()
            ),
            // A kill in the middle of an APPE can leave part of the content appended (the
            // servers stop when the control connection drops, and FTP cannot truncate):
            // uncertain, with the prefix and at most the content once, never more.
            Some("uncertain") => {
                assert!(got.len() >= p.len() && full.starts_with(&got), "a/{name} is uncertain and holds {} bytes, not prefix ({}) + part of the content ({}): {m:#}", got.len(), p.len(), data.len());
                uncertain.push(format!(
                    "{name}: {} of {} bytes appended",
                    got.len() - p.len(),
                    data.len()
                ));
            }
            other => panic!("a/{name} ended {other:?}: {m:#}"),
        }
    }
    eprintln!(
        "append: {} uncertain of {APPEND_FILES}: {uncertain:?}",
        uncertain.len()
    );

    // Move: all copied, every source gone, none before its copy (checked at every kill).
    let (v, job) = (&views[2], &mv);
    assert_eq!(
        member_names(v),
        job.files.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
    );
    assert_eq!(v["outcome"], "succeeded", "{}", summary(v));
    for (name, data) in &job.files {
        assert!(
            dst.read_file(&format!("m/{name}")).unwrap() == *data,
            "m/{name} differs"
        );
        assert!(
            !src.path(&format!("m/{name}")).exists(),
            "m/{name} was copied but its source is still there"
        );
    }

    // Which crash windows the kills hit: effects resolved from evidence after a restart.
    let details = |v: &Value, needle: &str| {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["detail"].as_str().is_some_and(|t| t.contains(needle)))
            .count()
    };
    eprintln!(
        "resolved after a restart: {} appends found complete, {} sources found already deleted",
        details(&views[1], "append resolved after an interruption"),
        details(&views[2], "source already deleted"),
    );
    assert!(!d.logs().contains("panicked"), "{}", d.logs());

    // The transfer logs: what ran twice. A replace may overlap after a kill; an append never
    // adds more than its content, whatever ran.
    let incoming = |dir: &str| -> BTreeMap<String, Vec<(u64, bool)>> {
        let mut m: BTreeMap<String, Vec<(u64, bool)>> = BTreeMap::new();
        for e in dst.xferlog_entries().unwrap() {
            if e.direction == Direction::Incoming && e.path.starts_with(&format!("/{dir}/")) {
                m.entry(e.path.clone())
                    .or_default()
                    .push((e.bytes, e.complete));
            }
        }
        m
    };
    for job in jobs {
        let log = incoming(job.dir);
        let twice = log.values().filter(|v| v.len() > 1).count();
        let max = log.values().map(Vec::len).max().unwrap_or(0);
        let complete_twice = log
            .values()
            .filter(|v| v.iter().filter(|(b, c)| *c && *b > 0).count() > 1)
            .count();
        eprintln!("/{}: {} files logged, {twice} received more than once (at most {max} times), {complete_twice} completely more than once", job.dir, log.len());
    }
    let appends = incoming("a");
    for (name, data) in &append.files {
        let got = dst.read_file(&format!("a/{name}")).unwrap().len() as u64;
        let logged: u64 = appends
            .get(&format!("/a/{name}"))
            .map_or(0, |v| v.iter().map(|(b, _)| b).sum());
        let appended = got - prefix(name).len() as u64;
        assert!(logged == appended, "/a/{name}: the server logged {logged} bytes received, the file grew by {appended} (of {})", data.len());
    }
}

fn summary(v: &Value) -> String {
    let mut by_state: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in v["members"].as_array().unwrap() {
        by_state
            .entry(m["state"].as_str().unwrap().to_string())
            .or_default()
            .push(format!(
                "{} {}",
                m["name"].as_str().unwrap(),
                m["detail"].as_str().unwrap_or("")
            ));
    }
    format!(
        "job {} {} {}: {by_state:#?}\nhistory: {:#}",
        v["id"], v["state"], v["outcome"], v["history"]
    )
}
