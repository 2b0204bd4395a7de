//! One attempt of one job, with the engine: the [`Executor`] the scheduler runs.
//!
//! The per-file ledger is written as it happens, each change durable before the next
//! action that depends on it (SPEC §4.2). Effects that are not safe to repeat are fenced by
//! an intent recorded before them (SPEC §4.3):
//! - APPE: the destination size before, and the source size; after a crash the destination
//!   size tells whether the append happened (before + source), did not (before), or cannot
//!   be told (anything else: `uncertain`);
//! - STOU: that a unique file may be created; a crash before its name was recorded cannot
//!   be resolved (`uncertain`), a failed STOU whose name is known is deleted;
//! - DELE of the source of a `move`: recorded together with the member's success, so that
//!   after a crash the delete is completed; of a `delete` job's file: recorded before it. A
//!   refused DELE is checked with SIZE: a file that is gone was deleted (by us, before the
//!   crash, when the intent was already there).
//!
//! At shutdown the file in flight may finish within the grace period, but no new file starts
//! (the `drain` signal); the job goes back to the queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_core::{DestCommand, Disposition, Endpoint, JobSpec, MemberState, Secret, Timestamp};
use bftp_ftp::{
    ActionError, AddressCheck, CopyOutcome, Limits, Pair, PairError, ServerLogin, Side, Transcript,
};
use bftp_store::{
    AttemptTranscript, Job, JobId, JobStore, LastReply, Member, MemberUpdate, NewMember,
    SealedEndpoint, SealedSpec, StoreError,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::ftp::{copy_request, source_path};
use crate::metrics::{FileResult, Metrics};
use crate::scheduler::{AttemptEnd, AttemptFuture, AttemptSignals, Executor};
use crate::secrets::Secrets;
use crate::work::{data_connection_failed, Next, WorkQueue};

/// What is about to happen that must not happen twice, stored in the member before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Intent {
    Appe { before: u64, source_size: u64 },
    Stou,
    Dele,
}

impl Intent {
    fn encode(&self) -> String {
        serde_json::to_string(self).expect("intent serialises")
    }
    fn decode(s: &str) -> Option<Intent> {
        serde_json::from_str(s).ok()
    }
}

/// Lines of an attempt's transcript the report keeps: the last ones, where the failure is.
const TRANSCRIPT_LINES: usize = 300;

/// The transcript of one attempt, for the report (RFC 1068 always mailed it): every
/// transcript the engine handed out (login, listing, each copy), the last
/// [`TRANSCRIPT_LINES`] lines kept. PASS and ACCT are masked by the engine.
///
/// Parallel pairs hand their transcripts over as their copies end, not in the order the
/// lines were said: each line is put on the attempt's one clock (milliseconds since the
/// attempt began) and in time order, and labelled with its pair (`[p2]`).
struct AttemptLog {
    clock: std::time::Instant,
    /// Sorted by the first field, the line's time on `clock`.
    lines: Vec<(u64, String)>,
    dropped: usize,
}

impl Default for AttemptLog {
    fn default() -> Self {
        AttemptLog {
            clock: std::time::Instant::now(),
            lines: Vec::new(),
            dropped: 0,
        }
    }
}

impl AttemptLog {
    fn keep(&mut self, t: &Transcript) {
        // A recorder's clock started with its pair, inside the attempt.
        let base = t.started.map_or(0, |s| {
            u64::try_from(s.saturating_duration_since(self.clock).as_millis()).unwrap_or(u64::MAX)
        });
        let label = t.label.as_deref().unwrap_or("p?");
        for (i, entry) in t.entries.iter().enumerate() {
            let at = base.saturating_add(entry.at_ms);
            if t.omitted > 0 && i == t.omitted_at {
                self.insert(
                    at,
                    format!(
                        "[{at:>7} ms] [{label}] [... {} entries omitted ...]",
                        t.omitted
                    ),
                );
            }
            self.insert(at, format!("[{at:>7} ms] [{label}] {entry}"));
        }
    }

    /// In time order, after the lines of the same time already there.
    fn insert(&mut self, at: u64, line: String) {
        let i = self.lines.partition_point(|(t, _)| *t <= at);
        self.lines.insert(i, (at, line));
        if self.lines.len() > TRANSCRIPT_LINES {
            self.lines.remove(0);
            self.dropped += 1;
        }
    }

    fn take(&mut self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.lines.len() + 1);
        if self.dropped > 0 {
            out.push(format!("[... {} earlier lines omitted ...]", self.dropped));
        }
        out.extend(self.lines.drain(..).map(|(_, l)| l));
        self.dropped = 0;
        out
    }
}

pub struct FtpExecutor {
    pub store: Arc<dyn JobStore>,
    pub secrets: Arc<Secrets>,
    pub limits: Limits,
    pub check: Arc<dyn AddressCheck>,
    pub hosts: Arc<crate::ftp::HostLimits>,
    pub metrics: Arc<Metrics>,
    /// The files in flight, for the API's views.
    pub live: Arc<crate::live::Live>,
    /// `[ftp] watch_progress`: look at a running copy's bytes.
    pub watch_progress: bool,
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
            drain: signals.drain,
            abort: signals.abort.clone(),
            id: job.id,
            log: Arc::default(),
        };
        let abort = signals.abort;
        let log = run.log.clone();
        let store = self.store.clone();
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
            let lines = log.lock().unwrap_or_else(|p| p.into_inner()).take();
            if !lines.is_empty() {
                let t = AttemptTranscript { attempt, lines };
                let saved = tokio::task::spawn_blocking(move || store.set_transcript(id, t))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                if let Err(error) = saved {
                    tracing::warn!(job = id.0, %error, "cannot keep the attempt's transcript for the report");
                }
            }
            end
        })
    }
}

/// How long an aborted attempt may take to send ABOR and close: a little more than the
/// engine's own bound on waiting for ABOR's replies.
const ABORT_GRACE: Duration = Duration::from_secs(3);

fn now() -> Timestamp {
    Timestamp::from_system(std::time::SystemTime::now())
}

fn unseal_endpoint(secrets: &Secrets, e: &SealedEndpoint) -> Result<Endpoint, String> {
    let open = |s: &bftp_store::Sealed| {
        secrets
            .unseal(&s.0)
            .map(Secret::new)
            .map_err(|e| e.to_string())
    };
    Ok(Endpoint {
        host: e.host.clone(),
        port: e.port,
        user: e.user.clone(),
        password: e.password.as_ref().map(open).transpose()?,
        acct: e.acct.as_ref().map(open).transpose()?,
        path: e.path.clone(),
    })
}

/// The job's FTP passwords and ACCT strings in clear, for the report to scrub them from
/// whatever a server echoed. Secrets that cannot be unsealed cannot leak either.
pub fn clear_secrets(secrets: &Secrets, s: &SealedSpec) -> Vec<String> {
    match unseal_spec(secrets, s) {
        Ok(spec) => std::iter::once(&spec.source)
            .chain(spec.destination.as_ref())
            .flat_map(|e| [e.password.as_ref(), e.acct.as_ref()])
            .flatten()
            .map(|p| p.expose().to_string())
            .filter(|p| !p.is_empty())
            .collect(),
        Err(_) => Vec::new(),
    }
}

pub fn unseal_spec(secrets: &Secrets, s: &SealedSpec) -> Result<JobSpec, String> {
    Ok(JobSpec {
        source: unseal_endpoint(secrets, &s.source)?,
        destination: s
            .destination
            .as_ref()
            .map(|d| unseal_endpoint(secrets, d))
            .transpose()?,
        disposition: s.disposition,
        dest_command: s.dest_command,
        params: s.params,
        start_at: s.start_at,
        retry: s.retry,
        notify: s.notify.clone(),
        keyword: None,
    })
}

fn last(r: Option<&bftp_ftp::LastReply>) -> Option<LastReply> {
    r.map(|r| LastReply {
        code: r.code.map(u16::from),
        text: format!("{}: {}", r.command, r.text),
    })
}

struct Run {
    store: Arc<dyn JobStore>,
    secrets: Arc<Secrets>,
    limits: Limits,
    check: Arc<dyn AddressCheck>,
    /// Connection slots per host, shared with every other job and `bftp transfer`.
    hosts: Arc<crate::ftp::HostLimits>,
    metrics: Arc<Metrics>,
    live: Arc<crate::live::Live>,
    watch_progress: bool,
    /// Shutdown began: finish the file in flight, start no other.
    drain: CancellationToken,
    /// Cancel or the end of the shutdown grace: ABOR the copy in flight.
    abort: CancellationToken,
    id: JobId,
    /// Shared with the attempt's future, which stores it however the attempt ends.
    log: Arc<Mutex<AttemptLog>>,
}

/// How one lane of an attempt ended: a job-level end (failure, shutdown), and the reason of
/// the last member it left pending for a retry.
struct LaneEnd {
    end: Option<AttemptEnd>,
    transient: Option<String>,
}

/// A member left pending by this attempt: why, and whether it is worth a second try within
/// the attempt ([`crate::work`]).
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

/// What the lanes of one attempt share.
struct Lanes {
    queue: WorkQueue<Member>,
    /// Set by a job-level end in one lane: the others stop after their file in flight.
    stop: AtomicBool,
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

/// The source's size as SIZE told the copy, if it did.
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
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        crate::on_store(&self.store, f).await
    }

    async fn update(&self, index: u32, u: MemberUpdate) -> Result<Member, StoreError> {
        let id = self.id;
        self.blocking(move |s| s.update_member(id, index, u, now()))
            .await
    }

    fn keep(&self, t: &Transcript) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).keep(t);
    }

    /// Keeps what the pair recorded since its last outcome, then closes it.
    async fn close(&self, mut pair: Pair) {
        self.keep(&pair.take_transcript());
        pair.close().await;
    }

    /// Where the bytes of `m`'s copy can be seen while it runs: a `replace` copy's
    /// destination file (see [`crate::live`]).
    fn look(&self, spec: &JobSpec, m: &Member) -> Option<crate::live::Look> {
        let dst = spec.destination.as_ref()?;
        if !self.watch_progress
            || spec.disposition == Disposition::Delete
            || spec.dest_command != DestCommand::Replace
        {
            return None;
        }
        Some(crate::live::Look {
            login: ServerLogin::from_endpoint(dst),
            path: copy_request(spec, &m.name).dest_path,
            limits: self.limits.clone(),
            check: self.check.clone(),
            hosts: self.hosts.clone(),
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
        match Pair::open(&src, &dst, spec.params, &self.limits, self.check.clone()).await {
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
        let spec = match unseal_spec(&self.secrets, &job.spec) {
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
            match self.blocking(move |s| s.members(id)).await {
                Ok(members) if !members.iter().any(needs_work) => return AttemptEnd::Complete,
                Ok(_) => {}
                Err(e) => return store_failed(e),
            }
        }
        let dst_host = spec
            .destination
            .as_ref()
            .map_or(spec.source.host.as_str(), |d| d.host.as_str());
        // Held while this attempt has connections open.
        let _permits = self.hosts.acquire(&spec.source.host, dst_host).await;
        let mut pair = match self.open(&spec, "p1").await {
            Ok(p) => p,
            Err(e) => {
                self.keep(&e.transcript);
                return pair_failed(&e);
            }
        };
        if !job.members_frozen {
            if let Err(end) = self.freeze(&mut pair, &spec).await {
                self.close(pair).await;
                return end;
            }
        }
        let work: VecDeque<Member> = match self.blocking(move |s| s.members(id)).await {
            Ok(m) => m.into_iter().filter(needs_work).collect(),
            Err(e) => return store_failed(e),
        };
        // More pairs for a multi-file job, up to `parallel_pairs`, but only on connection
        // slots free right now: extra lanes never wait for (or starve) another job.
        let lanes = self.hosts.parallel_pairs.min(work.len()).max(1);
        let mut extra_permits = Vec::new();
        for _ in 1..lanes {
            match self.hosts.try_acquire(&spec.source.host, dst_host) {
                Some(p) => extra_permits.push(p),
                None => break,
            }
        }
        let labels: Vec<String> = (2..=extra_permits.len() + 1)
            .map(|n| format!("p{n}"))
            .collect();
        let opened =
            futures_util::future::join_all(labels.iter().map(|l| self.open(&spec, l))).await;
        let mut pairs = vec![pair];
        for r in opened {
            match r {
                Ok(p) => pairs.push(p),
                // One pair fewer; the first pair still does the work.
                Err(e) => self.keep(&e.transcript),
            }
        }
        let lanes = Lanes {
            queue: WorkQueue::new(work),
            stop: AtomicBool::new(false),
        };
        let ends = futures_util::future::join_all(
            pairs
                .into_iter()
                .map(|p| self.lane(p, &spec, attempt, &lanes)),
        )
        .await;
        drop(extra_permits);
        let mut transient = None;
        let mut end = None;
        for lane in ends {
            transient = transient.or(lane.transient);
            end = match (end, lane.end) {
                // A job-level permanent failure decides the attempt, whatever else happened.
                (Some(e @ AttemptEnd::JobPermanent { .. }), _) => Some(e),
                (_, Some(e @ AttemptEnd::JobPermanent { .. })) => Some(e),
                (None, e) | (e, None) => e,
                (first, Some(_)) => first,
            };
        }
        // A second try that no lane took (they all stopped): its first failure stands.
        let transient = transient.or_else(|| {
            let left = lanes.queue.into_left();
            left.into_iter().find_map(|e| {
                e.second
                    .map(|(_, reason)| format!("{}: {reason}", e.item.name))
            })
        });
        match (end, transient) {
            (Some(end), _) => end,
            (None, None) => AttemptEnd::Complete,
            (None, Some(reason)) => AttemptEnd::Transient { reason },
        }
    }

    /// One connection pair working through the shared queue of members, until it is empty,
    /// shutdown drains, or a job-level failure here or in another lane (`stop`) ends the
    /// attempt; the file in flight is always finished and recorded first.
    async fn lane(&self, mut pair: Pair, spec: &JobSpec, attempt: u32, lanes: &Lanes) -> LaneEnd {
        let mut transient = None;
        let end = loop {
            if self.drain.is_cancelled() || self.abort.is_cancelled() {
                break Some(AttemptEnd::Interrupted);
            }
            if lanes.stop.load(Ordering::Acquire) {
                break None;
            }
            let entry = match lanes.queue.pop() {
                None => break None,
                Some(Next::Dropped { item, reason }) => {
                    transient = Some(format!("{}: {reason}", item.name));
                    continue;
                }
                Some(Next::Copy(entry)) => entry,
            };
            let interrupted = async {
                tokio::select! {
                    () = self.drain.cancelled() => {}
                    () = self.abort.cancelled() => {}
                }
            };
            if !entry.wait(interrupted).await {
                if let Some((_, reason)) = &entry.second {
                    transient = Some(format!("{}: {reason}", entry.item.name));
                }
                break Some(AttemptEnd::Interrupted);
            }
            let second = entry.second.is_some();
            let m = entry.item;
            if !pair.is_usable() {
                self.keep(&pair.take_transcript());
                let label = pair.label().unwrap_or_else(|| "p?".into());
                pair = match self.open(spec, &label).await {
                    Ok(p) => p,
                    Err(e) => {
                        self.keep(&e.transcript);
                        lanes.stop.store(true, Ordering::Release);
                        return LaneEnd {
                            end: Some(pair_failed(&e)),
                            transient,
                        };
                    }
                };
            }
            // A copy's progress, in memory for the views, while it is worked on.
            let result = if spec.destination.is_some() {
                let follow = crate::live::follow(
                    self.live.clone(),
                    self.id,
                    m.index,
                    pair.progress(),
                    self.look(spec, &m),
                );
                let result = tokio::select! {
                    biased;
                    result = self.member(&mut pair, spec, &m, attempt) => result,
                    never = follow => match never {},
                };
                self.live.end(self.id, m.index);
                result
            } else {
                self.member(&mut pair, spec, &m, attempt).await
            };
            match result {
                Ok(None) => {}
                Ok(Some(Pending { reason, again })) if again && !second => {
                    tracing::info!(job = self.id.0, member = %m.name, attempt, %reason, "file to be tried again in this attempt");
                    let member = Member {
                        attempts: m.attempts + 1,
                        detail: Some(reason.clone()),
                        intent: None,
                        ..m
                    };
                    lanes.queue.try_again(member, reason);
                }
                Ok(Some(Pending { reason, again })) => {
                    if again {
                        lanes.queue.second_try_failed();
                    }
                    transient = Some(format!("{}: {reason}", m.name))
                }
                Err(end) => {
                    lanes.stop.store(true, Ordering::Release);
                    break Some(end);
                }
            }
        };
        self.close(pair).await;
        LaneEnd { end, transient }
    }

    /// SPEC §4.4: the first successful listing, matched by us, durable before any member moves.
    async fn freeze(&self, pair: &mut Pair, spec: &JobSpec) -> Result<(), AttemptEnd> {
        let listing = pair
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
        self.keep(&listing.transcript);
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
        self.blocking(move |s| s.freeze_members(id, members, now()))
            .await
            .map_err(store_failed)
    }

    /// One member. `Ok(Some(pending))`: it stays pending for a retry; `Err`: the attempt ends.
    async fn member(
        &self,
        pair: &mut Pair,
        spec: &JobSpec,
        m: &Member,
        attempt: u32,
    ) -> Result<Option<Pending>, AttemptEnd> {
        let index = m.index;
        let src_path = source_path(spec, &m.name);
        if let Some(intent) = m.intent.as_deref().and_then(Intent::decode) {
            match intent {
                Intent::Dele if spec.disposition == Disposition::Delete => {
                    return self.delete_only(pair, m, &src_path, true).await
                }
                Intent::Dele => {
                    return self
                        .delete_source(
                            pair,
                            index,
                            &src_path,
                            m.detail.as_deref().unwrap_or("copied"),
                        )
                        .await
                }
                Intent::Stou => {
                    self.update(index, MemberUpdate { state: Some(MemberState::Uncertain), intent: Some(None), detail: Some("bftpd stopped during STOU: a file with a name the server chose may exist on the destination; it was not repeated".into()), ..Default::default() }).await.map_err(store_failed)?;
                    return Ok(None);
                }
                Intent::Appe {
                    before,
                    source_size,
                } => {
                    let req = copy_request(spec, &m.name);
                    match pair.size(Side::Destination, &req.dest_path).await {
                        Ok(Some(now_size)) if now_size == before + source_size => {
                            let evidence = format!("append resolved after an interruption: the destination grew from {before} to {now_size} bytes");
                            self.succeed(spec, index, Some(source_size), evidence.clone())
                                .await?;
                            return if spec.disposition == Disposition::Move {
                                self.delete_source(pair, index, &src_path, &evidence).await
                            } else {
                                Ok(None)
                            };
                        }
                        Ok(size) if size.unwrap_or(0) == before => {
                            self.update(
                                index,
                                MemberUpdate {
                                    intent: Some(None),
                                    ..Default::default()
                                },
                            )
                            .await
                            .map_err(store_failed)?;
                        }
                        Ok(size) => {
                            self.update(index, MemberUpdate { state: Some(MemberState::Uncertain), intent: Some(None), detail: Some(format!("an interrupted append left the destination at {} bytes; before it was {before}, a complete append gives {}: not repeated", size.map_or("unknown".into(), |s| s.to_string()), before + source_size)), ..Default::default() }).await.map_err(store_failed)?;
                            return Ok(None);
                        }
                        Err(e) => {
                            return Ok(Some(
                                format!("cannot resolve an interrupted append yet: {e}").into(),
                            ))
                        }
                    }
                }
            }
        }
        if spec.disposition == Disposition::Delete {
            self.update(
                index,
                MemberUpdate {
                    attempts: Some(m.attempts + 1),
                    intent: Some(Some(Intent::Dele.encode())),
                    ..Default::default()
                },
            )
            .await
            .map_err(store_failed)?;
            return self.delete_only(pair, m, &src_path, false).await;
        }
        let mut req = copy_request(spec, &m.name);
        // Fence the unrepeatable effects before they happen.
        match spec.dest_command {
            DestCommand::Append => {
                // No source file, or no SIZE to fence with: retrying cannot help.
                let fail = |detail: String| MemberUpdate {
                    state: Some(MemberState::FailedPermanent),
                    attempts: Some(m.attempts + 1),
                    detail: Some(detail),
                    ..Default::default()
                };
                let source_size = match pair.size(Side::Source, &req.source_path).await {
                    Ok(Some(s)) => s,
                    Ok(None) => {
                        self.update(
                            index,
                            fail(format!(
                                "the source file does not exist: SIZE {} answered 550",
                                req.source_path
                            )),
                        )
                        .await
                        .map_err(store_failed)?;
                        return Ok(None);
                    }
                    Err(e) if e.disposition().is_transient() => {
                        return Ok(Some(e.to_string().into()))
                    }
                    Err(e) => {
                        self.update(
                            index,
                            fail(format!(
                                "an append is fenced by SIZE of the source, which failed: {e}"
                            )),
                        )
                        .await
                        .map_err(store_failed)?;
                        return Ok(None);
                    }
                };
                let before = match pair.size(Side::Destination, &req.dest_path).await {
                    Ok(s) => s.unwrap_or(0),
                    Err(e) if e.disposition().is_transient() => {
                        return Ok(Some(e.to_string().into()))
                    }
                    Err(e) => {
                        self.update(
                            index,
                            fail(format!(
                                "an append is fenced by SIZE of the destination, which failed: {e}"
                            )),
                        )
                        .await
                        .map_err(store_failed)?;
                        return Ok(None);
                    }
                };
                // Asked just now on this pair: the copy need not ask again before APPE.
                req.source_size = Some(source_size);
                self.update(
                    index,
                    MemberUpdate {
                        intent: Some(Some(
                            Intent::Appe {
                                before,
                                source_size,
                            }
                            .encode(),
                        )),
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
            }
            DestCommand::Unique => {
                self.update(
                    index,
                    MemberUpdate {
                        intent: Some(Some(Intent::Stou.encode())),
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failed)?;
            }
            DestCommand::Replace => {}
        }
        let outcome = match pair
            .copy_or_abort(&req, self.abort.cancelled(), "the attempt was aborted")
            .await
        {
            Ok(o) => o,
            // Aborted: ABOR was sent, the member stays as it is for the next attempt.
            Err(e) if self.abort.is_cancelled() => {
                self.keep(&e.transcript);
                return Err(AttemptEnd::Interrupted);
            }
            Err(e) => {
                self.keep(&e.transcript);
                // A job-level failure in the middle of a copy: an append or STOU may be half done.
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
        let report = outcome.report().clone();
        let data_connection = data_connection_failed(&outcome);
        self.keep(&report.transcript);
        let replies = MemberUpdate {
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
        };
        match outcome {
            CopyOutcome::Succeeded {
                bytes,
                size_check,
                stou_name,
                ..
            } => {
                let mut detail = crate::ftp::evidence(&size_check);
                if let Some(n) = &stou_name {
                    detail = format!("stored as {n:?}; {detail}");
                }
                let mut u = MemberUpdate {
                    state: Some(MemberState::Succeeded),
                    bytes,
                    // The size SIZE gave the copy, where the listing gave none (a
                    // single-file job's member is known before any SIZE).
                    size: source_size(&size_check).filter(|_| m.size.is_none()),
                    detail: Some(detail.clone()),
                    intent: Some(None),
                    ..replies
                };
                if spec.disposition == Disposition::Move {
                    u.intent = Some(Some(Intent::Dele.encode()));
                }
                self.update(index, u).await.map_err(store_failed)?;
                self.metrics
                    .file(FileResult::Succeeded, report.duration, bytes);
                tracing::info!(job = self.id.0, member = %m.name, attempt, "file copied");
                if spec.disposition == Disposition::Move {
                    return self.delete_source(pair, index, &src_path, &detail).await;
                }
                Ok(None)
            }
            CopyOutcome::Permanent { failure, .. } => {
                let state =
                    if spec.dest_command != DestCommand::Replace && report.destination_touched {
                        MemberState::Uncertain
                    } else {
                        MemberState::FailedPermanent
                    };
                let counted = FileResult::FailedPermanent.unless_uncertain(Some(state));
                self.metrics.file(counted, report.duration, None);
                self.update(
                    index,
                    MemberUpdate {
                        state: Some(state),
                        detail: Some(failure.to_string()),
                        intent: Some(None),
                        ..replies
                    },
                )
                .await
                .map_err(store_failed)?;
                Ok(None)
            }
            CopyOutcome::Transient { failure, .. } => {
                let reason = failure.to_string();
                let mut u = MemberUpdate {
                    detail: Some(reason.clone()),
                    ..replies
                };
                if !report.destination_touched || spec.dest_command == DestCommand::Replace {
                    u.intent = Some(None);
                } else if spec.dest_command == DestCommand::Unique {
                    // A partial unique file: delete it if its name is known, else it is uncertain.
                    match &report.stou_name {
                        Some(name)
                            if pair.is_usable()
                                && pair
                                    .delete(
                                        Side::Destination,
                                        &crate::ftp::join_path(&req.dest_path, name),
                                    )
                                    .await
                                    .is_ok() =>
                        {
                            u.intent = Some(None)
                        }
                        _ => {
                            u.state = Some(MemberState::Uncertain);
                            u.intent = Some(None);
                        }
                    }
                }
                // An append's intent stays: the next attempt resolves it from SIZE.
                let counted = FileResult::Transient.unless_uncertain(u.state);
                // Nothing of it is left to resolve, and the failure was a data connection
                // that did not open or broke (425/426): worth another try in this attempt.
                let again = data_connection && u.state.is_none() && u.intent == Some(None);
                self.metrics.file(counted, report.duration, None);
                self.update(index, u).await.map_err(store_failed)?;
                Ok(Some(Pending { reason, again }))
            }
        }
    }

    async fn succeed(
        &self,
        spec: &JobSpec,
        index: u32,
        bytes: Option<u64>,
        detail: String,
    ) -> Result<(), AttemptEnd> {
        let intent = if spec.disposition == Disposition::Move {
            Some(Some(Intent::Dele.encode()))
        } else {
            Some(None)
        };
        self.update(
            index,
            MemberUpdate {
                state: Some(MemberState::Succeeded),
                bytes,
                detail: Some(detail),
                intent,
                ..Default::default()
            },
        )
        .await
        .map_err(store_failed)?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_ftp::{Entry, EntryKind};
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
        log.keep(&p2);
        log.keep(&p1);
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

    #[test]
    fn the_log_keeps_the_latest_lines_and_counts_the_rest() {
        let mut log = AttemptLog::default();
        let t0 = log.clock;
        let lines: Vec<(u64, String)> = (0..TRANSCRIPT_LINES as u64 + 5)
            .map(|i| (i, format!("NOOP {i}")))
            .collect();
        let refs: Vec<(u64, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
        log.keep(&transcript(t0, "p1", &refs));
        let out = log.take();
        assert_eq!(out.len(), TRANSCRIPT_LINES + 1);
        assert_eq!(out[0], "[... 5 earlier lines omitted ...]");
        assert!(out[1].ends_with("NOOP 5"), "{}", out[1]);
    }
}
