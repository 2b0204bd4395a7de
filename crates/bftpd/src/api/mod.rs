//! The HTTP/JSON API on the Unix socket (routes in `bftp_api`'s crate docs).

pub mod backup;
pub mod events;
pub mod hosts;
pub mod identity;
pub mod server;
pub mod submit;
pub mod watch;

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use bftp_api::{
    ErrorBody, Health, JobList, JobView, ListQuery, SubmitRequest, SubmitResponse,
    IDEMPOTENCY_KEY_HEADER,
};
use bftp_core::{JobEvent, JobSpec, RetryBounds, RetryPolicy};
use bftp_store::{
    Job, JobFilter, JobId, KeyHash, NewJob, NewMember, RequestKey, StateFilter, StoreError,
    Submitted,
};

use crate::api::identity::Caller;
use crate::api::submit::build_spec;
use crate::hosts::policy::HostPolicy;
use crate::secrets::Secrets;
use crate::store::Store;
use crate::views;

/// What every handler shares.
pub struct AppState {
    pub store: Store,
    /// Who reports go to and their Message-IDs, for the `report` part of a job's view.
    pub mail: crate::mail::MailSettings,
    pub secrets: Arc<Secrets>,
    pub scheduler: Arc<crate::scheduler::Scheduler>,
    pub policy: HostPolicy,
    /// The engine's timeouts and reply overrides (`[ftp]`).
    pub limits: bftp_ftp::Limits,
    /// Per-host connection slots, shared with the scheduler's attempts.
    pub hosts: Arc<crate::hosts::HostLimits>,
    pub retry_defaults: RetryPolicy,
    pub retry_bounds: RetryBounds,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The files the running attempts copy right now, put into the views.
    pub live: Arc<crate::attempt::live::Live>,
    /// The time submits and cancels are stamped with.
    pub clock: crate::clock::Clock,
    /// The secret key file, which a backup copies beside the store.
    pub key_file: std::path::PathBuf,
    /// `[ftp.tls]` defaults: the policies of a side a request says nothing about.
    pub tls_defaults: crate::hosts::tls::TlsDefaults,
    /// `[ftp] data_path`, `relay`: the path a job gets, and the refusal of a relay.
    pub data_paths: crate::hosts::DataPathPolicy,
    /// The watches' task, told when a watch is added or resumed (`None` in tests without it).
    pub watcher: Option<Arc<crate::watch::Watcher>>,
    /// The start gates: the servers' breakers for `/metrics` (`None` in tests without).
    pub gates: Option<Arc<crate::hosts::gates::Gates>>,
}

pub type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/watches", post(watch::add).get(watch::list))
        .route("/v1/watches/{id}", get(watch::show).delete(watch::remove))
        .route("/v1/watches/{id}/pause", post(watch::pause))
        .route("/v1/watches/{id}/resume", post(watch::resume))
        .route("/v1/events", get(events::list))
        .route("/v1/hosts", get(crate::api::hosts::list))
        .route("/v1/verify", post(verify))
        .route("/v1/transfer", post(transfer))
        .route("/v1/admin/backup", post(crate::api::backup::handle))
        // Unversioned, where Prometheus looks; any caller may read it: it holds no job data.
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such API route; see `bftp --help`",
            )
        })
        .with_state(state)
}

/// The TCP metrics listener's routes: `/metrics` and nothing else (no job data leaves the
/// Unix socket).
pub fn metrics_router(state: Shared) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "only /metrics is served here; the API is on bftpd's Unix socket",
            )
        })
        .with_state(state)
}

/// An error response: an HTTP status and an [`ErrorBody`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                kind: kind.into(),
                message: message.into(),
                job_id: None,
            },
        }
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    fn not_found(id: u64) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no job {id} of yours"),
        )
    }
    fn internal(e: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %e, "request failed");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error: {e}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::RequestKeyConflict { job } => ApiError {
                status: StatusCode::CONFLICT,
                body: ErrorBody {
                    kind: "conflict".into(),
                    message: format!("this request key already made job {job} with other parameters; use a new key for a new request"),
                    job_id: Some(job.0),
                },
            },
            e @ StoreError::InvalidTransition { .. } => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            e @ StoreError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            // Nothing was written: the client may try again once the operator freed space.
            e @ StoreError::DiskFull { .. } => {
                tracing::warn!(error = %e, "request refused: the store's disk is nearly full");
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage", e.to_string())
            }
            // Nothing was written: the client may send the same request again once the
            // database is back (a script tells this from other failures by the kind).
            e @ StoreError::Unreachable { .. } => {
                tracing::warn!(error = %e, "request refused: the job store cannot be reached");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    bftp_api::STORE_UNAVAILABLE,
                    format!("{e}; try again once it is back"),
                )
            }
            other => ApiError::internal(other),
        }
    }
}

async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

async fn metrics(State(app): State<Shared>) -> Result<Response, ApiError> {
    let store = app.store.clone();
    let (jobs, outbox, disk, node, watches) = store
        .call(move |store| {
            // A shared store: which node this is, and the jobs under its lease.
            let node = match store.cluster().map(|c| c.node()) {
                Some(n) => Some((n, store.running_jobs()?.len())),
                None => None,
            };
            Ok((
                store.count_by_state()?,
                store.outbox_pending()?,
                store.upkeep().map_or(Ok(None), |u| u.disk_size())?,
                node,
                store.watches(None)?,
            ))
        })
        .await?;
    if let Some(bytes) = disk {
        app.metrics.set_disk_size(bytes);
    }
    let mut text = app.metrics.render(jobs, outbox);
    if let Some((name, running)) = node {
        text.push_str(&crate::metrics::node_series(&name, running));
    }
    text.push_str(&crate::metrics::watch_series(&watches, app.clock.now()));
    text.push_str(&app.hosts.limit_series());
    if let Some(g) = &app.gates {
        text.push_str(&g.breaker.metrics_series());
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        text,
    )
        .into_response())
}

/// Resolves every host of the job and applies the host policy to each address (RULES.md §8).
async fn check_hosts(policy: &HostPolicy, spec: &JobSpec) -> Result<(), ApiError> {
    for ep in std::iter::once(&spec.source).chain(spec.destination.as_ref()) {
        let addrs: Vec<IpAddr> = match ep.host.parse::<IpAddr>() {
            Ok(a) => vec![a],
            Err(_) => tokio::net::lookup_host((ep.host.as_str(), ep.port))
                .await
                .map_err(|e| {
                    ApiError::bad_request(format!("cannot resolve host {:?}: {e}", ep.host))
                })?
                .map(|sa| sa.ip())
                .collect(),
        };
        policy
            .check_all(&ep.host, &addrs)
            .map_err(|e| ApiError::new(StatusCode::FORBIDDEN, "forbidden_host", e.to_string()))?;
    }
    Ok(())
}

/// Parses, validates and policy-checks a request: what submit, verify and transfer share.
async fn checked_spec(app: &Shared, body: &[u8]) -> Result<(SubmitRequest, JobSpec), ApiError> {
    let req: SubmitRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("request body: {e}")))?;
    let spec = checked_request(app, req.clone()).await?;
    Ok((req, spec))
}

/// [`checked_spec`] of a request already parsed (a watch's job).
pub(crate) async fn checked_request(app: &Shared, req: SubmitRequest) -> Result<JobSpec, ApiError> {
    let mut spec = build_spec(&req, app.retry_defaults, &app.retry_bounds, app.clock.now())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    crate::hosts::tls::apply(&req, &mut spec, &app.tls_defaults).map_err(ApiError::bad_request)?;
    admit_data_path(&app.data_paths, &spec)?;
    check_hosts(&app.policy, &spec).await?;
    Ok(spec)
}

/// A job that asks for a relay where `[ftp] relay = false` is refused (403, nothing stored).
/// The spec keeps what was asked (`None` when nothing was): the path is settled when the job
/// runs, so a change of the daemon's default reaches the jobs that asked for none.
fn admit_data_path(
    paths: &crate::hosts::DataPathPolicy,
    spec: &bftp_core::JobSpec,
) -> Result<bftp_core::route::DataPath, ApiError> {
    paths
        .admit(spec.data_path)
        .map_err(|e| ApiError::new(StatusCode::FORBIDDEN, RELAY_FORBIDDEN, e.to_string()))
}

/// The [`bftp_api::ErrorBody::kind`] of a job asking for a relay the daemon does not make.
const RELAY_FORBIDDEN: &str = "relay_forbidden";

fn address_check(app: &Shared) -> Arc<dyn bftp_ftp::AddressCheck> {
    Arc::new(crate::hosts::PolicyCheck(app.policy.clone()))
}

async fn verify(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<bftp_api::VerifyResponse>, ApiError> {
    let (_, spec) = checked_spec(&app, &body).await?;
    tracing::info!(uid = caller.uid, source = %spec.source.display_url(), "verify");
    Ok(Json(
        crate::foreground::verify(&spec, &app.limits, address_check(&app), &app.data_paths).await,
    ))
}

/// A foreground copy, streamed as NDJSON; the client hanging up abandons it.
async fn transfer(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (_, spec) = checked_spec(&app, &body).await?;
    if spec.disposition != bftp_core::Disposition::Copy {
        return Err(ApiError::bad_request(format!(
            "`bftp transfer` copies; a `{}` job goes through `bftp submit`",
            spec.disposition
        )));
    }
    // A closed window (RULES.md §16.4): refused, saying when it opens (a foreground
    // transfer does not wait; `bftp submit` does).
    if let Some(wait) = app.gates.as_ref().and_then(|g| {
        let dst = spec.destination.as_ref().map(|d| d.host.as_str());
        g.windows
            .look(&spec.source.host, dst, app.clock.now())
            .wait()
    }) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "window_closed",
            format!(
                "{}; a foreground transfer does not wait: try again then, or `bftp submit` the job, which starts when the window opens",
                wait.text()
            ),
        ));
    }
    tracing::info!(uid = caller.uid, source = %spec.source.display_url(), "foreground transfer");
    let routing = crate::lanes::routing::Routing::plan(
        &spec,
        app.data_paths.effective_data_path(&spec),
        crate::hosts::pairs::PairMemories::new(app.store.clone(), app.data_paths.pair_memory),
        app.hosts.relay_gate().clone(),
        app.clock.clone(),
    )
    .await;
    let (tx, rx) = tokio::sync::mpsc::channel::<bftp_api::TransferEvent>(64);
    tokio::spawn(crate::foreground::transfer(
        spec,
        app.limits.clone(),
        address_check(&app),
        app.hosts.clone(),
        tx,
        routing,
    ));
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        let mut chunk = Vec::new();
        push_event_line(&mut chunk, &event);
        // Events already waiting (parallel pairs finish files close together) go out in
        // the same chunk: one write to the socket and one wake-up of `bftp`, not one each.
        while chunk.len() < EVENT_CHUNK {
            match rx.try_recv() {
                Ok(event) => push_event_line(&mut chunk, &event),
                Err(_) => break,
            }
        }
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(chunk)), rx))
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response())
}

/// Coalesced transfer events stop growing a chunk at this size.
const EVENT_CHUNK: usize = 64 * 1024;

/// One NDJSON line (none if the event cannot be serialized: nothing half-written).
fn push_event_line(chunk: &mut Vec<u8>, event: &bftp_api::TransferEvent) {
    let start = chunk.len();
    match serde_json::to_writer(&mut *chunk, event) {
        Ok(()) => chunk.push(b'\n'),
        Err(_) => chunk.truncate(start),
    }
}

async fn submit(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (req, spec) = checked_spec(&app, &body).await?;
    let key = match headers.get(IDEMPOTENCY_KEY_HEADER) {
        None => None,
        Some(v) => {
            let k = v
                .to_str()
                .map_err(|_| ApiError::bad_request("Idempotency-Key must be printable ASCII"))?;
            if k.is_empty() || k.len() > 256 {
                return Err(ApiError::bad_request(
                    "Idempotency-Key must be 1 to 256 characters",
                ));
            }
            Some(k.to_string())
        }
    };
    let now = app.clock.now();
    // The fingerprint covers the request exactly as sent (its passwords included, hence keyed).
    let canonical = serde_json::to_vec(&req).map_err(ApiError::internal)?;
    let request = key.map(|k| RequestKey {
        key_hash: KeyHash(app.secrets.request_key_hash(caller.uid, &k)),
        fingerprint: KeyHash(app.secrets.fingerprint(&canonical)),
    });
    // A single-file job's one member is known now; a wildcard job's are frozen at its first listing.
    let members = if spec.is_multi_file() {
        Vec::new()
    } else {
        vec![NewMember {
            name: spec.source.file_name().to_string(),
            size: None,
            modified: None,
            refused: None,
        }]
    };
    let new = NewJob {
        watch: None,
        owner_uid: caller.uid,
        spec: app.secrets.seal_spec(&spec),
        keyword_hash: spec
            .keyword
            .as_deref()
            .map(|k| KeyHash(app.secrets.keyword_hash(k))),
        request,
        created_at: now,
        members,
    };
    let (store, mail, paths) = (app.store.clone(), app.mail.clone(), app.data_paths);
    // One trip to the blocking pool: the write, then the answer. A new job's view is built
    // from what was written; an existing one's is read.
    let (created, mut view) = store
        .call(move |store| {
            let members = new.members.clone();
            match store.submit(new)? {
                Submitted::Created(job) => Ok((true, views::created_view(&job, &members, &paths))),
                Submitted::Existing(job) => {
                    Ok((false, views::load_view(store, &mail, &paths, &job)?))
                }
            }
        })
        .await?;
    if created {
        tracing::info!(job = view.id, uid = caller.uid, "job submitted");
        app.scheduler.notify();
    }
    app.live.fill(&mut view);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(SubmitResponse { created, job: view })).into_response())
}

async fn load_view(app: &Shared, job: Job) -> Result<JobView, ApiError> {
    let (store, mail, paths) = (app.store.clone(), app.mail.clone(), app.data_paths);
    let mut view = store
        .call(move |store| views::load_view(store, &mail, &paths, &job))
        .await?;
    app.live.fill(&mut view);
    Ok(view)
}

/// The job, if it exists and the caller may see it; another user's job is "not found" so
/// that ids reveal nothing.
async fn visible_job(app: &Shared, caller: Caller, id: u64) -> Result<Job, ApiError> {
    let store = app.store.clone();
    match store.call(move |store| store.get(JobId(id))).await? {
        Some(job) if caller.may_access(job.owner_uid) => Ok(job),
        _ => Err(ApiError::not_found(id)),
    }
}

fn job_id(path: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|_| ApiError::bad_request("a job id is a positive number"))
}

async fn get_job(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = job_id(path)?;
    let (store, mail, live) = (app.store.clone(), app.mail.clone(), app.live.clone());
    let paths = app.data_paths;
    // One trip to the blocking pool for the job, its ledger, its history and its report, and
    // for the JSON: a large job's view is megabytes, which would hold a runtime worker (and
    // every request behind it) for as long as it takes to encode.
    let found = store
        .call(move |store| match store.get(JobId(id))? {
            Some(job) if caller.may_access(job.owner_uid) => {
                let mut view = views::load_view(store, &mail, &paths, &job)?;
                live.fill(&mut view);
                Ok(Some(serde_json::to_vec(&view)))
            }
            _ => Ok(None),
        })
        .await?;
    let json = found
        .ok_or_else(|| ApiError::not_found(id))?
        .map_err(ApiError::internal)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

async fn list(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
    let all = q.all.unwrap_or(false);
    if all && !caller.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only root and the admin group may list every user's jobs",
        ));
    }
    let state = match q.state.as_deref() {
        None => None,
        Some("queued") => Some(StateFilter::Queued),
        Some("running") => Some(StateFilter::Running),
        Some("finished") => Some(StateFilter::Finished),
        Some("cancelled") => Some(StateFilter::Cancelled),
        Some(s) => {
            return Err(ApiError::bad_request(format!(
                "unknown state {s:?}; expected queued, running, finished or cancelled"
            )))
        }
    };
    let filter = JobFilter {
        owner: if all { None } else { Some(caller.uid) },
        keyword_hash: q
            .keyword
            .as_deref()
            .map(|k| KeyHash(app.secrets.keyword_hash(k))),
        state,
        limit: Some(q.limit.unwrap_or(1000).min(10_000)),
    };
    let (store, mail, paths) = (app.store.clone(), app.mail.clone(), app.data_paths);
    // One trip to the blocking pool for the whole list, not one per job.
    let mut views = store
        .call(move |store| {
            store
                .list(&filter)?
                .iter()
                .map(|job| views::load_view(store, &mail, &paths, job))
                .collect::<Result<Vec<_>, StoreError>>()
        })
        .await?;
    for view in &mut views {
        app.live.fill(view);
    }
    Ok(Json(JobList { jobs: views }))
}

async fn cancel(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = job_id(path)?;
    let job = visible_job(&app, caller, id).await?;
    if job.state.is_final() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("job {id} is already {}", job.state),
        ));
    }
    let store = app.store.clone();
    let detail = format!("cancelled by uid {}", caller.uid);
    let now = app.clock.now();
    let job = store
        .call(move |store| store.apply(JobId(id), JobEvent::Cancel, now, Some(detail)))
        .await?;
    app.scheduler.cancel(JobId(id));
    tracing::info!(job = id, uid = caller.uid, "job cancelled");
    Ok(Json(load_view(&app, job).await?))
}
