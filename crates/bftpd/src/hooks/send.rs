//! The HTTP side of a webhook (SPEC §16): one signed POST of one event to one target, and
//! what became of it.
//!
//! The target's address passes the host policy (RULES.md §8) as an FTP host's does: a name
//! through the client's resolver, which refuses the whole target when any address it
//! resolves to fails, before a connection is opened; an address in the URL before the request
//! is made. Redirects are not followed (a 3xx is permanent, naming where it pointed). An
//! `https` target is checked as FTPS is: the system's roots, or the host's CA file
//! (`[webhooks] ca_files`, built by bftp-ftp's `TlsTrust`). No proxy from the environment is
//! used: it would be the proxy's address that the policy saw.
//!
//! A reason (`why`) names a target by its shown form, never with its query; it never holds
//! the key.

use std::collections::HashMap;
use std::error::Error as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bftp_core::event::{judge_status, sign, Answer, WebhookTarget, SIGNATURE_HEADER};
use bftp_core::Timestamp;
use bftp_ftp::tls::{certificate_reason, HostTrust, TlsTrust, Trust};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, LOCATION};

use crate::hooks::config::{WebhookKey, WebhooksConfig};
use crate::hosts::policy::HostPolicy;

/// The most of a receiver's answer that is read; the rest is dropped with the connection.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// The most of a refusal's body quoted in its reason.
const QUOTED_BODY: usize = 200;

pub const EVENT_ID_HEADER: &str = "Bftp-Event-Id";
pub const EVENT_TYPE_HEADER: &str = "Bftp-Event-Type";

/// What became of one try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// A 2xx.
    Delivered { status: u16 },
    /// Try again later: no connection, no answer in time, 408, 429 or 5xx.
    Transient { why: String },
    /// Never try again as it is: a refused address or certificate, a redirect, another 4xx,
    /// a target or body that cannot be sent.
    Permanent { why: String },
}

/// The sender: one HTTP client per trust (the system's roots, each CA file), built once.
#[derive(Clone)]
pub struct Sender {
    default: Client,
    /// By lowercase host, as the URL names it (an IPv6 address without brackets).
    per_host: Arc<HashMap<String, Client>>,
    key: WebhookKey,
    policy: HostPolicy,
    max_body_bytes: usize,
    timeout: Duration,
    urls: Vec<String>,
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    trust: Trust,
    /// Why there are no roots to check a certificate against (no system roots found).
    no_roots: Option<String>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("ca_hosts", &self.per_host.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// A target refused by the host policy, as the resolver's error (found again in the
/// client's error chain).
#[derive(Debug)]
struct PolicyRefused(String);

impl std::fmt::Display for PolicyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyRefused {}

/// Resolves a target's name and refuses it unless every address passes the policy.
struct PolicyResolver(HostPolicy);

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
            policy
                .check_all(&host, &ips)
                .map_err(|e| PolicyRefused(refused(&e)))?;
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

fn refused(e: &crate::hosts::policy::PolicyError) -> String {
    format!("refused by [policy]: {e}")
}

impl Sender {
    /// The sender of `config`: loads (or creates, at the first start) the key file in the
    /// state directory, reads every CA file. An error stops the daemon's start.
    pub fn from_config(config: &crate::config::Config) -> anyhow::Result<Sender> {
        let path = config.webhooks.secret_path(&config.state_dir);
        let key = WebhookKey::load_or_create(&path).context("[webhooks] secret_file")?;
        Sender::new(&config.webhooks, HostPolicy::new(&config.policy), key)
    }

    pub fn new(
        config: &WebhooksConfig,
        policy: HostPolicy,
        key: WebhookKey,
    ) -> anyhow::Result<Sender> {
        let hosts = config
            .ca_files
            .iter()
            .map(|(host, path)| HostTrust {
                host: host_key(host),
                trust: Trust::CaFile(path.clone()),
            })
            .collect();
        let trust =
            TlsTrust::new(hosts).map_err(|e| anyhow::anyhow!("[webhooks] ca_files: {e}"))?;
        let build = |tls: rustls::ClientConfig, trust: Trust, no_roots: Option<String>| {
            let http = reqwest::Client::builder()
                .use_preconfigured_tls(tls)
                .dns_resolver(Arc::new(PolicyResolver(policy.clone())))
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .timeout(config.timeout)
                .connect_timeout(config.timeout)
                .pool_idle_timeout(Duration::from_secs(60))
                .user_agent(concat!("bftpd/", env!("CARGO_PKG_VERSION")))
                .build()
                .context("[webhooks]: the HTTP client")?;
            anyhow::Ok(Client {
                http,
                trust,
                no_roots,
            })
        };
        let mut per_host = HashMap::new();
        for host in config.ca_files.keys() {
            let (tls, trust) = trust
                .for_host(&host_key(host))
                .map_err(|e| anyhow::anyhow!("[webhooks] ca_files: {e}"))?;
            per_host.insert(host_key(host), build((*tls).clone(), trust, None)?);
        }
        // A host without a CA file needs the system's roots; none found is not fatal (http
        // targets and CA-file hosts still work), but every such https target is refused.
        let default = match trust.for_host("") {
            Ok((tls, trust)) => build((*tls).clone(), trust, None)?,
            Err(e) => {
                tracing::warn!(error = %e, "webhooks: no system root certificates; https targets without [webhooks] ca_files will be refused");
                build(no_roots_config()?, Trust::System, Some(e.to_string()))?
            }
        };
        Ok(Sender {
            default,
            per_host: Arc::new(per_host),
            key,
            policy,
            max_body_bytes: config.max_body_bytes,
            timeout: config.timeout,
            urls: config.urls.clone(),
        })
    }

    /// One line for the start-up log: the daemon's own targets (shown forms) and the hosts
    /// with a CA file.
    pub fn summary(&self) -> String {
        let urls: Vec<String> = self
            .urls
            .iter()
            .map(|u| bftp_core::event::shown_entry(u))
            .collect();
        let mut ca: Vec<&String> = self.per_host.keys().collect();
        ca.sort();
        format!(
            "webhooks: events go to the URLs in each job's notify and to [{}]; https checked against {}{}",
            urls.join(", "),
            if self.default.no_roots.is_some() { "no system roots" } else { "the system's roots" },
            if ca.is_empty() {
                String::new()
            } else {
                format!(", or the CA files of {}", ca.iter().map(|h| h.as_str()).collect::<Vec<_>>().join(", "))
            }
        )
    }

    /// The targets of an event whose job or watch has these `notify` entries: its webhook
    /// URLs, then the daemon's `[webhooks] urls`, each once.
    pub fn targets(&self, notify: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in bftp_core::event::webhooks(notify).chain(self.urls.iter().map(String::as_str)) {
            if !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
        out
    }

    /// POSTs `body` (the event's JSON) to `target`, signed at `now`.
    pub async fn send(
        &self,
        target: &str,
        event_id: &str,
        kind: &str,
        body: &[u8],
        now: Timestamp,
    ) -> Sent {
        // A receiver may quote the URL's token back, and an error may name the URL: the
        // reason is scrubbed of the query and its values before anyone sees or stores it.
        let secrets = WebhookTarget::parse(target)
            .map(|t| t.secrets())
            .unwrap_or_default();
        let sent = self
            .send_unscrubbed(target, event_id, kind, body, now)
            .await;
        if secrets.is_empty() {
            return sent;
        }
        let scrub = bftp_core::scrub::Scrubber::new(&secrets);
        match sent {
            Sent::Transient { why } => Sent::Transient {
                why: scrub.scrub(&why),
            },
            Sent::Permanent { why } => Sent::Permanent {
                why: scrub.scrub(&why),
            },
            delivered => delivered,
        }
    }

    async fn send_unscrubbed(
        &self,
        target: &str,
        event_id: &str,
        kind: &str,
        body: &[u8],
        now: Timestamp,
    ) -> Sent {
        let permanent = |why: String| Sent::Permanent { why };
        let t = match WebhookTarget::parse(target) {
            Ok(t) => t,
            Err(e) => return permanent(format!("not a webhook target: {e}")),
        };
        let shown = t.shown();
        if body.len() > self.max_body_bytes {
            return permanent(format!(
                "the event is {} bytes, more than [webhooks] max_body_bytes ({})",
                body.len(),
                self.max_body_bytes
            ));
        }
        // The resolver sees names only: an address in the URL is checked here.
        if let Some(ip) = t.ip() {
            if let Err(e) = self.policy.check_addr(&t.host(), ip) {
                return permanent(format!("{shown}: {}", refused(&e)));
            }
        }
        let mut headers = HeaderMap::new();
        let signature = sign(self.key.expose(), now.0 / 1000, body);
        for (name, value) in [
            (SIGNATURE_HEADER, signature.as_str()),
            (EVENT_ID_HEADER, event_id),
            (EVENT_TYPE_HEADER, kind),
        ] {
            match HeaderValue::from_str(value) {
                Ok(v) => {
                    headers.insert(name, v);
                }
                Err(_) => return permanent(format!("{name} {value:?} is not a header value")),
            }
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let client = self.per_host.get(&t.host()).unwrap_or(&self.default);
        let sent = client
            .http
            .post(t.url().clone())
            .headers(headers)
            .body(body.to_vec())
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => return self.failed(&shown, client, &e),
        };
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .map(|l| shown_location(&String::from_utf8_lossy(l.as_bytes())));
        // Read (at most MAX_RESPONSE_BYTES of) the answer: its first bytes explain a refusal,
        // and a connection whose answer was read whole can be used again.
        let mut answer = Vec::new();
        while answer.len() < MAX_RESPONSE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_RESPONSE_BYTES - answer.len();
                    answer.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) | Err(_) => break,
            }
        }
        let code = status.as_u16();
        let said = |answer: &[u8]| {
            let quoted = quote(answer);
            if quoted.is_empty() {
                format!("{shown} answered HTTP {status}")
            } else {
                format!("{shown} answered HTTP {status}: {quoted}")
            }
        };
        match judge_status(code) {
            Answer::Delivered => Sent::Delivered { status: code },
            Answer::Redirect => permanent(format!(
                "{shown} answered HTTP {status}: redirect not followed, Location: {}",
                location.as_deref().unwrap_or("(none)")
            )),
            Answer::Transient => Sent::Transient { why: said(&answer) },
            Answer::Permanent => permanent(said(&answer)),
        }
    }

    /// Why a request got no answer, and whether that can change.
    fn failed(&self, shown: &str, client: &Client, e: &reqwest::Error) -> Sent {
        let mut source: Option<&(dyn std::error::Error + 'static)> = e.source();
        while let Some(s) = source {
            if let Some(p) = s.downcast_ref::<PolicyRefused>() {
                return Sent::Permanent {
                    why: format!("{shown}: {p}"),
                };
            }
            if let Some(rustls::Error::InvalidCertificate(c)) = tls_error(s) {
                let mut why = format!(
                    "{shown}: certificate refused: {}",
                    certificate_reason(c, &client.trust)
                );
                if let Some(none) = &client.no_roots {
                    why.push_str(&format!(" ({none})"));
                }
                return Sent::Permanent { why };
            }
            source = s.source();
        }
        let why = if e.is_timeout() {
            format!(
                "{shown}: no answer within {}",
                humantime::format_duration(self.timeout)
            )
        } else if e.is_connect() {
            format!("{shown}: cannot connect: {}", chain(e))
        } else {
            format!("{shown}: {}", chain(e))
        };
        Sent::Transient { why }
    }
}

/// The rustls error in `e`: tokio-rustls hands a handshake's error over inside an io::Error
/// (inside another), whose source() skips it.
fn tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut e = e;
    loop {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        e = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

/// A host as `ca_files` and the client table key it: lowercase, no brackets.
fn host_key(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// A client configuration that trusts nothing: https needs a CA file then.
fn no_roots_config() -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

/// The error's chain on one line, without the URL (which may hold a query).
fn chain(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p: &String| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

/// A `Location` as a reason shows it: no query or fragment, printable, bounded.
fn shown_location(location: &str) -> String {
    let end = location.find(['?', '#']).unwrap_or(location.len());
    quote(&location.as_bytes()[..end])
}

/// The first [`QUOTED_BODY`] characters of a receiver's text, on one line, printable.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(QUOTED_BODY)
        .collect();
    if text.chars().count() > QUOTED_BODY {
        out.push('…');
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::policy::HostPolicyConfig;

    fn sender(allow_loopback: bool) -> Sender {
        let config = WebhooksConfig {
            urls: vec!["https://hooks.example.org/all".into()],
            timeout: Duration::from_secs(2),
            ..WebhooksConfig::default()
        };
        let policy = HostPolicy::new(&HostPolicyConfig {
            allow_loopback,
            ..HostPolicyConfig::default()
        });
        Sender::new(&config, policy, WebhookKey::new(&b"k".repeat(32)[..])).unwrap()
    }

    #[tokio::test]
    async fn refused_addresses_and_unsendable_events_are_permanent_before_any_connect() {
        let s = sender(false);
        let now = Timestamp(1_800_000_000_000);
        for (target, body_len, needle) in [
            (
                "http://169.254.169.254/latest/meta-data?x=secret",
                10,
                "refused by [policy]: 169.254.169.254 resolves to 169.254.169.254, which the daemon's host policy denies (169.254.0.0/16)",
            ),
            ("http://[fe80::1]:8080/x", 10, "denies (fe80::/10)"),
            ("http://127.0.0.1:1/x", 10, "a loopback address"),
            ("http://[::ffff:127.0.0.1]:1/x", 10, "a loopback address"),
            ("http://localhost:1/x?x=secret", 10, "refused by [policy]: localhost resolves to"),
            ("https://u:secret@h.example.org/x", 10, "must not hold a password"),
            ("ftp://h.example.org/x", 10, "not a webhook target"),
            ("https://hooks.example.org/x", 1_048_577, "more than [webhooks] max_body_bytes (1048576)"),
        ] {
            let got = s
                .send(target, "job-1-final", "job.finished", &vec![b'x'; body_len], now)
                .await;
            match got {
                Sent::Permanent { why } => {
                    assert!(why.contains(needle), "{target}: {why}");
                    assert!(!why.contains("secret"), "{why}");
                }
                other => panic!("{target}: {other:?}"),
            }
        }
        let bad_id = s
            .send("http://192.0.2.1/x", "a\nb", "job.finished", b"{}", now)
            .await;
        assert!(matches!(bad_id, Sent::Permanent { .. }), "{bad_id:?}");
    }

    #[test]
    fn targets_are_the_jobs_webhooks_then_the_daemons_each_once() {
        let s = sender(false);
        let notify = vec![
            "ops@example.org".to_string(),
            "https://a.example.org/x".into(),
            "https://hooks.example.org/all".into(),
        ];
        assert_eq!(
            s.targets(&notify),
            ["https://a.example.org/x", "https://hooks.example.org/all"]
        );
        assert_eq!(s.targets(&[]), ["https://hooks.example.org/all"]);
    }

    #[test]
    fn locations_and_bodies_are_quoted_bounded_and_without_queries() {
        assert_eq!(
            shown_location("https://elsewhere.example.org/in?token=x#f"),
            "https://elsewhere.example.org/in"
        );
        assert_eq!(quote(b"line one\r\nline\ttwo "), "line one line two");
        let long = quote(&[b'a'; 1000]);
        assert_eq!(long.chars().count(), QUOTED_BODY + 1);
        assert_eq!(host_key("[::1]"), "::1");
        assert_eq!(host_key("Hooks.Example.ORG"), "hooks.example.org");
    }
}
