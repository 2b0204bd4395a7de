//! Taking a job's secrets out of text: the one scrubber of bftp. Pure.
//!
//! The engine scrubs every server reply and listing line with it as it reads them (so
//! transcripts, errors, ledger details and history are clean from the start), and the report
//! scrubs once more with the same function before it is mailed.
//!
//! What is masked: each secret itself and the forms it takes when something encoded it on
//! the way: percent-encoded (every byte or only the reserved ones, hex digits in either case),
//! base64 (standard and URL-safe, padded or not, alone or at each of the three alignments it can
//! have inside a longer base64 text, such as `AUTH PLAIN`'s `\0user\0password`), hex (either
//! case), JSON- and debug-escaped. Every match becomes [`MASK`], whatever its length, so the
//! mask says nothing about the secret's length.
//!
//! Short secrets: a secret of any length is masked, but matching is exact and, for a form
//! shorter than [`SHORT_FORM`] characters, only where it stands as a whole word (not inside a
//! longer run of letters and digits): a password `ab` masks `you sent ab` but not `about`.
//! Fragments of a secret's base64 inside a longer base64 text are matched only when at least
//! [`MIN_BASE64_FRAGMENT`] characters long (shorter ones are too common to be evidence).

use base64::Engine as _;

/// What every scrubbed secret becomes.
pub const MASK: &str = "****";

/// Forms shorter than this (in bytes) match only as whole words.
pub const SHORT_FORM: usize = 6;

/// Base64 runs shorter than this are not scrubbed when they are only a fragment of a
/// secret's encoding at some alignment.
pub const MIN_BASE64_FRAGMENT: usize = 6;

#[derive(Clone, PartialEq, Eq)]
struct Needle {
    text: String,
    /// Hex: matched in any letter case.
    any_case: bool,
}

/// Masks every form of a set of secrets (see the module docs). `Debug` shows only how many
/// forms it holds.
#[derive(Clone, Default)]
pub struct Scrubber {
    /// Longest first, so that a longer form is masked whole before a shorter one could
    /// match inside it.
    needles: Vec<Needle>,
    /// The bytes a match can start with (a bit per byte value): each form's first byte, in
    /// both ASCII cases for a form matched in any case, and [`MASK`]'s. None of them is a
    /// UTF-8 continuation byte, so text between them is passed over whole.
    starts: [u64; 4],
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scrubber({} forms)", self.needles.len())
    }
}

impl Scrubber {
    /// A scrubber of these secrets; empty ones are ignored.
    pub fn new<S: AsRef<str>>(secrets: &[S]) -> Scrubber {
        let mut needles = Vec::new();
        let plain = |text: String| Needle {
            text,
            any_case: false,
        };
        for secret in secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()) {
            needles.push(plain(secret.to_owned()));
            needles.push(plain(secret.escape_debug().to_string()));
            needles.push(plain(json_escaped(secret)));
            needles.extend(percent_forms(secret.as_bytes()).into_iter().map(plain));
            needles.extend(base64_forms(secret.as_bytes()).into_iter().map(plain));
            needles.push(Needle {
                text: secret.bytes().map(|b| format!("{b:02x}")).collect(),
                any_case: true,
            });
        }
        needles.retain(|n| !n.text.is_empty());
        needles.sort_by(|a, b| {
            b.text
                .len()
                .cmp(&a.text.len())
                .then_with(|| a.text.cmp(&b.text))
                .then_with(|| a.any_case.cmp(&b.any_case))
        });
        needles.dedup_by(|a, b| a.text == b.text);
        let mut starts = [0u64; 4];
        let mut mark = |b: u8| starts[usize::from(b >> 6)] |= 1 << (b & 63);
        if !needles.is_empty() {
            mark(MASK.as_bytes()[0]);
        }
        for n in &needles {
            let b = n.text.as_bytes()[0];
            mark(b);
            if n.any_case {
                mark(b.to_ascii_lowercase());
                mark(b.to_ascii_uppercase());
            }
        }
        Scrubber { needles, starts }
    }

    fn may_start(&self, b: u8) -> bool {
        self.starts[usize::from(b >> 6)] & (1 << (b & 63)) != 0
    }

    /// Whether there is nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// `text` with every form of every secret replaced by [`MASK`]. Scrubbing scrubbed text
    /// changes nothing more: a [`MASK`] already there is kept as it is (unless a longer
    /// form starts at it).
    pub fn scrub(&self, text: &str) -> String {
        if self.needles.is_empty() {
            return text.to_owned();
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while at < text.len() {
            // Nothing can match where no form starts: pass the run before the next byte
            // that could start one (always a character boundary) in one piece.
            if let Some(skip) = text.as_bytes()[at..]
                .iter()
                .position(|&b| self.may_start(b))
            {
                out.push_str(&text[at..at + skip]);
                at += skip;
            } else {
                out.push_str(&text[at..]);
                break;
            }
            at = self.scrub_at(text, at, &mut out);
        }
        out
    }

    /// One step of [`Scrubber::scrub`] at `at`: [`MASK`] for the form that matches there (a
    /// [`MASK`] already there stays, unless a longer form starts at it), else the character
    /// there, written to `out`; where the next step starts.
    fn scrub_at(&self, text: &str, at: usize, out: &mut String) -> usize {
        let rest = &text[at..];
        for n in &self.needles {
            if n.text.len() <= MASK.len() && rest.starts_with(MASK) {
                out.push_str(MASK);
                return at + MASK.len();
            }
            if self.matches_at(text, at, n) {
                out.push_str(MASK);
                return at + n.text.len();
            }
        }
        let c = rest.chars().next().expect("not at the end");
        out.push(c);
        at + c.len_utf8()
    }

    /// [`Scrubber::scrub`] for an excerpt that was cut and ends with `…`: the end before
    /// the `…` may hold the start of a secret's form, which is masked too.
    pub fn scrub_excerpt(&self, text: &str) -> String {
        let scrubbed = self.scrub(text);
        let Some(body) = scrubbed.strip_suffix('…') else {
            return scrubbed;
        };
        let longest_tail = self
            .needles
            .iter()
            .filter_map(|n| {
                (1..n.text.len())
                    .rev()
                    .filter(|&k| n.text.is_char_boundary(k))
                    .find(|&k| ends_with(body, &n.text[..k], n.any_case))
            })
            .max();
        match longest_tail {
            Some(k) => format!("{}{MASK}…", &body[..body.len() - k]),
            None => scrubbed,
        }
    }

    fn matches_at(&self, text: &str, at: usize, n: &Needle) -> bool {
        let end = at + n.text.len();
        let Some(candidate) = text.get(at..end) else {
            return false;
        };
        let equal = if n.any_case {
            candidate.eq_ignore_ascii_case(&n.text)
        } else {
            candidate == n.text
        };
        if !equal {
            return false;
        }
        if n.text.len() >= SHORT_FORM {
            return true;
        }
        // A short form must stand as a whole word where it starts or ends with one.
        let word = |c: char| c.is_alphanumeric();
        let first = n.text.chars().next().is_some_and(word);
        let last = n.text.chars().next_back().is_some_and(word);
        let before = text[..at].chars().next_back().is_some_and(word);
        let after = text[end..].chars().next().is_some_and(word);
        !((first && before) || (last && after))
    }
}

fn ends_with(text: &str, suffix: &str, any_case: bool) -> bool {
    if any_case {
        text.len() >= suffix.len()
            && text.is_char_boundary(text.len() - suffix.len())
            && text[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    } else {
        text.ends_with(suffix)
    }
}

/// The inside of a JSON string holding `s` (as serde_json writes it).
fn json_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn percent_forms(secret: &[u8]) -> Vec<String> {
    // Unreserved characters of RFC 3986 are never encoded; userinfo also keeps sub-delims.
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let sub_delim = |b: u8| b"!$&'()*+,;=".contains(&b);
    let mut forms = Vec::new();
    for upper in [true, false] {
        let enc = |keep: &dyn Fn(u8) -> bool| -> String {
            secret
                .iter()
                .map(|&b| {
                    if keep(b) {
                        (b as char).to_string()
                    } else if upper {
                        format!("%{b:02X}")
                    } else {
                        format!("%{b:02x}")
                    }
                })
                .collect()
        };
        forms.push(enc(&|_| false));
        forms.push(enc(&unreserved));
        forms.push(enc(&|b| unreserved(b) || sub_delim(b) || b == b':'));
        // application/x-www-form-urlencoded: space as '+'.
        forms.push(enc(&unreserved).replace("%20", "+"));
    }
    forms
}

fn base64_forms(secret: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut forms = Vec::new();
    for engine in [&STANDARD, &URL_SAFE] {
        // The whole secret encoded alone, with its padding and without.
        let whole = engine.encode(secret);
        forms.push(whole.trim_end_matches('=').to_string());
        forms.push(whole);
        // Inside a longer text the secret starts at byte offset 0, 1 or 2 of a 3-byte group:
        // encode it behind `k` filler bytes and keep only the characters made of its bits.
        for k in 0..3usize {
            let mut buf = vec![0u8; k];
            buf.extend_from_slice(secret);
            let enc = engine.encode(&buf);
            let first = (8 * k).div_ceil(6);
            let last = (8 * (k + secret.len())) / 6;
            if last > first && last - first >= MIN_BASE64_FRAGMENT {
                forms.push(enc[first..last].to_string());
            }
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    fn hex(s: &str, upper: bool) -> String {
        s.bytes()
            .map(|b| {
                if upper {
                    format!("{b:02X}")
                } else {
                    format!("{b:02x}")
                }
            })
            .collect()
    }

    /// Every encoding of the password, alone and embedded in a longer text, is masked and
    /// nothing of it remains.
    #[test]
    fn every_form_of_a_secret_is_masked() {
        let secret = "p@ss w:rd/1";
        let s = Scrubber::new(&[secret]);
        let table = [
            ("clear", secret.to_string()),
            ("percent upper", "p%40ss%20w%3Ard%2F1".to_string()),
            ("percent lower", "p%40ss%20w%3ard%2f1".to_string()),
            ("form encoded", "p%40ss+w%3Ard%2F1".to_string()),
            (
                "percent every byte",
                "%70%40%73%73%20%77%3A%72%64%2F%31".to_string(),
            ),
            ("base64 padded", STANDARD.encode(secret)),
            ("base64 unpadded", URL_SAFE_NO_PAD.encode(secret)),
            ("hex lower", hex(secret, false)),
            ("hex upper", hex(secret, true)),
            ("json", json_escaped("p@ss w:rd/1")),
        ];
        for (what, form) in &table {
            let text = format!("530 you sent {form} (rejected)");
            assert_eq!(
                s.scrub(&text),
                "530 you sent **** (rejected)",
                "{what}: {form}"
            );
        }
    }

    #[test]
    fn a_secret_inside_longer_base64_or_hex_is_masked_at_every_alignment() {
        let s = Scrubber::new(&["correct-horse"]);
        for prefix in ["", "a", "ab", "abc", "\0alice\0", "user:"] {
            let blob = STANDARD.encode(format!("{prefix}correct-horse-and-more"));
            let out = s.scrub(&blob);
            assert!(out.contains(MASK), "{prefix:?}: {blob} -> {out}");
            for k in 0..3 {
                let mut buf = vec![0u8; k];
                buf.extend_from_slice(b"correct-horse");
                let enc = STANDARD.encode(&buf);
                let inner = &enc[(8 * k).div_ceil(6)..(8 * (k + 13)) / 6];
                assert!(!out.contains(inner), "{prefix:?}: {out}");
            }
            let h = hex(&format!("{prefix}correct-horse-and-more"), true);
            assert!(!s.scrub(&h).contains(&hex("correct-horse", true)));
        }
    }

    #[test]
    fn short_secrets_match_exactly_and_as_whole_words() {
        let s = Scrubber::new(&["ab"]);
        for (input, want) in [
            ("530 you sent ab", "530 you sent ****"),
            ("pw=ab;", "pw=****;"),
            ("about tab cab", "about tab cab"),
            ("(ab)", "(****)"),
            ("6162", "****"),
            ("x6162y", "x6162y"),
        ] {
            assert_eq!(s.scrub(input), want, "{input:?}");
        }
        // A short numeric secret leaves other numbers alone.
        let n = Scrubber::new(&["21"]);
        assert_eq!(
            n.scrub("213 2121 bytes, you sent 21"),
            "213 2121 bytes, you sent ****"
        );
    }

    #[test]
    fn the_mask_does_not_say_how_long_the_secret_was() {
        for secret in ["a1", "hunter2", "a-very-long-passphrase-of-many-words"] {
            let s = Scrubber::new(&[secret]);
            assert_eq!(s.scrub(&format!("x {secret} y")), "x **** y", "{secret}");
        }
    }

    #[test]
    fn json_and_debug_escaped_forms_are_masked() {
        let s = Scrubber::new(&["qu\"ote\\back"]);
        assert_eq!(s.scrub(r#"x qu\"ote\\back y"#), "x **** y");
        assert_eq!(s.scrub("x qu\"ote\\back y"), "x **** y");
    }

    #[test]
    fn no_secrets_or_empty_ones_change_nothing() {
        assert_eq!(Scrubber::new::<&str>(&[]).scrub("PASS x"), "PASS x");
        assert_eq!(Scrubber::new(&[""]).scrub("PASS x"), "PASS x");
        assert!(Scrubber::new(&[""]).is_empty());
    }

    #[test]
    fn a_secret_that_looks_like_the_mask_does_not_loop_and_scrubbing_twice_is_stable() {
        let s = Scrubber::new(&["*"]);
        assert_eq!(s.scrub("a*b"), "a****b");
        assert_eq!(s.scrub(&s.scrub("a*b")), "a****b");
        let h = Scrubber::new(&["hunter2"]);
        let once = h.scrub("hunter2 and 68756e74657232");
        assert_eq!(once, "**** and ****");
        assert_eq!(h.scrub(&once), once);
    }

    #[test]
    fn a_cut_excerpt_loses_the_start_of_a_secret_too() {
        let s = Scrubber::new(&["hunter2"]);
        assert_eq!(s.scrub_excerpt("530 you sent hun…"), "530 you sent ****…");
        assert_eq!(s.scrub_excerpt("530 you sent x…"), "530 you sent x…");
        assert_eq!(s.scrub_excerpt("530 hunter2 x"), "530 **** x");
    }

    /// The scrub as it reads without passing over runs: every position tried against every
    /// form.
    fn scrub_at_every_position(s: &Scrubber, text: &str) -> String {
        let mut out = String::new();
        let mut at = 0;
        while at < text.len() {
            at = s.scrub_at(text, at, &mut out);
        }
        out
    }

    #[test]
    fn passing_over_runs_where_no_form_starts_changes_nothing() {
        let secrets = ["hunter2", "ab", "pässwörd", "Zz9", "***", "éclair"];
        let s = Scrubber::new(&secrets);
        let mut texts = vec![
            String::new(),
            "plain text with nothing in it".to_string(),
            "530 hunter2 ab about Zz9 zz9 ZZ9 **** *** pässwörd ü€ end".to_string(),
            "ÄÖÜ€€hunter2€ab€".to_string(),
        ];
        for secret in secrets {
            let hex: String = secret.bytes().map(|b| format!("{b:02X}")).collect();
            texts.push(format!(
                "x{hex}y {} é{}é",
                STANDARD.encode(secret),
                hex.to_lowercase()
            ));
            texts.push(format!(
                "€{}€",
                URL_SAFE_NO_PAD.encode(format!("\0u\0{secret}"))
            ));
        }
        for text in &texts {
            assert_eq!(s.scrub(text), scrub_at_every_position(&s, text), "{text}");
        }
        assert_eq!(
            s.scrub("530 hunter2 ab about"),
            "530 **** **** about",
            "and it still masks"
        );
    }

    #[test]
    fn debug_does_not_show_the_secrets() {
        let shown = format!("{:?}", Scrubber::new(&["hunter2"]));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
