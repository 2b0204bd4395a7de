//! `bftp events`: the event log of the caller's jobs and watches (issue 31), each event with
//! its webhook deliveries; `--follow` keeps reading as events are written (server-sent events
//! over the socket). `--json`: one JSON object per line, an event's view as bftpd sends it.

use bftp_api::{EventLogPage, EventLogView, API_PREFIX};
use clap::Args;

use crate::client::{path_with_query, Client};
use crate::exit::Exit;
use crate::output::{delivery_line, emit, sanitize};
use crate::transfer::Lines;

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Keep reading: print events as they are written, until interrupted
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only events after this sequence number (the `seq` of the last one seen)
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub after: u64,
    /// Every user's events (root and the admin group only)
    #[arg(long)]
    pub all: bool,
}

/// The longest event line accepted from a followed stream.
const MAX_LINE: usize = 4 << 20;

fn path(args: &EventsArgs, after: u64, follow: bool) -> String {
    let mut q = vec![("after", after.to_string())];
    if args.all {
        q.push(("all", "true".into()));
    }
    if follow {
        q.push(("follow", "true".into()));
    }
    path_with_query(&format!("{API_PREFIX}/events"), &q)
}

/// An event in one line (then a line per delivery), from the fields `--json` shows.
pub fn event_text(e: &EventLogView) -> String {
    let mut about = Vec::new();
    if let Some(j) = e.job {
        about.push(format!("job {j}"));
    }
    if let Some(m) = e.member {
        about.push(format!("file {m}"));
    }
    if let Some(w) = e.watch {
        about.push(format!("watch {w}"));
    }
    let mut out = format!(
        "{:>6}  {}  {:<15}  {}  ({})\n",
        e.seq,
        sanitize(&e.created_at),
        sanitize(&e.kind),
        sanitize(&e.id),
        about.join(", ")
    );
    for d in &e.deliveries {
        out.push_str(&format!("        webhook {}\n", delivery_line(e, d)));
    }
    out
}

fn line(e: &EventLogView, json: bool) -> String {
    if json {
        let mut l = serde_json::to_string(e).expect("plain data serializes");
        l.push('\n');
        l
    } else {
        event_text(e)
    }
}

pub async fn run(client: &Client, args: &EventsArgs, json: bool) -> anyhow::Result<Exit> {
    let mut after = args.after;
    // The log so far, a page at a time.
    loop {
        let page = client
            .get::<EventLogPage>(&path(args, after, false))
            .await?
            .value;
        let Some(last) = page.events.last() else {
            break;
        };
        after = last.seq;
        let text: String = page.events.iter().map(|e| line(e, json)).collect();
        emit(&text)?;
    }
    if !args.follow {
        return Ok(Exit::Success);
    }
    let mut stream = client
        .get_streaming(&path(args, after, true), "text/event-stream")
        .await?;
    let mut lines = Lines::new(MAX_LINE);
    while let Some(chunk) = stream.next_chunk().await? {
        for l in lines.push(&chunk)? {
            let Some(data) = l.strip_prefix(b"data:") else {
                continue;
            };
            let data = data.strip_prefix(b" ").unwrap_or(data);
            let e: EventLogView = serde_json::from_slice(data)?;
            emit(&line(&e, json))?;
        }
    }
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_api::DeliveryView;

    #[test]
    fn an_event_is_a_line_and_a_line_per_delivery() {
        let e = EventLogView {
            seq: 12,
            id: "job-7-member-2-failed".into(),
            kind: "member.failed".into(),
            created_at: "2026-12-01T07:10:00Z".into(),
            job: Some(7),
            watch: None,
            member: Some(2),
            owner_uid: 1000,
            deliveries: vec![DeliveryView {
                target: "https://h.example/in".into(),
                state: "pending".into(),
                tries: 1,
                next_try_at: Some("2026-12-01T07:10:05Z".into()),
                at: None,
                last_error: Some("HTTP 503".into()),
            }],
        };
        assert_eq!(
            event_text(&e),
            "    12  2026-12-01T07:10:00Z  member.failed    job-7-member-2-failed  (job 7, file 2)\n        \
             webhook member.failed to https://h.example/in: pending after 1 try: HTTP 503, next try 2026-12-01T07:10:05Z\n"
        );
        let j = line(&e, true);
        assert!(j.ends_with('\n') && j.matches('\n').count() == 1, "{j}");
        assert_eq!(serde_json::from_str::<EventLogView>(&j).unwrap(), e);
    }
}
