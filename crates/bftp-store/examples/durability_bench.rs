//! Rough figures for the store's durability cost, printed as text:
//!
//! 1. the disk: small write + fdatasync/fsync in a loop (the ceiling for one writer);
//! 2. durable submits per second with 1 and 16 threads (group commit shares flushes);
//! 3. 100,000 queued jobs: disk size, reopen (with verification) time, query times and
//!    the RSS of a process that opened them.
//!
//! `cargo run --release -p bftp-store --example durability_bench [-- --jobs N --dir DIR]`
//! (`--keep DIR` keeps the filled store; `--reopen DIR [--cache-mib N]` measures one alone)
//! DIR must be on the disk to measure (default: a temporary directory).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bftp_core::{DestCommand, Disposition, FtpParams, RetryPolicy, Timestamp};
use bftp_store::{
    JobFilter, JobStore, KeyHash, NewJob, NewMember, RequestKey, Sealed, SealedEndpoint,
    SealedSpec, SledStore, StoreOptions,
};

fn job(i: u64) -> NewJob {
    let ep = |host: &str, path: String| SealedEndpoint {
        host: host.into(),
        port: 21,
        user: "transfer-user".into(),
        password: Some(Sealed(vec![0x5a; 12 + 16 + 20])),
        acct: None,
        path,
        tls: Default::default(),
    };
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&i.to_be_bytes());
    key[8] = 0xee;
    NewJob {
        watch: None,
        owner_uid: 1000 + (i % 50) as u32,
        spec: SealedSpec {
            source: ep(
                "source.example.org",
                format!("/pub/data/2026/11/30/file-{i:08}.dat"),
            ),
            destination: Some(ep("destination.example.net", "/incoming/".into())),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams::default(),
            start_at: Timestamp(1_796_040_000_000 + i * 1000),
            retry: RetryPolicy::default(),
            notify: vec!["someone@example.org".into()],
            keyword_present: true,
            proof: None,
            recursive: false,
            data_path: None,
        },
        keyword_hash: Some(KeyHash([(i % 200) as u8; 32])),
        request: Some(RequestKey {
            key_hash: KeyHash(key),
            fingerprint: KeyHash([0x33; 32]),
        }),
        created_at: Timestamp(1_796_040_000_000),
        members: vec![NewMember {
            name: format!("file-{i:08}.dat"),
            size: None,
            modified: None,
            refused: None,
        }],
    }
}

fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .map(|e| {
                    let p = e.path();
                    if p.is_dir() {
                        dir_size(&p)
                    } else {
                        e.metadata().map(|m| m.len()).unwrap_or(0)
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn raw_fsync(dir: &Path) {
    let path = dir.join("fsync-probe");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let n = 300;
    for (name, full) in [("fdatasync", false), ("fsync", true)] {
        let t = Instant::now();
        for i in 0..n {
            f.write_all_at(&[i as u8; 128], 0).unwrap();
            if full {
                f.sync_all().unwrap()
            } else {
                f.sync_data().unwrap()
            }
        }
        let el = t.elapsed();
        println!(
            "raw 128-byte overwrite + {name:9}: {:7.0} /s ({:.2} ms each)",
            n as f64 / el.as_secs_f64(),
            el.as_secs_f64() * 1000.0 / n as f64
        );
    }
    let t = Instant::now();
    let mut a = OpenOptions::new().append(true).open(&path).unwrap();
    for i in 0..n {
        a.write_all(&[i as u8; 512]).unwrap();
        a.sync_data().unwrap();
    }
    let el = t.elapsed();
    println!(
        "raw 512-byte append    + fdatasync: {:7.0} /s ({:.2} ms each)",
        n as f64 / el.as_secs_f64(),
        el.as_secs_f64() * 1000.0 / n as f64
    );
    std::fs::remove_file(&path).unwrap();
}

fn submits(dir: &Path, threads: u64, per_thread: u64, first: u64) -> u64 {
    let store = Arc::new(SledStore::open(dir, StoreOptions::default()).unwrap());
    let f0 = store.flush_count();
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|k| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut worst = Duration::ZERO;
                for i in 0..per_thread {
                    let s = Instant::now();
                    store.submit(job(first + k * per_thread + i)).unwrap();
                    worst = worst.max(s.elapsed());
                }
                worst
            })
        })
        .collect();
    let worst = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap_or_default();
    let el = t.elapsed();
    let n = threads * per_thread;
    let flushes = store.flush_count() - f0;
    println!(
        "durable submits, {threads:2} thread(s): {:7.0} /s  ({n} submits, {flushes} flushes, {:.1} submits/flush, worst latency {:.1} ms)",
        n as f64 / el.as_secs_f64(),
        n as f64 / flushes.max(1) as f64,
        worst.as_secs_f64() * 1000.0
    );
    first + n
}

fn print_rss(when: &str) {
    let (rss, hwm) = rss_kib();
    println!(
        "  RSS {when:34} {:6.1} MiB (peak {:6.1} MiB)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
}

/// Phase run in a fresh process so that its RSS is its own.
fn reopen(dir: &Path, cache_mib: u64) {
    let t = Instant::now();
    let opts = StoreOptions {
        cache_capacity_bytes: cache_mib << 20,
        verify_on_open: false,
        ..Default::default()
    };
    let store = SledStore::open(dir, opts).unwrap();
    println!(
        "reopen (cache_capacity {cache_mib} MiB): {:.2} s",
        t.elapsed().as_secs_f64()
    );
    print_rss("after open");
    // What the scheduler does all day: due jobs, read them, count for metrics.
    for _ in 0..3 {
        let due = store
            .due(Timestamp(1_796_040_000_000 + 50_000_000), 1000)
            .unwrap();
        for (_, id) in &due {
            store.get(*id).unwrap();
            store.members(*id).unwrap();
        }
        store.count_by_state().unwrap();
        store.next_due().unwrap();
    }
    print_rss("after 3 scheduler rounds");
    for uid in 1000..1050 {
        store
            .list(&JobFilter {
                owner: Some(uid),
                limit: Some(100),
                ..Default::default()
            })
            .unwrap();
    }
    print_rss("after status of 50 users");
    let t = Instant::now();
    let v = store.verify().unwrap();
    println!(
        "verify ({} jobs, {} members, {} history, {} index entries, {:.1} MiB of keys and values): {:.2} s",
        v.jobs, v.members, v.history, v.index_entries, v.bytes as f64 / (1 << 20) as f64, t.elapsed().as_secs_f64()
    );
    print_rss("after verify (reads everything)");
    let time = |what: &str, f: &dyn Fn() -> usize| {
        let t = Instant::now();
        let n = f();
        println!(
            "  {what:38} {n:7} in {:7.1} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
    };
    time("count_by_state (queued)", &|| {
        store.count_by_state().unwrap().queued as usize
    });
    time("due(now, 1000)", &|| {
        store
            .due(Timestamp(1_796_040_000_000 + 5_000_000), 1000)
            .unwrap()
            .len()
    });
    time("next_due", &|| store.next_due().unwrap().is_some() as usize);
    time("list owner=1007", &|| {
        store
            .list(&JobFilter {
                owner: Some(1007),
                ..Default::default()
            })
            .unwrap()
            .len()
    });
    time("list keyword (1 of 200)", &|| {
        store
            .list(&JobFilter {
                keyword_hash: Some(KeyHash([7; 32])),
                ..Default::default()
            })
            .unwrap()
            .len()
    });
    print_rss("after queries");
    time("list all (holds every job in memory)", &|| {
        store.list(&JobFilter::default()).unwrap().len()
    });
    print_rss("after list all");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let cache_mib: u64 = arg("--cache-mib")
        .map(|n| n.parse().unwrap())
        .unwrap_or(StoreOptions::default().cache_capacity_bytes >> 20);
    if let Some(dir) = arg("--reopen") {
        reopen(Path::new(&dir), cache_mib);
        return;
    }
    let jobs: u64 = arg("--jobs").map(|n| n.parse().unwrap()).unwrap_or(100_000);
    let tmp = tempfile::tempdir_in(
        arg("--dir")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
    )
    .unwrap();
    println!("directory: {}", tmp.path().display());
    raw_fsync(tmp.path());

    let store_dir = tmp.path().join("store");
    let mut next = submits(&store_dir, 1, 500, 0);
    next = submits(&store_dir, 16, 100, next);
    next = submits(&store_dir, 64, 50, next);

    if jobs > next {
        let t = Instant::now();
        let opts = StoreOptions {
            cache_capacity_bytes: cache_mib << 20,
            ..Default::default()
        };
        let store = Arc::new(SledStore::open(&store_dir, opts).unwrap());
        let per = (jobs - next).div_ceil(16);
        let hs: Vec<_> = (0..16)
            .map(|k| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..per {
                        store.submit(job(next + k * per + i)).unwrap();
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        let total = next + 16 * per;
        println!(
            "filled to {total} queued jobs in {:.1} s; sled size_on_disk {:.1} MiB, directory {:.1} MiB",
            t.elapsed().as_secs_f64(),
            store.size_on_disk().unwrap() as f64 / (1 << 20) as f64,
            dir_size(&store_dir) as f64 / (1 << 20) as f64
        );
        let (rss, hwm) = rss_kib();
        println!(
            "  RSS of the filling process: {:.1} MiB (peak {:.1} MiB)",
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
    std::io::stdout().flush().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--reopen")
        .arg(&store_dir)
        .args(["--cache-mib", &cache_mib.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    if let Some(keep) = arg("--keep") {
        std::fs::rename(&store_dir, &keep).unwrap();
        println!("store kept in {keep}");
    }
}
