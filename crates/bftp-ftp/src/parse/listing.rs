//! Directory listings read from a data connection: NLST (RFC 959, with the BSD
//! quirks RFC 1068 met) and MLSD (RFC 3659).
//!
//! Lines end in CRLF, as RFC 959 (NLST in ASCII type) and RFC 3659 (MLSD) say; a
//! bare LF inside such a listing is part of its line, so a name holding one is
//! refused whole instead of being split into two names, the second invented. A
//! listing with no CRLF at all comes from a server that ends its lines with LF
//! alone: there each LF ends a line (such a server cannot show a name holding an
//! LF in any way a client could tell apart). Every name is checked with
//! [`member_name`] and comes out relative to the listed directory; a line that
//! fails is returned as rejected, with the reason and its name escaped, never
//! dropped silently and never passed on.

use std::collections::HashSet;

use super::facts::{parse_size, FactError, ModifyTime};
use super::name::{member_name, normalize_dir, NameError};
use super::text::{escaped, excerpt};

/// Why a listing line names no member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// An empty (or all-blank) line.
    Blank,
    /// `.` or `..`, which Pure-FTPd lists.
    DotEntry,
    /// `dir:`, the header BSD `ls` prints before the listed directory's names.
    Header,
    /// `dir/sub:`, the header BSD `ls` prints before the contents of a
    /// subdirectory, and every name after it up to the next blank line: those
    /// are not in the listed directory.
    OtherDirectory,
    /// MLSD `type=cdir` or `type=pdir`: the listed directory and its parent.
    CurrentOrParent,
}

/// A line that was refused, escaped and truncated for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedLine<E> {
    /// The refused name (the whole line where no name can be told from it), escaped
    /// (`\r`, `\n`, `\0`, `\xNN`): printable, and different for different bytes.
    pub line: String,
    /// The same bytes as lossy UTF-8, controls kept, only to match the job's wildcard
    /// against: never shown, never sent.
    pub name: String,
    pub reason: E,
}

impl<E> RejectedLine<E> {
    pub(super) fn new(name: &[u8], reason: E) -> Self {
        RejectedLine {
            line: escaped(name),
            name: String::from_utf8_lossy(name).into_owned(),
            reason,
        }
    }
}

/// What one NLST line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlstLine {
    /// A name in the listed directory, checked, any directory prefix removed.
    Name(String),
    Skip(SkipReason),
    /// An error message where a name should be (sanitized): BSD servers ran
    /// `ls` with its errors on the data connection and then answered 226
    /// (RFC 1068), so `x: No such file or directory` arrived as a "name".
    /// Recognized by the phrases in `ERROR_PREFIXES`, `ERROR_SUFFIXES` and
    /// `ERROR_LINES`; a file really named like one of them is misread as an
    /// error, which errs on the safe side (the listing is retried, never
    /// trusted with a bogus member).
    ErrorText(String),
    /// A name that failed the checks of RULES.md §8.
    Rejected(RejectedLine<NameError>),
}

/// Lower-case phrases that mark a line as an `ls` error rather than a name.
const ERROR_PREFIXES: &[&str] = &["ls: "];
const ERROR_SUFFIXES: &[&str] = &[
    ": no such file or directory",
    ": permission denied",
    ": not a directory",
    // 4.2BSD ls: "x not found".
    " not found",
];
const ERROR_LINES: &[&str] = &[
    "no such file or directory",
    "permission denied",
    "not a directory",
    "no files found",
];

fn looks_like_error(line: &str) -> bool {
    let lower = line.trim().trim_end_matches('.').to_lowercase();
    ERROR_PREFIXES.iter().any(|p| lower.starts_with(p))
        || ERROR_SUFFIXES.iter().any(|s| lower.ends_with(s))
        || ERROR_LINES.contains(&lower.as_str())
}

/// Reads NLST output line by line; it keeps the little state the BSD
/// subdirectory sections need.
#[derive(Debug, Clone)]
pub struct NlstParser {
    dir: String,
    in_other_directory: bool,
}

impl NlstParser {
    /// For the output of `NLST listed_dir` (`""` or `"."` for the current directory).
    pub fn new(listed_dir: &str) -> Self {
        Self {
            dir: normalize_dir(listed_dir).to_owned(),
            in_other_directory: false,
        }
    }

    /// Classify one line (without or with its CRLF/LF).
    pub fn line(&mut self, raw: &[u8]) -> NlstLine {
        let line = strip_line_end(raw);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            self.in_other_directory = false;
            return NlstLine::Skip(SkipReason::Blank);
        }
        let Ok(text) = std::str::from_utf8(line) else {
            return NlstLine::Rejected(RejectedLine::new(
                line,
                NameError::NotUtf8 {
                    lossy: excerpt(line),
                },
            ));
        };
        if looks_like_error(text) {
            return NlstLine::ErrorText(excerpt(line));
        }
        if self.in_other_directory {
            return NlstLine::Skip(SkipReason::OtherDirectory);
        }
        if let Some(head) = text.strip_suffix(':') {
            if normalize_dir(head) == self.dir {
                return NlstLine::Skip(SkipReason::Header);
            }
            if head.contains('/') && strip_dir(head, &self.dir).is_some() {
                self.in_other_directory = true;
                return NlstLine::Skip(SkipReason::OtherDirectory);
            }
        }
        let relative = strip_dir(text, &self.dir).unwrap_or(text);
        if matches!(relative.trim_start_matches("./"), "." | "..") {
            return NlstLine::Skip(SkipReason::DotEntry);
        }
        match member_name(text, &self.dir) {
            Ok(name) => NlstLine::Name(name),
            Err(reason) => NlstLine::Rejected(RejectedLine::new(line, reason)),
        }
    }
}

/// `path` after `dir/` if it starts with it (with `dir` normalized; `""` is the
/// current directory, so any relative path is inside it).
fn strip_dir<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    match dir {
        "" if !path.starts_with('/') => Some(path),
        "" => None,
        "/" => path.strip_prefix('/'),
        _ => path.strip_prefix(dir)?.strip_prefix('/'),
    }
}

pub(super) fn strip_line_end(raw: &[u8]) -> &[u8] {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The lines of a listing, each with its line end (see the module docs): split after
/// every CRLF when the listing holds one, else after every LF.
pub(super) fn lines(listing: &[u8]) -> Vec<&[u8]> {
    let crlf = listing.windows(2).any(|w| w == b"\r\n");
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in listing.iter().enumerate() {
        if b == b'\n' && (!crlf || (i > start && listing[i - 1] == b'\r')) {
            out.push(&listing[start..=i]);
            start = i + 1;
        }
    }
    if start < listing.len() {
        out.push(&listing[start..]);
    }
    out
}

/// A whole NLST listing, sorted out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NlstListing {
    /// Checked names in listing order, each once.
    pub names: Vec<String>,
    /// Error messages found among the names. When not empty, the listing
    /// failed whatever the reply said: a protocol error (transient), with
    /// this text in the report.
    pub error_text: Vec<String>,
    /// Names refused by the checks of RULES.md §8, for the report.
    pub rejected: Vec<RejectedLine<NameError>>,
}

/// Sort out the data of `NLST listed_dir`.
pub fn parse_nlst(listing: &[u8], listed_dir: &str) -> NlstListing {
    let mut parser = NlstParser::new(listed_dir);
    let mut out = NlstListing::default();
    let mut seen = HashSet::new();
    for line in lines(listing) {
        match parser.line(line) {
            NlstLine::Name(name) => {
                if seen.insert(name.clone()) {
                    out.names.push(name);
                }
            }
            NlstLine::Skip(_) => {}
            NlstLine::ErrorText(text) => out.error_text.push(text),
            NlstLine::Rejected(rejected) => out.rejected.push(rejected),
        }
    }
    out
}

/// An MLSD line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MlsdError {
    #[error("MLSD line without a space between the facts and the name")]
    NoSeparator,
    #[error("MLSD fact {fact:?} is not name=value")]
    MalformedFact { fact: String },
    #[error(transparent)]
    Fact(#[from] FactError),
    #[error(transparent)]
    Name(#[from] NameError),
}

/// The `type` fact of an MLSD entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EntryKind {
    File,
    Dir,
    /// Any other type, lower-cased: `os.unix=slink:/target`, a device...
    Special(String),
    /// The server sent no `type` fact.
    Unspecified,
}

/// One MLSD entry with the facts the daemon uses; the others are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlsdEntry {
    /// Checked, relative to the listed directory.
    pub name: String,
    pub kind: EntryKind,
    pub size: Option<u64>,
    pub modify: Option<ModifyTime>,
    /// The `unique` fact (RFC 3659 §7.5.2), as sent.
    pub unique: Option<String>,
}

/// What one MLSD line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MlsdLine {
    Entry(MlsdEntry),
    Skip(SkipReason),
}

/// One line of `MLSD listed_dir` (RFC 3659 §7): `fact=value;...; name`. Fact
/// names and the `type` value are case-insensitive; a `size` or `modify` that
/// is present must be valid, or the line is refused.
pub fn parse_mlsd_line(raw: &[u8], listed_dir: &str) -> Result<MlsdLine, MlsdError> {
    let line = strip_line_end(raw);
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(MlsdLine::Skip(SkipReason::Blank));
    }
    let text = std::str::from_utf8(line).map_err(|_| NameError::NotUtf8 {
        lossy: excerpt(line),
    })?;
    let (facts, name) = text.split_once(' ').ok_or(MlsdError::NoSeparator)?;
    let mut kind = EntryKind::Unspecified;
    let mut size = None;
    let mut modify = None;
    let mut unique = None;
    for fact in facts.split(';').filter(|fact| !fact.is_empty()) {
        let (key, value) = fact
            .split_once('=')
            .ok_or_else(|| MlsdError::MalformedFact {
                fact: excerpt(fact.as_bytes()),
            })?;
        match key.to_ascii_lowercase().as_str() {
            "type" => {
                kind = match value.to_ascii_lowercase().as_str() {
                    "file" => EntryKind::File,
                    "dir" => EntryKind::Dir,
                    "cdir" | "pdir" => return Ok(MlsdLine::Skip(SkipReason::CurrentOrParent)),
                    other => EntryKind::Special(other.to_owned()),
                }
            }
            "size" => size = Some(parse_size(value)?),
            "modify" => modify = Some(ModifyTime::parse(value)?),
            "unique" if !value.is_empty() => unique = Some(value.to_owned()),
            _ => {}
        }
    }
    if matches!(name, "." | "..") {
        return Ok(MlsdLine::Skip(SkipReason::DotEntry));
    }
    let name = member_name(name, listed_dir)?;
    Ok(MlsdLine::Entry(MlsdEntry {
        name,
        kind,
        size,
        modify,
        unique,
    }))
}

/// A whole MLSD listing, sorted out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MlsdListing {
    /// Entries of every type in listing order, each name once.
    pub entries: Vec<MlsdEntry>,
    /// Lines refused, for the report.
    pub rejected: Vec<RejectedLine<MlsdError>>,
    /// The `unique` fact of the listed directory itself (its `type=cdir` line).
    pub cdir_unique: Option<String>,
}

/// The `unique` fact of a `type=cdir` line, if it is one.
fn cdir_unique(line: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(strip_line_end(line)).ok()?;
    let (facts, _) = text.split_once(' ')?;
    let mut cdir = false;
    let mut unique = None;
    for fact in facts.split(';').filter(|f| !f.is_empty()) {
        let (key, value) = fact.split_once('=')?;
        match key.to_ascii_lowercase().as_str() {
            "type" => cdir = value.eq_ignore_ascii_case("cdir"),
            "unique" if !value.is_empty() => unique = Some(value.to_owned()),
            _ => {}
        }
    }
    unique.filter(|_| cdir)
}

/// Sort out the data of `MLSD listed_dir`.
pub fn parse_mlsd(listing: &[u8], listed_dir: &str) -> MlsdListing {
    let mut out = MlsdListing::default();
    let mut seen = HashSet::new();
    for line in lines(listing) {
        match parse_mlsd_line(line, listed_dir) {
            Ok(MlsdLine::Entry(entry)) => {
                if seen.insert(entry.name.clone()) {
                    out.entries.push(entry);
                }
            }
            Ok(MlsdLine::Skip(SkipReason::CurrentOrParent)) => {
                if let Some(u) = cdir_unique(line) {
                    out.cdir_unique = Some(u);
                }
            }
            Ok(MlsdLine::Skip(_)) => {}
            Err(reason) => {
                let line = strip_line_end(line);
                // The name after the facts where the facts were read (the name, or a
                // fact's value, failed); else the whole line: no part of it is known to
                // be a name.
                let read_facts = matches!(reason, MlsdError::Name(_) | MlsdError::Fact(_));
                let name = match line.iter().position(|&b| b == b' ') {
                    Some(space) if read_facts => &line[space + 1..],
                    _ => line,
                };
                out.rejected.push(RejectedLine::new(name, reason))
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> NlstLine {
        NlstLine::Name(n.to_owned())
    }

    fn skip(reason: SkipReason) -> NlstLine {
        NlstLine::Skip(reason)
    }

    fn error(text: &str) -> NlstLine {
        NlstLine::ErrorText(text.to_owned())
    }

    fn rejected(line: &[u8], reason: NameError) -> NlstLine {
        NlstLine::Rejected(RejectedLine::new(line, reason))
    }

    /// Lines read one at a time by a fresh parser for `dir`.
    #[test]
    fn nlst_single_lines() {
        use SkipReason::*;
        let table: &[(&str, &[u8], NlstLine)] = &[
            ("/pub", b"a.txt", name("a.txt")),
            ("/pub", b"a.txt\r\n", name("a.txt")),
            ("/pub", b"a.txt\n", name("a.txt")),
            ("/pub", b"with space.txt\r\n", name("with space.txt")),
            ("/pub", b" leading", name(" leading")),
            ("/pub", b"colon:", name("colon:")),
            // Blank lines.
            ("/pub", b"", skip(Blank)),
            ("/pub", b"\r\n", skip(Blank)),
            ("/pub", b"  \t\r\n", skip(Blank)),
            // Dot entries (Pure-FTPd), with or without a prefix.
            ("/pub", b".", skip(DotEntry)),
            ("/pub", b"..", skip(DotEntry)),
            ("/pub", b"/pub/.", skip(DotEntry)),
            ("pub", b"pub/..", skip(DotEntry)),
            ("", b"./.", skip(DotEntry)),
            ("/pub", b".hidden", name(".hidden")),
            // A directory prefix equal to the listed directory is removed.
            ("pub", b"pub/a.txt", name("a.txt")),
            ("/pub", b"/pub/a.txt", name("a.txt")),
            ("/pub/", b"/pub/a.txt", name("a.txt")),
            ("", b"./a.txt", name("a.txt")),
            // Any other prefix is refused.
            (
                "/pub",
                b"other/a.txt",
                rejected(b"other/a.txt", NameError::NotDirectChild),
            ),
            (
                "/pub",
                b"/etc/passwd",
                rejected(b"/etc/passwd", NameError::OutsideDirectory),
            ),
            ("/pub", b"../x", rejected(b"../x", NameError::DotDot)),
            // Header of the listed directory.
            ("pub", b"pub:", skip(Header)),
            ("/pub", b"/pub/:", skip(Header)),
            ("", b".:", skip(Header)),
            // Code-less error text (RFC 1068's BSD servers).
            (
                "/pub",
                b"No such file or directory",
                error("No such file or directory"),
            ),
            (
                "/pub",
                b"nosuch: No such file or directory\r\n",
                error("nosuch: No such file or directory"),
            ),
            (
                "/pub",
                b"ls: /pub/x: No such file or directory",
                error("ls: /pub/x: No such file or directory"),
            ),
            (
                "/pub",
                b"ls: cannot open directory '/pub': Permission denied",
                error("ls: cannot open directory '/pub': Permission denied"),
            ),
            ("/pub", b"pub not found", error("pub not found")),
            ("/pub", b"No files found.", error("No files found.")),
            (
                "/pub",
                b"/pub: Not a directory",
                error("/pub: Not a directory"),
            ),
            // Hostile names.
            (
                "/pub",
                b"evil\rDELE x\r\n",
                rejected(b"evil\rDELE x", NameError::ForbiddenByte { byte: b'\r' }),
            ),
            (
                "/pub",
                b"nul\0byte",
                rejected(b"nul\0byte", NameError::ForbiddenByte { byte: 0 }),
            ),
            (
                "/pub",
                b"caf\xe9.txt",
                rejected(
                    b"caf\xe9.txt",
                    NameError::NotUtf8 {
                        lossy: "caf\u{FFFD}.txt".into(),
                    },
                ),
            ),
        ];
        for (dir, line, expected) in table {
            assert_eq!(
                &NlstParser::new(dir).line(line),
                expected,
                "{dir:?} {line:?}"
            );
        }
    }

    #[test]
    fn nlst_bsd_subdirectory_sections_are_skipped() {
        let mut parser = NlstParser::new("pub");
        let lines: &[(&[u8], NlstLine)] = &[
            (b"pub/a.txt", name("a.txt")),
            (b"pub/b.txt", name("b.txt")),
            (b"", skip(SkipReason::Blank)),
            (b"pub/sub:", skip(SkipReason::OtherDirectory)),
            (b"inner.txt", skip(SkipReason::OtherDirectory)),
            (
                b"inner: No such file or directory",
                error("inner: No such file or directory"),
            ),
            (b"", skip(SkipReason::Blank)),
            (b"pub/c.txt", name("c.txt")),
        ];
        for (line, expected) in lines {
            assert_eq!(&parser.line(line), expected, "{line:?}");
        }
    }

    #[test]
    fn nlst_whole_listing() {
        let data = b".\r\n..\r\na.txt\r\nb.txt\r\na.txt\r\n\r\nbad\rname\r\nx: No such file or directory\r\n/pub/c.txt\r\n";
        let listing = parse_nlst(data, "/pub");
        assert_eq!(listing.names, ["a.txt", "b.txt", "c.txt"]);
        assert_eq!(listing.error_text, ["x: No such file or directory"]);
        assert_eq!(
            listing.rejected,
            [RejectedLine {
                line: "bad\\rname".to_owned(),
                name: "bad\rname".to_owned(),
                reason: NameError::ForbiddenByte { byte: b'\r' }
            }]
        );
        assert_eq!(parse_nlst(b"", "/pub"), NlstListing::default());
        assert_eq!(
            parse_nlst(b"last-without-newline", "/pub").names,
            ["last-without-newline"]
        );
    }

    /// In a CRLF listing a bare LF is part of the name, which is refused whole: never two
    /// names, the second one invented, and never a command.
    #[test]
    fn nlst_lf_in_a_name_is_refused_whole() {
        let listing = parse_nlst(b"good\r\nevil\nDELE important\r\nlast\r\n", "/pub");
        assert_eq!(listing.names, ["good", "last"]);
        assert_eq!(listing.rejected.len(), 1, "{listing:?}");
        assert_eq!(listing.rejected[0].line, "evil\\nDELE important");
        assert_eq!(
            listing.rejected[0].reason,
            NameError::ForbiddenByte { byte: b'\n' }
        );
        // An LF right before the CRLF is the name's own too.
        let listing = parse_nlst(b"a\r\nb\n\r\n", "/pub");
        assert_eq!(listing.names, ["a"]);
        assert_eq!(listing.rejected[0].line, "b\\n");
        let listing = parse_nlst(b"evil\r\rDELE important\r\n", "/pub");
        assert!(listing.names.is_empty());
        assert_eq!(listing.rejected.len(), 1);
    }

    /// A server that ends its lines with LF alone: each LF ends a line.
    #[test]
    fn nlst_lf_only_listing_splits_at_lf() {
        let listing = parse_nlst(b"a.txt\nb.txt\nbad\rname\n", "/pub");
        assert_eq!(listing.names, ["a.txt", "b.txt"]);
        assert_eq!(listing.rejected[0].line, "bad\\rname");
        let mlsd = parse_mlsd(b"type=file;size=1; a\ntype=file;size=2; b\n", "/pub");
        let names: Vec<&str> = mlsd.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    /// MLSD frames its lines the same way: a bare LF in a name refuses that entry whole,
    /// and the refused entry carries its name, not its facts.
    #[test]
    fn mlsd_lf_in_a_name_is_refused_whole() {
        let mlsd = parse_mlsd(
            b"type=file;size=1; a\r\ntype=file;size=2; bad\nname\r\n",
            "/pub",
        );
        let names: Vec<&str> = mlsd.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        assert_eq!(mlsd.rejected.len(), 1, "{mlsd:?}");
        assert_eq!(mlsd.rejected[0].line, "bad\\nname");
        assert_eq!(mlsd.rejected[0].name, "bad\nname");
        // A line whose facts cannot be read is shown whole: `x` is not known to be a name.
        let mlsd = parse_mlsd(b"DELE x\r\ntype=file;size=zz; b\r\n", "/pub");
        let lines: Vec<&str> = mlsd.rejected.iter().map(|r| r.line.as_str()).collect();
        assert_eq!(lines, ["DELE x", "b"]);
    }

    fn mlsd(line: &str) -> Result<MlsdLine, MlsdError> {
        parse_mlsd_line(line.as_bytes(), "/pub")
    }

    fn entry(name: &str, kind: EntryKind, size: Option<u64>, modify: Option<&str>) -> MlsdLine {
        MlsdLine::Entry(MlsdEntry {
            name: name.to_owned(),
            kind,
            size,
            modify: modify.map(|m| ModifyTime::parse(m).unwrap()),
            unique: None,
        })
    }

    fn entry_of(name: &str, kind: EntryKind) -> MlsdEntry {
        match entry(name, kind, None, None) {
            MlsdLine::Entry(e) => e,
            MlsdLine::Skip(_) => unreachable!(),
        }
    }

    #[test]
    fn the_listed_directory_s_unique_fact_is_kept() {
        let l = parse_mlsd(
            b"type=cdir;unique=FD00U2; /pub\r\ntype=pdir;unique=FD00U1; ..\r\ntype=dir;unique=FD00U3; sub\r\n",
            "/pub",
        );
        assert_eq!(l.cdir_unique.as_deref(), Some("FD00U2"));
        assert_eq!(l.entries[0].unique.as_deref(), Some("FD00U3"));
        assert_eq!(parse_mlsd(b"type=dir; sub\r\n", "/pub").cdir_unique, None);
    }

    #[test]
    fn mlsd_lines() {
        use EntryKind::*;
        let table: &[(&str, Result<MlsdLine, MlsdError>)] = &[
            (
                "type=file;size=123;modify=20240101120000; a.txt\r\n",
                Ok(entry("a.txt", File, Some(123), Some("20240101120000"))),
            ),
            (
                "Type=FILE;Size=0;Modify=20240101120000.5;Perm=r; b.txt",
                Ok(entry("b.txt", File, Some(0), Some("20240101120000.5"))),
            ),
            (
                "modify=20240101120000;type=dir; sub",
                Ok(entry("sub", Dir, None, Some("20240101120000"))),
            ),
            (
                "type=file;unique=801U1; name with spaces; and=semis",
                Ok(MlsdLine::Entry(MlsdEntry {
                    unique: Some("801U1".into()),
                    ..entry_of("name with spaces; and=semis", File)
                })),
            ),
            (
                "type=file;size=5;  two spaces",
                Ok(entry(" two spaces", File, Some(5), None)),
            ),
            (
                "type=OS.unix=slink:/etc; link",
                Ok(entry(
                    "link",
                    Special("os.unix=slink:/etc".into()),
                    None,
                    None,
                )),
            ),
            (
                "size=7; untyped",
                Ok(entry("untyped", Unspecified, Some(7), None)),
            ),
            (" nofacts", Ok(entry("nofacts", Unspecified, None, None))),
            (
                "type=file;size=1 /pub/abs",
                Ok(entry("abs", File, Some(1), None)),
            ),
            // Skipped.
            (
                "type=cdir;modify=20240101120000; .",
                Ok(MlsdLine::Skip(SkipReason::CurrentOrParent)),
            ),
            (
                "type=cdir; /pub",
                Ok(MlsdLine::Skip(SkipReason::CurrentOrParent)),
            ),
            (
                "type=pdir; ..",
                Ok(MlsdLine::Skip(SkipReason::CurrentOrParent)),
            ),
            ("type=dir; ..", Ok(MlsdLine::Skip(SkipReason::DotEntry))),
            ("", Ok(MlsdLine::Skip(SkipReason::Blank))),
            ("\r\n", Ok(MlsdLine::Skip(SkipReason::Blank))),
            // Refused.
            ("type=file;size=1;a.txt", Err(MlsdError::NoSeparator)),
            (
                "No such file or directory",
                Err(MlsdError::MalformedFact { fact: "No".into() }),
            ),
            (
                "type=file;size=12k; a",
                Err(MlsdError::Fact(FactError::BadSize { text: "12k".into() })),
            ),
            (
                "type=file;modify=2024; a",
                Err(MlsdError::Fact(FactError::BadTime {
                    text: "2024".into(),
                })),
            ),
            (
                "type=file; ../etc/passwd",
                Err(MlsdError::Name(NameError::DotDot)),
            ),
            (
                "type=file; /etc/passwd",
                Err(MlsdError::Name(NameError::OutsideDirectory)),
            ),
            (
                "type=file; sub/a",
                Err(MlsdError::Name(NameError::NotDirectChild)),
            ),
            (
                "type=file; a\rb",
                Err(MlsdError::Name(NameError::ForbiddenByte { byte: b'\r' })),
            ),
            ("type=file; ", Err(MlsdError::Name(NameError::Empty))),
        ];
        for (line, expected) in table {
            assert_eq!(&mlsd(line), expected, "{line:?}");
        }
        assert_eq!(
            parse_mlsd_line(b"type=file; caf\xe9", "/pub"),
            Err(MlsdError::Name(NameError::NotUtf8 {
                lossy: "type=file; caf\u{FFFD}".into()
            }))
        );
    }

    #[test]
    fn mlsd_whole_listing() {
        let data = b"type=cdir;modify=20240101120000; .\r\n\
type=pdir;modify=20240101120000; ..\r\n\
type=file;size=10;modify=20240101120000; a.txt\r\n\
type=dir;modify=20240101120000; sub\r\n\
type=file;size=10;modify=20240101120000; a.txt\r\n\
garbage\r\n\
type=file;size=3; b.txt";
        let listing = parse_mlsd(data, "/pub");
        let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a.txt", "sub", "b.txt"]);
        assert_eq!(
            listing.rejected,
            [RejectedLine {
                line: "garbage".to_owned(),
                name: "garbage".to_owned(),
                reason: MlsdError::NoSeparator
            }]
        );
    }
}
