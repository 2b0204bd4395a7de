//! Names that come from a server, and the wildcard matcher the daemon uses on them.
//!
//! RULES.md §8: every name from NLST or MLSD is checked before it goes into a
//! command: no CR, LF or NUL (they would end the command and start another), no
//! `..` component, no absolute path outside the listed directory. RULES.md §4.4: the
//! daemon matches a job's wildcard itself ([`glob_match`]) instead of relying on
//! server-side globbing, which differs from server to server.

/// A server-supplied name that must not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("empty name")]
    Empty,
    #[error("name {lossy:?} is not valid UTF-8")]
    NotUtf8 { lossy: String },
    /// CR, LF or NUL.
    #[error("name contains the byte 0x{byte:02x} (CR, LF and NUL could inject FTP commands)")]
    ForbiddenByte { byte: u8 },
    #[error("name has a \"..\" component")]
    DotDot,
    #[error("absolute path outside the listed directory")]
    OutsideDirectory,
    #[error("a path below the listed directory, not a name in it")]
    NotDirectChild,
}

/// Refuse CR, LF and NUL in anything about to go into a command line.
pub fn check_argument(arg: &str) -> Result<(), NameError> {
    match arg.bytes().find(|b| matches!(b, b'\r' | b'\n' | b'\0')) {
        Some(byte) => Err(NameError::ForbiddenByte { byte }),
        None => Ok(()),
    }
}

/// Check `path`, as a server listed it for `listed_dir`, and return it relative
/// to `listed_dir`, with empty and `.` components removed.
///
/// - An absolute path is accepted only inside an absolute `listed_dir` (or `/`);
///   with a relative `listed_dir` it cannot be checked and is refused.
/// - A relative path that starts with `listed_dir/` loses that prefix: BSD
///   servers answer `NLST dir` with `dir/name` lines (RFC 1068). A directory
///   really named like its parent is then misread; no listing can tell them apart.
/// - Any `..` component is refused, even one that would stay inside: resolving
///   it lexically is wrong when the server has symbolic links. Components are
///   split at `\` too for this check, for the sake of Windows destinations.
pub fn validate_server_path(path: &str, listed_dir: &str) -> Result<String, NameError> {
    check_argument(path)?;
    let dir = normalize_dir(listed_dir);
    let relative = if path.starts_with('/') {
        if dir == "/" {
            path
        } else if dir.starts_with('/') {
            path.strip_prefix(dir)
                .filter(|rest| rest.starts_with('/'))
                .ok_or(NameError::OutsideDirectory)?
        } else {
            return Err(NameError::OutsideDirectory);
        }
    } else if dir.is_empty() || dir.starts_with('/') {
        path
    } else {
        match path.strip_prefix(dir) {
            Some(rest) if rest.starts_with('/') => rest,
            _ => path,
        }
    };
    if relative
        .split(['/', '\\'])
        .any(|component| component == "..")
    {
        return Err(NameError::DotDot);
    }
    let components: Vec<&str> = relative
        .split('/')
        .filter(|component| !component.is_empty() && *component != ".")
        .collect();
    if components.is_empty() {
        return Err(NameError::Empty);
    }
    Ok(components.join("/"))
}

/// [`validate_server_path`], and the result must be a name directly in
/// `listed_dir` (no `/`): a member of a wildcard job.
pub fn member_name(path: &str, listed_dir: &str) -> Result<String, NameError> {
    let name = validate_server_path(path, listed_dir)?;
    if name.contains('/') {
        return Err(NameError::NotDirectChild);
    }
    Ok(name)
}

/// `dir` without trailing slashes (`/` stays `/`), and `.` as the empty string.
pub(crate) fn normalize_dir(dir: &str) -> &str {
    let trimmed = dir.trim_end_matches('/');
    if trimmed.is_empty() && dir.starts_with('/') {
        "/"
    } else if trimmed == "." {
        ""
    } else {
        trimmed
    }
}

/// Whether `pattern` contains a wildcard (`*`, `?` or a complete `[...]`) that
/// [`glob_match`] would interpret, rather than only literal characters.
pub fn is_glob_pattern(pattern: &str) -> bool {
    tokenize(pattern)
        .iter()
        .any(|token| !matches!(token, Token::Literal(_)))
}

/// Shell-style wildcard matching of one name (not a path):
///
/// - `*` matches any run of characters, `?` exactly one;
/// - `[...]` one character from a set, with ranges (`[a-z0-9]`), negated by a
///   leading `!` or `^`; a `]` right after the opening (and negation) is literal,
///   as is a `-` first or last; a `[` without a closing `]` is literal;
/// - `\` makes the next character literal (outside brackets);
/// - a leading `.` in the name must be matched by a literal `.`, as in a shell:
///   `*` does not pick up hidden files. This also keeps NLST servers (whose `ls`
///   hides them) and MLSD servers (which show them) giving the same members.
///
/// Characters are Unicode scalar values; matching is case-sensitive. The cost is
/// at most the product of the two lengths, never exponential.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let tokens = tokenize(pattern);
    let name: Vec<char> = name.chars().collect();
    if name.first() == Some(&'.') && tokens.first() != Some(&Token::Literal('.')) {
        return false;
    }
    let (mut t, mut n) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match tokens.get(t) {
            Some(Token::Star) => {
                backtrack = Some((t, n));
                t += 1;
                continue;
            }
            Some(Token::Any) => true,
            Some(Token::Literal(c)) => *c == name[n],
            Some(Token::Class(class)) => class.matches(name[n]),
            None => false,
        };
        if step {
            t += 1;
            n += 1;
        } else if let Some((star_t, star_n)) = backtrack {
            t = star_t + 1;
            n = star_n + 1;
            backtrack = Some((star_t, star_n + 1));
        } else {
            return false;
        }
    }
    tokens[t..].iter().all(|token| *token == Token::Star)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    Any,
    Star,
    Class(Class),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Class {
    negated: bool,
    ranges: Vec<(char, char)>,
}

impl Class {
    fn matches(&self, c: char) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

fn tokenize(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                // Consecutive stars are one star.
                if tokens.last() != Some(&Token::Star) {
                    tokens.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '\\' => {
                tokens.push(Token::Literal(chars.get(i + 1).copied().unwrap_or('\\')));
                i += 2;
            }
            '[' => match bracket(&chars[i + 1..]) {
                Some((class, len)) => {
                    tokens.push(Token::Class(class));
                    i += 1 + len;
                }
                None => {
                    tokens.push(Token::Literal('['));
                    i += 1;
                }
            },
            c => {
                tokens.push(Token::Literal(c));
                i += 1;
            }
        }
    }
    tokens
}

/// The bracket expression after a `[`, and how many characters it used
/// (through the closing `]`); `None` if it is not closed.
fn bracket(chars: &[char]) -> Option<(Class, usize)> {
    let mut i = 0;
    let negated = matches!(chars.first(), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        if c == ']' && !first {
            return Some((Class { negated, ranges }, i + 1));
        }
        first = false;
        match (chars.get(i + 1), chars.get(i + 2)) {
            (Some('-'), Some(&hi)) if hi != ']' => {
                ranges.push((c, hi));
                i += 3;
            }
            _ => {
                ranges.push((c, c));
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_argument_refuses_cr_lf_nul() {
        assert_eq!(check_argument("plain name.txt"), Ok(()));
        assert_eq!(check_argument("tab\tand spaces"), Ok(()));
        assert_eq!(
            check_argument("a\rb"),
            Err(NameError::ForbiddenByte { byte: b'\r' })
        );
        assert_eq!(
            check_argument("a\nDELE x"),
            Err(NameError::ForbiddenByte { byte: b'\n' })
        );
        assert_eq!(
            check_argument("a\0"),
            Err(NameError::ForbiddenByte { byte: 0 })
        );
    }

    #[test]
    fn server_paths() {
        use NameError::*;
        let table: &[(&str, &str, Result<&str, NameError>)] = &[
            ("a.txt", "/pub", Ok("a.txt")),
            ("a.txt", "", Ok("a.txt")),
            ("a b.txt", "/pub", Ok("a b.txt")),
            ("file..txt", "/pub", Ok("file..txt")),
            ("...", "/pub", Ok("...")),
            ("./a.txt", ".", Ok("a.txt")),
            ("./a.txt", "/pub", Ok("a.txt")),
            // The BSD quirk: the listed directory as a prefix.
            ("pub/a.txt", "pub", Ok("a.txt")),
            ("pub/a.txt", "pub/", Ok("a.txt")),
            ("pub/sub/a.txt", "pub", Ok("sub/a.txt")),
            ("public/a.txt", "pub", Ok("public/a.txt")),
            // Absolute paths: only inside an absolute listed directory.
            ("/pub/a.txt", "/pub", Ok("a.txt")),
            ("/pub/a.txt", "/pub/", Ok("a.txt")),
            ("/pub//a.txt", "/pub", Ok("a.txt")),
            ("/a.txt", "/", Ok("a.txt")),
            ("/etc/passwd", "/", Ok("etc/passwd")),
            ("/etc/passwd", "/pub", Err(OutsideDirectory)),
            ("/public/a.txt", "/pub", Err(OutsideDirectory)),
            ("/pub", "/pub", Err(OutsideDirectory)),
            ("/pub/a.txt", "pub", Err(OutsideDirectory)),
            ("/a.txt", "", Err(OutsideDirectory)),
            // Dot-dot, anywhere.
            ("..", "/pub", Err(DotDot)),
            ("../etc/passwd", "/pub", Err(DotDot)),
            ("a/../../x", "/pub", Err(DotDot)),
            ("a/../b", "/pub", Err(DotDot)),
            ("/pub/../etc", "/pub", Err(DotDot)),
            ("..\\windows", "/pub", Err(DotDot)),
            // Control bytes.
            ("a\r\nDELE b", "/pub", Err(ForbiddenByte { byte: b'\r' })),
            ("a\nb", "/pub", Err(ForbiddenByte { byte: b'\n' })),
            ("a\0", "/pub", Err(ForbiddenByte { byte: 0 })),
            // Nothing left.
            ("", "/pub", Err(Empty)),
            (".", "/pub", Err(Empty)),
            ("pub/", "pub", Err(Empty)),
        ];
        for &(path, dir, ref expected) in table {
            assert_eq!(
                validate_server_path(path, dir),
                expected.clone().map(str::to_owned),
                "{path:?} in {dir:?}"
            );
        }
    }

    #[test]
    fn member_names_are_direct_children() {
        assert_eq!(member_name("pub/a.txt", "pub"), Ok("a.txt".to_owned()));
        assert_eq!(member_name("/pub/a.txt", "/pub"), Ok("a.txt".to_owned()));
        assert_eq!(
            member_name("sub/a.txt", "/pub"),
            Err(NameError::NotDirectChild)
        );
        assert_eq!(
            member_name("/pub/sub/a", "/pub"),
            Err(NameError::NotDirectChild)
        );
        assert_eq!(member_name("../a", "/pub"), Err(NameError::DotDot));
    }

    #[test]
    fn dir_normalization() {
        for (dir, normal) in [
            ("/", "/"),
            ("//", "/"),
            ("/pub/", "/pub"),
            ("/pub", "/pub"),
            (".", ""),
            ("./", ""),
            ("", ""),
            ("pub//", "pub"),
        ] {
            assert_eq!(normalize_dir(dir), normal, "{dir:?}");
        }
    }

    #[test]
    fn glob_table() {
        let table = [
            // Literals.
            ("a.txt", "a.txt", true),
            ("a.txt", "a.txT", false),
            ("a.txt", "a.txt2", false),
            ("", "", true),
            ("", "a", false),
            // Star.
            ("*", "anything", true),
            ("*", "", true),
            ("*.txt", "a.txt", true),
            ("*.txt", ".txt", false),
            ("*.txt", "a.txt.gz", false),
            ("*.t*t", "a.tar.txt", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("**a", "ba", true),
            ("a*", "a", true),
            // Question mark.
            ("?", "a", true),
            ("?", "", false),
            ("?", "ab", false),
            ("??.txt", "ab.txt", true),
            ("?", "é", true),
            ("data?.csv", "data1.csv", true),
            // Classes.
            ("[abc]", "b", true),
            ("[abc]", "d", false),
            ("[a-c]x", "bx", true),
            ("[a-c]x", "dx", false),
            ("[!a-c]x", "dx", true),
            ("[!a-c]x", "ax", false),
            ("[^a-c]x", "dx", true),
            ("[0-9][0-9].log", "42.log", true),
            ("[0-9][0-9].log", "4a.log", false),
            ("[]]", "]", true),
            ("[!]]", "]", false),
            ("[!]]", "a", true),
            ("[a-]", "-", true),
            ("[-a]", "-", true),
            ("[a-z-]", "-", true),
            ("[z-a]", "m", false),
            ("[é-ë]", "ê", true),
            ("[*]", "*", true),
            ("[*]", "a", false),
            ("[?]", "?", true),
            // Unclosed bracket: literal.
            ("[abc", "[abc", true),
            ("[abc", "a", false),
            ("a[", "a[", true),
            ("[", "[", true),
            ("[!", "[!", true),
            // Escapes.
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("a\\?", "a?", true),
            ("\\[a]", "[a]", true),
            ("a\\", "a\\", true),
            // Leading dots are matched only by a literal dot.
            ("*", ".hidden", false),
            ("?hidden", ".hidden", false),
            ("[.]hidden", ".hidden", false),
            (".*", ".hidden", true),
            (".h*", ".hidden", true),
            ("*.*", "a.b", true),
            ("*", "a.b", true),
            // Backtracking stays cheap.
            ("*a*a*a*a*a*a*a*a*b", &"a".repeat(5000), false),
            ("*a*a*a*a*a*a*a*a*a", &"a".repeat(5000), true),
        ];
        for (pattern, name, expected) in table {
            assert_eq!(
                glob_match(pattern, name),
                expected,
                "{pattern:?} vs {name:?}"
            );
        }
    }

    #[test]
    fn glob_pattern_detection() {
        for (pattern, is_glob) in [
            ("a.txt", false),
            ("*.txt", true),
            ("a?", true),
            ("[ab]", true),
            ("[ab", false),
            ("\\*", false),
            ("a]", false),
            ("", false),
        ] {
            assert_eq!(is_glob_pattern(pattern), is_glob, "{pattern:?}");
        }
    }
}
