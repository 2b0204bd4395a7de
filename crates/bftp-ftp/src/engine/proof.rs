//! The proof step after a copy: which proof the pair can give ([`Pair::proof_plan`], from both
//! servers' FEAT, by `bftp_core::proof::plan`) and the digests of both files
//! ([`Pair::prove_hash`]). Kept apart from the copy's own command sequence (`transfer.rs`):
//! the caller copies, then proves.
//!
//! Hashing a large file takes the server time: the reply to HASH or XSHA256 may come after
//! minutes (proFTPD sends `213-Computing...` lines first). Its deadline grows with the file's
//! size, [`hash_wait`], and is never unbounded.

use std::time::Duration;

use bftp_core::proof::{self, Algorithm, Capabilities, HashCommand, HashPlan, Plan};
use bftp_core::reply::{classify_for_host, CommandKind, Disposition, Outcome};
use bftp_core::{DestCommand, TransferType};
use tokio::time::Instant;

use super::{index, LastReply, Pair};
use crate::limits::Limits;
use crate::parse::digest::{capabilities, parse_hash_reply, parse_x_reply};
use crate::parse::Reply;
use crate::session::{Session, SessionError};
use crate::transcript::Side;

/// The slowest hashing rate a server is granted: the reply to a hash command may take the
/// reply timeout plus the file's size at this rate (capped by the transfer timeout).
pub const HASH_RATE_FLOOR: u64 = 4 * 1024 * 1024;

/// What the pair learnt for proofs, per session: FEAT's capabilities and the algorithm `OPTS
/// HASH` last selected. Forgotten when a session is opened again.
#[derive(Debug, Default, Clone)]
pub(super) struct ProofState {
    caps: [Option<Capabilities>; 2],
    selected: [Option<Algorithm>; 2],
}

impl ProofState {
    /// Whether `side`'s capabilities are known (its FEAT was read since it was opened).
    pub(super) fn knows(&self, side: Side) -> bool {
        self.caps[index(side)].is_some()
    }

    pub(super) fn forget(&mut self, side: Side) {
        self.caps[index(side)] = None;
        self.selected[index(side)] = None;
    }
}

/// What the digests of a copy said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashProof {
    /// Both servers gave the same digest.
    Equal {
        algorithm: Algorithm,
        digest: String,
    },
    /// The digests differ: the destination file is not the source's.
    Mismatch {
        algorithm: Algorithm,
        source: String,
        destination: String,
    },
    /// A server could not be asked or gave no readable digest: no hash proof, and why.
    Failed {
        side: Side,
        reason: String,
        disposition: Disposition,
    },
}

/// How long a server may take to answer a hash command over a file of `size` bytes.
pub fn hash_wait(limits: &Limits, size: Option<u64>) -> Duration {
    let hashing = match size {
        Some(size) => Duration::from_secs(size / HASH_RATE_FLOOR),
        None => limits.transfer_timeout,
    };
    (limits.reply_timeout + hashing).min(limits.transfer_timeout.max(limits.reply_timeout))
}

impl Pair {
    /// Whether the proof step after a copy of `transfer_type` written with `dest` sends
    /// nothing: both sessions' capabilities are known and the plan asks no digest. Only then
    /// may the next copy's first commands travel ahead (pipelining): a command sent between
    /// two copies would otherwise read a reply meant for the next copy.
    ///
    /// Unknown capabilities count as quiet: a caller that proves copies learns them before
    /// its first copy ([`Pair::proof_known`], [`Pair::proof_plan`]); one that asks later still
    /// stays in step, since asking settles what went ahead first (at the price of calling a
    /// started transfer off).
    pub(super) fn proof_is_quiet(&self, transfer_type: TransferType, dest: DestCommand) -> bool {
        match &self.proof.caps {
            [Some(src), Some(dst)] => proof::plan(src, dst, transfer_type, dest).hash.is_none(),
            _ => true,
        }
    }

    /// Whether both sessions' proof capabilities are known (asked since they were opened).
    pub fn proof_known(&self) -> bool {
        self.proof.caps.iter().all(Option::is_some)
    }

    /// FEAT's proof capabilities of `side`, asked once per session (the source's FEAT is the
    /// listing's).
    pub async fn capabilities(&mut self, side: Side) -> Capabilities {
        if let Some(caps) = &self.proof.caps[index(side)] {
            return caps.clone();
        }
        // A command between copies: steps taken ahead for a next copy are settled first.
        self.before_action().await;
        self.ask_features(side).await;
        self.proof.caps[index(side)].clone().unwrap_or_default()
    }

    /// FEAT of `side`, asked alone now, and learnt ([`Pair::learn_features`]).
    pub(super) async fn ask_features(&mut self, side: Side) -> Vec<String> {
        let result = self.exchange(side, "FEAT").await;
        let lines = super::feat_lines(&result, self.classify(side, CommandKind::Feat, &result));
        self.learn_features(side, lines.clone());
        lines
    }

    /// What `side`'s FEAT answered (nothing, when refused): its proof capabilities, and for
    /// the source also the listing's features.
    pub(super) fn learn_features(&mut self, side: Side, lines: Vec<String>) {
        self.proof.caps[index(side)] = Some(capabilities(&lines));
        self.rest_stream[index(side)] = Some(lines.iter().any(|l| {
            let l = l.trim().to_ascii_uppercase();
            l == "REST STREAM" || l.starts_with("REST STREAM ")
        }));
        if side == Side::Source {
            self.source_features = Some(lines);
        }
    }

    /// The strongest proof this pair can give a copy of `transfer_type` written with `dest`.
    pub async fn proof_plan(&mut self, transfer_type: TransferType, dest: DestCommand) -> Plan {
        let src = self.capabilities(Side::Source).await;
        let dst = self.capabilities(Side::Destination).await;
        proof::plan(&src, &dst, transfer_type, dest)
    }

    /// The digests of `source_path` and `dest_path` (the file a copy just wrote), both servers
    /// asked at once, as `plan` says; `size` is the file's size, for how long hashing may take.
    pub async fn prove_hash(
        &mut self,
        plan: &HashPlan,
        source_path: &str,
        dest_path: &str,
        size: Option<u64>,
    ) -> HashProof {
        if let Some(reason) = self.dead_reason() {
            return HashProof::Failed {
                side: Side::Source,
                reason,
                disposition: super::outcome::connection_gone(),
            };
        }
        self.before_action().await;
        let wait = hash_wait(&self.limits, size);
        let limits = &self.limits;
        let [src_host, dst_host] = [&self.logins[0].host, &self.logins[1].host];
        let [src_sel, dst_sel] = &mut self.proof.selected;
        let (src, dst) = (&mut self.src, &mut self.dst);
        let a = plan.algorithm;
        let (s, d) = tokio::join!(
            digest_on(
                src,
                src_sel,
                src_host,
                limits,
                wait,
                a,
                plan.source,
                source_path
            ),
            digest_on(
                dst,
                dst_sel,
                dst_host,
                limits,
                wait,
                a,
                plan.destination,
                dest_path
            ),
        );
        let (s, s_last) = s;
        let (d, d_last) = d;
        for (i, last) in [s_last, d_last].into_iter().enumerate() {
            if let Some(last) = last {
                self.last[i] = Some(last);
            }
        }
        match (s, d) {
            (Ok(source), Ok(destination)) => {
                if proof::digests_match(a, &source, &destination) {
                    HashProof::Equal {
                        algorithm: a,
                        digest: source,
                    }
                } else {
                    self.note(
                        Side::Destination,
                        &format!("{a} digests differ: source {source}, destination {destination}"),
                    );
                    HashProof::Mismatch {
                        algorithm: a,
                        source,
                        destination,
                    }
                }
            }
            (Err((reason, disposition)), _) => HashProof::Failed {
                side: Side::Source,
                reason,
                disposition,
            },
            (_, Err((reason, disposition))) => HashProof::Failed {
                side: Side::Destination,
                reason,
                disposition,
            },
        }
    }
}

/// The digest of `path` on one session, by `command` (`OPTS HASH` first where this session
/// has not selected `algorithm` yet), within `wait`. Borrows one session only, so that both
/// sides are asked at once.
#[allow(clippy::too_many_arguments)]
async fn digest_on(
    session: &mut Session,
    selected: &mut Option<Algorithm>,
    host: &str,
    limits: &Limits,
    wait: Duration,
    algorithm: Algorithm,
    command: HashCommand,
    path: &str,
) -> (Result<String, (String, Disposition)>, Option<LastReply>) {
    // HASH answers as SIZE does: 213, 550 for no such file, 500/502 where it is not offered.
    let classify = |result: &Result<Reply, SessionError>| {
        let outcome = match result {
            Ok(reply) => Outcome::Reply(reply.code()),
            Err(error) => error.outcome(),
        };
        classify_for_host(host, &limits.overrides, CommandKind::Size, outcome)
    };
    async fn ask(
        session: &mut Session,
        line: &str,
        deadline: Instant,
    ) -> (Result<Reply, SessionError>, LastReply) {
        let result = match session.send(line).await {
            Ok(()) => session.read_reply_until(deadline).await,
            Err(e) => Err(e),
        };
        let verb = super::verb(line);
        let last = match &result {
            Ok(reply) => LastReply::from_reply(&verb, reply),
            Err(error) => LastReply::from_error(&verb, error),
        };
        (result, last)
    }
    let failed = |line: &str, result: &Result<Reply, SessionError>, d: Disposition| {
        let why = match result {
            Ok(reply) => format!("{line} answered {reply}"),
            Err(error) => format!("{line}: {error}"),
        };
        (why, d)
    };
    let line = match command {
        HashCommand::Hash => {
            if *selected != Some(algorithm) {
                let opts = format!("OPTS HASH {}", algorithm.hash_name());
                let (result, l) = ask(session, &opts, Instant::now() + limits.reply_timeout).await;
                match classify(&result) {
                    Disposition::Done => *selected = Some(algorithm),
                    d => {
                        *selected = None;
                        return (Err(failed(&opts, &result, d)), Some(l));
                    }
                }
            }
            format!("HASH {path}")
        }
        HashCommand::X => format!("{} {path}", algorithm.x_command()),
    };
    let (result, last) = ask(session, &line, Instant::now() + wait).await;
    let digest = match (classify(&result), &result) {
        (Disposition::Done, Ok(reply)) => {
            let parsed = match command {
                HashCommand::Hash => reply.parse_numbers(|t| parse_hash_reply(t, algorithm)),
                HashCommand::X => reply.parse_numbers(|t| parse_x_reply(t, algorithm)),
            };
            parsed.map_err(|e| {
                (
                    format!("{line}: {e}"),
                    Disposition::Transient(bftp_core::reply::TransientKind::Protocol),
                )
            })
        }
        (d, _) => Err(failed(&line, &result, d)),
    };
    (digest, Some(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_may_take_longer_for_larger_files_but_never_forever() {
        let limits = Limits {
            reply_timeout: Duration::from_secs(120),
            transfer_timeout: Duration::from_secs(6 * 3600),
            ..Limits::default()
        };
        assert_eq!(hash_wait(&limits, Some(0)), Duration::from_secs(120));
        assert_eq!(
            hash_wait(&limits, Some(100 * HASH_RATE_FLOOR)),
            Duration::from_secs(220)
        );
        assert_eq!(hash_wait(&limits, None), Duration::from_secs(6 * 3600));
        assert_eq!(
            hash_wait(&limits, Some(u64::MAX)),
            Duration::from_secs(6 * 3600)
        );
    }
}
