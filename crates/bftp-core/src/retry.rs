//! Retry policy and capped exponential backoff with jitter (RULES.md §5).

use std::time::Duration;

use crate::model::ValidationError;
use crate::time::Timestamp;

/// The user's retry policy, after clamping by the daemon's [`RetryBounds`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Wait after the first failed attempt.
    pub first_interval: Duration,
    /// Each further wait is the previous one times this.
    pub factor: f64,
    /// No wait is longer than this (before jitter).
    pub cap: Duration,
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    /// No attempt starts later than this after the job's start time.
    pub deadline: Duration,
}

// `factor` is validated finite, so equality is total in practice.
impl Eq for RetryPolicy {}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            first_interval: Duration::from_secs(10 * 60),
            factor: 2.0,
            cap: Duration::from_secs(4 * 3600),
            max_attempts: 20,
            deadline: Duration::from_secs(3 * 86_400),
        }
    }
}

/// The operator's limits on what users may ask for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBounds {
    pub min_first_interval: Duration,
    pub max_first_interval: Duration,
    pub min_factor: f64,
    pub max_factor: f64,
    pub min_cap: Duration,
    pub max_cap: Duration,
    pub max_attempts: u32,
    pub max_deadline: Duration,
}

impl Default for RetryBounds {
    fn default() -> Self {
        RetryBounds {
            min_first_interval: Duration::from_secs(60),
            max_first_interval: Duration::from_secs(6 * 3600),
            min_factor: 1.0,
            max_factor: 10.0,
            min_cap: Duration::from_secs(60),
            max_cap: Duration::from_secs(24 * 3600),
            max_attempts: 100,
            max_deadline: Duration::from_secs(30 * 86_400),
        }
    }
}

/// Jitter is ±10% of the wait.
pub const JITTER_FRACTION: f64 = 0.10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again at this time.
    RetryAt(Timestamp),
    /// No attempts left: the pending members become `failed_retries_exhausted`.
    Exhausted(ExhaustedBy),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExhaustedBy {
    MaxAttempts,
    Deadline,
}

impl RetryPolicy {
    pub fn validate(&self) -> Result<(), ValidationError> {
        let bad = |reason: String| {
            Err(ValidationError::Invalid {
                field: "retry policy".into(),
                reason,
            })
        };
        if !self.factor.is_finite() || self.factor < 1.0 {
            return bad(format!("factor {} must be a number >= 1", self.factor));
        }
        if self.first_interval.is_zero() {
            return bad("first interval must be positive".into());
        }
        if self.max_attempts == 0 {
            return bad("max attempts must be at least 1".into());
        }
        if self.cap < self.first_interval {
            return bad("the cap must not be shorter than the first interval".into());
        }
        Ok(())
    }

    /// The policy with every value forced inside the operator's bounds.
    pub fn clamp(self, b: &RetryBounds) -> RetryPolicy {
        let first_interval = self.first_interval.clamp(
            b.min_first_interval,
            b.max_first_interval.max(b.min_first_interval),
        );
        let cap = self
            .cap
            .clamp(b.min_cap, b.max_cap.max(b.min_cap))
            .max(first_interval);
        let factor = if self.factor.is_finite() {
            self.factor
                .clamp(b.min_factor, b.max_factor.max(b.min_factor))
        } else {
            b.min_factor
        };
        RetryPolicy {
            first_interval,
            factor,
            cap,
            max_attempts: self.max_attempts.clamp(1, b.max_attempts.max(1)),
            deadline: self.deadline.min(b.max_deadline),
        }
    }

    /// The wait after the `failed`-th failed attempt (1-based), before jitter:
    /// `first_interval * factor^(failed-1)`, capped.
    pub fn base_delay(&self, failed: u32) -> Duration {
        let exp = failed.saturating_sub(1).min(1_000) as i32;
        let secs = self.first_interval.as_secs_f64() * self.factor.powi(exp);
        let cap = self.cap.as_secs_f64();
        Duration::from_secs_f64(if secs.is_finite() { secs.min(cap) } else { cap })
    }

    /// `base_delay` with jitter; `jitter` is a uniform draw from [-1, 1] supplied by the caller.
    pub fn delay(&self, failed: u32, jitter: f64) -> Duration {
        let j = if jitter.is_finite() {
            jitter.clamp(-1.0, 1.0)
        } else {
            0.0
        };
        self.base_delay(failed).mul_f64(1.0 + JITTER_FRACTION * j)
    }

    /// What to do after `attempts_made` attempts have failed transiently, at `now`, for a job
    /// whose start time is `start_at`.
    pub fn decide(
        &self,
        attempts_made: u32,
        start_at: Timestamp,
        now: Timestamp,
        jitter: f64,
    ) -> RetryDecision {
        if attempts_made >= self.max_attempts {
            return RetryDecision::Exhausted(ExhaustedBy::MaxAttempts);
        }
        let next = now.saturating_add(self.delay(attempts_made.max(1), jitter));
        if next > start_at.saturating_add(self.deadline) {
            return RetryDecision::Exhausted(ExhaustedBy::Deadline);
        }
        RetryDecision::RetryAt(next)
    }

    /// When a job waiting at a start gate until `until` (a window's opening, a probe) is looked
    /// at again: then, but never later than just past the deadline, so that a gate opening
    /// after the deadline, or never, ends the job at its deadline (RULES.md §5, §16.4).
    pub fn wait_until(&self, start_at: Timestamp, until: Timestamp) -> Timestamp {
        let past_deadline = start_at
            .saturating_add(self.deadline)
            .saturating_add(Duration::from_millis(1));
        until.min(past_deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_at_a_gate_ends_just_past_the_deadline() {
        let p = RetryPolicy {
            deadline: Duration::from_secs(3600),
            ..RetryPolicy::default()
        };
        let s = Timestamp(1_000_000);
        let at = |secs: u64| s.saturating_add(Duration::from_secs(secs));
        for (until, want) in [
            (at(60), at(60)),
            (at(3600), at(3600)),
            (at(7200), at(3600).saturating_add(Duration::from_millis(1))),
            (
                Timestamp(u64::MAX),
                at(3600).saturating_add(Duration::from_millis(1)),
            ),
        ] {
            assert_eq!(p.wait_until(s, until), want, "until {until:?}");
        }
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn default_schedule_doubles_and_caps() {
        let p = RetryPolicy::default();
        let want_minutes = [10, 20, 40, 80, 160, 240, 240, 240];
        for (i, m) in want_minutes.iter().enumerate() {
            assert_eq!(
                p.base_delay(i as u32 + 1),
                MIN * *m,
                "after failure {}",
                i + 1
            );
        }
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, 1.0), Duration::from_secs(660));
        assert_eq!(p.delay(1, -1.0), Duration::from_secs(540));
        assert_eq!(p.delay(1, 0.0), Duration::from_secs(600));
        assert_eq!(
            p.delay(1, 7.0),
            Duration::from_secs(660),
            "out-of-range draws are clamped"
        );
        assert_eq!(p.delay(1, f64::NAN), Duration::from_secs(600));
        assert_eq!(p.delay(6, 1.0), Duration::from_secs(4 * 3600 + 1440));
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let p = RetryPolicy {
            factor: 10.0,
            ..RetryPolicy::default()
        };
        assert_eq!(p.base_delay(u32::MAX), p.cap);
    }

    #[test]
    fn decide_stops_at_max_attempts_or_deadline() {
        let p = RetryPolicy {
            max_attempts: 3,
            deadline: Duration::from_secs(3600),
            ..RetryPolicy::default()
        };
        let t0 = Timestamp(1_000_000);
        assert_eq!(
            p.decide(1, t0, t0, 0.0),
            RetryDecision::RetryAt(t0.saturating_add(MIN * 10))
        );
        assert_eq!(
            p.decide(2, t0, t0, 0.0),
            RetryDecision::RetryAt(t0.saturating_add(MIN * 20))
        );
        assert_eq!(
            p.decide(3, t0, t0, 0.0),
            RetryDecision::Exhausted(ExhaustedBy::MaxAttempts)
        );
        let late = t0.saturating_add(MIN * 45);
        assert_eq!(
            p.decide(2, t0, late, 0.0),
            RetryDecision::Exhausted(ExhaustedBy::Deadline)
        );
    }

    #[test]
    fn clamp_table() {
        let b = RetryBounds::default();
        let wild = RetryPolicy {
            first_interval: Duration::from_secs(1),
            factor: 100.0,
            cap: Duration::from_secs(365 * 86_400),
            max_attempts: 1_000_000,
            deadline: Duration::from_secs(365 * 86_400),
        };
        let c = wild.clamp(&b);
        assert_eq!(c.first_interval, b.min_first_interval);
        assert_eq!(c.factor, b.max_factor);
        assert_eq!(c.cap, b.max_cap);
        assert_eq!(c.max_attempts, b.max_attempts);
        assert_eq!(c.deadline, b.max_deadline);
        let d = RetryPolicy::default();
        assert_eq!(d.clamp(&b), d, "defaults are inside the default bounds");
        let nan = RetryPolicy {
            factor: f64::NAN,
            max_attempts: 0,
            ..d
        }
        .clamp(&b);
        assert_eq!((nan.factor, nan.max_attempts), (1.0, 1));
        nan.validate().unwrap();
    }
}
