//! `[ftp] max_connections_per_host` (issue 4): over all jobs, bftpd opens no more control
//! connections to one host than the limit; a job that would exceed it waits, then runs.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::jobs::{config_plus, wait_final};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// The source, alone on its loopback address: both jobs read from this host.
const SOURCE_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 7);
/// Each RETR waits this long before it starts: a job holds its connections at least this
/// long, so without the limit the second job would log in while the first still runs.
const SLOW_RETR: Duration = Duration::from_millis(1500);

use bftp_tests::payload;

/// With `max_connections_per_host = 1`, one job's connections (one to the source, one to
/// the destination) fill the limit: of two jobs due at once from the same source host (and
/// `max_running_jobs` at its default of 8, so the scheduler starts both), the second logs in
/// only after the first has closed its connection, and still completes. Seen from the
/// source: its two control connections never overlap (every command of the first comes
/// before any command of the second), although each held its connection for a slow RETR.
#[test]
fn max_connections_per_host_keeps_two_jobs_to_one_host_apart() -> Result<()> {
    let (a, b) = (payload(50_000, 1), payload(60_000, 2));
    let src = HostileServer::start(
        Script::new()
            .host(SOURCE_HOST)
            .user("src", "src-pw")
            .file("/out/a.bin", a.clone())
            .file("/out/b.bin", b.clone())
            .on("RETR", Action::delayed(SLOW_RETR, Action::Default)),
    )?;
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    dst.mkdir("in")?;
    // No kept pairs: the second job must log in itself, after the first closed (the pool's
    // own test of the limit is `pool::a_kept_pair_gives_its_slots_up_to_a_job_that_needs_them`).
    let d = Bftpd::start_with(config_plus(
        "[ftp]\nmax_connections_per_host = 1\npool_max_idle = 0\n",
    ))?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let o = d.bftp_env(
            None,
            &[
                "--json",
                "submit",
                &src.url(&format!("out/{name}.bin")),
                &dst.url("in/"),
            ],
            &[
                ("BFTP_SOURCE_PASSWORD", src.password()),
                ("BFTP_DEST_PASSWORD", dst.password()),
            ],
        );
        ensure!(o.status.code() == Some(0), "submit: {}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout)?;
        ids.push(v["job"]["id"].as_u64().context("no job id")?);
    }
    for &id in &ids {
        let v = wait_final(&d, id, Duration::from_secs(60));
        ensure!(
            v["outcome"] == "succeeded" && v["attempts"] == 1,
            "job {id}: {v:#}"
        );
    }
    let elapsed = started.elapsed();
    ensure!(dst.read_file("in/a.bin")? == a, "in/a.bin differs");
    ensure!(dst.read_file("in/b.bin")? == b, "in/b.bin differs");

    let seen = src.wait_for(Duration::from_secs(5), |o| {
        o.connections == 2 && o.closed == 2
    })?;
    let order: Vec<usize> = seen.commands.iter().map(|c| c.connection).collect();
    let last_of_first = order.iter().rposition(|&c| c == 0).context("no commands")?;
    let first_of_second = order.iter().position(|&c| c == 1).context("no commands")?;
    let lines: Vec<String> = seen
        .commands
        .iter()
        .map(|c| format!("{}: {}", c.connection, c.line))
        .collect();
    ensure!(
        last_of_first < first_of_second,
        "the two jobs' connections to the source overlapped: {lines:#?}"
    );
    ensure!(
        seen.commands[..first_of_second]
            .iter()
            .any(|c| c.line.starts_with("RETR")),
        "the first connection copied nothing: {lines:#?}"
    );
    // Both slow copies, one after the other.
    ensure!(
        elapsed >= 2 * SLOW_RETR,
        "done in {elapsed:?}, less than two slow RETRs"
    );
    Ok(())
}
