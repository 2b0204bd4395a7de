//! `[ftp]` in the config: timeouts, pairs per job, per-host connection slots, the bounds of
//! listings and trees, reply overrides, the data path and relay caps (SPEC §14); and the
//! engine's `Limits` made from them.

use std::time::Duration;

use bftp_core::reply::{ReplyCode, ReplyOverride, TreatAs};
use bftp_core::route::{self, DataPath, RelayForbidden};
use bftp_core::JobSpec;
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
    /// The data path of a job that asks for none (SPEC §14): `fxp` (third party only),
    /// `relay` (always through bftpd) or `auto` (third party first, through bftpd when the
    /// pair refuses it). Applied when the job runs, so a change reaches queued jobs that
    /// asked for none.
    #[serde(default = "d_data_path", with = "data_path_word")]
    pub data_path: DataPath,
    /// Whether bftpd relays file data at all: `false` refuses a job that asks for `relay` at
    /// submit, and makes `auto` (asked or the default) third party only.
    #[serde(default = "d_relay")]
    pub relay: bool,
    /// Relays running at once over the whole daemon (at least 1); more wait for a place.
    #[serde(default = "d_relay_max")]
    pub relay_max: usize,
    /// The bytes per second all relays together move at most; absent: no cap.
    #[serde(default)]
    pub relay_bytes_per_second: Option<u64>,
    /// How long a pair of servers that refused the third party is remembered as refusing
    /// it (an `auto` job then relays at once); after that the third party is tried again.
    #[serde(default = "d_pair_memory", with = "crate::humantime_duration")]
    pub pair_memory: Duration,
    /// A replace copy of a file of this many bytes or more is resumable (SPEC §14): it keeps
    /// what it began from and its partial file, and a later try goes on with `REST` where it
    /// stopped. 0 makes no copy resumable.
    #[serde(default = "d_resume_from")]
    pub resume_from: u64,
    /// Reply texts (matched case-insensitively in a 421 or 530) that say a server has too
    /// many connections: the host's limit is lowered to what bftpd held there (RULES.md
    /// §16.3). The default covers vsftpd, proFTPD, Pure-FTPd, IIS and any "too many".
    #[serde(default = "d_too_many")]
    pub too_many_patterns: Vec<String>,
    /// How long a learned limit stays before it is raised by one (then again, until it is
    /// the configured limit and forgotten).
    #[serde(default = "d_limit_quiet", with = "crate::humantime_duration")]
    pub limit_quiet: Duration,
    /// The circuit breaker (RULES.md §16.5); false: none, every job retries a server that is
    /// down on its own schedule (§5).
    #[serde(default = "d_breaker")]
    pub breaker: bool,
    /// The first probe of a server that is down waits this long, each next one twice as
    /// long, up to `probe_max`.
    #[serde(default = "d_probe_first", with = "crate::humantime_duration")]
    pub probe_first: Duration,
    #[serde(default = "d_probe_max", with = "crate::humantime_duration")]
    pub probe_max: Duration,
}

impl FtpConfig {
    /// How the breaker probes servers that are down.
    pub fn probe_settings(&self) -> crate::hosts::breaker::ProbeSettings {
        crate::hosts::breaker::ProbeSettings {
            enabled: self.breaker,
            first: self.probe_first,
            max: self.probe_max,
            connect_timeout: self.connect_timeout,
            reply_timeout: self.reply_timeout,
        }
    }
}

/// `data_path = "auto"`: one of the words of [`DataPath`].
mod data_path_word {
    use bftp_core::route::DataPath;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DataPath, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("data_path: {e}")))
    }
}

/// What the daemon makes of a job's data path (SPEC §14): its default and whether it relays
/// at all, with how long a refusing pair is remembered. Small and `Copy`: the API, the views
/// and the attempts each hold one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPathPolicy {
    /// `[ftp] data_path`.
    pub default: DataPath,
    /// `[ftp] relay`.
    pub relay_allowed: bool,
    /// `[ftp] pair_memory`.
    pub pair_memory: Duration,
}

impl Default for DataPathPolicy {
    fn default() -> Self {
        FtpConfig::default().data_path_policy()
    }
}

impl DataPathPolicy {
    /// The path a job asking for `asked` gets, or the refusal of a relay this daemon does
    /// not make (`route::admit`): what submit, verify and transfer check.
    pub fn admit(&self, asked: Option<DataPath>) -> Result<DataPath, RelayForbidden> {
        route::admit(asked, self.default, self.relay_allowed)
    }

    /// The path a stored job asking for `asked` runs with now. A job that asked for `relay`
    /// before relays were forbidden runs third party only (the daemon relays nothing; a pair
    /// that refuses the third party fails the job with the servers' settings named).
    pub fn effective(&self, asked: Option<DataPath>) -> DataPath {
        self.admit(asked).unwrap_or(DataPath::Fxp)
    }

    /// The path `spec` runs with now (see [`Self::effective`]).
    pub fn effective_data_path(&self, spec: &JobSpec) -> DataPath {
        self.effective(spec.data_path)
    }

    /// `pair_memory` in milliseconds, as `route::plan` and `route::still_remembered` take it.
    pub fn pair_memory_ms(&self) -> u64 {
        u64::try_from(self.pair_memory.as_millis()).unwrap_or(u64::MAX)
    }
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

fn d_too_many() -> Vec<String> {
    super::LearnSettings::default().patterns
}
fn d_limit_quiet() -> Duration {
    super::LearnSettings::default().quiet
}
fn d_pairs() -> usize {
    4
}
fn d_data_path() -> DataPath {
    DataPath::Auto
}
fn d_relay() -> bool {
    true
}
fn d_breaker() -> bool {
    true
}
fn d_relay_max() -> usize {
    16
}
fn d_resume_from() -> u64 {
    64 << 20
}
fn d_pair_memory() -> Duration {
    Duration::from_secs(7 * 24 * 3600)
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
            data_path: d_data_path(),
            relay: d_relay(),
            relay_max: d_relay_max(),
            relay_bytes_per_second: None,
            pair_memory: d_pair_memory(),
            resume_from: d_resume_from(),
            too_many_patterns: d_too_many(),
            limit_quiet: d_limit_quiet(),
            breaker: d_breaker(),
            probe_first: d_probe_first(),
            probe_max: d_probe_max(),
        }
    }
}

fn d_probe_first() -> Duration {
    Duration::from_secs(1)
}

fn d_probe_max() -> Duration {
    Duration::from_secs(60)
}

impl FtpConfig {
    /// `too_many_patterns` and `limit_quiet`, as the learned limits take them.
    pub fn learn_settings(&self) -> super::LearnSettings {
        super::LearnSettings {
            patterns: self.too_many_patterns.clone(),
            quiet: self.limit_quiet,
        }
    }

    /// `resume_from` as the attempt takes it (`None`: no copy is resumable).
    pub fn resumable_from(&self) -> Option<u64> {
        (self.resume_from > 0).then_some(self.resume_from)
    }

    /// The data path settings (`data_path`, `relay`, `pair_memory`).
    pub fn data_path_policy(&self) -> DataPathPolicy {
        DataPathPolicy {
            default: self.data_path,
            relay_allowed: self.relay,
            pair_memory: self.pair_memory,
        }
    }

    /// The path `spec` runs with under this config: what it asked for, else `data_path`;
    /// third party only where `relay = false` (see [`DataPathPolicy::effective`]).
    pub fn effective_data_path(&self, spec: &JobSpec) -> DataPath {
        self.data_path_policy().effective_data_path(spec)
    }

    /// The daemon-wide caps of relays (`relay_max`, `relay_bytes_per_second`), made once at
    /// start and shared by every pair (`HostLimits::relay_gate`).
    pub fn relay_gate(&self) -> std::sync::Arc<bftp_ftp::RelayGate> {
        bftp_ftp::RelayGate::new(self.relay_max, self.relay_bytes_per_second)
    }

    /// The data path settings' own checks (part of [`Self::limits`]).
    fn check_data_path(&self) -> anyhow::Result<()> {
        if self.relay_max == 0 {
            anyhow::bail!("[ftp] relay_max must be at least 1 (relays running at once)");
        }
        if self.relay_bytes_per_second == Some(0) {
            anyhow::bail!(
                "[ftp] relay_bytes_per_second must be at least 1; leave it out for no cap"
            );
        }
        Ok(())
    }

    pub fn limits(&self) -> anyhow::Result<Limits> {
        self.check_data_path()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ftp(toml_text: &str) -> anyhow::Result<FtpConfig> {
        let c: FtpConfig = toml::from_str(toml_text)?;
        c.limits()?;
        Ok(c)
    }

    #[test]
    fn data_path_settings_default_parse_and_check() {
        let d = ftp("").unwrap();
        assert_eq!(
            (d.data_path, d.relay, d.relay_max, d.relay_bytes_per_second),
            (DataPath::Auto, true, 16, None)
        );
        assert_eq!(d.pair_memory, Duration::from_secs(7 * 86_400));
        let c = ftp("data_path = \"FXP\"\nrelay = false\nrelay_max = 2\n\
             relay_bytes_per_second = 1000000\npair_memory = \"1h\"\n")
        .unwrap();
        assert_eq!(
            (c.data_path, c.relay, c.relay_max, c.relay_bytes_per_second),
            (DataPath::Fxp, false, 2, Some(1_000_000))
        );
        assert_eq!(c.data_path_policy().pair_memory_ms(), 3_600_000);
        let gate = c.relay_gate();
        assert_eq!(
            (gate.max_at_once(), gate.bytes_per_second()),
            (2, Some(1_000_000))
        );

        for (bad, needle) in [
            ("data_path = \"sideways\"", "unknown data path \"sideways\""),
            ("relay_max = 0", "relay_max must be at least 1"),
            (
                "relay_bytes_per_second = 0",
                "relay_bytes_per_second must be at least 1",
            ),
            (
                "relay_bytes_per_second = \"100M\"",
                "relay_bytes_per_second",
            ),
            ("pair_memory = \"a week\"", "is not a duration"),
        ] {
            let e = format!("{:#}", ftp(bad).unwrap_err());
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    /// A job's path: its own, else the default; third party only where relays are off, also
    /// for a stored job that asked for a relay before they were.
    #[test]
    fn effective_data_paths() {
        use DataPath::*;
        let spec = |asked: Option<DataPath>| {
            let mut s: JobSpec = crate::testkit::job_spec();
            s.data_path = asked;
            s
        };
        let on = FtpConfig::default();
        let off = FtpConfig {
            relay: false,
            ..FtpConfig::default()
        };
        let relay_default = FtpConfig {
            data_path: Relay,
            ..FtpConfig::default()
        };
        for (config, asked, want) in [
            (&on, None, Auto),
            (&on, Some(Fxp), Fxp),
            (&on, Some(Relay), Relay),
            (&relay_default, None, Relay),
            (&relay_default, Some(Auto), Auto),
            (&off, None, Fxp),
            (&off, Some(Auto), Fxp),
            (&off, Some(Relay), Fxp),
        ] {
            assert_eq!(
                config.effective_data_path(&spec(asked)),
                want,
                "{asked:?} with default {} and relay = {}",
                config.data_path,
                config.relay
            );
        }
        assert_eq!(
            off.data_path_policy().admit(Some(Relay)),
            Err(RelayForbidden)
        );
        assert_eq!(on.data_path_policy().admit(Some(Relay)), Ok(Relay));
    }
}
