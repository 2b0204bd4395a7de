//! The late-arrival alarm (`--expect`, RULES.md §15.8): when a watch delivered no new file by
//! an expected time, one alarm per period; and the daily digest's day. Pure: the caller
//! passes the clock.

use crate::Timestamp;

const DAY_MS: u64 = 24 * 3600 * 1000;

/// When new files are expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// At least one file a day by this time (minutes after midnight, UTC).
    Daily { minute: u32 },
    /// At least one file in every interval this long.
    Every { ms: u64 },
}

/// Parses `daily HH:MM` (UTC). An interval is parsed by the caller (humantime) into
/// [`Expect::Every`].
pub fn parse_daily(words: &str) -> Option<Expect> {
    let time = words.trim().strip_prefix("daily")?.trim();
    let (h, m) = time.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60 && time.len() <= 5).then_some(Expect::Daily { minute: h * 60 + m })
}

/// The deadline just missed, when an alarm is due now; `None` otherwise.
///
/// - `Daily`: the last `HH:MM` at or before `now` is the deadline `d`; an alarm is due when the
///   watch existed before `d`, no delivery fell in the day up to `d` (a delivery after `d`
///   cannot tell whether one came before it: no alarm), and no alarm was sent for `d`.
/// - `Every`: the deadline is one interval after the latest of the watch's creation, its
///   last delivery and its last alarm; due once `now` reaches it.
pub fn alarm_due(
    expect: Expect,
    created: Timestamp,
    last_delivery: Option<Timestamp>,
    last_alarm: Option<Timestamp>,
    now: Timestamp,
) -> Option<Timestamp> {
    match expect {
        Expect::Every { ms } => {
            let base = [Some(created), last_delivery, last_alarm]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(created);
            let deadline = Timestamp(base.0.saturating_add(ms.max(1)));
            (now >= deadline).then_some(deadline)
        }
        Expect::Daily { minute } => {
            let offset = u64::from(minute) * 60_000;
            let today = now.0 - now.0 % DAY_MS + offset;
            let deadline = if today <= now.0 {
                today
            } else {
                today.checked_sub(DAY_MS)?
            };
            let period_start = deadline.saturating_sub(DAY_MS);
            let delivered = last_delivery.is_some_and(|t| t.0 > period_start);
            let alarmed = last_alarm.is_some_and(|t| t.0 >= deadline);
            (created.0 < deadline && !delivered && !alarmed).then_some(Timestamp(deadline))
        }
    }
}

/// The midnight (UTC) a daily digest is due for, when one is: the last midnight at or before
/// `now`, if the watch existed before it and no digest was sent for it.
pub fn digest_due(
    created: Timestamp,
    last_digest: Option<Timestamp>,
    now: Timestamp,
) -> Option<Timestamp> {
    let midnight = now.0 - now.0 % DAY_MS;
    let sent = last_digest.is_some_and(|t| t.0 >= midnight);
    (created.0 < midnight && !sent).then_some(Timestamp(midnight))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3600 * 1000;

    #[test]
    fn parse_table() {
        assert_eq!(
            parse_daily("daily 05:00"),
            Some(Expect::Daily { minute: 300 })
        );
        assert_eq!(
            parse_daily("daily 23:59"),
            Some(Expect::Daily { minute: 1439 })
        );
        for bad in [
            "daily 24:00",
            "daily 5",
            "daily 05:60",
            "weekly 05:00",
            "daily 05:00:00",
            "6h",
        ] {
            assert_eq!(parse_daily(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_table() {
        let e = Expect::Every { ms: 6 * H };
        let t = Timestamp;
        // (created, last delivery, last alarm, now, due?)
        let rows = [
            (0, None, None, 6 * H - 1, None),
            (0, None, None, 6 * H, Some(6 * H)),
            (0, Some(5 * H), None, 6 * H, None),
            (0, Some(5 * H), None, 11 * H, Some(11 * H)),
            // One alarm per period: after an alarm, the next is one interval later.
            (0, None, Some(6 * H), 7 * H, None),
            (0, None, Some(6 * H), 12 * H, Some(12 * H)),
        ];
        for (created, delivered, alarmed, now, want) in rows {
            let got = alarm_due(e, t(created), delivered.map(t), alarmed.map(t), t(now));
            assert_eq!(
                got,
                want.map(t),
                "{created} {delivered:?} {alarmed:?} {now}"
            );
        }
    }

    #[test]
    fn digest_table() {
        let day = 24 * H;
        let t = Timestamp;
        let m = 20 * day;
        // (created, last digest, now, due?)
        let rows = [
            (m - H, None, m - 1, None),
            (m - H, None, m, Some(m)),
            (m - H, None, m + 5 * H, Some(m)),
            (m - H, Some(m + 1), m + 5 * H, None),
            (m + 1, None, m + 5 * H, None),
            (0, Some(m), m + day, Some(m + day)),
        ];
        for (created, last, now, want) in rows {
            assert_eq!(
                digest_due(t(created), last.map(t), t(now)),
                want.map(t),
                "{created} {last:?} {now}"
            );
        }
    }

    #[test]
    fn daily_table() {
        let e = Expect::Daily { minute: 5 * 60 };
        let t = Timestamp;
        let day = 24 * H;
        let d = 10 * day + 5 * H; // day 10, 05:00
        let rows = [
            // Before the first deadline of the watch's life: nothing.
            (d - H, None, None, d - 1, None),
            // At it, no delivery that day: due, once.
            (d - H, None, None, d, Some(d)),
            // A watch older than a day that never delivered: the last deadline is due.
            (0, None, None, d - 1, Some(d - day)),
            (0, None, Some(d), d + H, None),
            // A delivery in the day before the deadline: none.
            (0, Some(d - 2 * H), None, d + H, None),
            // The last delivery was before the day began: due.
            (0, Some(d - 25 * H), None, d + H, Some(d)),
            // A delivery after the deadline: cannot tell, no alarm.
            (0, Some(d + 1), None, d + H, None),
            // A watch made after the deadline waits for the next one.
            (d + 1, None, None, d + H, None),
            // The next day's deadline after an alarm today.
            (0, None, Some(d), d + day, Some(d + day)),
        ];
        for (created, delivered, alarmed, now, want) in rows {
            let got = alarm_due(e, t(created), delivered.map(t), alarmed.map(t), t(now));
            assert_eq!(
                got,
                want.map(t),
                "{created} {delivered:?} {alarmed:?} {now}"
            );
        }
    }
}
