//! Issue 30 (watches, SPEC §15): the listing a watch's poll takes, against the real servers:
//! MLSD on proFTPD and Pure-FTPd (size, `modify` and `unique` from the listing), LIST with
//! SIZE and MDTM on vsftpd (which has no MLSD). The same small tree (files, a subdirectory, a
//! symbolic link) gives the same paths, sizes and modify times on all three; a second
//! listing with the checkpoint filled from the first asks vsftpd nothing more than its LIST;
//! a file whose modify time changes (`touch -d`) between two listings has a new `modified`.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use bftp_core::watch::{Entry, Facts};
use bftp_core::Timestamp;
use bftp_ftp::{Side, WalkMethod, WatchListing};
use bftp_tests::engine::{image, open};
use bftp_tests::scenario::block_on;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

/// 2026-01-02T03:04:05Z and a day later.
const FIRST: u64 = 1_767_323_045;
const LATER: u64 = FIRST + 86_400;

fn touch(server: &FtpServer, rel: &str, secs: u64) {
    let file = std::fs::File::options()
        .write(true)
        .open(server.path(rel))
        .unwrap();
    file.set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn watched_tree(kind: ServerKind) -> (FtpServer, FtpServer) {
    let src = FtpServer::start(kind, FtpOptions::default()).unwrap();
    src.put_file("w/a.csv", b"hello").unwrap();
    src.put_file("w/b c.dat", b"twelve bytes").unwrap();
    src.put_file("w/sub/d.csv", b"deeper").unwrap();
    std::os::unix::fs::symlink("a.csv", src.path("w/link")).unwrap();
    for rel in ["w/a.csv", "w/b c.dat", "w/sub/d.csv"] {
        touch(&src, rel, FIRST);
    }
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    (src, dst)
}

/// The checkpoint a poll would leave after `listing`: every file's facts, with its hint.
fn checkpoint(listing: &WatchListing) -> BTreeMap<String, Entry> {
    let hints: BTreeMap<&str, &str> = listing
        .hints
        .iter()
        .map(|(p, h)| (p.as_str(), h.as_str()))
        .collect();
    listing
        .listing
        .files
        .iter()
        .map(|seen| {
            let entry = Entry {
                facts: seen.facts.clone(),
                since: Timestamp(1),
                outcome: None,
                hint: hints.get(seen.path.as_str()).map(|h| (*h).to_owned()),
                taken: 0,
            };
            (seen.path.clone(), entry)
        })
        .collect()
}

fn facts(listing: &WatchListing) -> BTreeMap<String, Facts> {
    listing
        .listing
        .files
        .iter()
        .map(|s| (s.path.clone(), s.facts.clone()))
        .collect()
}

fn asked(listing: &WatchListing) -> (usize, usize) {
    (
        listing.transcript.count_sent(Side::Source, "SIZE"),
        listing.transcript.count_sent(Side::Source, "MDTM"),
    )
}

#[test]
fn each_server_lists_a_watched_tree_with_the_same_paths_sizes_and_modify_times() {
    let first_time = "20260102030405";
    let later_time = "20260103030405";
    for kind in [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ] {
        let vsftpd = kind == ServerKind::Vsftpd;
        let (src, dst) = watched_tree(kind);
        block_on(async {
            let mut pair = open(&src, &dst, image()).await.unwrap();
            let first = pair
                .watch_listing("w", true, &BTreeMap::new())
                .await
                .unwrap();
            let want_method = if vsftpd {
                WalkMethod::List
            } else {
                WalkMethod::Mlsd
            };
            assert_eq!(first.method, want_method, "{kind}");
            assert!(first.refused.is_empty(), "{kind}: {first:#?}");
            assert!(first.listing.unlisted.is_empty(), "{kind}: {first:#?}");
            let got: Vec<(&str, Option<u64>, Option<&str>)> = first
                .listing
                .files
                .iter()
                .map(|s| (s.path.as_str(), s.facts.size, s.facts.modified.as_deref()))
                .collect();
            let mut sorted = got.clone();
            sorted.sort();
            assert_eq!(
                sorted,
                [
                    ("a.csv", Some(5), Some(first_time)),
                    ("b c.dat", Some(12), Some(first_time)),
                    ("sub/d.csv", Some(6), Some(first_time)),
                ],
                "{kind}: {first:#?}"
            );
            // The link is reported, not followed; the subdirectory was listed.
            let skipped: Vec<&str> = first.skipped.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(skipped, ["link"], "{kind}: {first:#?}");
            assert!(first.skipped[0].1.contains("symbolic link"), "{kind}");
            if vsftpd {
                assert_eq!(asked(&first), (3, 3), "{kind}: {}", first.transcript);
                assert_eq!(first.hints.len(), 3, "{kind}: {first:#?}");
            } else {
                assert_eq!(asked(&first), (0, 0), "{kind}: {}", first.transcript);
                assert!(first.hints.is_empty(), "{kind}");
                assert!(
                    first.listing.files.iter().all(|s| s.facts.unique.is_some()),
                    "{kind}: {first:#?}"
                );
            }

            // Again, with the checkpoint the first listing leaves: the same facts, and on
            // vsftpd not one SIZE or MDTM (the LIST lines are unchanged).
            let known = checkpoint(&first);
            let second = pair.watch_listing("w", true, &known).await.unwrap();
            assert_eq!(facts(&second), facts(&first), "{kind}");
            assert_eq!(asked(&second), (0, 0), "{kind}: {}", second.transcript);
            assert_eq!(second.hints, first.hints, "{kind}");

            // A new modify time (`touch -d`): a new `modified` for that file only; vsftpd
            // is asked about it alone (its LIST line shows another date).
            touch(&src, "w/a.csv", LATER);
            let third = pair.watch_listing("w", true, &known).await.unwrap();
            let mut want = facts(&first);
            want.get_mut("a.csv").unwrap().modified = Some(later_time.into());
            assert_eq!(facts(&third), want, "{kind}: {third:#?}");
            let once = if vsftpd { (1, 1) } else { (0, 0) };
            assert_eq!(asked(&third), once, "{kind}: {}", third.transcript);

            // Not recursive: the subdirectory is reported, not listed.
            let flat = pair
                .watch_listing("w", false, &BTreeMap::new())
                .await
                .unwrap();
            let mut paths: Vec<&str> = flat.listing.files.iter().map(|s| s.path.as_str()).collect();
            paths.sort();
            assert_eq!(paths, ["a.csv", "b c.dat"], "{kind}");
            let mut skipped: Vec<&str> = flat.skipped.iter().map(|(p, _)| p.as_str()).collect();
            skipped.sort();
            assert_eq!(skipped, ["link", "sub"], "{kind}: {flat:#?}");
        });
    }
}

/// A subdirectory that cannot be listed is `unlisted` (the checkpoint below it is kept),
/// not an error; the watched directory itself missing is the error.
#[test]
fn an_unlistable_subdirectory_is_unlisted_and_a_missing_root_is_the_error() {
    use std::os::unix::fs::PermissionsExt;
    for kind in [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ] {
        let (src, dst) = watched_tree(kind);
        src.put_file("w/closed/x.csv", b"x").unwrap();
        std::fs::set_permissions(src.path("w/closed"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        block_on(async {
            let mut pair = open(&src, &dst, image()).await.unwrap();
            let listed = pair
                .watch_listing("w", true, &BTreeMap::new())
                .await
                .unwrap();
            assert_eq!(listed.listing.unlisted, ["closed"], "{kind}: {listed:#?}");
            assert!(
                listed
                    .skipped
                    .iter()
                    .any(|(p, why)| p == "closed" && why.starts_with("not listed")),
                "{kind}: {listed:#?}"
            );
            assert_eq!(listed.listing.files.len(), 3, "{kind}: {listed:#?}");
            assert!(
                pair.watch_listing("nowhere", true, &BTreeMap::new())
                    .await
                    .is_err(),
                "{kind}"
            );
        });
        std::fs::set_permissions(src.path("w/closed"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
}
