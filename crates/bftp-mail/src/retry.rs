//! The outbox's backoff. Pure: the caller passes the attempt count and the jitter draw.

use std::time::Duration;

use crate::config::MailRetry;

/// The share of a wait that jitter may add or remove (±10%, as the jobs' backoff).
const JITTER_FRACTION: f64 = 0.1;

/// The wait before the next delivery after `attempt` (1-based) transient failures, or `None`
/// when the report is to be given up: when the next try would come later than
/// `give_up_after` since the first (`elapsed` is the time since the first try).
///
/// The wait is `first_interval * factor^(attempt-1)`, capped at `cap`, then moved by
/// `jitter` (a uniform draw from [-1, 1], clamped; not finite counts as 0) by up to ±10%.
pub fn next_delay(
    attempt: u32,
    elapsed: Duration,
    retry: &MailRetry,
    jitter: f64,
) -> Option<Duration> {
    if elapsed >= retry.give_up_after {
        return None;
    }
    let exp = attempt.saturating_sub(1).min(1_000) as i32;
    let factor = if retry.factor.is_finite() && retry.factor >= 1.0 {
        retry.factor
    } else {
        1.0
    };
    let cap = retry.cap.as_secs_f64();
    let secs = retry.first_interval.as_secs_f64() * factor.powi(exp);
    let base = if secs.is_finite() { secs.min(cap) } else { cap };
    let j = if jitter.is_finite() {
        jitter.clamp(-1.0, 1.0)
    } else {
        0.0
    };
    let delay = Duration::from_secs_f64(base * (1.0 + JITTER_FRACTION * j));
    if elapsed.saturating_add(delay) > retry.give_up_after {
        return None;
    }
    Some(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const M: Duration = Duration::from_secs(60);

    #[test]
    fn default_schedule_doubles_caps_and_gives_up() {
        let r = MailRetry::default();
        // (attempt, elapsed, jitter, expected)
        let table: &[(u32, Duration, f64, Option<Duration>)] = &[
            (1, Duration::ZERO, 0.0, Some(30 * S)),
            (2, 30 * S, 0.0, Some(M)),
            (3, 90 * S, 0.0, Some(2 * M)),
            (4, Duration::ZERO, 0.0, Some(4 * M)),
            (6, Duration::ZERO, 0.0, Some(16 * M)),
            (7, Duration::ZERO, 0.0, Some(30 * M)),
            (50, Duration::ZERO, 0.0, Some(30 * M)),
            (u32::MAX, Duration::ZERO, 0.0, Some(30 * M)),
            // jitter: ±10%, clamped, NaN ignored
            (1, Duration::ZERO, 1.0, Some(33 * S)),
            (1, Duration::ZERO, -1.0, Some(27 * S)),
            (1, Duration::ZERO, 7.0, Some(33 * S)),
            (1, Duration::ZERO, f64::NAN, Some(30 * S)),
            (7, Duration::ZERO, 1.0, Some(33 * M)),
            // give up: at the limit, past it, or when the wait would end past it
            (9, 5 * 86400 * S, 0.0, None),
            (9, 6 * 86400 * S, 0.0, None),
            // 29 minutes left and a 30-minute wait: give up rather than try after the limit
            (9, 5 * 86400 * S - 29 * M, 0.0, None),
            // exactly 30 minutes left: the last try lands on the limit
            (9, 5 * 86400 * S - 30 * M, 0.0, Some(30 * M)),
        ];
        for &(attempt, elapsed, jitter, want) in table {
            assert_eq!(
                next_delay(attempt, elapsed, &r, jitter),
                want,
                "attempt {attempt}, elapsed {elapsed:?}, jitter {jitter}"
            );
        }
    }

    #[test]
    fn odd_settings_stay_sane() {
        let r = MailRetry {
            first_interval: 10 * S,
            factor: 0.5, // shrinking waits make no sense: treated as 1
            cap: M,
            give_up_after: 3600 * S,
        };
        assert_eq!(next_delay(5, Duration::ZERO, &r, 0.0), Some(10 * S));
        let r = MailRetry {
            factor: f64::INFINITY,
            ..r
        };
        assert_eq!(next_delay(5, Duration::ZERO, &r, 0.0), Some(10 * S));
        let r = MailRetry { factor: 1e300, ..r };
        assert_eq!(next_delay(5, Duration::ZERO, &r, 0.0), Some(M));
        let r = MailRetry {
            give_up_after: Duration::ZERO,
            ..r
        };
        assert_eq!(next_delay(1, Duration::ZERO, &r, 0.0), None);
    }
}
