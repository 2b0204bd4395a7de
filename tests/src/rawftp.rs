//! A minimal FTP control-connection client for tests: send a line, read a whole reply.
//!
//! Its reply reader also fits SMTP (same `ddd-`/`ddd ` continuation rule).
//!
//! Deliberately dumb: no state machine, no retries, so a test sees exactly what a server said.
//! Every read and write has a timeout, so a server that never answers fails the test instead
//! of hanging it.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use socket2::{Domain, Protocol, Socket, Type};

/// Default for connect, read and write timeouts.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest reply line accepted, and most lines in one reply.
const MAX_LINE: usize = 8192;
const MAX_LINES: usize = 1000;

/// One complete reply: its code and every line as sent (CRLF stripped, joined with `\n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    pub text: String,
}

impl Reply {
    /// First digit of the code: 1 preliminary, 2 completion, 3 intermediate, 4/5 negative.
    pub fn class(&self) -> u16 {
        self.code / 100
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

pub struct RawFtp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RawFtp {
    /// Connects and reads the greeting (whatever its code).
    pub fn connect(addr: SocketAddr) -> Result<(RawFtp, Reply)> {
        Self::connect_timeout(addr, DEFAULT_TIMEOUT)
    }

    pub fn connect_timeout(addr: SocketAddr, timeout: Duration) -> Result<(RawFtp, Reply)> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .with_context(|| format!("connecting to FTP server {addr}"))?;
        let writer = stream.try_clone()?;
        let mut ftp = RawFtp {
            reader: BufReader::new(stream),
            writer,
        };
        ftp.set_timeout(timeout)?;
        let greeting = ftp.reply().context("reading the greeting")?;
        Ok((ftp, greeting))
    }

    /// Read and write timeout for the control connection.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.writer.set_read_timeout(Some(timeout))?;
        self.writer.set_write_timeout(Some(timeout))?;
        Ok(())
    }

    /// Our end of the control connection.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.writer.local_addr()?)
    }

    /// The server's end of the control connection.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        Ok(self.writer.peer_addr()?)
    }

    /// Sends one command line; CRLF is appended.
    pub fn send(&mut self, line: &str) -> Result<()> {
        ensure!(
            !line.contains(['\r', '\n']),
            "command line contains CR or LF: {line:?}"
        );
        self.writer
            .write_all(format!("{line}\r\n").as_bytes())
            .with_context(|| format!("sending {}", mask(line)))
    }

    /// Reads one complete (possibly multi-line, RFC 959 §4.2) reply.
    pub fn reply(&mut self) -> Result<Reply> {
        let first = self.line()?;
        let code =
            reply_code(&first).with_context(|| format!("reply line without a code: {first:?}"))?;
        let mut text = first.clone();
        if first.as_bytes().get(3) == Some(&b'-') {
            let end = format!("{code} ");
            let mut lines = 1;
            loop {
                let line = self.line()?;
                lines += 1;
                ensure!(
                    lines <= MAX_LINES,
                    "reply {code} longer than {MAX_LINES} lines"
                );
                text.push('\n');
                text.push_str(&line);
                if line.starts_with(&end) || line == code.to_string() {
                    break;
                }
            }
        }
        Ok(Reply { code, text })
    }

    /// Sends a command and reads its reply.
    pub fn cmd(&mut self, line: &str) -> Result<Reply> {
        self.send(line)?;
        self.reply()
            .with_context(|| format!("reading the reply to {}", mask(line)))
    }

    /// Sends a command and fails unless the reply has the given code.
    pub fn expect(&mut self, line: &str, code: u16) -> Result<Reply> {
        let reply = self.cmd(line)?;
        ensure!(
            reply.code == code,
            "{} answered {reply:?}, expected {code}",
            mask(line)
        );
        Ok(reply)
    }

    /// USER and PASS; fails unless the server ends with 230.
    pub fn login(&mut self, user: &str, password: &str) -> Result<Reply> {
        let reply = self.cmd(&format!("USER {user}"))?;
        let reply = match reply.code {
            230 => reply,
            331 => self.cmd(&format!("PASS {password}"))?,
            _ => bail!("USER {user} answered {reply:?}"),
        };
        ensure!(reply.code == 230, "login as {user} refused: {reply:?}");
        Ok(reply)
    }

    /// PASV; returns the address from the 227 reply.
    pub fn pasv(&mut self) -> Result<SocketAddrV4> {
        let reply = self.expect("PASV", 227)?;
        parse_pasv(&reply.text).with_context(|| format!("unparsable PASV reply {reply:?}"))
    }

    /// PORT with the given address; returns the reply, whatever it is.
    pub fn port(&mut self, addr: SocketAddrV4) -> Result<Reply> {
        self.cmd(&format!("PORT {}", port_arg(addr)))
    }

    fn line(&mut self) -> Result<String> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE as u64 + 2)
            .read_until(b'\n', &mut buf)
            .context("reading a reply line")?;
        ensure!(n > 0, "connection closed by the server");
        ensure!(buf.ends_with(b"\n"), "reply line unterminated or too long");
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

fn reply_code(line: &str) -> Option<u16> {
    let digits = line.get(..3)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match line.as_bytes().get(3) {
        None | Some(b' ' | b'-') => digits.parse().ok().filter(|c| (100..600).contains(c)),
        _ => None,
    }
}

/// A TCP connection from a chosen local address: e.g. from 127.0.0.3, to stand for a third
/// host opening a data connection.
pub fn connect_from(local: IpAddr, remote: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(remote),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket
        .bind(&SocketAddr::new(local, 0).into())
        .with_context(|| format!("binding {local}:0"))?;
    socket
        .connect_timeout(&remote.into(), timeout)
        .with_context(|| format!("connecting from {local} to {remote}"))?;
    Ok(socket.into())
}

/// The `h1,h2,h3,h4,p1,p2` argument of PORT (and of a 227 reply).
pub fn port_arg(addr: SocketAddrV4) -> String {
    let [a, b, c, d] = addr.ip().octets();
    let port = addr.port();
    format!("{a},{b},{c},{d},{},{}", port >> 8, port & 0xff)
}

/// The address in a 227 reply: the first run of six comma-separated bytes after the code.
pub fn parse_pasv(text: &str) -> Option<SocketAddrV4> {
    text.get(4..)?
        .split(|c: char| !(c.is_ascii_digit() || c == ','))
        .find_map(|run| {
            let nums: Vec<u8> = run
                .split(',')
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            let [a, b, c, d, p1, p2]: [u8; 6] = nums.try_into().ok()?;
            Some(SocketAddrV4::new(
                Ipv4Addr::new(a, b, c, d),
                u16::from(p1) << 8 | u16::from(p2),
            ))
        })
}

fn mask(line: &str) -> &str {
    if line
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("PASS "))
    {
        "PASS ****"
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pasv_replies() {
        assert_eq!(
            parse_pasv("227 Entering Passive Mode (127,0,0,2,78,41)."),
            Some("127.0.0.2:20009".parse().unwrap())
        );
        assert_eq!(
            parse_pasv("227 Entering Passive Mode (127,0,0,2,78,240)"),
            Some("127.0.0.2:20208".parse().unwrap())
        );
        assert_eq!(
            parse_pasv("227 =127,0,0,1,1,2"),
            Some("127.0.0.1:258".parse().unwrap())
        );
        assert_eq!(
            parse_pasv("227 Entering Passive Mode (127,0,0,300,1,2)"),
            None
        );
    }

    #[test]
    fn reply_codes() {
        assert_eq!(reply_code("220 hi"), Some(220));
        assert_eq!(reply_code("220-hi"), Some(220));
        assert_eq!(reply_code("220"), Some(220));
        assert_eq!(reply_code("22x hi"), None);
        assert_eq!(reply_code("2200 hi"), None);
        assert_eq!(reply_code("099 hi"), None);
    }

    #[test]
    fn port_arg_round_trips() {
        let addr: SocketAddrV4 = "127.0.0.3:20208".parse().unwrap();
        assert_eq!(port_arg(addr), "127,0,0,3,78,240");
        assert_eq!(
            parse_pasv(&format!("227 ok ({})", port_arg(addr))),
            Some(addr)
        );
    }
}
