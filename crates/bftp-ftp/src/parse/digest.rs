//! What FEAT says a server offers for proofs (HASH algorithms, X commands, SIZE), and the
//! replies that carry a digest: `213 <ALGO> <range> <hex> <path>` to HASH (after any number of
//! `213-` progress lines while a large file is hashed) and `250 <HEX>` to XSHA256 and its kin.

use bftp_core::proof::{Algorithm, Capabilities};

use super::text::truncate;

/// A digest reply that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("HASH reply {text:?} is not \"ALGORITHM RANGE DIGEST PATH\"")]
    BadHashReply { text: String },
    #[error("HASH answered with {got} where {asked} was asked")]
    OtherAlgorithm { asked: Algorithm, got: String },
    #[error("HASH answered for the range {range:?}, not the whole file")]
    PartialRange { range: String },
    #[error("{algorithm} digest {text:?} is not {len} hexadecimal digits")]
    BadDigest {
        algorithm: Algorithm,
        text: String,
        len: usize,
    },
}

/// The proof capabilities in a FEAT reply's lines (RFC 2389: one feature per line, a leading
/// space; the first and last lines are the reply's own text).
pub fn capabilities(feat_lines: &[String]) -> Capabilities {
    let mut caps = Capabilities::default();
    for line in feat_lines {
        let mut words = line.split_whitespace();
        let Some(verb) = words.next() else { continue };
        let verb = verb.to_ascii_uppercase();
        match verb.as_str() {
            "SIZE" => caps.size = true,
            "HASH" => {
                let list = words.next().unwrap_or("");
                for name in list.split(';') {
                    let name = name.trim().trim_end_matches('*');
                    if let Some(a) = Algorithm::from_hash_name(name) {
                        if !caps.hash.contains(&a) {
                            caps.hash.push(a);
                        }
                    }
                }
            }
            _ => {
                if let Some(a) = Algorithm::from_x_command(&verb) {
                    if !caps.x.contains(&a) {
                        caps.x.push(a);
                    }
                }
            }
        }
    }
    caps
}

/// The digest in the text of a 213 reply to HASH, for `asked`: the last line, as
/// `ALGORITHM START-END DIGEST PATH` (the path may hold spaces and is not read). A range that
/// does not start at 0 is not the whole file.
pub fn parse_hash_reply(text: &str, asked: Algorithm) -> Result<String, DigestError> {
    let last = text.lines().last().unwrap_or("").trim();
    let bad = || DigestError::BadHashReply {
        text: truncate(last.to_owned()),
    };
    let mut words = last.split(' ').filter(|w| !w.is_empty());
    let (Some(name), Some(range), Some(digest)) = (words.next(), words.next(), words.next()) else {
        return Err(bad());
    };
    if Algorithm::from_hash_name(name) != Some(asked) {
        return Err(DigestError::OtherAlgorithm {
            asked,
            got: truncate(name.to_owned()),
        });
    }
    let whole = range
        .split_once('-')
        .is_some_and(|(start, end)| start == "0" && end.bytes().all(|b| b.is_ascii_digit()));
    if !whole {
        return Err(DigestError::PartialRange {
            range: truncate(range.to_owned()),
        });
    }
    check_hex(asked, digest)
}

/// The digest in the text of a 250 reply to an X command (`XSHA256`...): its last line's first
/// word.
pub fn parse_x_reply(text: &str, algorithm: Algorithm) -> Result<String, DigestError> {
    let last = text.lines().last().unwrap_or("").trim();
    check_hex(algorithm, last.split(' ').next().unwrap_or(""))
}

fn check_hex(algorithm: Algorithm, digest: &str) -> Result<String, DigestError> {
    let len = algorithm.hex_len();
    // A CRC32 may come without its leading zeros.
    let len_ok = match algorithm {
        Algorithm::Crc32 => (1..=len).contains(&digest.len()),
        _ => digest.len() == len,
    };
    if len_ok && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(digest.to_ascii_lowercase())
    } else {
        Err(DigestError::BadDigest {
            algorithm,
            text: truncate(digest.to_owned()),
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::*;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn feat_of_real_servers() {
        // proFTPD 1.3.8 with mod_digest, as it answered (lines as the session keeps them).
        let proftpd = lines(&[
            "Features:",
            " CLNT",
            " EPRT",
            " HASH CRC32;MD5;SHA-1*;SHA-256;SHA-512;",
            " MD5",
            " MLST modify*;perm*;size*;type*;unique*;",
            " SIZE",
            " XCRC",
            " XMD5",
            " XSHA",
            " XSHA1",
            " XSHA256",
            " XSHA512",
            "End",
        ]);
        let c = capabilities(&proftpd);
        assert_eq!(c.hash, vec![Crc32, Md5, Sha1, Sha256, Sha512]);
        assert_eq!(c.x, vec![Crc32, Md5, Sha1, Sha256, Sha512]);
        assert!(c.size);
        // vsftpd 3.0.3.
        let vsftpd = lines(&[
            "Features:",
            " EPRT",
            " EPSV",
            " MDTM",
            " PASV",
            " REST STREAM",
            " SIZE",
            " TVFS",
            "End",
        ]);
        assert_eq!(
            capabilities(&vsftpd),
            Capabilities {
                hash: vec![],
                x: vec![],
                size: true
            }
        );
        // Lower case, no trailing semicolon, unknown names skipped; nothing from the
        // reply's own first line.
        let odd = lines(&["HASH in the text", " hash sha-256;BLAKE3;md5*", " xcrc"]);
        let c = capabilities(&odd);
        assert_eq!(c.hash, vec![Sha256, Md5]);
        assert_eq!(c.x, vec![Crc32]);
        assert!(!c.size);
        assert_eq!(capabilities(&[]), Capabilities::default());
    }

    #[test]
    fn hash_replies() {
        // As proFTPD answered, the progress line first.
        let ok = "Computing SHA-1 digest\nSHA-1 0-6 f572d396fae9206628714fb2ce00f72e94f2258f small";
        assert_eq!(
            parse_hash_reply(ok, Sha1).unwrap(),
            "f572d396fae9206628714fb2ce00f72e94f2258f"
        );
        let spaced = "SHA-256 0-6 5891B5B522D5DF086D0FF0B110FBD9D21BB4FC7163AF34D08286A2E846F6BE03 a name with spaces";
        assert_eq!(
            parse_hash_reply(spaced, Sha256).unwrap(),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        assert_eq!(
            parse_hash_reply("CRC32 0-6 363a3020 small", Crc32).unwrap(),
            "363a3020"
        );
        for (text, asked, want) in [
            ("", Sha1, "not \"ALGORITHM"),
            ("SHA-1 0-6", Sha1, "not \"ALGORITHM"),
            (
                "MD5 0-6 b1946ac92492d2347c6235b4d2611184 small",
                Sha1,
                "with MD5 where SHA-1",
            ),
            (
                "SHA-1 5-6 f572d396fae9206628714fb2ce00f72e94f2258f small",
                Sha1,
                "range",
            ),
            (
                "SHA-1 06 f572d396fae9206628714fb2ce00f72e94f2258f small",
                Sha1,
                "range",
            ),
            ("SHA-1 0-6 f572d396 small", Sha1, "40 hexadecimal"),
            (
                "SHA-1 0-6 g572d396fae9206628714fb2ce00f72e94f2258f small",
                Sha1,
                "40 hexadecimal",
            ),
        ] {
            let e = parse_hash_reply(text, asked).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn x_replies() {
        let ok = "Computing SHA256 digest\n5891B5B522D5DF086D0FF0B110FBD9D21BB4FC7163AF34D08286A2E846F6BE03";
        assert_eq!(
            parse_x_reply(ok, Sha256).unwrap(),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        assert_eq!(parse_x_reply("363A3020", Crc32).unwrap(), "363a3020");
        assert_eq!(parse_x_reply("63A3020", Crc32).unwrap(), "63a3020");
        assert_eq!(
            parse_x_reply("B1946AC92492D2347C6235B4D2611184 small", Md5).unwrap(),
            "b1946ac92492d2347c6235b4d2611184"
        );
        for text in ["", "Computing", "B1946AC9", "363A30201"] {
            assert!(parse_x_reply(text, Md5).is_err(), "{text:?}");
        }
        assert!(parse_x_reply("363A30201", Crc32).is_err());
    }
}
