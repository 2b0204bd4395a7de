//! Store records to API views. Passwords never leave as anything but `has_password`.

pub mod engine;
pub mod event;
pub mod report;
pub mod watch;

use bftp_api::{EndpointView, EventView, JobView, MemberCounts, MemberView, ReplyView, RetryView};
use bftp_core::{Endpoint, JobState, MemberState, Timestamp};
use bftp_store::{HistoryEvent, Job, JobStore, LastReply, Member, SealedEndpoint, StoreError};

use report::MailSettings;

use crate::hosts::DataPathPolicy;

/// The whole view of a job: its ledger, its history, the data path it runs with under
/// `paths` and, once final, its report. Blocking.
pub fn load_view(
    store: &dyn JobStore,
    mail: &MailSettings,
    paths: &DataPathPolicy,
    job: &Job,
) -> Result<JobView, StoreError> {
    let mut view = job_view(job, &store.members(job.id)?, &store.history(job.id)?);
    with_data_path(&mut view, job, paths);
    if matches!(job.state, JobState::Running { .. }) {
        if let Some(cluster) = store.cluster() {
            view.node = cluster.job_node(job.id)?;
        }
    }
    if job.state.is_final() {
        view.report = store
            .outbox_entry(job.id)?
            .map(|e| mail.report_view(job, &e));
    }
    view.events = store
        .events_of_job(job.id)?
        .iter()
        .map(event::event_view)
        .collect();
    Ok(view)
}

/// The view of a job `submit` has just created with `members`: what [`load_view`] would read
/// back, built without reading (a new job has its members as given and one history event).
pub fn created_view(
    job: &Job,
    members: &[bftp_store::NewMember],
    paths: &DataPathPolicy,
) -> JobView {
    let members: Vec<Member> = members
        .iter()
        .enumerate()
        .map(|(i, m)| m.as_written(i as u32, job.created_at))
        .collect();
    let mut view = job_view(job, &members, &[HistoryEvent::submitted(job.created_at)]);
    with_data_path(&mut view, job, paths);
    view
}

/// The data path `job` runs with under `paths` (what it asked for, else the default), in
/// its view. [`job_view`] alone has only what the job asked for.
fn with_data_path(view: &mut JobView, job: &Job, paths: &DataPathPolicy) {
    view.data_path = paths.effective(job.spec.data_path).as_str().to_owned();
}

fn endpoint_view(e: &SealedEndpoint) -> EndpointView {
    // Reuse the core's URL rendering, which never includes a password.
    let shown = Endpoint {
        host: e.host.clone(),
        port: e.port,
        user: e.user.clone(),
        password: None,
        acct: None,
        path: e.path.clone(),
        tls: e.tls,
    };
    EndpointView {
        host: e.host.clone(),
        port: e.port,
        user: e.user.clone(),
        path: e.path.clone(),
        has_password: e.password.is_some(),
        has_acct: e.acct.is_some(),
        url: shown.display_url(),
    }
}

fn reply_view(r: &LastReply) -> ReplyView {
    ReplyView {
        code: r.code,
        text: r.text.clone(),
    }
}

fn ts(t: Timestamp) -> String {
    t.to_rfc3339()
}

fn dur(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The members counted by state, for the view and the CLI's summary line.
fn counts(members: &[Member]) -> MemberCounts {
    let mut c = MemberCounts {
        files: u32::try_from(members.len()).unwrap_or(u32::MAX),
        ..Default::default()
    };
    for m in members {
        let n = match m.state {
            MemberState::Pending => &mut c.pending,
            MemberState::Succeeded => &mut c.succeeded,
            MemberState::FailedPermanent | MemberState::FailedRetriesExhausted => &mut c.failed,
            MemberState::Cancelled => &mut c.cancelled,
            MemberState::Uncertain => &mut c.uncertain,
            MemberState::Refused => &mut c.refused,
        };
        *n += 1;
    }
    c
}

pub fn job_view(job: &Job, members: &[Member], history: &[HistoryEvent]) -> JobView {
    let spec = &job.spec;
    let (outcome, next_attempt_at, attempt, finished_at) = match job.state {
        JobState::Queued { next_attempt_at } => (None, Some(ts(next_attempt_at)), None, None),
        JobState::Running { attempt, .. } => (None, None, Some(attempt), None),
        JobState::Finished { outcome, at } => {
            (Some(outcome.as_str().to_string()), None, None, Some(ts(at)))
        }
        JobState::Cancelled { at } => (Some("cancelled".to_string()), None, None, Some(ts(at))),
    };
    JobView {
        waiting: job.waiting.as_ref().map(|w| bftp_api::WaitingView {
            reason: w.reason.as_str().to_owned(),
            host: w.host.clone(),
            until: ts(w.until),
            text: w.text(),
        }),
        id: job.id.0,
        owner_uid: job.owner_uid,
        state: job.state.name().to_string(),
        outcome,
        next_attempt_at,
        attempt,
        attempts: job.attempts,
        created_at: ts(job.created_at),
        updated_at: ts(job.updated_at),
        finished_at,
        source: endpoint_view(&spec.source),
        destination: spec.destination.as_ref().map(endpoint_view),
        disposition: spec.disposition.as_str().to_string(),
        dest_command: spec.dest_command.as_str().to_string(),
        transfer_type: spec.params.transfer_type.ftp_arg(),
        mode: spec.params.mode.ftp_arg().to_string(),
        structure: spec.params.structure.ftp_arg().to_string(),
        start_at: ts(spec.start_at),
        retry: RetryView {
            first_interval: dur(spec.retry.first_interval),
            factor: spec.retry.factor,
            cap: dur(spec.retry.cap),
            max_attempts: spec.retry.max_attempts,
            deadline: dur(spec.retry.deadline),
        },
        // A webhook by its shown form: its query may hold the receiver's token.
        notify: spec
            .notify
            .iter()
            .map(|n| bftp_core::event::shown_entry(n))
            .collect(),
        has_keyword: job.keyword_hash.is_some(),
        proof: job.spec.proof.map(|p| p.as_str().to_owned()),
        recursive: job.spec.recursive,
        data_path: String::new(),
        data_path_asked: job.spec.data_path.map(|p| p.as_str().to_owned()),
        members: members
            .iter()
            .map(|m| MemberView {
                index: m.index,
                name: m.name.clone(),
                state: m.state.as_str().to_string(),
                attempts: m.attempts,
                size: m.size,
                bytes: m.bytes,
                source_reply: m.source_reply.as_ref().map(reply_view),
                dest_reply: m.dest_reply.as_ref().map(reply_view),
                detail: m.detail.clone(),
                updated_at: ts(m.updated_at),
                proof: m.proof.clone(),
                progress: None,
                tls: m.tls.as_ref().map(tls_view),
                route: m
                    .route
                    .as_ref()
                    .map(|r| route_view(r, m.relayed_bytes, m.stream_sha256.as_deref())),
            })
            .collect(),
        counts: counts(members),
        history: history
            .iter()
            .map(|h| EventView {
                at: ts(h.at),
                event: h.kind.clone(),
                detail: h.detail.clone(),
            })
            .collect(),
        report: None,
        node: None,
        watch: job.watch.map(|w| w.0),
        events: Vec::new(),
    }
}

/// How a copy travelled as the API shows it: fields, from which `RouteView::describe`
/// makes the line people read (a relay's `bytes` and `sha256` are bftpd's own count and
/// hash of the stream).
pub(crate) fn route_view(
    route: &bftp_core::route::Route,
    bytes: Option<u64>,
    sha256: Option<&str>,
) -> bftp_api::RouteView {
    use bftp_core::route::RelayReason;
    let reason = route.reason();
    bftp_api::RouteView {
        path: route.as_str().to_owned(),
        reason: reason.map(|r| r.kind().to_owned()),
        detail: reason.and_then(RelayReason::detail).map(str::to_owned),
        seen: match reason {
            Some(RelayReason::Remembered { seen, .. }) => Some(ts(*seen)),
            _ => None,
        },
        bytes,
        sha256: sha256.map(str::to_owned),
    }
}

/// A copy's TLS as the API shows it: fields, from which `TlsView::describe` makes the
/// sentence people read.
pub(crate) fn tls_view(t: &bftp_core::tls::CopyTls) -> bftp_api::TlsView {
    use bftp_api::{ControlTlsView, DataTlsView};
    use bftp_core::tls::{CertificateCheck as C, ControlTls};
    let control = |c: &ControlTls| match c {
        ControlTls::Clear => ControlTlsView {
            state: "clear".into(),
            ..ControlTlsView::default()
        },
        ControlTls::Tls {
            version,
            certificate,
        } => {
            let (check, ca_file, pinned_sha256) = match certificate {
                C::SystemRoots => ("system_roots", None, None),
                C::CaFile(f) => ("ca_file", Some(f.clone()), None),
                C::Pinned(p) => ("pinned", None, Some(p.clone())),
                C::Insecure => ("insecure", None, None),
            };
            ControlTlsView {
                state: "tls".into(),
                version: Some(version.clone()),
                certificate: Some(check.into()),
                ca_file,
                pinned_sha256,
            }
        }
    };
    bftp_api::TlsView {
        source: t.source.as_ref().map(control),
        destination: t.destination.as_ref().map(control),
        data: t.data.as_ref().map(|d| DataTlsView {
            encrypted: d.encrypted,
            tls_client: d.tls_client.map(|c| c.as_str().to_owned()),
            clear_reason: d.clear_reason.clone(),
        }),
    }
}

#[cfg(test)]
mod created_view_tests {
    use super::*;
    use crate::testkit::{self, T0};
    use bftp_core::RetryPolicy;
    use bftp_store::{NewMember, Submitted};

    /// The answer a submit builds without reading is what a read right after it returns.
    #[test]
    fn a_created_jobs_view_is_what_a_read_returns() {
        let (_dir, store) = testkit::store();
        let id = testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let mut new = template(&*store, id);
        new.created_at = Timestamp(T0.0 + 5);
        new.members = vec![
            NewMember {
                name: "ok.bin".into(),
                size: Some(7),
                modified: Some("20261201120000".into()),
                refused: None,
            },
            NewMember {
                name: "bad\x0aname".into(),
                size: None,
                modified: None,
                refused: Some("the name holds a line feed".into()),
            },
        ];
        new.keyword_hash = Some(bftp_store::KeyHash([3; 32]));
        let members = new.members.clone();
        let Submitted::Created(job) = store.submit(new).unwrap() else {
            panic!("not created")
        };
        let mail = report::MailSettings::new(&bftp_mail::MailConfig::default());
        let paths = DataPathPolicy::default();
        assert_eq!(
            created_view(&job, &members, &paths),
            load_view(&*store, &mail, &paths, &job).unwrap()
        );
    }

    /// Issue 29: a member's view says how its last copy travelled, from the stored fields;
    /// a member no copy touched has no route.
    #[test]
    fn a_members_view_says_how_its_copy_travelled() {
        use bftp_core::route::{RelayReason, Route};
        let (_dir, store) = testkit::store();
        let id = testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let job = store.get(id).unwrap().unwrap();
        let m = store.members(id).unwrap().remove(0);
        let view = |m: &bftp_store::Member| {
            job_view(&job, std::slice::from_ref(m), &[]).members[0]
                .route
                .clone()
        };
        assert_eq!(view(&m), None);
        let relayed = bftp_store::Member {
            route: Some(Route::Relay(RelayReason::Remembered {
                reply: "425 Can't open data connection.".into(),
                seen: T0,
            })),
            relayed_bytes: Some(4096),
            stream_sha256: Some("ab".repeat(32)),
            ..m.clone()
        };
        assert_eq!(
            view(&relayed),
            Some(bftp_api::RouteView {
                path: "relay".into(),
                reason: Some("remembered".into()),
                detail: Some("425 Can't open data connection.".into()),
                seen: Some(T0.to_rfc3339()),
                bytes: Some(4096),
                sha256: Some("ab".repeat(32)),
            })
        );
        let swapped = bftp_store::Member {
            route: Some(Route::FxpRolesSwapped),
            ..m
        };
        assert_eq!(
            view(&swapped).map(|r| r.describe()).as_deref(),
            Some("fxp roles swapped")
        );
    }

    /// Issue 29: the view names the path the job runs with now, what it asked for apart: a
    /// job that asked for none follows the daemon's default (and a change of it).
    #[test]
    fn the_view_names_the_data_path() {
        use bftp_core::route::DataPath;
        let (_dir, store) = testkit::store();
        let id = testkit::submit_one_file_job(&*store, RetryPolicy::default());
        let mut asked = template(&*store, id);
        asked.spec.data_path = Some(DataPath::Relay);
        let relay_job = store.submit(asked).unwrap().job().clone();
        let default_job = store.get(id).unwrap().unwrap();
        let mail = report::MailSettings::new(&bftp_mail::MailConfig::default());
        let view = |job: &Job, paths: DataPathPolicy| {
            let v = load_view(&*store, &mail, &paths, job).unwrap();
            (v.data_path, v.data_path_asked)
        };
        let on = DataPathPolicy::default();
        let fxp = DataPathPolicy {
            default: DataPath::Fxp,
            ..on
        };
        let off = DataPathPolicy {
            relay_allowed: false,
            ..on
        };
        let s = |w: &str| w.to_string();
        assert_eq!(view(&default_job, on), (s("auto"), None));
        assert_eq!(view(&default_job, fxp), (s("fxp"), None));
        assert_eq!(view(&relay_job, on), (s("relay"), Some(s("relay"))));
        assert_eq!(view(&relay_job, off), (s("fxp"), Some(s("relay"))));
        let json =
            serde_json::to_value(load_view(&*store, &mail, &on, &default_job).unwrap()).unwrap();
        assert_eq!(json["data_path"], "auto", "{json}");
        assert!(json.get("data_path_asked").is_none(), "{json}");
    }

    /// A job like `id`, to submit again as a new one.
    fn template(store: &dyn JobStore, id: bftp_store::JobId) -> bftp_store::NewJob {
        let job = store.get(id).unwrap().unwrap();
        bftp_store::NewJob {
            watch: None,
            owner_uid: job.owner_uid,
            spec: job.spec,
            keyword_hash: None,
            request: None,
            created_at: job.created_at,
            members: vec![],
        }
    }
}
