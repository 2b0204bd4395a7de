//! The one door to the store. Every store call of the daemon goes through [`Store::call`]
//! (or, for the cluster's host slots and a backup's files, [`off_runtime`]): it runs on the
//! blocking pool, because a write waits for its fsync (sled) or its database round trip
//! (PostgreSQL behind the blocking trait), inside the caller's tracing span, so the store's
//! log lines carry the job id; and a call that panicked comes back as
//! [`StoreError::Panicked`], never as a panic of the caller's task.
//!
//! Nothing else in bftpd calls `spawn_blocking` on the store.

use std::ops::Deref;
use std::sync::Arc;

use bftp_store::{JobStore, StoreError};

/// A shared handle on the job store. Derefs to the store for its in-memory accessors
/// (`lease`, `host_slots`, `node`, ...), which never wait.
#[derive(Clone)]
pub struct Store(Arc<dyn JobStore>);

impl Store {
    pub fn new(store: Arc<dyn JobStore>) -> Store {
        Store(store)
    }

    /// The store itself, for a caller that hands it to a blocking function.
    pub fn shared(&self) -> &Arc<dyn JobStore> {
        &self.0
    }

    /// Runs `f` on the store off the runtime's workers, in the caller's span.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.0.clone();
        off_runtime("store call", move || f(&*store)).await?
    }
}

impl Deref for Store {
    type Target = dyn JobStore;

    fn deref(&self) -> &(dyn JobStore + 'static) {
        &*self.0
    }
}

impl From<Arc<dyn JobStore>> for Store {
    fn from(store: Arc<dyn JobStore>) -> Store {
        Store(store)
    }
}

/// Runs blocking store work that is not one `JobStore` call (the cluster's host slots, a
/// backup writing its files) off the runtime's workers, in the caller's span; a panic of
/// `f` comes back as [`StoreError::Panicked`] naming `op`.
pub async fn off_runtime<T: Send + 'static>(
    op: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| StoreError::Panicked {
            op,
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_answers_and_a_panic_comes_back_as_an_error() {
        let (_dir, store) = crate::testkit::store();
        let store = Store::new(store);
        assert!(store.call(|s| s.is_empty()).await.unwrap());
        let err = store
            .call(|_| -> Result<(), StoreError> { panic!("boom") })
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Panicked {
                    op: "store call",
                    ..
                }
            ),
            "{err}"
        );
    }
}
