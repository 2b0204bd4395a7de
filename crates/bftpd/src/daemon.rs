//! The daemon's wiring: what it is made of ([`Daemon`], built once at start and handed to
//! every part), the order in which its parts start, and the order in which they stop
//! ([`Running::stop`]). Nothing here decides anything about jobs.

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bftp_store::{JobStore, PgStore, SledStore, StoreOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, identity, server};
use crate::attempt::{self, live::Live};
use crate::clock::{self, Clock};
use crate::config::{self, Config};
use crate::hosts::{policy::HostPolicy, pool, HostLimits, PolicyCheck};
use crate::mail::{self, MailSettings};
use crate::metrics::Metrics;
use crate::scheduler::{self, retention, Scheduler};
use crate::secrets::Secrets;
use crate::service;
use crate::store::{self, Store};

/// How long open API connections may take to finish after shutdown begins.
const API_GRACE: Duration = Duration::from_secs(5);

/// The API's connection bounds (`[api]`), its connection limit lowered if the open-file
/// limit would not leave the scheduler and the store their descriptors.
fn api_bounds(config: &Config) -> anyhow::Result<(Arc<server::Admission>, server::Timeouts)> {
    let api = &config.api;
    let nofile = server::raise_nofile_limit();
    let reserve =
        server::descriptor_reserve(config.scheduler.max_running_jobs, config.ftp.parallel_pairs);
    let max = server::connection_budget(api.max_connections, reserve, nofile)
        .map_err(anyhow::Error::msg)?;
    if max < api.max_connections {
        tracing::warn!(
            nofile,
            reserve,
            max_connections = max,
            "the open-file limit leaves room for only {max} of [api] max_connections = {}; \
             raise LimitNOFILE= to serve more",
            api.max_connections
        );
    }
    Ok((
        server::Admission::new(max, api.max_connections_per_user.min(max)),
        server::Timeouts::from(api),
    ))
}

/// The pause after the `tries`-th failed try to reach the job store's database at start:
/// 1 s, doubling, at most 30 s.
pub fn store_retry_delay(tries: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(1);
    const CAP: Duration = Duration::from_secs(30);
    FIRST
        .saturating_mul(2u32.saturating_pow(tries.saturating_sub(1)))
        .min(CAP)
}

/// Opens the store `[store] kind` names: sled in the state directory, or PostgreSQL. A
/// database that cannot be reached is waited for, tried again with [`store_retry_delay`]
/// (each failure logged and told to systemd, which is not told READY meanwhile), until
/// `shutdown` completes: then `None`. Any other failure (a refused login, a schema too new)
/// stops the start at once.
async fn open_store(
    config: &Config,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> anyhow::Result<Option<Arc<dyn JobStore>>> {
    match config.store.kind {
        config::StoreKind::Sled => {
            let store_dir = config.state_dir.join("store");
            let opts = StoreOptions {
                cache_capacity_bytes: config.store.cache_mib * 1024 * 1024,
                min_free_bytes: config.store.min_free_mib * 1024 * 1024,
                ..StoreOptions::default()
            };
            let shown = store_dir.clone();
            Ok(Some(Arc::new(
                store::off_runtime("open the store", move || SledStore::open(&store_dir, opts))
                    .await
                    .context("store opening task failed")?
                    .with_context(|| format!("cannot open the job store in {}", shown.display()))?,
            )))
        }
        config::StoreKind::Postgres => {
            let opts = config::pg_options(config)?;
            let (node, url) = (opts.node.clone(), opts.url.clone());
            let mut tries = 0;
            let store = loop {
                let o = opts.clone();
                let opened = store::off_runtime("open the store", move || PgStore::open(o))
                    .await
                    .context("store opening task failed")?;
                let e = match opened {
                    Ok(store) => break store,
                    Err(e @ bftp_store::StoreError::Unreachable { .. }) => e,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("cannot open the PostgreSQL job store at {url}")
                        })
                    }
                };
                tries += 1;
                let delay = store_retry_delay(tries);
                tracing::warn!(
                    error = %e,
                    tries,
                    retry_in_ms = delay.as_millis() as u64,
                    "the job store's database at {url} cannot be reached; waiting for it (not ready)"
                );
                service::notify_waiting(
                    &format!(
                        "waiting for the job store's database at {url} (try {tries}: {e}); next try in {}s",
                        delay.as_secs()
                    ),
                    delay + Duration::from_secs(30),
                );
                tokio::select! {
                    _ = shutdown.as_mut() => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            };
            if tries > 0 {
                tracing::info!(tries, "the job store's database answers now");
                service::notify_status(&format!(
                    "the job store's database at {url} answered after {tries} failed tries"
                ));
            }
            tracing::info!(node = %node, "job store: PostgreSQL, shared with the other nodes");
            Ok(Some(Arc::new(store)))
        }
    }
}

/// What the daemon is made of: the handles its parts share. Built once at start.
pub struct Daemon {
    pub store: Store,
    pub secrets: Arc<Secrets>,
    pub clock: Clock,
    pub metrics: Arc<Metrics>,
    /// The files in flight, written by attempts and read by the API's views.
    pub live: Arc<Live>,
    /// Per-host connection slots, kept pairs and STOU locks, shared by every transfer.
    pub hosts: Arc<HostLimits>,
    pub policy: HostPolicy,
    /// The engine's timeouts and reply overrides (`[ftp]`).
    pub limits: bftp_ftp::Limits,
    pub mail: MailSettings,
    /// The webhook sender (`[webhooks]`): built at start, so the key file exists from the
    /// first start and a bad CA file stops it.
    pub webhooks: crate::hooks::send::Sender,
    /// Start gates (RULES.md §16.4, §16.5): the `[[windows]]` and the servers' breakers.
    pub gates: Arc<crate::hosts::gates::Gates>,
}

impl Daemon {
    /// The shared handles, from the config and the opened store: the key that opens the
    /// store's passwords, the host policy, the connection slots (the store's count of all
    /// nodes when shared).
    async fn assemble(config: &Config, store: Store) -> anyhow::Result<Daemon> {
        let secrets = {
            let (shared, path) = (store.shared().clone(), key_file(config));
            Arc::new(
                store::off_runtime("load the key", move || {
                    Secrets::open_for_store(&path, &*shared)
                })
                .await
                .context("key loading task failed")??,
            )
        };
        let hosts = HostLimits::with_pool(
            config.ftp.parallel_pairs,
            config.ftp.max_connections_per_host,
            pool::PoolSettings {
                max_idle: config.ftp.pool_max_idle,
                idle_timeout: config.ftp.pool_idle_timeout,
            },
            store.cluster().and_then(|c| c.host_slots()),
            // Made once: every relay of the daemon counts against the same caps.
            config.ftp.relay_gate(),
        );
        hosts.spawn_give_way();
        // Limits learned from the servers (RULES.md §16.3): read now, raised by a small task.
        let learning = config.ftp.learn_settings();
        if let Err(e) = hosts
            .learn_with(store.clone(), Clock::system(), learning)
            .await
        {
            tracing::warn!(error = %e, "cannot read the limits learned from the servers");
        }
        hosts.spawn_learned_upkeep();
        let gate = hosts.relay_gate();
        tracing::info!(
            data_path = %config.ftp.data_path,
            relay = config.ftp.relay,
            relay_max = gate.max_at_once(),
            relay_bytes_per_second = gate.bytes_per_second(),
            "data path: jobs that ask for none take {}{}",
            config.ftp.data_path,
            if config.ftp.relay { "" } else { "; bftpd relays nothing ([ftp] relay = false)" }
        );
        let policy = HostPolicy::new(&config.policy);
        let gates = Arc::new(crate::hosts::gates::Gates {
            windows: crate::hosts::gates::Windows::from_config(&config.windows)?,
            breaker: crate::hosts::breaker::Breaker::new(
                config.ftp.probe_settings(),
                Arc::new(PolicyCheck(policy.clone())),
                store.clone(),
                Clock::system(),
            ),
        });
        Ok(Daemon {
            gates,
            store,
            secrets,
            clock: Clock::system(),
            metrics: Arc::new(Metrics::new()),
            live: Arc::new(Live::default()),
            hosts,
            policy,
            limits: config.ftp.limits()?,
            mail: MailSettings::new(&config.mail),
            webhooks: crate::hooks::send::Sender::from_config(config)?,
        })
    }

    /// The scheduler, with the executor that runs each attempt over FTP.
    fn scheduler(&self, config: &Config) -> Arc<Scheduler> {
        let executor = Arc::new(attempt::FtpExecutor::new(attempt::AttemptCtx {
            store: self.store.clone(),
            secrets: self.secrets.clone(),
            limits: self.limits.clone(),
            check: Arc::new(PolicyCheck(self.policy.clone())),
            hosts: self.hosts.clone(),
            metrics: self.metrics.clone(),
            live: self.live.clone(),
            watch_progress: config.ftp.watch_progress,
            clock: self.clock.clone(),
            pairs: crate::hosts::pairs::PairMemories::new(
                self.store.clone(),
                config.ftp.pair_memory,
            ),
            resume_from: config.ftp.resumable_from(),
            data_paths: config.ftp.data_path_policy(),
            gates: Some(self.gates.clone()),
        }));
        let scheduler = Scheduler::new(
            self.store.clone(),
            executor,
            self.metrics.clone(),
            scheduler::SchedulerLimits {
                max_running_jobs: config.scheduler.max_running_jobs,
                grace: config.scheduler.grace,
            },
            self.clock.clone(),
            clock::random_jitter(),
        );
        // The start gates; a server back wakes the scheduler for the jobs it released.
        scheduler.set_gate(Arc::new(attempt::gates::JobGates(self.gates.clone())));
        let weak = Arc::downgrade(&scheduler);
        self.gates.breaker.set_wake(Arc::new(move || {
            if let Some(s) = weak.upgrade() {
                s.notify();
            }
        }));
        scheduler
    }

    /// The postman, if `[mail]` is enabled; a bad `[mail]` section is an error here, before
    /// anything is served.
    fn postman(
        &self,
        config: &Config,
        scheduler: &Arc<Scheduler>,
    ) -> anyhow::Result<Option<mail::Postman>> {
        if !config.mail.enabled {
            tracing::warn!("[mail] enabled = false: reports stay in the outbox, undelivered");
            return Ok(None);
        }
        let mailer = bftp_mail::Mailer::new(&config.mail).context("[mail]")?;
        Ok(Some(mail::Postman {
            store: self.store.clone(),
            secrets: self.secrets.clone(),
            settings: self.mail.clone(),
            config: config.mail.clone(),
            mailer,
            scheduler: scheduler.clone(),
            wake: scheduler.finals(),
            metrics: self.metrics.clone(),
            clock: self.clock.clone(),
            jitter: clock::random_jitter(),
        }))
    }

    /// The webhook deliverer (`[webhooks]`), woken by `wake`.
    fn deliverer(
        &self,
        config: &Config,
        scheduler: &Arc<Scheduler>,
        wake: Arc<tokio::sync::Notify>,
    ) -> crate::hooks::deliver::Deliverer {
        let w = &config.webhooks;
        let scheduler = scheduler.clone();
        crate::hooks::deliver::Deliverer {
            store: self.store.clone(),
            secrets: self.secrets.clone(),
            settings: crate::hooks::deliver::Settings {
                urls: w.urls.clone(),
                max_body_bytes: w.max_body_bytes,
                backoff: bftp_core::event::Backoff {
                    first: w.retry_first,
                    max: w.retry_max,
                    give_up_after: w.give_up_after,
                },
            },
            post: Arc::new(self.webhooks.clone()),
            running: Arc::new(move |id| scheduler.is_running(id)),
            wake,
            clock: self.clock.clone(),
        }
    }

    /// What the API's handlers share.
    fn api_state(
        &self,
        config: &Config,
        scheduler: &Arc<Scheduler>,
        watcher: &Arc<crate::watch::Watcher>,
    ) -> anyhow::Result<Arc<api::AppState>> {
        Ok(Arc::new(api::AppState {
            tls_defaults: config.ftp.tls.defaults()?,
            store: self.store.clone(),
            mail: self.mail.clone(),
            secrets: self.secrets.clone(),
            scheduler: scheduler.clone(),
            policy: self.policy.clone(),
            limits: self.limits.clone(),
            hosts: self.hosts.clone(),
            retry_defaults: config.retry.policy(),
            retry_bounds: config.retry_bounds.bounds(),
            metrics: self.metrics.clone(),
            live: self.live.clone(),
            clock: self.clock.clone(),
            key_file: key_file(config),
            data_paths: config.ftp.data_path_policy(),
            watcher: Some(watcher.clone()),
            gates: Some(self.gates.clone()),
        }))
    }

    /// The task that polls the watches (RULES.md §15), with its own mailer for the
    /// late-arrival alarms when `[mail]` is on.
    fn watcher(
        &self,
        config: &Config,
        scheduler: &Arc<Scheduler>,
    ) -> anyhow::Result<Arc<crate::watch::Watcher>> {
        let alarm = match config.mail.enabled {
            true => Some(crate::watch::Alarm {
                mailer: bftp_mail::Mailer::new(&config.mail).context("[mail]")?,
                settings: self.mail.clone(),
            }),
            false => None,
        };
        Ok(crate::watch::Watcher::new(
            self.store.clone(),
            self.secrets.clone(),
            self.hosts.clone(),
            self.limits.clone(),
            Arc::new(PolicyCheck(self.policy.clone())),
            scheduler.clone(),
            self.clock.clone(),
            self.metrics.clone(),
            alarm,
            config.store.lease,
        ))
    }

    /// The removal of finished jobs past `[store] keep_finished`.
    fn retention(&self, config: &Config) -> retention::Retention {
        retention::Retention {
            store: self.store.clone(),
            keep: config.store.keep_finished,
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

fn key_file(config: &Config) -> PathBuf {
    config.state_dir.join("secret.key")
}

/// Runs the daemon until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    tokio::pin!(shutdown);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.state_dir)
        .with_context(|| {
            format!(
                "cannot create state directory {}",
                config.state_dir.display()
            )
        })?;
    let Some(store) = open_store(&config, shutdown.as_mut()).await? else {
        tracing::info!("stopped while waiting for the job store");
        return Ok(());
    };
    let daemon = Daemon::assemble(&config, Store::new(store)).await?;
    tracing::info!("{}", daemon.webhooks.summary());
    let scheduler = daemon.scheduler(&config);
    let recovered = scheduler
        .recover()
        .await
        .context("recovering interrupted attempts")?;
    if recovered > 0 {
        tracing::info!(
            jobs = recovered,
            "requeued attempts interrupted by the last stop"
        );
    }
    let running = Running::start(&config, &daemon, scheduler).await?;
    service::notify_ready();
    shutdown.await;
    service::notify_stopping();
    running.stop(&config.socket).await?;
    daemon.gates.breaker.stop();
    // Every write was durable when acknowledged: nothing is left to flush.
    drop(daemon);
    tracing::info!("stopped");
    Ok(())
}

/// The daemon's running parts, each with the token that stops it.
struct Running {
    api: CancellationToken,
    serving: JoinHandle<()>,
    metrics_serving: Option<JoinHandle<()>>,
    scheduling: (CancellationToken, JoinHandle<()>),
    watching: (CancellationToken, JoinHandle<()>),
    retaining: (CancellationToken, JoinHandle<()>),
    mailing: Option<(CancellationToken, JoinHandle<()>)>,
    /// The webhook deliverer and the bell relay that wakes it and the postman.
    hooking: (CancellationToken, JoinHandle<()>),
}

impl Running {
    /// Starts the parts: the postman is built first (a bad `[mail]` stops the start), the
    /// sockets are bound, then the API, the metrics listener, the scheduler, retention and
    /// the postman run.
    async fn start(
        config: &Config,
        daemon: &Daemon,
        scheduler: Arc<Scheduler>,
    ) -> anyhow::Result<Running> {
        let postman = daemon.postman(config, &scheduler)?;
        let hook_bell = Arc::new(tokio::sync::Notify::new());
        let deliverer = Arc::new(daemon.deliverer(config, &scheduler, hook_bell.clone()));
        let finals = scheduler.finals();
        let watcher = daemon.watcher(config, &scheduler)?;
        let state = daemon.api_state(config, &scheduler, &watcher)?;
        let admins = identity::AdminPolicy::new(config.admin_group.as_deref())?;
        let (admission, timeouts) = api_bounds(config)?;
        let metrics_listener = match config.metrics.listen {
            Some(addr) => Some(server::bind_metrics(addr).await?),
            None => None,
        };
        let listener = server::bind(
            &config.socket,
            config.socket_mode()?,
            config.socket_group.as_deref(),
        )
        .await?;
        tracing::info!(socket = %config.socket.display(), state_dir = %config.state_dir.display(), "bftpd ready");
        let api = CancellationToken::new();
        let metrics_serving = metrics_listener.map(|l| {
            if let Some(w) = config.metrics.exposure_warning() {
                tracing::warn!("{w}");
            }
            tracing::info!(listen = %config.metrics.listen.expect("bound"), "serving /metrics over TCP");
            tokio::spawn(server::serve_metrics(
                l,
                api::metrics_router(state.clone()),
                admission.clone(),
                timeouts,
                api.clone(),
                API_GRACE,
            ))
        });
        let serving = tokio::spawn(server::serve(
            listener,
            api::router(state),
            admins,
            admission,
            timeouts,
            api.clone(),
            API_GRACE,
        ));
        let stop = CancellationToken::new();
        let scheduling = (stop.clone(), tokio::spawn(scheduler.run(stop)));
        let stop = CancellationToken::new();
        let watching = (stop.clone(), tokio::spawn(watcher.run(stop)));
        let stop = CancellationToken::new();
        let retaining = (
            stop.clone(),
            tokio::spawn(daemon.retention(config).run(stop)),
        );
        // The scheduler's bell for final jobs rings one waiter: relayed to the postman and
        // the webhook deliverer both.
        let mail_bell = Arc::new(tokio::sync::Notify::new());
        let mailing = postman.map(|mut p| {
            p.wake = mail_bell.clone();
            let stop = CancellationToken::new();
            (stop.clone(), tokio::spawn(Arc::new(p).run(stop)))
        });
        let hooking = {
            let stop = CancellationToken::new();
            let relay_stop = stop.clone();
            let relay = async move {
                loop {
                    tokio::select! {
                        _ = relay_stop.cancelled() => break,
                        _ = finals.notified() => {
                            mail_bell.notify_one();
                            hook_bell.notify_one();
                        }
                    }
                }
            };
            let run = deliverer.run(stop.clone());
            (
                stop,
                tokio::spawn(async move {
                    tokio::join!(relay, run);
                }),
            )
        };
        Ok(Running {
            api,
            serving,
            metrics_serving,
            scheduling,
            watching,
            retaining,
            mailing,
            hooking,
        })
    }

    /// Stops the parts in order: no new requests and no new work first (running attempts
    /// get their grace period), then retention, then the postman and the webhook deliverer,
    /// so that reports and events of attempts that ended in the grace period still get a try
    /// (a delivery in flight is cut; the report or event stays pending for the next start).
    /// The socket file goes last.
    async fn stop(self, socket: &std::path::Path) -> anyhow::Result<()> {
        tracing::info!("shutting down: no new work; running attempts get their grace period");
        self.api.cancel();
        self.watching.0.cancel();
        self.scheduling.0.cancel();
        let (served, scheduled, watched) =
            tokio::join!(self.serving, self.scheduling.1, self.watching.1);
        watched.context("watch task failed")?;
        served.context("API server task failed")?;
        if let Some(m) = self.metrics_serving {
            m.await.context("metrics listener task failed")?;
        }
        scheduled.context("scheduler task failed")?;
        self.retaining.0.cancel();
        self.retaining.1.await.context("retention task failed")?;
        if let Some((stop, mailing)) = self.mailing {
            stop.cancel();
            mailing.await.context("postman task failed")?;
        }
        self.hooking.0.cancel();
        self.hooking
            .1
            .await
            .context("webhook deliverer task failed")?;
        let _ = std::fs::remove_file(socket);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_waits_for_the_database_one_second_then_doubling_up_to_thirty() {
        let s = Duration::from_secs;
        let delays: Vec<Duration> = (1..=8).map(store_retry_delay).collect();
        assert_eq!(delays, [s(1), s(2), s(4), s(8), s(16), s(30), s(30), s(30)]);
        assert_eq!(store_retry_delay(u32::MAX), s(30));
        assert_eq!(store_retry_delay(0), s(1));
    }
}
