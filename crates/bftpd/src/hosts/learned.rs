//! Per-host limits learned from the servers (RULES.md §16.3): a reply that says a server has
//! too many connections (`bftp_core::hostlimit::says_too_many`) lowers that host's limit to the
//! connections this node held there; the limit is remembered in the store (shared by all nodes
//! on PostgreSQL), used by the host's gate and the count of all nodes, and raised a step at a
//! time after a quiet period (`bftp_core::hostlimit::raise`), by a small periodic task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bftp_core::hostlimit::{self, HostLimit, Raise};
use bftp_core::Timestamp;
use bftp_ftp::{ConnectError, JobFailure, PairError};

use super::{HostLimits, Slots};
use crate::clock::Clock;
use crate::store::Store;

/// How long a limit this node learned is kept in memory before the store has it.
const JUST_LEARNED_MS: u64 = 60_000;

/// `[ftp] too_many_patterns` and `limit_quiet`.
#[derive(Debug, Clone)]
pub struct LearnSettings {
    /// Reply texts (case-insensitive) that say a server has too many connections.
    pub patterns: Vec<String>,
    /// How long a learned limit stays before it is raised by one.
    pub quiet: Duration,
}

impl Default for LearnSettings {
    fn default() -> Self {
        LearnSettings {
            patterns: hostlimit::DEFAULT_PATTERNS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            quiet: Duration::from_secs(30 * 60),
        }
    }
}

impl LearnSettings {
    fn quiet_ms(&self) -> u64 {
        u64::try_from(self.quiet.as_millis()).unwrap_or(u64::MAX)
    }
}

/// The learned limits this node knows (the store's, read at start, at each look of the
/// periodic task and after each write), and where they are kept.
#[derive(Default)]
pub(super) struct Learned {
    known: Mutex<HashMap<String, HostLimit>>,
    ctx: OnceLock<LearnCtx>,
}

struct LearnCtx {
    store: Store,
    clock: Clock,
    settings: LearnSettings,
}

impl Learned {
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, HostLimit>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn get(&self, host: &str) -> Option<HostLimit> {
        self.known().get(host).cloned()
    }
}

/// One host as `bftp hosts` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostState {
    /// Lower case.
    pub host: String,
    /// `[ftp] max_connections_per_host`.
    pub configured: usize,
    /// What the host taught, while it is below the configured limit.
    pub learned: Option<HostLimit>,
    /// When the learned limit is raised by one (`None`: nothing learned).
    pub raises_at: Option<Timestamp>,
    /// This node's connections to the host now (kept pairs and looks included).
    pub in_use: usize,
}

/// The host and the reply of a refusal for too many connections, if `e` is one.
fn too_many<'e>(e: &'e ConnectError, patterns: &[String]) -> Option<(&'e str, String)> {
    let ConnectError::Refused { host, reply, .. } = e else {
        return None;
    };
    let code = reply.code().get();
    hostlimit::says_too_many(code, &reply.text(), patterns)
        .then(|| (host.as_str(), reply.to_string()))
}

impl HostLimits {
    /// Learned limits kept in `store` from now on, read from it now.
    pub async fn learn_with(
        &self,
        store: Store,
        clock: Clock,
        settings: LearnSettings,
    ) -> Result<(), bftp_store::StoreError> {
        let _ = self.learned.ctx.set(LearnCtx {
            store,
            clock,
            settings,
        });
        self.reload().await
    }

    /// The store's learned limits become this node's, its gates follow.
    async fn reload(&self) -> Result<(), bftp_store::StoreError> {
        let Some(ctx) = self.learned.ctx.get() else {
            return Ok(());
        };
        let all = ctx.store.call(|s| s.host_limits()).await?;
        let now = ctx.clock.now();
        {
            let mut known = self.learned.known();
            let mut read: HashMap<String, HostLimit> =
                all.into_iter().map(|l| (l.host.clone(), l)).collect();
            // A limit this node learned while the read ran may not be written yet: kept when
            // newer than the store's, or absent there and learned less than a minute ago.
            for (host, mine) in known.drain() {
                let keep = match read.get(&host) {
                    Some(stored) => !hostlimit::replaces(stored, &mine),
                    None => now.0.saturating_sub(mine.learned_at.0) < JUST_LEARNED_MS,
                };
                if keep {
                    read.insert(host, mine);
                }
            }
            *known = read;
        }
        self.follow_limits();
        Ok(())
    }

    /// Every gate at its host's limit now.
    fn follow_limits(&self) {
        let gates: Vec<_> = self
            .gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(h, g)| (h.clone(), g.clone()))
            .collect();
        for (host, gate) in gates {
            gate.set_limit(self.limit_of(&host));
        }
    }

    /// The connections this node allows itself on `host` (lower case): the configured limit,
    /// or the learned one when lower.
    pub(crate) fn limit_of(&self, host: &str) -> usize {
        hostlimit::effective(self.per_host, self.learned.get(host).as_ref())
    }

    /// When opening a pair failed: whether a server refused it for having too many
    /// connections. If so the host's limit is lowered to the connections this node held there
    /// (`slots`: the failed pair's, whose refused connection does not count; `None` when the
    /// caller holds them elsewhere), remembered in the store, and the caller waits for a slot
    /// under it instead of failing.
    pub async fn refused(&self, e: &PairError, slots: Option<&Slots>) -> bool {
        match &e.failure {
            JobFailure::Connect { error, .. } => self.refused_login(error, slots).await,
            _ => false,
        }
    }

    /// Whether `e` is a refusal for too many connections by `[ftp] too_many_patterns`
    /// (`bftp_core::hostlimit::says_too_many`): a busy server, not a down one.
    pub fn is_too_many(&self, e: &ConnectError) -> bool {
        let default = LearnSettings::default();
        let ctx = self.learned.ctx.get();
        let settings = ctx.map_or(&default, |c| &c.settings);
        too_many(e, &settings.patterns).is_some()
    }

    /// [`Self::refused`] of one connection's login (a look at a copy's bytes, a listing).
    pub async fn refused_login(&self, e: &ConnectError, slots: Option<&Slots>) -> bool {
        let default = LearnSettings::default();
        let ctx = self.learned.ctx.get();
        let settings = ctx.map_or(&default, |c| &c.settings);
        let Some((host, reply)) = too_many(e, &settings.patterns) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        let gate = self.gate(&host);
        let marked = slots.is_some_and(|s| s.mark_refused(&host));
        let learned = {
            // Under the lock from the count to the insert: the refusals of one burst (extra
            // pairs opened together) each see the limit the one before taught.
            let mut known = self.learned.known();
            let state = gate.state();
            let held = state
                .in_use
                .saturating_sub(state.refused)
                .saturating_sub(usize::from(!marked));
            let current = hostlimit::effective(self.per_host, known.get(&host));
            let limit = hostlimit::lowered(held, current, self.per_host);
            let now = ctx.map_or_else(|| Clock::system().now(), |c| c.clock.now());
            let learned = hostlimit::learn(&host, limit, &reply, now);
            known.insert(host.clone(), learned.clone());
            learned
        };
        tracing::info!(host, limit = learned.limit, reply = %learned.reply, "a server refused a connection for too many: the host's limit is lowered");
        gate.set_limit(self.limit_of(&host));
        if let Some(ctx) = ctx {
            if let Err(e) = ctx.store.call(move |s| s.learn_host_limit(&learned)).await {
                tracing::warn!(host, error = %e, "cannot remember a learned limit");
            }
        }
        true
    }

    /// One look: the store's limits read again (another node may have learned one), and
    /// those whose quiet period is over raised by one, or forgotten at the configured limit.
    pub async fn raise_due(&self) {
        let Some(ctx) = self.learned.ctx.get() else {
            return;
        };
        if let Err(e) = self.reload().await {
            tracing::warn!(error = %e, "cannot read the learned limits");
            return;
        }
        let now = ctx.clock.now();
        let known: Vec<HostLimit> = self.learned.known().values().cloned().collect();
        let mut changed = false;
        for seen in known {
            let to = match hostlimit::raise(&seen, self.per_host, now, ctx.settings.quiet_ms()) {
                Raise::Keep => continue,
                Raise::To(to) => Some(to),
                Raise::Forget => None,
            };
            let host = seen.host.clone();
            let (limit, up) = (seen.limit, to.as_ref().map(|t| t.limit));
            let written = to.clone();
            match ctx
                .store
                .call(move |s| s.raise_host_limit(&seen, written.as_ref()))
                .await
            {
                Ok(true) => {
                    tracing::info!(host, from = limit, to = ?up, "a learned limit is raised after its quiet period");
                    let mut known = self.learned.known();
                    match to {
                        Some(to) => known.insert(host, to),
                        None => known.remove(&host),
                    };
                    changed = true;
                }
                Ok(false) => changed = true,
                Err(e) => tracing::warn!(host, error = %e, "cannot raise a learned limit"),
            }
        }
        if changed {
            if let Err(e) = self.reload().await {
                tracing::warn!(error = %e, "cannot read the learned limits");
            }
        }
    }

    /// Looks at the learned limits, as long as `self` lives: every `limit_quiet` / 4, at
    /// least every 10 s, at most every 100 ms.
    pub fn spawn_learned_upkeep(self: &Arc<Self>) {
        let Some(ctx) = self.learned.ctx.get() else {
            return;
        };
        let every =
            (ctx.settings.quiet / 4).clamp(Duration::from_millis(100), Duration::from_secs(10));
        let hosts = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(hosts) = hosts.upgrade() else { return };
                hosts.raise_due().await;
            }
        });
    }

    /// `bftp_host_limit{host,kind}` on `/metrics`: each known host's configured limit, and
    /// its learned one where it has one.
    pub fn limit_series(&self) -> String {
        let states = self.host_states();
        if states.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "# HELP bftp_host_limit Connections bftpd opens to a host at once: configured, and learned from its refusals.\n\
             # TYPE bftp_host_limit gauge\n",
        );
        for s in &states {
            let host = s.host.replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!(
                "bftp_host_limit{{host=\"{host}\",kind=\"configured\"}} {}\n",
                s.configured
            ));
            if let Some(l) = &s.learned {
                out.push_str(&format!(
                    "bftp_host_limit{{host=\"{host}\",kind=\"learned\"}} {}\n",
                    l.limit
                ));
            }
        }
        out
    }

    /// One host as `bftp hosts` shows it (lower case).
    pub fn host_state(&self, host: &str) -> HostState {
        let host = host.to_ascii_lowercase();
        self.host_states()
            .into_iter()
            .find(|s| s.host == host)
            .unwrap_or(HostState {
                host,
                configured: self.per_host,
                learned: None,
                raises_at: None,
                in_use: 0,
            })
    }

    /// Every host this node knows: with a learned limit, or a gate (connections opened since
    /// the start), by name.
    pub fn host_states(&self) -> Vec<HostState> {
        let quiet = self.learned.ctx.get().map_or_else(
            || LearnSettings::default().quiet_ms(),
            |c| c.settings.quiet_ms(),
        );
        let mut out: std::collections::BTreeMap<String, HostState> = Default::default();
        for (host, gate) in self.gates.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            out.insert(
                host.clone(),
                HostState {
                    host: host.clone(),
                    configured: self.per_host,
                    learned: None,
                    raises_at: None,
                    in_use: gate.state().in_use,
                },
            );
        }
        for l in self.learned.known().values() {
            let s = out.entry(l.host.clone()).or_insert_with(|| HostState {
                host: l.host.clone(),
                configured: self.per_host,
                learned: None,
                raises_at: None,
                in_use: 0,
            });
            s.raises_at = Some(hostlimit::raises_at(l, quiet));
            s.learned = Some(l.clone());
        }
        out.into_values().collect()
    }
}

/// The pause of a pair refused for too many before it tries again (it counts no failed try):
/// none while this node holds other connections on the host (the wait for a slot under the
/// lowered limit is the wait for one of them to close); when it holds none there (the server
/// is full of other clients'), 1 s, doubling up to a minute.
#[derive(Debug, Default)]
pub struct TooMany {
    next: Option<Duration>,
}

impl TooMany {
    pub async fn wait(&mut self, hosts: &HostLimits, e: &PairError) {
        let Some(host) = refused_host(e) else {
            return;
        };
        if hosts.gate(host).state().in_use > 0 {
            return;
        }
        let pause = self.next.unwrap_or(Duration::from_secs(1));
        self.next = Some((pause * 2).min(Duration::from_secs(60)));
        tokio::time::sleep(pause).await;
    }
}

/// The host a login refusal came from.
fn refused_host(e: &PairError) -> Option<&str> {
    match &e.failure {
        JobFailure::Connect {
            error: ConnectError::Refused { host, .. },
            ..
        } => Some(host.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::reply::{Disposition, ReplyCode, TransientKind};
    use bftp_ftp::parse::Reply;

    fn too_many_from(host: &str) -> PairError {
        PairError {
            failure: JobFailure::Connect {
                side: bftp_ftp::Side::Source,
                error: ConnectError::Refused {
                    host: host.into(),
                    command: "greeting",
                    reply: Reply::new(
                        ReplyCode::new(421).unwrap(),
                        vec!["There are too many connections from your internet address.".into()],
                    ),
                    disposition: Disposition::Transient(TransientKind::Reconnect),
                },
            },
            disposition: Disposition::Transient(TransientKind::Reconnect),
            transcript: Default::default(),
        }
    }

    fn quiet(ms: u64) -> LearnSettings {
        LearnSettings {
            quiet: Duration::from_millis(ms),
            ..Default::default()
        }
    }

    /// Six pairs opened at once on a server that allows two sessions: the four refusals, in
    /// any order, teach 2 (what was held less what was refused), the store keeps it, and the
    /// host's gate holds a third pair back until one of the two closes.
    #[tokio::test]
    async fn refusals_of_one_burst_teach_what_was_held() {
        let (_dir, store) = crate::testkit::store();
        let store = Store::new(store);
        let hosts = HostLimits::new(6, 8);
        hosts
            .learn_with(store.clone(), Clock::system(), quiet(60_000))
            .await
            .unwrap();
        let first = hosts.acquire("A", "b").await;
        let mut extra = hosts.extra_slots("a", "b", 5).await;
        assert_eq!(extra.len(), 5);
        let second = extra.remove(0);
        // The refused pairs' slots go back only after all four refusals were seen (the
        // logins of one burst fail together): what was refused is not counted as held.
        for (n, slots) in extra.iter().enumerate() {
            assert!(hosts.refused(&too_many_from("A"), Some(slots)).await);
            assert_eq!(
                hosts.limit_of("a"),
                5 - n,
                "each refusal sees the one before"
            );
        }
        drop(extra);
        assert_eq!(hosts.limit_of("a"), 2);
        assert_eq!(hosts.limit_of("b"), 8, "the other host keeps its limit");
        let kept = store.call(|s| s.host_limit("a")).await.unwrap().unwrap();
        assert_eq!(kept.limit, 2);
        assert!(
            kept.reply.starts_with("421 There are too many connections"),
            "{}",
            kept.reply
        );
        assert!(
            hosts.try_acquire("a", "c").await.is_none(),
            "two held, two allowed"
        );
        drop(second);
        assert!(hosts.try_acquire("a", "c").await.is_some());
        drop(first);
        // Another reply is no lesson.
        let mut other = too_many_from("a");
        if let JobFailure::Connect {
            error: ConnectError::Refused { reply, .. },
            ..
        } = &mut other.failure
        {
            *reply = Reply::new(
                ReplyCode::new(530).unwrap(),
                vec!["Login incorrect.".into()],
            );
        }
        assert!(!hosts.refused(&other, None).await);
    }

    /// A learned limit read from the store at start is the host's limit; after each quiet
    /// period it is raised by one, and at the configured limit it is forgotten, in the store
    /// too.
    #[tokio::test]
    async fn a_learned_limit_is_raised_after_the_quiet_period_then_forgotten() {
        let (_dir, store) = crate::testkit::store();
        let store = Store::new(store);
        let clock = Clock::system();
        let taught = hostlimit::learn(
            "a",
            2,
            "421 Too many connections (2) from this IP",
            clock.now(),
        );
        store
            .call(move |s| s.learn_host_limit(&taught))
            .await
            .unwrap();
        let hosts = HostLimits::new(4, 4);
        hosts
            .learn_with(store.clone(), clock, quiet(300))
            .await
            .unwrap();
        assert_eq!(hosts.limit_of("a"), 2, "read from the store");
        let held = (hosts.acquire("a", "b").await, hosts.acquire("a", "c").await);
        assert!(hosts.try_acquire("a", "d").await.is_none());
        hosts.raise_due().await;
        assert_eq!(hosts.limit_of("a"), 2, "not before the quiet period");
        tokio::time::sleep(Duration::from_millis(350)).await;
        hosts.raise_due().await;
        assert_eq!(hosts.limit_of("a"), 3);
        let third = hosts
            .try_acquire("a", "d")
            .await
            .expect("raised: a slot at once");
        let state = hosts.host_state("a");
        assert_eq!(state.learned.as_ref().map(|l| l.limit), Some(3));
        assert_eq!(state.in_use, 3);
        hosts.raise_due().await;
        assert_eq!(hosts.limit_of("a"), 3, "one step a quiet period");
        tokio::time::sleep(Duration::from_millis(350)).await;
        hosts.raise_due().await;
        assert_eq!(hosts.limit_of("a"), 4, "the configured limit");
        assert_eq!(
            store.call(|s| s.host_limit("a")).await.unwrap(),
            None,
            "forgotten"
        );
        assert_eq!(hosts.host_state("a").learned, None);
        drop((held, third));
    }
}
