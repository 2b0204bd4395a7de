//! [`PgStore`]: the [`JobStore`] that several daemons (nodes) share, on PostgreSQL.
//!
//! The records are the same versioned JSON records as sled's (`record.rs`), one per row, with
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
//!   renewal that finds another epoch marks the job lost ([`JobStore::lost_leases`]);
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

use bftp_core::refusal::{observe, RefusalKey, RefusalMemory, Sighting};
use bftp_core::{JobEvent, JobState, MemberState, Timestamp};

use crate::error::{BackendError, StoreError};
use crate::keys;
use crate::plan::{self, Listing, Plan};
use crate::record::{
    decode, encode, job_to_api, HistoryV1, JobV1, MemberV1, OutboxStateV1, OutboxV1, RefusalV1,
    TranscriptV1, RECORD_VERSION,
};
use crate::types::{
    AttemptTranscript, DeliveryTry, HistoryEvent, Job, JobFilter, JobId, Member, MemberUpdate,
    NewJob, NewMember, OutboxEntry, StateCounts, StateFilter, Submitted, Walk,
};
use crate::{HostSlots, JobStore, LeaseCell};

mod backup;
mod reach;
mod retention;
mod slots;
pub use backup::DUMP_FILE as PG_DUMP_FILE;
pub use slots::PgHostSlots;

/// The schema migrations, in order; the database records the highest one applied in
/// `bftp_schema`. Never edit one that shipped: add the next.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        r#"
CREATE TABLE bftp_meta (key text PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    owner bigint NOT NULL,
    keyword bytea,
    state smallint NOT NULL,
    due_at bigint,
    rec bytea NOT NULL,
    epoch bigint NOT NULL DEFAULT 0,
    lease_node text,
    lease_until timestamptz
);
CREATE INDEX jobs_due ON jobs (due_at, id) WHERE state = 1;
CREATE INDEX jobs_owner ON jobs (owner, id);
CREATE INDEX jobs_keyword ON jobs (keyword, id) WHERE keyword IS NOT NULL;
CREATE INDEX jobs_state ON jobs (state, id);
CREATE TABLE members (
    job bigint NOT NULL REFERENCES jobs (id),
    idx integer NOT NULL,
    rec bytea NOT NULL,
    PRIMARY KEY (job, idx)
);
CREATE TABLE history (
    job bigint NOT NULL REFERENCES jobs (id),
    seq integer NOT NULL,
    rec bytea NOT NULL,
    PRIMARY KEY (job, seq)
);
CREATE TABLE requests (
    key_hash bytea PRIMARY KEY,
    job bigint REFERENCES jobs (id),
    fingerprint bytea NOT NULL
);
CREATE TABLE outbox (
    job bigint PRIMARY KEY REFERENCES jobs (id),
    state smallint NOT NULL,
    next_at bigint,
    rec bytea NOT NULL,
    claim_node text,
    claim_until timestamptz
);
CREATE INDEX outbox_due ON outbox (next_at, job) WHERE state = 0;
CREATE TABLE transcripts (job bigint PRIMARY KEY REFERENCES jobs (id), rec bytea NOT NULL);
CREATE TABLE refusals (key bytea PRIMARY KEY, rec bytea NOT NULL);
"#,
    ),
    (
        2,
        r#"
CREATE FUNCTION bftp_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    want text := current_setting('bftp.epoch', true);
    cur bigint;
    jid bigint;
BEGIN
    IF want IS NULL OR want = '' THEN
        RETURN COALESCE(NEW, OLD);
    END IF;
    IF TG_TABLE_NAME = 'jobs' THEN
        cur := OLD.epoch;
        jid := OLD.id;
    ELSE
        IF TG_OP = 'DELETE' THEN jid := OLD.job; ELSE jid := NEW.job; END IF;
        SELECT epoch INTO cur FROM jobs WHERE id = jid FOR SHARE;
    END IF;
    IF cur IS DISTINCT FROM want::bigint THEN
        RAISE EXCEPTION 'stale lease epoch % for job % (its epoch is %)', want, jid, cur
            USING ERRCODE = 'BF001';
    END IF;
    RETURN COALESCE(NEW, OLD);
END $$;
CREATE TRIGGER jobs_fence BEFORE UPDATE OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION bftp_fence();
CREATE TRIGGER members_fence BEFORE INSERT OR UPDATE OR DELETE ON members
    FOR EACH ROW EXECUTE FUNCTION bftp_fence();
CREATE TRIGGER history_fence BEFORE INSERT OR UPDATE OR DELETE ON history
    FOR EACH ROW EXECUTE FUNCTION bftp_fence();
CREATE TRIGGER outbox_fence BEFORE INSERT OR UPDATE OR DELETE ON outbox
    FOR EACH ROW EXECUTE FUNCTION bftp_fence();
CREATE TRIGGER transcripts_fence BEFORE INSERT OR UPDATE OR DELETE ON transcripts
    FOR EACH ROW EXECUTE FUNCTION bftp_fence();
"#,
    ),
    (3, slots::MIGRATION),
    (4, slots::NAMES_MIGRATION),
    (5, retention::MIGRATION),
];

/// The schema version this code writes: the last migration.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

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
            .map_err(|source| StoreError::Io {
                op: "start the runtime of",
                path: "the PostgreSQL store".into(),
                source,
            })?;
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

    /// The schema version the database at `url` has (0: none yet), without changing it.
    pub fn schema_version_at(opts: &PgOptions) -> Result<i32, StoreError> {
        let config = opts.config()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io {
                op: "start the runtime of",
                path: "the PostgreSQL store".into(),
                source,
            })?;
        rt.block_on(async {
            let (client, conn) =
                tokio::time::timeout(Duration::from_secs(10), config.connect(NoTls))
                    .await
                    .map_err(|_| StoreError::Backend {
                        op: "connect to",
                        source: BackendError::new(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "no answer within 10 s",
                        )),
                    })?
                    .map_err(pg("connect to"))?;
            tokio::spawn(conn);
            let exists: bool = client
                .query_one("SELECT to_regclass('bftp_schema') IS NOT NULL", &[])
                .await
                .map_err(pg("read the schema version of"))?
                .get(0);
            if !exists {
                return Ok(0);
            }
            let v: Option<i32> = client
                .query_one("SELECT max(version) FROM bftp_schema", &[])
                .await
                .map_err(pg("read the schema version of"))?
                .get(0);
            Ok(v.unwrap_or(0))
        })
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

/// How long `open` waits for this node's presence lock (a killed previous life's session
/// ends within moments).
const PRESENCE_WAIT: Duration = Duration::from_secs(10);

/// Renews the node's lease and the leases of its running jobs every third of the lease, on a
/// connection of its own: a pool busy with long transactions (or exhausted) must not make a
/// live node's leases run out. All of the node's job leases are renewed by one statement, and
/// a renewal that comes later than a third of the lease after the last one is logged with its
/// delay, so a lost lease can be told apart from a stalled node.
async fn heartbeat(inner: Arc<Inner>, config: tokio_postgres::Config) {
    let every = (inner.lease / 3).max(Duration::from_millis(100));
    let mut conn: Option<tokio_postgres::Client> = None;
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            conn = connect_for_heartbeat(&config).await;
        }
        let Some(client) = &conn else {
            tracing::warn!("cannot renew leases: the database is unreachable");
            continue;
        };
        inner.renew_node(client).await;
        let held: Vec<(JobId, i64)> = inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|(id, h)| (*id, h.epoch))
            .collect();
        if held.is_empty() {
            last_renewal = tokio::time::Instant::now();
            continue;
        }
        let late = last_renewal.elapsed().saturating_sub(every);
        if late > every {
            tracing::warn!(
                late_ms = late.as_millis() as u64,
                lease_ms = inner.lease.as_millis() as u64,
                "renewing leases later than planned (this node or its database is stalled)"
            );
        }
        let ids: Vec<i64> = held.iter().map(|(id, _)| id_of(*id)).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, e)| *e).collect();
        // The database's new lease runs from its `now()`, later than this: a renewal
        // confirmed gives this node's own deadline from here (`bftp_core::lease`).
        let sent = Instant::now();
        // A queued job claimed by `due` and not started yet is not renewed: its claim runs out
        // by itself if the node does not start it. A lease that already ran out is not renewed
        // either: another node may be taking the job over right now. The jobs not renewed are
        // read in the same statement, from one snapshot: a job started (or finished) by this
        // node between a renewal and a later look must not pass for lost.
        let seen = client
            .query(
                "WITH h AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS h(id, epoch)),
                 r AS (UPDATE jobs j SET lease_until = now() + make_interval(secs => $4)
                       FROM h
                       WHERE j.id = h.id AND j.epoch = h.epoch AND j.lease_node = $3
                         AND j.state = 2 AND j.lease_until > now()
                       RETURNING j.id)
                 SELECT h.id, h.epoch, j.state, j.epoch,
                        COALESCE(j.lease_until > now(), false)
                 FROM h LEFT JOIN jobs j ON j.id = h.id
                 WHERE h.id NOT IN (SELECT id FROM r)",
                &[&ids, &epochs, &inner.node, &lease_interval(inner.lease)],
            )
            .await;
        let seen = match seen {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew leases");
                conn = None;
                continue;
            }
        };
        let since_renewal = last_renewal.elapsed();
        last_renewal = tokio::time::Instant::now();
        let not_renewed: Vec<JobId> = seen.iter().map(|r| job_id(r, 0)).collect();
        inner.renewed(
            held.iter()
                .filter(|(id, _)| !not_renewed.contains(id))
                .map(|(id, epoch)| (*id, *epoch)),
            bftp_core::lease::deadline(sent, inner.lease),
        );
        for r in &seen {
            let (id, held) = (job_id(r, 0), r.get::<_, i64>(1));
            let now = Seen {
                state: r.get(2),
                epoch: r.get(3),
                lease_alive: r.get(4),
            };
            match lease_end(held, &now) {
                None => {}
                Some(LeaseEnd::Lost) => inner.mark_lost(id, held, &now, since_renewal),
                Some(LeaseEnd::CancelledHere) => inner.mark_cancelled(id, held),
            }
        }
    }
}

/// What the heartbeat read of a job it holds and did not renew: the job's state code and
/// epoch (`None`: the job is gone) and whether its lease still runs.
#[derive(Debug, Clone, Copy)]
struct Seen {
    state: Option<i16>,
    epoch: Option<i64>,
    lease_alive: bool,
}

/// How a node's hold on a job ended, as the heartbeat saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseEnd {
    /// Another node may hold the job (or it is gone): stop as at shutdown, touch nothing.
    Lost,
    /// Cancelled on another node straight from this node's hold: nobody else ran it since,
    /// so what the attempt left on the destination is its own, and it stops as a local
    /// cancel does, cleaning up (RULES.md §6).
    CancelledHere,
}

/// Whether a node that holds a job at epoch `held` has lost it, from what the heartbeat saw
/// of it. The one rule for it:
/// - cancelled at the epoch after ours: the cancel came straight from our hold (a cancel
///   moves the epoch on by one; a takeover by two, its requeue and its claim): cancelled here;
/// - another epoch (someone took the job over, or cancelled it after), or no job: lost;
/// - queued at our epoch: a claim not started yet, which runs out by itself: kept;
/// - running at our epoch with a live lease: kept (started after the renewal's look);
/// - running at our epoch whose lease ran out: lost, another node may be taking it over;
/// - final at our epoch cannot happen (a final write moves the epoch on): lost.
fn lease_end(held: i64, seen: &Seen) -> Option<LeaseEnd> {
    if seen.state == Some(4) && seen.epoch == held.checked_add(1) {
        return Some(LeaseEnd::CancelledHere);
    }
    if seen.epoch != Some(held) {
        return Some(LeaseEnd::Lost);
    }
    match seen.state {
        Some(1) => None,
        Some(2) if seen.lease_alive => None,
        _ => Some(LeaseEnd::Lost),
    }
}

/// The heartbeat's own connection, or `None` (logged) when the database cannot be reached.
async fn connect_for_heartbeat(config: &tokio_postgres::Config) -> Option<tokio_postgres::Client> {
    match tokio::time::timeout(Duration::from_secs(5), config.connect(NoTls)).await {
        Ok(Ok((client, connection))) => {
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "the heartbeat's connection ended");
                }
            });
            Some(client)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot connect to renew leases");
            None
        }
        Err(_) => {
            tracing::warn!("cannot connect to renew leases: no answer within 5 s");
            None
        }
    }
}

impl Inner {
    /// Marks the lease on `id` at `epoch` lost, unless this node moved the epoch on itself
    /// and has not released the job yet ([`Held::releasing`]). `seen` and `since_renewal` are
    /// logged, to tell a late renewal from a job taken over or cancelled elsewhere.
    fn mark_lost(&self, id: JobId, epoch: i64, seen: &Seen, since_renewal: Duration) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&id) {
            if h.epoch == epoch && !h.lost && !h.releasing {
                h.lost = true;
                h.cell.lose();
                tracing::warn!(
                    job = id.0,
                    epoch,
                    seen_state = seen.state,
                    seen_epoch = seen.epoch,
                    lease_alive = seen.lease_alive,
                    since_renewal_ms = since_renewal.as_millis() as u64,
                    "lease lost: another node took the job over or it was cancelled elsewhere"
                );
                self.lost.lock().unwrap_or_else(|p| p.into_inner()).push(id);
            }
        }
    }

    /// Renewals the database confirmed (`(job, epoch)` as sent) move each job's own deadline
    /// on to `deadline`.
    fn renewed(&self, jobs: impl Iterator<Item = (JobId, i64)>, deadline: Instant) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for (id, epoch) in jobs {
            if let Some(h) = held.get(&id).filter(|h| h.epoch == epoch && !h.lost) {
                h.cell.renew(deadline);
            }
        }
    }

    /// The job held at `epoch` was cancelled on another node straight from this node's
    /// hold: let go (later writes carry no epoch, as after this node's own cancel: the
    /// attempt's clean-up is recorded), and handed to the scheduler, which stops the attempt
    /// as a cancel. Not while this node's own write is ending the lease.
    fn mark_cancelled(&self, id: JobId, epoch: i64) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = held.get(&id) else {
            return;
        };
        if h.epoch != epoch || h.lost || h.releasing {
            return;
        }
        h.cell.end();
        held.remove(&id);
        tracing::info!(
            job = id.0,
            epoch,
            "the job was cancelled on another node: stopping this node's attempt as a cancel"
        );
        self.cancelled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
    }

    /// Commits a write that ends this node's lease on `id` (its epoch moves on) and lets the
    /// job go. From before the commit until the job has left `held`, the heartbeat sees the
    /// new epoch as this node's own doing, not as a loss; a failed commit changed nothing.
    async fn commit_release(
        &self,
        tx: Transaction<'_>,
        op: &'static str,
        id: JobId,
    ) -> Result<(), StoreError> {
        self.set_releasing(id, true);
        match tx.commit().await {
            Ok(()) => {
                #[cfg(feature = "test-hooks")]
                tokio::time::sleep(self.hold_before_release).await;
                self.release(id);
                Ok(())
            }
            Err(e) => {
                self.set_releasing(id, false);
                Err(reach::commit_failed(op)(e))
            }
        }
    }

    fn set_releasing(&self, id: JobId, on: bool) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&id) {
            h.releasing = on;
        }
    }

    fn epoch_of(&self, id: JobId) -> Option<i64> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .map(|h| h.epoch)
    }

    fn release(&self, id: JobId) {
        let gone = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Some(h) = gone {
            h.cell.end();
        }
    }

    async fn client(&self, op: &'static str) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err(op))
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut c = self.client("migrate").await?;
        let tx = c.transaction().await.map_err(pg("migrate"))?;
        // One node migrates at a time; the others wait here and find the work done.
        tx.execute(
            &tx.prepare_cached("SELECT pg_advisory_xact_lock(4242020215)")
                .await
                .map_err(pg("prepare"))?,
            &[],
        )
        .await
        .map_err(pg("migrate"))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS bftp_schema (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(pg("migrate"))?;
        let have: i32 = tx
            .query_one(
                &tx.prepare_cached("SELECT coalesce(max(version), 0) FROM bftp_schema")
                    .await
                    .map_err(pg("prepare"))?,
                &[],
            )
            .await
            .map_err(pg("migrate"))?
            .get(0);
        if have > PG_SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found: have.max(0) as u32,
                supported: PG_SCHEMA_VERSION as u32,
            });
        }
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > have) {
            tx.batch_execute(sql).await.map_err(pg("migrate"))?;
            tx.execute(
                &tx.prepare_cached("INSERT INTO bftp_schema (version) VALUES ($1)")
                    .await
                    .map_err(pg("prepare"))?,
                &[version],
            )
            .await
            .map_err(pg("migrate"))?;
            tracing::info!(
                version,
                "applied a schema migration of the PostgreSQL store"
            );
        }
        tx.commit().await.map_err(pg("migrate"))
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
            tx.execute(
                &tx.prepare_cached("SELECT set_config('bftp.epoch', $1, true)")
                    .await
                    .map_err(pg("prepare"))?,
                &[&epoch.to_string()],
            )
            .await
            .map_err(pg(op))?;
        }
        Ok(tx)
    }
}

async fn tx_job(tx: &Transaction<'_>, op: &'static str, id: JobId) -> Result<JobV1, StoreError> {
    let row = tx
        .query_opt(
            &tx.prepare_cached("SELECT rec FROM jobs WHERE id = $1 FOR UPDATE")
                .await
                .map_err(pg("prepare"))?,
            &[&id_of(id)],
        )
        .await
        .map_err(pg(op))?;
    match row {
        Some(r) => decode("job", &keys::job(id), r.get::<_, &[u8]>(0)),
        None => Err(StoreError::NotFound(id)),
    }
}

/// Writes the job row; the write of a job that leaves `running` (or `queued` with a claim)
/// also ends its lease and moves its epoch on. Must be the transaction's last write of the
/// job: a later one would carry the old epoch.
async fn tx_put_job(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    rec: &JobV1,
    release: bool,
) -> Result<(), StoreError> {
    let state = rec.state.to_api();
    let sql = if release {
        "UPDATE jobs SET rec = $2, state = $3, due_at = $4,
             epoch = epoch + 1, lease_node = NULL, lease_until = NULL WHERE id = $1"
    } else {
        "UPDATE jobs SET rec = $2, state = $3, due_at = $4 WHERE id = $1"
    };
    tx.execute(
        sql,
        &[
            &id_of(id),
            &encode(rec),
            &state_code(&state),
            &due_at(&state),
        ],
    )
    .await
    .map_err(pg(op))?;
    Ok(())
}

/// Writes `plan` for job `id` (`plan.rs`), all but the job's row: the pending members
/// settled, the new members (`members`) inserted, the report put in the outbox, the history
/// entries. The caller writes the row last ([`tx_put_job`]), after its own lease changes.
async fn tx_write(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    plan: &Plan,
    members: &[NewMember],
    now: Timestamp,
) -> Result<(), StoreError> {
    if let Some(to) = plan.settle {
        tx_settle_pending(tx, op, id, plan.rec.members, to, None, now).await?;
    }
    if let Some(start) = plan.append_at {
        tx_insert_members(tx, op, id, start, members, now).await?;
    }
    if let Some(report) = &plan.report {
        tx_outbox_new(tx, op, id, report).await?;
    }
    for (seq, h) in &plan.history {
        tx.execute(
            &tx.prepare_cached("INSERT INTO history (job, seq, rec) VALUES ($1, $2, $3)")
                .await
                .map_err(pg("prepare"))?,
            &[&id_of(id), &(*seq as i32), &encode(h)],
        )
        .await
        .map_err(pg(op))?;
    }
    Ok(())
}

async fn tx_member(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    index: u32,
) -> Result<Option<MemberV1>, StoreError> {
    let row = tx
        .query_opt(
            &tx.prepare_cached("SELECT rec FROM members WHERE job = $1 AND idx = $2")
                .await
                .map_err(pg("prepare"))?,
            &[&id_of(id), &(index as i32)],
        )
        .await
        .map_err(pg(op))?;
    match row {
        Some(r) => decode("member", &keys::member(id, index), r.get::<_, &[u8]>(0)).map(Some),
        None => Ok(None),
    }
}

async fn tx_put_member(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    index: u32,
    m: &MemberV1,
) -> Result<(), StoreError> {
    tx.execute(
        &tx.prepare_cached("UPDATE members SET rec = $3 WHERE job = $1 AND idx = $2")
            .await
            .map_err(pg("prepare"))?,
        &[&id_of(id), &(index as i32), &encode(m)],
    )
    .await
    .map_err(pg(op))?;
    Ok(())
}

async fn tx_insert_members(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    start: u32,
    members: &[NewMember],
    now: Timestamp,
) -> Result<(), StoreError> {
    for chunk in (0..members.len()).collect::<Vec<_>>().chunks(10_000) {
        let idx: Vec<i32> = chunk.iter().map(|i| (start as usize + *i) as i32).collect();
        let recs: Vec<Vec<u8>> = chunk
            .iter()
            .map(|i| encode(&MemberV1::new(&members[*i], now)))
            .collect();
        tx.execute(&tx.prepare_cached("INSERT INTO members (job, idx, rec) SELECT $1, i, r FROM unnest($2::int4[], $3::bytea[]) AS u(i, r)").await.map_err(pg("prepare"))?,
            &[&id_of(id), &idx, &recs],
        )
        .await
        .map_err(pg(op))?;
    }
    Ok(())
}

/// Every pending member of the job becomes `to`; returns the states of all members after.
async fn tx_settle_pending(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    count: u32,
    to: MemberState,
    detail: Option<&str>,
    now: Timestamp,
) -> Result<Vec<MemberState>, StoreError> {
    let rows = tx
        .query(
            &tx.prepare_cached("SELECT idx, rec FROM members WHERE job = $1 ORDER BY idx")
                .await
                .map_err(pg("prepare"))?,
            &[&id_of(id)],
        )
        .await
        .map_err(pg(op))?;
    if rows.len() != count as usize {
        return Err(keys::corrupt_key(
            "member",
            &keys::job(id),
            format!("{} members found: the job has {count}", rows.len()),
        ));
    }
    let mut all = Vec::with_capacity(rows.len());
    for r in rows {
        let index = r.get::<_, i32>(0) as u32;
        let mut m: MemberV1 = decode("member", &keys::member(id, index), r.get::<_, &[u8]>(1))?;
        if plan::settle(&mut m, to, detail, now) {
            tx_put_member(tx, op, id, index, &m).await?;
        }
        all.push(m.state.to_api());
    }
    Ok(all)
}

async fn tx_outbox_new(
    tx: &Transaction<'_>,
    op: &'static str,
    id: JobId,
    rec: &OutboxV1,
) -> Result<(), StoreError> {
    tx.execute(
        &tx.prepare_cached(
            "INSERT INTO outbox (job, state, next_at, rec) VALUES ($1, $2, $3, $4)
         ON CONFLICT (job) DO UPDATE SET state = $2, next_at = $3, rec = $4,
             claim_node = NULL, claim_until = NULL",
        )
        .await
        .map_err(pg("prepare"))?,
        &[
            &id_of(id),
            &outbox_code(rec.state),
            &rec.next.map(|n| n as i64),
            &encode(rec),
        ],
    )
    .await
    .map_err(pg(op))?;
    Ok(())
}

fn decode_job_row(row: &Row) -> Result<Job, StoreError> {
    let id = job_id(row, 0);
    job_to_api(id, &decode("job", &keys::job(id), row.get::<_, &[u8]>(1))?)
}

fn decode_outbox_row(row: &Row) -> Result<OutboxEntry, StoreError> {
    let id = job_id(row, 0);
    decode::<OutboxV1>("outbox", &keys::job(id), row.get::<_, &[u8]>(1))?.to_api(id)
}

impl Inner {
    async fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        const OP: &str = "submit";
        let count = plan::member_count(job.members.len())?;
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        if let Some(rk) = &job.request {
            // The key's row first: a second submit of the key, on any node, waits here for
            // the first one's transaction and then finds its job.
            let inserted = tx
                .execute(
                    &tx.prepare_cached(
                        "INSERT INTO requests (key_hash, job, fingerprint) VALUES ($1, NULL, $2)
                     ON CONFLICT (key_hash) DO NOTHING",
                    )
                    .await
                    .map_err(pg("prepare"))?,
                    &[&&rk.key_hash.0[..], &&rk.fingerprint.0[..]],
                )
                .await
                .map_err(pg(OP))?;
            if inserted == 0 {
                let row = tx
                    .query_one(
                        &tx.prepare_cached(
                            "SELECT r.job, r.fingerprint, j.rec FROM requests r
                         LEFT JOIN jobs j ON j.id = r.job WHERE r.key_hash = $1",
                        )
                        .await
                        .map_err(pg("prepare"))?,
                        &[&&rk.key_hash.0[..]],
                    )
                    .await
                    .map_err(pg(OP))?;
                let existing = row.get::<_, Option<i64>>(0).map(|j| JobId(j.max(0) as u64));
                let fp: &[u8] = row.get(1);
                let Some(existing) = existing else {
                    return Err(keys::corrupt_key("request", &rk.key_hash.0, "names no job"));
                };
                if fp != rk.fingerprint.0 {
                    return Err(StoreError::RequestKeyConflict { job: existing });
                }
                let rec: Option<&[u8]> = row.get(2);
                let Some(rec) = rec else {
                    return Err(keys::corrupt_key(
                        "request",
                        &rk.key_hash.0,
                        format!("names job {existing}, which does not exist"),
                    ));
                };
                let rec: JobV1 = decode("job", &keys::job(existing), rec)?;
                return Ok(Submitted::Existing(job_to_api(existing, &rec)?));
            }
        }
        let plan = plan::submit(&job, count);
        let state = plan.state();
        let id = tx
            .query_one(&tx.prepare_cached("INSERT INTO jobs (owner, keyword, state, due_at, rec) VALUES ($1, $2, $3, $4, $5)
                 RETURNING id").await.map_err(pg("prepare"))?,
                &[
                    &i64::from(job.owner_uid),
                    &job.keyword_hash.as_ref().map(|h| h.0.to_vec()),
                    &state_code(&state),
                    &due_at(&state),
                    &encode(&plan.rec),
                ],
            )
            .await
            .map_err(pg(OP))?;
        let id = job_id(&id, 0);
        if let Some(rk) = &job.request {
            tx.execute(
                &tx.prepare_cached("UPDATE requests SET job = $2 WHERE key_hash = $1")
                    .await
                    .map_err(pg("prepare"))?,
                &[&&rk.key_hash.0[..], &id_of(id)],
            )
            .await
            .map_err(pg(OP))?;
        }
        tx_write(&tx, OP, id, &plan, &job.members, job.created_at).await?;
        tx_put_job(&tx, OP, id, &plan.rec, false).await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok(Submitted::Created(job_to_api(id, &plan.rec)?))
    }

    async fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let c = self.client("get").await?;
        let row = c
            .query_opt(
                &c.prepare_cached("SELECT id, rec FROM jobs WHERE id = $1")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg("get"))?;
        row.as_ref().map(decode_job_row).transpose()
    }

    async fn list_after(
        &self,
        filter: JobFilter,
        after: Option<JobId>,
    ) -> Result<Vec<Job>, StoreError> {
        let limit = filter.limit.map_or(i64::MAX, |l| l as i64);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let c = self.client("list").await?;
        let state = filter.state.map(|s| i16::from(keys::state_code(s)));
        let rows = c
            .query(
                &c.prepare_cached(
                    "SELECT id, rec FROM jobs
                 WHERE id > $1
                   AND ($2::bigint IS NULL OR owner = $2)
                   AND ($3::bytea IS NULL OR keyword = $3)
                   AND ($4::smallint IS NULL OR state = $4)
                 ORDER BY id LIMIT $5",
                )
                .await
                .map_err(pg("prepare"))?,
                &[
                    &after.map_or(0, id_of),
                    &filter.owner.map(i64::from),
                    &filter.keyword_hash.map(|h| h.0.to_vec()),
                    &state,
                    &limit,
                ],
            )
            .await
            .map_err(pg("list"))?;
        rows.iter().map(decode_job_row).collect()
    }

    async fn require_job(
        &self,
        c: &deadpool_postgres::Object,
        op: &'static str,
        id: JobId,
    ) -> Result<(), StoreError> {
        let row = c
            .query_opt(
                &c.prepare_cached("SELECT 1 FROM jobs WHERE id = $1")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg(op))?;
        if row.is_none() {
            return Err(StoreError::NotFound(id));
        }
        Ok(())
    }

    async fn history(&self, id: JobId) -> Result<Vec<HistoryEvent>, StoreError> {
        let c = self.client("history").await?;
        self.require_job(&c, "history", id).await?;
        let rows = c
            .query(
                &c.prepare_cached("SELECT seq, rec FROM history WHERE job = $1 ORDER BY seq")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg("history"))?;
        rows.iter()
            .map(|r| {
                let seq = r.get::<_, i32>(0) as u32;
                Ok(
                    decode::<HistoryV1>("history", &keys::history(id, seq), r.get::<_, &[u8]>(1))?
                        .to_api(),
                )
            })
            .collect()
    }

    async fn members(&self, id: JobId) -> Result<Vec<Member>, StoreError> {
        let c = self.client("members").await?;
        self.require_job(&c, "members", id).await?;
        let rows = c
            .query(
                &c.prepare_cached("SELECT idx, rec FROM members WHERE job = $1 ORDER BY idx")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg("members"))?;
        rows.iter()
            .map(|r| {
                let index = r.get::<_, i32>(0) as u32;
                Ok(
                    decode::<MemberV1>("member", &keys::member(id, index), r.get::<_, &[u8]>(1))?
                        .to_api(index),
                )
            })
            .collect()
    }

    async fn members_page(
        &self,
        id: JobId,
        from: u32,
        limit: usize,
    ) -> Result<Vec<Member>, StoreError> {
        let c = self.client("members").await?;
        self.require_job(&c, "members", id).await?;
        let from = i32::try_from(from).unwrap_or(i32::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = c
            .query(
                &c.prepare_cached(
                    "SELECT idx, rec FROM members WHERE job = $1 AND idx >= $2 \
                     ORDER BY idx LIMIT $3",
                )
                .await
                .map_err(pg("prepare"))?,
                &[&id_of(id), &from, &limit],
            )
            .await
            .map_err(pg("members"))?;
        rows.iter()
            .map(|r| {
                let index = r.get::<_, i32>(0) as u32;
                Ok(
                    decode::<MemberV1>("member", &keys::member(id, index), r.get::<_, &[u8]>(1))?
                        .to_api(index),
                )
            })
            .collect()
    }

    async fn apply(
        &self,
        id: JobId,
        event: JobEvent,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        const OP: &str = "apply";
        // A start renews the lease from the transaction's `now()`, later than this.
        let sent = Instant::now();
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let rec = tx_job(&tx, OP, id).await?;
        let plan = plan::event(id, rec, event, now, detail.as_deref())?;
        if matches!(event, JobEvent::Requeue { .. }) && self.epoch_of(id).is_none() {
            // Requeued by a node that does not hold it (a restart recovering its previous
            // life's jobs): only while no other node's lease is running.
            let free: bool = tx
                .query_one(
                    &tx.prepare_cached(
                        "SELECT lease_node IS NULL OR lease_node = $2 OR lease_until < now()
                     FROM jobs WHERE id = $1",
                    )
                    .await
                    .map_err(pg("prepare"))?,
                    &[&id_of(id), &self.node],
                )
                .await
                .map_err(pg(OP))?
                .get(0);
            if !free {
                return Err(StoreError::LeaseLost {
                    op: OP,
                    detail: format!("job {id} is under another node's lease"),
                });
            }
        }
        if let JobEvent::Start { .. } = event {
            if self.epoch_of(id).is_none() {
                // Started without a claim (a single node that never called `due`): claim now.
                let epoch: i64 = tx
                    .query_one(
                        &tx.prepare_cached(
                            "UPDATE jobs SET epoch = epoch + 1, lease_node = $2,
                             lease_until = now() + make_interval(secs => $3)
                         WHERE id = $1 RETURNING epoch",
                        )
                        .await
                        .map_err(pg("prepare"))?,
                        &[&id_of(id), &self.node, &lease_interval(self.lease)],
                    )
                    .await
                    .map_err(pg(OP))?
                    .get(0);
                tx.execute(
                    &tx.prepare_cached("SELECT set_config('bftp.epoch', $1, true)")
                        .await
                        .map_err(pg("prepare"))?,
                    &[&epoch.to_string()],
                )
                .await
                .map_err(pg(OP))?;
                self.held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id, Held::new(epoch, sent, self.lease));
            } else {
                tx.execute(&tx.prepare_cached("UPDATE jobs SET lease_until = now() + make_interval(secs => $2) WHERE id = $1").await.map_err(pg("prepare"))?,
                    &[&id_of(id), &lease_interval(self.lease)],
                )
                .await
                .map_err(pg(OP))?;
            }
        }
        tx_write(&tx, OP, id, &plan, &[], now).await?;
        if event == JobEvent::Cancel {
            // Cancelled while another node runs it: the report is that node's to mail, once
            // its attempt has stopped and written its clean-up and transcript (its postman
            // postpones it until then); if that node is gone, the claim runs out after a
            // lease and any node mails it.
            tx.execute(
                &tx.prepare_cached(
                    "UPDATE outbox o SET claim_node = j.lease_node,
                     claim_until = now() + make_interval(secs => $3)
                 FROM jobs j
                 WHERE o.job = $1 AND j.id = $1 AND j.state = 2
                   AND j.lease_node <> $2 AND j.lease_until > now()",
                )
                .await
                .map_err(pg("prepare"))?,
                &[&id_of(id), &self.node, &lease_interval(self.lease)],
            )
            .await
            .map_err(pg(OP))?;
        }
        let release = !matches!(plan.state(), JobState::Running { .. });
        tx_put_job(&tx, OP, id, &plan.rec, release).await?;
        if release {
            self.commit_release(tx, OP, id).await?;
        } else {
            tx.commit().await.map_err(reach::commit_failed(OP))?;
            if matches!(event, JobEvent::Start { .. }) {
                self.renewed(
                    self.epoch_of(id).map(|e| (id, e)).into_iter(),
                    bftp_core::lease::deadline(sent, self.lease),
                );
            }
        }
        job_to_api(id, &plan.rec)
    }

    async fn settle_and_finish(
        &self,
        id: JobId,
        pending_become: MemberState,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        const OP: &str = "settle_and_finish";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let rec = tx_job(&tx, OP, id).await?;
        let detail = detail.as_deref();
        let states =
            tx_settle_pending(&tx, OP, id, rec.members, pending_become, detail, now).await?;
        let plan = plan::finish(id, rec, &states, now, detail)?;
        tx_write(&tx, OP, id, &plan, &[], now).await?;
        tx_put_job(&tx, OP, id, &plan.rec, true).await?;
        self.commit_release(tx, OP, id).await?;
        job_to_api(id, &plan.rec)
    }

    async fn freeze_members(
        &self,
        id: JobId,
        members: Vec<NewMember>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        const OP: &str = "freeze_members";
        let count = plan::member_count(members.len())?;
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let plan = plan::freeze(id, tx_job(&tx, OP, id).await?, count, now)?;
        tx_write(&tx, OP, id, &plan, &members, now).await?;
        tx_put_job(&tx, OP, id, &plan.rec, false).await?;
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    async fn walk(&self, id: JobId) -> Result<Walk, StoreError> {
        let c = self.client("walk").await?;
        let row = c
            .query_opt("SELECT rec FROM jobs WHERE id = $1", &[&id_of(id)])
            .await
            .map_err(pg("walk"))?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(id));
        };
        let rec: JobV1 = decode("job", &keys::job(id), row.get::<_, &[u8]>(0))?;
        Ok(plan::walk_of(&rec))
    }

    async fn record_directory(
        &self,
        id: JobId,
        dir: String,
        files: Vec<NewMember>,
        subdirs: Vec<String>,
        unique: Vec<(String, String)>,
        now: Timestamp,
    ) -> Result<Walk, StoreError> {
        const OP: &str = "record_directory";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let rec = tx_job(&tx, OP, id).await?;
        let (plan, walk) =
            match plan::directory(id, rec, &dir, files.len(), &subdirs, &unique, now)? {
                Listing::Known(walk) => return Ok(walk),
                Listing::Record(plan, walk) => (plan, walk),
            };
        tx_write(&tx, OP, id, &plan, &files, now).await?;
        tx_put_job(&tx, OP, id, &plan.rec, false).await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok(walk)
    }

    async fn record_made_dirs(&self, id: JobId, dirs: Vec<String>) -> Result<(), StoreError> {
        const OP: &str = "record_made_dirs";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        if let Some(rec) = plan::made_dirs(tx_job(&tx, OP, id).await?, &dirs) {
            tx_put_job(&tx, OP, id, &rec, false).await?;
            tx.commit().await.map_err(reach::commit_failed(OP))?;
        }
        Ok(())
    }

    async fn update_member(
        &self,
        id: JobId,
        index: u32,
        update: MemberUpdate,
        now: Timestamp,
    ) -> Result<Member, StoreError> {
        const OP: &str = "update_member";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        // The job row first, locked: the same order as every other write of the job.
        let job = tx
            .query_opt(
                &tx.prepare_cached("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg(OP))?;
        if job.is_none() {
            return Err(StoreError::NotFound(id));
        }
        let Some(mut m) = tx_member(&tx, OP, id, index).await? else {
            return Err(StoreError::MemberNotFound { job: id, index });
        };
        m.apply(id, index, &update, now)?;
        tx_put_member(&tx, OP, id, index, &m).await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok(m.to_api(index))
    }

    async fn append_history(&self, id: JobId, event: HistoryEvent) -> Result<(), StoreError> {
        const OP: &str = "append_history";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let plan = plan::history(tx_job(&tx, OP, id).await?, &event);
        tx_write(&tx, OP, id, &plan, &[], event.at).await?;
        tx_put_job(&tx, OP, id, &plan.rec, false).await?;
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    /// Running jobs whose lease ran out go back to the queue, due at `now`: their node died,
    /// hung or lost the database. The history says whose lease it was.
    async fn take_over(&self, now: Timestamp) -> Result<(), StoreError> {
        const OP: &str = "take over";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let rows = tx
            .query(
                &tx.prepare_cached(
                    "SELECT id, rec, lease_node FROM jobs
                 WHERE state = 2 AND (lease_until IS NULL OR lease_until < now())
                 ORDER BY id LIMIT 64 FOR UPDATE SKIP LOCKED",
                )
                .await
                .map_err(pg("prepare"))?,
                &[],
            )
            .await
            .map_err(pg(OP))?;
        for row in &rows {
            let id = job_id(row, 0);
            let rec: JobV1 = decode("job", &keys::job(id), row.get::<_, &[u8]>(1))?;
            let node: Option<String> = row.get(2);
            let plan = plan::take_over(id, rec, &self.node, node.as_deref(), now)?;
            tx_write(&tx, OP, id, &plan, &[], now).await?;
            tx_put_job(&tx, OP, id, &plan.rec, true).await?;
            tracing::info!(
                job = id.0,
                from = node.as_deref().unwrap_or(""),
                "took over a job whose lease ran out"
            );
        }
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    async fn due(
        &self,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<(Timestamp, JobId)>, StoreError> {
        const OP: &str = "due";
        self.take_over(until).await?;
        let c = self.client(OP).await?;
        // Each claim's lease runs from the statement's `now()`, later than this.
        let sent = Instant::now();
        let rows = c
            .query(
                &c.prepare_cached(
                    "UPDATE jobs j SET epoch = j.epoch + 1, lease_node = $3,
                     lease_until = now() + make_interval(secs => $4)
                 FROM (SELECT id FROM jobs
                       WHERE state = 1 AND due_at <= $1
                         AND (lease_node IS NULL OR lease_until < now() OR lease_node = $3)
                       ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) c
                 WHERE j.id = c.id
                 RETURNING j.id, j.due_at, j.epoch",
                )
                .await
                .map_err(pg("prepare"))?,
                &[
                    &ms(until),
                    &(limit as i64),
                    &self.node,
                    &lease_interval(self.lease),
                ],
            )
            .await
            .map_err(pg(OP))?;
        let mut out: Vec<(Timestamp, JobId)> = Vec::with_capacity(rows.len());
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            let id = job_id(&r, 0);
            let at = Timestamp(r.get::<_, Option<i64>>(1).unwrap_or(0).max(0) as u64);
            held.insert(id, Held::new(r.get(2), sent, self.lease));
            out.push((at, id));
        }
        out.sort();
        Ok(out)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let c = self.client("next_due").await?;
        let row = c
            .query_one(
                &c.prepare_cached(
                    "SELECT min(due_at) FROM jobs WHERE state = 1
                   AND (lease_node IS NULL OR lease_until < now() OR lease_node = $1)",
                )
                .await
                .map_err(pg("prepare"))?,
                &[&self.node],
            )
            .await
            .map_err(pg("next_due"))?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|t| Timestamp(t.max(0) as u64)))
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        let c = self.client("count_by_state").await?;
        let rows = c
            .query(
                &c.prepare_cached("SELECT state, count(*) FROM jobs GROUP BY state")
                    .await
                    .map_err(pg("prepare"))?,
                &[],
            )
            .await
            .map_err(pg("count_by_state"))?;
        let mut counts = StateCounts::default();
        for r in rows {
            let n = r.get::<_, i64>(1).max(0) as u64;
            match r.get::<_, i16>(0) {
                1 => counts.queued = n,
                2 => counts.running = n,
                3 => counts.finished = n,
                4 => counts.cancelled = n,
                _ => {}
            }
        }
        Ok(counts)
    }

    async fn running_jobs(&self) -> Result<Vec<JobId>, StoreError> {
        let c = self.client("running_jobs").await?;
        let rows = c
            .query(
                &c.prepare_cached(
                    "SELECT id FROM jobs WHERE state = 2 AND lease_node = $1 ORDER BY id",
                )
                .await
                .map_err(pg("prepare"))?,
                &[&self.node],
            )
            .await
            .map_err(pg("running_jobs"))?;
        Ok(rows.iter().map(|r| job_id(r, 0)).collect())
    }

    async fn outbox_entry(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        let c = self.client("outbox_entry").await?;
        let row = c
            .query_opt(
                &c.prepare_cached("SELECT job, rec FROM outbox WHERE job = $1")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg("outbox_entry"))?;
        row.as_ref().map(decode_outbox_row).transpose()
    }

    /// Claims the due reports for this node for one lease: another node does not deliver
    /// them meanwhile.
    async fn outbox_due(
        &self,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let c = self.client("outbox_due").await?;
        let rows = c
            .query(
                &c.prepare_cached(
                    "UPDATE outbox o SET claim_node = $3,
                     claim_until = now() + make_interval(secs => $4)
                 FROM (SELECT job FROM outbox
                       WHERE state = 0 AND next_at <= $1
                         AND (claim_node IS NULL OR claim_until < now() OR claim_node = $3)
                       ORDER BY next_at, job LIMIT $2 FOR UPDATE SKIP LOCKED) c
                 WHERE o.job = c.job
                 RETURNING o.job, o.rec, o.next_at",
                )
                .await
                .map_err(pg("prepare"))?,
                &[
                    &ms(until),
                    &(limit as i64),
                    &self.node,
                    &lease_interval(self.lease),
                ],
            )
            .await
            .map_err(pg("outbox_due"))?;
        let mut out = rows
            .iter()
            .map(|r| Ok((r.get::<_, Option<i64>>(2), decode_outbox_row(r)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        out.sort_by_key(|(next, e)| (*next, e.job));
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }

    async fn outbox_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let c = self.client("outbox_next_due").await?;
        let row = c
            .query_one(
                &c.prepare_cached(
                    "SELECT min(next_at) FROM outbox WHERE state = 0
                   AND (claim_node IS NULL OR claim_until < now() OR claim_node = $1)",
                )
                .await
                .map_err(pg("prepare"))?,
                &[&self.node],
            )
            .await
            .map_err(pg("outbox_next_due"))?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|t| Timestamp(t.max(0) as u64)))
    }

    async fn outbox_pending(&self) -> Result<u64, StoreError> {
        let c = self.client("outbox_pending").await?;
        let n: i64 = c
            .query_one(
                &c.prepare_cached("SELECT count(*) FROM outbox WHERE state = 0")
                    .await
                    .map_err(pg("prepare"))?,
                &[],
            )
            .await
            .map_err(pg("outbox_pending"))?
            .get(0);
        Ok(n.max(0) as u64)
    }

    async fn record_delivery(
        &self,
        id: JobId,
        result: DeliveryTry,
        now: Timestamp,
    ) -> Result<OutboxEntry, StoreError> {
        const OP: &str = "record_delivery";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let row = tx
            .query_opt(
                &tx.prepare_cached("SELECT rec FROM outbox WHERE job = $1 FOR UPDATE")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg(OP))?;
        let Some(row) = row else {
            return Err(StoreError::NoReport(id));
        };
        let mut rec: OutboxV1 = decode("outbox", &keys::job(id), row.get::<_, &[u8]>(0))?;
        if !rec.apply(&result, now) {
            return rec.to_api(id);
        }
        // A report postponed while this node's attempt of the job stops stays this node's
        // for a lease more (the attempt's last writes go into it); any other result lets go.
        let keep_claim = matches!(result, DeliveryTry::Postponed { .. });
        tx.execute(
            &tx.prepare_cached(
                "UPDATE outbox SET rec = $2, state = $3, next_at = $4,
                 claim_node = CASE WHEN $5 THEN $6 END,
                 claim_until = CASE WHEN $5 THEN now() + make_interval(secs => $7) END
                 WHERE job = $1",
            )
            .await
            .map_err(pg("prepare"))?,
            &[
                &id_of(id),
                &encode(&rec),
                &outbox_code(rec.state),
                &rec.next.map(|n| n as i64),
                &keep_claim,
                &self.node,
                &lease_interval(self.lease),
            ],
        )
        .await
        .map_err(pg(OP))?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        rec.to_api(id)
    }

    async fn set_transcript(&self, id: JobId, t: AttemptTranscript) -> Result<(), StoreError> {
        const OP: &str = "set_transcript";
        let value = encode(&TranscriptV1 {
            v: RECORD_VERSION,
            attempt: t.attempt,
            lines: t.lines,
        });
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let job = tx
            .query_opt(
                &tx.prepare_cached("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg(OP))?;
        if job.is_none() {
            return Err(StoreError::NotFound(id));
        }
        tx.execute(
            &tx.prepare_cached(
                "INSERT INTO transcripts (job, rec) VALUES ($1, $2)
             ON CONFLICT (job) DO UPDATE SET rec = $2",
            )
            .await
            .map_err(pg("prepare"))?,
            &[&id_of(id), &value],
        )
        .await
        .map_err(pg(OP))?;
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    async fn transcript(&self, id: JobId) -> Result<Option<AttemptTranscript>, StoreError> {
        let c = self.client("transcript").await?;
        let row = c
            .query_opt(
                &c.prepare_cached("SELECT rec FROM transcripts WHERE job = $1")
                    .await
                    .map_err(pg("prepare"))?,
                &[&id_of(id)],
            )
            .await
            .map_err(pg("transcript"))?;
        match row {
            Some(r) => Ok(Some(
                decode::<TranscriptV1>("transcript", &keys::job(id), r.get::<_, &[u8]>(0))?
                    .to_api(),
            )),
            None => Ok(None),
        }
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        let c = self.client("is_empty").await?;
        let any: bool = c
            .query_one(
                &c.prepare_cached("SELECT EXISTS (SELECT 1 FROM jobs)")
                    .await
                    .map_err(pg("prepare"))?,
                &[],
            )
            .await
            .map_err(pg("is_empty"))?
            .get(0);
        Ok(!any)
    }

    async fn key_fingerprint(&self) -> Result<Option<[u8; 32]>, StoreError> {
        let c = self.client("key_fingerprint").await?;
        let row = c
            .query_opt(
                &c.prepare_cached("SELECT value FROM bftp_meta WHERE key = 'key_fingerprint'")
                    .await
                    .map_err(pg("prepare"))?,
                &[],
            )
            .await
            .map_err(pg("key_fingerprint"))?;
        match row {
            Some(r) => {
                let v: &[u8] = r.get(0);
                <[u8; 32]>::try_from(v).map(Some).map_err(|_| {
                    keys::corrupt_key(
                        "meta",
                        keys::META_KEY_FINGERPRINT,
                        format!("{} bytes, not 32", v.len()),
                    )
                })
            }
            None => Ok(None),
        }
    }

    async fn set_key_fingerprint(&self, fp: [u8; 32]) -> Result<(), StoreError> {
        let c = self.client("set_key_fingerprint").await?;
        c.execute(
            &c.prepare_cached(
                "INSERT INTO bftp_meta (key, value) VALUES ('key_fingerprint', $1)
             ON CONFLICT (key) DO UPDATE SET value = $1",
            )
            .await
            .map_err(pg("prepare"))?,
            &[&&fp[..]],
        )
        .await
        .map_err(pg("set_key_fingerprint"))?;
        Ok(())
    }

    /// Inserts the fingerprint if none is recorded, and reads the one that stands, in one
    /// statement. Under READ COMMITTED the statement's snapshot may predate another node's
    /// insert that made ours a no-op: then neither shows and the statement runs again (it
    /// sees the other's row now).
    async fn adopt_key_fingerprint(&self, fp: [u8; 32]) -> Result<[u8; 32], StoreError> {
        const OP: &str = "adopt_key_fingerprint";
        let c = self.client(OP).await?;
        let stmt = c
            .prepare_cached(
                "WITH ins AS (
                     INSERT INTO bftp_meta (key, value) VALUES ('key_fingerprint', $1)
                     ON CONFLICT (key) DO NOTHING RETURNING value)
                 SELECT value FROM ins
                 UNION ALL
                 SELECT value FROM bftp_meta WHERE key = 'key_fingerprint'
                 LIMIT 1",
            )
            .await
            .map_err(pg("prepare"))?;
        for _ in 0..5 {
            if let Some(r) = c.query_opt(&stmt, &[&&fp[..]]).await.map_err(pg(OP))? {
                let v: &[u8] = r.get(0);
                return <[u8; 32]>::try_from(v).map_err(|_| {
                    keys::corrupt_key(
                        "meta",
                        keys::META_KEY_FINGERPRINT,
                        format!("{} bytes, not 32", v.len()),
                    )
                });
            }
        }
        Err(keys::corrupt_key(
            "meta",
            keys::META_KEY_FINGERPRINT,
            "neither recorded nor readable after five tries",
        ))
    }

    async fn refusal(&self, key: RefusalKey) -> Result<Option<RefusalMemory>, StoreError> {
        let k = keys::refusal(&key);
        let c = self.client("refusal").await?;
        let row = c
            .query_opt(
                &c.prepare_cached("SELECT rec FROM refusals WHERE key = $1")
                    .await
                    .map_err(pg("prepare"))?,
                &[&k],
            )
            .await
            .map_err(pg("refusal"))?;
        match row {
            Some(r) => Ok(Some(
                decode::<RefusalV1>("refusal", &k, r.get::<_, &[u8]>(0))?.to_core(&k)?,
            )),
            None => Ok(None),
        }
    }

    async fn record_refusal(
        &self,
        key: RefusalKey,
        seen: Sighting,
        now: Timestamp,
    ) -> Result<RefusalMemory, StoreError> {
        const OP: &str = "record_refusal";
        let k = keys::refusal(&key);
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        // A row to lock, so two nodes' sightings of one refusal are merged one after the other.
        tx.execute(
            &tx.prepare_cached(
                "INSERT INTO refusals (key, rec) VALUES ($1, '') ON CONFLICT (key) DO NOTHING",
            )
            .await
            .map_err(pg("prepare"))?,
            &[&k],
        )
        .await
        .map_err(pg(OP))?;
        let row = tx
            .query_one(
                &tx.prepare_cached("SELECT rec FROM refusals WHERE key = $1 FOR UPDATE")
                    .await
                    .map_err(pg("prepare"))?,
                &[&k],
            )
            .await
            .map_err(pg(OP))?;
        let bytes: &[u8] = row.get(0);
        let previous = if bytes.is_empty() {
            None
        } else {
            Some(decode::<RefusalV1>("refusal", &k, bytes)?.to_core(&k)?)
        };
        let memory = observe(previous.as_ref(), &seen, now);
        tx.execute(
            &tx.prepare_cached("UPDATE refusals SET rec = $2 WHERE key = $1")
                .await
                .map_err(pg("prepare"))?,
            &[&k, &encode(&RefusalV1::from_core(&memory))],
        )
        .await
        .map_err(pg(OP))?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok(memory)
    }
}

impl JobStore for PgStore {
    fn submit(&self, job: NewJob) -> Result<Submitted, StoreError> {
        self.with(|i| async move { i.submit(job).await })
    }

    fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        self.with(|i| async move { i.get(id).await })
    }

    fn list_after(&self, filter: &JobFilter, after: Option<JobId>) -> Result<Vec<Job>, StoreError> {
        let filter = filter.clone();
        self.with(|i| async move { i.list_after(filter, after).await })
    }

    fn history(&self, id: JobId) -> Result<Vec<HistoryEvent>, StoreError> {
        self.with(|i| async move { i.history(id).await })
    }

    fn members(&self, id: JobId) -> Result<Vec<Member>, StoreError> {
        self.with(|i| async move { i.members(id).await })
    }

    fn members_page(&self, id: JobId, from: u32, limit: usize) -> Result<Vec<Member>, StoreError> {
        self.with(|i| async move { i.members_page(id, from, limit).await })
    }

    fn apply(
        &self,
        id: JobId,
        event: JobEvent,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        self.with(|i| async move { i.apply(id, event, now, detail).await })
    }

    fn settle_and_finish(
        &self,
        id: JobId,
        pending_become: MemberState,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError> {
        self.with(|i| async move { i.settle_and_finish(id, pending_become, now, detail).await })
    }

    fn freeze_members(
        &self,
        id: JobId,
        members: Vec<NewMember>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.with(|i| async move { i.freeze_members(id, members, now).await })
    }

    fn update_member(
        &self,
        id: JobId,
        index: u32,
        update: MemberUpdate,
        now: Timestamp,
    ) -> Result<Member, StoreError> {
        self.with(|i| async move { i.update_member(id, index, update, now).await })
    }

    fn append_history(&self, id: JobId, event: HistoryEvent) -> Result<(), StoreError> {
        self.with(|i| async move { i.append_history(id, event).await })
    }

    fn walk(&self, id: JobId) -> Result<Walk, StoreError> {
        self.with(|i| async move { i.walk(id).await })
    }

    fn record_directory(
        &self,
        id: JobId,
        dir: &str,
        files: Vec<NewMember>,
        subdirs: Vec<String>,
        unique: Vec<(String, String)>,
        now: Timestamp,
    ) -> Result<Walk, StoreError> {
        let dir = dir.to_owned();
        self.with(|i| async move {
            i.record_directory(id, dir, files, subdirs, unique, now)
                .await
        })
    }

    fn record_made_dirs(&self, id: JobId, dirs: Vec<String>) -> Result<(), StoreError> {
        self.with(|i| async move { i.record_made_dirs(id, dirs).await })
    }

    fn due(&self, until: Timestamp, limit: usize) -> Result<Vec<(Timestamp, JobId)>, StoreError> {
        self.with(|i| async move { i.due(until, limit).await })
    }

    fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|i| async move { i.next_due().await })
    }

    fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.with(|i| async move { i.count_by_state().await })
    }

    fn running_jobs(&self) -> Result<Vec<JobId>, StoreError> {
        self.with(|i| async move { i.running_jobs().await })
    }

    fn outbox_entry(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        self.with(|i| async move { i.outbox_entry(id).await })
    }

    fn outbox_due(&self, until: Timestamp, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.with(|i| async move { i.outbox_due(until, limit).await })
    }

    fn outbox_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.with(|i| async move { i.outbox_next_due().await })
    }

    fn outbox_pending(&self) -> Result<u64, StoreError> {
        self.with(|i| async move { i.outbox_pending().await })
    }

    fn record_delivery(
        &self,
        id: JobId,
        result: DeliveryTry,
        now: Timestamp,
    ) -> Result<OutboxEntry, StoreError> {
        self.with(|i| async move { i.record_delivery(id, result, now).await })
    }

    fn set_transcript(&self, id: JobId, transcript: AttemptTranscript) -> Result<(), StoreError> {
        self.with(|i| async move { i.set_transcript(id, transcript).await })
    }

    fn transcript(&self, id: JobId) -> Result<Option<AttemptTranscript>, StoreError> {
        self.with(|i| async move { i.transcript(id).await })
    }

    fn is_empty(&self) -> Result<bool, StoreError> {
        self.with(|i| async move { i.is_empty().await })
    }

    fn key_fingerprint(&self) -> Result<Option<[u8; 32]>, StoreError> {
        self.with(|i| async move { i.key_fingerprint().await })
    }

    fn set_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<(), StoreError> {
        self.with(|i| async move { i.set_key_fingerprint(fingerprint).await })
    }

    fn adopt_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<[u8; 32], StoreError> {
        self.with(|i| async move { i.adopt_key_fingerprint(fingerprint).await })
    }

    fn removable_jobs(
        &self,
        now: Timestamp,
        keep: bftp_core::retention::Keep,
        after: Option<JobId>,
        scan: usize,
    ) -> Result<(Vec<JobId>, Option<JobId>), StoreError> {
        self.with(|i| async move { i.removable_jobs(now, keep, after, scan).await })
    }

    fn remove_jobs(
        &self,
        ids: &[JobId],
        now: Timestamp,
        keep: bftp_core::retention::Keep,
        batch: usize,
    ) -> Result<u64, StoreError> {
        let ids = ids.to_vec();
        self.with(|i| async move { i.remove_jobs(ids, now, keep, batch).await })
    }

    /// `pg_dump` of the database into `dir` (`pg_store/backup.rs`).
    fn backup(&self, dir: &std::path::Path) -> Result<crate::BackupReport, StoreError> {
        self.dump_into(dir)
    }

    /// The database's size (`pg_database_size`): the whole database, bftp's tables and all.
    fn disk_size(&self) -> Result<Option<u64>, StoreError> {
        self.with(|i| async move {
            let c = i.client("disk_size").await?;
            let size: i64 = c
                .query_one("SELECT pg_database_size(current_database())", &[])
                .await
                .map_err(pg("disk_size"))?
                .get(0);
            Ok(Some(size.max(0) as u64))
        })
    }

    fn refusal(&self, key: &RefusalKey) -> Result<Option<RefusalMemory>, StoreError> {
        let key = key.clone();
        self.with(|i| async move { i.refusal(key).await })
    }

    fn record_refusal(
        &self,
        key: &RefusalKey,
        seen: &Sighting,
        now: Timestamp,
    ) -> Result<RefusalMemory, StoreError> {
        let (key, seen) = (key.clone(), seen.clone());
        self.with(|i| async move { i.record_refusal(key, seen, now).await })
    }

    fn lost_leases(&self) -> Vec<JobId> {
        std::mem::take(&mut *self.inner.lost.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn cancelled_elsewhere(&self) -> Vec<JobId> {
        std::mem::take(
            &mut *self
                .inner
                .cancelled
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    fn lease(&self, id: JobId) -> Option<Arc<LeaseCell>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .map(|h| h.cell.clone())
    }

    fn node(&self) -> Option<String> {
        Some(self.inner.node.clone())
    }

    fn abandon(&self, id: JobId) {
        let mut held = self.inner.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&id) {
            h.lost = true;
            h.cell.lose();
        }
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(self.inner.poll)
    }

    fn host_slots(&self) -> Option<Arc<dyn HostSlots>> {
        let rt = self.rt.as_ref()?.handle().clone();
        Some(Arc::new(PgHostSlots {
            inner: self.inner.clone(),
            rt,
        }))
    }

    fn job_node(&self, id: JobId) -> Result<Option<String>, StoreError> {
        self.with(|i| async move {
            let c = i.client("job_node").await?;
            let row = c
                .query_opt(
                    &c.prepare_cached("SELECT lease_node FROM jobs WHERE id = $1 AND state = 2")
                        .await
                        .map_err(pg("prepare"))?,
                    &[&id_of(id)],
                )
                .await
                .map_err(pg("job_node"))?;
            Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_a_held_lease_counts_as_lost_or_cancelled_here() {
        let seen = |state, epoch, lease_alive| Seen {
            state,
            epoch,
            lease_alive,
        };
        let (lost, here) = (Some(LeaseEnd::Lost), Some(LeaseEnd::CancelledHere));
        #[rustfmt::skip]
        let table: &[(&str, Seen, Option<LeaseEnd>)] = &[
            ("claimed, not started yet",                 seen(Some(1), Some(7), true),  None),
            ("claimed, its claim ran out, still ours",   seen(Some(1), Some(7), false), None),
            ("started after the renewal looked",         seen(Some(2), Some(7), true),  None),
            ("running, our lease ran out",               seen(Some(2), Some(7), false), lost),
            ("taken over: queued at a new epoch",        seen(Some(1), Some(8), false), lost),
            ("taken over and running at a new epoch",    seen(Some(2), Some(8), true),  lost),
            ("finished (the epoch moved on)",            seen(Some(3), Some(8), false), lost),
            ("final at our epoch (cannot happen)",       seen(Some(4), Some(7), false), lost),
            ("the job is gone",                          seen(None, None, false),       lost),
            // A cancel moves the epoch on by one: nobody ran the job between our hold and it.
            ("cancelled elsewhere straight from our hold", seen(Some(4), Some(8), false), here),
            // A takeover (requeue, claim) came first: the files are another node's now.
            ("cancelled after a takeover",               seen(Some(4), Some(9), false), lost),
            ("cancelled after a takeover's requeue",     seen(Some(4), Some(10), false), lost),
        ];
        for (case, s, end) in table {
            assert_eq!(lease_end(7, s), *end, "{case}");
        }
    }
}
