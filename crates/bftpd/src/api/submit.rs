//! Turning an API [`SubmitRequest`] into a validated core [`JobSpec`] (RULES.md §2).

use std::time::Duration;

use bftp_api::{EndpointSpec, SubmitRequest};
use bftp_core::time::parse_start_time;
use bftp_core::{
    DestCommand, Disposition, Endpoint, FileStructure, FtpParams, JobSpec, RetryBounds,
    RetryPolicy, Secret, Timestamp, TransferMode, TransferType, ValidationError, ValidationErrors,
    ANONYMOUS, DEFAULT_FTP_PORT,
};

fn endpoint(spec: &EndpointSpec) -> Endpoint {
    Endpoint {
        host: spec.host.clone(),
        port: spec.port.unwrap_or(DEFAULT_FTP_PORT),
        user: spec.user.clone().unwrap_or_else(|| ANONYMOUS.to_string()),
        password: spec.password.clone().map(Secret::new),
        acct: spec.acct.clone().map(Secret::new),
        path: spec.path.clone(),
        tls: Default::default(),
    }
}

fn parse_or<T: std::str::FromStr<Err = ValidationError> + Default>(
    v: &Option<String>,
    errs: &mut Vec<ValidationError>,
) -> T {
    match v {
        None => T::default(),
        Some(s) => s.parse().unwrap_or_else(|e| {
            errs.push(e);
            T::default()
        }),
    }
}

fn duration(
    field: &str,
    v: &Option<String>,
    default: Duration,
    errs: &mut Vec<ValidationError>,
) -> Duration {
    match v {
        None => default,
        Some(s) => humantime::parse_duration(s).unwrap_or_else(|e| {
            errs.push(ValidationError::Invalid {
                field: field.into(),
                reason: format!("{s:?} is not a duration ({e})"),
            });
            default
        }),
    }
}

/// Builds and validates the job a request asks for. The retry policy starts from the
/// daemon's defaults, takes the user's values, and is clamped into the daemon's bounds.
pub fn build_spec(
    req: &SubmitRequest,
    defaults: RetryPolicy,
    bounds: &RetryBounds,
    now: Timestamp,
) -> Result<JobSpec, ValidationErrors> {
    let mut errs = Vec::new();
    let disposition: Disposition = parse_or(&req.disposition, &mut errs);
    let dest_command: DestCommand = parse_or(&req.dest_command, &mut errs);
    let params = FtpParams {
        transfer_type: parse_or::<TransferType>(&req.transfer_type, &mut errs),
        mode: parse_or::<TransferMode>(&req.mode, &mut errs),
        structure: parse_or::<FileStructure>(&req.structure, &mut errs),
    };
    let start_at = match &req.start {
        None => now,
        Some(s) => parse_start_time(s, now).unwrap_or_else(|e| {
            errs.push(e.into());
            now
        }),
    };
    let r = &req.retry;
    if let Some(f) = r.factor {
        if !f.is_finite() || f < 1.0 {
            errs.push(ValidationError::Invalid {
                field: "retry factor".into(),
                reason: format!("{f} must be a number >= 1"),
            });
        }
    }
    if r.max_attempts == Some(0) {
        errs.push(ValidationError::Invalid {
            field: "max attempts".into(),
            reason: "must be at least 1".into(),
        });
    }
    let retry = RetryPolicy {
        first_interval: duration(
            "retry first interval",
            &r.first_interval,
            defaults.first_interval,
            &mut errs,
        ),
        factor: r.factor.unwrap_or(defaults.factor),
        cap: duration("retry cap", &r.cap, defaults.cap, &mut errs),
        max_attempts: r.max_attempts.unwrap_or(defaults.max_attempts),
        deadline: duration("retry deadline", &r.deadline, defaults.deadline, &mut errs),
    }
    .clamp(bounds);
    let spec = JobSpec {
        source: endpoint(&req.source),
        destination: req.destination.as_ref().map(endpoint),
        disposition,
        dest_command,
        params,
        start_at,
        retry,
        notify: req.notify.clone(),
        keyword: req.keyword.clone(),
        proof: req.proof.as_ref().and_then(|p| {
            p.parse::<bftp_core::proof::ProofLevel>()
                .map_err(|e| errs.push(e))
                .ok()
        }),
        recursive: req.recursive,
        data_path: req.data_path.as_ref().and_then(|p| {
            p.parse::<bftp_core::route::DataPath>()
                .map_err(|_| {
                    errs.push(ValidationError::UnknownValue {
                        what: "data path",
                        value: p.clone(),
                        expected: "auto fxp relay",
                    })
                })
                .ok()
        }),
    };
    if let Err(ValidationErrors(more)) = spec.validate() {
        errs.extend(more);
    }
    if errs.is_empty() {
        Ok(spec)
    } else {
        Err(ValidationErrors(errs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_api::RetrySpec;

    fn req() -> SubmitRequest {
        SubmitRequest {
            source: EndpointSpec {
                host: "src.example".into(),
                path: "pub/f".into(),
                ..Default::default()
            },
            destination: Some(EndpointSpec {
                host: "dst.example".into(),
                port: Some(2121),
                user: Some("bob".into()),
                password: Some("pw".into()),
                path: "in/".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const NOW: Timestamp = Timestamp(1_796_040_000_000);

    #[test]
    fn defaults_fill_in() {
        let s = build_spec(&req(), RetryPolicy::default(), &RetryBounds::default(), NOW).unwrap();
        assert_eq!(s.source.user, "anonymous");
        assert_eq!(s.source.port, 21);
        assert_eq!(s.destination.as_ref().unwrap().port, 2121);
        assert_eq!(s.disposition, Disposition::Copy);
        assert_eq!(s.params, FtpParams::default());
        assert_eq!(s.start_at, NOW);
        assert_eq!(s.retry, RetryPolicy::default());
    }

    #[test]
    fn user_retry_values_are_clamped() {
        let mut r = req();
        r.retry = RetrySpec {
            first_interval: Some("1s".into()),
            max_attempts: Some(100_000),
            ..Default::default()
        };
        let b = RetryBounds::default();
        let s = build_spec(&r, RetryPolicy::default(), &b, NOW).unwrap();
        assert_eq!(s.retry.first_interval, b.min_first_interval);
        assert_eq!(s.retry.max_attempts, b.max_attempts);
    }

    #[test]
    fn the_data_path_is_kept_as_asked() {
        use bftp_core::route::DataPath;
        let b = RetryBounds::default();
        let s = build_spec(&req(), RetryPolicy::default(), &b, NOW).unwrap();
        assert_eq!(s.data_path, None, "not asked: the daemon's default, later");
        let mut r = req();
        r.data_path = Some("Relay".into());
        let s = build_spec(&r, RetryPolicy::default(), &b, NOW).unwrap();
        assert_eq!(s.data_path, Some(DataPath::Relay));
        r.data_path = Some("sideways".into());
        let e = build_spec(&r, RetryPolicy::default(), &b, NOW)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown data path \"sideways\""), "{e}");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut r = req();
        r.transfer_type = Some("X".into());
        r.mode = Some("Q".into());
        r.start = Some("yesterday-ish".into());
        r.retry.cap = Some("forever".into());
        r.source.path = "a\r\nDELE b".into();
        let e = build_spec(&r, RetryPolicy::default(), &RetryBounds::default(), NOW)
            .unwrap_err()
            .to_string();
        for needle in ["TYPE", "MODE", "start time", "retry cap", "carriage return"] {
            assert!(e.contains(needle), "{needle} missing from {e}");
        }
    }
}
