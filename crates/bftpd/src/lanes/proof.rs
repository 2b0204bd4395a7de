//! The proof of each copy, after the copy (a step of its own, not part of the copy's command
//! sequence): the strongest the pair can give (`bftp_core::proof::plan` from both servers'
//! FEAT), recorded in the member. Shared by the attempt and by `bftp transfer`.
//!
//! The rules:
//! - A hash proof: both servers' digests of the file, equal. Unequal digests: the destination
//!   file is not the source's. A replace copy's file is then ours and wrong: it is deleted,
//!   and the copy fails as a transient failure (copied again at the next try). A unique copy's
//!   file is never deleted on such evidence (its name may be another's): it is kept, and the
//!   member is `uncertain`.
//! - A hash command that fails leaves the copy with what SIZE gave (`size`, or `replies`).
//! - A copy whose proof is weaker than what the job requires (`--proof`), or a `move`'s copy
//!   weaker than the strongest the pair allows, fails as transient: a source is deleted only
//!   after the strongest proof available.
//! - A job requiring a proof the pair cannot give at all fails before any file moves.

/// What the proof step made of a copy (the verdict `bftp_core::ledger::record` weighs).
pub use bftp_core::proof::Proven;
use bftp_core::proof::{self, Plan, ProofLevel};
use bftp_core::{DestCommand, Disposition, JobSpec};
use bftp_ftp::{HashProof, Pair, Side, SizeCheck};

/// The proof this job needs of each copy: what it requires, and for a `move` the strongest
/// the pair can give.
fn needed(spec: &JobSpec, plan: &Plan) -> ProofLevel {
    let required = spec.proof.unwrap_or_default();
    if spec.disposition == Disposition::Move {
        required.max(plan.level)
    } else {
        required
    }
}

/// Learns what the pair can prove before its first copy, so that the copies after it know
/// whether commands go out between them (a digest) or the next copy may start ahead; a
/// no-op once known, and for a job without a destination.
pub async fn learn(pair: &mut Pair, spec: &JobSpec) {
    if spec.destination.is_some() && spec.disposition != Disposition::Delete && !pair.proof_known()
    {
        pair.proof_plan(spec.params.transfer_type, spec.dest_command)
            .await;
    }
}

/// The job's required proof against what the pair can give: `Err(reason)` when it cannot;
/// `Ok(true)` when only a relay with its stream hashed can (`may_relay`: the job's data path
/// allows relays).
pub async fn check_required(
    pair: &mut Pair,
    spec: &JobSpec,
    may_relay: bool,
) -> Result<bool, String> {
    let plan = pair
        .proof_plan(spec.params.transfer_type, spec.dest_command)
        .await;
    let image = spec.params.transfer_type == bftp_core::TransferType::Image;
    proof::require_or_relay(spec.proof, &plan, may_relay, image)
}

/// What a copy's report says of its relayed stream, for the proof: nothing for a resumed
/// copy, whose stream is only the file's tail.
pub fn stream_of(report: &bftp_ftp::AttemptReport) -> Option<proof::Stream> {
    if report.resumed_from.is_some() {
        return None;
    }
    report.relayed.as_ref().map(|r| proof::Stream {
        bytes: r.bytes,
        sha256: r.sha256.clone(),
    })
}

/// The proof of a copy of `source_path` to `dest_path` (for a unique copy, the name it was
/// stored as; `None` where no name is known) that both servers reported done, with the copy's
/// `size_check`, the file's `size` and, for a relayed copy, what bftpd saw of the stream
/// (`bftp_core::proof::with_stream`).
pub async fn after_copy(
    pair: &mut Pair,
    spec: &JobSpec,
    copy: (&str, Option<&str>),
    size_check: &SizeCheck,
    size: Option<u64>,
    stream: Option<&proof::Stream>,
) -> Proven {
    let (source_path, dest_path) = copy;
    let plan = pair
        .proof_plan(spec.params.transfer_type, spec.dest_command)
        .await;
    let by_size = if matches!(size_check, SizeCheck::Equal { .. }) {
        ProofLevel::Size
    } else {
        ProofLevel::Replies
    };
    let (achieved, note) = match (&plan.hash, dest_path) {
        (Some(h), Some(dest)) => match pair.prove_hash(h, source_path, dest, size).await {
            HashProof::Equal { algorithm, digest } => (
                ProofLevel::Hash,
                Some(format!("{algorithm} digests equal ({digest})")),
            ),
            HashProof::Mismatch {
                algorithm,
                source,
                destination,
            } => {
                let differ = format!(
                    "{algorithm} digests differ (source {source}, destination {destination})"
                );
                if spec.dest_command != DestCommand::Replace {
                    return Proven::Mismatch {
                        failure: format!(
                            "{differ}: the destination file may be another's and is kept"
                        ),
                        deleted: false,
                    };
                }
                let (failure, deleted) = match pair.delete(Side::Destination, dest).await {
                    Ok(_) => (format!("{differ}: the destination file was deleted"), true),
                    Err(e) => (
                        format!("{differ}: deleting the destination file failed: {e}"),
                        false,
                    ),
                };
                return Proven::Mismatch { failure, deleted };
            }
            HashProof::Failed { side, reason, .. } => (
                by_size,
                Some(format!("no hash proof, the {side}: {reason}")),
            ),
        },
        (Some(_), None) => (
            by_size,
            Some("no hash proof: the stored name is not known".to_owned()),
        ),
        (None, _) => (by_size, None),
    };
    let (achieved, note) = proof::with_stream(
        (achieved, note),
        stream,
        matches!(size_check, SizeCheck::Equal { .. }),
        spec.params.transfer_type == bftp_core::TransferType::Image,
    );
    let need = needed(spec, &plan);
    if achieved < need {
        let why = if spec.proof.is_some_and(|p| p >= need) {
            "the job requires".to_owned()
        } else {
            "a move deletes its source only after the strongest proof this pair allows, which is"
                .to_owned()
        };
        let mut failure = format!("the copy has only a {achieved} proof; {why} {need}");
        if let Some(note) = note {
            failure.push_str(&format!(" ({note})"));
        }
        return Proven::Short { failure };
    }
    Proven::Ok {
        level: achieved,
        words: note,
    }
}
