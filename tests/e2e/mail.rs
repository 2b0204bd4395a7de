//! Completion reports by mail (issue 5) against the real bftpd, real FTP servers and a real
//! SMTP listener (aiosmtpd) on loopback.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::files::content;
use bftp_tests::jobs::{status, submit, wait_final};
use bftp_tests::report::{parse, parts};
use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};
use serde_json::Value;

const NOTIFY: &str = "ops@bftp-test.invalid";

fn start_daemon(sink: &SmtpSink) -> Bftpd {
    // A short reply timeout: the unreadable file's destination otherwise waits one default
    // reply timeout for data that never comes (see scheduler::one_unreadable_file_fails_only_its_member).
    Bftpd::start_with(|dir| Bftpd::mail_config(dir, sink.port(), "[ftp]\nreply_timeout = \"3s\"\n"))
        .unwrap()
}

/// Polls the job's report until `done` holds (bounded); the job's last view.
fn wait_report(d: &Bftpd, id: u64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = status(d, id);
        if done(&v["report"]) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "job {id}: report not {what}: {:#}\n{}",
            v["report"],
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn header<'a>(m: &'a mail_parser::Message<'a>, name: &str) -> String {
    m.header_raw(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .trim()
        .to_string()
}

/// RULES.md §3/§4.6: the report of a multi-file job with one permanent failure, field by field.
#[test]
fn the_report_of_a_partial_job_arrives_with_every_field() {
    let sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for n in ["a", "b", "c"] {
        src.put_file(&format!("out/{n}.dat"), &content(n, 20_000))
            .unwrap();
    }
    // The session runs as bftp-ftp: mode 000 makes RETR of b.dat fail with 550.
    std::fs::set_permissions(
        src.path("out/b.dat"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    dst.mkdir("in").unwrap();
    let d = start_daemon(&sink);
    let id = submit(
        &d,
        &src,
        &dst,
        "out/*.dat",
        "in/",
        &["--notify", NOTIFY, "--keyword", "nightly"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "partial", "{v:#}");
    let v = wait_report(&d, id, "delivered", |r| r["state"] == "delivered");
    let report = &v["report"];
    assert_eq!(report["tries"], 1, "{report:#}");
    assert_eq!(report["recipients"], serde_json::json!([NOTIFY]));

    let mails = sink.received();
    assert_eq!(mails.len(), 1, "exactly one report");
    let mail = &mails[0];
    assert_eq!(mail.mail_from, "bftp@bftp-test.invalid");
    assert_eq!(mail.rcpt_to, [NOTIFY]);
    let m = parse(&mail.data);
    assert_eq!(
        m.subject(),
        Some(format!("BFTP results: {id}: partial (2 of 3 files copied, 1 failed)").as_str())
    );
    assert_eq!(
        header(&m, "Message-ID"),
        report["message_id"].as_str().unwrap()
    );
    assert!(
        header(&m, "Message-ID").starts_with(&format!("<bftp.job-{id}.")),
        "{}",
        header(&m, "Message-ID")
    );
    assert_eq!(header(&m, "Auto-Submitted"), "auto-generated");
    assert_eq!(header(&m, "X-BFTP-Job"), id.to_string());
    assert!(header(&m, "To").contains(NOTIFY));

    let (body, json, name) = parts(&mail.data);
    // The outcome comes first, plainly.
    assert!(
        body.starts_with("Outcome: partial — 2 of 3 files copied, 1 failed"),
        "{body}"
    );
    let src_url = src.url("out/*.dat");
    assert!(
        body.contains(&src_url),
        "the request's source is shown: {body}"
    );
    assert!(body.contains(&dst.url("in/")), "{body}");
    assert!(body.contains("(password given, not shown)"), "{body}");
    // The per-file table: each file's state and each server's last reply.
    let line_of = |name: &str| {
        body.lines()
            .find(|l| l.trim_end().ends_with(name))
            .unwrap_or_else(|| panic!("no line for {name}: {body}"))
            .to_string()
    };
    for n in ["a.dat", "c.dat"] {
        let l = line_of(n);
        assert!(l.contains("succeeded") && l.contains("20000"), "{l}");
    }
    assert!(line_of("b.dat").contains("failed_permanent"), "{body}");
    assert!(
        body.contains("source:      550"),
        "b.dat's 550 is shown: {body}"
    );
    // The attempt history with times, and the transcript of the last attempt.
    assert!(body.contains("History"), "{body}");
    assert!(
        body.contains("submitted") && body.contains("start"),
        "{body}"
    );
    assert!(body.contains("Transcript of the last attempt"), "{body}");
    // The whole attempt: the login and the listing, then each copy.
    let at = |needle: &str| {
        body.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in the transcript: {body}"))
    };
    // On one clock, in time order: the listing comes before every copy; the copies run on
    // parallel pairs, so a.dat's and b.dat's RETR may come in either order.
    assert!(at("source> PASS ****") < at("NLST") && at("NLST") < at("source> RETR out/a.dat"));
    assert!(at("NLST") < at("source> RETR out/b.dat"));

    assert_eq!(name, format!("bftp-job-{id}.json"));
    assert_eq!(json["schema"], "bftp-report/1");
    assert_eq!(json["summary"]["outcome"], "partial");
    assert_eq!(json["summary"]["files"], 3);
    assert_eq!(json["summary"]["succeeded"], 2);
    assert_eq!(json["summary"]["failed"], 1);
    assert_eq!(json["job"]["id"], id);
    let members = json["job"]["members"].as_array().unwrap();
    let states: Vec<(&str, &str)> = members
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("a.dat", "succeeded"),
            ("b.dat", "failed_permanent"),
            ("c.dat", "succeeded")
        ]
    );
    assert_eq!(members[1]["source_reply"]["code"], 550);
    assert_eq!(json["job"]["source"]["url"], src_url);
    assert!(json["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().contains("RETR out/b.dat")));
    // The job view in the report is the one `bftp status` shows, without its own delivery.
    assert!(json["job"].get("report").is_none(), "{json:#}");
    // The ledger in the report is the one `bftp status` shows (server text with control
    // characters escaped).
    let key = |m: &Value| {
        (
            m["name"].clone(),
            m["state"].clone(),
            m["bytes"].clone(),
            m["attempts"].clone(),
            m["source_reply"]["code"].clone(),
            m["dest_reply"]["code"].clone(),
        )
    };
    let shown: Vec<_> = v["members"].as_array().unwrap().iter().map(key).collect();
    assert_eq!(members.iter().map(key).collect::<Vec<_>>(), shown);
}

/// RULES.md §4.6: with the relay down when the job finishes, the report waits in the outbox and
/// arrives once the relay is back, exactly once.
#[test]
fn a_report_waits_out_an_smtp_outage_and_arrives_once() {
    let mut sink = SmtpSink::start().unwrap();
    sink.stop();
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    src.put_file("out/f.bin", &content("f", 10_000)).unwrap();
    dst.mkdir("in").unwrap();
    let d = start_daemon(&sink);
    let id = submit(&d, &src, &dst, "out/f.bin", "in/", &["--notify", NOTIFY]);
    assert_eq!(
        wait_final(&d, id, Duration::from_secs(60))["outcome"],
        "succeeded"
    );
    let v = wait_report(&d, id, "retried", |r| {
        r["state"] == "pending" && r["tries"].as_u64() >= Some(2)
    });
    let err = v["report"]["last_error"].as_str().unwrap_or("");
    assert!(
        err.contains("refused") || err.contains("onnect"),
        "{:#}",
        v["report"]
    );
    assert!(v["report"]["next_try_at"].is_string(), "{:#}", v["report"]);
    let human = text(&d.bftp(&["status", &id.to_string()]));
    assert!(
        human.contains("report") && human.contains("pending for"),
        "{human}"
    );

    sink.start_again().unwrap();
    sink.wait_for(1, Duration::from_secs(30)).unwrap();
    let v = wait_report(&d, id, "delivered", |r| r["state"] == "delivered");
    // Longer than the retry cap (2 s): a second delivery would have happened by now.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(sink.messages().len(), 1, "exactly once");
    let tries = v["report"]["tries"].as_u64().unwrap();
    assert!(
        tries >= 3,
        "two failed tries and the delivery: {:#}",
        v["report"]
    );
    assert_eq!(status(&d, id)["report"]["tries"].as_u64(), Some(tries));
}

/// RULES.md §4.6: kill -9 between the finish and the delivery. The report is delivered after the
/// restart; a crash after the relay stored it but before bftpd recorded the delivery sends it
/// again (at least once), with the same Message-ID, never another one.
#[test]
fn kill9_between_finish_and_delivery_keeps_the_report_and_its_message_id() {
    let sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    src.put_file("out/f.bin", &content("f", 10_000)).unwrap();
    src.put_file("out/g.bin", &content("g", 10_000)).unwrap();
    dst.mkdir("in").unwrap();
    let mut d = start_daemon(&sink);

    // 1. The relay defers: finished, report pending, then kill -9.
    sink.set_reply(Some("451 4.3.0 try again later")).unwrap();
    let first = submit(&d, &src, &dst, "out/f.bin", "in/", &["--notify", NOTIFY]);
    wait_final(&d, first, Duration::from_secs(60));
    let v = wait_report(&d, first, "deferred", |r| {
        r["state"] == "pending" && r["tries"].as_u64() >= Some(1)
    });
    assert!(
        v["report"]["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("451"),
        "{:#}",
        v["report"]
    );
    let first_id = v["report"]["message_id"].as_str().unwrap().to_string();
    d.kill9();
    sink.set_reply(None).unwrap();
    d.restart_after_kill9().unwrap();
    let v = wait_report(&d, first, "delivered", |r| r["state"] == "delivered");
    assert_eq!(v["report"]["message_id"], first_id.as_str());
    let mails = sink.wait_for(1, Duration::from_secs(10)).unwrap();
    assert_eq!(mails.len(), 1);
    let m = parse(&mails[0]);
    assert_eq!(header(&m, "Message-ID"), first_id);

    // 2. The relay stores the message but holds its 250: kill -9 before bftpd hears it.
    sink.hold(true).unwrap();
    let second = submit(&d, &src, &dst, "out/g.bin", "in/", &["--notify", NOTIFY]);
    wait_final(&d, second, Duration::from_secs(60));
    sink.wait_for(2, Duration::from_secs(30)).unwrap();
    let pending = status(&d, second);
    assert_eq!(
        pending["report"]["state"], "pending",
        "{:#}",
        pending["report"]
    );
    let second_id = pending["report"]["message_id"]
        .as_str()
        .unwrap()
        .to_string();
    d.kill9();
    sink.hold(false).unwrap();
    d.restart_after_kill9().unwrap();
    let v = wait_report(&d, second, "delivered", |r| r["state"] == "delivered");
    assert_eq!(v["report"]["message_id"], second_id.as_str());
    let mails = sink.wait_for(3, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let ids: Vec<String> = sink
        .messages()
        .iter()
        .map(|raw| {
            let m = parse(raw);
            header(&m, "Message-ID")
        })
        .collect();
    assert_eq!(mails.len(), 3);
    assert_eq!(
        ids,
        [first_id.clone(), second_id.clone(), second_id.clone()],
        "the repeated delivery carries the same Message-ID"
    );
    assert_ne!(first_id, second_id);
}

/// RULES.md §8 and RFC 1068: cancelling a job mails its owner a report that says so; with no
/// notify address it goes to the owner's login at `owner_domain`.
#[test]
fn cancel_mails_the_owner_a_report() {
    let sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let d = start_daemon(&sink);
    let id = submit(
        &d,
        &src,
        &dst,
        "out/later.bin",
        "in/",
        &["--start", "in 2h"],
    );
    let o = d.bftp(&["cancel", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = wait_report(&d, id, "delivered", |r| r["state"] == "delivered");
    assert_eq!(
        v["report"]["recipients"],
        serde_json::json!(["root@bftp-test.invalid"])
    );
    let mails = sink.received();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].rcpt_to, ["root@bftp-test.invalid"]);
    let m = parse(&mails[0].data);
    let subject = m.subject().unwrap_or("").to_string();
    assert!(
        subject.starts_with(&format!("BFTP results: {id}: cancelled")),
        "{subject}"
    );
    let (body, json, _) = parts(&mails[0].data);
    assert!(body.starts_with("Outcome: cancelled"), "{body}");
    assert!(body.contains("later.bin"), "{body}");
    assert_eq!(json["summary"]["outcome"], "cancelled");
    assert_eq!(json["job"]["members"][0]["state"], "cancelled");
    let human = text(&d.bftp(&["status", &id.to_string()]));
    assert!(
        human.contains("delivered") && human.contains("root@bftp-test.invalid"),
        "{human}"
    );
}

/// A relay that refuses the message for good (5yz): the report is given up at once with the
/// reason, not retried for days.
#[test]
fn a_permanent_refusal_gives_the_report_up_with_the_reason() {
    let sink = SmtpSink::start().unwrap();
    sink.set_reply(Some("550 5.1.1 no such mailbox")).unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let d = start_daemon(&sink);
    let id = submit(
        &d,
        &src,
        &dst,
        "out/x.bin",
        "in/",
        &["--start", "in 2h", "--notify", NOTIFY],
    );
    assert_eq!(d.bftp(&["cancel", &id.to_string()]).status.code(), Some(0));
    let v = wait_report(&d, id, "given up", |r| r["state"] == "gave_up");
    assert_eq!(v["report"]["tries"], 1, "{:#}", v["report"]);
    assert!(
        v["report"]["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("550"),
        "{:#}",
        v["report"]
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(status(&d, id)["report"]["tries"], 1, "not retried");
    assert!(sink.messages().is_empty());
}

/// No password, in any form, in a delivered report, even where a server repeats it (here
/// inside a file name, which appears in listings and replies): that name is refused at the
/// listing (copying it would store the password in the ledger) and shown masked.
#[test]
fn no_password_in_any_form_reaches_a_report() {
    let sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Proftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let pw = src.password().to_string();
    src.put_file(&format!("out/leak-{pw}.dat"), &content("l", 5_000))
        .unwrap();
    src.put_file("out/leak-plain.dat", &content("p", 5_000))
        .unwrap();
    dst.mkdir("in").unwrap();
    let d = start_daemon(&sink);
    let id = submit(
        &d,
        &src,
        &dst,
        "out/leak-*.dat",
        "in/",
        &["--notify", NOTIFY],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    let names = bftp_tests::jobs::member_names(&v);
    assert!(
        names.iter().any(|n| n.contains("leak-plain.dat"))
            && !names.iter().any(|n| n.contains(&pw)),
        "the name holding the password is not a member: {v:#}"
    );
    assert!(!v.to_string().contains(&pw), "{v:#}");
    wait_report(&d, id, "delivered", |r| r["state"] == "delivered");
    let raw = sink.messages().pop().unwrap();
    let (body, json, _) = parts(&raw);
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let forms = [
        pw.clone(),
        pw.replace('-', "%2D"),
        pw.replace('-', "%2d"),
        b64(&pw),
        b64(&format!("\0bftp-ftp\0{pw}")),
    ];
    let json_text = json.to_string();
    for form in &forms {
        for (what, hay) in [
            ("raw mail", &raw),
            ("text part", &body),
            ("JSON", &json_text),
        ] {
            assert!(
                !hay.contains(form.as_str()),
                "{what} holds the password as {form:?}"
            );
        }
    }
    assert!(
        body.contains("leak-****.dat"),
        "the name is shown, masked: {body}"
    );
}

/// The forms a password takes when a server echoes it: clear, percent-encoded, base64 alone
/// and inside longer base64 at each of the three alignments, hex in both cases.
fn echoed_forms(pw: &str) -> Vec<(&'static str, String)> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let hex = |upper: bool| -> String {
        pw.bytes()
            .map(|b| {
                if upper {
                    format!("{b:02X}")
                } else {
                    format!("{b:02x}")
                }
            })
            .collect()
    };
    let pct: String = pw.bytes().map(|b| format!("%{b:02X}")).collect();
    vec![
        ("clear", pw.to_string()),
        ("percent", pct),
        (
            "userinfo percent",
            pw.replace('/', "%2f").replace(':', "%3a"),
        ),
        ("base64", b64.encode(pw)),
        ("base64 at offset 1", b64.encode(format!("\0{pw}!"))),
        ("base64 at offset 2", b64.encode(format!("\0u\0{pw}"))),
        (
            "base64 at offset 0 of a longer text",
            b64.encode(format!("abc{pw}xyz")),
        ),
        ("hex lower", hex(false)),
        ("hex upper", hex(true)),
    ]
}

/// What betrays the password in any text: the clear and percent forms, the hex forms, and
/// the characters of its base64 made only of its bits at each alignment.
fn leak_needles(pw: &str) -> Vec<(String, String)> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut needles: Vec<(String, String)> = echoed_forms(pw)
        .into_iter()
        .filter(|(what, _)| !what.starts_with("base64"))
        .map(|(w, f)| (w.to_string(), f))
        .collect();
    for k in 0..3usize {
        let mut buf = vec![0u8; k];
        buf.extend_from_slice(pw.as_bytes());
        let enc = b64.encode(&buf);
        let inner = enc[(8 * k).div_ceil(6)..(8 * (k + pw.len())) / 6].to_string();
        needles.push((format!("base64 at alignment {k}"), inner));
    }
    needles
}

fn assert_no_leak(what: &str, hay: &[u8], pw: &str) {
    for (form, needle) in leak_needles(pw) {
        assert!(
            !hay.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "{what} holds the password ({form}: {needle}):\n{}",
            String::from_utf8_lossy(hay)
        );
    }
}

/// A server that echoes the password back, in every encoding, in its refusal of PASS (one
/// job) and of RETR (another): the password reaches neither the job's history, its ledger,
/// its stored transcript, `bftp status` (text and JSON), `bftp verify --transcript`, the
/// report mail, nor any file of the state directory.
#[test]
fn a_server_echoing_the_password_leaks_it_nowhere() {
    use bftp_tests::hostile::{Action, HostileServer, Script};
    let pw = "Ech0-S3cret/pw:42";
    let echo = |code: u16| {
        let forms: Vec<String> = echoed_forms(pw)
            .into_iter()
            .map(|(what, form)| format!(" {what}: {form}"))
            .collect();
        format!(
            "{code}-Refused. You sent:\n{}\n{code} {pw} is not welcome, {} either",
            forms.join("\n"),
            echoed_forms(pw)[7].1
        )
    };
    let refusing = HostileServer::start(
        Script::new()
            .user("alice", pw)
            .file("/out/a.dat", content("a", 2_000))
            .on("PASS", Action::reply(echo(530))),
    )
    .unwrap();
    let echoing = HostileServer::start(
        Script::new()
            .user("alice", pw)
            .file("/out/b.dat", content("b", 2_000))
            .on("RETR", Action::reply(echo(550))),
    )
    .unwrap();
    let dst = HostileServer::start(Script::new().user("bob", "dst-pw").dir("/in")).unwrap();
    let sink = SmtpSink::start().unwrap();
    let d = start_daemon(&sink);

    let mut jobs = Vec::new();
    for src in [&refusing, &echoing] {
        let id = bftp_tests::jobs::submit_urls(
            &d,
            (&src.url("out/*.dat"), pw),
            (&dst.url("in/"), dst.password()),
            &["--notify", NOTIFY],
        );
        jobs.push(id);
    }
    let mut views = Vec::new();
    for &id in &jobs {
        let v = wait_final(&d, id, Duration::from_secs(60));
        assert_eq!(v["outcome"], "failed", "{v:#}");
        views.push(v);
    }
    // The servers did echo it: the test means something only if they did.
    assert!(echoing.observed().saw("RETR") && refusing.observed().saw("PASS"));
    let refused = views[0].to_string();
    assert!(
        refused.contains("530") && refused.contains("****"),
        "{refused}"
    );
    let failed = views[1].to_string();
    assert!(
        failed.contains("550") && failed.contains("****"),
        "{failed}"
    );

    for &id in &jobs {
        wait_report(&d, id, "delivered", |r| r["state"] == "delivered");
    }
    let mails = sink.messages();
    assert_eq!(mails.len(), 2);
    for raw in &mails {
        let (body, json, _) = parts(raw);
        assert!(body.contains("****"), "{body}");
        assert_no_leak("the raw mail", raw.as_bytes(), pw);
        assert_no_leak("the mail's text part", body.as_bytes(), pw);
        assert_no_leak("the mail's JSON", json.to_string().as_bytes(), pw);
    }

    for &id in &jobs {
        let id = id.to_string();
        for args in [
            vec!["status", &id],
            vec!["--json", "status", &id],
            vec!["status"],
            vec!["--json", "status"],
        ] {
            let o = d.bftp(&args);
            assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
            assert_no_leak(&format!("bftp {args:?}"), text(&o).as_bytes(), pw);
        }
    }
    for src in [&refusing, &echoing] {
        let o = d.bftp_env(
            None,
            &[
                "verify",
                "--transcript",
                &src.url("out/a.dat"),
                &dst.url("in/"),
            ],
            &[
                ("BFTP_SOURCE_PASSWORD", pw),
                ("BFTP_DEST_PASSWORD", dst.password()),
            ],
        );
        let shown = text(&o);
        assert!(
            shown.contains("transcript:") && shown.contains("****"),
            "{shown}"
        );
        assert_no_leak("bftp verify --transcript", shown.as_bytes(), pw);
    }
    assert_no_leak("bftpd's log", d.logs().as_bytes(), pw);

    // Every file of the state directory, raw.
    let mut stack = vec![d.state_dir()];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files += 1;
                let bytes = std::fs::read(&p).unwrap();
                assert_no_leak(&p.display().to_string(), &bytes, pw);
            }
        }
    }
    assert!(
        files > 0,
        "no store files under {}",
        d.state_dir().display()
    );
}
