//! The hosts bftpd connects to, with their connection limits (SPEC §16).
//!
//! Route: `GET /v1/hosts` → [`HostList`]: for an admin every host the node knows (a limit
//! learned, or a connection since its start); for another user the hosts named by their own
//! jobs and watches.

use serde::{Deserialize, Serialize};

/// `GET /v1/hosts`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostList {
    pub hosts: Vec<HostView>,
}

/// One host: its configured limit, what it taught bftpd, and this node's connections there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    /// The host name, lower case.
    pub host: String,
    /// `[ftp] max_connections_per_host`.
    pub configured_limit: u32,
    /// The connections bftpd allows itself there now: the learned limit when there is one.
    pub limit: u32,
    /// A limit the server taught with a refusal for too many connections (below the
    /// configured one), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<LearnedLimitView>,
    /// This node's connections to the host now (kept pairs and looks at copies included).
    pub in_use: u32,
    /// The circuit breakers of the host's servers (one per port) that this node ever opened
    /// (RULES.md §16.5); empty: none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breakers: Vec<BreakerView>,
}

/// One server's circuit breaker on this node (RULES.md §16.5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BreakerView {
    /// `host:port`.
    pub server: String,
    /// `open` (the server is down: its jobs wait while one probe at a time connects) or
    /// `closed`.
    pub state: String,
    /// When it opened (open) or last closed, RFC 3339.
    pub since: String,
    /// The failure that opened it, or the last probe's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the next probe goes (open only), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_probe: Option<String>,
    /// Probes made since it opened (closed: by the probe that closed it, if one did).
    pub probes: u32,
    /// Jobs waiting for the server.
    pub waiting: u32,
}

/// A learned limit and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LearnedLimitView {
    pub limit: u32,
    /// The server's reply that taught it (secrets masked, one line, bounded).
    pub reply: String,
    /// When the limit was set (lowered or raised), RFC 3339.
    pub learned_at: String,
    /// When the host last refused a connection for too many, RFC 3339.
    pub refused_at: String,
    /// When it is raised by one, RFC 3339 (at the configured limit it is forgotten).
    pub raises_at: String,
}

impl HostView {
    /// The human lines of `bftp hosts`, from the same fields as the JSON.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "{}: limit {} (configured {}), {} in use",
            self.host, self.limit, self.configured_limit, self.in_use
        )];
        if let Some(l) = &self.learned {
            out.push(format!(
                "  learned {} at {} from \"{}\" (last refused {}); raised at {}",
                l.limit, l.learned_at, l.reply, l.refused_at, l.raises_at
            ));
        }
        for b in &self.breakers {
            let mut line = format!("  breaker {} {} since {}", b.server, b.state, b.since);
            if let Some(next) = &b.next_probe {
                line.push_str(&format!(
                    ", {} waiting, probe {} at {next}",
                    b.waiting,
                    b.probes + 1
                ));
            }
            if let Some(e) = &b.last_error {
                line.push_str(&format!(" (last error: {e})"));
            }
            out.push(line);
        }
        out
    }
}
