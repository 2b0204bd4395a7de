//! Making text safe to mail: secrets out (with `bftp_core::scrub`), control characters shown
//! escaped. Pure.

// The one scrubber of bftp, shared with the engine (which scrubs server text as it reads it);
// the report scrubs again with it, in case.
pub(crate) use bftp_core::scrub::{Scrubber, MASK};

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
