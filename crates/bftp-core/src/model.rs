//! A transfer request (RULES.md §2) and its validation.

use std::fmt;
use std::str::FromStr;

use crate::retry::RetryPolicy;
use crate::time::Timestamp;

/// A secret (FTP password or ACCT). Its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The clear value, for the one place that needs it (the FTP session, the cipher).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

pub const DEFAULT_FTP_PORT: u16 = 21;
pub const ANONYMOUS: &str = "anonymous";

/// One side of a transfer: a server, the account on it and a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Secret>,
    pub acct: Option<Secret>,
    /// Relative to the login directory unless it starts with `/`.
    pub path: String,
    /// TLS for this side's control connection and data path.
    pub tls: crate::tls::EndpointTls,
}

impl Endpoint {
    /// The last path component (the file name or the wildcard pattern).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }
    /// The directory part of the path, `""` for the login directory.
    pub fn dir(&self) -> &str {
        match self.path.rfind('/') {
            Some(0) => "/",
            Some(i) => &self.path[..i],
            None => "",
        }
    }
    /// True when the last path component holds a wildcard, making a multi-file job.
    pub fn is_wildcard(&self) -> bool {
        has_wildcard(self.file_name())
    }
    /// `ftp://user@host:port/path`, never with the password.
    pub fn display_url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let path = if self.path.starts_with('/') {
            format!("/%2F{}", &self.path[1..])
        } else {
            format!("/{}", self.path)
        };
        format!("ftp://{}@{}:{}{}", self.user, host, self.port, path)
    }
}

pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $word:literal),+ $(,)? } what = $what:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
        pub enum $name { #[default] $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }
        }

        impl FromStr for $name {
            type Err = ValidationError;
            fn from_str(s: &str) -> Result<Self, ValidationError> {
                match s.to_ascii_lowercase().as_str() {
                    $($word => Ok($name::$variant),)+
                    _ => Err(ValidationError::UnknownValue {
                        what: $what,
                        value: s.to_string(),
                        expected: concat!($($word, " "),+).trim_end(),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

keyword_enum!(
    /// What happens to the source file (RULES.md §2).
    Disposition { Copy => "copy", Move => "move", Delete => "delete" } what = "source disposition"
);
keyword_enum!(
    /// How the destination file is written: STOR, APPE or STOU.
    DestCommand { Replace => "replace", Append => "append", Unique => "unique" } what = "destination command"
);

/// FTP representation type (RFC 959 §3.1.1). Default image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TransferType {
    Ascii,
    Ebcdic,
    #[default]
    Image,
    /// `L n`: local byte size n bits.
    Local(u8),
}

impl TransferType {
    /// The argument of the TYPE command. `A`, never `A N`, which some servers refuse.
    pub fn ftp_arg(self) -> String {
        match self {
            TransferType::Ascii => "A".into(),
            TransferType::Ebcdic => "E".into(),
            TransferType::Image => "I".into(),
            TransferType::Local(n) => format!("L {n}"),
        }
    }
}

impl FromStr for TransferType {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, ValidationError> {
        let err = || ValidationError::UnknownValue {
            what: "TYPE",
            value: s.to_string(),
            expected: "A E I \"L n\"",
        };
        let mut parts = s.split_whitespace();
        let t = match parts.next().map(|p| p.to_ascii_uppercase()).as_deref() {
            Some("A") => TransferType::Ascii,
            Some("E") => TransferType::Ebcdic,
            Some("I") => TransferType::Image,
            Some("L") => {
                let n: u8 = parts
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(err)?;
                TransferType::Local(n)
            }
            _ => return Err(err()),
        };
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(t)
    }
}

impl fmt::Display for TransferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.ftp_arg())
    }
}

macro_rules! letter_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $letter:literal),+ } default = $def:ident, what = $what:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl Default for $name { fn default() -> Self { $name::$def } }

        impl $name {
            pub fn ftp_arg(self) -> &'static str { match self { $($name::$variant => $letter),+ } }
        }

        impl FromStr for $name {
            type Err = ValidationError;
            fn from_str(s: &str) -> Result<Self, ValidationError> {
                match s.trim().to_ascii_uppercase().as_str() {
                    $($letter => Ok($name::$variant),)+
                    _ => Err(ValidationError::UnknownValue {
                        what: $what,
                        value: s.to_string(),
                        expected: concat!($($letter, " "),+).trim_end(),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.ftp_arg()) }
        }
    };
}

letter_enum!(
    /// Transmission mode (RFC 959 §3.4).
    TransferMode { Stream => "S", Block => "B", Compressed => "C" } default = Stream, what = "MODE"
);
letter_enum!(
    /// File structure (RFC 959 §3.1.2).
    FileStructure { File => "F", Record => "R", Page => "P" } default = File, what = "STRU"
);

/// TYPE, MODE and STRU, sent to both servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FtpParams {
    pub transfer_type: TransferType,
    pub mode: TransferMode,
    pub structure: FileStructure,
}

/// A complete, validated-on-demand request (RULES.md §2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    pub source: Endpoint,
    /// `None` only for `Disposition::Delete`.
    pub destination: Option<Endpoint>,
    pub disposition: Disposition,
    pub dest_command: DestCommand,
    pub params: FtpParams,
    /// Earliest first attempt.
    pub start_at: Timestamp,
    pub retry: RetryPolicy,
    pub notify: Vec<String>,
    pub keyword: Option<String>,
    /// The weakest proof of each copy the job accepts (`--proof`): a pair that cannot give it
    /// fails the job before any file moves. `None`: whatever the pair can give.
    pub proof: Option<crate::proof::ProofLevel>,
    /// The source path is a directory whose whole tree is copied (`--recursive`): every file
    /// below it is a member, named by its path relative to it.
    pub recursive: bool,
    /// How the file bytes travel (`--data-path`, SPEC §14): third party only, through bftpd,
    /// or third party first. `None`: the daemon's default, as configured when the job runs.
    pub data_path: Option<crate::route::DataPath>,
}

/// One thing wrong with a request. Field names are the user's words (`source path`, `notify`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("{field} contains {what}, which would inject {into}")]
    ControlCharacter {
        field: String,
        what: &'static str,
        /// What the character would break out of: "FTP commands", "mail headers".
        into: &'static str,
    },
    #[error("{field} is empty")]
    Empty { field: String },
    #[error("{field} names too many {what} ({len}, at most {max})")]
    TooMany {
        field: String,
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} is too long ({len} bytes, at most {max})")]
    TooLong {
        field: String,
        len: usize,
        max: usize,
    },
    #[error("unknown {what} {value:?}; expected one of: {expected}")]
    UnknownValue {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "a wildcard is allowed only in the last component of the source path, not in {path:?}"
    )]
    WildcardNotLast { path: String },
    #[error(
        "the destination path {path:?} contains a wildcard; wildcards are for the source only"
    )]
    WildcardInDestination { path: String },
    #[error("disposition `delete` takes no destination")]
    DeleteWithDestination,
    #[error("disposition `{0}` needs a destination")]
    MissingDestination(Disposition),
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("{0}")]
    Url(#[from] crate::ftpurl::UrlError),
    #[error("{0}")]
    StartTime(#[from] crate::time::StartTimeError),
}

/// All the problems found in one request, reported together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

pub const MAX_PATH_LEN: usize = 4096;
pub const MAX_FIELD_LEN: usize = 512;
pub const MAX_NOTIFY: usize = 16;

/// Rejects CR, LF and NUL: any of them in a name or credential would end the FTP command
/// line early and let the rest be read as a command of its own.
pub fn check_no_control(field: &str, value: &str) -> Result<(), ValidationError> {
    check_no_control_in(field, value, "FTP commands")
}

/// [`check_no_control`] for a value that goes `into` something other than FTP commands.
fn check_no_control_in(
    field: &str,
    value: &str,
    into: &'static str,
) -> Result<(), ValidationError> {
    let what = if value.contains('\r') {
        "a carriage return (CR)"
    } else if value.contains('\n') {
        "a line feed (LF)"
    } else if value.contains('\0') {
        "a NUL byte"
    } else {
        return Ok(());
    };
    Err(ValidationError::ControlCharacter {
        field: field.to_string(),
        what,
        into,
    })
}

fn check_len(errs: &mut Vec<ValidationError>, field: &str, value: &str, max: usize) {
    if value.len() > max {
        errs.push(ValidationError::TooLong {
            field: field.to_string(),
            len: value.len(),
            max,
        });
    }
}

fn check_endpoint(errs: &mut Vec<ValidationError>, side: &str, ep: &Endpoint) {
    let host_field = format!("{side} host");
    if ep.host.is_empty() {
        errs.push(ValidationError::Empty {
            field: host_field.clone(),
        });
    } else if let Err(e) = check_no_control(&host_field, &ep.host) {
        errs.push(e);
    } else if ep
        .host
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        errs.push(ValidationError::Invalid {
            field: host_field.clone(),
            reason: format!("{:?} is not a host name or address", ep.host),
        });
    }
    check_len(errs, &host_field, &ep.host, 253);
    if ep.port == 0 {
        errs.push(ValidationError::Invalid {
            field: format!("{side} port"),
            reason: "port 0 is not a server port".into(),
        });
    }
    let fields: [(String, Option<&str>, usize); 4] = [
        (
            format!("{side} user"),
            Some(ep.user.as_str()),
            MAX_FIELD_LEN,
        ),
        (
            format!("{side} password"),
            ep.password.as_ref().map(Secret::expose),
            MAX_FIELD_LEN,
        ),
        (
            format!("{side} ACCT"),
            ep.acct.as_ref().map(Secret::expose),
            MAX_FIELD_LEN,
        ),
        (format!("{side} path"), Some(ep.path.as_str()), MAX_PATH_LEN),
    ];
    for (field, value, max) in fields {
        if let Some(v) = value {
            if let Err(e) = check_no_control(&field, v) {
                errs.push(e);
            }
            check_len(errs, &field, v, max);
        }
    }
    if ep.user.is_empty() {
        errs.push(ValidationError::Empty {
            field: format!("{side} user"),
        });
    }
}

/// Loose mailbox syntax: `local@domain`, no spaces, no control characters. Deliverability
/// is the mail relay's business.
pub fn check_mailbox(m: &str) -> Result<(), ValidationError> {
    // A mailbox goes into the report's To: header and the SMTP envelope.
    check_no_control_in("notify", m, "mail headers")?;
    let ok = match m.rsplit_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.is_empty()
                && !m.chars().any(|c| {
                    c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | ',' | ';' | '"')
                })
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ValidationError::Invalid {
            field: "notify".into(),
            reason: format!("{m:?} is not a mailbox (user@domain)"),
        })
    }
}

/// A `notify` entry: a webhook URL (`http://`, `https://`: SPEC §16) or a mailbox.
pub fn check_notify(entry: &str) -> Result<(), ValidationError> {
    if crate::event::is_webhook(entry) {
        crate::event::WebhookTarget::parse(entry).map(drop)
    } else {
        check_mailbox(entry)
    }
}

impl JobSpec {
    /// Every check of RULES.md §2 that needs no DNS: the host policy is the daemon's (§8).
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = Vec::new();
        check_endpoint(&mut errs, "source", &self.source);
        if self.recursive {
            let bad = |reason: &str| ValidationError::Invalid {
                field: "recursive".into(),
                reason: reason.into(),
            };
            if has_wildcard(&self.source.path) {
                errs.push(bad(
                    "a recursive job copies a directory: no wildcard in its source",
                ));
            }
            if self.disposition == Disposition::Delete {
                errs.push(bad(
                    "a recursive job copies or moves a tree; it does not delete one",
                ));
            }
            if self.dest_command != DestCommand::Replace {
                errs.push(bad("a recursive job writes each file with STOR (replace)"));
            }
        } else if self.source.file_name().is_empty() {
            errs.push(ValidationError::Invalid {
                field: "source path".into(),
                reason: format!("{:?} names no file (it ends with '/')", self.source.path),
            });
        }
        if has_wildcard(self.source.dir()) {
            errs.push(ValidationError::WildcardNotLast {
                path: self.source.path.clone(),
            });
        }
        match (&self.destination, self.disposition) {
            (Some(_), Disposition::Delete) => errs.push(ValidationError::DeleteWithDestination),
            (None, Disposition::Copy | Disposition::Move) => {
                errs.push(ValidationError::MissingDestination(self.disposition))
            }
            (Some(dst), _) => {
                check_endpoint(&mut errs, "destination", dst);
                if has_wildcard(&dst.path) {
                    errs.push(ValidationError::WildcardInDestination {
                        path: dst.path.clone(),
                    });
                }
            }
            (None, Disposition::Delete) => {}
        }
        if self.notify.len() > MAX_NOTIFY {
            errs.push(ValidationError::TooMany {
                field: "notify".into(),
                what: "addresses",
                len: self.notify.len(),
                max: MAX_NOTIFY,
            });
        }
        for m in &self.notify {
            if let Err(e) = check_notify(m) {
                errs.push(e);
            }
        }
        if let Some(k) = &self.keyword {
            if k.trim().is_empty() {
                errs.push(ValidationError::Empty {
                    field: "keyword".into(),
                });
            }
            if let Err(e) = check_no_control("keyword", k) {
                errs.push(e);
            }
            check_len(&mut errs, "keyword", k, 256);
        }
        if let Err(e) = self.retry.validate() {
            errs.push(e);
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errs))
        }
    }

    pub fn is_multi_file(&self) -> bool {
        self.recursive || self.source.is_wildcard()
    }

    /// A recursive job's source directory, without trailing slashes (`/` stays `/`).
    pub fn source_root(&self) -> &str {
        let p = self.source.path.trim_end_matches('/');
        if p.is_empty() && self.source.path.starts_with('/') {
            "/"
        } else {
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn endpoint(path: &str) -> Endpoint {
        Endpoint {
            host: "ftp.example.org".into(),
            port: 21,
            user: "alice".into(),
            password: Some(Secret::new("pw")),
            acct: None,
            path: path.into(),
            tls: Default::default(),
        }
    }

    #[test]
    fn a_recursive_job_copies_a_directory_with_stor() {
        let mut s = spec();
        s.recursive = true;
        s.source.path = "pub/tree/".into();
        s.dest_command = DestCommand::Replace;
        s.disposition = Disposition::Copy;
        assert!(s.validate().is_ok(), "{:?}", s.validate());
        assert!(s.is_multi_file());
        assert_eq!(s.source_root(), "pub/tree");
        s.source.path = "/".into();
        assert_eq!(s.source_root(), "/");
        for (change, why) in [
            (
                (|s: &mut JobSpec| s.source.path = "pub/*.dat".into()) as fn(&mut JobSpec),
                "no wildcard",
            ),
            (
                |s: &mut JobSpec| s.dest_command = DestCommand::Append,
                "STOR",
            ),
            (
                |s: &mut JobSpec| s.dest_command = DestCommand::Unique,
                "STOR",
            ),
        ] {
            let mut t = s.clone();
            change(&mut t);
            let e = t.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    fn spec() -> JobSpec {
        JobSpec {
            source: endpoint("pub/data.bin"),
            destination: Some(endpoint("incoming/")),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams::default(),
            start_at: Timestamp(0),
            retry: RetryPolicy::default(),
            notify: vec!["alice@example.org".into()],
            keyword: Some("nightly".into()),
            proof: None,
            recursive: false,
            data_path: None,
        }
    }

    #[test]
    fn good_spec_validates() {
        spec().validate().unwrap();
        let mut s = spec();
        s.source.path = "pub/*.dat".into();
        s.validate().unwrap();
        assert!(s.is_multi_file());
        let mut d = spec();
        d.disposition = Disposition::Delete;
        d.destination = None;
        d.validate().unwrap();
    }

    #[test]
    fn bad_inputs_table() {
        type Mutate = fn(&mut JobSpec);
        let cases: &[(&str, Mutate, &str)] = &[
            (
                "CR in source path",
                |s| s.source.path = "a\rDELE x".into(),
                "carriage return",
            ),
            (
                "LF in destination path",
                |s| s.destination.as_mut().unwrap().path = "x\nDELE y".into(),
                "line feed",
            ),
            ("NUL in user", |s| s.source.user = "a\0".into(), "NUL"),
            (
                "LF in password",
                |s| s.source.password = Some(Secret::new("p\nQUIT")),
                "source password",
            ),
            (
                "wildcard in destination",
                |s| s.destination.as_mut().unwrap().path = "in/*.bin".into(),
                "wildcard",
            ),
            (
                "wildcard in source dir",
                |s| s.source.path = "p*b/file".into(),
                "last component",
            ),
            (
                "delete with destination",
                |s| s.disposition = Disposition::Delete,
                "takes no destination",
            ),
            (
                "copy without destination",
                |s| s.destination = None,
                "needs a destination",
            ),
            (
                "empty host",
                |s| s.source.host = String::new(),
                "source host is empty",
            ),
            ("port 0", |s| s.source.port = 0, "port 0"),
            (
                "source names no file",
                |s| s.source.path = "pub/".into(),
                "names no file",
            ),
            (
                "bad mailbox",
                |s| s.notify = vec!["not a mailbox".into()],
                "not a mailbox",
            ),
            (
                "CRLF in mailbox",
                |s| s.notify = vec!["a@b\r\nRCPT TO:<x@y>".into()],
                "notify contains a carriage return (CR), which would inject mail headers",
            ),
            (
                "a password in a webhook URL",
                |s| s.notify = vec!["https://u:secret@hooks.example.org/x".into()],
                "notify: a webhook URL must not hold a password",
            ),
            (
                "CRLF in a webhook URL",
                |s| s.notify = vec!["https://h.example.org/\r\nX: y".into()],
                "which would inject HTTP requests",
            ),
            (
                "too many mailboxes",
                |s| s.notify = vec!["a@b".into(); 10_000],
                "notify names too many addresses (10000, at most 16)",
            ),
            (
                "CR in a path",
                |s| s.source.path = "a\rDELE b".into(),
                "source path contains a carriage return (CR), which would inject FTP commands",
            ),
            (
                "CR in keyword",
                |s| s.keyword = Some("k\r".into()),
                "keyword contains",
            ),
            ("factor below 1", |s| s.retry.factor = 0.5, "factor"),
        ];
        for (name, mutate, needle) in cases {
            let mut s = spec();
            mutate(&mut s);
            let err = s.validate().expect_err(name).to_string();
            assert!(err.contains(needle), "{name}: {err:?} lacks {needle:?}");
        }
    }

    #[test]
    fn webhook_targets_are_notify_entries_beside_mailboxes_or_alone() {
        let mut s = spec();
        s.notify = vec![
            "alice@example.org".into(),
            "https://hooks.example.org/bftp?token=t".into(),
        ];
        s.validate().unwrap();
        s.notify = vec!["http://127.0.0.1:8080/hook".into()];
        s.validate().unwrap();
        s.notify = vec!["https://hooks.example.org/x".into(); MAX_NOTIFY + 1];
        assert!(s.validate().unwrap_err().to_string().contains("too many"));
    }

    #[test]
    fn secrets_never_print() {
        let s = spec();
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("\"pw\""), "{dbg}");
        assert!(dbg.contains("Secret(****)"));
        assert!(!s.source.display_url().contains("pw"));
    }

    #[test]
    fn enum_words() {
        assert_eq!("MOVE".parse::<Disposition>().unwrap(), Disposition::Move);
        assert_eq!(
            "unique".parse::<DestCommand>().unwrap(),
            DestCommand::Unique
        );
        assert_eq!(
            "L 8".parse::<TransferType>().unwrap(),
            TransferType::Local(8)
        );
        assert_eq!("a".parse::<TransferType>().unwrap().ftp_arg(), "A");
        for bad in ["X", "L", "L 0", "L x", "A N", ""] {
            assert!(bad.parse::<TransferType>().is_err(), "{bad}");
        }
        assert_eq!("b".parse::<TransferMode>().unwrap(), TransferMode::Block);
        assert!("Z".parse::<TransferMode>().is_err());
        assert_eq!("R".parse::<FileStructure>().unwrap(), FileStructure::Record);
        let e = "Q".parse::<FileStructure>().unwrap_err().to_string();
        assert!(e.contains("unknown STRU") && e.contains("F R P"), "{e}");
    }

    #[test]
    fn endpoint_parts() {
        let e = endpoint("/abs/dir/f*.txt");
        assert_eq!(e.dir(), "/abs/dir");
        assert_eq!(e.file_name(), "f*.txt");
        assert!(e.is_wildcard());
        assert_eq!(endpoint("file").dir(), "");
        assert_eq!(endpoint("/file").dir(), "/");
        assert_eq!(
            endpoint("/abs/x").display_url(),
            "ftp://alice@ftp.example.org:21/%2Fabs/x"
        );
    }
}
