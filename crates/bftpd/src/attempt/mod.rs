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

mod fence;
mod ledger_batch;
pub mod live;
mod refusals;

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

/// Lines of an attempt's transcript the report keeps: the last ones, where the failure is.
const TRANSCRIPT_LINES: usize = 300;

/// The transcript of one attempt, for the report (RFC 1068 always mailed it): every
/// transcript the engine handed out (login, listing, each copy), the last
/// [`TRANSCRIPT_LINES`] lines kept. PASS and ACCT are masked by the engine.
///
/// Parallel pairs hand their transcripts over as their copies end, not in the order the
/// lines were said: each line is put on the attempt's one clock (milliseconds since the
/// attempt began) and in time order, and labelled with its pair (`[p2]`).
///
/// A line is kept as the engine's entry and written out only when the report takes the
/// log: most lines of a long job leave the window again before that, and are never
/// formatted.
struct AttemptLog {
    clock: std::time::Instant,
    /// Sorted by the first field, the line's time on `clock` (a deque: the oldest line
    /// leaves at the front once there are [`TRANSCRIPT_LINES`], for every line a copy adds).
    lines: VecDeque<(u64, Kept)>,
    dropped: usize,
}

/// One line of an [`AttemptLog`], not yet written out.
enum Kept {
    Entry {
        pair: Arc<str>,
        entry: Entry,
    },
    /// Where a pair's own transcript dropped entries.
    Omitted {
        pair: Arc<str>,
        count: usize,
    },
}

impl Kept {
    fn render(&self, at: u64) -> String {
        match self {
            Kept::Entry { pair, entry } => format!("[{at:>7} ms] [{pair}] {entry}"),
            Kept::Omitted { pair, count } => {
                format!("[{at:>7} ms] [{pair}] [... {count} entries omitted ...]")
            }
        }
    }
}

impl Default for AttemptLog {
    fn default() -> Self {
        AttemptLog {
            clock: std::time::Instant::now(),
            lines: VecDeque::new(),
            dropped: 0,
        }
    }
}

impl AttemptLog {
    fn keep(&mut self, t: Transcript) {
        // A recorder's clock started with its pair: inside the attempt, or before it for a
        // kept pair (its lines are moved back onto the attempt's clock).
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (ahead, behind) = t.started.map_or((0, 0), |s| {
            (
                ms(s.saturating_duration_since(self.clock)),
                ms(self.clock.saturating_duration_since(s)),
            )
        });
        let pair: Arc<str> = Arc::from(t.label.as_deref().unwrap_or("p?"));
        let (omitted, omitted_at) = (t.omitted, t.omitted_at);
        for (i, entry) in t.entries.into_iter().enumerate() {
            let at = ahead.saturating_add(entry.at_ms).saturating_sub(behind);
            if omitted > 0 && i == omitted_at {
                self.insert(at, || Kept::Omitted {
                    pair: pair.clone(),
                    count: omitted,
                });
            }
            self.insert(at, || Kept::Entry {
                pair: pair.clone(),
                entry,
            });
        }
    }

    /// In time order, after the lines of the same time already there. A line that would
    /// be the oldest of a full window leaves at once: it is counted, not made.
    fn insert(&mut self, at: u64, line: impl FnOnce() -> Kept) {
        let i = self.lines.partition_point(|(t, _)| *t <= at);
        if i == 0 && self.lines.len() >= TRANSCRIPT_LINES {
            self.dropped += 1;
            return;
        }
        self.lines.insert(i, (at, line()));
        if self.lines.len() > TRANSCRIPT_LINES {
            self.lines.pop_front();
            self.dropped += 1;
        }
    }

    fn take(&mut self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.lines.len() + 1);
        if self.dropped > 0 {
            out.push(format!("[... {} earlier lines omitted ...]", self.dropped));
        }
        out.extend(self.lines.drain(..).map(|(at, l)| l.render(at)));
        self.dropped = 0;
        out
    }
}

pub struct FtpExecutor {
    pub store: Store,
    pub secrets: Arc<Secrets>,
    pub limits: Limits,
    pub check: Arc<dyn AddressCheck>,
    pub hosts: Arc<crate::hosts::HostLimits>,
    pub metrics: Arc<Metrics>,
    /// The files in flight, for the API's views.
    pub live: Arc<crate::attempt::live::Live>,
    /// `[ftp] watch_progress`: look at a running copy's bytes.
    pub watch_progress: bool,
    pub clock: crate::clock::Clock,
}

impl Executor for FtpExecutor {
    fn attempt(&self, job: Job, attempt: u32, signals: AttemptSignals) -> AttemptFuture {
        let run = Run {
            store: self.store.clone(),
            secrets: self.secrets.clone(),
            limits: self.limits.clone(),
            check: self.check.clone(),
            hosts: self.hosts.clone(),
            metrics: self.metrics.clone(),
            live: self.live.clone(),
            watch_progress: self.watch_progress,
            clock: self.clock.clone(),
            drain: signals.drain,
            abort: signals.abort.clone(),
            id: job.id,
            log: Arc::default(),
            claims: Mutex::default(),
            first: Mutex::default(),
            batch: crate::attempt::ledger_batch::Batch::new(
                self.store.clone(),
                self.clock.clone(),
                job.id,
            ),
            gate: self
                .store
                .cluster()
                .and_then(|c| c.lease(job.id))
                .map(|cell| Arc::new(crate::attempt::fence::LeaseGate::new(cell))),
        };
        let abort = signals.abort;
        let log = run.log.clone();
        let store = self.store.clone();
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

struct Run {
    store: Store,
    secrets: Arc<Secrets>,
    limits: Limits,
    check: Arc<dyn AddressCheck>,
    /// Connection slots per host, shared with every other job and `bftp transfer`.
    hosts: Arc<crate::hosts::HostLimits>,
    metrics: Arc<Metrics>,
    live: Arc<crate::attempt::live::Live>,
    watch_progress: bool,
    /// The time every ledger change is stamped with.
    clock: crate::clock::Clock,
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

/// What a SIZE before an unrepeatable command found.
enum Fence {
    /// The size (`None`: no such file on the destination).
    Size(Option<u64>),
    /// The server has no SIZE (or refused it for good), and it was not required.
    Unsupported,
    /// The member is settled (failed for good), or left pending for a retry.
    Settled(Option<Pending>),
}

/// A copy's result, the STOU names announced to it, and who else one of them was told to.
type Announcements = (Result<CopyOutcome, PairError>, Vec<String>, Option<String>);

/// What a unique copy's STOUs announced, for its ledger entry (empty for another command):
/// the names, who else one of them was told to, the source's size as fenced, and the
/// destination directory it holds.
struct UniqueCopy<'a> {
    announced: &'a [String],
    collided: Option<String>,
    source_size: Option<u64>,
    dir: Option<&'a DirGuard>,
}

/// What a DELE of a source file did, with SIZE as the evidence when it was refused.
enum Dele {
    Deleted(bftp_ftp::parse::Reply),
    /// Refused, and SIZE says there is no such file.
    Absent(ActionError),
    /// Refused, and the file is still there. `retry`: the refusal was transient.
    Refused {
        refused: ActionError,
        retry: bool,
    },
    /// Refused, and SIZE cannot tell whether the file is there.
    Unknown {
        refused: ActionError,
        size: ActionError,
        retry: bool,
    },
}

impl Dele {
    fn retry(&self) -> bool {
        matches!(
            self,
            Dele::Refused { retry: true, .. } | Dele::Unknown { retry: true, .. }
        )
    }
}

async fn dele(pair: &mut Pair, path: &str) -> Dele {
    let refused = match pair.delete(Side::Source, path).await {
        Ok(reply) => return Dele::Deleted(reply),
        Err(e) => e,
    };
    // On a dead pair SIZE is an error that asks for a retry.
    match pair.size(Side::Source, path).await {
        Ok(None) => Dele::Absent(refused),
        Ok(Some(_)) => {
            let retry = refused.disposition().is_transient();
            Dele::Refused { refused, retry }
        }
        Err(size) => {
            let retry = refused.disposition().is_transient() || size.disposition().is_transient();
            Dele::Unknown {
                refused,
                size,
                retry,
            }
        }
    }
}

impl std::fmt::Display for Dele {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dele::Deleted(reply) => write!(f, "deleted ({reply})"),
            Dele::Absent(refused) => write!(f, "no such file ({refused})"),
            Dele::Refused { refused, .. } => write!(f, "not deleted: {refused}"),
            Dele::Unknown { refused, size, .. } => write!(
                f,
                "not deleted ({refused}), and SIZE cannot tell whether it is still there ({size})"
            ),
        }
    }
}

/// A copy's ledger entry's counts and the servers' last replies, whatever the outcome.
fn replies(m: &Member, report: &bftp_ftp::AttemptReport) -> MemberUpdate {
    MemberUpdate {
        attempts: Some(m.attempts + 1),
        source_reply: last(
            report
                .source_final
                .as_ref()
                .or(report.source_reply.as_ref()),
        ),
        dest_reply: last(
            report
                .destination_final
                .as_ref()
                .or(report.destination_reply.as_ref()),
        ),
        ..Default::default()
    }
}

/// The source's size as SIZE told the copy, if it did.
/// The next name a STOU announced; never, for a copy without a channel.
async fn recv_some(
    names: &mut Option<tokio::sync::mpsc::UnboundedReceiver<bftp_ftp::Announced>>,
) -> Option<bftp_ftp::Announced> {
    match names {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn source_size(check: &bftp_ftp::SizeCheck) -> Option<u64> {
    match check {
        bftp_ftp::SizeCheck::Equal { source, .. } => Some(*source),
        bftp_ftp::SizeCheck::TextType { source, .. } => *source,
        bftp_ftp::SizeCheck::NotAvailable(_) => None,
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
        let now = self.clock.now();
        self.store
            .call(move |s| s.update_member(id, index, u, now))
            .await
    }

    /// The names the job's members already claim: recorded copies and announced names.
    fn load_claims(&self, members: &[Member]) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        for m in members {
            let announced = match &m.intent {
                Some(Intent::Unique {
                    announced: Some(n), ..
                }) => Some(n),
                _ => None,
            };
            for n in m.stored_as.iter().chain(announced) {
                claims.entry(n.clone()).or_insert_with(|| m.name.clone());
            }
        }
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
            Some((key, slots, origin)) => self.hosts.pool.put(key, pair, slots, origin).await,
            None => pair.close().await,
        }
    }

    /// Where the bytes of `m`'s copy can be seen while it runs: a `replace` copy's
    /// destination file (see [`crate::attempt::live`]).
    fn look(&self, spec: &JobSpec, m: &Member) -> Option<crate::attempt::live::Look> {
        let dst = spec.destination.as_ref()?;
        if !self.watch_progress
            || spec.disposition == Disposition::Delete
            || spec.dest_command != DestCommand::Replace
        {
            return None;
        }
        Some(crate::attempt::live::Look {
            login: ServerLogin::from_endpoint(dst),
            path: copy_request(spec, &m.name).dest_path,
            limits: self.limits.clone(),
            check: self.check.clone(),
            hosts: self.hosts.clone(),
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
            &self.limits,
            self.check.clone(),
            self.send_gate(),
        )
        .await;
        match opened {
            Ok(pair) => {
                pair.set_label(label);
                Ok(pair)
            }
            Err(mut e) => {
                e.transcript.label = Some(label.to_owned());
                Err(e)
            }
        }
    }

    async fn run(self, job: Job, attempt: u32) -> AttemptEnd {
        let spec = match self.secrets.unseal_spec(&job.spec) {
            Ok(s) => s,
            Err(e) => {
                return AttemptEnd::JobPermanent {
                    reason: format!("the job's passwords cannot be read: {e}"),
                }
            }
        };
        let id = self.id;
        // An attempt interrupted after its last member (a crash before the job's finish was
        // recorded) has nothing left to do: no connection is needed to say so.
        if job.members_frozen {
            match self.store.call(move |s| s.members(id)).await {
                Ok(members) if !members.iter().any(needs_work) => return AttemptEnd::Complete,
                Ok(_) => {}
                Err(e) => return store_failed(e),
            }
        }
        let dst_host = spec
            .destination
            .as_ref()
            .map_or(spec.source.host.as_str(), |d| d.host.as_str());
        // A kept pair of this owner, servers and logins, or slots held while this attempt
        // has connections open (see `crate::hosts::pool`).
        let src_login = ServerLogin::from_endpoint(&spec.source);
        let dst_login = spec
            .destination
            .as_ref()
            .map(ServerLogin::from_endpoint)
            .unwrap_or_else(|| src_login.clone());
        let key =
            crate::hosts::pool::PoolKey::new(job.owner_uid, &src_login, &dst_login, spec.params);
        if let Some(end) = self.fenced() {
            return end;
        }
        let acquired = self
            .hosts
            .acquire_pair(&key, &spec.source.host, dst_host)
            .await;
        let mut pair = match acquired {
            crate::hosts::pool::Acquired::Kept(mut pair, slots, origin) => {
                pair.set_label("p1");
                pair.set_gate(self.send_gate());
                *self.first.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((key, slots, origin.used_by(id)));
                *pair
            }
            crate::hosts::pool::Acquired::Slots(slots) => {
                let opened = self.open(&spec, "p1").await;
                let origin = crate::hosts::pool::Origin::new(self.clock.now(), id);
                *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, slots, origin));
                match opened {
                    Ok(p) => p,
                    Err(e) => {
                        self.keep(e.transcript.clone());
                        return pair_failed(&e);
                    }
                }
            }
        };
        // A proof the pair cannot give fails the job before any file moves.
        if spec.proof.is_some() && spec.disposition != Disposition::Delete {
            if let Err(reason) = crate::lanes::proof::check_required(&mut pair, &spec).await {
                self.keep(pair.take_transcript());
                self.close(pair).await;
                return AttemptEnd::JobPermanent { reason };
            }
        }
        let mut made = crate::lanes::walk::MadeDirs::default();
        if spec.recursive {
            // The whole tree is frozen before any file moves; then its directories are made.
            let clock = self.clock.clone();
            let walked = crate::lanes::walk::walk(
                &self.store,
                id,
                &mut pair,
                &spec,
                move || clock.now(),
                |t| self.keep(t.clone()),
            )
            .await;
            let dirs = match walked {
                Ok(walk) => {
                    crate::lanes::walk::make_dirs(&mut pair, &spec, &walk, Some((&self.store, id)))
                        .await
                }
                Err(end) => Err(end),
            };
            self.keep(pair.take_transcript());
            match dirs {
                Ok(dirs) => made = dirs,
                Err(end) => {
                    self.close(pair).await;
                    return end.into();
                }
            }
        }
        // A job frozen just now has its members as this attempt wrote them: no read back.
        let frozen_now = if spec.recursive || job.members_frozen {
            None
        } else {
            match self.freeze(&mut pair, &spec).await {
                Ok(members) => Some(members),
                Err(end) => {
                    pair.mark_errored();
                    self.close(pair).await;
                    return end;
                }
            }
        };
        let members = match frozen_now {
            Some(m) => m,
            None => match self.store.call(move |s| s.members(id)).await {
                Ok(m) => m,
                Err(e) => return store_failed(e),
            },
        };
        self.load_claims(&members);
        let members = match self.blocked(members, &made).await {
            Ok(m) => m,
            Err(e) => return store_failed(e),
        };
        let work: VecDeque<Member> = members.into_iter().filter(needs_work).collect();
        // More pairs for a multi-file job, up to `parallel_pairs`, on the slots free now
        // (see `crate::lanes`); each logs in while the first one already works.
        let lanes = self.hosts.parallel_pairs.min(work.len()).max(1);
        let mut openings = vec![crate::lanes::ready(pair, crate::hosts::Slots::default())];
        let extra = self
            .hosts
            .extra_slots(&spec.source.host, dst_host, lanes - 1)
            .await;
        for (n, slots) in extra.into_iter().enumerate() {
            let (run, spec, label) = (&self, &spec, format!("p{}", n + 2));
            openings.push(crate::lanes::opening(async move {
                if run.fenced().is_some() {
                    return None;
                }
                match run.open(spec, &label).await {
                    Ok(p) => Some((p, slots)),
                    // One pair fewer; the first pair still does the work.
                    Err(e) => {
                        run.keep(e.transcript.clone());
                        None
                    }
                }
            }));
        }
        let members = Members {
            run: &self,
            spec: &spec,
            attempt,
        };
        let ran = crate::lanes::run(&members, openings, WorkQueue::new(work)).await;
        // Every grouped record durable before the attempt's outcome is.
        if let Err(e) = self.batch.finish().await {
            tracing::error!(error = %e, "store write failed during an attempt");
            return AttemptEnd::Transient {
                reason: format!("the daemon could not record progress: {e}"),
            };
        }
        // A job-level permanent failure decides the attempt, whatever else happened.
        let mut ends = ran.ends.into_iter();
        let first = ends.next();
        let end = match first {
            Some(e @ AttemptEnd::JobPermanent { .. }) => Some(e),
            first => ends
                .find(|e| matches!(e, AttemptEnd::JobPermanent { .. }))
                .or(first),
        };
        match (end, ran.failed) {
            (Some(end), _) => end,
            (None, None) => {
                if spec.recursive && spec.disposition == Disposition::Move {
                    self.remove_emptied_dirs(&spec, job.owner_uid, dst_host)
                        .await;
                }
                AttemptEnd::Complete
            }
            (None, Some(reason)) => AttemptEnd::Transient { reason },
        }
    }

    /// The pending members under a destination directory that could not be made fail for
    /// good, with its reply (RULES.md §10); the others are returned, to be copied.
    async fn blocked(
        &self,
        members: Vec<Member>,
        made: &crate::lanes::walk::MadeDirs,
    ) -> Result<Vec<Member>, StoreError> {
        if made.failed.is_empty() {
            return Ok(members);
        }
        let (blocked, rest): (Vec<_>, Vec<_>) = members.into_iter().partition(|m| {
            m.state == MemberState::Pending && m.intent.is_none() && made.blocked(&m.name).is_some()
        });
        let updates: Vec<(u32, MemberUpdate)> = blocked
            .iter()
            .map(|m| {
                let u = MemberUpdate {
                    state: Some(MemberState::FailedPermanent),
                    detail: made.blocked(&m.name),
                    ..Default::default()
                };
                (m.index, u)
            })
            .collect();
        let (id, now) = (self.id, self.clock.now());
        self.store
            .call(move |s| s.update_members(id, updates, now))
            .await?;
        Ok(rest)
    }

    /// A moved tree's emptied source directories (`bftp_core::tree::emptied_dirs`: listed by
    /// the walk, below the root, every member under them moved), deepest first, with RMD on
    /// the first pair, or a kept one. A refused RMD (a file put there since) leaves the
    /// directory: noted in the transcript, not an error. Best effort: an attempt that ends
    /// before (a crash) leaves them, as a job whose files are all final has nothing to redo.
    async fn remove_emptied_dirs(&self, spec: &JobSpec, owner: u32, dst_host: &str) {
        let id = self.id;
        let Ok((walk, members)) = self
            .store
            .call(move |s| Ok((s.walk(id)?, s.members(id)?)))
            .await
        else {
            return;
        };
        let states: Vec<(&str, MemberState)> =
            members.iter().map(|m| (m.name.as_str(), m.state)).collect();
        let dirs = bftp_core::tree::emptied_dirs(walk.listed.iter().map(String::as_str), &states);
        if dirs.is_empty() {
            return;
        }
        let src_login = ServerLogin::from_endpoint(&spec.source);
        let dst_login = spec
            .destination
            .as_ref()
            .map(ServerLogin::from_endpoint)
            .unwrap_or_else(|| src_login.clone());
        let key = crate::hosts::pool::PoolKey::new(owner, &src_login, &dst_login, spec.params);
        let (mut pair, slots, origin) = match self
            .hosts
            .acquire_pair(&key, &spec.source.host, dst_host)
            .await
        {
            crate::hosts::pool::Acquired::Kept(mut pair, slots, origin) => {
                // The RMDs are effects: under this job's fence, as every command of it.
                pair.set_gate(self.send_gate());
                (*pair, slots, origin)
            }
            crate::hosts::pool::Acquired::Slots(slots) => match self.open(spec, "p1").await {
                Ok(pair) => (
                    pair,
                    slots,
                    crate::hosts::pool::Origin::new(self.clock.now(), id),
                ),
                Err(e) => {
                    self.keep(e.transcript.clone());
                    return;
                }
            },
        };
        pair.set_label("p1");
        for dir in &dirs {
            let path = crate::lanes::paths::source_path(spec, dir);
            if let Err(e) = pair.remove_dir(Side::Source, &path).await {
                pair.note(Side::Source, &format!("{path} stays: {e}"));
            }
        }
        *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, slots, origin));
        self.close(pair).await;
    }

    /// RULES.md §4.4: the first successful listing, matched by us, durable before any member
    /// moves. The members as written (what a read right after would give).
    async fn freeze(&self, pair: &mut Pair, spec: &JobSpec) -> Result<Vec<Member>, AttemptEnd> {
        let mut listing = pair
            .list_source(spec.source.dir(), spec.source.file_name())
            .await
            .map_err(|e| {
                if e.disposition().is_permanent() {
                    AttemptEnd::JobPermanent {
                        reason: format!("listing the source: {e}"),
                    }
                } else {
                    AttemptEnd::Transient {
                        reason: format!("listing the source: {e}"),
                    }
                }
            })?;
        self.keep(std::mem::take(&mut listing.transcript));
        for r in &listing.rejected {
            tracing::warn!(job = self.id.0, line = %r.line, reason = %r.reason, "a listed name was refused");
        }
        // A refused name that matches the pattern is a file of the job that will not be
        // copied: it becomes a `refused` member, so the job cannot read as succeeded.
        let refused: Vec<NewMember> = listing
            .rejected
            .iter()
            .filter(|r| r.matched)
            .map(|r| NewMember {
                name: r.line.clone(),
                size: None,
                modified: None,
                refused: Some(format!("refused: the source listed this name, which bftpd does not send in a command: {}", r.reason)),
            })
            .collect();
        if listing.members.is_empty() && refused.is_empty() {
            return Err(AttemptEnd::JobPermanent {
                reason: format!("no file matches {:?}", spec.source.path),
            });
        }
        // Name order: the ledger reads the same whatever order the server listed in.
        let mut members: Vec<NewMember> = listing
            .members
            .iter()
            .map(|l| NewMember {
                name: l.name.clone(),
                size: l.size,
                modified: l.modified.as_ref().map(|m| m.to_string()),
                refused: None,
            })
            .chain(refused)
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let id = self.id;
        let now = self.clock.now();
        let written: Vec<Member> = members
            .iter()
            .enumerate()
            .map(|(i, m)| m.as_written(i as u32, now))
            .collect();
        self.store
            .call(move |s| s.freeze_members(id, members, now))
            .await
            .map_err(store_failed)?;
        Ok(written)
    }

    /// One member: resolve an interrupted attempt's intent, fence, copy, record.
    /// `Ok(Some(pending))`: it stays pending for a retry; `Err`: the attempt ends.
    async fn member(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        attempt: u32,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let index = m.index;
        let src_path = source_path(spec, &m.name);
        let mut req = copy_request(spec, &m.name);
        // A unique copy holds its destination directory from the resolution to the clean-up:
        // no other STOU of this daemon runs into it meanwhile.
        let dir = match (spec.dest_command, &spec.destination) {
            (DestCommand::Unique, Some(d)) if spec.disposition != Disposition::Delete => {
                let key = DirKey::new(&d.host, d.port, &d.user, &req.dest_path);
                let guard = self.hosts.unique.lock(key).await;
                if self.drain.is_cancelled() || self.abort.is_cancelled() {
                    return Err(AttemptEnd::Interrupted);
                }
                Some(guard)
            }
            _ => None,
        };
        let dir = dir.as_ref();
        if let Some(intent) = &m.intent {
            if let Some(settled) = self.resolve(pair, spec, m, intent, dir).await? {
                return Ok(settled);
            }
        }
        if spec.disposition == Disposition::Delete {
            self.update(
                index,
                MemberUpdate {
                    attempts: Some(m.attempts + 1),
                    intent: Some(Some(Intent::Delete {
                        path: Some(src_path.clone()),
                    })),
                    ..Default::default()
                },
            )
            .await
            .map_err(store_failed)?;
            return self.delete_only(pair, m, &src_path, false).await;
        }
        // Fence the unrepeatable effects before they happen.
        let unique_source_size = match self.fence(pair, spec, m, &mut req).await? {
            Ok(size) if spec.dest_command == DestCommand::Unique => size,
            Ok(_) => None,
            Err(settled) => return Ok(settled),
        };
        let (result, announced, collided) = self
            .copy_announced(pair, m, &mut req, unique_source_size, dir)
            .await?;
        // Past this node's lease nothing more is sent for the file, not even its proof: it
        // stays as the copy left it, for the node that holds the job next (RULES.md §4.8).
        if let Some(end) = self.fenced() {
            self.keep(match result {
                Ok(mut outcome) => outcome.take_transcript(),
                Err(e) => e.transcript,
            });
            self.aborted(pair, spec, m, &req, &announced, unique_source_size, dir)
                .await;
            return Err(end);
        }
        let outcome = match result {
            Ok(o) => o,
            Err(e) if self.abort.is_cancelled() => {
                self.keep(e.transcript.clone());
                self.aborted(pair, spec, m, &req, &announced, unique_source_size, dir)
                    .await;
                return Err(AttemptEnd::Interrupted);
            }
            Err(e) => {
                self.keep(e.transcript.clone());
                // A job-level failure in the middle of a copy: an append or STOU may be half
                // done; its intent stays for the next attempt to resolve.
                if spec.dest_command != DestCommand::Replace {
                    let _ = self
                        .update(
                            index,
                            MemberUpdate {
                                attempts: Some(m.attempts + 1),
                                ..Default::default()
                            },
                        )
                        .await;
                }
                return Err(pair_failed(&e));
            }
        };
        let mut outcome = outcome;
        self.keep(outcome.take_transcript());
        let report = outcome.report().clone();
        let mut replies = replies(m, &report);
        let proven = self.prove(pair, spec, m, &req, &src_path, &outcome).await;
        let unique = UniqueCopy {
            announced: &announced,
            collided,
            source_size: unique_source_size,
            dir,
        };
        let summary = self
            .summarize(pair, spec, m, &req, outcome, &report, unique, attempt)
            .await?;
        let change = ledger::record(summary, proven, spec.dest_command, spec.disposition);
        if let Some(level) = change.proof {
            replies.proof = Some(level.as_str().to_owned());
        }
        self.apply(
            pair,
            spec.dest_command,
            m,
            &src_path,
            change,
            replies,
            report.duration,
            attempt,
        )
        .await
    }

    /// The proof step after a copy both servers reported done (`crate::lanes::proof`); `None` for
    /// any other outcome. Its commands go into the attempt's transcript.
    async fn prove(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        req: &CopyRequest,
        src_path: &str,
        outcome: &CopyOutcome,
    ) -> Option<crate::lanes::proof::Proven> {
        let CopyOutcome::Succeeded {
            size_check,
            stou_name,
            ..
        } = outcome
        else {
            return None;
        };
        let dest = match spec.dest_command {
            DestCommand::Unique => stou_name.as_ref().map(|name| {
                if name.starts_with('/') {
                    name.clone()
                } else {
                    crate::lanes::paths::join_path(&req.dest_path, name)
                }
            }),
            _ => Some(req.dest_path.clone()),
        };
        let size = m.size.or(source_size(size_check));
        let proven = crate::lanes::proof::after_copy(
            pair,
            spec,
            src_path,
            dest.as_deref(),
            size_check,
            size,
        )
        .await;
        self.keep(pair.take_transcript());
        Some(proven)
    }

    /// What the ledger needs to know of a copy's outcome beyond the outcome itself, for
    /// `bftp_core::ledger::record`: whether the name a unique copy was stored under is
    /// another's, which files a failed unique copy left and kept (those provably ours are
    /// deleted here), and whether a transient refusal came back unchanged (recorded in the
    /// capability memory; a refusal it settles left nothing on the destination to look at).
    #[allow(clippy::too_many_arguments)]
    async fn summarize(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        req: &CopyRequest,
        outcome: CopyOutcome,
        report: &bftp_ftp::AttemptReport,
        unique: UniqueCopy<'_>,
        attempt: u32,
    ) -> Result<ledger::Outcome, AttemptEnd> {
        let data_connection = data_connection_failed(&outcome);
        Ok(match outcome {
            CopyOutcome::Succeeded {
                bytes,
                size_check,
                stou_name,
                ..
            } => {
                let stored_as = match stou_name {
                    Some(name) => {
                        let mut also_given_to = unique.collided;
                        if !unique.announced.contains(&name) {
                            if let Some(other) = self.claim(unique.dir, m, &name).await {
                                also_given_to.get_or_insert(other);
                            }
                        }
                        Some(ledger::StoredAs {
                            name,
                            also_given_to,
                        })
                    }
                    None => None,
                };
                ledger::Outcome::Succeeded {
                    bytes,
                    // The size SIZE gave the copy, where the listing gave none (a
                    // single-file job's member is known before any SIZE).
                    size: source_size(&size_check).filter(|_| m.size.is_none()),
                    evidence: crate::views::engine::evidence(&size_check),
                    stored_as,
                }
            }
            CopyOutcome::Permanent { failure, .. } => {
                let destination = self.left(pair, spec, m, report, &unique, false).await;
                ledger::Outcome::Permanent {
                    failure: failure.to_string(),
                    destination,
                }
            }
            CopyOutcome::Transient { kind, failure, .. } => {
                // The same failure of this name again: the name is one the server never
                // stores as asked.
                let settled = crate::attempt::refusals::settle_name(
                    &self.store,
                    spec,
                    req,
                    kind,
                    &failure,
                    self.id,
                    attempt,
                    self.clock.now(),
                )
                .await
                .map_err(store_failed)?;
                if let Some(settled) = settled {
                    return Ok(ledger::Outcome::RepeatedRefusal {
                        state: settled.state,
                        detail: settled.detail,
                    });
                }
                // The same refusal again from this server: its configuration, not a moment.
                let settled = crate::attempt::refusals::settle_repeated(
                    &self.store,
                    pair,
                    spec,
                    req,
                    kind,
                    &failure,
                    report,
                    self.id,
                    attempt,
                    self.clock.now(),
                )
                .await
                .map_err(store_failed)?;
                if let Some(settled) = settled {
                    return Ok(ledger::Outcome::RepeatedRefusal {
                        state: settled.state,
                        detail: settled.detail,
                    });
                }
                let mismatch = matches!(failure, bftp_ftp::Failure::SizeMismatch { .. });
                let destination = self.left(pair, spec, m, report, &unique, mismatch).await;
                let cause = if data_connection {
                    ledger::Cause::DataConnection
                } else if matches!(kind, TransientKind::UniqueNameTaken) {
                    ledger::Cause::UniqueNameTaken
                } else {
                    ledger::Cause::Other
                };
                ledger::Outcome::Transient {
                    failure: failure.to_string(),
                    destination,
                    cause,
                }
            }
        })
    }

    /// What a failed copy left on the destination; a unique copy's files are settled first
    /// ([`Run::unique_left`]: deleted where provably ours, else kept, and why).
    async fn left(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        report: &bftp_ftp::AttemptReport,
        unique: &UniqueCopy<'_>,
        mismatch: bool,
    ) -> ledger::Destination {
        let kept = if spec.dest_command == DestCommand::Unique {
            self.unique_left(
                pair,
                spec,
                m,
                report,
                unique.announced,
                unique.source_size,
                unique.dir,
                mismatch,
            )
            .await
        } else {
            None
        };
        ledger::Destination {
            touched: report.destination_touched,
            kept,
        }
    }

    /// Writes a copy's ledger change and counts the file (a failure before the write, a
    /// success once it is durable); then the DELE of a `move`'s source, whose intent the
    /// success wrote. `Some`: the member stays pending, and why.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        pair: &mut Pair,
        dest_command: DestCommand,
        m: &Member,
        src_path: &str,
        change: ledger::Change,
        replies: MemberUpdate,
        duration: Duration,
        attempt: u32,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let intent = match change.intent {
            ledger::IntentChange::Clear => Some(None),
            ledger::IntentChange::Keep => None,
            ledger::IntentChange::DeleteSource => Some(Some(Intent::Delete {
                path: Some(src_path.to_owned()),
            })),
        };
        let u = MemberUpdate {
            state: match change.next {
                ledger::Next::Settled(state) => Some(state),
                ledger::Next::Pending { .. } => None,
            },
            bytes: change.bytes,
            size: change.size,
            detail: Some(change.detail.clone()),
            intent,
            stored_as: change.stored_as,
            tls: pair.tls_summary(),
            ..replies
        };
        match change.next {
            ledger::Next::Settled(MemberState::Succeeded) => {}
            ledger::Next::Settled(state) => {
                let counted = FileResult::FailedPermanent.unless_uncertain(Some(state));
                self.metrics.file(counted, duration, None);
            }
            ledger::Next::Pending { .. } => {
                self.metrics.file(FileResult::Transient, duration, None)
            }
        }
        // A replace copy's success with nothing to do after it: nothing waits for its
        // record, so it joins the attempt's grouped writes (`crate::attempt::ledger_batch`).
        let grouped = change.next == ledger::Next::Settled(MemberState::Succeeded)
            && change.intent == ledger::IntentChange::Clear
            && m.intent.is_none()
            && dest_command == DestCommand::Replace;
        if grouped {
            self.batch
                .push(m.index, u)
                .map_err(|e| AttemptEnd::Transient {
                    reason: format!("the daemon could not record progress: {e}"),
                })?;
        } else {
            self.update(m.index, u).await.map_err(store_failed)?;
        }
        match change.next {
            ledger::Next::Settled(MemberState::Succeeded) => {}
            ledger::Next::Settled(_) => return Ok(None),
            ledger::Next::Pending { second_try } => {
                return Ok(Some(Pending {
                    reason: change.detail,
                    again: second_try,
                }))
            }
        }
        self.metrics
            .file(FileResult::Succeeded, duration, change.bytes);
        tracing::info!(job = self.id.0, member = %m.name, attempt, "file copied");
        if change.intent == ledger::IntentChange::DeleteSource {
            return self
                .delete_source(pair, m.index, src_path, &change.detail)
                .await;
        }
        Ok(None)
    }

    /// Fences an unrepeatable command with its intent, durable before it: for APPE the
    /// source's size and the destination's size before; for STOU the source's size (the
    /// evidence that settles it after a crash; unknown on a server without SIZE). `Ok(size)`:
    /// the source's size where asked; `Err(settled)`: the member is settled or left pending.
    async fn fence(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        req: &mut CopyRequest,
    ) -> Result<Result<Option<u64>, Option<Pending>>, AttemptEnd> {
        let index = m.index;
        match spec.dest_command {
            DestCommand::Append => {
                let source_size = match self
                    .fence_size(pair, m, Side::Source, &req.source_path, true)
                    .await?
                {
                    Fence::Size(Some(s)) => s,
                    // Not produced for a required SIZE of the source (550 and failures settle).
                    Fence::Size(None) | Fence::Unsupported => return Ok(Err(None)),
                    Fence::Settled(p) => return Ok(Err(p)),
                };
                let before = match self
                    .fence_size(pair, m, Side::Destination, &req.dest_path, true)
                    .await?
                {
                    Fence::Size(s) => s.unwrap_or(0),
                    // Not produced for a required SIZE (a failure settles).
                    Fence::Unsupported => return Ok(Err(None)),
                    Fence::Settled(p) => return Ok(Err(p)),
                };
                // Asked just now on this pair: the copy need not ask again before APPE.
                req.source_size = Some(source_size);
                self.set_intent(
                    index,
                    Intent::Append {
                        before,
                        source_size,
                    },
                )
                .await?;
                Ok(Ok(Some(source_size)))
            }
            DestCommand::Unique => {
                // The source's size is the evidence that settles the STOU after a crash; a
                // server without SIZE leaves it unknown (then a crash makes it uncertain).
                let size = match self
                    .fence_size(pair, m, Side::Source, &req.source_path, false)
                    .await?
                {
                    Fence::Size(s) => s,
                    Fence::Unsupported => None,
                    Fence::Settled(p) => return Ok(Err(p)),
                };
                req.source_size = size;
                self.set_intent(
                    index,
                    Intent::Unique {
                        source_size: size,
                        announced: None,
                    },
                )
                .await?;
                Ok(Ok(size))
            }
            DestCommand::Replace => Ok(Ok(None)),
        }
    }

    /// The copy, with each name a STOU announces recorded in the member's intent as soon as
    /// it comes (the copy waits for that before the source sends a byte) and claimed: the
    /// result, the names announced, and who else a name was already told to.
    async fn copy_announced(
        &self,
        pair: &mut Pair,
        m: &Member,
        req: &mut CopyRequest,
        source_size: Option<u64>,
        dir: Option<&DirGuard>,
    ) -> Result<Announcements, AttemptEnd> {
        // Only a STOU announces names; other copies have no channel to listen on.
        let mut names = (req.dest_command == DestCommand::Unique).then(|| {
            let (announce, names) = bftp_ftp::Announce::channel();
            req.announce = Some(announce);
            names
        });
        // The names the destination announced to this copy, each recorded in the intent as
        // soon as it came (the copy waits for that before the source sends a byte), and
        // whether one of them was told to someone else too.
        let mut announced: Vec<String> = Vec::new();
        let mut collided: Option<String> = None;
        let result = {
            let copy = pair.copy_or_abort(req, self.stop_copy(), "the attempt was aborted");
            tokio::pin!(copy);
            loop {
                tokio::select! {
                    r = &mut copy => break r,
                    Some(a) = recv_some(&mut names) => {
                        if let Some(other) = self.claim(dir, m, &a.name).await {
                            collided.get_or_insert(other);
                        }
                        announced.push(a.name.clone());
                        self.set_intent(m.index, Intent::Unique {
                            source_size,
                            announced: Some(a.name),
                        })
                        .await?;
                        let _ = a.recorded.send(());
                    }
                }
            }
        };
        Ok((result, announced, collided))
    }

    async fn succeed(
        &self,
        spec: &JobSpec,
        m: &Member,
        bytes: Option<u64>,
        detail: String,
        stored_as: Option<String>,
    ) -> Result<(), AttemptEnd> {
        let intent = if spec.disposition == Disposition::Move {
            Some(Some(Intent::Delete {
                path: Some(source_path(spec, &m.name)),
            }))
        } else {
            Some(None)
        };
        self.update(
            m.index,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                bytes,
                detail: Some(detail),
                intent,
                stored_as,
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(())
    }

    async fn set_intent(&self, index: u32, intent: Intent) -> Result<(), AttemptEnd> {
        self.update(
            index,
            MemberUpdate {
                intent: Some(Some(intent)),
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(())
    }

    /// SIZE of `path` on `side` before an unrepeatable command. 550 on the source fails the
    /// member for good (no file to copy); a transient failure leaves it pending; another
    /// failure fails it for good when `required` (an append cannot be fenced without it),
    /// else is [`Fence::Unsupported`].
    async fn fence_size(
        &self,
        pair: &mut Pair,
        m: &Member,
        side: Side,
        path: &str,
        required: bool,
    ) -> Result<Fence, AttemptEnd> {
        let fail = |detail: String| MemberUpdate {
            state: Some(MemberState::FailedPermanent),
            attempts: Some(m.attempts + 1),
            detail: Some(detail),
            ..Default::default()
        };
        let detail = match pair.size(side, path).await {
            Ok(Some(s)) => return Ok(Fence::Size(Some(s))),
            Ok(None) if side == Side::Destination => return Ok(Fence::Size(None)),
            Ok(None) => format!("the source file does not exist: SIZE {path} answered 550"),
            Err(e) if e.disposition().is_transient() => {
                return Ok(Fence::Settled(Some(e.to_string().into())))
            }
            Err(_) if !required => return Ok(Fence::Unsupported),
            Err(e) => format!("an append is fenced by SIZE of the {side}, which failed: {e}"),
        };
        self.update(m.index, fail(detail))
            .await
            .map_err(store_failed)?;
        Ok(Fence::Settled(None))
    }

    /// Who a unique copy's announced name is announced to in the daemon's memory of names.
    fn owner(&self, m: &Member) -> String {
        format!("job {} file {:?}", self.id.0, m.name)
    }

    /// `name` was announced to member `m`: recorded as its claim, unless another member of
    /// this job, or another copy of this daemon (of any node, with a shared store) lately,
    /// has it: then who.
    async fn claim(&self, dir: Option<&DirGuard>, m: &Member, name: &str) -> Option<String> {
        let lately = match dir {
            Some(d) => d.claim(name, &self.owner(m)).await,
            None => None,
        };
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        match claims.get(name) {
            Some(other) if *other != m.name => Some(format!("{other:?} of this job")),
            _ => {
                claims.insert(name.to_owned(), m.name.clone());
                lately
            }
        }
    }

    async fn claimed_by_other(
        &self,
        dir: Option<&DirGuard>,
        m: &Member,
        name: &str,
    ) -> Option<String> {
        let this_job = {
            let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            match claims.get(name) {
                Some(other) if *other != m.name => Some(format!("{other:?} of this job")),
                _ => None,
            }
        };
        match (this_job, dir) {
            (Some(other), _) => Some(other),
            (None, Some(d)) => d.claimed_by_other(name, &self.owner(m)).await,
            (None, None) => None,
        }
    }

    /// A name of `m`'s whose file is gone: the claim is let go.
    async fn release(&self, dir: Option<&DirGuard>, m: &Member, name: &str) {
        {
            let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            if claims.get(name) == Some(&m.name) {
                claims.remove(name);
            }
        }
        if let Some(d) = dir {
            d.release(name, &self.owner(m)).await;
        }
    }

    /// An intent left by an interrupted attempt, settled from what the servers show now
    /// (the rules are `bftp_core::intent::resolve`). `Some`: the member is settled (or waits
    /// for a later attempt); `None`: the effect did not happen, do the member again.
    async fn resolve(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        intent: &Intent,
        dir: Option<&DirGuard>,
    ) -> Result<Option<Option<Pending>>, AttemptEnd> {
        let index = m.index;
        let req = copy_request(spec, &m.name);
        let target = intent.target(&req.dest_path);
        let size = match &target {
            Some(path) => Some(match pair.size(Side::Destination, path).await {
                Ok(Some(n)) => Probe::Size(n),
                Ok(None) => Probe::Absent,
                Err(e) => Probe::Failed {
                    reason: e.to_string(),
                    transient: e.disposition().is_transient(),
                },
            }),
            None => None,
        };
        let announced = match intent {
            Intent::Unique {
                announced: Some(n), ..
            } => Some(n.as_str()),
            _ => None,
        };
        let claimed_by_other = match announced {
            Some(n) => self.claim(dir, m, n).await,
            None => None,
        };
        let evidence = Evidence {
            size,
            claimed_by_other,
        };
        let decision = bftp_core::intent::resolve(intent, &evidence);
        match decision {
            Decision::DeleteAgain => {
                let path = match intent {
                    Intent::Delete { path: Some(p) } => p.clone(),
                    _ => source_path(spec, &m.name),
                };
                let settled = if spec.disposition == Disposition::Delete {
                    self.delete_only(pair, m, &path, true).await?
                } else {
                    let detail = m.detail.as_deref().unwrap_or("copied");
                    self.delete_source(pair, index, &path, detail).await?
                };
                Ok(Some(settled))
            }
            Decision::Done { bytes, evidence } => {
                let stored_as = announced.map(str::to_owned);
                self.succeed(spec, m, Some(bytes), evidence.clone(), stored_as)
                    .await?;
                if spec.disposition == Disposition::Move {
                    let path = source_path(spec, &m.name);
                    return Ok(Some(
                        self.delete_source(pair, index, &path, &evidence).await?,
                    ));
                }
                Ok(Some(None))
            }
            Decision::NotDone { .. } => {
                if let Some(n) = announced {
                    self.release(dir, m, n).await;
                }
                self.update(
                    index,
                    MemberUpdate {
                        intent: Some(None),
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
                Ok(None)
            }
            Decision::Uncertain { reason } => {
                self.metrics
                    .file(FileResult::Uncertain, Duration::ZERO, None);
                self.update(
                    index,
                    MemberUpdate {
                        state: Some(MemberState::Uncertain),
                        intent: Some(None),
                        detail: Some(reason),
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
                Ok(Some(None))
            }
            Decision::AskLater { reason } => Ok(Some(Some(reason.into()))),
        }
    }

    /// A copy aborted by a cancel or the end of the shutdown grace: the attempt counts. On a
    /// cancel (the member will not be tried again) the partial destination file goes, as
    /// after a failed copy: a replace copy's always, a unique copy's when it is provably
    /// ours; an append's never (its size before is in the intent, and the file was there).
    /// At shutdown the member is done again after the restart, which settles the file.
    #[allow(clippy::too_many_arguments)]
    async fn aborted(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        req: &CopyRequest,
        announced: &[String],
        source_size: Option<u64>,
        dir: Option<&DirGuard>,
    ) {
        let mut u = MemberUpdate {
            attempts: Some(m.attempts + 1),
            ..Default::default()
        };
        let cancelled = !self.drain.is_cancelled();
        if cancelled && spec.dest_command != DestCommand::Append {
            let note = match pair.reopen("to clean up after the cancel").await {
                Err(e) => Some(format!(
                    "cancelled during the copy; the partial file may remain: {e}"
                )),
                Ok(()) if spec.dest_command == DestCommand::Replace => {
                    Some(match pair.delete(Side::Destination, &req.dest_path).await {
                        Ok(_) => "cancelled during the copy; the partial file was deleted".into(),
                        Err(e) => format!(
                            "cancelled during the copy; the partial file {:?} was not deleted: {e}",
                            req.dest_path
                        ),
                    })
                }
                Ok(()) => {
                    let mut kept = Vec::new();
                    for name in announced {
                        if let Err(why) = self
                            .settle_partial(pair, spec, m, name, source_size, dir, false)
                            .await
                        {
                            kept.push(why);
                        }
                    }
                    (!announced.is_empty()).then(|| {
                        if kept.is_empty() {
                            "cancelled during the copy; the partial file was deleted".into()
                        } else {
                            format!("cancelled during the copy; {}", kept.join("; "))
                        }
                    })
                }
            };
            self.keep(pair.take_transcript());
            u.detail = note;
            if spec.dest_command == DestCommand::Unique {
                u.intent = Some(None);
            }
        }
        if let Err(e) = self.update(m.index, u).await {
            tracing::warn!(job = self.id.0, member = %m.name, error = %e, "cannot record the aborted copy");
        }
    }

    /// After a failed unique copy: each file its STOUs may have left is deleted when provably
    /// ours, else kept; `Some(why)` when any was kept (the member is then `uncertain`), and
    /// also when the destination was touched but never said which name it chose.
    #[allow(clippy::too_many_arguments)]
    async fn unique_left(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        report: &bftp_ftp::AttemptReport,
        announced: &[String],
        source_size: Option<u64>,
        dir: Option<&DirGuard>,
        mismatch: bool,
    ) -> Option<String> {
        let mut names: Vec<String> = announced.to_vec();
        for n in report.stou_left.iter().chain(report.stou_name.as_ref()) {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        if names.is_empty() {
            return report.destination_touched.then(|| {
                "the destination accepted STOU but named no file: a file may exist; not repeated"
                    .to_owned()
            });
        }
        let mut kept = Vec::new();
        for name in &names {
            if let Err(why) = self
                .settle_partial(pair, spec, m, name, source_size, dir, mismatch)
                .await
            {
                kept.push(why);
            }
        }
        (!kept.is_empty()).then(|| kept.join("; "))
    }

    /// One file a failed STOU announced: gone (no such file, or deleted because it is
    /// provably ours: see `bftp_core::intent::unique_partial_is_ours`), or `Err(why)` kept.
    #[allow(clippy::too_many_arguments)]
    async fn settle_partial(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        name: &str,
        source_size: Option<u64>,
        dir: Option<&DirGuard>,
        mismatch: bool,
    ) -> Result<(), String> {
        if let Some(other) = self.claimed_by_other(dir, m, name).await {
            return Err(format!(
                "the server announced {name:?}, a name it also gave {other}: not deleted"
            ));
        }
        if mismatch {
            return Err(format!(
                "SIZE of {name:?} does not match the source after the server reported the copy \
                 complete: the server may have stored this copy under another name (Pure-FTPd \
                 stores NAME.1 when NAME exists) and {name:?} may be another's file: not deleted"
            ));
        }
        if bftp_ftp::parse::validate_server_path(name, "").is_err() {
            return Err(format!(
                "the announced name {name:?} is not a plain name: not deleted"
            ));
        }
        let dest_dir = copy_request(spec, &m.name).dest_path;
        let path = if name.starts_with('/') {
            name.to_owned()
        } else {
            crate::lanes::paths::join_path(&dest_dir, name)
        };
        if !pair.is_usable() {
            if let Err(e) = pair.reopen("to settle a partial STOU file").await {
                return Err(format!("{name:?} may remain: {e}"));
            }
        }
        let probe = match pair.size(Side::Destination, &path).await {
            Ok(Some(n)) => Probe::Size(n),
            Ok(None) => {
                self.release(dir, m, name).await;
                return Ok(());
            }
            Err(e) => Probe::Failed {
                reason: e.to_string(),
                transient: e.disposition().is_transient(),
            },
        };
        if !bftp_core::intent::unique_partial_is_ours(false, false, &probe, source_size) {
            let size = match &probe {
                Probe::Size(n) => format!("{n} bytes"),
                Probe::Absent => "absent".into(),
                Probe::Failed { reason, .. } => format!("SIZE failed: {reason}"),
            };
            let source = source_size.map_or("unknown".into(), |s| format!("{s} bytes"));
            return Err(format!(
                "the file {name:?} a failed STOU left ({size}; the source {source}) cannot be \
                 proven ours: not deleted"
            ));
        }
        match pair.delete(Side::Destination, &path).await {
            Ok(_) => {
                self.release(dir, m, name).await;
                Ok(())
            }
            Err(e) => Err(format!(
                "the partial file {name:?} could not be deleted: {e}"
            )),
        }
    }

    /// `move`: the copy is proven and recorded (with the `Dele` intent); now the source goes.
    /// `evidence` is the member's detail so far (the copy's evidence), kept in front of what
    /// happened to the source. After a restart the intent is resolved again: a DELE that
    /// reached the server before the crash makes this one answer 550, and SIZE then finds
    /// no file, which settles the member instead of retrying it until the job is exhausted.
    async fn delete_source(
        &self,
        pair: &mut Pair,
        index: u32,
        path: &str,
        evidence: &str,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let result = dele(pair, path).await;
        let note = match &result {
            Dele::Deleted(_) => "source deleted".to_string(),
            Dele::Absent(refused) => {
                format!("source already deleted (DELE now answers: {refused})")
            }
            other => format!("source {other}"),
        };
        let detail = Some(format!("{evidence}; {note}"));
        if result.retry() {
            // The intent stays: the next attempt deletes again.
            self.update(
                index,
                MemberUpdate {
                    detail,
                    ..Default::default()
                },
            )
            .await
            .map_err(store_failed)?;
            return Ok(Some(format!("copied, but the {note}").into()));
        }
        if !matches!(result, Dele::Deleted(_)) {
            tracing::warn!(job = self.id.0, path, "{note}");
        }
        self.update(
            index,
            MemberUpdate {
                intent: Some(None),
                detail,
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(None)
    }

    /// A `delete` job's file, its `Dele` intent recorded. `resumed`: the intent was there
    /// before this attempt, so a file found gone was deleted by the interrupted one.
    async fn delete_only(
        &self,
        pair: &mut Pair,
        m: &Member,
        path: &str,
        resumed: bool,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let result = dele(pair, path).await;
        let reply = |r: &bftp_ftp::parse::Reply| {
            Some(LastReply {
                code: Some(r.code().get()),
                text: format!("DELE: {}", r.text()),
            })
        };
        let mut u = MemberUpdate {
            detail: Some(result.to_string()),
            intent: Some(None),
            ..Default::default()
        };
        match &result {
            Dele::Deleted(r) => {
                u.state = Some(MemberState::Succeeded);
                u.source_reply = reply(r);
            }
            Dele::Absent(_) if resumed => {
                u.state = Some(MemberState::Succeeded);
                u.detail = Some(format!("deleted before bftpd restarted: {result}"));
            }
            _ if result.retry() => {
                self.update(
                    m.index,
                    MemberUpdate {
                        detail: u.detail,
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
                return Ok(Some(result.to_string().into()));
            }
            _ => u.state = Some(MemberState::FailedPermanent),
        }
        if let Dele::Absent(ActionError::Refused { reply: r, .. })
        | Dele::Refused {
            refused: ActionError::Refused { reply: r, .. },
            ..
        }
        | Dele::Unknown {
            refused: ActionError::Refused { reply: r, .. },
            ..
        } = &result
        {
            u.source_reply = reply(r);
        }
        self.update(m.index, u).await.map_err(store_failed)?;
        Ok(None)
    }
}

/// An attempt's members, as the lanes' caller (see [`crate::lanes`]): a member is
/// [`Run::member`], beside its live progress; the ledger is written as it happens.
struct Members<'a> {
    run: &'a Run,
    spec: &'a JobSpec,
    attempt: u32,
}

impl crate::lanes::Item for Member {
    fn name(&self) -> &str {
        &self.name
    }
}

impl crate::lanes::Work for Members<'_> {
    type Conn = Pair;
    type Item = Member;
    type End = AttemptEnd;

    /// Shutdown drains (the file in flight finishes, no other starts), a cancel, or the
    /// end of this node's lease (RULES.md §4.8).
    fn interrupted(&self) -> Option<AttemptEnd> {
        if let Some(end) = self.run.fenced() {
            return Some(end);
        }
        if self.run.drain.is_cancelled() || self.run.abort.is_cancelled() {
            return Some(AttemptEnd::Interrupted);
        }
        // A nearly full disk: no new file; what is in flight finishes and is recorded.
        crate::scheduler::space::no_room_for_files(&*self.run.store)
    }

    async fn interruption(&self) {
        tokio::select! {
            () = self.run.drain.cancelled() => {}
            () = self.run.abort.cancelled() => {}
        }
    }

    fn usable(&self, pair: &Pair) -> bool {
        pair.is_usable()
    }

    /// The same label again, the old pair's last lines kept.
    async fn reopen(&self, mut old: Pair) -> Result<Pair, AttemptEnd> {
        self.run.keep(old.take_transcript());
        if let Some(end) = self.run.fenced() {
            return Err(end);
        }
        let label = old.label().unwrap_or_else(|| "p?".into());
        self.run.open(self.spec, &label).await.map_err(|e| {
            self.run.keep(e.transcript.clone());
            pair_failed(&e)
        })
    }

    async fn item(&self, pair: &mut Pair, m: Member, _second: bool) -> Step<Member, AttemptEnd> {
        let (run, spec) = (self.run, self.spec);
        // Before the file's first command, whatever it is (a file started ahead too).
        if let Some(end) = run.fenced() {
            return Step::End(end);
        }
        crate::lanes::proof::learn(pair, spec).await;
        // A copy's progress, in memory for the views, while it is worked on.
        let result = if spec.destination.is_some() {
            let follow = crate::attempt::live::follow(
                run.live.clone(),
                run.id,
                m.index,
                pair.progress(),
                run.look(spec, &m),
            );
            let result = tokio::select! {
                biased;
                result = run.member(pair, spec, &m, self.attempt) => result,
                never = follow => match never {},
            };
            run.live.end(run.id, m.index);
            result
        } else {
            run.member(pair, spec, &m, self.attempt).await
        };
        match result {
            Ok(None) => Step::Done,
            // The ledger has it pending; its second try starts from there.
            Ok(Some(Pending { reason, again })) => Step::Failed {
                item: Member {
                    attempts: m.attempts + 1,
                    detail: Some(reason.clone()),
                    intent: None,
                    ..m
                },
                reason,
                again,
            },
            Err(end) => Step::End(end),
        }
    }

    /// Nothing to add: the ledger has the member pending with its reason, and the reason
    /// becomes the attempt's.
    async fn stands(&self, _m: Member, _reason: &str) -> Result<(), AttemptEnd> {
        Ok(())
    }

    async fn close(&self, pair: Pair) {
        self.run.close(pair).await
    }

    /// Only a plain copy's next member may be started ahead: a replace copy with no intent
    /// to settle first (an intent, APPE, STOU or a `move` have ledger writes or other
    /// commands between members), with the request its own `member` would make.
    fn hint(&self, pair: &mut Pair, next: Option<&Member>) {
        let spec = self.spec;
        let plain = spec.disposition == Disposition::Copy
            && spec.dest_command == DestCommand::Replace
            && spec.destination.is_some();
        pair.expect_next(
            next.filter(|m| plain && m.intent.is_none())
                .map(|m| copy_request(spec, &m.name)),
        );
    }

    fn in_flight(&self, pair: &Pair) -> bool {
        pair.in_flight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_ftp::EntryKind;
    use std::time::Instant;

    fn transcript(started: Instant, label: &str, lines: &[(u64, &str)]) -> Transcript {
        Transcript {
            entries: lines
                .iter()
                .map(|(at_ms, text)| Entry {
                    at_ms: *at_ms,
                    side: Side::Source,
                    kind: EntryKind::Sent,
                    text: text.to_string(),
                })
                .collect(),
            started: Some(started),
            label: Some(label.into()),
            ..Default::default()
        }
    }

    /// Two pairs' transcripts handed over late and out of order come out on the attempt's
    /// one clock, in time order, each line with its pair.
    #[test]
    fn parallel_transcripts_share_one_clock_and_say_their_pair() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let p1 = transcript(t0, "p1", &[(10, "USER a"), (300, "RETR /x")]);
        let p2 = transcript(
            t0 + Duration::from_millis(100),
            "p2",
            &[(0, "USER b"), (50, "RETR /y")],
        );
        log.keep(p2);
        log.keep(p1);
        assert_eq!(
            log.take(),
            [
                "[     10 ms] [p1] source> USER a",
                "[    100 ms] [p2] source> USER b",
                "[    150 ms] [p2] source> RETR /y",
                "[    300 ms] [p1] source> RETR /x",
            ]
        );
    }

    /// A pair's own transcript that dropped entries says so where it dropped them.
    #[test]
    fn a_transcript_that_dropped_entries_says_where() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let mut t = transcript(t0, "p3", &[(1, "USER a"), (9, "QUIT")]);
        t.omitted = 7;
        t.omitted_at = 1;
        log.keep(t);
        assert_eq!(
            log.take(),
            [
                "[      1 ms] [p3] source> USER a",
                "[      9 ms] [p3] [... 7 entries omitted ...]",
                "[      9 ms] [p3] source> QUIT",
            ]
        );
    }

    /// A full log takes no line older than every line it holds: the line is counted with
    /// the earlier ones left out, as if it had come first and been pushed out.
    #[test]
    fn a_line_older_than_a_full_log_is_counted_not_kept() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let lines: Vec<(u64, String)> = (0..TRANSCRIPT_LINES as u64)
            .map(|i| (1000 + i, format!("NOOP {i}")))
            .collect();
        let refs: Vec<(u64, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
        log.keep(transcript(t0, "p1", &refs));
        log.keep(transcript(
            t0,
            "p2",
            &[(5, "USER early"), (1500, "RETR /late")],
        ));
        let out = log.take();
        assert_eq!(out.len(), TRANSCRIPT_LINES + 1);
        assert_eq!(out[0], "[... 2 earlier lines omitted ...]");
        assert!(!out.iter().any(|l| l.contains("early")), "{out:?}");
        assert_eq!(
            out[TRANSCRIPT_LINES],
            "[   1500 ms] [p2] source> RETR /late"
        );
        assert!(out[1].ends_with("NOOP 1"), "{}", out[1]);
    }

    #[test]
    fn the_log_keeps_the_latest_lines_and_counts_the_rest() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let lines: Vec<(u64, String)> = (0..TRANSCRIPT_LINES as u64 + 5)
            .map(|i| (i, format!("NOOP {i}")))
            .collect();
        let refs: Vec<(u64, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
        log.keep(transcript(t0, "p1", &refs));
        let out = log.take();
        assert_eq!(out.len(), TRANSCRIPT_LINES + 1);
        assert_eq!(out[0], "[... 5 earlier lines omitted ...]");
        assert!(out[1].ends_with("NOOP 5"), "{}", out[1]);
    }
}
