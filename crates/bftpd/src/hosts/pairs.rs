//! The pair memory in use (RULES.md §14): a pair of servers that refused the third party in
//! both role orders is remembered, per ordered pair (source host and port, destination host
//! and port), in the store (shared by all nodes on PostgreSQL), so that the next `auto` copy
//! between them goes through bftpd at once instead of trying both role orders again. The
//! memory expires (`[ftp] pair_memory`): a server whose configuration changed is tried again.
//! A file moved between the pair by third party forgets it.
//!
//! The rules are pure, in `bftp_core::route` (`plan`, `remember`, `still_remembered`); here:
//! read the memory before a copy ([`PairMemories::plan_for`]) and write it after one
//! ([`PairMemories::after_copy`]).
//!
//! The memory only saves time: a copy never fails because of it. A store that does not
//! answer (a read or a write that fails) is logged and the copy goes on as if nothing were
//! remembered (third party first, relay when refused: the plan with no memory).

use std::time::Duration;

use bftp_core::reply::ReplyClass;
use bftp_core::route::{self, DataPath, PairKey, Plan, Route};
use bftp_core::Timestamp;
use bftp_ftp::{AttemptReport, LastReply};

use crate::store::Store;

/// How long a pair's refusal is remembered unless the configuration says otherwise.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// The pair memory of the daemon: the store that keeps it and how long a refusal stands.
#[derive(Clone)]
pub struct PairMemories {
    store: Store,
    expiry: Duration,
}

impl PairMemories {
    /// `expiry`: how long a remembered refusal sends the pair's `auto` copies through bftpd
    /// ([`DEFAULT_EXPIRY`] unless configured).
    pub fn new(store: Store, expiry: Duration) -> PairMemories {
        PairMemories { store, expiry }
    }

    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    fn expiry_ms(&self) -> u64 {
        u64::try_from(self.expiry.as_millis()).unwrap_or(u64::MAX)
    }

    /// How a copy on `path` from `src` to `dst` (host as written in the job, port) starts at
    /// `now`: `bftp_core::route::plan` with the pair's memory. Only `auto` reads the store
    /// (the other paths do not depend on the memory). A store that cannot be read counts as
    /// no memory (logged): the copy tries the third party first.
    pub async fn plan_for(
        &self,
        path: DataPath,
        src: (&str, u16),
        dst: (&str, u16),
        now: Timestamp,
    ) -> Plan {
        if path != DataPath::Auto {
            return route::plan(path, None, now, self.expiry_ms());
        }
        let key = PairKey::new(src, dst);
        let memory = match self.store.call(move |s| s.pair_memory(&key)).await {
            Ok(memory) => memory,
            // Not the copy's failure: without the memory it only tries the third party again.
            Err(error) => {
                tracing::warn!(
                    source = %src.0, destination = %dst.0, %error,
                    "the pair memory could not be read; trying the third party first"
                );
                None
            }
        };
        route::plan(path, memory.as_ref(), now, self.expiry_ms())
    }

    /// After a copy from `src` to `dst` (its outcome's report, whatever the outcome; call it
    /// for every copy): a refusal of the third party in both role orders
    /// (`report.fxp_refused`) is remembered for the pair, seen `now`; a file the pair moved by
    /// third party ([`third_party_proven`]) forgets what the pair was remembered to have
    /// refused. Looking costs no write: a copy with neither, or a proven one between a pair
    /// with no memory, writes nothing.
    ///
    /// Never fails the copy: a store error is logged and the copy goes on (the memory is a
    /// time saver; at worst the next copy tries the third party again, or relays once more
    /// than needed until the memory expires).
    pub async fn after_copy(
        &self,
        src: (&str, u16),
        dst: (&str, u16),
        report: &AttemptReport,
        now: Timestamp,
    ) {
        let key = PairKey::new(src, dst);
        if let Some(reply) = &report.fxp_refused {
            let memory = route::remember(reply, now);
            match self
                .store
                .call(move |s| s.remember_pair(&key, &memory))
                .await
            {
                Ok(()) => tracing::info!(
                    source = %src.0, destination = %dst.0, %reply,
                    "the pair refused the third party; remembered, its auto copies relay"
                ),
                Err(error) => tracing::warn!(
                    source = %src.0, destination = %dst.0, %error,
                    "the pair's refusal of the third party could not be remembered"
                ),
            }
            return;
        }
        if !third_party_proven(report) {
            return;
        }
        let looked = key.clone();
        let forgotten = match self.store.call(move |s| s.pair_memory(&looked)).await {
            Ok(None) => return,
            Ok(Some(_)) => self.store.call(move |s| s.forget_pair(&key)).await,
            Err(error) => Err(error),
        };
        match forgotten {
            Ok(_) => tracing::info!(
                source = %src.0, destination = %dst.0,
                "the pair moved a file by third party; its remembered refusal is forgotten"
            ),
            Err(error) => tracing::warn!(
                source = %src.0, destination = %dst.0, %error,
                "the pair's remembered refusal could not be forgotten"
            ),
        }
    }
}

/// Whether the copy's report shows a file moved straight between the two servers: its route
/// is the third party (either role order) and both servers answered their data command with
/// a final 2yz. That is what the pair memory is about; a later failure of the copy (a size
/// mismatch) says nothing against it, and a copy that failed before both finals proves
/// nothing for it.
pub fn third_party_proven(report: &AttemptReport) -> bool {
    let completed = |r: &Option<LastReply>| {
        r.as_ref()
            .and_then(|r| r.code)
            .is_some_and(|c| c.class() == ReplyClass::Completion)
    };
    matches!(report.route, Some(Route::Fxp | Route::FxpRolesSwapped))
        && report.fxp_refused.is_none()
        && completed(&report.source_final)
        && completed(&report.destination_final)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::T0;
    use bftp_core::reply::ReplyCode;
    use bftp_core::route::{PairMemory, RelayReason};
    use bftp_store::{SledStore, StoreOptions};
    use std::sync::Arc;

    const SRC: (&str, u16) = ("src.example.org", 21);
    const DST: (&str, u16) = ("dst.example.net", 2121);
    const HOUR: Duration = Duration::from_secs(3600);
    const REFUSAL: &str = "source refused PORT: 500 Illegal PORT command.";

    fn memories(expiry: Duration) -> (tempfile::TempDir, PairMemories) {
        let (dir, store) = crate::testkit::store();
        (dir, PairMemories::new(Store::new(store), expiry))
    }

    fn after(ms: u64) -> Timestamp {
        Timestamp(T0.0 + ms)
    }

    fn refused() -> AttemptReport {
        AttemptReport {
            fxp_refused: Some(REFUSAL.into()),
            route: Some(Route::Relay(RelayReason::Refused {
                reply: REFUSAL.into(),
            })),
            ..AttemptReport::default()
        }
    }

    fn reply(command: &str, code: u16) -> Option<LastReply> {
        Some(LastReply {
            command: command.into(),
            code: ReplyCode::new(code),
            text: "Transfer complete.".into(),
        })
    }

    /// A copy the pair made by third party, roles as `route`, its finals `src`/`dst`.
    fn by_third_party(route: Route, src: u16, dst: u16) -> AttemptReport {
        AttemptReport {
            route: Some(route),
            source_final: reply("RETR", src),
            destination_final: reply("STOR", dst),
            ..AttemptReport::default()
        }
    }

    fn remembered_since(seen: Timestamp) -> Plan {
        Plan::Relay(RelayReason::Remembered {
            reply: REFUSAL.into(),
            seen,
        })
    }

    #[tokio::test]
    async fn a_refused_pair_relays_its_next_auto_copy_at_once() {
        let (_dir, pairs) = memories(DEFAULT_EXPIRY);
        assert_eq!(
            pairs.plan_for(DataPath::Auto, SRC, DST, T0).await,
            Plan::FxpThenRelay
        );
        pairs.after_copy(SRC, DST, &refused(), T0).await;
        assert_eq!(
            pairs.plan_for(DataPath::Auto, SRC, DST, after(1)).await,
            remembered_since(T0)
        );
        // The same servers, spelt otherwise.
        assert_eq!(
            pairs
                .plan_for(DataPath::Auto, ("SRC.Example.org.", 21), DST, after(1))
                .await,
            remembered_since(T0)
        );
        // The other direction is another pair; fxp and relay jobs do not look.
        assert_eq!(
            pairs.plan_for(DataPath::Auto, DST, SRC, after(1)).await,
            Plan::FxpThenRelay
        );
        assert_eq!(
            pairs.plan_for(DataPath::Fxp, SRC, DST, after(1)).await,
            Plan::FxpOnly
        );
        assert_eq!(
            pairs.plan_for(DataPath::Relay, SRC, DST, after(1)).await,
            Plan::Relay(RelayReason::Asked)
        );
    }

    #[tokio::test]
    async fn a_memory_older_than_the_expiry_tries_the_third_party_again() {
        let (_dir, pairs) = memories(HOUR);
        pairs.after_copy(SRC, DST, &refused(), T0).await;
        let hour = HOUR.as_millis() as u64;
        assert_eq!(
            pairs
                .plan_for(DataPath::Auto, SRC, DST, after(hour - 1))
                .await,
            remembered_since(T0)
        );
        assert_eq!(
            pairs.plan_for(DataPath::Auto, SRC, DST, after(hour)).await,
            Plan::FxpThenRelay
        );
        // A new refusal is remembered afresh, from its own time.
        pairs.after_copy(SRC, DST, &refused(), after(hour)).await;
        assert_eq!(
            pairs
                .plan_for(DataPath::Auto, SRC, DST, after(2 * hour - 1))
                .await,
            remembered_since(after(hour))
        );
        // The default keeps a refusal for a week.
        let (_dir, week) = memories(DEFAULT_EXPIRY);
        week.after_copy(SRC, DST, &refused(), T0).await;
        let days = |d: u64| d * 24 * hour;
        assert_eq!(
            week.plan_for(DataPath::Auto, SRC, DST, after(days(7) - 1))
                .await,
            remembered_since(T0)
        );
        assert_eq!(
            week.plan_for(DataPath::Auto, SRC, DST, after(days(7)))
                .await,
            Plan::FxpThenRelay
        );
    }

    #[tokio::test]
    async fn a_file_moved_by_third_party_forgets_the_pairs_refusal() {
        let (_dir, pairs) = memories(DEFAULT_EXPIRY);
        let key = PairKey::new(SRC, DST);
        let stored = |pairs: &PairMemories| {
            let (store, key) = (pairs.store.clone(), key.clone());
            async move { store.call(move |s| s.pair_memory(&key)).await.unwrap() }
        };
        pairs.after_copy(SRC, DST, &refused(), T0).await;
        // Copies that prove nothing about the pair leave the memory: one that failed before
        // both servers finished, a relayed one, one in the other direction.
        for report in [
            by_third_party(Route::Fxp, 226, 426),
            by_third_party(Route::FxpRolesSwapped, 451, 226),
            AttemptReport {
                destination_final: None,
                ..by_third_party(Route::Fxp, 226, 226)
            },
            by_third_party(Route::Relay(RelayReason::Asked), 226, 226),
            AttemptReport::default(),
        ] {
            pairs.after_copy(SRC, DST, &report, after(1)).await;
            assert!(stored(&pairs).await.is_some(), "{report:?}");
        }
        pairs
            .after_copy(DST, SRC, &by_third_party(Route::Fxp, 226, 226), after(1))
            .await;
        assert!(stored(&pairs).await.is_some());
        // A file the pair moved itself, in either role order: forgotten, and the next auto
        // copy tries the third party first.
        pairs
            .after_copy(SRC, DST, &by_third_party(Route::Fxp, 226, 226), after(2))
            .await;
        assert_eq!(stored(&pairs).await, None);
        assert_eq!(
            pairs.plan_for(DataPath::Auto, SRC, DST, after(3)).await,
            Plan::FxpThenRelay
        );
        pairs.after_copy(SRC, DST, &refused(), after(4)).await;
        pairs
            .after_copy(
                SRC,
                DST,
                &by_third_party(Route::FxpRolesSwapped, 250, 226),
                after(5),
            )
            .await;
        assert_eq!(stored(&pairs).await, None);
    }

    /// A store that refuses every write (its disk below the reserve): the pair memory cannot
    /// be written, and the copy goes on all the same.
    fn full_store(dir: &std::path::Path) -> PairMemories {
        let opts = StoreOptions {
            min_free_bytes: u64::MAX,
            ..StoreOptions::default()
        };
        let store = SledStore::open(dir, opts).unwrap();
        PairMemories::new(Store::new(Arc::new(store)), DEFAULT_EXPIRY)
    }

    #[tokio::test]
    async fn a_store_that_fails_never_fails_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let key = PairKey::new(SRC, DST);
        {
            let pairs = full_store(dir.path());
            // Not remembered (the write failed), and no panic, no error for the copy.
            pairs.after_copy(SRC, DST, &refused(), T0).await;
            assert_eq!(
                pairs.plan_for(DataPath::Auto, SRC, DST, after(1)).await,
                Plan::FxpThenRelay
            );
        }
        {
            let (store, key) = (
                Arc::new(SledStore::open(dir.path(), StoreOptions::default()).unwrap()),
                key.clone(),
            );
            let memory = PairMemory {
                reply: REFUSAL.into(),
                seen: T0,
            };
            Store::new(store)
                .call(move |s| s.remember_pair(&key, &memory))
                .await
                .unwrap();
        }
        // The forget after a third-party copy cannot be written either: the copy goes on,
        // the memory stays.
        let pairs = full_store(dir.path());
        pairs
            .after_copy(SRC, DST, &by_third_party(Route::Fxp, 226, 226), after(1))
            .await;
        assert_eq!(
            pairs.plan_for(DataPath::Auto, SRC, DST, after(2)).await,
            remembered_since(T0)
        );
    }
}
