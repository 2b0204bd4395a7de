//! The event log's records to their views (issue 31): a target is shown without its query.

use bftp_api::{DeliveryView, EventLogView};
use bftp_store::{Event, OutboxState};

pub fn event_view(e: &Event) -> EventLogView {
    EventLogView {
        seq: e.seq,
        id: e.id.clone(),
        kind: e.kind.as_str().to_string(),
        created_at: e.created_at.to_rfc3339(),
        job: e.job.map(|j| j.0),
        watch: e.watch.map(|w| w.0),
        member: e.member,
        owner_uid: e.owner_uid,
        deliveries: e
            .deliveries
            .iter()
            .map(|d| DeliveryView {
                target: bftp_core::event::shown_entry(&d.target),
                state: d.state.as_str().to_string(),
                tries: d.tries,
                next_try_at: match d.state {
                    OutboxState::Pending => d.next_try_at.map(|t| t.to_rfc3339()),
                    _ => None,
                },
                at: match d.state {
                    OutboxState::Delivered { at } | OutboxState::GaveUp { at } => {
                        Some(at.to_rfc3339())
                    }
                    OutboxState::Pending => None,
                },
                last_error: d.last_error.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::event::EventKind;
    use bftp_core::Timestamp;
    use bftp_store::{EventDelivery, JobId};

    #[test]
    fn a_delivery_shows_its_target_without_the_query_and_where_it_stands() {
        let t = Timestamp(1_800_000_000_000);
        let e = Event {
            seq: 3,
            id: "job-7-final".into(),
            kind: EventKind::JobFinished,
            job: Some(JobId(7)),
            watch: None,
            member: None,
            owner_uid: 1000,
            created_at: t,
            due: None,
            deliveries: vec![
                EventDelivery {
                    target: "https://h.example/in?token=s3cret".into(),
                    state: OutboxState::GaveUp { at: t },
                    tries: 4,
                    next_try_at: None,
                    last_error: Some("HTTP 500 (gave up after 4 tries)".into()),
                    updated_at: t,
                },
                EventDelivery {
                    target: "http://o.example:8080/x".into(),
                    state: OutboxState::Pending,
                    tries: 1,
                    next_try_at: Some(t),
                    last_error: Some("timed out".into()),
                    updated_at: t,
                },
            ],
        };
        let v = event_view(&e);
        assert_eq!(
            (v.kind.as_str(), v.job, v.seq),
            ("job.finished", Some(7), 3)
        );
        let d = &v.deliveries;
        assert_eq!(d[0].target, "https://h.example/in");
        assert!(!serde_json::to_string(&v).unwrap().contains("s3cret"));
        assert_eq!((d[0].state.as_str(), d[0].tries), ("gave_up", 4));
        assert_eq!(d[0].at.as_deref(), Some("2027-01-15T08:00:00Z"));
        assert_eq!(d[1].next_try_at.as_deref(), Some("2027-01-15T08:00:00Z"));
        assert_eq!(d[1].target, "http://o.example:8080/x");
    }
}
