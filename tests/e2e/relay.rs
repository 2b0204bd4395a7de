//! The relay through bftpd (RULES.md §14) in the engine (`bftp_ftp::Pair`), against real
//! vsftpd, proFTPD and Pure-FTPd with their stock refusal of third-party transfers: every
//! ordered pair relays byte-exact under `relay` and `auto`, says how each file travelled and
//! why, and `auto` stops trying the third party once the pair refused it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Result};
use bftp_core::route::{Plan, RelayReason, Route};
use bftp_core::DestCommand;
use bftp_ftp::{AllowAll, CopyOutcome, JobFailure, Limits, Mover, Pair, RelayGate, Side};
use bftp_tests::engine::{image, limits};
use bftp_tests::scenario::{block_on, ftp_login as login, request};
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind};

use ServerKind::{Proftpd, PureFtpd, Vsftpd};

pub(crate) fn start_stock(kind: ServerKind) -> Result<FtpServer> {
    FtpServer::start(
        kind,
        FtpOptions {
            fxp: false,
            ..FtpOptions::default()
        },
    )
}

fn explain(outcome: &CopyOutcome) -> String {
    format!("{outcome:?}\n{}", outcome.report().transcript)
}

/// Pure-FTPd refusing a foreign data connection says nothing: one reply timeout per role
/// order, so the refusal tests get short ones.
fn quick_limits() -> Limits {
    Limits {
        reply_timeout: Duration::from_secs(3),
        ..limits()
    }
}

async fn open_pair(src: &FtpServer, dst: &FtpServer, plan: Plan) -> Result<Pair> {
    let mut pair = Pair::open(
        &login(src),
        &login(dst),
        image(),
        &quick_limits(),
        Arc::new(AllowAll),
    )
    .await
    .map_err(|e| anyhow::anyhow!("opening {} -> {}: {e}", src.kind(), dst.kind()))?;
    pair.set_plan(plan);
    pair.set_relay_gate(Some(RelayGate::new(4, None)));
    Ok(pair)
}

/// One ordered pair of stock servers: under `relay`, a large file and a few small ones; under
/// `auto`, the first copy tries both role orders, is refused, relays and keeps the refusal
/// for the pair's memory; the second goes straight to the relay (no PORT sent).
fn stock_pair_relays(src_kind: ServerKind, dst_kind: ServerKind) -> Result<()> {
    let src = start_stock(src_kind)?;
    let dst = start_stock(dst_kind)?;
    let big = payload(6 * 1024 * 1024 + 17, 5);
    src.put_file("/out/big.bin", &big)?;
    let small: Vec<Vec<u8>> = (0..4).map(|i| payload(4096 + i, i as u8)).collect();
    for (i, data) in small.iter().enumerate() {
        src.put_file(&format!("/out/s{i}.bin"), data)?;
    }
    src.put_file("/out/empty.bin", b"")?;
    dst.mkdir("/in")?;
    block_on(async {
        // relay, asked.
        let mut pair = open_pair(&src, &dst, Plan::Relay(RelayReason::Asked)).await?;
        let outcome = pair
            .copy(&request(
                "/out/big.bin",
                "/in/big.bin",
                DestCommand::Replace,
            ))
            .await?;
        ensure!(
            outcome.is_success(),
            "{src_kind}->{dst_kind} big: {}",
            explain(&outcome)
        );
        let report = outcome.report();
        ensure!(
            report.route == Some(Route::Relay(RelayReason::Asked)),
            "{:?}",
            report.route
        );
        let relayed = report.relayed.clone().expect("relay stats");
        ensure!(relayed.bytes == big.len() as u64, "{relayed:?}");
        ensure!(relayed.mover == Mover::Kernel, "plain legs: {relayed:?}");
        for side in [Side::Source, Side::Destination] {
            ensure!(
                report.transcript.count_sent(side, "PORT") == 0
                    && report.transcript.count_sent(side, "EPRT") == 0,
                "a relay sends no PORT:\n{}",
                report.transcript
            );
        }
        ensure!(dst.read_file("/in/big.bin")? == big, "big file differs");
        for (i, data) in small.iter().enumerate() {
            let outcome = pair
                .copy(&request(
                    &format!("/out/s{i}.bin"),
                    &format!("/in/s{i}.bin"),
                    DestCommand::Replace,
                ))
                .await?;
            ensure!(outcome.is_success(), "small {i}: {}", explain(&outcome));
            ensure!(
                dst.read_file(&format!("/in/s{i}.bin"))? == *data,
                "s{i} differs"
            );
        }
        let outcome = pair
            .copy(&request(
                "/out/empty.bin",
                "/in/empty.bin",
                DestCommand::Replace,
            ))
            .await?;
        ensure!(outcome.is_success(), "empty: {}", explain(&outcome));
        ensure!(dst.read_file("/in/empty.bin")?.is_empty());
        pair.close().await;

        // auto: refused in both role orders, then relayed; then straight to the relay.
        let mut pair = open_pair(&src, &dst, Plan::FxpThenRelay).await?;
        let outcome = pair
            .copy(&request(
                "/out/s0.bin",
                "/in/auto0.bin",
                DestCommand::Replace,
            ))
            .await?;
        ensure!(outcome.is_success(), "auto first: {}", explain(&outcome));
        let report = outcome.report();
        let Some(Route::Relay(RelayReason::Refused { reply })) = &report.route else {
            bail!(
                "auto first: route {:?}\n{}",
                report.route,
                report.transcript
            );
        };
        ensure!(
            report.fxp_refused.as_deref() == Some(reply.as_str()),
            "{:?} vs {reply}",
            report.fxp_refused
        );
        ensure!(
            reply.contains("refused") || reply.contains("did not answer"),
            "{reply}"
        );
        ensure!(dst.read_file("/in/auto0.bin")? == small[0]);
        let outcome = pair
            .copy(&request(
                "/out/s1.bin",
                "/in/auto1.bin",
                DestCommand::Replace,
            ))
            .await?;
        ensure!(outcome.is_success(), "auto second: {}", explain(&outcome));
        let report = outcome.report();
        ensure!(
            matches!(
                &report.route,
                Some(Route::Relay(RelayReason::Refused { .. }))
            ),
            "{:?}",
            report.route
        );
        ensure!(report.fxp_refused.is_none(), "refused once, reported once");
        for side in [Side::Source, Side::Destination] {
            ensure!(
                report.transcript.count_sent(side, "PORT") == 0,
                "the second copy tried the third party again:\n{}",
                report.transcript
            );
        }
        ensure!(dst.read_file("/in/auto1.bin")? == small[1]);
        pair.close().await;

        // fxp only: refused for good, as before.
        let mut pair = open_pair(&src, &dst, Plan::FxpOnly).await?;
        match pair
            .copy(&request("/out/s2.bin", "/in/fxp.bin", DestCommand::Replace))
            .await
        {
            Err(error) if matches!(error.failure, JobFailure::FxpRefused { .. }) => {}
            other => bail!("fxp only between stock servers: {other:?}"),
        }
        Ok(())
    })
}

mod every_stock_pair {
    use super::*;

    #[test]
    fn vsftpd_to_proftpd() -> Result<()> {
        stock_pair_relays(Vsftpd, Proftpd)
    }
    #[test]
    fn vsftpd_to_pure_ftpd() -> Result<()> {
        stock_pair_relays(Vsftpd, PureFtpd)
    }
    #[test]
    fn proftpd_to_vsftpd() -> Result<()> {
        stock_pair_relays(Proftpd, Vsftpd)
    }
    #[test]
    fn proftpd_to_pure_ftpd() -> Result<()> {
        stock_pair_relays(Proftpd, PureFtpd)
    }
    #[test]
    fn pure_ftpd_to_vsftpd() -> Result<()> {
        stock_pair_relays(PureFtpd, Vsftpd)
    }
    #[test]
    fn pure_ftpd_to_proftpd() -> Result<()> {
        stock_pair_relays(PureFtpd, Proftpd)
    }
}

/// A relay cancelled half-way (`copy_or_abort`, as a job's cancel does): both data
/// connections are reset at once (neither server keeps one open), the destination server
/// logs the upload as incomplete (a reset, never a clean end of file it would take for the
/// whole file), and the copy ends in `Aborted`.
#[test]
fn a_cancelled_relay_resets_both_data_connections() -> Result<()> {
    use bftp_tests::sockdiag::{states_with_inodes, tcp_sockets};
    let src = FtpServer::start(
        Vsftpd,
        FtpOptions {
            fxp: false,
            max_rate: Some(1_000_000),
            ..FtpOptions::default()
        },
    )?;
    let dst = start_stock(Proftpd)?;
    let data = payload(8 * 1024 * 1024, 11);
    src.put_file("/out/slow.bin", &data)?;
    dst.mkdir("/in")?;
    // Established sockets of either server on one of its passive ports: its data connections.
    let data_connections = || -> usize {
        let ports: Vec<_> = [&src, &dst].iter().map(|s| s.passive_ports()).collect();
        tcp_sockets(states_with_inodes())
            .unwrap_or_default()
            .iter()
            .filter(|s| s.state == 1 && ports.iter().any(|p| p.contains(&s.local.port())))
            .count()
    };
    block_on(async {
        let mut pair = open_pair(&src, &dst, Plan::Relay(RelayReason::Asked)).await?;
        let request = request("/out/slow.bin", "/in/slow.bin", DestCommand::Replace);
        let abort = async {
            // Cancel once the bytes flow (both data connections up).
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if data_connections() >= 2 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        };
        let started = std::time::Instant::now();
        let error = match pair.copy_or_abort(&request, abort, "cancelled").await {
            Err(error) => error,
            Ok(outcome) => bail!("not aborted: {}", explain(&outcome)),
        };
        ensure!(
            matches!(error.failure, JobFailure::Aborted { .. }),
            "{error}\n{}",
            error.transcript
        );
        ensure!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
        let mut left = usize::MAX;
        for _ in 0..40 {
            left = data_connections();
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ensure!(
            left == 0,
            "{left} data connections still open after the cancel"
        );
        Ok(())
    })?;
    let kept = dst.read_file("/in/slow.bin").unwrap_or_default();
    ensure!(
        kept.len() < data.len(),
        "the destination has the whole file: the cancel came too late"
    );
    let entries = dst.xferlog_entries()?;
    let upload = entries.iter().find(|e| e.path.ends_with("/in/slow.bin"));
    ensure!(
        matches!(upload, Some(e) if !e.complete),
        "the destination took the cut stream for a whole file: {entries:?}"
    );
    Ok(())
}

/// A relay cut off half-way goes on where it stopped: the next copy, resumed at the
/// destination's size, sends `REST` to both servers (their logs show it), moves only the rest
/// and ends byte-exact. Stock proFTPD as destination refuses a restarted STOR: the copy says
/// so (for the refusal memory), and a copy from the start then succeeds.
#[test]
fn a_cut_relay_resumes_from_the_destinations_size() -> Result<()> {
    let slow_source = |kind| {
        FtpServer::start(
            kind,
            FtpOptions {
                fxp: false,
                max_rate: Some(2_000_000),
                ..FtpOptions::default()
            },
        )
    };
    let src = slow_source(Vsftpd)?;
    let data = payload(6 * 1024 * 1024, 21);
    src.put_file("/out/big.bin", &data)?;
    for dst_kind in [PureFtpd, Vsftpd, Proftpd] {
        let dst = start_stock(dst_kind)?;
        dst.mkdir("/in")?;
        block_on(async {
            let mut pair = open_pair(&src, &dst, Plan::Relay(RelayReason::Asked)).await?;
            let mut first = request("/out/big.bin", "/in/big.bin", DestCommand::Replace);
            first.resume_at = Some(0);
            let cut = pair.copy_or_abort(
                &first,
                tokio::time::sleep(Duration::from_millis(1200)),
                "cut",
            );
            ensure!(cut.await.is_err(), "{dst_kind}: the copy was not cut");
            pair.reopen("after the cut").await?;
            let offset = pair
                .size(Side::Destination, "/in/big.bin")
                .await?
                .unwrap_or(0);
            ensure!(
                offset > 0 && offset < data.len() as u64,
                "{dst_kind}: cut at {offset}"
            );
            let mut again = request("/out/big.bin", "/in/big.bin", DestCommand::Replace);
            again.resume_at = Some(offset);
            let outcome = pair.copy(&again).await?;
            if dst_kind == Proftpd {
                let refused = outcome.report().resume_refused.clone().map(|(_, r)| r);
                ensure!(!outcome.is_success(), "stock proFTPD took a restarted STOR");
                ensure!(
                    refused.as_deref().is_some_and(|r| r.contains("after REST")),
                    "{refused:?}\n{}",
                    outcome.report().transcript
                );
                let outcome = pair
                    .copy(&request(
                        "/out/big.bin",
                        "/in/big.bin",
                        DestCommand::Replace,
                    ))
                    .await?;
                ensure!(outcome.is_success(), "{}", explain(&outcome));
            } else {
                ensure!(outcome.is_success(), "{dst_kind}: {}", explain(&outcome));
                let report = outcome.report();
                ensure!(
                    report.resumed_from == Some(offset),
                    "{:?}",
                    report.resumed_from
                );
                let moved = report.relayed.as_ref().map(|r| r.bytes);
                ensure!(
                    moved == Some(data.len() as u64 - offset),
                    "{dst_kind}: moved {moved:?} after {offset}"
                );
                for side in [Side::Source, Side::Destination] {
                    ensure!(
                        report.transcript.count_sent(side, "REST") == 1,
                        "{}",
                        report.transcript
                    );
                }
            }
            ensure!(dst.read_file("/in/big.bin")? == data, "{dst_kind}: differs");
            Ok(())
        })?;
        if dst_kind == Vsftpd {
            let log = std::fs::read_to_string(dst.log_file()).unwrap_or_default();
            ensure!(log.contains("REST"), "the destination's log shows no REST");
        }
    }
    let log = std::fs::read_to_string(src.log_file()).unwrap_or_default();
    ensure!(log.contains("REST"), "the source's log shows no REST");
    Ok(())
}

/// Resume is not the relay's alone: a third-party copy cut off half-way goes on where it
/// stopped too, `REST` to both servers before their data commands (FXP allowed on both).
#[test]
fn a_cut_third_party_copy_resumes_from_the_destinations_size() -> Result<()> {
    let src = FtpServer::start(
        Vsftpd,
        FtpOptions {
            max_rate: Some(2_000_000),
            ..FtpOptions::default()
        },
    )?;
    let dst = FtpServer::start(PureFtpd, FtpOptions::default())?;
    let data = payload(6 * 1024 * 1024, 23);
    src.put_file("/out/big.bin", &data)?;
    dst.mkdir("/in")?;
    block_on(async {
        let mut pair = open_pair(&src, &dst, Plan::FxpOnly).await?;
        let mut first = request("/out/big.bin", "/in/big.bin", DestCommand::Replace);
        first.resume_at = Some(0);
        let cut = pair.copy_or_abort(
            &first,
            tokio::time::sleep(Duration::from_millis(1200)),
            "cut",
        );
        ensure!(cut.await.is_err(), "the copy was not cut");
        pair.reopen("after the cut").await?;
        let offset = pair
            .size(Side::Destination, "/in/big.bin")
            .await?
            .unwrap_or(0);
        ensure!(offset > 0 && offset < data.len() as u64, "cut at {offset}");
        let mut again = request("/out/big.bin", "/in/big.bin", DestCommand::Replace);
        again.resume_at = Some(offset);
        let outcome = pair.copy(&again).await?;
        ensure!(outcome.is_success(), "{}", explain(&outcome));
        let report = outcome.report();
        ensure!(
            report.resumed_from == Some(offset),
            "{:?}",
            report.resumed_from
        );
        ensure!(
            matches!(report.route, Some(Route::Fxp | Route::FxpRolesSwapped)),
            "{:?}",
            report.route
        );
        for side in [Side::Source, Side::Destination] {
            ensure!(
                report.transcript.count_sent(side, "REST") == 1,
                "{}",
                report.transcript
            );
        }
        Ok(())
    })?;
    ensure!(dst.read_file("/in/big.bin")? == data, "differs");
    Ok(())
}

/// The destination refuses the storing command after the source was asked for the file in
/// the same round trip: that file fails, both connections stay in step (the source's replies
/// to the reset transfer are read), and the next copy on the same pair relays.
#[test]
fn a_refused_stor_leaves_the_pair_in_step_for_the_next_relay() -> Result<()> {
    let src = start_stock(Vsftpd)?;
    let dst = start_stock(Proftpd)?;
    let data = payload(300_000, 8);
    src.put_file("/out/a.bin", &data)?;
    dst.mkdir("/in")?;
    block_on(async {
        let mut pair = open_pair(&src, &dst, Plan::Relay(RelayReason::Asked)).await?;
        let outcome = pair
            .copy(&request(
                "/out/a.bin",
                "/missing/a.bin",
                DestCommand::Replace,
            ))
            .await?;
        ensure!(!outcome.is_success(), "{}", explain(&outcome));
        ensure!(
            matches!(
                outcome.failure(),
                Some(bftp_ftp::Failure::Reply {
                    side: Side::Destination,
                    ..
                })
            ),
            "{}",
            explain(&outcome)
        );
        for i in 0..3 {
            let outcome = pair
                .copy(&request(
                    "/out/a.bin",
                    &format!("/in/a{i}.bin"),
                    DestCommand::Replace,
                ))
                .await?;
            ensure!(
                outcome.is_success(),
                "copy {i} after the refusal: {}",
                explain(&outcome)
            );
            ensure!(dst.read_file(&format!("/in/a{i}.bin"))? == data);
        }
        Ok(())
    })
}
