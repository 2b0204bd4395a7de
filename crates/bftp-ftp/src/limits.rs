//! What a caller hands the engine besides the job: who to log in as, how long to wait,
//! how much to read, which addresses may be reached, and the per-host reply overrides.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use bftp_core::reply::ReplyOverride;
use bftp_core::scrub::Scrubber;
use bftp_core::{Endpoint, Secret, ANONYMOUS};

use crate::parse::ReplyLimits;
use crate::transcript::TranscriptLimits;

/// One server and the account to log in with (RULES.md §2): the job's [`Endpoint`] without its path.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerLogin {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Secret>,
    pub acct: Option<Secret>,
    /// TLS policy of this side (control, data, implicit).
    pub tls: bftp_core::EndpointTls,
}

impl ServerLogin {
    pub fn from_endpoint(endpoint: &Endpoint) -> Self {
        Self {
            host: endpoint.host.clone(),
            port: endpoint.port,
            user: endpoint.user.clone(),
            password: endpoint.password.clone(),
            acct: endpoint.acct.clone(),
            tls: endpoint.tls,
        }
    }

    /// Every secret of these logins (passwords and ACCT strings), as one scrubber: what the
    /// engine masks in every text a server sends.
    pub fn scrubber(logins: &[&ServerLogin]) -> Scrubber {
        let secrets: Vec<&str> = logins
            .iter()
            .flat_map(|l| [l.password.as_ref(), l.acct.as_ref()])
            .flatten()
            .map(Secret::expose)
            .collect();
        Scrubber::new(&secrets)
    }

    pub(crate) fn is_anonymous(&self) -> bool {
        self.user.eq_ignore_ascii_case(ANONYMOUS) || self.user.eq_ignore_ascii_case("ftp")
    }
}

impl fmt::Debug for ServerLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerLogin")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password)
            .field("acct", &self.acct)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The daemon's host policy (RULES.md §8), applied to the addresses a host name resolved
/// to, before any connection is made: `Err(reason)` refuses the host.
pub trait AddressCheck: Send + Sync {
    fn check(&self, host: &str, addrs: &[IpAddr]) -> Result<(), String>;
}

impl<F> AddressCheck for F
where
    F: Fn(&str, &[IpAddr]) -> Result<(), String> + Send + Sync,
{
    fn check(&self, host: &str, addrs: &[IpAddr]) -> Result<(), String> {
        self(host, addrs)
    }
}

/// An [`AddressCheck`] that allows every address: for tests and tools without a policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl AddressCheck for AllowAll {
    fn check(&self, _host: &str, _addrs: &[IpAddr]) -> Result<(), String> {
        Ok(())
    }
}

/// Timeouts, size bounds and reply overrides for sessions and transfers (RULES.md §5, §6).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Resolving and connecting, per address tried.
    pub connect_timeout: Duration,
    /// Each reply to a command (the greeting and a login refusal included: vsftpd and
    /// Pure-FTPd answer a wrong password only after 3 to 5 s).
    pub reply_timeout: Duration,
    /// The watchdog of one copy, from its first command to both final replies: a stalled
    /// transfer is detected by this deadline, not waited on forever.
    pub transfer_timeout: Duration,
    /// Line and reply size bounds for the control connections.
    pub reply: ReplyLimits,
    /// The most listing data read for one listing (`[ftp] max_listing_bytes`): a larger
    /// one is refused (a wildcard job fails, a tree's directory is refused).
    pub max_listing_bytes: usize,
    /// The deepest directory a tree's walk lists, below its root (`[ftp] max_tree_depth`).
    pub max_tree_depth: usize,
    /// The most members a tree's walk freezes (`[ftp] max_tree_members`; the store's own
    /// bound is the ceiling): a directory that would pass it is refused.
    pub max_tree_members: usize,
    pub transcript: TranscriptLimits,
    /// Per-host reply overrides from the configuration, applied by `classify_for_host`
    /// before the table of RULES.md §5.
    pub overrides: Vec<ReplyOverride>,
    /// How each host's TLS certificate is checked.
    pub tls: crate::tls::TlsTrust,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            reply_timeout: Duration::from_secs(120),
            transfer_timeout: Duration::from_secs(6 * 3600),
            reply: ReplyLimits::default(),
            max_listing_bytes: 16 * 1024 * 1024,
            max_tree_depth: 64,
            max_tree_members: 1_000_000,
            transcript: TranscriptLimits::default(),
            overrides: Vec::new(),
            tls: crate::tls::TlsTrust::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrubber_of_a_pair_masks_both_passwords_and_both_accounts() {
        let login = |password: Option<&str>, acct: Option<&str>| ServerLogin {
            host: "127.0.0.1".into(),
            port: 21,
            user: "alice".into(),
            password: password.map(Secret::new),
            acct: acct.map(Secret::new),
            tls: Default::default(),
        };
        let src = login(Some("src-secret-1"), Some("acct-src-77"));
        let dst = login(Some("dst-secret-2"), None);
        let anonymous = login(None, None);
        let s = ServerLogin::scrubber(&[&src, &dst, &anonymous]);
        assert_eq!(
            s.scrub("530 src-secret-1 dst-secret-2 acct-src-77 alice"),
            "530 **** **** **** alice"
        );
        assert!(ServerLogin::scrubber(&[&anonymous]).is_empty());
    }
}
