//! File sizes and modification times, as SIZE and MDTM replies (213) and MLSD
//! `size`/`modify` facts give them (RFC 3659).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::text::truncate;

/// A size or a time that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FactError {
    #[error("size {text:?} is not a decimal number of bytes")]
    BadSize { text: String },
    #[error("time {text:?} is not YYYYMMDDHHMMSS[.sss] in UTC")]
    BadTime { text: String },
    #[error("no quoted directory in PWD reply {text:?}")]
    BadPwd { text: String },
}

/// The text of a 213 reply to SIZE: a decimal byte count (RFC 3659 §4).
pub fn parse_size_reply(text: &str) -> Result<u64, FactError> {
    parse_size(text.trim())
}

/// The text of a 213 reply to MDTM: a time in UTC (RFC 3659 §3).
pub fn parse_mdtm_reply(text: &str) -> Result<ModifyTime, FactError> {
    ModifyTime::parse(text.trim())
}

/// The directory in the text of a 257 reply to PWD: `"/pub" is the current
/// directory`, with an embedded `"` doubled (RFC 959 Appendix II).
pub fn parse_pwd_reply(text: &str) -> Result<String, FactError> {
    let bad = || FactError::BadPwd {
        text: truncate(text.to_owned()),
    };
    let rest = &text[text.find('"').ok_or_else(bad)? + 1..];
    let mut dir = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            if chars.peek() == Some(&'"') {
                chars.next();
                dir.push('"');
            } else if dir.is_empty() {
                return Err(bad());
            } else {
                return Ok(dir);
            }
        } else {
            dir.push(c);
        }
    }
    Err(bad())
}

pub(crate) fn parse_size(text: &str) -> Result<u64, FactError> {
    let bad = || FactError::BadSize {
        text: truncate(text.to_owned()),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse().map_err(|_| bad())
}

/// A modification time as RFC 3659 §2.3 writes it: `YYYYMMDDHHMMSS[.sss]`, UTC.
/// Fields are checked (month 1 to 12, a day that exists in that month, a
/// second up to 60 for a leap second); fractions finer than a millisecond are
/// dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModifyTime {
    year: u16,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    millis: u16,
}

impl ModifyTime {
    pub fn parse(text: &str) -> Result<Self, FactError> {
        let bad = || FactError::BadTime {
            text: truncate(text.to_owned()),
        };
        let (digits, fraction) = match text.split_once('.') {
            Some((digits, fraction)) => (digits, Some(fraction)),
            None => (text, None),
        };
        if digits.len() != 14 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let d = digits.as_bytes();
        let two = |i: usize| (d[i] - b'0') * 10 + (d[i + 1] - b'0');
        let year = u16::from(two(0)) * 100 + u16::from(two(2));
        let (month, day, hour, minute, second) = (two(4), two(6), two(8), two(10), two(12));
        let millis = match fraction {
            None => 0,
            Some(f) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => f
                .bytes()
                .chain(std::iter::repeat(b'0'))
                .take(3)
                .fold(0u16, |n, d| n * 10 + u16::from(d - b'0')),
            Some(_) => return Err(bad()),
        };
        let valid = (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month)
            && hour <= 23
            && minute <= 59
            && second <= 60;
        if !valid {
            return Err(bad());
        }
        Ok(Self {
            year,
            month,
            day,
            hour,
            minute,
            second,
            millis,
        })
    }

    pub fn year(self) -> u16 {
        self.year
    }

    pub fn month(self) -> u8 {
        self.month
    }

    pub fn day(self) -> u8 {
        self.day
    }

    pub fn hour(self) -> u8 {
        self.hour
    }

    pub fn minute(self) -> u8 {
        self.minute
    }

    pub fn second(self) -> u8 {
        self.second
    }

    pub fn millis(self) -> u16 {
        self.millis
    }

    /// The time as RFC 3659 writes it (MLSD's `modify` fact, MDTM's reply):
    /// `YYYYMMDDHHMMSS`, with `.sss` when the milliseconds are not zero. One canonical
    /// string per time, whatever precision the server wrote (`...00.000` and `...00` are
    /// both `...00`): what a watch's checkpoint keeps as a file's modify time.
    pub fn to_rfc3659(self) -> String {
        let mut out = format!(
            "{:04}{:02}{:02}{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        );
        if self.millis != 0 {
            out.push_str(&format!(".{:03}", self.millis));
        }
        out
    }

    /// Milliseconds since 1970-01-01T00:00:00Z, negative before. POSIX time has
    /// no leap seconds: second 60 lands on the first second of the next minute.
    pub fn unix_millis(self) -> i64 {
        let days = days_from_civil(i64::from(self.year), self.month, self.day);
        let seconds = days * 86_400
            + i64::from(self.hour) * 3_600
            + i64::from(self.minute) * 60
            + i64::from(self.second);
        seconds * 1_000 + i64::from(self.millis)
    }

    /// As a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let millis = self.unix_millis();
        let offset = Duration::from_millis(millis.unsigned_abs());
        if millis >= 0 {
            UNIX_EPOCH + offset
        } else {
            UNIX_EPOCH - offset
        }
    }
}

impl fmt::Display for ModifyTime {
    /// RFC 3339: `2024-01-01T12:00:00Z`, with `.sss` when not zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )?;
        if self.millis != 0 {
            write!(f, ".{:03}", self.millis)?;
        }
        f.write_str("Z")
    }
}

fn is_leap(year: u16) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u16, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: u8, day: u8) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pwd_replies() {
        let table: &[(&str, Option<&str>)] = &[
            ("\"/\" is the current directory", Some("/")),
            ("\"/pub/in\"", Some("/pub/in")),
            (
                "\"/a \"\"quoted\"\" dir\" is current",
                Some("/a \"quoted\" dir"),
            ),
            ("MKD ok \"/x\"", Some("/x")),
            ("no quotes", None),
            ("\"unterminated", None),
            ("\"\"", None),
        ];
        for (text, expected) in table {
            assert_eq!(parse_pwd_reply(text).ok().as_deref(), *expected, "{text}");
        }
    }

    #[test]
    fn sizes() {
        for (text, expected) in [
            ("0", Ok(0)),
            ("123", Ok(123)),
            (" 123\r", Ok(123)),
            ("18446744073709551615", Ok(u64::MAX)),
            ("18446744073709551616", Err(())),
            ("", Err(())),
            ("-1", Err(())),
            ("+1", Err(())),
            ("12 bytes", Err(())),
            ("1e3", Err(())),
            ("File not found", Err(())),
        ] {
            let result = parse_size_reply(text).map_err(|e| {
                assert!(matches!(e, FactError::BadSize { .. }));
            });
            assert_eq!(result, expected, "{text:?}");
        }
    }

    #[test]
    fn times() {
        let table = [
            ("20240101120000", Some("2024-01-01T12:00:00Z")),
            ("19700101000000", Some("1970-01-01T00:00:00Z")),
            ("20240229235959", Some("2024-02-29T23:59:59Z")),
            ("20161231235960", Some("2016-12-31T23:59:60Z")),
            ("20240101120000.5", Some("2024-01-01T12:00:00.500Z")),
            ("20240101120000.123456", Some("2024-01-01T12:00:00.123Z")),
            ("20240101120000.000", Some("2024-01-01T12:00:00Z")),
            ("00010101000000", Some("0001-01-01T00:00:00Z")),
            // Invalid fields.
            ("20230229120000", None),
            ("20241301120000", None),
            ("20240001120000", None),
            ("20240100120000", None),
            ("20240431120000", None),
            ("20240101240000", None),
            ("20240101126000", None),
            ("20240101120061", None),
            // Invalid shapes, including the "19100" year of old Y2K bugs.
            ("191000101120000", None),
            ("2024010112000", None),
            ("20240101120000.", None),
            ("20240101120000.5x", None),
            ("2024-01-01T12:00:00Z", None),
            ("", None),
            ("2024010112000é", None),
        ];
        for (text, expected) in table {
            let result = ModifyTime::parse(text);
            assert_eq!(
                result.ok().map(|t| t.to_string()).as_deref(),
                expected,
                "{text:?}"
            );
        }
        assert_eq!(
            parse_mdtm_reply(" 20240101120000\r"),
            ModifyTime::parse("20240101120000")
        );
        assert!(matches!(
            parse_mdtm_reply("x"),
            Err(FactError::BadTime { .. })
        ));
    }

    #[test]
    fn the_rfc3659_form_is_one_string_per_time() {
        for (text, canonical) in [
            ("20240101120000", "20240101120000"),
            ("20240101120000.000", "20240101120000"),
            ("20240101120000.5", "20240101120000.500"),
            ("20240101120000.123456", "20240101120000.123"),
            ("00010101000000", "00010101000000"),
        ] {
            let time = ModifyTime::parse(text).unwrap();
            assert_eq!(time.to_rfc3659(), canonical, "{text}");
            assert_eq!(ModifyTime::parse(canonical), Ok(time), "{text}");
        }
    }

    #[test]
    fn unix_time() {
        for (text, millis) in [
            ("19700101000000", 0),
            ("19700101000001.250", 1_250),
            ("20000301000000", 951_868_800_000),
            ("20240101120000", 1_704_110_400_000),
            ("19691231235959", -1_000),
        ] {
            let time = ModifyTime::parse(text).unwrap();
            assert_eq!(time.unix_millis(), millis, "{text}");
            let expected = if millis >= 0 {
                UNIX_EPOCH + Duration::from_millis(millis as u64)
            } else {
                UNIX_EPOCH - Duration::from_millis(millis.unsigned_abs())
            };
            assert_eq!(time.to_system_time(), expected, "{text}");
        }
        let t = ModifyTime::parse("20240229235958.007").unwrap();
        assert_eq!(
            (
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millis()
            ),
            (2024, 2, 29, 23, 59, 58, 7)
        );
    }
}
