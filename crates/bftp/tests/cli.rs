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

/// A watch as bftpd shows it back.
const WATCH_VIEW: &str = r#"{"id":3,"owner_uid":1000,"state":"active","created_at":"2026-12-01T07:00:00Z",
"source":{"host":"src","port":21,"user":"alice","path":"in","has_password":true,"has_acct":false,"url":"ftp://alice@src:21/in"},
"destination":{"host":"d","port":21,"user":"anonymous","path":"out","has_password":false,"has_acct":false,"url":"ftp://anonymous@d:21/out"},
"every":"10m","patterns":["*.csv"],"recursive":false,"settle":"30s","ignore":["*.part"],"ready":{"kind":"suffix","name":".done"},
"disposition":"move","dest_command":"replace","notify":[],"notify_on":"failure","expect":null,"has_keyword":false,
"proof":null,"data_path_asked":null,"polls":2,"last_poll_at":"2026-12-01T07:50:00Z","next_poll_at":"2026-12-01T08:00:00Z",
"last_error":null,"current_job":12,"jobs":[11,12],"delivered":4,"failed":0,"repeats":0,"waiting":1,"ignored":0,"refused":0,
"last_delivery_at":null,"notes":[{"path":"b.csv","kind":"no_marker","detail":"b.csv.done"}]}"#;

#[test]
fn watch_add_posts_the_template_job_with_the_env_password() {
    let env = Env::new();
    let server = env.serve_once(201, WATCH_VIEW);
    let o = env.bftp(
        &[
            "watch",
            "add",
            "ftp://alice@src/in",
            "ftp://d/out",
            "--every",
            "10m",
            "--pattern",
            "*.csv",
            "--ready-suffix",
            ".done",
            "--move",
        ],
        &[("BFTP_SOURCE_PASSWORD", "pw-from-env")],
    );
    let (head, body) = server.join().unwrap();
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(head.starts_with("POST /v1/watches HTTP/1.1\r\n"), "{head}");
    let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({
            "job": {
                "source": {"host": "src", "port": 21, "user": "alice", "password": "pw-from-env",
                           "path": "in"},
                "destination": {"host": "d", "port": 21, "user": "anonymous", "path": "out"},
                "disposition": "move",
                "retry": {},
                "notify": [],
            },
            "every": "10m",
            "patterns": ["*.csv"],
            "ready_suffix": ".done",
        })
    );
    let out = text(&o.stdout);
    assert!(
        out.starts_with("watch 3 added: active, every 10m\n"),
        "{out}"
    );
    for stream in [&o.stdout, &o.stderr] {
        assert!(!text(stream).contains("pw-from-env"));
    }
}

#[test]
fn watch_show_renders_the_answer_and_json_passes_it_through() {
    let env = Env::new();
    let server = env.serve_once(200, WATCH_VIEW);
    let o = env.bftp(&["watch", "show", "3"], &[]);
    let (head, _) = server.join().unwrap();
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(head.starts_with("GET /v1/watches/3 HTTP/1.1\r\n"), "{head}");
    let out = text(&o.stdout);
    for want in [
        "watch 3\n",
        "  source         ftp://alice@src:21/in (password set)\n",
        "  transfer       move, replace\n",
        "  ready          once F.done exists beside each file F\n",
        "  jobs           11, 12\n",
        "\nnot taken at the last poll (1):\n  b.csv: no_marker b.csv.done\n",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }

    let env = Env::new();
    let server = env.serve_once(404, r#"{"kind":"not_found","message":"no watch 4"}"#);
    let o = env.bftp(&["--json", "watch", "show", "4"], &[]);
    server.join().unwrap();
    assert_eq!(code(&o), 5, "{o:?}");
    let body: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(body["kind"], "not_found");
    assert_eq!(
        text(&o.stderr),
        "bftp: watch 4: no watch 4 [HTTP 404 Not Found]\n"
    );
}

#[test]
fn watch_add_checks_before_connecting() {
    let env = Env::new();
    let o = env.bftp(
        &[
            "watch",
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "often",
        ],
        &[],
    );
    assert_eq!(code(&o), 4, "{o:?}");
    assert!(
        text(&o.stderr).starts_with("bftp: --every \"often\": not a duration"),
        "{o:?}"
    );
    let o = env.bftp(
        &[
            "watch",
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "1m",
            "--ready-marker",
            "R",
            "--ready-suffix",
            ".ok",
        ],
        &[],
    );
    assert_eq!(code(&o), 2, "{o:?}");
}
