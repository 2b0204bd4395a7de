//! The outbox of job reports (claimed per node for a lease) and attempt transcripts.

use super::reach;
use super::sql::Sql;
use super::write::{decode_outbox_row, tx_lock_job};
use super::{id_of, lease_interval, ms, outbox_code, Inner};
use crate::error::StoreError;
use crate::keys;
use crate::record::{decode, encode, OutboxV1, TranscriptV1, RECORD_VERSION};
use crate::types::{AttemptTranscript, DeliveryTry, JobId, OutboxEntry};
use bftp_core::Timestamp;

impl Inner {
    pub(super) async fn outbox_entry(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError> {
        let c = self.client("outbox_entry").await?;
        let row = c
            .maybe_row(
                "outbox_entry",
                "SELECT job, rec FROM outbox WHERE job = $1",
                &[&id_of(id)],
            )
            .await?;
        row.as_ref().map(decode_outbox_row).transpose()
    }

    /// Claims the due reports for this node for one lease: another node does not deliver
    /// them meanwhile.
    pub(super) async fn outbox_due(
        &self,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let c = self.client("outbox_due").await?;
        let rows = c
            .rows(
                "outbox_due",
                "UPDATE outbox o SET claim_node = $3,
                     claim_until = now() + make_interval(secs => $4)
                 FROM (SELECT job FROM outbox
                       WHERE state = 0 AND next_at <= $1
                         AND (claim_node IS NULL OR claim_until < now() OR claim_node = $3)
                       ORDER BY next_at, job LIMIT $2 FOR UPDATE SKIP LOCKED) c
                 WHERE o.job = c.job
                 RETURNING o.job, o.rec, o.next_at",
                &[
                    &ms(until),
                    &(limit as i64),
                    &self.node,
                    &lease_interval(self.lease),
                ],
            )
            .await?;
        let mut out = rows
            .iter()
            .map(|r| Ok((r.get::<_, Option<i64>>(2), decode_outbox_row(r)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        out.sort_by_key(|(next, e)| (*next, e.job));
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }

    pub(super) async fn outbox_next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let c = self.client("outbox_next_due").await?;
        let row = c
            .row(
                "outbox_next_due",
                "SELECT min(next_at) FROM outbox WHERE state = 0
                   AND (claim_node IS NULL OR claim_until < now() OR claim_node = $1)",
                &[&self.node],
            )
            .await?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|t| Timestamp(t.max(0) as u64)))
    }

    pub(super) async fn outbox_pending(&self) -> Result<u64, StoreError> {
        let c = self.client("outbox_pending").await?;
        let n: i64 = c
            .row(
                "outbox_pending",
                "SELECT count(*) FROM outbox WHERE state = 0",
                &[],
            )
            .await?
            .get(0);
        Ok(n.max(0) as u64)
    }

    pub(super) async fn record_delivery(
        &self,
        id: JobId,
        result: DeliveryTry,
        now: Timestamp,
    ) -> Result<OutboxEntry, StoreError> {
        const OP: &str = "record_delivery";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, None).await?;
        let row = tx
            .maybe_row(
                OP,
                "SELECT rec FROM outbox WHERE job = $1 FOR UPDATE",
                &[&id_of(id)],
            )
            .await?;
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
        tx.exec(
            OP,
            "UPDATE outbox SET rec = $2, state = $3, next_at = $4,
                 claim_node = CASE WHEN $5 THEN $6 END,
                 claim_until = CASE WHEN $5 THEN now() + make_interval(secs => $7) END
                 WHERE job = $1",
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
        .await?;
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        rec.to_api(id)
    }

    pub(super) async fn set_transcript(
        &self,
        id: JobId,
        t: AttemptTranscript,
    ) -> Result<(), StoreError> {
        const OP: &str = "set_transcript";
        let value = encode(&TranscriptV1 {
            v: RECORD_VERSION,
            attempt: t.attempt,
            lines: t.lines,
        });
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        tx_lock_job(&tx, OP, id).await?;
        tx.exec(
            OP,
            "INSERT INTO transcripts (job, rec) VALUES ($1, $2)
             ON CONFLICT (job) DO UPDATE SET rec = $2",
            &[&id_of(id), &value],
        )
        .await?;
        tx.commit().await.map_err(reach::commit_failed(OP))
    }

    pub(super) async fn transcript(
        &self,
        id: JobId,
    ) -> Result<Option<AttemptTranscript>, StoreError> {
        let c = self.client("transcript").await?;
        let row = c
            .maybe_row(
                "transcript",
                "SELECT rec FROM transcripts WHERE job = $1",
                &[&id_of(id)],
            )
            .await?;
        match row {
            Some(r) => Ok(Some(
                decode::<TranscriptV1>("transcript", &keys::job(id), r.get::<_, &[u8]>(0))?
                    .to_api(),
            )),
            None => Ok(None),
        }
    }
}
