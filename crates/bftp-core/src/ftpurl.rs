//! `ftp://user:password@host:port/path` URLs (RFC 1738 §3.2) to [`Endpoint`]s.
//!
//! The path is relative to the login directory, as RFC 1738 says; `%2F` at its start makes
//! it absolute (`ftp://host/%2Fsrv/data` is `/srv/data`). Percent-escapes are decoded, so a
//! `%0D` or `%0A` surfaces as a CR or LF that validation then refuses.

use crate::model::{Endpoint, Secret, ANONYMOUS, DEFAULT_FTP_PORT};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{side}: {input:?} is not a URL: {reason}")]
    Unparsable {
        side: &'static str,
        input: String,
        reason: String,
    },
    #[error("{side}: scheme {scheme:?} is not supported; use ftp:// or ftps://")]
    Scheme { side: &'static str, scheme: String },
    #[error("{side}: {input:?} names no host")]
    NoHost { side: &'static str, input: String },
    #[error("{side}: {input:?} has a query or fragment, which FTP URLs do not take")]
    Extra { side: &'static str, input: String },
    #[error(
        "{side}: the path of {input:?} has a \"..\" segment; write the path without it (it is \
         not resolved here, and a URL parser's resolving would name another file than the one typed)"
    )]
    DotDot { side: &'static str, input: String },
    #[error("{side}: the URL's {part} is not valid UTF-8 after percent-decoding")]
    Encoding {
        side: &'static str,
        part: &'static str,
    },
}

/// A parsed URL: the endpoint, and whether the password came from the URL itself (the
/// front end warns: it shows in `ps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedUrl {
    pub endpoint: Endpoint,
    pub password_in_url: bool,
}

/// The URL with the password of its userinfo (if any) replaced by `****`, for messages.
pub fn redact_url(input: &str) -> String {
    let Some(scheme_end) = input.find("://").map(|i| i + 3) else {
        return input.to_string();
    };
    let rest = &input[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return input.to_string();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:****{}",
            &input[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => input.to_string(),
    }
}

pub fn parse_ftp_url(side: &'static str, input: &str) -> Result<ParsedUrl, UrlError> {
    let shown = redact_url(input);
    let input_for_errors = shown.as_str();
    // `url` would silently strip tabs and newlines; they must be refused instead.
    if input.contains(['\r', '\n', '\t', '\0']) {
        return Err(UrlError::Unparsable {
            side,
            input: input_for_errors.escape_debug().to_string(),
            reason: "it contains a control character".into(),
        });
    }
    // `ftps://` is implicit FTPS (TLS from the first byte, port 990 by default); parsed as
    // the `ftp` URL it otherwise is, so both read names and paths the same way.
    let implicit_tls = input
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("ftps://"));
    let as_ftp;
    let input = if implicit_tls {
        as_ftp = format!("ftp://{}", input.get(7..).unwrap_or(""));
        as_ftp.as_str()
    } else {
        input
    };
    let u = url::Url::parse(input).map_err(|e| UrlError::Unparsable {
        side,
        input: input_for_errors.to_string(),
        reason: e.to_string(),
    })?;
    if u.scheme() != "ftp" {
        return Err(UrlError::Scheme {
            side,
            scheme: u.scheme().to_string(),
        });
    }
    check_raw(side, input, input_for_errors)?;
    if u.query().is_some() || u.fragment().is_some() {
        return Err(UrlError::Extra {
            side,
            input: input_for_errors.to_string(),
        });
    }
    let host = match u.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        _ => {
            return Err(UrlError::NoHost {
                side,
                input: input_for_errors.to_string(),
            })
        }
    };
    let decode = |s: &str, part: &'static str| -> Result<String, UrlError> {
        percent_decode(s).ok_or(UrlError::Encoding { side, part })
    };
    let user = if u.username().is_empty() {
        ANONYMOUS.to_string()
    } else {
        decode(u.username(), "user")?
    };
    let password = u.password().map(|p| decode(p, "password")).transpose()?;
    let raw_path = u.path().strip_prefix('/').unwrap_or(u.path());
    let path = if raw_path.len() >= 3 && raw_path[..3].eq_ignore_ascii_case("%2F") {
        format!("/{}", decode(&raw_path[3..], "path")?)
    } else {
        decode(raw_path, "path")?
    };
    Ok(ParsedUrl {
        password_in_url: password.is_some(),
        endpoint: Endpoint {
            host,
            port: u
                .port()
                .unwrap_or(if implicit_tls { 990 } else { DEFAULT_FTP_PORT }),
            user,
            password: password.map(Secret::new),
            acct: None,
            path,
            tls: crate::tls::EndpointTls {
                implicit: implicit_tls,
                ..Default::default()
            },
        },
    })
}

/// What `url` hides from us, checked on the text as typed: for `ftp` it reads `ftp:///x`
/// and `ftp:/x` as host `x`, and it resolves `..` and `%2e%2e` segments away (so
/// `a/../../etc/passwd` would become `etc/passwd`). An empty host and any `..` segment
/// (also percent-encoded, or after a `%2F`) are refused instead.
fn check_raw(side: &'static str, input: &str, shown: &str) -> Result<(), UrlError> {
    let no_host = || UrlError::NoHost {
        side,
        input: shown.to_string(),
    };
    let after_scheme = input.find(':').map_or("", |i| &input[i + 1..]);
    let Some(rest) = after_scheme.strip_prefix("//") else {
        return Err(no_host());
    };
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') {
        return Err(no_host());
    }
    let rest = &rest[end..];
    let path = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    let dotdot = path.split(['/', '\\']).any(|segment| {
        let decoded = percent_decode(segment).unwrap_or_default();
        decoded.split('/').any(|s| s == "..")
    });
    if dotdot {
        return Err(UrlError::DotDot {
            side,
            input: shown.to_string(),
        });
    }
    Ok(())
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && b[i + 1].is_ascii_hexdigit()
            && b[i + 2].is_ascii_hexdigit()
        {
            let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
            out.push(hex(b[i + 1]) * 16 + hex(b[i + 2]));
            i += 3;
            continue;
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// host, port, user, password, path
    type Want = (
        &'static str,
        u16,
        &'static str,
        Option<&'static str>,
        &'static str,
    );

    #[test]
    fn url_table() {
        let ok: &[(&str, Want)] = &[
            (
                "ftp://ftp.example.org/pub/file.bin",
                ("ftp.example.org", 21, "anonymous", None, "pub/file.bin"),
            ),
            (
                "ftp://alice@h:2121/%2Fsrv/data/*.csv",
                ("h", 2121, "alice", None, "/srv/data/*.csv"),
            ),
            (
                "ftp://bob:s%40cret@127.0.0.1/x",
                ("127.0.0.1", 21, "bob", Some("s@cret"), "x"),
            ),
            (
                "ftp://[::1]:21/a%20b",
                ("::1", 21, "anonymous", None, "a b"),
            ),
            ("ftp://h/dir/", ("h", 21, "anonymous", None, "dir/")),
            // Dots that are no `..` segment are names like any other.
            ("ftp://h/a..b/...", ("h", 21, "anonymous", None, "a..b/...")),
            ("ftp://h/.hidden", ("h", 21, "anonymous", None, ".hidden")),
            ("FTP://h/x", ("h", 21, "anonymous", None, "x")),
        ];
        for (input, (host, port, user, pw, path)) in ok {
            let p = parse_ftp_url("source", input).unwrap_or_else(|e| panic!("{input}: {e}"));
            let e = &p.endpoint;
            assert_eq!(
                (e.host.as_str(), e.port, e.user.as_str(), e.path.as_str()),
                (*host, *port, *user, *path),
                "{input}"
            );
            assert_eq!(e.password.as_ref().map(|s| s.expose()), *pw, "{input}");
            assert_eq!(p.password_in_url, pw.is_some());
        }
        let bad: &[(&str, &str)] = &[
            ("not a url", "not a URL"),
            ("http://h/x", "scheme"),
            ("ftp://:21/x", "empty host"),
            ("ftp://h/x?y=1", "query"),
            ("ftp://h/a\nb", "control character"),
            ("ftp://h/%FF", "UTF-8"),
            // `url` reads these as host `x`.
            ("ftp:///x", "names no host"),
            ("ftp:////x", "names no host"),
            ("ftp:/x", "names no host"),
            ("ftp:x", "names no host"),
            ("ftp://u:p@/x", "empty host"),
            // `url` resolves these away, naming another file.
            ("ftp://h/bad/../../../etc/passwd", "\"..\" segment"),
            ("ftp://h/..", "\"..\" segment"),
            ("ftp://h/a/%2e%2e/b", "\"..\" segment"),
            ("ftp://h/a/%2E%2e/b", "\"..\" segment"),
            ("ftp://h/a/.%2E/b", "\"..\" segment"),
            ("ftp://h/a\\..\\b", "\"..\" segment"),
            // Not resolved by `url`, but the server would.
            ("ftp://h/%2F..%2Fetc/passwd", "\"..\" segment"),
            ("ftp://h/a%2F..%2Fb", "\"..\" segment"),
        ];
        for (input, needle) in bad {
            let e = parse_ftp_url("source", input).expect_err(input).to_string();
            assert!(e.contains(needle), "{input}: {e}");
        }
    }

    #[test]
    fn escaped_crlf_is_decoded_for_validation_to_refuse() {
        let p = parse_ftp_url("source", "ftp://h/a%0D%0ADELE%20b").unwrap();
        assert_eq!(p.endpoint.path, "a\r\nDELE b");
    }

    #[test]
    fn errors_never_quote_the_password() {
        assert_eq!(redact_url("ftp://bob:s3cret@h/x"), "ftp://bob:****@h/x");
        assert_eq!(redact_url("ftp://bob@h/x:y@z"), "ftp://bob@h/x:y@z");
        assert_eq!(redact_url("nonsense"), "nonsense");
        for bad in [
            "ftp://bob:s3cret@h/x?q",
            "ftp://bob:s3cret@h/a\nb",
            "ftp://bob:s3cret@:0/x",
        ] {
            let e = parse_ftp_url("source", bad).unwrap_err().to_string();
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn percent_decoding_edges() {
        assert_eq!(percent_decode("a%"), Some("a%".into()));
        assert_eq!(percent_decode("a%4"), Some("a%4".into()));
        assert_eq!(percent_decode("%41%zz"), Some("A%zz".into()));
        assert_eq!(percent_decode("%+1"), Some("%+1".into()));
    }
}
