//! The state machine against scripted fake servers: the misbehaviour real servers
//! do not show on cue (a PASV naming a third host, a privileged port, no PASV, a
//! reply without a code, a 226 from one side only). No data connection is made: the
//! fakes answer 150 and 226 as told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bftp_core::reply::{PermanentKind, TransientKind};
use bftp_core::{DestCommand, FtpParams, Secret};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use super::*;
use crate::limits::AllowAll;

type Script = Arc<dyn Fn(&str) -> Option<Vec<&'static str>> + Send + Sync>;
type Log = Arc<Mutex<Vec<(&'static str, String)>>>;

/// A fake FTP server on 127.0.0.1: `script` answers a command line first (and the
/// empty line stands for the greeting); the defaults log in and accept
/// TYPE/MODE/STRU/SIZE/PWD/QUIT.
async fn fake(name: &'static str, log: Log, script: Script) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (log, script) = (log.clone(), script.clone());
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                let greeting = script("").unwrap_or_else(|| vec!["220 fake ready"]);
                for line in greeting {
                    let _ = write.write_all(format!("{line}\r\n").as_bytes()).await;
                }
                while let Ok(Some(line)) = lines.next_line().await {
                    log.lock().expect("log").push((name, line.clone()));
                    let verb = line.split(' ').next().unwrap_or("").to_ascii_uppercase();
                    let replies = script(&line).unwrap_or_else(|| match verb.as_str() {
                        "USER" => vec!["331 password please"],
                        "PASS" => vec!["230 in"],
                        "TYPE" | "MODE" | "STRU" | "PORT" | "EPRT" => vec!["200 ok"],
                        "SIZE" => vec!["213 1000"],
                        "PWD" => vec!["257 \"/\" is current"],
                        "DELE" => vec!["250 deleted"],
                        "QUIT" => vec!["221 bye"],
                        "PASV" => vec!["227 Entering Passive Mode (127,0,0,1,200,10)."],
                        "RETR" | "STOR" | "APPE" => vec!["150 go", "226 done"],
                        _ => vec!["502 not here"],
                    });
                    for reply in replies {
                        let _ = write.write_all(format!("{reply}\r\n").as_bytes()).await;
                    }
                    if verb == "QUIT" {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn fake_login(port: u16) -> ServerLogin {
    ServerLogin {
        host: "127.0.0.1".into(),
        port,
        user: "u".into(),
        password: Some(Secret::new("secret-pw")),
        acct: None,
        tls: Default::default(),
    }
}

fn limits() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(2),
        reply_timeout: Duration::from_secs(2),
        transfer_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

async fn pair_with(src: Script, dst: Script) -> (Pair, Log) {
    pair_with_limits(src, dst, limits()).await
}

async fn pair_with_limits(src: Script, dst: Script, limits: Limits) -> (Pair, Log) {
    let log: Log = Arc::default();
    let s = fake("src", log.clone(), src).await;
    let d = fake("dst", log.clone(), dst).await;
    let pair = Pair::open(
        &fake_login(s),
        &fake_login(d),
        FtpParams::default(),
        &limits,
        Arc::new(AllowAll),
    )
    .await
    .expect("open");
    (pair, log)
}

fn none() -> Script {
    Arc::new(|_| None)
}

fn commands(log: &Log) -> Vec<String> {
    log.lock()
        .expect("log")
        .iter()
        .map(|(who, line)| format!("{who}> {line}"))
        .collect()
}

fn copy_request() -> CopyRequest {
    CopyRequest {
        source_path: "f.bin".into(),
        dest_path: "g.bin".into(),
        dest_command: DestCommand::Replace,
        source_size: None,
        announce: None,
        resume_at: None,
    }
}

#[tokio::test]
async fn pasv_naming_a_third_host_is_ignored() {
    let src: Script = Arc::new(|line| {
        (line == "PASV").then(|| vec!["227 Entering Passive Mode (10,9,8,7,200,10)."])
    });
    let (mut pair, log) = pair_with(src, none()).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(outcome.is_success(), "{outcome:?}");
    let sent = commands(&log);
    assert!(
        sent.contains(&"dst> PORT 127,0,0,1,200,10".to_owned()),
        "{sent:?}"
    );
    assert!(!sent.iter().any(|l| l.contains("10,9,8,7")), "{sent:?}");
    assert!(outcome.report().fallbacks.iter().any(|f| matches!(
        f,
        Fallback::ForeignPasvHostIgnored {
            side: Side::Source,
            ..
        }
    )));
    assert!(outcome.report().transcript.contains("host ignored"));
    // PASS masked, the password nowhere.
    assert!(!format!("{outcome:?}").contains("secret-pw"));
}

/// A source announcing a privileged data port is not named in a PORT (RFC 2577 bounce
/// protection), but the copy goes on in the other role order: PASV to the destination.
#[tokio::test]
async fn privileged_pasv_port_is_refused_and_the_roles_swapped() {
    let src: Script = Arc::new(|line| {
        (line == "PASV").then(|| vec!["227 Entering Passive Mode (127,0,0,1,0,25)."])
    });
    let (mut pair, log) = pair_with(src, none()).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(outcome.is_success(), "{outcome:?}");
    let sent = commands(&log);
    assert!(!sent.iter().any(|l| l.ends_with(",0,25")), "{sent:?}");
    assert!(sent.contains(&"dst> PASV".to_owned()), "{sent:?}");
    assert!(
        sent.contains(&"src> PORT 127,0,0,1,200,10".to_owned()),
        "{sent:?}"
    );
    let swapped = outcome.report().fallbacks.iter().find_map(|f| match f {
        Fallback::RolesSwapped { reason } => Some(reason.clone()),
        _ => None,
    });
    assert!(
        swapped.as_deref().is_some_and(|r| r.contains("port 25")),
        "{:?}",
        outcome.report().fallbacks
    );
}

/// Both servers announce a privileged port: a job-level permanent failure that names the
/// bounce protection and both servers, and no PORT naming either port.
#[tokio::test]
async fn privileged_pasv_port_on_both_sides_fails_for_good() {
    let src: Script = Arc::new(|line| {
        (line == "PASV").then(|| vec!["227 Entering Passive Mode (127,0,0,1,0,25)."])
    });
    let dst: Script = Arc::new(|line| {
        (line == "PASV").then(|| vec!["227 Entering Passive Mode (127,0,0,1,0,21)."])
    });
    let (mut pair, log) = pair_with(src, dst).await;
    let error = pair.copy(&copy_request()).await.expect_err("copy");
    assert_eq!(
        error.disposition,
        Disposition::Permanent(PermanentKind::CommandRejected)
    );
    let text = error.to_string();
    assert!(
        matches!(error.failure, JobFailure::NoPassiveMode { .. })
            && text.contains("bounce protection")
            && text.contains("source server")
            && text.contains("destination server")
            && text.contains("port 25")
            && text.contains("port 21"),
        "{text}"
    );
    let sent = commands(&log);
    assert!(!sent.iter().any(|l| l.contains("PORT")), "{sent:?}");
}

#[tokio::test]
async fn source_without_pasv_swaps_roles_and_commands_the_active_side_first() {
    let src: Script =
        Arc::new(|line| (line == "PASV" || line == "EPSV").then(|| vec!["502 no passive"]));
    let (mut pair, log) = pair_with(src, none()).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(outcome.is_success(), "{outcome:?}");
    let sent = commands(&log);
    let at = |needle: &str| {
        sent.iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} not in {sent:?}"))
    };
    assert!(at("dst> PASV") < at("src> PORT"), "{sent:?}");
    // The source is now active: RETR goes first.
    assert!(at("src> RETR") < at("dst> STOR"), "{sent:?}");
    assert!(outcome
        .report()
        .fallbacks
        .iter()
        .any(|f| matches!(f, Fallback::RolesSwapped { .. })));
}

#[tokio::test]
async fn reply_without_a_code_is_a_protocol_error_with_its_text() {
    let src: Script = Arc::new(|line| {
        line.starts_with("RETR")
            .then(|| vec!["f.bin: No such file or directory"])
    });
    let (mut pair, _log) = pair_with(src, none()).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::Protocol,
            failure,
            connection_lost: true,
            ..
        } => assert!(
            failure.to_string().contains("No such file or directory"),
            "{failure}"
        ),
        other => panic!("{other:?}"),
    }
}

/// The destination says 226, the source 451: not a success, and the partial file goes.
#[tokio::test]
async fn a_226_from_one_side_proves_nothing() {
    let src: Script = Arc::new(|line| {
        line.starts_with("RETR")
            .then(|| vec!["150 go", "451 read error on the disk"])
    });
    let (mut pair, log) = pair_with(src, none()).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    match &outcome {
        CopyOutcome::Transient {
            kind: TransientKind::LocalError,
            failure: Failure::Reply {
                side: Side::Source, ..
            },
            connection_lost: false,
            report,
        } => {
            assert_eq!(
                report
                    .destination_final
                    .as_ref()
                    .and_then(|r| r.code)
                    .map(|c| c.get()),
                Some(226)
            );
            assert!(report
                .fallbacks
                .iter()
                .any(|f| matches!(f, Fallback::PartialDeleted { deleted: true, .. })));
        }
        other => panic!("{other:?}"),
    }
    assert!(commands(&log).contains(&"dst> DELE g.bin".to_owned()));
    assert!(pair.is_usable());
}

/// Both say 226, but the destination is shorter: a size mismatch, not a success.
#[tokio::test]
async fn unequal_sizes_after_two_226_are_not_a_success() {
    let dst: Script = Arc::new(|line| (line == "SIZE g.bin").then(|| vec!["213 999"]));
    let (mut pair, _log) = pair_with(none(), dst).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(
        matches!(
            &outcome,
            CopyOutcome::Transient {
                failure: Failure::SizeMismatch {
                    source_size: 1000,
                    destination: 999,
                    ..
                },
                ..
            }
        ),
        "{outcome:?}"
    );
}

/// A destination that falls silent after its 150: the watchdog closes both
/// connections and the pair is dead.
#[tokio::test]
async fn watchdog_closes_a_silent_pair() {
    let dst: Script = Arc::new(|line| line.starts_with("STOR").then(|| vec!["150 go"]));
    let limits = Limits {
        transfer_timeout: Duration::from_millis(1500),
        ..limits()
    };
    let (mut pair, _log) = pair_with_limits(none(), dst, limits).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    match &outcome {
        CopyOutcome::Transient {
            failure: Failure::Watchdog { silent, .. },
            connection_lost: true,
            ..
        } => assert_eq!(silent, &[Side::Destination]),
        CopyOutcome::Transient {
            failure:
                Failure::Session {
                    side: Side::Destination,
                    ..
                },
            connection_lost: true,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(!pair.is_usable());
    assert!(matches!(
        pair.copy(&copy_request()).await,
        Err(PairError {
            failure: JobFailure::Closed { .. },
            ..
        })
    ));
}

/// A greeting and a 230 whose inner lines start with other codes and a space are each one
/// reply (RFC 959 §4.2): the login goes through and the copy runs on the same connections.
#[tokio::test]
async fn greeting_and_login_replies_with_inner_code_lines_are_one_reply_each() {
    let script: Script = Arc::new(|line| match line.split(' ').next() {
        Some("") => Some(vec!["220-Hello", "230 not really", "220 ready"]),
        Some("USER") => Some(vec!["331-Password", "230 not yet", "331 please"]),
        Some("PASS") => Some(vec![
            "230-Welcome",
            "331 not asking again",
            "530 not refused",
            "230 in",
        ]),
        _ => None,
    });
    let (mut pair, log) = pair_with(script.clone(), script).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(outcome.is_success(), "{outcome:?}");
    let transcript = outcome.report().transcript.to_string();
    assert!(transcript.contains("230 not really"), "{transcript}");
    // One USER and one PASS per connection: the inner lines were not taken for replies.
    let sent = commands(&log);
    let count = |prefix: &str| sent.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!((count("src> USER"), count("src> PASS")), (1, 1), "{sent:?}");
    assert_eq!((count("dst> USER"), count("dst> PASS")), (1, 1), "{sent:?}");
}

/// 332 after PASS: ACCT is sent, masked in the transcript.
#[tokio::test]
async fn account_is_sent_on_332() {
    let log: Log = Arc::default();
    let script: Script = Arc::new(|line| match line.split(' ').next() {
        Some("PASS") => Some(vec!["332 account please"]),
        Some("ACCT") => Some(vec!["230 in with an account"]),
        _ => None,
    });
    let s = fake("src", log.clone(), script.clone()).await;
    let d = fake("dst", log.clone(), none()).await;
    let mut login = fake_login(s);
    login.acct = Some(Secret::new("acct-secret"));
    let mut pair = Pair::open(
        &login,
        &fake_login(d),
        FtpParams::default(),
        &limits(),
        Arc::new(AllowAll),
    )
    .await
    .expect("open with ACCT");
    let transcript = pair.take_transcript();
    assert!(transcript.contains("ACCT ****"), "{transcript}");
    assert!(!transcript.to_string().contains("acct-secret"));
    assert!(commands(&log).contains(&"src> ACCT acct-secret".to_owned()));

    // Without an account, a 332 is a permanent login failure that says so.
    let error = Pair::open(
        &fake_login(s),
        &fake_login(d),
        FtpParams::default(),
        &limits(),
        Arc::new(AllowAll),
    )
    .await
    .expect_err("no ACCT");
    assert!(
        error.is_permanent() && error.to_string().contains("ACCT"),
        "{error}"
    );
}

/// No PASV on the source: EPSV there (its port with the control address); no PORT on
/// the destination: EPRT.
#[tokio::test]
async fn epsv_and_eprt_when_pasv_and_port_are_missing() {
    let src: Script = Arc::new(|line| match line {
        "PASV" => Some(vec!["500 PASV unknown"]),
        "EPSV" => Some(vec!["229 Entering Extended Passive Mode (|||51000|)"]),
        _ => None,
    });
    let dst: Script = Arc::new(|line| line.starts_with("PORT ").then(|| vec!["502 no PORT here"]));
    let (mut pair, log) = pair_with(src, dst).await;
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(outcome.is_success(), "{outcome:?}");
    let sent = commands(&log);
    assert!(
        sent.contains(&"dst> EPRT |1|127.0.0.1|51000|".to_owned()),
        "{sent:?}"
    );
    let fallbacks = &outcome.report().fallbacks;
    assert!(
        fallbacks.iter().any(|f| matches!(
            f,
            Fallback::ExtendedPassive {
                side: Side::Source,
                ..
            }
        )),
        "{fallbacks:?}"
    );
    assert!(
        fallbacks.iter().any(|f| matches!(
            f,
            Fallback::ExtendedPort {
                side: Side::Destination,
                ..
            }
        )),
        "{fallbacks:?}"
    );
    assert!(
        !fallbacks
            .iter()
            .any(|f| matches!(f, Fallback::RolesSwapped { .. })),
        "{fallbacks:?}"
    );
}

/// SIZE and DELE for the scheduler: a 550 is "no file", a missing SIZE an error
/// (never a size of 0), a refused DELE carries its reply.
#[tokio::test]
async fn size_and_delete_answers() {
    let dst: Script = Arc::new(|line| match line {
        "SIZE gone.bin" => Some(vec!["550 gone.bin: No such file"]),
        "SIZE odd.bin" => Some(vec!["502 SIZE not implemented"]),
        "DELE locked.bin" => Some(vec!["550 Permission denied"]),
        _ => None,
    });
    let (mut pair, _log) = pair_with(none(), dst).await;
    assert_eq!(pair.size(Side::Destination, "g.bin").await, Ok(Some(1000)));
    assert_eq!(pair.size(Side::Destination, "gone.bin").await, Ok(None));
    let error = pair
        .size(Side::Destination, "odd.bin")
        .await
        .expect_err("no SIZE");
    assert!(matches!(error, ActionError::NotSupported { .. }), "{error}");
    assert!(pair.delete(Side::Destination, "g.bin").await.is_ok());
    let error = pair
        .delete(Side::Destination, "locked.bin")
        .await
        .expect_err("refused");
    assert!(
        error.disposition().is_permanent() && error.to_string().contains("Permission denied"),
        "{error}"
    );
    assert!(matches!(
        pair.delete(Side::Source, "a\r\nDELE b").await,
        Err(ActionError::BadPath { .. })
    ));
}

/// FEAT travels in the pair's opening write, behind TYPE, MODE and STRU, on both sides: what
/// each server offers is known without a round trip of its own, so asking for the proof plan
/// afterwards sends nothing; a FEAT refused (502 here on the source) means no features and
/// keeps the connection in step.
#[tokio::test]
async fn feat_is_read_with_the_opening_batch_and_not_asked_again() {
    let dst: Script = Arc::new(|line| {
        (line == "FEAT").then(|| vec!["211-Features:", " SIZE", " HASH SHA-256*", "211 End"])
    });
    let (mut pair, log) = pair_with(none(), dst).await;
    let opened = commands(&log);
    for side in ["src", "dst"] {
        let sent: Vec<&str> = opened
            .iter()
            .filter_map(|c| c.strip_prefix(&format!("{side}> ")))
            .collect();
        assert_eq!(
            sent[sent.len() - 4..],
            ["TYPE I", "MODE S", "STRU F", "FEAT"],
            "{opened:?}"
        );
    }
    assert!(
        pair.proof_known(),
        "both sides' capabilities known after open"
    );
    let _ = pair
        .proof_plan(TransferType::Image, DestCommand::Replace)
        .await;
    let reply = pair.exchange(Side::Source, "PWD").await.expect("PWD");
    assert_eq!(reply.code().get(), 257, "out of step: {reply:?}");
    assert_eq!(
        commands(&log).len(),
        opened.len() + 1,
        "asked again: {:?}",
        commands(&log)
    );
}

/// TYPE, MODE and STRU go in one write; a refusal of one of them still has every reply read,
/// so the next command on that connection reads its own reply.
#[tokio::test]
async fn a_refused_mode_in_the_params_batch_leaves_the_connection_in_step() {
    let modes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = modes.clone();
    let src: Script = Arc::new(move |line| {
        // The login's MODE is accepted, the next one refused.
        (line == "MODE S" && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1)
            .then(|| vec!["504 not that mode"])
    });
    let (mut pair, log) = pair_with(src, none()).await;
    let err = pair
        .set_params(Side::Source)
        .await
        .expect_err("MODE refused");
    assert!(err.to_string().contains("MODE"), "{err}");
    let reply = pair.exchange(Side::Source, "PWD").await.expect("PWD");
    assert_eq!(
        reply.code().get(),
        257,
        "PWD read another command's reply: {reply:?}"
    );
    let sent: Vec<String> = commands(&log)
        .into_iter()
        .filter(|c| c.starts_with("src>"))
        .collect();
    assert_eq!(
        sent.last().map(String::as_str),
        Some("src> PWD"),
        "{sent:?}"
    );
}

/// A gate the test opens and shuts.
#[derive(Debug, Default)]
struct TestGate(std::sync::atomic::AtomicBool);

impl SendGate for TestGate {
    fn admit(&self) -> Result<(), String> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Err("the lease ran out".into())
        } else {
            Ok(())
        }
    }
}

/// Past a gate's refusal (bftpd's lease deadline) nothing more reaches either server: not
/// the copy's first command, not a DELE, not the login of a reconnection.
#[tokio::test]
async fn a_shut_gate_sends_nothing_more_on_either_side() {
    let (mut pair, log) = pair_with(none(), none()).await;
    let gate = Arc::new(TestGate::default());
    pair.set_gate(Some(gate.clone()));
    let outcome = pair.copy(&copy_request()).await.expect("copy");
    assert!(outcome.is_success(), "{outcome:?}");
    assert!(commands(&log).contains(&"dst> STOR g.bin".to_owned()));
    gate.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let before = commands(&log);
    let refused = match pair.copy(&copy_request()).await {
        Err(e) => e.to_string(),
        Ok(outcome) => {
            assert!(!outcome.is_success(), "{outcome:?}");
            format!("{outcome:?}")
        }
    };
    assert!(pair.delete(Side::Destination, "g.bin").await.is_err());
    assert!(pair.reopen("to clean up").await.is_err());
    // The fakes log what they read: a moment for anything in flight to arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(commands(&log), before, "{refused}");
    assert!(!pair.is_usable());
}

/// ABOR and QUIT pass a shut gate: they stop a transfer or a session, and change no file.
#[tokio::test]
async fn abor_and_quit_pass_a_shut_gate() {
    let src: Script = Arc::new(|line| (line == "ABOR").then(|| vec!["225 no transfer"]));
    let (mut pair, log) = pair_with(src, none()).await;
    pair.set_gate(Some(Arc::new(TestGate(true.into()))));
    let deadline = Instant::now() + Duration::from_secs(2);
    abor(&mut pair.src, deadline).await;
    pair.close().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = commands(&log);
    for line in ["src> ABOR", "src> QUIT", "dst> QUIT"] {
        assert!(sent.contains(&line.to_owned()), "{line}: {sent:?}");
    }
}
