//! One FTP control connection, read and written by us from the first byte.
//!
//! Every reply, the greeting and the replies to USER, PASS and ACCT included, is read
//! with our [`ReplyParser`] under our [`Limits::reply`]. An FTP library (suppaftp) used
//! to read the greeting and carry the login; it was dropped because it read replies in
//! ways the transfer cannot accept:
//! - it ended a multi-line reply at any line of three digits and a space, even of another
//!   code (`220-Hello`, `230 not really`, `220 ready`), where RFC 959 §4.2 says the reply
//!   goes on to the line with the first line's code and a space; the rest of the reply
//!   was then read as the next reply, or rejected as one "without a numeric code";
//! - it dropped the text of a code-less reply (RFC 1068's NLST errors), which the report
//!   must show;
//! - its size bound (256 KiB) was not ours.
//!
//! The login is a short exchange (RFC 959 §5.4): the greeting (220), USER, PASS on 331,
//! ACCT on 332, each reply classified by `bftp_core::reply`.
//!
//! Every reply is scrubbed of the job's secrets (the recorder's scrubber: every password
//! and ACCT string of the pair, in every encoding) as soon as it is parsed, before anything
//! records, returns or shows it. Every command and reply goes to the pair's transcript, PASS
//! and ACCT masked.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bftp_core::reply::{
    classify_for_host, CommandKind, Disposition, Needs, Outcome, TransientKind, TransportFailure,
};
use std::sync::Arc;

use bftp_core::tls::{auth_decision, AuthDecision, TlsPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::tls::{HandshakeError, Stream, Trust};

use crate::limits::{AddressCheck, Limits, ServerLogin};
use crate::parse::{check_argument, Reply, ReplyError, ReplyParser};
use crate::transcript::{Recorder, Side};

/// Why a session could not send a command or read its reply. After any of these the
/// session is closed: the next command would be read against a stale reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("{host}: the name did not resolve: {detail}")]
    Dns { host: String, detail: String },
    #[error("{host}: connecting to {addr} failed: {detail}")]
    Connect {
        host: String,
        addr: SocketAddr,
        failure: TransportFailure,
        detail: String,
    },
    #[error("{host}: the connection failed: {detail}")]
    Io {
        host: String,
        failure: TransportFailure,
        detail: String,
    },
    #[error("{host}: no reply within {waited:?}")]
    Timeout { host: String, waited: Duration },
    #[error("{host}: unreadable reply: {error}")]
    Malformed { host: String, error: ReplyError },
    #[error("{host}: the control connection is closed")]
    Closed { host: String },
    #[error("refusing to send {what:?}: it contains CR, LF or NUL")]
    BadArgument { what: String },
    /// The session's [`SendGate`] refused a command: it was not sent, and the connection
    /// is closed.
    #[error("{host}: {verb} not sent: {why}")]
    Fenced {
        host: String,
        verb: String,
        why: String,
    },
}

impl SessionError {
    /// What this means for classification (RULES.md §5): transport failures and
    /// unreadable replies are transient.
    pub fn outcome(&self) -> Outcome {
        match self {
            SessionError::Dns { .. } => Outcome::Transport(TransportFailure::Dns),
            SessionError::Connect { failure, .. } | SessionError::Io { failure, .. } => {
                Outcome::Transport(*failure)
            }
            SessionError::Timeout { .. } => Outcome::Transport(TransportFailure::Timeout),
            SessionError::Malformed { .. } => Outcome::Malformed,
            SessionError::Closed { .. }
            | SessionError::BadArgument { .. }
            | SessionError::Fenced { .. } => Outcome::Transport(TransportFailure::Eof),
        }
    }
}

/// Asked before each command a session sends, ABOR and QUIT excepted (they stop a transfer
/// or the session and change no file): `Err(why)` and the command is not sent, and the
/// session closes, so nothing more goes out on it. bftpd's gate is its lease on the job
/// (RULES.md §4.8): past the lease's deadline by its own clock, a node sends nothing for
/// the job.
pub trait SendGate: Send + Sync + std::fmt::Debug {
    fn admit(&self) -> Result<(), String>;
}

/// Whether a command is sent whatever the gate says: it stops something and changes no file.
fn ungated(line: &str) -> bool {
    let verb = crate::engine::verb(line);
    verb == "ABOR" || verb == "QUIT"
}

/// Why connecting and logging in gave no session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("{host}: the address check refused {addrs:?}: {reason}")]
    AddressRefused {
        host: String,
        addrs: Vec<IpAddr>,
        reason: String,
    },
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The server answered the greeting, USER, PASS or ACCT with something other than
    /// what continues the login.
    #[error("{host}: {command} answered {reply}")]
    Refused {
        host: String,
        /// `greeting`, `USER`, `PASS` or `ACCT`.
        command: &'static str,
        reply: Reply,
        disposition: Disposition,
    },
    #[error("{host}: {command} asked for {what}, and the job has none")]
    MissingCredential {
        host: String,
        command: &'static str,
        what: &'static str,
        reply: Reply,
    },
    /// TLS is required and the server did not accept AUTH TLS: nothing else was sent.
    #[error("{host}: TLS is required and the server does not offer it: AUTH TLS answered {reply}; no USER or PASS was sent")]
    TlsNotOffered { host: String, reply: Reply },
    /// The server's certificate was refused: nothing else was sent.
    #[error("{host}: TLS certificate refused: {reason} (checked against {trust}); no USER or PASS was sent")]
    Certificate {
        host: String,
        reason: String,
        trust: String,
    },
    /// The TLS handshake failed for another reason. After AUTH TLS was accepted the
    /// connection is never used in clear.
    #[error("{host}: {detail}; not retried in clear, no USER or PASS was sent")]
    Handshake { host: String, detail: String },
    /// The daemon's TLS settings for this host cannot be used (no system roots).
    #[error("{host}: TLS settings: {detail}")]
    TlsSetup { host: String, detail: String },
}

impl ConnectError {
    /// The retry decision for this failure (RULES.md §5).
    pub fn disposition(&self, host: &str, limits: &Limits) -> Disposition {
        match self {
            ConnectError::AddressRefused { .. }
            | ConnectError::MissingCredential { .. }
            | ConnectError::TlsNotOffered { .. }
            | ConnectError::Certificate { .. }
            | ConnectError::TlsSetup { .. } => {
                Disposition::Permanent(bftp_core::reply::PermanentKind::Login)
            }
            ConnectError::Handshake { .. } => {
                Disposition::Transient(TransientKind::Transport(TransportFailure::Reset))
            }
            ConnectError::Session(e) => {
                classify_for_host(host, &limits.overrides, CommandKind::Other, e.outcome())
            }
            ConnectError::Refused { disposition, .. } => *disposition,
        }
    }
}

/// A logged-in control connection.
#[derive(Debug)]
pub struct Session {
    side: Side,
    host: String,
    peer: SocketAddr,
    conn: Option<Stream>,
    parser: ReplyParser,
    reply_timeout: Duration,
    recorder: Recorder,
    /// The TLS in force on this control connection, if any.
    tls: Option<SessionTls>,
    /// Why this connection is in clear although TLS was asked for (`preferred` and not
    /// offered), for the report.
    tls_note: Option<String>,
    /// PROT P in force (data connections with this server are TLS).
    prot_private: bool,
    /// SSCN ON in force (this server is the TLS client of its data connections).
    sscn_on: bool,
    /// The server refused SSCN once: not asked again on this connection.
    sscn_refused: bool,
    /// STOU was sent on this connection. It can change how the server treats later uploads
    /// of the same session: Pure-FTPd 1.0.50 turns on its no-truncate mode for the rest of
    /// the session, and its APPE then writes a new file over the old one (the prefix lost).
    /// Such a connection is not kept for another job ([`crate::engine::Pair::clean`]).
    sent_unique: bool,
    /// Asked before each command is sent ([`SendGate`]); none: every command goes.
    gate: Option<Arc<dyn SendGate>>,
}

/// The TLS of a control connection: its version, and what a data connection needs to
/// speak TLS to the same server (the same configuration, so the TLS session resumes).
#[derive(Debug, Clone)]
pub struct SessionTls {
    /// `TLS 1.3`, `TLS 1.2`.
    pub version: String,
    /// How the certificate was checked (`INSECURE` named when it was not).
    pub trust: Trust,
    pub(crate) config: Arc<rustls::ClientConfig>,
}

impl Session {
    /// Resolve `login.host`, apply `check` to the addresses, connect (each address in
    /// turn, `connect_timeout` each), read the greeting and log in: USER, then PASS on
    /// 331, then ACCT on 332 (RFC 959 §5.4).
    // Long on purpose: the login exchange in its order (connect, greeting, USER, PASS, ACCT),
    // each reply classified where it is read.
    pub(crate) async fn connect(
        side: Side,
        login: &ServerLogin,
        limits: &Limits,
        check: &dyn AddressCheck,
        recorder: Recorder,
    ) -> Result<Session, ConnectError> {
        Session::connect_gated(side, login, limits, check, recorder, None).await
    }

    /// [`Session::connect`] with every command from the first (AUTH TLS, USER...) asked of
    /// `gate` ([`SendGate`]); a gate that refuses before the connection is made makes none.
    pub(crate) async fn connect_gated(
        side: Side,
        login: &ServerLogin,
        limits: &Limits,
        check: &dyn AddressCheck,
        recorder: Recorder,
        gate: Option<Arc<dyn SendGate>>,
    ) -> Result<Session, ConnectError> {
        let host = login.host.clone();
        if let Some(Err(why)) = gate.as_ref().map(|g| g.admit()) {
            let error = SessionError::Fenced {
                host,
                verb: "connection".into(),
                why,
            };
            recorder.note(side, &error.to_string());
            return Err(error.into());
        }
        let lookup = tokio::time::timeout(
            limits.connect_timeout,
            tokio::net::lookup_host((login.host.as_str(), login.port)),
        )
        .await;
        let addrs: Vec<SocketAddr> = match lookup {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => {
                return Err(SessionError::Dns {
                    host,
                    detail: e.to_string(),
                }
                .into())
            }
            Err(_) => {
                return Err(SessionError::Dns {
                    host,
                    detail: format!("no answer within {:?}", limits.connect_timeout),
                }
                .into())
            }
        };
        let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
        if ips.is_empty() {
            return Err(SessionError::Dns {
                host,
                detail: "no address".into(),
            }
            .into());
        }
        if let Err(reason) = check.check(&host, &ips) {
            recorder.note(side, &format!("address check refused {host}: {reason}"));
            return Err(ConnectError::AddressRefused {
                host,
                addrs: ips,
                reason,
            });
        }

        let mut last_error = None;
        let mut stream = None;
        for addr in addrs {
            recorder.note(side, &format!("connecting to {addr}"));
            match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    stream = Some((s, addr));
                    break;
                }
                Ok(Err(e)) => {
                    let error = SessionError::Connect {
                        host: host.clone(),
                        addr,
                        failure: io_failure(&e),
                        detail: e.to_string(),
                    };
                    recorder.received(side, &error.to_string());
                    last_error = Some(error);
                }
                Err(_) => {
                    let error = SessionError::Connect {
                        host: host.clone(),
                        addr,
                        failure: TransportFailure::Timeout,
                        detail: format!("no connection within {:?}", limits.connect_timeout),
                    };
                    recorder.received(side, &error.to_string());
                    last_error = Some(error);
                }
            }
        }
        let Some((stream, peer)) = stream else {
            return Err(last_error
                .unwrap_or(SessionError::Dns {
                    host,
                    detail: "no address".into(),
                })
                .into());
        };
        let _ = stream.set_nodelay(true);

        let mut session = Session {
            side,
            host,
            peer,
            conn: Some(Stream::Plain(stream)),
            parser: ReplyParser::new(limits.reply),
            reply_timeout: limits.reply_timeout,
            recorder,
            tls: None,
            tls_note: None,
            prot_private: false,
            sscn_on: false,
            sent_unique: false,
            sscn_refused: false,
            gate,
        };
        let login_state = LoginState {
            host: session.host.clone(),
            limits,
        };
        if login.tls.implicit {
            session.start_tls(limits).await?;
        }
        login_state.greeting(&mut session).await?;
        if !login.tls.implicit && login.tls.control_policy() != TlsPolicy::Off {
            session.auth_tls(login.tls.control_policy(), limits).await?;
        }
        login_state.login(&mut session, login).await?;
        if session.tls.is_some() {
            session.protect(login.tls.data).await?;
        }
        Ok(session)
    }

    /// AUTH TLS after the greeting: on 234 the handshake (a failure ends the connection:
    /// once a server offered TLS, this connection never goes on in clear); otherwise, under
    /// `required`, a refusal before any USER; under `preferred`, clear, noted for the report.
    async fn auth_tls(&mut self, policy: TlsPolicy, limits: &Limits) -> Result<(), ConnectError> {
        let reply = self.command("AUTH TLS").await?;
        match auth_decision(policy, reply.code().get()) {
            AuthDecision::Handshake => self.start_tls(limits).await,
            AuthDecision::Refuse => {
                self.close("TLS required and not offered");
                Err(ConnectError::TlsNotOffered {
                    host: self.host.clone(),
                    reply,
                })
            }
            AuthDecision::Clear => {
                let note = format!(
                    "{}: no TLS (AUTH TLS answered {}): logged in in clear under policy preferred",
                    self.host,
                    reply.code()
                );
                self.recorder.note(self.side, &note);
                self.tls_note = Some(note);
                Ok(())
            }
        }
    }

    /// The TLS handshake on the control connection, now.
    async fn start_tls(&mut self, limits: &Limits) -> Result<(), ConnectError> {
        let (config, trust) = limits.tls.for_host(&self.host).map_err(|e| {
            self.close("no TLS settings");
            ConnectError::TlsSetup {
                host: self.host.clone(),
                detail: e.to_string(),
            }
        })?;
        let Some(Stream::Plain(tcp)) = self.conn.take() else {
            return Err(self.closed().into());
        };
        let timeout = limits.connect_timeout.max(self.reply_timeout);
        match crate::tls::handshake(config.clone(), &trust, &self.host, tcp, timeout).await {
            Ok(stream) => {
                let version = crate::tls::version_name(&stream);
                self.recorder
                    .note(self.side, &format!("TLS: {version}, certificate: {trust}"));
                self.conn = Some(Stream::Tls(Box::new(stream)));
                self.tls = Some(SessionTls {
                    version,
                    trust,
                    config,
                });
                Ok(())
            }
            Err(HandshakeError::Certificate { reason }) => {
                self.recorder
                    .note(self.side, &format!("TLS certificate refused: {reason}"));
                Err(ConnectError::Certificate {
                    host: self.host.clone(),
                    reason,
                    trust: trust.to_string(),
                })
            }
            Err(HandshakeError::Failed { detail }) => {
                self.recorder.note(self.side, &detail);
                Err(ConnectError::Handshake {
                    host: self.host.clone(),
                    detail,
                })
            }
        }
    }

    /// PBSZ 0 and PROT P (when the data policy asks for it) or PROT C, once logged in over TLS. A
    /// refused PROT P leaves the data path in clear; whether that is allowed is decided per
    /// copy and per listing, by the data policy.
    async fn protect(&mut self, data: TlsPolicy) -> Result<(), ConnectError> {
        let pbsz = self.command("PBSZ 0").await?;
        if pbsz.code().get() / 100 != 2 {
            return Ok(());
        }
        if data == TlsPolicy::Off {
            // Said explicitly: a server in implicit mode may start with PROT P (proFTPD).
            let reply = self.command("PROT C").await?;
            self.prot_private = reply.code().get() / 100 != 2;
            return Ok(());
        }
        self.set_prot(true).await?;
        Ok(())
    }

    /// The TLS of this control connection, if any.
    pub fn tls(&self) -> Option<&SessionTls> {
        self.tls.as_ref()
    }

    /// Why this connection is in clear although its policy asked for TLS.
    pub fn tls_note(&self) -> Option<&str> {
        self.tls_note.as_deref()
    }

    /// Whether PROT P is in force.
    pub fn prot_private(&self) -> bool {
        self.prot_private
    }

    /// PROT P (`true`) or PROT C, sent only when it changes. `Ok(false)` when the server
    /// refused it (the state stays as it was).
    pub async fn set_prot(&mut self, private: bool) -> Result<bool, SessionError> {
        if private == self.prot_private {
            return Ok(true);
        }
        if private && self.tls.is_none() {
            return Ok(false);
        }
        let reply = self
            .command(if private { "PROT P" } else { "PROT C" })
            .await?;
        if reply.code().get() / 100 == 2 {
            self.prot_private = private;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// SSCN ON (`true`: this server is the TLS client of its next data connections) or
    /// SSCN OFF, sent only when it changes. `Ok(false)` when the server refused it.
    pub async fn set_sscn(&mut self, on: bool) -> Result<bool, SessionError> {
        if on == self.sscn_on {
            return Ok(true);
        }
        if on && !self.sscn_possible() {
            return Ok(false);
        }
        let reply = self
            .command(if on { "SSCN ON" } else { "SSCN OFF" })
            .await?;
        if reply.code().get() / 100 == 2 {
            self.sscn_on = on;
            Ok(true)
        } else {
            self.sscn_refused = true;
            Ok(false)
        }
    }

    /// Whether STOU was sent on this connection (see the field's note).
    pub fn sent_unique(&self) -> bool {
        self.sent_unique
    }

    /// Whether SSCN ON is in force on this connection.
    pub fn sscn_on(&self) -> bool {
        self.sscn_on
    }

    /// Whether SSCN ON may work: a TLS connection whose server has not refused it.
    pub fn sscn_possible(&self) -> bool {
        self.tls.is_some() && !self.sscn_refused
    }

    /// A data connection bftpd opened to this server, made TLS when PROT P is in force
    /// (the control connection's configuration, so the server sees its TLS session resumed).
    pub(crate) async fn data_stream(
        &self,
        tcp: TcpStream,
        timeout: Duration,
    ) -> Result<Stream, String> {
        match (&self.tls, self.prot_private) {
            (Some(tls), true) => {
                crate::tls::handshake(tls.config.clone(), &tls.trust, &self.host, tcp, timeout)
                    .await
                    .map(|s| Stream::Tls(Box::new(s)))
                    .map_err(|e| match e {
                        HandshakeError::Certificate { reason } => {
                            format!("data connection TLS certificate refused: {reason}")
                        }
                        HandshakeError::Failed { detail } => format!("data connection: {detail}"),
                    })
            }
            _ => Ok(Stream::Plain(tcp)),
        }
    }

    pub fn side(&self) -> Side {
        self.side
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// The server's end of the control connection: the only address a PORT/EPRT to
    /// the other server may name for this one (RFC 2577).
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    /// From now on each command (ABOR and QUIT excepted) is sent only if `gate` admits it.
    pub fn set_gate(&mut self, gate: Option<Arc<dyn SendGate>>) {
        self.gate = gate;
    }

    /// The gate's word on `lines`, asked right before they are written: a refusal closes the
    /// session (nothing more goes out on it) and is noted in the transcript.
    fn admit(&mut self, lines: &[&str]) -> Result<(), SessionError> {
        let Some(gate) = &self.gate else {
            return Ok(());
        };
        let Some(first) = lines.iter().find(|l| !ungated(l)) else {
            return Ok(());
        };
        let Err(why) = gate.admit() else {
            return Ok(());
        };
        let verb = crate::engine::verb(first);
        let error = SessionError::Fenced {
            host: self.host.clone(),
            verb,
            why,
        };
        self.recorder.note(self.side, &error.to_string());
        self.conn = None;
        Err(error)
    }

    /// Send one command line (CRLF appended).
    pub async fn send(&mut self, line: &str) -> Result<(), SessionError> {
        if check_argument(line).is_err() {
            return Err(SessionError::BadArgument {
                what: self
                    .recorder
                    .scrubber()
                    .scrub(&crate::transcript::mask_secrets(line)),
            });
        }
        if self.conn.is_some() {
            self.admit(&[line])?;
        }
        self.recorder.sent(self.side, line);
        self.note_sent(line);
        let Some(write) = self.conn.as_mut() else {
            return Err(self.closed());
        };
        let mut bytes = Vec::with_capacity(line.len() + 2);
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        let result = tokio::time::timeout(self.reply_timeout, async {
            write.write_all(&bytes).await?;
            write.flush().await
        })
        .await;
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.fail(SessionError::Io {
                host: self.host.clone(),
                failure: io_failure(&e),
                detail: e.to_string(),
            })),
            Err(_) => Err(self.fail(SessionError::Timeout {
                host: self.host.clone(),
                waited: self.reply_timeout,
            })),
        }
    }

    /// Remembers what a sent line changes for the rest of the session.
    fn note_sent(&mut self, line: &str) {
        if crate::engine::verb(line).eq_ignore_ascii_case("STOU") {
            self.sent_unique = true;
        }
    }

    /// Send several command lines in one write: a server reads commands one at a time and
    /// answers in order, so the caller reads exactly one reply per line, in this order, to
    /// stay in step (pipelining, RFC 959 allows it). Nothing is sent if a line is bad.
    pub async fn send_batch(&mut self, lines: &[String]) -> Result<(), SessionError> {
        let mut bytes = Vec::new();
        for line in lines {
            if check_argument(line).is_err() {
                return Err(SessionError::BadArgument {
                    what: self
                        .recorder
                        .scrubber()
                        .scrub(&crate::transcript::mask_secrets(line)),
                });
            }
            bytes.extend_from_slice(line.as_bytes());
            bytes.extend_from_slice(b"\r\n");
        }
        if self.conn.is_some() {
            self.admit(&lines.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        for line in lines {
            self.recorder.sent(self.side, line);
            self.note_sent(line);
        }
        let Some(write) = self.conn.as_mut() else {
            return Err(self.closed());
        };
        let result = tokio::time::timeout(self.reply_timeout, write.write_all(&bytes)).await;
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.fail(SessionError::Io {
                host: self.host.clone(),
                failure: io_failure(&e),
                detail: e.to_string(),
            })),
            Err(_) => Err(self.fail(SessionError::Timeout {
                host: self.host.clone(),
                waited: self.reply_timeout,
            })),
        }
    }

    /// Send a command and read its reply within the reply timeout.
    pub async fn command(&mut self, line: &str) -> Result<Reply, SessionError> {
        self.send(line).await?;
        self.read_reply(self.reply_timeout).await
    }

    /// Read one whole reply (without sending anything: the final reply after a 1yz),
    /// waiting at most `timeout`.
    pub async fn read_reply(&mut self, timeout: Duration) -> Result<Reply, SessionError> {
        self.read_reply_until(Instant::now() + timeout).await
    }

    /// [`Session::read_reply`] with a deadline.
    pub async fn read_reply_until(&mut self, deadline: Instant) -> Result<Reply, SessionError> {
        let started = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            match self.parser.next_reply() {
                Ok(Some(reply)) => {
                    let reply = reply.scrubbed(self.recorder.scrubber());
                    self.recorder.received(self.side, &reply.to_string());
                    return Ok(reply);
                }
                Ok(None) => {}
                Err(error) => {
                    return Err(self.fail(SessionError::Malformed {
                        host: self.host.clone(),
                        error: error.scrubbed(self.recorder.scrubber()),
                    }))
                }
            }
            let Some(read) = self.conn.as_mut() else {
                return Err(self.closed());
            };
            match tokio::time::timeout_at(deadline, read.read(&mut buf)).await {
                Ok(Ok(0)) => {
                    let detail = if self.parser.pending_len() > 0 {
                        "connection closed in the middle of a reply"
                    } else {
                        "connection closed by the server"
                    };
                    return Err(self.fail(SessionError::Io {
                        host: self.host.clone(),
                        failure: TransportFailure::Eof,
                        detail: detail.into(),
                    }));
                }
                Ok(Ok(n)) => self.parser.feed(&buf[..n]),
                Ok(Err(e)) => {
                    return Err(self.fail(SessionError::Io {
                        host: self.host.clone(),
                        failure: io_failure(&e),
                        detail: e.to_string(),
                    }))
                }
                Err(_) => {
                    return Err(self.fail(SessionError::Timeout {
                        host: self.host.clone(),
                        waited: started.elapsed(),
                    }))
                }
            }
        }
    }

    /// Drop the connection now, without QUIT: for a server that no longer answers
    /// (blocked waiting for a data connection, it ignores ABOR and QUIT).
    pub fn close(&mut self, why: &str) {
        if self.conn.take().is_some() {
            self.recorder
                .note(self.side, &format!("closing the control connection: {why}"));
        }
    }

    /// QUIT politely (bounded by a short wait), then close. After the 221 it waits (as
    /// briefly) for the server to close its end: the server's session is over when this
    /// returns, so the connection slot it held may go to another connection (a server that
    /// counts sessions per client must not see the next one before this one ended).
    pub async fn quit(&mut self) {
        if self.conn.is_none() {
            return;
        }
        let wait = self.reply_timeout.min(Duration::from_secs(5));
        if self.send("QUIT").await.is_ok() && self.read_reply(wait).await.is_ok() {
            if let Some(conn) = self.conn.as_mut() {
                let mut buf = [0u8; 512];
                let until = Instant::now() + wait.min(Duration::from_secs(2));
                while let Ok(Ok(n)) = tokio::time::timeout_at(until, conn.read(&mut buf)).await {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
        self.conn = None;
    }

    fn closed(&self) -> SessionError {
        SessionError::Closed {
            host: self.host.clone(),
        }
    }

    fn fail(&mut self, error: SessionError) -> SessionError {
        self.recorder.received(self.side, &format!("({error})"));
        self.conn = None;
        error
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoginStep {
    User,
    Pass,
    Acct,
}

impl LoginStep {
    fn verb(self) -> &'static str {
        match self {
            LoginStep::User => "USER",
            LoginStep::Pass => "PASS",
            LoginStep::Acct => "ACCT",
        }
    }

    fn kind(self) -> CommandKind {
        match self {
            LoginStep::User => CommandKind::User,
            LoginStep::Pass => CommandKind::Pass,
            LoginStep::Acct => CommandKind::Acct,
        }
    }
}

/// The greeting and the login, on the session's own connection.
struct LoginState<'a> {
    host: String,
    limits: &'a Limits,
}

impl LoginState<'_> {
    fn classify(&self, command: CommandKind, reply: &Reply) -> Disposition {
        classify_for_host(
            &self.host,
            &self.limits.overrides,
            command,
            Outcome::Reply(reply.code()),
        )
    }

    /// The greeting: 220 goes on to the login; anything else (120 "ready in n minutes",
    /// 421) is a refusal, transient unless its code says otherwise.
    async fn greeting(&self, session: &mut Session) -> Result<(), ConnectError> {
        let reply = session.read_reply(self.limits.reply_timeout).await?;
        if reply.code().get() == 220 {
            return Ok(());
        }
        let disposition = match self.classify(CommandKind::Other, &reply) {
            // 120 and other odd positive greetings: try again later.
            Disposition::Preliminary | Disposition::Done | Disposition::Continue(_) => {
                Disposition::Transient(TransientKind::Unlisted(reply.code()))
            }
            other => other,
        };
        Err(ConnectError::Refused {
            host: self.host.clone(),
            command: "greeting",
            reply,
            disposition,
        })
    }

    fn line_for(&self, step: LoginStep, login: &ServerLogin) -> Result<String, ConnectError> {
        let arg = match step {
            LoginStep::User => login.user.clone(),
            LoginStep::Pass => match &login.password {
                Some(p) => p.expose().to_owned(),
                // RFC 1635: anonymous FTP takes an e-mail address as password.
                None if login.is_anonymous() => "bftp@".to_owned(),
                None => String::new(),
            },
            LoginStep::Acct => login
                .acct
                .as_ref()
                .map(|a| a.expose().to_owned())
                .unwrap_or_default(),
        };
        if check_argument(&arg).is_err() {
            return Err(SessionError::BadArgument {
                what: step.verb().to_owned(),
            }
            .into());
        }
        Ok(format!("{} {arg}", step.verb()))
    }

    /// After the reply to `step`: the next step, `None` when logged in, or the refusal.
    fn next_step(
        &self,
        step: LoginStep,
        login: &ServerLogin,
        reply: Reply,
    ) -> Result<Option<LoginStep>, ConnectError> {
        let disposition = self.classify(step.kind(), &reply);
        match disposition {
            Disposition::Done => Ok(None),
            Disposition::Continue(Needs::Password) if step == LoginStep::User => {
                Ok(Some(LoginStep::Pass))
            }
            Disposition::Continue(Needs::Account) if step != LoginStep::Acct => {
                if login.acct.is_none() {
                    return Err(ConnectError::MissingCredential {
                        host: self.host.clone(),
                        command: step.verb(),
                        what: "an account (ACCT)",
                        reply,
                    });
                }
                Ok(Some(LoginStep::Acct))
            }
            _ => Err(ConnectError::Refused {
                host: self.host.clone(),
                command: step.verb(),
                reply,
                disposition,
            }),
        }
    }

    /// USER, PASS on 331, ACCT on 332. The session masks PASS and ACCT in the transcript.
    async fn login(&self, session: &mut Session, login: &ServerLogin) -> Result<(), ConnectError> {
        let mut step = LoginStep::User;
        loop {
            let line = self.line_for(step, login)?;
            let reply = session.command(&line).await?;
            match self.next_step(step, login, reply)? {
                Some(next) => step = next,
                None => return Ok(()),
            }
        }
    }
}

/// The transport failure an I/O error stands for (RULES.md §5: all transient).
pub(crate) fn io_failure(e: &std::io::Error) -> TransportFailure {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => TransportFailure::Refused,
        ConnectionReset | ConnectionAborted | BrokenPipe => TransportFailure::Reset,
        TimedOut | WouldBlock => TransportFailure::Timeout,
        UnexpectedEof => TransportFailure::Eof,
        HostUnreachable | NetworkUnreachable | AddrNotAvailable | NetworkDown => {
            TransportFailure::Unreachable
        }
        _ => TransportFailure::Reset,
    }
}
