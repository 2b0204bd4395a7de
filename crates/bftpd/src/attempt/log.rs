//! The attempt's transcript: every pair's lines on one clock, the last ones kept for the report.

use super::*;

/// Lines of an attempt's transcript the report keeps: the last ones, where the failure is.
pub(super) const TRANSCRIPT_LINES: usize = 300;

/// The transcript of one attempt, for the report (RFC 1068 always mailed it): every
/// transcript the engine handed out (login, listing, each copy), the last
/// [`TRANSCRIPT_LINES`] lines kept. PASS and ACCT are masked by the engine.
///
/// Parallel pairs hand their transcripts over as their copies end, not in the order the
/// lines were said: each line is put on the attempt's one clock (milliseconds since the
/// attempt began) and in time order, and labelled with its pair (`[p2]`).
///
/// A line is kept as the engine's entry and written out only when the report takes the
/// log: most lines of a long job leave the window again before that, and are never
/// formatted.
pub(super) struct AttemptLog {
    clock: std::time::Instant,
    /// Sorted by the first field, the line's time on `clock` (a deque: the oldest line
    /// leaves at the front once there are [`TRANSCRIPT_LINES`], for every line a copy adds).
    lines: VecDeque<(u64, Kept)>,
    dropped: usize,
}

/// One line of an [`AttemptLog`], not yet written out.
pub(super) enum Kept {
    Entry {
        pair: Arc<str>,
        entry: Entry,
    },
    /// Where a pair's own transcript dropped entries.
    Omitted {
        pair: Arc<str>,
        count: usize,
    },
}

impl Kept {
    pub(super) fn render(&self, at: u64) -> String {
        match self {
            Kept::Entry { pair, entry } => format!("[{at:>7} ms] [{pair}] {entry}"),
            Kept::Omitted { pair, count } => {
                format!("[{at:>7} ms] [{pair}] [... {count} entries omitted ...]")
            }
        }
    }
}

impl Default for AttemptLog {
    fn default() -> Self {
        AttemptLog {
            clock: std::time::Instant::now(),
            lines: VecDeque::new(),
            dropped: 0,
        }
    }
}

impl AttemptLog {
    pub(super) fn keep(&mut self, t: Transcript) {
        // A recorder's clock started with its pair: inside the attempt, or before it for a
        // kept pair (its lines are moved back onto the attempt's clock).
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (ahead, behind) = t.started.map_or((0, 0), |s| {
            (
                ms(s.saturating_duration_since(self.clock)),
                ms(self.clock.saturating_duration_since(s)),
            )
        });
        let pair: Arc<str> = Arc::from(t.label.as_deref().unwrap_or("p?"));
        let (omitted, omitted_at) = (t.omitted, t.omitted_at);
        for (i, entry) in t.entries.into_iter().enumerate() {
            let at = ahead.saturating_add(entry.at_ms).saturating_sub(behind);
            if omitted > 0 && i == omitted_at {
                self.insert(at, || Kept::Omitted {
                    pair: pair.clone(),
                    count: omitted,
                });
            }
            self.insert(at, || Kept::Entry {
                pair: pair.clone(),
                entry,
            });
        }
    }

    /// In time order, after the lines of the same time already there. A line that would
    /// be the oldest of a full window leaves at once: it is counted, not made.
    pub(super) fn insert(&mut self, at: u64, line: impl FnOnce() -> Kept) {
        let i = self.lines.partition_point(|(t, _)| *t <= at);
        if i == 0 && self.lines.len() >= TRANSCRIPT_LINES {
            self.dropped += 1;
            return;
        }
        self.lines.insert(i, (at, line()));
        if self.lines.len() > TRANSCRIPT_LINES {
            self.lines.pop_front();
            self.dropped += 1;
        }
    }

    pub(super) fn take(&mut self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.lines.len() + 1);
        if self.dropped > 0 {
            out.push(format!("[... {} earlier lines omitted ...]", self.dropped));
        }
        out.extend(self.lines.drain(..).map(|(at, l)| l.render(at)));
        self.dropped = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_ftp::EntryKind;
    use std::time::Instant;

    fn transcript(started: Instant, label: &str, lines: &[(u64, &str)]) -> Transcript {
        Transcript {
            entries: lines
                .iter()
                .map(|(at_ms, text)| Entry {
                    at_ms: *at_ms,
                    side: Side::Source,
                    kind: EntryKind::Sent,
                    text: text.to_string(),
                })
                .collect(),
            started: Some(started),
            label: Some(label.into()),
            ..Default::default()
        }
    }

    /// Two pairs' transcripts handed over late and out of order come out on the attempt's
    /// one clock, in time order, each line with its pair.
    #[test]
    fn parallel_transcripts_share_one_clock_and_say_their_pair() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let p1 = transcript(t0, "p1", &[(10, "USER a"), (300, "RETR /x")]);
        let p2 = transcript(
            t0 + Duration::from_millis(100),
            "p2",
            &[(0, "USER b"), (50, "RETR /y")],
        );
        log.keep(p2);
        log.keep(p1);
        assert_eq!(
            log.take(),
            [
                "[     10 ms] [p1] source> USER a",
                "[    100 ms] [p2] source> USER b",
                "[    150 ms] [p2] source> RETR /y",
                "[    300 ms] [p1] source> RETR /x",
            ]
        );
    }

    /// A pair's own transcript that dropped entries says so where it dropped them.
    #[test]
    fn a_transcript_that_dropped_entries_says_where() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let mut t = transcript(t0, "p3", &[(1, "USER a"), (9, "QUIT")]);
        t.omitted = 7;
        t.omitted_at = 1;
        log.keep(t);
        assert_eq!(
            log.take(),
            [
                "[      1 ms] [p3] source> USER a",
                "[      9 ms] [p3] [... 7 entries omitted ...]",
                "[      9 ms] [p3] source> QUIT",
            ]
        );
    }

    /// A full log takes no line older than every line it holds: the line is counted with
    /// the earlier ones left out, as if it had come first and been pushed out.
    #[test]
    fn a_line_older_than_a_full_log_is_counted_not_kept() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let lines: Vec<(u64, String)> = (0..TRANSCRIPT_LINES as u64)
            .map(|i| (1000 + i, format!("NOOP {i}")))
            .collect();
        let refs: Vec<(u64, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
        log.keep(transcript(t0, "p1", &refs));
        log.keep(transcript(
            t0,
            "p2",
            &[(5, "USER early"), (1500, "RETR /late")],
        ));
        let out = log.take();
        assert_eq!(out.len(), TRANSCRIPT_LINES + 1);
        assert_eq!(out[0], "[... 2 earlier lines omitted ...]");
        assert!(!out.iter().any(|l| l.contains("early")), "{out:?}");
        assert_eq!(
            out[TRANSCRIPT_LINES],
            "[   1500 ms] [p2] source> RETR /late"
        );
        assert!(out[1].ends_with("NOOP 1"), "{}", out[1]);
    }

    #[test]
    fn the_log_keeps_the_latest_lines_and_counts_the_rest() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let lines: Vec<(u64, String)> = (0..TRANSCRIPT_LINES as u64 + 5)
            .map(|i| (i, format!("NOOP {i}")))
            .collect();
        let refs: Vec<(u64, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
        log.keep(transcript(t0, "p1", &refs));
        let out = log.take();
        assert_eq!(out.len(), TRANSCRIPT_LINES + 1);
        assert_eq!(out[0], "[... 5 earlier lines omitted ...]");
        assert!(out[1].ends_with("NOOP 5"), "{}", out[1]);
    }
}
