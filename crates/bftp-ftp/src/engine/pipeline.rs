//! Commands sent ahead of their turn (pipelining), so that a file costs about two control
//! round trips on a far network instead of six or seven.
//!
//! A server reads its commands one at a time and answers them in order, so a client may send
//! several in one write as long as it reads one reply per command, in order. On one pair, a
//! copy whose caller named the next one ([`Pair::expect_next`]) sends:
//! - to the source (passive), in one write: this file's `RETR`, the next file's `SIZE` and the
//!   next `PASV`. Read in order: RETR's 1yz and final reply, then the two others (kept for the
//!   next copy, as [`Ahead`]);
//! - to the destination (active), once its final reply is in: this file's `SIZE` (the proof)
//!   with the next file's `PORT` and `STOR`. SIZE's reply decides this file; the other two are
//!   the next copy's to read.
//!
//! So the next copy starts with its source size known, its passive address known and its
//! active side already told to connect: it reads PORT's 200 and STOR's 150, then sends RETR.
//!
//! A copy nothing was sent ahead for (a pair's first, or one after a copy that could not
//! pipeline) still sends its source `SIZE` with the `PASV` (`EPSV` for IPv6) behind it, in
//! one write, when the source is passive first and already in image type for an
//! image-type job; a refused SIZE leaves the PASV's reply owed, read before the next
//! command.
//! The active side is still commanded (and answered) before the passive one: nothing is sent
//! to a passive server that could leave it waiting for a data connection that never comes.
//!
//! What is not pipelined, and why:
//! - anything but a `replace` copy (APPE and STOU need a fence or a name recorded before they
//!   start, and a durable record between), and a copy in the swapped role order;
//! - a job in another TYPE than image: SIZE needs image type, so TYPE would change twice per
//!   file, and a refused TYPE in the middle of a batch would change what the others mean;
//! - the first copy on a pair: its PORT has not been accepted yet, so a STOR behind a refused
//!   PORT could create an empty file on a server that refuses FXP.
//!
//! In step: replies sent ahead that no phase claimed ([`Pair::owed`]) are read and dropped
//! before the next command on that connection, and at the end of every copy. When the
//! destination was already told to store the next file but this copy needs the destination
//! for something else (its SIZE was not the proof, a clean-up), or the next copy is not the
//! one announced, the started transfer cannot be called back: both connections are closed
//! (the destination then ends that transfer with whatever it got, nothing), logged in again,
//! and the next file's partial destination file is deleted.

use std::net::SocketAddr;

use bftp_core::{DestCommand, TransferType};

use super::CopyRequest;
use crate::parse::check_argument;
use crate::transcript::Side;

/// The next copy's first steps, done by the copy before it on the same pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ahead {
    /// The copy they belong to.
    pub request: CopyRequest,
    /// The source's SIZE, asked behind the previous RETR (before this copy's STOR).
    pub source_size: u64,
    /// The source's data address, from the PASV/EPSV behind the previous RETR (checked as
    /// any passive reply is).
    pub data: SocketAddr,
    /// `PASV` or `EPSV`, whichever gave `data`.
    pub passive_verb: &'static str,
    /// The PORT or EPRT line and the STOR already sent to the destination, their two replies
    /// not read yet; `None`: nothing sent to the destination yet.
    pub started: Option<String>,
}

/// What a copy sends behind its RETR for the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Behind {
    pub next: CopyRequest,
    /// `PASV` or `EPSV`: the one this copy's passive side answered.
    pub passive_verb: &'static str,
    /// `PORT` or `EPRT`: the one this copy's active side accepted.
    pub port_verb: &'static str,
}

/// Whether a copy of `current` (with the source passive, as `passive` says) may send the
/// first commands of `next` ahead, in a job of transfer type `job_type`.
pub(super) fn may_pipeline(
    current: &CopyRequest,
    next: &CopyRequest,
    passive: Side,
    job_type: TransferType,
) -> bool {
    passive == Side::Source
        && current.dest_command == DestCommand::Replace
        && next.dest_command == DestCommand::Replace
        && current.announce.is_none()
        && next.announce.is_none()
        && next.source_size.is_none()
        && matches!(job_type, TransferType::Image)
        && next != current
        && check_argument(&next.source_path).is_ok()
        && check_argument(&next.dest_path).is_ok()
        && !next.source_path.is_empty()
        && !next.dest_path.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(src: &str, dst: &str, cmd: DestCommand) -> CopyRequest {
        CopyRequest {
            source_path: src.into(),
            dest_path: dst.into(),
            dest_command: cmd,
            source_size: None,
            announce: None,
            resume_at: None,
        }
    }

    #[test]
    fn which_copies_send_the_next_ones_commands_ahead() {
        use DestCommand::*;
        let a = req("a", "in/a", Replace);
        let b = req("b", "in/b", Replace);
        let sized = CopyRequest {
            source_size: Some(3),
            ..b.clone()
        };
        let (announce, _rx) = super::super::Announce::channel();
        let announced = CopyRequest {
            announce: Some(announce),
            ..b.clone()
        };
        let image = TransferType::Image;
        let cases: &[(&CopyRequest, &CopyRequest, Side, TransferType, bool, &str)] = &[
            (
                &a,
                &b,
                Side::Source,
                image,
                true,
                "two replace copies, source passive",
            ),
            (&a, &b, Side::Destination, image, false, "swapped roles"),
            (
                &a,
                &b,
                Side::Source,
                TransferType::Ascii,
                false,
                "ASCII: TYPE would change",
            ),
            (
                &req("a", "in/a", Append),
                &b,
                Side::Source,
                image,
                false,
                "APPE now",
            ),
            (
                &a,
                &req("b", "in/b", Append),
                Side::Source,
                image,
                false,
                "APPE next",
            ),
            (
                &a,
                &req("b", "in", Unique),
                Side::Source,
                image,
                false,
                "STOU next",
            ),
            (
                &a,
                &sized,
                Side::Source,
                image,
                false,
                "next size asked by its caller",
            ),
            (
                &a,
                &announced,
                Side::Source,
                image,
                false,
                "next announces a name",
            ),
            (&a, &a, Side::Source, image, false, "the same copy again"),
            (
                &a,
                &req("b\r\nDELE x", "in/b", Replace),
                Side::Source,
                image,
                false,
                "bad name",
            ),
            (
                &a,
                &req("b", "", Replace),
                Side::Source,
                image,
                false,
                "no destination name",
            ),
        ];
        for (current, next, passive, t, want, why) in cases {
            assert_eq!(may_pipeline(current, next, *passive, *t), *want, "{why}");
        }
    }
}
