//! Limits learned from the servers (`bftp_core::hostlimit`), one row per host (lower-case
//! name), shared by all nodes. `learned_at` beside the record, so that the newest write is
//! kept, and a raise lands only on the record it was computed from, each in one statement.

use super::sql::Sql;
use super::Inner;
use crate::error::StoreError;
use crate::record::{decode, encode, HostLimitV1};
use bftp_core::hostlimit::HostLimit;

/// Migration 9: the learned limits.
pub(super) const MIGRATION: &str = "CREATE TABLE host_limits (host text PRIMARY KEY, \
     learned_at bigint NOT NULL, lim bigint NOT NULL, rec bytea NOT NULL);";

fn ms(t: bftp_core::Timestamp) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

impl Inner {
    pub(super) async fn learn_host_limit(&self, limit: HostLimit) -> Result<(), StoreError> {
        const OP: &str = "learn_host_limit";
        let host = limit.host.to_ascii_lowercase();
        let c = self.client(OP).await?;
        c.exec(
            OP,
            // `bftp_core::hostlimit::replaces`: later wins, at the same time the lower.
            "INSERT INTO host_limits (host, learned_at, lim, rec) VALUES ($1, $2, $3, $4)
             ON CONFLICT (host) DO UPDATE
             SET learned_at = EXCLUDED.learned_at, lim = EXCLUDED.lim, rec = EXCLUDED.rec
             WHERE (host_limits.learned_at, -host_limits.lim)
                <= (EXCLUDED.learned_at, -EXCLUDED.lim)",
            &[
                &host,
                &ms(limit.learned_at),
                &i64::from(limit.limit),
                &encode(&HostLimitV1::from_core(&limit)),
            ],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn host_limits(&self) -> Result<Vec<HostLimit>, StoreError> {
        const OP: &str = "host_limits";
        let c = self.client(OP).await?;
        let rows = c
            .rows(OP, "SELECT host, rec FROM host_limits ORDER BY host", &[])
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let host: String = r.get(0);
            let rec = decode::<HostLimitV1>("host limit", host.as_bytes(), r.get::<_, &[u8]>(1))?;
            out.push(rec.to_core(&host));
        }
        Ok(out)
    }

    pub(super) async fn host_limit(&self, host: String) -> Result<Option<HostLimit>, StoreError> {
        const OP: &str = "host_limit";
        let host = host.to_ascii_lowercase();
        let c = self.client(OP).await?;
        let row = c
            .maybe_row(OP, "SELECT rec FROM host_limits WHERE host = $1", &[&host])
            .await?;
        match row {
            Some(r) => Ok(Some(
                decode::<HostLimitV1>("host limit", host.as_bytes(), r.get::<_, &[u8]>(0))?
                    .to_core(&host),
            )),
            None => Ok(None),
        }
    }

    /// The row changes only while it still holds `seen` (its `learned_at` and limit).
    pub(super) async fn raise_host_limit(
        &self,
        seen: HostLimit,
        to: Option<HostLimit>,
    ) -> Result<bool, StoreError> {
        const OP: &str = "raise_host_limit";
        let host = seen.host.to_ascii_lowercase();
        let c = self.client(OP).await?;
        let Some(r) = c
            .maybe_row(
                OP,
                "SELECT rec FROM host_limits WHERE host = $1 AND learned_at = $2",
                &[&host, &ms(seen.learned_at)],
            )
            .await?
        else {
            return Ok(false);
        };
        let kept = decode::<HostLimitV1>("host limit", host.as_bytes(), r.get::<_, &[u8]>(0))?;
        if kept.limit != seen.limit {
            return Ok(false);
        }
        let changed = match to {
            Some(to) => {
                c.exec(
                    OP,
                    "UPDATE host_limits SET learned_at = $3, lim = $6, rec = $4
                     WHERE host = $1 AND learned_at = $2 AND rec = $5",
                    &[
                        &host,
                        &ms(seen.learned_at),
                        &ms(to.learned_at),
                        &encode(&HostLimitV1::from_core(&to)),
                        &r.get::<_, &[u8]>(0),
                        &i64::from(to.limit),
                    ],
                )
                .await?
            }
            None => {
                c.exec(
                    OP,
                    "DELETE FROM host_limits WHERE host = $1 AND learned_at = $2 AND rec = $3",
                    &[&host, &ms(seen.learned_at), &r.get::<_, &[u8]>(0)],
                )
                .await?
            }
        };
        Ok(changed > 0)
    }
}
