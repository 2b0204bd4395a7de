//! Builders shared by the store's test binaries.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use bftp_core::{
    DestCommand, Disposition, FileStructure, FtpParams, RetryPolicy, Timestamp, TransferMode,
    TransferType,
};
use bftp_store::{
    KeyHash, NewJob, NewMember, RequestKey, Sealed, SealedEndpoint, SealedSpec, SledStore,
    StoreOptions,
};

pub const T0: Timestamp = Timestamp(1_796_040_000_000);

pub fn at(secs: u64) -> Timestamp {
    Timestamp(T0.0 + secs * 1000)
}

pub fn kh(b: u8) -> KeyHash {
    KeyHash([b; 32])
}

pub fn open(dir: &Path) -> SledStore {
    SledStore::open(dir, StoreOptions::default()).unwrap()
}

/// A spec with no field at its default, and sealed bytes covering every byte value.
pub fn spec() -> SealedSpec {
    SealedSpec {
        source: SealedEndpoint {
            host: "src.example.org".into(),
            port: 2121,
            user: "alice".into(),
            password: Some(Sealed((0..=255).collect())),
            acct: Some(Sealed(vec![0, 0, 7])),
            path: "/pub/data/*.csv".into(),
        },
        destination: Some(SealedEndpoint {
            host: "2001:db8::1".into(),
            port: 21,
            user: "anonymous".into(),
            password: None,
            acct: None,
            path: "incoming/".into(),
        }),
        disposition: Disposition::Move,
        dest_command: DestCommand::Unique,
        params: FtpParams {
            transfer_type: TransferType::Local(36),
            mode: TransferMode::Compressed,
            structure: FileStructure::Page,
        },
        start_at: at(60),
        retry: RetryPolicy {
            first_interval: Duration::from_millis(90_500),
            factor: 1.1,
            cap: Duration::from_secs(7200),
            max_attempts: 7,
            deadline: Duration::from_secs(86_400),
        },
        notify: vec!["alice@example.org".into(), "ops@example.org".into()],
        keyword_present: true,
        proof: None,
        recursive: false,
    }
}

pub fn job(owner: u32) -> NewJob {
    NewJob {
        owner_uid: owner,
        spec: spec(),
        keyword_hash: None,
        request: None,
        created_at: T0,
        members: vec![],
    }
}

pub fn with_members(mut j: NewJob, names: &[&str]) -> NewJob {
    j.members = names
        .iter()
        .map(|n| NewMember {
            name: n.to_string(),
            size: Some(n.len() as u64),
            modified: None,
            refused: None,
        })
        .collect();
    j
}

pub fn with_request(mut j: NewJob, key: u8, fingerprint: u8) -> NewJob {
    j.request = Some(RequestKey {
        key_hash: kh(key),
        fingerprint: kh(fingerprint),
    });
    j
}

/// Every byte of every file under `dir`.
pub fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(all_bytes(&p));
        } else {
            out.extend(std::fs::read(&p).unwrap());
        }
    }
    out
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
