//! Issue 29 (SPEC §14): a job's data path (`fxp`, `relay`, `auto`) through the real bftp
//! and bftpd: asked at submit and kept as asked, refused where the daemon relays nothing,
//! shown by `status`, part of the request key's parameters, and `verify` saying which path
//! the job would take and why against stock servers that refuse the third party.

use bftp_tests::daemon::{http, text, Bftpd};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
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

/// `bftp --json submit SRC DST` not due for an hour, with `extra`: the output.
fn submit(d: &Bftpd, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["--json", "submit", SRC, DST, "--start", "in 1h"];
    args.extend_from_slice(extra);
    d.bftp_env(None, &args, PW_ENV)
}

fn submitted(d: &Bftpd, extra: &[&str]) -> Value {
    let o = submit(d, extra);
    assert_eq!(o.status.code(), Some(0), "submit failed: {}", text(&o));
    json(&o)
}

fn job_id(v: &Value) -> u64 {
    v["job"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job id in {v}"))
}

fn all_jobs(d: &Bftpd) -> Vec<Value> {
    let o = d.bftp_env(None, &["--json", "status", "--all"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    json(&o)["jobs"].as_array().cloned().unwrap_or_default()
}

/// Where `[ftp] relay = false`, a job asking for a relay is refused at submit (403, the
/// setting named, exit 4) and nothing is stored; `auto` and `fxp` are taken, and `auto`
/// runs third party only there. The daemon's one relay gate is made from `[ftp]` at start.
#[test]
fn a_relay_is_refused_at_submit_where_the_daemon_forbids_relays() {
    let d = Bftpd::start_with(|dir| {
        format!(
            "{}[ftp]\nrelay = false\nrelay_max = 3\nrelay_bytes_per_second = 5000\n",
            Bftpd::default_config(dir)
        )
    })
    .unwrap();
    let logs = d.logs();
    assert!(
        logs.contains("relay_max=3") && logs.contains("relay_bytes_per_second=5000"),
        "the relay gate at start: {logs}"
    );
    let o = submit(&d, &["--data-path", "relay"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("[ftp] relay = false"), "{}", text(&o));
    let body = r#"{"source":{"host":"127.0.0.1","path":"a"},"destination":{"host":"127.0.0.1","path":"x"},"data_path":"relay"}"#;
    let (status, resp) = http(d.socket(), "POST", "/v1/jobs", Some(body), &[]).unwrap();
    assert_eq!(status, 403, "{resp}");
    let err: Value = serde_json::from_str(&resp).unwrap();
    assert_eq!(err["kind"], "relay_forbidden", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("relay = false"),
        "{err}"
    );
    // verify and transfer refuse it the same way.
    for cmd in ["verify", "transfer"] {
        let o = d.bftp_env(None, &[cmd, SRC, DST, "--data-path", "relay"], PW_ENV);
        assert_eq!(o.status.code(), Some(4), "{cmd}: {}", text(&o));
    }
    assert!(all_jobs(&d).is_empty(), "a refused request left a job");

    let v = submitted(&d, &["--data-path", "auto"]);
    assert_eq!(v["job"]["data_path"], "fxp", "{v}");
    assert_eq!(v["job"]["data_path_asked"], "auto", "{v}");
    let v = submitted(&d, &[]);
    assert_eq!(v["job"]["data_path"], "fxp", "{v}");
    assert_eq!(all_jobs(&d).len(), 2);
}

/// `status` names the data path: the one asked for, or the daemon's default; the request key
/// covers a data path that is given (another one is a conflict), and a request without one
/// matches its earlier self as before.
#[test]
fn status_shows_the_data_path_and_the_request_key_covers_it() {
    let d = Bftpd::start().unwrap();
    let plain = submitted(&d, &["--request-key", "k-plain"]);
    assert_eq!(plain["job"]["data_path"], "auto", "{plain}");
    assert!(plain["job"].get("data_path_asked").is_none(), "{plain}");
    let relay = submitted(&d, &["--data-path", "relay", "--request-key", "k-relay"]);
    assert_eq!(relay["job"]["data_path"], "relay", "{relay}");
    assert_eq!(relay["job"]["data_path_asked"], "relay", "{relay}");

    let human = |id: u64| {
        let o = d.bftp_env(None, &["status", &id.to_string()], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        text(&o)
    };
    let h = human(job_id(&plain));
    assert!(
        h.contains("data path") && h.contains("default (auto)"),
        "{h}"
    );
    let h = human(job_id(&relay));
    assert!(
        h.lines()
            .any(|l| l.trim_start().starts_with("data path") && l.trim_end().ends_with("relay")),
        "{h}"
    );
    let o = d.bftp_env(
        None,
        &["--json", "status", &job_id(&relay).to_string()],
        &[],
    );
    let v = json(&o);
    let job = if v.get("jobs").is_some() {
        v["jobs"][0].clone()
    } else {
        v
    };
    assert_eq!(job["data_path"], "relay", "{job}");

    // The same key and parameters: the same job; the same key with a data path: a conflict.
    let again = submitted(&d, &["--request-key", "k-plain"]);
    assert_eq!(
        (again["created"].as_bool(), job_id(&again)),
        (Some(false), job_id(&plain))
    );
    for (key, path) in [("k-plain", "fxp"), ("k-relay", "auto")] {
        let o = submit(&d, &["--request-key", key, "--data-path", path]);
        assert_eq!(o.status.code(), Some(6), "{key} {path}: {}", text(&o));
    }
    let again = submitted(&d, &["--request-key", "k-relay", "--data-path", "relay"]);
    assert_eq!(job_id(&again), job_id(&relay));
    assert_eq!(all_jobs(&d).len(), 2);
}

/// Two stock servers, each refusing a PORT naming the other: under `auto` (the daemon's
/// default) verify passes and says the job would relay, with the refusing reply; under
/// `fxp` it fails, naming the settings; under `relay` it checks passive mode on both.
#[test]
fn verify_says_which_path_the_job_would_take_and_why() {
    let stock = |kind| {
        FtpServer::start(
            kind,
            FtpOptions {
                fxp: false,
                ..FtpOptions::default()
            },
        )
        .unwrap()
    };
    let src = stock(ServerKind::Proftpd);
    let dst = stock(ServerKind::Vsftpd);
    src.put_file("a.bin", b"a").unwrap();
    let d = Bftpd::start().unwrap();
    let env = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let verify = |extra: &[&str]| {
        let (s, t) = (src.url("a.bin"), dst.url(""));
        let mut args = vec!["--json", "verify", s.as_str(), t.as_str()];
        args.extend_from_slice(extra);
        let o = d.bftp_env(None, &args, &env);
        (o.status.code(), json(&o))
    };

    let (code, v) = verify(&[]);
    assert_eq!(code, Some(0), "{v:#}");
    let path = &v["data_path"];
    assert_eq!(
        (
            &path["asked"],
            &path["path"],
            &path["would_take"],
            &path["reason"]
        ),
        (
            &Value::Null,
            &Value::from("auto"),
            &Value::from("relay"),
            &Value::from("refused")
        ),
        "{v:#}"
    );
    let detail = path["detail"].as_str().unwrap();
    assert!(
        detail.contains("PORT") && detail.contains("50"),
        "the refusing reply: {detail}"
    );

    let (code, v) = verify(&["--data-path", "fxp"]);
    assert_eq!(code, Some(8), "{v:#}");
    let path = &v["data_path"];
    assert_eq!(
        (&path["asked"], &path["would_take"], &path["reason"]),
        (
            &Value::from("fxp"),
            &Value::from("none"),
            &Value::from("fxp_only")
        ),
        "{v:#}"
    );
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "third-party data connection")
        .unwrap_or_else(|| panic!("no data check: {v:#}"));
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("port_promiscuous=YES"),
        "{check}"
    );

    let (code, v) = verify(&["--data-path", "relay"]);
    assert_eq!(code, Some(0), "{v:#}");
    let path = &v["data_path"];
    assert_eq!(
        (&path["asked"], &path["would_take"], &path["reason"]),
        (
            &Value::from("relay"),
            &Value::from("relay"),
            &Value::from("asked")
        ),
        "{v:#}"
    );
    assert!(
        !v["transcript"].as_array().unwrap().iter().any(|l| {
            let l = l.as_str().unwrap_or("");
            l.contains("> PORT") || l.contains("> EPRT")
        }),
        "a relay's verify sends no PORT: {v:#}"
    );

    // The human text says it too.
    let (s, t) = (src.url("a.bin"), dst.url(""));
    let o = d.bftp_env(None, &["verify", &s, &t], &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("data path: relay: the path is auto (the daemon's default); the servers refused the third party: "),
        "{}",
        text(&o)
    );
}
