//! `[webhooks]` in the config (SPEC §16), and the webhook key: the daemon's default targets,
//! the signing key's file, the sender's bounds, the retry schedule of a delivery and the
//! per-host CA files of `https` targets. Which addresses a target may reach is `[policy]`
//! (RULES.md §8) itself.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use bftp_core::event::{is_webhook, WebhookTarget};
use rand::RngCore;
use serde::Deserialize;

use crate::humantime_duration;

/// `[webhooks]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Targets every event goes to, besides the URLs in a job's (or a watch's) `notify`.
    #[serde(default)]
    pub urls: Vec<String>,
    /// The signing key. Default: `webhook.key` in the state directory, created (mode 0600,
    /// 32 random bytes as 64 hex digits) at the first start when absent.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// One request, from the connect to the last byte of the answer.
    #[serde(default = "d_timeout", with = "humantime_duration")]
    pub timeout: Duration,
    /// The largest event body sent; a job's ledger is cut to fit (`"truncated": true`).
    #[serde(default = "d_max_body_bytes")]
    pub max_body_bytes: usize,
    /// The wait after a first failed try; it doubles with each try, up to `retry_max`.
    #[serde(default = "d_retry_first", with = "humantime_duration")]
    pub retry_first: Duration,
    #[serde(default = "d_retry_max", with = "humantime_duration")]
    pub retry_max: Duration,
    /// A delivery still failing this long after its event is given up (shown in `status`).
    #[serde(default = "d_give_up_after", with = "humantime_duration")]
    pub give_up_after: Duration,
    /// Per host (as the URL names it): the PEM file of the CA certificates its `https`
    /// certificate must chain to. Other hosts: the system's roots.
    #[serde(default)]
    pub ca_files: BTreeMap<String, PathBuf>,
}

fn d_timeout() -> Duration {
    Duration::from_secs(10)
}
fn d_max_body_bytes() -> usize {
    1024 * 1024
}
fn d_retry_first() -> Duration {
    Duration::from_secs(5)
}
fn d_retry_max() -> Duration {
    Duration::from_secs(600)
}
fn d_give_up_after() -> Duration {
    Duration::from_secs(3 * 86_400)
}

/// A body smaller than this could not hold an event's envelope and a useful ledger.
pub const MIN_BODY_BYTES: usize = 4096;

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            urls: Vec::new(),
            secret_file: None,
            timeout: d_timeout(),
            max_body_bytes: d_max_body_bytes(),
            retry_first: d_retry_first(),
            retry_max: d_retry_max(),
            give_up_after: d_give_up_after(),
            ca_files: BTreeMap::new(),
        }
    }
}

impl WebhooksConfig {
    /// The checks a config load makes (every URL a valid target; bounds that make sense).
    /// The CA files are read when the sender is built, at start.
    pub fn check(&self) -> anyhow::Result<()> {
        for url in &self.urls {
            if !is_webhook(url) {
                bail!("[webhooks] urls: every entry is an http:// or https:// URL");
            }
            WebhookTarget::parse(url).map_err(|e| anyhow::anyhow!("[webhooks] urls: {e}"))?;
        }
        if self.timeout.is_zero() {
            bail!("[webhooks] timeout must be more than 0");
        }
        if self.max_body_bytes < MIN_BODY_BYTES {
            bail!("[webhooks] max_body_bytes must be at least {MIN_BODY_BYTES}");
        }
        if self.retry_first.is_zero() || self.retry_first > self.retry_max {
            bail!("[webhooks] retry_first must be more than 0 and at most retry_max");
        }
        if self.give_up_after.is_zero() {
            bail!("[webhooks] give_up_after must be more than 0");
        }
        for (host, path) in &self.ca_files {
            if host.is_empty() || path.as_os_str().is_empty() {
                bail!("[webhooks] ca_files: write \"host\" = \"/path/to/ca.pem\"");
            }
        }
        Ok(())
    }

    /// Reads every CA file as the sender will at start (`bftpd check-config`).
    pub fn check_files(&self) -> anyhow::Result<()> {
        let hosts = self
            .ca_files
            .iter()
            .map(|(host, path)| bftp_ftp::tls::HostTrust {
                host: host.clone(),
                trust: bftp_ftp::tls::Trust::CaFile(path.clone()),
            })
            .collect();
        bftp_ftp::tls::TlsTrust::new(hosts)
            .map(drop)
            .map_err(|e| anyhow::anyhow!("[webhooks] ca_files: {e}"))
    }

    /// The signing key's file: `secret_file`, or `webhook.key` in `state_dir`.
    pub fn secret_path(&self, state_dir: &Path) -> PathBuf {
        self.secret_file
            .clone()
            .unwrap_or_else(|| state_dir.join("webhook.key"))
    }
}

/// The key that signs webhook requests: the key file's text without surrounding white
/// space (so a receiver can use the file as it is). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookKey(Vec<u8>);

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookKey(****)")
    }
}

/// Shorter keys are refused: an HMAC key of a few bytes is guessed.
pub const MIN_KEY_LEN: usize = 16;

impl WebhookKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> WebhookKey {
        WebhookKey(bytes.into())
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Loads the key file, creating it (mode 0600, 32 random bytes as hex) when absent. A key
    /// file that others can read, or shorter than [`MIN_KEY_LEN`], is refused. The key is
    /// never logged; the path is.
    pub fn load_or_create(path: &Path) -> anyhow::Result<WebhookKey> {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                let mut raw = [0u8; 32];
                rand::rngs::OsRng.fill_bytes(&mut raw);
                let text: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                f.write_all(format!("{text}\n").as_bytes())
                    .and_then(|_| f.sync_all())
                    .with_context(|| format!("cannot write webhook key file {}", path.display()))?;
                if let Some(dir) = path.parent() {
                    std::fs::File::open(dir).and_then(|d| d.sync_all()).ok();
                }
                tracing::info!(path = %path.display(), "created a new webhook key file");
                Ok(WebhookKey(text.into_bytes()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta = std::fs::metadata(path)
                    .with_context(|| format!("cannot stat webhook key file {}", path.display()))?;
                if meta.permissions().mode() & 0o077 != 0 {
                    bail!(
                        "webhook key file {} is readable by others (mode {:o}); chmod 600 it",
                        path.display(),
                        meta.permissions().mode() & 0o777
                    );
                }
                let mut buf = Vec::new();
                std::fs::File::open(path)
                    .and_then(|mut f| f.read_to_end(&mut buf))
                    .with_context(|| format!("cannot read webhook key file {}", path.display()))?;
                let key = buf.trim_ascii().to_vec();
                if key.len() < MIN_KEY_LEN {
                    bail!(
                        "webhook key file {} holds {} bytes, fewer than {MIN_KEY_LEN}",
                        path.display(),
                        key.len()
                    );
                }
                Ok(WebhookKey(key))
            }
            Err(e) => {
                Err(e).with_context(|| format!("cannot create webhook key file {}", path.display()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<WebhooksConfig> {
        let c: WebhooksConfig = toml::from_str(text)?;
        c.check()?;
        Ok(c)
    }

    #[test]
    fn defaults_and_keys() {
        let d = parse("").unwrap();
        assert_eq!(d, WebhooksConfig::default());
        assert_eq!(d.timeout, Duration::from_secs(10));
        assert_eq!(d.max_body_bytes, 1_048_576);
        assert_eq!(d.retry_first, Duration::from_secs(5));
        assert_eq!(d.retry_max, Duration::from_secs(600));
        assert_eq!(d.give_up_after, Duration::from_secs(259_200));
        assert_eq!(
            d.secret_path(Path::new("/var/lib/bftpd")),
            Path::new("/var/lib/bftpd/webhook.key")
        );
        let c = parse(
            r#"
urls = ["https://hooks.example.org/bftp?token=x"]
secret_file = "/etc/bftpd/webhook.key"
timeout = "3s"
max_body_bytes = 65536
retry_first = "1s"
retry_max = "1m"
give_up_after = "1day"
ca_files = { "hooks.example.org" = "/etc/bftpd/hooks-ca.pem" }
"#,
        )
        .unwrap();
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert_eq!(
            c.secret_path(Path::new("/x")),
            Path::new("/etc/bftpd/webhook.key")
        );
        assert_eq!(
            c.ca_files["hooks.example.org"],
            Path::new("/etc/bftpd/hooks-ca.pem")
        );
    }

    #[test]
    fn bad_sections_are_errors() {
        for (bad, needle) in [
            ("bogus = 1", "bogus"),
            ("urls = [\"ops@example.org\"]", "http:// or https://"),
            ("urls = [\"https://u:pw@h.example.org/\"]", "password"),
            ("timeout = \"0s\"", "timeout"),
            ("timeout = \"soon\"", "not a duration"),
            ("max_body_bytes = 100", "at least 4096"),
            ("retry_first = \"1h\"", "at most retry_max"),
            ("give_up_after = \"0s\"", "give_up_after"),
            ("ca_files = { \"\" = \"/x\" }", "ca_files"),
        ] {
            let e = format!("{:#}", parse(bad).unwrap_err());
            assert!(e.contains(needle), "{bad}: {e}");
            assert!(!e.contains(":pw@"), "{e}");
        }
    }

    #[test]
    fn check_config_reads_the_ca_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let c = parse(&format!(
            "ca_files = {{ \"hooks.example.org\" = \"{}\" }}",
            missing.display()
        ))
        .unwrap();
        let e = format!("{:#}", c.check_files().unwrap_err());
        assert!(
            e.contains("[webhooks] ca_files") && e.contains("missing.pem"),
            "{e}"
        );
        std::fs::write(&missing, "not a certificate\n").unwrap();
        assert!(c.check_files().is_err());
        assert!(parse("").unwrap().check_files().is_ok());
    }

    #[test]
    fn the_key_file_is_created_0600_reloaded_and_refused_when_open_or_short() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("webhook.key");
        let k = WebhookKey::load_or_create(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(k.expose().len(), 64);
        assert!(k.expose().iter().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(format!("{k:?}"), "WebhookKey(****)");
        assert_eq!(WebhookKey::load_or_create(&p).unwrap(), k);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = WebhookKey::load_or_create(&p).unwrap_err().to_string();
        assert!(e.contains("readable by others"), "{e}");
        std::fs::write(&p, "short\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = WebhookKey::load_or_create(&p).unwrap_err().to_string();
        assert!(e.contains("fewer than 16"), "{e}");
        std::fs::write(&p, "an operator's own secret, shared\n").unwrap();
        assert_eq!(
            WebhookKey::load_or_create(&p).unwrap().expose(),
            b"an operator's own secret, shared"
        );
    }
}
