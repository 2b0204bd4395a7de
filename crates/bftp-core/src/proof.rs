//! What proves a copy: the strongest evidence both servers of a pair can give.
//!
//! - `hash`: both servers compute the same digest algorithm over the file (through `HASH`
//!   after `OPTS HASH`, or one of the older `XSHA512`/`XSHA256`/`XSHA1`/`XMD5`/`XCRC`
//!   commands, each side with whichever it has) and the two digests are equal;
//! - `size`: SIZE in image type agrees on both sides;
//! - `replies`: only both servers' final 2yz.
//!
//! The rule ([`plan`]): a common algorithm of the two sides, the strongest one; each side is
//! asked through `HASH` where its FEAT offers the algorithm there, else through its X
//! command. A hash proof needs an image-type copy written whole (STOR or STOU): a text type may
//! convert line endings on the way, and an append's destination holds more than the source.
//! Without a hash, SIZE on both sides (in FEAT) gives `size`; else only the replies remain.
//! A job may require a minimum ([`require`]); a pair that cannot give it is refused with the
//! reason, before any file moves.

use std::fmt;
use std::str::FromStr;

use crate::{DestCommand, TransferType, ValidationError};

/// A digest algorithm, weakest first (the derived order is the strength order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Algorithm {
    Crc32,
    Md5,
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Crc32,
        Algorithm::Md5,
        Algorithm::Sha1,
        Algorithm::Sha256,
        Algorithm::Sha512,
    ];

    /// The name in FEAT's `HASH` line, `OPTS HASH` and the HASH reply.
    pub fn hash_name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Md5 => "MD5",
            Algorithm::Sha1 => "SHA-1",
            Algorithm::Sha256 => "SHA-256",
            Algorithm::Sha512 => "SHA-512",
        }
    }

    /// The older command that answers this digest (`250 HEX`).
    pub fn x_command(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "XCRC",
            Algorithm::Md5 => "XMD5",
            Algorithm::Sha1 => "XSHA1",
            Algorithm::Sha256 => "XSHA256",
            Algorithm::Sha512 => "XSHA512",
        }
    }

    /// The algorithm of a HASH name, any case (`sha-256`).
    pub fn from_hash_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.hash_name().eq_ignore_ascii_case(name))
    }

    /// The algorithm of an X command's verb, any case (`xsha256`).
    pub fn from_x_command(verb: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.x_command().eq_ignore_ascii_case(verb))
    }

    /// The length of its digest in hexadecimal digits.
    pub fn hex_len(self) -> usize {
        match self {
            Algorithm::Crc32 => 8,
            Algorithm::Md5 => 32,
            Algorithm::Sha1 => 40,
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hash_name())
    }
}

/// How one server is asked for a digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashCommand {
    /// `OPTS HASH <name>` once, then `HASH <path>`: `213 <name> <range> <hex> <path>`.
    Hash,
    /// `XSHA256 <path>` and its kin: `250 <hex>`.
    X,
}

/// What one server offers for proofs, as its FEAT says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// The algorithms of FEAT's `HASH` line.
    pub hash: Vec<Algorithm>,
    /// The algorithms whose X command FEAT lists.
    pub x: Vec<Algorithm>,
    /// FEAT lists SIZE.
    pub size: bool,
}

impl Capabilities {
    /// How this server is best asked for `algorithm`, if it can be.
    fn command_for(&self, algorithm: Algorithm) -> Option<HashCommand> {
        if self.hash.contains(&algorithm) {
            Some(HashCommand::Hash)
        } else if self.x.contains(&algorithm) {
            Some(HashCommand::X)
        } else {
            None
        }
    }

    fn has_any_hash(&self) -> bool {
        !self.hash.is_empty() || !self.x.is_empty()
    }
}

/// How strong a proof is, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ProofLevel {
    #[default]
    Replies,
    Size,
    Hash,
}

impl ProofLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            ProofLevel::Replies => "replies",
            ProofLevel::Size => "size",
            ProofLevel::Hash => "hash",
        }
    }
}

impl fmt::Display for ProofLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProofLevel {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, ValidationError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hash" => Ok(ProofLevel::Hash),
            "size" => Ok(ProofLevel::Size),
            "replies" => Ok(ProofLevel::Replies),
            _ => Err(ValidationError::UnknownValue {
                what: "proof",
                value: s.to_owned(),
                expected: "hash size replies",
            }),
        }
    }
}

/// What the proof step made of a copy that both servers reported done (the daemon's proof
/// step finds it; [`crate::ledger::record`] decides what it makes of the member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proven {
    /// Proven to `level`; `words` follow the copy's evidence in the member's detail.
    Ok {
        level: ProofLevel,
        words: Option<String>,
    },
    /// The digests differ. `deleted`: the bad destination file was removed.
    Mismatch { failure: String, deleted: bool },
    /// The copy's proof is weaker than the job needs.
    Short { failure: String },
}

/// A hash proof: the algorithm and how each side is asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashPlan {
    pub algorithm: Algorithm,
    pub source: HashCommand,
    pub destination: HashCommand,
}

/// The proof a pair can give a copy, and why nothing stronger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `Some` for a hash proof.
    pub hash: Option<HashPlan>,
    pub level: ProofLevel,
    /// Why the proof is not stronger (empty for a hash proof).
    pub why_not_stronger: String,
}

impl Plan {
    /// The plan in words, for `bftp verify` and the logs: `hash (SHA-256: source HASH,
    /// destination XSHA256)`, `size (no common hash: ...)`.
    pub fn describe(&self) -> String {
        match &self.hash {
            Some(h) => {
                let how = |c: HashCommand| match c {
                    HashCommand::Hash => "HASH",
                    HashCommand::X => h.algorithm.x_command(),
                };
                format!(
                    "hash ({}: source {}, destination {})",
                    h.algorithm,
                    how(h.source),
                    how(h.destination)
                )
            }
            None => format!("{} ({})", self.level, self.why_not_stronger),
        }
    }
}

/// The strongest proof a copy between a source with `src` and a destination with `dst` can
/// have, for a job of `transfer_type` written with `dest`.
pub fn plan(
    src: &Capabilities,
    dst: &Capabilities,
    transfer_type: TransferType,
    dest: DestCommand,
) -> Plan {
    let text = matches!(transfer_type, TransferType::Ascii | TransferType::Ebcdic);
    if text {
        return Plan {
            hash: None,
            level: ProofLevel::Replies,
            why_not_stronger: "a text TYPE may convert line endings on the way, so neither \
                               sizes nor digests of the two files need agree"
                .into(),
        };
    }
    let no_hash = if dest == DestCommand::Append {
        "an append's destination holds more than the source, so their digests differ".to_owned()
    } else {
        let common = Algorithm::ALL.into_iter().rev().find_map(|a| {
            Some(HashPlan {
                algorithm: a,
                source: src.command_for(a)?,
                destination: dst.command_for(a)?,
            })
        });
        if let Some(h) = common {
            return Plan {
                hash: Some(h),
                level: ProofLevel::Hash,
                why_not_stronger: String::new(),
            };
        }
        match (src.has_any_hash(), dst.has_any_hash()) {
            (false, false) => {
                "neither server offers a hash command (HASH, XSHA256, XSHA1, XMD5, XCRC)".to_owned()
            }
            (false, true) => {
                "the source server offers no hash command (HASH, XSHA256, XSHA1, XMD5, XCRC)"
                    .to_owned()
            }
            (true, false) => {
                "the destination server offers no hash command (HASH, XSHA256, XSHA1, XMD5, XCRC)"
                    .to_owned()
            }
            (true, true) => "the two servers offer no digest algorithm in common".to_owned(),
        }
    };
    if src.size && dst.size {
        Plan {
            hash: None,
            level: ProofLevel::Size,
            why_not_stronger: no_hash,
        }
    } else {
        let which = match (src.size, dst.size) {
            (false, false) => "neither server offers SIZE",
            (false, true) => "the source server offers no SIZE",
            _ => "the destination server offers no SIZE",
        };
        Plan {
            hash: None,
            level: ProofLevel::Replies,
            why_not_stronger: format!("{no_hash}; {which}"),
        }
    }
}

/// Whether a pair whose best is `plan` meets a job's `required` proof: `Err` says why not.
pub fn require(required: Option<ProofLevel>, plan: &Plan) -> Result<(), String> {
    match required {
        Some(required) if plan.level < required => Err(format!(
            "the job requires a {required} proof, but this pair of servers can give only {}: {}",
            plan.level, plan.why_not_stronger
        )),
        _ => Ok(()),
    }
}

/// What bftpd saw of a stream it relayed (RULES.md §14): the bytes it moved, and their
/// SHA-256 (lower-case hex) when it hashed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    pub bytes: u64,
    pub sha256: Option<String>,
}

/// A copy's proof with what its relayed stream adds. `servers`: what the servers' sizes and
/// digests proved, in words; `stream`: the relay's count and hash (`None` for a third-party
/// copy); `sizes_equal`: both servers' SIZE equal (the byte count equal to the source's size
/// is checked by the copy itself); `image`: an image-type copy (a text TYPE may change the
/// bytes on the way, so a stream's hash is neither file's).
///
/// - The servers' digests (`hash`) prove more than the stream: they stay.
/// - The stream's SHA-256 and equal sizes: `hash` (bftpd read every byte the destination got,
///   and the destination holds as many).
/// - Equal sizes and the byte count: `size`.
/// - The byte count alone: what the servers' replies proved, its words say so.
pub fn with_stream(
    servers: (ProofLevel, Option<String>),
    stream: Option<&Stream>,
    sizes_equal: bool,
    image: bool,
) -> (ProofLevel, Option<String>) {
    let Some(stream) = stream else {
        return servers;
    };
    let (level, words) = servers;
    let join = |more: String| match &words {
        Some(w) => Some(format!("{w}; {more}")),
        None => Some(more),
    };
    let bytes = stream.bytes;
    match (&stream.sha256, sizes_equal && image) {
        _ if level == ProofLevel::Hash => (level, join(format!("relayed {bytes} bytes"))),
        (Some(sha), true) => (
            ProofLevel::Hash,
            join(format!(
                "the relayed stream's SHA-256 {sha} over {bytes} bytes, and equal sizes"
            )),
        ),
        (_, true) => (
            level.max(ProofLevel::Size),
            join(format!("relayed {bytes} bytes, equal to both sizes")),
        ),
        (_, false) => (
            level,
            join(format!("relayed {bytes} bytes (the byte count alone)")),
        ),
    }
}

/// [`require`] for a job whose copies may be relayed with their stream hashed: a pair that
/// cannot give a required hash proof itself meets it by relaying (`Ok(true)`: relay and hash
/// every copy), in image type only.
pub fn require_or_relay(
    required: Option<ProofLevel>,
    plan: &Plan,
    may_relay: bool,
    image: bool,
) -> Result<bool, String> {
    match require(required, plan) {
        Ok(()) => Ok(false),
        Err(_) if may_relay && image && required == Some(ProofLevel::Hash) => Ok(true),
        Err(why) => Err(why),
    }
}

/// Whether two digests of `algorithm` are the same: hexadecimal, any case, leading zeros of a
/// CRC32 tolerated (some servers drop them).
pub fn digests_match(algorithm: Algorithm, a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        if algorithm == Algorithm::Crc32 {
            let t = s.trim_start_matches('0');
            format!("{t:0>8}")
        } else {
            s
        }
    };
    let (a, b) = (norm(a), norm(b));
    !a.is_empty() && a.bytes().all(|c| c.is_ascii_hexdigit()) && a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::*;

    #[test]
    fn what_a_relayed_stream_adds_to_a_proof() {
        use ProofLevel::{Hash, Replies, Size};
        let hashed = Stream {
            bytes: 10,
            sha256: Some("ab".into()),
        };
        let counted = Stream {
            bytes: 10,
            sha256: None,
        };
        // (servers, stream, sizes equal, image) -> level, and a word the words must hold
        type Row<'a> = (
            ProofLevel,
            Option<&'a Stream>,
            bool,
            bool,
            ProofLevel,
            &'a str,
        );
        let rows: &[Row] = &[
            (Replies, None, false, true, Replies, ""),
            (Size, None, true, true, Size, ""),
            (Hash, Some(&hashed), true, true, Hash, "relayed 10 bytes"),
            (Hash, Some(&counted), true, true, Hash, "relayed 10 bytes"),
            (
                Size,
                Some(&hashed),
                true,
                true,
                Hash,
                "SHA-256 ab over 10 bytes",
            ),
            (Replies, Some(&hashed), true, true, Hash, "SHA-256 ab"),
            // A text TYPE: the stream is neither file.
            (
                Replies,
                Some(&hashed),
                true,
                false,
                Replies,
                "byte count alone",
            ),
            // No size evidence: the hash proves what bftpd sent, not what was stored.
            (
                Replies,
                Some(&hashed),
                false,
                true,
                Replies,
                "byte count alone",
            ),
            (
                Size,
                Some(&counted),
                true,
                true,
                Size,
                "equal to both sizes",
            ),
            (
                Replies,
                Some(&counted),
                true,
                true,
                Size,
                "equal to both sizes",
            ),
            (
                Replies,
                Some(&counted),
                false,
                true,
                Replies,
                "byte count alone",
            ),
        ];
        for (servers, stream, equal, image, want, words) in rows {
            let (level, said) = with_stream((*servers, None), *stream, *equal, *image);
            assert_eq!(
                level, *want,
                "{servers:?} {stream:?} equal {equal} image {image}"
            );
            assert!(
                said.as_deref().unwrap_or("").contains(words),
                "{said:?} lacks {words:?}"
            );
        }
        let (_, said) = with_stream((Size, Some("sizes".into())), Some(&counted), true, true);
        assert_eq!(
            said.as_deref(),
            Some("sizes; relayed 10 bytes, equal to both sizes")
        );
    }

    #[test]
    fn a_hash_proof_the_servers_cannot_give_is_met_by_relaying() {
        let size_only = Plan {
            hash: None,
            level: ProofLevel::Size,
            why_not_stronger: "no common hash".into(),
        };
        let hash = Some(ProofLevel::Hash);
        assert_eq!(require_or_relay(hash, &size_only, true, true), Ok(true));
        assert!(require_or_relay(hash, &size_only, false, true).is_err());
        assert!(require_or_relay(hash, &size_only, true, false).is_err());
        assert_eq!(
            require_or_relay(Some(ProofLevel::Size), &size_only, true, true),
            Ok(false)
        );
        assert_eq!(require_or_relay(None, &size_only, true, true), Ok(false));
        let replies = Plan {
            level: ProofLevel::Replies,
            ..size_only
        };
        assert!(require_or_relay(Some(ProofLevel::Size), &replies, true, true).is_err());
    }

    fn caps(hash: &[Algorithm], x: &[Algorithm], size: bool) -> Capabilities {
        Capabilities {
            hash: hash.to_vec(),
            x: x.to_vec(),
            size,
        }
    }

    /// (source, destination, type, command) -> (hash plan, level, why-not-stronger contains).
    type Row<'a> = (
        &'a Capabilities,
        &'a Capabilities,
        TransferType,
        DestCommand,
        Option<HashPlan>,
        ProofLevel,
        &'a str,
    );

    /// proFTPD with mod_digest, as its FEAT says.
    fn proftpd_digest() -> Capabilities {
        caps(
            &[Crc32, Md5, Sha1, Sha256, Sha512],
            &[Crc32, Md5, Sha1, Sha256, Sha512],
            true,
        )
    }

    #[test]
    fn the_strongest_proof_both_sides_allow() {
        let vsftpd = caps(&[], &[], true);
        let no_size = caps(&[], &[], false);
        let x_only = caps(&[], &[Sha1, Md5], true);
        let hash_md5 = caps(&[Md5, Crc32], &[], true);
        let pd = proftpd_digest();
        let sha256_only = caps(&[Sha256], &[], true);
        let (i, a, r, u) = (
            TransferType::Image,
            TransferType::Ascii,
            DestCommand::Replace,
            DestCommand::Unique,
        );
        let hash = |algorithm, source, destination| {
            Some(HashPlan {
                algorithm,
                source,
                destination,
            })
        };
        use HashCommand::{Hash as H, X};
        let rows: Vec<Row> = vec![
            (&pd, &pd, i, r, hash(Sha512, H, H), ProofLevel::Hash, ""),
            (&pd, &pd, i, u, hash(Sha512, H, H), ProofLevel::Hash, ""),
            (&pd, &x_only, i, r, hash(Sha1, H, X), ProofLevel::Hash, ""),
            (
                &x_only,
                &hash_md5,
                i,
                r,
                hash(Md5, X, H),
                ProofLevel::Hash,
                "",
            ),
            (
                &hash_md5,
                &hash_md5,
                TransferType::Local(8),
                r,
                hash(Md5, H, H),
                ProofLevel::Hash,
                "",
            ),
            (
                &pd,
                &vsftpd,
                i,
                r,
                None,
                ProofLevel::Size,
                "the destination server offers no hash",
            ),
            (
                &vsftpd,
                &pd,
                i,
                r,
                None,
                ProofLevel::Size,
                "the source server offers no hash",
            ),
            (
                &vsftpd,
                &vsftpd,
                i,
                r,
                None,
                ProofLevel::Size,
                "neither server offers a hash",
            ),
            (
                &x_only,
                &sha256_only,
                i,
                r,
                None,
                ProofLevel::Size,
                "no digest algorithm in common",
            ),
            (
                &pd,
                &pd,
                i,
                DestCommand::Append,
                None,
                ProofLevel::Size,
                "append",
            ),
            (&pd, &pd, a, r, None, ProofLevel::Replies, "text TYPE"),
            (
                &pd,
                &pd,
                TransferType::Ebcdic,
                r,
                None,
                ProofLevel::Replies,
                "text TYPE",
            ),
            (
                &vsftpd,
                &no_size,
                i,
                r,
                None,
                ProofLevel::Replies,
                "the destination server offers no SIZE",
            ),
            (
                &no_size,
                &vsftpd,
                i,
                r,
                None,
                ProofLevel::Replies,
                "the source server offers no SIZE",
            ),
            (
                &no_size,
                &no_size,
                i,
                r,
                None,
                ProofLevel::Replies,
                "neither server offers SIZE",
            ),
        ];
        for (n, (s, d, t, c, h, level, why)) in rows.into_iter().enumerate() {
            let p = plan(s, d, t, c);
            assert_eq!(p.hash, h, "row {n}");
            assert_eq!(p.level, level, "row {n}");
            assert!(p.why_not_stronger.contains(why), "row {n}: {p:?}");
            assert_eq!(
                p.why_not_stronger.is_empty(),
                level == ProofLevel::Hash,
                "row {n}"
            );
        }
    }

    #[test]
    fn a_required_proof_is_met_or_refused_with_the_reason() {
        let vsftpd = caps(&[], &[], true);
        let best = plan(
            &proftpd_digest(),
            &proftpd_digest(),
            TransferType::Image,
            DestCommand::Replace,
        );
        let size = plan(
            &proftpd_digest(),
            &vsftpd,
            TransferType::Image,
            DestCommand::Replace,
        );
        let replies = plan(&vsftpd, &vsftpd, TransferType::Ascii, DestCommand::Replace);
        for (required, p, ok) in [
            (None, &replies, true),
            (Some(ProofLevel::Replies), &replies, true),
            (Some(ProofLevel::Size), &replies, false),
            (Some(ProofLevel::Size), &size, true),
            (Some(ProofLevel::Hash), &size, false),
            (Some(ProofLevel::Hash), &best, true),
            (Some(ProofLevel::Size), &best, true),
        ] {
            let r = require(required, p);
            assert_eq!(r.is_ok(), ok, "{required:?} {p:?}");
            if let Err(why) = r {
                assert!(why.contains(&p.why_not_stronger), "{why}");
                assert!(
                    why.contains(&format!("requires a {}", required.unwrap())),
                    "{why}"
                );
            }
        }
        let why = require(Some(ProofLevel::Hash), &size).unwrap_err();
        assert!(
            why.contains("destination server offers no hash command"),
            "{why}"
        );
    }

    #[test]
    fn plans_read_as_words() {
        let p = plan(
            &proftpd_digest(),
            &caps(&[], &[Sha256], true),
            TransferType::Image,
            DestCommand::Replace,
        );
        assert_eq!(
            p.describe(),
            "hash (SHA-256: source HASH, destination XSHA256)"
        );
        let p = plan(
            &caps(&[], &[], true),
            &caps(&[], &[], true),
            TransferType::Image,
            DestCommand::Replace,
        );
        assert!(
            p.describe().starts_with("size (neither server"),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn levels_and_algorithms_by_name() {
        for (s, l) in [
            ("hash", ProofLevel::Hash),
            ("SIZE", ProofLevel::Size),
            (" replies", ProofLevel::Replies),
        ] {
            assert_eq!(s.parse::<ProofLevel>().unwrap(), l);
        }
        assert!("md5".parse::<ProofLevel>().is_err());
        for a in Algorithm::ALL {
            assert_eq!(
                Algorithm::from_hash_name(&a.hash_name().to_lowercase()),
                Some(a)
            );
            assert_eq!(
                Algorithm::from_x_command(&a.x_command().to_lowercase()),
                Some(a)
            );
        }
        assert_eq!(Algorithm::from_hash_name("SHA256"), None);
        assert_eq!(Algorithm::from_x_command("XSHA"), None);
    }

    #[test]
    fn digests_compare_as_hex_in_any_case() {
        assert!(digests_match(Sha256, "ABCdef01", "abcdef01"));
        assert!(!digests_match(Sha256, "abcdef01", "abcdef02"));
        assert!(!digests_match(Sha256, "", ""));
        assert!(!digests_match(Sha256, "xyz", "xyz"));
        assert!(digests_match(Crc32, "0363a302", "363a302"));
        assert!(!digests_match(Md5, "0363a302", "363a302"));
    }
}
