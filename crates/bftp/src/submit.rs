//! `bftp submit`: turn the command line into a [`bftp_api::SubmitRequest`] with a schedule,
//! check it, send it once under one request key.

use std::time::Duration;

use anyhow::Context;
use bftp_api::{SubmitResponse, IDEMPOTENCY_KEY_HEADER};
use bftp_core::time::parse_start_time;
use bftp_core::Timestamp;
use clap::Args;

use crate::client::{self, Client, TransportError};
use crate::exit::Failure;
use crate::output;
use crate::password::Sources;
use crate::request::{self, Prepared, QueueArgs, RequestArgs};

/// No `Debug`: the URLs may hold passwords.
#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub request: RequestArgs,

    /// Earliest first attempt: RFC 3339 (2026-12-01T08:00:00Z) or relative ("in 2h", "90m")
    /// [default: now]
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,

    #[command(flatten)]
    pub queue: QueueArgs,

    /// Idempotency key: sending again with the same key and parameters gives the same job
    /// [default: a fresh random key]
    #[arg(long, value_name = "KEY")]
    pub request_key: Option<String>,
}

/// A request and the key it is sent under.
#[derive(Debug)]
pub struct Submission {
    pub prepared: Prepared,
    pub request_key: String,
}

/// A fresh random 128-bit key, hex.
pub fn random_request_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Checks a start time and passes it on as written: a relative time (`in 2h`) is resolved by
/// bftpd when it creates the job, so a re-send with the same request key, even from a later
/// invocation, is the same request and finds the same job. `now` is sent as absent.
pub fn resolve_start(input: &str, now: Timestamp) -> Result<(Option<String>, Timestamp), Failure> {
    let s = input.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok((None, now));
    }
    let at = parse_start_time(s, now).map_err(|e| Failure::invalid(format!("--start: {e}")))?;
    Ok((Some(s.to_string()), at))
}

/// Everything a submit needs before it talks to bftpd: the shared request checks
/// ([`request::prepare`]) with the schedule and the request key.
pub fn prepare(args: &SubmitArgs, sources: &Sources, now: Timestamp) -> anyhow::Result<Submission> {
    let (start, start_at) = match &args.start {
        Some(s) => resolve_start(s, now)?,
        None => (None, now),
    };
    let request_key = args.request_key.clone().unwrap_or_else(random_request_key);
    check_request_key(&request_key)?;
    let schedule = args.queue.schedule(start, start_at);
    Ok(Submission {
        prepared: request::prepare(&args.request, schedule, sources)?,
        request_key,
    })
}

fn check_request_key(key: &str) -> Result<(), Failure> {
    let ok = !key.is_empty() && key.len() <= 256 && key.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(Failure::invalid(
            "--request-key: use 1 to 256 printable ASCII characters without spaces",
        ))
    }
}

/// Re-sends after a lost connection, same bytes and same key: bftpd answers a repeat with the
/// job the first one made (RULES.md §4.5), so a retry cannot make a second job.
const RESEND_DELAYS: [Duration; 2] = [Duration::from_millis(300), Duration::from_secs(1)];

pub async fn send(
    client: &Client,
    submission: &Submission,
) -> anyhow::Result<client::Reply<SubmitResponse>> {
    let body = serde_json::to_vec(&submission.prepared.request).context("encoding the request")?;
    let headers = [(IDEMPOTENCY_KEY_HEADER, submission.request_key.as_str())];
    let path = format!("{}/jobs", bftp_api::API_PREFIX);
    let mut delays = RESEND_DELAYS.iter();
    let mut reached = false;
    loop {
        let err = match client
            .exchange(hyper::Method::POST, &path, &headers, Some(body.clone()))
            .await
        {
            Ok((status, reason, raw)) => return client::decode(status, reason, raw),
            Err(e) => e,
        };
        reached |= matches!(err, TransportError::Exchange(_));
        match delays.next() {
            // Nothing was sent, and bftpd is not there: say so at once.
            _ if !reached => return Err(client.transport_failure(err)),
            Some(d) => tokio::time::sleep(*d).await,
            None => {
                return Err(client.transport_failure(err).context(format!(
                    "bftpd may or may not have stored the job; run the same command with \
                     --request-key {} to find out without making a second one",
                    submission.request_key
                )))
            }
        }
    }
}

/// The text to print.
pub async fn run(client: &Client, submission: &Submission, json: bool) -> anyhow::Result<String> {
    let reply = send(client, submission)
        .await
        .context("submitting the job")?;
    if json {
        return output::pretty_json(&reply.raw);
    }
    Ok(human(&reply.value, &submission.request_key))
}

fn human(r: &SubmitResponse, request_key: &str) -> String {
    let job = &r.job;
    let mut out = if r.created {
        format!("job {} submitted: {}\n", job.id, output::state_word(job))
    } else {
        format!(
            "job {} was already submitted with this request key: {}\n",
            job.id,
            output::state_word(job)
        )
    };
    let dest = job.destination.as_ref().map_or(String::new(), |d| {
        format!(" → {}", output::sanitize(&d.url))
    });
    out.push_str(&format!("  {}{dest}\n", output::sanitize(&job.source.url)));
    if let Some(next) = &job.next_attempt_at {
        out.push_str(&format!("  next attempt {}\n", output::sanitize(next)));
    }
    out.push_str(&format!("  request key {request_key}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testserver;
    use crate::exit::{exit_of, Exit};
    use crate::{Cli, Command};
    use bftp_api::{EndpointSpec, RetrySpec, SubmitRequest};
    use clap::Parser;

    /// 2026-11-30T12:00:00Z
    const NOW: Timestamp = Timestamp(1_796_040_000_000);

    fn args(argv: &[&str]) -> SubmitArgs {
        let mut full = vec!["bftp", "submit"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full)
            .unwrap_or_else(|e| panic!("{e}"))
            .command
        {
            Command::Submit(a) => *a,
            _ => unreachable!(),
        }
    }

    fn no_sources() -> Sources {
        Sources::new(|_| None, None, None)
    }

    fn prep(argv: &[&str]) -> anyhow::Result<Submission> {
        prepare(&args(argv), &no_sources(), NOW)
    }

    #[test]
    fn every_option_reaches_the_request() {
        let p = prep(&[
            "ftp://alice@src.example.org:2121/%2Fpub/*.csv",
            "ftp://bob@dst.example.org/incoming",
            "--move",
            "--dest-command",
            "unique",
            "--type",
            "L 8",
            "--mode",
            "b",
            "--stru",
            "r",
            "--start",
            "in 2h",
            "--retry-first",
            "5m",
            "--retry-factor",
            "3",
            "--retry-cap",
            "2h",
            "--max-attempts",
            "7",
            "--deadline",
            "2days",
            "--notify",
            "alice@example.org",
            "--notify",
            "ops@example.org",
            "--keyword",
            "nightly",
            "--request-key",
            "k-123",
            "--source-acct",
            "sa",
            "--dest-acct",
            "da",
            "--proof",
            "HASH",
            "--data-path",
            "Relay",
        ])
        .unwrap();
        let want = SubmitRequest {
            source: EndpointSpec {
                host: "src.example.org".into(),
                port: Some(2121),
                user: Some("alice".into()),
                password: None,
                acct: Some("sa".into()),
                path: "/pub/*.csv".into(),
                ..Default::default()
            },
            destination: Some(EndpointSpec {
                host: "dst.example.org".into(),
                port: Some(21),
                user: Some("bob".into()),
                password: None,
                acct: Some("da".into()),
                path: "incoming".into(),
                ..Default::default()
            }),
            disposition: Some("move".into()),
            dest_command: Some("unique".into()),
            transfer_type: Some("L 8".into()),
            mode: Some("B".into()),
            structure: Some("R".into()),
            start: Some("in 2h".into()),
            retry: RetrySpec {
                first_interval: Some("5m".into()),
                factor: Some(3.0),
                cap: Some("2h".into()),
                max_attempts: Some(7),
                deadline: Some("2days".into()),
            },
            notify: vec!["alice@example.org".into(), "ops@example.org".into()],
            keyword: Some("nightly".into()),
            proof: Some("hash".into()),
            recursive: false,
            data_path: Some("relay".into()),
        };
        assert_eq!(p.prepared.request, want);
        assert_eq!(p.request_key, "k-123");
        assert!(p.prepared.warnings.is_empty());
    }

    #[test]
    fn defaults_are_left_to_bftpd() {
        let p = prep(&["ftp://h/f", "ftp://d/"]).unwrap();
        let r = &p.prepared.request;
        assert_eq!(r.source.user.as_deref(), Some("anonymous"));
        assert_eq!(r.source.port, Some(21));
        assert_eq!(
            (
                &r.disposition,
                &r.dest_command,
                &r.transfer_type,
                &r.mode,
                &r.structure,
                &r.start
            ),
            (&None, &None, &None, &None, &None, &None)
        );
        assert_eq!(r.retry, RetrySpec::default());
        assert!(r.notify.is_empty() && r.keyword.is_none());
        assert_eq!(r.data_path, None, "the daemon's default data path");
        let json = serde_json::to_string(r).unwrap();
        assert!(!json.contains("data_path"), "{json}");
        assert_eq!(p.request_key.len(), 32);
        assert!(p.request_key.bytes().all(|b| b.is_ascii_hexdigit()));
        let again = prep(&["ftp://h/f", "ftp://d/"]).unwrap();
        assert_ne!(
            p.request_key, again.request_key,
            "one fresh key per invocation"
        );
    }

    #[test]
    fn disposition_spellings() {
        let d = |argv: &[&str]| prep(argv).unwrap().prepared.request.disposition;
        assert_eq!(d(&["ftp://h/f", "--delete"]), Some("delete".into()));
        assert_eq!(
            d(&["ftp://h/f", "--disposition", "DELETE"]),
            Some("delete".into())
        );
        assert_eq!(
            d(&["ftp://h/f", "ftp://d/x", "--disposition", "copy"]),
            Some("copy".into())
        );
        for bad in [
            &["submit", "ftp://h/f", "--move", "--delete"][..],
            &["submit", "ftp://h/f", "--move", "--disposition", "copy"],
            &["submit", "ftp://h/f", "--disposition", "shred"],
            &["submit", "ftp://h/f", "--type", "X"],
            &["submit", "ftp://h/f", "--retry-first", "soon"],
        ] {
            let mut argv = vec!["bftp"];
            argv.extend_from_slice(bad);
            let e = Cli::try_parse_from(argv)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }

    /// Issue 29: `--data-path` takes fxp, relay or auto (any case) on submit, transfer and
    /// verify; another word is a usage error that names the three.
    #[test]
    fn data_path_words() {
        for (word, want) in [("fxp", "fxp"), ("RELAY", "relay"), ("auto", "auto")] {
            let p = prep(&["ftp://h/f", "ftp://d/x", "--data-path", word]).unwrap();
            assert_eq!(p.prepared.request.data_path.as_deref(), Some(want));
        }
        for cmd in ["submit", "transfer", "verify"] {
            let e =
                Cli::try_parse_from(["bftp", cmd, "ftp://h/f", "ftp://d/x", "--data-path", "fxp2"])
                    .err()
                    .unwrap_or_else(|| panic!("{cmd}: fxp2 accepted"));
            assert_eq!(e.exit_code(), 2, "{cmd}");
            let msg = e.to_string();
            assert!(
                msg.contains("--data-path") && msg.contains("auto, fxp, relay"),
                "{cmd}: {msg}"
            );
            Cli::try_parse_from(["bftp", cmd, "ftp://h/f", "ftp://d/x", "--data-path", "auto"])
                .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        }
    }

    #[test]
    fn start_times() {
        let cases: &[(&str, Option<&str>)] = &[
            ("in 2h", Some("in 2h")),
            ("90m", Some("90m")),
            (
                "2026-12-01T09:00:00+01:00",
                Some("2026-12-01T09:00:00+01:00"),
            ),
            (" 2026-12-01T08:00:00Z ", Some("2026-12-01T08:00:00Z")),
            ("now", None),
        ];
        for (input, want) in cases {
            let (got, _) = resolve_start(input, NOW).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(got.as_deref(), *want, "{input}");
        }
        let err = prep(&["ftp://h/f", "ftp://d/x", "--start", "tomorrow"]).unwrap_err();
        assert_eq!(exit_of(&err), Exit::Invalid);
        assert!(format!("{err:#}").contains("--start"), "{err:#}");
    }

    #[test]
    fn a_resend_is_byte_identical() {
        let a = args(&[
            "ftp://h/f",
            "ftp://d/x",
            "--start",
            "in 1h",
            "--request-key",
            "k",
        ]);
        let one = prepare(&a, &no_sources(), NOW).unwrap();
        let two = prepare(&a, &no_sources(), NOW).unwrap();
        assert_eq!(
            serde_json::to_vec(&one.prepared.request).unwrap(),
            serde_json::to_vec(&two.prepared.request).unwrap()
        );
    }

    #[test]
    fn local_validation_is_exit_4() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["ftp://h/f", "ftp://d/x", "--delete"],
                "takes no destination",
            ),
            (&["ftp://h/f"], "needs a destination"),
            (&["ftp://h/f", "ftp://d/*.x"], "wildcard"),
            (&["ftp://h/a%0D%0ADELE%20b", "ftp://d/x"], "carriage return"),
            (&["http://h/f", "ftp://d/x"], "scheme"),
            (
                &["ftp://h/f", "ftp://d/x", "--notify", "nobody"],
                "not a mailbox",
            ),
            (
                &["ftp://h/f", "ftp://d/x", "--retry-factor", "0.5"],
                "factor",
            ),
            (
                &["ftp://h/f", "ftp://d/x", "--max-attempts", "0"],
                "max attempts",
            ),
            (
                &["ftp://h/f", "ftp://d/x", "--request-key", "a b"],
                "--request-key",
            ),
        ];
        for (argv, needle) in cases {
            let err = prep(argv).expect_err(&format!("{argv:?}"));
            assert_eq!(exit_of(&err), Exit::Invalid, "{argv:?}: {err:#}");
            assert!(format!("{err:#}").contains(needle), "{argv:?}: {err:#}");
        }
    }

    #[test]
    fn a_longer_first_interval_alone_is_not_refused() {
        prep(&["ftp://h/f", "ftp://d/x", "--retry-first", "6h"]).unwrap();
    }

    #[test]
    fn url_password_is_used_with_a_warning_and_kept_out_of_errors() {
        let p = prep(&["ftp://alice:s3cr%40t@h/f", "ftp://d/x"]).unwrap();
        assert_eq!(
            p.prepared.request.source.password.as_deref(),
            Some("s3cr@t")
        );
        assert_eq!(p.prepared.warnings.len(), 1);
        assert!(
            p.prepared.warnings[0].contains("source password is in the URL"),
            "{:?}",
            p.prepared.warnings
        );
        assert!(!p.prepared.warnings[0].contains("s3cr"));
        assert!(!format!("{p:?}").contains("s3cr"), "{p:?}");

        let err = prep(&["ftp://alice:s3cret@h/f?x=1", "ftp://d/x"]).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("query") && !msg.contains("s3cret"), "{msg}");
        assert!(msg.contains(":****@"), "{msg}");
    }

    #[test]
    fn passwords_from_sources_per_side() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("dpw");
        std::fs::write(&file, "dest-pw\n").unwrap();
        let netrc = dir.path().join("netrc");
        std::fs::write(
            &netrc,
            "machine src login carol password netrc-pw account netrc-acct\n",
        )
        .unwrap();
        let sources = Sources::new(|_| None, Some(netrc), None);
        let a = args(&[
            "ftp://src/f",
            "ftp://bob@dst/x",
            "--dest-password-file",
            file.to_str().unwrap(),
        ]);
        let p = prepare(&a, &sources, NOW).unwrap();
        let s = &p.prepared.request.source;
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref(), s.acct.as_deref()),
            (Some("carol"), Some("netrc-pw"), Some("netrc-acct"))
        );
        let d = p.prepared.request.destination.as_ref().unwrap();
        assert_eq!(
            (d.user.as_deref(), d.password.as_deref()),
            (Some("bob"), Some("dest-pw"))
        );
        // An explicit ACCT beats the netrc one.
        let a = args(&["ftp://src/f", "ftp://d/x", "--source-acct", "mine"]);
        let p = prepare(&a, &sources, NOW).unwrap();
        assert_eq!(p.prepared.request.source.acct.as_deref(), Some("mine"));
    }

    fn created(id: u64, created: bool) -> String {
        let r = SubmitResponse {
            created,
            job: crate::output::tests::job(id),
        };
        serde_json::to_string(&r).unwrap()
    }

    #[tokio::test]
    async fn sends_the_key_and_the_body_once() {
        let srv = testserver::start(vec![(201, &created(42, true))]);
        let p = prep(&["ftp://alice:pw@h/f", "ftp://d/x", "--request-key", "key-1"]).unwrap();
        let reply = send(&Client::new(&srv.socket), &p).await.unwrap();
        assert_eq!((reply.value.job.id, reply.value.created), (42, true));
        let reqs = srv.requests.lock().unwrap().clone();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].request_line(), "POST /v1/jobs HTTP/1.1");
        assert_eq!(reqs[0].header("idempotency-key").as_deref(), Some("key-1"));
        assert_eq!(reqs[0].header("host").as_deref(), Some("localhost"));
        assert_eq!(
            reqs[0].header("content-type").as_deref(),
            Some("application/json")
        );
        let sent: SubmitRequest = serde_json::from_slice(&reqs[0].body).unwrap();
        assert_eq!(sent, p.prepared.request);
    }

    #[tokio::test]
    async fn conflict_is_exit_6_and_keeps_the_body_for_json() {
        let body = r#"{"kind":"conflict","message":"request key reused with other parameters","job_id":3}"#;
        let srv = testserver::start(vec![(409, body)]);
        let p = prep(&["ftp://h/f", "ftp://d/x"]).unwrap();
        let err = run(&Client::new(&srv.socket), &p, false).await.unwrap_err();
        assert_eq!(exit_of(&err), Exit::Conflict);
        let msg = format!("{err:#}");
        assert!(
            msg.starts_with("submitting the job: request key reused"),
            "{msg}"
        );
        let f = crate::exit::failure_of(&err).unwrap();
        assert_eq!(f.body.as_deref(), Some(body.as_bytes()));
    }

    #[tokio::test]
    async fn forbidden_host_is_exit_4() {
        let body = r#"{"kind":"forbidden_host","message":"169.254.169.254 is denied by policy"}"#;
        let srv = testserver::start(vec![(403, body)]);
        let p = prep(&["ftp://h/f", "ftp://d/x"]).unwrap();
        let err = send(&Client::new(&srv.socket), &p).await.unwrap_err();
        assert_eq!(exit_of(&err), Exit::Invalid);
    }

    #[tokio::test]
    async fn no_daemon_is_exit_3_without_resending() {
        let dir = tempfile::tempdir().unwrap();
        let p = prep(&["ftp://h/f", "ftp://d/x"]).unwrap();
        let started = std::time::Instant::now();
        let err = send(&Client::new(dir.path().join("absent.sock")), &p)
            .await
            .unwrap_err();
        assert_eq!(exit_of(&err), Exit::Unreachable);
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "no waiting for a daemon that is not there"
        );
    }

    #[tokio::test]
    async fn a_lost_connection_is_resent_with_the_same_key_then_reported_as_ambiguous() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("flaky.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let keys = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = keys.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 65536];
                let n = s.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                seen.lock().unwrap().push(
                    head.lines()
                        .find(|l| l.starts_with("idempotency-key"))
                        .map(String::from),
                );
                // Closed without an answer: did bftpd store it or not?
            }
        });
        let p = prep(&["ftp://h/f", "ftp://d/x", "--request-key", "kk"]).unwrap();
        let err = send(&Client::new(&socket), &p).await.unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("may or may not have stored the job") && msg.contains("--request-key kk"),
            "{msg}"
        );
        let keys = keys.lock().unwrap().clone();
        assert_eq!(keys, vec![Some("idempotency-key: kk".to_string()); 3]);
    }

    #[test]
    fn human_output_names_the_job_and_key() {
        let r: SubmitResponse = serde_json::from_str(&created(5, false)).unwrap();
        let h = human(&r, "abc");
        assert!(h.starts_with("job 5 was already submitted"), "{h}");
        assert!(h.contains("request key abc"), "{h}");
    }
}
