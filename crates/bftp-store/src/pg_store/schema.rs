//! The PostgreSQL schema: its migrations, applied in order under an advisory lock, and the
//! version a database has.

use super::sql::Sql;
use super::{events, hostlimits, meta, retention, slots, watches};
use super::{pg, runtime_failed, Inner, PgOptions, PgStore};
use crate::error::{BackendError, StoreError};
use std::time::Duration;
use tokio_postgres::NoTls;

/// The schema migrations, in order; the database records the highest one applied in
/// `bftp_schema`. Never edit one that shipped: add the next.
pub(super) const MIGRATIONS: &[(i32, &str)] = &[
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
    (6, meta::PAIRS_MIGRATION),
    (7, watches::MIGRATION),
    (8, events::MIGRATION),
    (9, hostlimits::MIGRATION),
];

/// The schema version this code writes: the last migration.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

impl PgStore {
    /// The schema version the database at `url` has (0: none yet), without changing it.
    pub fn schema_version_at(opts: &PgOptions) -> Result<i32, StoreError> {
        let config = opts.config()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(runtime_failed)?;
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
}

impl Inner {
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let mut c = self.client("migrate").await?;
        let tx = c.transaction().await.map_err(pg("migrate"))?;
        // One node migrates at a time; the others wait here and find the work done.
        tx.exec("migrate", "SELECT pg_advisory_xact_lock(4242020215)", &[])
            .await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS bftp_schema (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(pg("migrate"))?;
        let have: i32 = tx
            .row(
                "migrate",
                "SELECT coalesce(max(version), 0) FROM bftp_schema",
                &[],
            )
            .await?
            .get(0);
        if have > PG_SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found: have.max(0) as u32,
                supported: PG_SCHEMA_VERSION as u32,
            });
        }
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > have) {
            tx.batch_execute(sql).await.map_err(pg("migrate"))?;
            tx.exec(
                "migrate",
                "INSERT INTO bftp_schema (version) VALUES ($1)",
                &[version],
            )
            .await?;
            tracing::info!(
                version,
                "applied a schema migration of the PostgreSQL store"
            );
        }
        tx.commit().await.map_err(pg("migrate"))
    }
}
