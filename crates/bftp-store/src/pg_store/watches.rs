//! Watches (RULES.md §15) on PostgreSQL: the `watches` table (one row per watch, with the
//! node that holds it for its polls and until when, on the caller's clock) and
//! `watch_files` (one checkpoint entry per watch and path). A poll is written only by the
//! node that holds the watch ([`Inner::record_poll`]); a member's outcome settles its entry
//! in the member's own transaction ([`tx_mark`]).

use std::collections::BTreeMap;

use deadpool_postgres::Transaction;

use super::jobs::tx_submit;
use super::reach;
use super::sql::Sql;
use super::Inner;
use crate::error::StoreError;
use crate::keys;
use crate::plan;
use crate::record::{decode, encode, MemberV1, WatchFileV1, WatchStatusV1, WatchV1};
use crate::types::{Job, JobId, NewWatch, PollRecord, Watch, WatchId};
use bftp_core::watch::Entry;
use bftp_core::{MemberState, Timestamp};

/// Watches and their checkpoints. `held_until` is in ms since the epoch, as the caller's
/// `until`.
pub(super) const MIGRATION: &str = r#"
CREATE TABLE watches (
    id bigserial PRIMARY KEY,
    owner_uid bigint NOT NULL,
    rec bytea NOT NULL,
    holder text,
    held_until bigint
);
CREATE INDEX watches_owner ON watches (owner_uid, id);
CREATE TABLE watch_files (
    watch_id bigint NOT NULL REFERENCES watches (id) ON DELETE CASCADE,
    path bytea NOT NULL,
    rec bytea NOT NULL,
    PRIMARY KEY (watch_id, path)
);
"#;

fn wid(id: WatchId) -> i64 {
    i64::try_from(id.0).unwrap_or(i64::MAX)
}

fn decode_watch(id: WatchId, rec: &[u8]) -> Result<Watch, StoreError> {
    decode::<WatchV1>("watch", &keys::watch(id), rec)?.to_api(id)
}

/// The checkpoint rule in a member's transaction (`plan::checkpoint_key`): a member of a
/// watch's job (`watch`) that reached an outcome from `before` settles its entry, when the
/// entry still holds the content the member copied.
pub(super) async fn tx_mark(
    tx: &Transaction<'_>,
    op: &'static str,
    watch: Option<u64>,
    before: MemberState,
    m: &MemberV1,
) -> Result<(), StoreError> {
    let Some((w, path)) = plan::checkpoint_key(watch, before, m) else {
        return Ok(());
    };
    let row = tx
        .maybe_row(
            op,
            "SELECT rec FROM watch_files WHERE watch_id = $1 AND path = $2 FOR UPDATE",
            &[&wid(w), &path.as_bytes()],
        )
        .await?;
    let entry = match row {
        Some(r) => Some(
            decode::<WatchFileV1>("watch file", &keys::watch_file(w, path), r.get(0))?.to_core(),
        ),
        None => None,
    };
    if let Some(e) = plan::checkpoint_mark(entry.as_ref(), m) {
        tx.exec(
            op,
            "UPDATE watch_files SET rec = $3 WHERE watch_id = $1 AND path = $2",
            &[
                &wid(w),
                &path.as_bytes(),
                &encode(&WatchFileV1::from_core(&e)),
            ],
        )
        .await?;
    }
    Ok(())
}

impl Inner {
    pub(super) async fn create_watch(&self, w: NewWatch) -> Result<Watch, StoreError> {
        const OP: &str = "create_watch";
        let rec = WatchV1::new(&w);
        let c = self.client(OP).await?;
        let row = c
            .row(
                OP,
                "INSERT INTO watches (owner_uid, rec) VALUES ($1, $2) RETURNING id",
                &[&i64::from(w.owner_uid), &encode(&rec)],
            )
            .await?;
        let id = WatchId(row.get::<_, i64>(0).max(0) as u64);
        rec.to_api(id)
    }

    pub(super) async fn watch(&self, id: WatchId) -> Result<Option<Watch>, StoreError> {
        const OP: &str = "watch";
        let c = self.client(OP).await?;
        let row = c
            .maybe_row(OP, "SELECT rec FROM watches WHERE id = $1", &[&wid(id)])
            .await?;
        row.map(|r| decode_watch(id, r.get(0))).transpose()
    }

    pub(super) async fn watches(&self, owner: Option<u32>) -> Result<Vec<Watch>, StoreError> {
        const OP: &str = "watches";
        let c = self.client(OP).await?;
        let rows = c
            .rows(
                OP,
                "SELECT id, rec FROM watches WHERE ($1::bigint IS NULL OR owner_uid = $1)
                 ORDER BY id",
                &[&owner.map(i64::from)],
            )
            .await?;
        rows.iter()
            .map(|r| decode_watch(WatchId(r.get::<_, i64>(0).max(0) as u64), r.get(1)))
            .collect()
    }

    pub(super) async fn pause_watch(
        &self,
        id: WatchId,
        paused: bool,
    ) -> Result<Option<Watch>, StoreError> {
        const OP: &str = "pause_watch";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let Some(row) = tx
            .maybe_row(
                OP,
                "SELECT rec FROM watches WHERE id = $1 FOR UPDATE",
                &[&wid(id)],
            )
            .await?
        else {
            return Ok(None);
        };
        let mut rec: WatchV1 = decode("watch", &keys::watch(id), row.get(0))?;
        if rec.paused != paused {
            rec.paused = paused;
            tx.exec(
                OP,
                "UPDATE watches SET rec = $2 WHERE id = $1",
                &[&wid(id), &encode(&rec)],
            )
            .await?;
            tx.commit().await.map_err(reach::commit_failed(OP))?;
        }
        rec.to_api(id).map(Some)
    }

    pub(super) async fn remove_watch(&self, id: WatchId) -> Result<bool, StoreError> {
        const OP: &str = "remove_watch";
        let c = self.client(OP).await?;
        // Its checkpoint goes with it (ON DELETE CASCADE); its jobs stay.
        let n = c
            .exec(OP, "DELETE FROM watches WHERE id = $1", &[&wid(id)])
            .await?;
        Ok(n > 0)
    }

    pub(super) async fn watch_checkpoint(
        &self,
        id: WatchId,
    ) -> Result<BTreeMap<String, Entry>, StoreError> {
        const OP: &str = "watch_checkpoint";
        let c = self.client(OP).await?;
        let rows = c
            .rows(
                OP,
                "SELECT path, rec FROM watch_files WHERE watch_id = $1",
                &[&wid(id)],
            )
            .await?;
        let mut out = BTreeMap::new();
        for r in rows {
            let path: &[u8] = r.get(0);
            let key = [&keys::watch(id)[..], path].concat();
            let path = keys::watch_file_path(&key)?;
            let rec: WatchFileV1 = decode("watch file", &key, r.get(1))?;
            out.insert(path, rec.to_core());
        }
        Ok(out)
    }

    pub(super) async fn record_poll(
        &self,
        id: WatchId,
        poll: PollRecord,
    ) -> Result<(Watch, Option<Job>), StoreError> {
        const OP: &str = "record_poll";
        let count = match &poll.job {
            Some(j) => Some(plan::member_count(j.members.len())?),
            None => None,
        };
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let Some(row) = tx
            .maybe_row(
                OP,
                "SELECT rec, holder FROM watches WHERE id = $1 FOR UPDATE",
                &[&wid(id)],
            )
            .await?
        else {
            return Err(StoreError::WatchNotFound(id));
        };
        let holder: Option<String> = row.get(1);
        if holder.as_deref() != Some(self.node.as_str()) {
            return Err(StoreError::LeaseLost {
                op: OP,
                detail: format!(
                    "watch {id} is held by {}, not by node {}",
                    holder.map_or("no node".to_string(), |h| format!("node {h}")),
                    self.node
                ),
            });
        }
        let mut rec: WatchV1 = decode("watch", &keys::watch(id), row.get(0))?;
        if !poll.prune.is_empty() {
            let paths: Vec<&[u8]> = poll.prune.iter().map(|p| p.as_bytes()).collect();
            tx.exec(
                OP,
                "DELETE FROM watch_files WHERE watch_id = $1 AND path = ANY($2::bytea[])",
                &[&wid(id), &paths],
            )
            .await?;
        }
        if !poll.put.is_empty() {
            // One row per path (a path named twice: the last entry).
            let put: BTreeMap<&str, &Entry> =
                poll.put.iter().map(|(p, e)| (p.as_str(), e)).collect();
            let paths: Vec<&[u8]> = put.keys().map(|p| p.as_bytes()).collect();
            let recs: Vec<Vec<u8>> = put
                .values()
                .map(|e| encode(&WatchFileV1::from_core(e)))
                .collect();
            tx.exec(
                OP,
                "INSERT INTO watch_files (watch_id, path, rec)
                 SELECT $1, p, r FROM unnest($2::bytea[], $3::bytea[]) AS u(p, r)
                 ON CONFLICT (watch_id, path) DO UPDATE SET rec = EXCLUDED.rec",
                &[&wid(id), &paths, &recs],
            )
            .await?;
        }
        let made = match (poll.job, count) {
            (Some(mut j), Some(n)) => {
                j.watch = Some(id);
                Some(tx_submit(&tx, OP, &j, n).await?.into_job())
            }
            _ => None,
        };
        let kept: Vec<JobId> = rec.status.jobs.iter().copied().map(JobId).collect();
        let status = plan::polled(&kept, poll.status, made.as_ref().map(|j| j.id));
        rec.status = WatchStatusV1::from_api(&status);
        tx.exec(
            OP,
            "UPDATE watches SET rec = $2 WHERE id = $1",
            &[&wid(id), &encode(&rec)],
        )
        .await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok((rec.to_api(id)?, made))
    }

    /// One conditional UPDATE: the watch becomes `node`'s until `until` when no node holds
    /// it, `node` does, or the holder's time ended before `now`.
    pub(super) async fn hold_watch(
        &self,
        id: WatchId,
        node: String,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        const OP: &str = "hold_watch";
        let c = self.client(OP).await?;
        let ms = |t: Timestamp| i64::try_from(t.0).unwrap_or(i64::MAX);
        let n = c
            .exec(
                OP,
                "UPDATE watches SET holder = $2, held_until = $4
                 WHERE id = $1 AND (holder IS NULL OR holder = $2 OR held_until < $3)",
                &[&wid(id), &node, &ms(now), &ms(until)],
            )
            .await?;
        Ok(n == 1)
    }
}
