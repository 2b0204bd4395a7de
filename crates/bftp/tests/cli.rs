//! The `bftp` binary as a user runs it: exit codes, stderr, `--json`, against a scripted
//! bftpd on a Unix socket.

mod common;

use std::path::Path;

use common::{code, text, Env};

#[test]
fn no_daemon_is_exit_3_naming_the_socket() {
    let env = Env::new();
    let o = env.bftp(&["status"], &[]);
    assert_eq!(code(&o), 3, "{o:?}");
    let err = text(&o.stderr);
    let sock = env.socket().display().to_string();
    assert!(
        err.starts_with(&format!(
            "bftp: listing jobs: bftpd is not running? could not connect to {sock}: "
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(o.stdout.is_empty());

    let o = env.bftp(&["--json", "cancel", "5"], &[]);
    assert_eq!(code(&o), 3);
    let body: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(body["kind"], "unavailable");
    assert!(body["message"].as_str().unwrap().contains(&sock));
}

#[test]
fn usage_error_is_exit_2_and_help_lists_exit_codes() {
    let env = Env::new();
    assert_eq!(code(&env.bftp(&["submit"], &[])), 2);
    assert_eq!(code(&env.bftp(&["cancel", "not-a-number"], &[])), 2);
    let help = env.bftp(&["--help"], &[]);
    assert_eq!(code(&help), 0);
    assert!(text(&help.stdout).contains("7  permission denied on the bftpd socket"));
    assert!(text(&help.stdout).contains("8  verification or transfer found a problem"));
}

#[test]
fn local_validation_is_exit_4_before_any_connection() {
    let env = Env::new();
    let o = env.bftp(&["submit", "ftp://h/f", "ftp://d/x", "--delete"], &[]);
    assert_eq!(code(&o), 4, "{o:?}");
    assert_eq!(
        text(&o.stderr),
        "bftp: disposition `delete` takes no destination\n"
    );
}

#[test]
fn submit_sends_the_env_password_and_never_prints_it() {
    let env = Env::new();
    let server = env.serve_once(
        409,
        r#"{"kind":"conflict","message":"request key reused with other parameters","job_id":3}"#,
    );
    let o = env.bftp(
        &[
            "--json",
            "submit",
            "ftp://alice@src/f",
            "ftp://d/x",
            "--request-key",
            "rk1",
        ],
        &[("BFTP_SOURCE_PASSWORD", "pw-from-env")],
    );
    let (head, body) = server.join().unwrap();
    assert_eq!(code(&o), 6, "{o:?}");
    assert!(head.starts_with("POST /v1/jobs HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nidempotency-key: rk1\r\n"),
        "{head}"
    );
    let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sent["source"]["password"], "pw-from-env");
    assert_eq!(sent["source"]["user"], "alice");
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["kind"], "conflict");
    assert_eq!(out["job_id"], 3);
    for stream in [&o.stdout, &o.stderr] {
        assert!(!text(stream).contains("pw-from-env"));
    }
}

#[test]
fn url_password_warns_on_stderr() {
    let env = Env::new();
    let o = env.bftp(&["submit", "ftp://alice:hunter2@src/f", "ftp://d/x"], &[]);
    assert_eq!(code(&o), 3);
    let err = text(&o.stderr);
    assert!(
        err.contains("warning: the source password is in the URL"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn netrc_is_read_from_home() {
    let env = Env::new();
    let netrc = env.dir.path().join(".netrc");
    std::fs::write(&netrc, "machine src login carol password from-netrc\n").unwrap();
    let server = env.serve_once(400, r#"{"kind":"invalid_request","message":"nope"}"#);
    let o = env.bftp(&["submit", "ftp://src/f", "ftp://d/x"], &[]);
    let (_, body) = server.join().unwrap();
    assert_eq!(code(&o), 4, "{o:?}");
    assert_eq!(
        text(&o.stderr),
        "bftp: submitting the job: nope [HTTP 400 Bad Request]\n"
    );
    let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            sent["source"]["user"].as_str(),
            sent["source"]["password"].as_str()
        ),
        (Some("carol"), Some("from-netrc"))
    );
    assert!(Path::new(&netrc).exists());
}
