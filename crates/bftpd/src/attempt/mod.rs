//! One attempt of one job, with the engine: the [`Executor`] the scheduler runs.
//!
//! The per-file ledger is written as it happens, each change durable before the next
//! action that depends on it (RULES.md §4.2). Effects that are not safe to repeat are fenced by
//! an intent recorded before them (RULES.md §4.3):
//! - APPE: the destination size before, and the source size; after a crash the destination
//!   size tells whether the append happened (before + source), did not (before), or cannot
//!   be told (anything else: `uncertain`);
//! - STOU: the source size, then the name the server announced as soon as it came; after a
//!   crash SIZE of that name settles the member (`bftp_core::intent::resolve`). STOU copies
//!   run one at a time per destination directory, a name announced to two copies stays the
//!   first one's, and a failed STOU's file is deleted only when provably ours (see
//!   ARCHITECTURE.md, "Intents and unique (STOU) copies");
//! - DELE of the source of a `move`: recorded together with the member's success, so that
//!   after a crash the delete is completed; of a `delete` job's file: recorded before it. A
//!   refused DELE is checked with SIZE: a file that is gone was deleted (by us, before the
//!   crash, when the intent was already there).
//!
//! At shutdown the file in flight may finish within the grace period, but no new file starts
//! (the `drain` signal); the job goes back to the queue.
//!
//! The attempt is `run.rs` (its phases), its members `members.rs`; one member's life is
//! `member.rs`, each step in its own file: `resolve`, `intent` (the fence), `copy`,
//! `prove`, `outcome` and `record`, with `stou` and `delete` for their commands.
//! Every attempt shares the executor's `AttemptCtx`; a member's state is its
//! `MemberCtx`; the steps that only send SIZE and DELE take any `conn::Conn`.

mod conn;
mod copy;
mod delete;
mod fence;
pub mod gates;
mod intent;
mod ledger_batch;
pub mod live;
mod log;
mod member;
mod members;
mod outcome;
mod prove;
mod record;
mod refusals;
mod resolve;
mod resume;
mod run;
mod stou;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_core::ledger;
use bftp_core::reply::TransientKind;
use bftp_core::{
    Decision, DestCommand, Disposition, Evidence, Intent, JobSpec, MemberState, Probe,
};
use bftp_ftp::{
    ActionError, AddressCheck, CopyOutcome, CopyRequest, Entry, Limits, Pair, PairError,
    ServerLogin, Side, Transcript,
};
use bftp_store::{
    AttemptTranscript, Job, JobId, LastReply, Member, MemberUpdate, NewMember, StoreError,
};
use tokio_util::sync::CancellationToken;

use crate::hosts::unique::{DirGuard, DirKey};
use crate::lanes::paths::{copy_request, source_path};
use crate::lanes::work::{data_connection_failed, WorkQueue};
use crate::lanes::Step;
use crate::metrics::{FileResult, Metrics};
use crate::scheduler::{AttemptEnd, AttemptFuture, AttemptSignals, Executor};
use crate::secrets::Secrets;
use crate::store::Store;

use self::conn::Conn;
use self::{log::*, member::*, members::*, outcome::*, record::*, stou::*};

/// What every attempt of the executor shares: built once, handed to each attempt as one
/// `Arc` (an attempt's own state is in its [`Run`], a file's in its [`MemberCtx`]).
pub struct AttemptCtx {
    pub store: Store,
    pub secrets: Arc<Secrets>,
    pub limits: Limits,
    pub check: Arc<dyn AddressCheck>,
    /// Connection slots per host, shared with every other job and `bftp transfer`.
    pub hosts: Arc<crate::hosts::HostLimits>,
    pub metrics: Arc<Metrics>,
    /// The files in flight, for the API's views.
    pub live: Arc<crate::attempt::live::Live>,
    /// `[ftp] watch_progress`: look at a running copy's bytes.
    pub watch_progress: bool,
    /// The time every ledger change is stamped with.
    pub clock: crate::clock::Clock,
    /// What the daemon remembers of pairs of servers that refused the third party.
    pub pairs: crate::hosts::pairs::PairMemories,
    /// `[ftp] resume_from`: a replace copy of a file this large or larger is resumable
    /// (`None`: none is).
    pub resume_from: Option<u64>,
    /// `[ftp] data_path`, `relay`, `pair_memory`: the path each job runs with
    /// (`DataPathPolicy::effective_data_path`) and how long a refusing pair is remembered.
    pub data_paths: crate::hosts::DataPathPolicy,
    /// The windows and breakers of hosts (RULES.md §16.4, §16.5); `None` in tests without.
    pub gates: Option<Arc<crate::hosts::gates::Gates>>,
}

/// The [`Executor`] the scheduler runs: one attempt of one job at a time per job.
pub struct FtpExecutor {
    ctx: Arc<AttemptCtx>,
}

impl FtpExecutor {
    pub fn new(ctx: AttemptCtx) -> FtpExecutor {
        FtpExecutor { ctx: Arc::new(ctx) }
    }
}

impl Executor for FtpExecutor {
    fn attempt(&self, job: Job, attempt: u32, signals: AttemptSignals) -> AttemptFuture {
        let ctx = &self.ctx;
        // The attempt's own drain: shutdown's, or its window closing (`gates::WindowWatch`).
        let shutdown = signals.drain.clone();
        let drain = signals.drain.child_token();
        let window = ctx
            .gates
            .as_ref()
            .and_then(|g| gates::WindowWatch::start(g, &job, &ctx.clock, &drain, &signals.abort));
        let run = Run {
            ctx: ctx.clone(),
            drain,
            abort: signals.abort.clone(),
            id: job.id,
            log: Arc::default(),
            claims: Mutex::default(),
            first: Mutex::default(),
            batch: crate::attempt::ledger_batch::Batch::new(
                ctx.store.clone(),
                ctx.clock.clone(),
                job.id,
            ),
            gate: ctx
                .store
                .cluster()
                .and_then(|c| c.lease(job.id))
                .map(|cell| Arc::new(crate::attempt::fence::LeaseGate::new(cell))),
            routing: std::sync::OnceLock::new(),
        };
        let abort = signals.abort;
        let log = run.log.clone();
        let store = ctx.store.clone();
        let gate = run.gate.clone();
        Box::pin(async move {
            let id = job.id;
            let run = run.run(job, attempt);
            tokio::pin!(run);
            let end = tokio::select! {
                end = &mut run => end,
                _ = abort.cancelled() => {
                    // A copy in flight sends ABOR to both servers and closes (bounded by
                    // the engine); anything else ends at its next step. Past this grace,
                    // dropping the attempt closes the connections.
                    tokio::time::timeout(ABORT_GRACE, &mut run)
                        .await
                        .unwrap_or(AttemptEnd::Interrupted)
                }
            };
            // Stopped by its own fence: whatever failed after the deadline failed for that
            // (RULES.md §4.8), and the job goes back to the queue at once, not after a backoff
            // (its write is refused anyway when another node holds the job).
            let end = match (end, gate.as_ref().map(|g| g.check())) {
                (AttemptEnd::Transient { .. }, Some(Err(_))) => AttemptEnd::Interrupted,
                (end, _) => end,
            };
            // Stopped by its window closing (not by shutdown, nor a job-level end): the job
            // waits for the window, this attempt not counted.
            let end = match (end, window.as_ref().and_then(|w| w.stopped())) {
                (AttemptEnd::Interrupted | AttemptEnd::Transient { .. }, Some(wait))
                    if !shutdown.is_cancelled() =>
                {
                    AttemptEnd::Wait(wait)
                }
                (end, _) => end,
            };
            if let Some(w) = &window {
                w.done.cancel();
            }
            let lines = log.lock().unwrap_or_else(|p| p.into_inner()).take();
            if !lines.is_empty() {
                let t = AttemptTranscript { attempt, lines };
                let saved = store.call(move |s| s.set_transcript(id, t)).await;
                if let Err(error) = saved {
                    tracing::warn!(job = id.0, %error, "cannot keep the attempt's transcript for the report");
                }
            }
            end
        })
    }
}

/// How long an aborted attempt may take to send ABOR, close, and (on a cancel) log in again
/// to delete the partial file: the engine's bound on waiting for ABOR's replies plus a login.
const ABORT_GRACE: Duration = Duration::from_secs(5);

fn last(r: Option<&bftp_ftp::LastReply>) -> Option<LastReply> {
    r.map(|r| LastReply {
        code: r.code.map(u16::from),
        text: format!("{}: {}", r.command, r.text),
    })
}

/// One attempt of one job: the executor's shared handles, and the attempt's own state.
struct Run {
    ctx: Arc<AttemptCtx>,
    /// Shutdown began: finish the file in flight, start no other.
    drain: CancellationToken,
    /// Cancel or the end of the shutdown grace: ABOR the copy in flight.
    abort: CancellationToken,
    id: JobId,
    /// Shared with the attempt's future, which stores it however the attempt ends.
    log: Arc<Mutex<AttemptLog>>,
    /// Unique copies: destination name -> the member whose file it is (recorded, or
    /// announced and not yet settled). No two members claim one name.
    claims: Mutex<std::collections::HashMap<String, String>>,
    /// The first pair's pool key and the slots it holds: that pair may be kept for another
    /// job when it closes (`crate::hosts::pool`).
    first: Mutex<
        Option<(
            crate::hosts::pool::PoolKey,
            crate::hosts::Slots,
            crate::hosts::pool::Origin,
        )>,
    >,
    /// Member records that nothing waits for, written in groups (`crate::attempt::ledger_batch`).
    batch: Arc<crate::attempt::ledger_batch::Batch>,
    /// On a shared store, this node's lease on the job, asked before each command sent for
    /// it (RULES.md §4.8, `crate::attempt::fence`); none with a store of one node.
    gate: Option<Arc<crate::attempt::fence::LeaseGate>>,
    /// How the attempt's copies travel (`crate::lanes::routing`), set before the first pair.
    routing: std::sync::OnceLock<crate::lanes::routing::Routing>,
}

/// A member left pending by this attempt: why, and whether it is worth a second try within
/// the attempt ([`crate::lanes::work`]).
struct Pending {
    reason: String,
    again: bool,
}

impl From<String> for Pending {
    fn from(reason: String) -> Pending {
        Pending {
            reason,
            again: false,
        }
    }
}

/// Pending, or succeeded with an effect still to complete (the DELE of a `move`).
fn needs_work(m: &Member) -> bool {
    m.state == MemberState::Pending || (m.state == MemberState::Succeeded && m.intent.is_some())
}

/// A store failure inside an attempt: the attempt stops; what was not recorded is done again.
fn store_failed(e: StoreError) -> AttemptEnd {
    tracing::error!(error = %e, "store write failed during an attempt");
    AttemptEnd::Transient {
        reason: format!("the daemon could not record progress: {e}"),
    }
}

fn pair_failed(e: &PairError) -> AttemptEnd {
    if e.is_permanent() {
        AttemptEnd::JobPermanent {
            reason: e.to_string(),
        }
    } else {
        AttemptEnd::Transient {
            reason: e.to_string(),
        }
    }
}

impl Run {
    async fn update(&self, index: u32, u: MemberUpdate) -> Result<Member, StoreError> {
        let id = self.id;
        let now = self.ctx.clock.now();
        self.ctx
            .store
            .call(move |s| s.update_member(id, index, u, now))
            .await
    }

    fn keep(&self, t: Transcript) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).keep(t);
    }

    /// The gate each of the attempt's connections asks before it sends a command.
    fn send_gate(&self) -> Option<Arc<dyn bftp_ftp::SendGate>> {
        self.gate.clone().map(|g| g as Arc<dyn bftp_ftp::SendGate>)
    }

    /// `Some` once this node may send nothing more for the job (RULES.md §4.8): its lease's
    /// deadline passed by its own clock with no renewal confirmed, or the lease is lost. The
    /// attempt then stops as at shutdown (its `drain`): no file starts, none is cleaned up,
    /// the node that holds the job next does the rest.
    fn fenced(&self) -> Option<AttemptEnd> {
        let why = self.gate.as_ref()?.check().err()?;
        if !self.drain.is_cancelled() {
            tracing::warn!(job = self.id.0, %why, "stopping the attempt");
            self.drain.cancel();
        }
        Some(AttemptEnd::Interrupted)
    }

    /// Completes when a copy in flight must stop: a cancel, the end of the shutdown grace,
    /// or the end of this node's lease by its own clock.
    async fn stop_copy(&self) {
        match &self.gate {
            Some(gate) => tokio::select! {
                () = self.abort.cancelled() => {}
                () = gate.expired() => {}
            },
            None => self.abort.cancelled().await,
        }
    }

    /// Keeps what the pair recorded since its last outcome, then closes it, or keeps the
    /// first pair (with its slots) for another job when nothing went wrong on it.
    async fn close(&self, mut pair: Pair) {
        self.keep(pair.take_transcript());
        let first = match pair.label().as_deref() {
            Some("p1") => self.first.lock().unwrap_or_else(|p| p.into_inner()).take(),
            _ => None,
        };
        // A kept pair serves the next job under that job's own fence.
        pair.set_gate(None);
        match first {
            Some((key, slots, origin)) => self.ctx.hosts.pool.put(key, pair, slots, origin).await,
            None => pair.close().await,
        }
    }

    /// Where the bytes of `m`'s copy can be seen while it runs: a `replace` copy's
    /// destination file (see [`crate::attempt::live`]).
    fn look(&self, spec: &JobSpec, m: &Member) -> Option<crate::attempt::live::Look> {
        let dst = spec.destination.as_ref()?;
        if !self.ctx.watch_progress
            || spec.disposition == Disposition::Delete
            || spec.dest_command != DestCommand::Replace
        {
            return None;
        }
        Some(crate::attempt::live::Look {
            login: ServerLogin::from_endpoint(dst),
            path: copy_request(spec, &m.name).dest_path,
            limits: self.ctx.limits.clone(),
            check: self.ctx.check.clone(),
            hosts: self.ctx.hosts.clone(),
            gate: self.send_gate(),
        })
    }

    /// Opens a pair named `label` in the attempt's transcript (`p1`, `p2`...), its login
    /// lines included when it fails.
    async fn open(&self, spec: &JobSpec, label: &str) -> Result<Pair, PairError> {
        let src = ServerLogin::from_endpoint(&spec.source);
        // A delete job has no destination: both connections go to the source.
        let dst = spec
            .destination
            .as_ref()
            .map(ServerLogin::from_endpoint)
            .unwrap_or_else(|| src.clone());
        let opened = Pair::open_gated(
            &src,
            &dst,
            spec.params,
            &self.ctx.limits,
            self.ctx.check.clone(),
            self.send_gate(),
        )
        .await;
        if let Some(gates) = &self.ctx.gates {
            let dst = spec.destination.as_ref().unwrap_or(&spec.source);
            match &opened {
                Ok(_) => {
                    gates.breaker.succeeded(&spec.source.host, spec.source.port);
                    gates.breaker.succeeded(&dst.host, dst.port);
                }
                Err(e) => {
                    if let Some((side, failure)) =
                        gates::failure_of(e, |c| self.ctx.hosts.is_too_many(c))
                    {
                        let ep = match side {
                            bftp_ftp::Side::Source => &spec.source,
                            bftp_ftp::Side::Destination => dst,
                        };
                        let why = e.failure.to_string();
                        gates
                            .breaker
                            .failed(&ep.host, ep.port, failure, &why, Some(self.id));
                    }
                }
            }
        }
        match opened {
            Ok(mut pair) => {
                pair.set_label(label);
                if let Some(routing) = self.routing.get() {
                    routing.ready(&mut pair);
                }
                Ok(pair)
            }
            Err(mut e) => {
                e.transcript.label = Some(label.to_owned());
                Err(e)
            }
        }
    }
}
