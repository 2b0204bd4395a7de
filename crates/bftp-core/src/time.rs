//! Wall-clock instants as milliseconds since the Unix epoch, and the start-time syntax.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (UTC). Total order, cheap to store big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn from_system(t: SystemTime) -> Self {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis();
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    pub fn to_system(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// RFC 3339 in UTC with second precision, e.g. `2026-11-30T12:00:00Z`.
    pub fn to_rfc3339(self) -> String {
        humantime::format_rfc3339_seconds(self.to_system()).to_string()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartTimeError {
    #[error("start time {input:?} is neither an RFC 3339 time (2026-12-01T08:00:00Z) nor relative (\"in 2h\", \"now\")")]
    Unparsable { input: String },
    #[error("start time {input:?} is more than {max_days} days away")]
    TooFar { input: String, max_days: u64 },
}

/// Longest deferral accepted: a request a year out is almost certainly a typo.
const MAX_START_DAYS: u64 = 366;

/// Parses a start time: `now`, an RFC 3339 time (a zone is required: `Z` or an offset), or a
/// relative time in humantime syntax with an optional `in ` prefix (`in 2h`, `90m`).
/// Times in the past mean "as soon as possible" and are returned as given.
pub fn parse_start_time(input: &str, now: Timestamp) -> Result<Timestamp, StartTimeError> {
    let s = input.trim();
    let unparsable = || StartTimeError::Unparsable {
        input: input.to_string(),
    };
    let at = if s.eq_ignore_ascii_case("now") {
        now
    } else if let Some(t) = parse_rfc3339_with_zone(s) {
        t
    } else {
        let rel = s.strip_prefix("in ").unwrap_or(s).trim();
        let d = humantime::parse_duration(rel).map_err(|_| unparsable())?;
        now.saturating_add(d)
    };
    if at.saturating_duration_since(now) > Duration::from_secs(MAX_START_DAYS * 86_400) {
        return Err(StartTimeError::TooFar {
            input: input.to_string(),
            max_days: MAX_START_DAYS,
        });
    }
    Ok(at)
}

/// humantime's RFC 3339 parser only accepts `Z`; accept numeric offsets too.
fn parse_rfc3339_with_zone(s: &str) -> Option<Timestamp> {
    if !s.contains('T') && !s.contains(' ') {
        return None;
    }
    if let Ok(t) = humantime::parse_rfc3339(s) {
        return Some(Timestamp::from_system(t));
    }
    // `...+HH:MM` / `...-HH:MM`
    let (base, sign, off) = match s
        .len()
        .checked_sub(6)
        .and_then(|i| s.get(i..).map(|tail| (i, tail)))
    {
        Some((i, tail))
            if (tail.starts_with('+') || tail.starts_with('-')) && tail.as_bytes()[3] == b':' =>
        {
            (
                &s[..i],
                if tail.starts_with('+') { 1i64 } else { -1 },
                &tail[1..],
            )
        }
        _ => return None,
    };
    let hh: i64 = off.get(0..2)?.parse().ok()?;
    let mm: i64 = off.get(3..5)?.parse().ok()?;
    if hh > 23 || mm > 59 {
        return None;
    }
    let t = humantime::parse_rfc3339_weak(base).ok()?;
    let utc_ms = Timestamp::from_system(t).0 as i64 - sign * (hh * 3600 + mm * 60) * 1000;
    u64::try_from(utc_ms).ok().map(Timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp(1_796_040_000_000); // 2026-11-30T...

    #[test]
    fn start_time_table() {
        let h = 3_600_000;
        let cases: &[(&str, Option<Timestamp>)] = &[
            ("now", Some(NOW)),
            ("in 2h", Some(Timestamp(NOW.0 + 2 * h))),
            ("90m", Some(Timestamp(NOW.0 + 90 * 60_000))),
            ("in 1h 30m", Some(Timestamp(NOW.0 + 90 * 60_000))),
            ("2026-12-01T08:00:00Z", Some(Timestamp(1_796_112_000_000))),
            (
                "2026-12-01T09:00:00+01:00",
                Some(Timestamp(1_796_112_000_000)),
            ),
            (
                "2026-12-01T03:00:00-05:00",
                Some(Timestamp(1_796_112_000_000)),
            ),
            ("tomorrow", None),
            ("", None),
            ("2026-13-01T08:00:00Z", None),
            ("in 400days", None),
            ("2026-12-01T09:00:00+25:00", None),
        ];
        for (input, want) in cases {
            let got = parse_start_time(input, NOW).ok();
            assert_eq!(got, *want, "input {input:?}");
        }
    }

    #[test]
    fn rfc3339_roundtrip() {
        assert_eq!(
            Timestamp(1_796_112_000_000).to_rfc3339(),
            "2026-12-01T08:00:00Z"
        );
    }
}
