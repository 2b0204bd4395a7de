//! The signature of a webhook request: `Bftp-Signature: t=<unix seconds>,v1=<hex>`, where
//! the hex is the lowercase HMAC-SHA256, under the daemon's webhook key, of `"<t>.<body>"`.
//!
//! The time is inside what is signed, so a receiver that refuses old times refuses a
//! replayed request; `v1` names the scheme, so another one can be added beside it later
//! (a receiver takes the header's first `v1` that matches, so several may be sent while a
//! key is rotated).

use std::time::Duration;

use ring::hmac;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "Bftp-Signature";

/// The header value for `body` sent at `t` (Unix seconds).
pub fn sign(key: &[u8], t: u64, body: &[u8]) -> String {
    let tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, key),
        &signed_bytes(t, body),
    );
    format!("t={t},v1={}", hex(tag.as_ref()))
}

/// Why a request's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signature header is not t=<unix seconds>,v1=<hex>")]
    Malformed,
    #[error("the signature header holds no v1 signature")]
    NoSignature,
    #[error(
        "the signature's time {t} is {off} s away from now, more than the {tolerance} s allowed"
    )]
    OutsideTolerance { t: u64, off: u64, tolerance: u64 },
    #[error("no v1 signature matches the body with this key")]
    Mismatch,
}

/// Checks `header` (the value of `Bftp-Signature`) against `body` and `key`: the time must be
/// within `tolerance` of `now` (Unix seconds) either way, and one `v1` must be the HMAC.
/// The comparison takes constant time.
pub fn verify(
    header: &str,
    key: &[u8],
    body: &[u8],
    now: u64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        let (name, value) = part.trim().split_once('=').ok_or(VerifyError::Malformed)?;
        match name {
            "t" if t.is_none() => {
                let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
                t = Some(
                    value
                        .parse::<u64>()
                        .ok()
                        .filter(|_| digits)
                        .ok_or(VerifyError::Malformed)?,
                );
            }
            "t" => return Err(VerifyError::Malformed),
            "v1" => sigs.push(value),
            _ => {} // another scheme, for another receiver
        }
    }
    let t = t.ok_or(VerifyError::Malformed)?;
    if sigs.is_empty() {
        return Err(VerifyError::NoSignature);
    }
    let off = now.abs_diff(t);
    if off > tolerance.as_secs() {
        return Err(VerifyError::OutsideTolerance {
            t,
            off,
            tolerance: tolerance.as_secs(),
        });
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let msg = signed_bytes(t, body);
    let ok = sigs
        .iter()
        .filter_map(|s| unhex(s))
        .any(|tag| hmac::verify(&key, &msg, &tag).is_ok());
    if ok {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

fn signed_bytes(t: u64, body: &[u8]) -> Vec<u8> {
    let mut msg = format!("{t}.").into_bytes();
    msg.extend_from_slice(body);
    msg
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercase or uppercase hex; `None` for anything else.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"bftp-webhook-test-key";
    const T: u64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"schema":"bftp.event.v1","id":"job-42-final","type":"job.finished"}"#;
    /// Computed independently:
    /// python3 -c 'import hmac,hashlib; print(hmac.new(b"bftp-webhook-test-key",
    ///   b"1700000000." + b"{\"schema\":\"bftp.event.v1\",\"id\":\"job-42-final\",\"type\":\"job.finished\"}",
    ///   hashlib.sha256).hexdigest())'
    const VECTOR: &str = "3361deb2717f73a04209bd47ccb31a949a1e36a5b25fab0e6f5df89d9f031de1";

    #[test]
    fn sign_matches_the_vector_computed_with_python() {
        assert_eq!(sign(KEY, T, BODY), format!("t={T},v1={VECTOR}"));
        // The empty key and body (python: hmac.new(b"", b"0.", hashlib.sha256)).
        assert_eq!(
            sign(b"", 0, b""),
            "t=0,v1=b849d5a581847b281957065739df36df2463d1977ea8d6e1e4e6cf33fadc68c3"
        );
    }

    /// Name, header, body, now, what verify says.
    type Case = (
        &'static str,
        String,
        &'static [u8],
        u64,
        Result<(), VerifyError>,
    );

    #[test]
    fn verify_table() {
        let good = format!("t={T},v1={VECTOR}");
        let tol = Duration::from_secs(300);
        let other = "00".repeat(32);
        let cases: &[Case] = &[
            ("good", good.clone(), BODY, T, Ok(())),
            (
                "spaces around parts",
                format!("t={T}, v1={VECTOR}"),
                BODY,
                T,
                Ok(()),
            ),
            (
                "uppercase hex",
                format!("t={T},v1={}", VECTOR.to_uppercase()),
                BODY,
                T,
                Ok(()),
            ),
            ("late within tolerance", good.clone(), BODY, T + 300, Ok(())),
            (
                "early within tolerance",
                good.clone(),
                BODY,
                T - 300,
                Ok(()),
            ),
            (
                "one of several v1 matches (a key rotation)",
                format!("t={T},v1={other},v1={VECTOR}"),
                BODY,
                T,
                Ok(()),
            ),
            (
                "an unknown scheme is ignored",
                format!("t={T},v0=xyz,v1={VECTOR}"),
                BODY,
                T,
                Ok(()),
            ),
            (
                "too old",
                good.clone(),
                BODY,
                T + 301,
                Err(VerifyError::OutsideTolerance {
                    t: T,
                    off: 301,
                    tolerance: 300,
                }),
            ),
            (
                "from the future",
                good.clone(),
                BODY,
                T - 301,
                Err(VerifyError::OutsideTolerance {
                    t: T,
                    off: 301,
                    tolerance: 300,
                }),
            ),
            (
                "another body",
                good.clone(),
                b"{}",
                T,
                Err(VerifyError::Mismatch),
            ),
            (
                "another time, same v1",
                format!("t={},v1={VECTOR}", T + 1),
                BODY,
                T,
                Err(VerifyError::Mismatch),
            ),
            (
                "wrong signature",
                format!("t={T},v1={other}"),
                BODY,
                T,
                Err(VerifyError::Mismatch),
            ),
            (
                "not hex",
                format!("t={T},v1=zz"),
                BODY,
                T,
                Err(VerifyError::Mismatch),
            ),
            (
                "no v1",
                format!("t={T}"),
                BODY,
                T,
                Err(VerifyError::NoSignature),
            ),
            (
                "no t",
                format!("v1={VECTOR}"),
                BODY,
                T,
                Err(VerifyError::Malformed),
            ),
            (
                "t twice",
                format!("t={T},t={T},v1={VECTOR}"),
                BODY,
                T,
                Err(VerifyError::Malformed),
            ),
            (
                "t signed",
                format!("t=+{T},v1={VECTOR}"),
                BODY,
                T,
                Err(VerifyError::Malformed),
            ),
            (
                "t not a number",
                format!("t=now,v1={VECTOR}"),
                BODY,
                T,
                Err(VerifyError::Malformed),
            ),
            (
                "no equals sign",
                "garbage".to_string(),
                BODY,
                T,
                Err(VerifyError::Malformed),
            ),
            ("empty", String::new(), BODY, T, Err(VerifyError::Malformed)),
        ];
        for (name, header, body, now, want) in cases {
            assert_eq!(&verify(header, KEY, body, *now, tol), want, "{name}");
        }
        assert_eq!(
            verify(&good, b"another key", BODY, T, tol),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn what_is_signed_is_the_time_a_dot_and_the_body() {
        let body = b"x";
        let h = sign(KEY, 5, body);
        assert!(verify(&h, KEY, body, 5, Duration::ZERO).is_ok());
        assert_eq!(
            verify(&h, KEY, body, 6, Duration::ZERO),
            Err(VerifyError::OutsideTolerance {
                t: 5,
                off: 1,
                tolerance: 0
            })
        );
        assert_eq!(unhex("0aFf"), Some(vec![0x0a, 0xff]));
        assert_eq!(unhex("abc"), None);
    }
}
