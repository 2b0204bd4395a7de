use super::*;
use bftp_core::reply::{classify, Outcome, ReplyCode};
use bftp_core::watch::Outcome as Settled;
use bftp_core::Timestamp;

fn entry(name: &str, kind: TreeKind, unique: Option<&str>) -> TreeEntry {
    TreeEntry {
        name: name.into(),
        kind,
        size: Some(1),
        unique: unique.map(Into::into),
        modified: None,
        hint: None,
    }
}

fn dir_listing(entries: Vec<TreeEntry>, own: Option<&str>) -> DirListing {
    DirListing {
        entries,
        rejected: Vec::new(),
        method: WalkMethod::Mlsd,
        hidden: HiddenNames::Shown,
        unique: own.map(Into::into),
        transcript: Transcript::default(),
    }
}

fn paths(files: &[(String, TreeEntry)]) -> Vec<&str> {
    files.iter().map(|(p, _)| p.as_str()).collect()
}

#[test]
fn a_directory_sorts_into_files_subdirectories_and_what_is_reported() {
    let listing = DirListing {
        rejected: vec![RejectedName {
            line: "bad\\rname".into(),
            reason: "a CR".into(),
            matched: true,
        }],
        hidden: HiddenNames::NotShown,
        ..dir_listing(
            vec![
                entry("a.csv", TreeKind::File, None),
                entry("d", TreeKind::Dir, None),
                entry(
                    "l",
                    TreeKind::Symlink {
                        target: "a.csv".into(),
                    },
                    None,
                ),
                entry("p", TreeKind::Special("type p".into()), None),
            ],
            None,
        )
    };
    // Not recursive: the subdirectory is reported, not listed.
    let flat = sort_dir("sub", &listing, false, &mut BTreeMap::new(), 64);
    assert_eq!(paths(&flat.files), ["sub/a.csv"]);
    assert!(flat.subdirs.is_empty());
    let skipped: Vec<&str> = flat.skipped.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(skipped, ["sub/d", "sub/l", "sub/p", "sub/.*"]);
    assert!(flat.skipped[0].1.contains("not recursive"), "{flat:?}");
    assert!(flat.skipped[1].1.contains("symbolic link to \"a.csv\""));
    assert!(flat.skipped[2].1.contains("type p"));
    assert!(flat.skipped[3].1.contains("LIST -a"));
    assert_eq!(flat.refused[0].line, "sub/bad\\rname");
    // Recursive: the subdirectory is listed next, the rest is reported the same way.
    let deep = sort_dir("sub", &listing, true, &mut BTreeMap::new(), 64);
    assert_eq!(deep.subdirs, ["sub/d"]);
    assert_eq!(deep.skipped.len(), 3);
    // At the watched directory itself, paths are the names.
    let top = sort_dir("", &listing, true, &mut BTreeMap::new(), 64);
    assert_eq!(paths(&top.files), ["a.csv"]);
    assert_eq!(top.subdirs, ["d"]);
    assert_eq!(top.refused[0].line, "bad\\rname");
}

/// The loop rule: a directory whose MLSD `unique` fact was met before (as a listed
/// directory's own fact or as a subdirectory's) is reported, not listed twice.
#[test]
fn a_directory_met_again_by_its_unique_fact_is_not_listed_twice() {
    let mut seen = BTreeMap::new();
    let root = dir_listing(
        vec![
            entry("a", TreeKind::Dir, Some("u-a")),
            entry("b", TreeKind::Dir, Some("u-a")),
            entry("self", TreeKind::Dir, Some("u-root")),
            entry("plain", TreeKind::Dir, None),
        ],
        Some("u-root"),
    );
    let sorted = sort_dir("", &root, true, &mut seen, 64);
    assert_eq!(sorted.subdirs, ["a", "plain"]);
    let skipped: Vec<(&str, &str)> = sorted
        .skipped
        .iter()
        .map(|(p, w)| (p.as_str(), w.as_str()))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0].0, "b");
    assert!(skipped[0].1.contains("\"a\" again"), "{skipped:?}");
    assert_eq!(skipped[1].0, "self");
    assert!(skipped[1].1.contains("\".\" again"), "{skipped:?}");
    // Listed later, `a` holds a link back to the root.
    let a = dir_listing(
        vec![entry("up", TreeKind::Dir, Some("u-root"))],
        Some("u-a"),
    );
    let sorted = sort_dir("a", &a, true, &mut seen, 64);
    assert!(sorted.subdirs.is_empty());
    assert_eq!(sorted.skipped[0].0, "a/up");
}

#[test]
fn a_directory_deeper_than_the_limit_is_reported_not_listed() {
    let listing = dir_listing(vec![entry("c", TreeKind::Dir, None)], None);
    let sorted = sort_dir("a/b", &listing, true, &mut BTreeMap::new(), 2);
    assert!(sorted.subdirs.is_empty());
    assert_eq!(sorted.skipped[0].0, "a/b/c");
    let sorted = sort_dir("a", &listing, true, &mut BTreeMap::new(), 2);
    assert_eq!(sorted.subdirs, ["a/c"]);
}

fn checkpoint(hint: Option<&str>) -> Entry {
    Entry {
        facts: Facts {
            size: Some(7),
            modified: Some("20260101120000".into()),
            unique: None,
        },
        since: Timestamp(1),
        outcome: Some(Settled::Delivered),
        hint: hint.map(Into::into),
        taken: 1,
    }
}

/// Facts are reused exactly when the checkpoint holds the path with the same LIST hint.
#[test]
fn a_list_file_reuses_the_checkpoint_facts_only_under_the_same_hint() {
    let known = BTreeMap::from([
        ("a.csv".to_owned(), checkpoint(Some("7 Jan 1 12:00"))),
        ("old.csv".to_owned(), checkpoint(None)),
    ]);
    let facts = checkpoint(None).facts;
    assert_eq!(
        reused(&known, "a.csv", Some("7 Jan 1 12:00")),
        Some(facts.clone())
    );
    // The line changed (size or display time): asked.
    assert_eq!(reused(&known, "a.csv", Some("7 Jan 1 12:01")), None);
    assert_eq!(reused(&known, "a.csv", Some("8 Jan 1 12:00")), None);
    // A new path, an entry asked without a hint, a line without one: asked.
    assert_eq!(reused(&known, "new.csv", Some("7 Jan 1 12:00")), None);
    assert_eq!(reused(&known, "old.csv", Some("7 Jan 1 12:00")), None);
    assert_eq!(reused(&known, "a.csv", None), None);
}

#[test]
fn asked_facts_fall_back_on_a_refusal_and_keep_the_identity_on_a_hiccup() {
    use Answer::{Got, Refused, Trouble};
    let time = || Got("20260101120000".to_owned());
    let facts = |size: Option<u64>, modified: Option<&str>| Facts {
        size,
        modified: modified.map(Into::into),
        unique: None,
    };
    type Row = (Answer<u64>, Answer<String>, (Facts, bool));
    let rows: Vec<Row> = vec![
        // Both answered: the server's facts, never LIST's size.
        (
            Got(5),
            time(),
            (facts(Some(5), Some("20260101120000")), true),
        ),
        // A refused SIZE: LIST's size.
        (
            Refused,
            time(),
            (facts(Some(9), Some("20260101120000")), true),
        ),
        // A refused MDTM: size only.
        (Got(5), Refused, (facts(Some(5), None), true)),
        (Refused, Refused, (facts(Some(9), None), true)),
        // A transient refusal: no facts (the file waits, its entry untouched), not reusable;
        // never the checkpoint's, which would make a changing file look stable.
        (Trouble, time(), (Facts::default(), false)),
        (Got(5), Trouble, (Facts::default(), false)),
    ];
    for (i, (size, modified, want)) in rows.into_iter().enumerate() {
        assert_eq!(asked_facts(Some(9), size, modified), want, "row {i}");
    }
}

fn reply(code: u16, text: &str) -> (Reply, Disposition) {
    let code = ReplyCode::new(code).unwrap();
    let disposition = classify(CommandKind::Mdtm, Outcome::Reply(code));
    (Reply::new(code, vec![text.into()]), disposition)
}

#[test]
fn an_mdtm_reply_is_the_canonical_time_or_a_refusal() {
    let rows = [
        (
            213,
            "20260101120000",
            Answer::Got("20260101120000".to_owned()),
        ),
        (
            213,
            "20260101120000.000",
            Answer::Got("20260101120000".to_owned()),
        ),
        (
            213,
            "20260101120000.25",
            Answer::Got("20260101120000.250".to_owned()),
        ),
        (213, "yesterday", Answer::Refused),
        (
            550,
            "Could not get file modification time.",
            Answer::Refused,
        ),
        (500, "Unknown command.", Answer::Refused),
        (502, "Not implemented.", Answer::Refused),
        (450, "busy", Answer::Trouble),
    ];
    for (code, text, want) in rows {
        let (r, d) = reply(code, text);
        assert_eq!(mdtm_answer(&r, d), want, "{code} {text}");
    }
}

/// vsftpd reads `MDTM 20260101120000 x` as "set x's modify time".
#[test]
fn a_path_that_looks_like_a_time_setting_is_sent_as_a_relative_path() {
    assert_eq!(mdtm_argument("a.csv"), "a.csv");
    assert_eq!(mdtm_argument("20260101120000"), "20260101120000");
    assert_eq!(mdtm_argument("20260101120000.csv"), "20260101120000.csv");
    assert_eq!(mdtm_argument("20260101120000 x"), "./20260101120000 x");
    assert_eq!(mdtm_argument("in/20260101120000 x"), "in/20260101120000 x");
}
