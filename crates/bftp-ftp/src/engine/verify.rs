//! `bftp verify` (RULES.md §7), run from the daemon, the vantage point of the real
//! transfer: log in to both servers, check TYPE/MODE/STRU, that the source exists (or
//! what a wildcard matches now), that the destination directory exists, and the data
//! path the job would take (SPEC §14, [`DataPathVerdict`]): for `fxp` and `auto`, that
//! one side accepts PASV and the other a PORT to it (under `auto`, a pair that refuses
//! that in both role orders is relayed, if both servers accept passive mode); for
//! `relay`, that both servers accept PASV or EPSV (bftpd connects to each). Nothing is
//! transferred: a PORT accepted with 200, a PASV announced, is as far as it goes.

use std::net::SocketAddr;
use std::sync::Arc;

use bftp_core::reply::{CommandKind, Disposition};
use bftp_core::route::DataPath;
use bftp_core::{has_wildcard, FtpParams};

use super::transfer::FXP_SETTINGS;
use super::{Pair, SizeAnswer};
use crate::limits::{AddressCheck, Limits, ServerLogin};
use crate::parse::{eprt_argument, is_privileged_port, parse_epsv, parse_pasv, port_argument};
use crate::session::Session;
use crate::transcript::{Recorder, Side, Transcript};

/// What to verify: the job's two paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyRequest {
    /// The source file, or a wildcard in its last component.
    pub source_path: String,
    /// The destination file or directory (`""`: the login directory).
    pub destination_path: String,
    /// How the destination would be written (a hash proof needs a whole file).
    pub dest_command: bftp_core::DestCommand,
    /// The weakest proof the job accepts, if it requires one.
    pub proof: Option<bftp_core::proof::ProofLevel>,
    /// The source path is a directory tree (a recursive job): it is listed, not sized.
    pub recursive: bool,
    /// The data path the job would run with (what it asked for, else the daemon's default,
    /// as `bftp_core::route::admit` settles it): what the data connection check looks for.
    pub data_path: DataPath,
}

/// How a copy of the job would travel, as `verify` found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WouldTake {
    /// Third party, PASV to the source and PORT to the destination.
    Fxp,
    /// Third party, PASV to the destination and PORT to the source.
    FxpRolesSwapped,
    /// Through bftpd.
    Relay,
    /// No way: a copy could not start, the job would fail.
    None,
}

impl WouldTake {
    /// `fxp`, `fxp_roles_swapped`, `relay`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            WouldTake::Fxp => "fxp",
            WouldTake::FxpRolesSwapped => "fxp_roles_swapped",
            WouldTake::Relay => "relay",
            WouldTake::None => "none",
        }
    }
}

/// Why a copy would travel the way [`WouldTake`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathReason {
    /// One server accepted PASV and the other a PORT to it.
    Accepted,
    /// The job's path is `relay`, and both servers accept passive mode.
    Asked,
    /// The path is `auto` and the servers refused the third party in both role orders: a
    /// relay (the refusals are the detail).
    Refused,
    /// The servers refused the third party in both role orders, and the path (`fxp`)
    /// allows no relay.
    FxpOnly,
    /// A relay needs passive mode (PASV or EPSV) on both servers, and one refused it.
    NoPassive,
}

impl PathReason {
    /// `accepted`, `asked`, `refused`, `fxp_only`, `no_passive`.
    pub fn as_str(self) -> &'static str {
        match self {
            PathReason::Accepted => "accepted",
            PathReason::Asked => "asked",
            PathReason::Refused => "refused",
            PathReason::FxpOnly => "fxp_only",
            PathReason::NoPassive => "no_passive",
        }
    }
}

/// Which way the job's bytes would go, and why (SPEC §14: `verify` says which path the job
/// would take and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPathVerdict {
    /// The path checked ([`VerifyRequest::data_path`]).
    pub path: DataPath,
    pub would_take: WouldTake,
    pub reason: PathReason,
    /// The replies behind the reason (for `refused`, the refusals), for people; empty when
    /// there is nothing to add.
    pub detail: String,
}

/// One check and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub checks: Vec<Check>,
    pub transcript: Transcript,
    /// The data path the job would take; `None` when the checks stopped before it (a login
    /// or TYPE/MODE/STRU failed).
    pub data_path: Option<DataPathVerdict>,
}

impl VerifyReport {
    /// Whether every check passed.
    pub fn ok(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.ok)
    }

    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

pub const CHECK_SOURCE_LOGIN: &str = "source login";
pub const CHECK_DESTINATION_LOGIN: &str = "destination login";
pub const CHECK_SOURCE_PARAMS: &str = "source TYPE/MODE/STRU";
pub const CHECK_DESTINATION_PARAMS: &str = "destination TYPE/MODE/STRU";
pub const CHECK_SOURCE_FILE: &str = "source file";
pub const CHECK_DESTINATION_DIRECTORY: &str = "destination directory";
pub const CHECK_DATA_CONNECTION: &str = "third-party data connection";
/// The check of a `relay` job's data path: both servers accept passive mode.
pub const CHECK_RELAY_CONNECTIONS: &str = "relay data connections";
pub const CHECK_PROOF: &str = "proof";

fn check(name: &str, ok: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.to_owned(),
        ok,
        detail: detail.into(),
    }
}

/// Verify a job against the real servers (see the module docs). Never fails: every
/// problem is a failed [`Check`].
pub async fn verify(
    src: &ServerLogin,
    dst: &ServerLogin,
    params: FtpParams,
    limits: &Limits,
    addr_check: Arc<dyn AddressCheck>,
    request: &VerifyRequest,
) -> VerifyReport {
    let recorder = Recorder::new(limits.transcript, ServerLogin::scrubber(&[src, dst]));
    let mut checks = Vec::new();
    let (s, d) = tokio::join!(
        Session::connect(Side::Source, src, limits, &*addr_check, recorder.clone()),
        Session::connect(
            Side::Destination,
            dst,
            limits,
            &*addr_check,
            recorder.clone()
        ),
    );
    for (name, login, result) in [
        (CHECK_SOURCE_LOGIN, src, &s),
        (CHECK_DESTINATION_LOGIN, dst, &d),
    ] {
        checks.push(match result {
            Ok(_) => check(
                name,
                true,
                format!(
                    "logged in to {}:{} as {}",
                    login.host, login.port, login.user
                ),
            ),
            Err(error) => check(name, false, error.to_string()),
        });
    }
    let (Ok(s), Ok(d)) = (s, d) else {
        return VerifyReport {
            checks,
            transcript: recorder.take(),
            data_path: None,
        };
    };
    let mut pair = Pair::from_sessions(s, d, src, dst, params, limits, addr_check, recorder);

    let mut data_path = None;
    let mut params_ok = true;
    for (name, side) in [
        (CHECK_SOURCE_PARAMS, Side::Source),
        (CHECK_DESTINATION_PARAMS, Side::Destination),
    ] {
        match pair.set_params(side).await {
            Ok(()) => checks.push(check(
                name,
                true,
                format!(
                    "TYPE {}, MODE {}, STRU {} accepted",
                    params.transfer_type, params.mode, params.structure
                ),
            )),
            Err(error) => {
                params_ok = false;
                checks.push(check(name, false, error.to_string()));
            }
        }
    }
    if params_ok && pair.is_usable() {
        checks.push(if request.recursive {
            source_tree(&mut pair, &request.source_path).await
        } else {
            source_file(&mut pair, &request.source_path).await
        });
        checks.push(destination_directory(&mut pair, &request.destination_path).await);
        checks.extend(pair.tls_checks().await);
        let (check, verdict) = data_path_check(&mut pair, request.data_path).await;
        checks.push(check);
        data_path = Some(verdict);
        checks.push(proof_check(&mut pair, params, request).await);
    }
    let transcript = pair.recorder.take();
    pair.close().await;
    VerifyReport {
        checks,
        transcript,
        data_path,
    }
}

/// Which proof the pair allows each copy, and whether it meets the job's requirement.
async fn proof_check(pair: &mut Pair, params: FtpParams, request: &VerifyRequest) -> Check {
    let plan = pair
        .proof_plan(params.transfer_type, request.dest_command)
        .await;
    let image = params.transfer_type == bftp_core::TransferType::Image;
    let may_relay = request.data_path.may_relay();
    match bftp_core::proof::require_or_relay(request.proof, &plan, may_relay, image) {
        Ok(false) => check(CHECK_PROOF, true, plan.describe()),
        Ok(true) => check(
            CHECK_PROOF,
            true,
            format!(
                "hash, by relaying each copy with its stream hashed (SHA-256): the servers can give only {}",
                plan.describe()
            ),
        ),
        Err(why) => check(CHECK_PROOF, false, why),
    }
}

/// A recursive job's source: its top directory lists (MLSD, or LIST where there is none).
async fn source_tree(pair: &mut Pair, path: &str) -> Check {
    let dir = path.trim_end_matches('/');
    match pair.list_dir(dir).await {
        Ok(listing) => {
            let dirs = listing
                .entries
                .iter()
                .filter(|e| e.kind == super::TreeKind::Dir)
                .count();
            check(
                CHECK_SOURCE_FILE,
                true,
                format!(
                    "directory {:?} lists {} entries ({dirs} directories) by {:?}",
                    display_dir(dir),
                    listing.entries.len(),
                    listing.method
                ),
            )
        }
        Err(e) => check(CHECK_SOURCE_FILE, false, e.to_string()),
    }
}

async fn source_file(pair: &mut Pair, path: &str) -> Check {
    let (dir, name) = match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    };
    if has_wildcard(name) {
        return match pair.list_source(dir, name).await {
            Ok(listing) if listing.members.is_empty() => check(
                CHECK_SOURCE_FILE,
                false,
                format!("no file in {:?} matches {name:?} now", display_dir(dir)),
            ),
            Ok(listing) => {
                let names: Vec<&str> = listing.members.iter().map(|m| m.name.as_str()).collect();
                let shown = names
                    .iter()
                    .take(20)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                let more = names.len().saturating_sub(20);
                let mut detail = format!("{name:?} matches {} file(s) now: {shown}", names.len());
                if more > 0 {
                    detail.push_str(&format!(" and {more} more"));
                }
                if !listing.rejected.is_empty() {
                    detail.push_str(&format!(
                        "; {} listing line(s) refused as unsafe names",
                        listing.rejected.len()
                    ));
                }
                check(CHECK_SOURCE_FILE, true, detail)
            }
            Err(error) => check(CHECK_SOURCE_FILE, false, error.to_string()),
        };
    }
    match pair.size_answer(Side::Source, path).await {
        SizeAnswer::Size(size) => check(
            CHECK_SOURCE_FILE,
            true,
            format!("{path:?} exists, {size} bytes"),
        ),
        SizeAnswer::NoFile(result) => check(
            CHECK_SOURCE_FILE,
            false,
            format!("{path:?}: SIZE answered {}", describe(&result)),
        ),
        SizeAnswer::Failed(result, _) => check(
            CHECK_SOURCE_FILE,
            false,
            format!("{path:?}: SIZE: {}", describe(&result)),
        ),
        SizeAnswer::Unavailable(reason) => {
            // No SIZE: MDTM, then the listing.
            let result = pair.exchange(Side::Source, &format!("MDTM {path}")).await;
            if pair.classify(Side::Source, CommandKind::Mdtm, &result) == Disposition::Done {
                return check(CHECK_SOURCE_FILE, true, format!("{path:?} exists (MDTM)"));
            }
            match pair.list_source(dir, &escape_glob(name)).await {
                Ok(listing) if !listing.members.is_empty() => check(
                    CHECK_SOURCE_FILE,
                    true,
                    format!("{path:?} is listed ({reason})"),
                ),
                Ok(_) => check(
                    CHECK_SOURCE_FILE,
                    false,
                    format!("{path:?} is not in the listing of {:?}", display_dir(dir)),
                ),
                Err(error) => check(CHECK_SOURCE_FILE, false, error.to_string()),
            }
        }
    }
}

async fn destination_directory(pair: &mut Pair, path: &str) -> Check {
    let home = pair.home(Side::Destination).await;
    let back = home
        .as_ref()
        .map(|h| format!("CWD {h}"))
        .unwrap_or_else(|| "CDUP".into());
    let mut candidates = Vec::new();
    if !path.is_empty() {
        candidates.push((path.to_owned(), "is a directory".to_owned()));
    }
    let (dir, file) = match path.trim_end_matches('/').rfind('/') {
        Some(0) => ("/".to_owned(), &path[1..]),
        Some(i) => (path[..i].to_owned(), &path[i + 1..]),
        None => (String::new(), path),
    };
    if dir.is_empty() {
        if path.is_empty() {
            return check(
                CHECK_DESTINATION_DIRECTORY,
                true,
                "the login directory".to_owned(),
            );
        }
    } else {
        candidates.push((dir.clone(), format!("exists (the file will be {file:?})")));
    }
    let mut last = String::new();
    for (candidate, what) in candidates {
        let result = pair
            .exchange(Side::Destination, &format!("CWD {candidate}"))
            .await;
        if pair.classify(Side::Destination, CommandKind::Cwd, &result) == Disposition::Done {
            let result = pair.exchange(Side::Destination, &back).await;
            if !matches!(&result, Ok(r) if r.code().get() / 100 == 2) {
                pair.dst.close("could not return to the login directory");
            }
            return check(
                CHECK_DESTINATION_DIRECTORY,
                true,
                format!("{candidate:?} {what}"),
            );
        }
        last = format!("CWD {candidate} answered {}", describe(&result));
    }
    if dir.is_empty() {
        // A plain file name in the login directory.
        return check(
            CHECK_DESTINATION_DIRECTORY,
            true,
            format!("the login directory (the file will be {path:?})"),
        );
    }
    check(CHECK_DESTINATION_DIRECTORY, false, last)
}

/// The data path `path` would take. `relay`: PASV (or EPSV) on both sides, no PORT. `fxp`
/// and `auto`: PASV on one side, PORT (or EPRT) to that address on the other, first source
/// passive, then the other way round; both refused, `auto` relays if both sides accepted
/// passive mode, `fxp` fails. No transfer is started.
async fn data_path_check(pair: &mut Pair, path: DataPath) -> (Check, DataPathVerdict) {
    let verdict = |would_take, reason, detail: &str| DataPathVerdict {
        path,
        would_take,
        reason,
        detail: detail.to_owned(),
    };
    let mut refusals = Vec::new();
    if path == DataPath::Relay {
        let mut passive = Vec::new();
        for side in [Side::Source, Side::Destination] {
            passive.push(passive_address(pair, side, &mut refusals).await.is_some());
        }
        if passive.iter().all(|ok| *ok) {
            return (
                check(
                    CHECK_RELAY_CONNECTIONS,
                    true,
                    "the source and the destination accept passive mode: bftpd would open a \
                     data connection to each and move the bytes itself; whether they accept \
                     it shows only in a transfer",
                ),
                verdict(WouldTake::Relay, PathReason::Asked, ""),
            );
        }
        let refused = refusals.join("; ");
        return (
            check(
                CHECK_RELAY_CONNECTIONS,
                false,
                format!("{refused}: a relay needs passive mode (PASV or EPSV) on both servers"),
            ),
            verdict(WouldTake::None, PathReason::NoPassive, &refused),
        );
    }
    let mut passive_ok = [false; 2];
    for (i, passive) in [Side::Source, Side::Destination].into_iter().enumerate() {
        let active = passive.other();
        let Some(data) = passive_address(pair, passive, &mut refusals).await else {
            continue;
        };
        passive_ok[i] = true;
        let mut lines = Vec::new();
        if let Ok(arg) = port_argument(data) {
            lines.push(format!("PORT {arg}"));
        }
        lines.push(format!("EPRT {}", eprt_argument(data)));
        for line in lines {
            let result = pair.exchange(active, &line).await;
            let kind = CommandKind::from_verb(&super::verb(&line));
            if pair.classify(active, kind, &result) == Disposition::Done {
                let (order, would_take) = if passive == Side::Source {
                    (
                        "the source accepts PASV and the destination a PORT to it".to_owned(),
                        WouldTake::Fxp,
                    )
                } else {
                    (
                        format!(
                            "roles swapped: the destination accepts PASV and the source a PORT \
                             to it ({})",
                            refusals.join("; ")
                        ),
                        WouldTake::FxpRolesSwapped,
                    )
                };
                return (
                    check(
                        CHECK_DATA_CONNECTION,
                        true,
                        format!(
                            "{order}; whether the passive server accepts the data connection \
                             from the other shows only in a transfer"
                        ),
                    ),
                    verdict(would_take, PathReason::Accepted, &order),
                );
            }
            refusals.push(format!(
                "the {active} answered {} with {}",
                super::verb(&line),
                describe(&result)
            ));
        }
    }
    let refused = refusals.join("; ");
    match path {
        DataPath::Auto if passive_ok == [true, true] => (
            check(
                CHECK_DATA_CONNECTION,
                true,
                format!(
                    "{refused}: the job would relay through bftpd (data path auto; both \
                     servers accept passive mode)"
                ),
            ),
            verdict(WouldTake::Relay, PathReason::Refused, &refused),
        ),
        DataPath::Auto => (
            check(
                CHECK_DATA_CONNECTION,
                false,
                format!(
                    "{refused}. {FXP_SETTINGS}; and no relay: it needs passive mode (PASV or \
                     EPSV) on both servers"
                ),
            ),
            verdict(WouldTake::None, PathReason::NoPassive, &refused),
        ),
        _ => (
            check(
                CHECK_DATA_CONNECTION,
                false,
                format!("{refused}. {FXP_SETTINGS}; or give the job data path auto or relay"),
            ),
            verdict(WouldTake::None, PathReason::FxpOnly, &refused),
        ),
    }
}

/// PASV (or, for IPv6 and where PASV is refused, EPSV) on `passive`: the address it
/// announced (its control connection's peer with the port it named, RFC 2577), or `None`
/// with why in `refusals`.
async fn passive_address(
    pair: &mut Pair,
    passive: Side,
    refusals: &mut Vec<String>,
) -> Option<SocketAddr> {
    let peer_ip = pair.session(passive).peer().ip().to_canonical();
    for command in ["PASV", "EPSV"] {
        if command == "PASV" && peer_ip.is_ipv6() {
            continue;
        }
        let result = pair.exchange(passive, command).await;
        let Ok(reply) = &result else {
            refusals.push(format!("{command} to the {passive}: {}", describe(&result)));
            return None;
        };
        if pair.classify(passive, CommandKind::from_verb(command), &result) != Disposition::Done {
            refusals.push(format!("the {passive} answered {command} with {reply}"));
            continue;
        }
        let port = if command == "PASV" {
            reply.parse_numbers(parse_pasv).map(|a| a.port())
        } else {
            reply.parse_numbers(parse_epsv)
        };
        match port {
            Ok(port) if !is_privileged_port(port) => return Some(SocketAddr::new(peer_ip, port)),
            Ok(port) => refusals.push(format!(
                "the {passive} announced the privileged port {port} (refused, RFC 2577)"
            )),
            Err(e) => refusals.push(format!("the {passive}'s {command} reply: {e}")),
        }
        return None;
    }
    None
}

fn display_dir(dir: &str) -> &str {
    if dir.is_empty() {
        "."
    } else {
        dir
    }
}

/// A literal name as a pattern for [`crate::parse::glob_match`].
fn escape_glob(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '*' | '?' | '[' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn describe(result: &Result<crate::parse::Reply, crate::session::SessionError>) -> String {
    match result {
        Ok(reply) => reply.to_string(),
        Err(error) => error.to_string(),
    }
}
