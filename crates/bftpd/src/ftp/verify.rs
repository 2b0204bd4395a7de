//! `bftp verify`: the engine's checks, from the daemon's vantage point (RULES.md §7).

use std::sync::Arc;

use bftp_api::{CheckView, VerifyResponse};
use bftp_core::JobSpec;
use bftp_ftp::{AddressCheck, Limits, ServerLogin, VerifyRequest};

use super::transcript_lines;

pub(super) fn logins(spec: &JobSpec) -> Option<(ServerLogin, ServerLogin)> {
    let dst = spec.destination.as_ref()?;
    Some((
        ServerLogin::from_endpoint(&spec.source),
        ServerLogin::from_endpoint(dst),
    ))
}

/// `bftp verify`: the engine's checks, from the daemon's vantage point.
pub async fn verify(
    spec: &JobSpec,
    limits: &Limits,
    check: Arc<dyn AddressCheck>,
) -> VerifyResponse {
    let Some((src, dst)) = logins(spec) else {
        return VerifyResponse {
            ok: false,
            checks: vec![CheckView {
                name: "destination".into(),
                ok: false,
                detail: "a job without a destination has nothing to verify on a destination".into(),
            }],
            transcript: vec![],
        };
    };
    let request = VerifyRequest {
        source_path: spec.source.path.clone(),
        destination_path: spec
            .destination
            .as_ref()
            .map(|d| d.path.clone())
            .unwrap_or_default(),
        dest_command: spec.dest_command,
        proof: spec.proof,
        recursive: spec.recursive,
    };
    let report = bftp_ftp::verify(&src, &dst, spec.params, limits, check, &request).await;
    VerifyResponse {
        ok: report.ok(),
        checks: report
            .checks
            .iter()
            .map(|c| CheckView {
                name: c.name.clone(),
                ok: c.ok,
                detail: c.detail.clone(),
            })
            .collect(),
        transcript: transcript_lines(&report.transcript),
    }
}
