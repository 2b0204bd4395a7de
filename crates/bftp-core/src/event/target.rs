//! `--notify` entries: an entry that starts with `http://` or `https://` is a webhook target,
//! any other is a mailbox (SPEC §16). The URL rules here are the ones a target must pass to
//! be stored: it parses, it names a host, it holds no user name or password (a secret in a
//! URL would be stored and shown), no control character, at most [`MAX_URL_LEN`] bytes.
//! What people see of a target (`status`, the report, error messages) is its shown form,
//! `scheme://host[:port]/path`: the query may hold a receiver's token.

use std::fmt;

use url::{Host, Url};

use crate::model::ValidationError;

/// The longest webhook URL accepted, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// Whether a `notify` entry names a webhook rather than a mailbox (scheme case-insensitive).
pub fn is_webhook(entry: &str) -> bool {
    let lower = |n: usize| entry.get(..n).map(str::to_ascii_lowercase);
    lower(7).as_deref() == Some("http://") || lower(8).as_deref() == Some("https://")
}

/// The webhook targets among `notify`, in order.
pub fn webhooks(notify: &[String]) -> impl Iterator<Item = &str> {
    notify.iter().map(String::as_str).filter(|n| is_webhook(n))
}

/// Who a report or a watch's notice is mailed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MailRecipients {
    /// The mailboxes among `notify`.
    Listed(Vec<String>),
    /// `notify` is empty: the owner, as RFC 1068 mailed the user who asked.
    Owner,
    /// `notify` names webhooks only: the submitter asked for no mail.
    Nobody,
}

/// The mail rule: the mailboxes of `notify`; the owner when `notify` is empty; nobody when
/// it names webhooks only.
pub fn mail_recipients(notify: &[String]) -> MailRecipients {
    let boxes: Vec<String> = notify.iter().filter(|n| !is_webhook(n)).cloned().collect();
    match (boxes.is_empty(), notify.is_empty()) {
        (false, _) => MailRecipients::Listed(boxes),
        (true, true) => MailRecipients::Owner,
        (true, false) => MailRecipients::Nobody,
    }
}

/// A webhook target that passed the rules.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    url: Url,
}

/// Never the query: it may hold a token.
impl fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookTarget({})", self.shown())
    }
}

impl fmt::Display for WebhookTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

fn invalid(reason: impl Into<String>) -> ValidationError {
    ValidationError::Invalid {
        field: "notify".into(),
        reason: reason.into(),
    }
}

impl WebhookTarget {
    /// Checks a `notify` entry (or a `[webhooks] urls` entry) that [`is_webhook`].
    /// The errors never repeat the URL, which may hold a secret.
    pub fn parse(entry: &str) -> Result<WebhookTarget, ValidationError> {
        if entry.len() > MAX_URL_LEN {
            return Err(ValidationError::TooLong {
                field: "notify (a webhook URL)".into(),
                len: entry.len(),
                max: MAX_URL_LEN,
            });
        }
        // Checked on the raw text: the URL parser silently drops tabs and line feeds.
        if let Some(c) = entry.chars().find(|c| c.is_control()) {
            let what = match c {
                '\r' => "a carriage return (CR)",
                '\n' => "a line feed (LF)",
                '\0' => "a NUL byte",
                _ => "a control character",
            };
            return Err(ValidationError::ControlCharacter {
                field: "notify (a webhook URL)".into(),
                what,
                into: "HTTP requests",
            });
        }
        if entry.contains(char::is_whitespace) {
            return Err(invalid("a webhook URL contains a space"));
        }
        let url = Url::parse(entry).map_err(|e| invalid(format!("not a webhook URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("a webhook URL is http:// or https://"));
        }
        if url.password().is_some() {
            return Err(invalid(
                "a webhook URL must not hold a password (it would be stored and shown); \
                 the receiver checks the Bftp-Signature header instead",
            ));
        }
        if !url.username().is_empty() {
            return Err(invalid("a webhook URL must not hold a user name"));
        }
        match url.host() {
            None => return Err(invalid("a webhook URL names no host")),
            Some(Host::Domain("")) => return Err(invalid("a webhook URL names no host")),
            Some(_) => {}
        }
        if url.port() == Some(0) {
            return Err(invalid("port 0 is not a server port"));
        }
        Ok(WebhookTarget { url })
    }

    /// What people see: `scheme://host[:port]/path`, never the query or the fragment.
    pub fn shown(&self) -> String {
        let mut shown = format!("{}://{}", self.url.scheme(), self.host_text());
        if let Some(port) = self.url.port() {
            shown.push_str(&format!(":{port}"));
        }
        shown.push_str(self.url.path());
        shown
    }

    /// What of the URL is never shown, so a text that quotes it back (a receiver's answer, an
    /// error naming the URL) is scrubbed of it: the whole query, and each of its values (as
    /// written and decoded; values shorter than 4 characters would scrub ordinary words).
    pub fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(q) = self.url.query().filter(|q| !q.is_empty()) {
            out.push(q.to_owned());
            for part in q.split('&') {
                let raw = part.split_once('=').map_or(part, |(_, v)| v);
                if raw.chars().count() >= 4 {
                    out.push(raw.to_owned());
                }
            }
        }
        for (_, v) in self.url.query_pairs() {
            if v.chars().count() >= 4 && !out.iter().any(|o| *o == v) {
                out.push(v.into_owned());
            }
        }
        out
    }

    /// The host as the URL names it (`[...]` around an IPv6 address).
    pub fn host_text(&self) -> &str {
        self.url.host_str().unwrap_or("")
    }

    /// The host for lookups and per-host settings: a name (lowercase) or an address without
    /// brackets.
    pub fn host(&self) -> String {
        match self.url.host() {
            Some(Host::Ipv6(a)) => a.to_string(),
            Some(h) => h.to_string(),
            None => String::new(),
        }
    }

    /// The address, when the URL names one instead of a name.
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        match self.url.host()? {
            Host::Ipv4(a) => Some(a.into()),
            Host::Ipv6(a) => Some(a.into()),
            Host::Domain(_) => None,
        }
    }

    pub fn is_https(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// The whole URL, query included: for the request only, never for a message.
    pub fn url(&self) -> &Url {
        &self.url
    }
}

/// A `notify` entry as `status`, the report and events show it: a webhook by its shown form
/// (an entry that does not parse, which validation keeps out of the store, as its scheme),
/// a mailbox as it is.
pub fn shown_entry(entry: &str) -> String {
    if !is_webhook(entry) {
        return entry.to_string();
    }
    match WebhookTarget::parse(entry) {
        Ok(t) => t.shown(),
        Err(_) => format!("{}://(invalid)", entry.split(':').next().unwrap_or("http")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_targets_secrets_are_its_query_and_the_values_in_it() {
        let t = |u: &str| WebhookTarget::parse(u).unwrap().secrets();
        assert!(t("https://h.example/in").is_empty());
        assert_eq!(
            t("https://h.example/in?token=s3cret%2Fx&v=1"),
            ["token=s3cret%2Fx&v=1", "s3cret%2Fx", "s3cret/x"]
        );
        let scrubbed = crate::scrub::Scrubber::new(&t("https://h.example/in?key=abcd1234"))
            .scrub("401 invalid key abcd1234 for https://h.example/in?key=abcd1234");
        assert!(!scrubbed.contains("abcd1234"), "{scrubbed}");
    }

    #[test]
    fn which_entries_are_webhooks() {
        for (entry, hook) in [
            ("https://hooks.example.org/bftp", true),
            ("http://hooks.example.org/bftp", true),
            ("HTTPS://hooks.example.org/", true),
            ("alice@example.org", false),
            ("https:/one-slash", false),
            ("ftp://example.org/", false),
            ("http", false),
            ("", false),
            ("é@example.org", false),
        ] {
            assert_eq!(is_webhook(entry), hook, "{entry}");
        }
    }

    #[test]
    fn mail_goes_to_the_mailboxes_the_owner_or_nobody() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            mail_recipients(&v(&["a@x.org", "https://h/x", "b@y.org"])),
            MailRecipients::Listed(v(&["a@x.org", "b@y.org"]))
        );
        assert_eq!(mail_recipients(&[]), MailRecipients::Owner);
        assert_eq!(
            mail_recipients(&v(&["https://h/x", "http://i/y"])),
            MailRecipients::Nobody
        );
        let n = v(&["a@x.org", "https://h/x?token=1", "http://i/y"]);
        assert_eq!(
            webhooks(&n).collect::<Vec<_>>(),
            ["https://h/x?token=1", "http://i/y"]
        );
    }

    #[test]
    fn target_table() {
        let long = format!("https://h.example.org/{}", "a".repeat(MAX_URL_LEN));
        // entry, Ok(shown form) or a piece of the error.
        let cases: &[(&str, Result<&str, &str>)] = &[
            (
                "https://hooks.example.org/bftp",
                Ok("https://hooks.example.org/bftp"),
            ),
            (
                "https://hooks.example.org",
                Ok("https://hooks.example.org/"),
            ),
            (
                "https://hooks.example.org:8443/in?token=s3cret#frag",
                Ok("https://hooks.example.org:8443/in"),
            ),
            (
                "https://hooks.example.org:443/x",
                Ok("https://hooks.example.org/x"),
            ),
            (
                "HTTP://Hooks.Example.ORG/X",
                Ok("http://hooks.example.org/X"),
            ),
            (
                "http://127.0.0.1:8080/hook",
                Ok("http://127.0.0.1:8080/hook"),
            ),
            ("http://[::1]:8080/hook", Ok("http://[::1]:8080/hook")),
            (
                "https://user:pw@hooks.example.org/x",
                Err("must not hold a password"),
            ),
            (
                "https://:pw@hooks.example.org/x",
                Err("must not hold a password"),
            ),
            (
                "https://user@hooks.example.org/x",
                Err("must not hold a user name"),
            ),
            (
                "https://h.example.org/a\r\nX-Evil: 1",
                Err("carriage return (CR)"),
            ),
            ("https://h.example.org/a\nb", Err("line feed (LF)")),
            ("https://h.example.org/a\tb", Err("a control character")),
            ("https://h.example.org/a\0", Err("NUL")),
            ("https://h.example.org/a b", Err("contains a space")),
            (&long, Err("too long")),
            ("https://", Err("not a webhook URL")),
            ("https://h.example.org:0/x", Err("port 0")),
            ("https://h.example.org:99999/x", Err("not a webhook URL")),
        ];
        for (entry, want) in cases {
            let got = WebhookTarget::parse(entry)
                .map(|t| t.shown())
                .map_err(|e| e.to_string());
            match (got, want) {
                (Ok(shown), Ok(w)) => assert_eq!(&shown, w, "{entry:?}"),
                (Err(e), Err(needle)) => {
                    assert!(e.contains(needle), "{entry:?}: {e}");
                    assert!(!e.contains("s3cret") && !e.contains(":pw@"), "{e}");
                }
                (got, want) => panic!("{entry:?}: got {got:?}, want {want:?}"),
            }
        }
        let exact = format!("https://h.example.org/{}", "a".repeat(MAX_URL_LEN - 22));
        assert_eq!(exact.len(), MAX_URL_LEN);
        assert!(WebhookTarget::parse(&exact).is_ok());
    }

    #[test]
    fn hosts_addresses_and_shown_entries() {
        let t = WebhookTarget::parse("https://[::1]:9/x?k=v").unwrap();
        assert_eq!(t.host(), "::1");
        assert_eq!(t.host_text(), "[::1]");
        assert_eq!(t.ip(), Some("::1".parse().unwrap()));
        assert!(t.is_https());
        assert_eq!(t.url().query(), Some("k=v"));
        assert!(!format!("{t:?} {t}").contains("k=v"));
        let n = WebhookTarget::parse("http://Hooks.Example.org/x").unwrap();
        assert_eq!((n.host(), n.ip()), ("hooks.example.org".to_string(), None));
        assert_eq!(shown_entry("a@b.org"), "a@b.org");
        assert_eq!(shown_entry("https://h/x?token=1"), "https://h/x");
        assert_eq!(shown_entry("https://u:p@h/x?token=1"), "https://(invalid)");
    }
}
