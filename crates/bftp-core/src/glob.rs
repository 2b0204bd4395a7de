//! Shell-style wildcards for one name: a job's wildcard and a watch's patterns are matched
//! by bftpd itself, never by a server (server-side globbing differs from server to server).

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
    Glob::new(pattern).matches(name)
}

/// A pattern of [`glob_match`] read once, to match many names: a watch's poll matches every
/// listed name against each of its patterns and ignore patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        Glob {
            tokens: tokenize(pattern),
        }
    }

    /// [`glob_match`] of this pattern and `name`.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        self.matches_chars(&name)
    }

    /// [`Glob::matches`] of a name already split into characters (one split for several
    /// patterns).
    pub fn matches_chars(&self, name: &[char]) -> bool {
        match_tokens(&self.tokens, name)
    }
}

fn match_tokens(tokens: &[Token], name: &[char]) -> bool {
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
