//! [`PgStore`]: the [`JobStore`](crate::JobStore) that several daemons (nodes) share, on PostgreSQL.
//!
//! The records are the same versioned JSON records as sled's (`record/`), one per row, with
//! the columns the queries need beside them (state, due time, owner, keyword hash).
//!
//! Claims and fencing:
//! - a node claims due jobs in `due` (`FOR UPDATE SKIP LOCKED`, so two nodes never wait on or
//!   take the same rows): each claimed job gets a new `epoch` and a lease (`lease_node`,
//!   `lease_until`, on the database's clock); the node keeps the epoch of each job it holds;
//! - every write of a job the node holds sets `bftp.epoch` for its transaction, and a trigger
//!   on `jobs`, `members`, `history`, `outbox` and `transcripts` refuses the write when the
//!   job's epoch is another one (SQLSTATE `BF001`, [`StoreError::LeaseLost`]): the database,
//!   not the node, decides whether a late write lands;
//! - the epoch changes whenever the holder changes: a claim, a release (the job leaves
//!   `running`), a takeover, a cancel;
//! - a heartbeat renews the leases of the node's running jobs every third of the lease; a
//!   renewal that finds another epoch marks the job lost ([`crate::Cluster::lost_leases`]);
//! - `due` first takes over `running` jobs whose lease expired: they go back to the queue,
//!   due now, and the attempt that runs them resolves their intents from evidence, as after a
//!   crash.
//!
//! Synchronous like the trait: each call runs on the store's own small tokio runtime and the
//! caller's thread waits on a channel, so a call from any thread (the daemon's blocking pool,
//! a test) neither needs nor disturbs the caller's runtime.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Timeouts, Transaction};
use tokio_postgres::{NoTls, Row};

use bftp_core::{JobState, Timestamp};

use crate::error::{BackendError, StoreError};
use crate::keys;
use crate::record::OutboxStateV1;
use crate::types::{JobId, StateFilter};
use crate::LeaseCell;

mod backup;
mod events;
mod gates;
mod hostlimits;
mod jobs;
mod lease;
mod members;
mod meta;
mod outbox;
mod reach;
mod retention;
mod schema;
mod slots;
mod sql;
mod store;
mod watches;
mod write;

pub use backup::DUMP_FILE as PG_DUMP_FILE;
use lease::{heartbeat, PRESENCE_WAIT};
pub use schema::PG_SCHEMA_VERSION;
pub use slots::PgHostSlots;
use sql::Sql;

/// The SQLSTATE the fence trigger raises for a write with a stale epoch.
const STALE_EPOCH: &str = "BF001";

/// Where the store is and how this node uses it.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// `postgres://user@host:port/db` (the libpq URL or key=value form).
    pub url: String,
    /// The password, kept out of the URL (read from a file by the daemon).
    pub password: Option<String>,
    /// Connections this node keeps at most.
    pub pool_size: usize,
    /// This node's name, unique among the live nodes: leases are held in its name, and at
    /// start it takes back the running jobs a previous life of the same name left.
    pub node: String,
    /// How long a claim lasts without a renewal; another node takes a job over once its
    /// lease has run out.
    pub lease: Duration,
    /// With nothing due, how often the node looks at the queue again (for jobs submitted on
    /// other nodes and leases that ran out).
    pub poll: Duration,
    /// Test builds only: how long a write that ends a lease waits between its commit and
    /// letting the job go, to hold open the moment the heartbeat must not take for a loss.
    #[cfg(feature = "test-hooks")]
    pub hold_before_release: Duration,
}

impl PgOptions {
    /// Whether `url` is a PostgreSQL connection string without a password in it (a password
    /// in the URL would be shown wherever the configuration is).
    pub fn check_url(url: &str) -> Result<(), String> {
        let c: tokio_postgres::Config = url
            .parse()
            .map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
        if c.get_password().is_some() {
            return Err("it holds a password; put it in password_file instead".into());
        }
        if c.get_hosts().is_empty() {
            return Err("it names no host".into());
        }
        Ok(())
    }

    /// The connection settings: the URL, with the password from the options (never from the
    /// URL, which `check_url` refuses to hold one).
    fn config(&self) -> Result<tokio_postgres::Config, StoreError> {
        let mut config: tokio_postgres::Config =
            self.url.parse().map_err(|e| StoreError::Backend {
                op: "parse the URL of",
                source: BackendError::new(e),
            })?;
        if let Some(p) = &self.password {
            config.password(p.as_bytes());
        }
        Ok(config)
    }

    pub fn new(url: impl Into<String>, node: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            password: None,
            pool_size: 8,
            node: node.into(),
            lease: Duration::from_secs(10),
            poll: Duration::from_secs(1),
            #[cfg(feature = "test-hooks")]
            hold_before_release: Duration::ZERO,
        }
    }
}

#[derive(Debug, Clone)]
struct Held {
    epoch: i64,
    lost: bool,
    /// A write that ends this node's lease (a final state, a requeue) is committing: its
    /// new epoch may show in the database before the job leaves `held`, and the heartbeat
    /// must not take that for a loss.
    releasing: bool,
    /// The lease by this node's own clock, which the job's attempt asks before each command
    /// (`bftp_core::lease`): renewed with each renewal the database confirms, lost with the
    /// job, ended when the node lets the job go.
    cell: Arc<LeaseCell>,
}

impl Held {
    /// A claim the database confirmed; `sent`: the instant before the claim was sent.
    fn new(epoch: i64, sent: Instant, lease: Duration) -> Held {
        Held {
            epoch,
            lost: false,
            releasing: false,
            cell: Arc::new(LeaseCell::held(bftp_core::lease::deadline(sent, lease))),
        }
    }
}

struct Inner {
    pool: Pool,
    node: String,
    lease: Duration,
    poll: Duration,
    /// The epoch of each job this node claimed and has not released. A lost lease stays
    /// here, with its old epoch, so that every later write for it is refused.
    held: Mutex<HashMap<JobId, Held>>,
    /// Leases found lost by the heartbeat, not yet handed to the scheduler.
    lost: Mutex<Vec<JobId>>,
    /// Jobs cancelled on another node straight from this node's hold, found by the
    /// heartbeat and let go, not yet handed to the scheduler.
    cancelled: Mutex<Vec<JobId>>,
    /// The cluster-wide connection slots' state (`slots.rs`).
    slots: slots::SlotState,
    #[cfg(feature = "test-hooks")]
    hold_before_release: Duration,
}

/// The store several bftpd nodes share, on PostgreSQL. See the module documentation.
pub struct PgStore {
    inner: Arc<Inner>,
    rt: Option<tokio::runtime::Runtime>,
    /// Where a backup's `pg_dump` connects (`pg_store/backup.rs`).
    dump: backup::DumpTarget,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("node", &self.inner.node)
            .finish_non_exhaustive()
    }
}

fn pg(op: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| {
        if let Some(db) = e.as_db_error() {
            if db.code().code() == STALE_EPOCH {
                return StoreError::LeaseLost {
                    op,
                    detail: db.message().to_string(),
                };
            }
        }
        if let Some(reason) = reach::unreachable(&e) {
            return StoreError::Unreachable { op, reason };
        }
        StoreError::Backend {
            op,
            source: BackendError::new(e),
        }
    }
}

fn pool_err(op: &'static str) -> impl Fn(deadpool_postgres::PoolError) -> StoreError {
    move |e| match reach::pool_unreachable(&e) {
        Some(reason) => StoreError::Unreachable { op, reason },
        None => StoreError::Backend {
            op,
            source: BackendError::new(e),
        },
    }
}

/// The store's runtime could not start.
fn runtime_failed(source: std::io::Error) -> StoreError {
    StoreError::Io {
        op: "start the runtime of",
        path: "the PostgreSQL store".into(),
        source,
    }
}

fn ms(t: Timestamp) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn id_of(id: JobId) -> i64 {
    i64::try_from(id.0).unwrap_or(i64::MAX)
}

fn job_id(row: &Row, col: usize) -> JobId {
    JobId(row.get::<_, i64>(col).max(0) as u64)
}

fn state_code(s: &JobState) -> i16 {
    i16::from(keys::state_code(StateFilter::of(s)))
}

fn due_at(s: &JobState) -> Option<i64> {
    match s {
        JobState::Queued { next_attempt_at } => Some(ms(*next_attempt_at)),
        _ => None,
    }
}

fn outbox_code(s: OutboxStateV1) -> i16 {
    match s {
        OutboxStateV1::Pending => 0,
        OutboxStateV1::Delivered => 1,
        OutboxStateV1::GaveUp => 2,
    }
}

fn lease_interval(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl PgStore {
    /// Connects, applies the migrations this database lacks (one node at a time, under an
    /// advisory lock) and starts the heartbeat. A database with a newer schema than this
    /// program knows is `SchemaTooNew`.
    pub fn open(opts: PgOptions) -> Result<PgStore, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bftp-pg")
            .enable_all()
            .build()
            .map_err(runtime_failed)?;
        let config = opts.config()?;
        let dump_target = backup::DumpTarget {
            url: opts.url.clone(),
            password: opts.password.clone(),
        };
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = rt
            .block_on(async {
                Pool::builder(manager)
                    .max_size(opts.pool_size.max(1))
                    .runtime(deadpool_postgres::Runtime::Tokio1)
                    .timeouts(Timeouts {
                        wait: Some(Duration::from_secs(30)),
                        create: Some(Duration::from_secs(10)),
                        recycle: Some(Duration::from_secs(5)),
                    })
                    .build()
            })
            .map_err(|e| StoreError::Backend {
                op: "open",
                source: BackendError::new(e),
            })?;
        let inner = Arc::new(Inner {
            pool,
            node: opts.node,
            lease: opts.lease,
            poll: opts.poll,
            held: Mutex::new(HashMap::new()),
            lost: Mutex::new(Vec::new()),
            cancelled: Mutex::new(Vec::new()),
            slots: Default::default(),
            #[cfg(feature = "test-hooks")]
            hold_before_release: opts.hold_before_release,
        });
        let store = PgStore {
            inner: inner.clone(),
            rt: Some(rt),
            dump: dump_target,
        };
        store.run({
            let inner = inner.clone();
            async move { inner.migrate().await }
        })?;
        if let Some(rt) = &store.rt {
            let (tx, rx) = tokio::sync::oneshot::channel();
            rt.spawn(slots::presence(inner.clone(), config.clone(), tx));
            // A node takes connection slots only once others can see it alive.
            let held = rt.block_on(async { tokio::time::timeout(PRESENCE_WAIT, rx).await });
            if !matches!(held, Ok(Ok(()))) {
                return Err(StoreError::NotDurable {
                    op: "open",
                    reason: format!(
                        "node {} is not alone with its name: its presence lock stayed taken \
                         (or the database did not answer) for {PRESENCE_WAIT:?}",
                        inner.node
                    ),
                });
            }
        }
        store.run({
            let inner = inner.clone();
            async move { inner.forget_previous_slots().await }
        })?;
        if let Some(rt) = &store.rt {
            rt.spawn(heartbeat(inner, config));
        }
        Ok(store)
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// Runs `f` on the store's runtime and waits for it on this thread.
    fn run<T: Send + 'static>(
        &self,
        f: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let Some(rt) = &self.rt else {
            return Err(StoreError::NotDurable {
                op: "call",
                reason: "the store is closed".into(),
            });
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(f.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(StoreError::Panicked {
                op: "call",
                message: "the store's task ended without an answer".into(),
            })
        })
    }

    fn with<T: Send + 'static, F>(&self, f: impl FnOnce(Arc<Inner>) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run(f(self.inner.clone()))
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Inner {
    async fn client(&self, op: &'static str) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err(op))
    }

    /// Begins a write of job `id`: carries this node's epoch when it holds the job.
    async fn begin<'a>(
        &self,
        c: &'a mut deadpool_postgres::Object,
        op: &'static str,
        id: Option<JobId>,
    ) -> Result<Transaction<'a>, StoreError> {
        let tx = c.transaction().await.map_err(pg(op))?;
        if let Some(epoch) = id.and_then(|id| self.epoch_of(id)) {
            tx.exec(
                op,
                "SELECT set_config('bftp.epoch', $1, true)",
                &[&epoch.to_string()],
            )
            .await?;
        }
        Ok(tx)
    }
}
