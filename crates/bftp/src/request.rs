//! What `submit`, `verify` and `transfer` share: the two endpoints and their passwords, the
//! source disposition, the destination command and TYPE/MODE/STRU, from the command line to a
//! checked [`SubmitRequest`].

use std::fmt;
use std::path::PathBuf;

use bftp_api::{EndpointSpec, RetrySpec, SubmitRequest};
use bftp_core::ftpurl::parse_ftp_url;
use bftp_core::{
    DestCommand, Disposition, Endpoint, FileStructure, FtpParams, JobSpec, RetryPolicy, Secret,
    Timestamp, TransferMode, TransferType,
};
use clap::Args;

use crate::exit::Failure;
use crate::password::{Found, Origin, Side, Sources, Want};

/// No `Debug`: the URLs may hold passwords.
#[derive(Args)]
pub struct RequestArgs {
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

    /// The weakest proof of each copy to accept: hash (both servers' digests agree) or size
    /// (SIZE agrees); a pair of servers that cannot give it is refused, with the reason,
    /// before any file moves [default: the strongest the pair can give]
    #[arg(long, value_name = "hash|size|replies",
          value_parser = parse_with::<bftp_core::proof::ProofLevel>)]
    pub proof: Option<bftp_core::proof::ProofLevel>,

    /// The source is a directory: copy its whole tree (each file by its path below it;
    /// directories made on the destination, parents first; links and special files reported,
    /// not followed). With transfer: walked and copied in the foreground, exit 8 if a file
    /// failed or was refused; with verify: the whole tree walked and counted
    #[arg(long, short = 'r')]
    pub recursive: bool,

    /// How the file bytes travel: fxp (straight from one server to the other, a third-party
    /// transfer; a pair that refuses it fails the job), relay (always through bftpd, which
    /// opens a data connection to each server and moves the bytes itself) or auto (third
    /// party first, through bftpd when the servers refuse it) [default: the daemon's, see
    /// its [ftp] data_path]. With verify: which path the job would take, and why
    #[arg(long, value_name = "fxp|relay|auto",
          value_parser = parse_with::<bftp_core::route::DataPath>)]
    pub data_path: Option<bftp_core::route::DataPath>,

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

    /// TLS on the control connections: required, preferred or off (SRC,DST for one per
    /// side); without it, the daemon's default. `required` never sends USER/PASS in clear.
    #[arg(long, value_name = "POLICY")]
    pub tls: Option<String>,

    /// TLS on the data path (PROT P; server to server, SSCN): required, preferred or off
    /// (SRC,DST for one per side); without it, the daemon's default
    #[arg(long, value_name = "POLICY")]
    pub data_tls: Option<String>,
}

/// `POLICY` or `SRC,DST`: the words for the source and the destination, each checked.
fn tls_pair(flag: &str, value: &Option<String>) -> Result<[Option<String>; 2], Failure> {
    let Some(value) = value else {
        return Ok([None, None]);
    };
    let words: Vec<&str> = value.split(',').map(str::trim).collect();
    let [src, dst] = match words.as_slice() {
        [one] => [*one, *one],
        [src, dst] => [*src, *dst],
        _ => {
            return Err(Failure::invalid(format!(
                "{flag} {value:?}: expected POLICY or SRC,DST"
            )))
        }
    };
    for w in [src, dst] {
        w.parse::<bftp_core::TlsPolicy>()
            .map_err(|e| Failure::invalid(format!("{flag}: {e}")))?;
    }
    Ok([
        Some(src.to_ascii_lowercase()),
        Some(dst.to_ascii_lowercase()),
    ])
}

fn parse_with<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    s.parse().map_err(|e: T::Err| e.to_string())
}

impl RequestArgs {
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

/// What a queued job (and each job of a watch) has beside its transfer: how it is retried,
/// who hears of it, its label. `verify` and `transfer` run now, once, and have none of it.
#[derive(Args)]
pub struct QueueArgs {
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
}

fn parse_duration_arg(s: &str) -> Result<String, String> {
    let s = s.trim();
    humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. 90s, 10m, 4h, 2days)"))?;
    Ok(s.to_string())
}

impl QueueArgs {
    /// The schedule of a job starting at `start_at` (`start` as sent: `None` for now).
    pub fn schedule(&self, start: Option<String>, start_at: Timestamp) -> Schedule {
        Schedule {
            start,
            start_at,
            retry: RetrySpec {
                first_interval: self.retry_first.clone(),
                factor: self.retry_factor,
                cap: self.retry_cap.clone(),
                max_attempts: self.max_attempts,
                deadline: self.deadline.clone(),
            },
            policy: self.local_retry_policy(),
            notify: self.notify.clone(),
            keyword: self.keyword.clone(),
        }
    }

    /// The user's retry values over core's defaults, for local checks only: bftpd has its
    /// own defaults and clamps. A cap left to the default never fails against a given first
    /// interval.
    fn local_retry_policy(&self) -> RetryPolicy {
        let d = RetryPolicy::default();
        let dur = |s: &Option<String>| s.as_deref().and_then(|s| humantime::parse_duration(s).ok());
        let first_interval = dur(&self.retry_first).unwrap_or(d.first_interval);
        let cap = dur(&self.retry_cap).unwrap_or(d.cap.max(first_interval));
        RetryPolicy {
            first_interval,
            factor: self.retry_factor.unwrap_or(d.factor),
            cap,
            max_attempts: self.max_attempts.unwrap_or(d.max_attempts),
            deadline: dur(&self.deadline).unwrap_or(d.deadline),
        }
    }
}

/// What only a queued job has: when it starts, how it is retried, who hears of it. `verify`
/// and `transfer` run now, once, and leave all of it to bftpd's defaults.
pub struct Schedule {
    /// As sent: `None` for now.
    pub start: Option<String>,
    pub start_at: Timestamp,
    /// As sent: the user's values only.
    pub retry: RetrySpec,
    /// The user's values over core's defaults, for the local checks.
    pub policy: RetryPolicy,
    pub notify: Vec<String>,
    pub keyword: Option<String>,
}

impl Schedule {
    pub fn immediate(now: Timestamp) -> Self {
        Schedule {
            start: None,
            start_at: now,
            retry: RetrySpec::default(),
            policy: RetryPolicy::default(),
            notify: Vec::new(),
            keyword: None,
        }
    }
}

/// A request ready to send. `Debug` hides the passwords the request carries.
pub struct Prepared {
    pub request: SubmitRequest,
    /// For stderr: passwords in URLs.
    pub warnings: Vec<String>,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("source", &self.request.source.host)
            .field(
                "destination",
                &self.request.destination.as_ref().map(|d| &d.host),
            )
            .finish_non_exhaustive()
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
        implicit_tls: e.tls.implicit,
        ..Default::default()
    }
}

fn validation_failure(spec: &JobSpec) -> Result<(), Failure> {
    spec.validate().map_err(|e| Failure::invalid(e.to_string()))
}

/// What a request describes, for the local checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A job: its paths as given.
    Job,
    /// The template of a watch's jobs (SPEC §15): the source is the watched directory, the
    /// destination the directory the files go to. It is checked as the job a poll makes,
    /// `SRC_DIR/*` to `DST_DIR`, never recursive (the watch's own `recursive` says how deep a
    /// poll lists), and sent with the paths as given.
    Watch,
}

/// `dir/*`: the wildcard job a poll of the watched directory `dir` makes.
fn every_file_of(dir: &str) -> String {
    match dir {
        "" => "*".to_string(),
        d if d.ends_with('/') => format!("{d}*"),
        d => format!("{d}/*"),
    }
}

/// The spec the local checks see: the job itself, or the job a poll of a watch makes.
fn checked_shape(kind: Kind, spec: &JobSpec) -> Result<JobSpec, Failure> {
    match kind {
        Kind::Job => Ok(spec.clone()),
        Kind::Watch => {
            if bftp_core::model::has_wildcard(&spec.source.path) {
                return Err(Failure::invalid(format!(
                    "the source of a watch is a directory, and {:?} holds a wildcard: \
                     choose its files with --pattern",
                    spec.source.path
                )));
            }
            if spec.disposition == Disposition::Delete {
                return Err(Failure::invalid(
                    "a watch copies each new file, or moves it (--move); it does not delete one",
                ));
            }
            let mut shape = spec.clone();
            shape.source.path = every_file_of(&spec.source.path);
            shape.recursive = false;
            Ok(shape)
        }
    }
}

/// Parse, find passwords, validate. Passwords are looked for only after the rest checked out,
/// so that nobody types a password for a request that then fails on a typo.
pub fn prepare(
    args: &RequestArgs,
    schedule: Schedule,
    sources: &Sources,
) -> anyhow::Result<Prepared> {
    prepare_as(Kind::Job, args, schedule, sources)
}

/// [`prepare`] for a job or for a watch's template ([`Kind`]).
pub fn prepare_as(
    kind: Kind,
    args: &RequestArgs,
    schedule: Schedule,
    sources: &Sources,
) -> anyhow::Result<Prepared> {
    let mut warnings = Vec::new();
    let disposition = args.disposition_given();
    // A watch's `recursive` is its own, not its jobs'.
    let recursive = args.recursive && kind == Kind::Job;
    let tls = tls_pair("--tls", &args.tls)?;
    let data_tls = tls_pair("--data-tls", &args.data_tls)?;
    let mut source = parse_side(Side::Source, &args.source)?;
    let mut destination = args
        .destination
        .as_deref()
        .map(|d| parse_side(Side::Destination, d))
        .transpose()?;

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
        start_at: schedule.start_at,
        retry: schedule.policy,
        notify: schedule.notify.clone(),
        keyword: schedule.keyword.clone(),
        proof: args.proof,
        recursive,
        data_path: args.data_path,
    };
    validation_failure(&checked_shape(kind, &spec)?)?;

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
    validation_failure(&checked_shape(kind, &spec)?)?;

    let with_tls = |e: &Endpoint, i: usize| EndpointSpec {
        tls: tls[i].clone(),
        data_tls: data_tls[i].clone(),
        ..endpoint_spec(e)
    };
    let request = SubmitRequest {
        source: with_tls(&spec.source, 0),
        destination: spec.destination.as_ref().map(|d| with_tls(d, 1)),
        disposition: disposition.map(|d| d.as_str().to_string()),
        dest_command: args.dest_command.map(|d| d.as_str().to_string()),
        transfer_type: args.transfer_type.map(|t| t.ftp_arg()),
        mode: args.mode.map(|m| m.ftp_arg().to_string()),
        structure: args.stru.map(|s| s.ftp_arg().to_string()),
        start: schedule.start,
        retry: schedule.retry,
        notify: schedule.notify,
        keyword: schedule.keyword,
        proof: args.proof.map(|p| p.as_str().to_owned()),
        recursive,
        data_path: args.data_path.map(|p| p.as_str().to_owned()),
    };
    Ok(Prepared { request, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_directory_is_checked_as_its_wildcard_job() {
        for (dir, want) in [
            ("", "*"),
            ("in", "in/*"),
            ("in/", "in/*"),
            ("/", "/*"),
            ("/data/in", "/data/in/*"),
        ] {
            assert_eq!(every_file_of(dir), want, "{dir:?}");
        }
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
}
