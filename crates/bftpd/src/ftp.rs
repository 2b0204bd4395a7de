//! The daemon's side of the engine: FTP settings from the config, the host policy as the
//! engine's address check (re-applied at every connect, so DNS changes after submit cannot
//! reach a denied address), paths of a job's files, and the two foreground operations of
//! RULES.md §7: `verify` and `transfer`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bftp_api::{CheckView, FileResult, ReplyView, TransferEvent, TransferSummary, VerifyResponse};
use bftp_core::reply::{ReplyCode, ReplyOverride, TreatAs};
use bftp_core::{DestCommand, JobSpec};
use bftp_ftp::{
    AddressCheck, CopyOutcome, CopyRequest, LastReply, Limits, Pair, Progress, ServerLogin,
    SizeCheck, Transcript, VerifyRequest,
};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::policy::HostPolicy;
use crate::work::{data_connection_failed, Next, WorkQueue};

/// `[ftp]` in the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtpConfig {
    /// Per address tried.
    #[serde(default = "d_connect", with = "crate::config::humantime_duration")]
    pub connect_timeout: Duration,
    /// Per reply (a wrong password takes some servers 3 to 5 s to refuse).
    #[serde(default = "d_reply", with = "crate::config::humantime_duration")]
    pub reply_timeout: Duration,
    /// The watchdog of one file's copy.
    #[serde(default = "d_transfer", with = "crate::config::humantime_duration")]
    pub transfer_timeout: Duration,
    /// Connection pairs one job runs at once (consecutive files reuse each pair).
    #[serde(default = "d_pairs")]
    pub parallel_pairs: usize,
    /// Control connections the daemon opens to one host at once, over all jobs.
    #[serde(default = "d_per_host")]
    pub max_connections_per_host: usize,
    /// Whether a `replace` copy that runs over a second gets one more control connection to
    /// its destination, which asks SIZE every two seconds so that `bftp status` can show
    /// the bytes so far (on a free `max_connections_per_host` slot only). Off for servers
    /// that allow fewer sessions per client than bftpd's pairs plus these looks.
    #[serde(default = "d_watch")]
    pub watch_progress: bool,
    /// Per-host reply overrides (RULES.md §5), for servers that send a 5yz for a broken
    /// connection: `{ host = "ftp.example.org", code = 550, treat_as = "transient" }`.
    #[serde(default)]
    pub overrides: Vec<OverrideConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideConfig {
    /// A host name or address; `*` and `?` match any characters.
    pub host: String,
    pub code: u16,
    /// `transient` or `permanent`.
    pub treat_as: String,
}

fn d_pairs() -> usize {
    4
}
fn d_per_host() -> usize {
    16
}
fn d_watch() -> bool {
    true
}
fn d_connect() -> Duration {
    Limits::default().connect_timeout
}
fn d_reply() -> Duration {
    Limits::default().reply_timeout
}
fn d_transfer() -> Duration {
    Limits::default().transfer_timeout
}

impl Default for FtpConfig {
    fn default() -> Self {
        FtpConfig {
            connect_timeout: d_connect(),
            reply_timeout: d_reply(),
            transfer_timeout: d_transfer(),
            parallel_pairs: d_pairs(),
            max_connections_per_host: d_per_host(),
            watch_progress: d_watch(),
            overrides: Vec::new(),
        }
    }
}

impl FtpConfig {
    pub fn limits(&self) -> anyhow::Result<Limits> {
        let mut overrides = Vec::new();
        for o in &self.overrides {
            let code = ReplyCode::new(o.code).ok_or_else(|| {
                anyhow::anyhow!(
                    "[ftp] override for {}: {} is not a reply code",
                    o.host,
                    o.code
                )
            })?;
            let treat = match o.treat_as.as_str() {
                "transient" => TreatAs::Transient,
                "permanent" => TreatAs::Permanent,
                other => anyhow::bail!("[ftp] override for {}: treat_as {other:?} is neither \"transient\" nor \"permanent\"", o.host),
            };
            overrides.push(
                ReplyOverride::new(&o.host, code, treat)
                    .map_err(|e| anyhow::anyhow!("[ftp] override for {}: {e}", o.host))?,
            );
        }
        Ok(Limits {
            connect_timeout: self.connect_timeout,
            reply_timeout: self.reply_timeout,
            transfer_timeout: self.transfer_timeout,
            overrides,
            ..Limits::default()
        })
    }
}

/// The host policy, as the engine's check of every address it is about to connect to.
pub struct PolicyCheck(pub HostPolicy);

impl AddressCheck for PolicyCheck {
    fn check(&self, host: &str, addrs: &[IpAddr]) -> Result<(), String> {
        self.0.check_all(host, addrs).map_err(|e| e.to_string())
    }
}

/// `dir/name`, or `name` for the login directory.
pub fn join_path(dir: &str, name: &str) -> String {
    match dir {
        "" => name.to_string(),
        d if d.ends_with('/') => format!("{d}{name}"),
        d => format!("{d}/{name}"),
    }
}

/// The source path of a member: the job's source directory and the member's name.
pub fn source_path(spec: &JobSpec, name: &str) -> String {
    if spec.is_multi_file() {
        join_path(spec.source.dir(), name)
    } else {
        spec.source.path.clone()
    }
}

/// What to copy for one member. The destination path names a directory when the job is a
/// multi-file job, when it is empty or ends with `/`, and always for `unique` (STOU takes
/// no name); otherwise it is the file name itself.
pub fn copy_request(spec: &JobSpec, name: &str) -> CopyRequest {
    let dst = spec
        .destination
        .as_ref()
        .map(|d| d.path.as_str())
        .unwrap_or("");
    let is_dir = spec.is_multi_file() || dst.is_empty() || dst.ends_with('/');
    let dest_path = match spec.dest_command {
        DestCommand::Unique if is_dir => dst.trim_end_matches('/').to_string(),
        DestCommand::Unique => dst.to_string(),
        _ if is_dir => join_path(dst, name),
        _ => dst.to_string(),
    };
    CopyRequest {
        source_path: source_path(spec, name),
        dest_path,
        dest_command: spec.dest_command,
        source_size: None,
        announce: None,
    }
}

pub fn transcript_lines(t: &Transcript) -> Vec<String> {
    t.to_string().lines().map(str::to_string).collect()
}

pub fn reply_view(r: &LastReply) -> ReplyView {
    ReplyView {
        code: r.code.map(u16::from),
        text: format!("{}: {}", r.command, r.text),
    }
}

pub fn evidence(c: &SizeCheck) -> String {
    match c {
        SizeCheck::Equal {
            source,
            destination,
            destination_before: Some(before),
        } => {
            format!("sizes agree: destination grew from {before} to {destination} bytes by the source's {source}")
        }
        SizeCheck::Equal { destination, .. } => format!("sizes equal ({destination} bytes)"),
        SizeCheck::TextType {
            source,
            destination,
        } => format!(
            "text type: sizes not compared (source {}, destination {})",
            source.map_or("?".into(), |s| s.to_string()),
            destination.map_or("?".into(), |s| s.to_string())
        ),
        SizeCheck::NotAvailable(why) => {
            format!("no size evidence: {why}; both servers reported success")
        }
    }
}

fn logins(spec: &JobSpec) -> Option<(ServerLogin, ServerLogin)> {
    let dst = spec.destination.as_ref()?;
    Some((
        ServerLogin::from_endpoint(&spec.source),
        ServerLogin::from_endpoint(dst),
    ))
}

/// `bftp verify`: the engine's checks, from the daemon's vantage point.
pub async fn verify(
    spec: &JobSpec,
    limits: &Limits,
    check: Arc<dyn AddressCheck>,
) -> VerifyResponse {
    let Some((src, dst)) = logins(spec) else {
        return VerifyResponse {
            ok: false,
            checks: vec![CheckView {
                name: "destination".into(),
                ok: false,
                detail: "a job without a destination has nothing to verify on a destination".into(),
            }],
            transcript: vec![],
        };
    };
    let request = VerifyRequest {
        source_path: spec.source.path.clone(),
        destination_path: spec
            .destination
            .as_ref()
            .map(|d| d.path.clone())
            .unwrap_or_default(),
    };
    let report = bftp_ftp::verify(&src, &dst, spec.params, limits, check, &request).await;
    VerifyResponse {
        ok: report.ok(),
        checks: report
            .checks
            .iter()
            .map(|c| CheckView {
                name: c.name.clone(),
                ok: c.ok,
                detail: c.detail.clone(),
            })
            .collect(),
        transcript: transcript_lines(&report.transcript),
    }
}

fn file_result(name: &str, outcome: &CopyOutcome, seconds: f64) -> FileResult {
    let report = outcome.report();
    let (state, bytes, evidence_text, stored_as, detail) = match outcome {
        CopyOutcome::Succeeded {
            bytes,
            size_check,
            stou_name,
            ..
        } => (
            "succeeded",
            *bytes,
            Some(evidence(size_check)),
            stou_name.clone(),
            None,
        ),
        // A failed unique copy's file is left (bftp transfer cannot prove it is not another
        // copy's): its name is shown.
        CopyOutcome::Transient { failure, .. } => (
            "failed_transient",
            None,
            None,
            report.stou_left.last().cloned(),
            Some(failure.to_string()),
        ),
        CopyOutcome::Permanent { failure, .. } => (
            "failed_permanent",
            None,
            None,
            report.stou_left.last().cloned(),
            Some(failure.to_string()),
        ),
    };
    FileResult {
        name: name.to_string(),
        state: state.into(),
        bytes,
        evidence: evidence_text,
        stored_as,
        source_reply: report
            .source_final
            .as_ref()
            .or(report.source_reply.as_ref())
            .map(reply_view),
        dest_reply: report
            .destination_final
            .as_ref()
            .or(report.destination_reply.as_ref())
            .map(reply_view),
        fallbacks: report.fallbacks.iter().map(|f| format!("{f:?}")).collect(),
        detail,
        seconds,
    }
}

fn phase(p: &Progress) -> Option<(String, &'static str)> {
    match p {
        Progress::Preparing { path } => Some((path.clone(), "preparing")),
        Progress::Transferring { path, .. } => Some((path.clone(), "transferring")),
        Progress::Checking { path } => Some((path.clone(), "checking")),
        _ => None,
    }
}

/// `bftp transfer`: a foreground copy without the queue, reported as events on `tx`.
/// Returns when done, or as soon as the receiver is gone (the client hung up).
pub async fn transfer(
    spec: JobSpec,
    limits: Limits,
    check: Arc<dyn AddressCheck>,
    hosts: Arc<HostLimits>,
    tx: mpsc::Sender<TransferEvent>,
) {
    let started = Instant::now();
    let closed = tx.clone();
    tokio::select! {
        _ = closed.closed() => tracing::info!("transfer client hung up; transfer abandoned"),
        _ = run_transfer(&spec, &limits, check, hosts, &tx, started) => {}
    }
}

async fn run_transfer(
    spec: &JobSpec,
    limits: &Limits,
    check: Arc<dyn AddressCheck>,
    hosts: Arc<HostLimits>,
    tx: &mpsc::Sender<TransferEvent>,
    started: Instant,
) {
    let mut summary = TransferSummary {
        files: 0,
        succeeded: 0,
        failed: 0,
        bytes: 0,
        seconds: 0.0,
        error: None,
        transcript: vec![],
    };
    let finish = |mut summary: TransferSummary| {
        summary.seconds = started.elapsed().as_secs_f64();
        TransferEvent::Summary(summary)
    };
    let Some((src, dst)) = logins(spec) else {
        summary.error = Some("a transfer needs a destination".into());
        let _ = tx.send(finish(summary)).await;
        return;
    };
    let permits = hosts.acquire(&src.host, &dst.host).await;
    let mut pair = match Pair::open(&src, &dst, spec.params, limits, check.clone()).await {
        Ok(p) => p,
        Err(e) => {
            summary.error = Some(e.to_string());
            summary.transcript = transcript_lines(&e.transcript);
            let _ = tx.send(finish(summary)).await;
            return;
        }
    };
    // The other connection pairs log in while the first one lists: a listing of
    // thousands of names takes long enough for them to be ready when it ends.
    let extra = if spec.is_multi_file() {
        hosts.parallel_pairs.saturating_sub(1)
    } else {
        0
    };
    let mut early: Vec<tokio::task::JoinHandle<EarlyPair>> = (0..extra)
        .map(|_| {
            let (src, dst, limits, check, hosts) = (
                src.clone(),
                dst.clone(),
                limits.clone(),
                check.clone(),
                hosts.clone(),
            );
            let params = spec.params;
            tokio::spawn(async move {
                let permits = hosts.acquire(&src.host, &dst.host).await;
                let pair = Pair::open(&src, &dst, params, &limits, check).await;
                (permits, pair)
            })
        })
        .collect();
    let names = if spec.is_multi_file() {
        match pair
            .list_source(spec.source.dir(), spec.source.file_name())
            .await
        {
            Ok(listing) => {
                let rejected = listing
                    .rejected
                    .iter()
                    .map(|r| format!("\"{}\": {}", r.line, r.reason))
                    .collect();
                let _ = tx
                    .send(TransferEvent::Listed {
                        files: listing.members.iter().map(|m| m.name.clone()).collect(),
                        rejected,
                    })
                    .await;
                // Not the listing's sizes: the last files of a long listing are copied
                // minutes after it, and each copy asks the source's SIZE right before it
                // touches the destination (a file gone since must not cost the
                // destination its old copy).
                listing
                    .members
                    .into_iter()
                    .map(|m| m.name)
                    .collect::<Vec<_>>()
            }
            Err(e) => {
                summary.error = Some(e.to_string());
                let _ = tx.send(finish(summary)).await;
                close_early(early);
                return;
            }
        }
    } else {
        let name = spec.source.file_name().to_string();
        let _ = tx
            .send(TransferEvent::Listed {
                files: vec![name.clone()],
                rejected: vec![],
            })
            .await;
        vec![name]
    };
    if names.is_empty() {
        summary.error = Some(format!("no file matches {:?}", spec.source.path));
        let _ = tx.send(finish(summary)).await;
        close_early(early);
        return;
    }
    let workers = hosts.parallel_pairs.clamp(1, names.len());
    let unused = early.split_off(early.len().min(workers.saturating_sub(1)));
    close_early(unused);
    let mut early = early.into_iter();
    let shared = Arc::new(Shared {
        queue: WorkQueue::new(names.into_iter().map(|name| File { name, first: None })),
        summary: std::sync::Mutex::new(summary),
        stop: std::sync::atomic::AtomicBool::new(false),
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut first = Some(pair);
    for _ in 0..workers {
        let worker = Worker {
            spec: spec.clone(),
            src: src.clone(),
            dst: dst.clone(),
            limits: limits.clone(),
            check: check.clone(),
            hosts: hosts.clone(),
            tx: tx.clone(),
            shared: shared.clone(),
        };
        let pair = first.take();
        let opening = if pair.is_none() { early.next() } else { None };
        tasks.spawn(async move {
            let (pair, permits) = match opening {
                None => (pair, None),
                Some(opening) => match opening.await {
                    Ok((permits, Ok(pair))) => (Some(pair), Some(permits)),
                    // The worker opens its own pair when it has a file (and reports
                    // the failure if that one fails too).
                    Ok((_, Err(e))) => {
                        tracing::info!(error = %e, "an extra connection pair failed to open");
                        (None, None)
                    }
                    Err(_) => (None, None),
                },
            };
            worker.run(pair, permits).await
        });
    }
    drop(permits);
    while tasks.join_next().await.is_some() {}
    let summary = std::mem::replace(
        &mut *shared.summary.lock().unwrap_or_else(|p| p.into_inner()),
        TransferSummary {
            files: 0,
            succeeded: 0,
            failed: 0,
            bytes: 0,
            seconds: 0.0,
            error: None,
            transcript: vec![],
        },
    );
    let _ = tx.send(finish(summary)).await;
}

/// An extra connection pair opened during the listing, with its host slots.
type EarlyPair = (
    Vec<tokio::sync::OwnedSemaphorePermit>,
    Result<Pair, bftp_ftp::PairError>,
);

/// QUIT the extra pairs nobody will use (no file for them, or the listing failed), in
/// the background: their logins may still be under way.
fn close_early(early: Vec<tokio::task::JoinHandle<EarlyPair>>) {
    for opening in early {
        tokio::spawn(async move {
            if let Ok((_permits, Ok(pair))) = opening.await {
                pair.close().await;
            }
        });
    }
}

/// A copy shorter than this shows no phase on the event stream (its `File` result says
/// everything); a longer one shows its phase then, and phase changes at most this often.
/// Three phase events per small file were most of the stream's bytes.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(500);

/// One file of a foreground transfer.
struct File {
    name: String,
    /// For a second try: the first try's result, which stands if the second is not made.
    first: Option<FileResult>,
}

/// The phase of one file's copy on the event stream, coalesced: at most every
/// [`PROGRESS_INTERVAL`], none for a quick copy. Never completes: the copy ends it.
async fn show_progress(
    mut progress: tokio::sync::watch::Receiver<bftp_ftp::Progress>,
    tx: mpsc::Sender<TransferEvent>,
    name: String,
) -> std::convert::Infallible {
    let mut shown = None;
    loop {
        tokio::time::sleep(PROGRESS_INTERVAL).await;
        let now = phase(&progress.borrow_and_update()).map(|(_, phase)| phase);
        if let Some(now) = now.filter(|now| shown != Some(*now)) {
            shown = Some(now);
            let event = TransferEvent::Progress {
                name: name.clone(),
                phase: now.into(),
            };
            if tx.send(event).await.is_err() {
                break;
            }
        }
        if progress.changed().await.is_err() {
            break;
        }
    }
    std::future::pending().await
}

/// What the workers of one foreground transfer share.
struct Shared {
    queue: WorkQueue<File>,
    summary: std::sync::Mutex<TransferSummary>,
    /// A job-level failure stops every worker.
    stop: std::sync::atomic::AtomicBool,
}

/// One connection pair working through the shared queue of files.
struct Worker {
    spec: JobSpec,
    src: ServerLogin,
    dst: ServerLogin,
    limits: Limits,
    check: Arc<dyn AddressCheck>,
    hosts: Arc<HostLimits>,
    tx: mpsc::Sender<TransferEvent>,
    shared: Arc<Shared>,
}

impl Worker {
    /// Counts a file's final result and sends it to the client: `false` if the client is
    /// gone (then every worker stops).
    async fn report(&self, result: FileResult, succeeded: bool) -> bool {
        {
            let mut s = self
                .shared
                .summary
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            s.files += 1;
            if succeeded {
                s.succeeded += 1;
                s.bytes += result.bytes.unwrap_or(0);
            } else {
                s.failed += 1;
            }
        }
        if self.tx.send(TransferEvent::File(result)).await.is_err() {
            self.shared
                .stop
                .store(true, std::sync::atomic::Ordering::SeqCst);
            return false;
        }
        true
    }

    fn fail(&self, error: String, transcript: Vec<String>) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut s = self
            .shared
            .summary
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if s.error.is_none() {
            s.error = Some(error);
            s.transcript = transcript;
        }
    }

    async fn run(
        self,
        mut pair: Option<Pair>,
        permits: Option<Vec<tokio::sync::OwnedSemaphorePermit>>,
    ) {
        // Held while this worker has connections open.
        let mut _permits = permits;
        loop {
            if self.shared.stop.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            let entry = match self.shared.queue.pop() {
                None => break,
                Some(Next::Dropped { item, .. }) => {
                    let first = item.first.expect("a second try keeps its first result");
                    if !self.report(first, false).await {
                        break;
                    }
                    continue;
                }
                Some(Next::Copy(entry)) => entry,
            };
            entry.wait(std::future::pending()).await;
            let second = entry.second.is_some();
            let File { name, .. } = entry.item;
            if !pair.as_ref().is_some_and(Pair::is_usable) {
                if _permits.is_none() {
                    _permits = Some(self.hosts.acquire(&self.src.host, &self.dst.host).await);
                }
                pair = match Pair::open(
                    &self.src,
                    &self.dst,
                    self.spec.params,
                    &self.limits,
                    self.check.clone(),
                )
                .await
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.fail(e.to_string(), transcript_lines(&e.transcript));
                        break;
                    }
                };
            }
            let p = pair.as_mut().expect("opened above");
            // Polled alongside the copy in this task (no task spawned per file), and dropped
            // with it.
            let watcher = show_progress(p.progress(), self.tx.clone(), name.clone());
            let t = Instant::now();
            let request = copy_request(&self.spec, &name);
            // A unique copy runs alone in its destination directory among the daemon's
            // copies (see `crate::unique`); its announced name is remembered there.
            let dir = match self.spec.dest_command {
                DestCommand::Unique => Some(
                    self.hosts
                        .unique
                        .lock(crate::unique::DirKey::new(
                            &self.dst.host,
                            self.dst.port,
                            &self.dst.user,
                            &request.dest_path,
                        ))
                        .await,
                ),
                _ => None,
            };
            let outcome = tokio::select! {
                biased;
                outcome = p.copy(&request) => outcome,
                never = watcher => match never {},
            };
            if let (Some(dir), Ok(o)) = (&dir, &outcome) {
                if let Some(n) = &o.report().stou_name {
                    dir.claim(n, &format!("bftp transfer of {name:?}"));
                }
            }
            drop(dir);
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    self.fail(e.to_string(), transcript_lines(&e.transcript));
                    break;
                }
            };
            let result = file_result(&name, &outcome, t.elapsed().as_secs_f64());
            // A repeat is safe unless a partial append or unique file may be left behind.
            if data_connection_failed(&outcome)
                && (self.spec.dest_command == DestCommand::Replace
                    || !outcome.report().destination_touched)
            {
                if !second {
                    let reason = result.detail.clone().unwrap_or_default();
                    tracing::info!(file = %name, %reason, "file to be tried again");
                    let first = Some(result);
                    self.shared.queue.try_again(File { name, first }, reason);
                    continue;
                }
                self.shared.queue.second_try_failed();
            }
            if !self.report(result, outcome.is_success()).await {
                break;
            }
        }
        if let Some(p) = pair {
            p.close().await;
        }
    }
}

/// Per-host connection limits, shared by every transfer of the daemon (RULES.md §6): a pair
/// takes one connection on each of its two hosts.
pub struct HostLimits {
    /// Connection pairs one job (or one foreground transfer) runs at once.
    pub parallel_pairs: usize,
    per_host: usize,
    hosts: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Unique (STOU) copies: one at a time per destination directory, daemon-wide.
    pub unique: crate::unique::UniqueDirs,
}

impl HostLimits {
    pub fn new(parallel_pairs: usize, per_host: usize) -> Arc<HostLimits> {
        Arc::new(HostLimits {
            parallel_pairs: parallel_pairs.max(1),
            per_host: per_host.max(1),
            hosts: Default::default(),
            unique: Default::default(),
        })
    }

    fn semaphore(&self, host: &str) -> Arc<tokio::sync::Semaphore> {
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(host.to_ascii_lowercase())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_host)))
            .clone()
    }

    /// Waits for a connection slot on both hosts. Hosts are taken in name order, so two
    /// pairs between the same hosts in opposite directions cannot deadlock.
    pub async fn acquire(&self, a: &str, b: &str) -> Vec<tokio::sync::OwnedSemaphorePermit> {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        let mut out = Vec::new();
        if a == b {
            if let Ok(p) = self
                .semaphore(&a)
                .acquire_many_owned(2.min(self.per_host as u32))
                .await
            {
                out.push(p);
            }
            return out;
        }
        let (first, second) = if a < b { (a, b) } else { (b, a) };
        for h in [first, second] {
            if let Ok(p) = self.semaphore(&h).acquire_owned().await {
                out.push(p);
            }
        }
        out
    }

    /// A slot on one host if one is free now: for a look at a copy's bytes, which never
    /// waits for a slot (and holds it only while the copy it watches runs).
    pub fn try_acquire_one(&self, host: &str) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.semaphore(&host.to_ascii_lowercase())
            .try_acquire_owned()
            .ok()
    }

    /// A slot on both hosts if both are free now; `None` otherwise (nothing held).
    pub fn try_acquire(&self, a: &str, b: &str) -> Option<Vec<tokio::sync::OwnedSemaphorePermit>> {
        let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
        if a == b {
            let n = 2.min(self.per_host as u32);
            return self
                .semaphore(&a)
                .try_acquire_many_owned(n)
                .ok()
                .map(|p| vec![p]);
        }
        let first = self.semaphore(&a).try_acquire_owned().ok()?;
        let second = self.semaphore(&b).try_acquire_owned().ok()?;
        Some(vec![first, second])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn extra_pairs_take_only_free_slots_and_hold_nothing_when_refused() {
        let hosts = HostLimits::new(4, 2);
        let first = hosts.acquire("A", "b").await;
        let second = hosts
            .try_acquire("a", "B")
            .expect("one slot left on each host");
        assert!(hosts.try_acquire("a", "c").is_none(), "a is full");
        // The refused try took nothing on c: two pairs to c still fit.
        let c = hosts.try_acquire("c", "d").unwrap();
        let c2 = hosts.try_acquire("c", "e").unwrap();
        assert!(hosts.try_acquire("c", "f").is_none());
        drop((first, second, c, c2));
        assert!(hosts.try_acquire("a", "c").is_some());
        // A pair on one host takes two slots of it.
        let same = hosts.try_acquire("g", "g").unwrap();
        assert!(hosts.try_acquire("g", "h").is_none());
        drop(same);
    }
    use bftp_core::{Disposition, Endpoint, FtpParams, RetryPolicy, Timestamp};

    fn spec(src: &str, dst: &str, cmd: DestCommand) -> JobSpec {
        let ep = |p: &str| Endpoint {
            host: "h".into(),
            port: 21,
            user: "u".into(),
            password: None,
            acct: None,
            path: p.into(),
        };
        JobSpec {
            source: ep(src),
            destination: Some(ep(dst)),
            disposition: Disposition::Copy,
            dest_command: cmd,
            params: FtpParams::default(),
            start_at: Timestamp(0),
            retry: RetryPolicy::default(),
            notify: vec![],
            keyword: None,
        }
    }

    #[test]
    fn member_paths_table() {
        use DestCommand::*;
        let cases = [
            (
                "pub/a.bin",
                "in/",
                Replace,
                "a.bin",
                "pub/a.bin",
                "in/a.bin",
            ),
            ("pub/a.bin", "", Replace, "a.bin", "pub/a.bin", "a.bin"),
            (
                "pub/a.bin",
                "in/b.bin",
                Replace,
                "a.bin",
                "pub/a.bin",
                "in/b.bin",
            ),
            ("pub/*.bin", "in", Append, "x.bin", "pub/x.bin", "in/x.bin"),
            (
                "*.bin",
                "/abs/in/",
                Replace,
                "x.bin",
                "x.bin",
                "/abs/in/x.bin",
            ),
            ("/srv/*.bin", "in/", Unique, "x.bin", "/srv/x.bin", "in"),
            ("a.bin", "in", Unique, "a.bin", "a.bin", "in"),
        ];
        for (src, dst, cmd, name, want_src, want_dst) in cases {
            let r = copy_request(&spec(src, dst, cmd), name);
            assert_eq!(
                (r.source_path.as_str(), r.dest_path.as_str()),
                (want_src, want_dst),
                "{src} -> {dst} ({cmd:?})"
            );
        }
    }
}
