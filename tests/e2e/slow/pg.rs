//! The slow group of the shared store (`slow::pg::`): three bftpd nodes on one PostgreSQL
//! database, one of them killed with SIGKILL while it copies, again and again. Every job a
//! killed node ran is taken over by another node and finishes with every file exactly right
//! (an append never doubled); the time from the kill to the takeover is measured.

use std::time::{Duration, Instant};

use bftp_tests::daemon::Bftpd;
use bftp_tests::files::content;
use bftp_tests::jobs::{kinds, status, submit};
use bftp_tests::nodes::{node_config_lease, node_config_plus};
use bftp_tests::postgres;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

/// Kills in the kill test. It runs with a 3 s lease, which on 2 cores loaded by the whole
/// slow group leaves the heartbeat room; `BFTP_SLOW_PG_LEASE` (seconds) and
/// `BFTP_SLOW_PG_KILLS` run it with another, for a measurement of the takeover time with the
/// default 10 s lease (a kill then costs about a lease). Two races made a live node take
/// its own jobs for lost, both fixed and tested in `pg_leases`: a job started between two
/// of the heartbeat's queries, and a job the node had just finished or requeued (its epoch
/// moved on in the database before the node let it go).
const KILLS: usize = 30;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
const NODES: usize = 3;
/// One file per job, copied at 1 MB/s: each job runs about a second and a half.
const FILE_LEN: usize = 1_500_000;

fn prefix(name: &str) -> Vec<u8> {
    format!("PREFIX of {name}\n").into_bytes()
}

struct Submitted {
    id: u64,
    name: String,
    append: bool,
    data: Vec<u8>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
fn kill9_of_a_node_mid_job_repeated_its_jobs_are_taken_over_and_finish_correct() {
    let url = postgres::fresh_database();
    let src = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            max_rate: Some(1_000_000),
            passive_ports: 128,
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(
        ServerKind::PureFtpd,
        FtpOptions {
            passive_ports: 128,
            ..FtpOptions::default()
        },
    )
    .unwrap();
    dst.mkdir("in").unwrap();
    let extra = "[scheduler]\nmax_running_jobs = 2\n[ftp]\nparallel_pairs = 1\n";
    let lease_s = knob("BFTP_SLOW_PG_LEASE", 3);
    let kills_wanted = knob("BFTP_SLOW_PG_KILLS", KILLS as u64) as usize;
    let lease = format!("{lease_s}s");
    let config = |node: &str, key: Option<&std::path::Path>| {
        node_config_lease(&url, node, key, extra, &lease)
    };
    let mut nodes: Vec<Bftpd> = Vec::new();
    nodes.push(Bftpd::start_with(config("n0", None)).unwrap());
    let key = nodes[0].state_dir().join("secret.key");
    for i in 1..NODES {
        nodes.push(Bftpd::start_with(config(&format!("n{i}"), Some(&key))).unwrap());
    }
    let retry = [
        "--retry-first",
        "1s",
        "--retry-cap",
        "2s",
        "--max-attempts",
        "1000",
        "--deadline",
        "1h",
    ];
    let mut jobs: Vec<Submitted> = Vec::new();
    let submit_one = |nodes: &[Bftpd], jobs: &mut Vec<Submitted>| {
        let n = jobs.len();
        let name = format!("j{n:03}.bin");
        let append = n % 3 == 2;
        let data = content(&name, FILE_LEN);
        src.put_file(&format!("out/{name}"), &data).unwrap();
        let mut args: Vec<&str> = retry.to_vec();
        if append {
            dst.put_file(&format!("in/{name}"), &prefix(&name)).unwrap();
            args.extend(["--dest-command", "append"]);
        }
        let id = submit(
            &nodes[n % nodes.len()],
            &src,
            &dst,
            &format!("out/{name}"),
            &format!("in/{name}"),
            &args,
        );
        jobs.push(Submitted {
            id,
            name,
            append,
            data,
        });
    };
    for _ in 0..6 {
        submit_one(&nodes, &mut jobs);
    }

    let started = Instant::now();
    let mut open: Vec<usize> = (0..jobs.len()).collect();
    let mut takeovers: Vec<Duration> = Vec::new();
    let mut kills = 0;
    let mut finished_first = 0;
    let mut uncertain = 0;
    let mut victim = 0;
    let kill_limit = Duration::from_secs(240.max(kills_wanted as u64 * (lease_s + 6)));
    while kills < kills_wanted {
        assert!(
            started.elapsed() < kill_limit,
            "only {kills} kills in {kill_limit:?}"
        );
        // Work for everyone: a few jobs queued or running at all times.
        let live = (victim + 1) % NODES;
        open.retain(|&i| {
            let v = status(&nodes[live], jobs[i].id);
            v["state"] == "queued" || v["state"] == "running"
        });
        while open.len() < 6 {
            submit_one(&nodes, &mut jobs);
            open.push(jobs.len() - 1);
        }
        // One of the victim's running jobs, seen from another node just before the kill.
        let running = open.iter().map(|&i| &jobs[i]).find_map(|j| {
            let v = status(&nodes[live], j.id);
            (v["state"] == "running" && v["node"] == format!("n{victim}")).then(|| {
                let taken = kinds(&v).iter().filter(|k| *k == "taken-over").count();
                (j.id, taken, v["attempts"].as_u64())
            })
        });
        let Some((id, before, attempts)) = running else {
            victim = (victim + 1) % NODES;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        nodes[victim].kill9();
        let killed = Instant::now();
        kills += 1;
        let deadline = Instant::now() + Duration::from_secs(30 + 3 * lease_s);
        loop {
            let v = status(&nodes[live], id);
            let taken = kinds(&v).iter().filter(|k| *k == "taken-over").count();
            if taken > before {
                takeovers.push(killed.elapsed());
                break;
            }
            if v["state"] == "finished" {
                // It ended in the moment between the look and the kill.
                assert_eq!(v["attempts"].as_u64(), attempts, "job {id}: {v:#}");
                finished_first += 1;
                break;
            }
            assert!(Instant::now() < deadline, "job {id} not taken over: {v:#}");
            std::thread::sleep(Duration::from_millis(20));
        }
        nodes[victim].launch().unwrap();
        victim = (victim + 1) % NODES;
    }
    let kill_phase = started.elapsed();

    // Everything drains, every file exactly right.
    let deadline = Instant::now() + Duration::from_secs(180);
    for j in &jobs {
        let v = loop {
            let v = status(&nodes[0], j.id);
            if v["state"] == "finished" {
                break v;
            }
            assert!(Instant::now() < deadline, "job {} not final: {v:#}", j.id);
            std::thread::sleep(Duration::from_millis(100));
        };
        let got = dst.read_file(&format!("in/{}", j.name)).unwrap();
        let want = if j.append {
            [prefix(&j.name), j.data.clone()].concat()
        } else {
            j.data.clone()
        };
        if v["outcome"] == "succeeded" {
            assert!(
                got == want,
                "job {} ({}): {} bytes, want {}",
                j.id,
                if j.append { "append" } else { "replace" },
                got.len(),
                want.len()
            );
        } else {
            // Only an append cut off by a kill may end so: `uncertain`, its file the prefix
            // and at most the content once, never more (the append is not repeated blindly).
            assert!(j.append, "job {}: a replace must succeed: {v:#}", j.id);
            assert_eq!(v["members"][0]["state"], "uncertain", "job {}: {v:#}", j.id);
            assert!(
                got.len() <= want.len()
                    && want.starts_with(&got)
                    && got.starts_with(&prefix(&j.name)),
                "job {}: {} bytes, not the prefix and part of the content",
                j.id,
                got.len()
            );
            uncertain += 1;
        }
    }
    assert!(
        takeovers.len() >= kills_wanted * 2 / 3,
        "{} takeovers in {kills} kills ({finished_first} jobs finished just before theirs)",
        takeovers.len()
    );
    // A live node never loses a lease: every takeover is of a job a killed node ran (at most
    // two per kill: max_running_jobs).
    let all_takeovers: usize = jobs
        .iter()
        .map(|j| {
            kinds(&status(&nodes[0], j.id))
                .iter()
                .filter(|k| *k == "taken-over")
                .count()
        })
        .sum();
    let logs: String = nodes.iter().map(|n| n.logs()).collect();
    let lost_alive = logs.matches("lease lost: stopping").count();
    eprintln!(
        "{all_takeovers} takeovers in all; a live node lost {lost_alive} leases; \
         {uncertain} appends cut off by a kill ended uncertain"
    );
    assert!(
        all_takeovers <= 2 * kills,
        "{all_takeovers} takeovers, {kills} kills"
    );
    let lost_lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("lease") && !l.contains("DEBUG"))
        .collect();
    assert_eq!(
        lost_alive,
        0,
        "a live node lost a lease:\n{}",
        lost_lines.join("\n")
    );
    takeovers.sort();
    let (p50, p99) = (percentile(&takeovers, 0.5), percentile(&takeovers, 0.99));
    eprintln!(
        "{kills} kills in {kill_phase:?}, {} jobs, {} takeovers: p50 {p50:?}, p99 {p99:?}, max {:?} (lease {lease_s} s, poll 200 ms)",
        jobs.len(),
        takeovers.len(),
        takeovers.last().unwrap()
    );
    assert!(
        p99 < Duration::from_secs(3 * lease_s),
        "takeover p99 {p99:?} with a {lease_s} s lease"
    );
}

/// A file of a job: source path, destination path (empty for a delete), bytes.
type FileCase = (String, String, Vec<u8>);

/// Three nodes on one database drain 300 mixed jobs (replace, append, unique, move, delete,
/// and wildcard jobs of three files) submitted round-robin to the three: every job succeeds,
/// every destination holds exactly its bytes (an append once, a unique copy once in its
/// directory, and the destination's transfer log shows one upload of each unique copy),
/// every moved or deleted source is gone and every other source is still there.
#[test]
fn three_nodes_drain_300_mixed_jobs_with_every_member_correct() {
    const JOBS: usize = 300;
    let url = postgres::fresh_database();
    let opts = FtpOptions {
        passive_ports: 400,
        ..FtpOptions::default()
    };
    let src = FtpServer::start(ServerKind::Vsftpd, opts.clone()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, opts).unwrap();
    for d in ["r", "a", "m", "w", "u"] {
        dst.mkdir(d).unwrap();
    }
    let extra = "[scheduler]\nmax_running_jobs = 6\n";
    let mut nodes: Vec<Bftpd> =
        vec![Bftpd::start_with(node_config_plus(&url, "n0", None, extra)).unwrap()];
    let key = nodes[0].state_dir().join("secret.key");
    for i in 1..NODES {
        nodes.push(
            Bftpd::start_with(node_config_plus(&url, &format!("n{i}"), Some(&key), extra)).unwrap(),
        );
    }
    let retry = [
        "--retry-first",
        "1s",
        "--retry-cap",
        "2s",
        "--max-attempts",
        "50",
    ];
    let mut jobs: Vec<(u64, usize, Vec<FileCase>)> = Vec::new();
    let started = Instant::now();
    for k in 0..JOBS {
        let d = &nodes[k % NODES];
        let kind = k % 5;
        let one = |dir: &str| {
            let (s, t) = (format!("out/{dir}/{k}.bin"), format!("{dir}/{k}.bin"));
            let data = content(&s, 20_000 + k * 7);
            src.put_file(&s, &data).unwrap();
            (s, t, data)
        };
        let (id, files) = match kind {
            1 if k % 10 == 1 => {
                // A unique copy into a directory of its own: the server names the file.
                let f = one("u");
                dst.mkdir(&format!("u/{k}")).unwrap();
                let mut args = retry.to_vec();
                args.extend(["--dest-command", "unique"]);
                let t = format!("u/{k}/");
                (submit(d, &src, &dst, &f.0, &t, &args), vec![(f.0, t, f.2)])
            }
            0 | 1 => {
                let f = one("r");
                (submit(d, &src, &dst, &f.0, &f.1, &retry), vec![f])
            }
            2 => {
                let f = one("a");
                dst.put_file(&f.1, &prefix(&f.1)).unwrap();
                let mut args = retry.to_vec();
                args.extend(["--dest-command", "append"]);
                (submit(d, &src, &dst, &f.0, &f.1, &args), vec![f])
            }
            3 if k % 10 == 3 => {
                let f = one("m");
                let mut args = retry.to_vec();
                args.extend(["--disposition", "move"]);
                (submit(d, &src, &dst, &f.0, &f.1, &args), vec![f])
            }
            3 => {
                let s = format!("out/d/{k}.bin");
                src.put_file(&s, b"to be deleted").unwrap();
                let u = src.url(&s);
                let mut args = vec!["--json", "submit", &u, "--disposition", "delete"];
                args.extend_from_slice(&retry);
                let o = d.bftp_env(None, &args, &[("BFTP_SOURCE_PASSWORD", src.password())]);
                assert_eq!(o.status.code(), Some(0), "{}", bftp_tests::daemon::text(&o));
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                (
                    v["job"]["id"].as_u64().unwrap(),
                    vec![(s, String::new(), vec![])],
                )
            }
            _ => {
                let files: Vec<_> = (0..3)
                    .map(|i| {
                        let s = format!("out/w{k}/f{i}.dat");
                        let data = content(&s, 10_000 + i * 11);
                        src.put_file(&s, &data).unwrap();
                        (s, format!("w/{k}-f{i}.dat"), data)
                    })
                    .collect();
                dst.mkdir(&format!("w/{k}")).unwrap();
                let id = submit(
                    d,
                    &src,
                    &dst,
                    &format!("out/w{k}/*.dat"),
                    &format!("w/{k}/"),
                    &retry,
                );
                let files = files
                    .into_iter()
                    .enumerate()
                    .map(|(i, (s, _, data))| (s, format!("w/{k}/f{i}.dat"), data))
                    .collect();
                (id, files)
            }
        };
        jobs.push((id, kind, files));
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    for (id, kind, files) in &jobs {
        let v = loop {
            let v = status(&nodes[0], *id);
            if v["state"] == "finished" {
                break v;
            }
            assert!(Instant::now() < deadline, "job {id} not final: {v:#}");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(v["outcome"], "succeeded", "job {id}: {v:#}");
        for (s, t, data) in files {
            match kind {
                1 if t.starts_with("u/") => {
                    let name = bftp_tests::jobs::stored_as(&v["members"][0])
                        .unwrap_or_else(|| panic!("job {id}: no stored name: {v:#}"));
                    let dir: Vec<_> = std::fs::read_dir(dst.path(t))
                        .unwrap()
                        .map(|e| e.unwrap().file_name())
                        .collect();
                    assert_eq!(dir.len(), 1, "{t}: one STOU upload, not {dir:?}");
                    assert!(
                        dst.read_file(&format!("{t}{name}")).unwrap() == *data,
                        "{t}{name}"
                    );
                    assert!(src.path(s).exists(), "{s}");
                }
                3 if t.is_empty() => assert!(!src.path(s).exists(), "{s} not deleted"),
                3 => {
                    assert!(!src.path(s).exists(), "{s} not moved");
                    assert!(dst.read_file(t).unwrap() == *data, "{t}");
                }
                2 => {
                    let want = [prefix(t), data.clone()].concat();
                    let got = dst.read_file(t).unwrap();
                    if got != want {
                        for (i, n) in nodes.iter().enumerate() {
                            let _ = std::fs::write(format!("/tmp/slowpg-{i}.log"), n.logs());
                        }
                    }
                    assert!(
                        got == want,
                        "{t}: not prefix + content once: {} bytes, want {} (prefix {}): {v:#}",
                        got.len(),
                        want.len(),
                        prefix(t).len()
                    );
                    assert!(src.path(s).exists(), "{s}");
                }
                _ => {
                    assert!(dst.read_file(t).unwrap() == *data, "{t}");
                    assert!(src.path(s).exists(), "{s}");
                }
            }
        }
    }
    // The destination's own log: each unique copy uploaded once (a STOU sent twice would
    // show as a second upload into its directory, even one that was deleted afterwards).
    let entries = dst.xferlog_entries().unwrap();
    let mut stou: std::collections::HashMap<String, usize> = Default::default();
    for e in entries.iter().filter(|e| e.path.starts_with("/u/")) {
        let dir = e.path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        *stou.entry(dir).or_default() += 1;
    }
    let uniques = jobs
        .iter()
        .filter(|(_, _, f)| f[0].1.starts_with("u/"))
        .count();
    assert_eq!(
        stou.len(),
        uniques,
        "a unique copy the log does not show: {stou:?}"
    );
    assert!(
        stou.values().all(|&n| n == 1),
        "a STOU ran twice: {:?}",
        stou.iter().filter(|(_, &n)| n > 1).collect::<Vec<_>>()
    );
    let logs: Vec<String> = nodes.iter().map(|n| n.logs()).collect();
    let started_per_node: Vec<usize> = logs
        .iter()
        .map(|l| l.matches("attempt started").count())
        .collect();
    eprintln!(
        "{JOBS} jobs drained by {NODES} nodes in {:?}; attempts started per node {started_per_node:?}",
        started.elapsed()
    );
    assert!(
        started_per_node.iter().all(|&n| n > 0),
        "every node ran jobs: {started_per_node:?}"
    );
}

/// Issue 27, item 1, repeated (`BFTP_SLOW_PG_ROUNDS`, default 10): a node paused with
/// SIGSTOP while it copies a multi-file replace job loses it to another node, which finishes
/// it; once the paused node runs again, before its heartbeat has looked, it sends nothing:
/// neither server's own log shows a command after SIGCONT other than ABOR or QUIT, and every
/// destination file stays equal to its source (`pg_nodes::paused_node_round`).
#[test]
fn a_paused_node_resumed_touches_no_file_of_the_job_repeated() {
    let rounds = knob("BFTP_SLOW_PG_ROUNDS", 10) as usize;
    let cluster = bftp_tests::nodes::PausedCluster::start();
    let mut taken: Vec<Duration> = (0..rounds)
        .map(|round| bftp_tests::nodes::paused_node_round(&cluster, round))
        .collect();
    taken.sort();
    eprintln!(
        "{rounds} rounds; taken over after the pause: p50 {:?}, max {:?} (lease 3 s)",
        percentile(&taken, 0.5),
        percentile(&taken, 1.0)
    );
}
