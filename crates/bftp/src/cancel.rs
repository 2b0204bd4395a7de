//! `bftp cancel`: stop a job that has not finished; bftpd mails its report.

use anyhow::Context;
use bftp_api::{JobView, API_PREFIX};
use clap::Args;

use crate::client::Client;
use crate::output;

#[derive(Args, Debug)]
pub struct CancelArgs {
    /// The job to cancel
    #[arg(value_name = "ID")]
    pub id: u64,
}

/// The text to print.
pub async fn run(client: &Client, args: &CancelArgs, json: bool) -> anyhow::Result<String> {
    let path = format!("{API_PREFIX}/jobs/{}/cancel", args.id);
    let reply = client
        .post::<JobView>(&path, &[], None)
        .await
        .with_context(|| format!("cancelling job {}", args.id))?;
    if json {
        return output::pretty_json(&reply.raw);
    }
    Ok(format!(
        "job {}: {}\n",
        reply.value.id,
        output::state_word(&reply.value)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testserver;
    use crate::exit::{exit_of, Exit};

    #[tokio::test]
    async fn posts_to_the_cancel_route() {
        let mut job = crate::output::tests::job(4);
        job.state = "cancelled".into();
        job.outcome = Some("cancelled".into());
        let body = serde_json::to_string(&job).unwrap();
        let srv = testserver::start(vec![(200, &body)]);
        let out = run(&Client::new(&srv.socket), &CancelArgs { id: 4 }, false)
            .await
            .unwrap();
        assert_eq!(out, "job 4: cancelled\n");
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "POST /v1/jobs/4/cancel HTTP/1.1");
    }

    #[tokio::test]
    async fn finished_job_is_exit_6() {
        let srv = testserver::start(vec![(
            409,
            r#"{"kind":"conflict","message":"job 4 has already finished","job_id":4}"#,
        )]);
        let err = run(&Client::new(&srv.socket), &CancelArgs { id: 4 }, false)
            .await
            .unwrap_err();
        assert_eq!(exit_of(&err), Exit::Conflict);
        assert_eq!(
            format!("{err:#}"),
            "cancelling job 4: job 4 has already finished [HTTP 409 Conflict]"
        );
    }
}
