//! The report of a large job (issue 27): built off the daemon's runtime worker, in brief, its
//! every file in a gzip attachment; the real bftpd, its real sled store and a real SMTP
//! listener (aiosmtpd) on loopback.

use std::io::Read as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bftp_core::{
    DestCommand, Disposition, FtpParams, JobEvent, JobOutcome, MemberState, RetryPolicy, Timestamp,
};
use bftp_store::{
    JobId, JobStore, LastReply, MemberUpdate, NewJob, NewMember, SealedEndpoint, SealedSpec,
    SledStore, StoreOptions,
};
use bftp_tests::daemon::{http, Bftpd};
use bftp_tests::SmtpSink;
use mail_parser::{MessageParser, MimeHeaders};
use serde_json::Value;

const NOTIFY: &str = "ops@bftp-test.invalid";
/// Enough members that building their report on the runtime worker (in a debug build) holds
/// the API for well over a second.
const MEMBERS: u32 = 50_000;
/// Members that failed: one in 5,000.
const FAILED_EVERY: u32 = 5_000;

fn name(i: u32) -> String {
    format!("d{:03}/f{i:06}.dat", i / 1000)
}

/// Writes a finished recursive job of [`MEMBERS`] members into the store at `path`, as the
/// daemon would have left it (the copies themselves would take minutes); its id.
fn seed(path: &std::path::Path) -> u64 {
    let store = SledStore::open(path, StoreOptions::default()).expect("the daemon's store");
    let ep = |host: &str, path: &str| SealedEndpoint {
        host: host.into(),
        port: 21,
        user: "bftp-ftp".into(),
        password: None,
        acct: None,
        path: path.into(),
        tls: Default::default(),
    };
    let t0 = Timestamp(1_796_040_000_000);
    let job = NewJob {
        watch: None,
        owner_uid: 0,
        spec: SealedSpec {
            source: ep("127.0.0.2", "/tree"),
            destination: Some(ep("127.0.0.3", "/in/copy")),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams::default(),
            start_at: t0,
            retry: RetryPolicy::default(),
            notify: vec![NOTIFY.into()],
            keyword_present: false,
            proof: None,
            recursive: true,
            data_path: None,
        },
        keyword_hash: None,
        request: None,
        created_at: t0,
        members: vec![],
    };
    let id: JobId = store.submit(job).unwrap().job().id;
    store
        .apply(id, JobEvent::Start { attempt: 1 }, t0, None)
        .unwrap();
    let members = (0..MEMBERS)
        .map(|i| NewMember {
            name: name(i),
            size: Some(u64::from(i)),
            modified: None,
            refused: None,
        })
        .collect();
    store.freeze_members(id, members, t0).unwrap();
    let reply = |code, text: &str| {
        Some(LastReply {
            code: Some(code),
            text: text.into(),
        })
    };
    for chunk in (0..MEMBERS).collect::<Vec<_>>().chunks(10_000) {
        let ups = chunk
            .iter()
            .map(|&i| {
                let up = if i % FAILED_EVERY == 7 {
                    MemberUpdate {
                        state: Some(MemberState::FailedPermanent),
                        attempts: Some(1),
                        source_reply: reply(550, &format!("{}: Permission denied", name(i))),
                        ..Default::default()
                    }
                } else {
                    MemberUpdate {
                        state: Some(MemberState::Succeeded),
                        attempts: Some(1),
                        bytes: Some(u64::from(i)),
                        source_reply: reply(226, "Transfer complete."),
                        dest_reply: reply(226, "Transfer complete"),
                        proof: Some("size".into()),
                        ..Default::default()
                    }
                };
                (i, up)
            })
            .collect();
        store.update_members(id, ups, t0).unwrap();
    }
    let finish = JobEvent::Finish {
        outcome: JobOutcome::Partial,
    };
    store.apply(id, finish, t0, None).unwrap();
    id.0
}

/// Issue 27: a 50,000-member job's report is mailed, and its view read, while `/v1/health`
/// answers within a second throughout (a report built on the daemon's one runtime worker stopped it for
/// minutes); the mail has the counts and every failure in its text, and its gzip attachment
/// decompresses to every member, in order, with its replies.
#[test]
fn a_large_jobs_report_is_mailed_while_the_api_answers() {
    let sink = SmtpSink::start().unwrap();
    let mut d = Bftpd::start_with(|dir| Bftpd::mail_config(dir, sink.port(), "")).unwrap();
    d.terminate(Duration::from_secs(20)).unwrap();
    let id = seed(&d.state_dir().join("store"));

    // Probes from before the start: the report is built as soon as the daemon is up.
    let socket = d.socket().to_path_buf();
    let done = Arc::new(AtomicBool::new(false));
    let prober = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut answered = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let t = Instant::now();
                match http(&socket, "GET", "/v1/health", None, &[]) {
                    Ok((200, _)) => answered.push(t.elapsed()),
                    // Not listening yet.
                    Ok(_) | Err(_) if answered.is_empty() => {}
                    Ok((status, body)) => panic!("/v1/health: {status} {body}"),
                    Err(e) => panic!("/v1/health: {e}"),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            answered
        })
    };
    d.launch().unwrap();
    let raw = sink
        .wait_for(1, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}\n{}", d.logs()))
        .remove(0);
    // The job's whole view (`bftp status --json`) while the probes go on: its 50,000 members
    // are read off the runtime worker too.
    let (status, body) = http(d.socket(), "GET", &format!("/v1/jobs/{id}"), None, &[]).unwrap();
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        view["members"].as_array().map(Vec::len),
        Some(MEMBERS as usize)
    );
    // A few more probes after the delivery.
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::SeqCst);
    let answered = prober.join().expect("the prober");
    assert!(answered.len() >= 5, "{} probes answered", answered.len());
    let slowest = answered.iter().max().unwrap();
    assert!(
        *slowest < Duration::from_secs(1),
        "/v1/health took {slowest:?} (of {} probes)",
        answered.len()
    );

    let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
    let failed = MEMBERS.div_ceil(FAILED_EVERY);
    assert_eq!(
        m.subject(),
        Some(
            format!(
                "BFTP results: {id}: partial ({} of {MEMBERS} files copied, {failed} failed)",
                MEMBERS - failed
            )
            .as_str()
        )
    );
    let text = m.body_text(0).expect("a text part").to_string();
    assert!(text.lines().count() < 200, "{text}");
    assert!(
        text.contains(&format!(
            "Files ({MEMBERS}): {} succeeded, {failed} failed",
            MEMBERS - failed
        )),
        "{text}"
    );
    for i in (0..MEMBERS).filter(|i| i % FAILED_EVERY == 7) {
        assert!(
            text.contains(&format!("550 {}: Permission denied", name(i))),
            "{text}"
        );
    }
    let json = m.attachment(0).expect("the JSON attachment");
    let json: Value = serde_json::from_slice(json.contents()).unwrap();
    assert_eq!(json["summary"]["files"], MEMBERS);
    assert_eq!(json["job"]["members"], serde_json::json!([]));
    let file = format!("bftp-job-{id}.members.jsonl.gz");
    assert_eq!(json["members_file"], file.as_str());

    let gz = m.attachment(1).expect("the ledger attachment");
    assert_eq!(gz.attachment_name(), Some(file.as_str()));
    assert_eq!(
        gz.content_type()
            .map(|c| format!("{}/{}", c.ctype(), c.subtype().unwrap_or(""))),
        Some("application/gzip".to_string())
    );
    let mut lines = String::new();
    flate2::read::GzDecoder::new(gz.contents())
        .read_to_string(&mut lines)
        .expect("the ledger decompresses");
    let lines: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), MEMBERS as usize, "every member");
    for (i, line) in (0..MEMBERS).zip(&lines) {
        assert_eq!(line["index"], i);
        assert_eq!(line["name"], name(i));
        if i % FAILED_EVERY == 7 {
            assert_eq!(line["state"], "failed_permanent", "{line}");
            assert_eq!(line["source_reply"]["code"], 550, "{line}");
        } else {
            assert_eq!(line["state"], "succeeded", "{line}");
            assert_eq!(line["bytes"], i, "{line}");
            assert_eq!(line["dest_reply"]["text"], "Transfer complete", "{line}");
            assert_eq!(line["proof"], "size", "{line}");
        }
    }
}
