//! Delivery: SMTP through lettre, or a sendmail binary; every failure classified as
//! transient (the outbox retries it with backoff) or permanent (it gives up at once).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use lettre::address::Envelope as SmtpEnvelope;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::io::AsyncWriteExt;

use crate::config::{MailConfig, SmtpTls, TransportConfig};
use crate::error::MailError;
use crate::scrub::{clean, Scrubber};

/// Stderr of a failed sendmail shown in the reason, at most.
const STDERR_SHOWN: usize = 300;

/// Why a delivery failed, and whether trying again may help. The reason never contains the
/// SMTP password (it is scrubbed, with its base64 forms, from whatever lettre reports).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// A 4yz reply, a refused or dropped connection, a timeout, DNS, TLS, a sendmail that
    /// exited with EX_TEMPFAIL or could not be started: try again later.
    #[error("mail delivery failed, will retry: {reason}")]
    Transient { reason: String },
    /// A 5yz reply or a sendmail refusal: the same message would be refused again.
    #[error("mail delivery refused: {reason}")]
    Permanent { reason: String },
}

/// What an exit status of sendmail means for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Delivered,
    Transient,
    Permanent,
}

/// A sendmail exit code (sysexits.h, which sendmail, Postfix, Exim, msmtp and nullmailer
/// follow) as a delivery class:
///
/// | code | name           | class     | why |
/// |------|----------------|-----------|-----|
/// | 0    | EX_OK          | delivered | |
/// | 69   | EX_UNAVAILABLE | transient | a service it needs is down (e.g. postdrop, the queue) |
/// | 71   | EX_OSERR       | transient | fork, memory: the system, not the message |
/// | 72   | EX_OSFILE      | transient | a system file missing, an operator can fix it in time |
/// | 73   | EX_CANTCREAT   | transient | cannot write its queue file (disk full) |
/// | 74   | EX_IOERR       | transient | I/O error |
/// | 75   | EX_TEMPFAIL    | transient | what it says |
/// | 64   | EX_USAGE       | permanent | our arguments (a recipient it cannot parse) |
/// | 65   | EX_DATAERR     | permanent | the message is refused |
/// | 66   | EX_NOINPUT     | permanent | |
/// | 67   | EX_NOUSER      | permanent | no such recipient |
/// | 68   | EX_NOHOST      | permanent | no such domain |
/// | 70   | EX_SOFTWARE    | permanent | an internal error repeats on the same input |
/// | 76   | EX_PROTOCOL    | permanent | the remote side refused in a way it will again |
/// | 77   | EX_NOPERM      | permanent | |
/// | 78   | EX_CONFIG      | permanent | |
/// | else | (not sysexits) | permanent | an unknown refusal; retrying it for days helps nobody |
///
/// A sendmail killed by a signal, timed out or that could not be started is transient; that
/// is decided where it happens, not here.
pub fn classify_sendmail_exit(code: i32) -> Class {
    match code {
        0 => Class::Delivered,
        69 | 71..=75 => Class::Transient,
        _ => Class::Permanent,
    }
}

/// Delivers messages the way `[mail.transport]` says. Built once at startup.
pub struct Mailer {
    transport: Transport,
    from: Mailbox,
    /// The SMTP password's forms, to keep them out of every reason.
    scrubber: Scrubber,
}

enum Transport {
    Smtp {
        inner: AsyncSmtpTransport<Tokio1Executor>,
        relay: String,
    },
    Sendmail {
        command: PathBuf,
        timeout: Duration,
    },
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Mailer");
        d.field("from", &self.from.to_string());
        match &self.transport {
            Transport::Smtp { relay, .. } => d.field("smtp", relay),
            Transport::Sendmail { command, .. } => d.field("sendmail", command),
        };
        d.finish()
    }
}

impl Mailer {
    /// Checks the configuration and builds the transport: the sender address must parse,
    /// TLS needs a host name its certificate can be checked against, and the password file
    /// (if any) is read now, once.
    pub fn new(config: &MailConfig) -> Result<Mailer, MailError> {
        let from = config
            .from
            .parse::<Mailbox>()
            .map_err(|e| MailError::Address {
                field: "from",
                address: config.from.escape_debug().to_string(),
                reason: e.to_string(),
            })?;
        let mut secrets = Vec::new();
        let transport = match &config.transport {
            TransportConfig::Smtp {
                host,
                port,
                tls,
                username,
                password_file,
                timeout,
            } => {
                let host = host.trim();
                if host.is_empty() {
                    return Err(MailError::Transport {
                        what: "host is empty".into(),
                    });
                }
                let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
                    .port(*port)
                    .timeout(Some(*timeout));
                if *tls != SmtpTls::None && !is_server_name(host) {
                    return Err(MailError::Tls {
                        host: host.to_string(),
                        reason: "TLS needs the relay's host name (or IP address) to check its \
                                 certificate against"
                            .into(),
                    });
                }
                let params = || {
                    TlsParameters::new(host.to_string()).map_err(|e| MailError::Tls {
                        host: host.to_string(),
                        reason: e.to_string(),
                    })
                };
                builder = builder.tls(match tls {
                    SmtpTls::None => Tls::None,
                    SmtpTls::Starttls => Tls::Required(params()?),
                    SmtpTls::Tls => Tls::Wrapper(params()?),
                });
                match (username, password_file) {
                    (Some(user), Some(path)) => {
                        let password = read_password(path)?;
                        secrets.push(password.clone());
                        builder = builder.credentials(Credentials::new(user.clone(), password));
                    }
                    (None, None) => {}
                    (Some(_), None) => {
                        return Err(MailError::Transport {
                            what: "username is set but password_file is not".into(),
                        })
                    }
                    (None, Some(_)) => {
                        return Err(MailError::Transport {
                            what: "password_file is set but username is not".into(),
                        })
                    }
                }
                Transport::Smtp {
                    inner: builder.build(),
                    relay: format!("{host}:{port}"),
                }
            }
            TransportConfig::Sendmail { command, timeout } => {
                if command.as_os_str().is_empty() {
                    return Err(MailError::Transport {
                        what: "command is empty".into(),
                    });
                }
                Transport::Sendmail {
                    command: command.clone(),
                    timeout: *timeout,
                }
            }
        };
        Ok(Mailer {
            transport,
            from,
            scrubber: Scrubber::new(&secrets),
        })
    }

    /// The configured sender, for [`crate::Envelope::from`].
    pub fn from_address(&self) -> String {
        self.from.to_string()
    }

    /// Delivers `msg` to the recipients of its own envelope (its From and To).
    pub async fn send(&self, msg: &Message) -> Result<(), SendError> {
        self.send_raw(msg.envelope(), &msg.formatted()).await
    }

    /// Delivers an already formatted message (e.g. the bytes an outbox entry keeps).
    pub async fn send_raw(&self, envelope: &SmtpEnvelope, message: &[u8]) -> Result<(), SendError> {
        let result = match &self.transport {
            Transport::Smtp { inner, relay } => inner
                .send_raw(envelope, message)
                .await
                .map(|_| ())
                .map_err(|e| classify_smtp(&e, relay)),
            Transport::Sendmail { command, timeout } => {
                sendmail(command, *timeout, envelope, message).await
            }
        };
        result.map_err(|e| match e {
            SendError::Transient { reason } => SendError::Transient {
                reason: self.scrubber.scrub(&reason),
            },
            SendError::Permanent { reason } => SendError::Permanent {
                reason: self.scrubber.scrub(&reason),
            },
        })
    }
}

/// A DNS name (letters, digits, hyphens; labels of 1 to 63) or an IP address: what a
/// certificate can be checked against.
fn is_server_name(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn read_password(path: &std::path::Path) -> Result<String, MailError> {
    let text = std::fs::read_to_string(path).map_err(|source| MailError::PasswordFile {
        path: path.to_path_buf(),
        source,
    })?;
    let password = text.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        return Err(MailError::EmptyPasswordFile {
            path: path.to_path_buf(),
        });
    }
    Ok(password)
}

/// Only a 5yz reply is permanent. lettre's `is_transient()` is true only for 4yz replies, so
/// a refused connection, a timeout, DNS, TLS or a dropped connection would look like neither;
/// all of those may work later, and so may the client-side refusals (STARTTLS or an AUTH
/// mechanism missing today).
fn classify_smtp(e: &lettre::transport::smtp::Error, relay: &str) -> SendError {
    let reason = format!("SMTP {relay}: {}", clean(&error_chain(e)));
    if e.is_permanent() {
        SendError::Permanent { reason }
    } else {
        SendError::Transient { reason }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        // lettre's Display already shows its direct source.
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

async fn sendmail(
    command: &std::path::Path,
    timeout: Duration,
    envelope: &SmtpEnvelope,
    message: &[u8],
) -> Result<(), SendError> {
    let shown = command.display();
    let mut cmd = tokio::process::Command::new(command);
    cmd.arg("-i");
    if let Some(from) = envelope.from() {
        cmd.arg("-f").arg(AsRef::<str>::as_ref(from));
    }
    cmd.arg("--")
        .args(envelope.to().iter().map(AsRef::<str>::as_ref))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| SendError::Transient {
        reason: format!("cannot start {shown}: {e}"),
    })?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let run = async move {
        // Write and wait together: a sendmail that fills its stderr before reading all of
        // its input must not deadlock us. A write error (it exited without reading) is
        // decided by its exit status.
        let write = async move {
            let _ = stdin.write_all(message).await;
            let _ = stdin.shutdown().await;
        };
        let (_, output) = tokio::join!(write, child.wait_with_output());
        output
    };
    let output = match tokio::time::timeout(timeout, run).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => {
            return Err(SendError::Transient {
                reason: format!("waiting for {shown}: {e}"),
            })
        }
        Err(_) => {
            return Err(SendError::Transient {
                reason: format!(
                    "{shown} did not finish within {}",
                    humantime::format_duration(timeout)
                ),
            })
        }
    };
    let stderr: String = clean(String::from_utf8_lossy(&output.stderr).trim())
        .chars()
        .take(STDERR_SHOWN)
        .collect();
    let said = if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    };
    match output.status.code() {
        Some(code) => match classify_sendmail_exit(code) {
            Class::Delivered => Ok(()),
            Class::Transient => Err(SendError::Transient {
                reason: format!("{shown} exited with {code}{said}"),
            }),
            Class::Permanent => Err(SendError::Permanent {
                reason: format!("{shown} exited with {code}{said}"),
            }),
        },
        None => Err(SendError::Transient {
            reason: format!("{shown} was killed by a signal{said}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sendmail_exit_codes() {
        use Class::*;
        for (code, want) in [
            (0, Delivered),
            (75, Transient),
            (69, Transient),
            (71, Transient),
            (72, Transient),
            (73, Transient),
            (74, Transient),
            (64, Permanent),
            (65, Permanent),
            (66, Permanent),
            (67, Permanent),
            (68, Permanent),
            (70, Permanent),
            (76, Permanent),
            (77, Permanent),
            (78, Permanent),
            (1, Permanent),
            (127, Permanent),
            (-1, Permanent),
        ] {
            assert_eq!(classify_sendmail_exit(code), want, "exit {code}");
        }
    }

    fn config(transport: TransportConfig) -> MailConfig {
        MailConfig {
            transport,
            ..MailConfig::default()
        }
    }

    fn smtp(tls: SmtpTls, host: &str) -> TransportConfig {
        smtp_auth(tls, host, None, None)
    }

    fn smtp_auth(
        tls: SmtpTls,
        host: &str,
        username: Option<&str>,
        password_file: Option<PathBuf>,
    ) -> TransportConfig {
        TransportConfig::Smtp {
            host: host.into(),
            port: 25,
            tls,
            username: username.map(str::to_string),
            password_file,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn server_names() {
        for (host, ok) in [
            ("smtp.example.org", true),
            ("localhost", true),
            ("smtp.example.org.", true),
            ("127.0.0.1", true),
            ("::1", true),
            ("", false),
            ("bad host", false),
            ("smtp..example", false),
            ("-smtp.example", false),
            ("smtp_relay.example", false),
        ] {
            assert_eq!(is_server_name(host), ok, "{host:?}");
        }
    }

    #[test]
    fn default_config_builds() {
        let m = Mailer::new(&MailConfig::default()).unwrap();
        assert_eq!(m.from_address(), "bftp@localhost");
        assert!(format!("{m:?}").contains("localhost:25"));
    }

    #[test]
    fn bad_configs_are_refused_at_startup() {
        let e = Mailer::new(&MailConfig {
            from: "not an address".into(),
            ..MailConfig::default()
        })
        .unwrap_err();
        assert!(matches!(e, MailError::Address { field: "from", .. }), "{e}");

        for host in ["", "   "] {
            let e = Mailer::new(&config(smtp(SmtpTls::Starttls, host))).unwrap_err();
            assert!(matches!(e, MailError::Transport { .. }), "{e}");
        }
        for host in ["bad host name", "smtp..example"] {
            let e = Mailer::new(&config(smtp(SmtpTls::Tls, host))).unwrap_err();
            assert!(matches!(e, MailError::Tls { .. }), "{host:?}: {e}");
        }
        assert!(Mailer::new(&config(smtp(SmtpTls::Starttls, "smtp.example.org"))).is_ok());

        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = Mailer::new(&config(smtp_auth(
            SmtpTls::Starttls,
            "smtp.example.org",
            Some("bftp"),
            Some(missing),
        )))
        .unwrap_err();
        assert!(matches!(e, MailError::PasswordFile { .. }), "{e}");

        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let e = Mailer::new(&config(smtp_auth(
            SmtpTls::Starttls,
            "smtp.example.org",
            Some("bftp"),
            Some(empty),
        )))
        .unwrap_err();
        assert!(matches!(e, MailError::EmptyPasswordFile { .. }), "{e}");

        let e = Mailer::new(&config(smtp_auth(
            SmtpTls::Starttls,
            "smtp.example.org",
            Some("bftp"),
            None,
        )))
        .unwrap_err();
        assert!(matches!(e, MailError::Transport { .. }), "{e}");
    }

    #[test]
    fn the_password_never_shows_in_debug_or_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "sw0rdfish-77\n").unwrap();
        let m = Mailer::new(&config(smtp_auth(
            SmtpTls::Starttls,
            "smtp.example.org",
            Some("bftp"),
            Some(pw),
        )))
        .unwrap();
        assert!(!format!("{m:?}").contains("sw0rdfish"));
        assert_eq!(
            m.scrubber.scrub("535 bad credentials sw0rdfish-77"),
            "535 bad credentials ****"
        );
    }
}
