//! `bftp submit`: turn the command line into a [`SubmitRequest`], check it, send it once
//! under one request key.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use bftp_api::{EndpointSpec, RetrySpec, SubmitRequest, SubmitResponse, IDEMPOTENCY_KEY_HEADER};
use bftp_core::ftpurl::parse_ftp_url;
use bftp_core::time::parse_start_time;
use bftp_core::{
    DestCommand, Disposition, Endpoint, FileStructure, FtpParams, JobSpec, RetryPolicy, Secret,
    Timestamp, TransferMode, TransferType,
};
use clap::Args;

use crate::client::{self, Client, TransportError};
use crate::exit::Failure;
use crate::output;
use crate::password::{Found, Origin, Side, Sources, Want};

/// No `Debug`: the URLs may hold passwords.
#[derive(Args)]
pub struct SubmitArgs {
    /// Where the files are: ftp://[user@]host[:port]/path; a wildcard (* ? [...]) in the
    /// last component makes a multi-file job. A path is relative to the login directory;
    /// start it with %2F for an absolute one.
    #[arg(value_name = "SOURCE_URL")]
    pub source: String,

    /// Where they go: a file name or a directory (a directory for a wildcard source).
    /// Not given with --delete.
    #[arg(value_name = "DEST_URL")]
    pub destination: Option<String>,

    /// What happens to the source file once the copy is proven [default: copy]
    #[arg(long, value_name = "copy|move|delete", value_parser = parse_with::<Disposition>,
          conflicts_with_all = ["move_", "delete"])]
    pub disposition: Option<Disposition>,

    /// Short for --disposition move: copy, then delete the source
    #[arg(long = "move", id = "move_", conflicts_with = "delete")]
    pub move_: bool,

    /// Short for --disposition delete: delete the source, no destination
    #[arg(long)]
    pub delete: bool,

    /// How the destination is written: STOR, APPE or STOU [default: replace]
    #[arg(long, value_name = "replace|append|unique", value_parser = parse_with::<DestCommand>)]
    pub dest_command: Option<DestCommand>,

    /// Representation type sent to both servers: A, E, I or "L n" [default: I]
    #[arg(long = "type", value_name = "TYPE", value_parser = parse_with::<TransferType>)]
    pub transfer_type: Option<TransferType>,

    /// Transmission mode: S, B or C [default: S]
    #[arg(long, value_name = "S|B|C", value_parser = parse_with::<TransferMode>)]
    pub mode: Option<TransferMode>,

    /// File structure: F, R or P [default: F]
    #[arg(long, value_name = "F|R|P", value_parser = parse_with::<FileStructure>)]
    pub stru: Option<FileStructure>,

    /// Earliest first attempt: RFC 3339 (2026-12-01T08:00:00Z) or relative ("in 2h", "90m")
    /// [default: now]
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,

    /// Wait after the first failed attempt, e.g. 10m (bftpd clamps it to its bounds)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub retry_first: Option<String>,

    /// Each further wait is the previous one times this (>= 1)
    #[arg(long, value_name = "FACTOR")]
    pub retry_factor: Option<f64>,

    /// Longest wait between attempts, e.g. 4h
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub retry_cap: Option<String>,

    /// Attempts in all, the first one included
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,

    /// Start no attempt later than this after the start time, e.g. 3days
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub deadline: Option<String>,

    /// Mailbox for the report (repeatable) [default: bftpd's choice, e.g. your Unix user]
    #[arg(long, value_name = "MAILBOX")]
    pub notify: Vec<String>,

    /// A label to find the job later with `bftp status --keyword`
    #[arg(long, value_name = "K")]
    pub keyword: Option<String>,

    /// Idempotency key: sending again with the same key and parameters gives the same job
    /// [default: a fresh random key]
    #[arg(long, value_name = "KEY")]
    pub request_key: Option<String>,

    /// ACCT for the source server
    #[arg(long, value_name = "ACCT")]
    pub source_acct: Option<String>,

    /// ACCT for the destination server
    #[arg(long, value_name = "ACCT")]
    pub dest_acct: Option<String>,

    /// Read the source password from the first line of this file
    #[arg(long, value_name = "FILE")]
    pub source_password_file: Option<PathBuf>,

    /// Read the destination password from the first line of this file
    #[arg(long, value_name = "FILE")]
    pub dest_password_file: Option<PathBuf>,
}

fn parse_with<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    s.parse().map_err(|e: T::Err| e.to_string())
}

fn parse_duration_arg(s: &str) -> Result<String, String> {
    let s = s.trim();
    humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. 90s, 10m, 4h, 2days)"))?;
    Ok(s.to_string())
}

/// A request ready to send. `Debug` hides the passwords the request carries.
pub struct Prepared {
    pub request: SubmitRequest,
    pub request_key: String,
    /// For stderr: passwords in URLs, where each password came from.
    pub warnings: Vec<String>,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("request_key", &self.request_key)
            .field("source", &self.request.source.host)
            .field(
                "destination",
                &self.request.destination.as_ref().map(|d| &d.host),
            )
            .finish_non_exhaustive()
    }
}

impl SubmitArgs {
    fn disposition_given(&self) -> Option<Disposition> {
        if self.move_ {
            Some(Disposition::Move)
        } else if self.delete {
            Some(Disposition::Delete)
        } else {
            self.disposition
        }
    }
}

/// A fresh random 128-bit key, hex.
pub fn random_request_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Resolves a relative start time against `now` so that the request, and any re-send of it,
/// names one instant; an absolute time passes through as written, `now` as absent.
pub fn resolve_start(input: &str, now: Timestamp) -> Result<(Option<String>, Timestamp), Failure> {
    let s = input.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok((None, now));
    }
    let invalid = |e: bftp_core::time::StartTimeError| Failure::invalid(format!("--start: {e}"));
    let at = parse_start_time(s, now).map_err(invalid)?;
    // A time that does not move with `now` is absolute.
    let later = parse_start_time(s, now.saturating_add(Duration::from_secs(1))).map_err(invalid)?;
    if later == at {
        Ok((Some(s.to_string()), at))
    } else {
        Ok((Some(at.to_rfc3339()), at))
    }
}

/// The password part of a URL's authority, as typed (for removing it from error messages).
fn url_password_raw(input: &str) -> Option<&str> {
    let rest = input.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = authority.rsplit_once('@')?.0;
    userinfo
        .split_once(':')
        .map(|(_, pw)| pw)
        .filter(|pw| !pw.is_empty())
}

/// bftp-core's URL errors quote the input, password and all: mask it.
fn redact(message: &str, input: &str) -> String {
    match url_password_raw(input) {
        Some(pw) => {
            let plain = format!(":{pw}@");
            let escaped = format!(":{}@", pw.escape_debug());
            message
                .replace(&plain, ":****@")
                .replace(&escaped, ":****@")
        }
        None => message.to_string(),
    }
}

struct ParsedSide {
    endpoint: Endpoint,
    /// The user as the URL names it, `None` when it names none.
    url_user: Option<String>,
}

fn parse_side(side: Side, input: &str) -> Result<ParsedSide, Failure> {
    let name = side.name();
    let parsed =
        parse_ftp_url(name, input).map_err(|e| Failure::invalid(redact(&e.to_string(), input)))?;
    let named_user = url::Url::parse(input)
        .map(|u| !u.username().is_empty())
        .unwrap_or(false);
    let endpoint = parsed.endpoint;
    Ok(ParsedSide {
        url_user: named_user.then(|| endpoint.user.clone()),
        endpoint,
    })
}

fn endpoint_spec(e: &Endpoint) -> EndpointSpec {
    EndpointSpec {
        host: e.host.clone(),
        port: Some(e.port),
        user: Some(e.user.clone()),
        password: e.password.as_ref().map(|p| p.expose().to_string()),
        acct: e.acct.as_ref().map(|a| a.expose().to_string()),
        path: e.path.clone(),
    }
}

fn validation_failure(spec: &JobSpec) -> Result<(), Failure> {
    spec.validate().map_err(|e| Failure::invalid(e.to_string()))
}

/// Everything a submit needs before it talks to bftpd: parse, resolve, find passwords,
/// validate. Passwords are looked for only after the rest checked out, so that nobody types
/// a password for a request that then fails on a typo.
pub fn prepare(args: &SubmitArgs, sources: &Sources, now: Timestamp) -> anyhow::Result<Prepared> {
    let mut warnings = Vec::new();
    let disposition = args.disposition_given();
    let mut source = parse_side(Side::Source, &args.source)?;
    let mut destination = args
        .destination
        .as_deref()
        .map(|d| parse_side(Side::Destination, d))
        .transpose()?;
    let (start, start_at) = match &args.start {
        Some(s) => resolve_start(s, now)?,
        None => (None, now),
    };

    let retry = RetrySpec {
        first_interval: args.retry_first.clone(),
        factor: args.retry_factor,
        cap: args.retry_cap.clone(),
        max_attempts: args.max_attempts,
        deadline: args.deadline.clone(),
    };
    let request_key = args.request_key.clone().unwrap_or_else(random_request_key);
    check_request_key(&request_key)?;

    let acct = |a: &Option<String>| a.as_deref().map(Secret::new);
    source.endpoint.acct = acct(&args.source_acct);
    if let Some(d) = &mut destination {
        d.endpoint.acct = acct(&args.dest_acct);
    }
    let mut spec = JobSpec {
        source: source.endpoint.clone(),
        destination: destination.as_ref().map(|d| d.endpoint.clone()),
        disposition: disposition.unwrap_or_default(),
        dest_command: args.dest_command.unwrap_or_default(),
        params: FtpParams {
            transfer_type: args.transfer_type.unwrap_or_default(),
            mode: args.mode.unwrap_or_default(),
            structure: args.stru.unwrap_or_default(),
        },
        start_at,
        retry: local_retry_policy(args)?,
        notify: args.notify.clone(),
        keyword: args.keyword.clone(),
    };
    validation_failure(&spec)?;

    let mut sides = vec![(
        Side::Source,
        &mut source,
        args.source_password_file.as_deref(),
        args.source_acct.is_some(),
    )];
    if let Some(d) = destination.as_mut() {
        sides.push((
            Side::Destination,
            d,
            args.dest_password_file.as_deref(),
            args.dest_acct.is_some(),
        ));
    }
    for (side, parsed, file, acct_given) in sides {
        let url_password = parsed.endpoint.password.take();
        let found: Found = sources.find(&Want {
            side,
            host: &parsed.endpoint.host,
            url_user: parsed.url_user.as_deref(),
            url_password: url_password.as_ref(),
            password_file: file,
        })?;
        if found.origin == Origin::Url {
            warnings.push(format!(
                "warning: the {} password is in the URL, where `ps` and your shell history show it; \
                 prefer ~/.netrc, {} or --{}-password-file",
                side.name(),
                side.env_var(),
                if side == Side::Source { "source" } else { "dest" },
            ));
        }
        parsed.endpoint.user = found.user;
        parsed.endpoint.password = found.password;
        if !acct_given {
            parsed.endpoint.acct = found.netrc_account;
        }
    }
    spec.source = source.endpoint.clone();
    spec.destination = destination.as_ref().map(|d| d.endpoint.clone());
    validation_failure(&spec)?;

    let request = SubmitRequest {
        source: endpoint_spec(&spec.source),
        destination: spec.destination.as_ref().map(endpoint_spec),
        disposition: disposition.map(|d| d.as_str().to_string()),
        dest_command: args.dest_command.map(|d| d.as_str().to_string()),
        transfer_type: args.transfer_type.map(|t| t.ftp_arg()),
        mode: args.mode.map(|m| m.ftp_arg().to_string()),
        structure: args.stru.map(|s| s.ftp_arg().to_string()),
        start,
        retry,
        notify: args.notify.clone(),
        keyword: args.keyword.clone(),
    };
    Ok(Prepared {
        request,
        request_key,
        warnings,
    })
}

/// The user's retry values over core's defaults, for local checks only: bftpd has its own
/// defaults and clamps. A cap left to the default never fails against a given first interval.
fn local_retry_policy(args: &SubmitArgs) -> Result<RetryPolicy, Failure> {
    let d = RetryPolicy::default();
    let dur = |s: &Option<String>| s.as_deref().and_then(|s| humantime::parse_duration(s).ok());
    let first_interval = dur(&args.retry_first).unwrap_or(d.first_interval);
    let cap = dur(&args.retry_cap).unwrap_or(d.cap.max(first_interval));
    Ok(RetryPolicy {
        first_interval,
        factor: args.retry_factor.unwrap_or(d.factor),
        cap,
        max_attempts: args.max_attempts.unwrap_or(d.max_attempts),
        deadline: dur(&args.deadline).unwrap_or(d.deadline),
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
/// job the first one made (SPEC §4.5), so a retry cannot make a second job.
const RESEND_DELAYS: [Duration; 2] = [Duration::from_millis(300), Duration::from_secs(1)];

pub async fn send(
    client: &Client,
    prepared: &Prepared,
) -> anyhow::Result<client::Reply<SubmitResponse>> {
    let body = serde_json::to_vec(&prepared.request).context("encoding the request")?;
    let headers = [(IDEMPOTENCY_KEY_HEADER, prepared.request_key.as_str())];
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
                    prepared.request_key
                )))
            }
        }
    }
}

/// The text to print.
pub async fn run(client: &Client, prepared: &Prepared, json: bool) -> anyhow::Result<String> {
    let reply = send(client, prepared).await.context("submitting the job")?;
    if json {
        return output::pretty_json(&reply.raw);
    }
    Ok(human(&reply.value, &prepared.request_key))
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

    fn prep(argv: &[&str]) -> anyhow::Result<Prepared> {
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
            },
            destination: Some(EndpointSpec {
                host: "dst.example.org".into(),
                port: Some(21),
                user: Some("bob".into()),
                password: None,
                acct: Some("da".into()),
                path: "incoming".into(),
            }),
            disposition: Some("move".into()),
            dest_command: Some("unique".into()),
            transfer_type: Some("L 8".into()),
            mode: Some("B".into()),
            structure: Some("R".into()),
            start: Some("2026-11-30T14:00:00Z".into()),
            retry: RetrySpec {
                first_interval: Some("5m".into()),
                factor: Some(3.0),
                cap: Some("2h".into()),
                max_attempts: Some(7),
                deadline: Some("2days".into()),
            },
            notify: vec!["alice@example.org".into(), "ops@example.org".into()],
            keyword: Some("nightly".into()),
        };
        assert_eq!(p.request, want);
        assert_eq!(p.request_key, "k-123");
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn defaults_are_left_to_bftpd() {
        let p = prep(&["ftp://h/f", "ftp://d/"]).unwrap();
        let r = &p.request;
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
        let d = |argv: &[&str]| prep(argv).unwrap().request.disposition;
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

    #[test]
    fn start_times() {
        let cases: &[(&str, Option<&str>)] = &[
            ("in 2h", Some("2026-11-30T14:00:00Z")),
            ("90m", Some("2026-11-30T13:30:00Z")),
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
            serde_json::to_vec(&one.request).unwrap(),
            serde_json::to_vec(&two.request).unwrap()
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
        assert_eq!(p.request.source.password.as_deref(), Some("s3cr@t"));
        assert_eq!(p.warnings.len(), 1);
        assert!(
            p.warnings[0].contains("source password is in the URL"),
            "{:?}",
            p.warnings
        );
        assert!(!p.warnings[0].contains("s3cr"));
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
        let s = &p.request.source;
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref(), s.acct.as_deref()),
            (Some("carol"), Some("netrc-pw"), Some("netrc-acct"))
        );
        let d = p.request.destination.as_ref().unwrap();
        assert_eq!(
            (d.user.as_deref(), d.password.as_deref()),
            (Some("bob"), Some("dest-pw"))
        );
        // An explicit ACCT beats the netrc one.
        let a = args(&["ftp://src/f", "ftp://d/x", "--source-acct", "mine"]);
        let p = prepare(&a, &sources, NOW).unwrap();
        assert_eq!(p.request.source.acct.as_deref(), Some("mine"));
    }

    #[test]
    fn redaction() {
        assert_eq!(url_password_raw("ftp://u:p%40w@h/x"), Some("p%40w"));
        assert_eq!(url_password_raw("ftp://u@h/x:y@z"), None);
        assert_eq!(url_password_raw("ftp://h/x"), None);
        assert_eq!(
            redact("bad \"ftp://u:pw@h/\"", "ftp://u:pw@h/"),
            "bad \"ftp://u:****@h/\""
        );
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
        assert_eq!(sent, p.request);
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
