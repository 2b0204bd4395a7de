//! What the daemon's in-crate tests share: a store in a temporary directory and a job in it.

use std::sync::Arc;

use bftp_core::{DestCommand, Disposition, FtpParams, RetryPolicy, Timestamp};
use bftp_store::{
    JobId, JobStore, NewJob, NewMember, SealedEndpoint, SealedSpec, SledStore, StoreOptions,
};

/// The wall time a test's clock starts at.
pub const T0: Timestamp = Timestamp(1_800_000_000_000);

/// A store in a temporary directory, removed with the returned guard.
pub fn store() -> (tempfile::TempDir, Arc<dyn JobStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), StoreOptions::default()).unwrap();
    (dir, Arc::new(store))
}

/// Submits a one-file copy job, due at [`T0`], mailed to `ops@example.org`.
pub fn submit_one_file_job(store: &dyn JobStore, retry: RetryPolicy) -> JobId {
    submit_one_file_job_notifying(store, retry, vec!["ops@example.org".into()])
}

/// [`submit_one_file_job`] with these `notify` entries.
pub fn submit_one_file_job_notifying(
    store: &dyn JobStore,
    retry: RetryPolicy,
    notify: Vec<String>,
) -> JobId {
    let endpoint = |path: &str| SealedEndpoint {
        host: "127.0.0.1".into(),
        port: 21,
        user: "anonymous".into(),
        password: None,
        acct: None,
        path: path.into(),
        tls: Default::default(),
    };
    let spec = SealedSpec {
        source: endpoint("a.bin"),
        destination: Some(endpoint("b/")),
        disposition: Disposition::Copy,
        dest_command: DestCommand::Replace,
        params: FtpParams::default(),
        start_at: T0,
        retry,
        notify,
        keyword_present: false,
        proof: None,
        recursive: false,
        data_path: None,
    };
    let job = NewJob {
        watch: None,
        owner_uid: 1000,
        spec,
        keyword_hash: None,
        request: None,
        created_at: T0,
        members: vec![NewMember {
            name: "a.bin".into(),
            size: None,
            modified: None,
            refused: None,
        }],
    };
    store.submit(job).unwrap().job().id
}

/// A one-file copy job as a request makes it: from `127.0.0.1` to `127.0.0.1`, asking for no
/// data path.
pub fn job_spec() -> bftp_core::JobSpec {
    let endpoint = |path: &str| bftp_core::Endpoint {
        host: "127.0.0.1".into(),
        port: 21,
        user: "anonymous".into(),
        password: None,
        acct: None,
        path: path.into(),
        tls: Default::default(),
    };
    bftp_core::JobSpec {
        source: endpoint("a.bin"),
        destination: Some(endpoint("b/")),
        disposition: Disposition::Copy,
        dest_command: DestCommand::Replace,
        params: FtpParams::default(),
        start_at: T0,
        retry: RetryPolicy::default(),
        notify: vec![],
        keyword: None,
        proof: None,
        recursive: false,
        data_path: None,
    }
}
