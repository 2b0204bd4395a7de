//! Builders shared by the store's test binaries.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use bftp_core::{
    DestCommand, Disposition, FileStructure, FtpParams, RetryPolicy, Timestamp, TransferMode,
    TransferType,
};
use std::sync::{Arc, Mutex};

use bftp_store::{
    JobStore, KeyHash, NewJob, NewMember, PgOptions, PgStore, RequestKey, Sealed, SealedEndpoint,
    SealedSpec, SledStore, StoreOptions, VerifyReport,
};

pub use bftp_testpg as pgcluster;

/// Where a trait test's store lives: a sled directory or a PostgreSQL database. `open` may be
/// called again after the last store was dropped: the same data, reopened.
pub enum Fixture {
    Sled {
        dir: tempfile::TempDir,
        last: Mutex<Option<std::sync::Weak<SledStore>>>,
    },
    Pg {
        url: String,
    },
}

impl Fixture {
    pub fn sled() -> Fixture {
        Fixture::Sled {
            dir: tempfile::tempdir().unwrap(),
            last: Mutex::new(None),
        }
    }

    pub fn pg() -> Fixture {
        Fixture::Pg {
            url: pgcluster::fresh_database(),
        }
    }

    pub fn open(&self) -> Arc<dyn JobStore> {
        match self {
            Fixture::Sled { dir, last } => {
                let s = Arc::new(open(dir.path()));
                *last.lock().unwrap() = Some(Arc::downgrade(&s));
                s
            }
            Fixture::Pg { url } => Arc::new(open_pg(url, "test-node")),
        }
    }

    /// sled's flush count (of the store opened last); `None` for PostgreSQL.
    pub fn flushes(&self) -> Option<u64> {
        match self {
            Fixture::Sled { last, .. } => last
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|s| s.upgrade())
                .map(|s| s.flush_count()),
            Fixture::Pg { .. } => None,
        }
    }

    /// sled's full read of every record (of the store opened last); `None` for PostgreSQL,
    /// whose rows are read by every query.
    pub fn verify(&self) -> Option<VerifyReport> {
        match self {
            Fixture::Sled { last, .. } => last
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|s| s.upgrade())
                .map(|s| s.verify().unwrap()),
            Fixture::Pg { .. } => None,
        }
    }

    /// Whether the bytes appear anywhere in what the store keeps: sled's files, or a dump of
    /// the database (where bytea columns appear hex-encoded, so both forms are looked for).
    pub fn stored_contains(&self, needle: &[u8]) -> bool {
        match self {
            Fixture::Sled { dir, .. } => contains(&all_bytes(dir.path()), needle),
            Fixture::Pg { url } => {
                let dump = pg_dump(url);
                let hex: String = needle.iter().map(|b| format!("{b:02x}")).collect();
                contains(&dump, needle) || contains(&dump, hex.as_bytes())
            }
        }
    }
}

pub fn open_pg(url: &str, node: &str) -> PgStore {
    let mut o = PgOptions::new(url, node);
    o.pool_size = 4;
    PgStore::open(o).unwrap()
}

/// Every row of the database, as pg_dump writes it.
pub fn pg_dump(url: &str) -> Vec<u8> {
    let c = pgcluster::cluster();
    let bin = std::path::Path::new("/usr/lib/postgresql");
    let dump = std::fs::read_dir(bin)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/pg_dump"))
        .find(|p| p.exists())
        .expect("pg_dump");
    let out = std::process::Command::new(dump)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &c.port.to_string(),
            "-U",
            "postgres",
        ])
        .arg(pgcluster::Cluster::db_of(url))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Each named test body (`fn name(fx: &Fixture)`) as a test on sled and one on PostgreSQL.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod sled {
            $( #[test] fn $name() { super::$name(&super::Fixture::sled()) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(&super::Fixture::pg()) } )*
        }
    };
}

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
            tls: Default::default(),
        },
        destination: Some(SealedEndpoint {
            host: "2001:db8::1".into(),
            port: 21,
            user: "anonymous".into(),
            password: None,
            acct: None,
            path: "incoming/".into(),
            tls: Default::default(),
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
        data_path: None,
    }
}

pub fn job(owner: u32) -> NewJob {
    NewJob {
        watch: None,
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
