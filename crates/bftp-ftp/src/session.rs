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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;

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
            SessionError::Closed { .. } | SessionError::BadArgument { .. } => {
                Outcome::Transport(TransportFailure::Eof)
            }
        }
    }
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
}

impl ConnectError {
    /// The retry decision for this failure (RULES.md §5).
    pub fn disposition(&self, host: &str, limits: &Limits) -> Disposition {
        match self {
            ConnectError::AddressRefused { .. } | ConnectError::MissingCredential { .. } => {
                Disposition::Permanent(bftp_core::reply::PermanentKind::Login)
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
    conn: Option<(OwnedReadHalf, OwnedWriteHalf)>,
    parser: ReplyParser,
    reply_timeout: Duration,
    recorder: Recorder,
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
        let host = login.host.clone();
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

        let (read, write) = stream.into_split();
        let mut session = Session {
            side,
            host,
            peer,
            conn: Some((read, write)),
            parser: ReplyParser::new(limits.reply),
            reply_timeout: limits.reply_timeout,
            recorder,
        };
        let login_state = LoginState {
            host: session.host.clone(),
            limits,
        };
        login_state.greeting(&mut session).await?;
        login_state.login(&mut session, login).await?;
        Ok(session)
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
        self.recorder.sent(self.side, line);
        let Some((_, write)) = self.conn.as_mut() else {
            return Err(self.closed());
        };
        let mut bytes = Vec::with_capacity(line.len() + 2);
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
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
        for line in lines {
            self.recorder.sent(self.side, line);
        }
        let Some((_, write)) = self.conn.as_mut() else {
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
            let Some((read, _)) = self.conn.as_mut() else {
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

    /// QUIT politely (bounded by a short wait), then close.
    pub async fn quit(&mut self) {
        if self.conn.is_none() {
            return;
        }
        let wait = self.reply_timeout.min(Duration::from_secs(5));
        if self.send("QUIT").await.is_ok() {
            let _ = self.read_reply(wait).await;
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
