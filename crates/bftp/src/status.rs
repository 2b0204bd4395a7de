//! `bftp status`: one job with its per-file ledger, or a table of the caller's jobs; with
//! `--watch`, again at every interval until the job is final (or Ctrl-C).

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use bftp_api::{JobList, JobView, API_PREFIX};
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use crate::client::{path_with_query, Client};
use crate::exit::Exit;
use crate::output;

/// The shortest `--interval`: each look is a request to bftpd.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

fn interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. 2s, 500ms, 1m)"))?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "at least {}",
            humantime::format_duration(MIN_INTERVAL)
        ));
    }
    Ok(d)
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Show this job with its files and history
    #[arg(value_name = "ID", conflicts_with_all = ["keyword", "state", "all"])]
    pub id: Option<u64>,

    /// Only the jobs submitted with this keyword
    #[arg(long, value_name = "K")]
    pub keyword: Option<String>,

    /// Only jobs in this state: queued, running, finished or cancelled
    #[arg(long, value_name = "S")]
    pub state: Option<String>,

    /// Every user's jobs (root and bftpd's admin group only)
    #[arg(long)]
    pub all: bool,

    /// Show it again whenever it changes: one job until it is final (then exit 0), a list
    /// until Ctrl-C (exit 130). On a terminal the screen is redrawn; otherwise each change
    /// is printed after the last (under --json: one compact JSON document per line)
    #[arg(long)]
    pub watch: bool,

    /// How often --watch asks bftpd
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = interval, requires = "watch")]
    pub interval: Duration,
}

impl StatusArgs {
    /// The request path: `/v1/jobs/{id}`, or `/v1/jobs` with the filters as a query.
    pub fn path(&self) -> String {
        if let Some(id) = self.id {
            return format!("{API_PREFIX}/jobs/{id}");
        }
        let mut q = Vec::new();
        if let Some(k) = &self.keyword {
            q.push(("keyword", k.clone()));
        }
        if let Some(s) = &self.state {
            q.push(("state", s.clone()));
        }
        if self.all {
            q.push(("all", "true".to_string()));
        }
        path_with_query(&format!("{API_PREFIX}/jobs"), &q)
    }
}

/// The text to print.
pub async fn run(client: &Client, args: &StatusArgs, json: bool) -> anyhow::Result<String> {
    let format = if json { Format::Pretty } else { Format::Text };
    Ok(look(client, args, format).await?.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    /// bftpd's JSON, indented.
    Pretty,
    /// bftpd's JSON on one line.
    Line,
}

impl Format {
    fn json(self, raw: &[u8]) -> anyhow::Result<String> {
        match self {
            Format::Line => output::json_line(raw),
            _ => output::pretty_json(raw),
        }
    }
}

/// One look: the text, and whether the job is final.
async fn look(
    client: &Client,
    args: &StatusArgs,
    format: Format,
) -> anyhow::Result<(String, bool)> {
    let (text, _, done) = look_keyed(client, args, format).await?;
    Ok((text, done))
}

/// One look: the text; what `--watch` compares to tell a change (the text without the
/// relative times, which change every second by themselves); whether the job is final.
async fn look_keyed(
    client: &Client,
    args: &StatusArgs,
    format: Format,
) -> anyhow::Result<(String, String, bool)> {
    let path = args.path();
    if let Some(id) = args.id {
        let reply = client
            .get::<JobView>(&path)
            .await
            .with_context(|| format!("job {id}"))?;
        let (text, key) = match format {
            Format::Text => (
                output::job_detail(&reply.value),
                output::job_detail_at(&reply.value, None),
            ),
            json => {
                let t = json.json(&reply.raw)?;
                (t.clone(), t)
            }
        };
        let done = matches!(reply.value.state.as_str(), "finished" | "cancelled");
        return Ok((text, key, done));
    }
    let reply = client.get::<JobList>(&path).await.context("listing jobs")?;
    let (text, key) = match format {
        Format::Text => (
            output::job_list(&reply.value.jobs),
            output::job_list_at(&reply.value.jobs, None),
        ),
        json => {
            let t = json.json(&reply.raw)?;
            (t.clone(), t)
        }
    };
    Ok((text, key, false))
}

/// `--watch`: prints each look that differs from the one before, until the job is final
/// (exit 0) or Ctrl-C (exit 130).
pub async fn watch(client: &Client, args: &StatusArgs, json: bool) -> anyhow::Result<Exit> {
    let mut interrupt = signal(SignalKind::interrupt()).context("catching Ctrl-C")?;
    let ctrl_c = async move {
        interrupt.recv().await;
    };
    // A redrawn screen on a terminal; for a pipe or a file, one snapshot after the other.
    let redraw = std::io::stdout().is_terminal();
    follow(client, args, json, redraw, ctrl_c, output::emit).await
}

async fn follow(
    client: &Client,
    args: &StatusArgs,
    json: bool,
    redraw: bool,
    stop: impl std::future::Future<Output = ()>,
    mut emit: impl FnMut(&str) -> anyhow::Result<()>,
) -> anyhow::Result<Exit> {
    tokio::pin!(stop);
    let format = if json { Format::Line } else { Format::Text };
    let mut last: Option<String> = None;
    loop {
        let (text, key, done) = look_keyed(client, args, format).await?;
        if last.as_ref() != Some(&key) {
            if redraw {
                let every = humantime::format_duration(args.interval);
                let what = args.id.map_or(String::new(), |id| format!("job {id}: "));
                emit(&format!(
                    "\x1b[H\x1b[2J{what}every {every}; Ctrl-C to stop\n\n"
                ))?;
            } else if last.is_some() && format == Format::Text {
                emit("\n")?;
            }
            emit(&text)?;
            last = Some(key);
        }
        if done {
            return Ok(Exit::Success);
        }
        tokio::select! {
            _ = &mut stop => return Ok(Exit::Interrupted),
            _ = tokio::time::sleep(args.interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testserver;
    use crate::exit::{exit_of, Exit};
    use crate::{Cli, Command};
    use clap::Parser;

    fn args(argv: &[&str]) -> StatusArgs {
        let mut full = vec!["bftp", "status"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full)
            .unwrap_or_else(|e| panic!("{e}"))
            .command
        {
            Command::Status(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn paths() {
        assert_eq!(args(&["42"]).path(), "/v1/jobs/42");
        assert_eq!(args(&[]).path(), "/v1/jobs");
        assert_eq!(
            args(&["--keyword", "night run", "--state", "queued", "--all"]).path(),
            "/v1/jobs?keyword=night+run&state=queued&all=true"
        );
        let e = Cli::try_parse_from(["bftp", "status", "42", "--all"])
            .err()
            .unwrap();
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["bftp", "status", "x"]).err().unwrap();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn watch_interval() {
        let a = args(&["7", "--watch"]);
        assert!(a.watch);
        assert_eq!(a.interval, Duration::from_secs(2));
        let a = args(&["--watch", "--interval", "500ms"]);
        assert_eq!(a.interval, Duration::from_millis(500));
        for bad in [
            &["7", "--interval", "1s"][..],
            &["7", "--watch", "--interval", "10ms"],
            &["7", "--watch", "--interval", "soon"],
        ] {
            let mut argv = vec!["bftp", "status"];
            argv.extend_from_slice(bad);
            let e = Cli::try_parse_from(argv).err().unwrap();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn watch_prints_each_change_once_and_stops_when_final() {
        let mut job = crate::output::tests::job(3);
        job.state = "running".into();
        let running = serde_json::to_string(&job).unwrap();
        job.state = "finished".into();
        job.outcome = Some("succeeded".into());
        let finished = serde_json::to_string(&job).unwrap();
        let answers = vec![(200, running.as_str()), (200, &running), (200, &finished)];
        let a = args(&["3", "--watch", "--interval", "100ms"]);
        for json in [true, false] {
            let srv = testserver::start(answers.clone());
            let mut out = String::new();
            let exit = follow(
                &Client::new(&srv.socket),
                &a,
                json,
                false,
                std::future::pending(),
                |t| {
                    out.push_str(t);
                    Ok(())
                },
            )
            .await
            .unwrap();
            assert_eq!(exit, Exit::Success);
            assert_eq!(srv.requests.lock().unwrap().len(), 3);
            if json {
                let lines: Vec<serde_json::Value> = out
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                assert_eq!(lines.len(), 2, "{out}");
                assert_eq!(lines[0]["state"], "running");
                assert_eq!(lines[1]["state"], "finished");
            } else {
                assert!(!out.contains('\x1b'), "{out}");
                let (running, finished) = (out.find("running"), out.rfind("finished"));
                assert!(running.is_some() && running < finished, "{out}");
            }
        }
    }

    #[tokio::test]
    async fn watching_a_list_ends_with_ctrl_c() {
        let list = serde_json::to_string(&JobList { jobs: vec![] }).unwrap();
        let srv = testserver::start(vec![(200, list.as_str()); 3]);
        let a = args(&["--watch", "--interval", "100ms"]);
        let mut prints = 0;
        let exit = follow(
            &Client::new(&srv.socket),
            &a,
            false,
            true,
            tokio::time::sleep(Duration::from_millis(250)),
            |_| {
                prints += 1;
                Ok(())
            },
        )
        .await
        .unwrap();
        assert_eq!(exit, Exit::Interrupted);
        // Redrawn once (the screen, then the table): the list did not change.
        assert_eq!(prints, 2);
    }

    #[tokio::test]
    async fn unknown_job_is_exit_5() {
        let srv = testserver::start(vec![(404, r#"{"kind":"not_found","message":"no job 9"}"#)]);
        let err = run(&Client::new(&srv.socket), &args(&["9"]), false)
            .await
            .unwrap_err();
        assert_eq!(exit_of(&err), Exit::NotFound);
        assert_eq!(format!("{err:#}"), "job 9: no job 9 [HTTP 404 Not Found]");
    }

    #[tokio::test]
    async fn list_reads_the_job_list() {
        let list = JobList {
            jobs: vec![crate::output::tests::job(1)],
        };
        let body = serde_json::to_string(&list).unwrap();
        let srv = testserver::start(vec![(200, &body)]);
        let reply = Client::new(&srv.socket)
            .get::<JobList>(&args(&["--keyword", "k"]).path())
            .await
            .unwrap();
        assert_eq!(reply.value, list);
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "GET /v1/jobs?keyword=k HTTP/1.1");
    }
}
