//! Members and a recursive job's walk.

use super::reach;
use super::sql::Sql;
use super::watches::tx_mark;
use super::write::{
    decode_member_row, tx_job, tx_lock_job, tx_member, tx_put_job, tx_put_member, tx_write,
};
use super::{id_of, pg, Inner};
use crate::error::StoreError;
use crate::keys;
use crate::plan::{self, Listing};
use crate::record::{decode, JobV1};
use crate::types::{JobId, Member, MemberUpdate, NewMember, Walk};
use bftp_core::Timestamp;

impl Inner {
    pub(super) async fn members(&self, id: JobId) -> Result<Vec<Member>, StoreError> {
        let c = self.client("members").await?;
        self.require_job(&c, "members", id).await?;
        let rows = c
            .rows(
                "members",
                "SELECT idx, rec FROM members WHERE job = $1 ORDER BY idx",
                &[&id_of(id)],
            )
            .await?;
        rows.iter().map(|r| decode_member_row(id, r)).collect()
    }

    pub(super) async fn members_page(
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
            .rows(
                "members",
                "SELECT idx, rec FROM members WHERE job = $1 AND idx >= $2 \
                     ORDER BY idx LIMIT $3",
                &[&id_of(id), &from, &limit],
            )
            .await?;
        rows.iter().map(|r| decode_member_row(id, r)).collect()
    }

    pub(super) async fn freeze_members(
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

    pub(super) async fn walk(&self, id: JobId) -> Result<Walk, StoreError> {
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

    pub(super) async fn record_directory(
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

    pub(super) async fn record_made_dirs(
        &self,
        id: JobId,
        dirs: Vec<String>,
    ) -> Result<(), StoreError> {
        const OP: &str = "record_made_dirs";
        let mut c = self.client(OP).await?;
        let tx = self.begin(&mut c, OP, Some(id)).await?;
        if let Some(rec) = plan::made_dirs(tx_job(&tx, OP, id).await?, &dirs) {
            tx_put_job(&tx, OP, id, &rec, false).await?;
            tx.commit().await.map_err(reach::commit_failed(OP))?;
        }
        Ok(())
    }

    pub(super) async fn update_member(
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
        tx_lock_job(&tx, OP, id).await?;
        let Some(mut m) = tx_member(&tx, OP, id, index).await? else {
            return Err(StoreError::MemberNotFound { job: id, index });
        };
        let before = m.state.to_api();
        m.apply(id, index, &update, now)?;
        tx_put_member(&tx, OP, id, index, &m).await?;
        let after = m.state.to_api();
        let event = crate::events::member_may_event(before, after);
        if event || plan::settles_checkpoint(before, &m) {
            let rec = tx_job(&tx, OP, id).await?;
            if event {
                super::events::tx_member_event(&tx, OP, id, &rec, index, before, after, now)
                    .await?;
            }
            tx_mark(&tx, OP, rec.watch, before, &m).await?;
        }
        tx.commit().await.map_err(reach::commit_failed(OP))?;
        Ok(m.to_api(index))
    }
}
