//! `bftp status`: one job with its per-file ledger, or a table of the caller's jobs.

use anyhow::Context;
use bftp_api::{JobList, JobView, API_PREFIX};
use clap::Args;

use crate::client::{path_with_query, Client};
use crate::output;

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
    let path = args.path();
    if let Some(id) = args.id {
        let reply = client
            .get::<JobView>(&path)
            .await
            .with_context(|| format!("job {id}"))?;
        return if json {
            output::pretty_json(&reply.raw)
        } else {
            Ok(output::job_detail(&reply.value))
        };
    }
    let reply = client.get::<JobList>(&path).await.context("listing jobs")?;
    if json {
        output::pretty_json(&reply.raw)
    } else {
        Ok(output::job_list(&reply.value.jobs))
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
