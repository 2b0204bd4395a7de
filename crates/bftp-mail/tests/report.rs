//! Snapshot tests of the rendered report (`cargo insta review`, or `INSTA_UPDATE=always`
//! to accept), plus the properties a snapshot cannot show: no secret, no control character.

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use bftp_api::{EndpointView, EventView, JobView, MemberView, ReplyView, RetryView};
use bftp_mail::{build_message, message_id, render, Envelope, Report, ReportInput};

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
        members,
        counts: Default::default(),
        history: vec![
            event("2025-11-30T09:59:58Z", "submitted", None),
            event("2025-11-30T10:00:00Z", "attempt-started", Some("attempt 1")),
            event("2025-11-30T10:00:06Z", "finished", None),
        ],
        report: None,
        node: None,
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
        r.text.contains("A refused file was listed by the source"),
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

/// Issue 16: a recursive job of 10,000 files in 1,000 directories reads counts first (one line
/// per directory), then the files not copied with their detail, then the copied ones one line
/// each under their directory; the walk's `listed` events are one line; the JSON has every
/// member.
#[test]
fn a_tree_of_ten_thousand_files_reads_by_directory() {
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
