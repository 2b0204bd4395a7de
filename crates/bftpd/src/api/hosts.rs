//! `GET /v1/hosts`: each host's configured and learned connection limit, why, and this node's
//! connections there (RULES.md §16.3). Owner-scoped: an admin sees every host the node knows;
//! another user the hosts named by their own jobs and watches.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::{Extension, Json};
use bftp_api::{HostList, HostView, LearnedLimitView};
use bftp_store::JobFilter;

use super::{ApiError, Shared};
use crate::api::identity::Caller;
use crate::hosts::HostState;

/// The most of a user's jobs whose hosts are looked at.
const JOBS_LOOKED_AT: usize = 10_000;

pub async fn list(
    State(app): State<Shared>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<HostList>, ApiError> {
    let states = app.hosts.host_states();
    let hosts = if caller.admin {
        states.into_iter().map(|s| view(&s)).collect()
    } else {
        let uid = caller.uid;
        let named: BTreeSet<String> = app
            .store
            .call(move |s| {
                let mut named = BTreeSet::new();
                let filter = JobFilter {
                    owner: Some(uid),
                    limit: Some(JOBS_LOOKED_AT),
                    ..Default::default()
                };
                let specs = s.list(&filter)?.into_iter().map(|j| j.spec);
                let watched = s.watches(Some(uid))?.into_iter().map(|w| w.spec);
                for spec in specs.chain(watched) {
                    named.insert(spec.source.host.to_ascii_lowercase());
                    if let Some(d) = &spec.destination {
                        named.insert(d.host.to_ascii_lowercase());
                    }
                }
                Ok(named)
            })
            .await?;
        named
            .into_iter()
            .map(|host| {
                let state = states
                    .iter()
                    .find(|s| s.host == host)
                    .cloned()
                    .unwrap_or_else(|| app.hosts.host_state(&host));
                view(&state)
            })
            .collect()
    };
    Ok(Json(HostList { hosts }))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A host's view, never a password (the reply was masked by the session that read it).
pub fn view(s: &HostState) -> HostView {
    let learned = s.learned.as_ref().map(|l| LearnedLimitView {
        limit: l.limit,
        reply: l.reply.clone(),
        learned_at: l.learned_at.to_rfc3339(),
        refused_at: l.refused_at.to_rfc3339(),
        raises_at: s.raises_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
    });
    HostView {
        host: s.host.clone(),
        configured_limit: count(s.configured),
        limit: count(bftp_core::hostlimit::effective(
            s.configured,
            s.learned.as_ref(),
        )),
        learned,
        in_use: count(s.in_use),
        breaker: None,
    }
}
