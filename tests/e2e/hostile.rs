//! The third-party transfer engine (`bftp-ftp`) against the scripted hostile server
//! (RULES.md §5, §6, §8): a PASV naming a third host or a privileged port, a 5yz after a
//! dropped data connection, replies without a code, hostile names in a listing, an
//! endless reply line, 421 mid-transfer, silence, a refused login. Wherever bytes move,
//! the other side is a real vsftpd, and what the engine did is checked on the wire: in
//! what the hostile server received and which data connections it saw, and in vsftpd's
//! protocol log and transfer log.
//!
//! The hostile servers listen on 127.0.0.5 and 127.0.0.6, vsftpd on 127.0.0.2, the
//! engine connects from 127.0.0.1: each address says who is who. The timeouts are short,
//! so a test that waits for a timeout on purpose takes seconds, and one that should not
//! wait fails in seconds instead of hanging.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bftp_core::reply::{
    Disposition, PermanentKind, ReplyCode, ReplyOverride, TransientKind, TransportFailure, TreatAs,
};
use bftp_core::DestCommand;
use bftp_ftp::{
    AddressCheck, ConnectError, CopyOutcome, CopyRequest, Failure, Fallback, JobFailure, Limits,
    ListError, Pair, PairError, ReplyError, SessionError, Side, Transcript,
};
use bftp_tests::engine::image;
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::payload;
use bftp_tests::scenario::{
    block_on, copy_once, ftp_login, hostile_login, hostile_to_hostile, hostile_to_vsftpd, open,
    open_pair, request, Scenario,
};
use bftp_tests::{Direction, FtpOptions, FtpServer, ServerKind};

/// Where the hostile server of a test listens (control and passive ports).
const HOSTILE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 5);
/// A second hostile server, where a test needs two.
const OTHER_HOSTILE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);
/// The third host a hostile PASV reply names (RFC 2577 bounce).
const FOREIGN: [u8; 4] = [10, 9, 8, 7];
/// How long a test may wait for a hostile server to notice something.
const NOTICE: Duration = Duration::from_secs(5);

/// Short enough that a server that does not answer fails a test in seconds, long enough
/// for a loaded machine. Tests that wait for a timeout on purpose use [`tight`].
fn limits() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(5),
        transfer_timeout: Duration::from_secs(30),
        ..Limits::default()
    }
}

/// For the tests that wait for a timeout: 2 s per reply (vsftpd's PAM login takes a few
/// hundred milliseconds on a busy machine), 6 s per copy.
fn tight() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(2),
        reply_timeout: Duration::from_secs(2),
        transfer_timeout: Duration::from_secs(6),
        ..Limits::default()
    }
}

/// A hostile server on `host` that logs in `user` (password `user-pw`).
fn script(host: Ipv4Addr, user: &str) -> Script {
    Script::new()
        .host(host)
        .user(user, format!("{user}-pw"))
        .data_timeout(Duration::from_secs(5))
}

/// The copy most tests make: `/f.bin` to `/copy.bin`, replacing.
fn f_to_copy() -> CopyRequest {
    request("/f.bin", "/copy.bin", DestCommand::Replace)
}

/// The source most tests script: the hostile server on [`HOSTILE`] serving `/f.bin`, `len`
/// bytes of payload `seed`.
fn serving_f(len: usize, seed: u8) -> Script {
    script(HOSTILE, "src").file("/f.bin", payload(len, seed))
}

/// The shape most tests share: `source` (scripted to misbehave), a fresh vsftpd, a pair
/// opened with `limits`, one copy of `/f.bin` to `/copy.bin`.
fn f_to_vsftpd(source: Script, limits: &Limits) -> Result<Scenario<FtpServer>> {
    hostile_to_vsftpd(source, &[], limits, &f_to_copy())
}

fn vsftpd() -> Result<FtpServer> {
    FtpServer::start(ServerKind::Vsftpd, FtpOptions::default())
}

/// The outcome with the whole story, for error messages.
fn explain(outcome: &CopyOutcome) -> String {
    format!("{outcome:?}\n{}", outcome.report().transcript)
}

/// The command lines the engine sent to `side`, in order.
fn sent(transcript: &Transcript, side: Side) -> Vec<String> {
    transcript
        .entries
        .iter()
        .filter(|e| e.side == side && e.kind == bftp_ftp::EntryKind::Sent)
        .map(|e| e.text.clone())
        .collect()
}

/// The command lines vsftpd received, from its protocol log (`log_ftp_protocol`):
/// `... FTP command: Client "127.0.0.1", "PORT 127,0,0,5,4,1"`. A command is logged
/// before it is answered, so every command the engine has a reply to is there.
fn vsftpd_commands(server: &FtpServer) -> Result<Vec<String>> {
    let log = std::fs::read_to_string(server.log_file())
        .with_context(|| format!("reading {}", server.log_file().display()))?;
    Ok(log
        .lines()
        .filter_map(|line| {
            line.split_once("FTP command: Client \"")?
                .1
                .split_once("\", \"")
        })
        .map(|(_, command)| command.strip_suffix('"').unwrap_or(command).to_owned())
        .collect())
}

/// Whether `line`'s command verb is `verb` (case-insensitive).
fn is_verb(line: &str, verb: &str) -> bool {
    line.split(' ')
        .next()
        .is_some_and(|v| v.eq_ignore_ascii_case(verb))
}

/// Whether vsftpd logged in and set a type (`TYPE`) but was never given a data address
/// (`PORT`, `EPRT`) or an upload (`STOR`): it took no part in a transfer.
fn never_transferred(vsftpd_seen: &[String]) -> bool {
    vsftpd_seen.iter().any(|l| is_verb(l, "TYPE"))
        && !vsftpd_seen
            .iter()
            .any(|l| is_verb(l, "PORT") || is_verb(l, "EPRT") || is_verb(l, "STOR"))
}

/// The code of a final reply, if there was one and it had a code.
fn code_of(reply: Option<&bftp_ftp::LastReply>) -> Option<u16> {
    reply.and_then(|r| r.code).map(ReplyCode::get)
}

/// Whether a partial file is accounted for: vsftpd has no `path`, or the report says a
/// partial file was left (not deleted).
fn no_unreported_partial(dst: &FtpServer, path: &str, outcome: &CopyOutcome) -> bool {
    !dst.path(path).exists()
        || outcome
            .report()
            .fallbacks
            .iter()
            .any(|f| matches!(f, Fallback::PartialDeleted { deleted: false, .. }))
}

/// `h1,h2,h3,h4,p1,p2` of a PORT argument.
fn port_arg(addr: SocketAddr) -> String {
    let IpAddr::V4(ip) = addr.ip() else {
        unreachable!("IPv4 test servers")
    };
    let [a, b, c, d] = ip.octets();
    format!(
        "{a},{b},{c},{d},{},{}",
        addr.port() >> 8,
        addr.port() & 0xff
    )
}

/// The port a 227 reply in `transcript` (from `side`) announced.
fn announced_pasv_port(transcript: &Transcript, side: Side) -> Result<u16> {
    let reply = transcript
        .entries
        .iter()
        .find(|e| {
            e.side == side && e.kind == bftp_ftp::EntryKind::Received && e.text.starts_with("227")
        })
        .context("no 227 reply in the transcript")?;
    let inner = reply
        .text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inner, _)| inner)
        .with_context(|| format!("unparsable 227 reply {:?}", reply.text))?;
    let numbers: Vec<u16> = inner
        .split(',')
        .map(|n| n.trim().parse())
        .collect::<Result<_, _>>()?;
    ensure!(numbers.len() == 6, "unparsable 227 reply {:?}", reply.text);
    Ok((numbers[4] << 8) | numbers[5])
}

/// An [`AddressCheck`] that allows everything and remembers which hosts it was asked about.
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Vec<Checked>>>);

/// A host and the addresses it resolved to, as an [`AddressCheck`] saw them.
type Checked = (String, Vec<IpAddr>);

impl AddressCheck for Recording {
    fn check(&self, host: &str, addrs: &[IpAddr]) -> Result<(), String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((host.to_owned(), addrs.to_vec()));
        Ok(())
    }
}

// ---- 1. a PASV reply naming another host ----

/// The source's PASV names 10.9.8.7: the engine notes it, ignores the host, and sends
/// vsftpd a PORT with the source's control address (127.0.0.5) and the announced port;
/// vsftpd connects there, the copy succeeds. Nothing is ever pointed at 10.9.8.7: not
/// in a command to either server, not in an address the engine looked at, and the
/// only data connections the hostile server saw came from vsftpd (the copy) and from
/// the engine itself (a listing, which follows the same rule).
#[test]
fn pasv_naming_another_host_is_ignored_and_the_copy_succeeds() -> Result<()> {
    let bytes = payload(200_000, 41);
    let src = HostileServer::start(
        script(HOSTILE, "src")
            .file("/out/data.bin", bytes.clone())
            .on("PASV", Action::PasvForeignHost { host: FOREIGN }),
    )?;
    let dst = vsftpd()?;
    dst.mkdir("/in")?;
    let checked = Recording::default();
    let started = Instant::now();
    let (outcome, listing) = block_on(async {
        let mut pair = Pair::open(
            &hostile_login(&src),
            &ftp_login(&dst),
            image(),
            &limits(),
            Arc::new(checked.clone()),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", e.transcript))?;
        let outcome = pair
            .copy(&request(
                "/out/data.bin",
                "/in/copy.bin",
                DestCommand::Replace,
            ))
            .await?;
        let listing = pair.list_source("/out", "*.bin").await;
        pair.close().await;
        anyhow::Ok((outcome, listing))
    })?;
    let elapsed = started.elapsed();

    ensure!(outcome.is_success(), "{}", explain(&outcome));
    ensure!(
        dst.read_file("/in/copy.bin")? == bytes,
        "copied bytes differ"
    );
    let report = outcome.report();
    let foreign = IpAddr::V4(Ipv4Addr::from(FOREIGN));
    let expected = Fallback::ForeignPasvHostIgnored {
        side: Side::Source,
        announced: foreign,
        used: IpAddr::V4(HOSTILE),
    };
    ensure!(
        report.fallbacks.contains(&expected),
        "no {expected:?} in {:?}",
        report.fallbacks
    );

    // The PORT the engine sent, and the one vsftpd received: the hostile server's
    // control address with the announced port, nothing else.
    let port = announced_pasv_port(&report.transcript, Side::Source)?;
    let port_line = format!(
        "PORT {}",
        port_arg(SocketAddr::new(IpAddr::V4(HOSTILE), port))
    );
    let engine_ports: Vec<String> = sent(&report.transcript, Side::Destination)
        .into_iter()
        .filter(|l| is_verb(l, "PORT") || is_verb(l, "EPRT"))
        .collect();
    ensure!(
        engine_ports == [port_line.clone()],
        "the engine sent {engine_ports:?}, expected [{port_line:?}]\n{}",
        report.transcript
    );
    let vsftpd_seen = vsftpd_commands(&dst)?;
    let vsftpd_ports: Vec<&String> = vsftpd_seen
        .iter()
        .filter(|l| is_verb(l, "PORT") || is_verb(l, "EPRT"))
        .collect();
    ensure!(
        vsftpd_ports == [&port_line],
        "vsftpd received {vsftpd_ports:?}, expected [{port_line:?}]"
    );

    // Nothing anywhere names 10.9.8.7.
    for line in sent(&report.transcript, Side::Source)
        .iter()
        .chain(&sent(&report.transcript, Side::Destination))
        .chain(&vsftpd_seen)
        .chain(&src.commands())
    {
        ensure!(
            !line.contains("10,9,8,7") && !line.contains("10.9.8.7"),
            "a command names the foreign host: {line:?}"
        );
    }
    let asked = checked.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    ensure!(
        asked.iter().all(|(_, addrs)| !addrs.contains(&foreign)) && asked.len() == 2,
        "address checks: {asked:?}"
    );

    // The data connections: one from vsftpd (the copy), one from the engine (the
    // listing), both to the hostile server's own listener; none the other way.
    let from: Vec<IpAddr> = src.data_connections_from().iter().map(|a| a.ip()).collect();
    ensure!(
        from == [IpAddr::V4(dst.host()), IpAddr::V4(Ipv4Addr::LOCALHOST)],
        "data connections came from {from:?}"
    );
    ensure!(
        src.data_connections_to().is_empty(),
        "the hostile server connected out: {:?}",
        src.data_connections_to()
    );
    let listing = listing.context("listing /out")?;
    let names: Vec<&str> = listing.members.iter().map(|m| m.name.as_str()).collect();
    ensure!(names == ["data.bin"], "listed {names:?}");
    ensure!(
        listing.transcript.contains("10.9.8.7"),
        "the listing did not note the foreign host:\n{}",
        listing.transcript
    );
    ensure!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    eprintln!("foreign PASV host ignored; copy and listing done in {elapsed:?}");
    Ok(())
}

// ---- 2. a passive reply announcing a privileged port ----

/// A 227 announcing port 21, and (PASV refused) a 229 announcing 1023: each is refused
/// (RFC 2577 bounce protection), and the copy goes on in the other role order: vsftpd gets
/// PASV, the hostile source gets PORT and connects out. vsftpd is never given a PORT or an
/// EPRT (naming that port or any other), the fallback names the refused port, and the copy
/// arrives whole.
#[test]
fn privileged_passive_port_is_refused_and_the_other_role_order_copies() -> Result<()> {
    let dst = vsftpd()?;
    dst.mkdir("in")?;
    let cases: [(&str, u16, Script); 2] = [
        (
            "PASV",
            21,
            serving_f(5000, 42).on("PASV", Action::PasvPort(21)),
        ),
        (
            "EPSV",
            1023,
            script(OTHER_HOSTILE, "src")
                .file("/f.bin", payload(5000, 43))
                .on("PASV", Action::reply("502 PASV not implemented."))
                .on("EPSV", Action::PasvPort(1023)),
        ),
    ];
    let mut failures = Vec::new();
    for (i, (command, port, source)) in cases.into_iter().enumerate() {
        let src = HostileServer::start(source)?;
        let target = format!("/in/copy-{i}.bin");
        let copy = request("/f.bin", &target, DestCommand::Replace);
        let result = (|| {
            let outcome =
                copy_once(&hostile_login(&src), &ftp_login(&dst), &limits(), &copy)?.outcome;
            ensure!(outcome.is_success(), "{}", explain(&outcome));
            let report = outcome.report();
            let swapped = report.fallbacks.iter().find_map(|f| match f {
                Fallback::RolesSwapped { reason } => Some(reason.clone()),
                _ => None,
            });
            ensure!(
                swapped.as_deref().is_some_and(|r| r.contains("RFC 2577")
                    && r.contains(command)
                    && r.contains(&format!("port {port} "))),
                "fallbacks {:?}",
                report.fallbacks
            );
            let to_src = sent(&report.transcript, Side::Source);
            ensure!(
                to_src.iter().any(|l| is_verb(l, "PORT")),
                "sent to the source: {to_src:?}"
            );
            Ok(())
        })();
        if let Err(e) = result {
            failures.push(format!("{command} port {port}: {e:#}"));
        }
        if !src.data_connections_from().is_empty() {
            failures.push(format!(
                "{command} port {port}: data connections to the hostile server from {:?}",
                src.data_connections_from()
            ));
        }
        match dst.read_file(target.trim_start_matches('/')) {
            Ok(bytes) if bytes == payload(5000, 42 + i as u8) => {}
            other => failures.push(format!("{command} port {port}: vsftpd has {other:?}")),
        }
    }
    // On the wire: vsftpd was the passive side, never given a PORT or an EPRT.
    let seen = vsftpd_commands(&dst)?;
    ensure!(
        seen.iter().any(|l| is_verb(l, "PASV")),
        "vsftpd's protocol log shows no PASV: {seen:?}"
    );
    let bad: Vec<&String> = seen
        .iter()
        .filter(|l| is_verb(l, "PORT") || is_verb(l, "EPRT"))
        .collect();
    if !bad.is_empty() {
        failures.push(format!("vsftpd received {bad:?}"));
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

// ---- 3. a 5yz after a dropped data connection ----

/// One copy whose source RETR sends half the file, closes the data connection and
/// answers `code`: vsftpd takes the short file for a whole one (226, a complete
/// upload in its transfer log), the engine does not. Returns the outcome after the
/// common checks: the source's final reply is `code`, the destination's 226, and the
/// partial file was deleted.
async fn dropped_copy(pair: &mut Pair, dst: &FtpServer, code: u16) -> Result<CopyOutcome> {
    let outcome = pair
        .copy(&request(
            "/out/data.bin",
            "/in/copy.bin",
            DestCommand::Replace,
        ))
        .await?;
    let report = outcome.report();
    ensure!(!outcome.is_success(), "{}", explain(&outcome));
    ensure!(
        code_of(report.source_final.as_ref()) == Some(code),
        "source final reply {:?}\n{}",
        report.source_final,
        report.transcript
    );
    ensure!(
        code_of(report.destination_final.as_ref()) == Some(226),
        "destination final reply {:?}\n{}",
        report.destination_final,
        report.transcript
    );
    let deleted = report.fallbacks.iter().any(|f| {
        matches!(f, Fallback::PartialDeleted { path, deleted: true, .. } if path == "/in/copy.bin")
    });
    ensure!(deleted, "partial file not deleted: {}", explain(&outcome));
    ensure!(
        !dst.path("/in/copy.bin").exists(),
        "the partial destination file is still there"
    );
    ensure!(pair.is_usable(), "the pair died: {}", explain(&outcome));
    Ok(outcome)
}

/// RFC 1068 saw servers answer a broken data connection with 5yz. The source drops the
/// data connection half-way and says 551, then 550: each member fails for good (the
/// default table), although vsftpd said 226 for the half file it got. With a per-host
/// override for the hostile server's address (551 and 550 transient) the same replies
/// are transient, and the next copy on that pair succeeds.
#[test]
fn five_yz_after_a_dropped_data_connection() -> Result<()> {
    let bytes = payload(300_000, 44);
    let src = HostileServer::start(
        script(HOSTILE, "src")
            .file("/out/data.bin", bytes.clone())
            .on(
                "RETR",
                Action::Sequence(vec![
                    Action::DropDataThen("551 Broken pipe".into()),
                    Action::DropDataThen("550 Transfer failed".into()),
                    Action::DropDataThen("551 Broken pipe".into()),
                    Action::DropDataThen("550 Transfer failed".into()),
                ]),
            ),
    )?;
    let dst = vsftpd()?;
    dst.mkdir("/in")?;
    let code = |c| ReplyCode::new(c).context("a reply code");
    let overridden = Limits {
        overrides: vec![
            ReplyOverride::new(&src.host().to_string(), code(551)?, TreatAs::Transient)?,
            ReplyOverride::new(&src.host().to_string(), code(550)?, TreatAs::Transient)?,
        ],
        ..limits()
    };
    block_on(async {
        // The default table: permanent.
        let mut pair = open(&hostile_login(&src), &ftp_login(&dst), &limits()).await?;
        for (c, expected) in [
            (551, PermanentKind::PageTypeUnknown),
            (550, PermanentKind::FileUnavailable),
        ] {
            let outcome = dropped_copy(&mut pair, &dst, c).await?;
            match &outcome {
                CopyOutcome::Permanent {
                    kind,
                    failure:
                        Failure::Reply {
                            side: Side::Source,
                            command,
                            reply,
                            ..
                        },
                    ..
                } if *kind == expected && command == "RETR" && reply.code().get() == c => {}
                other => bail!("{c} without an override: {}", explain(other)),
            }
        }
        pair.close().await;

        // With the override for this host: transient, the pair still usable.
        let mut pair = open(&hostile_login(&src), &ftp_login(&dst), &overridden).await?;
        for c in [551, 550] {
            let outcome = dropped_copy(&mut pair, &dst, c).await?;
            match &outcome {
                CopyOutcome::Transient {
                    kind: TransientKind::Overridden(k),
                    failure:
                        Failure::Reply {
                            side: Side::Source,
                            command,
                            reply,
                            ..
                        },
                    connection_lost: false,
                    ..
                } if k.get() == c && command == "RETR" && reply.code().get() == c => {}
                other => bail!("{c} with an override: {}", explain(other)),
            }
        }
        // The fifth RETR is served whole: the override does not get in the way.
        let outcome = pair
            .copy(&request(
                "/out/data.bin",
                "/in/copy.bin",
                DestCommand::Replace,
            ))
            .await?;
        ensure!(outcome.is_success(), "{}", explain(&outcome));
        pair.close().await;
        anyhow::Ok(())
    })?;
    ensure!(
        dst.read_file("/in/copy.bin")? == bytes,
        "copied bytes differ"
    );

    // vsftpd's own view: four "complete" uploads of half the file, then the whole one.
    let uploads: Vec<(u64, bool)> = dst
        .xferlog_entries()?
        .into_iter()
        .filter(|e| e.direction == Direction::Incoming && e.path == "/in/copy.bin")
        .map(|e| (e.bytes, e.complete))
        .collect();
    let half = (bytes.len() / 2) as u64;
    ensure!(
        uploads
            == [
                (half, true),
                (half, true),
                (half, true),
                (half, true),
                (bytes.len() as u64, true)
            ],
        "vsftpd's transfer log: {uploads:?}"
    );
    Ok(())
}

// ---- 4. replies without a code ----

/// The failure of a code-less reply: a transient protocol error about the source and
/// `command`, whose text is the line the server sent.
fn expect_codeless(outcome: &CopyOutcome, command: &str, text: &str) -> Result<()> {
    match outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Protocol,
            failure:
                Failure::Session {
                    side: Side::Source,
                    command: c,
                    error:
                        SessionError::Malformed {
                            error: ReplyError::NoCode { text: t },
                            ..
                        },
                    ..
                },
            connection_lost: true,
            ..
        } if c == command && t.contains(text) => {
            let shown = outcome
                .failure()
                .map(ToString::to_string)
                .unwrap_or_default();
            ensure!(
                shown.contains(text),
                "the failure does not show the text: {shown}"
            );
            Ok(())
        }
        other => bail!("{}", explain(other)),
    }
}

/// RETR answered by a line without a code (RFC 1068 saw such errors): a transient
/// protocol error with the text, no success claimed although vsftpd had started its
/// STOR, and vsftpd's partial (empty) file deleted or reported as left.
#[test]
fn reply_without_a_code_to_retr() -> Result<()> {
    let Scenario { dst, copied, .. } = f_to_vsftpd(
        serving_f(50_000, 45).on("RETR", Action::reply("No such file or directory")),
        &tight(),
    )?;
    let (outcome, elapsed) = (copied.outcome, copied.total);
    ensure!(!copied.usable, "the pair survived a code-less reply");
    expect_codeless(&outcome, "RETR", "No such file or directory")?;
    let report = outcome.report();
    // vsftpd had accepted STOR (the active side goes first): its file is either
    // deleted, or the report says it was left.
    ensure!(
        sent(&report.transcript, Side::Destination).contains(&"STOR /copy.bin".to_owned()),
        "{}",
        report.transcript
    );
    let noted = report
        .fallbacks
        .iter()
        .any(|f| matches!(f, Fallback::PartialDeleted { path, .. } if path == "/copy.bin"));
    ensure!(
        noted,
        "the partial file is not accounted for: {}",
        explain(&outcome)
    );
    let deleted_or_left = report.fallbacks.iter().any(|f| {
        matches!(f, Fallback::PartialDeleted { deleted, .. } if *deleted != dst.path("/copy.bin").exists())
    });
    ensure!(
        deleted_or_left,
        "the report and vsftpd disagree: {}",
        explain(&outcome)
    );
    ensure!(elapsed < tight().reply_timeout * 2, "took {elapsed:?}");
    eprintln!(
        "code-less RETR reply: {:?} after {elapsed:?}",
        outcome.failure()
    );
    Ok(())
}

/// PASV answered by a line without a code: a transient protocol error with the text,
/// and vsftpd is never sent a PORT or a STOR.
#[test]
fn reply_without_a_code_to_pasv() -> Result<()> {
    let Scenario { src, dst, copied } = f_to_vsftpd(
        serving_f(5000, 46).on("PASV", Action::reply("Entering Passive Mode, sort of")),
        &tight(),
    )?;
    let outcome = copied.outcome;
    expect_codeless(&outcome, "PASV", "Entering Passive Mode, sort of")?;
    ensure!(!outcome.report().destination_touched);
    let seen = vsftpd_commands(&dst)?;
    ensure!(never_transferred(&seen), "vsftpd received {seen:?}");
    ensure!(
        src.commands().iter().filter(|l| is_verb(l, "PASV")).count() == 1,
        "{:?}",
        src.commands()
    );
    Ok(())
}

/// NLST answered by a line without a code: `list_source` fails with a transient
/// protocol error carrying the text. The BSD variant, a 226 after error text on the
/// data connection, is a transient protocol error too, never a listing of bogus names.
#[test]
fn reply_without_a_code_to_nlst() -> Result<()> {
    let dst = HostileServer::start(script(OTHER_HOSTILE, "dst"))?;
    let cases = [
        (
            "no code",
            Action::reply("No such file or directory"),
            "No such file or directory",
        ),
        (
            "error text as data",
            Action::ServeData(b"pub/x: No such file or directory\r\n".to_vec()),
            "pub/x: No such file or directory",
        ),
    ];
    let mut failures = Vec::new();
    for (case, action, text) in cases {
        let src = HostileServer::start(
            script(HOSTILE, "src")
                .without_mlsd()
                .file("/pub/a.bin", b"aaaa".to_vec())
                .on("NLST", action),
        )?;
        let result = block_on(async {
            let mut pair = open(&hostile_login(&src), &hostile_login(&dst), &tight()).await?;
            match pair.list_source("/pub", "*").await {
                Ok(listing) => bail!("listed {listing:?}"),
                Err(error) => {
                    ensure!(
                        error.disposition() == Disposition::Transient(TransientKind::Protocol),
                        "{error}: {:?}",
                        error.disposition()
                    );
                    ensure!(error.to_string().contains(text), "{error}");
                    match (&error, case) {
                        (
                            ListError::Session {
                                command,
                                error:
                                    SessionError::Malformed {
                                        error: ReplyError::NoCode { .. },
                                        ..
                                    },
                                ..
                            },
                            "no code",
                        ) if command == "NLST" => {
                            ensure!(!pair.is_usable(), "the pair survived a code-less reply")
                        }
                        (ListError::ErrorText { .. }, "error text as data") => {}
                        _ => bail!("{error:?}"),
                    }
                }
            }
            anyhow::Ok(())
        });
        if let Err(e) = result {
            failures.push(format!("{case}: {e:#}"));
        }
        // Nothing was done with the "listing": no command names what it held (a CWD
        // to the listed directory, to tell an empty one from a missing one, is fine).
        let after: Vec<String> = src
            .commands()
            .into_iter()
            .skip_while(|l| !is_verb(l, "NLST"))
            .skip(1)
            .filter(|l| {
                !["QUIT", "PWD", "CWD", "CDUP"].iter().any(|v| is_verb(l, v))
                    || l.contains("No such")
                    || l.contains("pub/x")
            })
            .collect();
        if !after.is_empty() {
            failures.push(format!("{case}: commands after NLST: {after:?}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

// ---- 5. hostile names in a listing ----

/// The names of a hostile listing of /pub: two good ones, and lines with CR/LF, a bare
/// CR, a NUL, `..` and an absolute path elsewhere.
fn hostile_names() -> Vec<Vec<u8>> {
    [
        &b"a.bin"[..],
        b"evil\r\nDELE x",
        b"evil\rDELE y.bin",
        b"nul\0name.bin",
        b"../escape.bin",
        b"/etc/passwd.bin",
        b"b.bin",
    ]
    .map(<[u8]>::to_vec)
    .to_vec()
}

/// Checks a hostile listing's rejected lines: the bare CR, the NUL, `..` and the
/// absolute path, each with its reason.
fn check_rejected(listing: &bftp_ftp::Listing) -> Result<()> {
    let reasons: Vec<&str> = listing.rejected.iter().map(|r| r.reason.as_str()).collect();
    for (what, needle) in [
        ("bare CR", "0x0d"),
        ("NUL", "0x00"),
        ("..", "\"..\""),
        ("absolute path", "outside the listed directory"),
    ] {
        ensure!(
            reasons.iter().any(|r| r.contains(needle)),
            "the {what} name was not rejected: {:?}",
            listing.rejected
        );
    }
    for member in &listing.members {
        let n = &member.name;
        ensure!(
            !n.contains(['\r', '\n', '\0', '/']) && !n.contains(".."),
            "member {n:?}"
        );
    }
    Ok(())
}

/// Checks that the hostile server never received a line carrying a rejected name, a CR,
/// a NUL or a DELE command.
fn check_no_injection(server: &HostileServer) -> Result<()> {
    for line in server.commands() {
        ensure!(!is_verb(&line, "DELE"), "received {line:?}");
        ensure!(
            !line.contains(['\r', '\0'])
                && !line.contains("escape")
                && !line.contains("passwd")
                && !line.contains("DELE y")
                && !line.contains("nul"),
            "received {line:?}"
        );
    }
    Ok(())
}

/// NLST lists names with CR/LF, a bare CR, a NUL, `../escape.bin` and `/etc/passwd.bin`
/// beside two good names. `list_source` rejects the bad names (reported in `rejected`),
/// lists the good ones, and the server never receives a command carrying a bad name.
/// NLST ends each name at LF, so `evil\r\nDELE x` reads as two names, `evil` and
/// `DELE x`: with the pattern `*.bin` neither matches and the server receives nothing
/// about them; with `*` they are probed with SIZE like any name (and skipped, not
/// files), which is no injection: `DELE x` only ever travels as an argument. MLSD
/// frames the same way and rejects the fact-less `DELE x` line.
#[test]
fn hostile_names_in_a_listing_are_rejected_and_never_sent() -> Result<()> {
    let files = |s: Script| {
        s.file("/pub/a.bin", b"aaaa".to_vec())
            .file("/pub/b.bin", b"bbbbbb".to_vec())
            .listing("/pub", hostile_names())
    };
    let nlst = HostileServer::start(files(script(HOSTILE, "src").without_mlsd()))?;
    let mlsd = HostileServer::start(files(script(OTHER_HOSTILE, "src")))?;
    let dst = HostileServer::start(script(HOSTILE, "dst"))?;

    let (strict, broad, by_mlsd) = block_on(async {
        let mut pair = open(&hostile_login(&nlst), &hostile_login(&dst), &limits()).await?;
        let strict = pair.list_source("/pub", "*.bin").await?;
        // Before the broad listing: what the strict one sent.
        check_no_injection(&nlst)?;
        ensure!(
            !nlst.commands().iter().any(|l| l.contains("DELE")),
            "received {:?}",
            nlst.commands()
        );
        let broad = pair.list_source("/pub", "*").await?;
        pair.close().await;
        let mut pair = open(&hostile_login(&mlsd), &hostile_login(&dst), &limits()).await?;
        let by_mlsd = pair.list_source("/pub", "*").await?;
        pair.close().await;
        anyhow::Ok((strict, broad, by_mlsd))
    })?;

    let members = |l: &bftp_ftp::Listing| -> Vec<(String, Option<u64>)> {
        l.members.iter().map(|m| (m.name.clone(), m.size)).collect()
    };
    let good = [("a.bin".to_owned(), Some(4)), ("b.bin".to_owned(), Some(6))];
    ensure!(members(&strict) == good, "{strict:?}");
    check_rejected(&strict)?;
    ensure!(strict.rejected.len() == 4, "{:?}", strict.rejected);

    ensure!(members(&broad) == good, "{broad:?}");
    check_rejected(&broad)?;
    let skipped: Vec<&str> = broad.skipped.iter().map(|s| s.name.as_str()).collect();
    ensure!(skipped == ["evil", "DELE x"], "skipped {skipped:?}");
    check_no_injection(&nlst)?;
    let probes: Vec<String> = nlst
        .commands()
        .into_iter()
        .filter(|l| l.contains("DELE x"))
        .collect();
    ensure!(probes == ["SIZE /pub/DELE x"], "received {probes:?}");

    let mlsd_members: Vec<&str> = by_mlsd.members.iter().map(|m| m.name.as_str()).collect();
    ensure!(
        mlsd_members.contains(&"a.bin")
            && mlsd_members.contains(&"b.bin")
            && !mlsd_members.iter().any(|n| n.contains("DELE")),
        "MLSD members {mlsd_members:?}"
    );
    check_rejected(&by_mlsd)?;
    ensure!(
        by_mlsd.rejected.iter().any(|r| r.line.contains("DELE x")),
        "MLSD did not reject the DELE x line: {:?}",
        by_mlsd.rejected
    );
    check_no_injection(&mlsd)?;
    ensure!(
        !mlsd.commands().iter().any(|l| l.contains("DELE")),
        "received {:?}",
        mlsd.commands()
    );
    Ok(())
}

// ---- 6. an endless reply line ----

/// A reply line that never ends (1 GiB of `x` unless the client hangs up): the session
/// fails with the line-length error as soon as the line passes the configured limit,
/// hangs up (the server sees its connection end), and the test takes seconds, not the
/// time or memory that a gigabyte would. Once in the middle of a copy (PASV), once in
/// the greeting, which the engine reads with the same parser.
#[test]
fn endless_reply_line_fails_fast_with_bounded_memory() -> Result<()> {
    const GIB: usize = 1 << 30;
    let limits = Limits {
        reply: bftp_ftp::parse::ReplyLimits {
            max_line_len: 4096,
            max_reply_len: 16 * 1024,
        },
        ..limits()
    };

    // In a copy: PASV.
    let Scenario { src, dst, copied } = hostile_to_hostile(
        serving_f(5000, 47).on("PASV", Action::EndlessLine { max_bytes: GIB }),
        script(OTHER_HOSTILE, "dst"),
        &limits,
        &f_to_copy(),
    )?;
    let (outcome, elapsed) = (copied.outcome, copied.total);
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Protocol,
            failure:
                Failure::Session {
                    side: Side::Source,
                    command,
                    error:
                        SessionError::Malformed {
                            error: ReplyError::LineTooLong { limit: 4096, start },
                            ..
                        },
                    ..
                },
            connection_lost: true,
            ..
        } if command == "PASV" && start.starts_with("200 xxx") => {}
        other => bail!("{}", explain(other)),
    }
    // The engine hung up: the server's session ended long before a gigabyte.
    src.wait_for(NOTICE, |o| o.closed >= 1)?;
    ensure!(
        elapsed < Duration::from_secs(4),
        "PASV case took {elapsed:?}"
    );
    eprintln!(
        "endless PASV line: {:?} after {elapsed:?}",
        outcome.failure()
    );

    // In the greeting.
    let src = HostileServer::start(
        script(HOSTILE, "src").greeting(Action::EndlessLine { max_bytes: GIB }),
    )?;
    let (result, elapsed) = open_pair(&hostile_login(&src), &hostile_login(&dst), &limits);
    let error = match result {
        Ok(_) => bail!("logged in after an endless greeting"),
        Err(error) => error,
    };
    ensure!(
        error.is_transient() && error.side() == Some(Side::Source),
        "{error}: {:?}",
        error.disposition
    );
    match &error.failure {
        JobFailure::Connect {
            error: ConnectError::Session(SessionError::Malformed { .. } | SessionError::Io { .. }),
            ..
        } => {}
        other => bail!("{other:?}\n{}", error.transcript),
    }
    src.wait_for(NOTICE, |o| o.closed >= 1)?;
    ensure!(
        elapsed < Duration::from_secs(4),
        "greeting case took {elapsed:?}"
    );
    eprintln!("endless greeting: {error} after {elapsed:?}");
    Ok(())
}

/// The configured reply limits hold for the greeting too (our parser reads it): a 60 KiB
/// greeting line is refused as over-long when the limit is 4 KiB, as a 60 KiB reply to
/// PASS is: a protocol error (RULES.md §5). An endless greeting is cut at the same bound: a
/// transient failure, with bounded memory.
#[test]
fn greeting_obeys_the_configured_reply_limits() -> Result<()> {
    let limits = Limits {
        reply: bftp_ftp::parse::ReplyLimits {
            max_line_len: 4096,
            max_reply_len: 16 * 1024,
        },
        ..limits()
    };
    let dst = HostileServer::start(script(OTHER_HOSTILE, "dst"))?;
    let long = format!("220 {}", "x".repeat(60_000));
    let mut failures = Vec::new();
    let endless = HostileServer::start(
        script(HOSTILE, "src").greeting(Action::EndlessLine { max_bytes: 1 << 30 }),
    )?;
    match open_pair(&hostile_login(&endless), &hostile_login(&dst), &limits).0 {
        Ok(_) => failures.push("endless greeting: logged in".to_string()),
        Err(e) if !e.is_transient() => {
            failures.push(format!("endless greeting: {e} is not transient"))
        }
        Err(_) => {}
    }
    let (case, greeting) = ("60 KiB greeting line", Action::reply(long));
    {
        let src = HostileServer::start(script(HOSTILE, "src").greeting(greeting))?;
        let (result, _) = open_pair(&hostile_login(&src), &hostile_login(&dst), &limits);
        let check = || -> Result<()> {
            let error = match result {
                Ok(_) => bail!("logged in: the greeting was accepted"),
                Err(error) => error,
            };
            ensure!(
                error.disposition == Disposition::Transient(TransientKind::Protocol),
                "{error}: {:?}",
                error.disposition
            );
            match &error.failure {
                JobFailure::Connect {
                    side: Side::Source,
                    error:
                        ConnectError::Session(SessionError::Malformed {
                            error: ReplyError::LineTooLong { limit: 4096, .. },
                            ..
                        }),
                } => Ok(()),
                other => bail!("{other}"),
            }
        };
        if let Err(e) = check() {
            failures.push(format!("{case}: {e:#}"));
        }
        if !src.commands().is_empty() {
            failures.push(format!("{case}: the server received {:?}", src.commands()));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

// ---- 7. 421 mid-transfer, silence, a stalled transfer ----

/// A source whose RETR sends half the file, then `421 Timeout.` and closes its control
/// connection; vsftpd, which got the half file, says 226.
fn abort_421_source() -> Script {
    serving_f(300_000, 48).on("RETR", Action::AbortMidTransfer("421 Timeout.".into()))
}

/// 421 in the middle of a transfer: transient (reconnect), blamed on the source's RETR,
/// and vsftpd's half file, which its own 226 vouched for, deleted.
#[test]
fn reply_421_mid_transfer_is_transient() -> Result<()> {
    let Scenario { src, dst, copied } = f_to_vsftpd(abort_421_source(), &tight())?;
    let outcome = copied.outcome;
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Reconnect,
            failure:
                Failure::Reply {
                    side: Side::Source,
                    command,
                    reply,
                    ..
                },
            ..
        } if command == "RETR" && reply.code().get() == 421 => {}
        other => bail!("{}", explain(other)),
    }
    let report = outcome.report();
    ensure!(
        code_of(report.destination_final.as_ref()) == Some(226),
        "{}",
        explain(&outcome)
    );
    let deleted = report
        .fallbacks
        .iter()
        .any(|f| matches!(f, Fallback::PartialDeleted { deleted: true, .. }));
    ensure!(
        deleted && !dst.path("/copy.bin").exists(),
        "partial file not deleted: {}",
        explain(&outcome)
    );
    // The hostile server did close its end.
    src.wait_for(NOTICE, |o| o.closed >= 1)?;
    Ok(())
}

/// After a 421 the server has closed the control connection (RFC 959: 421 "closing
/// control connection"; `TransientKind::Reconnect.connection_lost()` is true), so the
/// outcome must say `connection_lost` and the pair must refuse the next member.
#[test]
fn reply_421_mid_transfer_loses_the_connection() -> Result<()> {
    let src = HostileServer::start(abort_421_source())?;
    let dst = vsftpd()?;
    let (outcome, usable, next) = block_on(async {
        let mut pair = open(&hostile_login(&src), &ftp_login(&dst), &tight()).await?;
        let outcome = pair.copy(&f_to_copy()).await?;
        let usable = pair.is_usable();
        // The next member on the same pair: refused as closed (Err), not attempted.
        let next = pair
            .copy(&request("/f.bin", "/copy2.bin", DestCommand::Replace))
            .await;
        anyhow::Ok((outcome, usable, next))
    })?;
    let CopyOutcome::Transient {
        kind: TransientKind::Reconnect,
        connection_lost,
        ..
    } = &outcome
    else {
        bail!("{}", explain(&outcome));
    };
    ensure!(
        *connection_lost && !usable,
        "after a 421 the source has closed its control connection, yet connection_lost is \
         {connection_lost} and the pair says usable={usable}: {}",
        explain(&outcome)
    );
    match next {
        Err(PairError {
            failure: JobFailure::Closed { .. },
            ..
        }) => Ok(()),
        Ok(next) => bail!("the next member was attempted: {}", explain(&next)),
        Err(other) => bail!("{other:?}"),
    }
}

/// A source that never answers PASV: the reply timeout ends the copy (transient, a
/// timeout, the connection dropped) in about one reply timeout; vsftpd was never sent
/// a PORT or a STOR.
#[test]
fn silent_pasv_ends_at_the_reply_timeout() -> Result<()> {
    let limits = tight();
    let Scenario { src, dst, copied } =
        f_to_vsftpd(serving_f(5000, 49).on("PASV", Action::Silence), &limits)?;
    let (outcome, elapsed) = (copied.outcome, copied.took);
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Transport(TransportFailure::Timeout),
            failure:
                Failure::Session {
                    side: Side::Source,
                    command,
                    error: SessionError::Timeout { .. },
                    ..
                },
            connection_lost: true,
            ..
        } if command == "PASV" => {}
        other => bail!("{}", explain(other)),
    }
    ensure!(
        elapsed >= limits.reply_timeout && elapsed < limits.reply_timeout * 3,
        "took {elapsed:?} with a reply timeout of {:?}",
        limits.reply_timeout
    );
    // The engine hung up on the silent server.
    src.wait_for(NOTICE, |o| o.closed >= 1)?;
    let seen = vsftpd_commands(&dst)?;
    ensure!(never_transferred(&seen), "vsftpd received {seen:?}");
    eprintln!("silent PASV: ended after {elapsed:?}");
    Ok(())
}

/// A source that never answers RETR, after vsftpd accepted STOR and connected: the
/// reply timeouts end the copy (both role orders are tried, a silent passive side
/// looking like a server that refuses foreign data connections), within the watchdog
/// plus the cleanup's own reply timeouts; transient, and no success claimed.
#[test]
fn silent_retr_ends_within_the_configured_limits() -> Result<()> {
    let limits = tight();
    let Scenario { src, dst, copied } =
        f_to_vsftpd(serving_f(5000, 50).on("RETR", Action::Silence), &limits)?;
    let (outcome, elapsed) = (copied.outcome, copied.took);
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Transport(TransportFailure::Timeout),
            failure:
                Failure::Session {
                    side: Side::Source,
                    command,
                    error: SessionError::Timeout { .. },
                    ..
                },
            ..
        } if command == "RETR" => {}
        CopyOutcome::Transient {
            kind: TransientKind::Transport(TransportFailure::Timeout),
            failure: Failure::Watchdog { .. },
            ..
        } => {}
        other => bail!("{}", explain(other)),
    }
    let bound = limits.transfer_timeout + limits.reply_timeout * 3;
    ensure!(
        elapsed >= limits.reply_timeout && elapsed < bound,
        "took {elapsed:?}, expected at most {bound:?}: {}",
        explain(&outcome)
    );
    let retrs = src.commands().iter().filter(|l| is_verb(l, "RETR")).count();
    ensure!(retrs >= 1, "{:?}", src.commands());
    ensure!(
        no_unreported_partial(&dst, "/copy.bin", &outcome),
        "a partial file was left unreported: {}",
        explain(&outcome)
    );
    eprintln!(
        "silent RETR: {:?} after {elapsed:?} ({retrs} RETR sent)",
        outcome.failure()
    );
    Ok(())
}

/// The source sends half the file, then keeps both connections open and says nothing;
/// vsftpd waits for the rest. Only the watchdog can end this: a transient watchdog
/// failure naming the silent source, at the transfer timeout, both control connections
/// closed; vsftpd's partial file is reported as not deleted. (vsftpd is usually silent
/// too; but once the engine drops the source's control connection the hostile server
/// drops the data connection, and vsftpd's 226 for the half file can slip in before
/// the engine stops reading: that 226 must not count either.)
#[test]
fn stalled_transfer_ends_at_the_watchdog() -> Result<()> {
    let limits = tight();
    let Scenario { src, dst, copied } = f_to_vsftpd(
        serving_f(300_000, 51).on("RETR", Action::StallMidTransfer),
        &limits,
    )?;
    let (outcome, elapsed, usable) = (copied.outcome, copied.took, copied.usable);
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Transport(TransportFailure::Timeout),
            failure: Failure::Watchdog { silent, .. },
            connection_lost: true,
            ..
        } if silent.contains(&Side::Source) => {}
        other => bail!("{}", explain(other)),
    }
    ensure!(!usable, "the pair survived the watchdog");
    ensure!(
        outcome
            .report()
            .source_final
            .as_ref()
            .is_some_and(|r| r.code.is_none()),
        "{}",
        explain(&outcome)
    );
    ensure!(
        elapsed >= limits.transfer_timeout
            && elapsed < limits.transfer_timeout + limits.reply_timeout * 2,
        "took {elapsed:?} with a watchdog of {:?}",
        limits.transfer_timeout
    );
    src.wait_for(NOTICE, |o| o.closed >= 1)?;
    ensure!(
        no_unreported_partial(&dst, "/copy.bin", &outcome),
        "a partial file was left unreported: {}",
        explain(&outcome)
    );
    eprintln!("stalled transfer: watchdog after {elapsed:?}");
    Ok(())
}

// ---- 8. a refused login ----

/// A server that answers 530 to PASS, as the source and as the destination: a
/// job-level permanent failure that names the side, the server and the command; no
/// further command is sent to it after the 530.
#[test]
fn login_refused_with_530_is_a_job_level_permanent_failure() -> Result<()> {
    let mut failures = Vec::new();
    for refusing in [Side::Source, Side::Destination] {
        let bad = HostileServer::start(
            script(HOSTILE, "user").on("PASS", Action::reply("530 Login incorrect.")),
        )?;
        let good = HostileServer::start(script(OTHER_HOSTILE, "user"))?;
        let (src, dst) = match refusing {
            Side::Source => (&bad, &good),
            Side::Destination => (&good, &bad),
        };
        let (result, elapsed) = open_pair(&hostile_login(src), &hostile_login(dst), &limits());
        let check = |result: Result<(), PairError>| -> Result<()> {
            let error = match result {
                Ok(_) => bail!("logged in despite a 530"),
                Err(error) => error,
            };
            ensure!(
                error.disposition == Disposition::Permanent(PermanentKind::Login),
                "{error}: {:?}",
                error.disposition
            );
            ensure!(error.side() == Some(refusing), "{error}");
            match &error.failure {
                JobFailure::Connect {
                    error:
                        ConnectError::Refused {
                            host,
                            command: "PASS",
                            reply,
                            ..
                        },
                    ..
                } if *host == bad.host().to_string() && reply.code().get() == 530 => {}
                other => bail!("{other:?}"),
            }
            let text = error.to_string();
            ensure!(
                text.contains(&bad.host().to_string())
                    && text.contains(refusing.as_str())
                    && text.contains("530"),
                "{text}"
            );
            ensure!(
                !format!("{error:?} {}", error.transcript).contains("user-pw"),
                "the password shows"
            );
            let after: Vec<String> = bad
                .commands()
                .into_iter()
                .skip_while(|l| !is_verb(l, "PASS"))
                .skip(1)
                .filter(|l| !is_verb(l, "QUIT"))
                .collect();
            ensure!(after.is_empty(), "commands after the 530: {after:?}");
            ensure!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
            Ok(())
        };
        if let Err(e) = check(result) {
            failures.push(format!("refused by the {refusing}: {e:#}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// After the transfer each side is asked SIZE once, both at once (the two control
/// connections are independent); a size the caller already knows (the listing's) is not
/// asked again before the transfer; an unknown one is asked first, once, and that answer
/// is the source's evidence: after the transfer only the destination is asked.
#[test]
fn sizes_are_asked_once_per_side_and_both_at_once() -> Result<()> {
    let data = payload(5000, 21);
    // The source's first SIZE answers after 3 s: if the destination's SIZE waited for it,
    // it would arrive after those 3 s.
    let src = HostileServer::start(script(HOSTILE, "src").file("/f.bin", data.clone()).on(
        "SIZE",
        Action::Sequence(vec![Action::delayed(
            Duration::from_secs(3),
            Action::Default,
        )]),
    ))?;
    let dst = HostileServer::start(script(OTHER_HOSTILE, "dst"))?;
    let sizes = |server: &HostileServer| {
        server
            .commands()
            .iter()
            .filter(|c| is_verb(c, "SIZE"))
            .count()
    };
    std::thread::scope(|scope| {
        let overlap = scope.spawn(|| -> Result<()> {
            src.wait_for_command("SIZE", Duration::from_secs(30))?;
            dst.wait_for_command("SIZE", Duration::from_secs(2))
                .context("the destination's SIZE waited for the source's")
        });
        let copied = block_on(async {
            let mut pair = open(&hostile_login(&src), &hostile_login(&dst), &limits()).await?;
            let mut known = request("/f.bin", "/copy.bin", DestCommand::Replace);
            known.source_size = Some(data.len() as u64);
            let outcome = pair.copy(&known).await?;
            ensure!(
                matches!(&outcome, CopyOutcome::Succeeded { bytes: Some(n), .. } if *n == data.len() as u64),
                "{}",
                explain(&outcome)
            );
            ensure!(
                (sizes(&src), sizes(&dst)) == (1, 1),
                "SIZE asked {} times of the source and {} of the destination:\n{}",
                sizes(&src),
                sizes(&dst),
                explain(&outcome)
            );
            // Unknown size: asked before (a missing file fails before the destination is
            // touched), not after.
            let outcome = pair
                .copy(&request("/f.bin", "/again.bin", DestCommand::Replace))
                .await?;
            ensure!(
                matches!(&outcome, CopyOutcome::Succeeded { .. }),
                "{}",
                explain(&outcome)
            );
            ensure!(
                (sizes(&src), sizes(&dst)) == (2, 2),
                "SIZE asked {} times of the source and {} of the destination in all:\n{}",
                sizes(&src),
                sizes(&dst),
                explain(&outcome)
            );
            pair.close().await;
            Ok(())
        });
        let overlap = overlap.join().expect("watcher thread");
        copied.and(overlap)
    })?;
    ensure!(
        dst.stored("/copy.bin") == Some(data.clone()),
        "copy differs"
    );
    ensure!(
        dst.stored("/again.bin") == Some(data),
        "second copy differs"
    );
    Ok(())
}

/// NLST without MLSD: SIZE sorts the names (213: a member with its size, 550: skipped),
/// pipelined by windows, with no MDTM per name; a refusal in the middle of a window fails
/// the listing only after the whole window was read, so the connection stays in step.
#[test]
fn nlst_sizes_are_pipelined_and_the_connection_stays_in_step() -> Result<()> {
    let mut source = script(HOSTILE, "src").without_mlsd().dir("/pub/sub.dat");
    let count = 150;
    for i in 0..count {
        source = source.file(&format!("/pub/f{i:03}.dat"), payload(100 + i, 3));
    }
    let src = HostileServer::start(source)?;
    let dst = HostileServer::start(script(OTHER_HOSTILE, "dst"))?;
    block_on(async {
        let mut pair = open(&hostile_login(&src), &hostile_login(&dst), &limits()).await?;
        let listing = pair
            .list_source("pub", "*.dat")
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", pair.take_transcript()))?;
        let mut got: Vec<(String, Option<u64>)> = listing
            .members
            .iter()
            .map(|m| (m.name.clone(), m.size))
            .collect();
        got.sort();
        let want: Vec<(String, Option<u64>)> = (0..count)
            .map(|i| (format!("f{i:03}.dat"), Some(100 + i as u64)))
            .collect();
        ensure!(got == want, "members {got:?}");
        ensure!(
            listing
                .skipped
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                == ["sub.dat"],
            "skipped {:?}",
            listing.skipped
        );
        ensure!(
            listing.members.iter().all(|m| m.modified.is_none()),
            "NLST members with a modify time"
        );
        ensure!(!src.observed().saw("MDTM"), "MDTM asked while listing");
        ensure!(pair.is_usable(), "the pair died while listing");
        pair.close().await;
        Ok(())
    })?;

    // The 70th SIZE (the second window) answers 451: the listing fails with it, and the
    // next command on that connection gets its own reply.
    let mut sequence = vec![Action::Default; 69];
    sequence.push(Action::reply("451 Local error."));
    let mut source = script(HOSTILE, "src")
        .without_mlsd()
        .on("SIZE", Action::Sequence(sequence));
    for i in 0..count {
        source = source.file(&format!("/pub/f{i:03}.dat"), payload(10, 3));
    }
    let src = HostileServer::start(source)?;
    block_on(async {
        let mut pair = open(&hostile_login(&src), &hostile_login(&dst), &limits()).await?;
        match pair.list_source("pub", "*.dat").await {
            Err(ListError::Refused { command, reply, .. })
                if command == "SIZE" && reply.code().get() == 451 => {}
            other => bail!("{other:?}\n{}", pair.take_transcript()),
        }
        ensure!(pair.is_usable(), "the pair died with a refused SIZE");
        let size = pair.size(Side::Source, "pub/f000.dat").await?;
        ensure!(size == Some(10), "out of step: SIZE answered {size:?}");
        pair.close().await;
        Ok(())
    })
}

/// A cancel (or the end of a shutdown grace) in the middle of a transfer: ABOR goes to
/// both servers (RULES.md §9), then both connections are closed, within a short bound even
/// though the stalled source never answers.
#[test]
fn abort_mid_transfer_sends_abor_on_both_connections() -> Result<()> {
    let src = HostileServer::start(serving_f(200_000, 5).on("RETR", Action::StallMidTransfer))?;
    let dst = HostileServer::start(script(OTHER_HOSTILE, "dst"))?;
    let (result, aborted_for) = block_on(async {
        let mut pair = open(&hostile_login(&src), &hostile_login(&dst), &limits()).await?;
        let fired = Arc::new(Mutex::new(None));
        let abort = {
            let fired = fired.clone();
            let src = &src;
            async move {
                // Once the bytes flow (the source said 150 and stalled), and a moment more.
                while !src.observed().saw("RETR") {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                *fired.lock().expect("lock") = Some(Instant::now());
            }
        };
        let result = pair.copy_or_abort(&f_to_copy(), abort, "test cancel").await;
        let fired = fired
            .lock()
            .expect("lock")
            .context("the abort never fired")?;
        ensure!(!pair.is_usable(), "the pair is still usable after an abort");
        anyhow::Ok((result, fired.elapsed()))
    })?;
    match &result {
        Err(PairError {
            failure: JobFailure::Aborted { .. },
            ..
        }) => {}
        other => bail!("{other:?}"),
    }
    ensure!(
        aborted_for < Duration::from_secs(4),
        "the abort took {aborted_for:?}"
    );
    src.wait_for_command("ABOR", NOTICE)
        .context("the source got no ABOR")?;
    dst.wait_for_command("ABOR", NOTICE)
        .context("the destination got no ABOR")?;
    // Both connections closed.
    src.wait_for(NOTICE, |o| o.closed >= 1)?;
    dst.wait_for(NOTICE, |o| o.closed >= 1)?;
    Ok(())
}

/// The passive source refuses RETR (550) after the active destination connected to it and
/// said 150, and keeps that data connection open: the destination waits for bytes that
/// never come. The engine must not wait a whole reply timeout for the destination's final
/// reply: ABOR ends it, the partial file is deleted, the member fails for good.
#[test]
fn passive_refusal_after_the_active_side_connected_fails_fast() -> Result<()> {
    let limits = Limits {
        reply_timeout: Duration::from_secs(10),
        ..limits()
    };
    let Scenario { dst, copied, .. } = hostile_to_hostile(
        serving_f(5000, 9).on("RETR", Action::reply("550 Permission denied.")),
        // The destination would wait 30 s for data before giving up by itself.
        script(OTHER_HOSTILE, "dst").data_timeout(Duration::from_secs(30)),
        &limits,
        &f_to_copy(),
    )?;
    let (outcome, took, usable) = (copied.outcome, copied.took, copied.usable);
    match &outcome {
        CopyOutcome::Permanent {
            kind: PermanentKind::FileUnavailable,
            failure:
                Failure::Reply {
                    side: Side::Source,
                    command,
                    reply,
                    ..
                },
            ..
        } if command == "RETR" && reply.code().get() == 550 => {}
        other => bail!("{}", explain(other)),
    }
    ensure!(
        took < Duration::from_secs(5),
        "the refusal took {took:?} (reply timeout 10 s)\n{}",
        explain(&outcome)
    );
    ensure!(
        dst.observed().saw("ABOR"),
        "no ABOR to the destination\n{}",
        explain(&outcome)
    );
    ensure!(
        dst.stored("/copy.bin").is_none(),
        "the partial destination file is still there\n{}",
        explain(&outcome)
    );
    ensure!(usable, "the pair died\n{}", explain(&outcome));
    Ok(())
}
