//! What `bftp watch` prints for people, from the fields of bftpd's [`WatchView`] only; every
//! text that came from bftpd or a server is [`sanitize`]d.

use std::time::SystemTime;

use bftp_api::{ReadyView, WatchView};

use crate::output::{endpoint, sanitize, table, when};

/// `active`, `paused`, with `, failing` when the last poll could not list or make its job.
fn state(w: &WatchView) -> String {
    let mut s = sanitize(&w.state);
    if w.last_error.is_some() {
        s.push_str(", failing");
    }
    s
}

fn time(t: &Option<String>, now: Option<SystemTime>) -> String {
    t.as_deref().map_or("-".to_string(), |t| when(t, now))
}

fn words(list: &[String]) -> String {
    if list.is_empty() {
        "-".to_string()
    } else {
        sanitize(&list.join(", "))
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

fn ready(r: &Option<ReadyView>) -> String {
    match r {
        None => "-".to_string(),
        Some(r) => match r.kind.as_str() {
            "beside" => format!(
                "once a file named {} is in the file's directory",
                sanitize(&r.name)
            ),
            "suffix" => format!("once F{} exists beside each file F", sanitize(&r.name)),
            kind => sanitize(&format!("{kind} {}", r.name)),
        },
    }
}

pub fn list(watches: &[WatchView]) -> String {
    list_at(watches, Some(SystemTime::now()))
}

/// [`list`], with times relative to `now` beside the absolute ones (none for `None`).
pub fn list_at(watches: &[WatchView], now: Option<SystemTime>) -> String {
    if watches.is_empty() {
        return "no watches\n".to_string();
    }
    let rows: Vec<Vec<String>> = watches
        .iter()
        .map(|w| {
            vec![
                w.id.to_string(),
                state(w),
                sanitize(&w.every),
                sanitize(&w.source.url),
                sanitize(&w.destination.url),
                w.delivered.to_string(),
                w.waiting.to_string(),
                time(&w.last_poll_at, now),
                time(&w.next_poll_at, now),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "STATE",
            "EVERY",
            "SOURCE",
            "DESTINATION",
            "DELIVERED",
            "WAITING",
            "LAST POLL",
            "NEXT POLL",
        ],
        &rows,
    )
}

pub fn detail(w: &WatchView) -> String {
    detail_at(w, Some(SystemTime::now()))
}

/// [`detail`], with times relative to `now` beside the absolute ones (none for `None`).
// Long on purpose: the layout of `bftp watch show ID` from top to bottom.
pub fn detail_at(w: &WatchView, now: Option<SystemTime>) -> String {
    let patterns = if w.patterns.is_empty() {
        "* (every name not starting with a dot)".to_string()
    } else {
        words(&w.patterns)
    };
    let mut fields: Vec<(&str, String)> = vec![
        ("state", state(w)),
        ("source", endpoint(&w.source)),
        ("destination", endpoint(&w.destination)),
        ("every", sanitize(&w.every)),
        ("patterns", patterns),
        ("recursive", yes_no(w.recursive)),
        ("settle", sanitize(&w.settle)),
        ("ignore", words(&w.ignore)),
        ("ready", ready(&w.ready)),
        (
            "transfer",
            sanitize(&format!("{}, {}", w.disposition, w.dest_command)),
        ),
        ("notify", words(&w.notify)),
        ("notify on", sanitize(&w.notify_on)),
        ("expect", w.expect.as_deref().map_or("-".into(), sanitize)),
        (
            "digest",
            match (w.digest, &w.last_digest_at) {
                (false, _) => "no".into(),
                (true, None) => "daily".into(),
                (true, Some(at)) => format!("daily, last {}", sanitize(at)),
            },
        ),
        ("keyword", yes_no(w.has_keyword)),
        (
            "proof",
            match &w.proof {
                Some(p) => format!("at least {}", sanitize(p)),
                None => "the strongest the servers allow".to_string(),
            },
        ),
        (
            "data path",
            w.data_path_asked
                .as_deref()
                .map_or("default".to_string(), sanitize),
        ),
        ("owner uid", w.owner_uid.to_string()),
        ("created", when(&w.created_at, now)),
    ];
    if let Some(node) = &w.node {
        // Several nodes on one store: which one polls it.
        fields.push(("node", sanitize(node)));
    }
    let jobs: Vec<String> = w.jobs.iter().map(u64::to_string).collect();
    fields.extend([
        ("polls", w.polls.to_string()),
        ("last poll", time(&w.last_poll_at, now)),
        ("next poll", time(&w.next_poll_at, now)),
        (
            "last error",
            w.last_error.as_deref().map_or("-".into(), sanitize),
        ),
        (
            "current job",
            w.current_job.map_or("-".into(), |j| j.to_string()),
        ),
        ("jobs", words(&jobs)),
        ("delivered", w.delivered.to_string()),
        ("failed", w.failed.to_string()),
        ("repeats", w.repeats.to_string()),
        ("waiting", w.waiting.to_string()),
        ("ignored", w.ignored.to_string()),
        ("refused", w.refused.to_string()),
        ("last delivery", time(&w.last_delivery_at, now)),
    ]);
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!("watch {}\n", w.id);
    for (k, v) in &fields {
        out.push_str(&format!("  {k:<width$}  {v}\n"));
    }
    if !w.notes.is_empty() {
        out.push_str(&format!(
            "\nnot taken at the last poll ({}):\n",
            w.notes.len()
        ));
        for n in &w.notes {
            let detail = match n.kind.as_str() {
                // When the file may be taken.
                "settling" => when(&n.detail, now),
                _ => sanitize(&n.detail),
            };
            let line = format!("{}: {}", sanitize(&n.path), sanitize(&n.kind));
            if detail.is_empty() {
                out.push_str(&format!("  {line}\n"));
            } else {
                out.push_str(&format!("  {line} {detail}\n"));
            }
        }
    }
    out
}

/// After `add`: the watch, where it copies, and its first poll.
pub fn added(w: &WatchView) -> String {
    added_at(w, Some(SystemTime::now()))
}

fn added_at(w: &WatchView, now: Option<SystemTime>) -> String {
    let mut out = format!(
        "watch {} added: {}, every {}\n",
        w.id,
        state(w),
        sanitize(&w.every)
    );
    out.push_str(&format!(
        "  {} → {}\n",
        sanitize(&w.source.url),
        sanitize(&w.destination.url)
    ));
    if let Some(next) = &w.next_poll_at {
        out.push_str(&format!("  next poll {}\n", when(next, now)));
    }
    out
}

/// After `pause` or `resume`.
pub fn state_changed(w: &WatchView) -> String {
    state_changed_at(w, Some(SystemTime::now()))
}

fn state_changed_at(w: &WatchView, now: Option<SystemTime>) -> String {
    match (&w.next_poll_at, w.state.as_str()) {
        (Some(next), "active") => format!(
            "watch {}: {}, next poll {}\n",
            w.id,
            state(w),
            when(next, now)
        ),
        _ => format!("watch {}: {}\n", w.id, state(w)),
    }
}

/// After `remove`.
pub fn removed(id: u64) -> String {
    format!("watch {id} removed; the jobs it made stay\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bftp_api::{EndpointView, WatchNoteView};

    pub(crate) fn view(id: u64) -> WatchView {
        let ep = |host: &str, path: &str, has_password: bool| EndpointView {
            host: host.into(),
            port: 21,
            user: "alice".into(),
            path: path.into(),
            has_password,
            has_acct: false,
            url: format!("ftp://alice@{host}:21/{path}"),
        };
        WatchView {
            id,
            owner_uid: 1000,
            state: "active".into(),
            created_at: "2026-12-01T07:00:00Z".into(),
            source: ep("src", "in", true),
            destination: ep("dst", "out", false),
            every: "10m".into(),
            patterns: vec!["*.csv".into()],
            recursive: false,
            settle: "30s".into(),
            ignore: vec!["*.part".into(), "*.tmp".into()],
            ready: None,
            disposition: "copy".into(),
            dest_command: "replace".into(),
            notify: vec!["alice@example.org".into()],
            notify_on: "failure".into(),
            expect: None,
            digest: false,
            last_digest_at: None,
            has_keyword: false,
            proof: None,
            data_path_asked: None,
            polls: 12,
            last_poll_at: Some("2026-12-01T07:50:00Z".into()),
            next_poll_at: Some("2026-12-01T08:00:00Z".into()),
            last_error: None,
            current_job: None,
            jobs: vec![4, 9],
            delivered: 40,
            failed: 1,
            repeats: 2,
            waiting: 3,
            ignored: 5,
            refused: 0,
            last_delivery_at: Some("2026-12-01T07:40:00Z".into()),
            notes: vec![],
            node: None,
        }
    }

    #[test]
    fn list_table() {
        let mut paused = view(8);
        paused.state = "paused".into();
        paused.next_poll_at = None;
        paused.last_poll_at = None;
        paused.last_error = Some("530 Login incorrect.\r\n".into());
        paused.destination.url = "ftp://alice@dst:21/\x1b[2Jout".into();
        let t = list_at(&[view(7), paused], None);
        let want = "\
ID  STATE            EVERY  SOURCE                 DESTINATION                      DELIVERED  WAITING  LAST POLL             NEXT POLL
7   active           10m    ftp://alice@src:21/in  ftp://alice@dst:21/out           40         3        2026-12-01T07:50:00Z  2026-12-01T08:00:00Z
8   paused, failing  10m    ftp://alice@src:21/in  ftp://alice@dst:21/\\u{1b}[2Jout  40         3        -                     -
";
        assert_eq!(t, want);
        assert_eq!(list(&[]), "no watches\n");
    }

    #[test]
    fn list_times_are_relative_to_now() {
        let now = humantime::parse_rfc3339("2026-12-01T07:59:00Z").unwrap();
        let t = list_at(&[view(7)], Some(now));
        assert!(
            t.contains("2026-12-01T07:50:00Z (9 min ago)  2026-12-01T08:00:00Z (in 60 s)"),
            "{t}"
        );
    }

    #[test]
    fn detail_shows_every_field() {
        let mut w = view(7);
        w.recursive = true;
        w.ready = Some(ReadyView {
            kind: "suffix".into(),
            name: ".done".into(),
        });
        w.disposition = "move".into();
        w.expect = Some("daily 05:00".into());
        w.has_keyword = true;
        w.proof = Some("hash".into());
        w.data_path_asked = Some("relay".into());
        w.last_error = Some("550 in: No such directory\r\n\x1b[31m".into());
        w.current_job = Some(9);
        w.node = Some("node-a".into());
        let d = detail_at(&w, None);
        let want = "\
watch 7
  state          active, failing
  source         ftp://alice@src:21/in (password set)
  destination    ftp://alice@dst:21/out
  every          10m
  patterns       *.csv
  recursive      yes
  settle         30s
  ignore         *.part, *.tmp
  ready          once F.done exists beside each file F
  transfer       move, replace
  notify         alice@example.org
  notify on      failure
  expect         daily 05:00
  digest         no
  keyword        yes
  proof          at least hash
  data path      relay
  owner uid      1000
  created        2026-12-01T07:00:00Z
  node           node-a
  polls          12
  last poll      2026-12-01T07:50:00Z
  next poll      2026-12-01T08:00:00Z
  last error     550 in: No such directory\\r\\n\\u{1b}[31m
  current job    9
  jobs           4, 9
  delivered      40
  failed         1
  repeats        2
  waiting        3
  ignored        5
  refused        0
  last delivery  2026-12-01T07:40:00Z
";
        assert_eq!(d, want);
    }

    #[test]
    fn detail_defaults_and_notes() {
        let now = humantime::parse_rfc3339("2026-12-01T07:59:40Z").unwrap();
        let mut w = view(3);
        w.patterns.clear();
        w.ignore.clear();
        w.notify.clear();
        w.jobs.clear();
        w.last_delivery_at = None;
        w.ready = Some(ReadyView {
            kind: "beside".into(),
            name: "READY".into(),
        });
        let note = |path: &str, kind: &str, detail: &str| WatchNoteView {
            path: path.into(),
            kind: kind.into(),
            detail: detail.into(),
        };
        w.notes = vec![
            note("a.csv", "settling", "2026-12-01T08:00:00Z"),
            note("sub/b.csv", "no_marker", "READY"),
            note("c.part", "ignored", "*.part"),
            note("bad\\rname", "refused", "name contains the byte 0x0d\r\n"),
            note("link", "skipped", ""),
        ];
        let d = detail_at(&w, Some(now));
        for line in [
            "  patterns       * (every name not starting with a dot)\n",
            "  ignore         -\n",
            "  notify         -\n",
            "  jobs           -\n",
            "  last delivery  -\n",
            "  expect         -\n",
            "  digest         no\n",
            "  keyword        no\n",
            "  proof          the strongest the servers allow\n",
            "  data path      default\n",
            "  current job    -\n",
            "  last error     -\n",
            "  ready          once a file named READY is in the file's directory\n",
            "  last poll      2026-12-01T07:50:00Z (9 min ago)\n",
            "\nnot taken at the last poll (5):\n\
             \x20 a.csv: settling 2026-12-01T08:00:00Z (in 20 s)\n\
             \x20 sub/b.csv: no_marker READY\n\
             \x20 c.part: ignored *.part\n\
             \x20 bad\\rname: refused name contains the byte 0x0d\\r\\n\n\
             \x20 link: skipped\n",
        ] {
            assert!(d.contains(line), "{line:?} not in\n{d}");
        }
        assert!(!d.contains("node"), "{d}");
        assert!(!d.contains('\r') && !d.contains('\x1b'), "{d}");
    }

    #[test]
    fn after_a_change() {
        let w = view(7);
        assert_eq!(
            added_at(&w, None),
            "watch 7 added: active, every 10m\n  ftp://alice@src:21/in → ftp://alice@dst:21/out\n  next poll 2026-12-01T08:00:00Z\n"
        );
        assert_eq!(
            state_changed_at(&w, None),
            "watch 7: active, next poll 2026-12-01T08:00:00Z\n"
        );
        let mut p = w.clone();
        p.state = "paused".into();
        assert_eq!(state_changed_at(&p, None), "watch 7: paused\n");
        assert_eq!(removed(7), "watch 7 removed; the jobs it made stay\n");
    }
}
