//! The watch rule's table: each row is a checkpoint entry (or none), what the listing shows
//! of one path, the clock, and what the poll must decide.

use super::*;

const SETTLE: u64 = 30_000;

fn facts(size: u64, modified: &str) -> Facts {
    Facts {
        size: Some(size),
        modified: Some(modified.into()),
        unique: None,
    }
}

fn entry(f: Facts, since: u64, outcome: Option<Outcome>, taken: u32) -> Entry {
    Entry {
        facts: f,
        since: Timestamp(since),
        outcome,
        hint: None,
        taken,
    }
}

fn settings() -> Settings {
    Settings {
        patterns: vec!["*".into()],
        ignore: DEFAULT_IGNORE.iter().map(|s| s.to_string()).collect(),
        settle_ms: SETTLE,
        ready: None,
        list_facts: false,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Take,
    Repeat,
    Settling,
    NoMarker,
    Ignored,
    Settled,
    NotOurs,
}

fn verdict_of(poll: &Poll, path: &str) -> Verdict {
    if poll.repeats.iter().any(|p| p == path) {
        assert!(poll.take.iter().any(|s| s.path == path));
        return Verdict::Repeat;
    }
    if poll.take.iter().any(|s| s.path == path) {
        return Verdict::Take;
    }
    match poll.waiting.iter().find(|(p, _)| p == path) {
        Some((_, Wait::Settling { .. })) => return Verdict::Settling,
        Some((_, Wait::NoMarker { .. })) => return Verdict::NoMarker,
        None => {}
    }
    if poll.ignored.iter().any(|(p, _)| p == path) {
        return Verdict::Ignored;
    }
    if poll.settled > 0 {
        return Verdict::Settled;
    }
    Verdict::NotOurs
}

#[test]
fn one_file_table() {
    let a = facts(10, "20260101000000");
    let a_later = facts(10, "20260101000500");
    let a_longer = facts(11, "20260101000000");
    let old = facts(10, "20200101000000");
    let now = 1_000_000;
    use Verdict::*;
    // (name, checkpoint entry, listed facts, expected verdict, entry written?)
    let rows: Vec<(&str, Option<Entry>, Facts, Verdict, bool)> = vec![
        // A path never seen: the wait starts now, whatever its modify time says.
        ("new.csv", None, a.clone(), Settling, true),
        ("new.csv", None, old.clone(), Settling, true),
        // Seen with the same facts long enough ago: taken, and its taking written.
        (
            "a.csv",
            Some(entry(a.clone(), now - SETTLE, None, 0)),
            a.clone(),
            Take,
            true,
        ),
        // An old modify time does not matter: the identity is new.
        (
            "a.csv",
            Some(entry(old.clone(), now - SETTLE - 1, None, 0)),
            old.clone(),
            Take,
            true,
        ),
        // Seen, not long enough ago.
        (
            "a.csv",
            Some(entry(a.clone(), now - SETTLE + 1, None, 0)),
            a.clone(),
            Settling,
            false,
        ),
        // Seen at this very clock (bftpd's clock went back): not an earlier listing.
        (
            "a.csv",
            Some(entry(a.clone(), now, None, 0)),
            a.clone(),
            Settling,
            false,
        ),
        // Seen "later" than now: bftpd's clock went back; the wait starts again now.
        (
            "a.csv",
            Some(entry(a.clone(), now + 3_600_000, None, 0)),
            a.clone(),
            Settling,
            true,
        ),
        // Still growing: size changed, the wait starts again.
        (
            "a.csv",
            Some(entry(a.clone(), now - SETTLE * 10, None, 0)),
            a_longer.clone(),
            Settling,
            true,
        ),
        // Delivered: not again, however often it is listed.
        (
            "a.csv",
            Some(entry(a.clone(), 0, Some(Outcome::Delivered), 1)),
            a.clone(),
            Settled,
            false,
        ),
        (
            "a.csv",
            Some(entry(a.clone(), 0, Some(Outcome::Failed), 1)),
            a.clone(),
            Settled,
            false,
        ),
        (
            "a.csv",
            Some(entry(a.clone(), 0, Some(Outcome::Uncertain), 1)),
            a.clone(),
            Settled,
            false,
        ),
        // The same name with new content (a nightly file): new again.
        (
            "a.csv",
            Some(entry(a.clone(), 0, Some(Outcome::Delivered), 1)),
            a_later.clone(),
            Settling,
            true,
        ),
        (
            "a.csv",
            Some(entry(a.clone(), 0, Some(Outcome::Delivered), 1)),
            a_longer.clone(),
            Settling,
            true,
        ),
        // A changed `unique` fact is new content...
        (
            "a.csv",
            Some(entry(
                Facts {
                    unique: Some("ino1".into()),
                    ..a.clone()
                },
                0,
                Some(Outcome::Delivered),
                1,
            )),
            Facts {
                unique: Some("ino2".into()),
                ..a.clone()
            },
            Settling,
            true,
        ),
        // ...but one the listing no longer gives (LIST instead of MLSD) is not.
        (
            "a.csv",
            Some(entry(
                Facts {
                    unique: Some("ino1".into()),
                    ..a.clone()
                },
                0,
                Some(Outcome::Delivered),
                1,
            )),
            a.clone(),
            Settled,
            false,
        ),
        // Taken before and never settled (a crash, a cancel): taken again, as a repeat.
        (
            "a.csv",
            Some(entry(a.clone(), now - SETTLE, None, 1)),
            a.clone(),
            Repeat,
            true,
        ),
        // Ignored by the default patterns: partial uploads and temporary names.
        ("a.csv.part", None, a.clone(), Ignored, false),
        ("a.tmp", None, a.clone(), Ignored, false),
        ("a.csv.filepart", None, a.clone(), Ignored, false),
        // Hidden temporary names are not matched by `*` at all (see the pattern test).
        (".a.csv.swp", None, a.clone(), NotOurs, false),
        (".in.a.csv.", None, a.clone(), NotOurs, false),
        // A hidden name is not matched by `*`.
        (".hidden", None, a.clone(), NotOurs, false),
        // No size and no modify time: no identity, reported.
        ("bare", None, Facts::default(), Ignored, false),
        // In a subdirectory of a recursive watch: the name is the last component.
        (
            "sub/b.csv",
            Some(entry(a.clone(), now - SETTLE, None, 0)),
            a.clone(),
            Take,
            true,
        ),
        ("sub/b.csv.part", None, a.clone(), Ignored, false),
    ];
    for (path, previous, listed, want, written) in rows {
        let mut checkpoint = BTreeMap::new();
        if let Some(e) = previous.clone() {
            checkpoint.insert(path.to_string(), e);
        }
        let listing = Listing {
            files: vec![Seen {
                path: path.into(),
                facts: listed.clone(),
            }],
            unlisted: vec![],
        };
        let poll = poll(&checkpoint, &listing, Timestamp(now), &settings());
        assert_eq!(
            verdict_of(&poll, path),
            want,
            "{path} {previous:?} {listed:?}"
        );
        assert_eq!(
            poll.put.iter().any(|(p, _)| p == path),
            written,
            "written: {path} {previous:?} {listed:?}"
        );
        assert!(poll.prune.is_empty(), "{path}: {:?}", poll.prune);
        // A taken file's entry counts the taking; a new entry starts its wait now.
        if let Some((_, e)) = poll.put.iter().find(|(p, _)| p == path) {
            assert_eq!(e.facts, listed);
            let taken_before = previous
                .as_ref()
                .filter(|p| p.facts == listed)
                .map_or(0, |p| p.taken);
            let was_taken = matches!(want, Take | Repeat);
            assert_eq!(e.taken, taken_before + u32::from(was_taken), "{path}");
            if previous
                .as_ref()
                .is_none_or(|p| p.facts != listed || p.since > Timestamp(now))
            {
                assert_eq!(e.since, Timestamp(now), "{path}");
                assert_eq!(e.outcome, None, "{path}");
            }
        }
    }
}

#[test]
fn a_poll_is_due_at_its_time_or_when_the_clock_went_back() {
    let t = Timestamp;
    let every = 60_000;
    for (next, now, due) in [
        (1_000, 999, false),
        (1_000, 1_000, true),
        (1_000, 5_000, true),
        (61_000, 1_000, false),
        // More than an interval ahead: the clock went back.
        (61_001, 1_000, true),
        (10 * 3_600_000, 1_000, true),
    ] {
        assert_eq!(poll_due(t(next), every, t(now)), due, "{next} {now}");
    }
}

#[test]
fn settle_zero_takes_at_first_sight() {
    let s = Settings {
        settle_ms: 0,
        ..settings()
    };
    let listing = Listing {
        files: vec![Seen {
            path: "a".into(),
            facts: facts(1, "20260101000000"),
        }],
        unlisted: vec![],
    };
    let p = poll(&BTreeMap::new(), &listing, Timestamp(5), &s);
    assert_eq!(p.take.len(), 1);
    assert_eq!(p.put[0].1.taken, 1);
    assert_eq!(p.put.len(), 1, "one entry, not a sighting and a taking");
}

#[test]
fn patterns_choose_the_watchs_files() {
    let s = Settings {
        patterns: vec!["*.csv".into(), "report-??.txt".into()],
        settle_ms: 0,
        ..settings()
    };
    let f = facts(1, "20260101000000");
    let listing = Listing {
        files: [
            "a.csv",
            "b.txt",
            "report-01.txt",
            "report-001.txt",
            "d/e.csv",
        ]
        .iter()
        .map(|p| Seen {
            path: p.to_string(),
            facts: f.clone(),
        })
        .collect(),
        unlisted: vec![],
    };
    let p = poll(&BTreeMap::new(), &listing, Timestamp(5), &s);
    let taken: Vec<&str> = p.take.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(taken, ["a.csv", "report-01.txt", "d/e.csv"]);
    assert!(
        p.ignored.is_empty(),
        "files not matched are not the watch's"
    );
}

#[test]
fn ready_markers_beside_and_per_file() {
    let f = facts(1, "20260101000000");
    let seen = |p: &str| Seen {
        path: p.into(),
        facts: f.clone(),
    };
    let mut checkpoint = BTreeMap::new();
    for p in ["d1/a", "d1/READY", "d2/b", "c", "c.done", "e"] {
        checkpoint.insert(p.to_string(), entry(f.clone(), 0, None, 0));
    }
    let files: Vec<Seen> = ["d1/a", "d1/READY", "d2/b"]
        .iter()
        .map(|p| seen(p))
        .collect();
    let beside = Settings {
        ready: Some(Ready::Beside("READY".into())),
        ..settings()
    };
    let p = poll(
        &checkpoint,
        &Listing {
            files,
            unlisted: vec![],
        },
        Timestamp(SETTLE + 1),
        &beside,
    );
    assert_eq!(verdict_of(&p, "d1/a"), Verdict::Take);
    assert_eq!(
        p.waiting,
        [(
            "d2/b".to_string(),
            Wait::NoMarker {
                marker: "d2/READY".into()
            }
        )]
    );
    assert_eq!(p.ignored, [("d1/READY".to_string(), Ignored::Marker)]);

    let files: Vec<Seen> = ["c", "c.done", "e"].iter().map(|p| seen(p)).collect();
    let suffix = Settings {
        ready: Some(Ready::Suffix(".done".into())),
        ..settings()
    };
    let p = poll(
        &checkpoint,
        &Listing {
            files,
            unlisted: vec![],
        },
        Timestamp(SETTLE + 1),
        &suffix,
    );
    assert_eq!(
        p.take.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        ["c"]
    );
    assert_eq!(
        p.waiting,
        [(
            "e".to_string(),
            Wait::NoMarker {
                marker: "e.done".into()
            }
        )]
    );
    assert_eq!(p.ignored, [("c.done".to_string(), Ignored::Marker)]);
}

#[test]
fn pruning_follows_the_listing_but_not_below_a_directory_it_could_not_list() {
    let f = facts(1, "20260101000000");
    let mut checkpoint = BTreeMap::new();
    for p in ["gone", "here", "bad/x", "bad/y/z", "badly", "good/x"] {
        checkpoint.insert(
            p.to_string(),
            entry(f.clone(), 0, Some(Outcome::Delivered), 1),
        );
    }
    let listing = Listing {
        files: vec![Seen {
            path: "here".into(),
            facts: f.clone(),
        }],
        unlisted: vec!["bad".into()],
    };
    let p = poll(&checkpoint, &listing, Timestamp(1), &settings());
    assert_eq!(p.prune, ["badly", "gone", "good/x"]);
    assert_eq!(p.settled, 1);
    let next = apply(&checkpoint, &p);
    assert_eq!(
        next.keys().collect::<Vec<_>>(),
        ["bad/x", "bad/y/z", "here"]
    );
    // An unlisted root keeps everything.
    let all = Listing {
        files: vec![],
        unlisted: vec!["".into()],
    };
    assert!(poll(&checkpoint, &all, Timestamp(1), &settings())
        .prune
        .is_empty());
}

#[test]
fn a_path_listed_twice_counts_once() {
    let f = facts(1, "20260101000000");
    let s = Seen {
        path: "a".into(),
        facts: f,
    };
    let listing = Listing {
        files: vec![s.clone(), s],
        unlisted: vec![],
    };
    let p = poll(
        &BTreeMap::new(),
        &listing,
        Timestamp(1),
        &Settings {
            settle_ms: 0,
            ..settings()
        },
    );
    assert_eq!(p.take.len(), 1);
    assert_eq!(p.put.len(), 1);
}

#[test]
fn a_member_settles_its_identity_only_while_the_checkpoint_holds_that_content() {
    let a = facts(10, "20260101000000");
    let b = facts(12, "20260102000000");
    let taken = entry(a.clone(), 5, None, 1);
    let sizeless = entry(
        Facts {
            size: None,
            ..a.clone()
        },
        5,
        None,
        1,
    );
    use MemberState::*;
    // (entry, facts the member copied, its final state, Some(outcome written) or None)
    type Row<'a> = (
        Option<&'a Entry>,
        &'a Facts,
        MemberState,
        Option<Option<Outcome>>,
    );
    let rows: Vec<Row> = vec![
        (Some(&taken), &a, Succeeded, Some(Some(Outcome::Delivered))),
        (
            Some(&taken),
            &a,
            FailedPermanent,
            Some(Some(Outcome::Failed)),
        ),
        (Some(&taken), &a, Refused, Some(Some(Outcome::Failed))),
        (Some(&taken), &a, Uncertain, Some(Some(Outcome::Uncertain))),
        // Not settled: nothing written, the next poll takes it again.
        (Some(&taken), &a, Cancelled, None),
        (Some(&taken), &a, FailedRetriesExhausted, None),
        (Some(&taken), &a, Pending, None),
        // The path holds other content now: this member did not copy it.
        (Some(&taken), &b, Succeeded, None),
        // Pruned meanwhile: nothing to mark.
        (None, &a, Succeeded, None),
        // Taken without a size (MLSD with `modify` only): the copy's size on the member
        // still settles it.
        (
            Some(&sizeless),
            &a,
            Succeeded,
            Some(Some(Outcome::Delivered)),
        ),
    ];
    for (e, copied, state, want) in rows {
        let got = settled(e, copied.size, copied.modified.as_deref(), state);
        match want {
            None => assert_eq!(got, None, "{state:?} {copied:?}"),
            Some(outcome) => {
                let got = got.unwrap_or_else(|| panic!("{state:?}: nothing written"));
                assert_eq!(got.outcome, outcome);
                let facts = e.map(|e| e.facts.clone()).unwrap_or_default();
                assert_eq!((got.facts, got.since, got.taken), (facts, Timestamp(5), 1));
            }
        }
    }
    // Settled twice the same way: the second writes nothing.
    let done = entry(a.clone(), 5, Some(Outcome::Delivered), 1);
    assert_eq!(
        settled(Some(&done), a.size, a.modified.as_deref(), Succeeded),
        None
    );
}

#[test]
fn facts_are_asked_again_only_when_the_list_line_changed() {
    let mut e = entry(facts(10, "20250701071000"), 0, Some(Outcome::Delivered), 1);
    e.hint = Some("10 Jul  1 07:10".into());
    assert!(needs_facts(None, "10 Jul  1 07:10"));
    assert!(!needs_facts(Some(&e), "10 Jul  1 07:10"));
    // The display flips to the year form: asked again; the same facts keep it settled.
    assert!(needs_facts(Some(&e), "10 Jul  1  2025"));
    let checkpoint = BTreeMap::from([("a".to_string(), e.clone())]);
    let listing = Listing {
        files: vec![Seen {
            path: "a".into(),
            facts: e.facts.clone(),
        }],
        unlisted: vec![],
    };
    let p = poll(&checkpoint, &listing, Timestamp(1), &settings());
    assert!(p.take.is_empty() && p.put.is_empty() && p.settled == 1);
}

/// 100 polls over unchanged, delivered content write nothing and take nothing.
#[test]
fn a_hundred_polls_over_delivered_content_take_and_write_nothing() {
    let f = facts(10, "20260101000000");
    let listing = Listing {
        files: (0..50)
            .map(|i| Seen {
                path: format!("f{i}"),
                facts: f.clone(),
            })
            .collect(),
        unlisted: vec![],
    };
    let s = settings();
    let mut checkpoint = BTreeMap::new();
    let mut now = 0;
    let mut taken = 0;
    for _ in 0..100 {
        now += SETTLE;
        let p = poll(&checkpoint, &listing, Timestamp(now), &s);
        taken += p.take.len();
        checkpoint = apply(&checkpoint, &p);
        // The job delivers every file it was given.
        for t in &p.take {
            let e = checkpoint.get(&t.path).cloned();
            let (size, modified) = (t.facts.size, t.facts.modified.as_deref());
            if let Some(next) = settled(e.as_ref(), size, modified, MemberState::Succeeded) {
                checkpoint.insert(t.path.clone(), next);
            }
        }
    }
    assert_eq!(taken, 50, "each file once");
}

#[test]
fn a_watch_job_mails_its_report_by_notify_on() {
    use crate::{JobOutcome, JobState};
    let done = |outcome| JobState::Finished {
        outcome,
        at: Timestamp(1),
    };
    let rows = [
        ("failure", done(JobOutcome::Succeeded), false),
        ("failure", done(JobOutcome::Partial), true),
        ("failure", done(JobOutcome::Failed), true),
        ("failure", JobState::Cancelled { at: Timestamp(1) }, true),
        ("always", done(JobOutcome::Succeeded), true),
        ("never", done(JobOutcome::Failed), false),
        (
            "always",
            JobState::Queued {
                next_attempt_at: Timestamp(1),
            },
            false,
        ),
    ];
    for (word, state, want) in rows {
        assert_eq!(mails_report(word, &state), want, "{word} {state:?}");
    }
}

/// With no `--pattern`, the watch's files are `*`'s: names starting with a dot (an rsync's
/// temporary `.name.XXXXXX`, a lock file) are not the watch's.
#[test]
fn no_pattern_means_every_name_not_starting_with_a_dot() {
    let s = Settings {
        patterns: vec![],
        settle_ms: 0,
        ..settings()
    };
    let f = facts(1, "20260101000000");
    let listing = Listing {
        files: [
            "a.csv",
            ".a.csv.Xy12Zq",
            ".~lock.a.ods#",
            "sub/.hidden",
            "sub/b",
        ]
        .iter()
        .map(|p| Seen {
            path: p.to_string(),
            facts: f.clone(),
        })
        .collect(),
        unlisted: vec![],
    };
    let p = poll(&BTreeMap::new(), &listing, Timestamp(5), &s);
    let taken: Vec<&str> = p.take.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(taken, ["a.csv", "sub/b"]);
}

/// A server without MLSD: a file waits `settle` plus a minute of bftpd's clock, since a write
/// in the minute LIST shows that keeps the size is seen only by MDTM.
#[test]
fn list_facts_wait_a_minute_longer() {
    let s = Settings {
        list_facts: true,
        ..settings()
    };
    let a = facts(10, "20260101000000");
    let checkpoint = |since| BTreeMap::from([("a".to_string(), entry(a.clone(), since, None, 0))]);
    let listing = Listing {
        files: vec![Seen {
            path: "a".into(),
            facts: a.clone(),
        }],
        unlisted: vec![],
    };
    let now = 1_000_000;
    let wait = SETTLE + LIST_MINUTE_MS;
    assert!(
        poll(&checkpoint(now - wait + 1), &listing, Timestamp(now), &s)
            .take
            .is_empty()
    );
    assert_eq!(
        poll(&checkpoint(now - wait), &listing, Timestamp(now), &s)
            .take
            .len(),
        1
    );
    // Even with no settle time: a minute.
    let zero = Settings { settle_ms: 0, ..s };
    assert!(poll(&BTreeMap::new(), &listing, Timestamp(now), &zero)
        .take
        .is_empty());
    assert!(
        poll(&checkpoint(now - 60_000), &listing, Timestamp(now), &zero)
            .take
            .is_empty()
    );
    assert_eq!(
        poll(
            &checkpoint(now - LIST_MINUTE_MS),
            &listing,
            Timestamp(now),
            &zero
        )
        .take
        .len(),
        1
    );
}

/// A listing that took from `started` to `finished`: a new file's wait starts at `finished`,
/// and a known file's is judged at `started`.
#[test]
fn a_long_listing_never_shortens_the_settle_time() {
    let a = facts(10, "20260101000000");
    let listing = Listing {
        files: vec![Seen {
            path: "a".into(),
            facts: a.clone(),
        }],
        unlisted: vec![],
    };
    let p = poll_observed(
        &BTreeMap::new(),
        &listing,
        Timestamp(1_000),
        Timestamp(9_000),
        &settings(),
    );
    assert_eq!(p.put[0].1.since, Timestamp(9_000));
    let cp = BTreeMap::from([("a".to_string(), entry(a.clone(), 9_000, None, 0))]);
    let started = 9_000 + SETTLE - 1;
    let p = poll_observed(
        &cp,
        &listing,
        Timestamp(started),
        Timestamp(started + 20_000),
        &settings(),
    );
    assert!(p.take.is_empty(), "judged at the listing's start");
    let p = poll_observed(
        &cp,
        &listing,
        Timestamp(started + 1),
        Timestamp(started + 20_000),
        &settings(),
    );
    assert_eq!(p.take.len(), 1);
}

/// The same content whatever the listing method: `unique` only when both have it, a modify
/// time to the coarser precision.
#[test]
fn same_content_table() {
    let f = |size: u64, modified: &str, unique: Option<&str>| Facts {
        size: Some(size),
        modified: Some(modified.into()),
        unique: unique.map(Into::into),
    };
    let rows = [
        (
            f(1, "20260101000000", Some("u1")),
            f(1, "20260101000000", Some("u1")),
            true,
        ),
        (
            f(1, "20260101000000", Some("u1")),
            f(1, "20260101000000", Some("u2")),
            false,
        ),
        (
            f(1, "20260101000000", Some("u1")),
            f(1, "20260101000000", None),
            true,
        ),
        (
            f(1, "20260101000000.250", None),
            f(1, "20260101000000", None),
            true,
        ),
        (
            f(1, "20260101000000.250", None),
            f(1, "20260101000000.500", None),
            false,
        ),
        (
            f(1, "20260101000001", None),
            f(1, "20260101000000.999", None),
            false,
        ),
        (
            f(1, "20260101000000", None),
            f(2, "20260101000000", None),
            false,
        ),
    ];
    for (a, b, same) in rows {
        assert_eq!(a.same_content(&b), same, "{a:?} {b:?}");
        assert_eq!(b.same_content(&a), same, "{b:?} {a:?}");
    }
}
