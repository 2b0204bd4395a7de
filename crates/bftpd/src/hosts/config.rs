//! `[ftp]` in the config: timeouts, pairs per job, per-host connection slots, the bounds of
//! listings and trees, reply overrides; and the engine's `Limits` made from them.

use std::time::Duration;

use bftp_core::reply::{ReplyCode, ReplyOverride, TreatAs};
use bftp_ftp::Limits;
use serde::Deserialize;

/// `[ftp]` in the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtpConfig {
    /// Per address tried.
    #[serde(default = "d_connect", with = "crate::humantime_duration")]
    pub connect_timeout: Duration,
    /// Per reply (a wrong password takes some servers 3 to 5 s to refuse).
    #[serde(default = "d_reply", with = "crate::humantime_duration")]
    pub reply_timeout: Duration,
    /// The watchdog of one file's copy.
    #[serde(default = "d_transfer", with = "crate::humantime_duration")]
    pub transfer_timeout: Duration,
    /// Connection pairs one job runs at once (consecutive files reuse each pair).
    #[serde(default = "d_pairs")]
    pub parallel_pairs: usize,
    /// Control connections the daemon opens to one host at once, over all jobs.
    #[serde(default = "d_per_host")]
    pub max_connections_per_host: usize,
    /// Whether a `replace` copy that runs over a second gets one more control connection to
    /// its destination, which asks SIZE every two seconds so that `bftp status` can show
    /// the bytes so far (on a free `max_connections_per_host` slot only). Off for servers
    /// that allow fewer sessions per client than bftpd's pairs plus these looks.
    #[serde(default = "d_watch")]
    pub watch_progress: bool,
    /// Logged-in connection pairs kept between jobs of the same owner, servers and logins
    /// (`crate::hosts::pool`); 0 keeps none. Kept pairs count against `max_connections_per_host`
    /// and give their slots up to a job that needs them.
    #[serde(default = "d_pool_idle")]
    pub pool_max_idle: usize,
    /// How long a kept pair waits for its next job before it is closed.
    #[serde(default = "d_pool_timeout", with = "crate::humantime_duration")]
    pub pool_idle_timeout: Duration,
    /// The most bytes of one listing bftpd reads (a wildcard job's, or one directory of a
    /// tree): a larger listing fails a wildcard job and refuses a tree's directory.
    #[serde(default = "d_listing_bytes")]
    pub max_listing_bytes: usize,
    /// The deepest directory a tree's walk lists, below the root: a deeper one is refused.
    #[serde(default = "d_tree_depth")]
    pub max_tree_depth: usize,
    /// The most members a tree's walk freezes (at most the store's bound, 1,000,000): a
    /// directory whose entries would pass it is refused.
    #[serde(default = "d_tree_members")]
    pub max_tree_members: usize,
    /// Per-host reply overrides (RULES.md §5), for servers that send a 5yz for a broken
    /// connection: `{ host = "ftp.example.org", code = 550, treat_as = "transient" }`.
    #[serde(default)]
    pub overrides: Vec<OverrideConfig>,
    /// `[ftp.tls]`: default TLS policies and per-host certificate checks.
    #[serde(default)]
    pub tls: super::tls::TlsConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideConfig {
    /// A host name or address; `*` and `?` match any characters.
    pub host: String,
    pub code: u16,
    /// `transient` or `permanent`.
    pub treat_as: String,
}

fn d_pairs() -> usize {
    4
}
fn d_per_host() -> usize {
    16
}
fn d_watch() -> bool {
    true
}
fn d_pool_idle() -> usize {
    8
}
fn d_pool_timeout() -> Duration {
    Duration::from_secs(30)
}
fn d_listing_bytes() -> usize {
    Limits::default().max_listing_bytes
}
fn d_tree_depth() -> usize {
    Limits::default().max_tree_depth
}
fn d_tree_members() -> usize {
    Limits::default().max_tree_members
}
fn d_connect() -> Duration {
    Limits::default().connect_timeout
}
fn d_reply() -> Duration {
    Limits::default().reply_timeout
}
fn d_transfer() -> Duration {
    Limits::default().transfer_timeout
}

impl Default for FtpConfig {
    fn default() -> Self {
        FtpConfig {
            connect_timeout: d_connect(),
            reply_timeout: d_reply(),
            transfer_timeout: d_transfer(),
            parallel_pairs: d_pairs(),
            max_connections_per_host: d_per_host(),
            watch_progress: d_watch(),
            pool_max_idle: d_pool_idle(),
            pool_idle_timeout: d_pool_timeout(),
            max_listing_bytes: d_listing_bytes(),
            max_tree_depth: d_tree_depth(),
            max_tree_members: d_tree_members(),
            overrides: Vec::new(),
            tls: Default::default(),
        }
    }
}

impl FtpConfig {
    pub fn limits(&self) -> anyhow::Result<Limits> {
        let mut overrides = Vec::new();
        for o in &self.overrides {
            let code = ReplyCode::new(o.code).ok_or_else(|| {
                anyhow::anyhow!(
                    "[ftp] override for {}: {} is not a reply code",
                    o.host,
                    o.code
                )
            })?;
            let treat = match o.treat_as.as_str() {
                "transient" => TreatAs::Transient,
                "permanent" => TreatAs::Permanent,
                other => anyhow::bail!("[ftp] override for {}: treat_as {other:?} is neither \"transient\" nor \"permanent\"", o.host),
            };
            overrides.push(
                ReplyOverride::new(&o.host, code, treat)
                    .map_err(|e| anyhow::anyhow!("[ftp] override for {}: {e}", o.host))?,
            );
        }
        if self.max_listing_bytes == 0 || self.max_tree_depth == 0 {
            anyhow::bail!("[ftp] max_listing_bytes and max_tree_depth must be at least 1");
        }
        if !(1..=bftp_store::MAX_MEMBERS).contains(&self.max_tree_members) {
            anyhow::bail!(
                "[ftp] max_tree_members must be between 1 and {} (the store's bound), not {}",
                bftp_store::MAX_MEMBERS,
                self.max_tree_members
            );
        }
        Ok(Limits {
            connect_timeout: self.connect_timeout,
            max_listing_bytes: self.max_listing_bytes,
            max_tree_depth: self.max_tree_depth,
            max_tree_members: self.max_tree_members,
            reply_timeout: self.reply_timeout,
            transfer_timeout: self.transfer_timeout,
            overrides,
            tls: self.tls.trust()?,
            ..Limits::default()
        })
    }
}
