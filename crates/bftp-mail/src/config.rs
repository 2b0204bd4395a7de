//! `[mail]` in bftpd.toml. Durations in humantime syntax, as in the rest of the daemon's
//! config; unknown keys are an error, so a typo never silently falls back to a default.
//!
//! ```toml
//! [mail]
//! from = "bftp@files.example.org"
//! owner_domain = "example.org"
//! [mail.transport]
//! kind = "smtp"
//! host = "smtp.example.org"
//! port = 587
//! tls = "starttls"
//! username = "bftp"
//! password_file = "/etc/bftp/smtp-password"
//! [mail.retry]
//! give_up_after = "2days"
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailConfig {
    /// False: no report is mailed. The outbox is still written (it is part of finishing a
    /// job) and `bftp status` says the report is held; turning mail on delivers them.
    #[serde(default = "d_enabled")]
    pub enabled: bool,
    /// The sender of every report (header From and the envelope's MAIL FROM).
    #[serde(default = "d_from")]
    pub from: String,
    /// A job without notify addresses is mailed to `<owner login>@owner_domain`.
    #[serde(default = "d_owner_domain")]
    pub owner_domain: String,
    #[serde(default)]
    pub transport: TransportConfig,
    #[serde(default)]
    pub retry: MailRetry,
}

fn d_enabled() -> bool {
    true
}
fn d_from() -> String {
    "bftp@localhost".into()
}
fn d_owner_domain() -> String {
    "localhost".into()
}

impl Default for MailConfig {
    fn default() -> Self {
        MailConfig {
            enabled: d_enabled(),
            from: d_from(),
            owner_domain: d_owner_domain(),
            transport: TransportConfig::default(),
            retry: MailRetry::default(),
        }
    }
}

/// `[mail.transport]`: how reports leave the host. Default: SMTP to port 25 of localhost,
/// without TLS (a local relay).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum TransportConfig {
    Smtp {
        /// The relay's host name (also the name its TLS certificate must carry).
        #[serde(default = "d_host")]
        host: String,
        #[serde(default = "d_port")]
        port: u16,
        /// `none` (a local relay), `starttls` (required: a relay that does not offer it is
        /// a delivery failure, never a silent downgrade) or `tls` (implicit TLS, port 465).
        #[serde(default)]
        tls: SmtpTls,
        /// Log in with this user (PLAIN or LOGIN); absent: no authentication.
        #[serde(default)]
        username: Option<String>,
        /// The password for `username`, read once at startup; its trailing newline is
        /// dropped. The password itself is never in the config and never logged.
        #[serde(default)]
        password_file: Option<PathBuf>,
        /// Bounds connecting and each SMTP command.
        #[serde(default = "d_smtp_timeout", with = "humantime_duration")]
        timeout: Duration,
    },
    Sendmail {
        /// The sendmail-compatible binary; it is run as `COMMAND -i -f FROM -- RCPT...` with
        /// the message on its standard input.
        #[serde(default = "d_sendmail")]
        command: PathBuf,
        /// A sendmail still running after this is killed (a transient failure).
        #[serde(default = "d_sendmail_timeout", with = "humantime_duration")]
        timeout: Duration,
    },
}

fn d_host() -> String {
    "localhost".into()
}
fn d_port() -> u16 {
    25
}
fn d_smtp_timeout() -> Duration {
    Duration::from_secs(30)
}
fn d_sendmail() -> PathBuf {
    PathBuf::from("/usr/sbin/sendmail")
}
fn d_sendmail_timeout() -> Duration {
    Duration::from_secs(60)
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig::Smtp {
            host: d_host(),
            port: d_port(),
            tls: SmtpTls::default(),
            username: None,
            password_file: None,
            timeout: d_smtp_timeout(),
        }
    }
}

// By hand so that a future field holding a secret cannot leak through `{:?}` by accident.
impl std::fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportConfig::Smtp {
                host,
                port,
                tls,
                username,
                password_file,
                timeout,
            } => f
                .debug_struct("Smtp")
                .field("host", host)
                .field("port", port)
                .field("tls", tls)
                .field("username", username)
                .field("password_file", password_file)
                .field("timeout", timeout)
                .finish(),
            TransportConfig::Sendmail { command, timeout } => f
                .debug_struct("Sendmail")
                .field("command", command)
                .field("timeout", timeout)
                .finish(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    /// Plain SMTP: only for a relay on the same host or a trusted network.
    #[default]
    None,
    /// Connect in plain text, then STARTTLS; refuse to go on without it.
    Starttls,
    /// TLS from the first byte (SMTPS, RFC 8314).
    Tls,
}

/// `[mail.retry]`: the outbox's own backoff, independent of the jobs' retry policy.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailRetry {
    /// The wait after the first failed delivery.
    #[serde(default = "d_first", with = "humantime_duration")]
    pub first_interval: Duration,
    /// Each further wait is the previous one times this.
    #[serde(default = "d_factor")]
    pub factor: f64,
    /// No wait is longer than this (before jitter).
    #[serde(default = "d_cap", with = "humantime_duration")]
    pub cap: Duration,
    /// Transient failures stop being retried once this long has passed since the first try;
    /// the report is then given up (and logged), as a permanent failure is at once.
    #[serde(default = "d_give_up", with = "humantime_duration")]
    pub give_up_after: Duration,
}

fn d_first() -> Duration {
    Duration::from_secs(30)
}
fn d_factor() -> f64 {
    2.0
}
fn d_cap() -> Duration {
    Duration::from_secs(30 * 60)
}
fn d_give_up() -> Duration {
    Duration::from_secs(5 * 24 * 3600)
}

impl Default for MailRetry {
    fn default() -> Self {
        MailRetry {
            first_interval: d_first(),
            factor: d_factor(),
            cap: d_cap(),
            give_up_after: d_give_up(),
        }
    }
}

/// `Duration` fields in humantime syntax ("30s", "30m", "5days").
mod humantime_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(|e| {
            serde::de::Error::custom(format!(
                "{s:?} is not a duration ({e}); write e.g. \"30s\" or \"30m\""
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_section_takes_every_default() {
        let c: MailConfig = toml::from_str("").unwrap();
        assert_eq!(c, MailConfig::default());
        assert!(c.enabled);
        assert_eq!(c.from, "bftp@localhost");
        assert_eq!(c.owner_domain, "localhost");
        assert_eq!(
            c.transport,
            TransportConfig::Smtp {
                host: "localhost".into(),
                port: 25,
                tls: SmtpTls::None,
                username: None,
                password_file: None,
                timeout: Duration::from_secs(30),
            }
        );
        assert_eq!(c.retry.first_interval, Duration::from_secs(30));
        assert_eq!(c.retry.factor, 2.0);
        assert_eq!(c.retry.cap, Duration::from_secs(1800));
        assert_eq!(c.retry.give_up_after, Duration::from_secs(5 * 86400));
    }

    #[test]
    fn full_smtp_section_parses() {
        let c: MailConfig = toml::from_str(
            r#"
            enabled = true
            from = "bftp@files.example.org"
            owner_domain = "example.org"
            [transport]
            kind = "smtp"
            host = "smtp.example.org"
            port = 465
            tls = "tls"
            username = "bftp"
            password_file = "/etc/bftp/smtp-password"
            timeout = "10s"
            [retry]
            first_interval = "1m"
            factor = 3
            cap = "1h"
            give_up_after = "2days"
            "#,
        )
        .unwrap();
        assert_eq!(c.owner_domain, "example.org");
        let TransportConfig::Smtp {
            tls,
            port,
            timeout,
            password_file,
            ..
        } = &c.transport
        else {
            panic!("{:?}", c.transport)
        };
        assert_eq!(*tls, SmtpTls::Tls);
        assert_eq!(*port, 465);
        assert_eq!(*timeout, Duration::from_secs(10));
        assert_eq!(
            password_file.as_deref(),
            Some(std::path::Path::new("/etc/bftp/smtp-password"))
        );
        assert_eq!(c.retry.factor, 3.0);
        assert_eq!(c.retry.give_up_after, Duration::from_secs(2 * 86400));
    }

    #[test]
    fn sendmail_section_parses_with_defaults() {
        let c: MailConfig = toml::from_str("[transport]\nkind = \"sendmail\"\n").unwrap();
        assert_eq!(
            c.transport,
            TransportConfig::Sendmail {
                command: "/usr/sbin/sendmail".into(),
                timeout: Duration::from_secs(60),
            }
        );
    }

    #[test]
    fn typos_and_bad_values_are_refused() {
        for (toml, needle) in [
            ("form = \"x@y\"", "form"),
            ("[transport]\nkind = \"smtp\"\nhots = \"h\"", "hots"),
            ("[transport]\nkind = \"sendmail\"\nport = 25", "port"),
            ("[transport]\nkind = \"pigeon\"", "pigeon"),
            ("[transport]\nkind = \"smtp\"\ntls = \"ssl\"", "ssl"),
            ("[retry]\ncap = \"soon\"", "soon"),
            ("[retry]\ngive_up = \"1d\"", "give_up"),
        ] {
            let e = toml::from_str::<MailConfig>(toml).unwrap_err().to_string();
            assert!(e.contains(needle), "{toml:?}: {e}");
        }
    }
}
