//! `bftp transfer` (RULES.md §7): a foreground copy without the queue, on the lanes of
//! [`crate::lanes`] like a job's attempt, each file's result sent to the client as it ends.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bftp_api::{FileResult, TransferEvent, TransferSummary};
use bftp_core::{DestCommand, JobSpec};
use bftp_ftp::{AddressCheck, Limits, Pair, PairError, Progress, ServerLogin};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::verify::logins;
use crate::hosts::{HostLimits, Slots};
use crate::lanes::paths::copy_request;
use crate::lanes::routing::Routing;
use crate::lanes::work::{data_connection_failed, WorkQueue};
use crate::lanes::{self, Step};
use crate::views::engine::{file_result, transcript_lines};

/// `bftp transfer`: a foreground copy without the queue, reported as events on `tx`.
/// Returns when done, or as soon as the receiver is gone (the client hung up).
pub async fn transfer(
    spec: JobSpec,
    limits: Limits,
    check: Arc<dyn AddressCheck>,
    hosts: Arc<HostLimits>,
    tx: mpsc::Sender<TransferEvent>,
    routing: Routing,
) {
    let started = Instant::now();
    let closed = tx.clone();
    tokio::select! {
        _ = closed.closed() => tracing::info!("transfer client hung up; transfer abandoned"),
        _ = run_transfer(&spec, &limits, (check, &routing), hosts, &tx, started) => {}
    }
}

fn empty_summary() -> TransferSummary {
    TransferSummary {
        files: 0,
        succeeded: 0,
        failed: 0,
        refused: 0,
        bytes: 0,
        seconds: 0.0,
        error: None,
        transcript: vec![],
    }
}

async fn run_transfer(
    spec: &JobSpec,
    limits: &Limits,
    (check, routing): (Arc<dyn AddressCheck>, &Routing),
    hosts: Arc<HostLimits>,
    tx: &mpsc::Sender<TransferEvent>,
    started: Instant,
) {
    let finish = |mut summary: TransferSummary| {
        summary.seconds = started.elapsed().as_secs_f64();
        TransferEvent::Summary(summary)
    };
    let fail = |error: String, transcript: Vec<String>| {
        finish(TransferSummary {
            error: Some(error),
            transcript,
            ..empty_summary()
        })
    };
    let Some((src, dst)) = logins(spec) else {
        let _ = tx
            .send(fail("a transfer needs a destination".into(), vec![]))
            .await;
        return;
    };
    // A refusal for too many connections teaches the host a lower limit, and the first pair
    // waits for a slot under it (RULES.md §16.3).
    let mut pause = crate::hosts::TooMany::default();
    let (slots, opened) = loop {
        let slots = hosts.acquire(&src.host, &dst.host).await;
        match Pair::open(&src, &dst, spec.params, limits, check.clone()).await {
            Err(e) if hosts.refused(&e, Some(&slots)).await => {
                drop(slots);
                pause.wait(&hosts, &e).await;
            }
            opened => break (slots, opened),
        }
    };
    let mut pair = match opened {
        Ok(p) => p,
        Err(e) => {
            let _ = tx
                .send(fail(e.to_string(), transcript_lines(&e.transcript)))
                .await;
            return;
        }
    };
    routing.ready(&mut pair);
    // A proof the pair cannot give refuses the transfer before any file moves, unless a
    // relay with its stream hashed can.
    if spec.proof.is_some() {
        match crate::lanes::proof::check_required(&mut pair, spec, routing.may_relay()).await {
            Ok(false) => {}
            Ok(true) => {
                routing.relay_for_proof(
                    "the servers offer no common hash: bftpd hashes each relayed stream",
                );
                routing.ready(&mut pair);
            }
            Err(reason) => {
                let transcript = transcript_lines(&pair.take_transcript());
                pair.close().await;
                let _ = tx.send(fail(reason, transcript)).await;
                return;
            }
        }
    }
    let mut early = early_pairs(spec, &src, &dst, limits, &check, &hosts).await;
    let mut summary = empty_summary();
    let listed = if spec.recursive {
        tree(spec, &mut pair, tx, &mut summary).await
    } else {
        list(spec, &mut pair, tx).await
    };
    let names = match listed {
        Ok(names) if !names.is_empty() => names,
        // A tree of directories alone (or of refused entries): made, nothing to copy.
        Ok(_) if spec.recursive => {
            pair.close().await;
            close_early(early);
            let _ = tx.send(finish(summary)).await;
            return;
        }
        Ok(_) => {
            let error = format!("no file matches {:?}", spec.source.path);
            let _ = tx.send(fail(error, vec![])).await;
            close_early(early);
            return;
        }
        Err(error) => {
            let _ = tx.send(fail(error, vec![])).await;
            close_early(early);
            return;
        }
    };
    let lanes = hosts.parallel_pairs.clamp(1, names.len());
    close_early(early.split_off(early.len().min(lanes - 1)));
    let mut openings = vec![lanes::ready(pair, slots)];
    openings.extend(early.into_iter().map(|e| early_lane(e, routing)));
    let work = Transfer {
        spec,
        src: &src,
        dst: &dst,
        limits,
        check,
        hosts: &hosts,
        tx,
        summary: Mutex::new(summary),
        routing,
    };
    let queue = WorkQueue::new(names.into_iter().map(|name| File { name, first: None }));
    lanes::run(&work, openings, queue).await;
    let summary = work.summary.into_inner().unwrap_or_else(|p| p.into_inner());
    let _ = tx.send(finish(summary)).await;
}

/// The names to copy, sent to the client: a multi-file job's listing, matched by us, or
/// the one file.
async fn list(
    spec: &JobSpec,
    pair: &mut Pair,
    tx: &mpsc::Sender<TransferEvent>,
) -> Result<Vec<String>, String> {
    if !spec.is_multi_file() {
        let name = spec.source.file_name().to_string();
        let _ = tx
            .send(TransferEvent::Listed {
                files: vec![name.clone()],
                rejected: vec![],
            })
            .await;
        return Ok(vec![name]);
    }
    let listing = pair
        .list_source(spec.source.dir(), spec.source.file_name())
        .await
        .map_err(|e| e.to_string())?;
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
    // Not the listing's sizes: the last files of a long listing are copied minutes after
    // it, and each copy asks the source's SIZE right before it touches the destination (a
    // file gone since must not cost the destination its old copy).
    Ok(listing.members.into_iter().map(|m| m.name).collect())
}

/// A tree's files to copy (`--recursive`), walked in memory by the queued job's rules
/// (`crate::lanes::walk`): the file names (relative to the root) are sent to the client, each
/// refused entry (a link, a special file, an unsafe name, a directory reached twice or too
/// deep) as a `refused` result counted in `summary`; then every destination directory is
/// made, parents first, before any file moves.
async fn tree(
    spec: &JobSpec,
    pair: &mut Pair,
    tx: &mpsc::Sender<TransferEvent>,
    summary: &mut TransferSummary,
) -> Result<Vec<String>, String> {
    let tree = crate::lanes::walk::walk_in_memory(pair, spec.source_root())
        .await
        .map_err(|(reason, _)| reason)?;
    let (refused, files): (Vec<_>, Vec<_>) =
        tree.members.into_iter().partition(|m| m.refused.is_some());
    let names: Vec<String> = files.into_iter().map(|m| m.name).collect();
    let _ = tx
        .send(TransferEvent::Listed {
            files: names.clone(),
            rejected: vec![],
        })
        .await;
    for m in refused {
        summary.files += 1;
        summary.refused += 1;
        let result = FileResult {
            name: m.name,
            state: "refused".into(),
            bytes: None,
            evidence: None,
            stored_as: None,
            source_reply: None,
            dest_reply: None,
            fallbacks: vec![],
            detail: m.refused,
            seconds: 0.0,
            tls: None,
            proof: None,
            route: None,
        };
        let _ = tx.send(TransferEvent::File(result)).await;
    }
    let made = crate::lanes::walk::make_dirs(pair, spec, &tree.walk, None)
        .await
        .map_err(crate::lanes::walk::WalkEnd::reason)?;
    // The files under a directory the destination would not make fail with its reply; the
    // others are copied.
    let mut copy = Vec::with_capacity(names.len());
    for name in names {
        let Some(why) = made.blocked(&name) else {
            copy.push(name);
            continue;
        };
        summary.files += 1;
        summary.failed += 1;
        let result = FileResult {
            name,
            state: "failed_permanent".into(),
            bytes: None,
            evidence: None,
            stored_as: None,
            source_reply: None,
            dest_reply: None,
            fallbacks: vec![],
            detail: Some(why),
            seconds: 0.0,
            tls: None,
            proof: None,
            route: None,
        };
        let _ = tx.send(TransferEvent::File(result)).await;
    }
    Ok(copy)
}

/// An extra connection pair opened during the listing, with its host slots.
type EarlyPair = (Slots, Result<Pair, PairError>);

/// The other connection pairs of a multi-file transfer, logging in while the first one
/// lists (on the slots free now, like a job's): a listing of thousands of names takes long
/// enough for them to be ready when it ends.
async fn early_pairs(
    spec: &JobSpec,
    src: &ServerLogin,
    dst: &ServerLogin,
    limits: &Limits,
    check: &Arc<dyn AddressCheck>,
    hosts: &Arc<HostLimits>,
) -> Vec<JoinHandle<EarlyPair>> {
    let extra = if spec.is_multi_file() {
        hosts.parallel_pairs.saturating_sub(1)
    } else {
        0
    };
    let params = spec.params;
    hosts
        .extra_slots(&src.host, &dst.host, extra)
        .await
        .into_iter()
        .map(|slots| {
            let (src, dst, limits, check) =
                (src.clone(), dst.clone(), limits.clone(), check.clone());
            let hosts = hosts.clone();
            tokio::spawn(async move {
                let pair = Pair::open(&src, &dst, params, &limits, check).await;
                if let Err(e) = &pair {
                    hosts.refused(e, Some(&slots)).await;
                }
                (slots, pair)
            })
        })
        .collect()
}

/// The lane of an extra pair, once its login is done.
fn early_lane<'a>(
    opening: JoinHandle<EarlyPair>,
    routing: &'a Routing,
) -> lanes::Opening<'a, Pair, Slots> {
    lanes::opening(async move {
        match opening.await {
            Ok((slots, Ok(mut pair))) => {
                routing.ready(&mut pair);
                Some((pair, slots))
            }
            // One lane fewer: the others do its share.
            Ok((_, Err(e))) => {
                tracing::info!(error = %e, "an extra connection pair failed to open");
                None
            }
            Err(_) => None,
        }
    })
}

/// QUIT the extra pairs nobody will use (no file for them, or the listing failed), in
/// the background: their logins may still be under way.
fn close_early(early: Vec<JoinHandle<EarlyPair>>) {
    for opening in early {
        tokio::spawn(async move {
            if let Ok((_slots, Ok(pair))) = opening.await {
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

impl lanes::Item for File {
    fn name(&self) -> &str {
        &self.name
    }
}

fn phase(p: &Progress) -> Option<&'static str> {
    match p {
        Progress::Preparing { .. } => Some("preparing"),
        Progress::Transferring { .. } => Some("transferring"),
        Progress::Checking { .. } => Some("checking"),
        _ => None,
    }
}

/// The phase of one file's copy on the event stream, coalesced: at most every
/// [`PROGRESS_INTERVAL`], none for a quick copy. Never completes: the copy ends it.
async fn show_progress(
    mut progress: tokio::sync::watch::Receiver<Progress>,
    tx: mpsc::Sender<TransferEvent>,
    name: String,
) -> std::convert::Infallible {
    let mut shown = None;
    loop {
        tokio::time::sleep(PROGRESS_INTERVAL).await;
        let now = phase(&progress.borrow_and_update());
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

/// One foreground transfer, as the lanes' caller: a file is a copy, its result an event.
struct Transfer<'a> {
    spec: &'a JobSpec,
    src: &'a ServerLogin,
    dst: &'a ServerLogin,
    limits: &'a Limits,
    check: Arc<dyn AddressCheck>,
    hosts: &'a HostLimits,
    tx: &'a mpsc::Sender<TransferEvent>,
    summary: Mutex<TransferSummary>,
    routing: &'a Routing,
}

impl Transfer<'_> {
    /// Counts a file's final result and sends it to the client: `Err` if the client is
    /// gone (then every lane stops).
    async fn report(&self, result: FileResult, succeeded: bool) -> Result<(), ()> {
        {
            let mut s = self.summary.lock().unwrap_or_else(|p| p.into_inner());
            s.files += 1;
            if succeeded {
                s.succeeded += 1;
                s.bytes += result.bytes.unwrap_or(0);
            } else {
                s.failed += 1;
            }
        }
        self.tx
            .send(TransferEvent::File(result))
            .await
            .map_err(|_| ())
    }

    /// The proof step after a copy both servers reported done (`crate::lanes::proof`), written into
    /// its result: whether the copy stands.
    async fn prove(
        &self,
        pair: &mut Pair,
        request: &bftp_ftp::CopyRequest,
        stou_name: Option<&str>,
        size_check: &bftp_ftp::SizeCheck,
        stream: Option<&bftp_core::proof::Stream>,
        result: &mut FileResult,
    ) -> bool {
        use crate::lanes::proof::Proven;
        let dest = match self.spec.dest_command {
            DestCommand::Unique => stou_name.map(|n| {
                if n.starts_with('/') {
                    n.to_owned()
                } else {
                    crate::lanes::paths::join_path(&request.dest_path, n)
                }
            }),
            _ => Some(request.dest_path.clone()),
        };
        let size = match size_check {
            bftp_ftp::SizeCheck::Equal { source, .. } => Some(*source),
            _ => None,
        };
        let proven = crate::lanes::proof::after_copy(
            pair,
            self.spec,
            (&request.source_path, dest.as_deref()),
            size_check,
            size,
            stream,
        )
        .await;
        match proven {
            Proven::Ok { level, words } => {
                result.proof = Some(level.as_str().to_owned());
                if let (Some(e), Some(w)) = (result.evidence.as_mut(), words) {
                    e.push_str(&format!("; {w}"));
                }
                true
            }
            Proven::Mismatch { failure, .. } | Proven::Short { failure } => {
                result.state = "failed_transient".into();
                result.evidence = None;
                result.detail = Some(failure);
                false
            }
        }
    }

    /// A job-level failure: the transfer's error, with the transcript that shows it.
    fn fail(&self, e: &PairError) {
        let mut s = self.summary.lock().unwrap_or_else(|p| p.into_inner());
        if s.error.is_none() {
            s.error = Some(e.to_string());
            s.transcript = transcript_lines(&e.transcript);
        }
    }
}

impl lanes::Work for Transfer<'_> {
    type Conn = Pair;
    type Item = File;
    /// A job-level failure (in the summary) or a client gone.
    type End = ();

    fn interrupted(&self) -> Option<()> {
        None
    }

    async fn interruption(&self) {
        lanes::never().await
    }

    fn usable(&self, pair: &Pair) -> bool {
        pair.is_usable()
    }

    async fn reopen(&self, _old: Pair) -> Result<Pair, ()> {
        let mut pair = Pair::open(
            self.src,
            self.dst,
            self.spec.params,
            self.limits,
            self.check.clone(),
        )
        .await
        .map_err(|e| self.fail(&e))?;
        self.routing.ready(&mut pair);
        Ok(pair)
    }

    async fn item(&self, pair: &mut Pair, file: File, _second: bool) -> Step<File, ()> {
        crate::lanes::proof::learn(pair, self.spec).await;
        let File { name, .. } = file;
        // Polled alongside the copy in this task (no task spawned per file), and dropped
        // with it.
        let watcher = show_progress(pair.progress(), self.tx.clone(), name.clone());
        let t = Instant::now();
        let request = copy_request(self.spec, &name);
        // A unique copy runs alone in its destination directory among the daemon's
        // copies (see `crate::hosts::unique`); its announced name is remembered there.
        let dir = match self.spec.dest_command {
            DestCommand::Unique => Some(
                self.hosts
                    .unique
                    .lock(crate::hosts::unique::DirKey::new(
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
            outcome = pair.copy(&request) => outcome,
            never = watcher => match never {},
        };
        if let (Some(dir), Ok(o)) = (&dir, &outcome) {
            if let Some(n) = &o.report().stou_name {
                dir.claim(n, &format!("bftp transfer of {name:?}")).await;
            }
        }
        drop(dir);
        if let Ok(o) = &outcome {
            self.routing.routed(o.report()).await;
        }
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                self.fail(&e);
                return Step::End(());
            }
        };
        let mut result = FileResult {
            tls: pair
                .tls_summary()
                .as_ref()
                .map(|t| Box::new(crate::views::tls_view(t))),
            ..file_result(&name, &outcome, t.elapsed().as_secs_f64())
        };
        let mut succeeded = outcome.is_success();
        if let bftp_ftp::CopyOutcome::Succeeded {
            size_check,
            stou_name,
            ..
        } = &outcome
        {
            let stream = crate::lanes::proof::stream_of(outcome.report());
            succeeded = self
                .prove(
                    pair,
                    &request,
                    stou_name.as_deref(),
                    size_check,
                    stream.as_ref(),
                    &mut result,
                )
                .await;
        }
        // A repeat is safe unless a partial append or unique file may be left behind.
        if data_connection_failed(&outcome)
            && (self.spec.dest_command == DestCommand::Replace
                || !outcome.report().destination_touched)
        {
            return Step::Failed {
                reason: result.detail.clone().unwrap_or_default(),
                item: File {
                    name,
                    first: Some(result),
                },
                again: true,
            };
        }
        match self.report(result, succeeded).await {
            Ok(()) => Step::Done,
            Err(()) => Step::End(()),
        }
    }

    /// The failure that stands is the result the file's last try kept.
    async fn stands(&self, file: File, _reason: &str) -> Result<(), ()> {
        let result = file.first.expect("a failure that stands keeps its result");
        self.report(result, false).await
    }

    async fn close(&self, pair: Pair) {
        pair.close().await;
    }

    /// A replace copy's next file may be started ahead (bftp-ftp's `pipeline.rs`).
    fn hint(&self, pair: &mut Pair, next: Option<&File>) {
        let plain = self.spec.dest_command == DestCommand::Replace;
        pair.expect_next(
            next.filter(|_| plain)
                .map(|f| copy_request(self.spec, &f.name)),
        );
    }

    fn in_flight(&self, pair: &Pair) -> bool {
        pair.in_flight()
    }
}
