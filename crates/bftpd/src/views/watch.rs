//! A watch as the API shows it: from the stored watch alone, never a password.

use bftp_api::{ReadyView, WatchNoteView, WatchView};
use bftp_core::watch::Ready;
use bftp_store::Watch;

use super::{dur, endpoint_view, ts};

pub fn watch_view(w: &Watch) -> WatchView {
    let spec = &w.spec;
    let s = &w.settings;
    let st = &w.status;
    let ms = std::time::Duration::from_millis;
    WatchView {
        id: w.id.0,
        owner_uid: w.owner_uid,
        state: if w.paused { "paused" } else { "active" }.into(),
        created_at: ts(w.created_at),
        source: endpoint_view(&spec.source),
        destination: spec
            .destination
            .as_ref()
            .map(endpoint_view)
            .unwrap_or_else(|| endpoint_view(&spec.source)),
        every: dur(ms(s.every_ms)),
        patterns: s.patterns.clone(),
        recursive: s.recursive,
        settle: dur(ms(s.settle_ms)),
        ignore: s.ignore.clone(),
        ready: s.ready.as_ref().map(|r| match r {
            Ready::Beside(name) => ReadyView {
                kind: "beside".into(),
                name: name.clone(),
            },
            Ready::Suffix(name) => ReadyView {
                kind: "suffix".into(),
                name: name.clone(),
            },
        }),
        disposition: spec.disposition.to_string(),
        dest_command: spec.dest_command.to_string(),
        // A webhook by its shown form: its query may hold the receiver's token.
        notify: spec
            .notify
            .iter()
            .map(|n| bftp_core::event::shown_entry(n))
            .collect(),
        notify_on: s.notify_on.clone(),
        expect: s.expect.clone(),
        digest: s.digest,
        last_digest_at: st.last_digest.map(ts),
        has_keyword: spec.keyword_present,
        proof: spec.proof.map(|p| p.as_str().to_owned()),
        data_path_asked: spec.data_path.map(|p| p.as_str().to_owned()),
        polls: st.polls,
        last_poll_at: st.last_poll.map(ts),
        next_poll_at: (!w.paused).then(|| ts(st.next_poll)),
        last_error: st.last_error.clone(),
        current_job: st.current_job.map(|j| j.0),
        jobs: st.jobs.iter().map(|j| j.0).collect(),
        delivered: st.delivered,
        failed: st.failed,
        repeats: st.repeats,
        waiting: st.waiting,
        ignored: st.ignored,
        refused: st.refused,
        last_delivery_at: st.last_delivery.map(ts),
        notes: st
            .notes
            .iter()
            .map(|n| WatchNoteView {
                path: n.path.clone(),
                kind: n.kind.clone(),
                detail: n.detail.clone(),
            })
            .collect(),
        node: None,
    }
}
