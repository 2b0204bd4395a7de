//! What the store keeps beside jobs: the key fingerprint and the refusal memory.

use super::*;

/// A store from before key fingerprints (jobs, no fingerprint) opens as it did; the
/// fingerprint recorded then survives a reopen next to the jobs, and the damage checks at
/// open (watermark, digest) still pass.
fn a_key_fingerprint_is_recorded_in_an_old_store_and_kept(fx: &Fixture) {
    let id = {
        let store = fx.open();
        assert!(store.is_empty().unwrap());
        assert_eq!(store.key_fingerprint().unwrap(), None);
        match store.submit(job(1000)).unwrap() {
            Submitted::Created(j) => j.id,
            other => panic!("{other:?}"),
        }
    };
    {
        // The old store: sealed data, no fingerprint yet.
        let store = fx.open();
        assert!(!store.is_empty().unwrap());
        assert_eq!(store.key_fingerprint().unwrap(), None);
        store.set_key_fingerprint([7; 32]).unwrap();
        assert_eq!(store.key_fingerprint().unwrap(), Some([7; 32]));
    }
    let store = fx.open();
    assert_eq!(store.key_fingerprint().unwrap(), Some([7; 32]));
    assert_eq!(store.get(id).unwrap().unwrap().spec, spec());
    store.set_key_fingerprint([8; 32]).unwrap();
    drop(store);
    assert_eq!(fx.open().key_fingerprint().unwrap(), Some([8; 32]));
}

/// The refusal memory (capability memory): one entry per server and command, counting the
/// attempts that got the same refusal, replaced by a different one, kept across a reopen and
/// checked by `verify`.
fn refusal_memory_counts_attempts_and_survives_a_reopen(fx: &Fixture) {
    use bftp_core::refusal::{RefusalKey, Sighting};
    use bftp_core::reply::ReplyCode;
    let key = RefusalKey::new("ftp.example.net", 21, "APPE");
    let other_port = RefusalKey::new("ftp.example.net", 2121, "APPE");
    let seen = |code: u16, text: &str, job: u64, attempt: u32| Sighting {
        code: ReplyCode::new(code).unwrap(),
        text: text.into(),
        job,
        attempt,
    };
    let refusal = "<path>: Append/Restart not permitted, try again";
    {
        let store = fx.open();
        assert_eq!(store.refusal(&key).unwrap(), None);
        let m = store
            .record_refusal(&key, &seen(451, refusal, 1, 1), at(10))
            .unwrap();
        assert_eq!(m.count, 1);
        // The same attempt (another file): still one.
        let m = store
            .record_refusal(&key, &seen(451, refusal, 1, 1), at(11))
            .unwrap();
        assert_eq!((m.count, m.last_seen), (1, at(11)));
        // Another port is another server.
        store
            .record_refusal(&other_port, &seen(451, "busy", 1, 1), at(12))
            .unwrap();
    }
    let store = fx.open();
    let kept = store.refusal(&key).unwrap().expect("kept across a reopen");
    assert_eq!(
        (kept.count, kept.first_seen, kept.last_seen),
        (1, at(10), at(11))
    );
    let m = store
        .record_refusal(&key, &seen(451, refusal, 1, 2), at(20))
        .unwrap();
    assert_eq!(
        (m.count, m.first_seen, m.text.as_str()),
        (2, at(10), refusal)
    );
    assert_eq!(store.refusal(&key).unwrap(), Some(m));
    assert_eq!(store.refusal(&other_port).unwrap().unwrap().text, "busy");
    // A different refusal replaces the memory.
    let m = store
        .record_refusal(&key, &seen(451, "Disk error", 1, 3), at(30))
        .unwrap();
    assert_eq!((m.count, m.first_seen), (1, at(30)));
    fx.verify();
}

both_stores!(
    a_key_fingerprint_is_recorded_in_an_old_store_and_kept,
    refusal_memory_counts_attempts_and_survives_a_reopen,
);
