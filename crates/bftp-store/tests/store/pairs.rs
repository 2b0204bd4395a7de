//! The pair memory: what an ordered pair of servers refused (the third party), kept per pair,
//! across reopens, and forgotten on request.

use super::*;
use bftp_core::route::{PairKey, PairMemory};

fn memory(reply: &str, secs: u64) -> PairMemory {
    PairMemory {
        reply: reply.into(),
        seen: at(secs),
    }
}

/// A memory written is read back, after a reopen too, and `verify` reads it.
fn a_pair_memory_round_trips_and_survives_a_reopen(fx: &Fixture) {
    let key = PairKey::new(("src.example.org", 21), ("dst.example.net", 2121));
    let m = memory("500 Illegal PORT command.", 10);
    {
        let store = fx.open();
        assert_eq!(store.pair_memory(&key).unwrap(), None);
        store.remember_pair(&key, &m).unwrap();
        assert_eq!(store.pair_memory(&key).unwrap(), Some(m.clone()));
    }
    let store = fx.open();
    assert_eq!(store.pair_memory(&key).unwrap(), Some(m));
    // Another port is another server, so another pair.
    let other_port = PairKey::new(("src.example.org", 21), ("dst.example.net", 21));
    assert_eq!(store.pair_memory(&other_port).unwrap(), None);
    fx.verify();
}

/// A later sighting replaces the memory; a write of an earlier one (a late node, a slow
/// writer) leaves the newer one; the same time replaces.
fn remembering_again_keeps_the_newest(fx: &Fixture) {
    let store = fx.open();
    let key = PairKey::new(("a.example", 21), ("b.example", 21));
    store.remember_pair(&key, &memory("500 first", 20)).unwrap();
    store
        .remember_pair(&key, &memory("425 second", 30))
        .unwrap();
    assert_eq!(
        store.pair_memory(&key).unwrap(),
        Some(memory("425 second", 30))
    );
    store.remember_pair(&key, &memory("500 older", 25)).unwrap();
    assert_eq!(
        store.pair_memory(&key).unwrap(),
        Some(memory("425 second", 30)),
        "an older sighting never hides a newer one"
    );
    store
        .remember_pair(&key, &memory("500 same time", 30))
        .unwrap();
    assert_eq!(
        store.pair_memory(&key).unwrap(),
        Some(memory("500 same time", 30))
    );
    fx.verify();
}

/// Forgetting says whether there was a memory; it is gone for good (a reopen too), the other
/// pairs stay, and the pair can be remembered again.
fn a_pair_is_forgotten_and_only_that_pair(fx: &Fixture) {
    let key = PairKey::new(("a.example", 21), ("b.example", 21));
    let other = PairKey::new(("a.example", 21), ("c.example", 21));
    {
        let store = fx.open();
        assert!(!store.forget_pair(&key).unwrap(), "nothing to forget");
        store.remember_pair(&key, &memory("500 no", 10)).unwrap();
        store.remember_pair(&other, &memory("500 no", 10)).unwrap();
        assert!(store.forget_pair(&key).unwrap());
        assert!(!store.forget_pair(&key).unwrap());
    }
    let store = fx.open();
    assert_eq!(store.pair_memory(&key).unwrap(), None);
    assert_eq!(
        store.pair_memory(&other).unwrap(),
        Some(memory("500 no", 10))
    );
    store.remember_pair(&key, &memory("500 again", 5)).unwrap();
    assert_eq!(
        store.pair_memory(&key).unwrap(),
        Some(memory("500 again", 5))
    );
    fx.verify();
}

/// A pair is ordered: what a→b refused says nothing about b→a.
fn pair_keys_are_directional(fx: &Fixture) {
    let store = fx.open();
    let ab = PairKey::new(("a.example", 21), ("b.example", 21));
    let ba = PairKey::new(("b.example", 21), ("a.example", 21));
    store.remember_pair(&ab, &memory("500 a to b", 10)).unwrap();
    assert_eq!(store.pair_memory(&ba).unwrap(), None);
    store.remember_pair(&ba, &memory("500 b to a", 11)).unwrap();
    assert_eq!(
        store.pair_memory(&ab).unwrap(),
        Some(memory("500 a to b", 10))
    );
    assert!(store.forget_pair(&ba).unwrap());
    assert_eq!(
        store.pair_memory(&ab).unwrap(),
        Some(memory("500 a to b", 10))
    );
}

/// Hosts are names: a memory written under one spelling is found under another.
fn pair_hosts_compare_case_insensitively(fx: &Fixture) {
    let store = fx.open();
    let written = PairKey::new(("FTP.Example.ORG.", 21), ("[2001:DB8::1]", 990));
    store
        .remember_pair(&written, &memory("500 no", 10))
        .unwrap();
    let asked = PairKey::new(("ftp.example.org", 21), ("2001:db8::1", 990));
    assert_eq!(
        store.pair_memory(&asked).unwrap(),
        Some(memory("500 no", 10))
    );
    assert!(store.forget_pair(&asked).unwrap());
    assert_eq!(store.pair_memory(&written).unwrap(), None);
}

both_stores!(
    a_pair_memory_round_trips_and_survives_a_reopen,
    remembering_again_keeps_the_newest,
    a_pair_is_forgotten_and_only_that_pair,
    pair_keys_are_directional,
    pair_hosts_compare_case_insensitively,
);
