//! Watches under crashes (RULES.md §15.5, §15.6): bftpd killed with SIGKILL at random moments
//! over hundreds of polls while files arrive all the time misses none, duplicates no append and
//! names every repeat; two nodes on PostgreSQL poll a watch one at a time, and the survivor
//! of a killed holder takes it over without a gap.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, Bftpd};
use bftp_tests::nodes::node_config;
use bftp_tests::rng::{seed, Rng};
use bftp_tests::watch::{add, copied, show, touch, wait_for, wait_polls};
use bftp_tests::{payload, postgres, FtpOptions, FtpServer, ServerKind};
use serde_json::{json, Value};

/// Files arriving whole (written aside, then renamed in) in each of `dirs` every
/// `every`, until stopped: the names and contents made.
struct Producer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(String, Vec<u8>)>>,
}

impl Producer {
    fn start(src: &FtpServer, dirs: &[&'static str], every: Duration) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let root = src.root().to_path_buf();
        let dirs = dirs.to_vec();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut made = Vec::new();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    for dir in &dirs {
                        let name = format!("f{i:05}.dat");
                        let data = payload(500 + (i * 37) % 3000, i as u8);
                        let aside = root.join(format!("stage/{dir}-{name}"));
                        std::fs::write(&aside, &data).unwrap();
                        std::fs::rename(&aside, root.join(format!("{dir}/{name}"))).unwrap();
                        made.push((format!("{dir}/{name}"), data));
                    }
                    i += 1;
                    std::thread::sleep(every);
                }
                made
            })
        };
        Producer { stop, thread }
    }

    fn finish(self) -> Vec<(String, Vec<u8>)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Every job of the daemon made by watch `id`: (job id, view).
fn watch_jobs(d: &Bftpd, id: u64) -> Vec<Value> {
    let (code, body) = http(d.socket(), "GET", "/v1/jobs?limit=10000", None, &[]).unwrap();
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["watch"].as_u64() == Some(id))
        .cloned()
        .collect()
}

/// How many members of the watch's jobs succeeded for each name.
fn deliveries(d: &Bftpd, id: u64) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for job in watch_jobs(d, id) {
        for m in job["members"].as_array().unwrap() {
            if m["state"] == "succeeded" {
                *out.entry(m["name"].as_str().unwrap().to_owned())
                    .or_insert(0) += 1;
            }
        }
    }
    out
}

/// ≥ 200 polls over two watches (replace and append), bftpd killed at random moments while
/// files keep arriving: every file is at the destination once, byte-exact (an append twice
/// would show doubled), and every file delivered by more than one job is counted as a repeat.
#[test]
fn kill9_over_two_hundred_polls_misses_nothing_and_names_every_repeat() {
    let seed = seed();
    eprintln!("seed {seed} (BFTP_TEST_SEED={seed} replays the kill moments)");
    let mut rng = Rng(seed);
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for dir in ["r", "a", "stage"] {
        src.mkdir(dir).unwrap();
    }
    dst.mkdir("r").unwrap();
    dst.mkdir("a").unwrap();
    let mut d = Bftpd::start().unwrap();
    let retry = json!({"first_interval": "1s", "cap": "2s", "max_attempts": 100, "deadline": "1h"});
    let replace = add(
        &d,
        (&src, "r"),
        (&dst, "r"),
        "1s",
        json!({"settle": "0s", "job": {"retry": retry.clone()}}),
    );
    let append = add(
        &d,
        (&src, "a"),
        (&dst, "a"),
        "1s",
        json!({"settle": "0s", "job": {"retry": retry, "dest_command": "append"}}),
    );
    let producer = Producer::start(&src, &["r", "a"], Duration::from_millis(700));
    let polls = |d: &Bftpd| {
        show(d, replace)["polls"].as_u64().unwrap() + show(d, append)["polls"].as_u64().unwrap()
    };
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(400);
    while polls(&d) < 200 {
        assert!(
            Instant::now() < deadline,
            "200 polls not reached\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(rng.range(300, 2500)));
        d.kill9();
        kills += 1;
        d.launch().unwrap();
        d.wait_ready(Duration::from_secs(30)).unwrap();
    }
    let made = producer.finish();
    assert!(kills >= 40, "only {kills} kills");
    // Everything made is delivered once the watches catch up.
    for (id, dir) in [(replace, "r"), (append, "a")] {
        let want = made.iter().filter(|(p, _)| p.starts_with(dir)).count() as u64;
        wait_for(
            &d,
            id,
            Duration::from_secs(120),
            "every file delivered",
            |w| w["current_job"].is_null() && w["delivered"].as_u64().unwrap_or(0) >= want,
        );
    }
    let mut missed = Vec::new();
    for (path, data) in &made {
        match dst.read_file(path) {
            Ok(got) if got == *data => {}
            Ok(got) => missed.push(format!("{path}: {} bytes, not {}", got.len(), data.len())),
            Err(_) => missed.push(format!("{path}: missing")),
        }
    }
    assert!(
        missed.is_empty(),
        "{} files wrong: {missed:?}",
        missed.len()
    );
    for id in [replace, append] {
        let w = show(&d, id);
        let extra: usize = deliveries(&d, id).values().map(|n| n - 1).sum();
        assert!(
            extra as u64 <= w["repeats"].as_u64().unwrap(),
            "{extra} files delivered again, {} repeats named: {w:#}",
            w["repeats"]
        );
    }
    eprintln!(
        "{kills} kills over {} polls; {} files",
        polls(&d),
        made.len()
    );
}

/// Two nodes on one PostgreSQL store: one polls the watch at a time (its jobs made on one
/// node between kills), the holder is killed, the other takes the watch over, and every file
/// that arrived before and after is delivered.
#[test]
fn two_nodes_hold_a_watch_one_at_a_time_and_the_survivor_takes_it_over() {
    let url = postgres::fresh_database();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.mkdir("out").unwrap();
    src.mkdir("stage").unwrap();
    dst.mkdir("in").unwrap();
    let mut a = Bftpd::start_with(node_config(&url, "node-a", None)).unwrap();
    let key = a.state_dir().join("secret.key");
    let mut b = Bftpd::start_with(node_config(&url, "node-b", Some(&key))).unwrap();
    let id = add(
        &a,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "0s"}),
    );
    let producer = Producer::start(&src, &["out"], Duration::from_millis(400));
    wait_for(&a, id, Duration::from_secs(30), "some deliveries", |w| {
        w["delivered"].as_u64().unwrap_or(0) >= 5
    });
    let made_by = |d: &Bftpd| d.logs().matches("the watch made a job").count();
    let (on_a, on_b) = (made_by(&a), made_by(&b));
    assert!(on_a + on_b > 0);
    // Kill the node that made the jobs lately; the other must go on.
    let (holder, survivor) = if on_a >= on_b {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    holder.kill9();
    let before = made_by(survivor);
    let delivered = show(survivor, id)["delivered"].as_u64().unwrap();
    wait_for(survivor, id, Duration::from_secs(60), "taken over", |w| {
        w["delivered"].as_u64().unwrap_or(0) >= delivered + 5
    });
    assert!(made_by(survivor) > before, "{}", survivor.logs());
    let made = producer.finish();
    wait_for(
        survivor,
        id,
        Duration::from_secs(60),
        "all delivered",
        |w| w["current_job"].is_null() && w["delivered"].as_u64().unwrap_or(0) >= made.len() as u64,
    );
    for (path, data) in &made {
        let name = path.trim_start_matches("out/");
        assert_eq!(
            dst.read_file(&format!("in/{name}")).ok().as_ref(),
            Some(data),
            "{name}"
        );
    }
    let w = show(survivor, id);
    let extra: usize = deliveries(survivor, id).values().map(|n| n - 1).sum();
    assert!(extra as u64 <= w["repeats"].as_u64().unwrap(), "{w:#}");
}

/// vsftpd has no MLSD: identities come from SIZE and MDTM, and a file is taken a minute
/// after its facts settle (LIST shows minutes). A file whose LIST date flips from `Mon dd
/// hh:mm` to the year form after it was delivered (182 days old) is asked again and not
/// delivered again; files dated hours ahead of and behind the clocks are delivered once.
/// Slow: the minute LIST's resolution costs, then the flip.
#[test]
fn a_vsftpd_source_gives_identities_by_size_and_mdtm_and_a_flipped_list_date_does_not_redeliver() {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("out/flip.txt", b"flips soon\n").unwrap();
    src.put_file("out/ahead.txt", b"dated ahead\n").unwrap();
    src.put_file("out/behind.txt", b"dated behind\n").unwrap();
    touch(&src, "out/ahead.txt", "+5 hours");
    touch(&src, "out/behind.txt", "-7 hours");
    // vsftpd shows the year instead of the time for a file older than 182 days.
    let flip_at = 182 * 24 * 3600 - 80;
    touch(&src, "out/flip.txt", &format!("-{flip_at} seconds"));
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "0s"}),
    );
    let w = wait_for(&d, id, Duration::from_secs(120), "three files", |w| {
        w["delivered"].as_u64() == Some(3)
    });
    let polls = w["polls"].as_u64().unwrap();
    // Past the flip (80 s after the touch), and some polls more.
    let flip = String::from_utf8(
        Command::new("ls")
            .arg("-l")
            .arg(src.path("out/flip.txt"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let line = String::from_utf8(
            Command::new("ls")
                .arg("-l")
                .arg(src.path("out/flip.txt"))
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        if line != flip {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_polls(&d, id, polls + 3, Duration::from_secs(30));
    for name in ["flip.txt", "ahead.txt", "behind.txt"] {
        assert_eq!(copied(&d, id, name), 1, "{name}: {:#}", show(&d, id));
    }
    assert_eq!(dst.read_file("in/flip.txt").unwrap(), b"flips soon\n");
}

/// The same content, untouched, across a hundred polls of a watch: delivered once.
#[test]
fn unchanged_content_is_delivered_once_across_a_hundred_polls() {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    for i in 0..5 {
        src.put_file(&format!("out/still{i}.dat"), &payload(900 + i, i as u8))
            .unwrap();
    }
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "1s"}),
    );
    let w = wait_for(&d, id, Duration::from_secs(200), "a hundred polls", |w| {
        w["polls"].as_u64().unwrap_or(0) >= 100 && w["current_job"].is_null()
    });
    assert_eq!(w["delivered"], 5, "{w:#}");
    let per_name = deliveries(&d, id);
    assert_eq!(per_name.len(), 5, "{per_name:?}");
    assert!(per_name.values().all(|n| *n == 1), "{per_name:?}");
    assert_eq!(w["repeats"], 0, "{w:#}");
}
