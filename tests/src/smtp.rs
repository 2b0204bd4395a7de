//! A real SMTP server that stores what it receives: aiosmtpd (the Debian package, run by
//! /usr/bin/python3) with a small handler that writes each message to a spool directory.
//!
//! The sink can be stopped and started again on the same port (a relay that goes away), and
//! told to answer DATA with a chosen reply instead of storing (a relay that defers or refuses),
//! or to store a message and then hold back its 250 (a relay slow to confirm, so that the
//! client can be killed between "stored" and "confirmed").

use std::fs::{self, OpenOptions};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// Debian's interpreter, which has python3-aiosmtpd; not whatever `python3` is first on PATH.
const PYTHON: &str = "/usr/bin/python3";

/// How often `wait_for` looks at the spool.
const SPOOL_POLL: Duration = Duration::from_millis(20);

/// The handler. Writes `NNNNNN.env` (envelope) then `NNNNNN.eml` (the message as received),
/// each through a rename, so a message is complete once its .eml exists. If the file `reply`
/// exists and is not empty, DATA is answered with its content and nothing is stored. If the
/// file `hold` exists, the 250 for a stored message waits while it does.
const SINK_PY: &str = r#"
import asyncio, os, sys
from aiosmtpd.smtp import SMTP

host, port, spool, reply_file, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
hold_file = os.path.join(os.path.dirname(reply_file), "hold")

def write(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)

class Sink:
    async def handle_DATA(self, server, session, envelope):
        try:
            with open(reply_file) as f:
                reply = f.read().strip()
            if reply:
                return reply
        except FileNotFoundError:
            pass
        n = sum(1 for name in os.listdir(spool) if name.endswith(".eml")) + 1
        base = os.path.join(spool, "%06d" % n)
        env = "MAIL FROM:<%s>\n" % envelope.mail_from
        env += "".join("RCPT TO:<%s>\n" % r for r in envelope.rcpt_tos)
        write(base + ".env", env.encode())
        write(base + ".eml", envelope.original_content)
        while os.path.exists(hold_file):
            await asyncio.sleep(0.05)
        return "250 2.0.0 stored as %06d" % n

async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(Sink(), hostname="bftp-smtp-sink", ident=token), host, port)
    await server.serve_forever()

asyncio.run(main())
"#;

/// One stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mail {
    /// The MAIL FROM address, without angle brackets.
    pub mail_from: String,
    /// The RCPT TO addresses, in order.
    pub rcpt_to: Vec<String>,
    /// The message as received (RFC 5322 text, dot-unstuffed).
    pub data: String,
}

pub struct SmtpSink {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl SmtpSink {
    /// Starts the sink on a free port of 127.0.0.1; returns once it greets with 220.
    pub fn start() -> Result<SmtpSink> {
        ensure!(
            std::path::Path::new(PYTHON).exists(),
            "{PYTHON} missing: run tests/install-deps"
        );
        let dir = tempfile::Builder::new().prefix("bftp-smtp-").tempdir()?;
        fs::create_dir(dir.path().join("spool"))?;
        fs::write(dir.path().join("sink.py"), SINK_PY)?;
        let mut sink = SmtpSink {
            port: 0,
            dir,
            child: None,
        };
        let mut errors = Vec::new();
        for _ in 0..5 {
            sink.port = crate::reserve_free_port(IpAddr::V4(Ipv4Addr::LOCALHOST))?;
            match sink.spawn_and_wait() {
                Ok(()) => return Ok(sink),
                Err(e) => {
                    sink.stop();
                    crate::release_ports([sink.port]);
                    errors.push(format!("{e:#}"));
                }
            }
        }
        sink.port = 0;
        bail!("SMTP sink did not start: {}", errors.join("; "))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port)
    }

    /// The stored messages, oldest first.
    pub fn messages(&self) -> Vec<String> {
        self.received().into_iter().map(|m| m.data).collect()
    }

    /// The stored messages with their envelopes, oldest first.
    pub fn received(&self) -> Vec<Mail> {
        let spool = self.spool();
        let mut names: Vec<PathBuf> = fs::read_dir(&spool)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "eml"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
            .into_iter()
            .filter_map(|eml| {
                let data = fs::read(&eml).ok()?;
                let env = fs::read_to_string(eml.with_extension("env")).ok()?;
                let mut mail = Mail {
                    mail_from: String::new(),
                    rcpt_to: Vec::new(),
                    data: String::from_utf8_lossy(&data).into_owned(),
                };
                for line in env.lines() {
                    if let Some(a) = line.strip_prefix("MAIL FROM:") {
                        mail.mail_from = strip_angles(a);
                    } else if let Some(a) = line.strip_prefix("RCPT TO:") {
                        mail.rcpt_to.push(strip_angles(a));
                    }
                }
                Some(mail)
            })
            .collect()
    }

    /// How many messages are stored (the spool's names only: cheap for a benchmark's polls).
    pub fn count(&self) -> usize {
        fs::read_dir(self.spool())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Each stored message with the time it was stored (its file's modify time: the handler
    /// renames it into place once received), oldest first.
    pub fn arrivals(&self) -> Vec<(std::time::SystemTime, String)> {
        let mut out: Vec<(std::time::SystemTime, String)> = fs::read_dir(self.spool())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "eml"))
                    .filter_map(|p| {
                        let at = fs::metadata(&p).and_then(|m| m.modified()).ok()?;
                        let data = fs::read(&p).ok()?;
                        Some((at, String::from_utf8_lossy(&data).into_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by_key(|(at, _)| *at);
        out
    }

    /// Waits until at least `n` messages are stored; returns them all.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let messages = self.messages();
            if messages.len() >= n {
                return Ok(messages);
            }
            if Instant::now() >= deadline {
                bail!(
                    "SMTP sink got {} message(s) within {timeout:?}, expected {n}",
                    messages.len()
                );
            }
            std::thread::sleep(SPOOL_POLL);
        }
    }

    /// Answer every DATA with `reply` (e.g. `"451 4.3.0 try again later"`) instead of storing
    /// the message; `None` goes back to storing. Takes effect for the next message.
    pub fn set_reply(&self, reply: Option<&str>) -> Result<()> {
        let path = self.dir.path().join("reply");
        match reply {
            Some(r) => {
                ensure!(
                    r.len() > 4 && r.is_char_boundary(3) && r[..3].parse::<u16>().is_ok(),
                    "not an SMTP reply: {r:?}"
                );
                fs::write(path, r)?;
            }
            None => {
                if path.exists() {
                    fs::remove_file(path)?;
                }
            }
        }
        Ok(())
    }

    /// While held, a stored message's 250 is not sent (the client waits, or times out).
    pub fn hold(&self, on: bool) -> Result<()> {
        let path = self.dir.path().join("hold");
        if on {
            fs::write(path, b"")?;
        } else if path.exists() {
            fs::remove_file(path)?;
        }
        Ok(())
    }

    /// Kills the sink (SIGKILL): connections are refused until [`SmtpSink::start_again`].
    /// Stored messages stay.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::kill_tree(&mut child);
        }
    }

    /// Starts the sink again on the same port, keeping the stored messages.
    pub fn start_again(&mut self) -> Result<()> {
        self.stop();
        self.spawn_and_wait()
            .with_context(|| format!("restarting the SMTP sink on port {}", self.port))
    }

    pub fn is_running(&self) -> bool {
        self.child.as_ref().is_some_and(|c| !crate::has_exited(c))
    }

    fn spool(&self) -> PathBuf {
        self.dir.path().join("spool")
    }

    fn spawn_and_wait(&mut self) -> Result<()> {
        let token = crate::unique_token("smtp");
        let output_path = self.dir.path().join("output.log");
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&output_path)?;
        let mut cmd = Command::new(PYTHON);
        // -I: ignore PYTHON* variables and the user site (pyenv and friends).
        cmd.arg("-I")
            .arg(self.dir.path().join("sink.py"))
            .arg(Ipv4Addr::LOCALHOST.to_string())
            .arg(self.port.to_string())
            .arg(self.spool())
            .arg(self.dir.path().join("reply"))
            .arg(&token)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output);
        let addr = self.addr();
        let child = self
            .child
            .insert(cmd.spawn().context("spawning the SMTP sink")?);
        crate::wait_for_greeting(child, addr, &token).with_context(|| {
            format!(
                "SMTP sink on {addr}: {}",
                fs::read_to_string(&output_path).unwrap_or_default()
            )
        })
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop();
        if self.port != 0 {
            crate::release_ports([self.port]);
        }
    }
}

fn strip_angles(addr: &str) -> String {
    let addr = addr.trim();
    addr.strip_prefix('<')
        .and_then(|a| a.strip_suffix('>'))
        .unwrap_or(addr)
        .to_string()
}
