//! The daemon's Prometheus metrics, served as text (exposition format 0.0.4) on `GET /metrics`.
//!
//! One [`Metrics`] per daemon, shared (`Arc`) by the scheduler, the executor and the postman,
//! which count outcomes where they become known. What the store already knows (jobs by
//! state, the outbox's depth) is read from it at each scrape rather than counted, so it is
//! right after a restart too. The recorder is our own, not `metrics`' global one: tests and
//! two daemons in one process do not share counters.
//!
//! No label carries user data: no host, path, user or job id. Labels are closed sets.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bftp_core::route::Route;
use bftp_core::MemberState;
use bftp_store::StateCounts;
use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// `Content-Type` of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const JOBS: &str = "bftp_jobs";
const ATTEMPTS: &str = "bftp_attempts_started_total";
const RETRIES: &str = "bftp_attempt_failures_total";
const FILES: &str = "bftp_files_total";
const BYTES: &str = "bftp_transferred_bytes_total";
const DURATION: &str = "bftp_transfer_duration_seconds";
const OUTBOX: &str = "bftp_outbox_pending";
const REPORTS: &str = "bftp_reports_total";
const REMOVED: &str = "bftp_store_jobs_removed_total";
const DISK: &str = "bftp_store_disk_bytes";
const COPIES: &str = "bftp_copies_total";
const RELAY_BYTES: &str = "bftp_relay_bytes_total";

/// Buckets of the per-file transfer duration: a small file takes well under a second, a
/// large one across a slow link hours.
const DURATION_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
];

/// The `path` label of [`COPIES`], in the order of [`Metrics::routed`]'s index.
const ROUTE_PATHS: [&str; 3] = ["fxp", "fxp_roles_swapped", "relay"];

/// How an attempt that did not complete was turned into the job's next state.
#[derive(Debug, Clone, Copy)]
pub enum AttemptFailure {
    /// A transient failure, queued again with backoff.
    Requeued,
    /// A transient failure with no attempt left (`max_attempts` or the deadline).
    Exhausted,
    /// The job cannot succeed (login refused, no such source...).
    JobPermanent,
}

/// What one file copy came to.
#[derive(Debug, Clone, Copy)]
pub enum FileResult {
    Succeeded,
    FailedPermanent,
    /// To be tried again by a later attempt.
    Transient,
    /// Cannot be told (an append or unique store cut off half way).
    Uncertain,
}

impl FileResult {
    /// `self`, or `Uncertain` when that is the member's new state.
    pub fn unless_uncertain(self, state: Option<MemberState>) -> FileResult {
        match state {
            Some(MemberState::Uncertain) => FileResult::Uncertain,
            _ => self,
        }
    }
}

/// How a report's delivery ended.
#[derive(Debug, Clone, Copy)]
pub enum ReportResult {
    Delivered,
    GaveUp,
}

pub struct Metrics {
    handle: PrometheusHandle,
    jobs: [Gauge; 4],
    attempts: Counter,
    failures: [Counter; 3],
    files: [Counter; 4],
    bytes: Counter,
    duration: Histogram,
    outbox: Gauge,
    reports: [Counter; 2],
    removed: Counter,
    disk: Gauge,
    /// Succeeded copies by path: `fxp`, `fxp_roles_swapped`, `relay`.
    copies: [Counter; 3],
    relay_bytes: Counter,
    /// Files recorded since the histogram's samples were last folded into its buckets.
    since_upkeep: AtomicU32,
}

/// Files between two upkeeps of the histogram (see [`Metrics::file`]).
const UPKEEP_EVERY: u32 = 64;

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let recorder = PrometheusBuilder::new()
            // Without buckets the exporter renders histograms as summaries.
            .set_buckets_for_metric(Matcher::Full(DURATION.into()), DURATION_BUCKETS)
            .expect("non-empty bucket list")
            .build_recorder();
        let describe = |name: &'static str, help: &'static str| {
            recorder.describe_counter(name.into(), None, help.into());
        };
        describe(JOBS, "Jobs in the store, by state.");
        describe(ATTEMPTS, "Attempts started.");
        describe(
            RETRIES,
            "Attempts that did not complete, by what followed: requeued (transient, retried with backoff), exhausted (transient, no attempt left), job_permanent.",
        );
        describe(
            FILES,
            "File copies by result: succeeded, failed_permanent, transient (tried again later), uncertain.",
        );
        describe(BYTES, "Bytes of the files copied successfully.");
        describe(DURATION, "Duration of one file copy, in seconds.");
        describe(OUTBOX, "Reports waiting to be delivered.");
        describe(
            REPORTS,
            "Reports by how their delivery ended: delivered, gave_up.",
        );
        describe(
            REMOVED,
            "Final jobs removed by retention ([store] keep_finished).",
        );
        describe(DISK, "The store's size on disk, in bytes.");
        describe(
            COPIES,
            "File copies that succeeded, by how the bytes travelled: fxp (third party), fxp_roles_swapped (third party, PASV to the destination), relay (through bftpd).",
        );
        describe(
            RELAY_BYTES,
            "Bytes bftpd relayed between the servers (moved through itself), of every relayed copy whatever its outcome.",
        );
        let with = |name: &'static str, label: &'static str, value: &'static str| {
            Key::from_parts(name, vec![Label::new(label, value)])
        };
        let counter =
            |name, label, value| recorder.register_counter(&with(name, label, value), &METADATA);
        let jobs = ["queued", "running", "finished", "cancelled"]
            .map(|s| recorder.register_gauge(&with(JOBS, "state", s), &METADATA));
        Metrics {
            jobs,
            attempts: recorder.register_counter(&Key::from_static_name(ATTEMPTS), &METADATA),
            failures: ["requeued", "exhausted", "job_permanent"]
                .map(|c| counter(RETRIES, "class", c)),
            files: ["succeeded", "failed_permanent", "transient", "uncertain"]
                .map(|r| counter(FILES, "result", r)),
            bytes: recorder.register_counter(&Key::from_static_name(BYTES), &METADATA),
            duration: recorder.register_histogram(&Key::from_static_name(DURATION), &METADATA),
            outbox: recorder.register_gauge(&Key::from_static_name(OUTBOX), &METADATA),
            reports: ["delivered", "gave_up"].map(|r| counter(REPORTS, "result", r)),
            removed: recorder.register_counter(&Key::from_static_name(REMOVED), &METADATA),
            disk: recorder.register_gauge(&Key::from_static_name(DISK), &METADATA),
            copies: ROUTE_PATHS.map(|p| counter(COPIES, "path", p)),
            relay_bytes: recorder.register_counter(&Key::from_static_name(RELAY_BYTES), &METADATA),
            handle: recorder.handle(),
            since_upkeep: AtomicU32::new(0),
        }
    }

    pub fn attempt_started(&self) {
        self.attempts.increment(1);
    }

    pub fn attempt_failed(&self, how: AttemptFailure) {
        self.failures[how as usize].increment(1);
    }

    /// One file copy ended; `bytes` only for a success.
    pub fn file(&self, result: FileResult, took: Duration, bytes: Option<u64>) {
        self.files[result as usize].increment(1);
        self.duration.record(took.as_secs_f64());
        if let (FileResult::Succeeded, Some(b)) = (result, bytes) {
            self.bytes.increment(b);
        }
        // Folds the samples into the buckets every UPKEEP_EVERY files (and at each scrape):
        // between scrapes, samples would pile up; after each file it cost more CPU than
        // the rest of the file's ledger work.
        if self.since_upkeep.fetch_add(1, Ordering::Relaxed) + 1 >= UPKEEP_EVERY {
            self.since_upkeep.store(0, Ordering::Relaxed);
            self.handle.run_upkeep();
        }
    }

    /// A copy that sent its data command was recorded, having travelled by `route`: a
    /// success counts by its path; a relay's bytes (`relayed_bytes`, as bftpd counted them)
    /// count whatever the outcome, since bftpd moved them.
    pub fn routed(&self, route: &Route, succeeded: bool, relayed_bytes: Option<u64>) {
        if succeeded {
            let path = match route {
                Route::Fxp => 0,
                Route::FxpRolesSwapped => 1,
                Route::Relay(_) => 2,
            };
            self.copies[path].increment(1);
        }
        if let (true, Some(b)) = (route.is_relay(), relayed_bytes) {
            self.relay_bytes.increment(b);
        }
    }

    pub fn report(&self, result: ReportResult) {
        self.reports[result as usize].increment(1);
    }

    pub fn jobs_removed(&self, n: u64) {
        self.removed.increment(n);
    }

    /// The store's size on disk, read at scrape time like the job counts.
    pub fn set_disk_size(&self, bytes: u64) {
        self.disk.set(bytes as f64);
    }

    /// The exposition text, with the store's gauges as read now.
    pub fn render(&self, jobs: StateCounts, outbox_pending: u64) -> String {
        let StateCounts {
            queued,
            running,
            finished,
            cancelled,
        } = jobs;
        for (g, n) in self.jobs.iter().zip([queued, running, finished, cancelled]) {
            g.set(n as f64);
        }
        self.outbox.set(outbox_pending as f64);
        self.handle.render()
    }
}

/// With several nodes on one store: this node's name (`bftp_node`, always 1) and the jobs
/// running under its lease, so that a dashboard over all nodes sees which runs what. (The
/// store's job counts above are the whole cluster's, the same on every node.)
pub fn node_series(node: &str, running: usize) -> String {
    let label: String = node
        .chars()
        .flat_map(|c| match c {
            '\\' => vec!['\\', '\\'],
            '"' => vec!['\\', '"'],
            '\n' => vec!['\\', 'n'],
            c => vec![c],
        })
        .collect();
    format!(
        "# HELP bftp_node This bftpd's node name on the shared store (always 1).\n\
         # TYPE bftp_node gauge\n\
         bftp_node{{node=\"{label}\"}} 1\n\
         # HELP bftp_node_running_jobs Jobs running under this node's lease.\n\
         # TYPE bftp_node_running_jobs gauge\n\
         bftp_node_running_jobs{{node=\"{label}\"}} {running}\n"
    )
}

/// One series of each kind per watch, read from the store at each scrape (RULES.md §15): the
/// label is the watch's number, which holds no user data.
pub fn watch_series(watches: &[bftp_store::Watch], now: bftp_core::Timestamp) -> String {
    if watches.is_empty() {
        return String::new();
    }
    let mut polls = String::from(
        "# HELP bftp_watch_polls_total Polls of each watch.\n# TYPE bftp_watch_polls_total counter\n",
    );
    let mut delivered = String::from(
        "# HELP bftp_watch_files_delivered_total Files each watch copied and proved.\n\
         # TYPE bftp_watch_files_delivered_total counter\n",
    );
    let mut failed = String::from(
        "# HELP bftp_watch_files_failed_total Files of each watch that failed for good.\n\
         # TYPE bftp_watch_files_failed_total counter\n",
    );
    let mut since = String::from(
        "# HELP bftp_watch_seconds_since_delivery Seconds since each watch last delivered a file (since it was made, before its first).\n\
         # TYPE bftp_watch_seconds_since_delivery gauge\n",
    );
    for w in watches {
        let id = w.id.0;
        let st = &w.status;
        polls.push_str(&format!(
            "bftp_watch_polls_total{{watch=\"{id}\"}} {}\n",
            st.polls
        ));
        delivered.push_str(&format!(
            "bftp_watch_files_delivered_total{{watch=\"{id}\"}} {}\n",
            st.delivered
        ));
        failed.push_str(&format!(
            "bftp_watch_files_failed_total{{watch=\"{id}\"}} {}\n",
            st.failed
        ));
        let last = st.last_delivery.unwrap_or(w.created_at);
        since.push_str(&format!(
            "bftp_watch_seconds_since_delivery{{watch=\"{id}\"}} {}\n",
            now.saturating_duration_since(last).as_secs()
        ));
    }
    polls + &delivered + &failed + &since
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_series_name_the_node_with_its_label_escaped() {
        let t = node_series("ctl-1", 3);
        assert_eq!(sample(&t, r#"bftp_node{node="ctl-1"}"#), Some(1.0), "{t}");
        assert_eq!(
            sample(&t, r#"bftp_node_running_jobs{node="ctl-1"}"#),
            Some(3.0),
            "{t}"
        );
        let t = node_series(r#"a"b\c"#, 0);
        assert!(t.contains(r#"bftp_node{node="a\"b\\c"} 1"#), "{t}");
    }

    /// The value of the sample line that starts with `series ` (name and labels).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn every_series_is_there_from_the_start_and_counts() {
        let m = Metrics::new();
        let counts = StateCounts {
            queued: 2,
            running: 1,
            finished: 5,
            cancelled: 0,
        };
        let t = m.render(counts, 3);
        assert_eq!(sample(&t, r#"bftp_jobs{state="queued"}"#), Some(2.0), "{t}");
        assert_eq!(
            sample(&t, r#"bftp_jobs{state="cancelled"}"#),
            Some(0.0),
            "{t}"
        );
        assert_eq!(sample(&t, "bftp_outbox_pending"), Some(3.0), "{t}");
        assert_eq!(sample(&t, "bftp_attempts_started_total"), Some(0.0), "{t}");
        assert_eq!(
            sample(&t, r#"bftp_files_total{result="uncertain"}"#),
            Some(0.0),
            "{t}"
        );
        assert!(t.contains("# TYPE bftp_jobs gauge"), "{t}");
        assert!(
            t.contains("# TYPE bftp_attempts_started_total counter"),
            "{t}"
        );

        m.attempt_started();
        m.attempt_failed(AttemptFailure::Exhausted);
        m.file(
            FileResult::Succeeded,
            Duration::from_millis(300),
            Some(1000),
        );
        m.file(FileResult::Transient, Duration::from_secs(2), None);
        m.report(ReportResult::GaveUp);
        let t = m.render(counts, 0);
        assert_eq!(sample(&t, "bftp_attempts_started_total"), Some(1.0), "{t}");
        assert_eq!(
            sample(&t, r#"bftp_attempt_failures_total{class="exhausted"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_files_total{result="succeeded"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_files_total{result="transient"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, "bftp_transferred_bytes_total"),
            Some(1000.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_reports_total{result="gave_up"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_reports_total{result="delivered"}"#),
            Some(0.0),
            "{t}"
        );
        assert!(
            t.contains("# TYPE bftp_transfer_duration_seconds histogram"),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_transfer_duration_seconds_bucket{le="0.5"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, "bftp_transfer_duration_seconds_count"),
            Some(2.0),
            "{t}"
        );
        assert_eq!(sample(&t, "bftp_outbox_pending"), Some(0.0), "{t}");
    }

    /// Issue 29: the route series are there from the start; a success counts by its path,
    /// a relay's bytes whatever its outcome, and a third-party copy adds no relay bytes.
    #[test]
    fn copies_count_by_route_and_relayed_bytes_add_up() {
        use bftp_core::route::RelayReason;
        let m = Metrics::new();
        let t = m.render(StateCounts::default(), 0);
        for path in ROUTE_PATHS {
            let series = format!("bftp_copies_total{{path=\"{path}\"}}");
            assert_eq!(sample(&t, &series), Some(0.0), "{t}");
        }
        assert_eq!(sample(&t, "bftp_relay_bytes_total"), Some(0.0), "{t}");
        assert!(t.contains("# TYPE bftp_copies_total counter"), "{t}");
        assert!(t.contains("# TYPE bftp_relay_bytes_total counter"), "{t}");

        let relay = Route::Relay(RelayReason::Refused {
            reply: "425 no".into(),
        });
        m.routed(&relay, true, Some(1000));
        m.routed(&relay, false, Some(24));
        m.routed(&Route::Fxp, true, None);
        m.routed(&Route::FxpRolesSwapped, true, Some(7));
        m.routed(&Route::FxpRolesSwapped, false, None);
        let t = m.render(StateCounts::default(), 0);
        assert_eq!(sample(&t, "bftp_relay_bytes_total"), Some(1024.0), "{t}");
        assert_eq!(
            sample(&t, r#"bftp_copies_total{path="relay"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_copies_total{path="fxp"}"#),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, r#"bftp_copies_total{path="fxp_roles_swapped"}"#),
            Some(1.0),
            "{t}"
        );
    }
}
