//! The daemon's secret key: sealing FTP passwords at rest, and the keyed hashes that stand in
//! for keywords and request keys (RULES.md §8: the keyword is never stored in clear).

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context};
use bftp_core::{Endpoint, JobSpec, Secret};
use bftp_store::{JobStore, Sealed, SealedEndpoint, SealedSpec};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;
const SEAL_AAD: &[u8] = b"bftp sealed secret v1";

/// Keys derived from the one key file, each for a single purpose.
pub struct Secrets {
    cipher: XChaCha20Poly1305,
    keyword_key: [u8; 32],
    request_key: [u8; 32],
    fingerprint_key: [u8; 32],
    key_fingerprint: [u8; 32],
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(****)")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("a sealed secret does not open with this daemon's key (was the key file replaced?)")]
pub struct UnsealError;

impl Secrets {
    /// Loads the key file, creating it (mode 0600, random) on first start. A key file that
    /// others can read, or of the wrong length, is refused.
    pub fn load_or_create(path: &Path) -> anyhow::Result<Secrets> {
        let master = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                let mut key = [0u8; KEY_LEN];
                rand::rngs::OsRng.fill_bytes(&mut key);
                f.write_all(&key)
                    .and_then(|_| f.sync_all())
                    .with_context(|| format!("cannot write key file {}", path.display()))?;
                if let Some(dir) = path.parent() {
                    std::fs::File::open(dir).and_then(|d| d.sync_all()).ok();
                }
                tracing::info!(path = %path.display(), "created a new secret key file");
                key
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta = std::fs::metadata(path)
                    .with_context(|| format!("cannot stat key file {}", path.display()))?;
                if meta.permissions().mode() & 0o077 != 0 {
                    bail!(
                        "key file {} is readable by others (mode {:o}); chmod 600 it",
                        path.display(),
                        meta.permissions().mode() & 0o777
                    );
                }
                let mut buf = Vec::new();
                std::fs::File::open(path)
                    .and_then(|mut f| f.read_to_end(&mut buf))
                    .with_context(|| format!("cannot read key file {}", path.display()))?;
                let key: [u8; KEY_LEN] = buf.as_slice().try_into().map_err(|_| {
                    anyhow::anyhow!("key file {} holds {} bytes, not {KEY_LEN}: it is damaged or not a bftpd key", path.display(), buf.len())
                })?;
                key
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create key file {}", path.display()))
            }
        };
        Ok(Secrets::from_master(&master))
    }

    pub fn from_master(master: &[u8; KEY_LEN]) -> Secrets {
        let cipher_key = blake3::derive_key("bftpd 2026 sealing FTP secrets", master);
        Secrets {
            cipher: XChaCha20Poly1305::new(&cipher_key.into()),
            keyword_key: blake3::derive_key("bftpd 2026 keyword index", master),
            request_key: blake3::derive_key("bftpd 2026 request key index", master),
            fingerprint_key: blake3::derive_key("bftpd 2026 request fingerprint", master),
            key_fingerprint: blake3::derive_key("bftpd 2026 key fingerprint in the store", master),
        }
    }

    /// Loads the key the store's data is sealed with, and proves it is that key (see
    /// ARCHITECTURE.md, "the key fingerprint"), by the one rule [`key_decision`]. In short:
    /// a key is created only where the store records none; a store of one (sled) holding
    /// nothing sealed takes a replaced key; a shared store (PostgreSQL) keeps the first key
    /// recorded, whether or not it holds a job, because another node may be sealing with it
    /// right now: a node without that key refuses to start and says how to copy it.
    pub fn open_for_store(path: &Path, store: &dyn JobStore) -> anyhow::Result<Secrets> {
        let recorded = store
            .key_fingerprint()
            .context("cannot read the key fingerprint of the job store")?;
        let sealed = !store.is_empty().context("cannot read the job store")?;
        let shared = store.cluster().is_some();
        let present = path
            .try_exists()
            .with_context(|| format!("cannot look for key file {}", path.display()))?;
        if !present {
            let found = if recorded.is_some() {
                KeyFound::NoFileRecorded
            } else {
                KeyFound::NoFileNoRecord
            };
            if key_decision(found, shared, sealed) == KeyDecision::RefuseMissing {
                bail!(missing_message(path, shared));
            }
        }
        let secrets = Secrets::load_or_create(path)?;
        let ours = secrets.key_fingerprint();
        let found = match recorded {
            None => KeyFound::FileNoRecord,
            Some(fp) if fp == ours => KeyFound::FileMatches,
            Some(_) => KeyFound::FileDiffers,
        };
        match key_decision(found, shared, sealed) {
            KeyDecision::Use => {}
            KeyDecision::Adopt => {
                let stands = store
                    .adopt_key_fingerprint(ours)
                    .context("cannot record the key fingerprint in the job store")?;
                if stands != ours {
                    // Another node recorded its key between our look and our record.
                    bail!(other_message(path, shared));
                }
                tracing::info!(path = %path.display(), "recorded the key's fingerprint in the store");
            }
            KeyDecision::Replace => {
                store
                    .set_key_fingerprint(ours)
                    .context("cannot record the key fingerprint in the job store")?;
                tracing::info!(path = %path.display(), "recorded the key's fingerprint in the store, replacing a key that sealed nothing");
            }
            KeyDecision::RefuseMissing => bail!(missing_message(path, shared)),
            KeyDecision::RefuseOther => bail!(other_message(path, shared)),
        }
        Ok(secrets)
    }

    /// What the store keeps to recognise this key: a hash derived from it for this one
    /// purpose (it reveals nothing of the key or of the other derived keys).
    pub fn key_fingerprint(&self) -> [u8; 32] {
        self.key_fingerprint
    }

    /// nonce || ciphertext+tag; a fresh random nonce each time.
    pub fn seal(&self, clear: &str) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let ct = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: clear.as_bytes(),
                    aad: SEAL_AAD,
                },
            )
            .expect("XChaCha20-Poly1305 encryption of an in-memory buffer cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        out
    }

    pub fn unseal(&self, sealed: &[u8]) -> Result<String, UnsealError> {
        if sealed.len() < NONCE_LEN {
            return Err(UnsealError);
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        let clear = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: SEAL_AAD,
                },
            )
            .map_err(|_| UnsealError)?;
        String::from_utf8(clear).map_err(|_| UnsealError)
    }

    /// The index key of a keyword. Independent of the owner, so an admin can search all jobs.
    pub fn keyword_hash(&self, keyword: &str) -> [u8; 32] {
        *blake3::keyed_hash(&self.keyword_key, keyword.as_bytes()).as_bytes()
    }

    /// The index key of a request key: per user, so two users' keys never collide.
    pub fn request_key_hash(&self, uid: u32, key: &str) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.request_key);
        h.update(&uid.to_be_bytes());
        h.update(key.as_bytes());
        *h.finalize().as_bytes()
    }

    /// A keyed digest of a request's parameters (which include passwords: hence keyed).
    pub fn fingerprint(&self, canonical: &[u8]) -> [u8; 32] {
        *blake3::keyed_hash(&self.fingerprint_key, canonical).as_bytes()
    }
}

/// What the daemon finds at start: whether its key file exists, and whether the store
/// records a key fingerprint (and, with a key file, whether it is this key's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyFound {
    NoFileNoRecord,
    NoFileRecorded,
    FileNoRecord,
    FileMatches,
    FileDiffers,
}

/// What the daemon does with its key at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyDecision {
    /// Use the key file (created if missing) and record its fingerprint unless another one
    /// stands by then: the first fingerprint recorded wins (nodes may race for it).
    Adopt,
    /// Use the key file: the store records its fingerprint.
    Use,
    /// Use the key file (created if missing) and record its fingerprint in place of the
    /// recorded one: only a store of one node holding nothing sealed.
    Replace,
    /// Refuse to start: the store records a key and the key file is missing.
    RefuseMissing,
    /// Refuse to start: the key file is not the key the store records.
    RefuseOther,
}

/// The rule: a store holding sealed data, or shared by several nodes (any of which may seal
/// with the recorded key at any moment, so that "no job yet" proves nothing), keeps its
/// recorded key; a store of one holding nothing takes another key; a key is created only
/// where none is recorded, or for a store of one holding nothing.
pub(crate) fn key_decision(found: KeyFound, shared: bool, sealed: bool) -> KeyDecision {
    let keeps_its_key = shared || sealed;
    match found {
        KeyFound::NoFileNoRecord | KeyFound::FileNoRecord => KeyDecision::Adopt,
        KeyFound::FileMatches => KeyDecision::Use,
        KeyFound::NoFileRecorded if keeps_its_key => KeyDecision::RefuseMissing,
        KeyFound::FileDiffers if keeps_its_key => KeyDecision::RefuseOther,
        KeyFound::NoFileRecorded | KeyFound::FileDiffers => KeyDecision::Replace,
    }
}

fn missing_message(path: &Path, shared: bool) -> String {
    let p = path.display();
    if shared {
        format!(
            "key file {p} is missing, but the job store's database records the key of this \
             cluster's nodes: copy secret.key from the state directory of a node that runs on \
             this database to {p} (the same file on every node; mode 0600, owned by the \
             daemon's user), then start again. bftpd creates a key only for a database that \
             records none"
        )
    } else {
        format!(
            "key file {p} is missing, but the job store holds data sealed with it: restore it \
             from the backup taken with the store (a new key would open none of the stored \
             passwords and match none of the keywords); bftpd creates a key only for an \
             empty store"
        )
    }
}

fn other_message(path: &Path, shared: bool) -> String {
    let p = path.display();
    if shared {
        format!(
            "key file {p} is not the key this cluster's database records (the first node's): \
             copy secret.key from the state directory of a node that runs on this database \
             over {p} (mode 0600, owned by the daemon's user), then start again; every node \
             must seal and open passwords with the same key"
        )
    } else {
        format!(
            "key file {p} is not the key the job store was sealed with: put the right \
             secret.key back (from the backup taken with the store); its passwords \
             cannot be opened with this one"
        )
    }
}

/// A job's passwords and ACCT strings, sealed on the way into the store and opened on the
/// way out: the only place that does either.
impl Secrets {
    /// The job as the store keeps it: every password and ACCT sealed, the keyword only as
    /// "present" (its hash is kept apart).
    pub fn seal_spec(&self, spec: &JobSpec) -> SealedSpec {
        SealedSpec {
            source: self.seal_endpoint(&spec.source),
            destination: spec.destination.as_ref().map(|d| self.seal_endpoint(d)),
            disposition: spec.disposition,
            dest_command: spec.dest_command,
            params: spec.params,
            start_at: spec.start_at,
            retry: spec.retry,
            notify: spec.notify.clone(),
            keyword_present: spec.keyword.is_some(),
            proof: spec.proof,
            recursive: spec.recursive,
            data_path: spec.data_path,
        }
    }

    /// The job an attempt runs: every password and ACCT opened. The keyword is not kept.
    pub fn unseal_spec(&self, s: &SealedSpec) -> Result<JobSpec, UnsealError> {
        Ok(JobSpec {
            source: self.unseal_endpoint(&s.source)?,
            destination: s
                .destination
                .as_ref()
                .map(|d| self.unseal_endpoint(d))
                .transpose()?,
            disposition: s.disposition,
            dest_command: s.dest_command,
            params: s.params,
            start_at: s.start_at,
            retry: s.retry,
            notify: s.notify.clone(),
            keyword: None,
            proof: s.proof,
            recursive: s.recursive,
            data_path: s.data_path,
        })
    }

    /// The job's FTP passwords and ACCT strings in clear, for the report to scrub them from
    /// whatever a server echoed. Secrets that cannot be unsealed cannot leak either.
    pub fn clear_texts(&self, s: &SealedSpec) -> Vec<String> {
        match self.unseal_spec(s) {
            Ok(spec) => std::iter::once(&spec.source)
                .chain(spec.destination.as_ref())
                .flat_map(|e| [e.password.as_ref(), e.acct.as_ref()])
                .flatten()
                .map(|p| p.expose().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn seal_endpoint(&self, e: &Endpoint) -> SealedEndpoint {
        SealedEndpoint {
            host: e.host.clone(),
            port: e.port,
            user: e.user.clone(),
            password: e.password.as_ref().map(|p| Sealed(self.seal(p.expose()))),
            acct: e.acct.as_ref().map(|p| Sealed(self.seal(p.expose()))),
            path: e.path.clone(),
            tls: e.tls,
        }
    }

    fn unseal_endpoint(&self, e: &SealedEndpoint) -> Result<Endpoint, UnsealError> {
        let open = |s: &Sealed| self.unseal(&s.0).map(Secret::new);
        Ok(Endpoint {
            host: e.host.clone(),
            port: e.port,
            user: e.user.clone(),
            password: e.password.as_ref().map(open).transpose()?,
            acct: e.acct.as_ref().map(open).transpose()?,
            path: e.path.clone(),
            tls: e.tls,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn which_key_a_daemon_may_start_with() {
        use super::KeyDecision::*;
        use super::KeyFound::*;
        #[rustfmt::skip]
        let table: &[(&str, super::KeyFound, bool, bool, super::KeyDecision)] = &[
            // what it finds                                found           shared sealed  does
            ("first start of a store of one",               NoFileNoRecord, false, false, Adopt),
            ("first node on a fresh database",              NoFileNoRecord, true,  false, Adopt),
            ("a key file, nothing recorded (older store)",  FileNoRecord,   false, true,  Adopt),
            ("a node with a key, nothing recorded",         FileNoRecord,   true,  false, Adopt),
            ("its own key",                                 FileMatches,    false, true,  Use),
            ("the cluster's key",                           FileMatches,    true,  true,  Use),
            ("store of one, empty, key lost",               NoFileRecorded, false, false, Replace),
            ("store of one, empty, another key",            FileDiffers,    false, false, Replace),
            ("store of one with jobs, key lost",            NoFileRecorded, false, true,  RefuseMissing),
            ("store of one with jobs, another key",         FileDiffers,    false, true,  RefuseOther),
            ("second node without a key, no job yet",       NoFileRecorded, true,  false, RefuseMissing),
            ("second node with its own key, no job yet",    FileDiffers,    true,  false, RefuseOther),
            ("a node without a key, jobs stored",           NoFileRecorded, true,  true,  RefuseMissing),
            ("a node with another key, jobs stored",        FileDiffers,    true,  true,  RefuseOther),
        ];
        for (case, found, shared, sealed, want) in table {
            assert_eq!(
                super::key_decision(*found, *shared, *sealed),
                *want,
                "{case}"
            );
        }
    }

    use super::*;

    #[test]
    fn a_spec_is_sealed_opened_and_cleared_here_and_only_its_secrets_change() {
        use bftp_core::{DestCommand, Disposition, FtpParams, RetryPolicy, Timestamp};
        let secrets = Secrets::from_master(&[7; KEY_LEN]);
        let endpoint = |path: &str, password: Option<&str>, acct: Option<&str>| Endpoint {
            host: "127.0.0.1".into(),
            port: 21,
            user: "alice".into(),
            password: password.map(|p| Secret::new(p.to_string())),
            acct: acct.map(|a| Secret::new(a.to_string())),
            path: path.into(),
            tls: Default::default(),
        };
        let spec = JobSpec {
            source: endpoint("a.bin", Some("s3cret-src"), Some("acct-x")),
            destination: Some(endpoint("b/", Some("s3cret-dst"), None)),
            disposition: Disposition::Copy,
            dest_command: DestCommand::Replace,
            params: FtpParams::default(),
            start_at: Timestamp(0),
            retry: RetryPolicy::default(),
            notify: vec!["ops@example.org".into()],
            keyword: Some("nightly".into()),
            proof: None,
            recursive: false,
            data_path: Some(bftp_core::route::DataPath::Relay),
        };
        let sealed = secrets.seal_spec(&spec);
        let stored = format!("{sealed:?}");
        for clear in ["s3cret-src", "s3cret-dst", "acct-x", "nightly"] {
            assert!(!stored.contains(clear), "{clear} in {stored}");
        }
        assert!(sealed.keyword_present);
        let opened = secrets.unseal_spec(&sealed).unwrap();
        assert_eq!(opened.keyword, None, "the keyword is not kept");
        assert_eq!(
            opened.data_path, spec.data_path,
            "the asked data path is kept"
        );
        assert_eq!(
            opened.source.password.as_ref().unwrap().expose(),
            "s3cret-src"
        );
        assert_eq!(opened.source.acct.as_ref().unwrap().expose(), "acct-x");
        let dst = opened.destination.as_ref().unwrap();
        assert_eq!(dst.password.as_ref().unwrap().expose(), "s3cret-dst");
        assert_eq!((dst.acct.is_none(), &dst.path[..]), (true, "b/"));
        let mut clear = secrets.clear_texts(&sealed);
        clear.sort();
        assert_eq!(clear, ["acct-x", "s3cret-dst", "s3cret-src"]);
        // Another key opens nothing: the error is typed, and nothing is left to scrub.
        let other = Secrets::from_master(&[8; KEY_LEN]);
        assert!(other.unseal_spec(&sealed).is_err());
        assert!(other.clear_texts(&sealed).is_empty());
    }

    #[test]
    fn key_file_is_created_0600_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        let a = Secrets::load_or_create(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let sealed = a.seal("hunter2");
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        let b = Secrets::load_or_create(&p).unwrap();
        assert_eq!(b.unseal(&sealed).unwrap(), "hunter2");
        assert_eq!(a.keyword_hash("k"), b.keyword_hash("k"));
        assert_ne!(a.request_key_hash(1, "k"), a.request_key_hash(2, "k"));
    }

    #[test]
    fn bad_key_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, b"short").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(format!("{:#}", Secrets::load_or_create(&p).unwrap_err()).contains("5 bytes"));
        std::fs::write(&p, [0u8; 32]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(format!("{:#}", Secrets::load_or_create(&p).unwrap_err())
            .contains("readable by others"));
    }

    #[test]
    fn the_store_remembers_its_key_and_refuses_another_or_none() {
        use bftp_store::{SledStore, StoreOptions};
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("secret.key");
        let store = SledStore::open(&dir.path().join("store"), StoreOptions::default()).unwrap();
        // A new store: the key is created and its fingerprint recorded.
        let a = Secrets::open_for_store(&key, &store).unwrap();
        assert_eq!(store.key_fingerprint().unwrap(), Some(a.key_fingerprint()));
        // Still empty: a lost key is simply replaced.
        std::fs::remove_file(&key).unwrap();
        let b = Secrets::open_for_store(&key, &store).unwrap();
        assert_ne!(a.key_fingerprint(), b.key_fingerprint());
        assert_eq!(store.key_fingerprint().unwrap(), Some(b.key_fingerprint()));
        assert!(!format!("{:?}", b.key_fingerprint()).is_empty());
        let original = std::fs::read(&key).unwrap();
        // With a job in the store: no key, or another key, is refused, naming the file.
        let endpoint = bftp_store::SealedEndpoint {
            host: "127.0.0.1".into(),
            port: 21,
            user: "alice".into(),
            password: Some(bftp_store::Sealed(b.seal("pw"))),
            acct: None,
            path: "a.dat".into(),
            tls: Default::default(),
        };
        store
            .submit(bftp_store::NewJob {
                watch: None,
                owner_uid: 1,
                spec: bftp_store::SealedSpec {
                    source: endpoint.clone(),
                    destination: Some(endpoint),
                    disposition: Default::default(),
                    dest_command: Default::default(),
                    params: Default::default(),
                    start_at: bftp_core::Timestamp(0),
                    retry: Default::default(),
                    notify: Vec::new(),
                    keyword_present: false,
                    proof: None,
                    recursive: false,
                    data_path: None,
                },
                keyword_hash: None,
                request: None,
                created_at: bftp_core::Timestamp(0),
                members: Vec::new(),
            })
            .unwrap();
        std::fs::remove_file(&key).unwrap();
        let e = format!("{:#}", Secrets::open_for_store(&key, &store).unwrap_err());
        assert!(
            e.contains("is missing") && e.contains(&key.display().to_string()),
            "{e}"
        );
        assert!(!key.exists(), "no key was created");
        std::fs::write(&key, [9u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = format!("{:#}", Secrets::open_for_store(&key, &store).unwrap_err());
        assert!(
            e.contains("is not the key") && e.contains(&key.display().to_string()),
            "{e}"
        );
        std::fs::write(&key, &original).unwrap();
        let c = Secrets::open_for_store(&key, &store).unwrap();
        assert_eq!(c.key_fingerprint(), b.key_fingerprint());
        // The fingerprint is not the key, nor any key derived for sealing.
        assert_ne!(&c.key_fingerprint()[..], &original[..]);
    }

    #[test]
    fn tampered_or_foreign_seals_do_not_open() {
        let a = Secrets::from_master(&[1; 32]);
        let b = Secrets::from_master(&[2; 32]);
        let mut s = a.seal("pw");
        assert!(b.unseal(&s).is_err());
        let last = s.len() - 1;
        s[last] ^= 1;
        assert!(a.unseal(&s).is_err());
        assert!(a.unseal(b"").is_err());
    }
}
