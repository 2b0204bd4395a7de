//! The durable job queue of bftpd (RULES.md §4), behind the narrow [`JobStore`] trait.
//!
//! This is the only crate that touches a storage engine: sled 0.34 in [`SledStore`] (one
//! daemon), PostgreSQL in `PgStore` (several daemons sharing one database). What a write of
//! the queue changes is decided once, by the pure functions of `plan.rs`; each store reads,
//! asks the plan, and writes it in its own transaction. Optional capabilities are
//! [`Upkeep`] and [`Cluster`], reached through [`JobStore::upkeep`] and [`JobStore::cluster`].
//!
//! Rules every implementation keeps:
//! - a write is acknowledged only once durable (RULES.md §4.1);
//! - a job's state changes only through `bftp_core::transition`, and the new state, its index
//!   entries and its history event are written in one transaction;
//! - secrets arrive sealed and keywords and request keys as keyed hashes: nothing secret is
//!   stored in clear;
//! - nothing read from disk can panic the caller: damage is a [`StoreError`];
//! - damage that the storage engine recovers from silently (a page back at an older version)
//!   is found at open: every transaction keeps a digest of all entries (`digest.rs`).
//!
//! Synchronous: the daemon calls it from `spawn_blocking`.

mod digest;
mod durable;
mod error;
mod events;
mod files;
mod keys;
mod lease;
#[cfg(feature = "postgres")]
mod pg_store;
mod plan;
pub mod probe;
mod record;
mod sled_store;
mod types;

pub use error::{BackendError, StoreError};
pub use events::{Event, EventDelivery, NewEvent};
pub use lease::LeaseCell;
#[cfg(feature = "postgres")]
pub use pg_store::{PgHostSlots, PgOptions, PgStore, PG_DUMP_FILE, PG_SCHEMA_VERSION};
pub use plan::MAX_MEMBERS;
pub use sled_store::{BackupReport, SledStore, StoreOptions, VerifyReport, SCHEMA_VERSION};
pub use types::{
    AttemptTranscript, DeliveryTry, HistoryEvent, Job, JobFilter, JobId, KeyHash, LastReply,
    Member, MemberUpdate, NewJob, NewMember, NewWatch, OutboxEntry, OutboxState, PollRecord,
    RequestKey, Sealed, SealedEndpoint, SealedSpec, StateCounts, StateFilter, Submitted, Walk,
    Watch, WatchId, WatchNote, WatchSettings, WatchStatus, WATCH_JOBS_KEPT,
};

use bftp_core::hostlimit::HostLimit;
use bftp_core::refusal::{RefusalKey, RefusalMemory, Sighting};
use bftp_core::retention::Keep;
use bftp_core::route::{PairKey, PairMemory};
use bftp_core::{JobEvent, MemberState, Timestamp};

/// Connection slots per FTP host shared by the nodes of one store, so that
/// `max_connections_per_host` holds over all of them (and, with a key of their own and one
/// slot, unique copies run one at a time per destination directory over all nodes; their
/// announced names are remembered here too). A slot is held in the taking node's
/// name until it is given back or the node is gone; the implementation decides when a node
/// counts as gone, and must count a node that may still hold a server connection (a paused
/// one) as present.
pub trait HostSlots: Send + Sync {
    /// Takes one slot on each host of `hosts` (a host named twice, two), with at most
    /// `per_host` slots of a host taken over all nodes: all of them, or none and `Ok(None)`
    /// when a host is full. Host names are compared as given (the caller lowercases).
    /// Blocks on the database.
    fn try_take(&self, hosts: &[String], per_host: u32) -> Result<Option<SlotHold>, StoreError>;

    /// Gives slots back, without waiting: the store retries until the database has it. Call
    /// only once the connections the slots were for are closed.
    fn release(&self, hold: SlotHold);

    /// A number that moves when another node may have given slots back: a waiter tries
    /// again when it moves (or after its own backoff), instead of polling the database.
    fn generation(&self) -> u64;

    /// Tells the other nodes that this one waits for a slot on `hosts` (without waiting):
    /// they close their kept idle connections there ([`HostSlots::wanted`]).
    fn want(&self, hosts: &[String]);

    /// The hosts other nodes announced they wait for since the last call.
    fn wanted(&self) -> Vec<String>;

    // ---- the STOU names servers announced, remembered over all nodes ----
    //
    // `dir` is the caller's key of a destination directory; a name is remembered for `keep`
    // after it was last claimed (on the database's clock). Each call blocks on the database.

    /// Records that the server told STOU name `name` in `dir` to `owner`: `Some(other)` when
    /// it was told to another owner less than `keep` ago (then it stays theirs, unchanged).
    fn claim_name(
        &self,
        dir: &str,
        name: &str,
        owner: &str,
        keep: std::time::Duration,
    ) -> Result<Option<String>, StoreError>;

    /// `name`, told to `owner`, names no file any more: forgotten (if it is still `owner`'s).
    fn release_name(&self, dir: &str, name: &str, owner: &str) -> Result<(), StoreError>;

    /// Who else than `owner` was told `name` in `dir` less than `keep` ago.
    fn name_claimed_by_other(
        &self,
        dir: &str,
        name: &str,
        owner: &str,
        keep: std::time::Duration,
    ) -> Result<Option<String>, StoreError>;
}

/// Slots taken by [`HostSlots::try_take`], named by the store.
#[derive(Debug, Default)]
pub struct SlotHold {
    pub ids: Vec<i64>,
}

/// The durable job queue. All methods are synchronous and may block on disk I/O.
pub trait JobStore: Send + Sync {
    /// Creates a job, or returns the job created earlier with the same request key and the
    /// same fingerprint (`Existing`); the same key with another fingerprint is
    /// `RequestKeyConflict`. The job starts `Queued { next_attempt_at: spec.start_at }`, with
    /// a `submitted` history event. Durable before it returns, `Existing` included.
    fn submit(&self, job: NewJob) -> Result<Submitted, StoreError>;

    fn get(&self, id: JobId) -> Result<Option<Job>, StoreError>;

    /// The jobs that match every condition of the filter, in id order, at most `limit`.
    /// Uses the keyword, owner or state index when one is given.
    fn list(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        self.list_after(filter, None)
    }

    /// [`JobStore::list`] from a cursor: only jobs with an id greater than `after` (the last
    /// id of the previous page), so a long listing can be paged instead of held at once.
    fn list_after(&self, filter: &JobFilter, after: Option<JobId>) -> Result<Vec<Job>, StoreError>;

    /// The job's history, oldest first.
    fn history(&self, id: JobId) -> Result<Vec<HistoryEvent>, StoreError>;

    /// The job's members, by index.
    fn members(&self, id: JobId) -> Result<Vec<Member>, StoreError>;

    /// At most `limit` of the job's members, by index, from index `from` on: a job of any
    /// size read a page at a time (the report of a large job), in memory bounded by `limit`.
    fn members_page(&self, id: JobId, from: u32, limit: usize) -> Result<Vec<Member>, StoreError>;

    /// Applies `event` through `bftp_core::transition` (an invalid one is
    /// `InvalidTransition` and changes nothing) and records it in the history with `detail`.
    /// `Start { attempt }` sets `attempts`; `Cancel` also makes every pending member
    /// `Cancelled`. `Finish` and `Cancel` also put the job's report in the outbox, due now.
    /// One transaction, durable before it returns.
    fn apply(
        &self,
        id: JobId,
        event: JobEvent,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError>;

    /// Finishes the job after making every pending member `pending_become` (with `detail`),
    /// with the outcome its members add up to: a job-level permanent failure or exhausted
    /// retries (RULES.md §3, §5). The job's report goes into the outbox, due now. One
    /// transaction, durable before it returns.
    fn settle_and_finish(
        &self,
        id: JobId,
        pending_become: MemberState,
        now: Timestamp,
        detail: Option<String>,
    ) -> Result<Job, StoreError>;

    /// Fixes the membership of a job submitted without members (RULES.md §4.4), once: a second
    /// call is `MembersAlreadyFrozen`, on a finished or cancelled job `JobIsFinal`. Durable.
    fn freeze_members(
        &self,
        id: JobId,
        members: Vec<NewMember>,
        now: Timestamp,
    ) -> Result<(), StoreError>;

    /// Changes the given fields of one member. Durable before it returns.
    fn update_member(
        &self,
        id: JobId,
        index: u32,
        update: MemberUpdate,
        now: Timestamp,
    ) -> Result<Member, StoreError>;

    /// Appends an event of the daemon's own (`recovered`, ...) to the job's history. Durable.
    fn append_history(&self, id: JobId, event: HistoryEvent) -> Result<(), StoreError>;

    /// Queued jobs whose next attempt is due at or before `until`, earliest first.
    fn due(&self, until: Timestamp, limit: usize) -> Result<Vec<(Timestamp, JobId)>, StoreError>;

    /// The earliest next attempt of any queued job.
    fn next_due(&self) -> Result<Option<Timestamp>, StoreError>;

    fn count_by_state(&self) -> Result<StateCounts, StoreError>;

    /// Jobs left `Running`: at start, the attempts a crash interrupted.
    fn running_jobs(&self) -> Result<Vec<JobId>, StoreError>;

    /// The outbox entry of a job's report; `None` while the job is not final (and for jobs
    /// that became final before the outbox existed).
    fn outbox_entry(&self, id: JobId) -> Result<Option<OutboxEntry>, StoreError>;

    /// Pending reports whose next try is due at or before `until`, earliest first.
    fn outbox_due(&self, until: Timestamp, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;

    /// The earliest next try of any pending report.
    fn outbox_next_due(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Reports still pending (the outbox depth).
    fn outbox_pending(&self) -> Result<u64, StoreError>;

    /// Records a delivery try of a pending report. A report already delivered or given up
    /// stays as it is (returned unchanged): a late second try cannot undo the first.
    /// Durable before it returns.
    fn record_delivery(
        &self,
        id: JobId,
        result: DeliveryTry,
        now: Timestamp,
    ) -> Result<OutboxEntry, StoreError>;

    /// Keeps the transcript of the job's latest attempt, replacing the previous one. Durable.
    fn set_transcript(&self, id: JobId, transcript: AttemptTranscript) -> Result<(), StoreError>;

    fn transcript(&self, id: JobId) -> Result<Option<AttemptTranscript>, StoreError>;

    /// Whether the store holds no job at all (so nothing sealed with the daemon's key).
    fn is_empty(&self) -> Result<bool, StoreError>;

    /// The fingerprint of the secret key the store's data is sealed with, once recorded: a
    /// value derived from the key by the caller (never the key itself).
    fn key_fingerprint(&self) -> Result<Option<[u8; 32]>, StoreError>;

    /// Records that fingerprint, replacing any earlier one. Durable.
    fn set_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<(), StoreError>;

    /// Records `fingerprint` unless a fingerprint is recorded already, as one step that
    /// several nodes of a shared store may race for: the first one recorded stands. Returns
    /// the fingerprint that stands (this one, or the earlier one). Durable. The default suits
    /// a store only one process opens.
    fn adopt_key_fingerprint(&self, fingerprint: [u8; 32]) -> Result<[u8; 32], StoreError> {
        match self.key_fingerprint()? {
            Some(recorded) => Ok(recorded),
            None => {
                self.set_key_fingerprint(fingerprint)?;
                Ok(fingerprint)
            }
        }
    }
    /// What this server last refused of this command, transiently (the capability memory;
    /// see `bftp_core::refusal`). Kept across restarts, across jobs.
    fn refusal(&self, key: &RefusalKey) -> Result<Option<RefusalMemory>, StoreError>;

    /// Records a transient refusal: the memory becomes `bftp_core::refusal::observe` of what
    /// it was and `seen`, in one transaction; returns it. Durable before it returns.
    fn record_refusal(
        &self,
        key: &RefusalKey,
        seen: &Sighting,
        now: Timestamp,
    ) -> Result<RefusalMemory, StoreError>;

    /// What this ordered pair of servers (source, destination) is remembered to have refused:
    /// the third party (the pair memory; see `bftp_core::route`). Kept across restarts and
    /// jobs, and on PostgreSQL shared by all nodes. Whether it still stands (it expires) is
    /// the caller's to ask (`bftp_core::route::still_remembered`): the store keeps it until
    /// it is replaced or forgotten.
    fn pair_memory(&self, key: &PairKey) -> Result<Option<PairMemory>, StoreError>;

    /// Remembers that the pair refused the third party, replacing what was remembered, unless
    /// that was seen later than `memory` (a late write of an older sighting, from this node or
    /// another, never hides a newer one; the same time replaces). Durable before it returns.
    fn remember_pair(&self, key: &PairKey, memory: &PairMemory) -> Result<(), StoreError>;

    /// Forgets what the pair was remembered to have refused (an operator's reset, or a copy
    /// between them by third party): whether there was a memory. Durable before it returns.
    fn forget_pair(&self, key: &PairKey) -> Result<bool, StoreError>;

    // ---- optional capabilities: each store says which it has ----

    /// Retention, backup and disk space ([`Upkeep`]), where the store has them.
    fn upkeep(&self) -> Option<&dyn Upkeep> {
        None
    }

    /// Several nodes on one store ([`Cluster`]): `None` for a store of one node, which has no
    /// leases, fences nothing, polls nothing and counts its host slots alone, in memory.
    fn cluster(&self) -> Option<&dyn Cluster> {
        None
    }

    /// A recursive job's walk so far: a job not yet walked has the root (`""`) alone in its
    /// frontier.
    fn walk(&self, id: JobId) -> Result<Walk, StoreError>;

    /// Freezes one directory of a recursive job's walk, in one durable transaction: its files
    /// (`files`, names relative to the root) become members after those already frozen, its
    /// subdirectories join the end of the frontier (unless listed or queued already), and
    /// `dir` leaves the frontier for the listed ones, and the MLSD `unique` facts its listing
    /// showed (`unique`: fact, directory) are kept with the walk. A directory not in the
    /// frontier changes nothing (it was frozen before: never twice). When the frontier is
    /// empty, the job's membership is frozen. Returns the walk after it.
    #[allow(clippy::too_many_arguments)]
    fn record_directory(
        &self,
        id: JobId,
        dir: &str,
        files: Vec<NewMember>,
        subdirs: Vec<String>,
        unique: Vec<(String, String)>,
        now: Timestamp,
    ) -> Result<Walk, StoreError>;
    /// Remembers destination directories of a recursive job's walk as made (or found
    /// existing), relative to the root (`""`: the destination root), in one durable
    /// transaction, so that a later attempt does not make them again ([`Walk::made`]). A job
    /// without a walk changes nothing.
    fn record_made_dirs(&self, id: JobId, dirs: Vec<String>) -> Result<(), StoreError>;

    /// Several members' changes at once, as [`JobStore::update_member`] makes each (in this
    /// order), in one transaction and one flush where the store can: members of one attempt
    /// that finish close together share the cost of making their records durable. Durable
    /// before it returns; on an error none is guaranteed written. Unlike `update_member` it
    /// does not answer with the members as changed (its caller, the grouped ledger writes,
    /// waits for nothing but durability).
    fn update_members(
        &self,
        id: JobId,
        updates: Vec<(u32, MemberUpdate)>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        for (index, u) in updates {
            self.update_member(id, index, u, now)?;
        }
        Ok(())
    }

    // ---- watches (RULES.md §15): recurring transfers, checkpointed the NNTP way ----
    //
    // Wherever a store writes a member's new state, a member of a watch's job (`Job::watch`)
    // that ends with an outcome (`bftp_core::watch::outcome_of`) settles its identity in that
    // watch's checkpoint (`bftp_core::watch::settled`) in the same transaction.

    /// Creates a watch, unpaused, its first poll due at `created_at`. Durable before it
    /// returns.
    fn create_watch(&self, w: NewWatch) -> Result<Watch, StoreError>;

    fn watch(&self, id: WatchId) -> Result<Option<Watch>, StoreError>;

    /// The watches of `owner` (`None`: every owner's), in id order.
    fn watches(&self, owner: Option<u32>) -> Result<Vec<Watch>, StoreError>;

    /// Pauses (`true`) or resumes a watch: the watch after it, `None` when there is no such
    /// watch. Durable.
    fn pause_watch(&self, id: WatchId, paused: bool) -> Result<Option<Watch>, StoreError>;

    /// Removes a watch and its checkpoint (the jobs it made stay): whether there was one.
    /// Durable.
    fn remove_watch(&self, id: WatchId) -> Result<bool, StoreError>;

    /// The watch's checkpoint: an entry per path (`bftp_core::watch::Entry`). Empty for a
    /// watch that does not exist.
    fn watch_checkpoint(
        &self,
        id: WatchId,
    ) -> Result<std::collections::BTreeMap<String, bftp_core::watch::Entry>, StoreError>;

    /// Records one poll in one transaction: the entries of `poll.prune` removed, those of
    /// `poll.put` written, the job submitted (as `submit` does, linked to the watch: its
    /// `watch` is set to `id`) and the status written, with `current_job` the new job and
    /// the job pushed to `jobs` (the list is the store's, the caller's is not read; the last
    /// [`WATCH_JOBS_KEPT`] kept). A watch that does not
    /// exist is `WatchNotFound`; on a shared store, a node that does not hold the watch
    /// ([`JobStore::hold_watch`]) is `LeaseLost`, and nothing is written. Durable before it
    /// returns.
    fn record_poll(
        &self,
        id: WatchId,
        poll: PollRecord,
    ) -> Result<(Watch, Option<Job>), StoreError>;

    /// Takes or keeps the hold on a watch for `node` until `until`: `true` when this node
    /// holds it now (it was held by none, by this node, or by another whose hold ended
    /// before `now`), `false` when another node holds it or there is no such watch. A store
    /// of one node holds every watch that exists. Durable.
    fn hold_watch(
        &self,
        id: WatchId,
        node: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError>;

    // ---- the event log (issue 31, RULES.md §16): webhooks and `bftp events` ----
    //
    // Wherever a store makes a job final (`apply` of `Finish` or `Cancel`,
    // `settle_and_finish`) it also writes the job's events (`bftp_core::event::events_of_final`)
    // in that transaction, and wherever it writes a member's change (`update_member`,
    // `update_members`) the event of that change (`bftp_core::event::event_of_member_change`).
    // Retention removes a job's events with the job.

    /// Puts an event in the log, due now, unless one with its id is there: the event as the
    /// log has it, and whether it was written now. Durable before it returns.
    fn put_event(&self, event: NewEvent) -> Result<(Event, bool), StoreError>;

    /// At most `limit` events with a sequence number greater than `after`, in order; only
    /// `owner`'s (the owner of their job or watch) when given.
    fn events_after(
        &self,
        after: u64,
        owner: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError>;

    /// Events due for delivery at or before `until`, earliest first, at most `limit`. On a
    /// shared store, they are claimed for this node for a lease: another node does not take
    /// them meanwhile.
    fn events_due(&self, until: Timestamp, limit: usize) -> Result<Vec<Event>, StoreError>;

    /// The earliest time an event is due (one another node claims excepted).
    fn event_next_due(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Records one round of delivery tries of event `seq`, one per target (a target not
    /// tried before joins its deliveries; one delivered or given up stays as it is). The
    /// event is due again at the earliest next try of a pending target, or never; a round
    /// without targets ends it. Releases this node's claim. Durable before it returns.
    fn record_event_delivery(
        &self,
        seq: u64,
        tries: Vec<(String, DeliveryTry)>,
        now: Timestamp,
    ) -> Result<Event, StoreError>;

    /// The job's events, in order.
    fn events_of_job(&self, job: JobId) -> Result<Vec<Event>, StoreError>;

    // ---- limits learned from the servers (RULES.md §16.3; `bftp_core::hostlimit`) ----
    //
    // One record per host (lower-case name), kept across restarts and, on PostgreSQL, shared
    // by all nodes. `learned_at` is the record's version: the newest write wins.

    /// Remembers a limit a host taught (a refusal for too many connections), replacing what
    /// was remembered unless that was set later (a late write of an older refusal never hides
    /// a newer limit; at the same time the lower limit stays: `bftp_core::hostlimit::replaces`).
    /// Durable before it returns.
    fn learn_host_limit(&self, limit: &HostLimit) -> Result<(), StoreError>;

    /// Every learned limit, by host name.
    fn host_limits(&self) -> Result<Vec<HostLimit>, StoreError>;

    /// The learned limit of `host` (lower case), if any.
    fn host_limit(&self, host: &str) -> Result<Option<HostLimit>, StoreError>;

    /// Raises (`to`: `Some`) or forgets (`None`) the learned limit `seen` of its host, only if
    /// what is remembered is still `seen` (same limit, same `learned_at`): a raise computed
    /// from an old read never undoes a newer refusal. Whether it changed anything. Durable
    /// before it returns.
    fn raise_host_limit(
        &self,
        seen: &HostLimit,
        to: Option<&HostLimit>,
    ) -> Result<bool, StoreError>;

    // ---- start gates (RULES.md §16.4, §16.5) ----

    /// The job waits at a start gate until `until` (`wait`: why, shown in its status; `None`:
    /// it waits no more and is due at `until`), without a try counted: a queued job's next
    /// attempt moves, its claim released; a running job (an attempt that stopped before a
    /// new file for a closed window) goes back to the queue and that attempt does not count
    /// (`attempts` back by one). A `waiting` history entry when the reason or host changed.
    /// A final job, and a running one given no `wait`, is `InvalidTransition`; on a shared store, a job another node holds is
    /// `LeaseLost`. Durable before it returns.
    fn defer(
        &self,
        id: JobId,
        until: Timestamp,
        wait: Option<bftp_core::window::Wait>,
        now: Timestamp,
    ) -> Result<Job, StoreError>;
}

/// Upkeep of a store: forgetting old final jobs, backups, disk space (`JobStore::upkeep`).
pub trait Upkeep: Send + Sync {
    /// Looks at up to `scan` jobs with an id after `after`, in id order, and returns those
    /// `bftp_core::retention::removable` lets go at `now`, and the last id looked at (`None`
    /// once the end was reached: the next pass starts over). Reads only.
    fn removable_jobs(
        &self,
        now: Timestamp,
        keep: Keep,
        after: Option<JobId>,
        scan: usize,
    ) -> Result<(Vec<JobId>, Option<JobId>), StoreError>;

    /// Removes each job that `bftp_core::retention::removable` still lets go (checked again
    /// inside each transaction), with everything kept for it: members, history, transcript,
    /// outbox entry and every index entry (request key, owner, keyword, state). A job with
    /// many members goes in several transactions of at most `batch` members and history
    /// entries (a page of members counts as the members it holds), its members and
    /// history first and its record last, so an interrupted removal is finished by the next.
    /// Returns how many jobs were removed. Durable before it returns.
    fn remove_jobs(
        &self,
        ids: &[JobId],
        now: Timestamp,
        keep: Keep,
        batch: usize,
    ) -> Result<u64, StoreError>;

    /// The store's size on disk in bytes, where the store can tell.
    fn disk_size(&self) -> Result<Option<u64>, StoreError>;

    /// Whether there is room for new work (a submit, an attempt, a file not yet begun): `Err`
    /// is `DiskFull` when the store's disk is below its reserve. Writes that record work
    /// already under way (a member's result, a requeue, a report's delivery) are refused
    /// only below half the reserve, so an attempt that stops taking files loses no result.
    /// A store without a disk of its own to watch (PostgreSQL) always has room.
    fn space_for_new_work(&self) -> Result<(), StoreError>;

    /// Writes a consistent copy of the store (as of one moment between two transactions)
    /// into `dir`, a new or empty directory, as a store directory that opens like this one
    /// (the key file is the caller's to copy). Durable before it returns. On PostgreSQL the
    /// copy is a `pg_dump` of the database (`PG_DUMP_FILE` in `dir`), restored with
    /// `pg_restore` into a database the nodes then name.
    fn backup(&self, dir: &std::path::Path) -> Result<BackupReport, StoreError>;
}

/// Several nodes sharing one store (`JobStore::cluster`): the node's name, its leases on the
/// jobs it runs, and the host slots all nodes count against.
pub trait Cluster: Send + Sync {
    /// Jobs whose lease this node held and lost since the last call (another node took them
    /// over, or they were cancelled on another node): their attempts must stop, since none
    /// of their writes will be accepted. Never blocks.
    fn lost_leases(&self) -> Vec<JobId>;

    /// Jobs this node held that were cancelled on another node straight from its hold (no
    /// other node ran them since), found since the last call: the node lets them go (its
    /// writes for them carry no epoch any more) and its attempt must stop as a local cancel
    /// does, cleaning up after itself (RULES.md §6). Never blocks.
    fn cancelled_elsewhere(&self) -> Vec<JobId>;

    /// This node's lease on a job it holds (`bftp_core::lease`), for its attempt to ask
    /// before each command it sends for the job (RULES.md §4.8); `None` for a job this node
    /// does not hold.
    fn lease(&self, id: JobId) -> Option<std::sync::Arc<LeaseCell>>;

    /// This node's name in the store it shares with other nodes.
    fn node(&self) -> String;

    /// How often the scheduler and the postman look at the queue again even when nothing is
    /// due: other nodes submit and finish jobs, and leases run out, without telling this one.
    fn poll_interval(&self) -> std::time::Duration;

    /// Gives up this node's hold on a job whose attempt could not record its end (the
    /// database was unreachable): the lease is no longer renewed, so that the job is taken
    /// over (by any node, this one too) once it runs out, instead of staying `running` under
    /// a live node. The node's writes for it stay fenced.
    fn abandon(&self, id: JobId);

    /// The node whose lease a running job is under.
    fn job_node(&self, id: JobId) -> Result<Option<String>, StoreError>;

    /// The FTP connection slots every node of a shared store counts against
    /// (`max_connections_per_host` over all nodes); `None` once the store is closed.
    fn host_slots(&self) -> Option<std::sync::Arc<dyn HostSlots>>;
}

/// The text of a panic payload.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn store_is_shareable_between_threads() {
        fn is<T: Send + Sync>() {}
        is::<super::SledStore>();
        is::<std::sync::Arc<dyn super::JobStore>>();
    }
}
