//! The third-party transfer engine (`bftp-ftp`) against real vsftpd, proFTPD and
//! Pure-FTPd servers: every ordered pair for STOR, APPE and STOU in image type, ASCII,
//! FXP refused by configuration, a missing source file, a wrong password, a server
//! killed mid-transfer, connection reuse, wildcard listings and verify.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_core::reply::{PermanentKind, ReplyCode, ReplyOverride, TransientKind, TreatAs};
use bftp_core::{DestCommand, FtpParams, Secret, TransferType};
use bftp_ftp::{
    verify, AllowAll, ConnectError, CopyOutcome, Failure, Fallback, JobFailure, Limits, ListError,
    ListMethod, Pair, PairError, Progress, Side, SizeCheck, VerifyRequest,
};
use bftp_tests::engine::{expect_success, image, limits, open, start};
use bftp_tests::scenario::{block_on, ftp_login as login, request};
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind};

use ServerKind::{Proftpd, PureFtpd, Vsftpd};

fn start_stock(kind: ServerKind) -> Result<FtpServer> {
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

// ---- every ordered pair: STOR, APPE, STOU, ASCII, connection reuse ----

/// One pair of servers, one `Pair` for four copies (reused), then an ASCII pair.
fn pair_copies(src_kind: ServerKind, dst_kind: ServerKind) -> Result<()> {
    let src = start(src_kind)?;
    let dst = start(dst_kind)?;
    let data = payload(300_000, 7);
    src.put_file("/out/data.bin", &data)?;
    let existing = payload(1234, 9);
    dst.put_file("/in/log.bin", &existing)?;
    dst.mkdir("/in/unique")?;
    let mut failures = Vec::new();

    block_on(async {
        let mut pair = open(&src, &dst, image()).await?;
        let mut users = [0usize; 2];
        let mut count_logins = |outcome: &CopyOutcome| {
            let t = &outcome.report().transcript;
            users[0] += t.count_sent(Side::Source, "USER");
            users[1] += t.count_sent(Side::Destination, "USER");
        };

        // STOR, twice: the second replaces the first.
        for round in 0..2 {
            let outcome = pair
                .copy(&request(
                    "/out/data.bin",
                    "/in/copy.bin",
                    DestCommand::Replace,
                ))
                .await?;
            count_logins(&outcome);
            match &outcome {
                CopyOutcome::Succeeded {
                    bytes, size_check, ..
                } => {
                    if *bytes != Some(data.len() as u64)
                        || !matches!(size_check, SizeCheck::Equal { source, destination, .. }
                            if *source == data.len() as u64 && *destination == data.len() as u64)
                    {
                        failures.push(format!("STOR round {round}: {outcome:?}"));
                    }
                    if dst.read_file("/in/copy.bin")? != data {
                        failures.push(format!("STOR round {round}: copied bytes differ"));
                    }
                }
                other => failures.push(format!("STOR round {round}: {}", explain(other))),
            }
        }

        // APPE: stock proFTPD (AllowStoreRestart off) refuses it for good, by a 451.
        let outcome = pair
            .copy(&request(
                "/out/data.bin",
                "/in/log.bin",
                DestCommand::Append,
            ))
            .await?;
        count_logins(&outcome);
        match (dst_kind, &outcome) {
            (
                Proftpd,
                CopyOutcome::Transient {
                    kind,
                    failure:
                        Failure::Reply {
                            side: Side::Destination,
                            command,
                            reply,
                            ..
                        },
                    connection_lost: false,
                    report,
                },
            ) if *kind == TransientKind::LocalError
                && command == "APPE"
                && reply.code().get() == 451
                && reply.text().contains("Append/Restart not permitted") =>
            {
                if report.destination_size_before != Some(existing.len() as u64) {
                    failures.push(format!(
                        "APPE on proFTPD: size before not recorded: {report:?}"
                    ));
                }
                if dst.read_file("/in/log.bin")? != existing {
                    failures.push("APPE refused by proFTPD changed the file".into());
                }
            }
            (Proftpd, other) => failures.push(format!("APPE to stock proFTPD: {}", explain(other))),
            (
                _,
                CopyOutcome::Succeeded {
                    bytes,
                    size_check,
                    report,
                    ..
                },
            ) => {
                let total = (existing.len() + data.len()) as u64;
                let good_check = matches!(size_check, SizeCheck::Equal { destination, destination_before: Some(before), .. }
                    if *destination == total && *before == existing.len() as u64);
                if !good_check
                    || *bytes != Some(data.len() as u64)
                    || report.destination_size_before != Some(existing.len() as u64)
                {
                    failures.push(format!("APPE: {outcome:?}"));
                }
                let mut expected = existing.clone();
                expected.extend_from_slice(&data);
                if dst.read_file("/in/log.bin")? != expected {
                    failures.push("APPE: appended bytes differ".into());
                }
            }
            (_, other) => failures.push(format!("APPE: {}", explain(other))),
        }

        // STOU into a directory: the server picks the name.
        let outcome = pair
            .copy(&request("/out/data.bin", "/in/unique", DestCommand::Unique))
            .await?;
        count_logins(&outcome);
        let names: Vec<String> = std::fs::read_dir(dst.path("/in/unique"))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()?;
        match &outcome {
            CopyOutcome::Succeeded {
                stou_name,
                size_check,
                ..
            } => {
                if names.len() != 1 {
                    failures.push(format!("STOU left {names:?} in the directory"));
                } else {
                    if dst.read_file(&format!("/in/unique/{}", names[0]))? != data {
                        failures.push("STOU: copied bytes differ".into());
                    }
                    match stou_name {
                        Some(name) => {
                            if *name != names[0] {
                                failures.push(format!(
                                    "STOU reported {name:?}, the file is {:?}",
                                    names[0]
                                ));
                            }
                            if !matches!(size_check, SizeCheck::Equal { .. }) {
                                failures.push(format!("STOU with a name: {size_check:?}"));
                            }
                        }
                        None => {
                            if !matches!(size_check, SizeCheck::NotAvailable(_)) {
                                failures.push(format!("STOU without a name: {size_check:?}"));
                            }
                        }
                    }
                }
            }
            other => failures.push(format!("STOU: {}", explain(other))),
        }

        // The same two control connections served every copy.
        if users != [0, 0] && users != [1, 1] {
            failures.push(format!("USER sent {users:?} times (source, destination)"));
        }
        let login_seen = pair.take_transcript().count_sent(Side::Source, "USER") + users[0];
        if login_seen != 1 {
            failures.push(format!("source logins seen: {login_seen}, expected 1"));
        }
        pair.close().await;

        // ASCII: both say 226; the content is as the servers convert it.
        let text = b"line one\nline two\n\nlast line\n".repeat(100);
        src.put_file("/out/text.txt", &text)?;
        let ascii = FtpParams {
            transfer_type: TransferType::Ascii,
            ..FtpParams::default()
        };
        let mut pair = open(&src, &dst, ascii).await?;
        let outcome = pair
            .copy(&request(
                "/out/text.txt",
                "/in/text.txt",
                DestCommand::Replace,
            ))
            .await?;
        let report = outcome.report();
        let finals_ok = [
            report.source_final.as_ref(),
            report.destination_final.as_ref(),
        ]
        .iter()
        .all(|r| r.is_some_and(|r| r.code.is_some_and(|c| c.get() == 226)));
        if !outcome.is_success() || !finals_ok {
            failures.push(format!("ASCII: {}", explain(&outcome)));
        } else {
            let got = dst.read_file("/in/text.txt")?;
            let crlf: Vec<u8> = String::from_utf8_lossy(&text)
                .replace('\n', "\r\n")
                .into_bytes();
            // proFTPD and Pure-FTPd send LF as CRLF in ASCII mode and store CRLF as
            // LF; vsftpd (ascii_*_enable=NO by default) moves bytes unchanged, so it
            // keeps the CRs a converting source sent.
            let expected = match (src_kind, dst_kind) {
                (Proftpd | PureFtpd, Vsftpd) => &crlf,
                _ => &text,
            };
            if got != *expected {
                failures.push(format!(
                    "ASCII {src_kind} -> {dst_kind}: got {} bytes ({} CR), expected {}",
                    got.len(),
                    got.iter().filter(|&&b| b == b'\r').count(),
                    expected.len()
                ));
            }
            if !matches!(
                outcome,
                CopyOutcome::Succeeded {
                    size_check: SizeCheck::TextType { .. },
                    ..
                }
            ) {
                failures.push(format!("ASCII size check: {outcome:?}"));
            }
        }
        pair.close().await;
        anyhow::Ok(())
    })?;
    ensure!(
        failures.is_empty(),
        "{src_kind} -> {dst_kind}:\n{}",
        failures.join("\n")
    );
    Ok(())
}

mod pairs {
    use super::pair_copies;
    use bftp_tests::ServerKind::{Proftpd, PureFtpd, Vsftpd};

    #[test]
    fn vsftpd_to_proftpd() -> anyhow::Result<()> {
        pair_copies(Vsftpd, Proftpd)
    }

    #[test]
    fn vsftpd_to_pure_ftpd() -> anyhow::Result<()> {
        pair_copies(Vsftpd, PureFtpd)
    }

    #[test]
    fn proftpd_to_vsftpd() -> anyhow::Result<()> {
        pair_copies(Proftpd, Vsftpd)
    }

    #[test]
    fn proftpd_to_pure_ftpd() -> anyhow::Result<()> {
        pair_copies(Proftpd, PureFtpd)
    }

    #[test]
    fn pure_ftpd_to_vsftpd() -> anyhow::Result<()> {
        pair_copies(PureFtpd, Vsftpd)
    }

    #[test]
    fn pure_ftpd_to_proftpd() -> anyhow::Result<()> {
        pair_copies(PureFtpd, Proftpd)
    }
}

// ---- FXP refused by configuration ----

/// A stock server (FXP off) and an FXP-enabled one: the copy fails for good, as a
/// job-level error, after both role orders, and the message names the settings.
fn fxp_refused(stock_kind: ServerKind, stock_side: Side) -> Result<()> {
    let other_kind = match stock_kind {
        Vsftpd => Proftpd,
        Proftpd => PureFtpd,
        PureFtpd => Vsftpd,
    };
    let stock = start_stock(stock_kind)?;
    let open_server = start(other_kind)?;
    let (src, dst) = match stock_side {
        Side::Source => (&stock, &open_server),
        Side::Destination => (&open_server, &stock),
    };
    src.put_file("/f.bin", &payload(100_000, 3))?;
    // Pure-FTPd refusing a foreign data connection says nothing: one reply timeout.
    let limits = Limits {
        reply_timeout: Duration::from_secs(3),
        ..limits()
    };
    block_on(async {
        let mut pair = Pair::open(
            &login(src),
            &login(dst),
            image(),
            &limits,
            Arc::new(AllowAll),
        )
        .await?;
        let started = Instant::now();
        let error = match pair
            .copy(&request("/f.bin", "/copy.bin", DestCommand::Replace))
            .await
        {
            Err(error) => error,
            Ok(outcome) => bail!(
                "{stock_kind} without FXP as {stock_side}: {}",
                explain(&outcome)
            ),
        };
        let elapsed = started.elapsed();
        let PairError {
            failure: JobFailure::FxpRefused { explanation, .. },
            disposition,
            transcript,
        } = &error
        else {
            bail!("expected FxpRefused, got {error}\n{}", error.transcript);
        };
        ensure!(disposition.is_permanent(), "{disposition:?}");
        for setting in [
            "port_promiscuous=YES",
            "pasv_promiscuous=YES",
            "AllowForeignAddress on",
            "-w",
        ] {
            ensure!(
                explanation.contains(setting),
                "{explanation} lacks {setting}"
            );
        }
        ensure!(
            explanation.contains(&format!("the {stock_side} server")),
            "{explanation} does not blame the {stock_side}"
        );
        // Both role orders were tried: PASV went to each side.
        for side in [Side::Source, Side::Destination] {
            ensure!(
                transcript.count_sent(side, "PASV") >= 1,
                "no PASV to the {side}:\n{transcript}"
            );
        }
        ensure!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
        ensure!(
            !dst.path("/copy.bin").exists(),
            "a partial /copy.bin was left on the destination:\n{transcript}"
        );
        eprintln!("{stock_kind} stock as {stock_side}: {explanation}");
        anyhow::Ok(())
    })
}

mod fxp_refused {
    use super::fxp_refused;
    use bftp_ftp::Side;
    use bftp_tests::ServerKind::{Proftpd, PureFtpd, Vsftpd};

    #[test]
    fn stock_vsftpd_as_destination() -> anyhow::Result<()> {
        fxp_refused(Vsftpd, Side::Destination)
    }

    #[test]
    fn stock_proftpd_as_destination() -> anyhow::Result<()> {
        fxp_refused(Proftpd, Side::Destination)
    }

    #[test]
    fn stock_pure_ftpd_as_destination() -> anyhow::Result<()> {
        fxp_refused(PureFtpd, Side::Destination)
    }

    #[test]
    fn stock_vsftpd_as_source() -> anyhow::Result<()> {
        fxp_refused(Vsftpd, Side::Source)
    }

    #[test]
    fn stock_proftpd_as_source() -> anyhow::Result<()> {
        fxp_refused(Proftpd, Side::Source)
    }

    #[test]
    fn stock_pure_ftpd_as_source() -> anyhow::Result<()> {
        fxp_refused(PureFtpd, Side::Source)
    }
}

// ---- member-level and job-level failures ----

/// 550 for one file: permanent for that member, nothing touched on the destination,
/// and the pair goes on with the next member.
#[test]
fn missing_source_file_fails_only_that_member() -> Result<()> {
    let mut failures = Vec::new();
    for (src_kind, dst_kind) in [(Vsftpd, PureFtpd), (Proftpd, Vsftpd), (PureFtpd, Proftpd)] {
        let src = start(src_kind)?;
        let dst = start(dst_kind)?;
        src.put_file("/there.bin", &payload(5000, 1))?;
        let result: Result<()> = block_on(async {
            let mut pair = open(&src, &dst, image()).await?;
            let outcome = pair
                .copy(&request("/missing.bin", "/copy.bin", DestCommand::Replace))
                .await?;
            match &outcome {
                CopyOutcome::Permanent {
                    kind: PermanentKind::FileUnavailable,
                    failure:
                        Failure::Reply {
                            side: Side::Source,
                            reply,
                            ..
                        },
                    report,
                } if reply.code().get() == 550 && !report.destination_touched => {}
                other => bail!("{src_kind}: {}", explain(other)),
            }
            ensure!(!dst.path("/copy.bin").exists(), "destination file created");
            ensure!(
                pair.is_usable(),
                "the pair died with a member-level failure"
            );
            let outcome = pair
                .copy(&request("/there.bin", "/copy.bin", DestCommand::Replace))
                .await?;
            expect_success(&outcome, "the next member")?;
            pair.close().await;
            Ok(())
        });
        if let Err(e) = result {
            failures.push(format!("{src_kind} -> {dst_kind}: {e:#}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// 530 to PASS: a permanent, job-level failure that names the server and the
/// command; the password shows nowhere. vsftpd and Pure-FTPd answer after 3 to 5 s,
/// so the three run concurrently.
#[test]
fn wrong_password_is_a_job_level_permanent_failure() -> Result<()> {
    let servers: Vec<(FtpServer, FtpServer)> = ServerKind::ALL
        .into_iter()
        .map(|kind| Ok((start(kind)?, start(kind)?)))
        .collect::<Result<_>>()?;
    let results = block_on(async {
        let attempts = servers.iter().map(|(src, dst)| async move {
            let mut wrong = login(dst);
            wrong.password = Some(Secret::new("not-the-password"));
            let started = Instant::now();
            let result =
                Pair::open(&login(src), &wrong, image(), &limits(), Arc::new(AllowAll)).await;
            (dst.kind(), started.elapsed(), result)
        });
        let mut out = Vec::new();
        let mut set = Vec::new();
        for attempt in attempts {
            set.push(attempt);
        }
        // Concurrently, without spawning (the futures borrow the servers).
        let (a, b, c) = match <[_; 3]>::try_from(set) {
            Ok([a, b, c]) => tokio::join!(a, b, c),
            Err(_) => unreachable!("three servers"),
        };
        out.extend([a, b, c]);
        out
    });
    let mut failures = Vec::new();
    for (kind, elapsed, result) in results {
        let check = || -> Result<()> {
            let error = match result {
                Ok(_) => bail!("logged in with a wrong password"),
                Err(error) => error,
            };
            ensure!(error.is_permanent(), "{:?}", error.disposition);
            ensure!(error.side() == Some(Side::Destination), "{error}");
            let JobFailure::Connect {
                error: ConnectError::Refused { command, reply, .. },
                ..
            } = &error.failure
            else {
                bail!("{error}");
            };
            ensure!(*command == "PASS" && reply.code().get() == 530, "{error}");
            let text = format!("{error} {:?} {}", error, error.transcript);
            ensure!(!text.contains("not-the-password"), "password shown: {text}");
            ensure!(
                error.transcript.contains("PASS ****"),
                "{}",
                error.transcript
            );
            ensure!(elapsed < limits().reply_timeout, "took {elapsed:?}");
            eprintln!("{kind}: {error} after {elapsed:?}");
            Ok(())
        };
        if let Err(e) = check() {
            failures.push(format!("{kind}: {e:#}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// The source is killed (SIGKILL, every session process) once the transfer runs:
/// transient, the pair is dead, and the partial destination file that the
/// destination's own 226 would have vouched for is deleted.
#[test]
fn server_killed_mid_transfer_is_transient() -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut size: u64 = 256 << 20;
    loop {
        let mut src = start(Vsftpd)?;
        let dst = start(Proftpd)?;
        // Sparse: the bytes still cross the data connection, but writing the file is free.
        src.put_file("/big.bin", b"")?;
        std::fs::OpenOptions::new()
            .write(true)
            .open(src.path("/big.bin"))?
            .set_len(size)?;
        let mut pair = rt.block_on(open(&src, &dst, image()))?;
        let mut progress = pair.progress();
        let copy = rt.spawn(async move {
            let outcome = pair
                .copy(&request("/big.bin", "/copy.bin", DestCommand::Replace))
                .await;
            (outcome, pair)
        });
        rt.block_on(
            progress.wait_for(|p| {
                matches!(p, Progress::Transferring { .. } | Progress::Finished { .. })
            }),
        )
        .context("progress channel closed")?;
        src.kill();
        let (outcome, pair) = rt.block_on(copy)?;
        let outcome = outcome?;
        match &outcome {
            CopyOutcome::Succeeded { .. } if size < 4 << 30 => {
                // The transfer beat the kill: try a bigger file.
                size *= 4;
                continue;
            }
            CopyOutcome::Transient {
                connection_lost: true,
                failure,
                report,
                ..
            } => {
                ensure!(!pair.is_usable(), "the pair survived a killed server");
                let blames_source = matches!(
                    failure,
                    Failure::Session {
                        side: Side::Source,
                        ..
                    } | Failure::Reply {
                        side: Side::Source,
                        ..
                    } | Failure::Reply {
                        side: Side::Destination,
                        ..
                    }
                );
                ensure!(blames_source, "{}", explain(&outcome));
                let deleted = report
                    .fallbacks
                    .iter()
                    .any(|f| matches!(f, Fallback::PartialDeleted { deleted: true, .. }));
                ensure!(
                    deleted && !dst.path("/copy.bin").exists(),
                    "partial file not deleted: {}",
                    explain(&outcome)
                );
                eprintln!(
                    "killed source during a {size}-byte copy: {failure}; destination said {:?}",
                    report.destination_final
                );
                return Ok(());
            }
            other => bail!("{}", explain(other)),
        }
    }
}

/// Stock proFTPD refuses APPE with a 451 that will never turn into success; a
/// per-host override makes it permanent, and the outcome says why.
#[test]
fn reply_override_turns_proftpd_append_refusal_permanent() -> Result<()> {
    let src = start(Vsftpd)?;
    let dst = start(Proftpd)?;
    src.put_file("/a.bin", b"more")?;
    dst.put_file("/log.bin", b"some")?;
    let code = ReplyCode::new(451).context("451")?;
    let limits = Limits {
        overrides: vec![ReplyOverride::new(
            &dst.host().to_string(),
            code,
            TreatAs::Permanent,
        )?],
        ..limits()
    };
    block_on(async {
        let mut pair = Pair::open(
            &login(&src),
            &login(&dst),
            image(),
            &limits,
            Arc::new(AllowAll),
        )
        .await?;
        let outcome = pair
            .copy(&request("/a.bin", "/log.bin", DestCommand::Append))
            .await?;
        match &outcome {
            CopyOutcome::Permanent {
                kind: PermanentKind::Overridden(c),
                failure: Failure::Reply { reply, .. },
                report,
            } if *c == code && reply.text().contains("Append/Restart not permitted") => {
                ensure!(report.destination_size_before == Some(4), "{report:?}");
            }
            other => bail!("{}", explain(other)),
        }
        ensure!(dst.read_file("/log.bin")? == b"some");
        Ok(())
    })
}

// ---- wildcard listings ----

/// Directory, pattern, and the (name, size) of the members expected.
type ListCase = (&'static str, &'static str, &'static [(&'static str, u64)]);

fn wildcard_listing(kind: ServerKind) -> Result<()> {
    let server = start(kind)?;
    for (name, len) in [
        ("a.txt", 10),
        ("b.txt", 20),
        ("c.dat", 30),
        (".hidden.txt", 5),
    ] {
        server.put_file(&format!("/pub/{name}"), &payload(len, 1))?;
    }
    server.mkdir("/pub/dir.txt")?;
    server.put_file("/pub/sub/inner.txt", b"inner")?;
    server.put_file("/top.txt", b"top")?;
    server.mkdir("/empty")?;
    // What the server itself sends for `NLST pub`: every name with the directory
    // prefix, and from Pure-FTPd `pub/.` and `pub/..` too. The engine lists with
    // NLST on vsftpd (no MLSD) and must strip the prefix.
    let raw = raw_nlst(&server, "pub")?;
    ensure!(
        !raw.is_empty() && raw.iter().all(|l| l.starts_with("pub/")),
        "{kind} NLST pub sent {raw:?}"
    );
    ensure!(
        raw.contains(&"pub/..".to_owned()) == (kind == PureFtpd),
        "{kind} NLST pub sent {raw:?}"
    );
    let expected_method = match kind {
        Vsftpd => ListMethod::Nlst,
        Proftpd | PureFtpd => ListMethod::Mlsd,
    };
    block_on(async {
        let mut pair = open(&server, &server, image()).await?;
        let mut failures = Vec::new();
        let cases: &[ListCase] = &[
            ("pub", "*.txt", &[("a.txt", 10), ("b.txt", 20)]),
            ("/pub", "*", &[("a.txt", 10), ("b.txt", 20), ("c.dat", 30)]),
            ("pub/", "[ab].txt", &[("a.txt", 10), ("b.txt", 20)]),
            ("/pub/", "?.dat", &[("c.dat", 30)]),
            ("pub", ".*", &[(".hidden.txt", 5)]),
            ("", "*.txt", &[("top.txt", 3)]),
            ("pub", "*.none", &[]),
            ("empty", "*", &[]),
        ];
        for &(dir, pattern, expected) in cases {
            // vsftpd's NLST is `ls` without -a: it never lists dot files.
            let expected = if kind == Vsftpd && pattern == ".*" {
                &[][..]
            } else {
                expected
            };
            match pair.list_source(dir, pattern).await {
                Ok(listing) => {
                    let mut got: Vec<(String, Option<u64>)> = listing
                        .members
                        .iter()
                        .map(|m| (m.name.clone(), m.size))
                        .collect();
                    got.sort();
                    let want: Vec<(String, Option<u64>)> = expected
                        .iter()
                        .map(|&(n, s)| (n.to_owned(), Some(s)))
                        .collect();
                    if got != want {
                        failures.push(format!(
                            "{dir:?} {pattern:?}: got {got:?}, want {want:?}\n{}",
                            listing.transcript
                        ));
                    }
                    if got
                        .iter()
                        .any(|(n, _)| n == "." || n == ".." || n.contains('/'))
                    {
                        failures.push(format!("{dir:?} {pattern:?}: {got:?}"));
                    }
                    if !listing.rejected.is_empty() {
                        failures.push(format!(
                            "{dir:?} {pattern:?}: rejected {:?}",
                            listing.rejected
                        ));
                    }
                    if !expected.is_empty() && listing.method != expected_method {
                        failures.push(format!("{dir:?}: listed with {:?}", listing.method));
                    }
                    // MLSD gives the modify time; NLST members go without (not asked
                    // per name: it decides nothing and cost a round trip per file).
                    let want_modified = listing.method == ListMethod::Mlsd;
                    if !expected.is_empty()
                        && listing
                            .members
                            .iter()
                            .any(|m| m.modified.is_some() != want_modified)
                    {
                        failures.push(format!(
                            "{dir:?} {pattern:?}: no modify time: {:?}",
                            listing.members
                        ));
                    }
                    if pattern == "*.txt"
                        && dir == "pub"
                        && !listing.skipped.iter().any(|s| s.name == "dir.txt")
                    {
                        failures.push(format!(
                            "the directory dir.txt was not reported as skipped: {:?}",
                            listing.skipped
                        ));
                    }
                }
                Err(e) => failures.push(format!(
                    "{dir:?} {pattern:?}: {e}\n{}",
                    pair.take_transcript()
                )),
            }
        }
        match pair.list_source("missing", "*").await {
            Err(e @ ListError::DirectoryMissing { .. }) if e.disposition().is_permanent() => {}
            other => failures.push(format!("missing directory: {other:?}")),
        }
        ensure!(pair.is_usable(), "the pair died while listing");
        // The pair still copies after listings (and a failed one).
        let outcome = pair
            .copy(&request("/pub/a.txt", "/copied.txt", DestCommand::Replace))
            .await?;
        expect_success(&outcome, "copy after listing")?;
        ensure!(failures.is_empty(), "{kind}:\n{}", failures.join("\n"));
        Ok(())
    })
}

/// NLST over a raw control connection, lines as sent.
fn raw_nlst(server: &FtpServer, dir: &str) -> Result<Vec<String>> {
    use std::io::Read;
    let mut ftp = server.login()?;
    let addr = ftp.pasv()?;
    let mut data = std::net::TcpStream::connect(addr)?;
    let reply = ftp.cmd(&format!("NLST {dir}"))?;
    ensure!(reply.class() == 1, "NLST answered {reply:?}");
    let mut text = String::new();
    data.read_to_string(&mut text)?;
    drop(data);
    let reply = ftp.reply()?;
    ensure!(reply.code == 226, "NLST ended with {reply:?}");
    Ok(text.lines().map(str::to_owned).collect())
}

mod wildcard_listing {
    use bftp_tests::ServerKind;

    #[test]
    fn vsftpd() -> anyhow::Result<()> {
        super::wildcard_listing(ServerKind::Vsftpd)
    }

    #[test]
    fn proftpd() -> anyhow::Result<()> {
        super::wildcard_listing(ServerKind::Proftpd)
    }

    #[test]
    fn pure_ftpd() -> anyhow::Result<()> {
        super::wildcard_listing(ServerKind::PureFtpd)
    }
}

// ---- verify ----

fn verify_request(source: &str, destination: &str) -> VerifyRequest {
    VerifyRequest {
        source_path: source.to_owned(),
        destination_path: destination.to_owned(),
        dest_command: bftp_core::DestCommand::Replace,
        proof: None,
        recursive: false,
        data_path: bftp_core::route::DataPath::Fxp,
    }
}

#[test]
fn verify_reports_each_check() -> Result<()> {
    let src = start(Vsftpd)?;
    let dst = start(PureFtpd)?;
    src.put_file("/pub/a.txt", b"a")?;
    src.put_file("/pub/b.txt", b"b")?;
    dst.mkdir("/in")?;
    block_on(async {
        let run = |source: &'static str, destination: &'static str| {
            let (s, d) = (login(&src), login(&dst));
            async move {
                verify(
                    &s,
                    &d,
                    image(),
                    &limits(),
                    Arc::new(AllowAll),
                    &verify_request(source, destination),
                )
                .await
            }
        };
        let report = run("/pub/a.txt", "/in/").await;
        ensure!(report.ok(), "{:#?}", report.checks);
        ensure!(report.checks.len() == 8, "{:#?}", report.checks);
        // vsftpd and Pure-FTPd have SIZE and no hash command.
        let proof = report.check("proof").context("no proof check")?;
        ensure!(
            proof
                .detail
                .starts_with("size (neither server offers a hash command"),
            "{proof:?}"
        );
        let data = report
            .check("third-party data connection")
            .context("no data check")?;
        ensure!(data.detail.contains("source accepts PASV"), "{data:?}");

        let report = run("/pub/*.txt", "/in/new.txt").await;
        ensure!(report.ok(), "{:#?}", report.checks);
        let file = report.check("source file").context("no source check")?;
        ensure!(
            file.detail.contains("2 file(s)") && file.detail.contains("a.txt, b.txt"),
            "{file:?}"
        );

        let report = run("/pub/none.bin", "/nodir/x.bin").await;
        let failed: Vec<&str> = report
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.name.as_str())
            .collect();
        ensure!(
            failed == ["source file", "destination directory"],
            "{:#?}",
            report.checks
        );
        let detail = &report
            .check("source file")
            .context("no source check")?
            .detail;
        ensure!(detail.contains("550"), "{detail}");

        let report = run("/pub/*.none", "").await;
        ensure!(
            !report.check("source file").is_some_and(|c| c.ok),
            "{:#?}",
            report.checks
        );
        Ok(())
    })?;

    // A wrong password fails its login check and stops there.
    let mut wrong = login(&dst);
    wrong.password = Some(Secret::new("nope"));
    let report = block_on(verify(
        &login(&src),
        &wrong,
        image(),
        &limits(),
        Arc::new(AllowAll),
        &verify_request("/pub/a.txt", ""),
    ));
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.name.as_str())
        .collect();
    ensure!(
        failed == ["destination login"] && report.checks.len() == 2,
        "{:#?}",
        report.checks
    );
    ensure!(
        !format!("{report:?}").contains("nope\""),
        "password in the report"
    );
    Ok(())
}

/// Two stock servers: each refuses a PORT naming the other, and verify says which
/// setting would allow it.
#[test]
fn verify_names_the_setting_when_both_refuse_foreign_port() -> Result<()> {
    let src = start_stock(Proftpd)?;
    let dst = start_stock(Vsftpd)?;
    src.put_file("/a.bin", b"a")?;
    let report = block_on(verify(
        &login(&src),
        &login(&dst),
        image(),
        &limits(),
        Arc::new(AllowAll),
        &verify_request("/a.bin", ""),
    ));
    let check = report
        .check("third-party data connection")
        .context("no data check")?;
    ensure!(!check.ok, "{:#?}", report.checks);
    ensure!(
        check.detail.contains("port_promiscuous=YES")
            && check.detail.contains("AllowForeignAddress on"),
        "{check:?}"
    );
    ensure!(
        report.checks.iter().filter(|c| !c.ok).count() == 1,
        "{:#?}",
        report.checks
    );
    Ok(())
}

/// Issue 29: the same two stock servers under `auto`: the refusal means a relay (both
/// accept passive mode), the check passes and the verdict names the refusing reply; under
/// `relay` no PORT is sent and both servers' passive mode is the check.
#[test]
fn verify_under_auto_relays_a_pair_that_refuses_the_third_party() -> Result<()> {
    use bftp_core::route::DataPath;
    use bftp_ftp::{PathReason, WouldTake};
    let src = start_stock(Proftpd)?;
    let dst = start_stock(Vsftpd)?;
    src.put_file("/a.bin", b"a")?;
    let run = |data_path| {
        block_on(verify(
            &login(&src),
            &login(&dst),
            image(),
            &limits(),
            Arc::new(AllowAll),
            &VerifyRequest {
                data_path,
                ..verify_request("/a.bin", "")
            },
        ))
    };
    let report = run(DataPath::Auto);
    ensure!(report.ok(), "{:#?}", report.checks);
    let verdict = report.data_path.clone().context("no verdict")?;
    ensure!(
        (verdict.would_take, verdict.reason) == (WouldTake::Relay, PathReason::Refused),
        "{verdict:?}"
    );
    // vsftpd's refusal of a PORT naming another host.
    ensure!(
        verdict.detail.contains("answered PORT with 500"),
        "{verdict:?}"
    );
    let check = report
        .check("third-party data connection")
        .context("no data check")?;
    ensure!(
        check.detail.contains("would relay through bftpd"),
        "{check:?}"
    );

    let report = run(DataPath::Fxp);
    let verdict = report.data_path.clone().context("no verdict")?;
    ensure!(
        !report.ok()
            && verdict.would_take == WouldTake::None
            && verdict.reason == PathReason::FxpOnly,
        "{verdict:?} {:#?}",
        report.checks
    );

    let report = run(DataPath::Relay);
    ensure!(report.ok(), "{:#?}", report.checks);
    let verdict = report.data_path.clone().context("no verdict")?;
    ensure!(
        (verdict.would_take, verdict.reason) == (WouldTake::Relay, PathReason::Asked),
        "{verdict:?}"
    );
    ensure!(
        report.check("relay data connections").is_some_and(|c| c.ok)
            && report.check("third-party data connection").is_none(),
        "{:#?}",
        report.checks
    );
    for side in [Side::Source, Side::Destination] {
        ensure!(
            report.transcript.count_sent(side, "PORT") == 0
                && report.transcript.count_sent(side, "EPRT") == 0,
            "a relay's verify sent a PORT"
        );
    }
    Ok(())
}

/// The host policy sees the resolved addresses before any connection is made.
#[test]
fn address_check_refuses_before_connecting() -> Result<()> {
    let src = start(Vsftpd)?;
    let dst = start(Proftpd)?;
    let deny_destination_port = dst.port();
    let check = move |host: &str, addrs: &[std::net::IpAddr]| -> Result<(), String> {
        let _ = deny_destination_port;
        if addrs.iter().any(|a| a.is_loopback()) && host == "127.0.0.2" {
            Err("loopback is not allowed".to_owned())
        } else {
            Ok(())
        }
    };
    let result = block_on(Pair::open(
        &login(&src),
        &login(&dst),
        image(),
        &limits(),
        Arc::new(check),
    ));
    let error = match result {
        Ok(_) => bail!("the policy was not applied"),
        Err(error) => error,
    };
    ensure!(error.is_permanent(), "{error:?}");
    ensure!(
        matches!(&error.failure, JobFailure::Connect { error: ConnectError::AddressRefused { reason, .. }, .. } if reason.contains("loopback")),
        "{error}"
    );
    ensure!(
        !error.transcript.contains("USER"),
        "connected anyway:\n{}",
        error.transcript
    );
    Ok(())
}
