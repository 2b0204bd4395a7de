//! The watches' routes (`bftp_api::watch`): add, list, show, pause, resume, remove. A caller
//! sees only their own watches (admins every one); another user's watch is "not found".

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bftp_api::{WatchList, WatchListQuery, WatchRequest, WatchView};
use bftp_core::watch::{Ready, DEFAULT_IGNORE};
use bftp_core::Disposition;
use bftp_store::{KeyHash, NewWatch, Watch, WatchId, WatchSettings};

use super::{checked_request, ApiError, Shared};
use crate::api::identity::Caller;
use crate::views::watch::watch_view;

/// The shortest interval between two polls.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// The longest settle time.
pub const MAX_SETTLE: Duration = Duration::from_secs(7 * 24 * 3600);
/// At most this many patterns of each kind.
pub const MAX_PATTERNS: usize = 64;
/// The settle time when the request gives none.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(30);

/// A watch's settings from its request: durations parsed, names checked, the default ignore
/// patterns added. `Err`: what is wrong, in the user's words.
pub fn settings_of(req: &WatchRequest) -> Result<WatchSettings, String> {
    let duration = |what: &str, s: &str| {
        humantime::parse_duration(s.trim())
            .map_err(|e| format!("{what} {s:?} is not a duration ({e}); write e.g. \"10m\""))
    };
    let every = duration("every", &req.every)?;
    if every < MIN_EVERY {
        return Err(format!("every {:?} is shorter than 1s", req.every));
    }
    let settle = match &req.settle {
        Some(s) => duration("settle", s)?,
        None => DEFAULT_SETTLE,
    };
    if settle > MAX_SETTLE {
        return Err(format!("settle {settle:?} is longer than 7 days"));
    }
    let name = |what: &str, n: &str| -> Result<String, String> {
        if n.is_empty() {
            return Err(format!("{what} is empty"));
        }
        if n.len() > 255 {
            return Err(format!("{what} {n:?} is longer than 255 bytes"));
        }
        if n.contains('/') || n.chars().any(char::is_control) {
            return Err(format!(
                "{what} {n:?} must be one name: no `/`, no control characters"
            ));
        }
        Ok(n.to_owned())
    };
    let names = |what: &str, list: &[String]| -> Result<Vec<String>, String> {
        if list.len() > MAX_PATTERNS {
            return Err(format!("at most {MAX_PATTERNS} {what} patterns"));
        }
        list.iter().map(|p| name(what, p)).collect()
    };
    let patterns = names("pattern", &req.patterns)?;
    let mut ignore: Vec<String> = if req.no_default_ignore {
        Vec::new()
    } else {
        DEFAULT_IGNORE.iter().map(|s| s.to_string()).collect()
    };
    for p in names("ignore", &req.ignore)? {
        if !ignore.contains(&p) {
            ignore.push(p);
        }
    }
    let ready = match (&req.ready_marker, &req.ready_suffix) {
        (Some(_), Some(_)) => {
            return Err("give a ready marker or a ready suffix, not both".into());
        }
        (Some(m), None) => Some(Ready::Beside(name("ready marker", m)?)),
        (None, Some(s)) => Some(Ready::Suffix(name("ready suffix", s)?)),
        (None, None) => None,
    };
    let notify_on = match req.notify_on.as_deref().unwrap_or("failure") {
        w @ ("failure" | "always" | "never") => w.to_owned(),
        other => {
            return Err(format!(
                "notify-on {other:?}: expected failure, always or never"
            ))
        }
    };
    let expect = match &req.expect {
        None => None,
        Some(e) => {
            crate::watch::expect_of(e)?;
            Some(e.trim().to_owned())
        }
    };
    Ok(WatchSettings {
        every_ms: millis(every),
        patterns,
        ignore,
        settle_ms: millis(settle),
        ready,
        recursive: req.recursive,
        notify_on,
        expect,
        digest: req.digest,
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub async fn add(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: WatchRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("request body: {e}")))?;
    let settings = settings_of(&req).map_err(ApiError::bad_request)?;
    // The job is checked as the job each poll makes (`DIR/*`), and keeps the directory.
    let dir = req.job.source.path.clone();
    if bftp_core::glob::is_glob_pattern(&dir) {
        return Err(ApiError::bad_request(
            "a watch's source is a directory; choose files with --pattern, not a wildcard",
        ));
    }
    if req.job.start.is_some() {
        return Err(ApiError::bad_request(
            "a watch's jobs start when its polls make them: a start time does not apply",
        ));
    }
    if req.job.recursive {
        return Err(ApiError::bad_request(
            "a recursive watch is `recursive` of the watch, not of its job",
        ));
    }
    let mut job = req.job.clone();
    job.source.path = crate::watch::files_of(&dir);
    let mut spec = checked_request(&app, job).await?;
    spec.source.path = dir;
    if spec.disposition == Disposition::Delete || spec.destination.is_none() {
        return Err(ApiError::bad_request(
            "a watch copies or moves files: it needs a destination directory",
        ));
    }
    let new = NewWatch {
        owner_uid: caller.uid,
        spec: app.secrets.seal_spec(&spec),
        settings,
        keyword_hash: spec
            .keyword
            .as_deref()
            .map(|k| KeyHash(app.secrets.keyword_hash(k))),
        created_at: app.clock.now(),
    };
    let watch = app.store.call(move |s| s.create_watch(new)).await?;
    tracing::info!(watch = watch.id.0, uid = caller.uid, source = %spec.source.display_url(), "watch added");
    if let Some(w) = &app.watcher {
        w.notify();
    }
    Ok((StatusCode::CREATED, Json(watch_view(&watch))).into_response())
}

pub async fn list(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<WatchListQuery>, QueryRejection>,
) -> Result<Json<WatchList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
    let all = q.all.unwrap_or(false);
    if all && !caller.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only root and the admin group may list every user's watches",
        ));
    }
    let owner = (!all).then_some(caller.uid);
    let watches = app.store.call(move |s| s.watches(owner)).await?;
    Ok(Json(WatchList {
        watches: watches.iter().map(watch_view).collect(),
    }))
}

fn watch_id(path: Result<Path<u64>, PathRejection>) -> Result<WatchId, ApiError> {
    path.map(|Path(id)| WatchId(id))
        .map_err(|_| ApiError::bad_request("a watch id is a positive number"))
}

fn not_found(id: WatchId) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no watch {} of yours", id.0),
    )
}

/// The watch, if it exists and the caller may see it.
async fn visible(app: &Shared, caller: Caller, id: WatchId) -> Result<Watch, ApiError> {
    match app.store.call(move |s| s.watch(id)).await? {
        Some(w) if caller.may_access(w.owner_uid) => Ok(w),
        _ => Err(not_found(id)),
    }
}

pub async fn show(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<WatchView>, ApiError> {
    let id = watch_id(path)?;
    let w = visible(&app, caller, id).await?;
    let mut view = watch_view(&w);
    if let Some(cluster) = app.store.cluster() {
        view.node = Some(cluster.node());
    }
    Ok(Json(view))
}

async fn set_paused(
    app: Shared,
    caller: Caller,
    path: Result<Path<u64>, PathRejection>,
    paused: bool,
) -> Result<Json<WatchView>, ApiError> {
    let id = watch_id(path)?;
    visible(&app, caller, id).await?;
    let w = app
        .store
        .call(move |s| s.pause_watch(id, paused))
        .await?
        .ok_or_else(|| not_found(id))?;
    tracing::info!(
        watch = id.0,
        uid = caller.uid,
        paused,
        "watch paused or resumed"
    );
    if let Some(w) = &app.watcher {
        w.notify();
    }
    Ok(Json(watch_view(&w)))
}

pub async fn pause(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<WatchView>, ApiError> {
    set_paused(app, caller, path, true).await
}

pub async fn resume(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<WatchView>, ApiError> {
    set_paused(app, caller, path, false).await
}

pub async fn remove(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let id = watch_id(path)?;
    visible(&app, caller, id).await?;
    if !app.store.call(move |s| s.remove_watch(id)).await? {
        return Err(not_found(id));
    }
    tracing::info!(watch = id.0, uid = caller.uid, "watch removed");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(f: impl FnOnce(&mut WatchRequest)) -> WatchRequest {
        let mut r = WatchRequest {
            every: "10m".into(),
            ..WatchRequest::default()
        };
        f(&mut r);
        r
    }

    #[test]
    fn settings_table() {
        let s = settings_of(&req(|_| {})).unwrap();
        assert_eq!((s.every_ms, s.settle_ms), (600_000, 30_000));
        assert_eq!(s.ignore.len(), DEFAULT_IGNORE.len());
        assert_eq!(
            (s.notify_on.as_str(), s.ready, s.expect),
            ("failure", None, None)
        );

        let s = settings_of(&req(|r| {
            r.settle = Some("0s".into());
            r.ignore = vec!["*.lock".into(), "*.tmp".into()];
            r.ready_suffix = Some(".done".into());
            r.notify_on = Some("never".into());
            r.expect = Some("daily 05:00".into());
            r.patterns = vec!["*.csv".into()];
        }))
        .unwrap();
        assert_eq!(s.settle_ms, 0);
        assert_eq!(s.ignore.len(), DEFAULT_IGNORE.len() + 1, "*.tmp once");
        assert_eq!(s.ready, Some(Ready::Suffix(".done".into())));
        assert_eq!(s.expect.as_deref(), Some("daily 05:00"));
        let s = settings_of(&req(|r| {
            r.no_default_ignore = true;
            r.expect = Some("6h".into());
        }))
        .unwrap();
        assert!(s.ignore.is_empty());

        let bad: Vec<(WatchRequest, &str)> = vec![
            (req(|r| r.every = "soon".into()), "not a duration"),
            (req(|r| r.every = "500ms".into()), "shorter than 1s"),
            (req(|r| r.settle = Some("30d".into())), "longer than 7 days"),
            (req(|r| r.patterns = vec!["a/b".into()]), "one name"),
            (req(|r| r.patterns = vec!["a\r\nDELE x".into()]), "one name"),
            (req(|r| r.ignore = vec![String::new()]), "empty"),
            (
                req(|r| {
                    r.ready_marker = Some("READY".into());
                    r.ready_suffix = Some(".ok".into());
                }),
                "not both",
            ),
            (
                req(|r| r.notify_on = Some("sometimes".into())),
                "expected failure",
            ),
            (req(|r| r.expect = Some("weekly".into())), "expect"),
        ];
        for (r, want) in bad {
            let e = settings_of(&r).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
