//! What a copy leaves on a member's record: the TLS it had, how its bytes travelled (and what
//! bftpd counted and hashed of a relayed stream), and what a resumable copy began from.

use serde::{Deserialize, Serialize};

use bftp_core::Timestamp;

/// A resumable copy's beginning: the source's size and modify time, the destination's size
/// before (absent: no file).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ResumeV1 {
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
}

impl ResumeV1 {
    pub(super) fn from_api(b: &bftp_core::resume::Base) -> ResumeV1 {
        ResumeV1 {
            size: b.size,
            mtime: b.modified.clone(),
            before: b.dest_before,
        }
    }

    pub(super) fn to_api(&self) -> bftp_core::resume::Base {
        bftp_core::resume::Base {
            size: self.size,
            modified: self.mtime.clone(),
            dest_before: self.before,
        }
    }
}

/// How a copy travelled (`bftp_core::route::Route`), as fields, with what bftpd counted and
/// hashed of a relayed stream.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RouteV1 {
    /// `fxp`, `fxp_roles_swapped` or `relay`.
    pub path: String,
    /// A relay's reason: `asked`, `refused`, `remembered`, `data_tls` or `proof`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The refusing reply (`refused`, `remembered`) or the explanation (`data_tls`, `proof`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `remembered`: when the pair's refusal was seen (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<u64>,
    /// Bytes bftpd relayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The relayed stream's SHA-256 (hex), as bftpd computed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl RouteV1 {
    pub(crate) fn from_api(
        route: &bftp_core::route::Route,
        bytes: Option<u64>,
        sha256: Option<String>,
    ) -> RouteV1 {
        use bftp_core::route::{RelayReason, Route};
        let (path, reason) = match route {
            Route::Fxp => ("fxp", None),
            Route::FxpRolesSwapped => ("fxp_roles_swapped", None),
            Route::Relay(r) => ("relay", Some(r)),
        };
        let (reason, detail, seen) = match reason {
            None => (None, None, None),
            Some(RelayReason::Asked) => (Some("asked"), None, None),
            Some(RelayReason::Refused { reply }) => (Some("refused"), Some(reply.clone()), None),
            Some(RelayReason::Remembered { reply, seen }) => {
                (Some("remembered"), Some(reply.clone()), Some(seen.0))
            }
            Some(RelayReason::DataTls { detail }) => (Some("data_tls"), Some(detail.clone()), None),
            Some(RelayReason::Proof { detail }) => (Some("proof"), Some(detail.clone()), None),
        };
        RouteV1 {
            path: path.into(),
            reason: reason.map(str::to_owned),
            detail,
            seen,
            bytes,
            sha256,
        }
    }

    /// A word this code does not know, or a reason without the field it needs, reads as
    /// absent (the file's route is then not shown), never as another value.
    pub(crate) fn to_api(&self) -> Option<bftp_core::route::Route> {
        use bftp_core::route::{RelayReason, Route};
        Some(match self.path.as_str() {
            "fxp" => Route::Fxp,
            "fxp_roles_swapped" => Route::FxpRolesSwapped,
            "relay" => Route::Relay(match self.reason.as_deref()? {
                "asked" => RelayReason::Asked,
                "refused" => RelayReason::Refused {
                    reply: self.detail.clone()?,
                },
                "remembered" => RelayReason::Remembered {
                    reply: self.detail.clone()?,
                    seen: Timestamp(self.seen?),
                },
                "data_tls" => RelayReason::DataTls {
                    detail: self.detail.clone()?,
                },
                "proof" => RelayReason::Proof {
                    detail: self.detail.clone()?,
                },
                _ => return None,
            }),
            _ => return None,
        })
    }
}

/// A copy's TLS (`bftp_core::tls::CopyTls`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct CopyTlsV1 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<ControlTlsV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<ControlTlsV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataTlsV1>,
}

/// One control connection's TLS: `tls` with its version and certificate check
/// (`system`, `ca_file` with `ca`, `pinned` with `pin`, `insecure`), or `clear`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ControlTlsV1 {
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct DataTlsV1 {
    pub encrypted: bool,
    /// `source` or `destination`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear: Option<String>,
}

impl CopyTlsV1 {
    pub(crate) fn from_api(t: &bftp_core::tls::CopyTls) -> CopyTlsV1 {
        use bftp_core::tls::{CertificateCheck as C, ControlTls};
        let control = |c: &ControlTls| match c {
            ControlTls::Clear => ControlTlsV1 {
                state: "clear".into(),
                version: None,
                cert: None,
                ca: None,
                pin: None,
            },
            ControlTls::Tls {
                version,
                certificate,
            } => {
                let (cert, ca, pin) = match certificate {
                    C::SystemRoots => ("system", None, None),
                    C::CaFile(f) => ("ca_file", Some(f.clone()), None),
                    C::Pinned(p) => ("pinned", None, Some(p.clone())),
                    C::Insecure => ("insecure", None, None),
                };
                ControlTlsV1 {
                    state: "tls".into(),
                    version: Some(version.clone()),
                    cert: Some(cert.into()),
                    ca,
                    pin,
                }
            }
        };
        CopyTlsV1 {
            src: t.source.as_ref().map(control),
            dst: t.destination.as_ref().map(control),
            data: t.data.as_ref().map(|d| DataTlsV1 {
                encrypted: d.encrypted,
                client: d.tls_client.map(|c| c.as_str().to_owned()),
                clear: d.clear_reason.clone(),
            }),
        }
    }

    /// A field this code does not know reads as absent (the file's TLS is then not shown),
    /// never as another value.
    pub(crate) fn to_api(&self) -> bftp_core::tls::CopyTls {
        use bftp_core::tls::{CertificateCheck as C, ControlTls, DataProtection, TlsClient};
        let control = |c: &ControlTlsV1| -> Option<ControlTls> {
            match c.state.as_str() {
                "clear" => Some(ControlTls::Clear),
                "tls" => Some(ControlTls::Tls {
                    version: c.version.clone()?,
                    certificate: match c.cert.as_deref()? {
                        "system" => C::SystemRoots,
                        "ca_file" => C::CaFile(c.ca.clone()?),
                        "pinned" => C::Pinned(c.pin.clone()?),
                        "insecure" => C::Insecure,
                        _ => return None,
                    },
                }),
                _ => None,
            }
        };
        bftp_core::tls::CopyTls {
            source: self.src.as_ref().and_then(control),
            destination: self.dst.as_ref().and_then(control),
            data: self.data.as_ref().map(|d| DataProtection {
                encrypted: d.encrypted,
                tls_client: match d.client.as_deref() {
                    Some("source") => Some(TlsClient::Source),
                    Some("destination") => Some(TlsClient::Destination),
                    _ => None,
                },
                clear_reason: d.clear.clone(),
            }),
        }
    }
}
