//! `bftp`, the front end of bftpd: submit, inspect and cancel server-to-server FTP transfer
//! jobs, verify one, or run one in the foreground. It never touches the store or an FTP
//! server; it talks HTTP/JSON to bftpd on a Unix socket (RULES.md §7).
//!
//! Exit codes (see [`exit::Exit`]):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | unexpected error (I/O failure, bftpd internal error, ...) |
//! | 2 | usage error (bad command line) |
//! | 3 | bftpd is not reachable (socket missing or connection refused; HTTP 503) |
//! | 4 | the request is invalid: rejected by bftpd (HTTP 400, or 403 for a forbidden host or relay) or by bftp's own checks |
//! | 5 | not found (HTTP 404): no such job or watch, or not yours |
//! | 6 | conflict (HTTP 409): request key reused with other parameters, or the job already finished |
//! | 7 | permission denied on the bftpd socket (EACCES) |
//! | 8 | verification or transfer found a problem: a `verify` check failed, or a `transfer` did not copy every file |
//! | 130 | interrupted (Ctrl-C); `transfer` drops its connection, which aborts the copy in bftpd |

mod cancel;
mod client;
mod completions;
mod events;
mod exit;
mod hosts;
mod man;
mod netrc;
mod output;
mod password;
mod request;
mod status;
mod submit;
mod transfer;
mod verify;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use bftp_api::ErrorBody;
use bftp_core::Timestamp;
use clap::{Parser, Subcommand};

use crate::client::Client;
use crate::exit::{exit_of, failure_of, Exit, EXIT_CODES_HELP};

// No `Debug`: the arguments hold URLs, which may hold passwords.
#[derive(Parser)]
#[command(
    name = "bftp",
    version,
    about = "Queue server-to-server FTP transfers with bftpd and follow them, or verify or run one now",
    after_help = EXIT_CODES_HELP,
)]
pub struct Cli {
    /// bftpd's socket
    #[arg(
        long,
        global = true,
        env = "BFTP_SOCKET",
        value_name = "PATH",
        default_value = "/run/bftpd/bftpd.sock"
    )]
    pub socket: PathBuf,

    /// Machine output: bftpd's JSON answer as-is (errors too, as {"kind","message"} on stdout)
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Queue a transfer: SOURCE_URL to DEST_URL, run later by bftpd with retries.
    ///
    /// Passwords, per side, first found wins: the URL (warned: `ps` shows it),
    /// --source-password-file/--dest-password-file (first line), BFTP_SOURCE_PASSWORD /
    /// BFTP_DEST_PASSWORD, ~/.netrc (or $NETRC), a prompt if stdin is a terminal and the
    /// user is not anonymous.
    #[command(after_help = EXIT_CODES_HELP)]
    Submit(Box<submit::SubmitArgs>),
    /// Show one job with its files, or list your jobs.
    #[command(after_help = EXIT_CODES_HELP)]
    Status(status::StatusArgs),
    /// Cancel a job that has not finished.
    #[command(after_help = EXIT_CODES_HELP)]
    Cancel(cancel::CancelArgs),
    /// Check a transfer without making it: bftpd logs in to both servers, checks
    /// TYPE/MODE/STRU, the source (what a wildcard matches now), the destination directory,
    /// and the data path the job would take: one side accepting PASV and the other a PORT to
    /// it, else (auto, relay) bftpd relaying the bytes.
    ///
    /// Prints a line per check, then which data path the job would take and why. It can take several seconds: a server may wait before it
    /// refuses a wrong password. Options and passwords as for `submit`.
    #[command(after_help = EXIT_CODES_HELP)]
    Verify(Box<verify::VerifyArgs>),
    /// Copy now, in the foreground, without the queue: bftpd runs the transfer while bftp
    /// shows its progress, a line per file and a summary. No retries.
    ///
    /// Ctrl-C closes the connection, which aborts the transfer in bftpd. Options and
    /// passwords as for `submit`.
    #[command(after_help = EXIT_CODES_HELP)]
    Transfer(Box<transfer::TransferArgs>),
    /// Watch a source directory and copy what is new in it, at an interval, with jobs like
    /// `submit`'s: add, list, show, pause, resume, remove.
    #[command(after_help = EXIT_CODES_HELP)]
    Watch(watch::WatchArgs),
    /// Show the events of your jobs and watches (a job finished or cancelled, a file failed,
    /// a watch delivered files or found none by its deadline) with their webhook deliveries;
    /// --follow keeps printing them as they come.
    #[command(after_help = EXIT_CODES_HELP)]
    Events(events::EventsArgs),
    /// Show each host's connection limit: configured, learned from the server's refusals for
    /// too many connections (the reply, when, when it is raised), and connections in use.
    #[command(after_help = EXIT_CODES_HELP)]
    Hosts(hosts::HostsArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or PowerShell.
    ///
    /// For example `bftp completions bash > /usr/share/bash-completion/completions/bftp`,
    /// `bftp completions zsh > /usr/share/zsh/vendor-completions/_bftp`, or
    /// `bftp completions fish > /usr/share/fish/vendor_completions.d/bftp.fish`.
    Completions(completions::CompletionsArgs),
    /// Print the manual page bftp(1) (roff), or write it and one page per subcommand to a
    /// directory.
    ///
    /// For example `bftp man | man -l -`, or `bftp man --dir /usr/share/man/man1`.
    Man(man::ManArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // --help and --version are not errors.
            return if e.use_stderr() {
                ExitCode::from(Exit::Usage.code())
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(&cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(err) => {
            report(&cli, &err);
            ExitCode::from(exit_of(&err).code())
        }
    }
}

/// The request of `verify` and `transfer`, made outside the runtime: it may prompt on the
/// terminal.
fn prepare_now(args: &request::RequestArgs) -> anyhow::Result<request::Prepared> {
    let prepared = request::prepare(
        args,
        request::Schedule::immediate(now()),
        &password::Sources::from_process(),
    )?;
    warn(&prepared.warnings);
    Ok(prepared)
}

fn now() -> Timestamp {
    Timestamp::from_system(std::time::SystemTime::now())
}

fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("bftp: {w}");
    }
}

/// Runs the command; a command that printed its answer may still exit non-zero
/// ([`Exit::Problem`], [`Exit::Interrupted`]) without an error to report.
fn run(cli: &Cli) -> anyhow::Result<Exit> {
    // Generated from the definitions above: no daemon, no runtime.
    match &cli.command {
        Command::Completions(args) => return completions::run(args),
        Command::Man(args) => return man::run(args),
        _ => {}
    }
    let client = Client::new(&cli.socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (text, exit) = match &cli.command {
        Command::Submit(args) => {
            // Outside the runtime: this may prompt on the terminal.
            let submission = submit::prepare(args, &password::Sources::from_process(), now())?;
            warn(&submission.prepared.warnings);
            let text = rt.block_on(submit::run(&client, &submission, cli.json))?;
            (text, Exit::Success)
        }
        // Prints as the job changes.
        Command::Status(args) if args.watch => {
            return rt.block_on(status::watch(&client, args, cli.json));
        }
        Command::Status(args) => (
            rt.block_on(status::run(&client, args, cli.json))?,
            Exit::Success,
        ),
        Command::Cancel(args) => (
            rt.block_on(cancel::run(&client, args, cli.json))?,
            Exit::Success,
        ),
        Command::Verify(args) => {
            let prepared = prepare_now(&args.request)?;
            rt.block_on(verify::run(&client, &prepared, args.transcript, cli.json))?
        }
        // Prints as the events come.
        Command::Transfer(args) => {
            let prepared = prepare_now(&args.request)?;
            return rt.block_on(transfer::run(&client, &prepared, cli.json));
        }
        Command::Watch(args) => {
            // Outside the runtime: `add` may prompt on the terminal.
            let action = watch::prepare(&args.command, &password::Sources::from_process(), now())?;
            warn(action.warnings());
            (
                rt.block_on(watch::run(&client, &action, cli.json))?,
                Exit::Success,
            )
        }
        // Prints as the events come.
        Command::Events(args) => return rt.block_on(events::run(&client, args, cli.json)),
        Command::Hosts(args) => (
            rt.block_on(hosts::run(&client, args, cli.json))?,
            Exit::Success,
        ),
        Command::Completions(_) | Command::Man(_) => unreachable!("handled above"),
    };
    output::emit(&text)?;
    Ok(exit)
}

/// One line on stderr; under `--json` also the error as JSON on stdout.
fn report(cli: &Cli, err: &anyhow::Error) {
    eprintln!("bftp: {}", output::sanitize(&format!("{err:#}")));
    if cli.json {
        let _ = output::emit(&error_json(err));
    }
}

/// bftpd's own error body when it sent one, else an [`ErrorBody`] made here.
fn error_json(err: &anyhow::Error) -> String {
    let from_daemon = failure_of(err)
        .and_then(|f| f.body.as_deref())
        .and_then(|b| output::pretty_json(b).ok());
    from_daemon.unwrap_or_else(|| {
        let body = ErrorBody {
            kind: exit_of(err).kind().to_string(),
            message: format!("{err:#}"),
            job_id: None,
        };
        let mut s = serde_json::to_string_pretty(&body).unwrap_or_default();
        s.push('\n');
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_documents_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("Exit codes:") && help.contains("7  permission denied"),
            "{help}"
        );
        for code in (0..=10u8).chain([130]) {
            assert!(
                EXIT_CODES_HELP.contains(&format!("  {code}  ")),
                "exit code {code} undocumented"
            );
        }
        assert_eq!(Exit::PermissionDenied.code(), 7);
        assert_eq!(Exit::Problem.code(), 8);
        assert_eq!(Exit::Interrupted.code(), 130);
        for sub in ["verify", "transfer"] {
            let help = Cli::command()
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(
                help.contains("8  verification or transfer found a problem"),
                "{help}"
            );
        }
    }

    #[test]
    fn json_errors() {
        let daemon = anyhow::Error::new(exit::Failure::from_response(
            409,
            "Conflict",
            br#"{"kind":"conflict","message":"m","job_id":3}"#,
        ))
        .context("submitting the job");
        assert_eq!(
            error_json(&daemon),
            "{\n  \"kind\": \"conflict\",\n  \"message\": \"m\",\n  \"job_id\": 3\n}\n"
        );
        let local = anyhow::Error::new(exit::Failure::invalid("--start: bad")).context("x");
        let v: ErrorBody = serde_json::from_str(&error_json(&local)).unwrap();
        assert_eq!(
            (v.kind.as_str(), v.message.as_str()),
            ("invalid_request", "x: --start: bad")
        );
        let v: ErrorBody = serde_json::from_str(&error_json(&anyhow::anyhow!("boom"))).unwrap();
        assert_eq!(v.kind, "internal");
    }

    #[test]
    fn global_options_anywhere() {
        let cli = Cli::try_parse_from(["bftp", "status", "--json", "--socket", "/tmp/s"]).unwrap();
        assert!(cli.json);
        assert_eq!(cli.socket, PathBuf::from("/tmp/s"));
    }
}
