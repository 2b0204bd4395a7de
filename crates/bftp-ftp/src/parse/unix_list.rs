//! LIST in the Unix `ls -l` format, for servers without MLSD (vsftpd among them): what a
//! directory walk needs to tell files, directories, symbolic links and special files apart.
//!
//! A line is `MODE LINKS OWNER [GROUP] SIZE MONTH DAY TIME-OR-YEAR NAME`:
//! - MODE: ten characters, the type first (`-` file, `d` directory, `l` link, `c`/`b`/`p`/`s`
//!   special), possibly followed by `+` (ACL) or `.` (SELinux context);
//! - the group column may be missing (`ls -lG`, some embedded servers);
//! - a device's SIZE is `MAJOR, MINOR`;
//! - the date is `Mon DD HH:MM` (recent) or `Mon DD  YYYY` (older), the day padded;
//! - NAME is the rest of the line after one space, spaces kept; a link's is `name -> target`.
//!
//! `total N` lines are skipped, as are `.` and `..`. Every name is checked with
//! [`member_name`]; a line that is not of this format is rejected, never guessed at.

use std::collections::HashSet;

use super::facts::parse_size;
use super::listing::{lines, strip_line_end, RejectedLine};
use super::name::{member_name, NameError};

/// What a listed entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    File,
    Dir,
    /// A symbolic link, with what it points to (as the server shows it): reported, not
    /// followed.
    Symlink {
        target: String,
    },
    /// A device, pipe or socket: the type character of its mode.
    Special(char),
}

/// One entry of a LIST line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// Checked, relative to the listed directory.
    pub name: String,
    pub kind: ListKind,
    /// The size column (for a file, its size in bytes).
    pub size: Option<u64>,
    /// The date columns as displayed, one space between them (`Jul 1 07:10`, `Jan 5 2024`):
    /// `ls` shows the time of day for six months, then the year, and in the server's zone,
    /// so this is never a modify time; only a sign that a file may have changed.
    pub date: String,
}

/// What a LIST line says of a file without MDTM: its size and its display date as one
/// string (`1320000 Jul 1 07:10`). Two lines with the same hint may show the same content;
/// a different hint is asked SIZE and MDTM again (`bftp_core::watch::needs_facts`).
pub fn list_hint(size: u64, date: &str) -> String {
    format!("{size} {date}")
}

/// Why a LIST line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListLineError {
    #[error("LIST line is not in the Unix `ls -l` format: {0}")]
    NotUnix(&'static str),
    #[error(transparent)]
    Name(#[from] NameError),
}

/// A parsed LIST listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnixListing {
    pub entries: Vec<ListEntry>,
    pub rejected: Vec<RejectedLine<ListLineError>>,
    /// The listing held the directory's own `.` entry, which only `ls -a` prints: the server
    /// honoured `LIST -a`, so names starting with a dot are listed too.
    pub dot_entry: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

fn is_month(w: &str) -> bool {
    MONTHS.contains(&w.to_ascii_lowercase().as_str())
}

fn is_day(w: &str) -> bool {
    w.parse::<u8>().is_ok_and(|d| (1..=31).contains(&d))
}

fn is_time_or_year(w: &str) -> bool {
    let time = w.split_once(':').is_some_and(|(h, m)| {
        h.len() <= 2 && m.len() == 2 && h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit())
    });
    let year = w.len() == 4 && w.bytes().all(|b| b.is_ascii_digit());
    time || year
}

/// The words of `line` with the byte offset where each ends.
fn words(line: &str) -> Vec<(&str, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c == ' ', start) {
            (true, Some(s)) => {
                out.push((&line[s..i], i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((&line[s..], line.len()));
    }
    out
}

/// One LIST line: `Ok(None)` for a line that names nothing (`total N`, `.`, `..`, blank).
pub fn parse_list_line(line: &str, listed_dir: &str) -> Result<Option<ListEntry>, ListLineError> {
    parse_line(line, listed_dir).map(|l| match l {
        Line::Entry(e) => Some(e),
        Line::Nothing | Line::Dot => None,
    })
}

enum Line {
    Entry(ListEntry),
    /// `total N`, `..`, a blank line.
    Nothing,
    /// `.`, the listed directory itself (`ls -a`).
    Dot,
}

fn parse_line(line: &str, listed_dir: &str) -> Result<Line, ListLineError> {
    let trimmed = line.trim_end();
    if trimmed.trim().is_empty() {
        return Ok(Line::Nothing);
    }
    let w = words(trimmed);
    if w.len() == 2 && w[0].0.eq_ignore_ascii_case("total") {
        return Ok(Line::Nothing);
    }
    let mode = w[0].0;
    let mode_ok = (10..=11).contains(&mode.len())
        && mode.is_ascii()
        && mode[1..10].bytes().all(|b| b"rwxsStTlL-".contains(&b))
        && mode[10..]
            .bytes()
            .all(|b| b == b'+' || b == b'.' || b == b'@');
    if !mode_ok {
        return Err(ListLineError::NotUnix("no mode column"));
    }
    // The date: the first MONTH DAY TIME-OR-YEAR triple after the owner column.
    let at = (3..w.len().saturating_sub(2))
        .find(|&i| is_month(w[i].0) && is_day(w[i + 1].0) && is_time_or_year(w[i + 2].0))
        .ok_or(ListLineError::NotUnix("no date column"))?;
    let name_start = w[at + 2].1 + 1;
    let raw_name = trimmed
        .get(name_start..)
        .filter(|n| !n.is_empty())
        .ok_or(ListLineError::NotUnix("no name"))?;
    let type_char = mode.as_bytes()[0];
    let size = parse_size(w[at - 1].0).ok();
    let date = format!("{} {} {}", w[at].0, w[at + 1].0, w[at + 2].0);
    let (name, kind) = match type_char {
        b'-' => (raw_name, ListKind::File),
        b'd' => (raw_name, ListKind::Dir),
        b'l' => match raw_name.split_once(" -> ") {
            Some((name, target)) => (
                name,
                ListKind::Symlink {
                    target: target.to_owned(),
                },
            ),
            None => (
                raw_name,
                ListKind::Symlink {
                    target: String::new(),
                },
            ),
        },
        b'c' | b'b' | b'p' | b's' | b'D' => (raw_name, ListKind::Special(type_char as char)),
        _ => return Err(ListLineError::NotUnix("unknown file type")),
    };
    if name == "." {
        return Ok(Line::Dot);
    }
    if name == ".." {
        return Ok(Line::Nothing);
    }
    if kind == ListKind::File && size.is_none() {
        return Err(ListLineError::NotUnix("no size column"));
    }
    let name = member_name(name, listed_dir)?;
    Ok(Line::Entry(ListEntry {
        name,
        kind,
        size: size.filter(|_| !matches!(type_char, b'c' | b'b')),
        date,
    }))
}

/// A whole LIST listing of `listed_dir` (lines as in [`super::listing`]: CRLF, else LF).
pub fn parse_list(listing: &[u8], listed_dir: &str) -> UnixListing {
    let mut out = UnixListing::default();
    let mut seen = HashSet::new();
    for raw in lines(listing) {
        let bytes = strip_line_end(raw);
        let parsed = match std::str::from_utf8(bytes) {
            Ok(text) => match text.bytes().find(|b| matches!(b, b'\r' | b'\n' | 0)) {
                Some(byte) => Err(ListLineError::Name(NameError::ForbiddenByte { byte })),
                None => parse_line(text, listed_dir),
            },
            Err(_) => Err(ListLineError::Name(NameError::NotUtf8 {
                lossy: String::from_utf8_lossy(bytes).into_owned(),
            })),
        };
        match parsed {
            Ok(Line::Entry(entry)) => {
                if seen.insert(entry.name.clone()) {
                    out.entries.push(entry);
                }
            }
            Ok(Line::Dot) => out.dot_entry = true,
            Ok(Line::Nothing) => {}
            Err(reason) => out.rejected.push(RejectedLine::new(bytes, reason)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, kind: ListKind, size: Option<u64>, date: &str) -> ListEntry {
        ListEntry {
            name: name.into(),
            kind,
            size,
            date: date.into(),
        }
    }

    #[test]
    fn vsftpd_lines() {
        // vsftpd 3.0.3, as it answered LIST (numeric owner and group, padded day).
        let listing = b"drwxr-xr-x    2 1000     1000         4096 Dec 01 23:00 empty\r\n\
-rw-r--r--    1 1000     1000         1234 Dec 01 23:00 a b  c.dat\r\n\
-rw-r--r--    1 1000     1000            0 Jan 05  2024 \xc3\xbc.dat\r\n\
lrwxrwxrwx    1 1000     1000            5 Dec 01 23:00 link -> a.dat\r\n\
drwxr-xr-x    3 1000     1000         4096 Dec 01 23:00 sub dir\r\n";
        let l = parse_list(listing, "/pub");
        assert!(l.rejected.is_empty(), "{:?}", l.rejected);
        assert!(!l.dot_entry, "no `.`: hidden names may be missing");
        assert_eq!(
            l.entries,
            vec![
                entry("empty", ListKind::Dir, Some(4096), "Dec 01 23:00"),
                entry("a b  c.dat", ListKind::File, Some(1234), "Dec 01 23:00"),
                entry("ü.dat", ListKind::File, Some(0), "Jan 05 2024"),
                entry(
                    "link",
                    ListKind::Symlink {
                        target: "a.dat".into()
                    },
                    Some(5),
                    "Dec 01 23:00"
                ),
                entry("sub dir", ListKind::Dir, Some(4096), "Dec 01 23:00"),
            ]
        );
    }

    /// `LIST -a` (vsftpd 3.0.3): `.` and `..` are not entries, but `.` proves `-a` was
    /// honoured; names starting with a dot or a dash are names like any other.
    #[test]
    fn list_a_shows_hidden_names_and_the_dot_entry() {
        let listing = b"-rw-r--r--    1 1003     1004            4 Dec 04 17:46 -a\r\n\
drwxr-xr-x    3 1003     1004         4096 Dec 04 17:46 .\r\n\
drwxr-xr-x    4 1003     1004         4096 Dec 04 17:46 ..\r\n\
drwxr-xr-x    2 1003     1004         4096 Dec 04 17:46 .dotdir\r\n\
-rw-r--r--    1 1003     1004            1 Dec 04 17:46 .hidden\r\n\
-rw-r--r--    1 1003     1004            4 Dec 04 17:46 -la x\r\n";
        let l = parse_list(listing, "top");
        assert!(l.rejected.is_empty(), "{:?}", l.rejected);
        assert!(l.dot_entry);
        let names: Vec<(&str, &ListKind)> = l
            .entries
            .iter()
            .map(|e| (e.name.as_str(), &e.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("-a", &ListKind::File),
                (".dotdir", &ListKind::Dir),
                (".hidden", &ListKind::File),
                ("-la x", &ListKind::File),
            ]
        );
    }

    #[test]
    fn variants_of_ls() {
        let rows: Vec<(&str, Option<ListEntry>)> = vec![
            ("total 12", None),
            ("", None),
            ("drwxr-xr-x   2 u g 4096 Dec  1 10:00 .", None),
            ("drwxr-xr-x   2 u g 4096 Dec  1 10:00 ..", None),
            // Text owner and group, one-digit day, ACL and SELinux marks.
            (
                "-rw-r--r--+  1 alice staff 77 Jun  7 09:05 notes.txt",
                Some(entry("notes.txt", ListKind::File, Some(77), "Jun 7 09:05")),
            ),
            (
                "drwxr-xr-x.  4 root root 4096 Feb 29  2020 old",
                Some(entry("old", ListKind::Dir, Some(4096), "Feb 29 2020")),
            ),
            // No group column.
            (
                "-rw-r--r-- 1 ftp 42 Mar 10 2021 nogroup.bin",
                Some(entry(
                    "nogroup.bin",
                    ListKind::File,
                    Some(42),
                    "Mar 10 2021",
                )),
            ),
            // A name that looks like a date is still the name.
            (
                "-rw-r--r-- 1 u g 9 Mar 10 12:00 Dec 25 2020",
                Some(entry(
                    "Dec 25 2020",
                    ListKind::File,
                    Some(9),
                    "Mar 10 12:00",
                )),
            ),
            // Devices, pipes, sockets: special, never files.
            (
                "crw-rw----   1 root tty 4, 0 Dec  1 10:00 tty0",
                Some(entry("tty0", ListKind::Special('c'), None, "Dec 1 10:00")),
            ),
            (
                "prw-r--r--   1 u g 0 Dec  1 10:00 fifo",
                Some(entry(
                    "fifo",
                    ListKind::Special('p'),
                    Some(0),
                    "Dec 1 10:00",
                )),
            ),
            (
                "srwxrwxrwx   1 u g 0 Dec  1 10:00 sock",
                Some(entry(
                    "sock",
                    ListKind::Special('s'),
                    Some(0),
                    "Dec 1 10:00",
                )),
            ),
            (
                "-rwsr-xr-T   1 u g 18446744073709551615 Dec  1 10:00 big",
                Some(entry("big", ListKind::File, Some(u64::MAX), "Dec 1 10:00")),
            ),
        ];
        for (line, want) in rows {
            assert_eq!(parse_list_line(line, "").unwrap(), want, "{line:?}");
        }
    }

    /// The hint is the size and the display date, whatever the padding of the columns
    /// (`ls` widens them to the longest size or owner in the directory): a line that shows the
    /// same size and date gives the same hint, a changed size or date a different one.
    #[test]
    fn a_list_hint_is_the_size_and_the_display_date() {
        let hint = |line: &str| {
            let e = parse_list_line(line, "").unwrap().unwrap();
            list_hint(e.size.unwrap(), &e.date)
        };
        let vsftpd = "-rw-r--r--    1 1000     1000      1320000 Jul 01 07:10 a.csv";
        assert_eq!(hint(vsftpd), "1320000 Jul 01 07:10");
        assert_eq!(
            hint("-rw-r--r-- 1 alice staff 1320000 Jul  1 07:10 a.csv"),
            "1320000 Jul 1 07:10"
        );
        assert_eq!(
            hint("-rw-r--r--   1 alice  staff  1320000  Jul  1  07:10 a.csv"),
            hint("-rw-r--r-- 1 alice staff 1320000 Jul 1 07:10 a.csv"),
        );
        // Six months on, the same file shows its year: another hint (asked again, and the
        // same facts come back).
        assert_eq!(
            hint("-rw-r--r-- 1 u g 1320000 Jul  1  2026 a.csv"),
            "1320000 Jul 1 2026"
        );
        assert_ne!(
            hint("-rw-r--r-- 1 u g 1320001 Jul  1 07:10 a.csv"),
            hint("-rw-r--r-- 1 u g 1320000 Jul  1 07:10 a.csv")
        );
        assert_ne!(
            hint("-rw-r--r-- 1 u g 1320000 Jul  1 07:11 a.csv"),
            hint("-rw-r--r-- 1 u g 1320000 Jul  1 07:10 a.csv")
        );
        // A name that looks like a date does not enter the hint.
        assert_eq!(
            hint("-rw-r--r-- 1 u g 9 Mar 10 12:00 Dec 25 2020"),
            "9 Mar 10 12:00"
        );
    }

    #[test]
    fn lines_that_are_not_ls_are_refused() {
        for (line, why) in [
            (
                "03-01-24  10:00AM       <DIR>          dos",
                "no mode column",
            ),
            ("-rw-r--r-- 1 u g 12 someday a.dat", "no date column"),
            ("-rw-r--r-- 1 u g x Dec  1 10:00 a.dat", "no size column"),
            ("-rw-r--r-- 1 u g 12 Dec  1 10:00 ", "no name"),
            ("?rw-r--r-- 1 u g 12 Dec  1 10:00 a", "unknown file type"),
        ] {
            let e = parse_list_line(line, "").unwrap_err().to_string();
            assert!(e.contains(why), "{line:?}: {e}");
        }
        // A name that leaves the listed directory.
        assert!(matches!(
            parse_list_line("-rw-r--r-- 1 u g 1 Dec  1 10:00 ../x", ""),
            Err(ListLineError::Name(_))
        ));
        let l = parse_list(b"-rw-r--r-- 1 u g 1 Dec  1 10:00 bad\rname\r\n", "");
        assert!(l.entries.is_empty());
        assert_eq!(l.rejected.len(), 1);
        assert_eq!(
            l.rejected[0].line,
            "-rw-r--r-- 1 u g 1 Dec  1 10:00 bad\\rname"
        );
    }
}
