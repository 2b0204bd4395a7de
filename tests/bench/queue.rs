//! Benchmark of the durable queue (issue 2): run with
//!   cargo build --release --bins && cargo run --release -p bftp-tests --bin bench-queue
//! It starts the real release bftpd on a temporary state directory and prints:
//! - the raw write+fdatasync rate of the same disk (the ceiling for durable acknowledgements),
//! - durable submits/s through the socket with 1 client and with 16 concurrent clients,
//! - p50/p99 of `status` (GET one job) with 10,000 jobs queued,
//! - bftpd's RSS with 100,000 queued jobs, and its time from start to ready.
//!
//! `BENCH_JOBS` overrides the 100,000 (for a quick run).

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, Bftpd};

fn raw_fsync_rate(dir: &Path, dur: Duration) -> f64 {
    let path = dir.join("fsync-probe");
    let f = std::fs::File::create(&path).unwrap();
    let buf = [0x5au8; 512];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        f.write_at(&buf, (n % 64) * 512).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let _ = std::fs::remove_file(&path);
    n as f64 / start.elapsed().as_secs_f64()
}

static KEY: AtomicU64 = AtomicU64::new(0);

fn submit_one(sock: &Path) -> u64 {
    let k = KEY.fetch_add(1, Ordering::Relaxed);
    let body = format!(
        r#"{{"source":{{"host":"127.0.0.1","port":2121,"user":"u","password":"p","path":"pub/file-{k}.bin"}},"destination":{{"host":"127.0.0.1","port":2122,"path":"in/"}},"keyword":"kw-{}"}}"#,
        k % 100
    );
    let key = format!("bench-{k}");
    let (status, resp) = http(
        sock,
        "POST",
        "/v1/jobs",
        Some(&body),
        &[("Idempotency-Key", &key)],
    )
    .unwrap();
    assert_eq!(status, 201, "{resp}");
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    v["job"]["id"].as_u64().unwrap()
}

/// Submits with `clients` threads for `dur` (or until `count` jobs), returning (jobs, seconds).
fn submit_load(sock: &Path, clients: usize, dur: Duration, count: Option<u64>) -> (u64, f64) {
    let done = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| loop {
                if start.elapsed() >= dur {
                    break;
                }
                if let Some(c) = count {
                    if done.fetch_add(1, Ordering::Relaxed) >= c {
                        break;
                    }
                    submit_one(sock);
                } else {
                    submit_one(sock);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let n = match count {
        Some(c) => done.load(Ordering::Relaxed).min(c),
        None => done.load(Ordering::Relaxed),
    };
    (n, start.elapsed().as_secs_f64())
}

fn rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb / 1024.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    std::env::set_var(
        "BFTP_TEST_PROFILE",
        std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "release".into()),
    );
    let total: u64 = std::env::var("BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut d = Bftpd::start_with(|dir| {
        Bftpd::default_config(dir).replace("level = \"debug\"", "level = \"warn\"")
    })
    .unwrap();
    let sock = d.socket().to_path_buf();
    let out = &mut std::io::stdout();

    let raw = raw_fsync_rate(&d.state_dir(), Duration::from_secs(3));
    writeln!(out, "raw write+fdatasync: {raw:.0}/s").unwrap();

    let (n1, s1) = submit_load(&sock, 1, Duration::from_secs(5), None);
    let r1 = n1 as f64 / s1;
    writeln!(
        out,
        "durable submits, 1 client:   {r1:.0}/s ({:.2}x raw fsync)",
        r1 / raw
    )
    .unwrap();
    let (n16, s16) = submit_load(&sock, 16, Duration::from_secs(5), None);
    let r16 = n16 as f64 / s16;
    writeln!(
        out,
        "durable submits, 16 clients: {r16:.0}/s ({:.2}x raw fsync)",
        r16 / raw
    )
    .unwrap();

    let queued = n1 + n16;
    if queued < 10_000 {
        submit_load(&sock, 16, Duration::from_secs(3600), Some(10_000 - queued));
    }
    let mut lat = Vec::new();
    for i in 0..2_000u64 {
        let id = 1 + (i * 7919) % 10_000;
        let t = Instant::now();
        let (st, _) = http(&sock, "GET", &format!("/v1/jobs/{id}"), None, &[]).unwrap();
        lat.push(t.elapsed());
        assert_eq!(st, 200);
    }
    lat.sort();
    writeln!(
        out,
        "status with 10,000 queued: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3
    )
    .unwrap();
    let mut kw_lat = Vec::new();
    for i in 0..200u64 {
        let t = Instant::now();
        let (st, _) = http(
            &sock,
            "GET",
            &format!("/v1/jobs?keyword=kw-{}&limit=10", i % 100),
            None,
            &[],
        )
        .unwrap();
        kw_lat.push(t.elapsed());
        assert_eq!(st, 200);
    }
    kw_lat.sort();
    writeln!(
        out,
        "status --keyword (limit 10) with 10,000 queued: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&kw_lat, 0.5).as_secs_f64() * 1e3,
        percentile(&kw_lat, 0.99).as_secs_f64() * 1e3
    )
    .unwrap();

    let have = 10_000.max(queued);
    if total > have {
        let t = Instant::now();
        let (n, _) = submit_load(&sock, 32, Duration::from_secs(3600), Some(total - have));
        writeln!(
            out,
            "filled to {} jobs in {:.1} s",
            have + n,
            t.elapsed().as_secs_f64()
        )
        .unwrap();
    }
    writeln!(
        out,
        "RSS with {total} queued (after filling): {:.1} MiB",
        rss_mib(d.pid().unwrap())
    )
    .unwrap();
    d.terminate(Duration::from_secs(30)).unwrap();
    let t = Instant::now();
    d.launch().unwrap();
    let ready = t.elapsed();
    writeln!(
        out,
        "start to ready with {total} queued: {:.0} ms",
        ready.as_secs_f64() * 1e3
    )
    .unwrap();
    for i in 0..100u64 {
        let (st, _) = http(
            &sock,
            "GET",
            &format!("/v1/jobs/{}", 1 + i * 997 % total),
            None,
            &[],
        )
        .unwrap();
        assert_eq!(st, 200);
    }
    writeln!(
        out,
        "RSS with {total} queued (fresh start, 100 reads): {:.1} MiB",
        rss_mib(d.pid().unwrap())
    )
    .unwrap();
    let du: u64 = walk_size(&d.state_dir());
    writeln!(
        out,
        "state directory size: {:.1} MiB",
        du as f64 / 1048576.0
    )
    .unwrap();
}

fn walk_size(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            n += if m.is_dir() {
                walk_size(&e.path())
            } else {
                m.len()
            };
        }
    }
    n
}
