//! One third-party copy as an explicit state machine ([`Phase`]), RULES.md §6.
//!
//! The rule behind the order of commands: command the *active* side (the one that
//! was given PORT and connects) first and wait for its preliminary reply, then the
//! *passive* side. Passive servers answer 150 only once the data connection has
//! arrived (measured on vsftpd 3.0.3, proFTPD 1.3.8 and Pure-FTPd 1.0.50), so waiting
//! for the passive side first deadlocks; and a server blocked waiting for a data
//! connection ignores ABOR and even QUIT, so a silent server is closed, not asked.
//!
//! Default roles (RFC 1068 Figure 2): the source is passive (PASV, then RETR), the
//! destination active (PORT, then STOR/APPE/STOU). If the source lacks PASV, announces a
//! port below 1024, or the first order ends in a refusal of the foreign address, the roles
//! are swapped: PASV to the destination, PORT to the source, RETR first. A refusal in both
//! orders is the job-level [`JobFailure::FxpRefused`], with the server settings that allow
//! FXP, or [`JobFailure::NoPassiveMode`] when neither side offered a usable passive mode.
//!
//! Bounce protection (RFC 2577): PORT/EPRT always names the passive server's control
//! connection peer address with the port it announced; another host in a 227 reply is
//! noted and ignored; a port below 1024 is refused, and that side is not used as the
//! passive one: the other role order is tried.
//!
//! Evidence (RULES.md §4.2): success needs a final 2yz from both servers and, where SIZE
//! answers (in image type: proFTPD refuses SIZE in ASCII mode), equal sizes. The job's
//! TYPE is restored lazily: before the next data command, not after each SIZE.
//!
//! The watchdog ([`Limits::transfer_timeout`](crate::Limits)) bounds the whole copy;
//! when it expires both control connections are closed and the pair is dead.

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::time::SystemTime;

use bftp_core::evidence::{size_evidence, SizeEvidence, Written};
use bftp_core::reply::{CommandKind, Disposition, PermanentKind, TransientKind};
use bftp_core::{DestCommand, TransferType};
use tokio::time::Instant;

use super::outcome::{
    AttemptReport, CopyOutcome, Failure, Fallback, JobFailure, PairError, Progress, SizeCheck,
};
use super::pipeline::{may_pipeline, Ahead, Behind};
use super::{index, size_answer_of, CopyRequest, Pair, SizeAnswer};
use crate::parse::{
    check_argument, eprt_argument, is_privileged_port, parse_epsv, parse_pasv, port_argument,
    stou_file_name, validate_server_path, Reply,
};
use crate::session::SessionError;
use crate::transcript::Side;

/// The phases of one copy. `passive` names the side that was sent PASV/EPSV (the
/// other one is active: it gets PORT/EPRT and connects).
// One phase value lives at a time; boxing the final one would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Phase {
    /// SIZE of the source in image type, unless the request carries the size (asked by the
    /// caller just now): 213 (the size), 550 (no such file: this member fails for good before
    /// the destination is touched), 500/501/502/504 (no SIZE: no size
    /// evidence). For APPE also SIZE of the destination: 213 (the size before, the
    /// evidence RULES.md §4.3 wants), 550 (absent: 0). Then TYPE (200) back to the job's.
    /// For STOU, CWD (250) to the destination directory.
    Prepare,
    /// PASV (227) or EPSV (229) to the passive side. 500/501/502/504/550 mean "not
    /// offered": EPSV after PASV, then the other role order. 4yz: transient.
    Passive { passive: Side },
    /// PORT (200), or EPRT (200) when PORT is refused or the address is IPv6, to the
    /// active side with the passive server's control peer address. A 5yz to both is
    /// a refusal of the foreign address: the other role order. 4yz: transient.
    Port { passive: Side, data: SocketAddr },
    /// The active side's command first: STOR/APPE/STOU to the destination (default
    /// order) or RETR to the source (swapped). 125/150: it connected. 2yz: it is
    /// already done (tiny file). 4yz/5yz: this member fails (450/550 file
    /// unavailable, 451 local error, 452/552 storage, 553 name not allowed).
    ActiveStart { passive: Side },
    /// Then the passive side's command. 125/150: it accepted the data connection and
    /// the bytes flow. 425 (vsftpd, proFTPD) or silence (Pure-FTPd) from a server that
    /// refuses a data connection from a foreign host: the other role order. Other
    /// 4yz/5yz (550 no such file): this member fails.
    PassiveStart {
        passive: Side,
        active_final: Option<Reply>,
    },
    /// The final reply on both connections, until the watchdog: 226/250 done;
    /// 425/426/451 transient, 452 storage, 5yz permanent; silence: close both.
    Completion {
        passive: Side,
        active_final: Option<Reply>,
        passive_final: Option<Reply>,
    },
    /// SIZE (213) on both sides in image type, asked of both at once; equal sizes
    /// (APPE: before + source).
    Check,
    /// The attempt is over.
    Done(Result<CopyOutcome, PairError>),
}

/// Why one role order could not move bytes because a server refused a foreign
/// address: the evidence for [`JobFailure::FxpRefused`].
#[derive(Debug, Clone)]
enum Refusal {
    /// The active side refused PORT/EPRT to the passive server's address.
    Port {
        side: Side,
        host: String,
        line: String,
        reply: String,
    },
    /// The passive side refused the data connection from the active server.
    DataConnection {
        side: Side,
        host: String,
        command: String,
        reply: String,
    },
    /// The passive side said nothing after the active side connected (Pure-FTPd
    /// drops a foreign data connection and keeps waiting).
    Silence {
        side: Side,
        host: String,
        command: String,
    },
    /// Neither PASV nor EPSV on this side.
    NoPassive {
        side: Side,
        host: String,
        replies: String,
    },
    /// This side announced a data port below 1024, which PORT must not name (RFC 2577).
    PrivilegedPort {
        side: Side,
        host: String,
        command: String,
        port: u16,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Port {
                side,
                host,
                line,
                reply,
            } => write!(f, "the {side} server {host} refused {line}: {reply}"),
            Refusal::DataConnection {
                side,
                host,
                command,
                reply,
            } => write!(
                f,
                "the {side} server {host} refused the data connection from the other server: \
                 {command} answered {reply}"
            ),
            Refusal::Silence {
                side,
                host,
                command,
            } => write!(
                f,
                "the {side} server {host} did not answer {command} after the other server \
                 connected (Pure-FTPd waits silently when it refuses a foreign data connection)"
            ),
            Refusal::NoPassive {
                side,
                host,
                replies,
            } => write!(
                f,
                "the {side} server {host} offers no passive mode ({replies})"
            ),
            Refusal::PrivilegedPort {
                side,
                host,
                command,
                port,
            } => {
                let failure = Failure::PrivilegedPort {
                    side: *side,
                    host: host.clone(),
                    command: command.clone(),
                    port: *port,
                };
                write!(f, "{failure}")
            }
        }
    }
}

/// What to tell an operator whose servers refuse third-party transfers.
pub(crate) const FXP_SETTINGS: &str = "third-party (FXP) transfers need both servers to accept \
     a data connection to or from another host than the client: vsftpd \
     port_promiscuous=YES and pasv_promiscuous=YES, proFTPD AllowForeignAddress on, \
     Pure-FTPd -w (--allowuserfxp)";

/// How long an active side gets to end by itself once its partner refused outright.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) async fn run(pair: &mut Pair, request: &CopyRequest) -> Result<CopyOutcome, PairError> {
    let started = Instant::now();
    let hint = pair.next_hint.take();
    let ahead = match pair.ahead.take() {
        Some(ahead) if ahead.request == *request => Some(ahead),
        Some(other) => {
            pair.ahead = Some(other);
            pair.settle_ahead("another copy came first").await?;
            None
        }
        None => None,
    };
    pair.last = [None, None];
    pair.deadline = Some(started + pair.limits.transfer_timeout);
    pair.progress.send_replace(Progress::Preparing {
        path: request.source_path.clone(),
    });
    let mut attempt = Attempt {
        pair,
        request,
        started,
        report: AttemptReport::default(),
        orders: VecDeque::from([Side::Source, Side::Destination]),
        refusals: Vec::new(),
        source_size_asked: None,
        changed_directory: false,
        unannounced: None,
        ahead,
        hint,
        behind: None,
        passive_verb: "PASV",
        port_verb: "PORT",
        stor_sent: false,
        passive_sent: None,
    };
    let mut phase = Phase::Prepare;
    loop {
        tracing::trace!(?phase, "copy phase");
        phase = match phase {
            Phase::Prepare => attempt.prepare().await,
            Phase::Passive { passive } => attempt.passive(passive).await,
            Phase::Port { passive, data } => attempt.port(passive, data).await,
            Phase::ActiveStart { passive } => attempt.active_start(passive).await,
            Phase::PassiveStart {
                passive,
                active_final,
            } => attempt.passive_start(passive, active_final).await,
            Phase::Completion {
                passive,
                active_final,
                passive_final,
            } => {
                attempt
                    .completion(passive, active_final, passive_final)
                    .await
            }
            Phase::Check => attempt.check().await,
            Phase::Done(result) => return attempt.finish(result).await,
        };
    }
}

struct Attempt<'a> {
    pair: &'a mut Pair,
    request: &'a CopyRequest,
    started: Instant,
    report: AttemptReport,
    /// Passive sides of the role orders not yet tried.
    orders: VecDeque<Side>,
    refusals: Vec<Refusal>,
    /// The source's SIZE, asked by this copy right before the transfer: the source's side
    /// of the evidence, so that only the destination is asked afterwards.
    source_size_asked: Option<u64>,
    /// STOU: the destination session was moved into the target directory.
    changed_directory: bool,
    /// STOU: a name the destination announced that the caller has not been handed yet.
    unannounced: Option<String>,
    /// This copy's first steps, done ahead by the copy before it (`pipeline.rs`).
    ahead: Option<Ahead>,
    /// The copy the caller makes next, whose first commands this one may send ahead.
    hint: Option<CopyRequest>,
    /// What was sent behind this copy's RETR for the next one (replies owed on the source).
    behind: Option<Behind>,
    /// The passive and port commands that worked in this copy.
    passive_verb: &'static str,
    port_verb: &'static str,
    /// The data command to the active side went out already (behind its PORT).
    stor_sent: bool,
    /// The source's passive command, sent behind this copy's SIZE; its reply is owed
    /// until [`Attempt::passive`] reads it.
    passive_sent: Option<&'static str>,
}

impl Attempt<'_> {
    // ---- the phases ----

    async fn prepare(&mut self) -> Phase {
        for (path, what) in [
            (&self.request.source_path, "source path"),
            (&self.request.dest_path, "destination path"),
        ] {
            if let Err(error) = check_argument(path) {
                let failure = Failure::BadPath {
                    path: path.clone(),
                    error,
                };
                self.pair.note(Side::Source, &format!("{what}: {failure}"));
                return self.permanent(PermanentKind::NameNotAllowed, failure);
            }
        }

        let source_path = self.request.source_path.clone();
        // Asked by the caller just now: not asked again, and then not evidence (the source
        // is asked again after the transfer). Asked here, moments before the RETR,
        // the answer is the source's side of the evidence.
        let known = self.request.source_size;
        let ahead_size = self.ahead.as_ref().map(|a| a.source_size);
        match match (known, ahead_size) {
            (Some(size), _) => SizeAnswer::Size(size),
            // Asked behind the previous copy's RETR, before this copy's STOR.
            (None, Some(size)) => SizeAnswer::Size(size),
            (None, None) => self.size_with_passive(&source_path).await,
        } {
            SizeAnswer::Size(size) => {
                if known.is_none() {
                    self.source_size_asked = Some(size);
                }
            }
            SizeAnswer::NoFile(result) => {
                return self.fail(Side::Source, &format!("SIZE {source_path}"), result, None)
            }
            SizeAnswer::Unavailable(reason) => self.fallback(Fallback::SizeUnavailable {
                side: Side::Source,
                reason,
            }),
            SizeAnswer::Failed(result, disposition) => {
                return self.fail(Side::Source, "SIZE", result, Some(disposition))
            }
        }

        if self.request.dest_command == DestCommand::Append {
            let dest_path = self.request.dest_path.clone();
            match self.pair.size_answer(Side::Destination, &dest_path).await {
                SizeAnswer::Size(size) => self.report.destination_size_before = Some(size),
                SizeAnswer::NoFile(_) => {
                    self.pair.note(
                        Side::Destination,
                        "no destination file yet: APPE creates it",
                    );
                    self.report.destination_size_before = Some(0);
                }
                SizeAnswer::Unavailable(reason) => self.fallback(Fallback::SizeUnavailable {
                    side: Side::Destination,
                    reason,
                }),
                SizeAnswer::Failed(result, disposition) => {
                    return self.fail(Side::Destination, "SIZE", result, Some(disposition))
                }
            }
        }

        let job_type = self.pair.params.transfer_type;
        if let Some(ahead) = &self.ahead {
            // Only image-type jobs pipeline, and both sides are in it (SIZE needs it): no
            // TYPE goes between the commands sent ahead and their replies.
            if self.pair.types == [Some(job_type), Some(job_type)] {
                let (data, verb) = (ahead.data, ahead.passive_verb);
                self.passive_verb = verb;
                self.orders.retain(|&side| side != Side::Source);
                return Phase::Port {
                    passive: Side::Source,
                    data,
                };
            }
            if let Err(error) = self.pair.settle_ahead("TYPE changed").await {
                return Phase::Done(Err(error));
            }
            self.ahead = None;
        }
        for side in [Side::Source, Side::Destination] {
            if let Err((result, disposition)) = self.pair.ensure_type(side, job_type).await {
                return self.fail(side, "TYPE", result, Some(disposition));
            }
        }

        if self.request.dest_command == DestCommand::Unique && !self.request.dest_path.is_empty() {
            // Remember where to come back to before leaving.
            let _ = self.pair.home(Side::Destination).await;
            let line = format!("CWD {}", self.request.dest_path);
            let result = self.pair.exchange(Side::Destination, &line).await;
            let disposition = self
                .pair
                .classify(Side::Destination, CommandKind::Cwd, &result);
            if disposition != Disposition::Done {
                return self.fail(Side::Destination, &line, result, Some(disposition));
            }
            self.changed_directory = true;
        }

        match self.orders.pop_front() {
            Some(passive) => Phase::Passive { passive },
            None => unreachable!("two role orders to start with"),
        }
    }

    async fn passive(&mut self, passive: Side) -> Phase {
        let peer = self.pair.session(passive).peer();
        let peer_ip = peer.ip().to_canonical();
        let mut refused = Vec::new();
        for &command in self.pair.passive_commands(passive) {
            let result = if passive == Side::Source && self.passive_sent == Some(command) {
                self.passive_sent = None;
                self.pair.read_owed_step(passive, command).await
            } else {
                self.pair.exchange(passive, command).await
            };
            let kind = CommandKind::from_verb(command);
            match self.pair.classify(passive, kind, &result) {
                Disposition::Done => {
                    let Ok(reply) = result else {
                        unreachable!("Done is only classified from a reply")
                    };
                    self.passive_verb = if command == "EPSV" { "EPSV" } else { "PASV" };
                    if command == "EPSV" && peer_ip.is_ipv4() {
                        self.fallback(Fallback::ExtendedPassive {
                            side: passive,
                            reason: refused.join("; "),
                        });
                    }
                    return match self.announced(passive, command, &reply, peer_ip) {
                        Ok(phase) => phase,
                        Err(refusal) => self.next_order(refusal).await,
                    };
                }
                Disposition::NotSupported => {
                    let text = match &result {
                        Ok(reply) => format!("{command} answered {reply}"),
                        Err(e) => format!("{command}: {e}"),
                    };
                    refused.push(text);
                }
                disposition => return self.fail(passive, command, result, Some(disposition)),
            }
        }
        let refusal = Refusal::NoPassive {
            side: passive,
            host: self.pair.host(passive).to_owned(),
            replies: refused.join("; "),
        };
        self.next_order(refusal).await
    }

    /// The data address from a 227 or 229 reply, checked (RFC 2577). A privileged port is
    /// a refusal of this role order (`Err`): the other one may still work.
    fn announced(
        &mut self,
        passive: Side,
        command: &str,
        reply: &Reply,
        peer_ip: IpAddr,
    ) -> Result<Phase, Refusal> {
        let host = self.pair.host(passive).to_owned();
        let port = if command == "PASV" {
            match reply.parse_numbers(parse_pasv) {
                Ok(addr) => {
                    let announced = IpAddr::V4(*addr.ip());
                    if announced != peer_ip {
                        self.pair.note(
                            passive,
                            &format!(
                                "PASV named {announced}, not the server's control address \
                                 {peer_ip}: host ignored (RFC 2577)"
                            ),
                        );
                        self.fallback(Fallback::ForeignPasvHostIgnored {
                            side: passive,
                            announced,
                            used: peer_ip,
                        });
                    }
                    addr.port()
                }
                Err(error) => {
                    return Ok(self.transient(
                        TransientKind::Protocol,
                        Failure::BadPassiveReply {
                            side: passive,
                            host,
                            command: command.to_owned(),
                            error,
                        },
                    ))
                }
            }
        } else {
            match reply.parse_numbers(parse_epsv) {
                Ok(port) => port,
                Err(error) => {
                    return Ok(self.transient(
                        TransientKind::Protocol,
                        Failure::BadPassiveReply {
                            side: passive,
                            host,
                            command: command.to_owned(),
                            error,
                        },
                    ))
                }
            }
        };
        if is_privileged_port(port) {
            return Err(Refusal::PrivilegedPort {
                side: passive,
                host,
                command: command.to_owned(),
                port,
            });
        }
        Ok(Phase::Port {
            passive,
            data: SocketAddr::new(peer_ip, port),
        })
    }

    async fn port(&mut self, passive: Side, data: SocketAddr) -> Phase {
        let active = passive.other();
        let mut first_refusal: Option<(String, String)> = None;
        let port_line = port_argument(data).ok().map(|arg| format!("PORT {arg}"));
        let eprt_line = format!("EPRT {}", eprt_argument(data));
        // Sent ahead by the copy before, with the data command behind it: its reply, then
        // the data command's, are read here and in `active_start`.
        let sent = self.ahead.as_mut().and_then(|a| a.started.take());
        let lines: Vec<&String> = match &sent {
            Some(line) if line.starts_with("EPRT") => vec![line],
            Some(line) => vec![line, &eprt_line],
            None => port_line
                .iter()
                .chain(std::iter::once(&eprt_line))
                .collect(),
        };
        for line in lines {
            let ahead = sent.as_ref() == Some(line);
            let result = if ahead {
                let deadline = self.pair.reply_deadline();
                self.pair
                    .read_reply(active, &super::verb(line), deadline)
                    .await
            } else {
                self.pair.exchange(active, line).await
            };
            let kind = CommandKind::from_verb(&super::verb(line));
            let disposition = self.pair.classify(active, kind, &result);
            if ahead && disposition != Disposition::Done {
                // The data command behind a refused PORT answers too (425, 503): read it,
                // and note what it may have created.
                let deadline = self.pair.reply_deadline();
                let verb = self.command_verb(active);
                let behind = self.pair.read_reply(active, &verb, deadline).await;
                self.refused(active, &behind);
                if self.report.destination_touched {
                    self.clean_up().await;
                }
            }
            match disposition {
                Disposition::Done => {
                    self.port_verb = if line.starts_with("EPRT") {
                        "EPRT"
                    } else {
                        "PORT"
                    };
                    self.stor_sent = ahead;
                    if line.starts_with("EPRT") {
                        self.fallback(Fallback::ExtendedPort {
                            side: active,
                            reason: first_refusal
                                .as_ref()
                                .map(|(l, r)| format!("{l} answered {r}"))
                                .unwrap_or_else(|| "IPv6 address".into()),
                        });
                    }
                    return Phase::ActiveStart { passive };
                }
                Disposition::NotSupported | Disposition::Permanent(_) => {
                    if let Ok(reply) = &result {
                        first_refusal.get_or_insert((line.clone(), reply.to_string()));
                    }
                }
                disposition => return self.fail(active, line, result, Some(disposition)),
            }
        }
        let (line, reply) =
            first_refusal.unwrap_or_else(|| (eprt_line.clone(), "no usable reply".into()));
        let refusal = Refusal::Port {
            side: active,
            host: self.pair.host(active).to_owned(),
            line,
            reply,
        };
        self.next_order(refusal).await
    }

    async fn active_start(&mut self, passive: Side) -> Phase {
        let active = passive.other();
        let line = self.command_line(active);
        let result = if std::mem::take(&mut self.stor_sent) {
            let deadline = self.pair.reply_deadline();
            self.pair
                .read_reply(active, &super::verb(&line), deadline)
                .await
        } else {
            self.pair.exchange(active, &line).await
        };
        let kind = CommandKind::from_verb(&super::verb(&line));
        let disposition = self.pair.classify(active, kind, &result);
        match (disposition, result) {
            (Disposition::Preliminary, Ok(reply)) => {
                self.accepted(active, &reply);
                self.announce().await;
                Phase::PassiveStart {
                    passive,
                    active_final: None,
                }
            }
            (Disposition::Done, Ok(reply)) => {
                self.accepted(active, &reply);
                self.announce().await;
                Phase::PassiveStart {
                    passive,
                    active_final: Some(reply),
                }
            }
            (disposition, result) => {
                // The passive side only holds a listening socket; the destination may
                // have created the file before failing.
                self.refused(active, &result);
                self.clean_up().await;
                self.fail(active, &line, result, Some(disposition))
            }
        }
    }

    async fn passive_start(&mut self, passive: Side, active_final: Option<Reply>) -> Phase {
        let active = passive.other();
        let line = self.command_line(passive);
        let result = self.send_passive(passive, &line).await;
        let kind = CommandKind::from_verb(&super::verb(&line));
        let disposition = self.pair.classify(passive, kind, &result);
        let result = match (disposition, result) {
            (Disposition::Preliminary, Ok(reply)) => {
                self.accepted(passive, &reply);
                self.announce().await;
                self.pair.progress.send_replace(Progress::Transferring {
                    path: self.request.source_path.clone(),
                    since: SystemTime::now(),
                });
                return Phase::Completion {
                    passive,
                    active_final,
                    passive_final: None,
                };
            }
            (Disposition::Done, Ok(reply)) => {
                self.accepted(passive, &reply);
                self.announce().await;
                return Phase::Completion {
                    passive,
                    active_final,
                    passive_final: Some(reply),
                };
            }
            (_, result) => result,
        };
        self.refused(passive, &result);

        // The passive side did not start. The active side connected (its 1yz said
        // so) and will end with whatever the passive server's close means to it;
        // read that before anything else, then clean up.
        let refusal = match (&result, disposition) {
            (Err(SessionError::Timeout { .. }), _) => {
                self.pair
                    .session(passive)
                    .close("silent after the data connection arrived");
                Some(Refusal::Silence {
                    side: passive,
                    host: self.pair.host(passive).to_owned(),
                    command: super::verb(&line),
                })
            }
            (Ok(reply), Disposition::Transient(TransientKind::DataConnection))
                if reply.code().get() == 425 =>
            {
                Some(Refusal::DataConnection {
                    side: passive,
                    host: self.pair.host(passive).to_owned(),
                    command: super::verb(&line),
                    reply: reply.to_string(),
                })
            }
            _ => None,
        };
        if active_final.is_none() {
            if matches!(&result, Ok(reply) if reply.code().get() >= 400) {
                // A final refusal: the passive server will neither send nor take the
                // bytes, and may hold the data connection open without a word.
                self.end_active(active).await;
            } else {
                self.drain_final(active).await;
            }
        }
        match refusal {
            Some(refusal) => {
                // A silent server was closed: log in again, to delete its partial file
                // and for the other role order.
                if let Err(error) = self.reopen_closed(&refusal.to_string()).await {
                    return Phase::Done(Err(error));
                }
                self.clean_up().await;
                self.next_order(refusal).await
            }
            None => {
                if self.report.destination_touched {
                    // ABOR may have been ignored and the connection closed: the partial
                    // file is deleted over a new one.
                    if let Err(error) = self.reopen_closed("no final reply after ABOR").await {
                        return Phase::Done(Err(error));
                    }
                }
                self.clean_up().await;
                self.fail(passive, &line, result, Some(disposition))
            }
        }
    }

    // Long on purpose: one phase of the state machine (see `Phase::Completion`): both
    // final replies, the watchdog and the clean-up of a failed copy decide together.
    async fn completion(
        &mut self,
        passive: Side,
        active_final: Option<Reply>,
        passive_final: Option<Reply>,
    ) -> Phase {
        let active = passive.other();
        let deadline = self
            .pair
            .deadline
            .unwrap_or_else(|| Instant::now() + self.pair.remaining());
        let reply_timeout = self.pair.limits.reply_timeout;
        let mut finals: [Option<Result<Reply, SessionError>>; 2] = [None, None];
        finals[index(active)] = active_final.map(Ok);
        finals[index(passive)] = passive_final.map(Ok);

        {
            let src_host = self.pair.host(Side::Source).to_owned();
            let dst_host = self.pair.host(Side::Destination).to_owned();
            let (src, dst) = (&mut self.pair.src, &mut self.pair.dst);
            let need_src = finals[0].is_none();
            let need_dst = finals[1].is_none();
            let src_read = async {
                if need_src {
                    Some(src.read_reply_until(deadline).await)
                } else {
                    None
                }
            };
            let dst_read = async {
                if need_dst {
                    Some(dst.read_reply_until(deadline).await)
                } else {
                    None
                }
            };
            tokio::pin!(src_read, dst_read);
            // Once one side has failed, the other gets one reply timeout, not the
            // whole watchdog: it has lost its partner.
            let failed = |r: &Option<Result<Reply, SessionError>>| {
                matches!(r, Some(Err(_)))
                    || matches!(r, Some(Ok(reply)) if reply.code().get() >= 400)
            };
            tokio::select! {
                r = &mut src_read => {
                    let later = if failed(&r) { deadline.min(Instant::now() + reply_timeout) } else { deadline };
                    finals[0] = finals[0].take().or(r);
                    if finals[1].is_none() {
                        finals[1] = match tokio::time::timeout_at(later, &mut dst_read).await {
                            Ok(r) => r,
                            Err(_) => Some(Err(SessionError::Timeout { host: dst_host, waited: reply_timeout })),
                        };
                    }
                }
                r = &mut dst_read => {
                    let later = if failed(&r) { deadline.min(Instant::now() + reply_timeout) } else { deadline };
                    finals[1] = finals[1].take().or(r);
                    if finals[0].is_none() {
                        finals[0] = match tokio::time::timeout_at(later, &mut src_read).await {
                            Ok(r) => r,
                            Err(_) => Some(Err(SessionError::Timeout { host: src_host, waited: reply_timeout })),
                        };
                    }
                }
            }
        }

        let mut silent = Vec::new();
        let mut worst: Option<(Side, Result<Reply, SessionError>, Disposition)> = None;
        for side in [Side::Source, Side::Destination] {
            let Some(result) = finals[index(side)].take() else {
                continue;
            };
            let command = self.command_verb(side);
            self.pair.remember(side, &command, &result);
            let last = self.pair.last[index(side)].clone();
            match side {
                Side::Source => self.report.source_final = last,
                Side::Destination => self.report.destination_final = last,
            }
            if matches!(result, Err(SessionError::Timeout { .. })) {
                silent.push(side);
            }
            let kind = CommandKind::from_verb(&command);
            let disposition = self.pair.classify(side, kind, &result);
            if disposition == Disposition::Done {
                continue;
            }
            let worse = match &worst {
                None => true,
                // A permanent refusal explains more than the other side's transient
                // reaction to it (a 552 on STOR makes the sender say 426).
                Some((_, _, d)) => disposition.is_permanent() && !d.is_permanent(),
            };
            if worse {
                worst = Some((side, result, disposition));
            }
        }

        if !silent.is_empty() && Instant::now() >= deadline {
            let waited = self.started.elapsed();
            self.pair.close_all("watchdog expired");
            self.pair
                .note(passive, &format!("watchdog expired after {waited:?}"));
            return self.transient(
                TransientKind::Transport(bftp_core::reply::TransportFailure::Timeout),
                Failure::Watchdog { silent, waited },
            );
        }
        for side in silent {
            self.pair.session(side).close("no final reply");
        }
        match worst {
            None => Phase::Check,
            Some((side, result, disposition)) => {
                self.clean_up().await;
                let command = self.command_verb(side);
                self.fail(side, &command, result, Some(disposition))
            }
        }
    }

    /// One phase of the state machine (see `Phase::Check`): both servers' SIZE after the
    /// copy, what each answer means for the copy, then what the sizes prove
    /// (`bftp_core::evidence::size_evidence`).
    async fn check(&mut self) -> Phase {
        self.pair.progress.send_replace(Progress::Checking {
            path: self.request.source_path.clone(),
        });
        let dest_name = self.checked_name();
        let [source_answer, dest_answer] = match self.ask_sizes(&dest_name).await {
            Ok(answers) => answers,
            Err(error) => return Phase::Done(Err(error)),
        };
        let source = match self.source_size(source_answer) {
            ControlFlow::Continue(size) => size,
            ControlFlow::Break(end) => return end,
        };
        let destination = match self.destination_size(dest_name, dest_answer).await {
            ControlFlow::Continue(size) => size,
            ControlFlow::Break(end) => return end,
        };
        self.by_sizes(source, destination).await
    }

    /// The name the copy is checked under: the destination path, or the name STOU chose
    /// (`Err`: why there is none to ask).
    fn checked_name(&self) -> Result<String, String> {
        match self.request.dest_command {
            DestCommand::Unique => match self.report.stou_name.clone() {
                None => Err("the destination did not report the name STOU chose".to_owned()),
                Some(name) => match validate_server_path(&name, "") {
                    Ok(_) => Ok(name),
                    Err(error) => Err(Failure::BadStouName { name, error }.to_string()),
                },
            },
            _ => Ok(self.request.dest_path.clone()),
        }
    }

    /// SIZE on both sides after the copy: the source's answer (`None` where its size was
    /// asked right before the transfer) and the destination's (`None` without a name).
    async fn ask_sizes(
        &mut self,
        dest_name: &Result<String, String>,
    ) -> Result<[Option<SizeAnswer>; 2], PairError> {
        let source_path = self.request.source_path.clone();
        // Both sizes at once: one round trip instead of two. The source only if its size
        // was not asked right before the transfer: a source that changed during the copy
        // shows as a mismatch either way (the bytes sent are not what SIZE said before).
        let next = match self.behind.take() {
            Some(behind) => self.read_behind(behind).await,
            None => None,
        };
        let [source_answer, dest_answer] = match (next, dest_name, self.source_size_asked) {
            (Some((behind, size, data)), Ok(name), Some(_)) => {
                let name = name.clone();
                [
                    None,
                    Some(self.size_with_next(&name, behind, size, data).await),
                ]
            }
            _ => {
                self.pair
                    .size_both(
                        self.source_size_asked
                            .is_none()
                            .then_some(source_path.as_str()),
                        dest_name.as_deref().ok(),
                    )
                    .await
            }
        };
        // The next file's STOR went out with this SIZE: unless the SIZE proves this copy
        // (nothing more to do on the destination), call that transfer off first.
        let proven = matches!(
            (&dest_answer, self.source_size_asked),
            (Some(SizeAnswer::Size(d)), Some(s)) if *d == s
        );
        if self.pair.in_flight() && !proven {
            self.pair
                .settle_ahead("the destination's SIZE did not prove the copy")
                .await?;
        }
        Ok([source_answer, dest_answer])
    }

    /// The source's size after the copy (`Err`: why there is none), or the copy's end when
    /// its SIZE failed.
    fn source_size(
        &mut self,
        answer: Option<SizeAnswer>,
    ) -> ControlFlow<Phase, Result<u64, String>> {
        let answer = match (self.source_size_asked, answer) {
            (Some(size), _) => SizeAnswer::Size(size),
            (None, Some(answer)) => answer,
            (None, None) => unreachable!("the source is asked when its size is not known"),
        };
        ControlFlow::Continue(match answer {
            SizeAnswer::Size(size) => Ok(size),
            SizeAnswer::Unavailable(reason) => Err(reason),
            SizeAnswer::NoFile(result) => Err(format!(
                "SIZE answered {} after the transfer",
                describe(&result)
            )),
            SizeAnswer::Failed(result, disposition) => {
                return ControlFlow::Break(self.fail(
                    Side::Source,
                    "SIZE",
                    result,
                    Some(disposition),
                ))
            }
        })
    }

    /// The destination file's size after the copy (`Err`: why there is none), or the copy's
    /// end when its SIZE failed or found no file.
    async fn destination_size(
        &mut self,
        dest_name: Result<String, String>,
        answer: Option<SizeAnswer>,
    ) -> ControlFlow<Phase, Result<u64, String>> {
        let (name, answer) = match (dest_name, answer) {
            (Err(reason), _) => return ControlFlow::Continue(Err(reason)),
            (Ok(_), None) => unreachable!("the destination is asked when it has a name"),
            (Ok(name), Some(answer)) => (name, answer),
        };
        ControlFlow::Continue(match answer {
            SizeAnswer::Size(size) => Ok(size),
            SizeAnswer::Unavailable(reason) => Err(reason),
            SizeAnswer::NoFile(Ok(reply)) => {
                // It said 226 and the file is not there: no evidence of a copy, and
                // maybe a copy under another name (the name's failure is remembered).
                self.clean_up().await;
                let host = self.pair.host(Side::Destination).to_owned();
                return ControlFlow::Break(self.transient(
                    TransientKind::FileBusy,
                    Failure::NotStoredAsNamed { host, name, reply },
                ));
            }
            SizeAnswer::NoFile(result) => {
                self.clean_up().await;
                return ControlFlow::Break(self.fail(
                    Side::Destination,
                    &format!("SIZE {name}"),
                    result,
                    Some(Disposition::Transient(TransientKind::FileBusy)),
                ));
            }
            SizeAnswer::Failed(result, disposition) => {
                return ControlFlow::Break(self.fail(
                    Side::Destination,
                    "SIZE",
                    result,
                    Some(disposition),
                ))
            }
        })
    }

    /// The copy's end by what both sizes prove (`bftp_core::evidence::size_evidence`): a
    /// success with its size evidence, or a transient failure on a size mismatch.
    async fn by_sizes(
        &mut self,
        source: Result<u64, String>,
        destination: Result<u64, String>,
    ) -> Phase {
        let written = match self.request.dest_command {
            DestCommand::Append => Written::Appended {
                before: self.report.destination_size_before,
            },
            DestCommand::Replace | DestCommand::Unique => Written::Whole,
        };
        let transfer_type = self.pair.params.transfer_type;
        let (size_check, bytes) = match size_evidence(transfer_type, written, source, destination) {
            SizeEvidence::Checked { check, bytes } => (check, bytes),
            SizeEvidence::Mismatch {
                source,
                destination,
                expected,
            } => {
                self.clean_up().await;
                return self.transient(
                    TransientKind::DataConnection,
                    Failure::SizeMismatch {
                        source_size: source,
                        destination,
                        expected,
                    },
                );
            }
        };
        if let SizeCheck::NotAvailable(reason) = &size_check {
            self.pair
                .note(Side::Destination, &format!("no size evidence: {reason}"));
        }
        let stou_name = self.report.stou_name.clone();
        Phase::Done(Ok(CopyOutcome::Succeeded {
            bytes,
            size_check,
            stou_name,
            report: AttemptReport::default(),
        }))
    }

    // ---- helpers ----

    /// The passive side's data command. When the caller named a next copy that may be
    /// pipelined, that copy's SIZE and this copy's passive command go in the same write
    /// behind it (`pipeline.rs`); their replies are owed until [`Attempt::read_behind`].
    async fn send_passive(&mut self, passive: Side, line: &str) -> Result<Reply, SessionError> {
        let job_type = self.pair.params.transfer_type;
        let behind = self
            .hint
            .take()
            .filter(|next| {
                self.pair
                    .proof_is_quiet(job_type, self.request.dest_command)
                    && may_pipeline(self.request, next, passive, job_type)
            })
            .map(|next| Behind {
                next,
                passive_verb: self.passive_verb,
                port_verb: self.port_verb,
            });
        let Some(behind) = behind else {
            return self.pair.exchange(passive, line).await;
        };
        self.pair.drain_owed(passive).await;
        let lines = vec![
            line.to_owned(),
            format!("SIZE {}", behind.next.source_path),
            behind.passive_verb.to_owned(),
        ];
        let verb = super::verb(line);
        let deadline = self.pair.reply_deadline();
        match self.pair.session(passive).send_batch(&lines).await {
            Ok(()) => {
                self.pair.owed[index(passive)] += 2;
                self.behind = Some(behind);
                self.pair.read_reply(passive, &verb, deadline).await
            }
            Err(error) => {
                let result = Err(error);
                self.pair.remember(passive, &verb, &result);
                result
            }
        }
    }

    /// The source's SIZE for this copy, with the passive command the source is asked first
    /// behind it in the same write, when nothing need go to the source between the two: the
    /// source is passive in the first role order, and it is in image type already for an
    /// image-type job (no TYPE between). [`Attempt::passive`] reads the second reply.
    /// Otherwise SIZE alone.
    async fn size_with_passive(&mut self, path: &str) -> SizeAnswer {
        let image = TransferType::Image;
        let verb = self.pair.passive_commands(Side::Source)[0];
        if self.orders.front() != Some(&Side::Source)
            || self.pair.params.transfer_type != image
            || self.pair.types[index(Side::Source)] != Some(image)
        {
            return self.pair.size_answer(Side::Source, path).await;
        }
        self.pair.drain_owed(Side::Source).await;
        let lines = vec![format!("SIZE {path}"), verb.to_owned()];
        let deadline = self.pair.reply_deadline();
        let result = match self.pair.session(Side::Source).send_batch(&lines).await {
            Ok(()) => {
                self.pair.owed[index(Side::Source)] += 1;
                self.passive_sent = Some(verb);
                self.pair.read_reply(Side::Source, "SIZE", deadline).await
            }
            Err(error) => {
                let result = Err(error);
                self.pair.remember(Side::Source, "SIZE", &result);
                result
            }
        };
        let disposition = self.pair.classify(Side::Source, CommandKind::Size, &result);
        size_answer_of(result, disposition)
    }

    /// The replies to what went behind this copy's RETR: the next file's size and the
    /// source's next data address, checked as [`Attempt::announced`] checks one. `None`
    /// when either is not usable: the next copy then asks again itself.
    async fn read_behind(&mut self, behind: Behind) -> Option<(Behind, u64, SocketAddr)> {
        let size = self.pair.read_owed(Side::Source).await;
        let passive = self.pair.read_owed(Side::Source).await;
        let disposition = self.pair.classify(Side::Source, CommandKind::Size, &size);
        let SizeAnswer::Size(size) = size_answer_of(size, disposition) else {
            return None;
        };
        let kind = CommandKind::from_verb(behind.passive_verb);
        if self.pair.classify(Side::Source, kind, &passive) != Disposition::Done {
            return None;
        }
        let reply = passive.ok()?;
        let peer_ip = self.pair.session(Side::Source).peer().ip().to_canonical();
        let port = if behind.passive_verb == "PASV" {
            let addr = reply.parse_numbers(parse_pasv).ok()?;
            // Another host named: the sequential path notes and handles it.
            if IpAddr::V4(*addr.ip()) != peer_ip {
                return None;
            }
            addr.port()
        } else {
            reply.parse_numbers(parse_epsv).ok()?
        };
        if is_privileged_port(port) {
            return None;
        }
        Some((behind, size, SocketAddr::new(peer_ip, port)))
    }

    /// This copy's destination SIZE, with the next file's PORT (or EPRT) and STOR behind it
    /// in the same write: their replies are the next copy's to read ([`Ahead::started`]).
    async fn size_with_next(
        &mut self,
        name: &str,
        behind: Behind,
        source_size: u64,
        data: SocketAddr,
    ) -> SizeAnswer {
        let port_line = match (behind.port_verb, port_argument(data)) {
            ("PORT", Ok(arg)) => format!("PORT {arg}"),
            _ => format!("EPRT {}", eprt_argument(data)),
        };
        let lines = vec![
            format!("SIZE {name}"),
            port_line.clone(),
            format!("STOR {}", behind.next.dest_path),
        ];
        self.pair.drain_owed(Side::Destination).await;
        let deadline = self.pair.reply_deadline();
        let result = match self
            .pair
            .session(Side::Destination)
            .send_batch(&lines)
            .await
        {
            Ok(()) => {
                self.pair.ahead = Some(Ahead {
                    request: behind.next,
                    source_size,
                    data,
                    passive_verb: behind.passive_verb,
                    started: Some(port_line),
                });
                self.pair
                    .read_reply(Side::Destination, "SIZE", deadline)
                    .await
            }
            Err(error) => {
                let result = Err(error);
                self.pair.remember(Side::Destination, "SIZE", &result);
                result
            }
        };
        let disposition = self
            .pair
            .classify(Side::Destination, CommandKind::Size, &result);
        size_answer_of(result, disposition)
    }

    /// The data command for `side`: RETR on the source, STOR/APPE/STOU on the destination.
    fn command_line(&self, side: Side) -> String {
        match side {
            Side::Source => format!("RETR {}", self.request.source_path),
            Side::Destination => match self.request.dest_command {
                DestCommand::Replace => format!("STOR {}", self.request.dest_path),
                DestCommand::Append => format!("APPE {}", self.request.dest_path),
                DestCommand::Unique => "STOU".to_owned(),
            },
        }
    }

    fn command_verb(&self, side: Side) -> String {
        super::verb(&self.command_line(side))
    }

    /// A 1yz or 2yz to a data command: the destination file may now be changed, and
    /// STOU says which name it chose.
    fn accepted(&mut self, side: Side, reply: &Reply) {
        if side != Side::Destination {
            return;
        }
        self.report.destination_touched = true;
        if self.request.dest_command == DestCommand::Unique && self.report.stou_name.is_none() {
            if let Some(name) = stou_file_name(reply) {
                self.report.stou_name = Some(name.to_owned());
                self.unannounced = Some(name.to_owned());
            }
        }
    }

    /// Hands a newly announced STOU name to the caller and waits (one reply timeout at
    /// most) until it says the name is recorded.
    async fn announce(&mut self) {
        let (Some(name), Some(announce)) = (self.unannounced.take(), &self.request.announce) else {
            return;
        };
        let (recorded, done) = tokio::sync::oneshot::channel();
        if announce
            .0
            .send(super::Announced { name, recorded })
            .is_err()
        {
            return;
        }
        let wait = self.pair.limits.reply_timeout;
        if tokio::time::timeout(wait, done).await.is_err() {
            self.pair.note(
                Side::Destination,
                &format!("the STOU name was not recorded within {wait:?}: going on"),
            );
        }
    }

    /// Read (and remember) the final reply of `side` after its partner failed, for
    /// one reply timeout; a silent server is closed.
    async fn drain_final(&mut self, side: Side) {
        if !self.pair.session(side).is_open() {
            return;
        }
        let command = self.command_verb(side);
        let deadline = self.pair.reply_deadline();
        let result = self.pair.read_reply(side, &command, deadline).await;
        if let Ok(reply) = &result {
            if side == Side::Destination && self.request.dest_command == DestCommand::Unique {
                self.accepted(side, reply);
            }
        }
        if matches!(result, Err(SessionError::Timeout { .. })) {
            self.pair
                .session(side)
                .close("no final reply after its partner failed");
        }
    }

    /// The active side's transfer after its partner refused outright (a 4yz/5yz to its
    /// RETR or STOR): its final reply if it comes within [`SETTLE`] (the partner closed
    /// the data connection), else ABOR and at most [`ABOR_WAIT`](super::ABOR_WAIT) for the
    /// replies, instead of a whole reply timeout: a passive server that refuses RETR may
    /// keep the accepted data connection open, and the active one then waits for bytes
    /// that never come. Without both replies the connection is closed.
    async fn end_active(&mut self, active: Side) {
        if !self.pair.session(active).is_open() {
            return;
        }
        let command = self.command_verb(active);
        let deadline = self.pair.reply_deadline();
        let settle = self.pair.limits.reply_timeout.min(SETTLE);
        let read = self.pair.read_reply(active, &command, deadline);
        // A timeout here leaves the session open (the read is dropped, not failed).
        if let Ok(result) = tokio::time::timeout(settle, read).await {
            if let Ok(reply) = &result {
                self.accepted_final(active, reply);
            }
            return;
        }
        self.pair.note(
            active,
            &format!("no final reply {settle:?} after its partner refused: ABOR"),
        );
        let deadline = Instant::now() + self.pair.limits.reply_timeout.min(super::ABOR_WAIT);
        let session = self.pair.session(active);
        if !session.is_open() || session.send("ABOR").await.is_err() {
            return;
        }
        // The transfer's final reply (426), remembered as the command's; then ABOR's own.
        let result = self.pair.read_reply(active, &command, deadline).await;
        if let Ok(reply) = &result {
            self.accepted_final(active, reply);
            if reply.code().get() != 225 {
                let _ = self.pair.session(active).read_reply_until(deadline).await;
            }
        }
        if self.pair.session(active).is_open() && result.is_err() {
            self.pair.session(active).close("no reply to ABOR");
        }
    }

    /// A STOU's final reply may name the file.
    fn accepted_final(&mut self, side: Side, reply: &Reply) {
        if side == Side::Destination && self.request.dest_command == DestCommand::Unique {
            self.accepted(side, reply);
        }
    }

    /// After a failed attempt that may have changed the destination: delete a partial
    /// STOR or STOU file (best effort, noted); for APPE, record the size now.
    async fn clean_up(&mut self) {
        if !self.report.destination_touched {
            return;
        }
        self.report.destination_touched = false;
        // Cleanup gets its own reply timeouts, even after the watchdog.
        self.pair.deadline = None;
        let target = match self.request.dest_command {
            DestCommand::Replace => Some(self.request.dest_path.clone()),
            DestCommand::Unique => {
                // Not deleted here: a name the server announced may be another session's
                // file too (Pure-FTPd can announce one name to two sessions), so only the
                // caller, who knows what its other copies claim, may decide.
                if let Some(name) = self.report.stou_name.clone() {
                    self.pair.note(
                        Side::Destination,
                        &format!("the STOU file {name:?} may exist: left for bftpd to settle"),
                    );
                    if !self.report.stou_left.contains(&name) {
                        self.report.stou_left.push(name);
                    }
                }
                None
            }
            DestCommand::Append => {
                if self.pair.session(Side::Destination).is_open() {
                    let path = self.request.dest_path.clone();
                    if let SizeAnswer::Size(size) =
                        self.pair.size_answer(Side::Destination, &path).await
                    {
                        self.report.destination_size_after = Some(size);
                    }
                }
                None
            }
        };
        if self.request.dest_command == DestCommand::Unique {
            // The name stays in the PartialDeleted note; a later role order's STOU
            // reports its own.
            self.report.stou_name = None;
        }
        let Some(path) = target else {
            return;
        };
        if !self.pair.session(Side::Destination).is_open() {
            self.fallback(Fallback::PartialDeleted {
                path,
                deleted: false,
                reply: "the destination connection is closed".into(),
            });
            return;
        }
        let result = self
            .pair
            .exchange(Side::Destination, &format!("DELE {path}"))
            .await;
        let deleted = self
            .pair
            .classify(Side::Destination, CommandKind::Dele, &result)
            == Disposition::Done;
        self.fallback(Fallback::PartialDeleted {
            path,
            deleted,
            reply: describe(&result),
        });
    }

    /// This role order failed because a server refused the foreign address: try the
    /// other order, or give up with the settings to change.
    async fn next_order(&mut self, refusal: Refusal) -> Phase {
        self.pair.note(refusal.side(), &refusal.to_string());
        self.refusals.push(refusal.clone());
        let Some(passive) = self.orders.pop_front() else {
            return self.fxp_refused();
        };
        if let Err(error) = self.reopen_closed(&refusal.to_string()).await {
            return Phase::Done(Err(error));
        }
        let job_type = self.pair.params.transfer_type;
        for side in [Side::Source, Side::Destination] {
            if let Err((result, disposition)) = self.pair.ensure_type(side, job_type).await {
                return self.fail(side, "TYPE", result, Some(disposition));
            }
        }
        self.fallback(Fallback::RolesSwapped {
            reason: refusal.to_string(),
        });
        Phase::Passive { passive }
    }

    /// Log in again on each closed connection.
    async fn reopen_closed(&mut self, reason: &str) -> Result<(), PairError> {
        for side in [Side::Source, Side::Destination] {
            if !self.pair.session(side).is_open() {
                self.pair.reconnect(side, reason).await?;
                self.fallback(Fallback::Reconnected {
                    side,
                    reason: reason.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// A data command to the destination that did not start may still have created
    /// or truncated the file: a data-connection or local error (425, 426, 451, 452),
    /// or no reply at all. A refusal of the command itself (450, 5yz) has not.
    fn refused(&mut self, side: Side, result: &Result<Reply, SessionError>) {
        if side != Side::Destination {
            return;
        }
        let maybe_created = match result {
            Ok(reply) => matches!(reply.code().get(), 100..=299 | 425 | 426 | 451 | 452),
            Err(_) => true,
        };
        if maybe_created {
            self.report.destination_touched = true;
        }
    }

    fn fxp_refused(&mut self) -> Phase {
        // No side offered a passive mode that may be used: no FXP setting would help.
        let no_passive = self.refusals.iter().all(|r| {
            matches!(
                r,
                Refusal::NoPassive { .. } | Refusal::PrivilegedPort { .. }
            )
        });
        let detail = self
            .refusals
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let failure = if no_passive {
            JobFailure::NoPassiveMode { detail }
        } else {
            JobFailure::FxpRefused {
                explanation: format!("{detail}. {FXP_SETTINGS}"),
                source_reply: self.pair.last[0].clone(),
                destination_reply: self.pair.last[1].clone(),
            }
        };
        Phase::Done(Err(PairError {
            failure,
            disposition: Disposition::Permanent(PermanentKind::CommandRejected),
            transcript: Default::default(),
        }))
    }

    fn fallback(&mut self, fallback: Fallback) {
        let side = match &fallback {
            Fallback::ExtendedPassive { side, .. }
            | Fallback::ExtendedPort { side, .. }
            | Fallback::ForeignPasvHostIgnored { side, .. }
            | Fallback::SizeUnavailable { side, .. }
            | Fallback::Reconnected { side, .. } => *side,
            Fallback::PartialDeleted { .. } => Side::Destination,
            Fallback::RolesSwapped { .. } | Fallback::ListedWithNlst { .. } => Side::Source,
        };
        self.pair.note(side, &fallback.to_string());
        self.report.fallbacks.push(fallback);
    }

    /// The member fails with the reply (or session failure) of `side` to `command`.
    fn fail(
        &mut self,
        side: Side,
        command: &str,
        result: Result<Reply, SessionError>,
        disposition: Option<Disposition>,
    ) -> Phase {
        let disposition = disposition.unwrap_or_else(|| {
            self.pair
                .classify(side, CommandKind::from_verb(&super::verb(command)), &result)
        });
        let host = self.pair.host(side).to_owned();
        let command = super::verb(command);
        let failure = match result {
            Ok(reply) => Failure::Reply {
                side,
                host,
                command,
                reply,
            },
            Err(error) => Failure::Session {
                side,
                host,
                command,
                error,
            },
        };
        match disposition {
            Disposition::Permanent(kind) => self.permanent(kind, failure),
            Disposition::Transient(kind) => self.transient(kind, failure),
            // A positive or fallback reply where the sequence cannot go on (a 3yz to
            // RETR, a "not supported" for a needed command): a protocol error.
            _ => self.transient(TransientKind::Protocol, failure),
        }
    }

    fn transient(&mut self, kind: TransientKind, failure: Failure) -> Phase {
        Phase::Done(Ok(CopyOutcome::Transient {
            kind,
            failure,
            connection_lost: false,
            report: AttemptReport::default(),
        }))
    }

    fn permanent(&mut self, kind: PermanentKind, failure: Failure) -> Phase {
        Phase::Done(Ok(CopyOutcome::Permanent {
            kind,
            failure,
            report: AttemptReport::default(),
        }))
    }

    /// Leave the pair ready for the next member and fill in the report.
    async fn finish(
        mut self,
        result: Result<CopyOutcome, PairError>,
    ) -> Result<CopyOutcome, PairError> {
        // Replies sent ahead and not claimed (a copy that failed after its RETR): read, so
        // that the connection is in step for the next command.
        self.pair.drain_owed(Side::Source).await;
        self.pair.drain_owed(Side::Destination).await;
        if !matches!(result, Ok(CopyOutcome::Succeeded { .. })) {
            self.pair.mark_errored();
        }
        self.pair.deadline = None;
        if self.report.destination_touched && !matches!(result, Ok(CopyOutcome::Succeeded { .. })) {
            self.clean_up().await;
        }
        if self.changed_directory && self.pair.session(Side::Destination).is_open() {
            let back = match self.pair.home(Side::Destination).await {
                Some(home) => format!("CWD {home}"),
                None => "CDUP".to_owned(),
            };
            let result = self.pair.exchange(Side::Destination, &back).await;
            if !matches!(result, Ok(ref r) if r.code().class() == bftp_core::reply::ReplyClass::Completion)
            {
                // The next member would land in the wrong directory: close instead.
                self.pair
                    .close_all("could not return to the login directory after STOU");
            }
        }
        // A 421, a transport failure or a protocol error means the control connection is
        // gone or out of step, even when our side of the socket still looks open: close the
        // pair so the caller reopens instead of spending the next member on a dead one.
        if matches!(&result, Ok(CopyOutcome::Transient { kind, .. }) if kind.connection_lost()) {
            self.pair
                .close_all("the server closed or desynchronised the control connection");
        }
        let usable = self.pair.is_usable();
        let mut report = std::mem::take(&mut self.report);
        report.source_reply = self.pair.last[0].take();
        report.destination_reply = self.pair.last[1].take();
        report.duration = self.started.elapsed();
        report.transcript = self.pair.recorder.take();
        let (path, bytes, success) = (
            self.request.source_path.clone(),
            match &result {
                Ok(CopyOutcome::Succeeded { bytes, .. }) => *bytes,
                _ => None,
            },
            matches!(result, Ok(CopyOutcome::Succeeded { .. })),
        );
        self.pair.progress.send_replace(Progress::Finished {
            path,
            bytes,
            success,
        });
        match result {
            Ok(mut outcome) => {
                match &mut outcome {
                    CopyOutcome::Succeeded { report: r, .. }
                    | CopyOutcome::Permanent { report: r, .. } => *r = report,
                    CopyOutcome::Transient {
                        report: r,
                        connection_lost,
                        ..
                    } => {
                        *r = report;
                        *connection_lost = !usable;
                    }
                }
                Ok(outcome)
            }
            Err(mut error) => {
                error.transcript = report.transcript;
                if !matches!(error.failure, JobFailure::FxpRefused { .. }) {
                    return Err(error);
                }
                if let JobFailure::FxpRefused {
                    source_reply,
                    destination_reply,
                    ..
                } = &mut error.failure
                {
                    *source_reply = report.source_reply.or(source_reply.take());
                    *destination_reply = report.destination_reply.or(destination_reply.take());
                }
                Err(error)
            }
        }
    }
}

impl Refusal {
    fn side(&self) -> Side {
        match self {
            Refusal::Port { side, .. }
            | Refusal::DataConnection { side, .. }
            | Refusal::Silence { side, .. }
            | Refusal::NoPassive { side, .. }
            | Refusal::PrivilegedPort { side, .. } => *side,
        }
    }
}

fn describe(result: &Result<Reply, SessionError>) -> String {
    match result {
        Ok(reply) => reply.to_string(),
        Err(error) => error.to_string(),
    }
}
