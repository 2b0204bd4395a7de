//! `bftp watch`: recurring transfers of what is new in a source directory (SPEC §15).
//!
//! `add` builds its template job exactly as `submit` builds a job ([`RequestArgs`],
//! [`QueueArgs`], [`request::prepare_as`]: the same flags, the same password sources), adds the
//! watch's own settings and sends one [`WatchRequest`]. The other verbs are one request each.
//! The command line becomes an [`Action`] first (pure, tested without a daemon), then one
//! exchange with bftpd; [`render`] turns its answer into text.

mod render;
#[cfg(test)]
mod tests;

use std::time::Duration;

use anyhow::Context;
use bftp_api::{WatchList, WatchRequest, API_PREFIX};
use bftp_core::Timestamp;
use clap::builder::Resettable;
use clap::{Arg, Args, Subcommand};
use hyper::Method;
use serde::de::DeserializeOwned;

use crate::client::{self, path_with_query, Client, Reply, TransportError};
use crate::exit::{Failure, EXIT_CODES_HELP};
use crate::output;
use crate::password::Sources;
use crate::request::{self, Kind, QueueArgs, RequestArgs};

#[derive(Args)]
pub struct WatchArgs {
    #[command(subcommand)]
    pub command: WatchCommand,
}

/// A flag of `submit` said again in a watch's words.
fn reword(help: &'static str) -> impl FnOnce(Arg) -> Arg {
    move |a| a.help(help).long_help(Resettable::Reset)
}

// No `Debug`: `add` holds URLs, which may hold passwords.
#[derive(Subcommand)]
pub enum WatchCommand {
    /// Watch a source directory: every --every, bftpd lists it and copies into DEST_URL each
    /// file that is new (by its path, size and modify time) once it stopped changing.
    ///
    /// Each poll that finds files makes an ordinary job (retries, proofs, report, `bftp
    /// status`); a file joins the watch's checkpoint when its copy is proven, so nothing is
    /// skipped and a crash can at worst copy a file twice. Options and passwords as for
    /// `submit`; a watch's jobs start when a poll makes them.
    #[command(
        after_help = EXIT_CODES_HELP,
        mut_arg("source", reword(
            "The watched directory: ftp://[user@]host[:port]/path. No wildcard: choose its \
             files with --pattern. A path is relative to the login directory; start it with \
             %2F for an absolute one")),
        mut_arg("destination", |a| reword("The directory the files are copied into")(a)
            .required(true)),
        mut_arg("recursive", reword(
            "Watch the whole tree below the directory: each file by its path below it, \
             directories made on the destination; links and special files reported, not \
             followed")),
        mut_arg("disposition", |a| reword(
            "What happens to a source file once its copy is proven: copy (kept) or move \
             (deleted) [default: copy]")(a)
            .value_name("copy|move")),
        mut_arg("move_", reword(
            "Short for --disposition move: delete each source file once its copy is proven")),
        mut_arg("delete", |a| a.hide(true)),
        mut_arg("data_path", reword(
            "How the file bytes travel: fxp (straight from one server to the other), relay \
             (through bftpd) or auto (third party first, through bftpd when the servers refuse \
             it) [default: the daemon's, see its [ftp] data_path]")),
        mut_arg("keyword", reword(
            "A label for the watch's jobs, to find them with `bftp status --keyword`")),
    )]
    Add(Box<AddArgs>),
    /// List your watches: state, interval, files delivered and waiting, last and next poll.
    #[command(after_help = EXIT_CODES_HELP)]
    List(ListArgs),
    /// Show one watch: its settings, its polls and totals, and the files its last poll did
    /// not take, with why.
    #[command(after_help = EXIT_CODES_HELP)]
    Show(IdArgs),
    /// Stop polling a watch until `resume`; its checkpoint and running job stay.
    #[command(after_help = EXIT_CODES_HELP)]
    Pause(IdArgs),
    /// Poll a paused watch again.
    #[command(after_help = EXIT_CODES_HELP)]
    Resume(IdArgs),
    /// Remove a watch and its checkpoint; the jobs it made stay.
    #[command(after_help = EXIT_CODES_HELP)]
    Remove(IdArgs),
}

/// No `Debug`: the URLs may hold passwords.
#[derive(Args)]
pub struct AddArgs {
    #[command(flatten)]
    pub request: RequestArgs,

    /// How often bftpd lists the source, e.g. 10m, 1h
    #[arg(long, value_name = "DURATION")]
    pub every: String,

    /// Take only files whose name (last component) matches this shell wildcard (* ? [...];
    /// repeatable) [default: every name not starting with a dot]
    #[arg(long, value_name = "GLOB")]
    pub pattern: Vec<String>,

    /// How long a file must keep its size and modify time, by bftpd's clock, before it is
    /// taken; 0s takes it at first sight [default: 30s]
    #[arg(long, value_name = "DURATION")]
    pub settle: Option<String>,

    /// Never take a file whose name matches this (repeatable), besides the defaults (*.part,
    /// *.tmp, *.filepart, *.partial, .*.swp, .in.*., *.crdownload)
    #[arg(long, value_name = "GLOB")]
    pub ignore: Vec<String>,

    /// Without the default ignore patterns
    #[arg(long)]
    pub no_default_ignore: bool,

    /// Take the files of a directory only once a file of this name is in it (e.g. READY)
    #[arg(long, value_name = "NAME", conflicts_with = "ready_suffix")]
    pub ready_marker: Option<String>,

    /// Take a file F only once F followed by this suffix exists (e.g. .done, .ok)
    #[arg(long, value_name = "SUFFIX")]
    pub ready_suffix: Option<String>,

    #[command(flatten)]
    pub queue: QueueArgs,

    /// When a job of the watch mails its report: failure (a file not copied), always or
    /// never [default: failure]
    #[arg(long, value_name = "WHEN", value_parser = ["failure", "always", "never"])]
    pub notify_on: Option<String>,

    /// The late-arrival alarm: one mail to the --notify addresses when no new file was
    /// delivered by a time of day ("daily 05:00", UTC) or within an interval (6h), once
    /// per period
    #[arg(long, value_name = "WHEN")]
    pub expect: Option<String>,

    /// A daily digest: one mail a day (after midnight UTC) of what the watch did the day
    /// before, to the --notify addresses
    #[arg(long)]
    pub digest: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Every user's watches (root and bftpd's admin group only)
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct IdArgs {
    /// The watch
    #[arg(value_name = "ID")]
    pub id: u64,
}

/// A new watch ready to send, and the warnings for stderr (a password in a URL). Its `Debug`
/// is the request's, which masks passwords.
#[derive(Debug)]
pub struct NewWatch {
    pub request: WatchRequest,
    pub warnings: Vec<String>,
}

/// What one `bftp watch` invocation asks of bftpd.
#[derive(Debug)]
pub enum Action {
    Add(Box<NewWatch>),
    List { all: bool },
    Show(u64),
    Pause(u64),
    Resume(u64),
    Remove(u64),
}

impl Action {
    /// The route of the request (see `bftp_api::watch`).
    pub fn route(&self) -> (Method, String) {
        let watches = format!("{API_PREFIX}/watches");
        match self {
            Action::Add(_) => (Method::POST, watches),
            Action::List { all: false } => (Method::GET, watches),
            Action::List { all: true } => (
                Method::GET,
                path_with_query(&watches, &[("all", "true".to_string())]),
            ),
            Action::Show(id) => (Method::GET, format!("{watches}/{id}")),
            Action::Pause(id) => (Method::POST, format!("{watches}/{id}/pause")),
            Action::Resume(id) => (Method::POST, format!("{watches}/{id}/resume")),
            Action::Remove(id) => (Method::DELETE, format!("{watches}/{id}")),
        }
    }

    /// What the request was doing, for an error message.
    fn doing(&self) -> String {
        match self {
            Action::Add(_) => "adding the watch".to_string(),
            Action::List { .. } => "listing watches".to_string(),
            Action::Show(id) => format!("watch {id}"),
            Action::Pause(id) => format!("pausing watch {id}"),
            Action::Resume(id) => format!("resuming watch {id}"),
            Action::Remove(id) => format!("removing watch {id}"),
        }
    }

    pub fn warnings(&self) -> &[String] {
        match self {
            Action::Add(w) => &w.warnings,
            _ => &[],
        }
    }
}

/// The command line as an [`Action`]; `add` checks everything it can and finds the
/// passwords (which may prompt: call it outside the runtime).
pub fn prepare(cmd: &WatchCommand, sources: &Sources, now: Timestamp) -> anyhow::Result<Action> {
    Ok(match cmd {
        WatchCommand::Add(args) => Action::Add(Box::new(prepare_add(args, sources, now)?)),
        WatchCommand::List(a) => Action::List { all: a.all },
        WatchCommand::Show(a) => Action::Show(a.id),
        WatchCommand::Pause(a) => Action::Pause(a.id),
        WatchCommand::Resume(a) => Action::Resume(a.id),
        WatchCommand::Remove(a) => Action::Remove(a.id),
    })
}

/// A humantime duration as the user wrote it, checked here so that a typo is exit 4 before
/// any password is asked for.
fn duration(flag: &str, value: &str) -> Result<(String, Duration), Failure> {
    let v = value.trim();
    let d = humantime::parse_duration(v).map_err(|e| {
        Failure::invalid(format!(
            "{flag} {value:?}: not a duration ({e}); e.g. 90s, 10m, 1h, 1day"
        ))
    })?;
    Ok((v.to_string(), d))
}

fn prepare_add(args: &AddArgs, sources: &Sources, now: Timestamp) -> anyhow::Result<NewWatch> {
    let (every, interval) = duration("--every", &args.every)?;
    if interval.is_zero() {
        return Err(Failure::invalid("--every: a watch needs an interval longer than 0s").into());
    }
    let settle = args
        .settle
        .as_deref()
        .map(|s| duration("--settle", s).map(|(s, _)| s))
        .transpose()?;
    if args.request.delete {
        return Err(Failure::invalid(
            "--delete: a watch copies each new file, or moves it (--move); it does not delete one",
        )
        .into());
    }
    let prepared = request::prepare_as(
        Kind::Watch,
        &args.request,
        args.queue.schedule(None, now),
        sources,
    )?;
    Ok(NewWatch {
        request: WatchRequest {
            job: prepared.request,
            every,
            patterns: args.pattern.clone(),
            recursive: args.request.recursive,
            settle,
            ignore: args.ignore.clone(),
            no_default_ignore: args.no_default_ignore,
            ready_marker: args.ready_marker.clone(),
            ready_suffix: args.ready_suffix.clone(),
            notify_on: args.notify_on.clone(),
            expect: args.expect.clone(),
            digest: args.digest,
        },
        warnings: prepared.warnings,
    })
}

/// Sends the action; the text to print: bftpd's JSON under `json`, else [`render`]'s.
pub async fn run(client: &Client, action: &Action, json: bool) -> anyhow::Result<String> {
    let text =
        match action {
            Action::Remove(id) => client.delete(&action.route().1).await.and_then(|raw| {
                match (json, raw.is_empty()) {
                    (true, true) => Ok(String::new()),
                    (true, false) => output::pretty_json(&raw),
                    (false, _) => Ok(render::removed(*id)),
                }
            }),
            Action::List { .. } => shown(ask::<WatchList>(client, action).await, json, |l| {
                render::list(&l.watches)
            }),
            Action::Show(_) => shown(ask(client, action).await, json, render::detail),
            Action::Pause(_) | Action::Resume(_) => {
                shown(ask(client, action).await, json, render::state_changed)
            }
            Action::Add(_) => shown(ask(client, action).await, json, render::added),
        };
    text.context(action.doing())
}

/// The action's request, its answer read as `T`.
async fn ask<T: DeserializeOwned>(client: &Client, action: &Action) -> anyhow::Result<Reply<T>> {
    let (method, path) = action.route();
    let body = match action {
        Action::Add(w) => Some(serde_json::to_vec(&w.request).context("encoding the request")?),
        _ => None,
    };
    match client.exchange(method, &path, &[], body).await {
        Ok((status, reason, raw)) => client::decode(status, reason, raw),
        // Sent, and no answer: an `add` is not sent again, which could make a second watch.
        Err(e @ TransportError::Exchange(_)) if matches!(action, Action::Add(_)) => Err(client
            .transport_failure(e)
            .context("bftpd may or may not have made the watch; `bftp watch list` shows it")),
        Err(e) => Err(client.transport_failure(e)),
    }
}

fn shown<T>(
    reply: anyhow::Result<Reply<T>>,
    json: bool,
    text: impl FnOnce(&T) -> String,
) -> anyhow::Result<String> {
    let reply = reply?;
    if json {
        output::pretty_json(&reply.raw)
    } else {
        Ok(text(&reply.value))
    }
}
