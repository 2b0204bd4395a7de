//! What both servers' SIZE after a copy proves (RULES.md §4.2, evidence before the
//! checkpoint): the copy's size evidence, or a size mismatch that fails it.
//!
//! The rule ([`size_evidence`], each row of the table test below):
//! - In image type (`I`, or `L 8`), equal sizes prove the copy: the destination holds the
//!   source's size, or for an append the size it had before plus the source's. Unequal sizes
//!   fail it (the data did not arrive whole: a transient failure). An append whose size
//!   before is unknown has nothing to compare.
//! - In a text type (`A`, `E`, `L` other than 8) the servers may convert line endings on the
//!   way, so the sizes are only reported, never compared.
//! - A side whose SIZE gave no size leaves both final replies as the only evidence, with the
//!   reasons of the side(s) that gave none.
//! - The bytes a copy wrote: the destination's size (an append's growth); an image-type
//!   append the source's size; none where a size is missing.
//!
//! The engine asks both servers for the sizes (the I/O, and what a SIZE refusal or a missing
//! file means for the copy) and hands them here.

use crate::TransferType;

/// The size evidence of a copy (RULES.md §4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeCheck {
    /// SIZE in image type on both sides agrees. For APPE, `destination_before` is
    /// the size before the append and `destination == destination_before + source`.
    Equal {
        source: u64,
        destination: u64,
        destination_before: Option<u64>,
    },
    /// A text type (TYPE A or E): the servers may convert line endings on the way
    /// (or not: vsftpd ignores ASCII mode by default), so sizes need not agree and are
    /// only reported.
    TextType {
        source: Option<u64>,
        destination: Option<u64>,
    },
    /// A server offers no SIZE (or not for this file): both final replies are the
    /// only evidence.
    NotAvailable(String),
}

/// How a copy wrote its destination file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Whole (STOR, STOU).
    Whole,
    /// Appended (APPE) to a file of size `before`, where SIZE told it before the copy.
    Appended { before: Option<u64> },
}

/// What the sizes make of a copy both servers reported done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeEvidence {
    /// The copy stands on this check; `bytes`: what it wrote, where the sizes tell.
    Checked {
        check: SizeCheck,
        bytes: Option<u64>,
    },
    /// The destination's size is not the one the copy should have made.
    Mismatch {
        source: u64,
        destination: u64,
        expected: u64,
    },
}

/// The size evidence of a copy of `transfer_type` written as `written`, from the sizes SIZE
/// gave after it on each side (`Err`: why a side gave none).
pub fn size_evidence(
    transfer_type: TransferType,
    written: Written,
    source: Result<u64, String>,
    destination: Result<u64, String>,
) -> SizeEvidence {
    let image = matches!(transfer_type, TransferType::Image | TransferType::Local(8));
    let checked = |check, bytes| SizeEvidence::Checked { check, bytes };
    match (source, destination) {
        (Ok(src), Ok(dst)) if !image => {
            let bytes = match written {
                Written::Whole => dst,
                Written::Appended { before } => dst.saturating_sub(before.unwrap_or(0)),
            };
            let check = SizeCheck::TextType {
                source: Some(src),
                destination: Some(dst),
            };
            checked(check, Some(bytes))
        }
        (Ok(src), Ok(dst)) => {
            let (expected, destination_before, bytes) = match written {
                Written::Whole => (Some(src), None, dst),
                Written::Appended { before } => (before.map(|before| before + src), before, src),
            };
            match expected {
                Some(expected) if expected == dst => {
                    let check = SizeCheck::Equal {
                        source: src,
                        destination: dst,
                        destination_before,
                    };
                    checked(check, Some(bytes))
                }
                Some(expected) => SizeEvidence::Mismatch {
                    source: src,
                    destination: dst,
                    expected,
                },
                None => {
                    let why = "the destination size before APPE is unknown";
                    checked(SizeCheck::NotAvailable(why.into()), None)
                }
            }
        }
        (src, dst) => {
            let mut reasons = Vec::new();
            if let Err(reason) = &src {
                reasons.push(format!("source: {reason}"));
            }
            if let Err(reason) = &dst {
                reasons.push(format!("destination: {reason}"));
            }
            let check = if image {
                SizeCheck::NotAvailable(reasons.join("; "))
            } else {
                SizeCheck::TextType {
                    source: src.ok(),
                    destination: dst.ok(),
                }
            };
            checked(check, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side's size after the copy, or why it gave none.
    type Size = Result<u64, String>;

    #[test]
    fn what_the_sizes_after_a_copy_prove() {
        use TransferType::{Ascii, Ebcdic, Image, Local};
        use Written::{Appended, Whole};
        let no = |why: &str| Err::<u64, _>(why.to_owned());
        let equal = |source, destination, destination_before, bytes| SizeEvidence::Checked {
            check: SizeCheck::Equal {
                source,
                destination,
                destination_before,
            },
            bytes: Some(bytes),
        };
        let text = |source, destination, bytes| SizeEvidence::Checked {
            check: SizeCheck::TextType {
                source,
                destination,
            },
            bytes,
        };
        let none = |why: &str| SizeEvidence::Checked {
            check: SizeCheck::NotAvailable(why.to_owned()),
            bytes: None,
        };
        let mismatch = |source, destination, expected| SizeEvidence::Mismatch {
            source,
            destination,
            expected,
        };
        let after = |before| Appended {
            before: Some(before),
        };
        let unknown = Appended { before: None };
        #[rustfmt::skip]
        let rows: Vec<(TransferType, Written, Size, Size, SizeEvidence)> = vec![
            // image type: equal sizes prove a copy written whole; unequal ones fail it.
            (Image, Whole, Ok(10), Ok(10), equal(10, 10, None, 10)),
            (Local(8), Whole, Ok(10), Ok(10), equal(10, 10, None, 10)),
            (Image, Whole, Ok(0), Ok(0), equal(0, 0, None, 0)),
            (Image, Whole, Ok(10), Ok(9), mismatch(10, 9, 10)),
            (Image, Whole, Ok(10), Ok(11), mismatch(10, 11, 10)),
            (Local(8), Whole, Ok(10), Ok(9), mismatch(10, 9, 10)),
            // an image-type append: the size before plus the source's; it wrote the source.
            (Image, after(5), Ok(10), Ok(15), equal(10, 15, Some(5), 10)),
            (Image, after(0), Ok(10), Ok(10), equal(10, 10, Some(0), 10)),
            (Image, after(5), Ok(10), Ok(14), mismatch(10, 14, 15)),
            (Image, after(5), Ok(10), Ok(10), mismatch(10, 10, 15)),
            (Image, unknown, Ok(10), Ok(15), none("the destination size before APPE is unknown")),
            // a text type: the sizes are reported, never compared.
            (Ascii, Whole, Ok(10), Ok(12), text(Some(10), Some(12), Some(12))),
            (Ebcdic, Whole, Ok(10), Ok(10), text(Some(10), Some(10), Some(10))),
            (Local(7), Whole, Ok(10), Ok(3), text(Some(10), Some(3), Some(3))),
            (Ascii, after(5), Ok(10), Ok(17), text(Some(10), Some(17), Some(12))),
            (Ascii, unknown, Ok(10), Ok(17), text(Some(10), Some(17), Some(17))),
            (Ascii, after(20), Ok(10), Ok(17), text(Some(10), Some(17), Some(0))),
            // a side without a size: the replies are the evidence, with the reasons.
            (Image, Whole, no("no SIZE"), Ok(10), none("source: no SIZE")),
            (Image, Whole, Ok(10), no("550"), none("destination: 550")),
            (Image, Whole, no("a"), no("b"), none("source: a; destination: b")),
            (Image, after(5), Ok(10), no("b"), none("destination: b")),
            (Ascii, Whole, no("a"), Ok(10), text(None, Some(10), None)),
            (Ascii, Whole, Ok(10), no("b"), text(Some(10), None, None)),
            (Ascii, after(5), no("a"), no("b"), text(None, None, None)),
        ];
        for (transfer_type, written, source, destination, want) in rows {
            let row = format!("{transfer_type:?} {written:?} {source:?} {destination:?}");
            let got = size_evidence(transfer_type, written, source, destination);
            assert_eq!(got, want, "{row}");
        }
    }
}
