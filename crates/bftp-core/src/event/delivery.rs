//! The rule of a webhook delivery's tries: after each try of one (event, target), whether it
//! is delivered, tried again (when), or given up (why).

use std::time::Duration;

use crate::time::Timestamp;

/// What one try of sending an event to a target came to (the sender's answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TryOutcome {
    /// The receiver took it (2xx).
    Delivered,
    /// Worth trying again: a timeout, a refused connection, 408, 429, 5xx.
    Transient(String),
    /// Never worth trying again: a redirect, another 4xx, an address the policy refuses.
    Permanent(String),
}

/// When tries are repeated: `first` after the first, doubling up to `max`, and none that
/// would start later than `give_up_after` after the event was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub give_up_after: Duration,
}

/// What to record after a try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    Retry { at: Timestamp, why: String },
    GiveUp { why: String },
}

/// The verdict on the `tries`-th try (1 for the first) of an event made at `created`, tried
/// at `now`.
pub fn after_try(
    outcome: TryOutcome,
    tries: u32,
    created: Timestamp,
    now: Timestamp,
    b: &Backoff,
) -> Verdict {
    let why = match outcome {
        TryOutcome::Delivered => return Verdict::Delivered,
        TryOutcome::Permanent(why) => {
            return Verdict::GiveUp {
                why: format!("{why} (not tried again)"),
            }
        }
        TryOutcome::Transient(why) => why,
    };
    let shift = tries.saturating_sub(1).min(32);
    let delay = b
        .first
        .checked_mul(1u32 << shift.min(31))
        .unwrap_or(b.max)
        .min(b.max);
    let at = now.saturating_add(delay);
    let bound = created.saturating_add(b.give_up_after);
    if at > bound {
        return Verdict::GiveUp {
            why: format!(
                "{why} (gave up after {tries} tr{}: no try later than {} after the event)",
                if tries == 1 { "y" } else { "ies" },
                human(b.give_up_after)
            ),
        };
    }
    Verdict::Retry { at, why }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Timestamp = Timestamp(1_000_000);

    fn b() -> Backoff {
        Backoff {
            first: Duration::from_secs(5),
            max: Duration::from_secs(600),
            give_up_after: Duration::from_secs(3 * 86_400),
        }
    }

    #[test]
    fn tries_double_from_first_to_max_and_stop_at_the_bound() {
        let t = |s: u64| TryOutcome::Transient(format!("t{s}"));
        let at = |now: Timestamp, s: u64| Timestamp(now.0 + s * 1000);
        let late = Timestamp(C.0 + 3 * 86_400_000 - 10_000);
        // (tries, now, verdict)
        let table: Vec<(u32, Timestamp, Verdict)> = vec![
            (
                1,
                C,
                Verdict::Retry {
                    at: at(C, 5),
                    why: "t1".into(),
                },
            ),
            (
                2,
                C,
                Verdict::Retry {
                    at: at(C, 10),
                    why: "t1".into(),
                },
            ),
            (
                3,
                C,
                Verdict::Retry {
                    at: at(C, 20),
                    why: "t1".into(),
                },
            ),
            (
                8,
                C,
                Verdict::Retry {
                    at: at(C, 600),
                    why: "t1".into(),
                },
            ),
            (
                40,
                C,
                Verdict::Retry {
                    at: at(C, 600),
                    why: "t1".into(),
                },
            ),
            (
                u32::MAX,
                C,
                Verdict::Retry {
                    at: at(C, 600),
                    why: "t1".into(),
                },
            ),
            (
                1,
                late,
                Verdict::Retry {
                    at: at(late, 5),
                    why: "t1".into(),
                },
            ),
        ];
        for (tries, now, want) in table {
            assert_eq!(after_try(t(1), tries, C, now, &b()), want, "{tries}");
        }
        match after_try(t(1), 9, C, late, &b()) {
            Verdict::GiveUp { why } => {
                assert!(why.starts_with("t1 (gave up after 9 tries"), "{why}");
                assert!(why.contains("3d"), "{why}");
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn delivered_and_permanent_answers_end_the_tries_at_once() {
        assert_eq!(
            after_try(TryOutcome::Delivered, 3, C, C, &b()),
            Verdict::Delivered
        );
        assert_eq!(
            after_try(TryOutcome::Permanent("HTTP 404".into()), 1, C, C, &b()),
            Verdict::GiveUp {
                why: "HTTP 404 (not tried again)".into()
            }
        );
    }
}
