//! The report of a job of any size, built from its members one at a time, so that neither
//! the time nor the memory it takes depends on more than one member at once.
//!
//! A job of at most [`FULL_REPORT_MAX_MEMBERS`] members is reported as [`crate::render`]
//! does: the text and the JSON list every file. A larger one is reported in brief: the text
//! has the counts per state and the first [`NOT_COPIED_IN_TEXT`] files not copied, with their
//! replies; the JSON has the job without its members; and every member is a line of
//! `bftp-job-<id>.members.jsonl.gz`, written through gzip as it comes, so what the builder
//! holds is that compressed ledger and nothing per member. The ledger stops at
//! [`LEDGER_MAX_BYTES`] but for the files not copied, so that the mail stays within what
//! relays accept and the memory within a bound whatever the job's size.
//!
//! Why JSON lines: each line is a member exactly as `bftp status --json` shows it (nested
//! replies, optional fields), which a CSV would have to flatten by rules of its own; and a
//! line per member can be read with `zcat | grep` or `jq -c` without loading the whole file.

use std::fmt::Write as _;
use std::io::Write as _;

use bftp_api::{JobView, MemberView};
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::render::{compose, reply_line, safe_member, safe_view, Files, Ledger, Report, Tally};
use crate::scrub::{clean, Scrubber};

/// gzip's default level: against its fastest (1), about 1.6 times the CPU (0.45 against
/// 0.28 s for 100,000 members) for a ledger a third smaller, which lets a 1,000,000-member
/// ledger fit [`LEDGER_MAX_BYTES`] whole.
const LEDGER_COMPRESSION: Compression = Compression::new(6);

/// A job of more members than this is reported in brief, its files in the ledger attachment.
/// A thousand lines is about as much as anyone reads in a mail.
pub const FULL_REPORT_MAX_MEMBERS: usize = 1_000;

/// Files not copied (failed, uncertain, refused, cancelled, pending) that the brief text
/// names with their replies; the rest are counted, and all are in the ledger.
pub const NOT_COPIED_IN_TEXT: usize = 1_000;

/// The ledger's compressed size past which succeeded files are left out of it (counted, and
/// said so): 6 MiB, about 8.2 MB as base64, so that the whole mail stays under the 10 MB a
/// relay commonly accepts (Postfix's default `message_size_limit`) and what a report holds
/// is bounded whatever the job's size. Files not copied are still written past it, up to
/// [`LEDGER_NOT_COPIED_MARGIN`] more.
pub const LEDGER_MAX_BYTES: usize = 6 << 20;

/// How far past [`LEDGER_MAX_BYTES`] the files not copied are still written.
pub const LEDGER_NOT_COPIED_MARGIN: usize = 1 << 20;

/// Builds a job's report from its members, given one at a time (in index order, as the store
/// pages them):
///
/// ```ignore
/// let mut b = ReportBuilder::new(header, &transcript, &secrets);
/// for m in page { b.push(m) }
/// let report = b.finish();
/// ```
pub struct ReportBuilder<'a> {
    /// The job, without its members (any it has are taken as the first ones).
    job: JobView,
    transcript: &'a [String],
    secrets: &'a [String],
    scrubber: Scrubber,
    members: Members,
    ledger_limit: usize,
}

enum Members {
    /// Up to [`FULL_REPORT_MAX_MEMBERS`], kept for [`crate::render`].
    Few(Vec<MemberView>),
    Many(Box<Brief>),
}

/// A large report under way.
struct Brief {
    gz: GzEncoder<Vec<u8>>,
    tally: Tally,
    /// The first [`NOT_COPIED_IN_TEXT`] members not copied, made safe.
    not_copied: Vec<MemberView>,
    not_copied_total: usize,
    line: Vec<u8>,
    /// Lines written, and members left out past the limit (succeeded, not copied).
    written: usize,
    left_out: (usize, usize),
    limit: usize,
}

impl<'a> ReportBuilder<'a> {
    /// `secrets` as in [`crate::ReportInput::secrets`].
    pub fn new(mut job: JobView, transcript: &'a [String], secrets: &'a [String]) -> Self {
        let first = std::mem::take(&mut job.members);
        let mut b = ReportBuilder {
            job,
            transcript,
            secrets,
            scrubber: Scrubber::new(secrets),
            members: Members::Few(Vec::new()),
            ledger_limit: LEDGER_MAX_BYTES,
        };
        first.into_iter().for_each(|m| b.push(m));
        b
    }

    /// Another limit than [`LEDGER_MAX_BYTES`] (for tests and benchmarks); before the first
    /// [`ReportBuilder::push`].
    pub fn with_ledger_limit(mut self, bytes: usize) -> Self {
        self.ledger_limit = bytes;
        self
    }

    /// The next member (by index).
    pub fn push(&mut self, m: MemberView) {
        match &mut self.members {
            Members::Few(few) if few.len() < FULL_REPORT_MAX_MEMBERS => few.push(m),
            Members::Few(few) => {
                let mut brief = Box::new(Brief {
                    gz: GzEncoder::new(Vec::new(), LEDGER_COMPRESSION),
                    tally: Tally::default(),
                    not_copied: Vec::new(),
                    not_copied_total: 0,
                    line: Vec::new(),
                    written: 0,
                    left_out: (0, 0),
                    limit: self.ledger_limit,
                });
                for earlier in std::mem::take(few) {
                    brief.add(&self.scrubber, &earlier);
                }
                brief.add(&self.scrubber, &m);
                self.members = Members::Many(brief);
            }
            Members::Many(brief) => brief.add(&self.scrubber, &m),
        }
    }

    pub fn finish(self) -> Report {
        match self.members {
            Members::Few(members) => {
                let job = JobView {
                    waiting: None,
                    counts: Tally::of(&members).counts(),
                    members,
                    ..self.job
                };
                crate::render(&crate::ReportInput {
                    job: &job,
                    transcript: self.transcript,
                    secrets: self.secrets,
                })
            }
            Members::Many(brief) => {
                let scrubber = &self.scrubber;
                let safe = |s: &str| clean(&scrubber.scrub(s));
                let mut job = safe_view(&self.job, &safe);
                job.counts = brief.tally.counts();
                let file_name = format!("bftp-job-{}.members.jsonl.gz", job.id);
                // Writing into a Vec cannot fail.
                let gzip = brief.gz.finish().expect("gzip into memory");
                let files = Files::Ledger {
                    file_name: &file_name,
                    not_copied: &brief.not_copied,
                    not_copied_total: brief.not_copied_total,
                    left_out: brief.left_out,
                    limit: brief.limit,
                };
                let ledger = Ledger {
                    file_name: file_name.clone(),
                    gzip,
                    members: brief.written,
                };
                compose(
                    scrubber,
                    &job,
                    &brief.tally,
                    self.transcript,
                    files,
                    Some(ledger),
                )
            }
        }
    }
}

impl Brief {
    fn add(&mut self, scrubber: &Scrubber, m: &MemberView) {
        let safe = |s: &str| clean(&scrubber.scrub(s));
        let m = safe_member(m, &safe);
        self.tally.add(&m);
        if m.state != "succeeded" {
            self.not_copied_total += 1;
            if self.not_copied.len() < NOT_COPIED_IN_TEXT {
                self.not_copied.push(m.clone());
            }
        }
        self.line.clear();
        serde_json::to_writer(&mut self.line, &m).expect("plain data serializes");
        if !scrubber.is_empty() {
            // The strings are scrubbed; a secret can still span two fields or be a number.
            let line = std::str::from_utf8(&self.line).expect("JSON is UTF-8");
            if scrubber.scrub(line) != line {
                self.line = scrubbed_line(scrubber, &m).into_bytes();
            }
        }
        self.line.push(b'\n');
        let size = self.gz.get_ref().len();
        let copied = m.state == "succeeded";
        if size >= self.limit && (copied || size >= self.limit + LEDGER_NOT_COPIED_MARGIN) {
            if copied {
                self.left_out.0 += 1;
            } else {
                self.left_out.1 += 1;
            }
            return;
        }
        self.gz.write_all(&self.line).expect("gzip into memory");
        self.written += 1;
    }
}

/// A member's line with each value scrubbed (a number equal to a secret masked), as the
/// JSON report does; withheld if a secret still spans its syntax.
fn scrubbed_line(scrubber: &Scrubber, m: &MemberView) -> String {
    let mut value = serde_json::to_value(m).expect("plain data serializes");
    crate::render::scrub_value(&mut value, scrubber);
    let line = value.to_string();
    let scrubbed = scrubber.scrub(&line);
    if scrubbed == line {
        return line;
    }
    serde_json::json!({
        "index": m.index,
        "error": "this member's line was withheld: it could not be written without a secret",
    })
    .to_string()
}

/// The file section of a report in brief after its counts: where every file is, and the
/// first files not copied with their replies.
pub(crate) fn files_in_brief(files: &Files, job_id: u64, source: &str, t: &mut String) {
    let Files::Ledger {
        file_name,
        not_copied,
        not_copied_total,
        left_out: (left_copied, left_not_copied),
        limit,
    } = *files
    else {
        return;
    };
    if left_copied + left_not_copied == 0 {
        let _ = writeln!(
            t,
            "  Too many to list here: every file, with its replies and detail, is a line of the\n  \
             attachment {file_name} (gzip, one JSON object per line, as\n  \
             `bftp status --json` shows a file)."
        );
    } else {
        let _ = writeln!(
            t,
            "  Too many to list here, or to attach all: the attachment {file_name}\n  \
             (gzip, one JSON object per line, as `bftp status --json` shows a file) stops at\n  \
             {} MiB so that the mail passes a relay's usual size limit. It has the files in\n  \
             order up to there, then only the files not copied; {left_copied} copied files \
             are left\n  out of it{}. `bftp status --json {job_id}` lists every file while \
             the job is kept.",
            limit >> 20,
            if left_not_copied > 0 {
                format!(", and {left_not_copied} files not copied")
            } else {
                String::new()
            }
        );
    }
    if not_copied_total == 0 {
        return;
    }
    let _ = writeln!(t, "\nNot copied ({not_copied_total})");
    let _ = writeln!(t, "  {:<26} {:>12} {:>6}  name", "state", "bytes", "tries");
    for m in not_copied {
        let bytes = m.bytes.map_or_else(|| "-".to_string(), |b| b.to_string());
        let _ = writeln!(
            t,
            "  {:<26} {:>12} {:>6}  {}",
            m.state, bytes, m.attempts, m.name
        );
        if let Some(r) = &m.source_reply {
            let _ = writeln!(t, "      {source:<13}{}", reply_line(r));
        }
        if let Some(r) = &m.dest_reply {
            let _ = writeln!(t, "      {:<13}{}", "destination:", reply_line(r));
        }
        if let Some(route) = &m.route {
            let _ = writeln!(t, "      {:<13}{}", "route:", route.describe());
        }
        if let Some(d) = &m.detail {
            let _ = writeln!(t, "      {:<13}{d}", "detail:");
        }
    }
    let more = not_copied_total - not_copied.len();
    if more > 0 {
        let _ = writeln!(
            t,
            "  and {more} more not copied, not listed here: the attachment has {}.",
            if left_not_copied == 0 {
                "every one"
            } else {
                "them, as far as it goes"
            }
        );
    }
}
