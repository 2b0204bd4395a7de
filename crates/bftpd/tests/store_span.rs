//! The store door runs a store call on the blocking pool inside the caller's span, so what
//! the store logs carries the job id (ARCHITECTURE.md, bftpd `store.rs`). Its own test
//! binary: it installs the process's global subscriber, which a span on another thread needs.

use std::sync::Arc;

use bftp_store::{JobStore, SledStore, StoreOptions};
use bftpd::store::{off_runtime, Store};
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_call_and_off_runtime_work_run_in_the_callers_span() {
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::TRACE),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sled: Arc<dyn JobStore> =
        Arc::new(SledStore::open(dir.path(), StoreOptions::default()).unwrap());
    let store = Store::new(sled);
    let current = || tracing::Span::current().metadata().map(|m| m.name());

    let span = tracing::info_span!("attempt", job = 42);
    let _entered = span.enter();
    let (in_call, thread) = store
        .call(move |_| Ok((current(), std::thread::current().id())))
        .await
        .unwrap();
    assert_ne!(
        thread,
        std::thread::current().id(),
        "the call ran on the runtime's worker"
    );
    assert_eq!(in_call, Some("attempt"));
    let off = off_runtime("probe", current).await.unwrap();
    assert_eq!(off, Some("attempt"));
}
