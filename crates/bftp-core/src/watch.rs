//! A watch's checkpoint (RULES.md §15, SPEC §15): which files a poll takes, which wait, which
//! are pruned, and what the checkpoint becomes. The NNTP rule in FTP form:
//!
//! - the observation (the listing) is taken before anything is decided from it;
//! - the checkpoint is a set of identities, never a time: a file is new when its identity
//!   (path, and the server's own size, modify time and `unique` fact) was never delivered,
//!   whatever its modify time says, so a file moved in with an old modify time is new and a
//!   nightly file with the same name but new content is new again;
//! - an identity joins the checkpoint only when its member's end is durable (the store writes
//!   it in the transaction that records the member: [`settled`]), so a crash repeats a copy
//!   (a recognizable duplicate) and never skips one;
//! - a file is stable when it was seen with the same facts in an earlier listing at least
//!   `settle` ago by bftpd's own clock: no server clock is read, so skew cannot open a gap;
//! - identities of files the listing no longer shows are pruned with that listing's record, so
//!   the checkpoint holds about one entry per file present.
//!
//! Pure: the caller passes the previous checkpoint, the listing, `now` and the settings.

use std::collections::BTreeMap;

pub mod expect;

use crate::glob::Glob;
use crate::state::MemberState;
use crate::Timestamp;

/// Names never taken unless the user says otherwise: partial uploads and editors' and
/// clients' temporary files (lftp's `xfer:temp-file-name` `.in.*.`, WinSCP's `.filepart`,
/// Pure-FTPd's own `.pureftp-upload.*` while a client uploads). FileZilla writes under the
/// final name: only the settle time keeps its half-written files back.
pub const DEFAULT_IGNORE: &[&str] = &[
    "*.part",
    "*.tmp",
    "*.filepart",
    "*.partial",
    ".*.swp",
    ".in.*.",
    ".pureftp-upload.*",
    "*.crdownload",
];

/// What the server says of a file's content: the parts of its identity beside its path.
/// `modified` is the server's `YYYYMMDDHHMMSS[.sss]` from MLSD's `modify` fact or MDTM,
/// never LIST's display time (which changes format after six months).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Facts {
    pub size: Option<u64>,
    pub modified: Option<String>,
    /// MLSD's `unique` fact, where the server gives one.
    pub unique: Option<String>,
}

impl Facts {
    /// Whether these facts can tell one content from another: a size or a modify time.
    pub fn identifies(&self) -> bool {
        self.size.is_some() || self.modified.is_some()
    }

    /// Whether `self` and `other` describe the same content. `unique` counts only when both
    /// have it, and modify times given to different precisions are compared to the coarser
    /// one: a server that stops offering MLSD (LIST, SIZE, MDTM: no `unique`, whole seconds)
    /// does not make every file new.
    pub fn same_content(&self, other: &Facts) -> bool {
        let unique = match (&self.unique, &other.unique) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let modified = match (&self.modified, &other.modified) {
            (Some(a), Some(b)) => {
                let whole = |t: &str| t.split('.').next().unwrap_or(t).to_owned();
                a == b || (a.contains('.') != b.contains('.') && whole(a) == whole(b))
            }
            (a, b) => a == b,
        };
        self.size == other.size && modified && unique
    }
}

/// One plain file of a listing: its path relative to the watched directory (`a.csv`,
/// `sub/b.csv` in a recursive watch) and its facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub path: String,
    pub facts: Facts,
}

/// What became of a content once its member ended for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Copied and proven.
    Delivered,
    /// Failed permanently: reported on the watch, not tried again (until the content
    /// changes).
    Failed,
    /// An unrepeatable copy whose outcome is unknown: reported, not repeated blindly.
    Uncertain,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Failed => "failed",
            Outcome::Uncertain => "uncertain",
        }
    }
}

/// The outcome a member's final state gives its identity, or `None` when the content was not
/// settled (cancelled, retries exhausted, still pending): the next poll takes it again.
pub fn outcome_of(state: MemberState) -> Option<Outcome> {
    match state {
        MemberState::Succeeded => Some(Outcome::Delivered),
        MemberState::FailedPermanent | MemberState::Refused => Some(Outcome::Failed),
        MemberState::Uncertain => Some(Outcome::Uncertain),
        MemberState::Pending | MemberState::FailedRetriesExhausted | MemberState::Cancelled => None,
    }
}

/// Whether a watch's job mails its report under the watch's `notify_on` word (`failure`, the
/// default: only a job that did not copy every file; `always`; `never`). A job that is not
/// final mails nothing yet.
pub fn mails_report(notify_on: &str, state: &crate::JobState) -> bool {
    use crate::{JobOutcome, JobState};
    match (notify_on, state) {
        (_, JobState::Queued { .. } | JobState::Running { .. }) => false,
        ("never", _) => false,
        ("always", _) => true,
        (_, JobState::Finished { outcome, .. }) => *outcome != JobOutcome::Succeeded,
        (_, JobState::Cancelled { .. }) => true,
    }
}

/// The checkpoint's entry for one path: the facts last seen there, since when (bftpd's
/// clock), and what became of that content (`None`: not yet settled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub facts: Facts,
    /// When a listing first showed these facts at this path.
    pub since: Timestamp,
    pub outcome: Option<Outcome>,
    /// A server without MLSD: the LIST line's size and display time when the facts were
    /// asked (SIZE, MDTM). Only a hint of whether to ask again, never part of the identity.
    pub hint: Option<String>,
    /// How many polls gave this content to a job. Taken again while unsettled, it is a
    /// repeat: an earlier job ended without settling it (a crash, a cancel, retries
    /// exhausted), and the report names it.
    pub taken: u32,
}

/// The checkpoint's entry after a member of a watch's job ended in `state`, or `None` to
/// write nothing. The store calls this in the transaction that records the member, with the
/// size and modify time the member holds (those it was made from; a member taken without a
/// size holds the size its copy found). The entry changes only when it still holds that content: a path whose content
/// changed since is new content, which this member did not copy. (`unique` is not on the
/// member: a poll never changes an entry while the job it made runs, see RULES.md §15.)
pub fn settled(
    entry: Option<&Entry>,
    size: Option<u64>,
    modified: Option<&str>,
    state: MemberState,
) -> Option<Entry> {
    let outcome = outcome_of(state)?;
    let e = entry?;
    // The copy writes the size it found on a member taken without one: an entry without a
    // size matches any. The member has no `unique`.
    let copied = Facts {
        size: size.filter(|_| e.facts.size.is_some()),
        modified: modified.map(str::to_owned),
        unique: None,
    };
    let same = e.facts.same_content(&copied);
    (same && e.outcome != Some(outcome)).then(|| Entry {
        outcome: Some(outcome),
        ..e.clone()
    })
}

/// Whether a server without MLSD must be asked SIZE and MDTM for a listed file: the path is
/// new, or its LIST line (size and display time) changed since the facts were asked. A
/// display time that flips to the year form after six months asks again, and the same facts
/// come back: the identity is unchanged, nothing is delivered again.
pub fn needs_facts(entry: Option<&Entry>, hint: &str) -> bool {
    entry.is_none_or(|e| e.hint.as_deref() != Some(hint))
}

/// A ready marker: a file is taken only once its marker exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// A file of this name in the same directory (`READY`, `_SUCCESS`) marks every file
    /// beside it ready.
    Beside(String),
    /// `FILE` followed by this suffix (`a.csv.done` for `.done`) marks `FILE` ready.
    Suffix(String),
}

impl Ready {
    /// Whether `path` is a marker itself (never delivered).
    pub fn is_marker(&self, path: &str) -> bool {
        match self {
            Ready::Beside(name) => last_component(path) == name,
            Ready::Suffix(suffix) => path.ends_with(suffix.as_str()) && path.len() > suffix.len(),
        }
    }

    /// The marker that makes `path` ready.
    pub fn marker_of(&self, path: &str) -> String {
        match self {
            Ready::Beside(name) => match path.rsplit_once('/') {
                Some((dir, _)) => format!("{dir}/{name}"),
                None => name.clone(),
            },
            Ready::Suffix(suffix) => format!("{path}{suffix}"),
        }
    }
}

/// Whether a watch whose next poll is at `next` polls now: its time came, or it lies more than
/// one interval ahead (bftpd's clock went back: waiting for it would stop the watch for as
/// long as the clock jumped).
pub fn poll_due(next: Timestamp, every_ms: u64, now: Timestamp) -> bool {
    next <= now || next.0 > now.0.saturating_add(every_ms)
}

/// A watch's settings the rule needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// A file is the watch's when its name (last component) matches one of these; none:
    /// `*` (every name not starting with a dot).
    pub patterns: Vec<String>,
    /// ...and none of these.
    pub ignore: Vec<String>,
    /// How long a file's facts must stay the same, by bftpd's clock, before it is taken.
    pub settle_ms: u64,
    pub ready: Option<Ready>,
    /// The facts come from LIST, SIZE and MDTM (a server without MLSD): a change that keeps
    /// the size and the LIST line's minute is not seen until MDTM is asked again, so a file
    /// must stay the same a minute longer than `settle_ms` (see [`LIST_MINUTE_MS`]).
    pub list_facts: bool,
}

/// How much longer a file listed by LIST must stay the same: LIST shows the minute of a
/// modify time, and a write later in that minute that keeps the size leaves the line as it
/// was. Once a minute of bftpd's clock has passed since the facts were first seen, that minute
/// has ended on the server's clock too (clocks that differ still tick alike), so any later
/// write changes the line and is asked about.
pub const LIST_MINUTE_MS: u64 = 61_000;

/// One listing of the watched directory (the whole tree for a recursive watch).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Every plain file listed, with its facts.
    pub files: Vec<Seen>,
    /// Directories (relative paths) that could not be listed: what the checkpoint holds
    /// below them is neither taken nor pruned.
    pub unlisted: Vec<String>,
}

/// Why a listed file of the watch is not taken now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Seen with these facts since `since`; taken at a poll from `ready_at` on.
    Settling {
        since: Timestamp,
        ready_at: Timestamp,
    },
    /// Its ready marker is not there.
    NoMarker { marker: String },
}

/// Why a listed file is not the watch's at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// It matches this ignore pattern.
    Pattern { pattern: String },
    /// It is a ready marker.
    Marker,
    /// The server gives neither its size nor its modify time: it has no identity, and
    /// taking it at every poll or never would both be wrong.
    NoFacts,
}

/// What one poll decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Poll {
    /// The files to copy now: the members of this poll's job, with the facts they are
    /// copied for.
    pub take: Vec<Seen>,
    /// Taken again although an earlier job had this content and did not settle it: the
    /// overlap the rule allows (a crash before the member's record, a cancel). The copy may
    /// repeat one already made; the report names it.
    pub repeats: Vec<String>,
    pub waiting: Vec<(String, Wait)>,
    pub ignored: Vec<(String, Ignored)>,
    /// Entries to write: new paths, paths whose content changed, and the files taken. A
    /// path whose entry is unchanged is not written, so a poll writes in proportion to what
    /// is new.
    pub put: Vec<(String, Entry)>,
    /// Paths the listing no longer shows: removed with this poll's record.
    pub prune: Vec<String>,
    /// Files the checkpoint holds as settled (delivered, failed or uncertain) and the
    /// listing still shows unchanged.
    pub settled: usize,
}

fn last_component(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path
            .strip_prefix(dir.trim_end_matches('/'))
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The watch's files are those whose name matches a pattern (an empty list: `*`).
/// The watch's patterns and ignore patterns, each read once for the whole listing.
struct Patterns<'a> {
    take: Vec<Glob>,
    ignore: Vec<(&'a String, Glob)>,
}

impl<'a> Patterns<'a> {
    fn new(settings: &'a Settings) -> Patterns<'a> {
        // No pattern: `*`, every name not starting with a dot.
        let take: Vec<&str> = match settings.patterns.is_empty() {
            true => vec!["*"],
            false => settings.patterns.iter().map(String::as_str).collect(),
        };
        Patterns {
            take: take.into_iter().map(Glob::new).collect(),
            ignore: settings.ignore.iter().map(|p| (p, Glob::new(p))).collect(),
        }
    }

    fn matches(&self, name: &[char]) -> bool {
        self.take.iter().any(|g| g.matches_chars(name))
    }

    fn ignored_by(&self, name: &[char]) -> Option<&'a String> {
        self.ignore
            .iter()
            .find(|(_, g)| g.matches_chars(name))
            .map(|(p, _)| *p)
    }
}

/// One poll: the previous checkpoint, the new listing, bftpd's clock now, the settings.
///
/// A file of the watch (a pattern matches its name) is taken when all hold:
/// 1. no ignore pattern matches it and it is not a ready marker;
/// 2. its facts identify it (a size or a modify time);
/// 3. the checkpoint does not hold its identity as settled;
/// 4. the checkpoint saw the same facts at least `settle_ms` before `now` (a new path or
///    changed facts start the wait: the entry is written with `since = now`; so does a
///    `since` later than `now`, bftpd's clock having gone back);
/// 5. its ready marker, when one is asked for, is in the listing.
///
/// Paths in the checkpoint that the listing does not show (and that are not below a
/// directory that could not be listed) are pruned.
pub fn poll(
    checkpoint: &BTreeMap<String, Entry>,
    listing: &Listing,
    now: Timestamp,
    settings: &Settings,
) -> Poll {
    poll_observed(checkpoint, listing, now, now, settings)
}

/// [`poll`] of a listing taken between `started` and `finished` (bftpd's clock): a file's wait
/// starts at `finished` (the latest it may have been seen) and is judged at `started` (the
/// earliest), so a long listing never shortens `settle`.
pub fn poll_observed(
    checkpoint: &BTreeMap<String, Entry>,
    listing: &Listing,
    started: Timestamp,
    finished: Timestamp,
    settings: &Settings,
) -> Poll {
    let now = started;
    let finished = finished.max(started);
    let mut out = Poll::default();
    let listed: std::collections::HashSet<&str> =
        listing.files.iter().map(|f| f.path.as_str()).collect();
    let mut seen_here: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let patterns = Patterns::new(settings);
    let mut chars: Vec<char> = Vec::new();
    for file in &listing.files {
        // A listing may name a path twice: the first counts, as a set would.
        if !seen_here.insert(file.path.as_str()) {
            continue;
        }
        chars.clear();
        chars.extend(last_component(&file.path).chars());
        if !patterns.matches(&chars) {
            continue;
        }
        if let Some(pattern) = patterns.ignored_by(&chars) {
            out.ignored.push((
                file.path.clone(),
                Ignored::Pattern {
                    pattern: pattern.clone(),
                },
            ));
            continue;
        }
        if settings
            .ready
            .as_ref()
            .is_some_and(|r| r.is_marker(&file.path))
        {
            out.ignored.push((file.path.clone(), Ignored::Marker));
            continue;
        }
        if !file.facts.identifies() {
            out.ignored.push((file.path.clone(), Ignored::NoFacts));
            continue;
        }
        let previous = checkpoint.get(&file.path);
        let entry = match previous {
            Some(e) if e.facts.same_content(&file.facts) => {
                if e.outcome.is_some() {
                    out.settled += 1;
                    continue;
                }
                if e.since > finished {
                    // bftpd's clock went back: the wait starts again now, not hours later.
                    Entry {
                        since: finished,
                        ..e.clone()
                    }
                } else {
                    e.clone()
                }
            }
            // New here, or new content at a known path: the wait starts now.
            _ => Entry {
                facts: file.facts.clone(),
                since: finished,
                outcome: None,
                hint: previous.and_then(|e| e.hint.clone()),
                taken: 0,
            },
        };
        let changed = previous != Some(&entry);
        let extra = if settings.list_facts {
            LIST_MINUTE_MS
        } else {
            0
        };
        let ready_at = Timestamp(entry.since.0.saturating_add(settings.settle_ms + extra));
        let stable = (settings.settle_ms == 0 && !settings.list_facts)
            || (entry.since < now && ready_at <= now);
        let wait = if !stable {
            Some(Wait::Settling {
                since: entry.since,
                ready_at,
            })
        } else {
            settings.ready.as_ref().and_then(|ready| {
                let marker = ready.marker_of(&file.path);
                (!listed.contains(marker.as_str())).then_some(Wait::NoMarker { marker })
            })
        };
        match wait {
            Some(wait) => {
                out.waiting.push((file.path.clone(), wait));
                if changed {
                    out.put.push((file.path.clone(), entry));
                }
            }
            None => {
                if entry.taken > 0 {
                    out.repeats.push(file.path.clone());
                }
                out.take.push(file.clone());
                out.put.push((
                    file.path.clone(),
                    Entry {
                        taken: entry.taken.saturating_add(1),
                        ..entry
                    },
                ));
            }
        }
    }
    for path in checkpoint.keys() {
        if !listed.contains(path.as_str()) && !listing.unlisted.iter().any(|d| under(path, d)) {
            out.prune.push(path.clone());
        }
    }
    out
}

/// A poll's new checkpoint, as the store will hold it once the poll's record is written
/// (for tests and for the caller's own view; the store applies `put` and `prune` itself).
pub fn apply(checkpoint: &BTreeMap<String, Entry>, poll: &Poll) -> BTreeMap<String, Entry> {
    let mut next = checkpoint.clone();
    for path in &poll.prune {
        next.remove(path);
    }
    for (path, entry) in &poll.put {
        next.insert(path.clone(), entry.clone());
    }
    next
}

#[cfg(test)]
mod tests;
