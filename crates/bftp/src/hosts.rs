//! `bftp hosts`: each host's configured and learned connection limit, why it was learned,
//! when it is raised, and bftpd's connections there now (`GET /v1/hosts`).

use anyhow::Context;
use bftp_api::{HostList, API_PREFIX};
use clap::Args;

use crate::client::Client;
use crate::output;

#[derive(Args, Debug)]
pub struct HostsArgs {}

/// The text to print.
pub async fn run(client: &Client, _args: &HostsArgs, json: bool) -> anyhow::Result<String> {
    let reply = client
        .get::<HostList>(&format!("{API_PREFIX}/hosts"))
        .await
        .context("listing the hosts")?;
    if json {
        return output::pretty_json(&reply.raw);
    }
    if reply.value.hosts.is_empty() {
        return Ok("no hosts\n".into());
    }
    let mut out = String::new();
    for h in &reply.value.hosts {
        for line in h.lines() {
            out.push_str(&output::sanitize(&line));
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testserver;

    #[tokio::test]
    async fn lists_each_host_from_the_same_fields_as_the_json() {
        let body = r#"{"hosts":[
            {"host":"a.example","configured_limit":16,"limit":2,"in_use":1,
             "learned":{"limit":2,"reply":"421 Too many connections (2) from this IP",
                        "learned_at":"2026-12-06T10:00:00Z","refused_at":"2026-12-06T10:00:00Z",
                        "raises_at":"2026-12-06T10:30:00Z"}},
            {"host":"b.example","configured_limit":16,"limit":16,"in_use":0}]}"#;
        let srv = testserver::start(vec![(200, body)]);
        let out = run(&Client::new(&srv.socket), &HostsArgs {}, false)
            .await
            .unwrap();
        assert_eq!(
            out,
            "a.example: limit 2 (configured 16), 1 in use\n  learned 2 at 2026-12-06T10:00:00Z from \"421 Too many connections (2) from this IP\" (last refused 2026-12-06T10:00:00Z); raised at 2026-12-06T10:30:00Z\nb.example: limit 16 (configured 16), 0 in use\n"
        );
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "GET /v1/hosts HTTP/1.1");
    }
}
