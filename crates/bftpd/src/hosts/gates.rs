//! Start gates of hosts (RULES.md §16.4, §16.5): the `[[windows]]` of the config, and the
//! breaker's view of hosts that are down, asked before a job starts and before each new
//! file. The rules are `bftp_core::window`'s; this holds the configuration and the state.

use std::sync::Arc;

use anyhow::{bail, Context};
use bftp_core::window::{self, Hours, Now, Wait, WaitReason, Window};
use bftp_core::Timestamp;
use serde::Deserialize;

use super::breaker::Breaker;

/// One `[[windows]]` entry: the hours of some hosts (any job touching one of them) or of one
/// pair (source, destination), in a time zone.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Any job whose source or destination is one of these hosts.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Jobs from the first host to the second.
    #[serde(default)]
    pub pair: Option<[String; 2]>,
    /// `"HH:MM-HH:MM"`, crossing midnight when the end is earlier than the start.
    pub windows: Vec<String>,
    /// An IANA time zone; UTC by default.
    #[serde(default = "d_utc")]
    pub time_zone: String,
    /// A copy running when the window closes is aborted (resumed later where it can be)
    /// instead of finishing.
    #[serde(default)]
    pub hard: bool,
}

fn d_utc() -> String {
    "UTC".into()
}

/// What an entry applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Hosts(Vec<String>),
    Pair(String, String),
}

#[derive(Debug, Clone)]
struct Rule {
    scope: Scope,
    hours: Hours,
    /// The entry's name in the words a job shows (`host`, or `a -> b`).
    label: String,
}

/// The configured windows, checked.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    rules: Vec<Rule>,
}

impl Windows {
    /// Checks every entry: a window that does not parse, an unknown time zone, an entry with
    /// both or neither of `hosts` and `pair`, or without windows, is an error that names it.
    pub fn from_config(entries: &[WindowConfig]) -> anyhow::Result<Windows> {
        let mut rules = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let which = || format!("[[windows]] entry {}", i + 1);
            let scope = match (&e.pair, e.hosts.is_empty()) {
                (Some([a, b]), true) => Scope::Pair(a.to_ascii_lowercase(), b.to_ascii_lowercase()),
                (None, false) => {
                    Scope::Hosts(e.hosts.iter().map(|h| h.to_ascii_lowercase()).collect())
                }
                (Some(_), false) => bail!("{}: give either hosts or pair, not both", which()),
                (None, true) => bail!(
                    "{}: give hosts = [...] or pair = [source, destination]",
                    which()
                ),
            };
            if e.windows.is_empty() {
                bail!(
                    "{}: windows is empty (leave the entry out to allow every time)",
                    which()
                );
            }
            let windows = e
                .windows
                .iter()
                .map(|w| Window::parse(w))
                .collect::<Result<Vec<_>, _>>()
                .with_context(which)?;
            let zone = window::time_zone(&e.time_zone).with_context(which)?;
            let label = match &scope {
                Scope::Hosts(h) => h.join(", "),
                Scope::Pair(a, b) => format!("{a} -> {b}"),
            };
            rules.push(Rule {
                scope,
                hours: Hours {
                    windows,
                    zone,
                    hard: e.hard,
                },
                label,
            });
        }
        Ok(Windows { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn rules_for<'a>(&'a self, source: &str, destination: Option<&str>) -> Vec<&'a Rule> {
        let s = source.to_ascii_lowercase();
        let d = destination.map(str::to_ascii_lowercase);
        self.rules
            .iter()
            .filter(|r| match &r.scope {
                Scope::Hosts(hosts) => hosts.iter().any(|h| *h == s || Some(h) == d.as_ref()),
                Scope::Pair(a, b) => *a == s && Some(b) == d.as_ref(),
            })
            .collect()
    }

    /// Whether a job between these hosts may start a file at `now`; closed: the wait (its
    /// `host` the entry's name when one entry is closed).
    pub fn look(&self, source: &str, destination: Option<&str>, now: Timestamp) -> WindowLook {
        let rules = self.rules_for(source, destination);
        if rules.is_empty() {
            return WindowLook {
                now: Now::Open { closes_at: None },
                hard: false,
                label: None,
            };
        }
        let hours: Vec<&Hours> = rules.iter().map(|r| &r.hours).collect();
        let closed: Vec<&&Rule> = rules
            .iter()
            .filter(|r| matches!(window::look(&r.hours, now), Now::Closed { .. }))
            .collect();
        let label = match closed.as_slice() {
            [one] => Some(one.label.clone()),
            _ => None,
        };
        WindowLook {
            now: window::look_all(&hours, now),
            hard: rules.iter().any(|r| r.hours.hard),
            label,
        }
    }
}

/// A job's windows at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowLook {
    pub now: Now,
    /// One of its entries is `hard`.
    pub hard: bool,
    /// The closed entry's name, when one alone is closed.
    pub label: Option<String>,
}

impl WindowLook {
    /// The wait of a closed window.
    pub fn wait(&self) -> Option<Wait> {
        match self.now {
            Now::Open { .. } => None,
            Now::Closed { opens_at } => Some(Wait {
                reason: WaitReason::Window,
                host: self.label.clone(),
                until: opens_at,
            }),
        }
    }
}

/// Both gates, as the scheduler asks them before a due job starts (through
/// `attempt::gates`, which knows the scheduler) and the attempt before each new file.
pub struct Gates {
    pub windows: Windows,
    pub breaker: Arc<Breaker>,
}

impl Gates {
    /// Whether job `id` (between `source` and `destination`, each host and port) must wait
    /// at `now`: a closed window first, then, for a job that has not tried yet
    /// (`first_try`), a host that is down (the job is then released when the host's probe
    /// succeeds). A job that tried before keeps its own retry schedule (RULES.md §5, §16.5).
    pub fn wait_for(
        &self,
        id: bftp_store::JobId,
        source: (&str, u16),
        destination: Option<(&str, u16)>,
        first_try: bool,
        now: Timestamp,
    ) -> Option<Wait> {
        if let Some(w) = self
            .windows
            .look(source.0, destination.map(|d| d.0), now)
            .wait()
        {
            return Some(w);
        }
        if !first_try {
            return None;
        }
        std::iter::once(source)
            .chain(destination)
            .find_map(|(h, p)| self.breaker.wait_for(id, h, p, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(toml_text: &str) -> anyhow::Result<Windows> {
        #[derive(Deserialize)]
        struct Doc {
            windows: Vec<WindowConfig>,
        }
        let doc: Doc = toml::from_str(toml_text)?;
        Windows::from_config(&doc.windows)
    }

    #[test]
    fn bad_entries_stop_the_start_and_say_which() {
        let cases = [
            ("[[windows]]\nhosts = [\"a\"]\nwindows = [\"1-2\"]", "entry 1"),
            ("[[windows]]\nhosts = [\"a\"]\nwindows = [\"01:00-02:00\"]\ntime_zone = \"Nowhere/City\"", "\"Nowhere/City\" is unknown"),
            ("[[windows]]\nwindows = [\"01:00-02:00\"]", "give hosts"),
            ("[[windows]]\nhosts = [\"a\"]\npair = [\"a\", \"b\"]\nwindows = [\"01:00-02:00\"]", "not both"),
            ("[[windows]]\nhosts = [\"a\"]\nwindows = []", "windows is empty"),
            ("[[windows]]\nhosts = [\"a\"]\nwindows = [\"01:00-02:00\"]\nhours = 3", "unknown field"),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", entry(text).unwrap_err());
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn hosts_touch_either_side_and_a_pair_one_direction() {
        let w = entry(
            "[[windows]]\nhosts = [\"A.example\"]\nwindows = [\"01:00-02:00\"]\n\
             [[windows]]\npair = [\"b\", \"c\"]\nwindows = [\"03:00-04:00\"]\nhard = true",
        )
        .unwrap();
        let at = |h: u64| Timestamp(h * 3_600_000); // 1970-01-01, UTC
        let open = |l: &WindowLook| matches!(l.now, Now::Open { .. });
        assert!(!open(&w.look("a.example", Some("x"), at(5))));
        assert!(!open(&w.look("x", Some("A.EXAMPLE"), at(5))));
        assert!(open(&w.look("x", Some("a.example"), at(1))));
        assert!(open(&w.look("x", Some("y"), at(5))));
        let pair = w.look("b", Some("c"), at(5));
        assert!(!open(&pair) && pair.hard);
        assert_eq!(pair.label.as_deref(), Some("b -> c"));
        assert_eq!(pair.wait().unwrap().until, at(24 + 3));
        assert!(
            open(&w.look("c", Some("b"), at(5))),
            "a pair has a direction"
        );
    }
}
