//! Snapshot tests of the rendered report (`cargo insta review`, or `INSTA_UPDATE=always`
//! to accept), plus the properties a snapshot cannot show: no secret, no control character.

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use bftp_api::{EndpointView, EventView, JobView, MemberView, ReplyView, RetryView};
use std::io::Read as _;

use bftp_mail::{
    build_message, message_id, render, Envelope, Report, ReportBuilder, ReportInput,
    FULL_REPORT_MAX_MEMBERS, NOT_COPIED_IN_TEXT,
};

fn endpoint(host: &str, user: &str, path: &str) -> EndpointView {
    EndpointView {
        host: host.into(),
        port: 21,
        user: user.into(),
        path: path.into(),
        has_password: user != "anonymous",
        has_acct: false,
        url: format!("ftp://{user}@{host}:21/{path}"),
    }
}

fn reply(code: u16, text: &str) -> Option<ReplyView> {
    Some(ReplyView {
        code: Some(code),
        text: text.into(),
    })
}

fn member(index: u32, name: &str, state: &str, bytes: Option<u64>) -> MemberView {
    let ok = state == "succeeded";
    MemberView {
        index,
        name: name.into(),
        state: state.into(),
        attempts: 1,
        size: bytes,
        bytes,
        source_reply: if ok {
            reply(226, "Transfer complete")
        } else {
            None
        },
        dest_reply: if ok {
            reply(226, "Transfer complete")
        } else {
            None
        },
        detail: None,
        updated_at: "2025-11-30T10:00:05Z".into(),
        proof: None,
        progress: None,
        tls: None,
        route: None,
    }
}

fn event(at: &str, event: &str, detail: Option<&str>) -> EventView {
    EventView {
        at: at.into(),
        event: event.into(),
        detail: detail.map(str::to_string),
    }
}

/// A finished copy job of `members`, one attempt, with a plausible history.
fn job(outcome: &str, members: Vec<MemberView>) -> JobView {
    JobView {
        waiting: None,
        id: 42,
        owner_uid: 1000,
        state: "finished".into(),
        outcome: Some(outcome.into()),
        next_attempt_at: None,
        attempt: None,
        attempts: 1,
        created_at: "2025-11-30T09:59:58Z".into(),
        updated_at: "2025-11-30T10:00:06Z".into(),
        finished_at: Some("2025-11-30T10:00:06Z".into()),
        source: endpoint("src.example.org", "alice", "data/*.csv"),
        destination: Some(endpoint("dst.example.org", "bob", "incoming/")),
        disposition: "copy".into(),
        dest_command: "replace".into(),
        transfer_type: "I".into(),
        mode: "S".into(),
        structure: "F".into(),
        start_at: "2025-11-30T09:59:58Z".into(),
        retry: RetryView {
            first_interval: "10m".into(),
            factor: 2.0,
            cap: "4h".into(),
            max_attempts: 8,
            deadline: "3days".into(),
        },
        notify: vec!["alice@example.org".into()],
        has_keyword: true,
        proof: None,
        recursive: false,
        data_path: String::new(),
        data_path_asked: None,
        members,
        counts: Default::default(),
        history: vec![
            event("2025-11-30T09:59:58Z", "submitted", None),
            event("2025-11-30T10:00:00Z", "attempt-started", Some("attempt 1")),
            event("2025-11-30T10:00:06Z", "finished", None),
        ],
        report: None,
        events: vec![],
        node: None,
        watch: None,
    }
}

fn transcript(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| l.to_string()).collect()
}

fn login_transcript() -> Vec<String> {
    transcript(&[
        "source< 220 src.example.org FTP server ready",
        "source> USER alice",
        "source< 331 Password required for alice",
        "source> PASS ****",
        "source< 230 User alice logged in",
        "destination< 220 dst.example.org ready",
        "destination> USER bob",
        "destination< 331 Please specify the password.",
        "destination> PASS ****",
        "destination< 230 Login successful.",
    ])
}

fn rendered(job: &JobView, transcript: &[String], secrets: &[String]) -> Report {
    render(&ReportInput {
        job,
        transcript,
        secrets,
    })
}

/// What a person reads: the subject line, a blank line, the body.
fn shown(r: &Report) -> String {
    format!("Subject: {}\n\n{}", r.subject, r.text)
}

/// No raw control character other than the text's own newlines.
fn assert_no_control_chars(r: &Report) {
    assert!(!r.subject.chars().any(char::is_control), "{:?}", r.subject);
    assert!(
        !r.text.chars().any(|c| c.is_control() && c != '\n'),
        "{:?}",
        r.text
    );
    assert!(
        !r.json.chars().any(|c| c.is_control() && c != '\n'),
        "{:?}",
        r.json
    );
}

fn partial_job() -> JobView {
    let mut failed = member(3, "c.csv", "failed_permanent", None);
    failed.source_reply = reply(550, "c.csv: Permission denied");
    failed.dest_reply = reply(426, "Connection closed; transfer aborted.");
    failed.detail = Some("the source refused RETR".into());
    job(
        "partial",
        vec![
            member(1, "a.csv", "succeeded", Some(1024)),
            member(2, "b.csv", "succeeded", Some(2048)),
            failed,
            member(4, "d.csv", "succeeded", Some(0)),
        ],
    )
}

#[test]
fn partial_job_with_one_550() {
    let mut t = login_transcript();
    t.extend(transcript(&[
        "source> PASV",
        "source< 227 Entering Passive Mode (192,0,2,10,19,137)",
        "destination> PORT 192,0,2,10,19,137",
        "destination< 200 PORT command successful",
        "destination> STOR c.csv",
        "destination< 150 Ok to send data.",
        "source> RETR c.csv",
        "source< 550 c.csv: Permission denied",
        "destination< 426 Connection closed; transfer aborted.",
    ]));
    let r = rendered(&partial_job(), &t, &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: partial (3 of 4 files copied, 1 failed)"
    );
    assert!(r
        .text
        .starts_with("Outcome: partial \u{2014} 3 of 4 files copied, 1 failed\n"));
    assert_no_control_chars(&r);
    insta::assert_snapshot!("partial_text", shown(&r));
    insta::assert_snapshot!("partial_json", r.json);

    let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(v["schema"], "bftp-report/1");
    assert_eq!(v["summary"]["outcome"], "partial");
    assert_eq!(v["summary"]["succeeded"], 3);
    assert_eq!(v["summary"]["failed"], 1);
    assert_eq!(v["summary"]["bytes"], 3072);
    assert_eq!(v["job"]["members"][2]["source_reply"]["code"], 550);
    assert_eq!(v["transcript"].as_array().unwrap().len(), t.len());
}

#[test]
fn succeeded_single_file() {
    let mut j = job(
        "succeeded",
        vec![member(1, "report.pdf", "succeeded", Some(734_003))],
    );
    j.source = endpoint("src.example.org", "anonymous", "pub/report.pdf");
    j.destination = Some(endpoint("dst.example.org", "bob", "in/report.pdf"));
    j.notify.clear();
    j.has_keyword = false;
    let r = rendered(&j, &login_transcript(), &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: succeeded (1 of 1 file copied)"
    );
    assert_no_control_chars(&r);
    insta::assert_snapshot!("succeeded_text", shown(&r));
}

#[test]
fn failed_login() {
    let mut m = member(1, "data.bin", "failed_permanent", None);
    m.dest_reply = reply(530, "Login incorrect.");
    m.detail = Some("destination: login refused (530 Login incorrect.)".into());
    let mut j = job("failed", vec![m]);
    j.history[2] = event(
        "2025-11-30T10:00:01Z",
        "finished",
        Some("destination: login refused (530 Login incorrect.)"),
    );
    let t = transcript(&[
        "source< 220 src.example.org FTP server ready",
        "source> USER alice",
        "source< 331 Password required for alice",
        "source> PASS ****",
        "source< 230 User alice logged in",
        "destination< 220 dst.example.org ready",
        "destination> USER bob",
        "destination< 331 Please specify the password.",
        "destination> PASS ****",
        "destination< 530 Login incorrect.",
    ]);
    let r = rendered(&j, &t, &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: failed (0 of 1 file copied, 1 failed)"
    );
    assert!(r
        .text
        .contains("Last event: 2025-11-30T10:00:01Z finished: destination: login refused"));
    insta::assert_snapshot!("failed_login_text", shown(&r));
}

#[test]
fn failed_before_the_file_list_was_known() {
    let mut j = job("failed", vec![]);
    j.history[2] = event(
        "2025-11-30T10:00:01Z",
        "finished",
        Some("source: no file matches data/*.csv"),
    );
    let r = rendered(&j, &[], &[]);
    assert_eq!(r.subject, "BFTP results: 42: failed (no file copied)");
    assert!(r
        .text
        .contains("none: the job ended before its files were known"));
    assert!(r
        .text
        .contains("Transcript of the last attempt: none recorded"));
}

#[test]
fn cancelled_job() {
    let mut j = job(
        "cancelled",
        vec![
            member(1, "a.csv", "succeeded", Some(10)),
            member(2, "b.csv", "succeeded", Some(20)),
            member(3, "c.csv", "cancelled", None),
            member(4, "d.csv", "cancelled", None),
            member(5, "e.csv", "cancelled", None),
        ],
    );
    j.state = "cancelled".into();
    j.attempts = 2;
    j.history.pop();
    j.history.push(event(
        "2025-11-30T10:00:03Z",
        "cancelled",
        Some("by uid 1000"),
    ));
    j.finished_at = Some("2025-11-30T10:00:03Z".into());
    let r = rendered(&j, &login_transcript(), &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: cancelled (2 of 5 files copied, 3 cancelled)"
    );
    assert!(r.text.starts_with(
        "Outcome: cancelled \u{2014} 2 of 5 files copied before the cancel, 3 cancelled\n"
    ));
    assert!(r.text.contains("Done before the cancel: a.csv, b.csv\n"));
    assert!(r.text.contains("Cancelled: c.csv, d.csv, e.csv\n"));
    insta::assert_snapshot!("cancelled_text", shown(&r));
    let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(v["summary"]["outcome"], "cancelled");
    assert_eq!(v["summary"]["cancelled"], 3);
}

#[test]
fn delete_job() {
    let mut gone = member(1, "old-1.log", "succeeded", None);
    gone.source_reply = reply(250, "DELE command successful");
    gone.dest_reply = None;
    let mut kept = member(2, "old-2.log", "failed_permanent", None);
    kept.source_reply = reply(550, "old-2.log: Permission denied");
    let mut unsure = member(3, "old-3.log", "uncertain", None);
    unsure.source_reply = None;
    unsure.detail = Some("connection lost after DELE was sent; SIZE could not tell".into());
    let mut j = job("partial", vec![gone, kept, unsure]);
    j.disposition = "delete".into();
    j.destination = None;
    j.source = endpoint("src.example.org", "alice", "logs/old-*.log");
    let r = rendered(&j, &[], &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: partial (1 of 3 files deleted, 1 failed, 1 uncertain)"
    );
    insta::assert_snapshot!("delete_text", shown(&r));
}

#[test]
fn hostile_text_is_shown_escaped() {
    let mut m = member(
        1,
        "evil\r\nSubject: pwned\x1b[2J.csv",
        "failed_permanent",
        None,
    );
    m.source_reply = reply(
        550,
        "No such file\r\nBcc: victim@example.org\x1b]0;owned\x07 \u{202e}gnp.exe",
    );
    m.detail = Some("line one\nline two\u{9b}31m".into());
    let mut j = job("failed", vec![m]);
    j.history[2].detail = Some("bad\x00nul".into());
    let t = transcript(&[
        "source> RETR evil\r\nDELE x",
        "source< 550 \x1b[31mred\x1b[0m",
    ]);
    let r = rendered(&j, &t, &[]);
    assert_no_control_chars(&r);
    assert!(!r.text.contains("\nSubject: pwned"));
    assert!(!r.text.contains("\nBcc:"));
    assert!(!r.text.contains('\u{202e}'));
    assert!(r.text.contains("evil\\r\\nSubject: pwned\\u{1b}[2J.csv"));
    insta::assert_snapshot!("hostile_text", shown(&r));

    // The message built from it has no injected header either.
    let msg = build_message(&r, &envelope(&r)).unwrap();
    let raw = String::from_utf8(msg.formatted()).unwrap();
    let headers = &raw[..raw.find("\r\n\r\n").unwrap()];
    assert!(
        !headers.contains("pwned") && !headers.contains("victim"),
        "{headers}"
    );
    assert_eq!(raw.matches("\r\nSubject: ").count(), 1);
    assert!(!raw.contains("\r\nBcc:"));
}

#[test]
fn secrets_are_scrubbed_everywhere() {
    let secret = "Tr0ub4dor&3 x/y";
    let b64 = base64::engine::general_purpose::STANDARD;
    let secret_b64 = b64.encode(secret);
    let secret_pct = "Tr0ub4dor%263%20x%2Fy";
    let secret_pct_lower = "Tr0ub4dor%263%20x%2fy";
    let mut m = member(1, "a.csv", "failed_permanent", None);
    m.source_reply = reply(530, &format!("Login incorrect for password {secret}"));
    m.dest_reply = reply(530, &format!("AUTH {secret_b64} refused"));
    m.detail = Some(format!(
        "url ftp://alice:{secret_pct}@src.example.org/a.csv"
    ));
    let mut j = job("failed", vec![m]);
    // A careless view that carried the password in its URL.
    j.source.url = format!("ftp://alice:{secret}@src.example.org:21/a.csv");
    j.history[2].detail = Some(format!(
        "AUTH PLAIN {}",
        b64.encode(format!("\0alice\0{secret}"))
    ));
    let t = transcript(&[
        "source> USER alice",
        &format!("source> PASS {secret}"),
        &format!("source< 530 password {secret} is wrong"),
        &format!("source< 500 '{secret_pct}' not understood"),
        &format!("source< 500 '{secret_pct_lower}' not understood"),
    ]);
    let secrets = vec![secret.to_string(), "acct-0042".to_string()];
    let r = rendered(&j, &t, &secrets);

    let forms = [
        secret.to_string(),
        secret_b64.clone(),
        secret_b64.trim_end_matches('=').to_string(),
        secret_pct.to_string(),
        secret_pct_lower.to_string(),
        "Tr0ub4dor".to_string(),
    ];
    for (what, out) in [
        ("subject", &r.subject),
        ("text", &r.text),
        ("json", &r.json),
    ] {
        for f in &forms {
            assert!(!out.contains(f.as_str()), "{what} contains {f:?}:\n{out}");
        }
    }
    assert!(r.text.contains("source> PASS ****"));
    assert!(r.text.contains("530 Login incorrect for password ****"));
    assert!(r.text.contains("ftp://alice:****@src.example.org:21/a.csv"));
    serde_json::from_str::<serde_json::Value>(&r.json).expect("still valid JSON");
    insta::assert_snapshot!("secret_text", shown(&r));

    // Nor in the delivered bytes, where the JSON is base64 and the text quoted-printable.
    let msg = build_message(&r, &envelope(&r)).unwrap();
    let raw = String::from_utf8(msg.formatted()).unwrap();
    for f in &forms {
        assert!(!raw.contains(f.as_str()), "message contains {f:?}");
    }
}

#[test]
fn transcript_is_bounded() {
    let lines: Vec<String> = (1..=250)
        .map(|i| format!("source< 150-line {i}"))
        .chain(std::iter::once(format!("source< 226 {}", "x".repeat(2000))))
        .collect();
    let r = rendered(&partial_job(), &lines, &[]);
    assert!(r
        .text
        .contains("Transcript of the last attempt (200 lines; 51 earlier lines left out)"));
    assert!(!r.text.contains("line 51\n"));
    assert!(r.text.contains("  source< 150-line 52\n"));
    assert!(r.text.contains(&format!("{} [cut]\n", "x".repeat(100))));
    let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(v["transcript"].as_array().unwrap().len(), 200);
    assert_eq!(v["transcript_omitted"], 51);
    let last = v["transcript"][199].as_str().unwrap();
    assert_eq!(last.chars().count(), 512 + " [cut]".len());
}

fn envelope(r: &Report) -> Envelope {
    Envelope {
        from: "bftp@files.example.org".into(),
        to: vec!["alice@example.org".into(), "ops@example.org".into()],
        message_id: message_id(r.job_id, 1_764_496_806_000, "files.example.org"),
        date: UNIX_EPOCH + Duration::from_secs(1_764_496_806),
    }
}

#[test]
fn message_has_the_headers_and_parts() {
    let r = rendered(&partial_job(), &login_transcript(), &[]);
    let env = envelope(&r);
    let msg = build_message(&r, &env).unwrap();
    let raw = String::from_utf8(msg.formatted()).unwrap();
    // The same inputs, the same bytes: a repeated delivery is the same message.
    assert_eq!(
        raw,
        String::from_utf8(build_message(&r, &env).unwrap().formatted()).unwrap()
    );
    for h in [
        "Message-ID: <bftp.job-42.1764496806000@files.example.org>\r\n",
        "Date: Sun, 30 Nov 2025 10:00:06 +0000\r\n",
        "Subject: BFTP results: 42: partial (3 of 4 files copied, 1 failed)\r\n",
        "From: bftp@files.example.org\r\n",
        "To: alice@example.org, ops@example.org\r\n",
        "Auto-Submitted: auto-generated\r\n",
        "X-BFTP-Job: 42\r\n",
        "Content-Type: multipart/mixed;",
        "Content-Type: text/plain; charset=utf-8\r\n",
        "Content-Transfer-Encoding: quoted-printable\r\n",
        "Content-Disposition: attachment; filename=\"bftp-job-42.json\"\r\n",
        "Content-Type: application/json\r\n",
        "Content-Transfer-Encoding: base64\r\n",
    ] {
        assert!(raw.contains(h), "missing {h:?} in\n{raw}");
    }
    let e = msg.envelope();
    assert_eq!(e.from().unwrap().to_string(), "bftp@files.example.org");
    assert_eq!(e.to().len(), 2);
}

#[test]
fn bad_envelopes_are_errors() {
    let r = rendered(&partial_job(), &[], &[]);
    let good = envelope(&r);
    let e = build_message(
        &r,
        &Envelope {
            to: vec![],
            ..good.clone()
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, bftp_mail::MailError::NoRecipients { job_id: 42 }),
        "{e}"
    );
    let e = build_message(
        &r,
        &Envelope {
            to: vec!["alice@example.org\r\nBcc: x@y".into()],
            ..good.clone()
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, bftp_mail::MailError::Address { field: "to", .. }),
        "{e}"
    );
    let e = build_message(
        &r,
        &Envelope {
            message_id: "no-angles@x".into(),
            ..good
        },
    )
    .unwrap_err();
    assert!(matches!(e, bftp_mail::MailError::MessageId { .. }), "{e}");
}

/// A refused listed name is a file of the job that was not copied: the subject, the text
/// and the JSON summary count it, and the text says what to do about it.
#[test]
fn refused_names_are_counted_and_explained() {
    let ok = member(0, "a.dat", "succeeded", Some(10));
    let mut refused = member(1, "bad\\rname.dat", "refused", None);
    refused.attempts = 0;
    refused.detail = Some(
        "refused: the source listed this name, which bftpd does not send in a command: \
         name contains the byte 0x0d"
            .into(),
    );
    let r = rendered(&job("partial", vec![ok, refused]), &[], &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: partial (1 of 2 files copied, 1 refused)"
    );
    assert!(r.text.contains("bad\\rname.dat"), "{}", r.text);
    assert!(
        r.text
            .contains("A refused entry was not copied, and its detail line says why"),
        "{}",
        r.text
    );
    let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(v["summary"]["refused"], 1);
    assert_eq!(v["summary"]["pending"], 0);
    assert_eq!(v["summary"]["failed"], 0);
}

/// Issue 16: each file's proof is in the text and in the JSON.
#[test]
fn each_file_names_its_proof() {
    let mut hashed = member(0, "a.bin", "succeeded", Some(10));
    hashed.proof = Some("hash".into());
    hashed.detail = Some("sizes equal (10 bytes); SHA-256 digests equal (ab12)".into());
    let mut sized = member(1, "b.bin", "succeeded", Some(20));
    sized.proof = Some("size".into());
    let j = job("succeeded", vec![hashed, sized]);
    let r = rendered(&j, &login_transcript(), &[]);
    let text = shown(&r);
    let after = |name: &str| {
        let at = text
            .find(&format!("  {name}\n"))
            .unwrap_or_else(|| panic!("{text}"));
        text[at..].lines().nth(3).unwrap_or("").to_owned()
    };
    assert!(
        after("a.bin").contains("proof:") && after("a.bin").contains("hash"),
        "{text}"
    );
    assert!(
        after("b.bin").contains("proof:") && after("b.bin").contains("size"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(json["job"]["members"][0]["proof"], "hash", "{json:#}");
    assert_eq!(json["job"]["members"][1]["proof"], "size", "{json:#}");
}

/// A recursive job of 10,000 files in 1,000 directories, one of them failed.
fn ten_thousand_file_tree() -> JobView {
    let mut members = Vec::new();
    for d in 0..1000 {
        for f in 0..10 {
            let i = (d * 10 + f) as u32;
            let name = format!("dir{d:04}/f{f}.dat");
            let mut m = if i == 4321 {
                let mut m = member(i, &name, "failed_permanent", None);
                m.detail = Some("550 Permission denied".into());
                m
            } else {
                member(i, &name, "succeeded", Some(100))
            };
            m.proof = (i != 4321).then(|| "size".to_string());
            members.push(m);
        }
    }
    let mut j = job("partial", members);
    j.recursive = true;
    for d in 0..1000 {
        j.history.push(event(
            "2025-11-30T10:00:01Z",
            "listed",
            Some(&format!("directory {d}")),
        ));
    }
    j
}

/// The report the daemon makes: members given one at a time.
fn built(job: &JobView, transcript: &[String], secrets: &[String]) -> Report {
    let header = JobView {
        waiting: None,
        members: Vec::new(),
        ..job.clone()
    };
    let mut b = ReportBuilder::new(header, transcript, secrets);
    job.members.iter().cloned().for_each(|m| b.push(m));
    b.finish()
}

/// A large report's ledger: its file name and its lines, each a member.
fn ledger_lines(r: &Report) -> (String, Vec<serde_json::Value>) {
    let ledger = r.ledger.as_ref().expect("a ledger attachment");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&ledger.gzip[..])
        .read_to_string(&mut text)
        .expect("gzip");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), ledger.members);
    (ledger.file_name.clone(), lines)
}

/// Issue 16: a recursive job of 10,000 files in 1,000 directories rendered whole reads counts
/// first (one line per directory), then the files not copied with their detail, then the
/// copied ones one line each under their directory; the walk's `listed` events are one
/// line; the JSON has every member. (The daemon reports a job this large in brief: see
/// `a_tree_of_ten_thousand_files_is_reported_in_brief`.)
#[test]
fn a_tree_of_ten_thousand_files_reads_by_directory() {
    let j = ten_thousand_file_tree();
    let r = rendered(&j, &[], &[]);
    let text = shown(&r);
    let lines = text.lines().count();
    // One line per file and two per directory (its count, its heading among the copied).
    assert!(lines < 10_000 + 2 * 1000 + 100, "{lines} lines");
    let counts = text
        .find("Files (10000) in 1000 directories")
        .expect("counts");
    let failed = text.find("Not copied (1)").expect("failures");
    let copied = text.find("Copied (9999;").expect("the rest");
    assert!(counts < failed && failed < copied);
    let line = text[counts..failed]
        .lines()
        .find(|l| l.trim_start().starts_with("dir0432/"))
        .expect("a count line for dir0432/");
    assert!(
        line.ends_with("10 files: 1 failed_permanent, 9 succeeded"),
        "{line:?}"
    );
    assert!(text[failed..copied].contains("550 Permission denied"));
    assert!(text[failed..copied].contains("dir0432/f1.dat"));
    assert!(text[copied..].contains("         100 size     f0.dat"));
    assert_eq!(
        text.matches("  listed  ").count(),
        1,
        "the walk is one line"
    );
    assert!(text.contains("1000 directories frozen"));
    let json: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(json["job"]["members"].as_array().unwrap().len(), 10_000);
    assert!(r.ledger.is_none());
}

/// Issue 27: a job of more than FULL_REPORT_MAX_MEMBERS members is reported in brief: the
/// text has the counts and the files not copied with their replies, the JSON the job without
/// its members, and the gzip ledger every member, in order, in full.
#[test]
fn a_tree_of_ten_thousand_files_is_reported_in_brief() {
    let j = ten_thousand_file_tree();
    let r = built(&j, &login_transcript(), &[]);
    assert_eq!(
        r.subject,
        "BFTP results: 42: partial (9999 of 10000 files copied, 1 failed)"
    );
    let text = shown(&r);
    assert!(text.lines().count() < 100, "{text}");
    assert!(
        text.contains("\nFiles (10000): 9999 succeeded, 1 failed\n"),
        "{text}"
    );
    assert!(text.contains("bftp-job-42.members.jsonl.gz"), "{text}");
    let failed = text.find("Not copied (1)\n").expect("failures");
    assert!(text[failed..].contains("dir0432/f1.dat"), "{text}");
    assert!(text[failed..].contains("detail:      550 Permission denied"));
    assert!(
        !text.contains("dir0432/f2.dat"),
        "a copied file is not listed"
    );
    assert!(text.contains("1000 directories frozen"));
    assert!(text.contains("Transcript of the last attempt (10 lines)"));

    let json: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(json["summary"]["files"], 10_000);
    assert_eq!(json["summary"]["succeeded"], 9_999);
    assert_eq!(json["summary"]["bytes"], 999_900);
    assert_eq!(json["job"]["counts"]["files"], 10_000);
    assert_eq!(json["job"]["counts"]["failed"], 1);
    assert_eq!(json["job"]["members"], serde_json::json!([]));
    assert_eq!(json["members_file"], "bftp-job-42.members.jsonl.gz");

    let (name, lines) = ledger_lines(&r);
    assert_eq!(name, "bftp-job-42.members.jsonl.gz");
    assert_eq!(lines.len(), 10_000);
    for (line, m) in lines.iter().zip(&j.members) {
        assert_eq!(line, &serde_json::to_value(m).unwrap());
    }
    assert_eq!(lines[4321]["detail"], "550 Permission denied");
    assert_eq!(lines[9999]["proof"], "size");
}

/// A report of at most FULL_REPORT_MAX_MEMBERS members keeps its look: the builder, fed one
/// member at a time, makes what `render` makes of the whole view, secrets scrubbed alike.
#[test]
fn a_small_report_built_a_member_at_a_time_is_the_rendered_one() {
    let secrets = vec!["hunter2".to_string()];
    let mut j = partial_job();
    j.members[0].detail = Some("the server said hunter2".into());
    let whole = rendered(&j, &login_transcript(), &secrets);
    let mut counted = j.clone();
    counted.counts = bftp_api::MemberCounts {
        files: 4,
        succeeded: 3,
        failed: 1,
        ..Default::default()
    };
    assert_eq!(
        built(&j, &login_transcript(), &secrets),
        rendered(&counted, &login_transcript(), &secrets)
    );
    assert!(!whole.json.contains("hunter2"));
    let mut at_limit = j.clone();
    at_limit.members = (0..FULL_REPORT_MAX_MEMBERS as u32)
        .map(|i| member(i, &format!("f{i}"), "succeeded", Some(1)))
        .collect();
    assert!(built(&at_limit, &[], &[]).ledger.is_none());
    at_limit
        .members
        .push(member(1000, "one-more", "succeeded", Some(1)));
    assert!(built(&at_limit, &[], &[]).ledger.is_some());
}

/// The text and the JSON of a report in brief do not grow with the job: ten times the
/// members give the same text and JSON but for the numbers (the memory a report holds is its
/// compressed ledger), and the files not copied shown in the text stop at
/// NOT_COPIED_IN_TEXT, the rest counted.
#[test]
fn a_report_in_brief_does_not_grow_with_the_job() {
    let job_of = |n: u32| {
        let members = (0..n)
            .map(|i| {
                if i % 7 == 0 {
                    let mut m = member(i, &format!("d{}/f{i:07}", i / 100), "uncertain", None);
                    m.detail = Some("an append was under way".into());
                    m
                } else {
                    member(i, &format!("d{}/f{i:07}", i / 100), "succeeded", Some(10))
                }
            })
            .collect();
        job("partial", members)
    };
    let digits = |s: &str| s.chars().filter(|c| !c.is_ascii_digit()).count();
    let small = built(&job_of(10_000), &[], &[]);
    let large = built(&job_of(100_000), &[], &[]);
    assert_eq!(digits(&small.text), digits(&large.text));
    assert_eq!(digits(&small.json), digits(&large.json));
    assert!(large.text.len() < 200_000, "{}", large.text.len());
    assert_eq!(
        large.text.matches("\n  uncertain ").count(),
        NOT_COPIED_IN_TEXT
    );
    let more = 100_000usize.div_ceil(7) - NOT_COPIED_IN_TEXT;
    assert!(
        large.text.contains(&format!(
            "and {more} more not copied, not listed here: the attachment has every one."
        )),
        "{}",
        large.text
    );
    let (_, lines) = ledger_lines(&large);
    assert_eq!(lines.len(), 100_000);
    assert_eq!(lines[99_999]["name"], "d999/f0099999");
}

/// Past its size limit the ledger keeps only the files not copied, and the text and the JSON
/// say how many were left out: a report's size is bounded whatever the job's.
#[test]
fn a_ledger_past_its_limit_keeps_the_files_not_copied() {
    let limit = 64 << 10;
    let members: Vec<MemberView> = (0..60_000u32)
        .map(|i| {
            let name = format!("d{}/f{i:07}-{:x}", i / 100, i.wrapping_mul(2_654_435_761));
            if i % 1000 == 999 {
                member(i, &name, "failed_permanent", None)
            } else {
                member(i, &name, "succeeded", Some(u64::from(i)))
            }
        })
        .collect();
    let j = job("partial", members);
    let header = JobView {
        waiting: None,
        members: Vec::new(),
        ..j.clone()
    };
    let mut b = ReportBuilder::new(header, &[], &[]).with_ledger_limit(limit);
    j.members.iter().cloned().for_each(|m| b.push(m));
    let r = b.finish();
    let gzip_len = r.ledger.as_ref().unwrap().gzip.len();
    assert!(gzip_len < limit + (1 << 20), "{gzip_len}");
    let (_, lines) = ledger_lines(&r);
    assert!(lines.len() < 60_000, "{}", lines.len());
    let failed: Vec<u64> = lines
        .iter()
        .filter(|l| l["state"] == "failed_permanent")
        .map(|l| l["index"].as_u64().unwrap())
        .collect();
    assert_eq!(
        failed,
        (0..60).map(|k| k * 1000 + 999).collect::<Vec<u64>>()
    );
    let indexes: Vec<u64> = lines.iter().map(|l| l["index"].as_u64().unwrap()).collect();
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "in order");
    let left = 60_000 - lines.len();
    let text = shown(&r);
    assert!(
        text.contains(&format!("{left} copied files are left\n  out of it.")),
        "{text}"
    );
    assert!(text.contains("bftp status --json 42"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    assert_eq!(json["members_file_omitted"], left);
    assert_eq!(json["summary"]["files"], 60_000);
}

/// A report in brief is mailed with its ledger as a third part, `application/gzip`, whose
/// bytes are the ledger's.
#[test]
fn a_brief_message_carries_the_ledger() {
    let r = built(&ten_thousand_file_tree(), &[], &[]);
    let raw = String::from_utf8(build_message(&r, &envelope(&r)).unwrap().formatted()).unwrap();
    for h in [
        "Content-Disposition: attachment; filename=\"bftp-job-42.json\"\r\n",
        "Content-Disposition: attachment; filename=\"bftp-job-42.members.jsonl.gz\"\r\n",
        "Content-Type: application/gzip\r\n",
    ] {
        assert!(raw.contains(h), "missing {h:?}");
    }
    let at = raw.find("Content-Type: application/gzip").unwrap();
    let body = &raw[at..];
    let start = body.find("\r\n\r\n").unwrap() + 4;
    let end = body.find("\r\n--").unwrap();
    let b64: String = body[start..end].split("\r\n").collect();
    let gzip = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(gzip, r.ledger.unwrap().gzip);
}

/// The secrets are out of every line of the ledger, in every form, a secret spanning two
/// fields or equal to a number included.
#[test]
fn a_ledger_line_holds_no_secret() {
    let secrets = vec!["hunter2".to_string(), "4096".to_string()];
    let mut members: Vec<MemberView> = (0..FULL_REPORT_MAX_MEMBERS as u32 + 5)
        .map(|i| member(i, &format!("f{i}"), "succeeded", Some(1)))
        .collect();
    members[3].detail = Some("pass=hunter2".into());
    members[4].bytes = Some(4096);
    members[5].source_reply = reply(550, "no aHVudGVyMg== here");
    let r = built(&job("succeeded", members), &[], &secrets);
    let (_, lines) = ledger_lines(&r);
    let all: String = lines.iter().map(|l| l.to_string()).collect();
    for needle in ["hunter2", "aHVudGVyMg", "4096"] {
        assert!(!all.contains(needle), "{needle} in the ledger");
    }
    assert_eq!(lines[4]["bytes"], "****");
    assert_eq!(lines[3]["detail"], "pass=****");
}

/// A file's TLS (each control connection, the data's encryption and TLS client) is fields
/// in the report's JSON, and a sentence made from them in its text.
#[test]
fn a_files_tls_is_fields_in_the_json_and_a_line_in_the_text() {
    use bftp_api::{ControlTlsView, DataTlsView, TlsView};
    let mut m = member(1, "report.pdf", "succeeded", Some(734_003));
    let control = |version: &str, certificate: &str, ca: Option<&str>| ControlTlsView {
        state: "tls".into(),
        version: Some(version.into()),
        certificate: Some(certificate.into()),
        ca_file: ca.map(str::to_owned),
        pinned_sha256: None,
    };
    m.tls = Some(TlsView {
        source: Some(control("TLS 1.3", "ca_file", Some("/etc/bftp/ca.pem"))),
        destination: Some(ControlTlsView {
            state: "clear".into(),
            ..ControlTlsView::default()
        }),
        data: Some(DataTlsView {
            encrypted: true,
            tls_client: Some("source".into()),
            clear_reason: None,
        }),
    });
    let r = rendered(&job("succeeded", vec![m]), &login_transcript(), &[]);
    let line = "source control TLS 1.3 (CA file /etc/bftp/ca.pem); destination control in clear \
                (no AUTH TLS); data encrypted (TLS client: source)";
    assert!(
        r.text.contains(&format!("tls:         {line}")),
        "{}",
        r.text
    );
    let json: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    let tls = &json["job"]["members"][0]["tls"];
    assert_eq!(
        tls,
        &serde_json::json!({
            "source": {
                "state": "tls",
                "version": "TLS 1.3",
                "certificate": "ca_file",
                "ca_file": "/etc/bftp/ca.pem"
            },
            "destination": {"state": "clear"},
            "data": {"encrypted": true, "tls_client": "source"}
        }),
        "{tls:#}"
    );
    let plain = rendered(
        &job("succeeded", vec![member(1, "a", "succeeded", Some(1))]),
        &login_transcript(),
        &[],
    );
    assert!(!plain.text.contains("tls:"), "{}", plain.text);
}

/// Issue 29: every file says how it travelled. The text names the path per file and, for a
/// relayed one, the reply that refused the third party and what bftpd counted and hashed;
/// the JSON has the route as fields; server text in it is escaped like any other; a tree's
/// copied files name any route but plain fxp, and a report in brief names the route of
/// each file not copied.
#[test]
fn each_file_names_its_route_and_a_relay_the_refusing_reply() {
    use bftp_api::RouteView;
    let fxp = RouteView {
        path: "fxp".into(),
        ..RouteView::default()
    };
    let relay = RouteView {
        path: "relay".into(),
        reason: Some("refused".into()),
        detail: Some("425 Can't open data connection.\r\nX-Injected: 1".into()),
        seen: None,
        bytes: Some(2048),
        sha256: Some("ab".repeat(32)),
    };
    let mut a = member(1, "a.csv", "succeeded", Some(1024));
    a.route = Some(fxp);
    let mut b = member(2, "b.csv", "succeeded", Some(2048));
    b.route = Some(relay);
    let mut c = member(3, "c.csv", "failed_permanent", None);
    c.route = Some(RouteView {
        path: "fxp_roles_swapped".into(),
        ..RouteView::default()
    });
    let d = member(4, "d.csv", "failed_permanent", None);
    let j = job("partial", vec![a, b, c, d]);
    let r = rendered(&j, &login_transcript(), &[]);
    assert_no_control_chars(&r);
    let text = &r.text;
    let relayed = format!(
        "route:       relay (refused: 425 Can't open data connection.\\r\\nX-Injected: 1); \
         2048 bytes relayed, SHA-256 {}",
        "ab".repeat(32)
    );
    assert!(text.contains(&relayed), "{text}");
    assert!(text.contains("route:       fxp\n"), "{text}");
    assert!(text.contains("route:       fxp roles swapped\n"), "{text}");
    assert_eq!(text.matches("route:").count(), 3, "d.csv has none: {text}");

    let json: serde_json::Value = serde_json::from_str(&r.json).unwrap();
    let members = &json["job"]["members"];
    assert_eq!(
        members[0]["route"],
        serde_json::json!({"path": "fxp", "reason": null, "detail": null, "bytes": null, "sha256": null})
    );
    assert_eq!(members[1]["route"]["path"], "relay");
    assert_eq!(members[1]["route"]["reason"], "refused");
    assert_eq!(members[1]["route"]["bytes"], 2048);
    assert_eq!(members[1]["route"]["sha256"], "ab".repeat(32));
    let detail = members[1]["route"]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("425 Can't open data connection.") && !detail.contains('\r'),
        "{detail:?}"
    );
    assert!(members[3].get("route").is_none(), "{members:#}");

    // A tree: the relayed file's route under it; the plain third party's not.
    let mut tree = j.clone();
    tree.recursive = true;
    for (i, m) in tree.members.iter_mut().enumerate() {
        m.name = format!("dir/f{i}.csv");
    }
    let text = rendered(&tree, &[], &[]).text;
    let copied = text.find("Copied (2;").expect("copied");
    let under = &text[copied..];
    assert!(
        under.contains("f1.csv\n        route:       relay (refused: 425"),
        "{text}"
    );
    assert_eq!(under.matches("route:").count(), 1, "{text}");
    let not_copied = &text[text.find("Not copied (2)").expect("not copied")..copied];
    assert!(
        not_copied.contains("route:       fxp roles swapped"),
        "{text}"
    );

    // In brief: each file not copied names its route; the ledger line has the fields.
    let mut many: Vec<MemberView> = (0..FULL_REPORT_MAX_MEMBERS as u32 + 1)
        .map(|i| member(i, &format!("f{i}"), "succeeded", Some(1)))
        .collect();
    let mut failed = member(7, "f7", "failed_permanent", None);
    failed.route = j.members[1].route.clone();
    many[7] = failed;
    let r = built(&job("partial", many), &[], &[]);
    let text = shown(&r);
    let not_copied = text.find("Not copied (1)").expect("not copied");
    assert!(
        text[not_copied..].contains("route:       relay (refused: 425"),
        "{text}"
    );
    let (_, lines) = ledger_lines(&r);
    assert_eq!(lines[7]["route"]["reason"], "refused");
}
