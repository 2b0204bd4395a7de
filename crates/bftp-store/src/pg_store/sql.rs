//! One statement at a time: prepared once per connection (`prepare_cached`, a failure there is
//! the `prepare` step's) and run for the caller's `op`, with the database's errors mapped to
//! the store's ([`pg`]). On a pooled connection and on a transaction alike.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::pg;
use crate::error::StoreError;

/// Parameters of a statement.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// [`GenericClient`]'s queries, each preparing its statement once per connection.
pub(super) trait Sql: GenericClient {
    /// Every row the statement returns.
    async fn rows(
        &self,
        op: &'static str,
        sql: &str,
        p: Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg("prepare"))?;
        self.query(&stmt, p).await.map_err(pg(op))
    }

    /// The one row the statement returns (none is an error).
    async fn row(&self, op: &'static str, sql: &str, p: Params<'_>) -> Result<Row, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg("prepare"))?;
        self.query_one(&stmt, p).await.map_err(pg(op))
    }

    /// The row the statement returns, if any.
    async fn maybe_row(
        &self,
        op: &'static str,
        sql: &str,
        p: Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg("prepare"))?;
        self.query_opt(&stmt, p).await.map_err(pg(op))
    }

    /// Runs the statement; the number of rows it changed.
    async fn exec(&self, op: &'static str, sql: &str, p: Params<'_>) -> Result<u64, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg("prepare"))?;
        self.execute(&stmt, p).await.map_err(pg(op))
    }
}

impl<C: GenericClient> Sql for C {}
