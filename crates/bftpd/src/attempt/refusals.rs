//! The capability memory in use: a transient refusal that comes back unchanged from the
//! same server for the same command ends the member for good, instead of being retried
//! until the job's attempts run out (proFTPD's stock `AllowStoreRestart off` answers every
//! APPE with a 451 "try again", which would take days of retries to give up on).
//!
//! The rules are pure, in `bftp_core::refusal`; the memory lives in the store (one entry
//! per host, port and command, across jobs and restarts). Here: after a transient copy
//! outcome, record the refusal, and decide what the member becomes.

use super::{MemberCtx, Run};
use bftp_core::refusal::{self, NameFailure, RefusalKey, Sighting};
use bftp_core::reply::TransientKind;
use bftp_core::{DestCommand, Endpoint, JobSpec, MemberState};
use bftp_ftp::{AttemptReport, CopyRequest, Failure, Pair, Side};
use bftp_store::StoreError;

/// How a member ends because its refusal repeated.
pub(crate) struct Settled {
    pub state: MemberState,
    pub detail: String,
}

impl Run {
    /// After a transient copy outcome of `kind` for `failure`: records a refusal of a command
    /// in the server's memory and, when it came back unchanged on another attempt
    /// (`bftp_core::refusal::settles`), the member's permanent end. `None`: it stays a
    /// transient failure, retried as before.
    ///
    /// The member ends `failed_permanent` only where nothing was left on the destination: the
    /// destination was not touched, or the copy replaces files (the engine removed what it
    /// left), or an append whose destination SIZE is still the size before. Anything else
    /// (a STOU that may have created a file, an append that cannot be checked) stays with the
    /// transient path, which knows how to resolve it.
    pub(super) async fn settle_repeated(
        &self,
        pair: &mut Pair,
        mc: &MemberCtx<'_>,
        kind: TransientKind,
        failure: &Failure,
        report: &AttemptReport,
    ) -> Result<Option<Settled>, StoreError> {
        let (store, spec, req) = (&self.ctx.store, mc.spec, &mc.req);
        let (job, attempt, now) = (self.id, mc.attempt, self.ctx.clock.now());
        let Failure::Reply {
            side,
            host,
            command,
            reply,
        } = failure
        else {
            return Ok(None);
        };
        if !refusal::repeatable(kind) {
            return Ok(None);
        }
        let endpoint = endpoint(spec, *side);
        let key = RefusalKey::new(&endpoint.host, endpoint.port, command);
        let seen = Sighting {
            code: reply.code(),
            text: comparable(req, &reply.text()),
            job: job.0,
            attempt,
        };
        let memory = store
            .call(move |s| s.record_refusal(&key, &seen, now))
            .await?;
        if !refusal::settles(kind, &memory) {
            tracing::info!(
                job = job.0,
                attempt,
                host = %host,
                command = %command,
                code = reply.code().get(),
                count = memory.count,
                "a transient refusal, remembered for this server"
            );
            return Ok(None);
        }
        let explanation = refusal::explain(&format!("the {side} server {host}"), command, &memory);
        let unchanged = if !report.destination_touched || spec.dest_command == DestCommand::Replace
        {
            Some(String::new())
        } else if spec.dest_command == DestCommand::Append {
            match (
                report.destination_size_before,
                pair.size(Side::Destination, &req.dest_path).await,
            ) {
                (Some(before), Ok(now)) if now.unwrap_or(0) == before => Some(format!(
                    "; the destination file is unchanged ({before} bytes)"
                )),
                _ => None,
            }
        } else {
            None
        };
        let Some(unchanged) = unchanged else {
            return Ok(None);
        };
        tracing::warn!(job = job.0, attempt, host = %host, command = %command, "{explanation}");
        Ok(Some(Settled {
            state: MemberState::FailedPermanent,
            detail: format!("{explanation}{unchanged}"),
        }))
    }

    /// RULES.md §5, names: after a transient copy outcome that concerns the destination's name
    /// (it confirmed the upload and has no file under the name; or a repeatable 4yz to the data
    /// command), records it in the memory of that name at that server and, when the same failure
    /// came back unchanged from another attempt (`bftp_core::refusal::name_settles`), ends the
    /// member for good. `None`: it stays a transient failure.
    pub(super) async fn settle_name(
        &self,
        mc: &MemberCtx<'_>,
        kind: TransientKind,
        failure: &Failure,
    ) -> Result<Option<Settled>, StoreError> {
        let (store, spec, req) = (&self.ctx.store, mc.spec, &mc.req);
        let (job, attempt, now) = (self.id, mc.attempt, self.ctx.clock.now());
        let (name_failure, host, verb, reply) = match failure {
            Failure::NotStoredAsNamed { host, reply, .. } => {
                (NameFailure::NotStoredAsNamed, host, data_verb(spec), reply)
            }
            Failure::Reply {
                side: Side::Destination,
                host,
                command,
                reply,
                // A replace copy's partial file is removed by the engine; an append's refusal is
                // left to `settle_repeated`, which looks at what it left.
            } if spec.dest_command == DestCommand::Replace
                && command.eq_ignore_ascii_case(data_verb(spec)) =>
            {
                (NameFailure::Refused(kind), host, data_verb(spec), reply)
            }
            _ => return Ok(None),
        };
        if spec.dest_command == DestCommand::Unique {
            // The name is the server's choice: nothing of the file's own.
            return Ok(None);
        }
        let endpoint = endpoint(spec, Side::Destination);
        let key = refusal::name_key(&endpoint.host, endpoint.port, verb, &req.dest_path);
        let seen = Sighting {
            code: reply.code(),
            text: comparable(req, &reply.text()),
            job: job.0,
            attempt,
        };
        let memory = store
            .call(move |s| s.record_refusal(&key, &seen, now))
            .await?;
        if !refusal::name_settles(name_failure, &memory) {
            return Ok(None);
        }
        let explanation = refusal::explain_name(
            &format!("the destination server {host}"),
            &req.dest_path,
            name_failure,
            &memory,
        );
        tracing::warn!(job = job.0, attempt, host = %host, "{explanation}");
        Ok(Some(Settled {
            state: MemberState::FailedPermanent,
            detail: explanation,
        }))
    }
}

/// The destination's data command of a job that is not `unique`.
fn data_verb(spec: &JobSpec) -> &'static str {
    match spec.dest_command {
        DestCommand::Append => "APPE",
        _ => "STOR",
    }
}

/// The endpoint a side stands for (a `delete` job's destination is its source).
fn endpoint(spec: &JobSpec, side: Side) -> &Endpoint {
    match side {
        Side::Destination => spec.destination.as_ref().unwrap_or(&spec.source),
        Side::Source => &spec.source,
    }
}

/// The reply text as it is compared and stored, the paths of this copy generalised. The
/// job's secrets are already masked: the engine scrubs every reply where it enters.
fn comparable(req: &CopyRequest, text: &str) -> String {
    let name = |p: &str| p.rsplit('/').next().unwrap_or(p).to_owned();
    let (src_name, dst_name) = (name(&req.source_path), name(&req.dest_path));
    refusal::comparable_text(
        text,
        &[&req.source_path, &req.dest_path, &src_name, &dst_name],
    )
}
