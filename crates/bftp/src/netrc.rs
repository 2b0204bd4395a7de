//! A reader for `~/.netrc` (or `$NETRC`), the file ftp(1) and curl read logins from.
//!
//! The crates on crates.io (`netrc` 0.4, `rust-netrc` 0.1) are unmaintained or keep only
//! one entry per host and print passwords in `Debug`; this is the small part we need.
//!
//! Syntax: whitespace-separated words; `machine NAME`, then `login`, `password`, `account`
//! (and `port`, ignored); `default` matches any host and is looked at only after every
//! `machine`; `macdef NAME` skips lines up to the next empty one; a word starting with `#`
//! where a keyword is expected starts a comment to the end of the line. Values may be
//! double-quoted, with `\"`, `\\`, `\n`, `\r`, `\t` escapes (curl's syntax) to hold spaces.
//! Error messages name the line, never a value: a mis-split password must not be printed.

use std::fmt;
use std::path::{Path, PathBuf};

use bftp_core::Secret;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `None` for the `default` entry.
    pub machine: Option<String>,
    pub login: Option<String>,
    pub password: Option<Secret>,
    pub account: Option<Secret>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Netrc {
    entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetrcError {
    pub line: usize,
    pub reason: &'static str,
}

impl fmt::Display for NetrcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for NetrcError {}

/// `$NETRC` if set, else `$HOME/.netrc`.
pub fn default_path(netrc_var: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    netrc_var
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| home.map(|h| h.join(".netrc")))
}

impl Netrc {
    pub fn parse(text: &str) -> Result<Netrc, NetrcError> {
        let mut lex = Lexer {
            text,
            pos: 0,
            line: 1,
        };
        let mut entries: Vec<Entry> = Vec::new();
        // Whether a `login`/`password`/... has an entry to belong to.
        let mut open = false;
        while let Some(tok) = lex.word()? {
            if tok.raw.starts_with('#') {
                lex.skip_line();
                continue;
            }
            let missing = || NetrcError {
                line: tok.line,
                reason: "a keyword has no value",
            };
            match tok.raw {
                "machine" => {
                    let name = lex.word()?.ok_or_else(missing)?.value;
                    entries.push(Entry { machine: Some(name), login: None, password: None, account: None });
                    open = true;
                }
                "default" => {
                    entries.push(Entry { machine: None, login: None, password: None, account: None });
                    open = true;
                }
                "macdef" => {
                    lex.word()?.ok_or_else(missing)?;
                    lex.skip_macro();
                    open = false;
                }
                "login" | "password" | "account" | "port" => {
                    let value = lex.word()?.ok_or_else(missing)?.value;
                    let entry = match entries.last_mut() {
                        Some(e) if open => e,
                        _ => {
                            return Err(NetrcError {
                                line: tok.line,
                                reason: "login, password or account before any `machine` or `default`",
                            })
                        }
                    };
                    match tok.raw {
                        "login" => entry.login = Some(value),
                        "password" => entry.password = Some(Secret::new(value)),
                        "account" => entry.account = Some(Secret::new(value)),
                        _ => {}
                    }
                }
                _ => {
                    return Err(NetrcError {
                        line: tok.line,
                        reason: "a word that is not a netrc keyword (a value with spaces must be double-quoted)",
                    })
                }
            }
        }
        Ok(Netrc { entries })
    }

    pub fn load(path: &Path) -> anyhow::Result<Option<Netrc>> {
        use anyhow::Context;
        let text = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let text = String::from_utf8(text)
            .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?;
        let netrc = Netrc::parse(&text).with_context(|| format!("reading {}", path.display()))?;
        Ok(Some(netrc))
    }

    /// The entry for `host` (case-insensitive) and, when `login` is given, that login
    /// (an entry without a login matches any); the first `machine` that fits, else the first
    /// `default` that fits.
    pub fn find(&self, host: &str, login: Option<&str>) -> Option<&Entry> {
        let login_fits = |e: &&Entry| match (login, e.login.as_deref()) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        self.entries
            .iter()
            .filter(|e| {
                e.machine
                    .as_deref()
                    .is_some_and(|m| m.eq_ignore_ascii_case(host))
            })
            .find(login_fits)
            .or_else(|| {
                self.entries
                    .iter()
                    .filter(|e| e.machine.is_none())
                    .find(login_fits)
            })
    }
}

struct Token<'a> {
    /// The word as written (for keywords), quotes included.
    raw: &'a str,
    /// The word with quotes and escapes resolved (for values).
    value: String,
    line: usize,
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    fn word(&mut self) -> Result<Option<Token<'a>>, NetrcError> {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() && bytes[self.pos].is_ascii_whitespace() {
            if bytes[self.pos] == b'\n' {
                self.line += 1;
            }
            self.pos += 1;
        }
        if self.pos >= bytes.len() {
            return Ok(None);
        }
        let start = self.pos;
        let line = self.line;
        if bytes[start] == b'"' {
            let mut value = String::new();
            let mut chars = self.text[start + 1..].char_indices();
            loop {
                match chars.next() {
                    None => {
                        return Err(NetrcError {
                            line,
                            reason: "a quoted value is not closed",
                        })
                    }
                    Some((i, '"')) => {
                        self.pos = start + 1 + i + 1;
                        break;
                    }
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, 'r')) => value.push('\r'),
                        Some((_, 't')) => value.push('\t'),
                        Some((_, c)) => value.push(c),
                        None => {
                            return Err(NetrcError {
                                line,
                                reason: "a quoted value is not closed",
                            })
                        }
                    },
                    Some((_, c)) => {
                        if c == '\n' {
                            self.line += 1;
                        }
                        value.push(c);
                    }
                }
            }
            return Ok(Some(Token {
                raw: &self.text[start..self.pos],
                value,
                line,
            }));
        }
        while self.pos < bytes.len() && !bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        let raw = &self.text[start..self.pos];
        Ok(Some(Token {
            raw,
            value: raw.to_string(),
            line,
        }))
    }

    fn skip_line(&mut self) {
        match self.text[self.pos..].find('\n') {
            Some(i) => self.pos += i,
            None => self.pos = self.text.len(),
        }
    }

    /// A macro body runs from the line after `macdef NAME` to the first empty line.
    fn skip_macro(&mut self) {
        self.skip_line();
        let rest = &self.text[self.pos..];
        let mut consumed = 0;
        let mut lines = rest.split_inclusive('\n');
        // The remainder of the `macdef` line itself (its newline).
        if let Some(first) = lines.next() {
            consumed += first.len();
            self.line += 1;
        }
        for l in lines {
            consumed += l.len();
            if l.ends_with('\n') {
                self.line += 1;
            }
            if l.trim().is_empty() {
                break;
            }
        }
        self.pos += consumed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw(e: Option<&Entry>) -> Option<(&str, &str)> {
        e.map(|e| {
            (
                e.login.as_deref().unwrap_or("-"),
                e.password.as_ref().map_or("-", |p| p.expose()),
            )
        })
    }

    const SAMPLE: &str = "\
# logins for bftp
machine src.example.org login alice password s3cret
machine src.example.org login bob password \"two words\" account acct1
machine dst.example.org
    login carol
    password #notacomment
macdef init
cd /pub
binary

machine nologin.example.org password p0
default login anonymous password me@example.org
";

    #[test]
    fn lookup_table() {
        let n = Netrc::parse(SAMPLE).unwrap();
        type Case<'a> = (&'a str, Option<&'a str>, Option<(&'a str, &'a str)>);
        let cases: &[Case<'_>] = &[
            ("src.example.org", None, Some(("alice", "s3cret"))),
            ("SRC.example.org", Some("alice"), Some(("alice", "s3cret"))),
            ("src.example.org", Some("bob"), Some(("bob", "two words"))),
            (
                "dst.example.org",
                Some("carol"),
                Some(("carol", "#notacomment")),
            ),
            ("nologin.example.org", Some("zed"), Some(("-", "p0"))),
            // No machine fits this login: the default does.
            (
                "src.example.org",
                Some("anonymous"),
                Some(("anonymous", "me@example.org")),
            ),
            (
                "other.example.org",
                None,
                Some(("anonymous", "me@example.org")),
            ),
            ("other.example.org", Some("dave"), None),
        ];
        for (host, login, want) in cases {
            assert_eq!(pw(n.find(host, *login)), *want, "{host} {login:?}");
        }
        let bob = n.find("src.example.org", Some("bob")).unwrap();
        assert_eq!(bob.account.as_ref().map(|a| a.expose()), Some("acct1"));
    }

    #[test]
    fn macdef_body_is_skipped_and_lines_counted() {
        let text = "macdef x\nmachine in-macro\n\nmachine h login u password p\nbogus";
        let err = Netrc::parse(text).unwrap_err();
        assert_eq!(err.line, 5);
        let ok =
            Netrc::parse("macdef x\nmachine in-macro\n\nmachine h login u password p").unwrap();
        assert!(ok.find("in-macro", None).is_none());
        assert!(ok.find("h", None).is_some());
    }

    #[test]
    fn quoted_escapes() {
        let n = Netrc::parse(r#"machine h login "a b" password "q\"\\\tz""#).unwrap();
        assert_eq!(pw(n.find("h", Some("a b"))), Some(("a b", "q\"\\\tz")));
    }

    #[test]
    fn errors_name_the_line_never_the_value() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "machine h\npassword my secret words",
                2,
                "not a netrc keyword",
            ),
            ("machine h login", 1, "no value"),
            ("login u password p", 1, "before any"),
            ("machine h password \"unclosed secret", 1, "not closed"),
        ];
        for (text, line, needle) in cases {
            let e = Netrc::parse(text).unwrap_err();
            let msg = e.to_string();
            assert_eq!(e.line, *line, "{text:?}: {msg}");
            assert!(msg.contains(needle), "{text:?}: {msg}");
            assert!(!msg.contains("secret"), "{msg}");
        }
    }

    #[test]
    fn debug_does_not_show_passwords() {
        let n = Netrc::parse("machine h login u password hunter2 account acct9").unwrap();
        let dbg = format!("{n:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains("acct9"), "{dbg}");
    }

    #[test]
    fn path_choice() {
        assert_eq!(
            default_path(Some("/x/netrc".into()), Some("/home/a".into())),
            Some(PathBuf::from("/x/netrc"))
        );
        assert_eq!(
            default_path(Some("".into()), Some("/home/a".into())),
            Some(PathBuf::from("/home/a/.netrc"))
        );
        assert_eq!(default_path(None, None), None);
    }

    #[test]
    fn missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Netrc::load(&dir.path().join("absent")).unwrap(), None);
    }
}
