//! The one door to the store. Every store call of the daemon goes through [`Store::call`]
//! (or, for the cluster's host slots and a backup's files, [`off_runtime`]): it runs on the
//! blocking pool, because a write waits for its fsync (sled) or its database round trip
//! (PostgreSQL behind the blocking trait), inside the caller's tracing span, so the store's
//! log lines carry the job id; and a call that panicked comes back as
//! [`StoreError::Panicked`], never as a panic of the caller's task.
//!
//! Nothing else in bftpd calls `spawn_blocking` on the store.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bftp_store::{JobStore, PgOptions, PgStore, SledStore, StoreError, StoreOptions};

use crate::config::{self, Config};
use crate::service;

/// A shared handle on the job store. Derefs to the store for its in-memory accessors
/// (`lease`, `host_slots`, `node`, ...), which never wait.
#[derive(Clone)]
pub struct Store(Arc<dyn JobStore>);

impl Store {
    pub fn new(store: Arc<dyn JobStore>) -> Store {
        Store(store)
    }

    /// The store itself, for a caller that hands it to a blocking function.
    pub fn shared(&self) -> &Arc<dyn JobStore> {
        &self.0
    }

    /// Runs `f` on the store off the runtime's workers, in the caller's span.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.0.clone();
        off_runtime("store call", move || f(&*store)).await?
    }
}

impl Deref for Store {
    type Target = dyn JobStore;

    fn deref(&self) -> &(dyn JobStore + 'static) {
        &*self.0
    }
}

impl From<Arc<dyn JobStore>> for Store {
    fn from(store: Arc<dyn JobStore>) -> Store {
        Store(store)
    }
}

/// Runs blocking store work that is not one `JobStore` call (the cluster's host slots, a
/// backup writing its files) off the runtime's workers, in the caller's span; a panic of
/// `f` comes back as [`StoreError::Panicked`] naming `op`.
pub async fn off_runtime<T: Send + 'static>(
    op: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| StoreError::Panicked {
            op,
            message: e.to_string(),
        })
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
pub(crate) async fn open(
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
                off_runtime("open the store", move || SledStore::open(&store_dir, opts))
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
                let opened = off_runtime("open the store", move || PgStore::open(o))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_answers_and_a_panic_comes_back_as_an_error() {
        let (_dir, store) = crate::testkit::store();
        let store = Store::new(store);
        assert!(store.call(|s| s.is_empty()).await.unwrap());
        let err = store
            .call(|_| -> Result<(), StoreError> { panic!("boom") })
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Panicked {
                    op: "store call",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_start_waits_for_the_database_one_second_then_doubling_up_to_thirty() {
        let s = Duration::from_secs;
        let delays: Vec<Duration> = (1..=8).map(store_retry_delay).collect();
        assert_eq!(delays, [s(1), s(2), s(4), s(8), s(16), s(30), s(30), s(30)]);
        assert_eq!(store_retry_delay(u32::MAX), s(30));
        assert_eq!(store_retry_delay(0), s(1));
    }
}
