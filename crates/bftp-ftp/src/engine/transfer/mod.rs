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
use bftp_core::route::{Plan, RelayReason, Route};
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

mod check;
mod end;
mod refusal;
mod relay;
mod resume;
mod roles;

use refusal::{describe, Refusal};

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
    /// Through bftpd (`relay.rs`): PASV/EPSV on both, STOR/APPE/STOU then RETR, the bytes
    /// moved by bftpd, both final replies; then `Check`. Taken at once when the plan says
    /// so, or after both role orders were refused under `auto`.
    Relay { reason: RelayReason },
    /// The attempt is over.
    Done(Result<CopyOutcome, PairError>),
}

/// What to tell an operator whose servers refuse third-party transfers.
pub(crate) const FXP_SETTINGS: &str = "third-party (FXP) transfers need both servers to accept \
     a data connection to or from another host than the client: vsftpd \
     port_promiscuous=YES and pasv_promiscuous=YES, proFTPD AllowForeignAddress on, \
     Pure-FTPd -w (--allowuserfxp)";

/// How a third-party copy travelled, by the side that was passive.
fn fxp_route(passive: Side) -> Route {
    match passive {
        Side::Source => Route::Fxp,
        Side::Destination => Route::FxpRolesSwapped,
    }
}

/// How long an active side gets to end by itself once its partner refused outright.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) async fn run(pair: &mut Pair, request: &CopyRequest) -> Result<CopyOutcome, PairError> {
    let started = Instant::now();
    // A relay sends nothing ahead for the next copy: what goes ahead is a third party's.
    // Neither does a resumed copy: its REST goes right before its data commands.
    let relaying = matches!(pair.plan, Plan::Relay(_)) || request.resume_at.is_some();
    let hint = pair.next_hint.take().filter(|_| !relaying);
    let ahead = match pair.ahead.take() {
        Some(ahead) if ahead.request == *request && !relaying => Some(ahead),
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
        resume: request
            .resume_at
            .filter(|_| request.dest_command == DestCommand::Replace),
        dst_passive_sent: None,
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
            Phase::Relay { reason } => attempt.relay(reason).await,
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
    /// The offset this copy resumes at (`REST` to both servers), while it may.
    resume: Option<u64>,
    /// A relay: the destination's passive command, sent with the source's SIZE; its reply
    /// is owed until the relay reads it.
    dst_passive_sent: Option<&'static str>,
}

impl Attempt<'_> {
    // ---- the phases ----

    // ---- the phases: `prepare`, `passive`, `port` in roles.rs ----

    async fn active_start(&mut self, passive: Side) -> Phase {
        let active = passive.other();
        if let Err(end) = self.rest(active).await {
            return end;
        }
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
        if let Err(end) = self.rest(passive).await {
            if active_final.is_none() {
                self.end_active(active).await;
            }
            self.clean_up().await;
            return end;
        }
        let line = self.command_line(passive);
        let result = self.send_passive(passive, &line).await;
        let kind = CommandKind::from_verb(&super::verb(&line));
        let disposition = self.pair.classify(passive, kind, &result);
        let result = match (disposition, result) {
            (Disposition::Preliminary, Ok(reply)) => {
                self.accepted(passive, &reply);
                self.announce().await;
                self.report.route = Some(fxp_route(passive));
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
                self.report.route = Some(fxp_route(passive));
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
                self.destination_passive_ahead().await;
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
            DestCommand::Replace if self.resume.is_some() => {
                // A resumable copy's part stays: the next try goes on from it.
                self.pair.note(
                    Side::Destination,
                    "partial file kept: the copy resumes from it at its next try",
                );
                None
            }
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
}
