//! Pipelined copies (issue 14): a copy told the next one ([`Pair::expect_next`]) sends that
//! copy's SIZE and PASV behind its RETR, and its PORT and STOR behind its own destination
//! SIZE. Checked against real servers (every kind on each side, files that take a while so
//! commands wait behind a running transfer) through the delay proxy, which counts the
//! client's turns, and against the scripted hostile server refusing in the middle of a batch
//! or answering slowly: the connection stays in step, every proof is still made, and nothing
//! is stored for a file whose source is gone.

use std::time::Duration;

use anyhow::{ensure, Result};
use bftp_core::DestCommand;
use bftp_ftp::{CopyOutcome, CopyRequest, Failure, Limits, Pair, Side, SizeCheck};
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::scenario::{block_on, ftp_login, hostile_login, open, request};
use bftp_tests::{payload, DelayProxy, FtpOptions, FtpServer, ServerKind};

fn limits() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(5),
        transfer_timeout: Duration::from_secs(30),
        ..Limits::default()
    }
}

/// Copies `requests` in order on `pair`, each told the one after it, as a lane does.
async fn copy_all(pair: &mut Pair, requests: &[CopyRequest]) -> Result<Vec<CopyOutcome>> {
    let mut outcomes = Vec::new();
    for (i, req) in requests.iter().enumerate() {
        pair.expect_next(requests.get(i + 1).cloned());
        let outcome = pair
            .copy(req)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}\n{}", req.source_path, e.transcript))?;
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

fn proven(outcome: &CopyOutcome) -> bool {
    matches!(
        outcome,
        CopyOutcome::Succeeded {
            size_check: SizeCheck::Equal { .. },
            ..
        }
    )
}

fn story(outcome: &CopyOutcome) -> String {
    format!("{outcome:?}\n{}", outcome.report().transcript)
}

/// `n` files of varied sizes (empty, small, 3 MiB so a transfer is still running while
/// the commands behind its RETR wait) and their requests into `in/`.
fn files(src: &FtpServer, n: usize) -> Result<Vec<(CopyRequest, Vec<u8>)>> {
    (0..n)
        .map(|i| {
            let len = match i % 4 {
                0 => 0,
                1 => 3 << 20,
                _ => 1000 + i,
            };
            let data = payload(len, i as u8);
            let name = format!("f{i:02}.bin");
            src.put_file(&format!("out/{name}"), &data)?;
            Ok((
                request(
                    &format!("out/{name}"),
                    &format!("in/{name}"),
                    DestCommand::Replace,
                ),
                data,
            ))
        })
        .collect()
}

fn real_servers(src_kind: ServerKind, dst_kind: ServerKind) -> Result<()> {
    let opts = |last| FtpOptions {
        host: std::net::Ipv4Addr::new(127, 0, 0, last),
        ..FtpOptions::default()
    };
    let src = FtpServer::start(src_kind, opts(2))?;
    let dst = FtpServer::start(dst_kind, opts(3))?;
    dst.mkdir("in")?;
    const N: usize = 12;
    let files = files(&src, N)?;
    let requests: Vec<CopyRequest> = files.iter().map(|(r, _)| r.clone()).collect();
    // 1 ms each way: the turns are counted, not timed.
    let delay = Duration::from_millis(1);
    let (sp, dp) = (
        DelayProxy::for_server(&src, delay)?,
        DelayProxy::for_server(&dst, delay)?,
    );
    let mut src_login = ftp_login(&src);
    src_login.port = sp.port();
    let mut dst_login = ftp_login(&dst);
    dst_login.port = dp.port();
    let what = format!("{src_kind} -> {dst_kind}");
    block_on(async {
        let mut pair = open(&src_login, &dst_login, &limits()).await?;
        let before = sp.turns() + dp.turns();
        let outcomes = copy_all(&mut pair, &requests).await?;
        let turns = sp.turns() + dp.turns() - before;
        for (outcome, (req, data)) in outcomes.iter().zip(&files) {
            ensure!(
                proven(outcome),
                "{what} {}: {}",
                req.source_path,
                story(outcome)
            );
            ensure!(
                dst.read_file(&req.dest_path)? == *data,
                "{what}: {} differs",
                req.dest_path
            );
        }
        // Sequentially each file costs 6 or more turns; pipelined, two, except the first
        // (SIZE with PASV behind it, PORT and STOR each wait for their reply: 3 more).
        ensure!(
            turns <= 2 * N as u64 + 3,
            "{what}: {turns} turns for {N} files"
        );
        // In step: the next command gets its own reply.
        let size = pair
            .size(Side::Destination, &requests[1].dest_path)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: SIZE after the copies: {e}"))?;
        ensure!(size == Some(3 << 20), "{what}: SIZE answered {size:?}");
        ensure!(pair.is_usable(), "{what}: pair unusable");
        pair.close().await;
        Ok(())
    })
}

#[test]
fn pipelined_copies_cost_two_turns_per_file_between_real_servers() -> Result<()> {
    use ServerKind::{Proftpd, PureFtpd, Vsftpd};
    let mut failures = Vec::new();
    for (s, d) in [(Vsftpd, Proftpd), (Proftpd, PureFtpd), (PureFtpd, Vsftpd)] {
        if let Err(e) = real_servers(s, d) {
            failures.push(format!("{e:#}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

/// A hostile source on 127.0.0.5 and destination on 127.0.0.6 with `files` on the source.
fn hostile_pair(
    source: Script,
    dest: Script,
    files: &[(&str, &[u8])],
) -> Result<(HostileServer, HostileServer)> {
    let mut source = source
        .host(std::net::Ipv4Addr::new(127, 0, 0, 5))
        .user("src", "src-pw");
    for (path, data) in files {
        source = source.file(path, data.to_vec());
    }
    let dest = dest
        .host(std::net::Ipv4Addr::new(127, 0, 0, 6))
        .user("dst", "dst-pw")
        .dir("/in");
    Ok((HostileServer::start(source)?, HostileServer::start(dest)?))
}

fn reqs(names: &[&str]) -> Vec<CopyRequest> {
    names
        .iter()
        .map(|n| {
            request(
                &format!("/out/{n}"),
                &format!("/in/{n}"),
                DestCommand::Replace,
            )
        })
        .collect()
}

/// Copies `names` from `/out` to `/in` on one pair, each copy told the next, through delay
/// proxies (1 ms): the outcomes and the client's turns on both connections for the copies.
fn run(
    src: &HostileServer,
    dst: &HostileServer,
    names: &[&str],
) -> Result<(Vec<CopyOutcome>, u64)> {
    let delay = Duration::from_millis(1);
    let sp = DelayProxy::start(src.host().into(), src.addr(), delay)?;
    let dp = DelayProxy::start(dst.host().into(), dst.addr(), delay)?;
    let (mut src_login, mut dst_login) = (hostile_login(src), hostile_login(dst));
    src_login.port = sp.port();
    dst_login.port = dp.port();
    block_on(async {
        let mut pair = open(&src_login, &dst_login, &limits()).await?;
        let before = sp.turns() + dp.turns();
        let outcomes = copy_all(&mut pair, &reqs(names)).await?;
        let turns = sp.turns() + dp.turns() - before;
        if pair.is_usable() {
            pair.close().await;
        }
        Ok((outcomes, turns))
    })
}

#[test]
fn a_source_file_gone_before_its_turn_is_never_stored() -> Result<()> {
    // b is missing: its SIZE, sent behind a's RETR, gets 550. b's copy must then fail
    // without a STOR for it, and c be copied on the same, still in step, connections.
    let (src, dst) = hostile_pair(
        Script::new(),
        Script::new(),
        &[("/out/a", b"aaaa"), ("/out/c", b"cccccc")],
    )?;
    let (outcomes, _) = run(&src, &dst, &["a", "b", "c"])?;
    ensure!(proven(&outcomes[0]), "a: {}", story(&outcomes[0]));
    ensure!(
        matches!(&outcomes[1], CopyOutcome::Permanent { .. }),
        "b: {}",
        story(&outcomes[1])
    );
    ensure!(proven(&outcomes[2]), "c: {}", story(&outcomes[2]));
    let stored: Vec<String> = dst
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("STOR"))
        .collect();
    ensure!(
        stored == ["STOR /in/a", "STOR /in/c"],
        "STORs at the destination: {stored:?}"
    );
    ensure!(dst.stored("/in/c").as_deref() == Some(&b"cccccc"[..]));
    Ok(())
}

#[test]
fn a_first_file_gone_with_pasv_behind_its_size_keeps_the_source_in_step() -> Result<()> {
    // The first copy's SIZE goes with the PASV behind it; "gone" is missing, so SIZE gets
    // 550 and the copy fails without a STOR, and the PASV's reply, read before the next
    // command, does not pass for the next copy's. b and c are copied and proven.
    let (src, dst) = hostile_pair(
        Script::new(),
        Script::new(),
        &[("/out/b", b"bbbbb"), ("/out/c", b"cc")],
    )?;
    let (outcomes, _) = run(&src, &dst, &["gone", "b", "c"])?;
    ensure!(
        matches!(&outcomes[0], CopyOutcome::Permanent { .. }),
        "gone: {}",
        story(&outcomes[0])
    );
    for (o, name) in outcomes[1..].iter().zip(["b", "c"]) {
        ensure!(proven(o), "{name}: {}", story(o));
    }
    let sent = src.commands();
    let size = sent.iter().position(|c| c == "SIZE /out/gone");
    ensure!(
        size.is_some_and(|i| sent.get(i + 1).map(String::as_str) == Some("PASV")),
        "the first SIZE did not have PASV behind it: {sent:?}"
    );
    let stored: Vec<String> = dst
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("STOR"))
        .collect();
    ensure!(
        stored == ["STOR /in/b", "STOR /in/c"],
        "STORs at the destination: {stored:?}"
    );
    Ok(())
}

#[test]
fn a_port_refused_in_the_middle_of_a_batch_keeps_the_connection_in_step() -> Result<()> {
    // The second PORT (sent ahead with b's STOR behind it) is refused: STOR's own reply
    // follows; b falls back to EPRT and is still copied and proven, and so is c.
    let (src, dst) = hostile_pair(
        Script::new(),
        Script::new().on(
            "PORT",
            Action::Sequence(vec![
                Action::Default,
                Action::reply("500 Illegal PORT command."),
            ]),
        ),
        &[("/out/a", b"aaaa"), ("/out/b", b"bbbbb"), ("/out/c", b"cc")],
    )?;
    let (outcomes, _) = run(&src, &dst, &["a", "b", "c"])?;
    for (o, name) in outcomes.iter().zip(["a", "b", "c"]) {
        ensure!(proven(o), "{name}: {}", story(o));
    }
    ensure!(dst.stored("/in/b").as_deref() == Some(&b"bbbbb"[..]));
    ensure!(dst.stored("/in/c").as_deref() == Some(&b"cc"[..]));
    let cmds = dst.commands();
    ensure!(
        cmds.iter().any(|c| c.starts_with("EPRT")),
        "no EPRT after the refused PORT: {cmds:?}"
    );
    Ok(())
}

#[test]
fn a_wrong_size_after_the_next_stor_went_out_calls_that_transfer_off() -> Result<()> {
    // a's proof (the destination's SIZE, with b's PORT and STOR behind it) says 1 byte: a
    // is not proven and its file is deleted, which needs the destination free, so b's
    // started transfer is called off (both connections closed and reopened); b is then
    // copied afresh and proven.
    let (src, dst) = hostile_pair(
        Script::new(),
        Script::new().on("SIZE", Action::Sequence(vec![Action::reply("213 1")])),
        &[("/out/a", b"aaaa"), ("/out/b", b"bbbbb")],
    )?;
    let (outcomes, _) = run(&src, &dst, &["a", "b"])?;
    ensure!(
        matches!(
            &outcomes[0],
            CopyOutcome::Transient {
                failure: Failure::SizeMismatch { .. },
                ..
            }
        ),
        "a: {}",
        story(&outcomes[0])
    );
    ensure!(proven(&outcomes[1]), "b: {}", story(&outcomes[1]));
    ensure!(dst.stored("/in/b").as_deref() == Some(&b"bbbbb"[..]));
    ensure!(dst.stored("/in/a").is_none(), "a's unproven file was left");
    Ok(())
}

#[test]
fn slow_answers_to_commands_sent_ahead_are_waited_for_in_order() -> Result<()> {
    let slow = |a| Action::delayed(Duration::from_millis(300), a);
    let (src, dst) = hostile_pair(
        Script::new()
            .on("SIZE", slow(Action::Default))
            .on("PASV", slow(Action::Default)),
        Script::new()
            .on("PORT", slow(Action::Default))
            .on("SIZE", slow(Action::Default)),
        &[("/out/a", b"aaaa"), ("/out/b", b"bbbbb"), ("/out/c", b"cc")],
    )?;
    let (outcomes, turns) = run(&src, &dst, &["a", "b", "c"])?;
    for (o, name) in outcomes.iter().zip(["a", "b", "c"]) {
        ensure!(proven(o), "{name}: {}", story(o));
    }
    // The batches really went out (sequentially: 18 turns).
    ensure!(turns <= 2 * 3 + 3, "{turns} turns for 3 files");
    Ok(())
}

#[test]
fn a_refused_retr_drains_what_went_behind_it() -> Result<()> {
    // a's RETR is refused with SIZE b and PASV behind it: both replies are read before the
    // next command, so b and c are copied and proven on the same connections.
    let (src, dst) = hostile_pair(
        Script::new().on(
            "RETR",
            Action::Sequence(vec![Action::reply("550 Permission denied.")]),
        ),
        Script::new(),
        &[("/out/a", b"aaaa"), ("/out/b", b"bbbbb"), ("/out/c", b"cc")],
    )?;
    let (outcomes, _) = run(&src, &dst, &["a", "b", "c"])?;
    ensure!(
        !outcomes[0].is_success(),
        "a succeeded: {}",
        story(&outcomes[0])
    );
    for (o, name) in outcomes[1..].iter().zip(["b", "c"]) {
        ensure!(proven(o), "{name}: {}", story(o));
    }
    ensure!(dst.stored("/in/c").as_deref() == Some(&b"cc"[..]));
    Ok(())
}
