//! `[ftp.tls]` in the config: the default TLS policies of a job's sides (control and data),
//! the switch that forbids `off`, and how each host's certificate is checked; and the rule
//! that puts a request's TLS words, or these defaults, on the job.

use std::path::PathBuf;

use bftp_api::{EndpointSpec, SubmitRequest};
use bftp_core::{Endpoint, EndpointTls, JobSpec, TlsPolicy};
use bftp_ftp::tls::{parse_fingerprint, HostTrust, TlsTrust, Trust};
use serde::Deserialize;

/// `[ftp.tls]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Default control-connection policy of a side the request says nothing about.
    #[serde(default = "d_policy")]
    pub control: String,
    /// Default data policy (PROT P; server-to-server TLS).
    #[serde(default = "d_policy")]
    pub data: String,
    /// Refuse any job with a side whose control or data policy is `off`.
    #[serde(default)]
    pub forbid_off: bool,
    /// Per-host certificate checks; hosts not named use the system's roots.
    #[serde(default)]
    pub hosts: Vec<TlsHostConfig>,
}

/// One `[[ftp.tls.hosts]]` entry: exactly one of `ca_file`, `fingerprint`, `insecure`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsHostConfig {
    /// The host as jobs name it (case-insensitive).
    pub host: String,
    /// PEM file of the CA certificates this host's certificate must chain to.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// SHA-256 fingerprint of the host's certificate (hex, colons allowed).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// Accept any certificate from this host; the report says so.
    #[serde(default)]
    pub insecure: bool,
}

fn d_policy() -> String {
    TlsPolicy::Off.as_str().into()
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            control: d_policy(),
            data: d_policy(),
            forbid_off: false,
            hosts: Vec::new(),
        }
    }
}

/// The defaults, parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsDefaults {
    pub control: TlsPolicy,
    pub data: TlsPolicy,
    pub forbid_off: bool,
}

impl TlsConfig {
    pub fn defaults(&self) -> anyhow::Result<TlsDefaults> {
        let parse = |field: &str, v: &str| -> anyhow::Result<TlsPolicy> {
            v.parse()
                .map_err(|e| anyhow::anyhow!("[ftp.tls] {field}: {e}"))
        };
        let d = TlsDefaults {
            control: parse("control", &self.control)?,
            data: parse("data", &self.data)?,
            forbid_off: self.forbid_off,
        };
        if d.forbid_off && (d.control == TlsPolicy::Off || d.data == TlsPolicy::Off) {
            anyhow::bail!(
                "[ftp.tls] forbid_off is set, so control and data must not default to \"off\""
            );
        }
        Ok(d)
    }

    /// The engine's per-host trust (reads every CA file now).
    pub fn trust(&self) -> anyhow::Result<TlsTrust> {
        let mut hosts = Vec::new();
        for h in &self.hosts {
            let given = [h.ca_file.is_some(), h.fingerprint.is_some(), h.insecure];
            if given.iter().filter(|g| **g).count() != 1 {
                anyhow::bail!(
                    "[[ftp.tls.hosts]] {}: give exactly one of ca_file, fingerprint, insecure = true",
                    h.host
                );
            }
            let trust = match (&h.ca_file, &h.fingerprint) {
                (Some(path), _) => Trust::CaFile(path.clone()),
                (_, Some(fp)) => Trust::Pinned(
                    parse_fingerprint(fp)
                        .map_err(|e| anyhow::anyhow!("[[ftp.tls.hosts]] {}: {e}", h.host))?,
                ),
                _ => Trust::Insecure,
            };
            hosts.push(HostTrust {
                host: h.host.clone(),
                trust,
            });
        }
        TlsTrust::new(hosts).map_err(|e| anyhow::anyhow!("[ftp.tls]: {e}"))
    }
}

fn side_tls(side: &str, e: &EndpointSpec, d: &TlsDefaults) -> Result<EndpointTls, String> {
    let word = |field: &str, v: &Option<String>, default: TlsPolicy| match v {
        None => Ok(default),
        Some(w) => w
            .parse::<TlsPolicy>()
            .map_err(|e| format!("{side} {field}: {e}")),
    };
    let tls = EndpointTls {
        control: word("tls", &e.tls, d.control)?,
        data: word("data tls", &e.data_tls, d.data)?,
        implicit: e.implicit_tls,
    };
    if d.forbid_off && tls.control_policy() == TlsPolicy::Off {
        return Err(format!(
            "{side}: TLS policy off is forbidden on this daemon ([ftp.tls] forbid_off)"
        ));
    }
    if d.forbid_off && tls.data == TlsPolicy::Off {
        return Err(format!(
            "{side}: data TLS policy off is forbidden on this daemon ([ftp.tls] forbid_off)"
        ));
    }
    if tls.data == TlsPolicy::Required && tls.control_policy() == TlsPolicy::Off {
        return Err(format!(
            "{side}: data TLS required needs TLS on the control connection (tls off)"
        ));
    }
    Ok(tls)
}

/// Put the request's TLS policies (or the daemon's defaults) on the job's sides.
pub fn apply(req: &SubmitRequest, spec: &mut JobSpec, d: &TlsDefaults) -> Result<(), String> {
    let set = |side: &str, e: &EndpointSpec, ep: &mut Endpoint| -> Result<(), String> {
        ep.tls = side_tls(side, e, d)?;
        Ok(())
    };
    set("source", &req.source, &mut spec.source)?;
    if let (Some(e), Some(ep)) = (&req.destination, spec.destination.as_mut()) {
        set("destination", e, ep)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tls: Option<&str>, data: Option<&str>) -> EndpointSpec {
        EndpointSpec {
            host: "h".into(),
            path: "f".into(),
            tls: tls.map(Into::into),
            data_tls: data.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn request_words_win_over_defaults_and_forbid_off_refuses_off() {
        let d = TlsDefaults {
            control: TlsPolicy::Preferred,
            data: TlsPolicy::Off,
            forbid_off: false,
        };
        let t = side_tls("source", &spec(None, None), &d).unwrap();
        assert_eq!((t.control, t.data), (TlsPolicy::Preferred, TlsPolicy::Off));
        let t = side_tls("source", &spec(Some("required"), Some("preferred")), &d).unwrap();
        assert_eq!(
            (t.control, t.data),
            (TlsPolicy::Required, TlsPolicy::Preferred)
        );
        assert!(side_tls("source", &spec(Some("maybe"), None), &d).is_err());
        let strict = TlsDefaults {
            control: TlsPolicy::Required,
            data: TlsPolicy::Preferred,
            forbid_off: true,
        };
        assert!(side_tls("source", &spec(None, None), &strict).is_ok());
        let err = side_tls("source", &spec(Some("off"), None), &strict).unwrap_err();
        assert!(err.contains("forbidden"), "{err}");
        assert!(side_tls("source", &spec(None, Some("off")), &strict).is_err());
        assert!(side_tls("source", &spec(Some("off"), Some("required")), &d).is_err());
    }

    #[test]
    fn config_defaults_refuse_off_under_forbid_off_and_hosts_need_one_trust() {
        let mut c = TlsConfig {
            forbid_off: true,
            ..TlsConfig::default()
        };
        assert!(c.defaults().is_err());
        c.control = "required".into();
        c.data = "preferred".into();
        assert!(c.defaults().is_ok());
        c.hosts.push(TlsHostConfig {
            host: "h".into(),
            ca_file: None,
            fingerprint: Some("00".repeat(32)),
            insecure: true,
        });
        assert!(c.trust().is_err());
        c.hosts[0].insecure = false;
        assert!(c.trust().is_ok());
    }
}
