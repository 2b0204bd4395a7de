//! How a job's copies travel (RULES.md §14), for an attempt and a foreground transfer alike:
//! the job's data path as the daemon settles it, the pair memory read before the first copy,
//! a relay for a hash proof only the stream can give, every pair readied with it; and after
//! each copy, what the pair refused (or proved it no longer refuses) remembered, a refusal
//! sending the later pairs through bftpd at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bftp_core::route::{DataPath, Plan, RelayReason};
use bftp_core::JobSpec;
use bftp_ftp::{AttemptReport, Pair, RelayGate};

use crate::hosts::pairs::PairMemories;

/// One job's routing, shared by its pairs.
pub struct Routing {
    path: DataPath,
    plan: Mutex<Plan>,
    stream_hash: AtomicBool,
    gate: Arc<RelayGate>,
    pairs: PairMemories,
    ends: ((String, u16), (String, u16)),
    clock: crate::clock::Clock,
    /// A third-party copy of this job already asked the pair memory whether to forget.
    forget_asked: AtomicBool,
}

impl Routing {
    /// The routing of `spec` on `path` (the daemon's settlement of what it asked for), the
    /// pair memory read now. A job that asks for a hash proof gets its relayed streams
    /// hashed.
    pub async fn plan(
        spec: &JobSpec,
        path: DataPath,
        pairs: PairMemories,
        gate: Arc<RelayGate>,
        clock: crate::clock::Clock,
    ) -> Routing {
        let now = clock.now();
        let src = (spec.source.host.clone(), spec.source.port);
        let dst = spec
            .destination
            .as_ref()
            .map_or(src.clone(), |d| (d.host.clone(), d.port));
        let plan = pairs
            .plan_for(path, (&src.0, src.1), (&dst.0, dst.1), now)
            .await;
        Routing {
            path,
            plan: Mutex::new(plan),
            stream_hash: AtomicBool::new(spec.proof == Some(bftp_core::proof::ProofLevel::Hash)),
            gate,
            pairs,
            ends: (src, dst),
            clock,
            forget_asked: AtomicBool::new(false),
        }
    }

    /// Whether relayed streams are hashed (the job's proof may rest on them).
    pub fn stream_hash(&self) -> bool {
        self.stream_hash.load(Ordering::Relaxed)
    }

    /// Whether the job's copies may be relayed.
    pub fn may_relay(&self) -> bool {
        self.path.may_relay()
    }

    /// Whether the copies go through bftpd from the start (a relaying pair then counts its
    /// data connections in the per-host limits).
    pub fn relaying(&self) -> bool {
        matches!(*self.current(), Plan::Relay(_))
    }

    /// A required hash proof the servers cannot give, met by relaying every copy with its
    /// stream hashed (`bftp_core::proof::require_or_relay`).
    pub fn relay_for_proof(&self, why: &str) {
        *self.current() = Plan::Relay(RelayReason::Proof {
            detail: why.to_owned(),
        });
        self.stream_hash.store(true, Ordering::Relaxed);
    }

    /// Readies a pair for the job's copies: the plan, the relay caps, the stream hash.
    pub fn ready(&self, pair: &mut Pair) {
        pair.set_plan(self.current().clone());
        pair.set_relay_gate(Some(self.gate.clone()));
        pair.set_stream_hash(self.stream_hash.load(Ordering::Relaxed));
    }

    /// After a copy: the pair memory learns what the pair refused (or proved it no longer
    /// refuses); a refusal sends the job's later pairs through bftpd at once.
    pub async fn routed(&self, report: &AttemptReport) {
        let now = self.clock.now();
        if let Some(reply) = &report.fxp_refused {
            let mut plan = self.current();
            if *plan == Plan::FxpThenRelay {
                *plan = Plan::Relay(RelayReason::Refused {
                    reply: reply.clone(),
                });
            }
        }
        // The store is asked once a job whether a pair that moved a file by third party has
        // a memory to forget, not once a file: no read per copy on the hot path.
        let proven = crate::hosts::pairs::third_party_proven(report);
        if report.fxp_refused.is_none()
            && (!proven || self.forget_asked.swap(true, Ordering::Relaxed))
        {
            return;
        }
        let ((sh, sp), (dh, dp)) = &self.ends;
        self.pairs
            .after_copy((sh, *sp), (dh, *dp), report, now)
            .await;
    }

    fn current(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner())
    }
}
