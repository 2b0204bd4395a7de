//! The third-party transfer engine (RULES.md §6): a [`Pair`] of logged-in control
//! connections, one to the source server and one to the destination, opened once per
//! job and reused for its members.
//!
//! - [`Pair::copy`] copies one file server to server (`transfer.rs`: the state
//!   machine, an enum of phases);
//! - [`Pair::list_source`] lists the source directory and matches a wildcard
//!   (`listing.rs`);
//! - [`verify()`] checks a job against the real servers without transferring
//!   (`verify.rs`);
//! - [`Pair::watch_listing`] lists a watched directory with each file's identity
//!   (`watch.rs`).
//!
//! Every decision about a reply goes through `bftp_core::reply::classify_for_host`
//! (the per-host overrides of [`Limits`], then the table of RULES.md §5).

mod listing;
mod outcome;
mod params;
mod pipeline;
mod proof;
mod size_watch;
mod tls_data;
mod transfer;
mod tree;
mod verify;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use bftp_core::reply::{classify_for_host, CommandKind, Disposition, Outcome};
use bftp_core::route::{Plan, RelayReason};
use bftp_core::{DestCommand, FtpParams, TransferType};
use tokio::sync::watch as tokio_watch;
use tokio::time::Instant;

mod actions;
pub use actions::ActionError;
pub use listing::{ListError, ListMethod, Listed, Listing, RejectedName, Skipped};
pub use outcome::{
    AttemptReport, CopyOutcome, Failure, Fallback, JobFailure, LastReply, PairError, Progress,
    RelayStats, SizeCheck,
};
pub use proof::{hash_wait, HashProof, HASH_RATE_FLOOR};
pub use size_watch::SizeWatch;
pub use tls_data::DataTls;
pub use tree::{DirListing, HiddenNames, TreeEntry, TreeKind, WalkMethod};
pub use verify::{
    verify, Check, DataPathVerdict, PathReason, VerifyReport, VerifyRequest, WouldTake,
    CHECK_DATA_CONNECTION, CHECK_RELAY_CONNECTIONS, CHECK_SOURCE_FILE,
};
pub use watch::WatchListing;

use crate::limits::{AddressCheck, Limits, ServerLogin};
use crate::parse::Reply;
use crate::session::{SendGate, Session, SessionError};
use crate::transcript::{Recorder, Side, Transcript};

/// One file to copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRequest {
    /// The file on the source, as the RETR argument (relative to the login directory
    /// unless it starts with `/`).
    pub source_path: String,
    /// `Replace` and `Append`: the destination file (STOR/APPE argument). `Unique`:
    /// the destination directory (`""` for the login directory): STOU takes no name,
    /// the server picks one and reports it.
    pub dest_path: String,
    pub dest_command: DestCommand,
    /// The source file's size when the caller asked it just now on this pair (bftpd before
    /// an APPE, whose intent records it): then the copy asks no SIZE of the source before
    /// the transfer, and it is not evidence: the source is asked after the transfer, with
    /// the destination. Not a listing's size from longer ago: a file removed since would
    /// meet the destination's STOR before the source's 550. `None`: the copy asks first (a missing source file then fails
    /// before the destination is touched), and that answer, moments before the RETR, is the
    /// source's side of the proof: only the destination is asked after the transfer.
    pub source_size: Option<u64>,
    /// STOU: where to hand the name the server announced (its 125/150 reply) as soon as it
    /// is known, so the caller can record it durably while the copy goes on. When the
    /// destination is the active side, the copy waits for the caller's acknowledgement (at
    /// most one reply timeout) before the source is sent RETR: no byte flows before the name
    /// is recorded.
    pub announce: Option<Announce>,
    /// A resumable copy (a replace copy only), going on at this offset: `REST offset` goes to
    /// both servers before their data commands (none for 0), only the rest of the file
    /// moves, and a failed copy's partial file is kept (not deleted) for the next try to go
    /// on from. The caller recorded what the copy began from, takes the offset from the
    /// destination's SIZE and decides by `bftp_core::resume::decide`. A server that refuses
    /// it is reported ([`AttemptReport::resume_refused`]).
    pub resume_at: Option<u64>,
}

/// A STOU name announced by the destination, with the acknowledgement the copy waits for.
#[derive(Debug)]
pub struct Announced {
    pub name: String,
    /// Send (or drop) once the name is recorded.
    pub recorded: tokio::sync::oneshot::Sender<()>,
}

/// The sending end of [`CopyRequest::announce`]. Requests compare equal whatever their
/// announcer: it is a channel, not part of what is copied.
#[derive(Clone, Debug)]
pub struct Announce(pub tokio::sync::mpsc::UnboundedSender<Announced>);

impl PartialEq for Announce {
    fn eq(&self, _: &Announce) -> bool {
        true
    }
}
impl Eq for Announce {}

impl Announce {
    /// A new announcer and the receiver of its names.
    pub fn channel() -> (Announce, tokio::sync::mpsc::UnboundedReceiver<Announced>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Announce(tx), rx)
    }
}

/// Two logged-in control connections with the job's TYPE, MODE and STRU set.
///
/// After a failure that closed a connection (a transport error, a watchdog expiry) the
/// pair is dead: [`Pair::is_usable`] says so and `copy` refuses; open a new one.
pub struct Pair {
    src: Session,
    dst: Session,
    logins: [ServerLogin; 2],
    params: FtpParams,
    limits: Limits,
    check: Arc<dyn AddressCheck>,
    recorder: Recorder,
    /// The TYPE each session is in now (SIZE needs image type; the copy the job's).
    types: [Option<TransferType>; 2],
    /// FEAT of the source, asked once.
    source_features: Option<Vec<String>>,
    /// The login directory of each side (PWD), asked when needed.
    home: [Option<String>; 2],
    /// The last reply of each side in the current attempt.
    last: [Option<LastReply>; 2],
    /// The watchdog deadline of the current copy, if one runs.
    deadline: Option<Instant>,
    progress: tokio_watch::Sender<Progress>,
    dead: Option<String>,
    /// What the last copy's data connection got (TLS or clear, and the TLS client).
    data_tls: Option<DataTls>,
    /// What each session offers for proofs after a copy (`proof.rs`).
    proof: proof::ProofState,
    /// The copy the caller says comes next on this pair ([`Pair::expect_next`]).
    next_hint: Option<CopyRequest>,
    /// The next copy's first steps, done ahead by the copy before it (`pipeline.rs`).
    ahead: Option<pipeline::Ahead>,
    /// Replies of commands sent ahead that no one claimed yet, per side: read and dropped
    /// before the next command on that connection.
    owed: [u8; 2],
    /// Something went wrong on this pair: a copy or a listing that failed, a reconnection.
    /// Such a pair is not kept for another job ([`Pair::clean`]).
    errored: bool,
    /// Asked before each command either session sends, and before a reconnection
    /// ([`Pair::set_gate`]).
    gate: Option<Arc<dyn SendGate>>,
    /// How the next copies start: third party only, third party then relay, or relay
    /// ([`Pair::set_plan`]). A refusal in both role orders under `FxpThenRelay` turns it
    /// into `Relay` for the pair's later copies.
    plan: Plan,
    /// The daemon's caps on relays ([`Pair::set_relay_gate`]).
    relay_gate: Option<Arc<crate::relay::RelayGate>>,
    /// A relayed copy hashes its stream (SHA-256) as it passes ([`Pair::set_stream_hash`]).
    stream_hash: bool,
    /// Whether each side's FEAT offers `REST STREAM` (`None`: not asked yet).
    rest_stream: [Option<bool>; 2],
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("source", &self.logins[0])
            .field("destination", &self.logins[1])
            .field("params", &self.params)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

fn index(side: Side) -> usize {
    match side {
        Side::Source => 0,
        Side::Destination => 1,
    }
}

/// What a FEAT reply offers: its lines, or none when FEAT was refused or not answered.
pub(crate) fn feat_lines(
    result: &Result<Reply, SessionError>,
    disposition: Disposition,
) -> Vec<String> {
    match (result, disposition) {
        (Ok(reply), Disposition::Done) => reply.lines().to_vec(),
        _ => Vec::new(),
    }
}

/// The command verb of a line, upper-cased (`RETR`, `STOR`...).
pub(crate) fn verb(line: &str) -> String {
    line.split(' ').next().unwrap_or("").to_ascii_uppercase()
}

impl Pair {
    /// Connect and log in to both servers (concurrently: vsftpd and Pure-FTPd take 3
    /// to 5 s to refuse a wrong password), then send TYPE, MODE and STRU to both.
    pub async fn open(
        src: &ServerLogin,
        dst: &ServerLogin,
        params: FtpParams,
        limits: &Limits,
        addr_check: Arc<dyn AddressCheck>,
    ) -> Result<Pair, PairError> {
        Pair::open_gated(src, dst, params, limits, addr_check, None).await
    }

    /// [`Pair::open`] under `gate` ([`Pair::set_gate`]) from the first command of each login
    /// on: a pair opened for a job under a lease sends nothing past it, its login included.
    pub async fn open_gated(
        src: &ServerLogin,
        dst: &ServerLogin,
        params: FtpParams,
        limits: &Limits,
        addr_check: Arc<dyn AddressCheck>,
        gate: Option<Arc<dyn SendGate>>,
    ) -> Result<Pair, PairError> {
        let recorder = Recorder::new(limits.transcript, ServerLogin::scrubber(&[src, dst]));
        let (s, d) = tokio::join!(
            Session::connect_gated(
                Side::Source,
                src,
                limits,
                &*addr_check,
                recorder.clone(),
                gate.clone()
            ),
            Session::connect_gated(
                Side::Destination,
                dst,
                limits,
                &*addr_check,
                recorder.clone(),
                gate.clone()
            ),
        );
        let (src_session, dst_session) = match (s, d) {
            (Ok(s), Ok(d)) => (s, d),
            // When both failed, the source's failure is reported.
            (Err(error), _) => {
                return Err(connect_failure(Side::Source, src, limits, &recorder, error))
            }
            (Ok(_), Err(error)) => {
                return Err(connect_failure(
                    Side::Destination,
                    dst,
                    limits,
                    &recorder,
                    error,
                ))
            }
        };
        let mut pair = Pair::from_sessions(
            src_session,
            dst_session,
            src,
            dst,
            params,
            limits,
            addr_check,
            recorder,
        );
        pair.gate = gate;
        // Both sides' TYPE, MODE, STRU and FEAT in flight at once: one round trip, not eight.
        let lines = [Side::Source, Side::Destination].map(|side| pair.params_lines(side));
        for (side, lines) in [Side::Source, Side::Destination].iter().zip(&lines) {
            if let Err(error) = pair.send_params(*side, lines).await {
                pair.close_all("setting TYPE/MODE/STRU failed");
                return Err(error);
            }
        }
        for (side, lines) in [Side::Source, Side::Destination].into_iter().zip(&lines) {
            if let Err(error) = pair.read_params(side, lines).await {
                pair.close_all("setting TYPE/MODE/STRU failed");
                return Err(error);
            }
        }
        Ok(pair)
    }

    /// A pair of logged-in sessions, TYPE/MODE/STRU not yet sent.
    #[allow(clippy::too_many_arguments)]
    fn from_sessions(
        src_session: Session,
        dst_session: Session,
        src: &ServerLogin,
        dst: &ServerLogin,
        params: FtpParams,
        limits: &Limits,
        check: Arc<dyn AddressCheck>,
        recorder: Recorder,
    ) -> Pair {
        let (progress, _) = tokio_watch::channel(Progress::Idle);
        Pair {
            src: src_session,
            dst: dst_session,
            logins: [src.clone(), dst.clone()],
            params,
            limits: limits.clone(),
            check,
            recorder,
            types: [None, None],
            source_features: None,
            home: [None, None],
            last: [None, None],
            deadline: None,
            progress,
            dead: None,
            data_tls: None,
            proof: proof::ProofState::default(),
            next_hint: None,
            ahead: None,
            owed: [0, 0],
            errored: false,
            gate: None,
            plan: Plan::FxpOnly,
            relay_gate: None,
            stream_hash: false,
            rest_stream: [None, None],
        }
    }

    /// How the next copies start (`bftp_core::route::plan`): third party only (the
    /// default), third party then a relay when both role orders are refused, or a relay.
    pub fn set_plan(&mut self, plan: Plan) {
        self.plan = plan;
    }

    /// How the next copy starts.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Whether a relayed copy computes the SHA-256 of its stream (the one relay that reads
    /// the bytes in user space; bftpd asks it for a job that requires a hash proof). Not for
    /// a resumed copy: its stream is only the file's tail.
    pub fn set_stream_hash(&mut self, on: bool) {
        self.stream_hash = on;
    }

    /// The daemon's caps on relays, shared by all its pairs (`None`: no caps).
    pub fn set_relay_gate(&mut self, gate: Option<Arc<crate::relay::RelayGate>>) {
        self.relay_gate = gate;
    }

    /// From now on each command either session sends (ABOR and QUIT excepted), and each
    /// reconnection, goes only if `gate` admits it ([`SendGate`]); `None` lifts the gate.
    pub fn set_gate(&mut self, gate: Option<Arc<dyn SendGate>>) {
        self.src.set_gate(gate.clone());
        self.dst.set_gate(gate.clone());
        self.gate = gate;
    }

    /// Whether the pair can still be used.
    pub fn is_usable(&self) -> bool {
        self.dead.is_none() && self.src.is_open() && self.dst.is_open()
    }

    /// A receiver of the copy's phase, for a progress line (see [`Progress`]).
    pub fn progress(&self) -> tokio_watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Names this pair in every transcript it hands out from now on (`p2`), so that the
    /// lines of pairs working side by side can be told apart.
    pub fn set_label(&self, label: &str) {
        self.recorder.set_label(label);
    }

    /// The name given with [`Pair::set_label`].
    pub fn label(&self) -> Option<String> {
        self.recorder.label()
    }

    /// What was recorded and not yet handed out with an outcome (the login, a listing).
    pub fn take_transcript(&mut self) -> Transcript {
        self.recorder.take()
    }

    /// QUIT both connections. A destination already told to store the next file (see
    /// [`Pair::expect_next`]) would not answer QUIT: then both are closed at once.
    pub async fn close(mut self) {
        if self.in_flight() {
            self.close_all("closed with the next file's transfer started");
            return;
        }
        tokio::join!(self.src.quit(), self.dst.quit());
    }

    /// Whether nothing ever went wrong on this pair (every copy and listing succeeded, no
    /// reconnection), it is open with nothing started ahead, and its destination was never
    /// sent STOU (which can change the server's later uploads in that session: see
    /// `Session::sent_unique`): only such a pair may be kept for another job.
    pub fn clean(&self) -> bool {
        !self.errored
            && self.is_usable()
            && !self.in_flight()
            && self.owed == [0, 0]
            && !self.dst.sent_unique()
    }

    /// Marks the pair as one that saw an error ([`Pair::clean`] is false from now on).
    pub fn mark_errored(&mut self) {
        self.errored = true;
    }

    /// NOOP on both connections at once: whether both still answer 2yz (a kept pair whose
    /// server closed an idle session is found out here, not in the middle of a copy). A
    /// pair that fails is marked errored.
    pub async fn alive(&mut self) -> bool {
        if !self.clean() {
            return false;
        }
        let deadline = self.reply_deadline();
        async fn noop(s: &mut Session, deadline: Instant) -> Result<Reply, SessionError> {
            s.send("NOOP").await?;
            s.read_reply_until(deadline).await
        }
        let (a, b) = tokio::join!(noop(&mut self.src, deadline), noop(&mut self.dst, deadline));
        let ok = |r: &Result<Reply, SessionError>| matches!(r, Ok(reply) if reply.code().class() == bftp_core::reply::ReplyClass::Completion);
        let alive = ok(&a) && ok(&b);
        if !alive {
            self.errored = true;
        }
        alive
    }

    /// Tells the pair which copy its caller makes next on it (`None`: none, or unknown), so
    /// that the copy now starting can send that copy's first commands ahead of time
    /// (`pipeline.rs`). A hint for the next [`Pair::copy`] only. Once a copy sent them,
    /// [`Pair::in_flight`] is true and the next copy must be that one: another one first
    /// closes and reopens both connections to call the started transfer off.
    pub fn expect_next(&mut self, next: Option<CopyRequest>) {
        self.next_hint = next;
    }

    /// Whether the destination was already told to store the next file announced with
    /// [`Pair::expect_next`]: that copy is under way and should be made next.
    pub fn in_flight(&self) -> bool {
        self.ahead.as_ref().is_some_and(|a| a.started.is_some())
    }

    /// Reads and drops the replies owed on `side` (commands sent ahead that no one claimed);
    /// a connection that does not give them is closed.
    async fn drain_owed(&mut self, side: Side) {
        while self.owed[index(side)] > 0 {
            if !self.session(side).is_open() {
                break;
            }
            self.owed[index(side)] -= 1;
            let deadline = self.reply_deadline();
            if self.session(side).read_reply_until(deadline).await.is_err() {
                self.session(side).close("no reply to a command sent ahead");
            }
        }
        self.owed[index(side)] = 0;
    }

    /// Reads the reply of one command sent ahead on `side` (claimed, so not dropped). Not
    /// remembered as the side's last reply: that stays the copy's own evidence.
    async fn read_owed(&mut self, side: Side) -> Result<Reply, SessionError> {
        self.claim_owed(side);
        let deadline = self.reply_deadline();
        self.session(side).read_reply_until(deadline).await
    }

    /// Reads the reply of `command`, sent ahead on `side` as a step of this copy itself:
    /// claimed like [`Pair::read_owed`], and remembered as the side's last reply.
    async fn read_owed_step(&mut self, side: Side, command: &str) -> Result<Reply, SessionError> {
        self.claim_owed(side);
        let deadline = self.reply_deadline();
        self.read_reply(side, command, deadline).await
    }

    /// One reply owed on `side` is now the reader's (not drained before the next command).
    fn claim_owed(&mut self, side: Side) {
        self.owed[index(side)] = self.owed[index(side)].saturating_sub(1);
    }

    /// The passive commands to try on `side`, in order: PASV, then EPSV; EPSV alone to a
    /// server reached over IPv6, since PASV cannot carry an IPv6 address (RFC 2428).
    fn passive_commands(&self, side: Side) -> &'static [&'static str] {
        let session = match side {
            Side::Source => &self.src,
            Side::Destination => &self.dst,
        };
        if session.peer().ip().to_canonical().is_ipv6() {
            &["EPSV"]
        } else {
            &["PASV", "EPSV"]
        }
    }

    /// Calls off the next copy's steps done ahead: when the destination was told to store
    /// it, both connections are closed (that transfer cannot be taken back), logged in again,
    /// and its partial destination file deleted (best effort, noted).
    async fn settle_ahead(&mut self, why: &str) -> Result<(), PairError> {
        let Some(ahead) = self.ahead.take() else {
            return Ok(());
        };
        if ahead.started.is_none() {
            return Ok(());
        }
        self.note(
            Side::Destination,
            &format!(
                "{why}: calling off the transfer of {} started ahead",
                ahead.request.dest_path
            ),
        );
        self.src.close(why);
        self.dst.close(why);
        self.owed = [0, 0];
        self.reopen(why).await?;
        let line = format!("DELE {}", ahead.request.dest_path);
        let result = self.exchange(Side::Destination, &line).await;
        let text = match &result {
            Ok(reply) => reply.to_string(),
            Err(e) => e.to_string(),
        };
        self.note(
            Side::Destination,
            &format!("partial file of the call-off transfer: {line} answered {text}"),
        );
        Ok(())
    }

    /// Copy one file server to server (RULES.md §6). `transfer.rs` documents the phases.
    ///
    /// `Err` only for job-level failures ([`JobFailure`]): the pair is closed, FXP was
    /// refused in both role orders, neither server offers passive mode, or
    /// reconnecting a silent server failed. Everything about this file (including a
    /// connection lost mid-transfer) is a [`CopyOutcome`].
    pub async fn copy(&mut self, request: &CopyRequest) -> Result<CopyOutcome, PairError> {
        if let Some(reason) = self.dead_reason() {
            return Err(PairError {
                failure: JobFailure::Closed { reason },
                disposition: outcome::connection_gone(),
                transcript: self.recorder.take(),
            });
        }
        match &self.plan {
            Plan::Relay(_) => {
                self.protect_relay_legs().await?;
            }
            Plan::FxpThenRelay => match self.protect_data().await {
                // TLS cannot be had between the servers: two encrypted legs through bftpd.
                Err(PairError {
                    failure: JobFailure::DataTls { explanation },
                    ..
                }) => {
                    self.note(Side::Source, &format!("relay: {explanation}"));
                    self.plan = Plan::Relay(RelayReason::DataTls {
                        detail: explanation,
                    });
                    self.protect_relay_legs().await?;
                }
                other => other?,
            },
            Plan::FxpOnly => self.protect_data().await?,
        }
        transfer::run(self, request).await
    }

    /// [`Pair::copy`], unless `abort` completes first (a cancel, the end of a shutdown
    /// grace): then ABOR goes to both servers at once (RULES.md §9), their replies are read
    /// for at most [`ABOR_WAIT`] (a server blocked waiting for a data connection ignores
    /// ABOR), both connections are closed and the copy ends in [`JobFailure::Aborted`].
    /// The partial destination file is left as it is: the caller decides (bftpd deletes a
    /// cancelled replace copy's, and a unique copy's when it is provably its own, over
    /// [`Pair::reopen`]).
    pub async fn copy_or_abort(
        &mut self,
        request: &CopyRequest,
        abort: impl std::future::Future<Output = ()>,
        reason: &str,
    ) -> Result<CopyOutcome, PairError> {
        {
            let copy = self.copy(request);
            tokio::pin!(copy, abort);
            tokio::select! {
                biased;
                result = &mut copy => return result,
                () = &mut abort => {}
            }
        }
        self.deadline = None;
        self.abort_both(reason).await;
        self.progress.send_replace(Progress::Finished {
            path: request.source_path.clone(),
            bytes: None,
            success: false,
        });
        Err(PairError {
            failure: JobFailure::Aborted {
                reason: reason.to_owned(),
            },
            disposition: outcome::connection_gone(),
            transcript: self.recorder.take(),
        })
    }

    /// Log in again on each closed connection (after an abort, to clean up): the pair is
    /// usable again.
    pub async fn reopen(&mut self, reason: &str) -> Result<(), PairError> {
        for side in [Side::Source, Side::Destination] {
            if !self.session(side).is_open() {
                self.reconnect(side, reason).await?;
            }
        }
        self.dead = None;
        Ok(())
    }

    /// ABOR on both connections at once, then close both (the pair is dead).
    async fn abort_both(&mut self, why: &str) {
        let deadline = Instant::now() + self.limits.reply_timeout.min(ABOR_WAIT);
        for side in [Side::Source, Side::Destination] {
            self.note(side, &format!("{why}: ABOR"));
        }
        tokio::join!(abor(&mut self.src, deadline), abor(&mut self.dst, deadline));
        self.close_all(why);
    }

    fn dead_reason(&self) -> Option<String> {
        if let Some(reason) = &self.dead {
            return Some(reason.clone());
        }
        for (side, session) in [(Side::Source, &self.src), (Side::Destination, &self.dst)] {
            if !session.is_open() {
                return Some(format!("the {side} control connection is closed"));
            }
        }
        None
    }

    fn session(&mut self, side: Side) -> &mut Session {
        match side {
            Side::Source => &mut self.src,
            Side::Destination => &mut self.dst,
        }
    }

    fn host(&self, side: Side) -> &str {
        &self.logins[index(side)].host
    }

    /// The limits the pair was opened with (a tree's walk reads its bounds there).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Adds a note to the pair's transcript (a fallback taken; a kept pair's origin).
    pub fn note(&self, side: Side, text: &str) {
        self.recorder.note(side, text);
    }

    /// Classify a reply or a session failure from `side` (RULES.md §5, with overrides).
    fn classify(
        &self,
        side: Side,
        command: CommandKind,
        result: &Result<Reply, SessionError>,
    ) -> Disposition {
        let outcome = match result {
            Ok(reply) => Outcome::Reply(reply.code()),
            Err(error) => error.outcome(),
        };
        classify_for_host(self.host(side), &self.limits.overrides, command, outcome)
    }

    /// When the next reply must have arrived: the reply timeout, within the watchdog.
    fn reply_deadline(&self) -> Instant {
        let by_reply = Instant::now() + self.limits.reply_timeout;
        match self.deadline {
            Some(deadline) => by_reply.min(deadline),
            None => by_reply,
        }
    }

    fn remember(&mut self, side: Side, command: &str, result: &Result<Reply, SessionError>) {
        self.last[index(side)] = Some(match result {
            Ok(reply) => LastReply::from_reply(command, reply),
            Err(error) => LastReply::from_error(command, error),
        });
    }

    /// Send a command to `side` and read its reply (reply timeout, within the watchdog).
    async fn exchange(&mut self, side: Side, line: &str) -> Result<Reply, SessionError> {
        self.drain_owed(side).await;
        let deadline = self.reply_deadline();
        let session = self.session(side);
        let result = match session.send(line).await {
            Ok(()) => session.read_reply_until(deadline).await,
            Err(e) => Err(e),
        };
        self.remember(side, &verb(line), &result);
        result
    }

    /// Read a further reply from `side` (the final one after a 1yz) by `deadline`.
    async fn read_reply(
        &mut self,
        side: Side,
        command: &str,
        deadline: Instant,
    ) -> Result<Reply, SessionError> {
        let result = self.session(side).read_reply_until(deadline).await;
        self.remember(side, command, &result);
        result
    }

    fn close_all(&mut self, why: &str) {
        self.src.close(why);
        self.dst.close(why);
        self.dead = Some(why.to_owned());
        self.owed = [0, 0];
        self.ahead = None;
    }

    fn job_error(
        &mut self,
        side: Side,
        line: &str,
        result: Result<Reply, SessionError>,
        disposition: Disposition,
    ) -> PairError {
        let host = self.host(side).to_owned();
        let failure = match result {
            Ok(reply) => JobFailure::Refused {
                side,
                host,
                command: crate::transcript::mask_secrets(line),
                reply,
            },
            Err(error) => JobFailure::Session {
                side,
                host,
                command: crate::transcript::mask_secrets(line),
                error,
            },
        };
        PairError {
            failure,
            disposition,
            transcript: self.recorder.take(),
        }
    }

    /// SIZE of `src_path` on the source and of `dst_path` on the destination (each when
    /// given), both at once: the two control connections are independent, so the two round trips
    /// overlap. Image type first where needed, as [`Pair::size_answer`].
    async fn size_both(
        &mut self,
        src_path: Option<&str>,
        dst_path: Option<&str>,
    ) -> [Option<SizeAnswer>; 2] {
        self.drain_owed(Side::Source).await;
        self.drain_owed(Side::Destination).await;
        let deadline = self.reply_deadline();
        let limits = &self.limits;
        let [src_host, dst_host] = [&self.logins[0].host, &self.logins[1].host];
        let [src_type, dst_type] = &mut self.types;
        let (src, dst) = (&mut self.src, &mut self.dst);
        let (a, b) = tokio::join!(
            async {
                match src_path {
                    Some(path) => {
                        Some(size_on(src, src_type, src_host, limits, deadline, path).await)
                    }
                    None => None,
                }
            },
            async {
                match dst_path {
                    Some(path) => {
                        Some(size_on(dst, dst_type, dst_host, limits, deadline, path).await)
                    }
                    None => None,
                }
            }
        );
        let mut answers = [None, None];
        for (i, answer) in [a, b].into_iter().enumerate() {
            if let Some((answer, last)) = answer {
                self.last[i] = Some(last);
                answers[i] = Some(answer);
            }
        }
        answers
    }

    /// SIZE of `path` on `side`, in image type (proFTPD refuses SIZE in ASCII mode).
    async fn size_answer(&mut self, side: Side, path: &str) -> SizeAnswer {
        if let Err((result, disposition)) = self.ensure_type(side, TransferType::Image).await {
            return SizeAnswer::Failed(result, disposition);
        }
        let result = self.exchange(side, &format!("SIZE {path}")).await;
        let disposition = self.classify(side, CommandKind::Size, &result);
        size_answer_of(result, disposition)
    }

    /// The login directory of `side` (PWD, RFC 959 257 reply), asked once.
    async fn home(&mut self, side: Side) -> Option<String> {
        if let Some(home) = &self.home[index(side)] {
            return Some(home.clone());
        }
        let result = self.exchange(side, "PWD").await;
        let home = match &result {
            Ok(reply) if reply.code().get() == 257 => {
                crate::parse::parse_pwd_reply(&reply.text()).ok()
            }
            _ => None,
        };
        self.home[index(side)] = home.clone();
        home
    }

    /// Close the connection to `side` and log in again (a server that fell silent
    /// ignores ABOR and QUIT), with TYPE/MODE/STRU.
    async fn reconnect(&mut self, side: Side, reason: &str) -> Result<(), PairError> {
        self.session(side).close(reason);
        let login = self.logins[index(side)].clone();
        let session = match Session::connect_gated(
            side,
            &login,
            &self.limits,
            &*self.check,
            self.recorder.clone(),
            self.gate.clone(),
        )
        .await
        {
            Ok(session) => session,
            Err(error) => {
                self.dead = Some(format!("reconnecting to the {side} failed"));
                return Err(PairError {
                    disposition: error.disposition(&login.host, &self.limits),
                    failure: JobFailure::Connect { side, error },
                    transcript: self.recorder.take(),
                });
            }
        };
        *self.session(side) = session;
        self.owed[index(side)] = 0;
        self.errored = true;
        self.types[index(side)] = None;
        self.home[index(side)] = None;
        if side == Side::Source {
            self.source_features = None;
        }
        self.proof.forget(side);
        self.rest_stream[index(side)] = None;
        self.set_params(side).await
    }

    fn remaining(&self) -> Duration {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(self.limits.transfer_timeout)
    }
}

/// How long ABOR may take to be answered before the connection is closed: servers
/// blocked waiting for a data connection ignore it (RULES.md §6).
pub(crate) const ABOR_WAIT: Duration = Duration::from_secs(2);

/// Send ABOR on `session` and read by `deadline` up to two replies: the interrupted
/// transfer's final one (426) and ABOR's own (225/226). The number that arrived: with
/// two the connection is in step again. A timeout closes the session.
pub(crate) async fn abor(session: &mut Session, deadline: Instant) -> usize {
    if !session.is_open() || session.send("ABOR").await.is_err() {
        return 0;
    }
    let mut replies = 0;
    while replies < 2 {
        match session.read_reply_until(deadline).await {
            Ok(reply) => {
                replies += 1;
                // 225: no transfer was in progress, nothing else will come.
                if reply.code().get() == 225 {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    replies
}

/// SIZE of `path` on one session (image type first if it is not in it), by `deadline`:
/// the answer and the last reply, for [`Pair::last`]. Borrows one session only, so that
/// [`Pair::size_both`] can ask both at once.
async fn size_on(
    session: &mut Session,
    current: &mut Option<TransferType>,
    host: &str,
    limits: &Limits,
    deadline: Instant,
    path: &str,
) -> (SizeAnswer, LastReply) {
    let classify = |command, result: &Result<Reply, SessionError>| {
        let outcome = match result {
            Ok(reply) => Outcome::Reply(reply.code()),
            Err(error) => error.outcome(),
        };
        classify_for_host(host, &limits.overrides, command, outcome)
    };
    async fn exchange(
        session: &mut Session,
        line: String,
        deadline: Instant,
    ) -> (Result<Reply, SessionError>, LastReply) {
        let result = match session.send(&line).await {
            Ok(()) => session.read_reply_until(deadline).await,
            Err(e) => Err(e),
        };
        let last = match &result {
            Ok(reply) => LastReply::from_reply(&verb(&line), reply),
            Err(error) => LastReply::from_error(&verb(&line), error),
        };
        (result, last)
    }
    if *current != Some(TransferType::Image) {
        let line = format!("TYPE {}", TransferType::Image.ftp_arg());
        let (result, last) = exchange(session, line, deadline).await;
        match classify(CommandKind::Type, &result) {
            Disposition::Done => *current = Some(TransferType::Image),
            disposition => {
                *current = None;
                return (SizeAnswer::Failed(result, disposition), last);
            }
        }
    }
    let (result, last) = exchange(session, format!("SIZE {path}"), deadline).await;
    let disposition = classify(CommandKind::Size, &result);
    (size_answer_of(result, disposition), last)
}

/// What a SIZE reply (and its classification) says.
fn size_answer_of(result: Result<Reply, SessionError>, disposition: Disposition) -> SizeAnswer {
    match (disposition, &result) {
        (Disposition::Done, Ok(reply)) => match reply.parse_numbers(crate::parse::parse_size_reply)
        {
            Ok(size) => SizeAnswer::Size(size),
            Err(e) => SizeAnswer::Unavailable(format!("unreadable SIZE reply: {e}")),
        },
        (Disposition::NotSupported, Ok(reply)) => {
            SizeAnswer::Unavailable(format!("SIZE answered {reply}"))
        }
        (Disposition::Permanent(bftp_core::reply::PermanentKind::FileUnavailable), Ok(_)) => {
            SizeAnswer::NoFile(result)
        }
        _ => SizeAnswer::Failed(result, disposition),
    }
}

fn connect_failure(
    side: Side,
    login: &ServerLogin,
    limits: &Limits,
    recorder: &Recorder,
    error: crate::session::ConnectError,
) -> PairError {
    PairError {
        disposition: error.disposition(&login.host, limits),
        failure: JobFailure::Connect { side, error },
        transcript: recorder.take(),
    }
}

/// A SIZE answer.
enum SizeAnswer {
    Size(u64),
    /// 550: no such (plain) file.
    NoFile(Result<Reply, SessionError>),
    /// SIZE not offered, or an unreadable number: no size evidence.
    Unavailable(String),
    /// Anything else: a transient or permanent failure of the session.
    Failed(Result<Reply, SessionError>, Disposition),
}

#[cfg(test)]
mod tests;
