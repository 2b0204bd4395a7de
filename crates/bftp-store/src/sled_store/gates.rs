//! Start gates on sled (`JobStore::defer`): one transaction, the due index moved.

use super::write::{tx_job, tx_write};
use super::{OrAbort, SledStore};
use crate::error::StoreError;
use crate::plan;
use crate::record::job_to_api;
use crate::types::{Job, JobId};
use bftp_core::window::Wait;
use bftp_core::Timestamp;

impl SledStore {
    pub(super) fn defer_job(
        &self,
        id: JobId,
        until: Timestamp,
        wait: Option<Wait>,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        self.write("defer", |tx| {
            let rec = tx_job(tx, id)?;
            let plan = plan::defer(id, rec, until, wait.as_ref(), now).or_abort()?;
            tx_write(tx, id, &plan, &[], now)?;
            job_to_api(id, &plan.rec).or_abort()
        })
    }
}
