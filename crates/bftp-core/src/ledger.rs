//! What a finished copy writes into its member's ledger entry.
//!
//! The executor copies, then gathers what the ledger needs to know beyond the copy's own
//! outcome (what the proof step made of a copy both servers reported done, whether a unique
//! copy's announced name is claimed by another member, which files a failed unique copy left
//! and kept, whether a transient refusal came back unchanged), and hands it all to
//! [`record`], which decides; the executor writes the [`Change`] and carries out what follows
//! it (the DELE of a `move`'s source). It rests on RULES.md §4.2 (evidence before the
//! checkpoint), §4.3 (an append or STOU that may have happened is resolved, not repeated) and
//! §4.3a (a file not provably ours stays).
//!
//! The rules (each row of the table test below):
//! - The proof step first ([`with_proof`]): a copy proven to a level records that level in
//!   the member's `proof`, its words after the copy's evidence. A copy whose digests differ,
//!   or whose proof is short of what the job needs, is a transient failure of a touched
//!   destination instead; for a unique copy, whose file stays (a second STOU would make a
//!   second file, and a mismatched name may be another's), one that kept its file, so
//!   `uncertain`. The proof of any other outcome is not asked.
//! - Succeeded: the member is `succeeded`, with the copy's evidence as its detail ("stored
//!   as NAME; ..." for a unique copy); a `move` replaces the intent with the DELE of its
//!   source, written with the success so that a crash before the DELE completes it; a copy
//!   clears it. A unique copy whose announced name the server also gave another member is
//!   `uncertain` instead: never two members on one file, nothing deleted, nothing repeated.
//! - Permanent: `failed_permanent`, the intent cleared; `uncertain` when the destination may
//!   hold part of it and it is not ours to remove: an append that reached the destination,
//!   a unique copy that kept a file it could not prove its own.
//! - Transient: the member stays pending for a later attempt. An append that reached the
//!   destination keeps its intent (the next attempt resolves it from SIZE); otherwise the
//!   intent is cleared. A unique copy that kept a file it could not prove its own is
//!   `uncertain`. Only a member with nothing left to resolve, whose data connection failed
//!   (425/426) or whose STOU name was taken by another session (553), is worth the second try
//!   within the attempt.
//! - The same transient refusal again (the capability memory settled it): the member ends as
//!   the memory says, its intent cleared, whatever the command.

use crate::proof::{ProofLevel, Proven};
use crate::{DestCommand, Disposition, MemberState};

/// A copy's outcome, with the evidence the executor gathered after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Both servers' final 2yz, and equal sizes where they could be compared.
    Succeeded {
        bytes: Option<u64>,
        /// The source's size SIZE told the copy, where the member has none yet.
        size: Option<u64>,
        /// What proves the copy, in words (the size check).
        evidence: String,
        /// A unique copy: the name the server stored it under, as it announced it.
        stored_as: Option<StoredAs>,
    },
    /// A failure that repeating will not mend.
    Permanent {
        failure: String,
        destination: Destination,
    },
    /// A failure that a later try may not meet.
    Transient {
        failure: String,
        destination: Destination,
        cause: Cause,
    },
    /// A transient refusal that came back unchanged from the same server: the capability
    /// memory ends the member, in `state` for the reason `detail`.
    RepeatedRefusal { state: MemberState, detail: String },
}

/// The name a unique copy was stored under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAs {
    pub name: String,
    /// Who else the server announced this name to (another member of the job, or another
    /// copy of this daemon lately), if anyone.
    pub also_given_to: Option<String>,
}

/// What a failed copy may have left on the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The destination accepted the storing command (a 125/150): the file may have changed.
    pub touched: bool,
    /// A unique copy only: why a file its STOU left was kept (not provably ours), after the
    /// executor deleted those that were. `None`: nothing of it is left.
    pub kept: Option<String>,
}

/// Why a transient failure happened, as far as a second try in the attempt cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The data connection did not open (425) or broke (426).
    DataConnection,
    /// STOU answered 553: the name the server chose was taken at the same moment.
    UniqueNameTaken,
    Other,
}

/// What becomes of the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// It ends, or is succeeded, in this state.
    Settled(MemberState),
    /// It stays pending for a later attempt; `second_try`: worth one more try within this
    /// attempt.
    Pending { second_try: bool },
}

/// What becomes of the member's intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentChange {
    /// Nothing is left to resolve.
    Clear,
    /// The next attempt resolves it.
    Keep,
    /// Replaced by the DELE of the source (a `move`'s copy is proven).
    DeleteSource,
}

/// The ledger change a copy's outcome makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub next: Next,
    pub intent: IntentChange,
    /// The member's detail; for a pending member, also why it is pending.
    pub detail: String,
    /// A success only: the bytes copied, the source's size to record, the unique name.
    pub bytes: Option<u64>,
    pub size: Option<u64>,
    pub stored_as: Option<String>,
    /// A proven copy: the proof to record in the member's `proof`.
    pub proof: Option<ProofLevel>,
}

impl Change {
    fn ends(state: MemberState, detail: String) -> Change {
        Change {
            next: Next::Settled(state),
            intent: IntentChange::Clear,
            detail,
            bytes: None,
            size: None,
            stored_as: None,
            proof: None,
        }
    }

    fn pending(second_try: bool, intent: IntentChange, detail: String) -> Change {
        Change {
            next: Next::Pending { second_try },
            intent,
            ..Change::ends(MemberState::Pending, detail)
        }
    }
}

/// The ledger change of a copy's `outcome` with what the proof step made of it (`proven`,
/// `None` where it did not run), for a job storing with `dest` and leaving its source as
/// `disposition` (a `delete` job copies nothing, and is taken as a copy here).
pub fn record(
    outcome: Outcome,
    proven: Option<Proven>,
    dest: DestCommand,
    disposition: Disposition,
) -> Change {
    let (outcome, proof) = with_proof(outcome, proven, dest);
    Change {
        proof,
        ..settle(outcome, dest, disposition)
    }
}

/// A copy's `outcome` with its proof: a proven success names its proof (returned, to record
/// in the member's `proof`) after its evidence; a digest mismatch or a proof short of what
/// the job needs is a transient failure of a touched destination instead; for a unique copy,
/// whose file stays (a second STOU would make a second file, and a mismatched name may be
/// another's), one that kept its file. Any other outcome stays as it is.
pub fn with_proof(
    outcome: Outcome,
    proven: Option<Proven>,
    dest: DestCommand,
) -> (Outcome, Option<ProofLevel>) {
    let unique = dest == DestCommand::Unique;
    match (outcome, proven) {
        (
            Outcome::Succeeded {
                bytes,
                size,
                evidence,
                stored_as,
            },
            Some(proven),
        ) => match proven {
            Proven::Ok { level, words } => {
                let evidence = match words {
                    Some(words) => format!("{evidence}; {words}"),
                    None => evidence,
                };
                let proven = Outcome::Succeeded {
                    bytes,
                    size,
                    evidence,
                    stored_as,
                };
                (proven, Some(level))
            }
            Proven::Mismatch { failure, deleted } => {
                let failed = Outcome::Transient {
                    destination: Destination {
                        touched: true,
                        kept: (!deleted && unique).then(|| failure.clone()),
                    },
                    failure,
                    cause: Cause::Other,
                };
                (failed, None)
            }
            Proven::Short { failure } => {
                let failed = Outcome::Transient {
                    destination: Destination {
                        touched: true,
                        kept: unique.then(|| format!("{failure}: the stored file is kept")),
                    },
                    failure,
                    cause: Cause::Other,
                };
                (failed, None)
            }
        },
        (outcome, _) => (outcome, None),
    }
}

/// The ledger change of a copy's `outcome` once its proof is weighed.
fn settle(outcome: Outcome, dest: DestCommand, disposition: Disposition) -> Change {
    match outcome {
        Outcome::Succeeded {
            bytes,
            size,
            evidence,
            stored_as,
        } => {
            if let Some(StoredAs {
                name,
                also_given_to: Some(other),
            }) = &stored_as
            {
                return Change::ends(
                    MemberState::Uncertain,
                    format!(
                        "the server announced {name:?} for this copy, a name it also gave \
                         {other}; the server may have stored this copy under another name \
                         (Pure-FTPd stores NAME.1 when NAME exists) and says {evidence}: not \
                         claimed, not deleted, not repeated"
                    ),
                );
            }
            let stored_as = stored_as.map(|s| s.name);
            let detail = match &stored_as {
                Some(name) => format!("stored as {name:?}; {evidence}"),
                None => evidence,
            };
            let intent = if disposition == Disposition::Move {
                IntentChange::DeleteSource
            } else {
                IntentChange::Clear
            };
            Change {
                next: Next::Settled(MemberState::Succeeded),
                intent,
                detail,
                bytes,
                size,
                stored_as,
                proof: None,
            }
        }
        Outcome::Permanent {
            failure,
            destination,
        } => match (dest, destination.kept) {
            (DestCommand::Unique, Some(why)) => {
                Change::ends(MemberState::Uncertain, format!("{failure}; {why}"))
            }
            (DestCommand::Append, _) if destination.touched => {
                Change::ends(MemberState::Uncertain, failure)
            }
            _ => Change::ends(MemberState::FailedPermanent, failure),
        },
        Outcome::Transient {
            failure,
            destination,
            cause,
        } => match (dest, destination.kept) {
            (DestCommand::Unique, Some(why)) => {
                Change::ends(MemberState::Uncertain, format!("{failure}; {why}"))
            }
            (DestCommand::Append, _) if destination.touched => {
                Change::pending(false, IntentChange::Keep, failure)
            }
            _ => {
                let second_try = matches!(cause, Cause::DataConnection | Cause::UniqueNameTaken);
                Change::pending(second_try, IntentChange::Clear, failure)
            }
        },
        Outcome::RepeatedRefusal { state, detail } => Change::ends(state, detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const EVIDENCE: &str = "sizes equal (10 bytes)";
    const FAILURE: &str = "426 connection closed";
    const KEPT: &str = "\"STOU.2\" cannot be proven ours: not deleted";
    const REFUSAL: &str = "the same 451 again: failed for good";
    const WORDS: &str = "MD5 digests equal (0123)";
    const MISMATCH: &str = "MD5 digests differ (source 0123, destination 4567)";
    const SHORT: &str = "the copy has only a size proof; the job requires hash";

    /// The outcomes of the table, by name. The first group can end a copy of any command;
    /// the `whole_` ones only a copy written whole (a hash proof needs STOR or STOU); the
    /// `r_` ones only a replace copy (only its mismatched file is deleted); the `u_` ones
    /// only a unique copy (only STOU announces names and leaves files the executor may keep).
    /// The `proven`, `short` and `mismatch` ones are a success with the proof step's verdict.
    const ANY: [&str; 10] = [
        "ok",
        "perm",
        "perm_touched",
        "trans",
        "trans_touched",
        "dc",
        "dc_touched",
        "repeated",
        "proven_size",
        "short",
    ];
    const WHOLE_ONLY: [&str; 2] = ["whole_proven_hash", "whole_mismatch_kept"];
    const REPLACE_ONLY: [&str; 1] = ["r_mismatch_deleted"];
    const UNIQUE_ONLY: [&str; 7] = [
        "u_ok_named",
        "u_ok_name_clash",
        "u_perm_kept",
        "u_trans_kept",
        "u_dc_kept",
        "u_name_taken",
        "u_proven_named",
    ];

    /// The outcome names a copy stored with `dest` can meet.
    fn names(dest: DestCommand) -> Vec<&'static str> {
        let mut names = ANY.to_vec();
        if dest != DestCommand::Append {
            names.extend(WHOLE_ONLY);
        }
        match dest {
            DestCommand::Replace => names.extend(REPLACE_ONLY),
            DestCommand::Unique => names.extend(UNIQUE_ONLY),
            DestCommand::Append => {}
        }
        names
    }

    /// A copy's outcome and what the proof step made of it.
    fn outcome(name: &str) -> (Outcome, Option<Proven>) {
        let ok = |stored_as: Option<StoredAs>| Outcome::Succeeded {
            bytes: Some(10),
            size: Some(10),
            evidence: EVIDENCE.into(),
            stored_as,
        };
        let named = |also_given_to: Option<&str>| StoredAs {
            name: "STOU.1".into(),
            also_given_to: also_given_to.map(str::to_owned),
        };
        let proven = |level, words: Option<&str>| Proven::Ok {
            level,
            words: words.map(str::to_owned),
        };
        let mismatch = |deleted| Proven::Mismatch {
            failure: MISMATCH.into(),
            deleted,
        };
        match name {
            "proven_size" => (ok(None), Some(proven(ProofLevel::Size, None))),
            "short" => (
                ok(None),
                Some(Proven::Short {
                    failure: SHORT.into(),
                }),
            ),
            "whole_proven_hash" => (ok(None), Some(proven(ProofLevel::Hash, Some(WORDS)))),
            "whole_mismatch_kept" => (ok(None), Some(mismatch(false))),
            "r_mismatch_deleted" => (ok(None), Some(mismatch(true))),
            "u_proven_named" => (
                ok(Some(named(None))),
                Some(proven(ProofLevel::Hash, Some(WORDS))),
            ),
            name => (unproven(name), None),
        }
    }

    /// A copy's outcome, the proof step not asked.
    fn unproven(name: &str) -> Outcome {
        let dest = |touched: bool, kept: bool| Destination {
            touched,
            kept: kept.then(|| KEPT.to_owned()),
        };
        let ok = |stored_as: Option<StoredAs>| Outcome::Succeeded {
            bytes: Some(10),
            size: Some(10),
            evidence: EVIDENCE.into(),
            stored_as,
        };
        let perm = |destination| Outcome::Permanent {
            failure: FAILURE.into(),
            destination,
        };
        let trans = |destination, cause| Outcome::Transient {
            failure: FAILURE.into(),
            destination,
            cause,
        };
        let named = |also_given_to: Option<&str>| StoredAs {
            name: "STOU.1".into(),
            also_given_to: also_given_to.map(str::to_owned),
        };
        match name {
            "ok" => ok(None),
            "perm" => perm(dest(false, false)),
            "perm_touched" => perm(dest(true, false)),
            "trans" => trans(dest(false, false), Cause::Other),
            "trans_touched" => trans(dest(true, false), Cause::Other),
            "dc" => trans(dest(false, false), Cause::DataConnection),
            "dc_touched" => trans(dest(true, false), Cause::DataConnection),
            "repeated" => Outcome::RepeatedRefusal {
                state: MemberState::FailedPermanent,
                detail: REFUSAL.into(),
            },
            "u_ok_named" => ok(Some(named(None))),
            "u_ok_name_clash" => ok(Some(named(Some("\"b.dat\" of this job")))),
            "u_perm_kept" => perm(dest(true, true)),
            "u_trans_kept" => trans(dest(true, true), Cause::Other),
            "u_dc_kept" => trans(dest(true, true), Cause::DataConnection),
            "u_name_taken" => trans(dest(false, false), Cause::UniqueNameTaken),
            other => panic!("no outcome {other:?} in the table"),
        }
    }

    /// The expected new state: succeeded, failed permanently, uncertain, pending, pending
    /// with a second try in the attempt.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum N {
        Ok,
        Fail,
        Unc,
        Pend,
        Again,
    }

    /// The expected intent: cleared, kept, the DELE of the source.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum I {
        Clear,
        Keep,
        Dele,
    }

    /// The expected detail, and with it what a success records.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum T {
        /// The evidence; bytes and size recorded.
        Evidence,
        /// "stored as" the name, then the evidence; bytes, size and the name recorded.
        Stored,
        /// The name belongs to another member: why it is not claimed.
        Clash,
        /// The failure.
        Failure,
        /// The failure, then why a file was kept.
        FailureKept,
        /// The capability memory's explanation.
        Refusal,
        /// Proven by size: the evidence; bytes and size recorded, and the proof `size`.
        SizeProven,
        /// Proven by hash: the evidence, then the proof's words; bytes and size recorded, and
        /// the proof `hash`.
        HashProven,
        /// "stored as" the name, the evidence, the proof's words; bytes, size, the name and
        /// the proof `hash` recorded.
        StoredHashProven,
        /// The digests differ.
        Mismatch,
        /// The digests differ, and the file is kept for it.
        MismatchKept,
        /// The proof is short of what the job needs.
        Short,
        /// The proof is short, and the stored file is kept.
        ShortKept,
    }

    fn short(c: &Change) -> (N, I) {
        let n = match c.next {
            Next::Settled(MemberState::Succeeded) => N::Ok,
            Next::Settled(MemberState::FailedPermanent) => N::Fail,
            Next::Settled(MemberState::Uncertain) => N::Unc,
            Next::Settled(other) => panic!("unexpected state {other:?}"),
            Next::Pending { second_try: false } => N::Pend,
            Next::Pending { second_try: true } => N::Again,
        };
        let i = match c.intent {
            IntentChange::Clear => I::Clear,
            IntentChange::Keep => I::Keep,
            IntentChange::DeleteSource => I::Dele,
        };
        (n, i)
    }

    fn check_text(t: T, c: &Change) -> bool {
        let copied = (c.bytes, c.size);
        let success = |detail: String, stored_as: Option<&str>, proof: Option<ProofLevel>| {
            c.detail == detail
                && copied == (Some(10), Some(10))
                && c.stored_as.as_deref() == stored_as
                && c.proof == proof
        };
        let failure = |detail: String| {
            c.detail == detail
                && copied == (None, None)
                && c.stored_as.is_none()
                && c.proof.is_none()
        };
        let stored = format!("stored as \"STOU.1\"; {EVIDENCE}");
        match t {
            T::Evidence => success(EVIDENCE.into(), None, None),
            T::Stored => success(stored, Some("STOU.1"), None),
            T::SizeProven => success(EVIDENCE.into(), None, Some(ProofLevel::Size)),
            T::HashProven => success(format!("{EVIDENCE}; {WORDS}"), None, Some(ProofLevel::Hash)),
            T::StoredHashProven => success(
                format!("{stored}; {WORDS}"),
                Some("STOU.1"),
                Some(ProofLevel::Hash),
            ),
            T::Clash => {
                c.detail.starts_with(
                    "the server announced \"STOU.1\" for this copy, a name it also gave \"b.dat\" \
                     of this job;",
                ) && c.detail.contains(EVIDENCE)
                    && c.detail.ends_with("not claimed, not deleted, not repeated")
                    && copied == (None, None)
                    && c.stored_as.is_none()
                    && c.proof.is_none()
            }
            T::Failure => failure(FAILURE.into()),
            T::FailureKept => failure(format!("{FAILURE}; {KEPT}")),
            T::Refusal => failure(REFUSAL.into()),
            T::Mismatch => failure(MISMATCH.into()),
            T::MismatchKept => failure(format!("{MISMATCH}; {MISMATCH}")),
            T::Short => failure(SHORT.into()),
            T::ShortKept => failure(format!("{SHORT}; {SHORT}: the stored file is kept")),
        }
    }

    #[test]
    fn every_outcome_of_every_command_and_disposition() {
        use DestCommand::{Append as A, Replace as R, Unique as U};
        use Disposition::{Copy as C, Move as M};
        use N::*;
        #[rustfmt::skip]
        let rows: Vec<(DestCommand, Disposition, &str, N, I, T)> = vec![
            // replace: nothing to resolve after any failure; a broken data connection is
            // tried again at once.
            (R, C, "ok", Ok, I::Clear, T::Evidence),
            (R, M, "ok", Ok, I::Dele, T::Evidence),
            (R, C, "perm", Fail, I::Clear, T::Failure),
            (R, M, "perm", Fail, I::Clear, T::Failure),
            (R, C, "perm_touched", Fail, I::Clear, T::Failure),
            (R, M, "perm_touched", Fail, I::Clear, T::Failure),
            (R, C, "trans", Pend, I::Clear, T::Failure),
            (R, M, "trans", Pend, I::Clear, T::Failure),
            (R, C, "trans_touched", Pend, I::Clear, T::Failure),
            (R, M, "trans_touched", Pend, I::Clear, T::Failure),
            (R, C, "dc", Again, I::Clear, T::Failure),
            (R, M, "dc", Again, I::Clear, T::Failure),
            (R, C, "dc_touched", Again, I::Clear, T::Failure),
            (R, M, "dc_touched", Again, I::Clear, T::Failure),
            (R, C, "repeated", Fail, I::Clear, T::Refusal),
            (R, M, "repeated", Fail, I::Clear, T::Refusal),
            // replace, the proof step: a proven copy records its proof; a mismatch or a
            // short proof is a transient failure, the file deleted or not.
            (R, C, "proven_size", Ok, I::Clear, T::SizeProven),
            (R, M, "proven_size", Ok, I::Dele, T::SizeProven),
            (R, C, "whole_proven_hash", Ok, I::Clear, T::HashProven),
            (R, M, "whole_proven_hash", Ok, I::Dele, T::HashProven),
            (R, C, "short", Pend, I::Clear, T::Short),
            (R, M, "short", Pend, I::Clear, T::Short),
            (R, C, "whole_mismatch_kept", Pend, I::Clear, T::Mismatch),
            (R, M, "whole_mismatch_kept", Pend, I::Clear, T::Mismatch),
            (R, C, "r_mismatch_deleted", Pend, I::Clear, T::Mismatch),
            (R, M, "r_mismatch_deleted", Pend, I::Clear, T::Mismatch),
            // append: once the destination was touched, the append may have happened.
            (A, C, "ok", Ok, I::Clear, T::Evidence),
            (A, M, "ok", Ok, I::Dele, T::Evidence),
            (A, C, "perm", Fail, I::Clear, T::Failure),
            (A, M, "perm", Fail, I::Clear, T::Failure),
            (A, C, "perm_touched", Unc, I::Clear, T::Failure),
            (A, M, "perm_touched", Unc, I::Clear, T::Failure),
            (A, C, "trans", Pend, I::Clear, T::Failure),
            (A, M, "trans", Pend, I::Clear, T::Failure),
            (A, C, "trans_touched", Pend, I::Keep, T::Failure),
            (A, M, "trans_touched", Pend, I::Keep, T::Failure),
            (A, C, "dc", Again, I::Clear, T::Failure),
            (A, M, "dc", Again, I::Clear, T::Failure),
            (A, C, "dc_touched", Pend, I::Keep, T::Failure),
            (A, M, "dc_touched", Pend, I::Keep, T::Failure),
            (A, C, "repeated", Fail, I::Clear, T::Refusal),
            (A, M, "repeated", Fail, I::Clear, T::Refusal),
            // append, the proof step: an append short of its proof touched the destination,
            // so the next attempt resolves it.
            (A, C, "proven_size", Ok, I::Clear, T::SizeProven),
            (A, M, "proven_size", Ok, I::Dele, T::SizeProven),
            (A, C, "short", Pend, I::Keep, T::Short),
            (A, M, "short", Pend, I::Keep, T::Short),
            // unique: the files a failed STOU left are settled by the executor before;
            // only one it kept makes the member uncertain.
            (U, C, "ok", Ok, I::Clear, T::Evidence),
            (U, M, "ok", Ok, I::Dele, T::Evidence),
            (U, C, "u_ok_named", Ok, I::Clear, T::Stored),
            (U, M, "u_ok_named", Ok, I::Dele, T::Stored),
            (U, C, "u_ok_name_clash", Unc, I::Clear, T::Clash),
            (U, M, "u_ok_name_clash", Unc, I::Clear, T::Clash),
            (U, C, "perm", Fail, I::Clear, T::Failure),
            (U, M, "perm", Fail, I::Clear, T::Failure),
            (U, C, "perm_touched", Fail, I::Clear, T::Failure),
            (U, M, "perm_touched", Fail, I::Clear, T::Failure),
            (U, C, "u_perm_kept", Unc, I::Clear, T::FailureKept),
            (U, M, "u_perm_kept", Unc, I::Clear, T::FailureKept),
            (U, C, "trans", Pend, I::Clear, T::Failure),
            (U, M, "trans", Pend, I::Clear, T::Failure),
            (U, C, "trans_touched", Pend, I::Clear, T::Failure),
            (U, M, "trans_touched", Pend, I::Clear, T::Failure),
            (U, C, "u_trans_kept", Unc, I::Clear, T::FailureKept),
            (U, M, "u_trans_kept", Unc, I::Clear, T::FailureKept),
            (U, C, "dc", Again, I::Clear, T::Failure),
            (U, M, "dc", Again, I::Clear, T::Failure),
            (U, C, "dc_touched", Again, I::Clear, T::Failure),
            (U, M, "dc_touched", Again, I::Clear, T::Failure),
            (U, C, "u_dc_kept", Unc, I::Clear, T::FailureKept),
            (U, M, "u_dc_kept", Unc, I::Clear, T::FailureKept),
            (U, C, "u_name_taken", Again, I::Clear, T::Failure),
            (U, M, "u_name_taken", Again, I::Clear, T::Failure),
            (U, C, "repeated", Fail, I::Clear, T::Refusal),
            (U, M, "repeated", Fail, I::Clear, T::Refusal),
            // unique, the proof step: its file stays whatever the proof says, so a mismatch
            // or a short proof leaves the member uncertain.
            (U, C, "proven_size", Ok, I::Clear, T::SizeProven),
            (U, M, "proven_size", Ok, I::Dele, T::SizeProven),
            (U, C, "whole_proven_hash", Ok, I::Clear, T::HashProven),
            (U, M, "whole_proven_hash", Ok, I::Dele, T::HashProven),
            (U, C, "u_proven_named", Ok, I::Clear, T::StoredHashProven),
            (U, M, "u_proven_named", Ok, I::Dele, T::StoredHashProven),
            (U, C, "short", Unc, I::Clear, T::ShortKept),
            (U, M, "short", Unc, I::Clear, T::ShortKept),
            (U, C, "whole_mismatch_kept", Unc, I::Clear, T::MismatchKept),
            (U, M, "whole_mismatch_kept", Unc, I::Clear, T::MismatchKept),
        ];
        // Every outcome a command can meet, with either disposition, has its row, once.
        let mut want = BTreeSet::new();
        for dest in [R, A, U] {
            for name in names(dest) {
                for disposition in [C, M] {
                    want.insert((format!("{dest:?}"), format!("{disposition:?}"), name));
                }
            }
        }
        let have: Vec<_> = rows
            .iter()
            .map(|(d, s, name, ..)| (format!("{d:?}"), format!("{s:?}"), *name))
            .collect();
        let have_set: BTreeSet<_> = have.iter().cloned().collect();
        assert_eq!(have.len(), have_set.len(), "a row is in the table twice");
        let missing: Vec<_> = want.difference(&have_set).collect();
        let extra: Vec<_> = have_set.difference(&want).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "rows missing: {missing:?}; rows that cannot happen: {extra:?}"
        );

        for (dest, disposition, name, n, i, t) in rows {
            let (outcome, proven) = outcome(name);
            let change = record(outcome, proven, dest, disposition);
            let row = format!("{dest:?} {disposition:?} {name}");
            assert_eq!(short(&change), (n, i), "{row}: {change:?}");
            assert!(check_text(t, &change), "{row}: detail {:?}", change.detail);
        }
    }

    #[test]
    fn a_delete_job_is_recorded_as_a_copy() {
        let change = record(
            unproven("ok"),
            None,
            DestCommand::Replace,
            Disposition::Delete,
        );
        assert_eq!(change.intent, IntentChange::Clear);
    }

    #[test]
    fn a_settled_refusal_keeps_the_state_the_memory_gave() {
        let change = record(
            Outcome::RepeatedRefusal {
                state: MemberState::Uncertain,
                detail: REFUSAL.into(),
            },
            None,
            DestCommand::Append,
            Disposition::Move,
        );
        assert_eq!(change.next, Next::Settled(MemberState::Uncertain));
        assert_eq!(change.intent, IntentChange::Clear);
    }

    #[test]
    fn the_proof_of_a_copy_that_did_not_succeed_is_not_asked() {
        let verdicts = [
            Proven::Ok {
                level: ProofLevel::Hash,
                words: Some(WORDS.into()),
            },
            Proven::Mismatch {
                failure: MISMATCH.into(),
                deleted: true,
            },
            Proven::Short {
                failure: SHORT.into(),
            },
        ];
        for name in ["perm_touched", "trans", "dc", "repeated"] {
            for proven in verdicts.clone() {
                for dest in [DestCommand::Replace, DestCommand::Unique] {
                    let unasked = record(unproven(name), None, dest, Disposition::Move);
                    let change = record(
                        unproven(name),
                        Some(proven.clone()),
                        dest,
                        Disposition::Move,
                    );
                    assert_eq!(change, unasked, "{name} {dest:?} {proven:?}");
                }
            }
        }
    }
}
