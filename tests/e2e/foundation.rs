//! Issue 2's acceptance: the queue's front door against the real bftpd and bftp binaries.

use std::time::Duration;

use bftp_tests::daemon::{files_containing, http, text, Bftpd, ALICE, BOB};
use serde_json::Value;

const SRC: &str = "ftp://alice@127.0.0.1:2121/pub/data.bin";
const DST: &str = "ftp://bob@127.0.0.1:2122/incoming/";
const PW_ENV: &[(&str, &str)] = &[
    ("BFTP_SOURCE_PASSWORD", "src-pw-X7q"),
    ("BFTP_DEST_PASSWORD", "dst-pw-K9z"),
];

fn json(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

fn submit(d: &Bftpd, user: Option<&str>, extra: &[&str]) -> Value {
    // Not due for an hour: these tests are about the queue, not the transfers.
    let mut args = vec!["--json", "submit", SRC, DST];
    if !extra.contains(&"--start") {
        args.extend_from_slice(&["--start", "in 1h"]);
    }
    args.extend_from_slice(extra);
    let o = d.bftp_env(user, &args, PW_ENV);
    assert_eq!(o.status.code(), Some(0), "submit failed: {}", text(&o));
    json(&o)
}

fn job_id(v: &Value) -> u64 {
    v["job"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job id in {v}"))
}

fn status_json(d: &Bftpd, user: Option<&str>, args: &[&str]) -> (Option<i32>, Value) {
    let mut a = vec!["--json", "status"];
    a.extend_from_slice(args);
    let o = d.bftp_env(user, &a, &[]);
    (
        o.status.code(),
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null),
    )
}

fn all_jobs(d: &Bftpd) -> Vec<Value> {
    let (code, v) = status_json(d, None, &["--all"]);
    assert_eq!(code, Some(0), "{v}");
    v["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no jobs array in {v}"))
}

#[test]
fn submitted_job_survives_kill9_right_after_the_answer() {
    let mut d = Bftpd::start().unwrap();
    let v = submit(
        &d,
        None,
        &[
            "--keyword",
            "nightly-run",
            "--start",
            "in 2h",
            "--type",
            "A",
            "--notify",
            "ops@example.org",
        ],
    );
    d.kill9();
    d.launch().unwrap();
    let id = job_id(&v);
    let (code, after) = status_json(&d, None, &[&id.to_string()]);
    assert_eq!(code, Some(0));
    assert_eq!(after, v["job"], "the job changed across a crash");
    assert_eq!(after["state"], "queued");
    assert_eq!(after["transfer_type"], "A");
    assert_eq!(after["members"][0]["name"], "data.bin");
    let (_, by_kw) = status_json(&d, None, &["--keyword", "nightly-run"]);
    assert_eq!(by_kw["jobs"][0]["id"].as_u64(), Some(id));
}

#[test]
fn another_user_can_neither_see_nor_cancel_but_root_can() {
    let d = Bftpd::start().unwrap();
    let id = job_id(&submit(&d, Some(ALICE), &["--keyword", "alice-kw"])).to_string();

    let o = d.bftp_env(Some(BOB), &["status", &id], &[]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "bob saw alice's job: {}",
        text(&o)
    );
    let o = d.bftp_env(Some(BOB), &["cancel", &id], &[]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "bob cancelled alice's job: {}",
        text(&o)
    );
    let (code, bobs) = status_json(&d, Some(BOB), &[]);
    assert_eq!(code, Some(0));
    assert_eq!(bobs["jobs"].as_array().map(Vec::len), Some(0), "{bobs}");
    let (_, bob_kw) = status_json(&d, Some(BOB), &["--keyword", "alice-kw"]);
    assert_eq!(
        bob_kw["jobs"].as_array().map(Vec::len),
        Some(0),
        "a keyword alone grants nothing: {bob_kw}"
    );
    let o = d.bftp_env(Some(BOB), &["status", "--all"], &[]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "a plain user listed everything: {}",
        text(&o)
    );

    let (_, alices) = status_json(&d, Some(ALICE), &[&id]);
    assert_eq!(alices["state"], "queued");

    let (code, root_view) = status_json(&d, None, &[&id]);
    assert_eq!(
        (code, root_view["state"].as_str()),
        (Some(0), Some("queued"))
    );
    let o = d.bftp_env(None, &["--json", "cancel", &id], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (_, after) = status_json(&d, Some(ALICE), &[&id]);
    assert_eq!(
        (after["state"].as_str(), after["outcome"].as_str()),
        (Some("cancelled"), Some("cancelled"))
    );
    assert_eq!(after["members"][0]["state"], "cancelled");
    let o = d.bftp_env(Some(ALICE), &["cancel", &id], &[]);
    assert_eq!(
        o.status.code(),
        Some(6),
        "cancelling twice is a conflict: {}",
        text(&o)
    );
}

#[test]
fn plaintext_passwords_appear_nowhere() {
    let mut d = Bftpd::start().unwrap();
    let url_pw = "urlPw-3e8d1c";
    let mut outputs = String::new();
    let v = submit(&d, None, &["--keyword", "pw-check"]);
    outputs += &v.to_string();
    let o = d.bftp_env(
        None,
        &[
            "submit",
            &format!("ftp://carol:{url_pw}@127.0.0.1:2123/x"),
            DST,
        ],
        PW_ENV,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).to_lowercase().contains("warning"),
        "a password in the URL is accepted only with a warning: {}",
        text(&o)
    );
    outputs += &text(&o);
    for args in [
        &["status"][..],
        &["--json", "status"],
        &["status", "1"],
        &["--json", "status", "1"],
        &["--json", "status", "2"],
    ] {
        outputs += &text(&d.bftp(args));
    }
    let (_, raw) = http(d.socket(), "GET", "/v1/jobs", None, &[]).unwrap();
    outputs += &raw;
    d.terminate(Duration::from_secs(10)).unwrap();
    for pw in ["src-pw-X7q", "dst-pw-K9z", url_pw] {
        assert!(!outputs.contains(pw), "{pw} in output: {outputs}");
        assert!(!d.logs().contains(pw), "{pw} in the daemon's log");
        let hits = files_containing(d.dir(), pw.as_bytes());
        assert!(
            hits.iter().all(|p| !p.starts_with(d.state_dir())),
            "{pw} in clear in {hits:?}"
        );
    }
    assert!(
        files_containing(&d.state_dir(), b"pw-check").is_empty(),
        "the keyword is stored in clear"
    );
    let v2: Value = serde_json::from_str(&outputs[..v.to_string().len()]).unwrap();
    assert_eq!(
        v2["job"]["source"]["has_password"], true,
        "the password was stored (sealed), not dropped"
    );
}

/// Every RULES.md §2 bad input: a clear message, exit code 4, and nothing stored.
#[test]
fn bad_inputs_are_refused_with_a_clear_message_and_nothing_is_stored() {
    let d = Bftpd::start().unwrap();
    // Exit 4: a request refused as invalid; exit 2: a value the argument parser refuses.
    let cases: &[(&[&str], i32, &str)] = &[
        (&["submit", "ftp//nohost", DST], 4, "not a URL"),
        (&["submit", "http://127.0.0.1/x", DST], 4, "scheme"),
        (
            &["submit", SRC, DST, "--start", "next tuesday"],
            4,
            "start time",
        ),
        (
            &["submit", "ftp://127.0.0.1/a%0D%0ADELE%20b", DST],
            4,
            "carriage return",
        ),
        (&["submit", "ftp://127.0.0.1/a%0Ab", DST], 4, "line feed"),
        (&["submit", "ftp://127.0.0.1/a%00b", DST], 4, "NUL"),
        (
            &["submit", SRC, "ftp://127.0.0.1:2122/in/*.bin"],
            4,
            "wildcard",
        ),
        (
            &["submit", SRC, DST, "--disposition", "delete"],
            4,
            "delete",
        ),
        (&["submit", SRC, DST, "--type", "X"], 2, "TYPE"),
        (&["submit", SRC, DST, "--mode", "Z"], 2, "MODE"),
        (&["submit", SRC, DST, "--stru", "Q"], 2, "STRU"),
        (
            &["submit", "ftp://169.254.169.254/latest", DST],
            4,
            "policy",
        ),
        (
            &["submit", SRC, DST, "--notify", "not a mailbox"],
            4,
            "mailbox",
        ),
    ];
    for (args, code, needle) in cases {
        let o = d.bftp_env(None, args, PW_ENV);
        let msg = text(&o);
        assert_eq!(o.status.code(), Some(*code), "{args:?}: {msg}");
        assert!(
            msg.contains(needle),
            "{args:?}: message lacks {needle:?}: {msg}"
        );
        assert!(!msg.contains("panicked"), "{msg}");
    }
    // The daemon is the authority: the same inputs sent past the front end are refused too.
    let raw: &[(&str, u16, &str)] = &[
        (
            r#"{"source":{"host":"127.0.0.1","path":"a\r\nDELE b"},"destination":{"host":"127.0.0.1","path":"x"}}"#,
            400,
            "carriage return",
        ),
        (
            r#"{"source":{"host":"127.0.0.1","path":"a"},"destination":{"host":"127.0.0.1","path":"x"},"disposition":"delete"}"#,
            400,
            "no destination",
        ),
        (
            r#"{"source":{"host":"127.0.0.1","path":"a"},"destination":{"host":"127.0.0.1","path":"d/*"}}"#,
            400,
            "wildcard",
        ),
        (
            r#"{"source":{"host":"127.0.0.1","path":"a"},"destination":{"host":"127.0.0.1","path":"x"},"start":"soonish"}"#,
            400,
            "start time",
        ),
        (
            r#"{"source":{"host":"127.0.0.1","path":"a"},"destination":{"host":"127.0.0.1","path":"x"},"mode":"X"}"#,
            400,
            "MODE",
        ),
        (
            r#"{"source":{"host":"169.254.169.254","path":"a"},"destination":{"host":"127.0.0.1","path":"x"}}"#,
            403,
            "policy",
        ),
        (
            r#"{"source":{"host":"127.0.0.1","path":"a"}"#,
            400,
            "request body",
        ),
        (
            r#"{"source":{"host":"127.0.0.1","path":"a"},"destination":{"host":"127.0.0.1","path":"x"},"extra":1}"#,
            400,
            "extra",
        ),
    ];
    for (body, status, needle) in raw {
        let (got, resp) = http(d.socket(), "POST", "/v1/jobs", Some(body), &[]).unwrap();
        assert_eq!(got, *status, "{body}: {resp}");
        let err: Value = serde_json::from_str(&resp)
            .unwrap_or_else(|_| panic!("error body is not JSON: {resp}"));
        assert!(
            err["message"].as_str().unwrap_or("").contains(needle),
            "{body}: {resp}"
        );
    }
    assert!(
        all_jobs(&d).is_empty(),
        "a refused request left a job behind"
    );
}

#[test]
fn same_request_key_gives_the_same_job_and_other_parameters_conflict() {
    let d = Bftpd::start().unwrap();
    let a = submit(&d, None, &["--request-key", "key-1"]);
    assert_eq!(a["created"], true);
    let b = submit(&d, None, &["--request-key", "key-1"]);
    assert_eq!(
        (b["created"].as_bool(), job_id(&b)),
        (Some(false), job_id(&a))
    );
    let o = d.bftp_env(
        None,
        &["submit", SRC, DST, "--request-key", "key-1", "--mode", "B"],
        PW_ENV,
    );
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(
        text(&o).contains(&job_id(&a).to_string()),
        "the conflict names the job: {}",
        text(&o)
    );
    // Another user's identical key is another request.
    let c = submit(&d, Some(ALICE), &["--request-key", "key-1"]);
    assert_ne!(job_id(&c), job_id(&a));
    assert_eq!(all_jobs(&d).len(), 2);
}

#[test]
fn concurrent_submits_with_one_key_make_one_job() {
    let d = Bftpd::start().unwrap();
    let ids: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| job_id(&submit(&d, None, &["--request-key", "shared-key"]))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    assert_eq!(all_jobs(&d).len(), 1);
}

#[test]
fn a_damaged_store_is_a_clear_error_at_start_not_a_panic() {
    for damage in ["truncate", "garbage"] {
        let mut d = Bftpd::start().unwrap();
        for _ in 0..3 {
            submit(&d, None, &[]);
        }
        d.terminate(Duration::from_secs(10)).unwrap();
        let db = d.state_dir().join("store/db");
        // sled's file ends in zeros it reserved (a whole segment once it was opened twice):
        // cut a third of what was written, not of the file.
        let written = std::fs::read(&db)
            .unwrap()
            .iter()
            .rposition(|b| *b != 0)
            .unwrap() as u64
            + 1;
        match damage {
            "truncate" => std::fs::OpenOptions::new()
                .write(true)
                .open(&db)
                .unwrap()
                .set_len(written / 3)
                .unwrap(),
            _ => {
                let mut bytes = std::fs::read(&db).unwrap();
                for b in bytes.iter_mut().skip(16) {
                    *b = 0xA5;
                }
                std::fs::write(&db, bytes).unwrap();
            }
        }
        d.spawn().unwrap();
        let st = d
            .wait_exit(Duration::from_secs(20))
            .expect("bftpd must refuse to start on a damaged store");
        assert!(!st.success(), "{damage}: started on a damaged store");
        let logs = d.logs();
        let last = logs.rsplit("bftpd ready").next().unwrap();
        assert!(!last.contains("panicked"), "{damage}: {last}");
        assert!(
            last.contains("store"),
            "{damage}: the error names the store: {last}"
        );
    }
}

#[test]
fn status_of_a_missing_job_and_an_absent_daemon_have_their_exit_codes() {
    let mut d = Bftpd::start().unwrap();
    let o = d.bftp(&["status", "999"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    d.terminate(Duration::from_secs(10)).unwrap();
    let o = d.bftp(&["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("not running"), "{}", text(&o));
}

#[test]
fn sigterm_stops_the_daemon_cleanly_and_keeps_the_queue() {
    let mut d = Bftpd::start().unwrap();
    let id = job_id(&submit(&d, None, &[]));
    let st = d.terminate(Duration::from_secs(10)).unwrap();
    assert!(st.success(), "{st}");
    assert!(
        !d.socket().exists(),
        "the socket is removed on a clean stop"
    );
    d.launch().unwrap();
    let (code, v) = status_json(&d, None, &[&id.to_string()]);
    assert_eq!((code, v["state"].as_str()), (Some(0), Some("queued")));
}

/// The store remembers its key (a fingerprint, never the key): a missing `secret.key`, or
/// another key in its place, makes bftpd refuse to start with the file named (a new key would
/// open none of the stored passwords and match none of the keywords), and creates no key;
/// the right key back, it starts and the job is intact, its keyword found.
#[test]
fn a_missing_or_foreign_secret_key_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Bftpd::start().unwrap();
    let v = submit(&d, None, &["--keyword", "key-kept"]);
    let id = job_id(&v);
    d.terminate(Duration::from_secs(10)).unwrap();
    let key = d.state_dir().join("secret.key");
    let original = std::fs::read(&key).unwrap();
    assert_eq!(original.len(), 32);

    let refused = |d: &mut Bftpd, what: &str| -> String {
        let before = d.logs().len();
        d.spawn().unwrap();
        let st = d
            .wait_exit(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{what}: bftpd must refuse to start: {e}"));
        assert!(!st.success(), "{what}: bftpd started");
        let said = d.logs()[before..].to_string();
        assert!(
            said.contains(&key.display().to_string()),
            "{what}: the error names the key file: {said}"
        );
        assert!(!said.contains("panicked"), "{what}: {said}");
        said
    };

    std::fs::remove_file(&key).unwrap();
    let said = refused(&mut d, "no key file");
    assert!(said.contains("missing"), "{said}");
    assert!(
        !key.exists(),
        "a new key was created in place of the lost one"
    );

    let mut other = original.clone();
    other.iter_mut().for_each(|b| *b ^= 0x5a);
    std::fs::write(&key, &other).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let said = refused(&mut d, "another key");
    assert!(said.contains("not the key"), "{said}");

    std::fs::write(&key, &original).unwrap();
    d.launch().unwrap();
    let (code, after) = status_json(&d, None, &[&id.to_string()]);
    assert_eq!(code, Some(0));
    assert_eq!(after, v["job"], "the job changed");
    let (_, by_kw) = status_json(&d, None, &["--keyword", "key-kept"]);
    assert_eq!(by_kw["jobs"][0]["id"].as_u64(), Some(id), "{by_kw}");
}

/// Issue 11: a URL that a parser would quietly rewrite into another file or host is refused,
/// and the refusals of `--notify` say what they are about.
#[test]
fn rewritten_urls_are_refused_and_notify_errors_name_their_limit_and_risk() {
    let d = Bftpd::start().unwrap();
    let many: Vec<String> = (0..10_000)
        .flat_map(|i| ["--notify".to_string(), format!("u{i}@example.org")])
        .collect();
    let mut too_many: Vec<&str> = vec!["submit", SRC, DST];
    too_many.extend(many.iter().map(String::as_str));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["submit", "ftp://127.0.0.1/bad/../../../etc/passwd", DST],
            "has a \"..\" segment",
        ),
        (
            vec![
                "submit",
                "ftp://127.0.0.1/bad/%2e%2e/%2E%2E/etc/passwd",
                DST,
            ],
            "has a \"..\" segment",
        ),
        (
            vec!["submit", SRC, "ftp://127.0.0.1:2122/in/../../x"],
            "has a \"..\" segment",
        ),
        (vec!["submit", "ftp:///x", DST], "names no host"),
        (
            too_many,
            "notify names too many addresses (10000, at most 16)",
        ),
        (
            vec!["submit", SRC, DST, "--notify", "a@b\r\nBcc: x@y"],
            "which would inject mail headers",
        ),
    ];
    for (args, needle) in &cases {
        let o = d.bftp_env(None, args, PW_ENV);
        let shown = text(&o);
        let brief = &shown[..shown.len().min(400)];
        assert_eq!(o.status.code(), Some(4), "{:?}: {brief}", &args[..3]);
        assert!(shown.contains(needle), "{:?}: {brief}", &args[..3]);
        assert!(!shown.contains("FTP commands"), "{brief}");
        assert!(!shown.contains("bytes"), "{brief}");
    }
    assert!(
        all_jobs(&d).is_empty(),
        "a refused request left a job behind"
    );
}
