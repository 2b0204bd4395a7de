//! Logged-in connection pairs kept between jobs, so that a job to the same two servers with the
//! same logins skips the connect and login round trips (a one-file job on a far network spends
//! most of its time there).
//!
//! The rules:
//! - a pair is kept only for the same Unix owner, the same source and destination (host,
//!   port, user, password, account) and the same TYPE/MODE/STRU ([`PoolKey`]): never shared
//!   between Unix users;
//! - a pair is kept only if nothing went wrong on it (`Pair::clean`: every copy and listing
//!   succeeded, no reconnection, nothing started ahead), and it is asked NOOP on both
//!   connections before reuse (a server that closed an idle session is found out there);
//! - a kept pair holds its per-host connection slots: the per-host limits count it. A job
//!   that needs a slot a kept pair of another key holds closes that pair rather than wait
//!   ([`acquire`]); one of the same key simply takes it;
//! - at most `max_idle` pairs are kept (the oldest goes first), each at most `idle_timeout`
//!   (a reaper closes older ones), and `max_idle = 0` keeps none.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_core::time::Timestamp;
use bftp_core::FtpParams;
use bftp_ftp::{Pair, ServerLogin, Side};
use bftp_store::JobId;
use tokio::time::Instant;

use super::Slots;

/// What a kept pair may be reused for.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolKey {
    owner: u32,
    logins: [ServerLogin; 2],
    params: FtpParams,
}

impl PoolKey {
    pub fn new(owner: u32, src: &ServerLogin, dst: &ServerLogin, params: FtpParams) -> PoolKey {
        let norm = |l: &ServerLogin| ServerLogin {
            host: l.host.to_ascii_lowercase(),
            ..l.clone()
        };
        PoolKey {
            owner,
            logins: [norm(src), norm(dst)],
            params,
        }
    }

    fn touches(&self, a: &str, b: &str) -> bool {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        self.logins.iter().any(|l| l.host == a || l.host == b)
    }
}

/// `[ftp] pool_max_idle` and `pool_idle_timeout`.
#[derive(Clone, Copy, Debug)]
pub struct PoolSettings {
    pub max_idle: usize,
    pub idle_timeout: Duration,
}

/// Where a kept pair comes from, for the transcript of the job that reuses it: without it,
/// that transcript starts with a NOOP and no word of the login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// When the pair logged in (wall time).
    pub logged_in: Timestamp,
    /// The job it logged in for.
    pub first_job: JobId,
    /// The last job that used it before.
    pub last_job: JobId,
    /// How many jobs used it before.
    pub jobs: u32,
}

impl Origin {
    /// A pair that logged in at `at` for `job`.
    pub fn new(at: Timestamp, job: JobId) -> Origin {
        Origin {
            logged_in: at,
            first_job: job,
            last_job: job,
            jobs: 1,
        }
    }

    /// The same pair after `job` used it too.
    pub fn used_by(self, job: JobId) -> Origin {
        if job == self.last_job {
            return self;
        }
        Origin {
            last_job: job,
            jobs: self.jobs.saturating_add(1),
            ..self
        }
    }

    /// The transcript's first line for a job that reuses the pair.
    pub fn note(&self) -> String {
        let mut s = format!(
            "connection pair reused, no login: logged in at {} for job {}",
            self.logged_in, self.first_job
        );
        if self.last_job != self.first_job {
            s.push_str(&format!(
                ", last used by job {} ({} jobs before this one)",
                self.last_job, self.jobs
            ));
        }
        s.push_str("; NOOP asks both servers whether it is still open");
        s
    }
}

struct Idle {
    key: PoolKey,
    pair: Pair,
    slots: Slots,
    origin: Origin,
    since: Instant,
}

/// The kept pairs, daemon-wide.
pub struct PairPool {
    settings: PoolSettings,
    idle: Mutex<Vec<Idle>>,
    /// Wakes jobs waiting for a host slot when a pair is kept (it may be theirs to take, or
    /// theirs to close).
    pub(super) kept: tokio::sync::Notify,
    reaper: std::sync::Once,
    /// Pairs kept and pairs reused so far (for tests and metrics).
    counts: Mutex<(u64, u64)>,
}

impl PairPool {
    pub fn new(settings: PoolSettings) -> Arc<PairPool> {
        Arc::new(PairPool {
            settings,
            idle: Mutex::new(Vec::new()),
            kept: tokio::sync::Notify::new(),
            reaper: std::sync::Once::new(),
            counts: Mutex::new((0, 0)),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pairs kept and pairs reused so far.
    pub fn counts(&self) -> (u64, u64) {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `pair` (with the slots it holds) for another job of `key`, if it may be kept;
    /// otherwise, or when the pool is full, a pair is closed.
    pub async fn put(self: &Arc<Self>, key: PoolKey, mut pair: Pair, slots: Slots, origin: Origin) {
        if self.settings.max_idle == 0 || !pair.clean() {
            pair.close().await;
            return;
        }
        let _ = pair.take_transcript();
        self.start_reaper();
        let evicted = {
            let mut idle = self.idle();
            idle.push(Idle {
                key,
                pair,
                slots,
                origin,
                since: Instant::now(),
            });
            let over = idle.len().saturating_sub(self.settings.max_idle);
            idle.drain(..over).collect::<Vec<_>>()
        };
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        self.kept.notify_waiters();
        close_all(evicted).await;
    }

    /// The most recently kept pair of `key` that still answers, with its slots and where it
    /// comes from. Its transcript starts with a note of that origin ([`Origin::note`]).
    pub async fn take(&self, key: &PoolKey) -> Option<(Pair, Slots, Origin)> {
        loop {
            let found = {
                let mut idle = self.idle();
                let timeout = self.settings.idle_timeout;
                let i = idle
                    .iter()
                    .rposition(|e| e.key == *key && e.since.elapsed() < timeout)?;
                idle.remove(i)
            };
            let mut pair = found.pair;
            pair.note(Side::Source, &found.origin.note());
            if pair.alive().await {
                self.counts.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
                return Some((pair, found.slots, found.origin));
            }
            // The note goes with the pair that did not answer.
            let _ = pair.take_transcript();
            pair.close().await;
        }
    }

    /// Closes the kept pairs that hold a slot on `a` or `b`: whether any was. Each is sent
    /// QUIT and its slots go free once the server has closed its end (a pair dropped
    /// without QUIT leaves the server's session running a moment after its slot was free,
    /// and the server would see one session more than the limit).
    pub async fn evict_touching(&self, a: &str, b: &str) -> bool {
        let evicted: Vec<Idle> = {
            let mut idle = self.idle();
            let (gone, kept) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|e| e.key.touches(a, b));
            *idle = kept;
            gone
        };
        let any = !evicted.is_empty();
        close_all(evicted).await;
        any
    }

    /// Closes the kept pairs that hold a slot on `host` (QUIT, then their slots go).
    pub async fn close_touching(&self, host: &str) {
        let gone: Vec<Idle> = {
            let mut idle = self.idle();
            let (gone, kept) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|e| e.key.touches(host, host));
            *idle = kept;
            gone
        };
        close_all(gone).await;
    }

    fn start_reaper(self: &Arc<Self>) {
        self.reaper.call_once(|| {
            let pool = Arc::downgrade(self);
            let every = (self.settings.idle_timeout / 4).max(Duration::from_millis(100));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(pool) = pool.upgrade() else { return };
                    let expired: Vec<Idle> = {
                        let mut idle = pool.idle();
                        let timeout = pool.settings.idle_timeout;
                        let (gone, kept) = std::mem::take(&mut *idle)
                            .into_iter()
                            .partition(|e| e.since.elapsed() >= timeout);
                        *idle = kept;
                        gone
                    };
                    close_all(expired).await;
                }
            });
        });
    }
}

async fn close_all(idle: Vec<Idle>) {
    for e in idle {
        // The slots go free once the connections are closed.
        e.pair.close().await;
        drop(e.slots);
    }
}

/// A job's first pair: a kept one of `key`, or the slots to open one.
pub enum Acquired {
    Kept(Box<Pair>, Slots, Origin),
    Slots(Slots),
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::Secret;

    fn login(host: &str, user: &str, password: &str) -> ServerLogin {
        ServerLogin {
            host: host.into(),
            port: 21,
            user: user.into(),
            password: Some(Secret::new(password)),
            acct: None,
            tls: Default::default(),
        }
    }

    #[test]
    fn a_kept_pair_is_for_the_same_owner_servers_logins_and_params_only() {
        let (a, b) = (
            login("src.example", "u", "pw"),
            login("dst.example", "v", "pw2"),
        );
        let key = PoolKey::new(1000, &a, &b, FtpParams::default());
        let same = PoolKey::new(
            1000,
            &login("SRC.example", "u", "pw"),
            &b,
            FtpParams::default(),
        );
        assert!(key == same, "host names compare case-insensitively");
        let others = [
            (
                "another owner",
                PoolKey::new(1001, &a, &b, FtpParams::default()),
            ),
            (
                "another password",
                PoolKey::new(
                    1000,
                    &login("src.example", "u", "other"),
                    &b,
                    FtpParams::default(),
                ),
            ),
            (
                "another user",
                PoolKey::new(
                    1000,
                    &login("src.example", "w", "pw"),
                    &b,
                    FtpParams::default(),
                ),
            ),
            (
                "swapped sides",
                PoolKey::new(1000, &b, &a, FtpParams::default()),
            ),
            (
                "another type",
                PoolKey::new(
                    1000,
                    &a,
                    &b,
                    FtpParams {
                        transfer_type: bftp_core::TransferType::Ascii,
                        ..FtpParams::default()
                    },
                ),
            ),
        ];
        for (why, other) in others {
            assert!(key != other, "{why}");
        }
        assert!(key.touches("DST.example", "x"));
        assert!(!key.touches("x", "y"));
    }
}
