//! Making text safe to mail: secrets out, control characters shown escaped. Pure.

use base64::Engine as _;

/// What every scrubbed secret becomes.
pub(crate) const MASK: &str = "****";

/// Base64 runs shorter than this are not scrubbed when they are only a fragment of a
/// secret's encoding at some alignment (too short to be evidence, too common to remove).
const MIN_BASE64_FRAGMENT: usize = 6;

/// Replaces every occurrence of any of the daemon's secrets with [`MASK`]: the secret itself
/// and the forms it takes when someone encoded it on the way: percent-encoded (as in a URL's
/// userinfo, upper- or lower-case hex, every byte or only the reserved ones), base64 (standard
/// and URL-safe, padded or not, and at each of the three alignments it can have inside a
/// longer base64 text, such as `AUTH PLAIN`'s `\0user\0password`), JSON- and
/// debug-escaped.
pub(crate) struct Scrubber {
    /// Longest first, so that a longer form is masked whole before a shorter one could match
    /// inside it.
    needles: Vec<String>,
}

impl Scrubber {
    pub(crate) fn new(secrets: &[String]) -> Scrubber {
        let mut needles = Vec::new();
        for secret in secrets.iter().filter(|s| !s.is_empty()) {
            needles.push(secret.clone());
            needles.push(secret.escape_debug().to_string());
            if let Ok(json) = serde_json::to_string(secret) {
                needles.push(json[1..json.len() - 1].to_string());
            }
            needles.extend(percent_forms(secret.as_bytes()));
            needles.extend(base64_forms(secret.as_bytes()));
        }
        needles.retain(|n| !n.is_empty());
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        needles.dedup();
        Scrubber { needles }
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.needles.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        'outer: while !rest.is_empty() {
            for n in &self.needles {
                if rest.starts_with(n.as_str()) {
                    out.push_str(MASK);
                    rest = &rest[n.len()..];
                    continue 'outer;
                }
            }
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }
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

/// Text from a server or a user, made safe for a terminal and a mail header: control
/// characters (C0, DEL, C1) and the Unicode bidirectional overrides are shown escaped
/// (`\r`, `\n`, `\u{1b}`...), so they can neither start a new line or header nor drive a
/// terminal.
pub(crate) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_bidi_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The argument of a PASS or ACCT command in a transcript line masked, whatever the engine
/// already did: `source> PASS hunter2` becomes `source> PASS ****`.
pub(crate) fn mask_login_secrets(line: &str) -> String {
    let (prefix, command) = match line.find("> ") {
        Some(i) => line.split_at(i + 2),
        None => ("", line),
    };
    let trimmed = command.trim_start();
    let lead = &command[..command.len() - trimmed.len()];
    for verb in ["PASS", "ACCT"] {
        let is_verb = trimmed.len() >= 4
            && trimmed.is_char_boundary(4)
            && trimmed[..4].eq_ignore_ascii_case(verb)
            && trimmed[4..].starts_with([' ', '\t']);
        if is_verb {
            return format!("{prefix}{lead}{} {MASK}", &trimmed[..4]);
        }
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubber(s: &[&str]) -> Scrubber {
        Scrubber::new(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn every_form_of_a_secret_is_masked() {
        let s = scrubber(&["p@ss w:rd/1"]);
        let b64 = base64::engine::general_purpose::STANDARD;
        let table = [
            "p@ss w:rd/1".to_string(),
            "p%40ss%20w%3Ard%2F1".to_string(),
            "p%40ss%20w%3ard%2f1".to_string(),
            "p%40ss+w%3Ard%2F1".to_string(),
            "%70%40%73%73%20%77%3A%72%64%2F%31".to_string(),
            b64.encode("p@ss w:rd/1"),
            b64.encode("p@ss w:rd/1").trim_end_matches('=').to_string(),
        ];
        for form in &table {
            let text = format!("before {form} after");
            assert_eq!(s.scrub(&text), "before **** after", "{form}");
        }
    }

    #[test]
    fn a_secret_inside_longer_base64_is_masked_at_every_alignment() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let s = scrubber(&["correct-horse"]);
        for prefix in ["", "a", "ab", "\0alice\0", "user:"] {
            let blob = b64.encode(format!("{prefix}correct-horse-and-more"));
            let out = s.scrub(&blob);
            assert!(out.contains(MASK), "{prefix:?}: {blob} -> {out}");
            // What remains cannot be decoded back to the secret.
            assert!(!out.contains(&b64.encode("correct-horse")[..12]), "{out}");
        }
    }

    #[test]
    fn json_and_debug_escaped_forms_are_masked() {
        let s = scrubber(&["qu\"ote\\back"]);
        assert_eq!(s.scrub(r#"x qu\"ote\\back y"#), "x **** y");
        assert_eq!(s.scrub("x qu\"ote\\back y"), "x **** y");
    }

    #[test]
    fn no_secrets_or_empty_ones_change_nothing() {
        assert_eq!(scrubber(&[]).scrub("PASS x"), "PASS x");
        assert_eq!(scrubber(&[""]).scrub("PASS x"), "PASS x");
    }

    #[test]
    fn a_secret_that_looks_like_the_mask_does_not_loop() {
        assert_eq!(scrubber(&["*"]).scrub("a*b"), "a****b");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        for (input, want) in [
            ("plain name.txt", "plain name.txt"),
            ("a\r\nSubject: x", "a\\r\\nSubject: x"),
            ("\u{1b}[2Jclear", "\\u{1b}[2Jclear"),
            ("nul\0", "nul\\u{0}"),
            ("del\u{7f}", "del\\u{7f}"),
            ("c1\u{9b}31m", "c1\\u{9b}31m"),
            ("rtl\u{202e}txt.exe", "rtl\\u{202e}txt.exe"),
            ("tab\there", "tab\\there"),
            ("ünïcödé ok", "ünïcödé ok"),
            ("back\\slash", "back\\slash"),
        ] {
            assert_eq!(clean(input), want, "{input:?}");
        }
    }

    #[test]
    fn login_secrets_are_masked_in_transcript_lines() {
        for (input, want) in [
            ("source> PASS hunter2", "source> PASS ****"),
            ("destination> pass  x y", "destination> pass ****"),
            ("source> ACCT acct-9", "source> ACCT ****"),
            ("PASS raw", "PASS ****"),
            ("source> PASS ****", "source> PASS ****"),
            ("source< 230 PASS accepted", "source< 230 PASS accepted"),
            ("source> PASV", "source> PASV"),
            ("source> PASSWORD", "source> PASSWORD"),
        ] {
            assert_eq!(mask_login_secrets(input), want, "{input:?}");
        }
    }
}
