//! Turning server bytes into text that is safe to log, mail and show.

/// How many characters of offending input an error carries.
pub(crate) const EXCERPT_CHARS: usize = 120;

/// `bytes` as text: invalid UTF-8 and control characters other than TAB become
/// U+FFFD, so a hostile server cannot put terminal escapes or line breaks into a
/// log line or a report.
pub(crate) fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                char::REPLACEMENT_CHARACTER
            } else {
                c
            }
        })
        .collect()
}

/// [`printable`], cut to [`EXCERPT_CHARS`] characters with a trailing `…` if cut.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    truncate(printable(bytes))
}

/// `text` cut to [`EXCERPT_CHARS`] characters with a trailing `…` if cut.
pub(crate) fn truncate(text: String) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => {
            let mut short = text[..cut].to_owned();
            short.push('…');
            short
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_replaces_controls_and_bad_utf8() {
        assert_eq!(printable(b"ok\ttab"), "ok\ttab");
        assert_eq!(printable(b"a\x1b[31mred"), "a\u{FFFD}[31mred");
        assert_eq!(
            printable(b"cr\rlf\nnul\0"),
            "cr\u{FFFD}lf\u{FFFD}nul\u{FFFD}"
        );
        assert_eq!(printable(b"caf\xe9"), "caf\u{FFFD}");
        assert_eq!(printable("été".as_bytes()), "été");
        assert_eq!(printable(b"\xc2\x85next-line"), "\u{FFFD}next-line");
    }

    #[test]
    fn excerpt_cuts_long_text_on_a_char_boundary() {
        assert_eq!(excerpt(b"short"), "short");
        let long = "é".repeat(EXCERPT_CHARS + 10);
        let cut = excerpt(long.as_bytes());
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(
            excerpt("x".repeat(EXCERPT_CHARS).as_bytes()).len(),
            EXCERPT_CHARS
        );
    }
}
