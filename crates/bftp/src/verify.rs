//! `bftp verify`: bftpd logs in to both servers and checks the job without transferring
//! (RULES.md §7), from the vantage point of the real transfer.

use anyhow::Context;
use bftp_api::{VerifyResponse, API_PREFIX};
use clap::Args;

use crate::client::Client;
use crate::exit::Exit;
use crate::output;
use crate::request::{Prepared, RequestArgs};

/// No `Debug`: the URLs may hold passwords.
#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub request: RequestArgs,

    /// Also print the commands and replies of both control connections (PASS masked)
    #[arg(long)]
    pub transcript: bool,
}

/// The text to print and the exit code: [`Exit::Problem`] unless every check passed.
pub async fn run(
    client: &Client,
    prepared: &Prepared,
    transcript: bool,
    json: bool,
) -> anyhow::Result<(String, Exit)> {
    let body = serde_json::to_vec(&prepared.request).context("encoding the request")?;
    // No timeout of ours: a refused password alone takes bftpd's servers seconds to say so.
    let reply = client
        .post::<VerifyResponse>(&format!("{API_PREFIX}/verify"), &[], Some(body))
        .await
        .context("verifying")?;
    let exit = exit_for(&reply.value);
    let text = if json {
        output::pretty_json(&reply.raw)?
    } else {
        human(&reply.value, transcript)
    };
    Ok((text, exit))
}

fn exit_for(r: &VerifyResponse) -> Exit {
    if r.ok && r.checks.iter().all(|c| c.ok) {
        Exit::Success
    } else {
        Exit::Problem
    }
}

/// A line a check, `ok` or `FAIL`, then a verdict; the transcript if asked for.
fn human(r: &VerifyResponse, transcript: bool) -> String {
    let names: Vec<String> = r.checks.iter().map(|c| output::sanitize(&c.name)).collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (c, name) in r.checks.iter().zip(&names) {
        let mark = if c.ok { "ok  " } else { "FAIL" };
        let line = format!("{mark}  {name:<width$}  {}", output::sanitize(&c.detail));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if let Some(path) = &r.data_path {
        out.push_str(&format!(
            "data path: {}\n",
            output::sanitize(&path.describe())
        ));
    }
    let failed = r.checks.iter().filter(|c| !c.ok).count();
    out.push_str(&match (failed, r.ok) {
        (0, true) => format!("all {} checks passed\n", r.checks.len()),
        (0, false) => "bftpd found a problem, though no check says which\n".to_string(),
        (n, _) => format!("{n} of {} checks failed\n", r.checks.len()),
    });
    if transcript {
        out.push_str("\ntranscript:\n");
        for l in &r.transcript {
            out.push_str(&format!("  {}\n", output::sanitize(l)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testserver;
    use crate::exit::exit_of;
    use crate::password::Sources;
    use crate::request::{prepare, Schedule};
    use crate::{Cli, Command};
    use bftp_api::{CheckView, EndpointSpec, SubmitRequest};
    use bftp_core::Timestamp;
    use clap::Parser;

    fn prep(argv: &[&str]) -> (Prepared, bool) {
        let mut full = vec!["bftp", "verify"];
        full.extend_from_slice(argv);
        let Command::Verify(args) = Cli::try_parse_from(full)
            .unwrap_or_else(|e| panic!("{e}"))
            .command
        else {
            unreachable!()
        };
        let sources = Sources::new(|_| None, None, None);
        let p = prepare(&args.request, Schedule::immediate(Timestamp(0)), &sources).unwrap();
        (p, args.transcript)
    }

    fn response(checks: &[(&str, bool, &str)]) -> VerifyResponse {
        VerifyResponse {
            ok: checks.iter().all(|c| c.1),
            checks: checks
                .iter()
                .map(|(name, ok, detail)| CheckView {
                    name: name.to_string(),
                    ok: *ok,
                    detail: detail.to_string(),
                })
                .collect(),
            transcript: vec!["S> USER alice".into(), "S< 331 Password\r\x1b[2J".into()],
            data_path: None,
        }
    }

    #[test]
    fn takes_the_endpoint_options_and_no_schedule() {
        let (p, transcript) = prep(&[
            "--data-path",
            "auto",
            "ftp://alice@src/pub/*.bin",
            "ftp://d/in/",
            "--move",
            "--type",
            "A",
            "--mode",
            "s",
            "--stru",
            "f",
            "--dest-command",
            "append",
            "--source-acct",
            "sa",
            "--transcript",
        ]);
        assert!(transcript);
        let want = SubmitRequest {
            source: EndpointSpec {
                host: "src".into(),
                port: Some(21),
                user: Some("alice".into()),
                acct: Some("sa".into()),
                path: "pub/*.bin".into(),
                ..Default::default()
            },
            destination: Some(EndpointSpec {
                host: "d".into(),
                port: Some(21),
                user: Some("anonymous".into()),
                path: "in/".into(),
                ..Default::default()
            }),
            disposition: Some("move".into()),
            dest_command: Some("append".into()),
            transfer_type: Some("A".into()),
            mode: Some("S".into()),
            structure: Some("F".into()),
            data_path: Some("auto".into()),
            ..Default::default()
        };
        assert_eq!(p.request, want);
        for submit_only in ["--start", "--keyword", "--request-key", "--notify"] {
            let e = Cli::try_parse_from(["bftp", "verify", "ftp://h/f", submit_only, "x"])
                .err()
                .unwrap_or_else(|| panic!("{submit_only} accepted"));
            assert_eq!(e.exit_code(), 2, "{submit_only}");
        }
    }

    #[test]
    fn checks_one_a_line_then_the_verdict() {
        let r = response(&[
            ("login source", true, "230 Login successful"),
            ("login destination", false, "530 Login incorrect"),
            ("PASV/PORT", true, ""),
        ]);
        assert_eq!(
            human(&r, false),
            "\
ok    login source       230 Login successful
FAIL  login destination  530 Login incorrect
ok    PASV/PORT
1 of 3 checks failed
"
        );
        let t = human(&r, true);
        assert!(
            t.ends_with("\ntranscript:\n  S> USER alice\n  S< 331 Password\\r\\u{1b}[2J\n"),
            "{t}"
        );
        let all = response(&[("login source", true, "230")]);
        assert!(human(&all, false).ends_with("all 1 checks passed\n"));
    }

    /// Issue 29: the path the job would take, and why, after the checks.
    #[test]
    fn the_data_path_is_said_after_the_checks() {
        let mut r = response(&[("third-party data connection", true, "refused")]);
        r.data_path = Some(bftp_api::DataPathVerdictView {
            asked: None,
            path: "auto".into(),
            would_take: "relay".into(),
            reason: "refused".into(),
            detail: "the destination answered PORT with 500 Illegal PORT command.\r".into(),
        });
        assert_eq!(
            human(&r, false),
            "\
ok    third-party data connection  refused
data path: relay: the path is auto (the daemon's default); the servers refused the third party: the destination answered PORT with 500 Illegal PORT command.\\r
all 1 checks passed
"
        );
        let v = r.data_path.as_mut().unwrap();
        (v.asked, v.path, v.would_take, v.reason, v.detail) = (
            Some("fxp".into()),
            "fxp".into(),
            "none".into(),
            "fxp_only".into(),
            "500 no".into(),
        );
        assert!(
            human(&r, false).contains(
                "data path: none: the job asked for fxp; the servers refused the third party, \
                 and the path allows no relay: 500 no\n"
            ),
            "{}",
            human(&r, false)
        );
    }

    #[test]
    fn exit_code_is_8_unless_every_check_passed() {
        assert_eq!(
            exit_for(&response(&[("a", true, ""), ("b", true, "")])),
            Exit::Success
        );
        assert_eq!(
            exit_for(&response(&[("a", true, ""), ("b", false, "")])),
            Exit::Problem
        );
        let mut odd = response(&[("a", true, "")]);
        odd.ok = false;
        assert_eq!(exit_for(&odd), Exit::Problem);
        assert_eq!(Exit::Problem.code(), 8);
    }

    #[tokio::test]
    async fn posts_the_request_and_keeps_the_json() {
        let body = serde_json::to_string(&response(&[("x", false, "550 No such file")])).unwrap();
        let srv = testserver::start(vec![(200, &body)]);
        let (p, _) = prep(&["ftp://h/f", "ftp://d/x"]);
        let (text, exit) = run(&Client::new(&srv.socket), &p, false, true)
            .await
            .unwrap();
        assert_eq!(exit, Exit::Problem);
        assert_eq!(text, output::pretty_json(body.as_bytes()).unwrap());
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "POST /v1/verify HTTP/1.1");
        let sent: SubmitRequest = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(sent, p.request);
    }

    #[tokio::test]
    async fn a_refused_request_keeps_its_exit_code() {
        let srv = testserver::start(vec![(
            403,
            r#"{"kind":"forbidden_host","message":"10.0.0.1 is denied by policy"}"#,
        )]);
        let (p, _) = prep(&["ftp://h/f", "ftp://d/x"]);
        let err = run(&Client::new(&srv.socket), &p, false, false)
            .await
            .unwrap_err();
        assert_eq!(exit_of(&err), Exit::Invalid);
        assert_eq!(
            format!("{err:#}"),
            "verifying: 10.0.0.1 is denied by policy [HTTP 403 Forbidden]"
        );
    }
}
