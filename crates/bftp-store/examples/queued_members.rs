//! What a queued job's ledger costs the sled store, per member: the store's share of a
//! queued job's CPU beyond `bftp transfer` of the same files, without FTP servers. It runs
//! the calls a queued 2,000-file job makes (submit and start, the freeze of its listing, the
//! grouped records in 15 transactions as a 100 ms pace gives on loopback, the conclusion's
//! read and finish, the final view's read) and prints each phase's CPU (every thread of the
//! process, from /proc) and wall time.
//!
//! `cargo run --release -p bftp-store --example queued_members [-- MEMBERS [BATCHES]]` (2000
//! members and 15 grouped transactions by default;
//! the store in a temporary directory under /tmp).

use std::time::Instant;

use bftp_core::{
    DestCommand, Disposition, FtpParams, JobEvent, JobOutcome, MemberState, RetryPolicy, Timestamp,
};
use bftp_store::{
    JobStore, LastReply, MemberUpdate, NewJob, NewMember, Sealed, SealedEndpoint, SealedSpec,
    SledStore, StoreOptions,
};

/// CPU seconds of every live thread of this process (schedstat: nanoseconds on a CPU).
fn cpu() -> f64 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 1e9
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(2000);
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let store = SledStore::open(dir.path(), StoreOptions::default()).unwrap();
    let ep = |host: &str, path: &str| SealedEndpoint {
        host: host.into(),
        port: 21,
        user: "bftp-ftp".into(),
        password: Some(Sealed(vec![0x5a; 48])),
        acct: None,
        path: path.into(),
        tls: Default::default(),
    };
    let now = Timestamp(1_796_040_000_000);
    let job = NewJob {
        watch: None,
        owner_uid: 1000,
        spec: SealedSpec {
            source: ep("127.0.0.2", "/small/*"),
            destination: Some(ep("127.0.0.3", "/dst/")),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams::default(),
            start_at: now,
            retry: RetryPolicy::default(),
            notify: vec![],
            keyword_present: false,
            proof: None,
            recursive: false,
            data_path: None,
        },
        keyword_hash: None,
        request: None,
        created_at: now,
        members: vec![],
    };
    let mut phases = Vec::new();
    let (mut c, mut w) = (cpu(), Instant::now());
    let mut mark = |name: &'static str, phases: &mut Vec<(&'static str, f64, f64)>| {
        let (c2, w2) = (cpu(), Instant::now());
        phases.push((name, c2 - c, (w2 - w).as_secs_f64()));
        c = c2;
        w = w2;
    };
    let id = store.submit(job).unwrap().job().id;
    store
        .apply(id, JobEvent::Start { attempt: 1 }, now, None)
        .unwrap();
    mark("submit+start", &mut phases);
    let members: Vec<NewMember> = (0..n)
        .map(|i| NewMember {
            name: format!("f{i:06}.dat"),
            size: Some(4096),
            modified: Some("20261203091500".into()),
            refused: None,
        })
        .collect();
    store.freeze_members(id, members, now).unwrap();
    mark("freeze", &mut phases);
    let batches: usize = std::env::args()
        .nth(2)
        .map(|a| a.parse().unwrap())
        .unwrap_or(15);
    let per = n / batches + 1;
    let reply = |code, text: &str| {
        Some(LastReply {
            code: Some(code),
            text: text.into(),
        })
    };
    for chunk in (0..n as u32).collect::<Vec<_>>().chunks(per) {
        let ups = chunk
            .iter()
            .map(|&i| {
                (
                    i,
                    MemberUpdate {
                        state: Some(MemberState::Succeeded),
                        attempts: Some(1),
                        bytes: Some(4096),
                        size: Some(4096),
                        source_reply: reply(226, "Transfer complete."),
                        dest_reply: reply(226, "Transfer complete"),
                        detail: Some("4096 bytes; SIZE 4096 on both sides".into()),
                        intent: Some(None),
                        ..Default::default()
                    },
                )
            })
            .collect();
        store.update_members(id, ups, now).unwrap();
    }
    mark("updates", &mut phases);
    let m = store.members(id).unwrap();
    let outcome = JobOutcome::from_members(m.iter().map(|m| &m.state));
    store
        .apply(id, JobEvent::Finish { outcome }, now, None)
        .unwrap();
    mark("conclude", &mut phases);
    let m = store.members(id).unwrap();
    let h = store.history(id).unwrap();
    assert_eq!(m.len(), n);
    assert!(!h.is_empty());
    mark("view", &mut phases);
    let total: f64 = phases.iter().map(|p| p.1).sum();
    for (name, c, w) in &phases {
        println!(
            "{name:<14} cpu {:7.1} ms  wall {:7.1} ms  {:5.1} us/member",
            c * 1e3,
            w * 1e3,
            c * 1e6 / n as f64
        );
    }
    println!(
        "total cpu {:.1} ms, {:.1} us/member",
        total * 1e3,
        total * 1e6 / n as f64
    );
}
