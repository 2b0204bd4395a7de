//! `GET /v1/hosts`: each host's configured and learned connection limit, why, and this node's
//! connections there (RULES.md §16.3). Owner-scoped: an admin sees every host the node knows;
//! another user the hosts named by their own jobs and watches.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::{Extension, Json};
use bftp_api::{BreakerView, HostList, HostView, LearnedLimitView};
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
    let mut states = app.hosts.host_states();
    let breakers = app
        .gates
        .as_ref()
        .map(|g| g.breaker.breaker_view())
        .unwrap_or_default();
    // A server that is down may never have been connected to: its host is known by its breaker.
    for b in &breakers {
        let host = breaker_host(&b.host);
        if !states.iter().any(|s| s.host == host) {
            states.push(app.hosts.host_state(host));
        }
    }
    states.sort_by(|a, b| a.host.cmp(&b.host));
    let hosts = if caller.admin {
        states.into_iter().map(|s| view(&s, &breakers)).collect()
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
                view(&state, &breakers)
            })
            .collect()
    };
    Ok(Json(HostList { hosts }))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The host of a breaker's `host:port` (an IPv6 address keeps its brackets off).
fn breaker_host(server: &str) -> &str {
    let host = server.rsplit_once(':').map_or(server, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A host's view, never a password (the reply was masked by the session that read it), with
/// the breakers of its servers.
pub fn view(s: &HostState, breakers: &[crate::hosts::breaker::BreakerView]) -> HostView {
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
        breakers: breakers
            .iter()
            .filter(|b| breaker_host(&b.host) == s.host)
            .map(|b| BreakerView {
                server: b.host.clone(),
                state: b.state.to_owned(),
                since: b.since.to_rfc3339(),
                last_error: b.last_error.clone(),
                next_probe: b.next_probe.map(|t| t.to_rfc3339()),
                probes: b.probes,
                waiting: count(b.waiting),
            })
            .collect(),
    }
}
