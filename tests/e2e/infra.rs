//! The test infrastructure itself, against the real servers: each FTP server accepts a login
//! and an upload, FXP works between every ordered pair of different servers, a server started
//! without FXP refuses it, a killed server comes back on its port, and the SMTP sink stores,
//! defers and restarts.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bftp_tests::rawftp::connect_from;
use bftp_tests::{Direction, FtpOptions, FtpServer, RawFtp, ServerKind, SmtpSink, XferEntry};

const DATA_TIMEOUT: Duration = Duration::from_secs(10);
/// For a reply that comes only after a server's deliberate delay (Pure-FTPd waits 3 to 6 s
/// before refusing a wrong password), or after the server has noticed something: with
/// several test binaries in parallel on a loaded 2-core machine, the default 10 s of
/// [`RawFtp`] leaves too little margin. Only a failing test ever waits this long.
const SLOW_REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server that should stay silent is watched: long enough for a wrong answer to
/// show, and not a limit on a right one.
const SILENCE_WINDOW: Duration = Duration::from_secs(3);
/// A loopback address no test server or client uses: it stands for a third host.
const THIRD_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

fn start(kind: ServerKind) -> Result<FtpServer> {
    FtpServer::start(kind, FtpOptions::default())
}

fn start_without_fxp(kind: ServerKind) -> Result<FtpServer> {
    FtpServer::start(
        kind,
        FtpOptions {
            fxp: false,
            ..FtpOptions::default()
        },
    )
}

use bftp_tests::payload;

/// The transfer-log lines of `server` about `path`.
fn xfers(server: &FtpServer, path: &str) -> Result<Vec<XferEntry>> {
    Ok(server
        .xferlog_entries()?
        .into_iter()
        .filter(|e| e.path == path)
        .collect())
}

fn is_timeout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    })
}

/// PASV upload by the client itself: the plain, non-FXP path.
fn upload_lands_in_root(kind: ServerKind) -> Result<()> {
    let server = start(kind)?;
    let mut ftp = server.login()?;
    ftp.expect("TYPE I", 200)?;
    let data_addr = ftp.pasv()?;
    ensure!(
        *data_addr.ip() == server.host(),
        "PASV named {data_addr}, not the server's own address"
    );
    let mut data = TcpStream::connect_timeout(&data_addr.into(), DATA_TIMEOUT)?;
    let reply = ftp.cmd("STOR hello.bin")?;
    ensure!(reply.class() == 1, "STOR answered {reply:?}");
    let bytes = payload(70_000, 1);
    data.write_all(&bytes)?;
    drop(data);
    let reply = ftp.reply()?;
    ensure!(reply.code == 226, "end of upload answered {reply:?}");
    // Any later reply proves the session finished logging the transfer.
    ftp.expect("NOOP", 200)?;

    ensure!(
        server.read_file("/hello.bin")? == bytes,
        "uploaded bytes differ"
    );
    let log = xfers(&server, "/hello.bin")?;
    ensure!(
        log.len() == 1
            && log[0].direction == Direction::Incoming
            && log[0].bytes == bytes.len() as u64
            && log[0].complete,
        "xferlog of {kind}: {log:?}"
    );
    Ok(())
}

/// One third-party transfer, RFC 1068 Figure 2 order: PASV to the source, PORT with that
/// address to the destination, STOR to the destination (active: it connects now and answers
/// 150), RETR to the source (passive: answers 150 once it has the connection), then a final
/// 226 from both.
fn fxp(src_kind: ServerKind, dst_kind: ServerKind) -> Result<()> {
    let src = start(src_kind)?;
    let dst = start(dst_kind)?;
    let bytes = payload(300_000, 2);
    src.put_file("/out/from.bin", &bytes)?;

    let mut s = src.login()?;
    let mut d = dst.login()?;
    // The client is elsewhere than both servers, so this data connection is foreign to both.
    ensure!(s.local_addr()?.ip() != IpAddr::V4(src.host()));
    ensure!(d.local_addr()?.ip() != IpAddr::V4(dst.host()));
    s.expect("TYPE I", 200)?;
    d.expect("TYPE I", 200)?;

    let pasv = s.pasv()?;
    ensure!(
        *pasv.ip() == src.host(),
        "PASV named {pasv}, not the source"
    );
    let reply = d.port(pasv)?;
    ensure!(
        reply.code == 200,
        "{dst_kind} refused PORT to {src_kind}: {reply:?}"
    );
    let reply = d.cmd("STOR to.bin")?;
    ensure!(reply.class() == 1, "{dst_kind} STOR answered {reply:?}");
    let reply = s.cmd("RETR /out/from.bin")?;
    ensure!(reply.class() == 1, "{src_kind} RETR answered {reply:?}");
    let reply = s.reply()?;
    ensure!(reply.code == 226, "{src_kind} ended RETR with {reply:?}");
    let reply = d.reply()?;
    ensure!(reply.code == 226, "{dst_kind} ended STOR with {reply:?}");
    s.expect("NOOP", 200)?;
    d.expect("NOOP", 200)?;

    ensure!(dst.read_file("/to.bin")? == bytes, "copied bytes differ");
    let out = xfers(&src, "/out/from.bin")?;
    ensure!(
        out.len() == 1 && out[0].direction == Direction::Outgoing && out[0].complete,
        "xferlog of {src_kind}: {out:?}"
    );
    let inc = xfers(&dst, "/to.bin")?;
    ensure!(
        inc.len() == 1
            && inc[0].direction == Direction::Incoming
            && inc[0].bytes == bytes.len() as u64,
        "xferlog of {dst_kind}: {inc:?}"
    );
    Ok(())
}

/// PORT naming a third host: refused without FXP, accepted with it (so the refusal is the
/// setting's doing, not the address's).
fn refuses_foreign_port(kind: ServerKind) -> Result<()> {
    let third = TcpListener::bind((THIRD_HOST, 0))?;
    let SocketAddr::V4(foreign) = third.local_addr()? else {
        unreachable!("bound an IPv4 address")
    };

    let stock = start_without_fxp(kind)?;
    let mut ftp = stock.login()?;
    let reply = ftp.port(foreign)?;
    ensure!(
        reply.class() == 5,
        "{kind} without FXP answered PORT {foreign} with {reply:?}"
    );

    let open = start(kind)?;
    let mut ftp = open.login()?;
    let reply = ftp.port(foreign)?;
    ensure!(
        reply.code == 200,
        "{kind} with FXP answered PORT {foreign} with {reply:?}"
    );
    Ok(())
}

/// A passive data connection from a third host: without FXP, no transfer starts (vsftpd and
/// proFTPD say 425; Pure-FTPd drops the connection and keeps waiting, so STOR gets no reply
/// at all); with FXP, the upload goes through.
fn refuses_foreign_data_connection(kind: ServerKind) -> Result<()> {
    let stock = start_without_fxp(kind)?;
    let mut ftp = stock.login()?;
    ftp.expect("TYPE I", 200)?;
    let pasv = ftp.pasv()?;
    let _data = connect_from(IpAddr::V4(THIRD_HOST), pasv.into(), DATA_TIMEOUT)?;
    // Pure-FTPd's refusal is silence, watched for a while; vsftpd's and proFTPD's is a 425,
    // which a loaded machine may take a few seconds to send.
    ftp.set_timeout(if kind == ServerKind::PureFtpd {
        SILENCE_WINDOW
    } else {
        SLOW_REPLY_TIMEOUT
    })?;
    match (kind, ftp.cmd("STOR foreign.bin")) {
        (ServerKind::PureFtpd, Err(e)) if is_timeout(&e) => {}
        (ServerKind::Vsftpd | ServerKind::Proftpd, Ok(reply)) if reply.code == 425 => {}
        (_, other) => anyhow::bail!(
            "{kind} without FXP, STOR over a data connection from {THIRD_HOST}: {other:?}"
        ),
    }

    let open = start(kind)?;
    let mut ftp = open.login()?;
    ftp.expect("TYPE I", 200)?;
    let pasv = ftp.pasv()?;
    let mut data = connect_from(IpAddr::V4(THIRD_HOST), pasv.into(), DATA_TIMEOUT)?;
    let reply = ftp.cmd("STOR foreign.bin")?;
    ensure!(
        reply.class() == 1,
        "{kind} with FXP, STOR over a foreign data connection: {reply:?}"
    );
    data.write_all(b"from a third host")?;
    drop(data);
    let reply = ftp.reply()?;
    ensure!(reply.code == 226, "{kind} ended the upload with {reply:?}");
    ensure!(open.read_file("foreign.bin")? == b"from a third host");
    Ok(())
}

/// kill() is a crash (sessions die with the server); restart() brings it back on its port,
/// with its files and its transfer log.
fn killed_server_restarts_on_its_port(kind: ServerKind) -> Result<()> {
    let mut server = start(kind)?;
    server.put_file("/kept.txt", b"kept")?;
    let port = server.port();
    let mut ftp = server.login()?;
    // kill() returns once every process is gone and the listening socket is closed (for
    // Pure-FTPd, whose sessions inherit it, that is later than the server process's death).
    server.kill();
    ensure!(!server.is_running());
    ftp.set_timeout(Duration::from_secs(5))?;
    let after = ftp.cmd("NOOP");
    ensure!(
        after.as_ref().is_err_and(|e| !is_timeout(e)),
        "a session of a killed {kind} answered: {after:?}"
    );
    ensure!(
        TcpStream::connect_timeout(&server.addr(), DATA_TIMEOUT).is_err(),
        "killed {kind} still accepts connections"
    );

    server.restart()?;
    ensure!(server.is_running() && server.port() == port);
    let mut ftp = server.login()?;
    ftp.expect("TYPE I", 200)?;
    let pasv = ftp.pasv()?;
    let mut data = TcpStream::connect_timeout(&pasv.into(), DATA_TIMEOUT)?;
    let reply = ftp.cmd("RETR kept.txt")?;
    ensure!(reply.class() == 1, "RETR answered {reply:?}");
    let mut got = Vec::new();
    data.read_to_end(&mut got)?;
    // proFTPD holds its 226 until the receiver closes (lingering close, up to 10 s).
    drop(data);
    ensure!(got == b"kept", "got {got:?}");
    let reply = ftp.reply()?;
    ensure!(reply.code == 226, "end of RETR answered {reply:?}");
    Ok(())
}

macro_rules! per_server {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            use bftp_tests::ServerKind;

            #[test]
            fn vsftpd() -> anyhow::Result<()> {
                super::$check(ServerKind::Vsftpd)
            }

            #[test]
            fn proftpd() -> anyhow::Result<()> {
                super::$check(ServerKind::Proftpd)
            }

            #[test]
            fn pure_ftpd() -> anyhow::Result<()> {
                super::$check(ServerKind::PureFtpd)
            }
        }
    )*};
}

per_server!(
    upload_lands_in_root,
    refuses_foreign_port,
    refuses_foreign_data_connection,
    killed_server_restarts_on_its_port,
);

mod fxp {
    use bftp_tests::ServerKind::{Proftpd, PureFtpd, Vsftpd};

    #[test]
    fn vsftpd_to_proftpd() -> anyhow::Result<()> {
        super::fxp(Vsftpd, Proftpd)
    }

    #[test]
    fn vsftpd_to_pure_ftpd() -> anyhow::Result<()> {
        super::fxp(Vsftpd, PureFtpd)
    }

    #[test]
    fn proftpd_to_vsftpd() -> anyhow::Result<()> {
        super::fxp(Proftpd, Vsftpd)
    }

    #[test]
    fn proftpd_to_pure_ftpd() -> anyhow::Result<()> {
        super::fxp(Proftpd, PureFtpd)
    }

    #[test]
    fn pure_ftpd_to_vsftpd() -> anyhow::Result<()> {
        super::fxp(PureFtpd, Vsftpd)
    }

    #[test]
    fn pure_ftpd_to_proftpd() -> anyhow::Result<()> {
        super::fxp(PureFtpd, Proftpd)
    }
}

/// Sends one message over plain SMTP; returns the reply to the end of DATA (or to the first
/// command refused before it).
fn send_mail(
    addr: SocketAddr,
    from: &str,
    to: &[&str],
    message: &str,
) -> Result<bftp_tests::Reply> {
    let (mut smtp, greeting) = RawFtp::connect(addr)?;
    ensure!(greeting.code == 220, "greeting {greeting:?}");
    smtp.expect("EHLO bftp-test", 250)?;
    smtp.expect(&format!("MAIL FROM:<{from}>"), 250)?;
    for rcpt in to {
        smtp.expect(&format!("RCPT TO:<{rcpt}>"), 250)?;
    }
    smtp.expect("DATA", 354)?;
    for line in message.lines() {
        // Dot-stuffing (RFC 5321 §4.5.2).
        if line.starts_with('.') {
            smtp.send(&format!(".{line}"))?;
        } else {
            smtp.send(line)?;
        }
    }
    let reply = smtp.cmd(".").context("end of DATA")?;
    smtp.cmd("QUIT")?;
    Ok(reply)
}

#[test]
fn smtp_sink_stores_defers_and_restarts() -> Result<()> {
    let mut sink = SmtpSink::start()?;
    let message = "From: bftpd <bftpd@localhost>\n\
                   To: alice@example.test, bob@example.test\n\
                   Subject: bftp test report\n\
                   Message-ID: <job-1.attempt-1@bftp.test>\n\
                   \n\
                   first line\n\
                   .a line that starts with a dot\n";
    let to = ["alice@example.test", "bob@example.test"];
    let reply = send_mail(sink.addr(), "bftpd@localhost", &to, message)?;
    ensure!(reply.code == 250, "DATA answered {reply:?}");
    let messages = sink.wait_for(1, Duration::from_secs(10))?;
    ensure!(messages.len() == 1, "{messages:?}");
    ensure!(messages[0].contains("Message-ID: <job-1.attempt-1@bftp.test>"));
    ensure!(
        messages[0].contains("\n.a line that starts with a dot"),
        "dot-stuffing not undone: {:?}",
        messages[0]
    );
    let mail = &sink.received()[0];
    ensure!(
        mail.mail_from == "bftpd@localhost" && mail.rcpt_to == to,
        "{mail:?}"
    );

    // A relay that defers: the message is refused and not stored.
    sink.set_reply(Some("451 4.3.0 try again later"))?;
    let reply = send_mail(sink.addr(), "bftpd@localhost", &to[..1], message)?;
    ensure!(reply.code == 451, "deferring sink answered {reply:?}");
    ensure!(sink.messages().len() == 1);
    sink.set_reply(None)?;

    // A relay that goes away and comes back on the same port, keeping what it had.
    let port = sink.port();
    sink.stop();
    ensure!(!sink.is_running());
    ensure!(
        send_mail(sink.addr(), "bftpd@localhost", &to[..1], message).is_err(),
        "a stopped sink accepted mail"
    );
    sink.start_again()?;
    ensure!(sink.port() == port);
    let reply = send_mail(sink.addr(), "bftpd@localhost", &to[1..], message)?;
    ensure!(reply.code == 250, "restarted sink answered {reply:?}");
    let messages = sink.wait_for(2, Duration::from_secs(10))?;
    ensure!(messages.len() == 2);
    ensure!(sink.received()[1].rcpt_to == ["bob@example.test"]);
    Ok(())
}

#[test]
fn wrong_password_is_refused_by_each_server() -> Result<()> {
    // In parallel: vsftpd and Pure-FTPd answer a wrong password only after a delay.
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ServerKind::ALL
            .into_iter()
            .map(|kind| {
                scope.spawn(move || -> Result<()> {
                    let server = start(kind)?;
                    let (mut ftp, _) = RawFtp::connect(server.addr())?;
                    ftp.expect(&format!("USER {}", server.user()), 331)?;
                    ftp.set_timeout(SLOW_REPLY_TIMEOUT)?;
                    let reply = ftp.cmd("PASS not-the-password")?;
                    ensure!(
                        reply.code == 530,
                        "{kind} answered a wrong password with {reply:?}"
                    );
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("thread panicked")))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    Ok(())
}

#[test]
fn pasv_ports_stay_in_the_reserved_range() -> Result<()> {
    for kind in ServerKind::ALL {
        let server = start(kind)?;
        let mut ftp = server.login()?;
        let range = server.passive_ports();
        for _ in 0..3 {
            let addr = ftp.pasv()?;
            ensure!(
                range.contains(&addr.port()),
                "{kind} offered {addr}, outside {range:?}"
            );
        }
    }
    Ok(())
}
