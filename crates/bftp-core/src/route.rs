//! How a file's bytes travel between the two servers (RULES.md §14): straight from one
//! server to the other (a third-party transfer, *FXP*), or through bftpd (a *relay*: bftpd
//! opens a data connection to each server and moves the bytes itself).
//!
//! A job asks for a [`DataPath`]; the daemon may forbid relays ([`admit`]); what the pair
//! is known to refuse is remembered per ordered host pair ([`PairMemory`], expiring); and
//! [`plan`] decides, from those three, how a copy starts. Every copy then says how it
//! travelled ([`Route`]).
//!
//! Pure: the caller passes `now` and reads and writes the memory.

use std::fmt;
use std::str::FromStr;

use crate::Timestamp;

/// The data path a job asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DataPath {
    /// Third party only: a pair that refuses it fails the job (what every job stored before
    /// relays existed means).
    #[default]
    Fxp,
    /// Always through bftpd.
    Relay,
    /// Third party first; through bftpd when the pair refuses it (both role orders refused,
    /// or the pair is remembered as refusing), or when the data TLS policy can be met on two
    /// encrypted legs but not between the servers.
    Auto,
}

impl DataPath {
    pub const ALL: [DataPath; 3] = [DataPath::Auto, DataPath::Fxp, DataPath::Relay];

    pub fn as_str(self) -> &'static str {
        match self {
            DataPath::Fxp => "fxp",
            DataPath::Relay => "relay",
            DataPath::Auto => "auto",
        }
    }

    /// Whether a copy on this path may go through bftpd.
    pub fn may_relay(self) -> bool {
        self != DataPath::Fxp
    }
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A data path word that is none of `fxp`, `relay`, `auto`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown data path {0:?}; expected one of: auto, fxp, relay")]
pub struct UnknownDataPath(pub String);

impl FromStr for DataPath {
    type Err = UnknownDataPath;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fxp" => Ok(DataPath::Fxp),
            "relay" => Ok(DataPath::Relay),
            "auto" => Ok(DataPath::Auto),
            _ => Err(UnknownDataPath(s.to_owned())),
        }
    }
}

/// A job that asks for a relay where the daemon forbids them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this daemon does not relay file data (its [ftp] relay = false): data path \"relay\" \
     cannot be served; use \"fxp\" or \"auto\" (third party only here)"
)]
pub struct RelayForbidden;

/// The data path a job gets: its own, or the daemon's default. A job that asks for `relay`
/// where relays are forbidden is refused at submit; `auto` there is third party only.
pub fn admit(
    asked: Option<DataPath>,
    default: DataPath,
    relay_allowed: bool,
) -> Result<DataPath, RelayForbidden> {
    match (asked.unwrap_or(default), relay_allowed) {
        (DataPath::Relay, false) if asked.is_some() => Err(RelayForbidden),
        // The daemon's own default names a relay it forbids: third party only.
        (DataPath::Relay | DataPath::Auto, false) => Ok(DataPath::Fxp),
        (path, _) => Ok(path),
    }
}

/// Why a copy went through bftpd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayReason {
    /// The job asked for `relay`.
    Asked,
    /// The servers refused the third party in both role orders; `reply` is the refusal.
    Refused { reply: String },
    /// The pair was remembered as refusing the third party (`reply`, when it was seen).
    Remembered { reply: String, seen: Timestamp },
    /// The data TLS policy cannot be met between the servers, but can on two legs.
    DataTls { detail: String },
    /// The job requires a hash proof the servers cannot give: bftpd hashes the stream
    /// (`crate::proof::require_or_relay`).
    Proof { detail: String },
}

impl RelayReason {
    /// The reason's kind as a word: `asked`, `refused`, `remembered`, `data_tls`, `proof`.
    pub fn kind(&self) -> &'static str {
        match self {
            RelayReason::Asked => "asked",
            RelayReason::Refused { .. } => "refused",
            RelayReason::Remembered { .. } => "remembered",
            RelayReason::DataTls { .. } => "data_tls",
            RelayReason::Proof { .. } => "proof",
        }
    }

    /// The reply or explanation behind the reason, if it has one.
    pub fn detail(&self) -> Option<&str> {
        match self {
            RelayReason::Asked => None,
            RelayReason::Refused { reply } | RelayReason::Remembered { reply, .. } => Some(reply),
            RelayReason::DataTls { detail } | RelayReason::Proof { detail } => Some(detail),
        }
    }
}

impl fmt::Display for RelayReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RelayReason::Asked => f.write_str("the job asked for a relay"),
            RelayReason::Refused { reply } => write!(f, "third party refused: {reply}"),
            RelayReason::Remembered { reply, seen } => {
                write!(f, "the pair refused the third party at {seen}: {reply}")
            }
            RelayReason::DataTls { detail } => write!(f, "data TLS between the servers: {detail}"),
            RelayReason::Proof { detail } => {
                write!(f, "a hash proof only the relayed stream can give: {detail}")
            }
        }
    }
}

/// How one copy's bytes travelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Third party, RFC 1068 roles (PASV to the source).
    Fxp,
    /// Third party, roles swapped (PASV to the destination).
    FxpRolesSwapped,
    /// Through bftpd.
    Relay(RelayReason),
}

impl Route {
    /// `fxp`, `fxp_roles_swapped` or `relay`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Route::Fxp => "fxp",
            Route::FxpRolesSwapped => "fxp_roles_swapped",
            Route::Relay(_) => "relay",
        }
    }

    pub fn is_relay(&self) -> bool {
        matches!(self, Route::Relay(_))
    }

    pub fn reason(&self) -> Option<&RelayReason> {
        match self {
            Route::Relay(reason) => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Fxp => f.write_str("fxp"),
            Route::FxpRolesSwapped => f.write_str("fxp roles swapped"),
            Route::Relay(reason) => write!(f, "relay ({reason})"),
        }
    }
}

/// Which ordered pair of servers a [`PairMemory`] is about: each side's host as written in
/// the job (compared lower-case, without brackets or a trailing dot) and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PairKey {
    pub source: (String, u16),
    pub destination: (String, u16),
}

impl PairKey {
    pub fn new(source: (&str, u16), destination: (&str, u16)) -> PairKey {
        let host = |h: &str| crate::refusal::RefusalKey::new(h, 0, "").host;
        PairKey {
            source: (host(source.0), source.1),
            destination: (host(destination.0), destination.1),
        }
    }
}

/// What a pair of servers refused: the third party, seen at `seen` with `reply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairMemory {
    pub reply: String,
    pub seen: Timestamp,
}

/// The longest refusal text a [`PairMemory`] keeps (characters).
pub const MAX_MEMORY_TEXT: usize = 300;

/// The memory of a refusal seen `now` with `reply` (cut to [`MAX_MEMORY_TEXT`]).
pub fn remember(reply: &str, now: Timestamp) -> PairMemory {
    let reply = match reply.char_indices().nth(MAX_MEMORY_TEXT) {
        Some((cut, _)) => format!("{}…", &reply[..cut]),
        None => reply.to_owned(),
    };
    PairMemory { reply, seen: now }
}

/// Whether `memory` still stands at `now`, kept for `expiry_ms`: a server that changed its
/// configuration is tried again once the memory of its refusal has expired.
pub fn still_remembered(memory: &PairMemory, now: Timestamp, expiry_ms: u64) -> bool {
    now.0.saturating_sub(memory.seen.0) < expiry_ms
}

/// How a copy starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Third party; a refusal in both role orders fails the job.
    FxpOnly,
    /// Third party first; a relay when both role orders are refused.
    FxpThenRelay,
    /// Through bftpd at once, for this reason.
    Relay(RelayReason),
}

/// How a copy on `path` starts, the pair's memory being `memory` at `now`.
pub fn plan(path: DataPath, memory: Option<&PairMemory>, now: Timestamp, expiry_ms: u64) -> Plan {
    match path {
        DataPath::Fxp => Plan::FxpOnly,
        DataPath::Relay => Plan::Relay(RelayReason::Asked),
        DataPath::Auto => match memory {
            Some(m) if still_remembered(m, now, expiry_ms) => {
                Plan::Relay(RelayReason::Remembered {
                    reply: m.reply.clone(),
                    seen: m.seen,
                })
            }
            _ => Plan::FxpThenRelay,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_path_words_round_trip_and_unknown_ones_are_refused() {
        for path in DataPath::ALL {
            assert_eq!(path.as_str().parse::<DataPath>(), Ok(path));
            assert_eq!(
                path.to_string().to_uppercase().parse::<DataPath>(),
                Ok(path)
            );
        }
        assert_eq!(
            "fxp2".parse::<DataPath>(),
            Err(UnknownDataPath("fxp2".into()))
        );
        assert!("".parse::<DataPath>().is_err());
        assert_eq!(DataPath::default(), DataPath::Fxp);
    }

    #[test]
    fn admission_by_the_daemons_switch() {
        use DataPath::*;
        // (asked, default, relay allowed) -> admitted
        type Row = (
            Option<DataPath>,
            DataPath,
            bool,
            Result<DataPath, RelayForbidden>,
        );
        let rows: &[Row] = &[
            (None, Auto, true, Ok(Auto)),
            (None, Fxp, true, Ok(Fxp)),
            (None, Relay, true, Ok(Relay)),
            (Some(Fxp), Auto, true, Ok(Fxp)),
            (Some(Relay), Fxp, true, Ok(Relay)),
            (Some(Auto), Fxp, true, Ok(Auto)),
            // Relays forbidden: asking for one is refused, auto is third party only.
            (Some(Relay), Auto, false, Err(RelayForbidden)),
            (Some(Auto), Auto, false, Ok(Fxp)),
            (Some(Fxp), Auto, false, Ok(Fxp)),
            (None, Auto, false, Ok(Fxp)),
            (None, Relay, false, Ok(Fxp)),
        ];
        for (asked, default, allowed, want) in rows {
            assert_eq!(
                admit(*asked, *default, *allowed),
                *want,
                "asked {asked:?}, default {default}, relay allowed {allowed}"
            );
        }
    }

    #[test]
    fn plan_by_path_and_memory() {
        let day = 24 * 3600 * 1000;
        let seen = Timestamp(10 * day);
        let memory = PairMemory {
            reply: "425 no".into(),
            seen,
        };
        let remembered = Plan::Relay(RelayReason::Remembered {
            reply: "425 no".into(),
            seen,
        });
        // (path, memory, now) -> plan, with a memory kept for one day.
        let rows: &[(DataPath, Option<&PairMemory>, u64, Plan)] = &[
            (DataPath::Fxp, None, 10 * day, Plan::FxpOnly),
            (DataPath::Fxp, Some(&memory), 10 * day, Plan::FxpOnly),
            (
                DataPath::Relay,
                None,
                10 * day,
                Plan::Relay(RelayReason::Asked),
            ),
            (
                DataPath::Relay,
                Some(&memory),
                10 * day,
                Plan::Relay(RelayReason::Asked),
            ),
            (DataPath::Auto, None, 10 * day, Plan::FxpThenRelay),
            (DataPath::Auto, Some(&memory), 10 * day, remembered.clone()),
            (DataPath::Auto, Some(&memory), 11 * day - 1, remembered),
            // Expired: tried again.
            (DataPath::Auto, Some(&memory), 11 * day, Plan::FxpThenRelay),
            (DataPath::Auto, Some(&memory), 30 * day, Plan::FxpThenRelay),
        ];
        for (path, memory, now, want) in rows {
            assert_eq!(
                plan(*path, *memory, Timestamp(*now), day),
                *want,
                "{path} {memory:?} at {now}"
            );
        }
    }

    #[test]
    fn pair_keys_compare_hosts_as_names() {
        assert_eq!(
            PairKey::new(("FTP.Example.org.", 21), ("[::1]", 2121)),
            PairKey::new(("ftp.example.org", 21), ("::1", 2121))
        );
        assert_ne!(
            PairKey::new(("a", 21), ("b", 21)),
            PairKey::new(("b", 21), ("a", 21))
        );
    }

    #[test]
    fn a_remembered_reply_is_cut() {
        let long = "x".repeat(1000);
        let m = remember(&long, Timestamp(5));
        assert_eq!(m.reply.chars().count(), MAX_MEMORY_TEXT + 1);
        assert!(m.reply.ends_with('…'));
        assert_eq!(remember("425 no", Timestamp(5)).reply, "425 no");
    }

    #[test]
    fn routes_name_themselves() {
        assert_eq!(Route::Fxp.as_str(), "fxp");
        assert_eq!(Route::FxpRolesSwapped.to_string(), "fxp roles swapped");
        let relay = Route::Relay(RelayReason::Refused {
            reply: "425 foreign".into(),
        });
        assert_eq!(relay.as_str(), "relay");
        assert_eq!(
            relay.reason().and_then(RelayReason::detail),
            Some("425 foreign")
        );
        assert_eq!(relay.reason().map(RelayReason::kind), Some("refused"));
    }
}
