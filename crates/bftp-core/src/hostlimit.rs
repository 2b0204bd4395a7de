//! Per-host connection limits learned from the servers (RULES.md §16.3): whether a reply says
//! the server has too many connections, the limit it teaches, and when a learned limit is
//! raised again. Pure: the caller passes the reply, the counts and `now`.

use crate::Timestamp;

/// The default `[ftp] too_many_patterns`: reply texts (matched case-insensitively, anywhere in
/// the text) that say a server has too many connections. vsftpd ("There are too many
/// connections from your internet address.", "There are too many connected users"),
/// proFTPD (`MaxClientsPerHost`, `MaxClients`, `MaxClientsPerUser`, `MaxConnectionsPerHost`),
/// Pure-FTPd ("Too many connections (N) from this IP", "N users (the maximum) are already
/// logged in"), IIS ("Too many users"), and any "too many".
pub const DEFAULT_PATTERNS: &[&str] = &[
    "too many",
    "maximum number of clients",
    "maximum number of allowed clients",
    "maximum number of connections",
    "(the maximum) are already logged in",
    "are already connected",
];

/// The longest reply text kept as what taught a limit (characters; cut with `…`).
pub const MAX_TAUGHT_TEXT: usize = 300;

/// A limit learned for one host: what bftpd allows itself there, below the configured one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLimit {
    /// The host name in lower case.
    pub host: String,
    /// Connections bftpd opens to the host at once (at least 1).
    pub limit: u32,
    /// The reply that taught it (code and text, control characters replaced, cut to
    /// [`MAX_TAUGHT_TEXT`]); the session had already masked the job's secrets in it.
    pub reply: String,
    /// When the limit was set to `limit` (lowered or raised): the version of the record, the
    /// newest write wins.
    pub learned_at: Timestamp,
    /// When the host last refused a connection for having too many.
    pub refused_at: Timestamp,
}

/// Whether a reply with `code` and `text` says the server has too many connections: a 421 or
/// a 530 whose text contains one of `patterns` (case-insensitive; empty patterns ignored), and
/// is not about failed logins ("Too many failed login attempts" is a refused password, whose
/// job must fail, not wait, and which must not lower the host's limit for everybody).
pub fn says_too_many<S: AsRef<str>>(code: u16, text: &str, patterns: &[S]) -> bool {
    if code != 421 && code != 530 {
        return false;
    }
    let text = text.to_lowercase();
    if ["attempt", "password", "incorrect", "authentication"]
        .iter()
        .any(|w| text.contains(w))
    {
        return false;
    }
    patterns
        .iter()
        .map(|p| p.as_ref().trim().to_lowercase())
        .any(|p| !p.is_empty() && text.contains(&p))
}

/// The limit a refusal teaches: the connections bftpd held on the host when it was refused
/// (`held`), at least 1, never above what it allowed itself before (`current`) nor above the
/// configured limit.
pub fn lowered(held: usize, current: usize, configured: usize) -> u32 {
    let n = held.min(current).min(configured).max(1);
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The record of a refusal at `now` that taught `limit` (see [`lowered`]): a refusal sets the
/// limit and both times.
pub fn learn(host: &str, limit: u32, reply: &str, now: Timestamp) -> HostLimit {
    HostLimit {
        host: host.to_ascii_lowercase(),
        limit: limit.max(1),
        reply: taught_text(reply),
        learned_at: now,
        refused_at: now,
    }
}

/// `reply` as kept: control characters (line ends included) become spaces, cut to
/// [`MAX_TAUGHT_TEXT`] characters.
pub fn taught_text(reply: &str) -> String {
    let clean: String = reply
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    match clean.char_indices().nth(MAX_TAUGHT_TEXT) {
        Some((cut, _)) => format!("{}…", &clean[..cut]),
        None => clean.to_owned(),
    }
}

/// The connections bftpd allows itself on a host: the configured limit, or the learned one
/// when lower.
pub fn effective(configured: usize, learned: Option<&HostLimit>) -> usize {
    let configured = configured.max(1);
    match learned {
        Some(l) => configured.min(usize::try_from(l.limit).unwrap_or(usize::MAX).max(1)),
        None => configured,
    }
}

/// Whether a learned limit `new` replaces `old`, what is remembered of the same host: the one
/// set later wins; at the same time the lower (two refusals of one burst, written in either
/// order, keep the lower limit). What both stores keep (RULES.md §16.3).
pub fn replaces(new: &HostLimit, old: &HostLimit) -> bool {
    (new.learned_at, std::cmp::Reverse(new.limit)) >= (old.learned_at, std::cmp::Reverse(old.limit))
}

/// When a learned limit is raised by one: `quiet_ms` after it was last set or refused,
/// whichever is later.
pub fn raises_at(l: &HostLimit, quiet_ms: u64) -> Timestamp {
    Timestamp(l.learned_at.0.max(l.refused_at.0).saturating_add(quiet_ms))
}

/// What becomes of a learned limit at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raise {
    /// Not yet: it stays as it is.
    Keep,
    /// One more connection, the record set at `now` (still below the configured limit).
    To(HostLimit),
    /// Back at (or above) the configured limit: forgotten.
    Forget,
}

/// A learned limit at `now`, the configured limit being `configured`: forgotten once it is not
/// below the configured limit (the configuration changed); raised by one a quiet period after
/// it was last set or refused ([`raises_at`]), one step at a time, forgotten when the step
/// reaches the configured limit.
pub fn raise(l: &HostLimit, configured: usize, now: Timestamp, quiet_ms: u64) -> Raise {
    let configured = u32::try_from(configured.max(1)).unwrap_or(u32::MAX);
    if l.limit >= configured {
        return Raise::Forget;
    }
    if now < raises_at(l, quiet_ms) {
        return Raise::Keep;
    }
    let limit = l.limit + 1;
    if limit >= configured {
        return Raise::Forget;
    }
    Raise::To(HostLimit {
        limit,
        learned_at: now,
        ..l.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_replies_of_known_servers() {
        let d = DEFAULT_PATTERNS;
        let table: &[(u16, &str, bool)] = &[
            // vsftpd
            (
                421,
                "There are too many connections from your internet address.",
                true,
            ),
            (
                421,
                "There are too many connected users, please try later.",
                true,
            ),
            // proFTPD: MaxClientsPerHost, MaxClients, MaxClientsPerUser, MaxConnectionsPerHost
            (
                530,
                "Sorry, the maximum number of clients (2) from your host are already connected.",
                true,
            ),
            (
                530,
                "Sorry, the maximum number of allowed clients (10) are already connected.",
                true,
            ),
            (
                530,
                "Sorry, the maximum number of clients (3) for this user are already connected.",
                true,
            ),
            (
                421,
                "Sorry, the maximum number of connections (2) for your host are already connected.",
                true,
            ),
            // Pure-FTPd
            (421, "Too many connections (2) from this IP", true),
            (
                421,
                "10 users (the maximum) are already logged in, sorry",
                true,
            ),
            // IIS
            (421, "Too many users - please try again later.", true),
            // any "too many", any case
            (421, "TOO MANY sessions", true),
            // Other codes never, whatever the text.
            (550, "too many connections", false),
            (450, "Too many users", false),
            (220, "too many", false),
            // A 530 or 421 that is not about connections.
            (530, "Login incorrect.", false),
            (530, "Too many failed login attempts.", false),
            (421, "Too many login attempts, closing.", false),
            (530, "Too many wrong passwords", false),
            (421, "Timeout.", false),
            (
                421,
                "Service not available, closing control connection.",
                false,
            ),
        ];
        for &(code, text, want) in table {
            assert_eq!(says_too_many(code, text, d), want, "{code} {text}");
        }
    }

    #[test]
    fn the_pattern_list_is_the_configs() {
        let mine = ["Go Away", " "];
        assert!(says_too_many(421, "please go away now", &mine));
        assert!(!says_too_many(421, "Too many connections", &mine));
        let none: [&str; 0] = [];
        assert!(!says_too_many(421, "Too many connections", &none));
        assert!(
            !says_too_many(421, "anything", &[""]),
            "an empty pattern matches nothing"
        );
    }

    #[test]
    fn the_lowered_limit_is_what_was_held() {
        // (held, current, configured) -> limit
        let table = [
            ((2, 16, 16), 2),
            ((0, 16, 16), 1), // refused with nothing held: still 1
            ((5, 3, 16), 3),  // never above what was allowed before
            ((20, 20, 8), 8), // never above the configured limit
            ((1, 1, 1), 1),
        ];
        for ((held, current, configured), want) in table {
            assert_eq!(
                lowered(held, current, configured),
                want,
                "{held} {current} {configured}"
            );
        }
    }

    #[test]
    fn the_effective_limit_is_the_lower() {
        let l = learn("FTP.Example.ORG", 2, "421 Too many", Timestamp(5));
        assert_eq!(l.host, "ftp.example.org");
        assert_eq!(effective(16, Some(&l)), 2);
        assert_eq!(effective(1, Some(&l)), 1);
        assert_eq!(effective(16, None), 16);
        assert_eq!(effective(0, None), 1);
    }

    #[test]
    fn the_taught_reply_is_one_bounded_line() {
        assert_eq!(
            taught_text("421 Too many\r\n    more"),
            "421 Too many      more"
        );
        let long = format!("421 {}", "x".repeat(500));
        let kept = taught_text(&long);
        assert_eq!(kept.chars().count(), MAX_TAUGHT_TEXT + 1);
        assert!(kept.ends_with('…'));
        assert_eq!(learn("h", 0, "421 x", Timestamp(1)).limit, 1);
    }

    #[test]
    fn the_later_limit_wins_and_at_the_same_time_the_lower() {
        let l = |limit, at| learn("h", limit, "421 Too many", Timestamp(at));
        // (new, old) -> replaces
        let table = [
            ((2, 20), (5, 10), true),  // later and lower
            ((5, 20), (2, 10), true),  // later and higher (a raise)
            ((2, 10), (5, 20), false), // an older write never hides a newer one
            ((2, 10), (5, 10), true),  // the same time: the lower
            ((5, 10), (2, 10), false),
            ((2, 10), (2, 10), true), // the same record again
        ];
        for ((nl, nt), (ol, ot), want) in table {
            assert_eq!(
                replaces(&l(nl, nt), &l(ol, ot)),
                want,
                "{nl}@{nt} over {ol}@{ot}"
            );
        }
    }

    #[test]
    fn raised_a_step_at_a_time_after_the_quiet_period_then_forgotten() {
        let quiet = 1_000;
        let l = HostLimit {
            host: "h".into(),
            limit: 2,
            reply: "421 Too many".into(),
            learned_at: Timestamp(10_000),
            refused_at: Timestamp(12_000),
        };
        assert_eq!(
            raises_at(&l, quiet),
            Timestamp(13_000),
            "from the later of the two"
        );
        assert_eq!(raise(&l, 4, Timestamp(12_999), quiet), Raise::Keep);
        let Raise::To(up) = raise(&l, 4, Timestamp(13_000), quiet) else {
            panic!("raised at the end of the quiet period");
        };
        assert_eq!(
            (up.limit, up.learned_at, up.refused_at),
            (3, Timestamp(13_000), Timestamp(12_000))
        );
        assert_eq!(up.reply, l.reply, "the reply that taught it stays");
        assert_eq!(
            raise(&up, 4, Timestamp(13_500), quiet),
            Raise::Keep,
            "one step a quiet period"
        );
        assert_eq!(
            raise(&up, 4, Timestamp(14_000), quiet),
            Raise::Forget,
            "the next step is the configured limit"
        );
        // A configured limit lowered to (or below) the learned one: forgotten at once.
        assert_eq!(raise(&l, 2, Timestamp(10_001), quiet), Raise::Forget);
        assert_eq!(raise(&l, 1, Timestamp(10_001), quiet), Raise::Forget);
    }
}
