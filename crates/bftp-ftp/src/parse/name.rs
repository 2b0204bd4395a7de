//! Names that come from a server, and the wildcard matcher the daemon uses on them.
//!
//! RULES.md §8: every name from NLST or MLSD is checked before it goes into a
//! command: no CR, LF or NUL (they would end the command and start another), no
//! `..` component, no absolute path outside the listed directory. RULES.md §4.4: the
//! daemon matches a job's wildcard itself ([`bftp_core::glob::glob_match`]) instead of relying on
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
}
