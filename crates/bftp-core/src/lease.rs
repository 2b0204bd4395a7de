//! A node's lease on a job, judged by the node's own monotonic clock (RULES.md §4.8).
//!
//! The database's fence refuses a late node's writes, but FTP servers know nothing of epochs:
//! a node paused past its lease (SIGSTOP, a stalled VM) that runs again must not send a
//! single command for the job before its heartbeat has looked, or it would truncate files
//! the node that took the job over has finished. So the node knows a deadline of its own for
//! each lease: the instant *before* it sent the claim or renewal the database confirmed, plus
//! the lease, minus a margin. The database's lease runs from its own `now()`, which is later
//! than that instant, so up to the deadline no other node can have taken the job over; past
//! it, the node sends nothing for the job (ABOR and QUIT excepted: they stop, they change no
//! file), whatever its heartbeat has or has not seen yet. A process resumed after a pause
//! finds its monotonic clock moved on by the pause, so the deadline is already past when it
//! wakes, before any of its tasks runs.

use std::time::{Duration, Instant};

/// What a node knows of its lease on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Held, confirmed by the database until `deadline` on this node's monotonic clock.
    Held { deadline: Instant },
    /// Another node took the job over, or it is another's to take (given up): for good.
    Lost,
    /// The node let the job go by a write of its own (a final state, a cancel), or the job
    /// was cancelled on another node straight from this node's hold (nobody else ran it):
    /// nobody else will touch the job's files, and the attempt's clean-up may speak.
    Ended,
}

/// Why a node may not send a command for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Fenced {
    #[error(
        "this node's lease on the job ran out {late:?} ago by its own clock, with no renewal \
         confirmed since: it sends nothing more for the job"
    )]
    Expired { late: Duration },
    #[error("this node lost its lease on the job: another node may hold it")]
    Lost,
}

/// How much earlier than the database's lease the node's own deadline falls: time for a
/// command sent just before the deadline to reach its server, and for the two clocks' rates
/// to differ. A tenth of the lease (1 s of the default 10 s).
pub fn margin(lease: Duration) -> Duration {
    lease / 10
}

/// The deadline a claim or renewal gives, once the database confirmed it: `sent`, the
/// instant before the request was sent, plus the lease, minus [`margin`].
pub fn deadline(sent: Instant, lease: Duration) -> Instant {
    sent + (lease - margin(lease))
}

/// The lease after a renewal the database confirmed with `deadline`: a later deadline
/// replaces an earlier one (a slow answer to an older request never shortens it); a lease
/// lost or ended stays so.
pub fn renewed(lease: Lease, deadline: Instant) -> Lease {
    match lease {
        Lease::Held { deadline: d } => Lease::Held {
            deadline: d.max(deadline),
        },
        other => other,
    }
}

/// Whether a node may send a command for the job at `now`.
pub fn may_send(lease: Lease, now: Instant) -> Result<(), Fenced> {
    match lease {
        Lease::Held { deadline } if now < deadline => Ok(()),
        Lease::Held { deadline } => Err(Fenced::Expired {
            late: now.saturating_duration_since(deadline),
        }),
        Lease::Lost => Err(Fenced::Lost),
        Lease::Ended => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(3);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_deadline_is_the_instant_before_sending_plus_the_lease_minus_the_margin() {
        let t0 = Instant::now();
        assert_eq!(margin(LEASE), ms(300));
        assert_eq!(deadline(t0, LEASE), t0 + ms(2_700));
        assert_eq!(deadline(t0, Duration::from_secs(10)), t0 + ms(9_000));
        assert_eq!(deadline(t0, Duration::ZERO), t0);
    }

    #[test]
    fn a_command_is_sent_only_before_the_deadline_of_a_held_lease() {
        let t0 = Instant::now();
        let held = Lease::Held {
            deadline: deadline(t0, LEASE),
        };
        // (what the node knows, ms after t0, the answer)
        let table: &[(Lease, u64, Result<(), Fenced>)] = &[
            (held, 0, Ok(())),
            (held, 2_699, Ok(())),
            // At the deadline itself: no more.
            (held, 2_700, Err(Fenced::Expired { late: ms(0) })),
            // A pause of a minute (SIGSTOP): the monotonic clock moved on while the process
            // slept, so the first look after it refuses, before the heartbeat said a word.
            (held, 62_700, Err(Fenced::Expired { late: ms(60_000) })),
            (Lease::Lost, 0, Err(Fenced::Lost)),
            // A cancel's clean-up, after this node's own cancel or one straight from its hold.
            (Lease::Ended, 0, Ok(())),
            (Lease::Ended, 62_700, Ok(())),
        ];
        for (lease, at, want) in table {
            assert_eq!(
                may_send(*lease, t0 + ms(*at)),
                *want,
                "{lease:?} at {at} ms"
            );
        }
    }

    #[test]
    fn a_renewal_moves_a_held_deadline_on_and_never_back() {
        let t0 = Instant::now();
        let at = |n| t0 + ms(n);
        // (before, the renewal's deadline, after)
        let table: &[(Lease, Instant, Lease)] = &[
            (
                Lease::Held {
                    deadline: at(2_700),
                },
                at(3_700),
                Lease::Held {
                    deadline: at(3_700),
                },
            ),
            // The answer to an older request, come late, shortens nothing.
            (
                Lease::Held {
                    deadline: at(3_700),
                },
                at(2_700),
                Lease::Held {
                    deadline: at(3_700),
                },
            ),
            // Lost is for good: a renewal that was on its way when the loss was seen
            // changes nothing.
            (Lease::Lost, at(9_000), Lease::Lost),
            (Lease::Ended, at(9_000), Lease::Ended),
        ];
        for (before, d, after) in table {
            assert_eq!(renewed(*before, *d), *after, "{before:?} renewed to {d:?}");
        }
    }
}
