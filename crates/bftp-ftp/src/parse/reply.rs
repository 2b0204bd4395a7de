//! Control-connection replies, RFC 959 §4.2.
//!
//! A single-line reply is `NNN text` (or a bare `NNN`). A multi-line reply starts
//! with `NNN-text` and runs until a line that starts with the same `NNN` followed
//! by a space (or by the end of the line); lines in between may start with
//! anything, other digits included. Lines end in CRLF; a bare LF is accepted.
//! Blank lines before a reply are skipped (they count against the size limit).

use std::fmt;

use bftp_core::reply::ReplyCode;

use super::text::{excerpt, printable};

/// Bounds on what a server may send as one reply; exceeding them is an error,
/// so an endless line or an endless multi-line reply cannot exhaust memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLimits {
    /// Longest line, in bytes, without its line ending.
    pub max_line_len: usize,
    /// Longest reply, in bytes, all lines and line endings included.
    pub max_reply_len: usize,
}

impl Default for ReplyLimits {
    /// 8 KiB per line, 64 KiB per reply: far above what FEAT or a welcome
    /// banner needs, far below what could hurt.
    fn default() -> Self {
        Self {
            max_line_len: 8 * 1024,
            max_reply_len: 64 * 1024,
        }
    }
}

/// A reply that cannot be read. The control connection is unusable afterwards
/// (the framing is lost): close it. RULES.md §5 classifies all of these as a
/// protocol error, transient (`bftp_core::reply::Outcome::Malformed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("reply line longer than {limit} bytes, starting {start:?}")]
    LineTooLong { limit: usize, start: String },
    #[error("reply longer than {limit} bytes")]
    ReplyTooLong { limit: usize },
    /// The line does not start with three digits followed by a space, a `-` or
    /// the end of the line. `text` is the line, sanitized and truncated.
    #[error("reply without a numeric code: {text:?}")]
    NoCode { text: String },
    #[error("reply code {code} is outside 100..=599: {text:?}")]
    InvalidCode { code: u16, text: String },
}

impl ReplyError {
    /// This error with the job's secrets masked in the text it quotes (an excerpt: the
    /// start of a secret left at its cut is masked too).
    pub fn scrubbed(self, scrubber: &bftp_core::scrub::Scrubber) -> ReplyError {
        match self {
            ReplyError::LineTooLong { limit, start } => ReplyError::LineTooLong {
                limit,
                start: scrubber.scrub_excerpt(&start),
            },
            ReplyError::NoCode { text } => ReplyError::NoCode {
                text: scrubber.scrub_excerpt(&text),
            },
            ReplyError::InvalidCode { code, text } => ReplyError::InvalidCode {
                code,
                text: scrubber.scrub_excerpt(&text),
            },
            other @ ReplyError::ReplyTooLong { .. } => other,
        }
    }
}

/// One complete reply.
#[derive(Clone, PartialEq, Eq)]
pub struct Reply {
    code: ReplyCode,
    lines: Vec<String>,
    /// The lines as the server sent them, when scrubbing the job's secrets out of `lines`
    /// changed something: read only by the parsers of numbers (PASV, EPSV, SIZE), so that a
    /// short secret equal to a port or a size cannot change what the engine does. Never
    /// shown (not even by `Debug`).
    raw: Option<Vec<String>>,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply")
            .field("code", &self.code)
            .field("lines", &self.lines)
            .finish()
    }
}

impl Reply {
    /// A reply with these lines (at least one; an empty `lines` means one empty line).
    pub fn new(code: ReplyCode, lines: Vec<String>) -> Self {
        let lines = if lines.is_empty() {
            vec![String::new()]
        } else {
            lines
        };
        Self {
            code,
            lines,
            raw: None,
        }
    }

    /// This reply with every form of the job's secrets masked in its text (the engine does
    /// this to every reply as it reads it).
    pub fn scrubbed(self, scrubber: &bftp_core::scrub::Scrubber) -> Reply {
        if scrubber.is_empty() {
            return self;
        }
        let lines: Vec<String> = self.lines.iter().map(|l| scrubber.scrub(l)).collect();
        if lines == self.lines {
            return self;
        }
        let raw = self.raw.unwrap_or(self.lines);
        Reply {
            code: self.code,
            lines,
            raw: Some(raw),
        }
    }

    /// `parse` applied to the text as the server sent it; when that fails, to the scrubbed
    /// text (so that the error, which quotes the text, quotes the scrubbed one). For the
    /// parsers of numbers only: whatever else is read from a reply is read from its
    /// scrubbed text.
    pub fn parse_numbers<T, E>(&self, parse: impl Fn(&str) -> Result<T, E>) -> Result<T, E> {
        match &self.raw {
            Some(raw) => parse(&raw.join("\n")).or_else(|_| parse(&self.text())),
            None => parse(&self.text()),
        }
    }

    pub fn code(&self) -> ReplyCode {
        self.code
    }

    /// The text of each line, sanitized (invalid UTF-8 and control characters
    /// replaced by U+FFFD), without line endings. The `NNN-`/`NNN ` prefix is
    /// removed from the first and the last line, and from intermediate lines
    /// that repeat it as `NNN-` (as Pure-FTPd does); other intermediate lines
    /// are kept as sent, leading space included (FEAT lines start with one).
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The lines joined with `\n`: what the PASV and EPSV parsers read.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    pub fn is_multiline(&self) -> bool {
        self.lines.len() > 1
    }
}

impl fmt::Display for Reply {
    /// `NNN text`, lines after the first on their own lines, indented.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code)?;
        for (i, line) in self.lines.iter().enumerate() {
            if i == 0 {
                if !line.is_empty() {
                    write!(f, " {line}")?;
                }
            } else {
                write!(f, "\n    {line}")?;
            }
        }
        Ok(())
    }
}

/// The name a server chose for STOU, as it reported it: RFC 1123 §4.1.2.9 asks
/// for a `FILE: name` line in the preliminary (125/150) reply, which vsftpd and
/// ProFTPD send. Returned raw: check it with
/// [`member_name`](super::name::member_name) before using it in a command.
pub fn stou_file_name(reply: &Reply) -> Option<&str> {
    reply.lines().iter().find_map(|line| {
        let line = line.trim_start();
        let prefix = line.get(..5)?;
        let name = line[5..].trim();
        (prefix.eq_ignore_ascii_case("FILE:") && !name.is_empty()).then_some(name)
    })
}

/// The result of [`parse_reply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A complete reply, and how many bytes of the buffer it used.
    Complete { reply: Reply, consumed: usize },
    /// The buffer holds no complete reply yet (and is within the limits).
    NeedMore,
}

/// Parse the first reply at the start of `buf`.
pub fn parse_reply(buf: &[u8], limits: &ReplyLimits) -> Result<Parsed, ReplyError> {
    Ok(match Framer::default().advance(buf, limits)? {
        Some((reply, consumed)) => Parsed::Complete { reply, consumed },
        None => Parsed::NeedMore,
    })
}

/// Incremental reply parsing for a control connection: [`feed`](Self::feed) it
/// what the socket gave, then take replies with [`next_reply`](Self::next_reply)
/// until it returns `Ok(None)`. Each byte is examined once, however the input is
/// split. After an error every call returns that error again.
#[derive(Debug, Clone)]
pub struct ReplyParser {
    limits: ReplyLimits,
    buf: Vec<u8>,
    framer: Framer,
    failed: Option<ReplyError>,
}

impl ReplyParser {
    pub fn new(limits: ReplyLimits) -> Self {
        Self {
            limits,
            buf: Vec::new(),
            framer: Framer::default(),
            failed: None,
        }
    }

    /// Append bytes read from the control connection.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The next complete reply, `Ok(None)` if more bytes are needed.
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match self.framer.advance(&self.buf, &self.limits) {
            Ok(Some((reply, consumed))) => {
                self.buf.drain(..consumed);
                self.framer = Framer::default();
                Ok(Some(reply))
            }
            Ok(None) => Ok(None),
            Err(error) => {
                self.buf = Vec::new();
                self.failed = Some(error.clone());
                Err(error)
            }
        }
    }

    /// Bytes received but not yet part of a returned reply. Non-zero at end of
    /// stream means the server closed the connection in the middle of a reply.
    pub fn pending_len(&self) -> usize {
        self.buf.len()
    }
}

/// The state of the reply being read: `pos` is where the next unread line
/// starts, `scan` how far the search for its line feed got.
#[derive(Debug, Clone, Default)]
struct Framer {
    pos: usize,
    scan: usize,
    code: Option<ReplyCode>,
    lines: Vec<String>,
}

impl Framer {
    /// Read the complete lines of `buf` from `self.pos` on; `buf` starts where
    /// the reply starts. Returns the reply and the bytes it used once its last
    /// line is in.
    fn advance(
        &mut self,
        buf: &[u8],
        limits: &ReplyLimits,
    ) -> Result<Option<(Reply, usize)>, ReplyError> {
        loop {
            let unscanned = buf.get(self.scan..).unwrap_or_default();
            let Some(offset) = unscanned.iter().position(|&b| b == b'\n') else {
                self.scan = buf.len();
                let partial = &buf[self.pos.min(buf.len())..];
                // A trailing CR may be the first half of the line ending.
                let partial = partial.strip_suffix(b"\r").unwrap_or(partial);
                if partial.len() > limits.max_line_len {
                    return Err(ReplyError::LineTooLong {
                        limit: limits.max_line_len,
                        start: excerpt(partial),
                    });
                }
                if buf.len() > limits.max_reply_len {
                    return Err(ReplyError::ReplyTooLong {
                        limit: limits.max_reply_len,
                    });
                }
                return Ok(None);
            };
            let end = self.scan + offset;
            let next = end + 1;
            let raw = &buf[self.pos..end];
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.len() > limits.max_line_len {
                return Err(ReplyError::LineTooLong {
                    limit: limits.max_line_len,
                    start: excerpt(line),
                });
            }
            if next > limits.max_reply_len {
                return Err(ReplyError::ReplyTooLong {
                    limit: limits.max_reply_len,
                });
            }
            self.pos = next;
            self.scan = next;
            match self.code {
                None if line.is_empty() => {}
                None => {
                    let (code, separator) = first_line_code(line)?;
                    let text = printable(line.get(4..).unwrap_or_default());
                    if separator == Separator::Hyphen {
                        self.code = Some(code);
                        self.lines.push(text);
                    } else {
                        return Ok(Some((Reply::new(code, vec![text]), next)));
                    }
                }
                Some(code) => {
                    let digits = code_digits(code);
                    let repeats_code = line.starts_with(&digits);
                    let rest = line.get(3..).unwrap_or_default();
                    if repeats_code && matches!(rest.first(), None | Some(b' ')) {
                        self.lines
                            .push(printable(rest.get(1..).unwrap_or_default()));
                        let reply = Reply::new(code, std::mem::take(&mut self.lines));
                        return Ok(Some((reply, next)));
                    }
                    let text = match rest.strip_prefix(b"-") {
                        Some(after) if repeats_code => after,
                        _ => line,
                    };
                    self.lines.push(printable(text));
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Separator {
    /// `NNN text` or a bare `NNN`: the reply is complete.
    Space,
    /// `NNN-text`: a multi-line reply starts.
    Hyphen,
}

fn first_line_code(line: &[u8]) -> Result<(ReplyCode, Separator), ReplyError> {
    let no_code = || ReplyError::NoCode {
        text: excerpt(line),
    };
    let digits = line.get(..3).ok_or_else(no_code)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(no_code());
    }
    let separator = match line.get(3) {
        None | Some(b' ') => Separator::Space,
        Some(b'-') => Separator::Hyphen,
        Some(_) => return Err(no_code()),
    };
    let value = digits
        .iter()
        .fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    let code = ReplyCode::new(value).ok_or_else(|| ReplyError::InvalidCode {
        code: value,
        text: excerpt(line),
    })?;
    Ok((code, separator))
}

fn code_digits(code: ReplyCode) -> [u8; 3] {
    let n = code.get();
    // A ReplyCode is below 600, so each digit fits.
    [
        (n / 100) as u8 + b'0',
        (n / 10 % 10) as u8 + b'0',
        (n % 10) as u8 + b'0',
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(n: u16) -> ReplyCode {
        ReplyCode::new(n).unwrap()
    }

    #[test]
    fn a_scrubbed_reply_shows_no_secret_but_its_numbers_are_read_as_sent() {
        use bftp_core::scrub::Scrubber;
        let s = Scrubber::new(&["21"]);
        let pasv = Reply::new(
            code(227),
            vec!["Entering Passive Mode (127,0,0,1,4,21) for 21".into()],
        )
        .scrubbed(&s);
        assert_eq!(
            pasv.text(),
            "Entering Passive Mode (127,0,0,1,4,****) for ****"
        );
        assert!(!format!("{pasv:?}").contains("21)"), "{pasv:?}");
        let addr = pasv.parse_numbers(crate::parse::parse_pasv).unwrap();
        assert_eq!(addr.port(), 4 * 256 + 21);
        // A parse error quotes the scrubbed text.
        let bad = Reply::new(code(227), vec!["no address, you sent hunter2".into()])
            .scrubbed(&Scrubber::new(&["hunter2"]));
        let e = bad.parse_numbers(crate::parse::parse_pasv).unwrap_err();
        assert!(
            !e.to_string().contains("hunter2") && e.to_string().contains("****"),
            "{e}"
        );
        // Nothing to scrub: the reply is unchanged.
        let plain = Reply::new(code(213), vec!["2121".into()]);
        assert_eq!(plain.clone().scrubbed(&s), plain);
    }

    fn complete(buf: &[u8]) -> (Reply, usize) {
        match parse_reply(buf, &ReplyLimits::default()) {
            Ok(Parsed::Complete { reply, consumed }) => (reply, consumed),
            other => panic!("{buf:?}: {other:?}"),
        }
    }

    /// (input, code, lines, bytes consumed: ALL for the whole input)
    #[test]
    fn complete_replies() {
        const ALL: usize = usize::MAX;
        let table: &[(&[u8], u16, &[&str], usize)] = &[
            (b"220 Service ready\r\n", 220, &["Service ready"], ALL),
            (b"220 Service ready\n", 220, &["Service ready"], ALL),
            (b"200\r\n", 200, &[""], ALL),
            (b"200 \r\n", 200, &[""], ALL),
            (b"226 ok\r\n150 next\r\n", 226, &["ok"], 8),
            // Leading blank lines are skipped.
            (b"\r\n\r\n220 hi\r\n", 220, &["hi"], ALL),
            // RFC 959 §4.2's own example: intermediate lines start with anything.
            (
                b"123-First line\r\nSecond line\r\n  234 A line beginning with numbers\r\n123 The last line\r\n",
                123,
                &["First line", "Second line", "  234 A line beginning with numbers", "The last line"],
                ALL,
            ),
            // Intermediate lines repeating "NNN-" lose the prefix (Pure-FTPd style).
            (
                b"230-Welcome\r\n230-Be nice\r\n230 Logged in\r\n",
                230,
                &["Welcome", "Be nice", "Logged in"],
                ALL,
            ),
            // Another code followed by a space does not end the reply.
            (
                b"211-Features:\r\n MDTM\r\n211x\r\n200 not the end\r\n211 End\r\n",
                211,
                &["Features:", " MDTM", "211x", "200 not the end", "End"],
                ALL,
            ),
            // A greeting whose inner line carries another code and a space: the reply
            // ends at "220 ", not at "230 " (RFC 959 §4.2).
            (
                b"220-Hello\r\n230 not really\r\n220 ready\r\n",
                220,
                &["Hello", "230 not really", "ready"],
                ALL,
            ),
            // A login reply whose inner lines look like other replies, even like the
            // next step's (331) or a refusal (530).
            (
                b"230-Welcome\r\n331 not asking\r\n530 not refused\r\n230-still in\r\n230 Logged in\r\n",
                230,
                &["Welcome", "331 not asking", "530 not refused", "still in", "Logged in"],
                ALL,
            ),
            // "NNN" alone ends a multi-line reply too.
            (b"211-a\r\n211\r\n", 211, &["a", ""], ALL),
            // A bare CR inside a line is text (sanitized), not a line end.
            (b"220 a\rb\r\n", 220, &["a\u{FFFD}b"], ALL),
            // Non-UTF-8 text is kept, replaced.
            (b"550 caf\xe9 introuvable\r\n", 550, &["caf\u{FFFD} introuvable"], ALL),
        ];
        for &(input, n, lines, consumed) in table {
            let consumed = if consumed == ALL {
                input.len()
            } else {
                consumed
            };
            let (reply, used) = complete(input);
            assert_eq!(reply.code(), code(n), "{input:?}");
            assert_eq!(reply.lines(), lines, "{input:?}");
            assert_eq!(used, consumed, "{input:?}");
        }
    }

    #[test]
    fn incomplete_input_needs_more() {
        let limits = ReplyLimits::default();
        for input in [
            &b""[..],
            b"2",
            b"220",
            b"220 Service ready",
            b"220 Service ready\r",
            b"123-First line\r\n",
            b"123-First line\r\nSecond\r\n123 last",
            b"123-First line\r\n124 other code\r\n",
            b"\r\n",
        ] {
            assert_eq!(
                parse_reply(input, &limits),
                Ok(Parsed::NeedMore),
                "{input:?}"
            );
        }
    }

    #[test]
    fn malformed_first_lines() {
        let limits = ReplyLimits::default();
        let table: &[(&[u8], ReplyError)] = &[
            (
                b"No such file or directory\r\n",
                ReplyError::NoCode {
                    text: "No such file or directory".into(),
                },
            ),
            (
                b"22 short\r\n",
                ReplyError::NoCode {
                    text: "22 short".into(),
                },
            ),
            (b"22\r\n", ReplyError::NoCode { text: "22".into() }),
            (
                b"220text\r\n",
                ReplyError::NoCode {
                    text: "220text".into(),
                },
            ),
            (
                b"2a0 x\r\n",
                ReplyError::NoCode {
                    text: "2a0 x".into(),
                },
            ),
            (
                b" 220 x\r\n",
                ReplyError::NoCode {
                    text: " 220 x".into(),
                },
            ),
            (
                b"\xff\xfe\r\n",
                ReplyError::NoCode {
                    text: "\u{FFFD}\u{FFFD}".into(),
                },
            ),
            (
                b"ls: x\x1b[0m\r\n",
                ReplyError::NoCode {
                    text: "ls: x\u{FFFD}[0m".into(),
                },
            ),
            (
                b"600 too high\r\n",
                ReplyError::InvalidCode {
                    code: 600,
                    text: "600 too high".into(),
                },
            ),
            (
                b"099 too low\r\n",
                ReplyError::InvalidCode {
                    code: 99,
                    text: "099 too low".into(),
                },
            ),
            (
                b"000-x\r\n",
                ReplyError::InvalidCode {
                    code: 0,
                    text: "000-x".into(),
                },
            ),
        ];
        for (input, expected) in table {
            assert_eq!(
                parse_reply(input, &limits).as_ref(),
                Err(expected),
                "{input:?}"
            );
        }
    }

    #[test]
    fn no_code_error_text_is_truncated() {
        let line = [b"x".repeat(1000), b"\r\n".to_vec()].concat();
        match parse_reply(&line, &ReplyLimits::default()) {
            Err(ReplyError::NoCode { text }) => assert_eq!(text.chars().count(), 121),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn endless_line_fails_before_its_end() {
        let limits = ReplyLimits {
            max_line_len: 100,
            max_reply_len: 1000,
        };
        let at_limit = [b"220 ".to_vec(), b"x".repeat(96)].concat();
        assert_eq!(parse_reply(&at_limit, &limits), Ok(Parsed::NeedMore));
        let over = [at_limit.clone(), b"x".to_vec()].concat();
        assert!(matches!(
            parse_reply(&over, &limits),
            Err(ReplyError::LineTooLong { limit: 100, .. })
        ));
        // Exactly the limit with its line ending is fine; a CR does not count.
        let (reply, _) = match parse_reply(&[at_limit, b"\r\n".to_vec()].concat(), &limits) {
            Ok(Parsed::Complete { reply, consumed }) => (reply, consumed),
            other => panic!("{other:?}"),
        };
        assert_eq!(reply.lines()[0].len(), 96);
    }

    #[test]
    fn long_intermediate_line_fails() {
        let limits = ReplyLimits {
            max_line_len: 50,
            max_reply_len: 1000,
        };
        let input = [
            b"211-a\r\n".to_vec(),
            b"y".repeat(51),
            b"\r\n211 end\r\n".to_vec(),
        ]
        .concat();
        assert!(matches!(
            parse_reply(&input, &limits),
            Err(ReplyError::LineTooLong { limit: 50, .. })
        ));
    }

    #[test]
    fn huge_multiline_reply_fails_at_the_limit() {
        let limits = ReplyLimits {
            max_line_len: 100,
            max_reply_len: 1000,
        };
        let mut input = b"211-start\r\n".to_vec();
        while input.len() <= 2000 {
            input.extend_from_slice(b"211-more of the same\r\n");
        }
        assert_eq!(
            parse_reply(&input, &limits),
            Err(ReplyError::ReplyTooLong { limit: 1000 })
        );
        // Endless blank lines before a reply are bounded the same way.
        assert_eq!(
            parse_reply(&b"\r\n".repeat(600), &limits),
            Err(ReplyError::ReplyTooLong { limit: 1000 })
        );
        // A reply that ends within the limit is fine even if more follows.
        let mut ok = b"211-a\r\n211 b\r\n".to_vec();
        ok.extend_from_slice(&b"z".repeat(5000));
        assert!(matches!(
            parse_reply(&ok, &limits),
            Ok(Parsed::Complete { consumed: 14, .. })
        ));
    }

    /// Feeds `stream` to a parser `chunk` bytes at a time; every reply it gave, and the parser.
    fn parse_in_pieces(stream: &[u8], chunk: usize) -> (Vec<Reply>, ReplyParser) {
        let mut parser = ReplyParser::new(ReplyLimits::default());
        let mut replies = Vec::new();
        for piece in stream.chunks(chunk) {
            parser.feed(piece);
            while let Some(reply) = parser.next_reply().unwrap() {
                replies.push(reply);
            }
        }
        (replies, parser)
    }

    #[test]
    fn parser_reassembles_replies_split_anywhere() {
        let stream: &[u8] = b"220-Welcome\r\n220 Ready\r\n331 Password required\r\n230 OK\n";
        for chunk in 1..stream.len() {
            let (replies, parser) = parse_in_pieces(stream, chunk);
            let codes: Vec<u16> = replies.iter().map(|r| r.code().get()).collect();
            assert_eq!(codes, [220, 331, 230], "chunk {chunk}");
            assert_eq!(replies[0].lines(), ["Welcome", "Ready"]);
            assert_eq!(parser.pending_len(), 0);
        }
    }

    /// A whole login as the control connection delivers it, split at every byte: the
    /// greeting and the 230 each come out as one reply, their inner code-lines as text.
    #[test]
    fn parser_reads_a_login_with_inner_code_lines_split_anywhere() {
        let stream: &[u8] = b"220-Hello\r\n230 not really\r\n220 ready\r\n331 Password required\r\n230-Hi\r\n220 not yet\r\n421 nor this\r\n230 Logged in\r\n";
        for chunk in 1..stream.len() {
            let (replies, parser) = parse_in_pieces(stream, chunk);
            let codes: Vec<u16> = replies.iter().map(|r| r.code().get()).collect();
            assert_eq!(codes, [220, 331, 230], "chunk {chunk}");
            assert_eq!(replies[0].lines(), ["Hello", "230 not really", "ready"]);
            assert_eq!(
                replies[2].lines(),
                ["Hi", "220 not yet", "421 nor this", "Logged in"]
            );
            assert_eq!(parser.pending_len(), 0);
        }
    }

    #[test]
    fn parser_reports_partial_reply_and_stays_failed() {
        let mut parser = ReplyParser::new(ReplyLimits::default());
        parser.feed(b"226 done\r\n150 Opening");
        assert_eq!(parser.next_reply().unwrap().unwrap().code(), code(226));
        assert_eq!(parser.next_reply(), Ok(None));
        assert_eq!(parser.pending_len(), 11);

        let mut parser = ReplyParser::new(ReplyLimits::default());
        parser.feed(b"garbage\r\n220 fine\r\n");
        let error = parser.next_reply().unwrap_err();
        assert_eq!(
            error,
            ReplyError::NoCode {
                text: "garbage".into()
            }
        );
        parser.feed(b"220 still fine\r\n");
        assert_eq!(parser.next_reply(), Err(error));
        assert_eq!(parser.pending_len(), 0);
    }

    #[test]
    fn parser_drip_fed_endless_line_is_bounded() {
        let limits = ReplyLimits {
            max_line_len: 1000,
            max_reply_len: 4000,
        };
        let mut parser = ReplyParser::new(limits);
        parser.feed(b"220 ");
        let mut fed = 4;
        let error = loop {
            parser.feed(b"a");
            fed += 1;
            match parser.next_reply() {
                Ok(None) => {}
                Ok(Some(reply)) => panic!("{reply:?}"),
                Err(error) => break error,
            }
        };
        assert_eq!(fed, 1001);
        assert!(matches!(error, ReplyError::LineTooLong { limit: 1000, .. }));
    }

    #[test]
    fn stou_names() {
        let table: &[(&[u8], Option<&str>)] = &[
            (b"150 FILE: upload.1\r\n", Some("upload.1")),
            (b"150 file:  spaced name \r\n", Some("spaced name")),
            (b"125-Opening\r\n FILE: x.txt\r\n125 go\r\n", Some("x.txt")),
            (b"150 FILE:\r\n", None),
            (b"150 Opening BINARY mode data connection\r\n", None),
            (b"150 FIL\r\n", None),
            (b"150 \xc3\xa9t\xc3\xa9: x\r\n", None),
        ];
        for (input, expected) in table {
            let (reply, _) = complete(input);
            assert_eq!(stou_file_name(&reply), *expected, "{input:?}");
        }
    }

    #[test]
    fn reply_text_and_display() {
        let (reply, _) = complete(b"227 Entering Passive Mode (10,0,0,1,4,1).\r\n");
        assert_eq!(reply.text(), "Entering Passive Mode (10,0,0,1,4,1).");
        assert_eq!(
            reply.to_string(),
            "227 Entering Passive Mode (10,0,0,1,4,1)."
        );
        assert!(!reply.is_multiline());
        let (reply, _) = complete(b"211-Features:\r\n MDTM\r\n211 End\r\n");
        assert_eq!(reply.text(), "Features:\n MDTM\nEnd");
        assert_eq!(reply.to_string(), "211 Features:\n     MDTM\n    End");
        assert!(reply.is_multiline());
        assert_eq!(Reply::new(code(200), vec![]).to_string(), "200");
    }
}
