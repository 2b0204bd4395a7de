//! Issue 11: what the ledger, the status and the report show of a job, against the real
//! bftpd: refused names as ledger members, a file's progress while it copies, the
//! attempt's transcript labelled by connection pair on one clock.

use std::time::Duration;

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::files::content;
use bftp_tests::hostile::{HostileServer, Script};
use bftp_tests::jobs::{status, submit_urls, wait_final};
use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};
use mail_parser::MessageParser;
use serde_json::Value;

const NOTIFY: &str = "ops@bftp-test.invalid";

/// The refused names of the hostile listing, byte for byte, and how the ledger shows each.
const REFUSED: [(&[u8], &str, &str); 5] = [
    (b"bad\rname.dat", "bad\\rname.dat", "0x0d"),
    // A bare LF inside a CRLF listing: one name, refused whole, never `bad` + `name.dat`.
    (b"bad\nname.dat", "bad\\nname.dat", "0x0a"),
    (b"nul\0name.dat", "nul\\0name.dat", "0x00"),
    (b"../escape.dat", "../escape.dat", "\"..\""),
    (
        b"/etc/passwd.dat",
        "/etc/passwd.dat",
        "outside the listed directory",
    ),
];

/// Issue 11 item 4: a listing of 60 good files and five names bftpd refuses (CR, bare LF,
/// NUL, `..`, an absolute path elsewhere) gives a `partial` job whose ledger holds each
/// refused name as a `refused` member with its reason; the mail's subject, the report's
/// JSON and `bftp status` (human and JSON) count them; the bare-LF line invents no
/// `name.dat` member (a file of that name exists on the source, and is not copied); no
/// refused name reaches the source in a command.
#[test]
fn refused_listed_names_are_ledger_members_and_make_the_job_partial() {
    let sink = SmtpSink::start().unwrap();
    let good: Vec<String> = (0..60).map(|i| format!("g-{i:02}.dat")).collect();
    let mut listed: Vec<Vec<u8>> = good.iter().map(|n| n.as_bytes().to_vec()).collect();
    listed.extend(REFUSED.iter().map(|(raw, _, _)| raw.to_vec()));
    // NLST (no MLSD): the names arrive as lines with nothing else to frame them.
    let mut script = Script::new().user("src", "src-pw").without_mlsd();
    for n in &good {
        script = script.file(&format!("/out/{n}"), content(n, 2_000));
    }
    // What an LF split would invent, present so that a wrong member would be copied.
    script = script
        .file("/out/name.dat", content("name.dat", 100))
        .listing("/out", listed);
    let src = HostileServer::start(script).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(|dir| {
        Bftpd::mail_config(dir, sink.port(), "[ftp]\nparallel_pairs = 2\n")
    })
    .unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/*.dat"), src.password()),
        (&dst.url("in/"), dst.password()),
        &["--notify", NOTIFY],
    );
    let v = wait_final(&d, id, Duration::from_secs(90));
    assert_eq!(v["outcome"], "partial", "{v:#}");

    // The ledger: 60 succeeded, 5 refused with their reasons, nothing invented.
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.len(), 65, "{v:#}");
    let succeeded = members.iter().filter(|m| m["state"] == "succeeded").count();
    assert_eq!(succeeded, 60, "{v:#}");
    for (_, shown, reason) in REFUSED {
        let m = members
            .iter()
            .find(|m| m["name"] == shown)
            .unwrap_or_else(|| panic!("no ledger member {shown:?}: {v:#}"));
        assert_eq!(m["state"], "refused", "{m:#}");
        assert_eq!(m["attempts"], 0, "{m:#}");
        let detail = m["detail"].as_str().unwrap_or("");
        assert!(detail.contains(reason), "{shown}: detail {detail:?}");
    }
    for m in members {
        let name = m["name"].as_str().unwrap();
        assert!(
            name != "name.dat" && name != "bad" && !name.contains(['\r', '\n', '\0']),
            "a member named {name:?}"
        );
    }
    assert!(
        dst.read_file("in/name.dat").is_err(),
        "an invented name was copied"
    );
    let counts = &v["counts"];
    assert_eq!(
        (&counts["files"], &counts["succeeded"], &counts["refused"]),
        (&Value::from(65), &Value::from(60), &Value::from(5)),
        "{counts:#}"
    );

    // No refused name was ever sent to the source.
    for line in src.commands() {
        assert!(
            !line.contains("bad")
                && !line.contains("escape")
                && !line.contains("passwd")
                && !line.contains("nul")
                && !line.contains("name.dat"),
            "the source received {line:?}"
        );
    }

    // `bftp status`, for people.
    let o = d.bftp(&["status", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let human = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        human.contains("files (65: 60 succeeded, 5 refused):"),
        "{human}"
    );
    assert!(human.contains("bad\\rname.dat"), "{human}");

    // The report: the subject and the JSON count them.
    let mails = sink.wait_for(1, Duration::from_secs(30)).unwrap();
    let m = MessageParser::default()
        .parse(mails[0].as_bytes())
        .expect("a parsable message");
    assert_eq!(
        m.subject(),
        Some(format!("BFTP results: {id}: partial (60 of 65 files copied, 5 refused)").as_str())
    );
    let body = m.body_text(0).unwrap().to_string();
    assert!(body.contains("bad\\nname.dat"), "{body}");
    let att = m.attachment(0).expect("a JSON attachment");
    let json: Value = serde_json::from_slice(att.contents()).unwrap();
    assert_eq!(json["summary"]["refused"], 5, "{:#}", json["summary"]);
    assert_eq!(json["summary"]["succeeded"], 60);
    assert_eq!(json["job"]["counts"]["refused"], 5);
    let _ = status(&d, id);
}

/// Issue 11 item 13: a multi-file job on three parallel pairs (vsftpd to Pure-FTPd). The
/// mailed transcript of the attempt labels every line with its pair (`[p1]`...) and its
/// times, on one clock for the attempt, never go backwards; more than one pair speaks.
#[test]
fn the_attempt_transcript_labels_each_pair_on_one_clock() {
    let sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    for i in 0..9 {
        let n = format!("t-{i}.dat");
        src.put_file(&format!("out/{n}"), &content(&n, 200_000))
            .unwrap();
    }
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(|dir| {
        Bftpd::mail_config(dir, sink.port(), "[ftp]\nparallel_pairs = 3\n")
    })
    .unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/t-*.dat"), src.password()),
        (&dst.url("in/"), dst.password()),
        &["--notify", NOTIFY],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    let mails = sink.wait_for(1, Duration::from_secs(30)).unwrap();
    let m = MessageParser::default()
        .parse(mails[0].as_bytes())
        .expect("a parsable message");
    let att = m.attachment(0).expect("a JSON attachment");
    let json: Value = serde_json::from_slice(att.contents()).unwrap();
    let lines: Vec<&str> = json["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .filter(|l| !l.starts_with("[... "))
        .collect();
    assert!(lines.len() > 20, "{lines:#?}");
    let mut last = 0u64;
    let mut pairs = std::collections::BTreeSet::new();
    for l in &lines {
        // `[   1234 ms] [p2] source> RETR ...`
        let (at, rest) = l
            .strip_prefix('[')
            .and_then(|r| r.split_once(" ms] "))
            .unwrap_or_else(|| panic!("no time in {l:?}"));
        let at: u64 = at.trim().parse().unwrap_or_else(|_| panic!("{l:?}"));
        let label = rest
            .strip_prefix("[p")
            .and_then(|r| r.split_once("] "))
            .map(|(n, _)| n)
            .unwrap_or_else(|| panic!("no pair label in {l:?}"));
        assert!(label.parse::<u32>().is_ok(), "{l:?}");
        assert!(at >= last, "time goes back at {l:?}:\n{lines:#?}");
        last = at;
        pairs.insert(label.to_string());
    }
    assert!(pairs.len() >= 2, "only pairs {pairs:?} spoke:\n{lines:#?}");
    // The text part shows the same lines.
    let body = m.body_text(0).unwrap().to_string();
    for l in lines.iter().rev().take(5) {
        assert!(body.contains(l), "{l:?} not in the text:\n{body}");
    }
}

/// Issue 11 item 12: while a rate-limited vsftpd sends an 8 MB file (2 MB/s) to Pure-FTPd,
/// `bftp status --json` shows the running member's progress with bytes so far above zero,
/// a rate and an elapsed time before the member ends; `bftp status` and `--watch` show the
/// file in flight in words, times beside their distance from now; and once done, the
/// single-file member carries the size SIZE gave.
#[test]
fn a_running_copy_shows_its_progress_and_the_single_file_size_is_recorded() {
    const LEN: usize = 32_000_000;
    let src = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            max_rate: Some(2_000_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    let data = content("slow.bin", LEN);
    src.put_file("out/slow.bin", &data).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/slow.bin"), src.password()),
        (&dst.url("in/slow.bin"), dst.password()),
        &[],
    );
    let (watched, seen, human) = std::thread::scope(|s| {
        let watch =
            s.spawn(|| d.bftp(&["status", "--watch", "--interval", "300ms", &id.to_string()]));
        let mut seen: Option<Value> = None;
        let mut human = String::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let v = status(&d, id);
            let m = &v["members"][0];
            if m["state"] != "pending" || v["state"] == "finished" {
                break;
            }
            let p = &m["progress"];
            if p["bytes_so_far"].as_u64().is_some_and(|b| b > 0) && seen.is_none() {
                seen = Some(p.clone());
                let o = d.bftp(&["status", &id.to_string()]);
                human = String::from_utf8_lossy(&o.stdout).to_string();
            }
            assert!(std::time::Instant::now() < deadline, "{v:#}");
            std::thread::sleep(Duration::from_millis(200));
        }
        (watch.join().unwrap(), seen, human)
    });
    let p = seen.unwrap_or_else(|| panic!("no bytes so far seen while copying\n{}", d.logs()));
    eprintln!("progress while copying: {p}");
    assert_eq!(p["phase"], "transferring", "{p:#}");
    let bytes = p["bytes_so_far"].as_u64().unwrap();
    assert!(bytes > 0 && bytes < LEN as u64, "{p:#}");
    assert!(p["elapsed_seconds"].as_f64().unwrap() > 0.0, "{p:#}");
    assert!(p["started_at"].is_string(), "{p:#}");
    assert!(
        p["rate_bytes_per_second"]
            .as_f64()
            .is_some_and(|r| r > 100_000.0 && r < 20_000_000.0),
        "{p:#}"
    );
    assert!(
        human.contains("copying #0 slow.bin: transferring, "),
        "{human}"
    );
    assert!(human.contains(" ago)"), "no relative time: {human}");

    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    let m = &v["members"][0];
    assert_eq!(m["size"], LEN as u64, "{m:#}");
    assert!(m.get("progress").is_none(), "{m:#}");
    assert_eq!(dst.read_file("in/slow.bin").unwrap(), data);

    assert_eq!(watched.status.code(), Some(0), "{}", text(&watched));
    let watched = String::from_utf8_lossy(&watched.stdout).to_string();
    assert!(
        watched.contains("copying #0 slow.bin: transferring, ") && watched.contains(" MB"),
        "--watch never showed the file in flight:\n{watched}"
    );
}
