//! What the running attempts' copies are doing right now, for `bftp status` and
//! `--watch`: each file in flight, its phase, when it began, and the bytes on the
//! destination so far where a look is possible.
//!
//! Kept in memory only: the figures change every few seconds and mean nothing after a
//! restart, so writing them to the store would cost a flush per look for nothing; the
//! ledger is written when the file ends, as before.
//!
//! Bytes so far come from the destination's SIZE of the file being written, asked on a
//! connection of its own ([`bftp_ftp::SizeWatch`]), opened once a transfer has run
//! [`FIRST_LOOK`], only on a connection slot of the destination host free at that moment
//! (a look never waits for one, and holds it only while its copy runs), and only for `replace` copies (an append's SIZE includes
//! what was there before; a STOU name is known only at the end).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bftp_api::{JobView, ProgressView};
use bftp_core::Timestamp;
use bftp_ftp::{AddressCheck, Limits, Progress, ServerLogin, SizeWatch};
use bftp_store::JobId;
use tokio::sync::watch;

use crate::hosts::HostLimits;

/// A transfer this young is not looked at: most files are done before.
pub const FIRST_LOOK: Duration = Duration::from_secs(1);
/// Between two SIZE looks at one file.
pub const LOOK_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq)]
struct LiveFile {
    phase: &'static str,
    started: SystemTime,
    transferring_since: Option<SystemTime>,
    bytes: Option<(u64, SystemTime)>,
}

/// The files in flight of every running attempt, by job and member index.
#[derive(Default)]
pub struct Live {
    files: Mutex<HashMap<(u64, u32), LiveFile>>,
}

fn rfc3339(t: SystemTime) -> String {
    Timestamp::from_system(t).to_rfc3339()
}

fn seconds(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).unwrap_or_default().as_secs_f64()
}

impl Live {
    fn with(&self, job: JobId, index: u32, f: impl FnOnce(&mut LiveFile)) {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = files.get_mut(&(job.0, index)) {
            f(file);
        }
    }

    /// A member's copy begins.
    pub fn start(&self, job: JobId, index: u32, now: SystemTime) {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.insert(
            (job.0, index),
            LiveFile {
                phase: "preparing",
                started: now,
                transferring_since: None,
                bytes: None,
            },
        );
    }

    /// A member's copy ended (its ledger entry says how).
    pub fn end(&self, job: JobId, index: u32) {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.remove(&(job.0, index));
    }

    /// `first`: the value the pair showed when the member began (idle, or the end of the
    /// pair's previous copy), which says nothing about this member yet.
    fn phase(&self, job: JobId, index: u32, p: &Progress, first: bool) {
        self.with(job, index, |f| match p {
            _ if first => f.phase = "preparing",
            Progress::Idle | Progress::Preparing { .. } => f.phase = "preparing",
            // The copy is over; what follows (a `move`'s DELE) is still this member's.
            Progress::Finished { .. } => f.phase = "finishing",
            Progress::Transferring { since, .. } => {
                f.phase = "transferring";
                f.transferring_since = Some(*since);
            }
            Progress::Checking { .. } => f.phase = "checking",
        });
    }

    fn bytes(&self, job: JobId, index: u32, bytes: u64, at: SystemTime) {
        self.with(job, index, |f| f.bytes = Some((bytes, at)));
    }

    /// The progress of member `index` of `job`, as of `now`.
    pub fn view(&self, job: u64, index: u32, now: SystemTime) -> Option<ProgressView> {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let f = files.get(&(job, index))?;
        let rate = match (f.transferring_since, f.bytes) {
            (Some(since), Some((bytes, at))) if seconds(since, at) >= 0.5 => {
                Some((bytes as f64 / seconds(since, at) * 10.0).round() / 10.0)
            }
            _ => None,
        };
        Some(ProgressView {
            phase: f.phase.to_string(),
            started_at: rfc3339(f.started),
            elapsed_seconds: (seconds(f.started, now) * 10.0).round() / 10.0,
            transferring_since: f.transferring_since.map(rfc3339),
            bytes_so_far: f.bytes.map(|(b, _)| b),
            bytes_seen_at: f.bytes.map(|(_, at)| rfc3339(at)),
            rate_bytes_per_second: rate,
        })
    }

    /// Puts the progress of the job's files in flight into its view.
    pub fn fill(&self, view: &mut JobView) {
        if view.state != "running" {
            return;
        }
        let now = SystemTime::now();
        for m in &mut view.members {
            if m.state == "pending" {
                m.progress = self.view(view.id, m.index, now);
            }
        }
    }
}

/// Where to look for a copy's bytes: its destination and the file's path there.
pub struct Look {
    pub login: ServerLogin,
    pub path: String,
    pub limits: Limits,
    pub check: Arc<dyn AddressCheck>,
    pub hosts: Arc<HostLimits>,
    /// The attempt's fence (RULES.md §4.8): a look at the job's file is a command for it.
    pub gate: Option<Arc<dyn bftp_ftp::SendGate>>,
}

/// Follows one member's copy on `live` from the pair's progress, looking at its bytes
/// with `look` while it transfers. Never completes: the copy's end drops it (and the
/// look's connection with it); the caller then calls [`Live::end`].
pub async fn follow(
    live: Arc<Live>,
    job: JobId,
    index: u32,
    mut progress: watch::Receiver<Progress>,
    mut look: Option<Look>,
) -> Infallible {
    live.start(job, index, SystemTime::now());
    // The look's connection and the host slot it holds.
    let mut watcher: Option<(SizeWatch, crate::hosts::Slots)> = None;
    let mut first = true;
    loop {
        let now = progress.borrow_and_update().clone();
        live.phase(job, index, &now, first);
        let transferring = match &now {
            Progress::Transferring { since, .. } if !first => Some(*since),
            _ => None,
        };
        first = false;
        match (transferring, look.as_ref()) {
            (Some(since), Some(l)) => {
                let due = since + FIRST_LOOK;
                let wait = due
                    .duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .max(if watcher.is_some() {
                        LOOK_INTERVAL
                    } else {
                        Duration::ZERO
                    });
                tokio::select! {
                    changed = progress.changed() => {
                        if changed.is_err() { break; }
                        continue;
                    }
                    () = tokio::time::sleep(wait) => {}
                }
                if watcher.is_none() {
                    let opened = match l.hosts.try_acquire_one(&l.login.host).await {
                        Some(permit) => {
                            match SizeWatch::open(&l.login, &l.limits, &*l.check, l.gate.clone())
                                .await
                            {
                                Ok(w) => Some((w, permit)),
                                // A refusal for too many lowers the host's limit (§16.3).
                                Err(e) => {
                                    l.hosts.refused_login(&e, Some(&permit)).await;
                                    None
                                }
                            }
                        }
                        None => None,
                    };
                    match opened {
                        Some(w) => watcher = Some(w),
                        None => {
                            // No slot or no login: this copy goes without bytes so far.
                            tracing::debug!(job = job.0, index, "no look at the copy's bytes");
                            look = None;
                            continue;
                        }
                    }
                }
                if let Some((w, _)) = watcher.as_mut() {
                    if let Some(bytes) = w.size(&l.path).await {
                        live.bytes(job, index, bytes, SystemTime::now());
                    }
                }
            }
            _ => {
                if let Some((w, permit)) = watcher.take() {
                    w.close().await;
                    drop(permit);
                }
                if progress.changed().await.is_err() {
                    break;
                }
            }
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_in_flight_shows_its_phase_bytes_and_rate() {
        let live = Live::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let job = JobId(7);
        live.start(job, 2, t0);
        let v = live.view(7, 2, t0 + Duration::from_secs(3)).unwrap();
        assert_eq!(
            (v.phase.as_str(), v.elapsed_seconds, v.bytes_so_far),
            ("preparing", 3.0, None)
        );
        // What the pair showed before this member began says nothing about it.
        let earlier = Progress::Finished {
            path: "y".into(),
            bytes: None,
            success: true,
        };
        live.phase(job, 2, &earlier, true);
        assert_eq!(live.view(7, 2, t0).unwrap().phase, "preparing");
        live.phase(
            job,
            2,
            &Progress::Transferring {
                path: "x".into(),
                since: t0 + Duration::from_secs(1),
            },
            false,
        );
        live.bytes(job, 2, 4_000_000, t0 + Duration::from_secs(5));
        let v = live.view(7, 2, t0 + Duration::from_secs(6)).unwrap();
        assert_eq!(v.phase, "transferring");
        assert_eq!(v.bytes_so_far, Some(4_000_000));
        assert_eq!(v.rate_bytes_per_second, Some(1_000_000.0));
        assert_eq!(v.elapsed_seconds, 6.0);
        assert!(live.view(7, 3, t0).is_none() && live.view(8, 2, t0).is_none());
        live.phase(job, 2, &earlier, false);
        assert_eq!(live.view(7, 2, t0).unwrap().phase, "finishing");
        live.end(job, 2);
        assert!(live.view(7, 2, t0).is_none());
    }
}
