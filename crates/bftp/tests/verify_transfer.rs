//! `bftp verify` and `bftp transfer` against a scripted bftpd: what they send, what they
//! print, their exit codes, and a transfer stream that arrives in pieces.

mod common;

use std::process::Command;

use bftp_api::{CheckView, FileResult, ReplyView, TransferEvent, TransferSummary, VerifyResponse};
use common::{code, text, Env, LinesOf, Step};

fn verify_response(failing: bool) -> &'static str {
    let r = VerifyResponse {
        ok: !failing,
        checks: vec![
            CheckView {
                name: "login source".into(),
                ok: true,
                detail: "230 Login successful".into(),
            },
            CheckView {
                name: "login destination".into(),
                ok: !failing,
                detail: if failing {
                    "530 Login incorrect"
                } else {
                    "230 Welcome"
                }
                .into(),
            },
        ],
        transcript: vec!["D> PASS ****".into(), "D< 530 Login incorrect".into()],
        data_path: None,
    };
    Box::leak(serde_json::to_string(&r).unwrap().into_boxed_str())
}

#[test]
fn verify_prints_each_check_and_a_failed_one_is_exit_8() {
    let env = Env::new();
    let server = env.serve_once(200, verify_response(true));
    let o = env.bftp(
        &[
            "verify",
            "ftp://alice@src/pub/*.csv",
            "ftp://bob@dst/in/",
            "--type",
            "A",
            "--transcript",
        ],
        &[("BFTP_DEST_PASSWORD", "dest-secret")],
    );
    let (head, body) = server.join().unwrap();
    assert_eq!(code(&o), 8, "{o:?}");
    assert!(head.starts_with("POST /v1/verify HTTP/1.1\r\n"), "{head}");
    let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sent["source"]["path"], "pub/*.csv");
    assert_eq!(sent["destination"]["password"], "dest-secret");
    assert_eq!(sent["transfer_type"], "A");
    assert_eq!(
        text(&o.stdout),
        "\
ok    login source       230 Login successful
FAIL  login destination  530 Login incorrect
1 of 2 checks failed

transcript:
  D> PASS ****
  D< 530 Login incorrect
"
    );
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
}

#[test]
fn verify_json_is_the_response_and_all_passed_is_exit_0() {
    let env = Env::new();
    let server = env.serve_once(200, verify_response(false));
    let o = env.bftp(&["--json", "verify", "ftp://src/f", "ftp://dst/x"], &[]);
    server.join().unwrap();
    assert_eq!(code(&o), 0, "{o:?}");
    let got: VerifyResponse = serde_json::from_slice(&o.stdout).unwrap();
    assert!(got.ok && got.checks.len() == 2);

    let env = Env::new();
    let o = env.bftp(&["verify", "ftp://src/f", "ftp://dst/x"], &[]);
    assert_eq!(code(&o), 3, "no bftpd: {o:?}");
}

fn line(e: &TransferEvent) -> String {
    format!("{}\n", serde_json::to_string(e).unwrap())
}

fn progress(name: &str, phase: &str) -> String {
    line(&TransferEvent::Progress {
        name: name.into(),
        phase: phase.into(),
    })
}

fn file(name: &str, ok: bool) -> String {
    line(&TransferEvent::File(FileResult {
        name: name.into(),
        state: if ok { "succeeded" } else { "failed_permanent" }.into(),
        bytes: ok.then_some(2_000_000),
        evidence: ok.then(|| "sizes equal (2000000 bytes)".into()),
        stored_as: None,
        source_reply: Some(ReplyView {
            code: Some(if ok { 226 } else { 550 }),
            text: if ok {
                "Transfer complete"
            } else {
                "No such file"
            }
            .into(),
        }),
        dest_reply: None,
        fallbacks: vec![],
        detail: None,
        seconds: 1.0,
        tls: None,
        proof: None,
        route: None,
    }))
}

fn summary(files: u32, failed: u32, error: Option<&str>) -> String {
    line(&TransferEvent::Summary(TransferSummary {
        files,
        succeeded: files - failed,
        failed,
        refused: 0,
        bytes: 2_000_000 * u64::from(files - failed),
        seconds: 1.0,
        error: error.map(String::from),
        transcript: vec![],
    }))
}

/// Cuts `s` into two pieces at a point inside it.
fn halves(s: &str) -> (&str, &str) {
    s.split_at(s.len() / 2)
}

#[test]
fn transfer_reads_a_stream_delivered_in_pieces() {
    let env = Env::new();
    let server = env.serve_stream();
    let mut child = env.spawn(&["transfer", "ftp://src/pub/a.bin", "ftp://dst/in/"]);
    let stdout = LinesOf::new(child.stdout.take().unwrap());
    let stderr = LinesOf::new(child.stderr.take().unwrap());

    let listed = line(&TransferEvent::Listed {
        files: vec!["a.bin".into()],
        rejected: vec![],
    });
    let done = file("a.bin", true);
    let (done_1, done_2) = halves(&done);
    let last = summary(1, 0, None);
    let (last_1, last_2) = halves(&last);

    // Each piece ends inside a line; bftp must print what is whole before the rest comes.
    server.chunk(format!(
        "{listed}{}",
        &progress("pub/a.bin", "preparing")[..7]
    ));
    assert_eq!(stdout.next(), "1 file to transfer");
    server.chunk(format!(
        "{}{}",
        &progress("pub/a.bin", "preparing")[7..],
        &progress("pub/a.bin", "transferring")
    ));
    assert_eq!(stderr.next(), "pub/a.bin  preparing  0s");
    assert!(stderr.next().starts_with("pub/a.bin  transferring  "));
    server.chunk(done_1);
    server.chunk(format!("{done_2}{last_1}"));
    assert_eq!(
        stdout.next(),
        "ok    a.bin  succeeded  2000000 bytes  1.0 s  sizes equal (2000000 bytes)"
    );
    server.chunk(last_2);
    server.step(Step::End);

    assert_eq!(
        stdout.rest(),
        vec!["1 file: 1 succeeded, 0 failed, 2000000 bytes in 1.0 s, 2.00 MB/s"]
    );
    assert!(stderr.rest().is_empty());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let served = server.join();
    assert!(
        served.head.starts_with("POST /v1/transfer HTTP/1.1\r\n"),
        "{}",
        served.head
    );
    assert!(
        served
            .head
            .to_ascii_lowercase()
            .contains("\r\naccept: application/x-ndjson\r\n"),
        "{}",
        served.head
    );
    let sent: serde_json::Value = serde_json::from_str(&served.body).unwrap();
    assert_eq!(sent["source"]["path"], "pub/a.bin");
    assert_eq!(sent["destination"]["path"], "in/");
}

#[test]
fn transfer_json_prints_each_line_and_a_failed_file_is_exit_8() {
    let env = Env::new();
    let server = env.serve_stream();
    let mut child = env.spawn(&["--json", "transfer", "ftp://src/*.bin", "ftp://dst/in/"]);
    let stdout = LinesOf::new(child.stdout.take().unwrap());
    let events = [
        progress("a.bin", "preparing"),
        file("a.bin", true),
        file("b.bin", false),
        summary(2, 1, None),
    ];
    let all = events.concat();
    // Cut every 10 bytes, whatever the lines.
    for piece in all.as_bytes().chunks(10) {
        server.chunk(piece);
    }
    server.step(Step::End);
    let got = stdout.rest();
    let want: Vec<String> = events.iter().map(|e| e.trim_end().to_string()).collect();
    assert_eq!(got, want);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(8));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    server.join();
}

#[test]
fn transfer_summary_error_is_exit_8() {
    let env = Env::new();
    let server = env.serve_stream();
    let child = env.spawn(&["transfer", "ftp://src/a", "ftp://dst/b"]);
    server.chunk(summary(
        0,
        0,
        Some("login refused by the source: 530 Login incorrect"),
    ));
    server.step(Step::End);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "0 files: 0 succeeded, 0 failed, 0 bytes in 1.0 s, 0.00 MB/s\n\
         error: login refused by the source: 530 Login incorrect\n"
    );
    server.join();
}

#[test]
fn transfer_stream_cut_before_its_summary_is_exit_1() {
    let env = Env::new();
    let server = env.serve_stream();
    let child = env.spawn(&["transfer", "ftp://src/a", "ftp://dst/b"]);
    server.chunk(progress("a", "transferring"));
    server.step(Step::End);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("bftp: bftpd ended the transfer without its summary"),
        "{}",
        text(&out.stderr)
    );
    server.join();
}

#[test]
fn transfer_refused_by_bftpd_keeps_the_http_exit_code() {
    let env = Env::new();
    let server = env.serve_once(
        400,
        r#"{"kind":"invalid_request","message":"a transfer needs a destination"}"#,
    );
    let o = env.bftp(&["--json", "transfer", "ftp://src/a", "ftp://dst/b"], &[]);
    server.join().unwrap();
    assert_eq!(code(&o), 4, "{o:?}");
    assert_eq!(
        text(&o.stderr),
        "bftp: starting the transfer: a transfer needs a destination [HTTP 400 Bad Request]\n"
    );
    let body: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(body["kind"], "invalid_request");
}

#[test]
fn ctrl_c_closes_the_connection_and_exits_130() {
    let env = Env::new();
    let server = env.serve_stream();
    let mut child = env.spawn(&["--json", "transfer", "ftp://src/a", "ftp://dst/b"]);
    let stdout = LinesOf::new(child.stdout.take().unwrap());
    server.chunk(progress("a", "transferring"));
    // bftp printed the event: it is reading the stream, with its Ctrl-C handler in place.
    assert_eq!(stdout.next(), progress("a", "transferring").trim_end());
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    server.step(Step::AwaitClose);
    let served = server.join();
    assert!(served.client_closed, "bftp kept the connection open");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        text(&out.stderr).starts_with("bftp: interrupted: the connection to bftpd is closed"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn transfer_needs_a_destination() {
    let env = Env::new();
    let o = env.bftp(&["transfer", "ftp://src/a"], &[]);
    assert_eq!(code(&o), 2, "{o:?}");
    let help = env.bftp(&["transfer", "--help"], &[]);
    assert!(text(&help.stdout).contains("8  verification or transfer found a problem"));
    assert!(text(&help.stdout).contains("130  interrupted"));
}
