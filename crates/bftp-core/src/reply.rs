//! FTP reply codes and the retry classification of RULES.md §5.
//!
//! [`classify`] is the one function that decides what an answer from a server means
//! for a job: wait, go on, retry later, give up, or fall back to another command.
//! [`classify_for_host`] applies the operator's per-host [`ReplyOverride`]s first.
//! Everything here is pure: the engine turns sockets and bytes into an [`Outcome`].

use std::fmt;

/// An FTP reply code (RFC 959 §4.2): three digits, the first one 1 to 5.
///
/// A small type rather than a closed enum: servers send codes no RFC lists, and
/// the first digit (see [`ReplyCode::class`]) is what a client must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplyCode(u16);

impl ReplyCode {
    /// The code, if it is in 100..=599.
    pub const fn new(code: u16) -> Option<Self> {
        if matches!(code, 100..=599) {
            Some(Self(code))
        } else {
            None
        }
    }

    /// The numeric value.
    pub const fn get(self) -> u16 {
        self.0
    }

    /// What the first digit says about the command (RFC 959 §4.2.1).
    pub const fn class(self) -> ReplyClass {
        match self.0 / 100 {
            1 => ReplyClass::Preliminary,
            2 => ReplyClass::Completion,
            3 => ReplyClass::Intermediate,
            4 => ReplyClass::TransientNegative,
            _ => ReplyClass::PermanentNegative,
        }
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<ReplyCode> for u16 {
    fn from(code: ReplyCode) -> u16 {
        code.0
    }
}

impl TryFrom<u16> for ReplyCode {
    type Error = InvalidReplyCode;

    fn try_from(code: u16) -> Result<Self, Self::Error> {
        Self::new(code).ok_or(InvalidReplyCode(code))
    }
}

/// A number outside 100..=599 offered as a reply code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not an FTP reply code (100..=599)")]
pub struct InvalidReplyCode(pub u16);

/// The first digit of a reply code (RFC 959 §4.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyClass {
    /// 1yz: the action is starting; expect another reply.
    Preliminary,
    /// 2yz: the action completed.
    Completion,
    /// 3yz: accepted, waiting for another command (PASS, ACCT, RNTO...).
    Intermediate,
    /// 4yz: not done, but the same command may succeed later.
    TransientNegative,
    /// 5yz: not done, and repeating the same command will not help.
    PermanentNegative,
}

/// The command a reply answers, as far as classification cares.
///
/// Flat rather than grouped (`Login(..)`) so that the exception table below reads
/// as one `match`; [`CommandKind::is_login`] gives the group. The greeting (the
/// reply to connecting) and commands not listed here are [`CommandKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    User,
    Pass,
    Acct,
    Type,
    Mode,
    Stru,
    Cwd,
    Feat,
    Pasv,
    Epsv,
    Port,
    Eprt,
    Nlst,
    Mlsd,
    Size,
    Mdtm,
    Retr,
    Stor,
    Appe,
    Stou,
    Dele,
    Other,
}

impl CommandKind {
    /// The kind of a command verb, case-insensitively (`"pasv"` is [`CommandKind::Pasv`]).
    pub fn from_verb(verb: &str) -> Self {
        const VERBS: [(&str, CommandKind); 21] = [
            ("USER", CommandKind::User),
            ("PASS", CommandKind::Pass),
            ("ACCT", CommandKind::Acct),
            ("TYPE", CommandKind::Type),
            ("MODE", CommandKind::Mode),
            ("STRU", CommandKind::Stru),
            ("CWD", CommandKind::Cwd),
            ("FEAT", CommandKind::Feat),
            ("PASV", CommandKind::Pasv),
            ("EPSV", CommandKind::Epsv),
            ("PORT", CommandKind::Port),
            ("EPRT", CommandKind::Eprt),
            ("NLST", CommandKind::Nlst),
            ("MLSD", CommandKind::Mlsd),
            ("SIZE", CommandKind::Size),
            ("MDTM", CommandKind::Mdtm),
            ("RETR", CommandKind::Retr),
            ("STOR", CommandKind::Stor),
            ("APPE", CommandKind::Appe),
            ("STOU", CommandKind::Stou),
            ("DELE", CommandKind::Dele),
        ];
        VERBS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(verb))
            .map_or(CommandKind::Other, |&(_, kind)| kind)
    }

    /// USER, PASS or ACCT.
    pub fn is_login(self) -> bool {
        matches!(
            self,
            CommandKind::User | CommandKind::Pass | CommandKind::Acct
        )
    }
}

/// What the engine got back for a command (or for connecting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A well-formed reply with this code.
    Reply(ReplyCode),
    /// A reply the parser could not read: no numeric code (RFC 1068 saw NLST
    /// errors like that), or over the configured size limits. The caller keeps
    /// the text for the report.
    Malformed,
    /// No reply at all: the connection failed.
    Transport(TransportFailure),
}

/// How a connection failed before a reply arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportFailure {
    /// Connection refused.
    Refused,
    /// No route to the host, or the network is unreachable.
    Unreachable,
    /// Connection reset by the peer.
    Reset,
    /// End of stream before a (complete) reply.
    Eof,
    /// No reply (or no connection) within the configured timeout.
    Timeout,
    /// The host name did not resolve.
    Dns,
}

/// What the engine should do after a reply: the result of [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// 1yz: the action started; wait for the final reply.
    Preliminary,
    /// 2yz: the command succeeded.
    Done,
    /// 3yz: send the next command of the sequence.
    Continue(Needs),
    /// Not done now; retry later (after a backoff, on a new connection if
    /// [`TransientKind::connection_lost`]).
    Transient(TransientKind),
    /// Not done, and retrying the same thing will not help.
    Permanent(PermanentKind),
    /// The server lacks an optional command: fall back (swap the passive and
    /// active roles, EPSV instead of PASV, NLST instead of MLSD, no SIZE check).
    /// Not a failure of the job by itself.
    NotSupported,
}

impl Disposition {
    /// Whether a later attempt may succeed.
    pub fn is_transient(self) -> bool {
        matches!(self, Disposition::Transient(_))
    }

    /// Whether the command failed for good.
    pub fn is_permanent(self) -> bool {
        matches!(self, Disposition::Permanent(_))
    }
}

/// What a 3yz reply asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Needs {
    /// 331: send PASS.
    Password,
    /// 332: send ACCT.
    Account,
    /// Any other 3yz (350 after RNFR or REST): the command that completes the sequence.
    FurtherCommand,
}

/// Why a command may succeed later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransientKind {
    /// 421: the server is closing the control connection; reconnect.
    Reconnect,
    /// 425 (cannot open data connection) or 426 (transfer aborted).
    DataConnection,
    /// 450: file unavailable (busy, locked).
    FileBusy,
    /// 451: local error in processing.
    LocalError,
    /// 452: insufficient storage on the server; the report says so.
    Storage,
    /// Any other 4yz.
    Unlisted(ReplyCode),
    /// The connection failed before a reply.
    Transport(TransportFailure),
    /// A reply without a numeric code (or over the size limits).
    Protocol,
    /// A code that a per-host [`ReplyOverride`] declares transient.
    Overridden(ReplyCode),
    /// 553 to STOU: the server could not take the unique name it picked, because another
    /// session took it at the same moment (vsftpd tries `STOU.1`, `STOU.2`... and creates the
    /// first free one exclusively). Not the file's fault: worth another try.
    UniqueNameTaken,
}

impl TransientKind {
    /// Whether the control connection is unusable afterwards, so that the
    /// next attempt must open a new one.
    pub fn connection_lost(self) -> bool {
        matches!(
            self,
            TransientKind::Reconnect | TransientKind::Transport(_) | TransientKind::Protocol
        )
    }
}

/// Why a command failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PermanentKind {
    /// 530 (not logged in) or 532 (an account is needed for storing files).
    Login,
    /// 550: file unavailable (not found, no access).
    FileUnavailable,
    /// 551: page type unknown.
    PageTypeUnknown,
    /// 552: exceeded storage allocation.
    StorageExceeded,
    /// 553: file name not allowed.
    NameNotAllowed,
    /// 500, 501, 502, 504 to a command the job cannot do without (a TYPE, MODE
    /// or STRU the server does not implement, RETR refused as syntax...).
    CommandRejected,
    /// Any other 5yz.
    Unlisted(ReplyCode),
    /// A code that a per-host [`ReplyOverride`] declares permanent.
    Overridden(ReplyCode),
}

/// Classify the outcome of `command` (RULES.md §5): 1yz wait, 2yz done, 3yz continue,
/// 4yz retry later, 5yz stop, transport failures and code-less replies retry later,
/// with the short list of exceptions in `means_not_supported`.
pub fn classify(command: CommandKind, outcome: Outcome) -> Disposition {
    let code = match outcome {
        Outcome::Reply(code) => code,
        Outcome::Malformed => return Disposition::Transient(TransientKind::Protocol),
        Outcome::Transport(failure) => {
            return Disposition::Transient(TransientKind::Transport(failure))
        }
    };
    match code.class() {
        ReplyClass::Preliminary => Disposition::Preliminary,
        ReplyClass::Completion => Disposition::Done,
        ReplyClass::Intermediate => Disposition::Continue(match code.get() {
            331 => Needs::Password,
            332 => Needs::Account,
            _ => Needs::FurtherCommand,
        }),
        ReplyClass::TransientNegative => Disposition::Transient(match code.get() {
            421 => TransientKind::Reconnect,
            425 | 426 => TransientKind::DataConnection,
            450 => TransientKind::FileBusy,
            451 => TransientKind::LocalError,
            452 => TransientKind::Storage,
            _ => TransientKind::Unlisted(code),
        }),
        ReplyClass::PermanentNegative if means_not_supported(command, code) => {
            Disposition::NotSupported
        }
        // A name the server chose itself cannot be a bad name: it lost a race for it.
        ReplyClass::PermanentNegative if command == CommandKind::Stou && code.get() == 553 => {
            Disposition::Transient(TransientKind::UniqueNameTaken)
        }
        ReplyClass::PermanentNegative => Disposition::Permanent(match code.get() {
            530 | 532 => PermanentKind::Login,
            550 => PermanentKind::FileUnavailable,
            551 => PermanentKind::PageTypeUnknown,
            552 => PermanentKind::StorageExceeded,
            553 => PermanentKind::NameNotAllowed,
            500 | 501 | 502 | 504 => PermanentKind::CommandRejected,
            _ => PermanentKind::Unlisted(code),
        }),
    }
}

/// The exceptions to "5yz is permanent": refusals of an optional command, which
/// the engine answers with a fallback instead of failing the job.
fn means_not_supported(command: CommandKind, code: ReplyCode) -> bool {
    use CommandKind::{Eprt, Epsv, Feat, Mdtm, Mlsd, Pasv, Port, Size};
    match (command, code.get()) {
        // Syntax error, not implemented, parameter not implemented (RFC 959 §4.2).
        // RULES.md §5 names PASV, EPSV, PORT, EPRT, MLSD and SIZE; MDTM (RFC 3659) and
        // FEAT (RFC 2389) are just as optional.
        (Pasv | Epsv | Port | Eprt | Mlsd | Size | Mdtm | Feat, 500 | 501 | 502 | 504) => true,
        // RFC 2428: 522 "network protocol not supported" (IPv6 vs IPv4).
        (Epsv | Eprt, 522) => true,
        // vsftpd answers "550 Permission denied." to PASV/EPSV (pasv_enable=NO)
        // and PORT/EPRT (port_enable=NO); no file is involved, so it is a refusal.
        (Pasv | Epsv | Port | Eprt, 550) => true,
        _ => false,
    }
}

/// What a [`ReplyOverride`] turns a code into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreatAs {
    Transient,
    Permanent,
}

/// A per-host exception from the configuration (RULES.md §5): RFC 1068 saw servers
/// send 5yz for a broken connection. For example `host_pattern = "*.example.net"`,
/// `code = 550`, `treat_as = Transient`.
///
/// Only negative codes (4yz, 5yz) can be overridden: turning a failure into
/// "done" would let a job claim a copy that never happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyOverride {
    host_pattern: String,
    code: ReplyCode,
    treat_as: TreatAs,
}

/// A [`ReplyOverride`] that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    #[error("reply override for code {code}: the host pattern is empty")]
    EmptyHostPattern { code: ReplyCode },
    #[error(
        "reply override for host pattern {host_pattern:?}: {code} is not a negative reply \
         (4yz or 5yz); only failures can be reclassified"
    )]
    NotNegative {
        host_pattern: String,
        code: ReplyCode,
    },
}

impl ReplyOverride {
    /// An override for `code` on hosts matching `host_pattern`, a glob where `*`
    /// matches any run of characters and `?` one character, compared without
    /// regard to ASCII case against the host as written in the job (a name or an
    /// address; brackets around an IPv6 address and a final dot are ignored).
    pub fn new(
        host_pattern: &str,
        code: ReplyCode,
        treat_as: TreatAs,
    ) -> Result<Self, OverrideError> {
        let normalized = normalize_host(host_pattern);
        if normalized.is_empty() {
            return Err(OverrideError::EmptyHostPattern { code });
        }
        if !matches!(
            code.class(),
            ReplyClass::TransientNegative | ReplyClass::PermanentNegative
        ) {
            return Err(OverrideError::NotNegative {
                host_pattern: host_pattern.to_owned(),
                code,
            });
        }
        Ok(Self {
            host_pattern: normalized,
            code,
            treat_as,
        })
    }

    /// The host pattern, normalized (lower case, no brackets, no final dot).
    pub fn host_pattern(&self) -> &str {
        &self.host_pattern
    }

    pub fn code(&self) -> ReplyCode {
        self.code
    }

    pub fn treat_as(&self) -> TreatAs {
        self.treat_as
    }

    /// Whether this override applies to `code` from `host`.
    pub fn applies_to(&self, host: &str, code: ReplyCode) -> bool {
        self.code == code && host_glob_match(&self.host_pattern, &normalize_host(host))
    }
}

/// [`classify`], after the first override in `overrides` that applies to `host`
/// and the reply code. Overrides never apply to transport failures or code-less
/// replies, which are transient already.
pub fn classify_for_host(
    host: &str,
    overrides: &[ReplyOverride],
    command: CommandKind,
    outcome: Outcome,
) -> Disposition {
    if let Outcome::Reply(code) = outcome {
        if let Some(rule) = overrides.iter().find(|rule| rule.applies_to(host, code)) {
            return match rule.treat_as {
                TreatAs::Transient => Disposition::Transient(TransientKind::Overridden(code)),
                TreatAs::Permanent => Disposition::Permanent(PermanentKind::Overridden(code)),
            };
        }
    }
    classify(command, outcome)
}

fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// `*` and `?` glob over characters, backtracking only to the last `*`, so the
/// cost stays linear times the pattern length whatever the input.
fn host_glob_match(pattern: &str, host: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let host: Vec<char> = host.chars().collect();
    let (mut p, mut h) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while h < host.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, h));
                p += 1;
            }
            Some(&c) if c == '?' || c == host[h] => {
                p += 1;
                h += 1;
            }
            _ => match star {
                Some((star_p, star_h)) => {
                    p = star_p + 1;
                    h = star_h + 1;
                    star = Some((star_p, star_h + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use CommandKind as C;
    use Disposition as D;
    use PermanentKind as P;
    use TransientKind as T;

    fn code(n: u16) -> ReplyCode {
        ReplyCode::new(n).unwrap()
    }

    fn reply(n: u16) -> Outcome {
        Outcome::Reply(code(n))
    }

    #[test]
    fn reply_code_accepts_only_100_to_599() {
        for (n, valid) in [
            (0, false),
            (99, false),
            (100, true),
            (250, true),
            (599, true),
            (600, false),
            (999, false),
            (u16::MAX, false),
        ] {
            assert_eq!(ReplyCode::new(n).is_some(), valid, "{n}");
            assert_eq!(ReplyCode::try_from(n).is_ok(), valid, "{n}");
        }
        assert_eq!(ReplyCode::try_from(600), Err(InvalidReplyCode(600)));
    }

    #[test]
    fn reply_code_class_is_the_first_digit() {
        for (n, class) in [
            (100, ReplyClass::Preliminary),
            (150, ReplyClass::Preliminary),
            (199, ReplyClass::Preliminary),
            (200, ReplyClass::Completion),
            (226, ReplyClass::Completion),
            (331, ReplyClass::Intermediate),
            (421, ReplyClass::TransientNegative),
            (499, ReplyClass::TransientNegative),
            (500, ReplyClass::PermanentNegative),
            (599, ReplyClass::PermanentNegative),
        ] {
            assert_eq!(code(n).class(), class, "{n}");
        }
    }

    #[test]
    fn reply_code_displays_as_three_digits() {
        assert_eq!(code(226).to_string(), "226");
        assert_eq!(u16::from(code(550)), 550);
        assert_eq!(code(421).get(), 421);
    }

    #[test]
    fn command_kind_from_verb_ignores_case() {
        assert_eq!(CommandKind::from_verb("PASV"), C::Pasv);
        assert_eq!(CommandKind::from_verb("pasv"), C::Pasv);
        assert_eq!(CommandKind::from_verb("Stou"), C::Stou);
        assert_eq!(CommandKind::from_verb("NOOP"), C::Other);
        assert_eq!(CommandKind::from_verb(""), C::Other);
        assert_eq!(CommandKind::from_verb("PASVX"), C::Other);
        assert!(C::Pass.is_login() && C::User.is_login() && C::Acct.is_login());
        assert!(!C::Retr.is_login());
    }

    /// Every rule of RULES.md §5 and every exception, one row each.
    #[test]
    fn classify_table() {
        use TransportFailure as F;
        let table: &[(CommandKind, Outcome, Disposition)] = &[
            // 1yz: wait for the final reply.
            (C::Retr, reply(150), D::Preliminary),
            (C::Stor, reply(125), D::Preliminary),
            (C::Other, reply(120), D::Preliminary),
            // 2yz: done.
            (C::Retr, reply(226), D::Done),
            (C::Dele, reply(250), D::Done),
            (C::Pasv, reply(227), D::Done),
            (C::Epsv, reply(229), D::Done),
            (C::Pass, reply(230), D::Done),
            (C::Size, reply(213), D::Done),
            // 3yz: continue.
            (C::User, reply(331), D::Continue(Needs::Password)),
            (C::User, reply(332), D::Continue(Needs::Account)),
            (C::Pass, reply(332), D::Continue(Needs::Account)),
            (C::Other, reply(350), D::Continue(Needs::FurtherCommand)),
            // 4yz: transient, each kind.
            (C::Retr, reply(421), D::Transient(T::Reconnect)),
            (C::Other, reply(421), D::Transient(T::Reconnect)),
            (C::Stor, reply(425), D::Transient(T::DataConnection)),
            (C::Retr, reply(426), D::Transient(T::DataConnection)),
            (C::Retr, reply(450), D::Transient(T::FileBusy)),
            (C::Nlst, reply(450), D::Transient(T::FileBusy)),
            (C::Stor, reply(451), D::Transient(T::LocalError)),
            (C::Stor, reply(452), D::Transient(T::Storage)),
            (C::Other, reply(431), D::Transient(T::Unlisted(code(431)))),
            // A 4yz stays transient even on a command with a fallback.
            (C::Pasv, reply(421), D::Transient(T::Reconnect)),
            (C::Port, reply(425), D::Transient(T::DataConnection)),
            // 5yz: permanent, each kind.
            (C::Pass, reply(530), D::Permanent(P::Login)),
            (C::User, reply(530), D::Permanent(P::Login)),
            (C::Stor, reply(532), D::Permanent(P::Login)),
            (C::Retr, reply(550), D::Permanent(P::FileUnavailable)),
            (C::Mlsd, reply(550), D::Permanent(P::FileUnavailable)),
            (C::Size, reply(550), D::Permanent(P::FileUnavailable)),
            (C::Cwd, reply(550), D::Permanent(P::FileUnavailable)),
            (C::Stor, reply(551), D::Permanent(P::PageTypeUnknown)),
            (C::Stor, reply(552), D::Permanent(P::StorageExceeded)),
            // 553 names a bad file name for STOR/APPE; to STOU (whose name the server
            // picks) it means another session took that name first: transient.
            (C::Stou, reply(553), D::Transient(T::UniqueNameTaken)),
            (C::Stor, reply(553), D::Permanent(P::NameNotAllowed)),
            (C::Appe, reply(553), D::Permanent(P::NameNotAllowed)),
            (C::Stou, reply(552), D::Permanent(P::StorageExceeded)),
            (C::Stou, reply(550), D::Permanent(P::FileUnavailable)),
            (C::Other, reply(554), D::Permanent(P::Unlisted(code(554)))),
            // 500/501/502/504 on a command the job needs: permanent.
            (C::Type, reply(504), D::Permanent(P::CommandRejected)),
            (C::Mode, reply(502), D::Permanent(P::CommandRejected)),
            (C::Stru, reply(504), D::Permanent(P::CommandRejected)),
            (C::Retr, reply(501), D::Permanent(P::CommandRejected)),
            (C::Appe, reply(502), D::Permanent(P::CommandRejected)),
            (C::Nlst, reply(500), D::Permanent(P::CommandRejected)),
            (C::Other, reply(500), D::Permanent(P::CommandRejected)),
            // Exception: 500/501/502/504 on an optional command: not supported.
            (C::Pasv, reply(500), D::NotSupported),
            (C::Pasv, reply(502), D::NotSupported),
            (C::Epsv, reply(501), D::NotSupported),
            (C::Port, reply(500), D::NotSupported),
            (C::Port, reply(501), D::NotSupported),
            (C::Eprt, reply(504), D::NotSupported),
            (C::Mlsd, reply(500), D::NotSupported),
            (C::Mlsd, reply(502), D::NotSupported),
            (C::Size, reply(502), D::NotSupported),
            (C::Mdtm, reply(500), D::NotSupported),
            (C::Feat, reply(502), D::NotSupported),
            // Exception: RFC 2428 522 on EPSV/EPRT.
            (C::Epsv, reply(522), D::NotSupported),
            (C::Eprt, reply(522), D::NotSupported),
            (C::Port, reply(522), D::Permanent(P::Unlisted(code(522)))),
            // Exception: vsftpd's 550 for a disabled PASV/EPSV/PORT/EPRT.
            (C::Pasv, reply(550), D::NotSupported),
            (C::Epsv, reply(550), D::NotSupported),
            (C::Port, reply(550), D::NotSupported),
            (C::Eprt, reply(550), D::NotSupported),
            // ...but a 530 there still means the login was lost.
            (C::Pasv, reply(530), D::Permanent(P::Login)),
            // Transport failures: transient.
            (
                C::Other,
                Outcome::Transport(F::Refused),
                D::Transient(T::Transport(F::Refused)),
            ),
            (
                C::Other,
                Outcome::Transport(F::Unreachable),
                D::Transient(T::Transport(F::Unreachable)),
            ),
            (
                C::Retr,
                Outcome::Transport(F::Reset),
                D::Transient(T::Transport(F::Reset)),
            ),
            (
                C::Stor,
                Outcome::Transport(F::Eof),
                D::Transient(T::Transport(F::Eof)),
            ),
            (
                C::Pass,
                Outcome::Transport(F::Timeout),
                D::Transient(T::Transport(F::Timeout)),
            ),
            (
                C::Other,
                Outcome::Transport(F::Dns),
                D::Transient(T::Transport(F::Dns)),
            ),
            // A reply without a numeric code: protocol error, transient.
            (C::Nlst, Outcome::Malformed, D::Transient(T::Protocol)),
            (C::Pasv, Outcome::Malformed, D::Transient(T::Protocol)),
        ];
        for &(command, outcome, expected) in table {
            assert_eq!(
                classify(command, outcome),
                expected,
                "{command:?} {outcome:?}"
            );
        }
    }

    #[test]
    fn every_code_of_each_class_lands_in_that_class() {
        let commands = [
            C::User,
            C::Pass,
            C::Acct,
            C::Type,
            C::Mode,
            C::Stru,
            C::Cwd,
            C::Feat,
            C::Pasv,
            C::Epsv,
            C::Port,
            C::Eprt,
            C::Nlst,
            C::Mlsd,
            C::Size,
            C::Mdtm,
            C::Retr,
            C::Stor,
            C::Appe,
            C::Stou,
            C::Dele,
            C::Other,
        ];
        for command in commands {
            for n in 100..=599 {
                let d = classify(command, reply(n));
                let ok = match n / 100 {
                    1 => d == D::Preliminary,
                    2 => d == D::Done,
                    3 => matches!(d, D::Continue(_)),
                    4 => d.is_transient(),
                    5 if command == C::Stou && n == 553 => d.is_transient(),
                    _ => d.is_permanent() || d == D::NotSupported,
                };
                assert!(ok, "{command:?} {n} -> {d:?}");
            }
        }
    }

    #[test]
    fn connection_lost_kinds() {
        assert!(T::Reconnect.connection_lost());
        assert!(T::Protocol.connection_lost());
        assert!(T::Transport(TransportFailure::Eof).connection_lost());
        assert!(!T::DataConnection.connection_lost());
        assert!(!T::Storage.connection_lost());
        assert!(!T::Overridden(code(550)).connection_lost());
    }

    #[test]
    fn override_rejects_positive_codes_and_empty_patterns() {
        for n in [150, 226, 331] {
            assert!(matches!(
                ReplyOverride::new("*", code(n), TreatAs::Transient),
                Err(OverrideError::NotNegative { .. })
            ));
        }
        assert_eq!(
            ReplyOverride::new(" ", code(550), TreatAs::Transient),
            Err(OverrideError::EmptyHostPattern { code: code(550) })
        );
        assert!(ReplyOverride::new("[]", code(550), TreatAs::Transient).is_err());
        assert!(ReplyOverride::new("*", code(450), TreatAs::Permanent).is_ok());
    }

    #[test]
    fn host_pattern_table() {
        let table = [
            ("ftp.example.net", "ftp.example.net", true),
            ("ftp.example.net", "FTP.Example.NET", true),
            ("FTP.example.net", "ftp.example.net", true),
            ("ftp.example.net", "ftp.example.net.", true),
            ("*.example.net", "ftp.example.net", true),
            ("*.example.net", "a.b.example.net", true),
            ("*.example.net", "example.net", false),
            ("*.example.net", "ftp.example.org", false),
            ("ftp?.example.net", "ftp1.example.net", true),
            ("ftp?.example.net", "ftp.example.net", false),
            ("ftp?.example.net", "ftp12.example.net", false),
            ("*", "anything", true),
            ("10.0.*", "10.0.3.4", true),
            ("10.0.*", "10.1.3.4", false),
            ("[::1]", "::1", true),
            ("::1", "[::1]", true),
            ("*ex*le*", "ftp.example.net", true),
            (
                "a*a*a*a*b",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            ("ftp", "ftp.example.net", false),
        ];
        for (pattern, host, expected) in table {
            let rule = ReplyOverride::new(pattern, code(550), TreatAs::Transient).unwrap();
            assert_eq!(
                rule.applies_to(host, code(550)),
                expected,
                "{pattern} vs {host}"
            );
        }
    }

    #[test]
    fn overrides_apply_before_the_table() {
        let overrides = [
            ReplyOverride::new("old.example.net", code(550), TreatAs::Transient).unwrap(),
            ReplyOverride::new("*.example.net", code(550), TreatAs::Permanent).unwrap(),
            ReplyOverride::new("*.example.net", code(450), TreatAs::Permanent).unwrap(),
            ReplyOverride::new("*", code(502), TreatAs::Transient).unwrap(),
        ];
        let table: &[(&str, CommandKind, Outcome, Disposition)] = &[
            // The first matching override wins.
            (
                "old.example.net",
                C::Retr,
                reply(550),
                D::Transient(T::Overridden(code(550))),
            ),
            (
                "new.example.net",
                C::Retr,
                reply(550),
                D::Permanent(P::Overridden(code(550))),
            ),
            (
                "new.example.net",
                C::Retr,
                reply(450),
                D::Permanent(P::Overridden(code(450))),
            ),
            // No override for this host or this code: the table.
            (
                "ftp.example.org",
                C::Retr,
                reply(550),
                D::Permanent(P::FileUnavailable),
            ),
            (
                "old.example.net",
                C::Retr,
                reply(553),
                D::Permanent(P::NameNotAllowed),
            ),
            ("old.example.net", C::Retr, reply(226), D::Done),
            // An override wins over a fallback exception too.
            (
                "ftp.example.org",
                C::Pasv,
                reply(502),
                D::Transient(T::Overridden(code(502))),
            ),
            // Never for transport failures or code-less replies.
            (
                "old.example.net",
                C::Retr,
                Outcome::Transport(TransportFailure::Reset),
                D::Transient(T::Transport(TransportFailure::Reset)),
            ),
            (
                "old.example.net",
                C::Nlst,
                Outcome::Malformed,
                D::Transient(T::Protocol),
            ),
        ];
        for &(host, command, outcome, expected) in table {
            assert_eq!(
                classify_for_host(host, &overrides, command, outcome),
                expected,
                "{host} {command:?} {outcome:?}"
            );
        }
        assert_eq!(
            classify_for_host("x", &[], C::Retr, reply(550)),
            classify(C::Retr, reply(550))
        );
    }
}
