//! Cluster-wide FTP connection slots ([`HostSlots`]) on the shared PostgreSQL database.
//!
//! The rules (ARCHITECTURE.md, "Connection slots over all nodes"):
//! - a slot is a row of `host_slots` (host, slot number, holder node); a host has at most
//!   `per_host` rows, counted in `bftp_take_slots` under a per-host advisory lock of the
//!   transaction (hosts locked in name order, so two takers never deadlock);
//! - a taking node's `bftp_nodes` lease is renewed by its heartbeat; and the node holds a
//!   session advisory lock on a connection of its own (its *presence*) for its whole life;
//! - another node's slots go back only when that node is gone: its node lease ran out, no
//!   session holds its presence lock, and the database has been up for a lease (after a
//!   restart every live node gets one lease to take its presence back). A node killed
//!   (kill -9) closes its sockets: its presence goes at once, its slots once its lease ran
//!   out. A paused node (SIGSTOP) keeps its sockets open, and with them its FTP sessions and
//!   its presence: its slots stay taken until it runs again or dies (the conservative
//!   count: its jobs are taken over, their slots are not);
//! - a node's slots of a previous life (same name) are given back when it opens;
//! - a release notifies `bftp_slots`; the presence connection listens and moves
//!   [`HostSlots::generation`], so a waiting node tries again at once instead of polling.

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{AsyncMessage, NoTls};

use super::sql::Sql;
use super::{lease_interval, pg, Inner};
use crate::error::StoreError;
use crate::{HostSlots, SlotHold};

/// The channel on which a node announces a host it waits for.
const WANTED: &str = "bftp_slots_wanted";

/// The advisory lock class of a node's presence (the second key is `hashtext(node)`).
const PRESENCE_CLASS: i32 = 4242;

/// The migration that adds the slots (the third).
pub(super) const MIGRATION: &str = r#"
CREATE TABLE bftp_nodes (
    node text PRIMARY KEY,
    lease_until timestamptz NOT NULL,
    lease_secs double precision NOT NULL
);
CREATE TABLE host_slots (
    id bigserial PRIMARY KEY,
    host text NOT NULL,
    slot integer NOT NULL,
    node text NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (host, slot)
);
CREATE INDEX host_slots_node ON host_slots (node);
-- Whether a session holds node n's presence lock (pg_advisory_lock(4242, hashtext(n))).
CREATE FUNCTION bftp_node_present(n text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND classid = 4242::oid
          AND objid = hashtext(n)::oid AND objsubid = 2 AND granted)
$$;
-- Whether node n may hold no FTP connection any more: lease out, presence gone, and the
-- database up for a lease (a restart drops every presence lock at once).
CREATE FUNCTION bftp_node_gone(n text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT bftp_node_present(n) AND coalesce((
        SELECT lease_until < now()
           AND pg_postmaster_start_time() + make_interval(secs => lease_secs) < now()
        FROM bftp_nodes WHERE node = n), true)
$$;
-- One slot per entry of want (a host twice: two) for node me, at most per_host rows a
-- host, all or none (NULL). Renews me's lease; gives back the slots of nodes gone.
CREATE FUNCTION bftp_take_slots(me text, want text[], per_host integer, lease double precision)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    h text;
    need integer;
    used integer;
    s integer;
    got bigint;
    ids bigint[] := '{}';
BEGIN
    FOR h IN SELECT DISTINCT x FROM unnest(want) x ORDER BY x LOOP
        PERFORM pg_advisory_xact_lock(4243, hashtext(h));
    END LOOP;
    INSERT INTO bftp_nodes (node, lease_until, lease_secs)
        VALUES (me, now() + make_interval(secs => lease), lease)
        ON CONFLICT (node) DO UPDATE SET lease_until = EXCLUDED.lease_until,
            lease_secs = EXCLUDED.lease_secs;
    DELETE FROM host_slots WHERE host = ANY(want) AND node <> me AND bftp_node_gone(node);
    FOR h, need IN SELECT x, count(*) FROM unnest(want) x GROUP BY x LOOP
        SELECT count(*) INTO used FROM host_slots WHERE host = h;
        IF used + need > per_host THEN
            RETURN NULL;
        END IF;
    END LOOP;
    FOR h IN SELECT x FROM unnest(want) x LOOP
        SELECT min(n) INTO s FROM generate_series(0, per_host) n
            WHERE NOT EXISTS (SELECT 1 FROM host_slots WHERE host = h AND slot = n);
        INSERT INTO host_slots (host, slot, node) VALUES (h, s, me) RETURNING id INTO got;
        ids := ids || got;
    END LOOP;
    RETURN ids;
END $$;
"#;

/// The migration that adds the memory of the STOU names the servers announced (the fourth):
/// a row per directory key and name, with whom it was told to and when. A claim removes up
/// to 100 rows older than the memory as it goes.
pub(super) const NAMES_MIGRATION: &str = r#"
CREATE TABLE stou_names (
    dir text NOT NULL,
    name text NOT NULL,
    owner text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dir, name)
);
CREATE INDEX stou_names_at ON stou_names (at);
-- Records that name n of directory d was announced to owner o: NULL, or the other owner it
-- was announced to less than keep seconds ago (then it stays theirs).
CREATE FUNCTION bftp_claim_name(d text, n text, o text, keep double precision)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
    other text;
BEGIN
    DELETE FROM stou_names WHERE ctid IN (SELECT ctid FROM stou_names
        WHERE at < now() - make_interval(secs => keep) ORDER BY at LIMIT 100);
    LOOP
        INSERT INTO stou_names (dir, name, owner, at) VALUES (d, n, o, now())
            ON CONFLICT (dir, name) DO UPDATE SET owner = EXCLUDED.owner, at = EXCLUDED.at
            WHERE stou_names.owner = EXCLUDED.owner
               OR stou_names.at < now() - make_interval(secs => keep);
        GET DIAGNOSTICS k = ROW_COUNT;
        IF k > 0 THEN
            RETURN NULL;
        END IF;
        SELECT owner INTO other FROM stou_names WHERE dir = d AND name = n;
        IF FOUND THEN
            RETURN other;
        END IF;
        -- Released meanwhile: try again.
    END LOOP;
END $$;
"#;

/// The slots' state of one node, kept in [`Inner`].
#[derive(Default)]
pub(super) struct SlotState {
    /// Moves on every `bftp_slots` notification (and when the presence connection comes
    /// back: releases may have been missed meanwhile).
    generation: AtomicU64,
    /// Slots given back whose DELETE has not reached the database yet.
    unreleased: Mutex<Vec<i64>>,
    /// Hosts other nodes wait for (`bftp_slots_wanted` notifications), not yet handed on.
    wanted: Mutex<Vec<String>>,
}

impl SlotState {
    fn push_unreleased(&self, ids: Vec<i64>) {
        self.unreleased
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids);
    }

    fn take_unreleased(&self) -> Vec<i64> {
        std::mem::take(&mut *self.unreleased.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Inner {
    /// Renews this node's lease (in `bftp_nodes`) and retries the releases that failed.
    pub(super) async fn renew_node(&self, client: &tokio_postgres::Client) {
        let r = client
            .execute(
                "INSERT INTO bftp_nodes (node, lease_until, lease_secs)
                 VALUES ($1, now() + make_interval(secs => $2), $2)
                 ON CONFLICT (node) DO UPDATE SET lease_until = EXCLUDED.lease_until,
                     lease_secs = EXCLUDED.lease_secs",
                &[&self.node, &lease_interval(self.lease)],
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot renew the node's lease");
        }
        let ids = self.slots.take_unreleased();
        if !ids.is_empty() {
            if let Err(e) = release_ids(client, &self.node, &ids).await {
                tracing::warn!(error = %e, "cannot give connection slots back yet");
                self.slots.push_unreleased(ids);
            }
        }
    }

    /// At open: this node's previous life is over (two live nodes never share a name), so
    /// the slots it held are given back.
    pub(super) async fn forget_previous_slots(&self) -> Result<(), StoreError> {
        let c = self.client("open").await?;
        c.execute(
            "WITH d AS (DELETE FROM host_slots WHERE node = $1 RETURNING host)
             SELECT pg_notify('bftp_slots', host) FROM d",
            &[&self.node],
        )
        .await
        .map_err(pg("give back the previous life's slots of"))?;
        Ok(())
    }
}

async fn release_ids(
    client: &tokio_postgres::Client,
    node: &str,
    ids: &[i64],
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "WITH d AS (DELETE FROM host_slots WHERE id = ANY($1) AND node = $2 RETURNING host)
             SELECT pg_notify('bftp_slots', host) FROM d",
            &[&ids, &node],
        )
        .await
        .map(|_| ())
}

/// Holds this node's presence lock on a connection of its own and listens for releases,
/// for the store's life; reconnects when the connection drops. `first` is told once the
/// lock is first held (or, for a name another live session holds, never).
pub(super) async fn presence(
    inner: Arc<Inner>,
    config: tokio_postgres::Config,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut warned = false;
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut conn)) => {
                let state = inner.clone();
                let driver = tokio::spawn(async move {
                    while let Some(m) = poll_fn(|cx| conn.poll_message(cx)).await {
                        match m {
                            Ok(AsyncMessage::Notification(n)) if n.channel() == WANTED => {
                                // "node host": another node waits for a slot on host.
                                if let Some((node, host)) = n.payload().split_once(' ') {
                                    if node != state.node {
                                        let mut w = state
                                            .slots
                                            .wanted
                                            .lock()
                                            .unwrap_or_else(|p| p.into_inner());
                                        if !w.iter().any(|h| h == host) {
                                            w.push(host.to_string());
                                        }
                                    }
                                }
                            }
                            Ok(AsyncMessage::Notification(_)) => {
                                state.slots.generation.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                });
                if hold_presence(&inner, &client, &mut warned).await {
                    // Releases may have been missed while the connection was away.
                    inner.slots.generation.fetch_add(1, Ordering::SeqCst);
                    if let Some(tx) = first.take() {
                        let _ = tx.send(());
                    }
                    let _ = driver.await;
                    tracing::warn!("lost the presence connection to the database; reconnecting");
                } else {
                    driver.abort();
                }
                drop(client);
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %e, "cannot open the presence connection");
                    warned = true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// LISTEN and take the presence lock (waiting while a dying previous life of this node
/// still has it). Whether both happened.
async fn hold_presence(inner: &Inner, client: &tokio_postgres::Client, warned: &mut bool) -> bool {
    if client
        .batch_execute("LISTEN bftp_slots; LISTEN bftp_slots_wanted")
        .await
        .is_err()
    {
        return false;
    }
    loop {
        let got = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, hashtext($2))",
                &[&PRESENCE_CLASS, &inner.node],
            )
            .await;
        match got {
            Ok(row) if row.get::<_, bool>(0) => return true,
            Ok(_) => {
                if !*warned {
                    tracing::warn!(
                        node = %inner.node,
                        "another session holds this node's presence: a previous life still \
                         ending, or another live node of the same name"
                    );
                    *warned = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => return false,
        }
    }
}

/// [`HostSlots`] of a [`super::PgStore`]: its calls run on the store's runtime.
pub struct PgHostSlots {
    pub(super) inner: Arc<Inner>,
    pub(super) rt: tokio::runtime::Handle,
}

impl PgHostSlots {
    /// Runs `f` on the store's runtime and waits for its answer.
    fn run<T, F>(&self, op: &'static str, f: impl FnOnce(Arc<Inner>) -> F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = f(self.inner.clone());
        self.rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(StoreError::Panicked {
                op,
                message: "the store's task ended without an answer".into(),
            })
        })
    }
}

impl HostSlots for PgHostSlots {
    fn try_take(&self, hosts: &[String], per_host: u32) -> Result<Option<SlotHold>, StoreError> {
        let hosts = hosts.to_vec();
        let per_host = i32::try_from(per_host).unwrap_or(i32::MAX);
        self.run("take connection slots in", |inner| async move {
            let c = inner.client("take connection slots in").await?;
            let row = c
                .row(
                    "take connection slots in",
                    "SELECT bftp_take_slots($1, $2, $3, $4)",
                    &[&inner.node, &hosts, &per_host, &lease_interval(inner.lease)],
                )
                .await?;
            Ok(row
                .get::<_, Option<Vec<i64>>>(0)
                .map(|ids| SlotHold { ids }))
        })
    }

    fn claim_name(
        &self,
        dir: &str,
        name: &str,
        owner: &str,
        keep: Duration,
    ) -> Result<Option<String>, StoreError> {
        let (dir, name, owner) = (dir.to_owned(), name.to_owned(), owner.to_owned());
        self.run("claim a STOU name in", |inner| async move {
            let c = inner.client("claim a STOU name in").await?;
            let row = c
                .row(
                    "claim a STOU name in",
                    "SELECT bftp_claim_name($1, $2, $3, $4)",
                    &[&dir, &name, &owner, &keep.as_secs_f64()],
                )
                .await?;
            Ok(row.get::<_, Option<String>>(0))
        })
    }

    fn release_name(&self, dir: &str, name: &str, owner: &str) -> Result<(), StoreError> {
        let (dir, name, owner) = (dir.to_owned(), name.to_owned(), owner.to_owned());
        self.run("release a STOU name in", |inner| async move {
            let c = inner.client("release a STOU name in").await?;
            c.exec(
                "release a STOU name in",
                "DELETE FROM stou_names WHERE dir = $1 AND name = $2 AND owner = $3",
                &[&dir, &name, &owner],
            )
            .await?;
            Ok(())
        })
    }

    fn name_claimed_by_other(
        &self,
        dir: &str,
        name: &str,
        owner: &str,
        keep: Duration,
    ) -> Result<Option<String>, StoreError> {
        let (dir, name, owner) = (dir.to_owned(), name.to_owned(), owner.to_owned());
        self.run("look up a STOU name in", |inner| async move {
            let c = inner.client("look up a STOU name in").await?;
            let row = c
                .maybe_row(
                    "look up a STOU name in",
                    "SELECT owner FROM stou_names WHERE dir = $1 AND name = $2 \
                         AND owner <> $3 AND at >= now() - make_interval(secs => $4)",
                    &[&dir, &name, &owner, &keep.as_secs_f64()],
                )
                .await?;
            Ok(row.map(|r| r.get::<_, String>(0)))
        })
    }

    fn release(&self, hold: SlotHold) {
        if hold.ids.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        self.rt.spawn(async move {
            let done = match inner.pool.get().await {
                Ok(c) => release_ids(&c, &inner.node, &hold.ids).await.is_ok(),
                Err(_) => false,
            };
            if !done {
                // The heartbeat tries again; meanwhile the slots stay counted (never fewer).
                inner.slots.push_unreleased(hold.ids);
            }
        });
    }

    fn generation(&self) -> u64 {
        self.inner.slots.generation.load(Ordering::SeqCst)
    }

    fn want(&self, hosts: &[String]) {
        let (inner, hosts) = (self.inner.clone(), hosts.to_vec());
        self.rt.spawn(async move {
            if let Ok(c) = inner.pool.get().await {
                for h in hosts {
                    let _ = c
                        .execute(
                            "SELECT pg_notify($1, $2)",
                            &[&WANTED, &format!("{} {h}", inner.node)],
                        )
                        .await;
                }
            }
        });
    }

    fn wanted(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .inner
                .slots
                .wanted
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }
}
