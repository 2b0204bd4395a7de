//! The key fingerprint, the refusal memory and the pair memory.

use super::reach;
use super::sql::Sql;
use super::{pg, Inner};
use crate::error::StoreError;
use crate::keys;
use crate::record::{decode, encode, PairV1, RefusalV1};
use bftp_core::refusal::{observe, RefusalKey, RefusalMemory, Sighting};
use bftp_core::route::{PairKey, PairMemory};
use bftp_core::Timestamp;

/// The pair memory (`bftp_core::route::PairMemory`), one row per ordered pair of servers
/// (`keys::pair`), shared by all nodes. `seen` beside the record, so that the newest
/// sighting is kept in the one statement that writes it.
pub(super) const PAIRS_MIGRATION: &str =
    "CREATE TABLE pairs (key bytea PRIMARY KEY, seen bigint NOT NULL, rec bytea NOT NULL);";

impl Inner {
    pub(super) async fn is_empty(&self) -> Result<bool, StoreError> {
        let c = self.client("is_empty").await?;
        let any: bool = c
            .row("is_empty", "SELECT EXISTS (SELECT 1 FROM jobs)", &[])
            .await?
            .get(0);
        Ok(!any)
    }

    pub(super) async fn key_fingerprint(&self) -> Result<Option<[u8; 32]>, StoreError> {
        let c = self.client("key_fingerprint").await?;
        let row = c
            .maybe_row(
                "key_fingerprint",
                "SELECT value FROM bftp_meta WHERE key = 'key_fingerprint'",
                &[],
            )
            .await?;
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

    pub(super) async fn set_key_fingerprint(&self, fp: [u8; 32]) -> Result<(), StoreError> {
        let c = self.client("set_key_fingerprint").await?;
        c.exec(
            "set_key_fingerprint",
            "INSERT INTO bftp_meta (key, value) VALUES ('key_fingerprint', $1)
             ON CONFLICT (key) DO UPDATE SET value = $1",
            &[&&fp[..]],
        )
        .await?;
        Ok(())
    }

    /// Inserts the fingerprint if none is recorded, and reads the one that stands, in one
    /// statement. Under READ COMMITTED the statement's snapshot may predate another node's
    /// insert that made ours a no-op: then neither shows and the statement runs again (it
    /// sees the other's row now).
    pub(super) async fn adopt_key_fingerprint(&self, fp: [u8; 32]) -> Result<[u8; 32], StoreError> {
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

    pub(super) async fn refusal(
        &self,
        key: RefusalKey,
    ) -> Result<Option<RefusalMemory>, StoreError> {
        let k = keys::refusal(&key);
        let c = self.client("refusal").await?;
        let row = c
            .maybe_row("refusal", "SELECT rec FROM refusals WHERE key = $1", &[&k])
            .await?;
        match row {
            Some(r) => Ok(Some(
                decode::<RefusalV1>("refusal", &k, r.get::<_, &[u8]>(0))?.to_core(&k)?,
            )),
            None => Ok(None),
        }
    }

    pub(super) async fn record_refusal(
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
        tx.exec(
            OP,
            "INSERT INTO refusals (key, rec) VALUES ($1, '') ON CONFLICT (key) DO NOTHING",
            &[&k],
        )
        .await?;
        let row = tx
            .row(
                OP,
                "SELECT rec FROM refusals WHERE key = $1 FOR UPDATE",
                &[&k],
            )
            .await?;
        let bytes: &[u8] = row.get(0);
        let previous = if bytes.is_empty() {
            None
        } else {
            Some(decode::<RefusalV1>("refusal", &k, bytes)?.to_core(&k)?)
        };
        let memory = observe(previous.as_ref(), &seen, now);
        tx.exec(
            OP,
            "UPDATE refusals SET rec = $2 WHERE key = $1",
            &[&k, &encode(&RefusalV1::from_core(&memory))],
        )
        .await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok(memory)
    }
}

impl Inner {
    pub(super) async fn pair_memory(&self, key: PairKey) -> Result<Option<PairMemory>, StoreError> {
        const OP: &str = "pair_memory";
        let k = keys::pair(&key);
        let c = self.client(OP).await?;
        let row = c
            .maybe_row(OP, "SELECT rec FROM pairs WHERE key = $1", &[&k])
            .await?;
        match row {
            Some(r) => Ok(Some(
                decode::<PairV1>("pair", &k, r.get::<_, &[u8]>(0))?.to_core(),
            )),
            None => Ok(None),
        }
    }

    /// One statement: the row locked by its conflict, replaced unless it holds a later
    /// sighting, so two nodes' writes keep the newest whatever their order.
    pub(super) async fn remember_pair(
        &self,
        key: PairKey,
        memory: PairMemory,
    ) -> Result<(), StoreError> {
        const OP: &str = "remember_pair";
        let k = keys::pair(&key);
        let seen = i64::try_from(memory.seen.0).unwrap_or(i64::MAX);
        let c = self.client(OP).await?;
        c.exec(
            OP,
            "INSERT INTO pairs (key, seen, rec) VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE SET seen = EXCLUDED.seen, rec = EXCLUDED.rec
             WHERE pairs.seen <= EXCLUDED.seen",
            &[&k, &seen, &encode(&PairV1::from_core(&memory))],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn forget_pair(&self, key: PairKey) -> Result<bool, StoreError> {
        const OP: &str = "forget_pair";
        let k = keys::pair(&key);
        let c = self.client(OP).await?;
        Ok(c.exec(OP, "DELETE FROM pairs WHERE key = $1", &[&k])
            .await?
            > 0)
    }
}
