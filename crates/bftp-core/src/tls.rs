//! TLS (FTPS) policy of a job's side: whether its control connection and its data path must,
//! may or must not be encrypted, and the pure rules built on it (what a server's answer to
//! AUTH TLS means, which server of a pair becomes the TLS client of their data connection).

use std::fmt;
use std::str::FromStr;

/// How much TLS a connection wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum TlsPolicy {
    /// Never TLS (what every job stored before TLS existed means).
    #[default]
    Off,
    /// TLS when the server offers it; once offered, never in clear after a failure.
    Preferred,
    /// TLS or nothing: a server that does not offer it is a permanent failure.
    Required,
}

impl TlsPolicy {
    pub const ALL: [TlsPolicy; 3] = [TlsPolicy::Required, TlsPolicy::Preferred, TlsPolicy::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            TlsPolicy::Off => "off",
            TlsPolicy::Preferred => "preferred",
            TlsPolicy::Required => "required",
        }
    }
}

impl fmt::Display for TlsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy word that is none of `required`, `preferred`, `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown TLS policy {0:?}; expected one of: required, preferred, off")]
pub struct UnknownTlsPolicy(pub String);

impl FromStr for TlsPolicy {
    type Err = UnknownTlsPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(TlsPolicy::Off),
            "preferred" => Ok(TlsPolicy::Preferred),
            "required" => Ok(TlsPolicy::Required),
            _ => Err(UnknownTlsPolicy(s.to_owned())),
        }
    }
}

/// The TLS settings of one side of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct EndpointTls {
    /// The control connection.
    pub control: TlsPolicy,
    /// Data connections with this server (PROT P): listings it sends bftpd, and the
    /// server-to-server copy.
    pub data: TlsPolicy,
    /// Implicit FTPS (`ftps://`): TLS from the first byte, no AUTH TLS. Implies `control`
    /// `required`.
    pub implicit: bool,
}

impl EndpointTls {
    /// The control policy in force: implicit TLS is always required.
    pub fn control_policy(&self) -> TlsPolicy {
        if self.implicit {
            TlsPolicy::Required
        } else {
            self.control
        }
    }

    /// Whether a data path policy other than `off` is meaningful: data can only be
    /// protected on a connection whose control connection is TLS.
    pub fn wants_data_tls(&self) -> bool {
        self.data != TlsPolicy::Off
    }
}

/// What to do after a server's answer to AUTH TLS (or its absence from FEAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthDecision {
    /// 234: handshake now; if it fails, the connection fails (never clear afterwards).
    Handshake,
    /// Not offered, policy `preferred`: log in in clear, and say so in the report.
    Clear,
    /// Not offered, policy `required`: permanent failure, no USER sent.
    Refuse,
}

/// The decision for a server's reply code to `AUTH TLS` under `policy` (never `off`: then
/// AUTH TLS is not sent).
pub fn auth_decision(policy: TlsPolicy, code: u16) -> AuthDecision {
    if code == 234 {
        return AuthDecision::Handshake;
    }
    match policy {
        TlsPolicy::Required => AuthDecision::Refuse,
        TlsPolicy::Preferred | TlsPolicy::Off => AuthDecision::Clear,
    }
}

/// Which server takes the TLS client part of a server-to-server data connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsClient {
    Source,
    Destination,
}

impl TlsClient {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsClient::Source => "source",
            TlsClient::Destination => "destination",
        }
    }
}

/// The TLS a copy had, as data (the ledger keeps it per file; the API, `--json` and the
/// report show these fields, and a sentence made from them for people). `None` for a side
/// that neither used nor asked for TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyTls {
    pub source: Option<ControlTls>,
    pub destination: Option<ControlTls>,
    pub data: Option<DataProtection>,
}

/// One control connection's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlTls {
    /// TLS, its version (`TLS 1.3`) and how the server's certificate was checked.
    Tls {
        version: String,
        certificate: CertificateCheck,
    },
    /// In clear although the policy asked for TLS (`preferred`, and the server did not
    /// accept AUTH TLS).
    Clear,
}

/// How a server's certificate was checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertificateCheck {
    /// The system's root certificates.
    SystemRoots,
    /// The CA certificates in this file.
    CaFile(String),
    /// Exactly the certificate with this SHA-256 fingerprint (hex).
    Pinned(String),
    /// Not checked: an explicit per-host `insecure` setting.
    Insecure,
}

/// What a copy's data connection got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataProtection {
    /// Whether the bytes moved through TLS between the servers.
    pub encrypted: bool,
    /// The server that was the TLS client (SSCN ON), when encrypted.
    pub tls_client: Option<TlsClient>,
    /// Why the data moved in clear although a policy asked for TLS.
    pub clear_reason: Option<String>,
}

/// The plan for one copy's data connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPlan {
    /// PROT C on both sides.
    Clear,
    /// PROT P on both sides; `SSCN ON` on the named side (the TLS client).
    Encrypted(TlsClient),
    /// The policy requires encryption and no role order allows it.
    Impossible,
}

/// What each server of a pair can do for encrypted server-to-server data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DataAbility {
    /// The control connection is TLS (PROT P is possible at all).
    pub tls: bool,
    /// It answered `SSCN ON` (it can be the TLS client).
    pub sscn: bool,
}

/// The rule for a copy's data path: the stricter of the two sides' data policies decides;
/// an SSCN-capable side is the TLS client (the source first, as the one that sends); with
/// neither able, `required` makes the copy impossible and `preferred` moves it in clear.
pub fn data_plan(
    src_policy: TlsPolicy,
    dst_policy: TlsPolicy,
    src: DataAbility,
    dst: DataAbility,
) -> DataPlan {
    let policy = src_policy.max(dst_policy);
    if policy == TlsPolicy::Off {
        return DataPlan::Clear;
    }
    if src.tls && dst.tls {
        if src.sscn {
            return DataPlan::Encrypted(TlsClient::Source);
        }
        if dst.sscn {
            return DataPlan::Encrypted(TlsClient::Destination);
        }
    }
    match policy {
        TlsPolicy::Required => DataPlan::Impossible,
        _ => DataPlan::Clear,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TlsPolicy::*;

    #[test]
    fn policies_parse_and_print_as_their_words() {
        for p in TlsPolicy::ALL {
            assert_eq!(p.as_str().parse::<TlsPolicy>(), Ok(p));
        }
        assert_eq!("REQUIRED".parse::<TlsPolicy>(), Ok(Required));
        assert!("yes".parse::<TlsPolicy>().is_err());
        assert_eq!(TlsPolicy::default(), Off);
    }

    #[test]
    fn auth_tls_answers_decide_the_login() {
        let table = [
            (Required, 234, AuthDecision::Handshake),
            (Preferred, 234, AuthDecision::Handshake),
            (Required, 500, AuthDecision::Refuse),
            (Required, 530, AuthDecision::Refuse),
            (Required, 431, AuthDecision::Refuse),
            (Preferred, 500, AuthDecision::Clear),
            (Preferred, 502, AuthDecision::Clear),
        ];
        for (policy, code, want) in table {
            assert_eq!(auth_decision(policy, code), want, "{policy} {code}");
        }
    }

    #[test]
    fn implicit_tls_is_always_required() {
        let t = EndpointTls {
            control: Off,
            data: Off,
            implicit: true,
        };
        assert_eq!(t.control_policy(), Required);
    }

    #[test]
    fn the_data_plan_picks_the_sscn_side_or_refuses() {
        let none = DataAbility::default();
        let tls = DataAbility {
            tls: true,
            sscn: false,
        };
        let sscn = DataAbility {
            tls: true,
            sscn: true,
        };
        use DataPlan::*;
        let table = [
            (Off, Off, sscn, sscn, Clear),
            (Required, Off, sscn, tls, Encrypted(TlsClient::Source)),
            (Off, Preferred, tls, sscn, Encrypted(TlsClient::Destination)),
            (Required, Required, sscn, sscn, Encrypted(TlsClient::Source)),
            (Required, Off, tls, tls, Impossible),
            (Preferred, Preferred, tls, tls, Clear),
            (Off, Required, none, sscn, Impossible),
            (Preferred, Off, sscn, none, Clear),
        ];
        for (sp, dp, s, d, want) in table {
            assert_eq!(data_plan(sp, dp, s, d), want, "{sp} {dp} {s:?} {d:?}");
        }
    }
}
