//! `bftp transfer`: a foreground copy without the queue. bftpd answers with a stream of
//! [`TransferEvent`]s, one JSON object a line; this reads it as it comes, shows the file in
//! progress, a line per finished file and the summary. Closing the connection (Ctrl-C)
//! aborts the copy in bftpd.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use bftp_api::{FileResult, ReplyView, TransferEvent, TransferSummary, API_PREFIX};
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use crate::client::Client;
use crate::exit::Exit;
use crate::output::{clip, sanitize};
use crate::request::{Prepared, RequestArgs};

/// No `Debug`: the URLs may hold passwords.
#[derive(Args)]
#[command(
    mut_arg("destination", |a| a
        .required(true)
        .help("Where they go: a file name or a directory (a directory for a wildcard source or --recursive)")),
    // A copy always has a destination.
    mut_arg("delete", |a| a.hide(true)),
)]
pub struct TransferArgs {
    #[command(flatten)]
    pub request: RequestArgs,
}

/// The longest event line accepted; a summary with its transcript is far below it.
const MAX_LINE: usize = 16 << 20;

/// Cuts a byte stream into lines, whatever frames it arrives in: a line may be split across
/// frames, and a frame may hold several lines. Blank lines are skipped, a CR before the LF
/// dropped.
pub struct Lines {
    partial: Vec<u8>,
    max: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub struct LineTooLong(pub usize);

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bftpd sent an event line longer than {} bytes", self.0)
    }
}

impl std::error::Error for LineTooLong {}

impl Lines {
    pub fn new(max: usize) -> Self {
        Lines {
            partial: Vec::new(),
            max,
        }
    }

    /// The lines that `chunk` completes; the rest waits for the next chunk.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<Vec<Vec<u8>>, LineTooLong> {
        let mut lines = Vec::new();
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&chunk[..i]);
            self.check()?;
            lines.extend(Self::complete(std::mem::take(&mut self.partial)));
            chunk = &chunk[i + 1..];
        }
        self.partial.extend_from_slice(chunk);
        self.check()?;
        Ok(lines)
    }

    /// The last line, when the stream ended without a newline after it.
    pub fn finish(self) -> Option<Vec<u8>> {
        Self::complete(self.partial)
    }

    fn check(&self) -> Result<(), LineTooLong> {
        if self.partial.len() > self.max {
            Err(LineTooLong(self.max))
        } else {
            Ok(())
        }
    }

    fn complete(mut line: Vec<u8>) -> Option<Vec<u8>> {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        (!line.iter().all(u8::is_ascii_whitespace)).then_some(line)
    }
}

/// `7s`, `2m05s`, `1h02m05s`.
fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

fn plural(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// The file in progress: name, phase, time since its first phase. At most 79 columns, so
/// that a terminal does not wrap the line that `\r` rewrites.
fn progress_line(name: &str, phase: &str, d: Duration) -> String {
    format!("{}  {}  {}", clip(name, 50), clip(phase, 14), elapsed(d))
}

fn reply_text(side: &str, r: &ReplyView) -> String {
    let code = r.code.map_or("???".to_string(), |c| c.to_string());
    clip(&format!("{side} {code} {}", r.text.trim()), 100)
}

/// Why a file failed: the negative replies, then the engine's explanation where it adds to
/// them.
fn failure_reason(r: &FileResult) -> String {
    let negative: Vec<(&str, &ReplyView)> =
        [("source", &r.source_reply), ("destination", &r.dest_reply)]
            .into_iter()
            .filter_map(|(side, reply)| {
                let reply = reply.as_ref()?;
                let positive = reply.code.is_some_and(|c| (100..400).contains(&c));
                (!positive).then_some((side, reply))
            })
            .collect();
    let mut parts: Vec<String> = negative
        .iter()
        .map(|(side, reply)| reply_text(side, reply))
        .collect();
    if let Some(d) = &r.detail {
        if !negative
            .iter()
            .any(|(_, reply)| d.contains(reply.text.trim()))
        {
            parts.push(clip(d, 160));
        }
    }
    parts.join("; ")
}

/// One finished file: mark, name, state, bytes, seconds, then the evidence of the copy or
/// why it failed.
fn file_line(r: &FileResult) -> String {
    let ok = r.state == "succeeded";
    let bytes = r.bytes.map_or("-".to_string(), |b| plural(b, "byte"));
    let mut why = if ok {
        r.evidence
            .as_deref()
            .map_or(String::new(), |e| clip(e, 100))
    } else {
        failure_reason(r)
    };
    if let Some(name) = &r.stored_as {
        why.push_str(&format!("; stored as {}", clip(name, 60)));
    }
    if !r.fallbacks.is_empty() {
        why.push_str(&format!(
            "; fallbacks: {}",
            clip(&r.fallbacks.join(", "), 80)
        ));
    }
    if let Some(route) = &r.route {
        why.push_str(&format!("; route: {}", clip(&route.describe(), 200)));
    }
    let line = format!(
        "{}  {}  {}  {bytes}  {:.1} s  {}",
        match r.state.as_str() {
            "succeeded" => "ok  ",
            // A tree's link or special file: not copied by rule, reported.
            "refused" => "SKIP",
            _ => "FAIL",
        },
        clip(&r.name, 60),
        sanitize(&r.state),
        r.seconds,
        why.trim_start_matches("; "),
    );
    format!("{}\n", line.trim_end())
}

fn listed_text(files: &[String], rejected: &[String]) -> String {
    let mut out = format!("{} to transfer\n", plural(files.len() as u64, "file"));
    if !rejected.is_empty() {
        out.push_str(&format!(
            "refused {} from the listing as unsafe:\n",
            plural(rejected.len() as u64, "name")
        ));
        for r in rejected {
            out.push_str(&format!("  {}\n", clip(r, 160)));
        }
    }
    out
}

fn summary_text(s: &TransferSummary) -> String {
    let rate = if s.seconds > 0.0 {
        format!("{:.2} MB/s", s.bytes as f64 / 1e6 / s.seconds)
    } else {
        "- MB/s".to_string()
    };
    let refused = if s.refused > 0 {
        format!(", {} refused", s.refused)
    } else {
        String::new()
    };
    let mut out = format!(
        "{}: {} succeeded, {} failed{refused}, {} in {:.1} s, {rate}\n",
        plural(s.files, "file"),
        s.succeeded,
        s.failed,
        plural(s.bytes, "byte"),
        s.seconds,
    );
    if let Some(e) = &s.error {
        out.push_str(&format!("error: {}\n", sanitize(e)));
    }
    if !s.transcript.is_empty() {
        out.push_str("transcript:\n");
        for l in &s.transcript {
            out.push_str(&format!("  {}\n", sanitize(l)));
        }
    }
    out
}

/// 0 only when bftpd says the whole transfer went through and every file reported succeeded.
fn exit_for(every_file_succeeded: bool, s: &TransferSummary) -> Exit {
    let clean = s.error.is_none() && s.failed == 0 && s.succeeded == s.files;
    if every_file_succeeded && clean {
        Exit::Success
    } else {
        Exit::Problem
    }
}

/// Writes, where a closed pipe (`| head`) is not worth stopping a transfer for.
fn write(w: &mut impl Write, text: &str) -> io::Result<()> {
    match w.write_all(text.as_bytes()).and_then(|()| w.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

struct Current {
    name: String,
    phase: String,
    since: Instant,
}

/// What the user sees, fed one event line at a time: results and the summary on `out`,
/// progress on `err`, rewritten in place when `live` (a terminal). Under `json`, `out` gets
/// each line as received and `err` nothing.
struct View<O: Write, E: Write> {
    out: O,
    err: E,
    json: bool,
    live: bool,
    current: Option<Current>,
    /// A live line is on the terminal and must be erased before anything else is written.
    shown: bool,
    every_file_succeeded: bool,
    summary: Option<TransferSummary>,
    warned: bool,
}

impl<O: Write, E: Write> View<O, E> {
    fn new(out: O, err: E, json: bool, live: bool) -> Self {
        View {
            out,
            err,
            json,
            live: live && !json,
            current: None,
            shown: false,
            every_file_succeeded: true,
            summary: None,
            warned: false,
        }
    }

    fn line(&mut self, raw: &[u8], now: Instant) -> io::Result<()> {
        if self.json {
            // Flushed once per chunk received ([`View::flush`]): one write for the events
            // bftpd sent together.
            match self
                .out
                .write_all(raw)
                .and_then(|()| self.out.write_all(b"\n"))
            {
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(e),
                _ => {}
            }
        }
        let event = match serde_json::from_slice::<TransferEvent>(raw) {
            Ok(e) => e,
            Err(_) if self.json || self.warned => return Ok(()),
            Err(_) => {
                // A newer bftpd may know events this bftp does not: skip them, say so once.
                self.warned = true;
                let text = String::from_utf8_lossy(raw);
                let note = format!(
                    "bftp: skipping an event line not understood: {}\n",
                    clip(&text, 100)
                );
                self.clear()?;
                write(&mut self.err, &note)?;
                return self.draw(now);
            }
        };
        match event {
            TransferEvent::Listed { files, rejected } => {
                self.say(&listed_text(&files, &rejected), now)
            }
            TransferEvent::Progress { name, phase } => {
                let since = match &self.current {
                    Some(c) if c.name == name => c.since,
                    _ => now,
                };
                self.current = Some(Current { name, phase, since });
                if self.live {
                    self.draw(now)
                } else if self.json {
                    Ok(())
                } else {
                    let c = self.current.as_ref().expect("just set");
                    let l = format!("{}\n", progress_line(&c.name, &c.phase, now - c.since));
                    write(&mut self.err, &l)
                }
            }
            TransferEvent::File(r) => {
                self.every_file_succeeded &= r.state == "succeeded";
                // Files are copied one after the other: a result ends the one in progress,
                // whatever name its progress gave (bftpd may name the full source path).
                self.current = None;
                self.say(&file_line(&r), now)
            }
            TransferEvent::Summary(s) => {
                self.current = None;
                let text = summary_text(&s);
                self.summary = Some(s);
                self.say(&text, now)
            }
        }
    }

    /// Text for `out`, with the live line out of its way.
    fn say(&mut self, text: &str, now: Instant) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        self.clear()?;
        write(&mut self.out, text)?;
        self.draw(now)
    }

    /// Rewrites the live line, if there is one to show.
    fn draw(&mut self, now: Instant) -> io::Result<()> {
        let Some(c) = self.current.as_ref().filter(|_| self.live) else {
            return Ok(());
        };
        let line = progress_line(&c.name, &c.phase, now - c.since);
        self.shown = true;
        write(&mut self.err, &format!("\r{line}\x1b[K"))
    }

    /// Writes out what [`View::line`] buffered (the JSON lines).
    fn flush(&mut self) -> io::Result<()> {
        match self.out.flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            r => r,
        }
    }

    fn clear(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.shown) {
            write(&mut self.err, "\r\x1b[K")?;
        }
        Ok(())
    }

    fn interrupted(&mut self) -> Exit {
        let _ = self.flush();
        let _ = self.clear();
        let _ = write(
            &mut self.err,
            "bftp: interrupted: the connection to bftpd is closed, which aborts the transfer; \
             files not reported above were not copied, or only in part\n",
        );
        Exit::Interrupted
    }

    fn finish(mut self) -> anyhow::Result<Exit> {
        self.flush()?;
        self.clear()?;
        match &self.summary {
            Some(s) => Ok(exit_for(self.every_file_succeeded, s)),
            None => anyhow::bail!(
                "bftpd ended the transfer without its summary: files not reported above may \
                 be copied in part, or not at all"
            ),
        }
    }
}

/// Runs the transfer to its end, printing as it goes; the exit code says how it went.
pub async fn run(client: &Client, prepared: &Prepared, json: bool) -> anyhow::Result<Exit> {
    // Caught from before the connection exists: a Ctrl-C then closes it, and bftp exits 130.
    let mut interrupt = signal(SignalKind::interrupt()).context("catching Ctrl-C")?;
    let body = serde_json::to_vec(&prepared.request).context("encoding the request")?;
    let live = !json && io::stderr().is_terminal();
    let mut view = View::new(io::BufWriter::new(io::stdout()), io::stderr(), json, live);
    let path = format!("{API_PREFIX}/transfer");
    let mut stream = tokio::select! {
        s = client.post_streaming(&path, body) => s.context("starting the transfer")?,
        _ = interrupt.recv() => return Ok(view.interrupted()),
    };
    let mut lines = Lines::new(MAX_LINE);
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            chunk = stream.next_chunk() => match chunk {
                Ok(Some(bytes)) => match lines.push(&bytes) {
                    Ok(complete) => {
                        for line in complete {
                            view.line(&line, Instant::now())?;
                        }
                        view.flush()?;
                    }
                    Err(e) => {
                        view.clear()?;
                        return Err(e.into());
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    view.clear()?;
                    return Err(e.context(
                        "the connection to bftpd broke during the transfer: files not \
                         reported above may be copied in part, or not at all",
                    ));
                }
            },
            _ = interrupt.recv() => {
                drop(stream);
                return Ok(view.interrupted());
            }
            _ = ticks.tick(), if live => view.draw(Instant::now())?,
        }
    }
    if let Some(last) = lines.finish() {
        view.line(&last, Instant::now())?;
    }
    view.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut l = Lines::new(1 << 10);
        let mut out: Vec<String> = chunks
            .iter()
            .flat_map(|c| l.push(c).unwrap())
            .map(|b| String::from_utf8(b).unwrap())
            .collect();
        out.extend(l.finish().map(|b| String::from_utf8(b).unwrap()));
        out
    }

    #[test]
    fn lines_are_whole_whatever_the_frames() {
        let want = vec![r#"{"a":1}"#.to_string(), r#"{"b":"é"}"#.to_string()];
        let stream = "{\"a\":1}\n{\"b\":\"é\"}\n".as_bytes();
        // Every way of cutting the stream in two, and in three, gives the same lines.
        for i in 0..=stream.len() {
            assert_eq!(split(&[&stream[..i], &stream[i..]]), want, "cut at {i}");
            for j in i..=stream.len() {
                let got = split(&[&stream[..i], &stream[i..j], &stream[j..]]);
                assert_eq!(got, want, "cut at {i} and {j}");
            }
        }
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(split(&bytewise), want);
    }

    #[test]
    fn crlf_blank_lines_and_a_last_line_without_newline() {
        assert_eq!(
            split(&[b"a\r\n\r", b"\n  \nb\n", b"c"]),
            vec!["a", "b", "c"]
        );
        assert_eq!(split(&[b"", b"\n\n"]), Vec::<String>::new());
        let mut l = Lines::new(1 << 10);
        assert_eq!(l.push(b"x\ny").unwrap(), vec![b"x".to_vec()]);
        assert_eq!(l.push(b"z").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(l.finish(), Some(b"yz".to_vec()));
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut l = Lines::new(8);
        assert!(l.push(b"12345").unwrap().is_empty());
        assert_eq!(l.push(b"6789"), Err(LineTooLong(8)));
        let mut l = Lines::new(8);
        assert_eq!(l.push(b"123456789\n"), Err(LineTooLong(8)));
        let mut l = Lines::new(8);
        assert_eq!(l.push(b"12345678\n").unwrap(), vec![b"12345678".to_vec()]);
    }

    #[test]
    fn elapsed_times() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (125, "2m05s"),
            (3725, "1h02m05s"),
        ];
        for (secs, want) in cases {
            assert_eq!(elapsed(Duration::from_secs(secs)), want);
        }
        assert_eq!(elapsed(Duration::from_millis(1999)), "1s");
    }

    fn reply(code: u16, text: &str) -> Option<ReplyView> {
        Some(ReplyView {
            code: Some(code),
            text: text.into(),
        })
    }

    fn file(name: &str, state: &str) -> FileResult {
        FileResult {
            name: name.into(),
            state: state.into(),
            bytes: None,
            evidence: None,
            stored_as: None,
            source_reply: reply(226, "Transfer complete"),
            dest_reply: reply(226, "Transfer complete"),
            fallbacks: vec![],
            detail: None,
            seconds: 0.25,
            tls: None,
            proof: None,
            route: None,
        }
    }

    #[test]
    fn result_lines() {
        let mut ok = file("a.bin", "succeeded");
        ok.bytes = Some(1234);
        ok.evidence = Some("sizes equal (1234 bytes)".into());
        assert_eq!(
            file_line(&ok),
            "ok    a.bin  succeeded  1234 bytes  0.2 s  sizes equal (1234 bytes)\n"
        );
        ok.stored_as = Some("a.bin.1".into());
        ok.fallbacks = vec!["SwapRoles".into()];
        assert_eq!(
            file_line(&ok),
            "ok    a.bin  succeeded  1234 bytes  0.2 s  sizes equal (1234 bytes); stored as a.bin.1; fallbacks: SwapRoles\n"
        );

        let mut bad = file("b\r\x1b[2Jin", "failed_permanent");
        bad.dest_reply = reply(553, "Could not create file.\r\n");
        bad.detail = Some("destination refused STOR: 553 Could not create file.".into());
        assert_eq!(
            file_line(&bad),
            "FAIL  b\\r\\u{1b}[2Jin  failed_permanent  -  0.2 s  destination 553 Could not create file.\n"
        );

        let mut sizes = file("c", "failed_transient");
        sizes.detail = Some("sizes differ: source 10, destination 4".into());
        sizes.source_reply = reply(426, "Connection closed");
        assert_eq!(
            file_line(&sizes),
            "FAIL  c  failed_transient  -  0.2 s  source 426 Connection closed; sizes differ: source 10, destination 4\n"
        );
        let mut none = file("d", "failed_transient");
        none.source_reply = None;
        none.dest_reply = Some(ReplyView {
            code: None,
            text: "garbage".into(),
        });
        assert_eq!(
            file_line(&none),
            "FAIL  d  failed_transient  -  0.2 s  destination ??? garbage\n"
        );
    }

    /// Issue 29: a file's line says how it travelled, a relay with the refusing reply.
    #[test]
    fn a_result_line_names_the_route() {
        use bftp_api::RouteView;
        let mut ok = file("a.bin", "succeeded");
        ok.bytes = Some(4);
        ok.route = Some(Box::new(RouteView {
            path: "fxp".into(),
            ..RouteView::default()
        }));
        assert_eq!(
            file_line(&ok),
            "ok    a.bin  succeeded  4 bytes  0.2 s  route: fxp\n"
        );
        ok.route = Some(Box::new(RouteView {
            path: "relay".into(),
            reason: Some("refused".into()),
            detail: Some("425 no\x1b".into()),
            bytes: Some(4),
            ..RouteView::default()
        }));
        assert_eq!(
            file_line(&ok),
            "ok    a.bin  succeeded  4 bytes  0.2 s  route: relay (refused: 425 no\\u{1b}); 4 bytes relayed\n"
        );
    }

    fn summary(files: u32, succeeded: u32, error: Option<&str>) -> TransferSummary {
        TransferSummary {
            files,
            succeeded,
            failed: files - succeeded,
            refused: 0,
            bytes: 5_000_000,
            seconds: 2.0,
            error: error.map(String::from),
            transcript: vec![],
        }
    }

    #[test]
    fn summary_lines() {
        assert_eq!(
            summary_text(&summary(3, 2, None)),
            "3 files: 2 succeeded, 1 failed, 5000000 bytes in 2.0 s, 2.50 MB/s\n"
        );
        let mut s = summary(0, 0, Some("login refused by source: 530 Login incorrect"));
        s.bytes = 0;
        s.seconds = 0.0;
        s.transcript = vec!["S> USER alice".into(), "S< 530 Login incorrect".into()];
        assert_eq!(
            summary_text(&s),
            "0 files: 0 succeeded, 0 failed, 0 bytes in 0.0 s, - MB/s\n\
             error: login refused by source: 530 Login incorrect\n\
             transcript:\n  S> USER alice\n  S< 530 Login incorrect\n"
        );
        let mut tree = summary(3, 2, None);
        tree.failed = 0;
        tree.refused = 1;
        assert_eq!(
            summary_text(&tree),
            "3 files: 2 succeeded, 0 failed, 1 refused, 5000000 bytes in 2.0 s, 2.50 MB/s\n"
        );
        assert_eq!(exit_for(true, &tree), Exit::Problem);
        let mut link = file("tree/link", "refused");
        link.source_reply = None;
        link.dest_reply = None;
        link.detail = Some("refused: a symbolic link to \"one\": reported, not followed".into());
        assert_eq!(
            file_line(&link),
            "SKIP  tree/link  refused  -  0.2 s  refused: a symbolic link to \"one\": reported, not followed\n"
        );
        assert_eq!(
            listed_text(&["a".into()], &["\"../x\": escapes the directory".into()]),
            "1 file to transfer\nrefused 1 name from the listing as unsafe:\n  \"../x\": escapes the directory\n"
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_for(true, &summary(2, 2, None)), Exit::Success);
        assert_eq!(exit_for(true, &summary(2, 1, None)), Exit::Problem);
        assert_eq!(exit_for(false, &summary(2, 2, None)), Exit::Problem);
        assert_eq!(exit_for(true, &summary(0, 0, Some("login"))), Exit::Problem);
        assert_eq!(exit_for(true, &summary(2, 2, Some("late"))), Exit::Problem);
        assert_eq!(Exit::Problem.code(), 8);
        assert_eq!(Exit::Interrupted.code(), 130);
    }

    fn event(e: &TransferEvent) -> Vec<u8> {
        serde_json::to_vec(e).unwrap()
    }

    fn progress(name: &str, phase: &str) -> Vec<u8> {
        event(&TransferEvent::Progress {
            name: name.into(),
            phase: phase.into(),
        })
    }

    fn feed(view: &mut View<Vec<u8>, Vec<u8>>, t0: Instant, lines: &[(u64, Vec<u8>)]) {
        for (secs, l) in lines {
            view.line(l, t0 + Duration::from_secs(*secs)).unwrap();
        }
    }

    fn script() -> Vec<(u64, Vec<u8>)> {
        let mut done = file("a.bin", "succeeded");
        done.bytes = Some(5_000_000);
        done.evidence = Some("sizes equal".into());
        vec![
            (
                0,
                event(&TransferEvent::Listed {
                    files: vec!["a.bin".into()],
                    rejected: vec![],
                }),
            ),
            (0, progress("pub/a.bin", "preparing")),
            (1, progress("pub/a.bin", "transferring")),
            (3, progress("pub/a.bin", "checking")),
            (4, event(&TransferEvent::File(done))),
            (4, event(&TransferEvent::Summary(summary(1, 1, None)))),
        ]
    }

    #[test]
    fn plain_progress_lines_when_not_a_terminal() {
        let t0 = Instant::now();
        let mut view = View::new(Vec::new(), Vec::new(), false, false);
        feed(&mut view, t0, &script());
        view.draw(t0 + Duration::from_secs(9)).unwrap();
        assert_eq!(
            String::from_utf8(view.err.clone()).unwrap(),
            "pub/a.bin  preparing  0s\npub/a.bin  transferring  1s\npub/a.bin  checking  3s\n"
        );
        assert_eq!(
            String::from_utf8(view.out.clone()).unwrap(),
            "1 file to transfer\n\
             ok    a.bin  succeeded  5000000 bytes  0.2 s  sizes equal\n\
             1 file: 1 succeeded, 0 failed, 5000000 bytes in 2.0 s, 2.50 MB/s\n"
        );
        assert_eq!(view.finish().unwrap(), Exit::Success);
    }

    #[test]
    fn a_terminal_gets_one_line_rewritten_and_erased_before_results() {
        let t0 = Instant::now();
        let mut view = View::new(Vec::new(), Vec::new(), false, true);
        let s = script();
        feed(&mut view, t0, &s[..3]);
        view.draw(t0 + Duration::from_secs(2)).unwrap();
        feed(&mut view, t0, &s[3..]);
        let err = String::from_utf8(view.err.clone()).unwrap();
        assert_eq!(
            err,
            "\rpub/a.bin  preparing  0s\x1b[K\
             \rpub/a.bin  transferring  1s\x1b[K\
             \rpub/a.bin  transferring  2s\x1b[K\
             \rpub/a.bin  checking  3s\x1b[K\
             \r\x1b[K"
        );
        assert!(!view.shown);
        // No progress after the file is done: nothing to tick.
        view.draw(t0 + Duration::from_secs(9)).unwrap();
        assert_eq!(view.err.len(), err.len());
    }

    #[test]
    fn json_passes_each_line_through_and_still_decides_the_exit_code() {
        let mut bad = file("a.bin", "failed_permanent");
        bad.source_reply = reply(550, "No such file");
        let lines = vec![
            (0, progress("a.bin", "preparing")),
            (0, b"{\"event\":\"future_thing\",\"x\":1}".to_vec()),
            (1, event(&TransferEvent::File(bad))),
            (1, event(&TransferEvent::Summary(summary(1, 0, None)))),
        ];
        let mut view = View::new(Vec::new(), Vec::new(), true, true);
        feed(&mut view, Instant::now(), &lines);
        let mut want = Vec::new();
        for (_, l) in &lines {
            want.extend_from_slice(l);
            want.push(b'\n');
        }
        assert_eq!(view.out, want);
        assert!(view.err.is_empty());
        assert_eq!(view.finish().unwrap(), Exit::Problem);
    }

    #[test]
    fn an_unknown_event_is_skipped_with_one_note() {
        let mut view = View::new(Vec::new(), Vec::new(), false, false);
        let t0 = Instant::now();
        feed(
            &mut view,
            t0,
            &[
                (0, b"{\"event\":\"new\"}".to_vec()),
                (0, b"not json".to_vec()),
            ],
        );
        assert_eq!(
            String::from_utf8(view.err.clone()).unwrap(),
            "bftp: skipping an event line not understood: {\"event\":\"new\"}\n"
        );
        let err = view.finish().unwrap_err();
        assert!(
            format!("{err:#}").contains("without its summary"),
            "{err:#}"
        );
    }
}
