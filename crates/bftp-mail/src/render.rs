//! The report, as text for people and JSON for programs. Pure: no I/O, no clock.
//!
//! The outcome comes first, in words, because "finished" only says that bftpd stopped
//! working on a job (RULES.md §3). Every string that came from outside (server replies, file
//! names, user input) is scrubbed of the job's secrets and has its control characters shown
//! escaped before it is placed; the finished subject, text and JSON are scrubbed once more.

use std::fmt::Write as _;

use bftp_api::{EndpointView, JobView, MemberView, ReplyView};
use bftp_core::ftpurl::redact_url;
use serde::Serialize;

use crate::scrub::{clean, mask_login_secrets, Scrubber, MASK};

/// The `schema` of the JSON report. A change that removes or retypes a field takes a new
/// number; adding a field does not.
///
/// ```json
/// {
///   "schema": "bftp-report/1",
///   "summary": { "outcome": "partial", "state": "finished", "action": "copied",
///                "files": 4, "succeeded": 3, "failed": 1, "cancelled": 0,
///                "uncertain": 0, "refused": 0, "pending": 0, "bytes": 4096 },
///   "job": { ... },              // bftp-api's JobView, as `bftp status --json` shows it
///   "transcript": ["source> USER alice", "source< 331 ...", ...],
///   "transcript_omitted": 0      // earlier lines left out to bound the report
/// }
/// ```
pub const REPORT_SCHEMA: &str = "bftp-report/1";

/// The transcript keeps the last this many lines of the last attempt...
pub const TRANSCRIPT_MAX_LINES: usize = 200;
/// ...each cut to this many characters.
pub const TRANSCRIPT_MAX_LINE_CHARS: usize = 512;

/// Names listed in the cancel summary before "and N more" (the table lists them all).
const NAMES_IN_SUMMARY: usize = 10;

pub struct ReportInput<'a> {
    /// The job in a final state (finished or cancelled), with its members and history.
    pub job: &'a JobView,
    /// The last attempt's transcript, bounded, PASS already masked (masked again anyway).
    pub transcript: &'a [String],
    /// The job's clear FTP passwords and ACCT strings, given only to be scrubbed: any
    /// occurrence, plain or encoded, anywhere in the report becomes `****`.
    pub secrets: &'a [String],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub job_id: u64,
    /// `BFTP results: <id>: <outcome> (<counts>)`; ASCII, one line.
    pub subject: String,
    pub text: String,
    /// Pretty JSON, schema [`REPORT_SCHEMA`].
    pub json: String,
    /// A large job's per-file ledger, attached beside the JSON (which then lists no member);
    /// `None` for a job of at most [`crate::FULL_REPORT_MAX_MEMBERS`] members, whose JSON
    /// has them all.
    pub ledger: Option<Ledger>,
}

/// The per-file ledger of a large report: one JSON object per line (a member as `bftp status
/// --json` shows it, scrubbed like the rest of the report), gzip-compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// `bftp-job-<id>.members.jsonl.gz`
    pub file_name: String,
    pub gzip: Vec<u8>,
    /// Lines in it: every member of the job.
    pub members: usize,
}

/// The members counted by state, and the first few names the text of a cancelled job
/// shows; made from all members at once (a small report) or one at a time (a large one).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    files: usize,
    succeeded: usize,
    failed: usize,
    cancelled: usize,
    uncertain: usize,
    refused: usize,
    bytes: u64,
    first_succeeded: Vec<String>,
    first_cancelled: Vec<String>,
}

impl Tally {
    pub(crate) fn of(members: &[MemberView]) -> Tally {
        let mut t = Tally::default();
        members.iter().for_each(|m| t.add(m));
        t
    }

    pub(crate) fn add(&mut self, m: &MemberView) {
        self.files += 1;
        self.bytes += m.bytes.unwrap_or(0);
        let first = |names: &mut Vec<String>| {
            if names.len() < NAMES_IN_SUMMARY {
                names.push(m.name.clone());
            }
        };
        match m.state.as_str() {
            "succeeded" => {
                self.succeeded += 1;
                first(&mut self.first_succeeded);
            }
            "failed_permanent" | "failed_retries_exhausted" => self.failed += 1,
            "cancelled" => {
                self.cancelled += 1;
                first(&mut self.first_cancelled);
            }
            "uncertain" => self.uncertain += 1,
            "refused" => self.refused += 1,
            _ => {}
        }
    }

    /// The counts as the API's view has them.
    pub(crate) fn counts(&self) -> bftp_api::MemberCounts {
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        let done = self.succeeded + self.failed + self.cancelled + self.uncertain + self.refused;
        bftp_api::MemberCounts {
            files: n(self.files),
            pending: n(self.files - done),
            succeeded: n(self.succeeded),
            failed: n(self.failed),
            cancelled: n(self.cancelled),
            uncertain: n(self.uncertain),
            refused: n(self.refused),
        }
    }
}

/// What the text's file section shows: every member (a small report, from the view), or a
/// large report's counts and its first members not copied (the rest are in the ledger).
pub(crate) enum Files<'a> {
    All,
    Ledger {
        file_name: &'a str,
        not_copied: &'a [MemberView],
        not_copied_total: usize,
        /// Members past the ledger's limit, left out of it: (succeeded, not copied).
        left_out: (usize, usize),
        limit: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct Summary<'a> {
    outcome: &'a str,
    state: &'a str,
    /// `copied` or `deleted`: what a succeeded file had done to it.
    action: &'static str,
    files: usize,
    succeeded: usize,
    failed: usize,
    cancelled: usize,
    uncertain: usize,
    /// Listed names bftpd would not send in a command (CR, LF, NUL, `..`, foreign paths).
    refused: usize,
    pending: usize,
    bytes: u64,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    schema: &'static str,
    summary: Summary<'a>,
    job: &'a JobView,
    transcript: &'a [String],
    transcript_omitted: usize,
    /// A large report's ledger attachment: its `job.members` is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    members_file: Option<&'a str>,
    /// Members left out of that attachment, past its size limit.
    #[serde(skip_serializing_if = "is_zero")]
    members_file_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The report of a job whose view holds all its members: text and JSON list every one. A
/// job of more than [`crate::FULL_REPORT_MAX_MEMBERS`] members is reported through
/// [`crate::ReportBuilder`] instead, which does not need them all at once.
pub fn render(input: &ReportInput) -> Report {
    let scrubber = Scrubber::new(input.secrets);
    let safe = |s: &str| clean(&scrubber.scrub(s));
    let job = safe_view(input.job, &safe);
    let tally = Tally::of(&job.members);
    compose(&scrubber, &job, &tally, input.transcript, Files::All, None)
}

/// Subject, text and JSON of `job` (already made safe), with `tally` its members' counts.
pub(crate) fn compose(
    scrubber: &Scrubber,
    job: &JobView,
    tally: &Tally,
    transcript: &[String],
    files: Files,
    ledger: Option<Ledger>,
) -> Report {
    let safe = |s: &str| clean(&scrubber.scrub(s));
    let (transcript, omitted) = bound_transcript(transcript, &safe);
    let summary = summarize(job, tally);

    let subject = format!(
        "BFTP results: {}: {} ({})",
        job.id,
        summary.outcome,
        counts_phrase(&summary, false)
    );
    let (members_file, omitted_from_file) = match files {
        Files::All => (None, 0),
        Files::Ledger {
            file_name,
            left_out,
            ..
        } => (Some(file_name), left_out.0 + left_out.1),
    };
    let text = render_text(job, &summary, tally, &files, &transcript, omitted);
    let json = render_json(
        job,
        summary,
        &transcript,
        omitted,
        (members_file, omitted_from_file),
        scrubber,
    );

    Report {
        job_id: job.id,
        // The subject is ASCII from fixed words and numbers, but the outcome string came
        // from the view: keep it on one line whatever it holds.
        subject: scrubber.scrub(&subject).replace(['\r', '\n'], " "),
        text: scrubber.scrub(&text),
        json,
        ledger,
    }
}

pub(crate) fn safe_view(v: &JobView, safe: &dyn Fn(&str) -> String) -> JobView {
    let opt = |o: &Option<String>| o.as_deref().map(safe);
    let endpoint = |e: &EndpointView| EndpointView {
        host: safe(&e.host),
        port: e.port,
        user: safe(&e.user),
        path: safe(&e.path),
        has_password: e.has_password,
        has_acct: e.has_acct,
        url: safe(&redact_url(&e.url)),
    };
    let mut out = JobView {
        waiting: None,
        members: Vec::new(),
        ..v.clone()
    };
    out.state = safe(&v.state);
    out.outcome = opt(&v.outcome);
    out.next_attempt_at = opt(&v.next_attempt_at);
    out.created_at = safe(&v.created_at);
    out.updated_at = safe(&v.updated_at);
    out.finished_at = opt(&v.finished_at);
    out.source = endpoint(&v.source);
    out.destination = v.destination.as_ref().map(endpoint);
    out.disposition = safe(&v.disposition);
    out.dest_command = safe(&v.dest_command);
    out.transfer_type = safe(&v.transfer_type);
    out.mode = safe(&v.mode);
    out.structure = safe(&v.structure);
    out.start_at = safe(&v.start_at);
    out.retry.first_interval = safe(&v.retry.first_interval);
    out.retry.cap = safe(&v.retry.cap);
    out.retry.deadline = safe(&v.retry.deadline);
    out.notify = v.notify.iter().map(|n| safe(n)).collect();
    out.members = v.members.iter().map(|m| safe_member(m, safe)).collect();
    // The report does not describe its own delivery.
    out.report = None;
    out.events = Vec::new();
    for (h, orig) in out.history.iter_mut().zip(&v.history) {
        h.at = safe(&orig.at);
        h.event = safe(&orig.event);
        h.detail = opt(&orig.detail);
    }
    out
}

pub(crate) fn safe_member(m: &MemberView, safe: &dyn Fn(&str) -> String) -> MemberView {
    let opt = |o: &Option<String>| o.as_deref().map(safe);
    let control = |c: &bftp_api::ControlTlsView| bftp_api::ControlTlsView {
        state: safe(&c.state),
        version: opt(&c.version),
        certificate: opt(&c.certificate),
        ca_file: opt(&c.ca_file),
        pinned_sha256: opt(&c.pinned_sha256),
    };
    let reply = |r: &Option<ReplyView>| {
        r.as_ref().map(|r| ReplyView {
            code: r.code,
            text: safe(&r.text),
        })
    };
    MemberView {
        index: m.index,
        name: safe(&m.name),
        state: safe(&m.state),
        attempts: m.attempts,
        size: m.size,
        bytes: m.bytes,
        source_reply: reply(&m.source_reply),
        dest_reply: reply(&m.dest_reply),
        detail: opt(&m.detail),
        updated_at: safe(&m.updated_at),
        proof: opt(&m.proof),
        // A report is of a final job: nothing is in flight.
        progress: None,
        tls: m.tls.as_ref().map(|t| bftp_api::TlsView {
            source: t.source.as_ref().map(&control),
            destination: t.destination.as_ref().map(&control),
            data: t.data.as_ref().map(|d| bftp_api::DataTlsView {
                encrypted: d.encrypted,
                tls_client: opt(&d.tls_client),
                clear_reason: opt(&d.clear_reason),
            }),
        }),
        route: m.route.as_ref().map(|r| bftp_api::RouteView {
            path: safe(&r.path),
            reason: opt(&r.reason),
            detail: opt(&r.detail),
            seen: opt(&r.seen),
            bytes: r.bytes,
            sha256: opt(&r.sha256),
        }),
    }
}

/// The last [`TRANSCRIPT_MAX_LINES`] lines, each cut, PASS/ACCT masked; and how many earlier
/// lines were left out.
fn bound_transcript(lines: &[String], safe: &dyn Fn(&str) -> String) -> (Vec<String>, usize) {
    let omitted = lines.len().saturating_sub(TRANSCRIPT_MAX_LINES);
    let kept = lines[omitted..]
        .iter()
        .map(|l| {
            // Mask before cutting, so a cut cannot hide a PASS from the masker.
            let l = safe(&mask_login_secrets(l));
            match l.char_indices().nth(TRANSCRIPT_MAX_LINE_CHARS) {
                Some((i, _)) => format!("{} [cut]", &l[..i]),
                None => l,
            }
        })
        .collect();
    (kept, omitted)
}

fn summarize<'a>(job: &'a JobView, t: &Tally) -> Summary<'a> {
    let (files, succeeded, failed) = (t.files, t.succeeded, t.failed);
    let (cancelled, uncertain, refused) = (t.cancelled, t.uncertain, t.refused);
    let pending = files - succeeded - failed - cancelled - uncertain - refused;
    let derived = if job.state == "cancelled" {
        "cancelled"
    } else if files > 0 && succeeded == files {
        "succeeded"
    } else if succeeded > 0 {
        "partial"
    } else {
        "failed"
    };
    Summary {
        outcome: job.outcome.as_deref().unwrap_or(derived),
        state: &job.state,
        action: if job.disposition == "delete" || job.destination.is_none() {
            "deleted"
        } else {
            "copied"
        },
        files,
        succeeded,
        failed,
        cancelled,
        uncertain,
        refused,
        pending,
        bytes: t.bytes,
    }
}

/// `3 of 4 files copied, 1 failed`; with `before_cancel`, `copied before the cancel`.
fn counts_phrase(s: &Summary, before_cancel: bool) -> String {
    let files = if s.files == 1 { "file" } else { "files" };
    let mut out = if s.files == 0 {
        format!("no file {}", s.action)
    } else {
        format!("{} of {} {files} {}", s.succeeded, s.files, s.action)
    };
    if before_cancel && s.outcome == "cancelled" && s.files > 0 {
        out.push_str(" before the cancel");
    }
    for (n, what) in [
        (s.failed, "failed"),
        (s.cancelled, "cancelled"),
        (s.uncertain, "uncertain"),
        (s.refused, "refused"),
        (s.pending, "not done"),
    ] {
        if n > 0 {
            let _ = write!(out, ", {n} {what}");
        }
    }
    out
}

/// The report's text in the order a reader sees it: summary, request, files (with the
/// ledger's notes), history, transcript, attachments.
fn render_text(
    job: &JobView,
    s: &Summary,
    tally: &Tally,
    files: &Files,
    transcript: &[String],
    omitted: usize,
) -> String {
    let mut t = String::new();
    summary_text(job, s, tally, files, &mut t);
    request_text(job, &mut t);
    files_text(job, s, files, &mut t);
    history_text(job, &mut t);
    transcript_text(transcript, omitted, &mut t);
    attachments_text(job, files, &mut t);
    t
}

/// The outcome, how the job ended (finished or cancelled) and its last event.
fn summary_text(job: &JobView, s: &Summary, tally: &Tally, files: &Files, t: &mut String) {
    let _ = writeln!(
        t,
        "Outcome: {} \u{2014} {}",
        s.outcome,
        counts_phrase(s, true)
    );
    t.push('\n');
    let attempts = match job.attempts {
        1 => "1 attempt".to_string(),
        n => format!("{n} attempts"),
    };
    let at = job.finished_at.as_deref().unwrap_or(&job.updated_at);
    if s.outcome == "cancelled" || job.state == "cancelled" {
        let _ = writeln!(
            t,
            "BFTP job {} was cancelled at {at}, after {attempts}.",
            job.id
        );
        let _ = writeln!(
            t,
            "Done before the cancel: {}",
            name_list(&tally.first_succeeded, tally.succeeded)
        );
        let _ = writeln!(
            t,
            "Cancelled: {}",
            name_list(&tally.first_cancelled, tally.cancelled)
        );
    } else {
        let _ = writeln!(t, "BFTP job {} finished at {at}, after {attempts}.", job.id);
        t.push_str(
            "\"Finished\" means that bftpd stopped working on the job, not that it succeeded:\n",
        );
        t.push_str(match files {
            Files::All => {
                "the outcome is the first line, and each file's line below is the evidence.\n"
            }
            Files::Ledger { .. } => {
                "the outcome is the first line, and each file's line in the attached ledger is\n\
                 the evidence.\n"
            }
        });
    }
    if s.outcome != "succeeded" {
        if let Some(last) = job.history.last() {
            if let Some(d) = &last.detail {
                let _ = writeln!(t, "Last event: {} {}: {d}", last.at, last.event);
            }
        }
    }
}

/// The request as submitted (passwords never shown).
fn request_text(job: &JobView, t: &mut String) {
    t.push_str("\nRequest\n");
    let mut field = |name: &str, value: &str| {
        let _ = writeln!(t, "  {name:<18}{value}");
    };
    field("source", &endpoint_line(&job.source));
    match &job.destination {
        Some(d) => field("destination", &endpoint_line(d)),
        None => field("destination", "none"),
    }
    field("disposition", &job.disposition);
    if job.destination.is_some() {
        field("destination cmd", &job.dest_command);
    }
    field(
        "type/mode/stru",
        &format!("{} / {} / {}", job.transfer_type, job.mode, job.structure),
    );
    field("start", &job.start_at);
    field(
        "retry",
        &format!(
            "first {}, factor {}, cap {}, at most {} attempts, deadline {}",
            job.retry.first_interval,
            job.retry.factor,
            job.retry.cap,
            job.retry.max_attempts,
            job.retry.deadline
        ),
    );
    field(
        "notify",
        &if job.notify.is_empty() {
            "the owner".to_string()
        } else {
            job.notify.join(", ")
        },
    );
    field(
        "keyword",
        if job.has_keyword {
            "set (stored only as a hash)"
        } else {
            "none"
        },
    );
    field("submitted", &job.created_at);
}

/// The files: in brief with a ledger attached, by directory for a tree, else each with its
/// replies and proof; then what an uncertain or a refused file means.
fn files_text(job: &JobView, s: &Summary, files: &Files, t: &mut String) {
    if let Files::Ledger { .. } = files {
        let source = if job.destination.is_some() {
            "source:"
        } else {
            "server:"
        };
        let by_state: Vec<String> = [
            (s.succeeded, "succeeded"),
            (s.failed, "failed"),
            (s.cancelled, "cancelled"),
            (s.uncertain, "uncertain"),
            (s.refused, "refused"),
            (s.pending, "not done"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let _ = writeln!(t, "\nFiles ({}): {}", s.files, by_state.join(", "));
        crate::ledger::files_in_brief(files, job.id, source, t);
    } else if job.recursive {
        crate::tree::files_by_directory(&job.members, t);
    } else {
        let _ = writeln!(t, "\nFiles ({})", job.members.len());
        if job.members.is_empty() {
            t.push_str("  none: the job ended before its files were known\n");
        } else {
            let _ = writeln!(t, "  {:<26} {:>12} {:>6}  name", "state", "bytes", "tries");
        }
        for m in &job.members {
            let bytes = m.bytes.map_or_else(|| "-".to_string(), |b| b.to_string());
            let _ = writeln!(
                t,
                "  {:<26} {:>12} {:>6}  {}",
                m.state, bytes, m.attempts, m.name
            );
            let source = if job.destination.is_some() {
                "source:"
            } else {
                "server:"
            };
            if let Some(r) = &m.source_reply {
                let _ = writeln!(t, "      {source:<13}{}", reply_line(r));
            }
            if let Some(r) = &m.dest_reply {
                let _ = writeln!(t, "      {:<13}{}", "destination:", reply_line(r));
            }
            if let Some(route) = &m.route {
                let _ = writeln!(t, "      {:<13}{}", "route:", route.describe());
            }
            if let Some(tls) = &m.tls {
                let _ = writeln!(t, "      {:<13}{}", "tls:", tls.describe());
            }
            if let Some(p) = &m.proof {
                let _ = writeln!(t, "      {:<13}{p}", "proof:");
            }
            if let Some(d) = &m.detail {
                let _ = writeln!(t, "      {:<13}{d}", "detail:");
            }
        }
    }
    if s.uncertain > 0 {
        t.push_str(
            "  An uncertain file had an append, unique store or delete under way when an\n  \
             attempt was interrupted, and its effect could not be established afterwards.\n  \
             bftpd did not repeat it (nothing was duplicated): check that file by hand.\n",
        );
    }

    if s.refused > 0 {
        t.push_str(
            "  A refused entry was not copied, and its detail line says why: a name bftpd will\n  \
             not put in an FTP command (a CR, LF or NUL in it, a \"..\" component, or a path\n  \
             outside the listed directory; shown escaped: rename it on the source server), or a\n  \
             directory the source could not list whole (hidden names not shown, a listing cut\n  \
             short, a tree limit: the detail names the setting to change).\n",
        );
    }
}

/// The job's history, a tree's `listed` events on one line.
fn history_text(job: &JobView, t: &mut String) {
    t.push_str("\nHistory\n");
    // A recursive job's walk freezes one directory per `listed` event: shown as one line.
    let listed: Vec<&str> = job
        .history
        .iter()
        .filter(|h| h.event == "listed")
        .map(|h| h.at.as_str())
        .collect();
    if let (Some(first), Some(last)) = (listed.first(), listed.last()) {
        let _ = writeln!(
            t,
            "  {first}  listed  {} directories frozen, the last at {last}",
            listed.len()
        );
    }
    for h in job.history.iter().filter(|h| h.event != "listed") {
        let _ = write!(t, "  {}  {}", h.at, h.event);
        if let Some(d) = &h.detail {
            let _ = write!(t, "  {d}");
        }
        t.push('\n');
    }
}

/// The transcript of the last attempt, and how many earlier lines were left out.
fn transcript_text(transcript: &[String], omitted: usize, t: &mut String) {
    if transcript.is_empty() {
        t.push_str("\nTranscript of the last attempt: none recorded\n");
    } else {
        let _ = write!(
            t,
            "\nTranscript of the last attempt ({} lines",
            transcript.len()
        );
        if omitted > 0 {
            let _ = write!(t, "; {omitted} earlier lines left out");
        }
        t.push_str(")\n");
        for l in transcript {
            let _ = writeln!(t, "  {l}");
        }
    }
}

/// Where the same report is attached (and its files, with a ledger).
fn attachments_text(job: &JobView, files: &Files, t: &mut String) {
    match files {
        Files::All => {
            let _ = writeln!(
                t,
                "\nThe same report is attached as bftp-job-{}.json (schema {REPORT_SCHEMA}).",
                job.id
            );
        }
        Files::Ledger { file_name, .. } => {
            let _ = writeln!(
                t,
                "\nThe same report is attached as bftp-job-{}.json (schema {REPORT_SCHEMA}), \
                 its files\nin {file_name}.",
                job.id
            );
        }
    }
}

fn endpoint_line(e: &EndpointView) -> String {
    let mut line = e.url.clone();
    match (e.has_password, e.has_acct) {
        (true, true) => line.push_str(" (password and ACCT given, not shown)"),
        (true, false) => line.push_str(" (password given, not shown)"),
        (false, true) => line.push_str(" (ACCT given, not shown)"),
        (false, false) => {}
    }
    line
}

pub(crate) fn reply_line(r: &ReplyView) -> String {
    match r.code {
        Some(c) => format!("{c} {}", r.text),
        None => format!("(no reply code) {}", r.text),
    }
}

/// `first` (at most [`NAMES_IN_SUMMARY`] names) of `total`.
fn name_list(first: &[String], total: usize) -> String {
    match total {
        0 => "none".to_string(),
        n if n <= first.len() => first.join(", "),
        n => format!("{}, and {} more", first.join(", "), n - first.len()),
    }
}

fn render_json(
    job: &JobView,
    summary: Summary,
    transcript: &[String],
    omitted: usize,
    (members_file, members_file_omitted): (Option<&str>, usize),
    scrubber: &Scrubber,
) -> String {
    let doc = JsonReport {
        schema: REPORT_SCHEMA,
        summary,
        job,
        transcript,
        transcript_omitted: omitted,
        members_file,
        members_file_omitted,
    };
    let mut value = serde_json::to_value(&doc).expect("plain data serializes");
    scrub_value(&mut value, scrubber);
    let json = serde_json::to_string_pretty(&value).expect("a Value serializes");
    // Strings and numbers were scrubbed one by one; this catches a secret spanning two.
    let scrubbed = scrubber.scrub(&json);
    if scrubbed == json || serde_json::from_str::<serde_json::Value>(&scrubbed).is_ok() {
        return scrubbed;
    }
    // A secret that spans JSON syntax: unlikely, and not worth an unreadable attachment.
    serde_json::to_string_pretty(&serde_json::json!({
        "schema": REPORT_SCHEMA,
        "job_id": job.id,
        "error": "the JSON report was withheld: it could not be written without a secret",
    }))
    .expect("a Value serializes")
}

pub(crate) fn scrub_value(v: &mut serde_json::Value, scrubber: &Scrubber) {
    use serde_json::Value;
    match v {
        Value::String(s) => *s = scrubber.scrub(s),
        // A numeric secret equal to a byte count: the number cannot be half masked.
        Value::Number(n) => {
            let shown = n.to_string();
            if scrubber.scrub(&shown) != shown {
                *v = Value::String(MASK.to_string());
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| scrub_value(x, scrubber)),
        Value::Object(o) => o.values_mut().for_each(|x| scrub_value(x, scrubber)),
        Value::Bool(_) | Value::Null => {}
    }
}
