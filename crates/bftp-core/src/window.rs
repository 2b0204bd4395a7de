//! Start gates (RULES.md §16.4, §16.5): time windows per host or host pair, and the circuit
//! breaker of a host that is down. Pure rules, table-tested; the daemon keeps the state.
//!
//! A window is `"HH:MM-HH:MM"` of wall time in a named time zone (IANA, through `jiff`, with
//! its time-zone database embedded so a machine without `/usr/share/zoneinfo` knows every
//! zone; the system's is read first). A window whose end is before its start crosses
//! midnight (`"22:00-02:00"`). On a day a clock change falls on, a wall time the clock skips
//! is moved later by the gap (02:30 becomes 03:30 when 02:00 becomes 03:00), and one it
//! passes twice is the first of the two (`jiff`'s "compatible" rule, as RFC 5545 and cron
//! implementations do): a window over the change is an hour shorter or longer that night.

use std::fmt;
use std::time::Duration;

use crate::time::Timestamp;

/// One window of wall time, in seconds since midnight: `start` in `0..DAY`, `end` in
/// `1..=DAY` (`24:00` is midnight at the end of the day), never equal. Written `HH:MM`, or
/// `HH:MM:SS` where a second matters (tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    start: u32,
    end: u32,
}

const DAY: u32 = 86_400;

/// Why a window or a time zone was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("window {0:?}: expected \"HH:MM-HH:MM\" (for example \"01:00-06:00\")")]
    Syntax(String),
    #[error("window {0:?}: {1} is not a time of day (00:00 to 23:59, or 24:00 as an end)")]
    Time(String, String),
    #[error("window {0:?}: it starts and ends at the same time (an empty window); leave the host without windows to allow every time")]
    Empty(String),
    #[error("time zone {0:?} is unknown (an IANA name such as \"Europe/Berlin\" or \"UTC\")")]
    TimeZone(String),
}

impl Window {
    pub fn parse(text: &str) -> Result<Window, WindowError> {
        let t = text.trim();
        let (a, b) = t
            .split_once('-')
            .ok_or_else(|| WindowError::Syntax(text.into()))?;
        let start = seconds(text, a.trim(), false)?;
        let end = seconds(text, b.trim(), true)?;
        if start == end % DAY && !(start == 0 && end == DAY) {
            return Err(WindowError::Empty(text.into()));
        }
        Ok(Window { start, end })
    }

    /// Whether the window crosses midnight.
    fn crosses_midnight(self) -> bool {
        self.end <= self.start
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hm = |t: u32| match t % 60 {
            0 => format!("{:02}:{:02}", t / 3600, t / 60 % 60),
            s => format!("{:02}:{:02}:{s:02}", t / 3600, t / 60 % 60),
        };
        write!(f, "{}-{}", hm(self.start), hm(self.end))
    }
}

/// `HH:MM` or `HH:MM:SS` as seconds; `24:00` only as an end.
fn seconds(whole: &str, t: &str, end: bool) -> Result<u32, WindowError> {
    let bad = || WindowError::Time(whole.into(), t.into());
    let parts: Vec<&str> = t.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(WindowError::Syntax(whole.into()));
    }
    let digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !parts.iter().all(|p| digits(p)) {
        return Err(bad());
    }
    let n: Vec<u32> = parts.iter().map(|p| p.parse().unwrap_or(99)).collect();
    let (h, m, s) = (n[0], n[1], n.get(2).copied().unwrap_or(0));
    match (h, m, s) {
        (24, 0, 0) if end => Ok(DAY),
        (0..=23, 0..=59, 0..=59) => Ok(h * 3600 + m * 60 + s),
        _ => Err(bad()),
    }
}

/// A time zone by its IANA name (`"UTC"` included).
pub fn time_zone(name: &str) -> Result<jiff::tz::TimeZone, WindowError> {
    jiff::tz::TimeZone::get(name).map_err(|_| WindowError::TimeZone(name.into()))
}

/// Windows in one time zone: a host's (or a pair's) hours. Open when any window is.
#[derive(Clone, Debug)]
pub struct Hours {
    pub windows: Vec<Window>,
    pub zone: jiff::tz::TimeZone,
    /// `hard`: a copy running when the window closes is aborted (and resumed later where
    /// the copy can be), instead of finishing.
    pub hard: bool,
}

/// Whether the hours allow a new file now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Now {
    /// Open; `closes_at`: when it closes next (`None`: never, the windows cover every day).
    Open { closes_at: Option<Timestamp> },
    /// Closed until `opens_at`.
    Closed { opens_at: Timestamp },
}

/// The window's instants on the local day `day` (its start on that day), unless it is empty
/// that day.
fn interval(w: Window, day: jiff::civil::Date, tz: &jiff::tz::TimeZone) -> Option<(i64, i64)> {
    let at = |d: jiff::civil::Date, t: u32| -> Option<i64> {
        let (d, t) = if t >= DAY {
            (d.tomorrow().ok()?, t - DAY)
        } else {
            (d, t)
        };
        let dt = d.at((t / 3600) as i8, (t / 60 % 60) as i8, (t % 60) as i8, 0);
        Some(
            tz.to_ambiguous_timestamp(dt)
                .compatible()
                .ok()?
                .as_millisecond(),
        )
    };
    let start = at(day, w.start)?;
    let end = if w.crosses_midnight() {
        at(day, w.end + DAY)?
    } else {
        at(day, w.end)?
    };
    (end > start).then_some((start, end))
}

/// Every interval of the hours on the local days around `t` (two days back, three ahead),
/// sorted by start.
fn intervals(hours: &Hours, t: i64) -> Vec<(i64, i64)> {
    let Ok(ts) = jiff::Timestamp::from_millisecond(t) else {
        return Vec::new();
    };
    let mut day = hours.zone.to_datetime(ts).date();
    for _ in 0..2 {
        match day.yesterday() {
            Ok(d) => day = d,
            Err(_) => break,
        }
    }
    let mut out = Vec::new();
    for _ in 0..6 {
        for w in &hours.windows {
            out.extend(interval(*w, day, &hours.zone));
        }
        match day.tomorrow() {
            Ok(d) => day = d,
            Err(_) => break,
        }
    }
    out.sort();
    out
}

/// Whether the hours are open at `at`, and when that changes. Hours without a window are
/// always open.
pub fn look(hours: &Hours, at: Timestamp) -> Now {
    if hours.windows.is_empty() {
        return Now::Open { closes_at: None };
    }
    let t = i64::try_from(at.0).unwrap_or(i64::MAX);
    let all = intervals(hours, t);
    let ts = |ms: i64| Timestamp(ms.max(0) as u64);
    if all.iter().any(|&(s, e)| s <= t && t < e) {
        // Open: the end of the run of touching or overlapping intervals holding `t`.
        let mut end = t;
        loop {
            let next = all
                .iter()
                .filter(|&&(s, e)| s <= end && end < e)
                .map(|&(_, e)| e)
                .max();
            match next {
                Some(e) => end = e,
                None => break,
            }
        }
        // Past the intervals looked at: open for days on end (a whole-day window).
        let last = all.iter().map(|&(_, e)| e).max().unwrap_or(end);
        let closes_at = (end < last).then(|| ts(end));
        return Now::Open { closes_at };
    }
    match all.iter().map(|&(s, _)| s).filter(|&s| s > t).min() {
        Some(s) => Now::Closed { opens_at: ts(s) },
        // Unreachable for windows of wall time; open rather than never.
        None => Now::Open { closes_at: None },
    }
}

/// Several hours at once (a job touching hosts with windows of their own): open only when
/// every one is. Closed: the first instant all are open together, looked for over a
/// bounded number of steps (a job whose hours never meet waits a day and is looked at
/// again).
pub fn look_all(all: &[&Hours], at: Timestamp) -> Now {
    let mut t = at;
    for _ in 0..64 {
        let mut moved = false;
        let mut closes: Option<Timestamp> = None;
        for h in all {
            match look(h, t) {
                Now::Open { closes_at } => {
                    closes = match (closes, closes_at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                }
                Now::Closed { opens_at } => {
                    t = opens_at;
                    moved = true;
                }
            }
        }
        if !moved {
            return if t == at {
                Now::Open { closes_at: closes }
            } else {
                Now::Closed { opens_at: t }
            };
        }
    }
    Now::Closed {
        opens_at: at.saturating_add(Duration::from_secs(86_400)),
    }
}

// ---- why a job waits ----

/// Why a due job is not started, as data for its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// A time window of one of its hosts (or its pair) is closed.
    Window,
    /// One of its hosts is down (the circuit breaker is open) and being probed.
    HostDown,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Window => "window",
            WaitReason::HostDown => "host_down",
        }
    }

    pub fn parse(s: &str) -> Option<WaitReason> {
        match s {
            "window" => Some(WaitReason::Window),
            "host_down" => Some(WaitReason::HostDown),
            _ => None,
        }
    }
}

/// A job waiting at a start gate: why, for which host, until when (the window's opening;
/// for a host that is down, the next probe, earlier when the probe succeeds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub reason: WaitReason,
    pub host: Option<String>,
    pub until: Timestamp,
}

impl Wait {
    /// The words the CLI shows.
    pub fn text(&self) -> String {
        match self.reason {
            WaitReason::Window => match &self.host {
                Some(h) => format!("waiting for the window of {h}, opens at {}", self.until),
                None => format!("waiting for the window, opens at {}", self.until),
            },
            WaitReason::HostDown => format!(
                "waiting for {} to come back (probing)",
                self.host.as_deref().unwrap_or("a host")
            ),
        }
    }
}

// ---- the circuit breaker's rules ----

/// How a connection or login to a host failed, as the breaker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The name did not resolve, the TCP connection failed or timed out, the connection
    /// closed before or during the login, no greeting: the host is not answering.
    Unreachable,
    /// The server answered the greeting or the login with a transient refusal (4xx).
    TransientReply,
    /// A transient refusal that says the server has too many connections: the host is up,
    /// only busy (the learned per-host limit's business, never the breaker's).
    TooManyConnections,
    /// A permanent refusal (a wrong password, an address the policy refuses): the job's
    /// business, not the host's.
    Permanent,
}

/// Whether the failure opens the host's breaker: a transient failure to connect or log in,
/// never "too many connections" nor a permanent refusal.
pub fn opens_breaker(f: Failure) -> bool {
    matches!(f, Failure::Unreachable | Failure::TransientReply)
}

/// The wait before probe number `n` (0-based: the first probe waits `first`), doubling up
/// to `max`.
pub fn probe_delay(first: Duration, max: Duration, n: u32) -> Duration {
    let first = first.max(Duration::from_millis(1));
    first
        .checked_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max.max(first))
}

#[cfg(test)]
mod tests;
