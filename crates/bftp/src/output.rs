//! What `bftp` prints: bftpd's JSON as-is (pretty) under `--json`, tables for people.

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use bftp_api::{EndpointView, JobView, MemberView, ProgressView, ReplyView, ReportView};

/// Writes to stdout; a closed pipe (`bftp status | head`) is not an error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// The JSON document re-indented, every field kept in its order, unknown ones included.
pub fn pretty_json(raw: &[u8]) -> anyhow::Result<String> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::pretty(&mut out);
    serde_transcode::transcode(&mut de, &mut ser)?;
    de.end()?;
    out.push(b'\n');
    Ok(String::from_utf8(out)?)
}

/// The JSON document on one line (a stream of snapshots, one per line), fields in order.
pub fn json_line(raw: &[u8]) -> anyhow::Result<String> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let mut out = Vec::new();
    serde_transcode::transcode(&mut de, &mut serde_json::Serializer::new(&mut out))?;
    de.end()?;
    out.push(b'\n');
    Ok(String::from_utf8(out)?)
}

/// Text from a server or the daemon, made safe for a terminal: control characters (escape
/// sequences, CR that overwrites a line) are shown escaped.
pub fn sanitize(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// [`sanitize`]d, and cut to `max` characters with an ellipsis.
pub fn clip(s: &str, max: usize) -> String {
    let s = sanitize(s);
    if s.chars().count() <= max {
        s
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Columns padded to their widest cell; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < widths.len() {
                l.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                l.push_str(cell);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `queued`, `running #3`, `finished: partial`, `cancelled`.
pub fn state_word(job: &JobView) -> String {
    match (job.state.as_str(), &job.outcome, job.attempt) {
        ("running", _, Some(n)) => format!("running #{n}"),
        ("cancelled", _, _) => "cancelled".to_string(),
        (state, Some(outcome), _) => format!("{state}: {outcome}"),
        (state, None, _) => state.to_string(),
    }
    .chars()
    .map(|c| if c.is_control() { '?' } else { c })
    .collect()
}

fn transfer(job: &JobView) -> String {
    match &job.destination {
        Some(d) => format!("{} → {}", sanitize(&job.source.url), sanitize(&d.url)),
        None => format!(
            "{} ({})",
            sanitize(&job.source.url),
            sanitize(&job.disposition)
        ),
    }
}

/// `51 s`, `3 min`, `5 h`, `2 days`: a duration as people say it, rounded down.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=89 => format!("{s} s"),
        90..=5399 => format!("{} min", s / 60),
        5400..=129_599 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

/// `in 51 s`, `3 min ago`, `now`: an RFC 3339 time of bftpd's relative to `now`; `None` for
/// text that is not such a time.
fn relative(at: &str, now: SystemTime) -> Option<String> {
    let t = humantime::parse_rfc3339(at.trim()).ok()?;
    Some(match t.duration_since(now) {
        Ok(ahead) if ahead >= Duration::from_secs(1) => format!("in {}", span(ahead)),
        Ok(_) => "now".to_string(),
        Err(e) if e.duration() < Duration::from_secs(1) => "now".to_string(),
        Err(e) => format!("{} ago", span(e.duration())),
    })
}

/// The time as bftpd gave it, with how far from `now` it is beside it when `now` is given:
/// `2026-12-01T08:00:00Z (in 51 s)`.
pub fn when(at: &str, now: Option<SystemTime>) -> String {
    let shown = sanitize(at);
    match now.and_then(|now| relative(at, now)) {
        Some(r) => format!("{shown} ({r})"),
        None => shown,
    }
}

/// `1.5 GB`, `52.4 MB`, `980 B`: decimal units, as transfer rates are usually given.
fn amount(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A file in flight: `transferring, 52.4 MB of 1.5 GB (3%), 4.1 MB/s, for 13 s (since
/// 2026-12-01T08:00:00Z, 13 s ago)`.
fn progress_line(p: &ProgressView, size: Option<u64>, now: Option<SystemTime>) -> String {
    let mut parts = vec![sanitize(&p.phase)];
    match (p.bytes_so_far, size) {
        (Some(b), Some(s)) if s > 0 => parts.push(format!(
            "{} of {} ({}%)",
            amount(b as f64),
            amount(s as f64),
            b.saturating_mul(100) / s
        )),
        (Some(b), _) => parts.push(format!("{} so far", amount(b as f64))),
        (None, _) => parts.push("bytes so far not visible".to_string()),
    }
    if let Some(r) = p.rate_bytes_per_second {
        parts.push(format!("{}/s", amount(r)));
    }
    parts.push(format!(
        "for {} (since {})",
        span(Duration::from_secs_f64(p.elapsed_seconds.max(0.0))),
        when(&p.started_at, now)
    ));
    parts.join(", ")
}

pub fn job_list(jobs: &[JobView]) -> String {
    job_list_at(jobs, Some(SystemTime::now()))
}

/// [`job_list`], with times relative to `now` beside the absolute ones (none for `None`).
pub fn job_list_at(jobs: &[JobView], now: Option<SystemTime>) -> String {
    if jobs.is_empty() {
        return "no jobs\n".to_string();
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.to_string(),
                state_word(j),
                j.next_attempt_at
                    .as_deref()
                    .map_or("-".into(), |t| when(t, now)),
                j.attempts.to_string(),
                transfer(j),
            ]
        })
        .collect();
    table(
        &["ID", "STATE", "NEXT ATTEMPT", "ATTEMPTS", "TRANSFER"],
        &rows,
    )
}

/// The URL (never with a password), and whether a password and an ACCT are set.
pub fn endpoint(e: &EndpointView) -> String {
    let mut s = sanitize(&e.url);
    let mut notes = Vec::new();
    if e.has_password {
        notes.push("password set");
    }
    if e.has_acct {
        notes.push("ACCT set");
    }
    if !notes.is_empty() {
        s.push_str(&format!(" ({})", notes.join(", ")));
    }
    s
}

fn reply(r: &Option<ReplyView>) -> String {
    match r {
        None => "-".to_string(),
        Some(r) => {
            let code = r.code.map_or("???".to_string(), |c| c.to_string());
            clip(&format!("{code} {}", r.text.trim()), 48)
        }
    }
}

fn bytes(m: &MemberView) -> String {
    // A file in flight: what its destination holds so far.
    let so_far = m.progress.as_ref().and_then(|p| p.bytes_so_far);
    match (m.bytes.or(so_far), m.size) {
        (Some(b), Some(s)) if b != s => format!("{b}/{s}"),
        (Some(b), _) => b.to_string(),
        (None, Some(s)) => format!("-/{s}"),
        (None, None) => "-".to_string(),
    }
}

/// Where the mailed report stands: `delivered 2026-11-30T14:00:00Z to a@b (2 tries)`.
/// How a file's last copy travelled, for its row: the path, and a relay's reason with the
/// reply or explanation behind it (a relay's count and hash get a line of their own).
fn route_cell(m: &MemberView) -> String {
    m.route.as_ref().map_or("-".to_string(), |r| {
        let path = bftp_api::RouteView {
            bytes: None,
            sha256: None,
            ..r.clone()
        };
        clip(&path.describe(), 60)
    })
}

/// Where an event's delivery to one webhook stands: `job.finished to https://h/in: gave_up
/// 2026-11-30T14:00:00Z after 4 tries: HTTP 500 ...` (the same fields `--json` shows).
pub fn delivery_line(e: &bftp_api::EventLogView, d: &bftp_api::DeliveryView) -> String {
    let tries = match d.tries {
        1 => "1 try".to_string(),
        n => format!("{n} tries"),
    };
    let mut l = format!(
        "{} to {}: {}",
        sanitize(&e.kind),
        sanitize(&d.target),
        sanitize(&d.state)
    );
    if let Some(at) = &d.at {
        l.push_str(&format!(" {}", sanitize(at)));
    }
    l.push_str(&format!(" after {tries}"));
    if let Some(err) = &d.last_error {
        l.push_str(&format!(": {}", sanitize(err)));
    }
    if let Some(next) = &d.next_try_at {
        l.push_str(&format!(", next try {}", sanitize(next)));
    }
    l
}

fn report_line(r: &ReportView) -> String {
    let to = r.recipients.join(", ");
    let tries = match r.tries {
        1 => "1 try".to_string(),
        n => format!("{n} tries"),
    };
    let line = match r.state.as_str() {
        "delivered" => format!(
            "delivered {} to {to} ({tries}), {}",
            r.at.as_deref().unwrap_or("?"),
            r.message_id
        ),
        "gave_up" => format!(
            "NOT delivered, given up {} after {tries}: {}",
            r.at.as_deref().unwrap_or("?"),
            r.last_error.as_deref().unwrap_or("?")
        ),
        "disabled" => "not sent: mail is disabled in bftpd's config".to_string(),
        _ => {
            let mut l = format!("pending for {to}");
            if r.tries > 0 {
                l.push_str(&format!(
                    ", {tries} failed (last: {})",
                    r.last_error.as_deref().unwrap_or("?")
                ));
            }
            if let Some(next) = &r.next_try_at {
                l.push_str(&format!(", next try {next}"));
            }
            l
        }
    };
    sanitize(&line)
}

/// `: 60 succeeded, 1 refused`: how many files are in each state, in the ledger's words;
/// empty for no files.
fn state_counts(members: &[MemberView]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for m in members {
        let state = sanitize(&m.state);
        match counts.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    const ORDER: [&str; 7] = [
        "succeeded",
        "pending",
        "failed_permanent",
        "failed_retries_exhausted",
        "cancelled",
        "uncertain",
        "refused",
    ];
    counts.sort_by_key(|(s, _)| ORDER.iter().position(|o| o == s).unwrap_or(ORDER.len()));
    let words: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    if words.is_empty() {
        String::new()
    } else {
        format!(": {}", words.join(", "))
    }
}

/// One job: its parameters, the per-file ledger and the history.
pub fn job_detail(job: &JobView) -> String {
    job_detail_at(job, Some(SystemTime::now()))
}

/// The data path a job runs with: what it asked for, or `default (auto)`; where the daemon
/// runs it otherwise (it forbids relays now), both.
pub fn data_path(job: &JobView) -> String {
    let path = sanitize(&job.data_path);
    match job.data_path_asked.as_deref().map(sanitize) {
        Some(asked) if asked == path || path.is_empty() => asked,
        Some(asked) => format!("{path} (asked for {asked}; this daemon relays nothing)"),
        None if path.is_empty() => "default".to_string(),
        None => format!("default ({path})"),
    }
}

/// [`job_detail`], with times relative to `now` beside the absolute ones (none for `None`).
// Long on purpose: the layout of `bftp status ID` from top to bottom, one block per
// section of the view.
pub fn job_detail_at(job: &JobView, now: Option<SystemTime>) -> String {
    let opt = |o: &Option<String>| o.as_deref().map_or("-".to_string(), |t| when(t, now));
    let mut fields: Vec<(&str, String)> = vec![
        ("state", state_word(job)),
        ("source", endpoint(&job.source)),
    ];
    if let Some(d) = &job.destination {
        fields.push(("destination", endpoint(d)));
    }
    fields.extend([
        (
            "transfer",
            sanitize(&format!(
                "{}, {}, TYPE {}, MODE {}, STRU {}",
                job.disposition, job.dest_command, job.transfer_type, job.mode, job.structure
            )),
        ),
        ("start", when(&job.start_at, now)),
        ("next attempt", opt(&job.next_attempt_at)),
        ("attempts", job.attempts.to_string()),
    ]);
    if let Some(w) = &job.waiting {
        // A start gate (RULES.md §16.4, §16.5): a closed window, a server that is down.
        fields.push(("waiting", sanitize(&w.text)));
    }
    if let Some(node) = &job.node {
        // Several nodes on one store: which one runs it.
        fields.push(("node", sanitize(node)));
    }
    fields.extend([
        (
            "retry",
            sanitize(&format!(
                "first {}, factor {}, cap {}, at most {} attempts, deadline {}",
                job.retry.first_interval,
                job.retry.factor,
                job.retry.cap,
                job.retry.max_attempts,
                job.retry.deadline
            )),
        ),
        (
            "notify",
            if job.notify.is_empty() {
                "-".to_string()
            } else {
                sanitize(&job.notify.join(", "))
            },
        ),
        (
            "keyword",
            if job.has_keyword { "yes" } else { "no" }.to_string(),
        ),
        (
            "proof",
            match &job.proof {
                Some(p) => format!("at least {}", sanitize(p)),
                None => "the strongest the servers allow".to_string(),
            },
        ),
        ("data path", data_path(job)),
        ("owner uid", job.owner_uid.to_string()),
        ("created", when(&job.created_at, now)),
        ("updated", when(&job.updated_at, now)),
        ("finished", opt(&job.finished_at)),
    ]);
    if let Some(r) = &job.report {
        fields.push(("report", report_line(r)));
    }
    for e in &job.events {
        for d in &e.deliveries {
            fields.push(("webhook", delivery_line(e, d)));
        }
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!("job {}\n", job.id);
    for (k, v) in &fields {
        out.push_str(&format!("  {k:<width$}  {v}\n"));
    }

    out.push_str(&format!(
        "\nfiles ({}{}):\n",
        job.members.len(),
        state_counts(&job.members)
    ));
    if !job.members.is_empty() {
        let rows: Vec<Vec<String>> = job
            .members
            .iter()
            .map(|m| {
                vec![
                    m.index.to_string(),
                    clip(&m.name, 40),
                    sanitize(&m.state),
                    m.proof.as_deref().map_or("-".to_string(), sanitize),
                    route_cell(m),
                    m.attempts.to_string(),
                    bytes(m),
                    reply(&m.source_reply),
                    reply(&m.dest_reply),
                    m.detail.as_deref().map_or(String::new(), |d| clip(d, 60)),
                ]
            })
            .collect();
        let t = table(
            &[
                "#",
                "NAME",
                "STATE",
                "PROOF",
                "ROUTE",
                "ATTEMPTS",
                "BYTES",
                "SOURCE REPLY",
                "DESTINATION REPLY",
                "DETAIL",
            ],
            &rows,
        );
        for l in t.lines() {
            out.push_str(&format!("  {l}\n"));
        }
        for m in &job.members {
            if let Some(r) = m
                .route
                .as_ref()
                .filter(|r| r.bytes.is_some() || r.sha256.is_some())
            {
                out.push_str(&format!(
                    "  route #{} {}: {}\n",
                    m.index,
                    clip(&m.name, 40),
                    sanitize(&r.describe())
                ));
            }
        }
        for m in &job.members {
            if let Some(p) = &m.progress {
                out.push_str(&format!(
                    "  copying #{} {}: {}\n",
                    m.index,
                    clip(&m.name, 40),
                    progress_line(p, m.size, now)
                ));
            }
        }
    }

    if !job.history.is_empty() {
        out.push_str("\nhistory:\n");
        for e in &job.history {
            let detail = e
                .detail
                .as_deref()
                .map_or(String::new(), |d| format!("  {}", sanitize(d)));
            out.push_str(&format!(
                "  {}  {}{detail}\n",
                sanitize(&e.at),
                sanitize(&e.event)
            ));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bftp_api::{EventView, RetryView};

    pub(crate) fn job(id: u64) -> JobView {
        let ep = |host: &str, path: &str| EndpointView {
            host: host.into(),
            port: 21,
            user: "alice".into(),
            path: path.into(),
            has_password: true,
            has_acct: false,
            url: format!("ftp://alice@{host}:21/{path}"),
        };
        JobView {
            waiting: None,
            id,
            owner_uid: 1000,
            state: "queued".into(),
            outcome: None,
            next_attempt_at: Some("2026-12-01T08:00:00Z".into()),
            attempt: None,
            attempts: 1,
            created_at: "2026-12-01T07:00:00Z".into(),
            updated_at: "2026-12-01T07:10:00Z".into(),
            finished_at: None,
            source: ep("src", "pub/*.csv"),
            destination: Some(ep("dst", "in")),
            disposition: "copy".into(),
            dest_command: "replace".into(),
            transfer_type: "I".into(),
            mode: "S".into(),
            structure: "F".into(),
            start_at: "2026-12-01T07:00:00Z".into(),
            retry: RetryView {
                first_interval: "10m".into(),
                factor: 2.0,
                cap: "4h".into(),
                max_attempts: 20,
                deadline: "3days".into(),
            },
            notify: vec!["alice@example.org".into()],
            has_keyword: true,
            proof: None,
            recursive: false,
            data_path: String::new(),
            data_path_asked: None,
            members: vec![MemberView {
                index: 0,
                name: "a.csv".into(),
                state: "pending".into(),
                attempts: 1,
                size: Some(10),
                bytes: Some(4),
                source_reply: Some(ReplyView {
                    code: Some(426),
                    text: "Connection closed\r\n\x1b[31m".into(),
                }),
                dest_reply: None,
                detail: None,
                updated_at: "2026-12-01T07:10:00Z".into(),
                proof: None,
                progress: None,
                tls: None,
                route: None,
            }],
            counts: Default::default(),
            history: vec![EventView {
                at: "2026-12-01T07:00:00Z".into(),
                event: "submitted".into(),
                detail: None,
            }],
            report: None,
            node: None,
            watch: None,
            events: vec![],
        }
    }

    #[test]
    fn detail_shows_each_webhook_delivery_with_why() {
        let mut j = job(9);
        assert!(!job_detail(&j).contains("webhook"));
        j.events = vec![bftp_api::EventLogView {
            seq: 1,
            id: "job-9-final".into(),
            kind: "job.finished".into(),
            created_at: "2026-12-01T07:10:00Z".into(),
            job: Some(9),
            watch: None,
            member: None,
            owner_uid: 1000,
            deliveries: vec![bftp_api::DeliveryView {
                target: "https://h.example/in".into(),
                state: "gave_up".into(),
                tries: 4,
                next_try_at: None,
                at: Some("2026-12-01T08:00:00Z".into()),
                last_error: Some("HTTP 500\x1b[31m (gave up)".into()),
            }],
        }];
        let d = job_detail_at(&j, None);
        assert!(
            d.contains("webhook       job.finished to https://h.example/in: gave_up 2026-12-01T08:00:00Z after 4 tries: HTTP 500"),
            "{d}"
        );
        assert!(!d.contains('\x1b'), "{d}");
    }

    #[test]
    fn detail_says_where_the_report_stands() {
        let mut j = job(9);
        assert!(
            !job_detail(&j).contains("report"),
            "no report before the job is final"
        );
        let mut r = ReportView {
            state: "pending".into(),
            message_id: "<bftp.job-9.1@localhost>".into(),
            recipients: vec!["alice@example.org".into()],
            tries: 2,
            next_try_at: Some("2026-12-01T09:00:00Z".into()),
            at: None,
            last_error: Some("connection refused\r\nX-Injected: 1".into()),
        };
        j.report = Some(r.clone());
        let d = job_detail(&j);
        assert!(
            d.contains("report        pending for alice@example.org, 2 tries failed (last: connection refused")
                && d.contains("next try 2026-12-01T09:00:00Z"),
            "{d}"
        );
        r.state = "delivered".into();
        r.at = Some("2026-12-01T09:00:01Z".into());
        j.report = Some(r.clone());
        assert!(job_detail(&j).contains(
            "delivered 2026-12-01T09:00:01Z to alice@example.org (2 tries), <bftp.job-9.1@localhost>"
        ));
        r.state = "gave_up".into();
        r.last_error = Some("550 no such user".into());
        j.report = Some(r);
        assert!(job_detail(&j).contains(
            "NOT delivered, given up 2026-12-01T09:00:01Z after 2 tries: 550 no such user"
        ));
    }

    #[test]
    fn times_show_how_far_they_are_from_now() {
        let now = humantime::parse_rfc3339("2026-12-01T07:59:09Z").unwrap();
        assert_eq!(
            when("2026-12-01T08:00:00Z", Some(now)),
            "2026-12-01T08:00:00Z (in 51 s)"
        );
        assert_eq!(
            when("2026-12-01T07:56:00Z", Some(now)),
            "2026-12-01T07:56:00Z (3 min ago)"
        );
        assert_eq!(
            when("2026-12-01T07:59:09Z", Some(now)),
            "2026-12-01T07:59:09Z (now)"
        );
        assert_eq!(
            when("2026-11-28T07:59:09Z", Some(now)),
            "2026-11-28T07:59:09Z (3 days ago)"
        );
        assert_eq!(when("2026-12-01T08:00:00Z", None), "2026-12-01T08:00:00Z");
        assert_eq!(when("not a time", Some(now)), "not a time");
        let t = job_list_at(&[job(7)], Some(now));
        assert!(t.contains("2026-12-01T08:00:00Z (in 51 s)"), "{t}");
        let d = job_detail_at(&job(7), Some(now));
        assert!(
            d.contains("next attempt  2026-12-01T08:00:00Z (in 51 s)"),
            "{d}"
        );
        assert!(
            d.contains("created       2026-12-01T07:00:00Z (59 min ago)"),
            "{d}"
        );
    }

    #[test]
    fn a_file_in_flight_shows_its_progress() {
        let now = humantime::parse_rfc3339("2026-12-01T07:10:13Z").unwrap();
        let mut j = job(7);
        j.state = "running".into();
        j.members[0].bytes = None;
        j.members[0].size = Some(1_500_000_000);
        j.members[0].progress = Some(ProgressView {
            phase: "transferring".into(),
            started_at: "2026-12-01T07:10:00Z".into(),
            elapsed_seconds: 13.2,
            transferring_since: Some("2026-12-01T07:10:01Z".into()),
            bytes_so_far: Some(52_400_000),
            bytes_seen_at: Some("2026-12-01T07:10:13Z".into()),
            rate_bytes_per_second: Some(4_100_000.0),
        });
        let d = job_detail_at(&j, Some(now));
        assert!(d.contains("52400000/1500000000"), "{d}");
        assert!(
            d.contains("copying #0 a.csv: transferring, 52.4 MB of 1.5 GB (3%), 4.1 MB/s, for 13 s (since 2026-12-01T07:10:00Z (13 s ago))"),
            "{d}"
        );
    }

    /// Issue 29: the data path a job asked for, or the daemon's default, by name.
    #[test]
    fn detail_names_the_data_path() {
        let mut j = job(7);
        j.data_path = "auto".into();
        assert!(
            job_detail(&j).contains("data path     default (auto)\n"),
            "{}",
            job_detail(&j)
        );
        j.data_path = "relay".into();
        j.data_path_asked = Some("relay".into());
        assert!(
            job_detail(&j).contains("data path     relay\n"),
            "{}",
            job_detail(&j)
        );
        j.data_path = "fxp".into();
        assert!(
            job_detail(&j)
                .contains("data path     fxp (asked for relay; this daemon relays nothing)\n"),
            "{}",
            job_detail(&j)
        );
    }

    #[test]
    fn detail_counts_refused_files() {
        let mut j = job(7);
        let mut refused = j.members[0].clone();
        refused.index = 1;
        refused.name = "bad\\rname.csv".into();
        refused.state = "refused".into();
        refused.detail = Some("refused: name contains the byte 0x0d".into());
        let mut ok = j.members[0].clone();
        ok.index = 2;
        ok.state = "succeeded".into();
        j.members.extend([refused, ok]);
        let d = job_detail(&j);
        assert!(
            d.contains("files (3: 1 succeeded, 1 pending, 1 refused):"),
            "{d}"
        );
        assert!(d.contains("bad\\rname.csv") && d.contains("refused"), "{d}");
    }

    #[test]
    fn pretty_json_keeps_order_and_unknown_fields() {
        let raw = br#"{"z":1,"a":{"new_field":[true,null]},"m":"x"}"#;
        let p = pretty_json(raw).unwrap();
        assert_eq!(p, "{\n  \"z\": 1,\n  \"a\": {\n    \"new_field\": [\n      true,\n      null\n    ]\n  },\n  \"m\": \"x\"\n}\n");
        assert!(pretty_json(b"{} trailing").is_err());
    }

    #[test]
    fn list_table() {
        let mut running = job(8);
        running.state = "running".into();
        running.attempt = Some(2);
        running.next_attempt_at = None;
        let mut finished = job(9);
        finished.state = "finished".into();
        finished.outcome = Some("partial".into());
        finished.destination = None;
        finished.disposition = "delete".into();
        let t = job_list_at(&[job(7), running, finished], None);
        let want = "\
ID  STATE              NEXT ATTEMPT          ATTEMPTS  TRANSFER
7   queued             2026-12-01T08:00:00Z  1         ftp://alice@src:21/pub/*.csv → ftp://alice@dst:21/in
8   running #2         -                     1         ftp://alice@src:21/pub/*.csv → ftp://alice@dst:21/in
9   finished: partial  2026-12-01T08:00:00Z  1         ftp://alice@src:21/pub/*.csv (delete)
";
        assert_eq!(t, want);
        assert_eq!(job_list(&[]), "no jobs\n");
    }

    #[test]
    fn detail_shows_ledger_and_escapes_server_text() {
        let d = job_detail(&job(7));
        assert!(d.contains("files (1: 1 pending):"), "{d}");
        assert!(d.contains("a.csv"), "{d}");
        assert!(d.contains("4/10"), "{d}");
        assert!(d.contains("426 Connection closed"), "{d}");
        assert!(!d.contains('\x1b') && !d.contains('\r'), "{d}");
        assert!(d.contains("history:") && d.contains("submitted"), "{d}");
        assert!(d.contains("(password set)"), "{d}");
    }

    /// Issue 29: each file's row says how its last copy travelled, a relay with its reason
    /// and reply; a relay's count and hash are a line under the table; server text is
    /// escaped.
    #[test]
    fn detail_shows_each_files_route() {
        use bftp_api::RouteView;
        let mut j = job(7);
        let d = job_detail(&j);
        assert!(d.contains("ROUTE"), "{d}");
        assert!(!d.contains("route #"), "{d}");
        j.members[0].route = Some(RouteView {
            path: "fxp_roles_swapped".into(),
            ..RouteView::default()
        });
        let mut relayed = j.members[0].clone();
        relayed.index = 1;
        relayed.name = "b.csv".into();
        relayed.route = Some(RouteView {
            path: "relay".into(),
            reason: Some("refused".into()),
            detail: Some("425 Can't open data connection.\r\n\x1b[2J".into()),
            seen: None,
            bytes: Some(2048),
            sha256: Some("ab".repeat(32)),
        });
        j.members.push(relayed);
        let d = job_detail(&j);
        assert!(d.contains("fxp roles swapped"), "{d}");
        assert!(
            d.contains("relay (refused: 425 Can't open data connection.\\r\\n\\u{1b}[2J)"),
            "{d}"
        );
        assert!(
            d.contains(&format!(
                "route #1 b.csv: relay (refused: 425 Can't open data connection.\\r\\n\\u{{1b}}[2J); 2048 bytes relayed, SHA-256 {}",
                "ab".repeat(32)
            )),
            "{d}"
        );
        assert!(!d.contains('\x1b') && !d.contains('\r'), "{d}");
    }
}
