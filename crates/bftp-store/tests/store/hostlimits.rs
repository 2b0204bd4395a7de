//! Limits learned from the servers: one per host (lower case), kept across reopens, the newest
//! write kept, a raise landing only on the record it was computed from.

use super::*;
use bftp_core::hostlimit::HostLimit;

fn limit(host: &str, n: u32, learned: u64, refused: u64) -> HostLimit {
    HostLimit {
        host: host.into(),
        limit: n,
        reply: format!("421 Too many connections ({n}) from this IP"),
        learned_at: at(learned),
        refused_at: at(refused),
    }
}

/// A learned limit is read back (one host, and all), after a reopen too, and `verify` reads it.
fn a_learned_limit_round_trips_and_survives_a_reopen(fx: &Fixture) {
    let l = limit("ftp.example.org", 2, 10, 10);
    {
        let store = fx.open();
        assert_eq!(store.host_limit("ftp.example.org").unwrap(), None);
        assert!(store.host_limits().unwrap().is_empty());
        store.learn_host_limit(&l).unwrap();
        assert_eq!(
            store.host_limit("ftp.example.org").unwrap(),
            Some(l.clone())
        );
    }
    let store = fx.open();
    assert_eq!(
        store.host_limit("FTP.Example.ORG").unwrap(),
        Some(l.clone()),
        "any case"
    );
    let b = limit("b.example", 1, 11, 11);
    store.learn_host_limit(&b).unwrap();
    assert_eq!(store.host_limits().unwrap(), vec![b, l], "by host name");
    fx.verify();
}

/// A later limit replaces; an older one (a slow writer, another node) never hides a newer one;
/// the same time replaces.
fn learning_again_keeps_the_newest(fx: &Fixture) {
    let store = fx.open();
    store.learn_host_limit(&limit("h", 3, 20, 20)).unwrap();
    store.learn_host_limit(&limit("h", 2, 30, 30)).unwrap();
    store.learn_host_limit(&limit("h", 1, 25, 25)).unwrap();
    assert_eq!(store.host_limit("h").unwrap(), Some(limit("h", 2, 30, 30)));
    // The same time: the lower limit stays, whatever the order of the writes.
    store.learn_host_limit(&limit("h", 1, 30, 30)).unwrap();
    assert_eq!(store.host_limit("h").unwrap(), Some(limit("h", 1, 30, 30)));
    store.learn_host_limit(&limit("h", 4, 30, 30)).unwrap();
    assert_eq!(store.host_limit("h").unwrap(), Some(limit("h", 1, 30, 30)));
    fx.verify();
}

/// A raise or a forget lands only on the record it was computed from: one computed from an old
/// read (a refusal came meanwhile) changes nothing.
fn a_raise_lands_only_on_what_it_saw(fx: &Fixture) {
    let store = fx.open();
    let seen = limit("h", 2, 10, 10);
    assert!(
        !store.raise_host_limit(&seen, None).unwrap(),
        "nothing to raise"
    );
    store.learn_host_limit(&seen).unwrap();
    let up = limit("h", 3, 40, 10);
    assert!(store.raise_host_limit(&seen, Some(&up)).unwrap());
    assert_eq!(store.host_limit("h").unwrap(), Some(up.clone()));
    // The same raise again (another node's, from the same read): nothing.
    assert!(!store
        .raise_host_limit(&seen, Some(&limit("h", 3, 41, 10)))
        .unwrap());
    assert_eq!(store.host_limit("h").unwrap(), Some(up.clone()));
    // A refusal after the read: the forget computed from `up` changes nothing.
    let refused = limit("h", 1, 50, 50);
    store.learn_host_limit(&refused).unwrap();
    assert!(!store.raise_host_limit(&up, None).unwrap());
    assert_eq!(store.host_limit("h").unwrap(), Some(refused.clone()));
    // Forgotten from what is there.
    assert!(store.raise_host_limit(&refused, None).unwrap());
    assert_eq!(store.host_limit("h").unwrap(), None);
    drop(store);
    assert_eq!(
        fx.open().host_limit("h").unwrap(),
        None,
        "forgotten for good"
    );
    fx.verify();
}

both_stores!(
    a_learned_limit_round_trips_and_survives_a_reopen,
    learning_again_keeps_the_newest,
    a_raise_lands_only_on_what_it_saw,
);
