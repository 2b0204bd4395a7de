//! `bftpd --config FILE`: the daemon's entry point; `bftpd check-config FILE` checks a config.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use bftpd::config::{Config, LogFormat};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

/// bftpd: the background file transfer daemon (RFC 1068's file transfer controller).
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    /// The TOML configuration file.
    #[arg(long, short = 'c', value_name = "FILE", required = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Checks a configuration file as bftpd does at start: prints "OK" or what is wrong.
    ///
    /// Without binding the socket, opening the store or touching the network. Exits 0 if
    /// the file is good, 1 if not.
    CheckConfig {
        /// The TOML configuration file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Asks the running bftpd (through the socket of its config) to write a consistent copy
    /// of its store, its key file and this config into DIR, a new or empty directory.
    ///
    /// As root or a member of the admin group. DIR is written by the daemon's user. Restore
    /// sled by copying DIR/store and DIR/secret.key into another state directory before
    /// starting bftpd there; PostgreSQL by pg_restore of DIR/store/bftp.pgdump into a
    /// database, and DIR/secret.key into each node's state directory (see the README).
    Backup {
        /// The daemon's TOML configuration file (for its socket).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
        /// Where the copy goes (absolute, or relative to the working directory).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

fn backup(config: &std::path::Path, dir: &std::path::Path) -> ExitCode {
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bftpd: {e:#}");
            return ExitCode::from(2);
        }
    };
    let dir = match std::path::absolute(dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bftpd: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    // The config (no password in it) goes with the copy; the daemon writes it.
    let text = std::fs::read_to_string(config).ok();
    match bftpd::api::backup::request(&cfg.socket, &dir, text) {
        Ok((200, body)) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or(body);
            eprintln!("bftpd: backup refused (HTTP {status}): {message}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("bftpd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(path: &std::path::Path) -> ExitCode {
    // `Config::load` names the file in its errors; the later checks get it here, once.
    let checked = Config::load(path).and_then(|cfg| {
        bftpd::service::check(&cfg)
            .with_context(|| format!("invalid config {}", path.display()))
            .map(|()| cfg)
    });
    match checked {
        Ok(cfg) => {
            if let Some(w) = cfg.metrics.exposure_warning() {
                eprintln!("bftpd: warning: {w}");
            }
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bftpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(cfg: &Config) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(cfg.log.level.as_deref().unwrap_or("info")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: not into a file or the journal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match cfg.log.format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match (args.command, args.config) {
        (Some(Command::CheckConfig { file }), _) => return check_config(&file),
        (Some(Command::Backup { config, dir }), _) => return backup(&config, &dir),
        (None, Some(config)) => config,
        (None, None) => unreachable!("clap requires --config without a subcommand"),
    };
    let cfg = match Config::load(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bftpd: {e:#}");
            return ExitCode::from(2);
        }
    };
    init_logging(&cfg);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.scheduler.worker_threads)
        .thread_name("bftpd-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bftpd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        };
        bftpd::run(cfg, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("bftpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
