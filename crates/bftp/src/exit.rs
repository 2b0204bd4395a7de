//! Exit codes, and the error value that carries one through an `anyhow` chain.

use std::fmt;

use bftp_api::ErrorBody;

/// The documented exit codes of `bftp`. Keep [`EXIT_CODES_HELP`] and the README in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command did what was asked.
    Success = 0,
    /// Anything not listed below: a bug, an I/O failure, an HTTP 5xx from bftpd.
    Unexpected = 1,
    /// Bad command line (clap's own code).
    Usage = 2,
    /// bftpd is not reachable: the socket is missing or refuses connections, or bftpd
    /// answered 503 (shutting down).
    Unreachable = 3,
    /// The request is invalid: rejected by bftpd (HTTP 400, or 403 for a host its policy
    /// forbids or a relay it does not make) or by the checks `bftp` makes before sending (URL, time, password file...).
    Invalid = 4,
    /// No such job or watch, or not one of yours (HTTP 404).
    NotFound = 5,
    /// Conflict (HTTP 409): the request key was used before with other parameters, or the
    /// job to cancel has already finished.
    Conflict = 6,
    /// Permission denied on the socket (EACCES): the caller may not talk to bftpd.
    PermissionDenied = 7,
    /// bftpd answered, and what it found is a problem: a `verify` check failed, or a
    /// `transfer` left a file not copied (or failed as a whole).
    Problem = 8,
    /// bftpd's disk is nearly full (HTTP 507): nothing was stored; try again once the
    /// operator freed space.
    DiskFull = 9,
    /// bftpd's job store (its PostgreSQL database) cannot be reached (HTTP 503, kind
    /// `store_unavailable`): nothing was stored; the same command may be run again later.
    StoreUnavailable = 10,
    /// Interrupted (SIGINT, Ctrl-C): `transfer` closed its connection, which aborts the copy
    /// in bftpd. 128 + SIGINT, as a shell reports a command killed by it.
    Interrupted = 130,
}

/// The exit codes as `--help` shows them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
    0  success
    1  unexpected error (I/O failure, bftpd internal error, ...)
    2  usage error (bad command line)
    3  bftpd is not reachable (socket missing or connection refused; bftpd unavailable)
    4  the request is invalid: rejected by bftpd (HTTP 400, or 403 for a forbidden host
       or relay) or by bftp's own checks before sending
    5  not found (HTTP 404): no such job or watch, or not yours
    6  conflict (HTTP 409): request key reused with other parameters, or the job has
       already finished
    7  permission denied on the bftpd socket
    8  verification or transfer found a problem: a `verify` check failed, or a
       `transfer` did not copy every file
    9  bftpd's disk is nearly full (HTTP 507): nothing was stored; try again later
   10  bftpd's job store (its database) cannot be reached (HTTP 503): nothing was
       stored; try again later
  130  interrupted (Ctrl-C): `transfer` drops its connection, which aborts the copy";

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The [`ErrorBody::kind`] used for an error that `bftp` found itself.
    pub fn kind(self) -> &'static str {
        match self {
            Exit::Success => "ok",
            Exit::Unexpected => "internal",
            Exit::Usage | Exit::Invalid => "invalid_request",
            Exit::Unreachable => "unavailable",
            Exit::NotFound => "not_found",
            Exit::Conflict => "conflict",
            Exit::PermissionDenied => "permission_denied",
            Exit::Problem => "problem",
            Exit::DiskFull => "insufficient_storage",
            Exit::StoreUnavailable => bftp_api::STORE_UNAVAILABLE,
            Exit::Interrupted => "interrupted",
        }
    }

    /// The exit code for an HTTP error status from bftpd and the `kind` of its error body.
    pub fn from_response(status: u16, kind: Option<&str>) -> Exit {
        match (status, kind) {
            (503, Some(bftp_api::STORE_UNAVAILABLE)) => Exit::StoreUnavailable,
            _ => Exit::from_http_status(status),
        }
    }

    /// The exit code for an HTTP error status from bftpd.
    pub fn from_http_status(status: u16) -> Exit {
        match status {
            200..=299 => Exit::Success,
            400 | 403 | 413 | 422 => Exit::Invalid,
            404 => Exit::NotFound,
            409 => Exit::Conflict,
            503 => Exit::Unreachable,
            507 => Exit::DiskFull,
            _ => Exit::Unexpected,
        }
    }
}

/// An error with its exit code. When it came from bftpd, `body` is the response body as
/// received, printed as-is under `--json`.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    pub body: Option<Vec<u8>>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure {
            exit,
            message: message.into(),
            body: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Failure::new(Exit::Invalid, message)
    }

    /// An HTTP error response from bftpd. The message is the body's `message` (bftpd
    /// promises it never holds a password), else a short excerpt of whatever came.
    pub fn from_response(status: u16, reason: &str, body: &[u8]) -> Self {
        let parsed = serde_json::from_slice::<ErrorBody>(body);
        let exit = Exit::from_response(status, parsed.as_ref().ok().map(|e| e.kind.as_str()));
        let message = match parsed {
            Ok(e) => match e.job_id {
                Some(id) if !e.message.contains(&id.to_string()) => {
                    format!("{} (job {id}) [HTTP {status} {reason}]", e.message)
                }
                _ => format!("{} [HTTP {status} {reason}]", e.message),
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text: String = text.trim().chars().take(200).collect();
                let text = crate::output::sanitize(&text);
                if text.is_empty() {
                    format!("bftpd answered HTTP {status} {reason}")
                } else {
                    format!("bftpd answered HTTP {status} {reason}: {text}")
                }
            }
        };
        Failure {
            exit,
            message,
            body: Some(body.to_vec()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The [`Failure`] deepest in the chain decides; an error without one is unexpected.
pub fn failure_of(err: &anyhow::Error) -> Option<&Failure> {
    err.chain()
        .filter_map(|e| e.downcast_ref::<Failure>())
        .last()
}

pub fn exit_of(err: &anyhow::Error) -> Exit {
    failure_of(err).map_or(Exit::Unexpected, |f| f.exit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn http_status_to_exit_code() {
        let cases = [
            (200, 0),
            (201, 0),
            (400, 4),
            (403, 4),
            (404, 5),
            (409, 6),
            (500, 1),
            (502, 1),
            (503, 3),
            (507, 9),
        ];
        for (status, code) in cases {
            assert_eq!(Exit::from_http_status(status).code(), code, "HTTP {status}");
        }
    }

    #[test]
    fn an_unreachable_store_has_its_own_exit_code_and_other_503s_do_not() {
        let body = br#"{"kind":"store_unavailable","message":"submit: the job store's database cannot be reached (connection refused); nothing was stored"}"#;
        let f = Failure::from_response(503, "Service Unavailable", body);
        assert_eq!(f.exit, Exit::StoreUnavailable);
        assert_eq!(f.exit.code(), 10);
        assert!(f.message.contains("nothing was stored"), "{}", f.message);
        let shutting = br#"{"kind":"unavailable","message":"bftpd is shutting down"}"#;
        assert_eq!(
            Failure::from_response(503, "Service Unavailable", shutting).exit,
            Exit::Unreachable
        );
        assert_eq!(
            Failure::from_response(503, "Service Unavailable", b"not json").exit,
            Exit::Unreachable
        );
        assert!(EXIT_CODES_HELP.contains("\n   10  "));
    }

    #[test]
    fn exit_code_survives_context() {
        let err = anyhow::Error::new(Failure::new(Exit::Conflict, "key reused"))
            .context("submitting the job");
        assert_eq!(exit_of(&err), Exit::Conflict);
        assert_eq!(format!("{err:#}"), "submitting the job: key reused");
        let plain = anyhow::anyhow!("boom");
        assert_eq!(exit_of(&plain), Exit::Unexpected);
        let io: anyhow::Result<()> = Err(std::io::Error::other("disk")).context("writing");
        assert_eq!(exit_of(&io.unwrap_err()), Exit::Unexpected);
    }

    #[test]
    fn error_body_message_is_used() {
        let body = br#"{"kind":"conflict","message":"request key reused with other parameters","job_id":12}"#;
        let f = Failure::from_response(409, "Conflict", body);
        assert_eq!(f.exit, Exit::Conflict);
        assert_eq!(
            f.message,
            "request key reused with other parameters (job 12) [HTTP 409 Conflict]"
        );
        let f = Failure::from_response(500, "Internal Server Error", b"oops\x1b[2J");
        assert_eq!(f.exit, Exit::Unexpected);
        assert!(!f.message.contains('\x1b'), "{:?}", f.message);
    }
}
