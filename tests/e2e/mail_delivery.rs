//! bftp-mail's delivery against a real SMTP server (aiosmtpd) and against sendmail-like
//! scripts: what arrives, and how each failure is classified.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result};
use base64::Engine as _;
use bftp_api::{EndpointView, EventView, JobView, MemberView, ReplyView, RetryView};
use bftp_mail::{
    build_message, message_id, render, Envelope, MailConfig, Mailer, Report, ReportInput,
    SendError, SmtpTls, TransportConfig,
};
use bftp_tests::SmtpSink;

const DELIVERY_WAIT: Duration = Duration::from_secs(10);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn endpoint(host: &str, user: &str, path: &str) -> EndpointView {
    EndpointView {
        host: host.into(),
        port: 21,
        user: user.into(),
        path: path.into(),
        has_password: true,
        has_acct: false,
        url: format!("ftp://{user}@{host}:21/{path}"),
    }
}

fn member(index: u32, name: &str, state: &str, code: u16, text: &str) -> MemberView {
    MemberView {
        index,
        name: name.into(),
        state: state.into(),
        attempts: 1,
        size: Some(100),
        bytes: (state == "succeeded").then_some(100),
        source_reply: Some(ReplyView {
            code: Some(code),
            text: text.into(),
        }),
        dest_reply: None,
        detail: None,
        updated_at: "2025-11-30T10:00:05Z".into(),
        proof: None,
        progress: None,
        tls: None,
        route: None,
    }
}

/// A partial job whose one failure's reply carries the source password.
fn report() -> Report {
    let job = JobView {
        waiting: None,
        id: 7,
        owner_uid: 1000,
        state: "finished".into(),
        outcome: Some("partial".into()),
        next_attempt_at: None,
        attempt: None,
        attempts: 1,
        created_at: "2025-11-30T09:59:58Z".into(),
        updated_at: "2025-11-30T10:00:06Z".into(),
        finished_at: Some("2025-11-30T10:00:06Z".into()),
        source: endpoint("src.example.org", "alice", "data/*.csv"),
        destination: Some(endpoint("dst.example.org", "bob", "in/")),
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
        has_keyword: false,
        proof: None,
        recursive: false,
        data_path: String::new(),
        data_path_asked: None,
        members: vec![
            member(1, "a.csv", "succeeded", 226, "Transfer complete"),
            member(2, "b.csv", "failed_permanent", 550, "b.csv: no, s3cr3t-pw"),
        ],
        counts: Default::default(),
        history: vec![EventView {
            at: "2025-11-30T09:59:58Z".into(),
            event: "submitted".into(),
            detail: None,
        }],
        report: None,
        events: vec![],
        node: None,
        watch: None,
    };
    render(&ReportInput {
        job: &job,
        transcript: &["source> PASS s3cr3t-pw".to_string()],
        secrets: &["s3cr3t-pw".to_string()],
    })
}

fn envelope(r: &Report) -> Envelope {
    Envelope {
        from: "bftp@control.example.org".into(),
        to: vec!["alice@example.org".into(), "ops@example.org".into()],
        message_id: message_id(r.job_id, 1_764_496_806_000, "control.example.org"),
        date: UNIX_EPOCH + Duration::from_secs(1_764_496_806),
    }
}

fn smtp_mailer(port: u16) -> Mailer {
    Mailer::new(&MailConfig {
        transport: TransportConfig::Smtp {
            host: "127.0.0.1".into(),
            port,
            tls: SmtpTls::None,
            username: None,
            password_file: None,
            timeout: Duration::from_secs(5),
        },
        ..MailConfig::default()
    })
    .expect("mailer")
}

fn sendmail_mailer(command: &Path) -> Mailer {
    Mailer::new(&MailConfig {
        transport: TransportConfig::Sendmail {
            command: command.to_path_buf(),
            timeout: Duration::from_secs(10),
        },
        ..MailConfig::default()
    })
    .expect("mailer")
}

/// The base64 body of the part whose headers name `filename`, decoded.
fn attachment(raw: &str, filename: &str) -> Result<Vec<u8>> {
    let raw = raw.replace("\r\n", "\n");
    let at = raw
        .find(&format!("filename=\"{filename}\""))
        .context("no such attachment")?;
    let body_start = at + raw[at..].find("\n\n").context("attachment has no body")? + 2;
    let body_end = body_start
        + raw[body_start..]
            .find("\n--")
            .context("unterminated part")?;
    let b64: String = raw[body_start..body_end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
}

fn header<'a>(raw: &'a str, name: &str) -> Option<&'a str> {
    let head = &raw[..raw.find("\r\n\r\n").unwrap_or(raw.len())];
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim_end)
}

#[test]
fn report_arrives_over_plain_smtp() -> Result<()> {
    let sink = SmtpSink::start()?;
    let r = report();
    let env = envelope(&r);
    let msg = build_message(&r, &env)?;
    runtime().block_on(smtp_mailer(sink.port()).send(&msg))?;

    sink.wait_for(1, DELIVERY_WAIT)?;
    let got = sink.received();
    assert_eq!(got.len(), 1);
    let mail = &got[0];
    assert_eq!(mail.mail_from, "bftp@control.example.org");
    assert_eq!(mail.rcpt_to, ["alice@example.org", "ops@example.org"]);
    assert_eq!(
        header(&mail.data, "Message-ID"),
        Some("<bftp.job-7.1764496806000@control.example.org>")
    );
    assert_eq!(
        header(&mail.data, "Subject"),
        Some("BFTP results: 7: partial (1 of 2 files copied, 1 failed)")
    );
    assert_eq!(header(&mail.data, "Auto-Submitted"), Some("auto-generated"));
    assert_eq!(header(&mail.data, "X-BFTP-Job"), Some("7"));

    let json = attachment(&mail.data, "bftp-job-7.json")?;
    let got: serde_json::Value = serde_json::from_slice(&json)?;
    let want: serde_json::Value = serde_json::from_str(&r.json)?;
    assert_eq!(got, want);
    assert_eq!(got["schema"], "bftp-report/1");
    assert_eq!(got["summary"]["failed"], 1);

    // No password, in any form, in what was delivered.
    let b64 = base64::engine::general_purpose::STANDARD;
    for form in ["s3cr3t-pw".to_string(), b64.encode("s3cr3t-pw")] {
        assert!(
            !mail.data.contains(&form),
            "delivered mail contains {form:?}"
        );
        assert!(!String::from_utf8_lossy(&json).contains(&form));
    }
    Ok(())
}

#[test]
fn smtp_451_is_transient_and_550_permanent() -> Result<()> {
    let sink = SmtpSink::start()?;
    let r = report();
    let msg = build_message(&r, &envelope(&r))?;
    let mailer = smtp_mailer(sink.port());
    let rt = runtime();

    sink.set_reply(Some("451 4.3.0 try again later"))?;
    match rt.block_on(mailer.send(&msg)) {
        Err(SendError::Transient { reason }) => assert!(reason.contains("451"), "{reason}"),
        other => panic!("451: {other:?}"),
    }
    sink.set_reply(Some("550 5.1.1 mailbox unavailable"))?;
    match rt.block_on(mailer.send(&msg)) {
        Err(SendError::Permanent { reason }) => assert!(reason.contains("550"), "{reason}"),
        other => panic!("550: {other:?}"),
    }
    sink.set_reply(Some("554 5.7.1 rejected"))?;
    assert!(matches!(
        rt.block_on(mailer.send(&msg)),
        Err(SendError::Permanent { .. })
    ));
    assert!(sink.received().is_empty());

    // The relay takes it again: the same message, the same Message-ID.
    sink.set_reply(None)?;
    rt.block_on(mailer.send(&msg))?;
    sink.wait_for(1, DELIVERY_WAIT)?;
    Ok(())
}

#[test]
fn refused_connection_is_transient() -> Result<()> {
    let mut sink = SmtpSink::start()?;
    sink.stop();
    let r = report();
    let msg = build_message(&r, &envelope(&r))?;
    match runtime().block_on(smtp_mailer(sink.port()).send(&msg)) {
        Err(SendError::Transient { reason }) => {
            assert!(reason.contains(&sink.port().to_string()), "{reason}")
        }
        other => panic!("refused connection: {other:?}"),
    }
    Ok(())
}

fn script(dir: &Path, name: &str, body: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

#[test]
fn sendmail_delivers_the_same_bytes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("message");
    let args = dir.path().join("args");
    let cmd = script(
        dir.path(),
        "sendmail",
        &format!(
            "printf '%s\\n' \"$@\" > '{}'\ncat > '{}'",
            args.display(),
            out.display()
        ),
    )?;
    let r = report();
    let msg = build_message(&r, &envelope(&r))?;
    runtime().block_on(sendmail_mailer(&cmd).send(&msg))?;
    assert_eq!(std::fs::read(&out)?, msg.formatted());
    assert_eq!(
        std::fs::read_to_string(&args)?,
        "-i\n-f\nbftp@control.example.org\n--\nalice@example.org\nops@example.org\n"
    );
    Ok(())
}

#[test]
fn sendmail_exit_codes_are_classified() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let r = report();
    let msg = build_message(&r, &envelope(&r))?;
    let rt = runtime();

    let tempfail = script(dir.path(), "tempfail", "cat >/dev/null\nexit 75")?;
    match rt.block_on(sendmail_mailer(&tempfail).send(&msg)) {
        Err(SendError::Transient { reason }) => assert!(reason.contains("75"), "{reason}"),
        other => panic!("exit 75: {other:?}"),
    }
    let nouser = script(
        dir.path(),
        "nouser",
        "cat >/dev/null\necho 'alice@example.org: user unknown' >&2\nexit 67",
    )?;
    match rt.block_on(sendmail_mailer(&nouser).send(&msg)) {
        Err(SendError::Permanent { reason }) => {
            assert!(
                reason.contains("67") && reason.contains("user unknown"),
                "{reason}"
            )
        }
        other => panic!("exit 67: {other:?}"),
    }
    // Exits at once without reading the message: still classified by its status.
    let early = script(dir.path(), "early", "exit 75")?;
    assert!(matches!(
        rt.block_on(sendmail_mailer(&early).send(&msg)),
        Err(SendError::Transient { .. })
    ));
    let missing = dir.path().join("no-such-sendmail");
    assert!(matches!(
        rt.block_on(sendmail_mailer(&missing).send(&msg)),
        Err(SendError::Transient { .. })
    ));
    Ok(())
}
