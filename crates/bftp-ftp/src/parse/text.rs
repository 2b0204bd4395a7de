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

/// `bytes` as text a person can read back byte for byte: `\r`, `\n`, `\0`, `\t` and `\\`
/// for themselves, `\xNN` for any other control character and for each byte of invalid
/// UTF-8; cut like [`excerpt`]. Only printable characters remain, so it is as safe as
/// [`printable`] in a log or a report, and two different names never look the same.
pub(crate) fn escaped(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\r' => out.push_str("\\r"),
                '\n' => out.push_str("\\n"),
                '\0' => out.push_str("\\0"),
                '\t' => out.push_str("\\t"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    truncate(out)
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
    fn escaped_shows_every_byte_unambiguously() {
        let table: &[(&[u8], &str)] = &[
            (b"plain.dat", "plain.dat"),
            (b"bad\rname.dat", "bad\\rname.dat"),
            (b"bad\nname", "bad\\nname"),
            (b"nul\0x", "nul\\0x"),
            (b"tab\tx", "tab\\tx"),
            (b"back\\slash", "back\\\\slash"),
            (b"esc\x1b[31m", "esc\\x1b[31m"),
            (b"caf\xe9", "caf\\xe9"),
            ("été".as_bytes(), "été"),
            (b"\xc2\x85nel", "\\xc2\\x85nel"),
        ];
        for (bytes, want) in table {
            assert_eq!(escaped(bytes), *want, "{bytes:?}");
        }
        // The escape of a backslash keeps `a\rb` (four bytes) apart from `a<CR>b`.
        assert_ne!(escaped(b"a\\rb"), escaped(b"a\rb"));
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
