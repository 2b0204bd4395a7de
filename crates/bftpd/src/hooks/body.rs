//! The body of an event (SPEC §16): `{"schema": "bftp.event.v1", "id", "type", "created_at",
//! "job", "watch", "data"}`, rendered from what the store holds at each try, so nothing but the
//! event's row needs to be durable.
//!
//! A job's event carries the job's report as its data: the same JSON the mailed report
//! attaches (built by bftp-mail's `ReportBuilder` from the job's view and its ledger, scrubbed
//! of the job's passwords). Cut to `max_body_bytes`: members are left out from the end, and
//! the data says `"truncated": true` and how many were left out. A member's event carries the
//! member as `bftp status --json` shows it; a watch's, the watch's facts. Never a password.

use bftp_core::event::{EventKind, SCHEMA};
use bftp_core::scrub::Scrubber;
use bftp_core::Timestamp;
use bftp_store::{Event, JobStore, StoreError};
use serde_json::{json, Value};

use crate::secrets::Secrets;

/// Members read per trip to the store while a report is built.
const MEMBERS_PAGE: usize = 1024;
/// Names of delivered files a `watch.delivered` event lists at most.
const DELIVERED_NAMES: usize = 100;

/// The event's body, at most `max` bytes where it can be cut to fit. Blocking.
pub fn render(
    store: &dyn JobStore,
    secrets: &Secrets,
    ev: &Event,
    max: usize,
) -> Result<Vec<u8>, StoreError> {
    let data = match ev.kind {
        EventKind::JobFinished | EventKind::JobCancelled => job_data(store, secrets, ev)?,
        EventKind::MemberFailed => member_data(store, secrets, ev)?,
        EventKind::WatchDelivered => delivered_data(store, ev)?,
        EventKind::WatchLate => late_data(store, ev)?,
    };
    let mut doc = json!({
        "schema": SCHEMA,
        "id": ev.id,
        "type": ev.kind.as_str(),
        "created_at": ev.created_at.to_rfc3339(),
        "job": ev.job.map(|j| j.0),
        "watch": ev.watch.map(|w| w.0),
        "data": data,
    });
    let mut body = serde_json::to_vec(&doc).expect("a Value serializes");
    if body.len() > max {
        cut_to_fit(&mut doc, max);
        body = serde_json::to_vec(&doc).expect("a Value serializes");
    }
    Ok(body)
}

/// Leaves members out of a job's report (`data.job.members`) from the end until the body fits
/// `max`, then the transcript; says so in `data.truncated` and `data.members_left_out`.
fn cut_to_fit(doc: &mut Value, max: usize) {
    let size = |d: &Value| serde_json::to_vec(d).map(|v| v.len()).unwrap_or(usize::MAX);
    let total = doc["data"]["job"]["members"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    doc["data"]["truncated"] = Value::Bool(true);
    // The most members that fit, by a binary search over how many are kept.
    let (mut lo, mut hi) = (0usize, total);
    let members = doc["data"]["job"]["members"].take();
    let with = |doc: &mut Value, n: usize| {
        if let Some(a) = members.as_array() {
            doc["data"]["job"]["members"] = Value::Array(a[..n].to_vec());
            doc["data"]["members_left_out"] = json!(total - n);
        }
    };
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        with(doc, mid);
        if size(doc) <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    with(doc, lo);
    if size(doc) > max {
        if let Some(t) = doc["data"].get_mut("transcript") {
            *t = json!([]);
        }
    }
}

fn job_data(store: &dyn JobStore, secrets: &Secrets, ev: &Event) -> Result<Value, StoreError> {
    let Some(id) = ev.job else {
        return Ok(Value::Null);
    };
    let Some(job) = store.get(id)? else {
        return Ok(json!({ "gone": true }));
    };
    let history = store.history(id)?;
    let transcript = store.transcript(id)?.map(|t| t.lines).unwrap_or_default();
    let header = crate::views::job_view(&job, &[], &history);
    let clear = secrets.clear_texts(&job.spec);
    let mut builder = bftp_mail::ReportBuilder::new(header, &transcript, &clear);
    let mut from = 0;
    loop {
        let page = store.members_page(id, from, MEMBERS_PAGE)?;
        let Some(last) = page.last() else { break };
        from = last.index + 1;
        let views = crate::views::job_view(&job, &page, &[]).members;
        views.into_iter().for_each(|m| builder.push(m));
        if page.len() < MEMBERS_PAGE {
            break;
        }
    }
    let report = builder.finish();
    let mut data: Value = serde_json::from_str(&report.json).unwrap_or(Value::Null);
    // A large job's report names a gzip attachment a webhook does not carry: its members
    // are left out, and the data says so.
    if let Some(file) = data.get("members_file").cloned() {
        if !file.is_null() {
            let files = data["summary"]["files"].as_u64().unwrap_or(0);
            let listed = data["job"]["members"]
                .as_array()
                .map(|a| a.len() as u64)
                .unwrap_or(0);
            data["truncated"] = Value::Bool(true);
            data["members_left_out"] = json!(files.saturating_sub(listed));
        }
    }
    Ok(data)
}

/// `value` with every string scrubbed of `clear` (the job's passwords), or withheld.
fn scrubbed(value: Value, clear: &[String]) -> Value {
    let scrubber = Scrubber::new(clear);
    let text = serde_json::to_string(&value).expect("a Value serializes");
    let clean = scrubber.scrub(&text);
    serde_json::from_str(&clean).unwrap_or_else(
        |_| json!({ "error": "withheld: it could not be written without a secret" }),
    )
}

fn member_data(store: &dyn JobStore, secrets: &Secrets, ev: &Event) -> Result<Value, StoreError> {
    let (Some(id), Some(index)) = (ev.job, ev.member) else {
        return Ok(Value::Null);
    };
    let Some(job) = store.get(id)? else {
        return Ok(json!({ "gone": true }));
    };
    let page = store.members_page(id, index, 1)?;
    let view = crate::views::job_view(&job, &page, &[]);
    let member = view
        .members
        .into_iter()
        .next()
        .map(|m| serde_json::to_value(m).expect("plain data serializes"))
        .unwrap_or(Value::Null);
    Ok(scrubbed(
        json!({ "member": member, "job_state": view.state }),
        &secrets.clear_texts(&job.spec),
    ))
}

fn delivered_data(store: &dyn JobStore, ev: &Event) -> Result<Value, StoreError> {
    let Some(id) = ev.job else {
        return Ok(Value::Null);
    };
    let mut names = Vec::new();
    let (mut delivered, mut from) = (0u64, 0u32);
    loop {
        let page = store.members_page(id, from, MEMBERS_PAGE)?;
        let Some(last) = page.last() else { break };
        from = last.index + 1;
        for m in &page {
            if m.state == bftp_core::MemberState::Succeeded {
                delivered += 1;
                if names.len() < DELIVERED_NAMES {
                    names.push(m.name.clone());
                }
            }
        }
        if page.len() < MEMBERS_PAGE {
            break;
        }
    }
    Ok(json!({
        "delivered": delivered,
        "files": names,
        "files_left_out": delivered.saturating_sub(names.len() as u64),
    }))
}

fn late_data(store: &dyn JobStore, ev: &Event) -> Result<Value, StoreError> {
    // The id names the deadline: `watch-{watch}-late-{unix seconds}`.
    let deadline = ev
        .id
        .rsplit('-')
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|s| Timestamp(s.saturating_mul(1000)).to_rfc3339());
    let expect = match ev.watch {
        Some(w) => store.watch(w)?.and_then(|w| w.settings.expect),
        None => None,
    };
    Ok(json!({ "deadline": deadline, "expect": expect }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_too_large_keeps_the_members_that_fit_and_says_how_many_are_left_out() {
        let members: Vec<Value> = (0..100)
            .map(|i| json!({ "name": format!("file-{i:04}.csv"), "state": "succeeded" }))
            .collect();
        let mut doc = json!({
            "schema": SCHEMA,
            "data": { "job": { "id": 1, "members": members }, "transcript": ["x"] },
        });
        let full = serde_json::to_vec(&doc).unwrap().len();
        cut_to_fit(&mut doc, full / 2);
        let size = serde_json::to_vec(&doc).unwrap().len();
        assert!(size <= full / 2, "{size} > {}", full / 2);
        let kept = doc["data"]["job"]["members"].as_array().unwrap().len();
        assert!(kept > 30 && kept < 50, "{kept}");
        assert_eq!(doc["data"]["members_left_out"], json!(100 - kept));
        assert_eq!(doc["data"]["truncated"], json!(true));
        // The kept ones are the first, in order.
        assert_eq!(
            doc["data"]["job"]["members"][0]["name"],
            json!("file-0000.csv")
        );
    }
}
