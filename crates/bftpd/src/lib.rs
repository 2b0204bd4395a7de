//! bftpd, the file transfer controller: the daemon library.
//!
//! [`run`] opens the store, serves the API on the Unix socket and returns when `shutdown`
//! completes. The binary (`main.rs`) only parses arguments, sets up logging and signals.

pub mod api;
pub mod attempt;
pub mod clock;
pub mod config;
pub mod foreground;
pub mod hosts;
pub mod lanes;
pub mod mail;
pub mod metrics;
pub mod scheduler;
pub mod secrets;
pub mod service;
pub mod store;
#[cfg(test)]
mod testkit;
pub mod views;

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bftp_store::{JobStore, PgOptions, PgStore, SledStore, StoreOptions};
use tokio_util::sync::CancellationToken;

use crate::api::{identity, server};
use crate::attempt::live;
use crate::config::Config;
use crate::hosts::{policy, pool};
use crate::scheduler::retention;

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

/// The PostgreSQL store's options from `[store]`, the password read from its file.
pub fn pg_options(config: &Config) -> anyhow::Result<PgOptions> {
    let s = &config.store;
    let url = s
        .url
        .clone()
        .context("[store]: kind = \"postgres\" needs url")?;
    let mut o = PgOptions::new(url, s.node_name());
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
            let opts = pg_options(config)?;
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
    let store = store::Store::new(store);
    let secrets = {
        let (shared, path) = (store.shared().clone(), config.state_dir.join("secret.key"));
        Arc::new(
            store::off_runtime("load the key", move || {
                secrets::Secrets::open_for_store(&path, &*shared)
            })
            .await
            .context("key loading task failed")??,
        )
    };
    let admins = identity::AdminPolicy::new(config.admin_group.as_deref())?;
    let policy = policy::HostPolicy::new(&config.policy);
    let limits = config.ftp.limits()?;
    let hosts = hosts::HostLimits::with_pool(
        config.ftp.parallel_pairs,
        config.ftp.max_connections_per_host,
        pool::PoolSettings {
            max_idle: config.ftp.pool_max_idle,
            idle_timeout: config.ftp.pool_idle_timeout,
        },
        store.host_slots(),
    );
    hosts.spawn_give_way();
    let metrics = Arc::new(metrics::Metrics::new());
    let live = Arc::new(live::Live::default());
    let clock = clock::Clock::system();
    let executor = Arc::new(attempt::FtpExecutor::new(attempt::AttemptCtx {
        store: store.clone(),
        secrets: secrets.clone(),
        limits: limits.clone(),
        check: Arc::new(hosts::PolicyCheck(policy.clone())),
        hosts: hosts.clone(),
        metrics: metrics.clone(),
        live: live.clone(),
        watch_progress: config.ftp.watch_progress,
        clock: clock.clone(),
    }));
    let scheduler = scheduler::Scheduler::new(
        store.clone(),
        executor,
        metrics.clone(),
        scheduler::SchedulerLimits {
            max_running_jobs: config.scheduler.max_running_jobs,
            grace: config.scheduler.grace,
        },
        clock.clone(),
        clock::random_jitter(),
    );
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
    let mail = mail::MailSettings::new(&config.mail);
    // Built before anything is served, so a bad [mail] section stops the start.
    let postman = if config.mail.enabled {
        let mailer = bftp_mail::Mailer::new(&config.mail).context("[mail]")?;
        Some(Arc::new(mail::Postman {
            store: store.clone(),
            secrets: secrets.clone(),
            settings: mail.clone(),
            config: config.mail.clone(),
            mailer,
            scheduler: scheduler.clone(),
            wake: scheduler.finals(),
            metrics: metrics.clone(),
            clock: clock.clone(),
            jitter: clock::random_jitter(),
        }))
    } else {
        tracing::warn!("[mail] enabled = false: reports stay in the outbox, undelivered");
        None
    };
    let retention_metrics = metrics.clone();
    let tls_defaults = config.ftp.tls.defaults()?;
    let state = Arc::new(api::AppState {
        tls_defaults,
        store: store.clone(),
        mail,
        secrets,
        scheduler: scheduler.clone(),
        policy,
        limits,
        hosts: hosts.clone(),
        retry_defaults: config.retry.policy(),
        retry_bounds: config.retry_bounds.bounds(),
        metrics,
        live,
        clock: clock.clone(),
        key_file: config.state_dir.join("secret.key"),
    });
    let (admission, timeouts) = api_bounds(&config)?;
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

    let token = CancellationToken::new();
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
            token.clone(),
            API_GRACE,
        ))
    });
    let serving = tokio::spawn(server::serve(
        listener,
        api::router(state),
        admins,
        admission,
        timeouts,
        token.clone(),
        API_GRACE,
    ));
    let stop_scheduling = CancellationToken::new();
    let scheduling = tokio::spawn(scheduler.run(stop_scheduling.clone()));
    let stop_retention = CancellationToken::new();
    let retaining = tokio::spawn(
        retention::Retention {
            store: store.clone(),
            keep: config.store.keep_finished,
            clock: clock.clone(),
            metrics: retention_metrics,
        }
        .run(stop_retention.clone()),
    );
    let stop_mail = CancellationToken::new();
    let mailing = postman.map(|p| tokio::spawn(p.run(stop_mail.clone())));
    service::notify_ready();
    shutdown.await;
    service::notify_stopping();
    tracing::info!("shutting down: no new work; running attempts get their grace period");
    token.cancel();
    stop_scheduling.cancel();
    let (served, scheduled) = tokio::join!(serving, scheduling);
    served.context("API server task failed")?;
    if let Some(m) = metrics_serving {
        m.await.context("metrics listener task failed")?;
    }
    scheduled.context("scheduler task failed")?;
    stop_retention.cancel();
    retaining.await.context("retention task failed")?;
    // After the scheduler: reports of attempts that ended in the grace period still get a
    // try. A delivery in flight is cut; the report stays pending for the next start.
    stop_mail.cancel();
    if let Some(m) = mailing {
        m.await.context("postman task failed")?;
    }
    let _ = std::fs::remove_file(&config.socket);
    // Every write was durable when acknowledged: nothing is left to flush.
    drop(store);
    tracing::info!("stopped");
    Ok(())
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
