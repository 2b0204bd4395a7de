//! The scripted hostile FTP server itself: each scripted misbehaviour really happens on the
//! wire (seen through the raw client or raw sockets), the unscripted server is a working FTP
//! server, and it can be either side of an FXP with a real vsftpd.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context, Result};
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::rawftp::{connect_from, parse_pasv};
use bftp_tests::scenario::raw_session;
use bftp_tests::{FtpOptions, FtpServer, RawFtp, Reply, ServerKind};

const TIMEOUT: Duration = Duration::from_secs(10);
/// Short enough to keep a test quick, long enough that a busy machine still answers within it.
const SHORT: Duration = Duration::from_millis(300);
/// A loopback address no test server or client uses: it stands for a third host.
const THIRD_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

use bftp_tests::payload;

fn is_timeout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    })
}

/// Where a careful client connects for a passive reply: the control connection's peer
/// address with the announced port, whatever host the reply names (RULES.md §6).
fn data_addr(ftp: &RawFtp, port: u16) -> Result<SocketAddr> {
    Ok(SocketAddr::new(ftp.peer_addr()?.ip(), port))
}

fn connect_data(ftp: &RawFtp, port: u16) -> Result<TcpStream> {
    let data = TcpStream::connect_timeout(&data_addr(ftp, port)?, TIMEOUT)?;
    data.set_read_timeout(Some(TIMEOUT))?;
    data.set_write_timeout(Some(TIMEOUT))?;
    Ok(data)
}

/// The port of a 229 reply: `(|||port|)`.
fn epsv_port(reply: &Reply) -> Result<u16> {
    let inner = reply
        .text
        .split_once("(|||")
        .and_then(|(_, rest)| rest.split_once("|)"))
        .map(|(port, _)| port)
        .with_context(|| format!("unparsable EPSV reply {reply:?}"))?;
    Ok(inner.parse()?)
}

/// A download over PASV: the 1yz reply, the bytes, the final reply.
fn pasv_get(ftp: &mut RawFtp, command: &str) -> Result<(Reply, Vec<u8>, Reply)> {
    let port = ftp.pasv()?.port();
    let mut data = connect_data(ftp, port)?;
    let start = ftp.cmd(command)?;
    ensure!(start.class() == 1, "{command} answered {start:?}");
    let mut got = Vec::new();
    data.read_to_end(&mut got)?;
    let done = ftp.reply()?;
    Ok((start, got, done))
}

/// One download of `f.bin` over PASV from a server scripted by `script`, in image type:
/// the server, the client (for what the test does next), the bytes and the final reply.
fn retr_f(script: Script) -> Result<(HostileServer, RawFtp, Vec<u8>, Reply)> {
    let (server, mut ftp) = raw_session(script)?;
    let (_, got, done) = pasv_get(&mut ftp, "RETR f.bin")?;
    Ok((server, ftp, got, done))
}

/// An upload over PASV; returns the final reply.
fn pasv_put(ftp: &mut RawFtp, command: &str, bytes: &[u8]) -> Result<Reply> {
    let port = ftp.pasv()?.port();
    let mut data = connect_data(ftp, port)?;
    let start = ftp.cmd(command)?;
    ensure!(start.class() == 1, "{command} answered {start:?}");
    data.write_all(bytes)?;
    drop(data);
    ftp.reply()
}

/// An upload the server connects for (after PORT/EPRT to `listener`); returns the 1yz and
/// the final reply.
fn active_put(
    ftp: &mut RawFtp,
    listener: &TcpListener,
    command: &str,
    bytes: &[u8],
) -> Result<(Reply, Reply)> {
    let start = ftp.cmd(command)?;
    ensure!(start.class() == 1, "{command} answered {start:?}");
    let (mut data, _) = listener.accept()?;
    data.write_all(bytes)?;
    drop(data);
    Ok((start, ftp.reply()?))
}

fn local_listener() -> Result<(TcpListener, SocketAddrV4)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let SocketAddr::V4(addr) = listener.local_addr()? else {
        unreachable!("bound an IPv4 address")
    };
    Ok((listener, addr))
}

/// A control connection read as raw bytes, for what `RawFtp` rightly refuses to parse.
struct Wire {
    reader: BufReader<TcpStream>,
}

impl Wire {
    /// Connects and reads the one-line greeting.
    fn connect(addr: SocketAddr) -> Result<Wire> {
        let stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        let mut wire = Wire {
            reader: BufReader::new(stream),
        };
        let greeting = wire.line()?;
        ensure!(greeting.starts_with(b"220 "), "greeting {greeting:?}");
        Ok(wire)
    }

    fn send(&mut self, line: &str) -> Result<()> {
        Ok(self
            .reader
            .get_mut()
            .write_all(format!("{line}\r\n").as_bytes())?)
    }

    /// One line with its line end, at most 64 KiB.
    fn line(&mut self) -> Result<Vec<u8>> {
        let mut line = Vec::new();
        (&mut self.reader)
            .take(64 * 1024)
            .read_until(b'\n', &mut line)?;
        Ok(line)
    }
}

#[test]
fn unscripted_server_logs_in_transfers_lists_and_deletes() -> Result<()> {
    let file = payload(100_000, 1);
    let server = HostileServer::start(
        Script::new()
            .user("alice", "s3cret-pw")
            .file("/pub/a.bin", file.clone())
            .dir("/in"),
    )?;
    let mut ftp = server.login()?;
    let feat = ftp.expect("FEAT", 211)?;
    ensure!(feat.text.contains("\n MLST ") && feat.text.ends_with("211 End"));
    ftp.expect("SIZE /pub/a.bin", 550)?; // ASCII mode, as proFTPD
    ftp.expect("TYPE I", 200)?;
    ftp.expect("MODE S", 200)?;
    ftp.expect("STRU F", 200)?;
    ensure!(ftp.expect("SIZE /pub/a.bin", 213)?.text == "213 100000");
    ftp.expect("MDTM /pub/a.bin", 213)?;
    ftp.expect("CWD /nowhere", 550)?;
    ftp.expect("CWD /pub", 250)?;
    ensure!(ftp.expect("PWD", 257)?.text.contains("\"/pub\""));

    let (_, got, done) = pasv_get(&mut ftp, "RETR a.bin")?;
    ensure!(
        done.code == 226 && got == file,
        "RETR: {done:?}, {} bytes",
        got.len()
    );

    let up = payload(70_000, 2);
    let port = epsv_port(&ftp.expect("EPSV", 229)?)?;
    let mut data = connect_data(&ftp, port)?;
    ensure!(ftp.cmd("STOR /in/up.bin")?.class() == 1);
    data.write_all(&up)?;
    drop(data);
    ensure!(ftp.reply()?.code == 226, "end of STOR");
    ensure!(server.stored("/in/up.bin").as_deref() == Some(&up[..]));

    let (listener, addr) = local_listener()?;
    ensure!(ftp.port(addr)?.code == 200);
    let (_, done) = active_put(&mut ftp, &listener, "APPE /in/up.bin", b"tail")?;
    ensure!(done.code == 226, "APPE ended with {done:?}");
    let mut appended = up.clone();
    appended.extend_from_slice(b"tail");
    ensure!(server.stored("/in/up.bin") == Some(appended));

    ftp.expect(&format!("EPRT |1|{}|{}|", addr.ip(), addr.port()), 200)?;
    let (start, done) = active_put(&mut ftp, &listener, "STOU", b"unique")?;
    ensure!(
        start.text == "150 FILE: stou.1" && done.code == 226,
        "{start:?} {done:?}"
    );
    ensure!(server.stored("/pub/stou.1").as_deref() == Some(&b"unique"[..]));

    let (_, names, done) = pasv_get(&mut ftp, "NLST /in")?;
    ensure!(
        done.code == 226 && names == b"up.bin\r\n",
        "NLST: {names:?}"
    );
    let (_, facts, _) = pasv_get(&mut ftp, "MLSD /in")?;
    ensure!(
        facts
            == format!(
                "type=file;size={};modify=20240101000000; up.bin\r\n",
                up.len() + 4
            )
            .as_bytes(),
        "MLSD: {:?}",
        String::from_utf8_lossy(&facts)
    );

    ftp.expect("DELE /in/up.bin", 250)?;
    ftp.expect("SIZE /in/up.bin", 550)?;
    ftp.expect("QUIT", 221)?;

    let commands = server.commands();
    ensure!(
        commands.contains(&"PASS ****".to_string())
            && !commands.iter().any(|c| c.contains("s3cret")),
        "password not masked: {commands:?}"
    );
    // RETR, STOR, NLST, MLSD came to its passive ports; APPE and STOU went out to us.
    ensure!(server.data_connections_from().len() == 4);
    ensure!(server.data_connections_to() == [SocketAddr::V4(addr); 2]);
    server.wait_for(TIMEOUT, |o| o.closed == 1)?;
    Ok(())
}

#[test]
fn pasv_naming_a_foreign_host_still_listens_on_the_server() -> Result<()> {
    let file = payload(50_000, 3);
    // On another address than the client's, so only the control peer address is right.
    let host = Ipv4Addr::new(127, 0, 0, 5);
    let server = HostileServer::start(Script::new().host(host).file("f.bin", file.clone()).on(
        "PASV",
        Action::PasvForeignHost {
            host: [10, 9, 8, 7],
        },
    ))?;
    let mut ftp = server.login()?;
    ensure!(ftp.peer_addr()?.ip() == IpAddr::V4(host));
    ftp.expect("TYPE I", 200)?;
    let reply = ftp.expect("PASV", 227)?;
    ensure!(
        reply
            .text
            .starts_with("227 Entering Passive Mode (10,9,8,7,"),
        "{reply:?}"
    );
    let announced = parse_pasv(&reply.text).context("unparsable 227")?;
    ensure!(*announced.ip() == Ipv4Addr::new(10, 9, 8, 7));

    let mut data = connect_data(&ftp, announced.port())?;
    let ours = data.local_addr()?;
    ensure!(ftp.cmd("RETR f.bin")?.class() == 1);
    let mut got = Vec::new();
    data.read_to_end(&mut got)?;
    ensure!(ftp.reply()?.code == 226 && got == file);
    ensure!(server.data_connections_from() == [ours]);
    Ok(())
}

#[test]
fn pasv_and_epsv_announcing_port_21() -> Result<()> {
    let server = HostileServer::start(
        Script::new()
            .file("f.bin", b"x".to_vec())
            .data_timeout(SHORT)
            .on("PASV", Action::PasvPort(21))
            .on("EPSV", Action::PasvPort(21)),
    )?;
    let mut ftp = server.login()?;
    let reply = ftp.expect("PASV", 227)?;
    ensure!(
        parse_pasv(&reply.text) == Some(SocketAddrV4::new(server.host(), 21)),
        "{reply:?}"
    );
    ensure!(epsv_port(&ftp.expect("EPSV", 229)?)? == 21);
    // A client that refuses the port connects nowhere; the transfer then fails in time.
    let started = Instant::now();
    let reply = ftp.cmd("RETR f.bin")?;
    ensure!(reply.code == 425, "{reply:?}");
    ensure!(started.elapsed() >= SHORT);
    ensure!(server.data_connections_from().is_empty());
    Ok(())
}

#[test]
fn five_yz_after_dropping_the_data_connection() -> Result<()> {
    let file = payload(100_000, 4);
    let (server, mut ftp, got, done) = retr_f(
        Script::new()
            .file("f.bin", file.clone())
            .on(
                "RETR",
                Action::DropDataThen("551 Error on output file.".into()),
            )
            .on("STOR", Action::DropDataThen("550 Broken pipe.".into())),
    )?;
    ensure!(done.text == "551 Error on output file.", "{done:?}");
    ensure!(got == file[..file.len() / 2], "got {} bytes", got.len());

    // The upload outruns what the server reads before it hangs up on it.
    let up = payload(16 << 20, 5);
    let port = ftp.pasv()?.port();
    let mut data = connect_data(&ftp, port)?;
    ensure!(ftp.cmd("STOR up.bin")?.class() == 1);
    let written = data.write_all(&up);
    ensure!(written.is_err(), "the server read all 16 MiB");
    let done = ftp.reply()?;
    ensure!(done.text == "550 Broken pipe.", "{done:?}");
    let kept = server.stored("up.bin").context("no partial file")?;
    ensure!(!kept.is_empty() && kept.len() < up.len() && up.starts_with(&kept));
    ftp.expect("NOOP", 200)?;
    Ok(())
}

#[test]
fn reply_without_a_code_arrives_verbatim() -> Result<()> {
    let server = HostileServer::start(
        Script::new()
            .on("NLST", Action::reply("No such file or directory"))
            .on("SYST", Action::Raw(b"215 UNIX\0\n".to_vec())),
    )?;
    let mut ftp = server.login()?;
    let err = ftp
        .cmd("NLST")
        .expect_err("a code-less line parsed as a reply");
    ensure!(
        format!("{err:#}").contains("reply line without a code: \"No such file or directory\""),
        "{err:#}"
    );
    ftp.expect("NOOP", 200)?;

    let mut wire = Wire::connect(server.addr())?;
    wire.send("PWD")?;
    ensure!(wire.line()? == b"530 Please login with USER and PASS.\r\n");
    wire.send("USER x")?;
    wire.line()?;
    wire.send("PASS y")?;
    wire.line()?;
    wire.send("NLST")?;
    ensure!(wire.line()? == b"No such file or directory\r\n");
    wire.send("SYST")?;
    ensure!(wire.line()? == b"215 UNIX\0\n");
    Ok(())
}

#[test]
fn nlst_and_mlsd_deliver_hostile_names_byte_for_byte() -> Result<()> {
    let names: [&[u8]; 6] = [
        b"evil\r\nDELE x",
        b"nul\0name",
        b"../../etc/passwd",
        b"/etc/shadow",
        b"..",
        b"ok.txt",
    ];
    let server = HostileServer::start(
        Script::new()
            .file("/pub/ok.txt", b"ok".to_vec())
            .listing("/pub", names),
    )?;
    let mut ftp = server.login()?;
    ftp.expect("CWD pub", 250)?;
    let (_, got, done) = pasv_get(&mut ftp, "NLST")?;
    ensure!(done.code == 226);
    let want: Vec<u8> = names.iter().flat_map(|n| [*n, b"\r\n"].concat()).collect();
    ensure!(got == want, "NLST sent {:?}", String::from_utf8_lossy(&got));

    let (_, got, _) = pasv_get(&mut ftp, "MLSD")?;
    let text = String::from_utf8_lossy(&got);
    ensure!(
        text.starts_with("type=file;size=0;modify=20240101000000; evil\r\nDELE x\r\n")
            && text.contains("; nul\0name\r\n")
            && text.contains("type=dir;modify=20240101000000; ..\r\n")
            && text.ends_with("type=file;size=2;modify=20240101000000; ok.txt\r\n"),
        "MLSD sent {text:?}"
    );
    Ok(())
}

#[test]
fn endless_reply_line_ends_at_its_bound_or_when_the_client_hangs_up() -> Result<()> {
    const BOUND: usize = 1 << 20;
    let server = HostileServer::start(Script::new().on(
        "USER",
        Action::Sequence(vec![
            Action::EndlessLine { max_bytes: BOUND },
            Action::EndlessLine {
                max_bytes: usize::MAX,
            },
        ]),
    ))?;

    let mut wire = Wire::connect(server.addr())?;
    wire.send("USER x")?;
    let mut got = Vec::new();
    (&mut wire.reader)
        .take(BOUND as u64 + 1)
        .read_to_end(&mut got)?; // ends: the server closes after the bound
    ensure!(got.len() == BOUND, "{} bytes", got.len());
    ensure!(got.starts_with(b"200 ") && !got.contains(&b'\n'));

    let mut wire = Wire::connect(server.addr())?;
    wire.send("USER x")?;
    let mut some = vec![0; 100_000];
    wire.reader.read_exact(&mut some)?;
    drop(wire);
    server.wait_for(TIMEOUT, |o| o.closed == 2)?;
    Ok(())
}

#[test]
fn huge_multi_line_reply_arrives_whole() -> Result<()> {
    const LINES: usize = 5000;
    let server = HostileServer::start(Script::new().on("HELP", Action::huge_reply(214, LINES)))?;
    let mut ftp = server.login()?;
    let err = ftp
        .cmd("HELP")
        .expect_err("RawFtp takes at most 1000 lines");
    ensure!(
        format!("{err:#}").contains("longer than 1000 lines"),
        "{err:#}"
    );

    let mut wire = Wire::connect(server.addr())?;
    wire.send("USER x")?;
    wire.line()?;
    wire.send("PASS y")?;
    wire.line()?;
    wire.send("HELP")?;
    let mut lines = vec![wire.line()?];
    while !lines.last().is_some_and(|l| l.starts_with(b"214 ")) {
        lines.push(wire.line()?);
        ensure!(lines.len() <= LINES, "no last line");
    }
    ensure!(lines.len() == LINES && lines[0].starts_with(b"214-"));
    ensure!(lines.iter().all(|l| l.ends_with(b"\r\n")));
    Ok(())
}

#[test]
fn reply_421_mid_transfer_then_the_control_connection_closes() -> Result<()> {
    let file = payload(1 << 20, 6);
    let (server, mut ftp, got, reply) = retr_f(Script::new().file("f.bin", file.clone()).on(
        "RETR",
        Action::AbortMidTransfer("421 Timeout: closing control connection.".into()),
    ))?;
    ensure!(reply.code == 421, "{reply:?}");
    ensure!(got == file[..file.len() / 2], "got {} bytes", got.len());
    let after = ftp.cmd("NOOP");
    ensure!(
        after.as_ref().is_err_and(|e| !is_timeout(e)),
        "control connection still open: {after:?}"
    );
    server.wait_for(TIMEOUT, |o| o.closed == 1)?;
    Ok(())
}

#[test]
fn silent_greeting_and_silent_command() -> Result<()> {
    let server = HostileServer::start(
        Script::new()
            .greeting(Action::Sequence(vec![Action::Silence]))
            .on("CWD", Action::Silence),
    )?;
    let silent = RawFtp::connect_timeout(server.addr(), SHORT);
    ensure!(
        silent.as_ref().is_err_and(is_timeout),
        "greeting: {:?}",
        silent.map(|(_, g)| g)
    );

    let mut ftp = server.login()?; // the second connection is greeted
    ftp.set_timeout(SHORT)?;
    let reply = ftp.cmd("CWD /");
    ensure!(reply.as_ref().is_err_and(is_timeout), "CWD: {reply:?}");
    ftp.send("NOOP")?;
    server.wait_for_command("NOOP", TIMEOUT)?; // received, never answered
    ensure!(ftp.reply().is_err_and(|e| is_timeout(&e)));
    ensure!(server.commands_on(1).last().map(String::as_str) == Some("NOOP"));
    ensure!(server.connections() == 2);
    Ok(())
}

#[test]
fn connection_closed_at_greeting_or_after_a_command() -> Result<()> {
    let server = HostileServer::start(
        Script::new()
            .greeting(Action::Sequence(vec![Action::ReplyAndClose(
                "421 Too many users, try later.".into(),
            )]))
            .on("TYPE", Action::Close),
    )?;
    let (mut ftp, greeting) = RawFtp::connect(server.addr())?;
    ensure!(greeting.code == 421, "{greeting:?}");
    let after = ftp.cmd("USER x");
    ensure!(after.as_ref().is_err_and(|e| !is_timeout(e)), "{after:?}");

    let mut ftp = server.login()?;
    let err = ftp.cmd("TYPE I").expect_err("TYPE answered");
    ensure!(
        !is_timeout(&err) && format!("{err:#}").contains("connection closed by the server"),
        "{err:#}"
    );
    server.wait_for(TIMEOUT, |o| o.closed == 2)?;
    Ok(())
}

#[test]
fn login_refusals_and_the_account_step() -> Result<()> {
    let server = HostileServer::start(Script::new().user("alice", "right").account("acct-1").on(
        "PASS",
        Action::Sequence(vec![Action::reply("530 Login incorrect.")]),
    ))?;
    let (mut ftp, _) = RawFtp::connect(server.addr())?;
    ftp.expect("USER alice", 331)?;
    ftp.expect("PASS right", 530)?; // scripted: the first PASS fails whatever it says
    ftp.expect("USER alice", 331)?;
    ftp.expect("PASS wrong", 530)?;
    ftp.expect("TYPE I", 530)?; // not logged in
    ftp.expect("USER alice", 331)?;
    ftp.expect("PASS right", 332)?;
    ftp.expect("ACCT acct-1", 230)?;
    ftp.expect("TYPE I", 200)?;
    server.login()?;
    ensure!(server
        .commands()
        .iter()
        .filter(|c| c.starts_with("PASS"))
        .all(|c| c == "PASS ****"));
    Ok(())
}

#[test]
fn refused_pasv_leaves_port_so_the_server_connects_out() -> Result<()> {
    let file = payload(40_000, 7);
    let server = HostileServer::start(
        Script::new()
            .file("f.bin", file.clone())
            .on("PASV", Action::reply("502 Command not implemented."))
            .on("EPSV", Action::reply("500 Unknown command.")),
    )?;
    let mut ftp = server.login()?;
    ftp.expect("PASV", 502)?;
    ftp.expect("EPSV", 500)?;
    let (listener, addr) = local_listener()?;
    ftp.expect(&format!("PORT {}", bftp_tests::rawftp::port_arg(addr)), 200)?;
    ensure!(ftp.cmd("RETR f.bin")?.class() == 1);
    let (mut data, from) = listener.accept()?;
    let mut got = Vec::new();
    data.read_to_end(&mut got)?;
    ensure!(ftp.reply()?.code == 226 && got == file);
    ensure!(from.ip() == IpAddr::V4(server.host()));
    ensure!(server.data_connections_to() == [SocketAddr::V4(addr)]);
    Ok(())
}

#[test]
fn foreign_port_and_foreign_data_connection_refused() -> Result<()> {
    let server = HostileServer::start(
        Script::new()
            .refuse_foreign_port("500 Illegal PORT command.")
            .refuse_foreign_data(),
    )?;
    let mut ftp = server.login()?;
    let third = TcpListener::bind((THIRD_HOST, 0))?;
    let SocketAddr::V4(foreign) = third.local_addr()? else {
        unreachable!("bound an IPv4 address")
    };
    ensure!(ftp.port(foreign)?.text == "500 Illegal PORT command.");
    ftp.expect(&format!("EPRT |1|{THIRD_HOST}|{}|", foreign.port()), 500)?;
    let (_listener, ours) = local_listener()?;
    ftp.expect(&format!("PORT {}", bftp_tests::rawftp::port_arg(ours)), 200)?;

    let port = ftp.pasv()?.port();
    let _data = connect_from(IpAddr::V4(THIRD_HOST), data_addr(&ftp, port)?, TIMEOUT)?;
    ensure!(ftp.cmd("STOR x")?.text == "425 Security: Bad IP connecting.");
    let from = server.data_connections_from();
    ensure!(
        from.len() == 1 && from[0].ip() == IpAddr::V4(THIRD_HOST),
        "{from:?}"
    );
    ensure!(server.stored("x").is_none());
    Ok(())
}

#[test]
fn abor_interrupts_a_transfer() -> Result<()> {
    // More than loopback socket buffers hold, so the transfer is still running at ABOR.
    let file = vec![7; 32 << 20];
    let (_server, mut ftp) = raw_session(Script::new().file("big", file.clone()))?;
    let port = ftp.pasv()?.port();
    let mut data = connect_data(&ftp, port)?;
    ensure!(ftp.cmd("RETR big")?.class() == 1);
    ftp.expect("ABOR", 426)?;
    ensure!(ftp.reply()?.code == 226);
    let mut got = Vec::new();
    data.read_to_end(&mut got)?;
    ensure!(got.len() < file.len(), "the whole file arrived");
    ftp.expect("NOOP", 200)?;
    Ok(())
}

#[test]
fn stalled_transfer_then_drop_ends_every_connection() -> Result<()> {
    let file = payload(100_000, 8);
    let (server, mut stalled) = raw_session(
        Script::new()
            .file("f.bin", file.clone())
            .on("RETR", Action::Sequence(vec![Action::StallMidTransfer])),
    )?;
    let port = stalled.pasv()?.port();
    let mut data = connect_data(&stalled, port)?;
    ensure!(stalled.cmd("RETR f.bin")?.class() == 1);
    let mut half = vec![0; file.len() / 2];
    data.read_exact(&mut half)?;
    ensure!(half == file[..half.len()]);
    data.set_read_timeout(Some(SHORT))?;
    let more = data.read(&mut [0; 1]);
    ensure!(
        more.as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::WouldBlock),
        "after half the file: {more:?}"
    );
    stalled.set_timeout(SHORT)?;
    ensure!(stalled.cmd("NOOP").is_err_and(|e| is_timeout(&e)));

    // Another session waits for a passive data connection that never comes.
    let mut waiting = server.login()?;
    waiting.pasv()?;
    waiting.send("RETR f.bin")?;
    server.wait_for(TIMEOUT, |o| {
        o.commands.iter().filter(|c| c.line == "RETR f.bin").count() == 2
    })?;

    let addr = server.addr();
    let started = Instant::now();
    drop(server);
    ensure!(
        started.elapsed() < Duration::from_secs(2),
        "drop took {:?}",
        started.elapsed()
    );
    data.set_read_timeout(Some(TIMEOUT))?;
    ensure!(matches!(data.read(&mut [0; 1]), Ok(0) | Err(_)));
    stalled.set_timeout(TIMEOUT)?;
    ensure!(stalled.reply().is_err_and(|e| !is_timeout(&e)));
    waiting.set_timeout(TIMEOUT)?;
    ensure!(waiting.reply().is_err_and(|e| !is_timeout(&e)));
    ensure!(TcpStream::connect_timeout(&addr, TIMEOUT).is_err());
    Ok(())
}

#[test]
fn transfer_then_serve_data_delay_and_no_mlsd() -> Result<()> {
    let file = payload(30_000, 9);
    let (_server, mut ftp, got, done) = retr_f(
        Script::new()
            .file("f.bin", file.clone())
            .on(
                "RETR",
                Action::TransferThen("451 Local error in processing.".into()),
            )
            .on("LIST", Action::ServeData(b"not a listing\n".to_vec()))
            .on("NOOP", Action::delayed(SHORT, Action::Default))
            .without_mlsd(),
    )?;
    ensure!(got == file && done.code == 451, "{done:?}");
    let (_, got, done) = pasv_get(&mut ftp, "LIST")?;
    ensure!(got == b"not a listing\n" && done.code == 226);
    ensure!(!ftp.expect("FEAT", 211)?.text.contains("MLST"));
    ftp.expect("MLSD", 500)?;
    let started = Instant::now();
    ftp.expect("NOOP", 200)?;
    ensure!(started.elapsed() >= SHORT);
    Ok(())
}

#[test]
fn misplaced_action_is_a_start_error() {
    let err = HostileServer::start(Script::new().on("NOOP", Action::PasvPort(21)))
        .err()
        .expect("PasvPort accepted for NOOP");
    assert!(format!("{err:#}").contains("PasvPort applies to PASV and EPSV, not NOOP"));
}

#[test]
fn simultaneous_sessions_each_transfer() -> Result<()> {
    let server = HostileServer::start(Script::new())?;
    let uploads: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("/up/{i}.bin"), payload(200_000, 10 + i as u8)))
        .collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = uploads
            .iter()
            .map(|(name, bytes)| {
                let server = &server;
                scope.spawn(move || -> Result<()> {
                    let mut ftp = server.login()?;
                    ftp.expect("TYPE I", 200)?;
                    let done = pasv_put(&mut ftp, &format!("STOR {name}"), bytes)?;
                    ensure!(done.code == 226, "{name}: {done:?}");
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow!("thread panicked"))?)
    })?;
    for (name, bytes) in &uploads {
        ensure!(server.stored(name).as_ref() == Some(bytes), "{name}");
    }
    ensure!(server.connections() == 4);
    for connection in 0..4 {
        let commands = server.commands_on(connection);
        ensure!(
            commands.first().map(String::as_str) == Some("USER anonymous"),
            "{commands:?}"
        );
    }
    Ok(())
}

/// FXP, RFC 1068 Figure 2 order, with the hostile server as the passive source. Its PASV
/// names a third host, so the PORT sent to vsftpd carries the hostile server's control
/// address with the announced port (RULES.md §6), and the copy still works.
#[test]
fn fxp_from_hostile_passive_source_to_vsftpd() -> Result<()> {
    let bytes = payload(300_000, 20);
    let src = HostileServer::start(
        Script::new()
            .user("src", "src-pw")
            .file("/out/from.bin", bytes.clone())
            .on(
                "PASV",
                Action::PasvForeignHost {
                    host: [10, 9, 8, 7],
                },
            ),
    )?;
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default())?;
    let mut s = src.login()?;
    let mut d = dst.login()?;
    s.expect("TYPE I", 200)?;
    d.expect("TYPE I", 200)?;
    let announced = s.pasv()?;
    let SocketAddr::V4(pasv) = data_addr(&s, announced.port())? else {
        unreachable!("IPv4 control connection")
    };
    ensure!(d.port(pasv)?.code == 200);
    ensure!(d.cmd("STOR to.bin")?.class() == 1);
    ensure!(s.cmd("RETR /out/from.bin")?.class() == 1);
    ensure!(s.reply()?.code == 226);
    ensure!(d.reply()?.code == 226);
    d.expect("NOOP", 200)?;
    ensure!(dst.read_file("/to.bin")? == bytes, "copied bytes differ");
    let from = src.data_connections_from();
    ensure!(
        from.len() == 1 && from[0].ip() == IpAddr::V4(dst.host()),
        "data came from {from:?}"
    );
    Ok(())
}

/// FXP with the roles swapped: vsftpd passive source, the hostile server the active
/// destination that connects to vsftpd's passive port.
#[test]
fn fxp_from_vsftpd_to_hostile_active_destination() -> Result<()> {
    let bytes = payload(300_000, 21);
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default())?;
    src.put_file("/out/from.bin", &bytes)?;
    let dst = HostileServer::start(Script::new().dir("/in"))?;
    let mut s = src.login()?;
    let mut d = dst.login()?;
    s.expect("TYPE I", 200)?;
    d.expect("TYPE I", 200)?;
    let pasv = s.pasv()?;
    ensure!(d.port(pasv)?.code == 200);
    ensure!(d.cmd("STOR /in/to.bin")?.class() == 1);
    ensure!(s.cmd("RETR /out/from.bin")?.class() == 1);
    ensure!(s.reply()?.code == 226);
    ensure!(d.reply()?.code == 226);
    ensure!(
        dst.stored("/in/to.bin") == Some(bytes),
        "copied bytes differ"
    );
    ensure!(dst.data_connections_to() == [SocketAddr::V4(pasv)]);
    Ok(())
}
