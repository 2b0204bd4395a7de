//! The bounded record of what was said on the control connections (RULES.md §6), kept for
//! the report as RFC 1068 did: every command sent (PASS and ACCT arguments masked),
//! every reply received, and notes about what the engine decided.
//!
//! Bounded in both directions: each entry is cut to a maximum length, and when there
//! are more entries than the limit, the first half and the most recent half are kept
//! with a count of what was left out in between (the start shows the login and the
//! roles, the end shows what went wrong).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bftp_core::scrub::Scrubber;

/// One of the two servers of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Source,
    Destination,
}

impl Side {
    /// The other server.
    pub fn other(self) -> Side {
        match self {
            Side::Source => Side::Destination,
            Side::Destination => Side::Source,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Destination => "destination",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A command line we sent (secrets masked).
    Sent,
    /// A reply the server sent, or what we got instead (EOF, timeout...).
    Received,
    /// Something the engine noted: a fallback taken, an address ignored.
    Note,
}

/// One line of the transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Milliseconds since the transcript started.
    pub at_ms: u64,
    pub side: Side,
    pub kind: EntryKind,
    /// Sanitized, cut to [`TranscriptLimits::max_entry_chars`].
    pub text: String,
}

impl fmt::Display for Entry {
    /// `source> USER alice`, `source< 331 Password required`, `source: note`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = match self.kind {
            EntryKind::Sent => ">",
            EntryKind::Received => "<",
            EntryKind::Note => ":",
        };
        write!(f, "{}{arrow} {}", self.side, self.text)
    }
}

/// How much a transcript keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TranscriptLimits {
    /// Entries kept; beyond, the middle is dropped (and counted).
    pub max_entries: usize,
    /// Characters per entry; longer entries end with `…`.
    pub max_entry_chars: usize,
}

impl Default for TranscriptLimits {
    fn default() -> Self {
        Self {
            max_entries: 400,
            max_entry_chars: 1000,
        }
    }
}

/// A finished transcript: what an outcome or an error carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transcript {
    /// The first entries, then (if `omitted > 0`) the last ones.
    pub entries: Vec<Entry>,
    /// How many entries were dropped between the first and the last ones.
    pub omitted: usize,
    /// Where in `entries` the omission happened (the first kept tail entry).
    pub omitted_at: usize,
    /// The instant `at_ms` counts from, so that transcripts of several pairs can be put
    /// on one clock. `None` for one not taken from a recorder.
    pub started: Option<Instant>,
    /// The name its pair was given ([`crate::Pair::set_label`]), e.g. `p2`.
    pub label: Option<String>,
}

impl Transcript {
    /// Whether some entry's text contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.entries.iter().any(|e| e.text.contains(needle))
    }

    /// Entries sent to `side` whose command verb is `verb` (case-insensitive).
    pub fn count_sent(&self, side: Side, verb: &str) -> usize {
        self.entries
            .iter()
            .filter(|e| e.side == side && e.kind == EntryKind::Sent)
            .filter(|e| {
                e.text
                    .split(' ')
                    .next()
                    .is_some_and(|v| v.eq_ignore_ascii_case(verb))
            })
            .count()
    }
}

impl fmt::Display for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, entry) in self.entries.iter().enumerate() {
            if self.omitted > 0 && i == self.omitted_at {
                writeln!(f, "[... {} entries omitted ...]", self.omitted)?;
            }
            writeln!(f, "[{:>7} ms] {entry}", entry.at_ms)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Log {
    started: Instant,
    label: Option<String>,
    limits: TranscriptLimits,
    head: Vec<Entry>,
    tail: VecDeque<Entry>,
    omitted: usize,
}

/// A transcript being written, shared by the two sessions of a pair so that their
/// entries interleave in the order they happened. It holds the job's [`Scrubber`]: every
/// entry is scrubbed of the job's secrets before it is kept (and before it is cut, so that
/// no start of a secret is left at the cut), and the sessions scrub their replies with it.
#[derive(Debug, Clone)]
pub(crate) struct Recorder(Arc<Mutex<Log>>, Arc<Scrubber>);

impl Recorder {
    pub(crate) fn new(limits: TranscriptLimits, scrubber: Scrubber) -> Self {
        Recorder(
            Arc::new(Mutex::new(Log {
                started: Instant::now(),
                label: None,
                limits,
                head: Vec::new(),
                tail: VecDeque::new(),
                omitted: 0,
            })),
            Arc::new(scrubber),
        )
    }

    /// The job's scrubber, for the sessions sharing this recorder.
    pub(crate) fn scrubber(&self) -> &Scrubber {
        &self.1
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        // A panic while holding the lock leaves only a transcript half-written.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn record(&self, side: Side, kind: EntryKind, text: &str) {
        let text = self.1.scrub(text);
        let mut log = self.lock();
        let at_ms = u64::try_from(log.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let text = cut(&text, log.limits.max_entry_chars);
        let entry = Entry {
            at_ms,
            side,
            kind,
            text,
        };
        let max = log.limits.max_entries.max(2);
        let head_max = max / 2;
        if log.head.len() < head_max {
            log.head.push(entry);
            return;
        }
        log.tail.push_back(entry);
        if log.tail.len() > max - head_max {
            log.tail.pop_front();
            log.omitted += 1;
        }
    }

    /// Names every transcript taken from now on (see [`Transcript::label`]).
    pub(crate) fn set_label(&self, label: &str) {
        self.lock().label = Some(label.to_owned());
    }

    pub(crate) fn label(&self) -> Option<String> {
        self.lock().label.clone()
    }

    pub(crate) fn sent(&self, side: Side, line: &str) {
        self.record(side, EntryKind::Sent, &mask_secrets(line));
    }

    pub(crate) fn received(&self, side: Side, text: &str) {
        self.record(side, EntryKind::Received, text);
    }

    pub(crate) fn note(&self, side: Side, text: &str) {
        self.record(side, EntryKind::Note, text);
    }

    /// Everything recorded so far; the recorder starts over empty (same clock).
    pub(crate) fn take(&self) -> Transcript {
        let mut log = self.lock();
        let head = std::mem::take(&mut log.head);
        let omitted_at = head.len();
        let mut entries = head;
        entries.extend(std::mem::take(&mut log.tail));
        let omitted = std::mem::take(&mut log.omitted);
        Transcript {
            entries,
            omitted,
            omitted_at,
            started: Some(log.started),
            label: log.label.clone(),
        }
    }
}

/// `PASS secret` → `PASS ****`, same for ACCT; other lines unchanged.
pub(crate) fn mask_secrets(line: &str) -> String {
    let verb = line.split(' ').next().unwrap_or("");
    if verb.eq_ignore_ascii_case("PASS") || verb.eq_ignore_ascii_case("ACCT") {
        format!("{} ****", verb.to_ascii_uppercase())
    } else {
        line.to_owned()
    }
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        let table = [
            ("PASS hunter2", "PASS ****"),
            ("pass hunter2", "PASS ****"),
            ("PASS", "PASS ****"),
            ("ACCT 1234", "ACCT ****"),
            ("USER alice", "USER alice"),
            ("PASSIVE x", "PASSIVE x"),
            ("RETR PASS", "RETR PASS"),
        ];
        for (line, masked) in table {
            assert_eq!(mask_secrets(line), masked, "{line}");
        }
        let rec = Recorder::new(TranscriptLimits::default(), Scrubber::default());
        rec.sent(Side::Source, "PASS hunter2");
        let t = rec.take();
        assert!(!t.to_string().contains("hunter2"), "{t}");
        assert_eq!(t.count_sent(Side::Source, "pass"), 1);
    }

    #[test]
    fn every_entry_is_scrubbed_of_the_job_secrets_before_it_is_cut() {
        let rec = Recorder::new(
            TranscriptLimits {
                max_entries: 10,
                max_entry_chars: 20,
            },
            Scrubber::new(&["hunter2"]),
        );
        rec.received(Side::Source, "530 you sent hunter2");
        rec.note(Side::Destination, "6c6f67696e3a68756e74657232");
        rec.received(Side::Source, "530 0123456789 abcd hunter2");
        let t = rec.take().to_string();
        assert!(
            !t.contains("hunter2") && !t.contains("hun") && !t.contains("68756e"),
            "{t}"
        );
        assert!(t.contains("530 you sent ****"), "{t}");
    }

    #[test]
    fn keeps_head_and_tail_and_counts_the_rest() {
        let rec = Recorder::new(
            TranscriptLimits {
                max_entries: 6,
                max_entry_chars: 5,
            },
            Scrubber::default(),
        );
        for i in 0..20 {
            rec.note(Side::Destination, &format!("n{i}-long-text"));
        }
        let t = rec.take();
        let texts: Vec<&str> = t.entries.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(
            texts,
            ["n0-lo…", "n1-lo…", "n2-lo…", "n17-l…", "n18-l…", "n19-l…"]
        );
        assert_eq!((t.omitted, t.omitted_at), (14, 3));
        assert!(t.to_string().contains("[... 14 entries omitted ...]"));
        // take() starts over, on the same clock.
        let again = rec.take();
        assert!(again.entries.is_empty() && again.omitted == 0, "{again:?}");
        assert_eq!(again.started, t.started);
    }
}
