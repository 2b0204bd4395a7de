//! Benchmark of a final job's report (issue 27): the time and the memory bftpd takes to
//! build the mail of a job of 10,000, 100,000 and 1,000,000 members. Run with
//!   cargo run --release -p bftp-tests --bin bench-report [-- SIZES...]
//! (sizes default to `10000 100000 1000000`).
//!
//! For each size, a child process seeds a sled store (in a temporary directory under /tmp)
//! with one finished tree job of that many members (`dNNNN/sN/fNNNNNNN.dat`, 1,000 files a
//! directory; every member succeeded with both servers' replies, its detail and proof, one
//! in 10,000 failed with a 550), as the daemon would have left it. Then a fresh child
//! process opens that store and makes the report's message exactly as the postman does
//! (`bftpd::mail::report_message`: the members read from the store a page at a time, the
//! report built, the message formatted); it prints the wall and CPU time of that, the peak
//! RSS of the process while it does (VmHWM, reset once the store is open), its rise over
//! the RSS with the store open, and the sizes of the message and of the (base64) ledger in
//! it.
//!
//! `scan` reads the members the same way and does nothing with them: the store's share (sled
//! keeps what it read in its cache, a soft 16 MiB). `old` (for sizes up to `BENCH_OLD_MAX`, default 10,000, since it is quadratic) makes the
//! message the way bftpd did before: the whole view loaded, `bftp_mail::render` of it, and
//! lettre handed the text and the JSON with bare LFs (its per-line `String::insert`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bftp_core::{
    DestCommand, Disposition, FtpParams, JobEvent, JobOutcome, MemberState, RetryPolicy, Timestamp,
};
use bftp_store::{
    JobStore, LastReply, MemberUpdate, NewJob, NewMember, SealedEndpoint, SealedSpec, SledStore,
    StoreOptions,
};
use bftp_tests::bench::env_or;
use bftp_tests::procstat::{cpu_seconds, status_kib};

const T0: Timestamp = Timestamp(1_796_040_000_000);

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("seed") => seed(Path::new(&args[1]), args[2].parse()?),
        Some("build") => build(Path::new(&args[1]), &args[2]),
        _ => {
            let sizes: Vec<usize> = if args.is_empty() {
                vec![10_000, 100_000, 1_000_000]
            } else {
                args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?
            };
            let old_max: usize = env_or("BENCH_OLD_MAX", 10_000);
            println!(
                "(scan: the members read from the store and dropped; its last column is the \
                 members read)"
            );
            println!(
                "{:>9} {:>4} {:>9} {:>8} {:>10} {:>10} {:>11} {:>11}",
                "members",
                "path",
                "wall s",
                "cpu s",
                "peak MiB",
                "rise MiB",
                "message MiB",
                "ledger MiB"
            );
            for n in sizes {
                let dir = tempfile::tempdir_in("/tmp")?;
                run(&["seed", &dir.path().to_string_lossy(), &n.to_string()])?;
                let mut paths = vec!["scan", "new"];
                if n <= old_max {
                    paths.push("old");
                }
                for path in paths {
                    let out = run(&["build", &dir.path().to_string_lossy(), path])?;
                    println!("{n:>9} {path:>4} {}", out.trim_end());
                }
            }
            Ok(())
        }
    }
}

/// This program run with `args`, its standard output.
fn run(args: &[&str]) -> Result<String> {
    let o = Command::new(std::env::current_exe()?).args(args).output()?;
    if !o.status.success() {
        bail!(
            "{args:?}: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(String::from_utf8(o.stdout)?)
}

fn seed(dir: &Path, n: usize) -> Result<()> {
    let store = SledStore::open(&dir.join("store"), StoreOptions::default())?;
    let ep = |host: &str, path: &str| SealedEndpoint {
        host: host.into(),
        port: 21,
        user: "bftp-ftp".into(),
        password: None,
        acct: None,
        path: path.into(),
        tls: Default::default(),
    };
    let job = NewJob {
        watch: None,
        owner_uid: 1000,
        spec: SealedSpec {
            source: ep("127.0.0.2", "/tree"),
            destination: Some(ep("127.0.0.3", "/in/copy")),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams::default(),
            start_at: T0,
            retry: RetryPolicy::default(),
            notify: vec!["ops@bftp-bench.invalid".into()],
            keyword_present: false,
            proof: None,
            recursive: true,
            data_path: None,
        },
        keyword_hash: None,
        request: None,
        created_at: T0,
        members: vec![],
    };
    let id = store.submit(job)?.job().id;
    store.apply(id, JobEvent::Start { attempt: 1 }, T0, None)?;
    let name = |i: usize| format!("d{:04}/s{}/f{i:07}.dat", i / 1000, (i / 100) % 10);
    let members: Vec<NewMember> = (0..n)
        .map(|i| NewMember {
            name: name(i),
            size: Some(4096),
            modified: Some("20261203091500".into()),
            refused: None,
        })
        .collect();
    store.freeze_members(id, members, T0)?;
    let reply = |code, text: &str| {
        Some(LastReply {
            code: Some(code),
            text: text.into(),
        })
    };
    for chunk in (0..n as u32).collect::<Vec<_>>().chunks(10_000) {
        let ups = chunk
            .iter()
            .map(|&i| {
                let failed = i % 10_000 == 4321;
                let update = if failed {
                    MemberUpdate {
                        state: Some(MemberState::FailedPermanent),
                        attempts: Some(1),
                        source_reply: reply(550, "Permission denied."),
                        detail: Some("the source refused RETR".into()),
                        ..Default::default()
                    }
                } else {
                    MemberUpdate {
                        state: Some(MemberState::Succeeded),
                        attempts: Some(1),
                        bytes: Some(4096),
                        size: Some(4096),
                        source_reply: reply(226, "Transfer complete."),
                        dest_reply: reply(226, "Transfer complete"),
                        detail: Some("4096 bytes; SIZE 4096 on both sides".into()),
                        proof: Some("size".into()),
                        intent: Some(None),
                        ..Default::default()
                    }
                };
                (i, update)
            })
            .collect();
        store.update_members(id, ups, T0)?;
    }
    let outcome = JobOutcome::Partial;
    store.apply(id, JobEvent::Finish { outcome }, T0, None)?;
    Ok(())
}

fn build(dir: &Path, path: &str) -> Result<()> {
    let store: Arc<dyn JobStore> = Arc::new(SledStore::open(
        &dir.join("store"),
        StoreOptions::default(),
    )?);
    let secrets = bftpd::secrets::Secrets::load_or_create(&dir.join("secret.key"))?;
    let mail = bftp_mail::MailConfig {
        from: "bftp@bftp-bench.invalid".into(),
        ..bftp_mail::MailConfig::default()
    };
    let settings = bftpd::mail::MailSettings::new(&mail);
    let entry = store
        .outbox_due(Timestamp(u64::MAX), 1)?
        .pop()
        .context("no report in the outbox")?;
    let pid = std::process::id();
    // Opening the store reads every entry once (its content digest): that peak is the
    // store's, not the report's. Writing 5 to clear_refs resets VmHWM to the RSS now.
    std::fs::write("/proc/self/clear_refs", "5").context("reset VmHWM")?;
    let before = status_kib(pid, "VmRSS")?;
    let (cpu0, t0) = (cpu_seconds(pid, false)?, Instant::now());
    let (message, ledger) = if path == "old" {
        old_message(&*store, &settings, &secrets, &entry)?
    } else if path == "scan" {
        (Vec::new(), scan(&*store, entry.job)?)
    } else {
        let (_, message) = bftpd::mail::report_message(&*store, &secrets, &settings, &entry)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let ledger = ledger_size(&message);
        (message, ledger)
    };
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds(pid, false)? - cpu0);
    let peak = status_kib(pid, "VmHWM")?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let bytes = |b: usize| b as f64 / (1024.0 * 1024.0);
    let last = if path == "scan" {
        format!("{ledger:>11}")
    } else {
        format!("{:>11.2}", bytes(ledger))
    };
    println!(
        "{wall:>9.2} {cpu:>8.2} {:>10.1} {:>10.1} {:>11.2} {last}",
        mib(peak),
        mib(peak.saturating_sub(before)),
        bytes(message.len()),
    );
    Ok(())
}

/// Only what the store's part costs: every member read a page at a time as `report_message`
/// reads them, and dropped; the members read.
fn scan(store: &dyn JobStore, id: bftp_store::JobId) -> Result<usize> {
    let (mut from, mut n) = (0, 0);
    loop {
        let page = store.members_page(id, from, 1024)?;
        let Some(last) = page.last() else { break };
        from = last.index + 1;
        n += page.len();
    }
    Ok(n)
}

/// The base64 bytes of the message's gzip part (0 if it has none).
fn ledger_size(message: &[u8]) -> usize {
    let text = String::from_utf8_lossy(message);
    let Some(at) = text.find("Content-Type: application/gzip") else {
        return 0;
    };
    let part = &text[at..];
    let start = part.find("\r\n\r\n").map_or(0, |i| i + 4);
    let end = part.find("\r\n--").unwrap_or(part.len());
    end.saturating_sub(start)
}

/// The message as bftpd made it before issue 27 (on its one runtime worker, then).
fn old_message(
    store: &dyn JobStore,
    settings: &bftpd::mail::MailSettings,
    secrets: &bftpd::secrets::Secrets,
    entry: &bftp_store::OutboxEntry,
) -> Result<(Vec<u8>, usize)> {
    use lettre::message::header::{ContentTransferEncoding, ContentType};
    use lettre::message::{Attachment, Body, MultiPart, SinglePart};
    let job = store.get(entry.job)?.context("no job")?;
    let paths = bftpd::hosts::DataPathPolicy::default();
    let mut view = bftpd::views::load_view(store, settings, &paths, &job)?;
    view.report = None;
    let transcript = store
        .transcript(entry.job)?
        .map(|t| t.lines)
        .unwrap_or_default();
    let clear = secrets.clear_texts(&job.spec);
    let report = bftp_mail::render(&bftp_mail::ReportInput {
        job: &view,
        transcript: &transcript,
        secrets: &clear,
    });
    let text = Body::new_with_encoding(
        report.text.clone(),
        ContentTransferEncoding::QuotedPrintable,
    )
    .map_err(|_| anyhow::anyhow!("text"))?;
    let json = Body::new_with_encoding(report.json.clone(), ContentTransferEncoding::Base64)
        .map_err(|_| anyhow::anyhow!("json"))?;
    let message = lettre::Message::builder()
        .from(settings.from.parse()?)
        .to("ops@bftp-bench.invalid".parse()?)
        .subject(report.subject.clone())
        .multipart(
            MultiPart::mixed()
                .singlepart(
                    SinglePart::builder()
                        .header(ContentType::TEXT_PLAIN)
                        .body(text),
                )
                .singlepart(
                    Attachment::new("bftp-job.json".into())
                        .body(json, ContentType::parse("application/json")?),
                ),
        )?;
    Ok((message.formatted(), 0))
}
