//! Start gates on PostgreSQL (`JobStore::defer`): the job's row moved and its claim (or
//! lease) released in one transaction; a job under another node's live lease is left alone.

use super::reach;
use super::sql::Sql;
use super::write::{tx_job, tx_put_job, tx_write};
use super::{id_of, Inner};
use crate::error::StoreError;
use crate::plan;
use crate::record::job_to_api;
use crate::types::{Job, JobId};
use bftp_core::window::Wait;
use bftp_core::Timestamp;

impl Inner {
    pub(super) async fn defer(
        &self,
        id: JobId,
        until: Timestamp,
        wait: Option<Wait>,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        const OP: &str = "defer";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        let rec = tx_job(&tx, OP, id).await?;
        if self.epoch_of(id).is_none() {
            // Not this node's claim (a job released when its host came back): only while no
            // other node holds it.
            let free: bool = tx
                .row(
                    OP,
                    "SELECT lease_node IS NULL OR lease_node = $2 OR lease_until < now()
                     FROM jobs WHERE id = $1",
                    &[&id_of(id), &self.node],
                )
                .await?
                .get(0);
            if !free {
                return Err(StoreError::LeaseLost {
                    op: OP,
                    detail: format!("job {id} is under another node's lease"),
                });
            }
        }
        let plan = plan::defer(id, rec, until, wait.as_ref(), now)?;
        tx_write(&tx, OP, id, &plan, &[], now).await?;
        tx_put_job(&tx, OP, id, &plan.rec, true).await?;
        if self.epoch_of(id).is_some() {
            self.commit_release(tx, OP, id).await?;
        } else {
            tx.commit().await.map_err(reach::commit_failed(OP))?;
        }
        job_to_api(id, &plan.rec)
    }
}
