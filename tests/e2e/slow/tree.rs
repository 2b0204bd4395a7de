//! Issue 16 at scale: a tree of 2,000 entries copied between every ordered pair of the three
//! servers; a recursive job over a 10,000-entry tree killed (kill -9) again and again during
//! its walk and during its copies, against real proFTPD servers: no file missing, extra or
//! duplicated, and no directory listed again once frozen (the source server's command log
//! against the store's frozen directories read at each kill).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bftp_store::{JobId, JobStore, SledStore, StoreOptions};
use bftp_tests::daemon::Bftpd;
use bftp_tests::files::content;
use bftp_tests::jobs::{submit, wait_final};
use bftp_tests::tree::{check_tree_copy, listed_events, PAIRS};
use bftp_tests::{Direction, FtpOptions, FtpServer, ServerKind};

/// The directories proFTPD listed (MLSD answered 1xx/2xx), in its ExtendedLog's order.
fn mlsd_listings(server: &FtpServer) -> Vec<String> {
    let log = std::fs::read_to_string(server.log_file()).unwrap_or_default();
    let mut out = Vec::new();
    for line in log.lines() {
        if let Some((_, rest)) = line.split_once("\"MLSD ") {
            if let Some((dir, code)) = rest.rsplit_once("\" ") {
                if code.starts_with('2') || code.starts_with('1') {
                    out.push(dir.to_owned());
                }
            }
        }
    }
    out
}

/// Complete incoming files in the destination's xferlog.
fn arrivals(server: &FtpServer) -> usize {
    server
        .xferlog_entries()
        .unwrap_or_default()
        .iter()
        .filter(|e| e.direction == Direction::Incoming && e.complete)
        .count()
}

/// A tree of 10,000 entries below `tree/`: 10 top directories of 10 directories of 10
/// (1,110 directories), 9 files in each top directory and 8 in each of the others (8,890
/// files). Returns every directory's path as proFTPD's log names it (`tree/...`).
fn ten_thousand(server: &FtpServer) -> Vec<String> {
    let mut dirs = vec!["tree".to_owned()];
    let put = |dir: &str, n: usize| {
        for f in 0..n {
            let name = format!("{dir}/f{f}.dat");
            server.put_file(&name, &content(&name, 20 + f * 7)).unwrap();
        }
    };
    for a in 0..10 {
        let top = format!("tree/t{a}");
        put(&top, 9);
        dirs.push(top.clone());
        for b in 0..10 {
            let mid = format!("{top}/m{b}");
            put(&mid, 8);
            dirs.push(mid.clone());
            for c in 0..10 {
                let leaf = format!("{mid}/l{c}");
                put(&leaf, 8);
                dirs.push(leaf);
            }
        }
    }
    dirs
}

/// Kills each way: in the walk, and in the copies.
const KILLS: usize = 16;

/// 32 kill -9s of a recursive job over 10,000 entries, 16 during its walk (every ~55
/// listings) and 16 during its copies (every ~440 files). At each kill, with the daemon
/// dead, the test reads the directories the store has frozen from the store itself; every
/// listing the source server logs after that kill must be of a directory not frozen then,
/// and none twice between two kills. So a directory is listed a second time only when the
/// kill came between its first listing and its freezing. At the end: the destination tree
/// equals the source's by sha256, every file is a member once and succeeded.
#[test]
fn a_recursive_job_over_10000_entries_survives_32_kill_9s() {
    let started = Instant::now();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dirs = ten_thousand(&src);
    let files = 10_000 - (dirs.len() - 1);
    dst.mkdir("in").unwrap();
    let made = started.elapsed();
    let mut d = Bftpd::start().unwrap();
    let id = submit(&d, &src, &dst, "tree", "in/copy", &["--recursive"]);

    // Steps short enough for the kills to fit before the walk (or the copies) ends.
    let walk_step = dirs.len() / (KILLS + 4);
    let copy_step = files / (KILLS + 4);
    // Per kill: the frozen directories then, and how many listings the log had then.
    let mut kills: Vec<(BTreeSet<String>, usize)> = Vec::new();
    let (mut in_walk, mut in_copies) = (0, 0);
    let (mut last_listings, mut last_arrivals) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(400);
    while in_walk + in_copies < 2 * KILLS && Instant::now() < deadline {
        let got = arrivals(&dst);
        if got >= files {
            break;
        }
        let due = if got == 0 {
            let n = mlsd_listings(&src).len();
            in_walk < KILLS && n >= last_listings + walk_step
        } else {
            got >= last_arrivals + copy_step
        };
        if !due {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        d.kill9();
        if got == 0 {
            in_walk += 1;
        } else {
            in_copies += 1;
        }
        // Whatever the killed sessions leave in the servers' logs is written by now.
        std::thread::sleep(Duration::from_millis(200));
        let store = SledStore::open(&d.state_dir().join("store"), StoreOptions::default())
            .expect("the store after a kill");
        let frozen: BTreeSet<String> = store
            .walk(JobId(id))
            .unwrap()
            .listed
            .into_iter()
            .map(|dir| {
                if dir.is_empty() {
                    "tree".to_owned()
                } else {
                    format!("tree/{dir}")
                }
            })
            .collect();
        drop(store);
        last_listings = mlsd_listings(&src).len();
        last_arrivals = arrivals(&dst);
        kills.push((frozen, last_listings));
        d.launch().unwrap();
    }
    let v = wait_final(&d, id, Duration::from_secs(300));
    let seconds = started.elapsed().as_secs_f64();
    assert!(in_walk >= KILLS, "{in_walk} kills in the walk");
    assert!(in_copies >= KILLS, "{in_copies} kills in the copies");
    assert_eq!(v["outcome"], "succeeded", "{}", v["counts"]);

    // 0 missing, 0 extra, 0 duplicated: the trees by sha256, the ledger once per file.
    let members = check_tree_copy("kill -9", &v, &src.path("tree"), &dst.path("in/copy"));
    assert_eq!(members, files);

    // Every directory listed; after each kill, only directories the store had not frozen,
    // none twice before the next kill.
    let listings = mlsd_listings(&src);
    let all: BTreeSet<&String> = listings.iter().collect();
    assert_eq!(all, dirs.iter().collect(), "every directory listed");
    let mut bounds: Vec<(Option<&BTreeSet<String>>, usize)> = vec![(None, 0)];
    bounds.extend(kills.iter().map(|(f, n)| (Some(f), *n)));
    for (i, (frozen, start)) in bounds.iter().enumerate() {
        let end = bounds.get(i + 1).map_or(listings.len(), |b| b.1);
        let mut seen = BTreeSet::new();
        for dir in &listings[*start..end] {
            assert!(
                seen.insert(dir),
                "{dir:?} listed twice between kills {i} and {}",
                i + 1
            );
            if let Some(frozen) = frozen {
                assert!(
                    !frozen.contains(dir),
                    "{dir:?} listed again after kill {i}, which found it frozen"
                );
            }
        }
    }
    assert_eq!(
        listed_events(&v).len(),
        dirs.len(),
        "each directory frozen once"
    );
    let repeats = listings.len() - dirs.len();
    let copies = arrivals(&dst);
    eprintln!(
        "10,000 entries ({} directories, {files} files), {in_walk} kills in the walk and \
         {in_copies} in the copies: {repeats} directories listed twice (each cut off by a \
         kill before it was frozen), {} files copied again after a kill; tree made in \
         {:.1} s, whole test {seconds:.1} s",
        dirs.len(),
        copies - files,
        made.as_secs_f64()
    );
}

/// Writes a tree of three levels below `tree/` on `server`: 12 top directories (spaces and
/// UTF-8 in their names), 8 subdirectories in each, 19 files in each of those, 4 files in
/// each top directory and 5 at the root, an empty directory in each top directory and one at
/// the root, a symbolic link to a directory, and a second name (hard link) for a file: 2,000
/// entries below the root. Returns how many files (the hard link counted) and directories
/// (the root counted) it made.
fn big_tree(server: &FtpServer) -> (usize, usize) {
    let (mut files, mut dirs) = (0, 1);
    let put = |rel: String, i: usize| {
        server
            .put_file(&format!("tree/{rel}"), &content(&rel, 40 + (i * 37) % 3000))
            .unwrap();
    };
    for f in 0..5 {
        put(format!("root {f}.dat"), f);
        files += 1;
    }
    for t in 0..12 {
        let top = format!("top {t} \u{e9}t\u{e9}");
        dirs += 1;
        for f in 0..4 {
            put(format!("{top}/\u{fc}ber {f}.dat"), t * 10 + f);
            files += 1;
        }
        server.mkdir(&format!("tree/{top}/empty {t}")).unwrap();
        dirs += 1;
        for s in 0..8 {
            dirs += 1;
            for f in 0..19 {
                put(format!("{top}/sub {s}/f {f}.dat"), t * 1000 + s * 50 + f);
                files += 1;
            }
        }
    }
    server.mkdir("tree/empty").unwrap();
    dirs += 1;
    std::os::unix::fs::symlink("top 0 \u{e9}t\u{e9}", server.path("tree/link to top 0")).unwrap();
    std::fs::hard_link(
        server.path("tree/root 0.dat"),
        server.path("tree/top 1 \u{e9}t\u{e9}/sub 2/hard link.dat"),
    )
    .unwrap();
    files += 1;
    (files, dirs)
}

/// Issue 16's tree test: a tree of three levels and 2,000 entries (empty directories, names
/// with spaces and UTF-8, a symbolic link to a directory, a hard link), copied by
/// `bftp submit --recursive` between every ordered pair of vsftpd, proFTPD and Pure-FTPd,
/// the six jobs at once: each destination tree has the source's directories and files by
/// sha256 and nothing else (the link reported as not followed); the ledger has every file
/// once, succeeded, by its path relative to the root; each directory was frozen once.
#[test]
fn a_tree_of_2000_entries_is_copied_between_every_pair() {
    let started = Instant::now();
    let servers: Vec<FtpServer> = [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ]
    .into_iter()
    .map(|kind| {
        let s = FtpServer::start(kind, FtpOptions::default()).unwrap();
        s.mkdir("in").unwrap();
        s
    })
    .collect();
    let mut shape = (0, 0);
    for s in &servers {
        shape = big_tree(s);
    }
    let (files, dirs) = shape;
    // Below the root: the files, the directories but the root, the link.
    assert_eq!(files + dirs, 2000, "{files} files, {dirs} directories");
    let of = |k: ServerKind| servers.iter().find(|s| s.kind() == k).unwrap();
    let d = Bftpd::start().unwrap();
    let jobs: Vec<(ServerKind, ServerKind, u64)> = PAIRS
        .iter()
        .map(|&(s, t)| {
            let dst = format!("in/from {}", s.name());
            (
                s,
                t,
                submit(&d, of(s), of(t), "tree", &dst, &["--recursive"]),
            )
        })
        .collect();
    for (s, t, id) in jobs {
        let v = wait_final(&d, id, Duration::from_secs(300));
        let what = format!("{s} -> {t}");
        assert_eq!(
            v["outcome"], "partial",
            "{what}: only the link is not copied"
        );
        let dst_root = of(t).path(&format!("in/from {}", s.name()));
        let members = check_tree_copy(&what, &v, &of(s).path("tree"), &dst_root);
        assert_eq!(members, files + 1, "{what}");
        assert_eq!(
            listed_events(&v).len(),
            dirs,
            "{what}: each directory frozen once"
        );
    }
    eprintln!(
        "six pairs of {} entries each: {:.1} s",
        files + dirs,
        started.elapsed().as_secs_f64()
    );
}
