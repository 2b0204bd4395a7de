//! `max_connections_per_host` over all nodes of one PostgreSQL store (issue 15): three
//! nodes, each with the limit 2, never have more than two sessions open on one server
//! together, as the servers themselves count them.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bftp_tests::daemon::Bftpd;
use bftp_tests::files::content;
use bftp_tests::jobs::{submit, wait_final};
use bftp_tests::nodes::node_config_plus;
use bftp_tests::postgres;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

/// The server-side control sockets of the server on `port` that are not closed yet
/// (every state but LISTEN and TIME_WAIT: a session the client has left but the server
/// has not ended still counts), from `/proc/net/tcp` and `tcp6` (vsftpd takes IPv4 on an
/// IPv6 socket). Each test server has a port of its own. Counted by address pair: the kernel
/// writes those files a page per read and does not hold its socket table still in between, so
/// a socket can be listed twice in one read (seen: one session three times, failing the limit
/// with two sessions open).
fn server_sessions(port: u16) -> usize {
    let want = format!(":{port:04X}");
    let mut sessions = std::collections::HashSet::new();
    for p in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let tcp = std::fs::read_to_string(p).unwrap_or_default();
        for l in tcp.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 3 && f[1].ends_with(&want) && f[3] != "0A" && f[3] != "06" {
                sessions.insert((f[1].to_string(), f[2].to_string()));
            }
        }
    }
    sessions.len()
}

/// The session processes of a proFTPD (its master's children), from `/proc`.
fn session_processes(master: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid ...: the comm may hold spaces, the last ')' ends it.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(master)
        })
        .count()
}

/// Nine jobs of four files each, three submitted to each of three nodes at once, with
/// `max_connections_per_host = 2` on every node: at no moment do the source or the
/// destination have more than two sessions open, counted by the servers' own sockets
/// (sampled every 2 ms) and by proFTPD's session processes; and the limit is reached
/// (the test would show nothing if the jobs never overlapped). Counted per node alone
/// (the slots of all nodes switched off) the servers see up to six.
#[test]
fn three_nodes_keep_max_connections_per_host_together() {
    let url = postgres::fresh_database();
    // 2 MB/s a session: a copy holds its pair for half a second, long enough to be seen.
    let src = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            max_rate: Some(2_000_000),
            host: Ipv4Addr::new(127, 0, 0, 21),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    // Another address: the limit counts per host name, and one per server makes each
    // server's count the limit's.
    let dst = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            host: Ipv4Addr::new(127, 0, 0, 22),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let mut files = Vec::new();
    for j in 0..9 {
        for f in 0..4 {
            let name = format!("j{j}_{f}.bin");
            let data = content(&name, 1_000_000);
            src.put_file(&format!("out/{name}"), &data).unwrap();
            files.push((name, data));
        }
    }
    dst.mkdir("in").unwrap();
    let extra = "[ftp]\nmax_connections_per_host = 2\nparallel_pairs = 2\n";
    let a = Bftpd::start_with(node_config_plus(&url, "s0", None, extra)).unwrap();
    let key = a.state_dir().join("secret.key");
    let b = Bftpd::start_with(node_config_plus(&url, "s1", Some(&key), extra)).unwrap();
    let c = Bftpd::start_with(node_config_plus(&url, "s2", Some(&key), extra)).unwrap();
    let nodes = [&a, &b, &c];

    let stop = AtomicBool::new(false);
    let dst_pid = dst.pid().expect("proFTPD runs");
    let (peaks, ids) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let (mut src_max, mut dst_max, mut proc_max, mut samples) = (0, 0, 0, 0u64);
            while !stop.load(Ordering::SeqCst) {
                src_max = src_max.max(server_sessions(src.port()));
                dst_max = dst_max.max(server_sessions(dst.port()));
                if samples % 10 == 0 {
                    proc_max = proc_max.max(session_processes(dst_pid));
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (src_max, dst_max, proc_max, samples)
        });
        let submits: Vec<_> = (0..9)
            .map(|j| {
                let (node, src, dst) = (nodes[j % 3], &src, &dst);
                s.spawn(move || {
                    (
                        j % 3,
                        submit(node, src, dst, &format!("out/j{j}_*.bin"), "in/", &[]),
                    )
                })
            })
            .collect();
        let ids: Vec<(usize, u64)> = submits.into_iter().map(|h| h.join().unwrap()).collect();
        let started = Instant::now();
        for &(n, id) in &ids {
            let v = wait_final(nodes[n], id, Duration::from_secs(120));
            assert_eq!(v["outcome"], "succeeded", "job {id}: {v:#}");
        }
        eprintln!("nine jobs done in {:?}", started.elapsed());
        for (i, n) in nodes.iter().enumerate() {
            std::fs::write(format!("/tmp/pgslots-{i}.log"), n.logs()).unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        (sampler.join().unwrap(), ids)
    });
    let (src_max, dst_max, proc_max, samples) = peaks;
    eprintln!(
        "{samples} samples: source sessions at most {src_max}, destination {dst_max} \
         (proFTPD session processes at most {proc_max}); jobs {ids:?}"
    );
    for (name, data) in &files {
        assert!(
            dst.read_file(&format!("in/{name}")).unwrap() == *data,
            "{name} differs"
        );
    }
    assert!(
        src_max <= 2 && dst_max <= 2 && proc_max <= 2,
        "over the limit of 2: source {src_max}, destination {dst_max}, proFTPD processes \
         {proc_max}\n--- s0 ---\n{}",
        a.logs()
    );
    assert!(
        src_max == 2 && dst_max == 2,
        "the limit was never reached (source {src_max}, destination {dst_max}): the jobs \
         did not overlap"
    );
}
