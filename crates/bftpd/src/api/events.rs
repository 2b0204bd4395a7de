//! `GET /v1/events` (issue 31, SPEC §16): the event log, owner-scoped (a caller sees the
//! events of their own jobs and watches; an admin every one with `?all=true`), as a page of
//! JSON, or with `?follow=true` as server-sent events that go on as new events are written.
//!
//! A followed stream sends each event as `id: <seq>`, `event: <type>`, `data: <the event's
//! view as JSON>`, and looks at the log again every [`FOLLOW_LOOK`] (reads only: the log is
//! ordered by its sequence numbers, so nothing written meanwhile is passed over).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bftp_api::{EventLogPage, EventLogView, EventsQuery};

use super::{ApiError, Shared};
use crate::api::identity::Caller;
use crate::views::event::event_view;

/// The most events one page (or one look of a followed stream) carries.
pub const MAX_PAGE: usize = 1000;
/// How often a followed stream looks for new events.
pub const FOLLOW_LOOK: Duration = Duration::from_millis(250);

pub async fn list(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
    if q.all && !caller.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only root and the admin group may read every user's events",
        ));
    }
    let owner = (!q.all).then_some(caller.uid);
    let limit = q.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    if !q.follow {
        let events = page(&app, q.after, owner, limit).await?;
        return Ok(Json(EventLogPage { events }).into_response());
    }
    struct Follow {
        app: Shared,
        after: u64,
        owner: Option<u32>,
        queued: VecDeque<EventLogView>,
    }
    let start = Follow {
        app,
        after: q.after,
        owner,
        queued: VecDeque::new(),
    };
    let stream = futures_util::stream::unfold(start, |mut f| async move {
        loop {
            if let Some(v) = f.queued.pop_front() {
                let data = serde_json::to_string(&v).expect("plain data serializes");
                let ev = SseEvent::default()
                    .id(v.seq.to_string())
                    .event(v.kind.clone())
                    .data(data);
                return Some((Ok::<_, Infallible>(ev), f));
            }
            match page(&f.app, f.after, f.owner, MAX_PAGE).await {
                Ok(events) if !events.is_empty() => {
                    f.after = events.last().map_or(f.after, |e| e.seq);
                    f.queued.extend(events);
                }
                Ok(_) => tokio::time::sleep(FOLLOW_LOOK).await,
                Err(e) => {
                    tracing::warn!(error = ?e, "a followed event stream cannot read the log; looking again soon");
                    tokio::time::sleep(FOLLOW_LOOK * 4).await;
                }
            }
        }
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

async fn page(
    app: &Shared,
    after: u64,
    owner: Option<u32>,
    limit: usize,
) -> Result<Vec<EventLogView>, ApiError> {
    let events = app
        .store
        .call(move |s| s.events_after(after, owner, limit))
        .await?;
    Ok(events.iter().map(event_view).collect())
}
