//! Issue 16: a recursive job killed (kill -9) again and again, during its walk and during its
//! copies, against real proFTPD servers: no file missing, extra or duplicated; no directory
//! listed again once frozen (the source server's command log); a file added to a directory
//! after it was frozen is not copied, a directory added under one not yet walked is.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bftp_tests::daemon::Bftpd;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

use crate::scheduler::{content, status, submit, wait_final};

const TOP: usize = 150;

fn files_below(root: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// How often proFTPD answered MLSD for each directory, from its ExtendedLog.
fn mlsd_counts(server: &FtpServer) -> HashMap<String, usize> {
    let log = std::fs::read_to_string(server.log_file()).unwrap_or_default();
    let mut out = HashMap::new();
    for line in log.lines() {
        if let Some((_, rest)) = line.split_once("\"MLSD ") {
            if let Some((dir, code)) = rest.rsplit_once("\" ") {
                if code.starts_with('2') || code.starts_with('1') {
                    *out.entry(dir.to_owned()).or_insert(0) += 1;
                }
            }
        }
    }
    out
}

fn listed(v: &Value) -> Vec<String> {
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["event"] == "listed")
        .map(|h| h["detail"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn walked(v: &Value) -> bool {
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["event"] == "members")
}

#[test]
fn a_recursive_job_survives_kill_9_during_its_walk_and_its_copies() {
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    for i in 0..TOP {
        for f in ["a.dat", "s/b.dat"] {
            let name = format!("tree/d{i:03}/{f}");
            src.put_file(&name, &content(&name, 300 + i)).unwrap();
        }
    }
    dst.mkdir("in").unwrap();
    let mut d = Bftpd::start().unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/copy", &["--recursive"]);

    let mut kills_in_walk = 0;
    let mut kills_in_copies = 0;
    let mut added = false;
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut last_progress = (0, 0u64);
    while kills_in_walk + kills_in_copies < 30 && Instant::now() < deadline {
        let v = status(&d, id);
        if v["state"] == "finished" {
            break;
        }
        let progress = (
            listed(&v).len(),
            v["counts"]["succeeded"].as_u64().unwrap_or(0),
        );
        if progress == last_progress {
            std::thread::sleep(Duration::from_millis(15));
            continue;
        }
        last_progress = progress;
        // Half the kills in the walk, half in the copies.
        if !walked(&v) && kills_in_walk >= 15 {
            continue;
        }
        d.restart_after_kill9().unwrap();
        if walked(&v) {
            kills_in_copies += 1;
        } else {
            kills_in_walk += 1;
            if !added && progress.0 > 0 && progress.0 < TOP {
                // The root is frozen; the last top directory's subdirectory is not yet.
                src.put_file("tree/late.dat", b"after the root was frozen")
                    .unwrap();
                src.put_file(&format!("tree/d{:03}/s/new/n.dat", TOP - 1), b"new")
                    .unwrap();
                added = true;
            }
        }
    }
    let v = wait_final(&d, id, Duration::from_secs(180));
    assert!(
        added,
        "no kill landed early in the walk: {kills_in_walk} in the walk"
    );
    assert!(kills_in_walk >= 3, "{kills_in_walk} kills in the walk");
    assert!(
        kills_in_copies >= 3,
        "{kills_in_copies} kills in the copies"
    );
    assert_eq!(v["outcome"], "succeeded", "{v:#}");

    // Ledger: every file once, each succeeded.
    let members = v["members"].as_array().unwrap();
    let mut names: Vec<&str> = members
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let all = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all, "a duplicated member");
    assert!(members.iter().all(|m| m["state"] == "succeeded"), "{v:#}");
    assert!(
        !names.contains(&"late.dat"),
        "a file added to a frozen directory was copied"
    );
    let new = format!("d{:03}/s/new/n.dat", TOP - 1);
    assert!(
        names.contains(&new.as_str()),
        "the directory added later was not walked"
    );
    assert_eq!(all, 2 * TOP + 1);

    // The trees: the destination has every source file but the late one, no more.
    let mut want = files_below(&src.path("tree"));
    want.remove("late.dat");
    assert_eq!(files_below(&dst.path("in/copy")), want);

    // No directory listed again once frozen: a listing is repeated only when a kill came
    // between reading it and freezing it, at most once per kill in the walk.
    let counts = mlsd_counts(&src);
    assert_eq!(counts.len(), 2 * TOP + 2, "{counts:?}");
    let repeats: usize = counts.values().map(|c| c - 1).sum();
    let twice: BTreeMap<&String, &usize> = counts.iter().filter(|(_, c)| **c > 1).collect();
    assert!(
        repeats <= kills_in_walk,
        "{repeats} repeated listings for {kills_in_walk} kills in the walk: {twice:?}"
    );
    eprintln!(
        "kills: {kills_in_walk} in the walk, {kills_in_copies} in the copies; repeated listings: {repeats}"
    );
}
