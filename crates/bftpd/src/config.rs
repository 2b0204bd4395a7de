//! `bftpd.toml`: the daemon's configuration. Durations in humantime syntax; unknown keys are
//! an error, so a typo never silently falls back to a default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use bftp_core::{RetryBounds, RetryPolicy};
use serde::Deserialize;

pub use crate::hosts::policy::HostPolicyConfig;
use crate::humantime_duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the store and the secret key live.
    pub state_dir: PathBuf,
    /// The API's Unix socket.
    pub socket: PathBuf,
    /// Octal permission bits of the socket, e.g. "0660".
    #[serde(default = "default_socket_mode")]
    pub socket_mode: String,
    /// Group that owns the socket (its members may use bftp); none keeps the daemon's group.
    #[serde(default)]
    pub socket_group: Option<String>,
    /// Members of this group see and cancel every user's jobs, as root does.
    #[serde(default)]
    pub admin_group: Option<String>,
    #[serde(default)]
    pub log: LogConfig,
    /// `[api]`: bounds on the socket's connections.
    #[serde(default)]
    pub api: ApiConfig,
    /// `[metrics]`: the optional TCP listener for Prometheus.
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub retry: RetryDefaults,
    #[serde(default)]
    pub retry_bounds: RetryBoundsConfig,
    #[serde(default)]
    pub policy: HostPolicyConfig,
    #[serde(default)]
    pub ftp: crate::hosts::FtpConfig,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    /// `[mail]`: the reports of final jobs (see `bftp_mail::MailConfig`).
    #[serde(default)]
    pub mail: bftp_mail::MailConfig,
    /// `[webhooks]`: events POSTed to programs (SPEC §16).
    #[serde(default)]
    pub webhooks: crate::hooks::config::WebhooksConfig,
    /// `[[windows]]`: the hours of hosts and pairs (RULES.md §16.4).
    #[serde(default)]
    pub windows: Vec<crate::hosts::gates::WindowConfig>,
}

/// `[api]`: what one connection, one user and all of them together may hold of the daemon.
/// A connection is a file descriptor: without these bounds one local user could open
/// connections that send nothing until the daemon has no descriptor left for anyone.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Once a request has begun (its first byte), its headers and body must have arrived
    /// within this, or the connection is closed.
    #[serde(default = "d_header_read_timeout", with = "humantime_duration")]
    pub header_read_timeout: Duration,
    /// A connection with no request under way (one that never sends anything, or a kept-alive
    /// one between requests) is closed after this.
    #[serde(default = "d_idle_timeout", with = "humantime_duration")]
    pub idle_timeout: Duration,
    /// Connections one Unix user (SO_PEERCRED) may hold open at once; more are refused with
    /// HTTP 429.
    #[serde(default = "d_max_connections_per_user")]
    pub max_connections_per_user: usize,
    /// Connections of all users together (and the metrics listener's); more are refused with
    /// HTTP 503. Lowered at start if the open-file limit would not leave enough descriptors
    /// for the scheduler's FTP connections and the store.
    #[serde(default = "d_max_connections")]
    pub max_connections: usize,
}

fn d_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}
fn d_idle_timeout() -> Duration {
    Duration::from_secs(30)
}
fn d_max_connections_per_user() -> usize {
    32
}
fn d_max_connections() -> usize {
    512
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            header_read_timeout: d_header_read_timeout(),
            idle_timeout: d_idle_timeout(),
            max_connections_per_user: d_max_connections_per_user(),
            max_connections: d_max_connections(),
        }
    }
}

/// `[metrics]`: Prometheus cannot scrape a Unix socket, so `/metrics` (and nothing else of the
/// API) may also be served over TCP. Off unless `listen` is set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// e.g. "127.0.0.1:9464". An address other than loopback exposes the counters to the
    /// network: write it only on purpose (bftpd warns at start).
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
}

impl MetricsConfig {
    /// A warning for an operator when the listener is reachable from other hosts.
    pub fn exposure_warning(&self) -> Option<String> {
        let addr = self.listen?;
        (!addr.ip().is_loopback()).then(|| {
            format!(
                "[metrics] listen = \"{addr}\" is not a loopback address: /metrics is served to the network"
            )
        })
    }
}

/// More threads than this cannot help a daemon that mostly waits on sockets.
const MAX_WORKER_THREADS: usize = 64;

/// `[scheduler]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Jobs running at once.
    #[serde(default = "d_running")]
    pub max_running_jobs: usize,
    /// At SIGTERM, how long running transfers may go on before they are aborted (and stay
    /// queued, to be done again after the restart).
    #[serde(default = "d_grace", with = "humantime_duration")]
    pub grace: Duration,
    /// Threads that run the control connections, the API and the scheduler. The work is
    /// waiting on sockets: one thread does it with the least CPU per file (a second one
    /// costs wake-ups between threads: bftpd's CPU per copied file was about a third higher
    /// with two, 0.72 against 0.55 s per 2,000 files). The store's disk writes have
    /// threads of their own.
    #[serde(default = "d_worker_threads")]
    pub worker_threads: usize,
}

fn d_running() -> usize {
    8
}
fn d_grace() -> Duration {
    Duration::from_secs(30)
}
fn d_worker_threads() -> usize {
    1
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_running_jobs: d_running(),
            grace: d_grace(),
            worker_threads: d_worker_threads(),
        }
    }
}

fn default_socket_mode() -> String {
    "0660".into()
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `plain` (default) or `json`.
    #[serde(default)]
    pub format: LogFormat,
    /// A tracing filter such as `info` or `bftpd=debug`; `RUST_LOG` overrides it.
    #[serde(default)]
    pub level: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Plain,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The store's page cache, in MiB. Queued jobs need no cache to stay queued.
    #[serde(default = "default_cache_mib")]
    pub cache_mib: u64,
    /// How long finished and cancelled jobs are kept once their report is done (a humantime
    /// duration, or "forever"); then retention removes them with everything of theirs.
    #[serde(default = "default_keep_finished", with = "keep_duration")]
    pub keep_finished: bftp_core::retention::Keep,
    /// MiB kept free on the store's filesystem: below it submits are refused (HTTP 507) and
    /// attempts start no new file; below half of it every store write is refused. 0: off.
    #[serde(default = "default_min_free_mib")]
    pub min_free_mib: u64,
    /// `sled` (embedded, one daemon) or `postgres` (one database that several nodes share).
    #[serde(default)]
    pub kind: StoreKind,
    /// For `postgres`: the database, `postgres://user@host:port/db`. No password in it: the
    /// password, if any, goes in `password_file`.
    #[serde(default)]
    pub url: Option<String>,
    /// For `postgres`: a file holding the database password (its first line).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// For `postgres`: connections this node keeps to the database at most.
    #[serde(default = "d_pool_size")]
    pub pool_size: usize,
    /// For `postgres`: this node's name, unique among the nodes on the database. Unset: the
    /// host name.
    #[serde(default)]
    pub node: Option<String>,
    /// For `postgres`: how long a node's claim of a job lasts without a renewal (it renews
    /// every third of it); another node takes the job over once it ran out.
    #[serde(default = "d_lease", with = "humantime_duration")]
    pub lease: Duration,
    /// For `postgres`: how often a node looks at the queue when nothing is due, for jobs
    /// submitted on other nodes and leases that ran out.
    #[serde(default = "d_poll", with = "humantime_duration")]
    pub poll: Duration,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Sled,
    Postgres,
}

fn d_pool_size() -> usize {
    8
}

fn d_lease() -> Duration {
    Duration::from_secs(10)
}

fn d_poll() -> Duration {
    Duration::from_secs(1)
}

fn default_min_free_mib() -> u64 {
    64
}

fn default_cache_mib() -> u64 {
    32
}

fn default_keep_finished() -> bftp_core::retention::Keep {
    bftp_core::retention::Keep::For(Duration::from_secs(30 * 86_400))
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            cache_mib: default_cache_mib(),
            keep_finished: default_keep_finished(),
            min_free_mib: default_min_free_mib(),
            kind: StoreKind::default(),
            url: None,
            password_file: None,
            pool_size: d_pool_size(),
            node: None,
            lease: d_lease(),
            poll: d_poll(),
        }
    }
}

impl StoreConfig {
    fn check(&self) -> anyhow::Result<()> {
        if self.kind == StoreKind::Sled {
            return Ok(());
        }
        let Some(url) = &self.url else {
            bail!(
                "[store]: kind = \"postgres\" needs url = \"postgres://user@host:port/database\""
            );
        };
        bftp_store::PgOptions::check_url(url).map_err(|e| anyhow::anyhow!("[store]: url: {e}"))?;
        if self.pool_size == 0 {
            bail!("[store]: pool_size must be at least 1");
        }
        if self.lease < Duration::from_secs(1) {
            bail!("[store]: lease must be at least 1s");
        }
        if self.poll.is_zero() || self.poll > Duration::from_secs(60) {
            bail!("[store]: poll must be between 1ms and 60s");
        }
        if let Some(n) = &self.node {
            if n.is_empty() || n.len() > 64 || n.chars().any(|c| c.is_control()) {
                bail!("[store]: node must be 1 to 64 printable characters");
            }
        }
        Ok(())
    }

    /// This node's name: `node`, or the host name.
    pub fn node_name(&self) -> String {
        self.node.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "bftpd".into())
        })
    }
}

/// `keep_finished`: a humantime duration, or "forever".
pub(crate) mod keep_duration {
    use bftp_core::retention::Keep;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Keep, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim() == "forever" {
            return Ok(Keep::Forever);
        }
        humantime::parse_duration(&s).map(Keep::For).map_err(|e| {
            serde::de::Error::custom(format!(
                "{s:?} is neither a duration ({e}) nor \"forever\"; write e.g. \"30days\""
            ))
        })
    }
}

/// The policy a job gets when its submitter says nothing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryDefaults {
    #[serde(default = "d_10m", with = "humantime_duration")]
    pub first_interval: Duration,
    #[serde(default = "d_factor")]
    pub factor: f64,
    #[serde(default = "d_4h", with = "humantime_duration")]
    pub cap: Duration,
    #[serde(default = "d_attempts")]
    pub max_attempts: u32,
    #[serde(default = "d_3days", with = "humantime_duration")]
    pub deadline: Duration,
}

fn d_10m() -> Duration {
    RetryPolicy::default().first_interval
}
fn d_factor() -> f64 {
    RetryPolicy::default().factor
}
fn d_4h() -> Duration {
    RetryPolicy::default().cap
}
fn d_attempts() -> u32 {
    RetryPolicy::default().max_attempts
}
fn d_3days() -> Duration {
    RetryPolicy::default().deadline
}

impl Default for RetryDefaults {
    fn default() -> Self {
        let p = RetryPolicy::default();
        RetryDefaults {
            first_interval: p.first_interval,
            factor: p.factor,
            cap: p.cap,
            max_attempts: p.max_attempts,
            deadline: p.deadline,
        }
    }
}

impl RetryDefaults {
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            first_interval: self.first_interval,
            factor: self.factor,
            cap: self.cap,
            max_attempts: self.max_attempts,
            deadline: self.deadline,
        }
    }
}

/// What users may ask for; their values are clamped into these.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBoundsConfig {
    #[serde(default = "b_min_first", with = "humantime_duration")]
    pub min_first_interval: Duration,
    #[serde(default = "b_max_first", with = "humantime_duration")]
    pub max_first_interval: Duration,
    #[serde(default = "b_min_factor")]
    pub min_factor: f64,
    #[serde(default = "b_max_factor")]
    pub max_factor: f64,
    #[serde(default = "b_min_cap", with = "humantime_duration")]
    pub min_cap: Duration,
    #[serde(default = "b_max_cap", with = "humantime_duration")]
    pub max_cap: Duration,
    #[serde(default = "b_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "b_max_deadline", with = "humantime_duration")]
    pub max_deadline: Duration,
}

fn b_min_first() -> Duration {
    RetryBounds::default().min_first_interval
}
fn b_max_first() -> Duration {
    RetryBounds::default().max_first_interval
}
fn b_min_factor() -> f64 {
    RetryBounds::default().min_factor
}
fn b_max_factor() -> f64 {
    RetryBounds::default().max_factor
}
fn b_min_cap() -> Duration {
    RetryBounds::default().min_cap
}
fn b_max_cap() -> Duration {
    RetryBounds::default().max_cap
}
fn b_max_attempts() -> u32 {
    RetryBounds::default().max_attempts
}
fn b_max_deadline() -> Duration {
    RetryBounds::default().max_deadline
}

impl Default for RetryBoundsConfig {
    fn default() -> Self {
        let b = RetryBounds::default();
        RetryBoundsConfig {
            min_first_interval: b.min_first_interval,
            max_first_interval: b.max_first_interval,
            min_factor: b.min_factor,
            max_factor: b.max_factor,
            min_cap: b.min_cap,
            max_cap: b.max_cap,
            max_attempts: b.max_attempts,
            max_deadline: b.max_deadline,
        }
    }
}

impl RetryBoundsConfig {
    pub fn bounds(&self) -> RetryBounds {
        RetryBounds {
            min_first_interval: self.min_first_interval,
            max_first_interval: self.max_first_interval,
            min_factor: self.min_factor,
            max_factor: self.max_factor,
            min_cap: self.min_cap,
            max_cap: self.max_cap,
            max_attempts: self.max_attempts,
            max_deadline: self.max_deadline,
        }
    }
}

/// The PostgreSQL store's options from `[store]`, the password read from its file.
pub fn pg_options(config: &Config) -> anyhow::Result<bftp_store::PgOptions> {
    let s = &config.store;
    let url = s
        .url
        .clone()
        .context("[store]: kind = \"postgres\" needs url")?;
    let mut o = bftp_store::PgOptions::new(url, s.node_name());
    o.pool_size = s.pool_size;
    o.lease = s.lease;
    o.poll = s.poll;
    if let Some(path) = &s.password_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("[store]: cannot read password_file {}", path.display()))?;
        o.password = Some(text.lines().next().unwrap_or_default().to_string());
    }
    Ok(o)
}

impl Config {
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        // Relative paths stay relative to the working directory, as for any command-line tool.
        Config::parse(&text).with_context(|| format!("invalid config {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let cfg: Config = toml::from_str(text)?;
        cfg.check()?;
        Ok(cfg)
    }

    pub fn socket_mode(&self) -> anyhow::Result<u32> {
        let s = self.socket_mode.trim_start_matches("0o");
        let mode = u32::from_str_radix(s, 8)
            .with_context(|| format!("socket_mode {:?} is not octal", self.socket_mode))?;
        if mode > 0o777 {
            bail!("socket_mode {:?} is out of range", self.socket_mode);
        }
        Ok(mode)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.state_dir.as_os_str().is_empty() {
            bail!("state_dir is empty");
        }
        if self.socket.as_os_str().is_empty() {
            bail!("socket is empty");
        }
        self.socket_mode()?;
        let p = self.retry.policy();
        p.validate().context("[retry]")?;
        let b = self.retry_bounds.bounds();
        if b.min_first_interval > b.max_first_interval
            || b.min_cap > b.max_cap
            || b.min_factor > b.max_factor
            || b.min_factor < 1.0
        {
            bail!("[retry_bounds]: every minimum must be at most its maximum, and min_factor at least 1");
        }
        if b.max_attempts == 0 {
            bail!("[retry_bounds]: max_attempts must be at least 1");
        }
        self.ftp.limits()?;
        crate::hosts::gates::Windows::from_config(&self.windows)?;
        if self.scheduler.max_running_jobs == 0 {
            bail!("[scheduler]: max_running_jobs must be at least 1");
        }
        if !(1..=MAX_WORKER_THREADS).contains(&self.scheduler.worker_threads) {
            bail!("[scheduler]: worker_threads must be from 1 to {MAX_WORKER_THREADS}");
        }
        let api = &self.api;
        if api.header_read_timeout.is_zero() || api.idle_timeout.is_zero() {
            bail!("[api]: header_read_timeout and idle_timeout must be more than 0");
        }
        if api.max_connections_per_user == 0 || api.max_connections == 0 {
            bail!("[api]: max_connections_per_user and max_connections must be at least 1");
        }
        if api.max_connections_per_user > api.max_connections {
            bail!("[api]: max_connections_per_user must be at most max_connections");
        }
        if let Some(addr) = self.metrics.listen {
            if addr.port() == 0 {
                bail!("[metrics]: listen = \"{addr}\" needs a port (9464 is Prometheus's usual one for an exporter)");
            }
        }
        if self.store.cache_mib == 0 {
            bail!("[store]: cache_mib must be at least 1");
        }
        self.store.check()?;
        self.webhooks.check()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_configs_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                n += 1;
            }
        }
        assert!(
            n >= 2,
            "the dev and example configs not found in {}",
            dir.display()
        );
    }

    /// The example config says its uncommented values are the defaults: keep that true.
    #[test]
    fn example_config_states_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/bftpd.example.toml");
        let c = Config::load(&path).unwrap();
        let d = Config::parse("state_dir = \"s\"\nsocket = \"x\"\n").unwrap();
        for (what, example, default) in [
            (
                "socket_mode",
                format!("{:?}", c.socket_mode),
                format!("{:?}", d.socket_mode),
            ),
            ("[log]", format!("{:?}", c.log), format!("{:?}", d.log)),
            ("[api]", format!("{:?}", c.api), format!("{:?}", d.api)),
            (
                "[metrics]",
                format!("{:?}", c.metrics),
                format!("{:?}", d.metrics),
            ),
            (
                "[store]",
                format!("{:?}", c.store),
                format!("{:?}", d.store),
            ),
            (
                "[retry]",
                format!("{:?}", c.retry),
                format!("{:?}", d.retry),
            ),
            (
                "[retry_bounds]",
                format!("{:?}", c.retry_bounds),
                format!("{:?}", d.retry_bounds),
            ),
            (
                "[policy]",
                format!("{:?}", c.policy),
                format!("{:?}", d.policy),
            ),
            ("[ftp]", format!("{:?}", c.ftp), format!("{:?}", d.ftp)),
            (
                "[scheduler]",
                format!("{:?}", c.scheduler),
                format!("{:?}", d.scheduler),
            ),
            ("[mail]", format!("{:?}", c.mail), format!("{:?}", d.mail)),
            (
                "[webhooks]",
                format!("{:?}", c.webhooks),
                format!("{:?}", d.webhooks),
            ),
        ] {
            assert_eq!(
                example,
                default,
                "{what} of {} is not the default",
                path.display()
            );
        }
        assert_eq!(c.admin_group, None);
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_errors() {
        let base = "state_dir = \"s\"\nsocket = \"s.sock\"\n";
        Config::parse(base).unwrap();
        let e = format!(
            "{:#}",
            Config::parse(&format!("{base}bogus = 1\n")).unwrap_err()
        );
        assert!(e.contains("bogus"), "{e}");
        let e = format!(
            "{:#}",
            Config::parse(&format!("{base}[retry]\nfirst_interval = \"soon\"\n")).unwrap_err()
        );
        assert!(e.contains("not a duration"), "{e}");
        let e = format!(
            "{:#}",
            Config::parse(&format!("{base}socket_mode = \"0999\"\n")).unwrap_err()
        );
        assert!(e.contains("octal"), "{e}");
        let e = format!(
            "{:#}",
            Config::parse(&format!("{base}[retry]\nfactor = 0.5\n")).unwrap_err()
        );
        assert!(e.contains("factor"), "{e}");
        for threads in [0, 65] {
            let e = format!(
                "{:#}",
                Config::parse(&format!("{base}[scheduler]\nworker_threads = {threads}\n"))
                    .unwrap_err()
            );
            assert!(e.contains("worker_threads must be from 1 to 64"), "{e}");
        }
        let e = format!(
            "{:#}",
            Config::parse(&format!("{base}[webhooks]\nretries = 3\n")).unwrap_err()
        );
        assert!(e.contains("retries"), "{e}");
        let c = Config::parse(&format!("{base}[scheduler]\nworker_threads = 2\n")).unwrap();
        assert_eq!(c.scheduler.worker_threads, 2);
    }

    #[test]
    fn api_and_metrics_sections() {
        let base = "state_dir = \"s\"\nsocket = \"s.sock\"\n";
        let d = Config::parse(base).unwrap();
        assert_eq!(d.api.header_read_timeout, Duration::from_secs(10));
        assert_eq!(d.api.idle_timeout, Duration::from_secs(30));
        assert_eq!(d.metrics.listen, None);
        for (bad, needle) in [
            ("[api]\nidle_timeout = \"0s\"\n", "more than 0"),
            ("[api]\nmax_connections_per_user = 0\n", "at least 1"),
            (
                "[api]\nmax_connections = 8\nmax_connections_per_user = 9\n",
                "at most max_connections",
            ),
            ("[metrics]\nlisten = \"127.0.0.1\"\n", "socket address"),
            ("[metrics]\nlisten = \"127.0.0.1:0\"\n", "needs a port"),
            ("[metrics]\nport = 9464\n", "port"),
        ] {
            let e = format!("{:#}", Config::parse(&format!("{base}{bad}")).unwrap_err());
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
        let c = Config::parse(&format!("{base}[metrics]\nlisten = \"127.0.0.1:9464\"\n")).unwrap();
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.metrics.exposure_warning(), None);
        let c = Config::parse(&format!("{base}[metrics]\nlisten = \"[::1]:9464\"\n")).unwrap();
        assert_eq!(c.metrics.exposure_warning(), None);
        let c = Config::parse(&format!("{base}[metrics]\nlisten = \"0.0.0.0:9464\"\n")).unwrap();
        assert!(c
            .metrics
            .exposure_warning()
            .is_some_and(|w| w.contains("not a loopback address")));
    }

    #[test]
    fn durations_in_humantime() {
        let c = Config::parse("state_dir = \"s\"\nsocket = \"x\"\n[retry]\nfirst_interval = \"2s\"\ncap = \"1h 30m\"\n").unwrap();
        assert_eq!(c.retry.first_interval, Duration::from_secs(2));
        assert_eq!(c.retry.cap, Duration::from_secs(5400));
    }
}
