//! Benchmark of the durable queue (issue 2): run with
//!   cargo build --release --bins && cargo run --release -p bftp-tests --bin bench-queue
//! It starts the real release bftpd on a temporary state directory and prints:
//! - the raw write+fdatasync rate of the same disk (the ceiling for durable acknowledgements),
//! - a bare sled transaction+flush loop (with and without the fdatasync the store adds),
//!   `JobStore::submit` alone in process, and `GET /v1/health` on new and kept-alive
//!   connections: the pieces of one client's durable submit, side by side,
//! - durable submits/s through the socket with 1 client (a new connection per request, and
//!   one connection kept alive) and with 16 concurrent clients,
//! - p50/p99 of `status` (GET one job) with 10,000 jobs queued,
//! - bftpd's RSS with 100,000 queued jobs, and its time from start to ready.
//!
//! `BENCH_JOBS` overrides the 100,000 (for a quick run).

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, Bftpd, KeepAlive};

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
    let body = submit_body(k);
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

/// A job due now (the scheduler then runs an attempt of it, which fails at once: nothing
/// listens on its ports, and the attempt's start and requeue are two more commits), or due in
/// an hour (the submit's commit alone).
fn submit_body_at(k: u64, later: bool) -> String {
    let start = if later { r#","start":"in 1h""# } else { "" };
    format!(
        r#"{{"source":{{"host":"127.0.0.1","port":2121,"user":"u","password":"p","path":"pub/file-{k}.bin"}},"destination":{{"host":"127.0.0.1","port":2122,"path":"in/"}},"keyword":"kw-{}"{start}}}"#,
        k % 100
    )
}

fn submit_body(k: u64) -> String {
    submit_body_at(k, false)
}

/// Durable submits per second by one client on one kept-alive connection.
fn submit_keepalive_rate(sock: &Path, dur: Duration, later: bool) -> (u64, f64) {
    let mut c = KeepAlive::open(sock).unwrap();
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < dur {
        let k = KEY.fetch_add(1, Ordering::Relaxed);
        let key = format!("bench-{k}");
        let (status, resp) = c
            .request(
                "POST",
                "/v1/jobs",
                &submit_body_at(k, later),
                &[("Idempotency-Key", &key)],
            )
            .unwrap();
        assert_eq!(status, 201, "{resp}");
        n += 1;
    }
    (n, start.elapsed().as_secs_f64())
}

/// `GET /v1/health` per second: a new connection per request, or one kept alive.
fn health_rate(sock: &Path, dur: Duration, keep_alive: bool) -> f64 {
    let mut c = keep_alive.then(|| KeepAlive::open(sock).unwrap());
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        let status = match &mut c {
            Some(c) => c.request("GET", "/v1/health", "", &[]).unwrap().0,
            None => http(sock, "GET", "/v1/health", None, &[]).unwrap().0,
        };
        assert_eq!(status, 200);
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The store alone, in this process: `JobStore::submit` of the bench's job (sealed bytes
/// standing in for the password), one writer, no HTTP, no JSON, no sealing.
fn store_submit_rate(dir: &Path, dur: Duration) -> f64 {
    use bftp_core::{
        DestCommand, Disposition, FileStructure, FtpParams, RetryPolicy, Timestamp, TransferMode,
        TransferType,
    };
    use bftp_store::{
        JobStore, KeyHash, NewJob, NewMember, RequestKey, Sealed, SealedEndpoint, SealedSpec,
        SledStore, StoreOptions,
    };
    let store = SledStore::open(dir, StoreOptions::default()).unwrap();
    let endpoint = |port, path: &str| SealedEndpoint {
        host: "127.0.0.1".into(),
        port,
        user: "u".into(),
        password: Some(Sealed(vec![7; 40])),
        acct: None,
        path: path.into(),
        tls: Default::default(),
    };
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&n.to_be_bytes());
        let job = NewJob {
            watch: None,
            owner_uid: 0,
            spec: SealedSpec {
                source: endpoint(2121, &format!("pub/file-{n}.bin")),
                destination: Some(endpoint(2122, "in/")),
                disposition: Disposition::Copy,
                dest_command: DestCommand::Replace,
                params: FtpParams {
                    transfer_type: TransferType::Image,
                    mode: TransferMode::Stream,
                    structure: FileStructure::File,
                },
                start_at: Timestamp(1_800_000_000_000),
                retry: RetryPolicy::default(),
                notify: vec![],
                keyword_present: true,
                proof: None,
                recursive: false,
                data_path: None,
            },
            keyword_hash: Some(KeyHash([(n % 100) as u8; 32])),
            request: Some(RequestKey {
                key_hash: KeyHash(h),
                fingerprint: KeyHash([1; 32]),
            }),
            created_at: Timestamp(1_800_000_000_000),
            members: vec![NewMember {
                name: format!("file-{n}.bin"),
                size: None,
                modified: None,
                refused: None,
            }],
        };
        store.submit(job).unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
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
    // The floor under one client's durable submit, piece by piece, on the same disk.
    let sec = Duration::from_secs(3);
    let bare_flush =
        bftp_store::probe::bare_sled_commit_rate(&d.state_dir(), sec, 600, false).unwrap();
    let bare = bftp_store::probe::bare_sled_commit_rate(&d.state_dir(), sec, 600, true).unwrap();
    let probe_dir = tempfile::Builder::new()
        .prefix("bench-store-")
        .tempdir_in(d.state_dir())
        .unwrap();
    let alone = store_submit_rate(probe_dir.path(), sec);
    drop(probe_dir);
    let health_new = health_rate(&sock, sec, false);
    let health_kept = health_rate(&sock, sec, true);
    let per = |rate: f64| 1e6 / rate;
    writeln!(
        out,
        "bare sled transaction+flush: {bare_flush:.0}/s ({:.0} us)",
        per(bare_flush)
    )
    .unwrap();
    writeln!(out, "bare sled transaction+flush+fdatasync (the store's commit): {bare:.0}/s ({:.0} us, {:.2}x raw)", per(bare), bare / raw).unwrap();
    writeln!(
        out,
        "JobStore::submit alone, in process: {alone:.0}/s ({:.0} us)",
        per(alone)
    )
    .unwrap();
    writeln!(out, "GET /v1/health: new connection {health_new:.0}/s ({:.0} us), kept alive {health_kept:.0}/s ({:.0} us)", per(health_new), per(health_kept)).unwrap();

    let (n1, s1) = submit_load(&sock, 1, Duration::from_secs(5), None);
    let r1 = n1 as f64 / s1;
    writeln!(
        out,
        "durable submits, 1 client:   {r1:.0}/s ({:.0} us; {:.2}x raw fsync, {:.2}x bare sled commit)",
        per(r1),
        r1 / raw,
        r1 / bare
    )
    .unwrap();
    let (nk, sk) = submit_keepalive_rate(&sock, Duration::from_secs(5), false);
    let rk = nk as f64 / sk;
    writeln!(
        out,
        "durable submits, 1 client kept alive: {rk:.0}/s ({:.0} us; {:.2}x raw fsync, {:.2}x bare sled commit)",
        per(rk),
        rk / raw,
        rk / bare
    )
    .unwrap();
    let (nl, sl) = submit_keepalive_rate(&sock, Duration::from_secs(5), true);
    let rl = nl as f64 / sl;
    writeln!(
        out,
        "durable submits, 1 client kept alive, due in an hour (no attempt follows): {rl:.0}/s ({:.0} us; {:.2}x raw fsync, {:.2}x bare sled commit)",
        per(rl),
        rl / raw,
        rl / bare
    )
    .unwrap();
    let nk = nk + nl;
    let (n16, s16) = submit_load(&sock, 16, Duration::from_secs(5), None);
    let r16 = n16 as f64 / s16;
    writeln!(
        out,
        "durable submits, 16 clients: {r16:.0}/s ({:.2}x raw fsync, {:.2}x bare sled commit)",
        r16 / raw,
        r16 / bare
    )
    .unwrap();
    let n1 = n1 + nk;

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
