//! A scripted hostile FTP server: a minimal, in-memory FTP server whose reply to any command
//! can be replaced by a scripted [`Action`], to produce on cue the misbehaviour real servers
//! won't show (RULES.md §5, §6, §8): a PASV reply naming a third host or a port
//! below 1024, a 5yz after a dropped data connection, a reply with no code, NLST names with
//! CR/LF or NUL, an endless reply line, 421 in the middle of a transfer, silence.
//!
//! Without a script it behaves like a plain server: greeting 220, USER/PASS(/ACCT), TYPE,
//! MODE, STRU, FEAT, SYST, PWD, CWD, CDUP, MKD, RMD, SIZE, MDTM, REST, DELE, RNFR/RNTO, PASV,
//! EPSV, PORT, EPRT, RETR, STOR, APPE, STOU, NLST, LIST, MLSD, MLST, ABOR, NOOP, QUIT, with
//! real data connections (so it can be either side of an FXP with a real server). Files live
//! in memory: give them with [`Script::file`], read uploads back with
//! [`HostileServer::stored`].
//!
//! ```
//! use bftp_tests::hostile::{Action, HostileServer, Script};
//!
//! # fn main() -> anyhow::Result<()> {
//! let server = HostileServer::start(
//!     Script::new()
//!         .user("alice", "secret")
//!         .file("/pub/data.bin", b"hello".to_vec())
//!         // PASV names a third host; the server still listens on its own address.
//!         .on("PASV", Action::PasvForeignHost { host: [10, 9, 8, 7] })
//!         // The first RETR sends half the file, closes the data connection, then says 551.
//!         .on("RETR", Action::Sequence(vec![Action::DropDataThen("551 Broken pipe".into())])),
//! )?;
//! let mut ftp = server.login()?;
//! ftp.expect("TYPE I", 200)?;
//! assert!(server.commands().contains(&"PASS ****".to_string()));
//! # Ok(())
//! # }
//! ```
//!
//! How it behaves, where servers differ:
//! - Before login only USER, PASS, ACCT, QUIT, FEAT, NOOP, SYST, HELP and OPTS are served;
//!   anything else gets 530.
//! - SIZE is refused (550) in ASCII mode, as proFTPD does: send TYPE I first (RULES.md §6).
//!   Transfers are binary whatever the TYPE.
//! - Every transfer needs its own PASV/EPSV/PORT/EPRT. A passive transfer waits for the data
//!   connection before answering 150 and, like a real server blocked there, reads no command
//!   meanwhile; [`Script::data_timeout`] bounds the wait (then 425).
//! - During a transfer it watches the control connection: ABOR ends the transfer (426 then
//!   226, or the action scripted for ABOR); other commands are answered after the transfer.
//! - PORT/EPRT to any address and passive data connections from any address are accepted
//!   (FXP) unless [`Script::refuse_foreign_port`] or [`Script::refuse_foreign_data`].
//!
//! Every wait (accept, read, write, delay) also watches a stop signal, so dropping the
//! [`HostileServer`] ends every session and data connection at once, whatever the script.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::rawftp::{connect_from, port_arg, RawFtp};

/// Default bound on waiting for a data connection, and on a stalled data or control write.
pub const DEFAULT_DATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dropping the server waits for its sessions to end (they end at once unless a bug
/// blocks one; then it is left behind rather than hanging the test).
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// Longest command line read before it is cut and treated as a line.
const MAX_COMMAND: usize = 4096;
/// The modification time every file shows (MDTM, MLSD, MLST).
pub const MTIME: &str = "20240101000000";

/// What the server does with one command (or with a new connection, for the greeting).
///
/// Generic actions apply to any command; the others only where noted, which
/// [`HostileServer::start`] checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// What a plain server does.
    Default,
    /// Sends `text` instead of the normal reply. Each `\n`-separated line (a trailing `\r`
    /// dropped) is sent followed by CRLF, so a code-less line (`"No such file or
    /// directory"`), a malformed or a multi-line reply (`"211-a\n b\n211 end"`) goes out as
    /// written. The command has no other effect.
    Reply(String),
    /// Sends exactly these bytes (nothing appended): for a bare LF, a NUL, an unterminated
    /// line.
    Raw(Vec<u8>),
    /// Closes the control connection without a reply.
    Close,
    /// Sends `text` as [`Action::Reply`] does, then closes the control connection (e.g.
    /// `421 Service not available`).
    ReplyAndClose(String),
    /// Answers neither this command nor any later one on this connection (they are still
    /// recorded) until the client hangs up or the server is dropped. As a greeting: accepts
    /// and never greets.
    Silence,
    /// Sends one reply line that never ends: `200 ` then `x` bytes without a newline, until
    /// `max_bytes` bytes in all were sent, the client hangs up, or a write stalls for
    /// [`Script::data_timeout`]; then closes the connection.
    EndlessLine { max_bytes: usize },
    /// Waits `delay` (a slow server), then does `then`.
    Delayed { delay: Duration, then: Box<Action> },
    /// The n-th call of the command on this server (all connections, counting from 0) gets
    /// the n-th action; later calls get [`Action::Default`]. For the greeting: the n-th
    /// connection. A `Sequence` nested in one picks by the same call number.
    Sequence(Vec<Action>),
    /// PASV only: opens the passive listener on the server's own address, as usual, but the
    /// 227 reply names `host` (RFC 2577 bounce). A client must connect to the control peer
    /// address at the announced port.
    PasvForeignHost { host: [u8; 4] },
    /// PASV or EPSV: announces this port (e.g. 21, below 1024) on the server's own address
    /// while the real passive listener is on another port, where nothing is expected to
    /// connect (a later transfer command gets 425 after [`Script::data_timeout`]).
    PasvPort(u16),
    /// RETR, NLST, LIST, MLSD: sends these bytes over the data connection instead of the file
    /// or listing (even if there is no such file), then 226.
    ServeData(Vec<u8>),
    /// Any transfer command (RETR, NLST, LIST, MLSD, STOR, APPE, STOU): the whole transfer as
    /// usual, then this final reply instead of 226.
    TransferThen(String),
    /// Any transfer command: opens the data connection and says 150, sends the first half of
    /// the data (RETR and listings) or receives one chunk of it (uploads, kept as the stored
    /// file), closes the data connection early, then sends this final reply (e.g. `551` or
    /// `550`: RFC 1068 saw 5yz for a broken connection; or `226`: a server that lies).
    DropDataThen(String),
    /// Any transfer command: like [`Action::DropDataThen`], but after the partial data it
    /// sends this reply (e.g. `421 Timeout`) and closes the control connection too.
    AbortMidTransfer(String),
    /// Any transfer command: after 150 and the partial data (as in
    /// [`Action::DropDataThen`]) it keeps both connections open and does nothing more, like
    /// [`Action::Silence`]: a stalled transfer that only a deadline detects.
    StallMidTransfer,
    /// Any transfer command: the whole transfer as usual (the data connection closed), then
    /// no final reply and nothing more on this connection: a client killed while waiting
    /// for the 226 finds the file complete.
    TransferThenSilence,
}

impl Action {
    /// [`Action::Reply`] from anything string-like.
    pub fn reply(text: impl Into<String>) -> Action {
        Action::Reply(text.into())
    }

    /// A well-formed multi-line reply of `lines` lines in all (at least 2): `code-` first,
    /// `code ` last, numbered lines between.
    pub fn huge_reply(code: u16, lines: usize) -> Action {
        let mut text = format!("{code}-Start of a long reply");
        for i in 1..lines.saturating_sub(1) {
            text.push_str(&format!("\n line {i} of a long reply"));
        }
        text.push_str(&format!("\n{code} End of a long reply"));
        Action::Reply(text)
    }

    /// [`Action::Delayed`] without the boxing.
    pub fn delayed(delay: Duration, then: Action) -> Action {
        Action::Delayed {
            delay,
            then: Box::new(then),
        }
    }

    /// The action for call `n` of its command: resolves sequences.
    fn resolve(&self, n: usize) -> Action {
        match self {
            Action::Sequence(steps) => steps.get(n).map_or(Action::Default, |a| a.resolve(n)),
            Action::Delayed { delay, then } => Action::delayed(*delay, then.resolve(n)),
            other => other.clone(),
        }
    }

    /// Whether this action can answer `verb` ("" for the greeting).
    fn check(&self, verb: &str) -> Result<()> {
        let what = if verb.is_empty() {
            "the greeting".to_string()
        } else {
            verb.to_string()
        };
        match self {
            Action::Sequence(steps) => steps.iter().try_for_each(|a| a.check(verb)),
            Action::Delayed { then, .. } => then.check(verb),
            Action::PasvForeignHost { .. } => {
                ensure!(
                    verb == "PASV",
                    "PasvForeignHost applies to PASV, not {what}"
                );
                Ok(())
            }
            Action::PasvPort(_) => {
                ensure!(
                    matches!(verb, "PASV" | "EPSV"),
                    "PasvPort applies to PASV and EPSV, not {what}"
                );
                Ok(())
            }
            Action::ServeData(_) => {
                ensure!(
                    SENDING.contains(&verb),
                    "ServeData applies to {SENDING:?}, not {what}"
                );
                Ok(())
            }
            Action::TransferThen(_)
            | Action::DropDataThen(_)
            | Action::AbortMidTransfer(_)
            | Action::StallMidTransfer
            | Action::TransferThenSilence => {
                ensure!(
                    SENDING.contains(&verb) || RECEIVING.contains(&verb),
                    "{self:?} applies to transfer commands, not {what}"
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Transfer commands whose data flows from the server.
const SENDING: [&str; 4] = ["RETR", "NLST", "LIST", "MLSD"];
/// Transfer commands whose data flows to the server.
const RECEIVING: [&str; 3] = ["STOR", "APPE", "STOU"];
/// Served before login.
const BEFORE_LOGIN: [&str; 10] = [
    "", "USER", "PASS", "ACCT", "QUIT", "FEAT", "NOOP", "SYST", "HELP", "OPTS",
];

/// What the server serves and how it misbehaves: a builder for [`HostileServer::start`].
#[derive(Clone, Debug)]
pub struct Script {
    host: Ipv4Addr,
    users: Vec<(String, String)>,
    account: Option<String>,
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
    listings: HashMap<String, Vec<Vec<u8>>>,
    features: Vec<String>,
    mlsd: bool,
    /// By verb; the greeting is under "".
    actions: HashMap<String, Action>,
    refuse_foreign_port: Option<String>,
    refuse_foreign_data: bool,
    data_timeout: Duration,
    /// The reply to a successful login, instead of `230 Login successful.`.
    login_reply: Option<String>,
    stou_per_session: bool,
}

impl Default for Script {
    fn default() -> Self {
        Script::new()
    }
}

impl Script {
    /// A plain server on 127.0.0.1 that accepts any user and password, with no files.
    pub fn new() -> Script {
        Script {
            host: Ipv4Addr::LOCALHOST,
            users: Vec::new(),
            account: None,
            files: BTreeMap::new(),
            dirs: BTreeSet::new(),
            listings: HashMap::new(),
            features: [
                "EPRT",
                "EPSV",
                "MDTM",
                "MLST type*;size*;modify*;",
                "PASV",
                "REST STREAM",
                "SIZE",
                "TVFS",
                "UTF8",
            ]
            .map(String::from)
            .to_vec(),
            mlsd: true,
            actions: HashMap::new(),
            refuse_foreign_port: None,
            refuse_foreign_data: false,
            data_timeout: DEFAULT_DATA_TIMEOUT,
            login_reply: None,
            stou_per_session: false,
        }
    }

    /// STOU names as Pure-FTPd makes them: from a per-session counter (so every session's
    /// first STOU is told `stou.1`), without looking at what exists; at the end of the upload
    /// a name that exists by then is not overwritten: the file is stored as `NAME.1` (the
    /// first free `NAME.N`), and the replies still say `NAME`.
    pub fn stou_names_per_session(mut self) -> Script {
        self.stou_per_session = true;
        self
    }

    /// The loopback address to listen on (control and passive ports), e.g. 127.0.0.5 so that
    /// the server's address differs from the client's.
    pub fn host(mut self, host: Ipv4Addr) -> Script {
        self.host = host;
        self
    }

    /// Accepts this user with this password. Once one is given, only the given ones log in
    /// (530 otherwise); with none, any user and password do.
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Script {
        self.users.push((user.into(), password.into()));
        self
    }

    /// A correct PASS gets 332 and the login ends with `ACCT account` (230; 530 otherwise).
    pub fn account(mut self, account: impl Into<String>) -> Script {
        self.account = Some(account.into());
        self
    }

    /// A file, by path (`/dir/name`; relative paths are taken from `/`). Its directories
    /// exist implicitly.
    pub fn file(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Script {
        self.files.insert(resolve("/", path), contents.into());
        self
    }

    /// An (empty) directory.
    pub fn dir(mut self, path: &str) -> Script {
        self.dirs.insert(resolve("/", path));
        self
    }

    /// NLST, LIST and MLSD of directory `dir` list exactly these names, byte for byte (CR,
    /// LF, NUL, `..`, absolute paths included), each followed by CRLF, instead of the files
    /// in it. The facts MLSD and LIST show come from the file of that name in `dir`, if any.
    pub fn listing<N: Into<Vec<u8>>>(
        mut self,
        dir: &str,
        names: impl IntoIterator<Item = N>,
    ) -> Script {
        let names = names.into_iter().map(Into::into).collect();
        self.listings.insert(resolve("/", dir), names);
        self
    }

    /// The FEAT lines (without the leading space), replacing the default list.
    pub fn features<F: Into<String>>(mut self, features: impl IntoIterator<Item = F>) -> Script {
        self.features = features.into_iter().map(Into::into).collect();
        self
    }

    /// A server without MLSD/MLST: FEAT omits MLST and both commands get 500.
    pub fn without_mlsd(mut self) -> Script {
        self.mlsd = false;
        self.features.retain(|f| !f.starts_with("MLST"));
        self
    }

    /// Scripts a command by its verb (case-insensitive): every call gets `action`, or the
    /// n-th call the n-th step of an [`Action::Sequence`]. A later `on` for the same verb
    /// replaces the earlier one. A scripted action applies whatever the session's state
    /// (also before login); only [`Action::Default`] and the PASV/transfer shapings run the
    /// normal checks.
    pub fn on(mut self, verb: &str, action: Action) -> Script {
        self.actions
            .insert(verb.trim().to_ascii_uppercase(), action);
        self
    }

    /// Scripts the greeting (default `220 ...`): e.g. [`Action::Silence`], or
    /// [`Action::ReplyAndClose`] with a 421.
    pub fn greeting(mut self, action: Action) -> Script {
        self.actions.insert(String::new(), action);
        self
    }

    /// PORT/EPRT naming another address than the client's (the control connection's peer)
    /// get this reply, e.g. `500 Illegal PORT command.` or `425 ...` (modern servers refuse
    /// FXP).
    pub fn refuse_foreign_port(mut self, reply: impl Into<String>) -> Script {
        self.refuse_foreign_port = Some(reply.into());
        self
    }

    /// A passive data connection from another address than the client's is closed and the
    /// transfer command gets `425 Security: Bad IP connecting.` (vsftpd's stock behaviour).
    pub fn refuse_foreign_data(mut self) -> Script {
        self.refuse_foreign_data = true;
        self
    }

    /// The reply to a successful PASS (or ACCT), sent as [`Action::Reply`] sends its text,
    /// instead of `230 Login successful.`: the session is logged in all the same (unlike
    /// scripting PASS with [`Script::on`], which only replies).
    pub fn login_reply(mut self, text: impl Into<String>) -> Script {
        self.login_reply = Some(text.into());
        self
    }

    /// Bound on waiting for a data connection and on a stalled write (default 10 s).
    pub fn data_timeout(mut self, timeout: Duration) -> Script {
        self.data_timeout = timeout;
        self
    }

    fn accepts(&self, user: &str, password: &str) -> bool {
        self.users.is_empty() || self.users.iter().any(|(u, p)| u == user && p == password)
    }
}

/// One command line the server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Which control connection, numbered from 0 in order of arrival.
    pub connection: usize,
    /// The line without its CRLF, decoded lossily; a password is shown as `PASS ****`.
    pub line: String,
}

/// What the server has seen so far; see [`HostileServer::wait_for`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Control connections accepted.
    pub connections: usize,
    /// Control connections that have ended (either side closed).
    pub closed: usize,
    /// Every command line, in order of arrival.
    pub commands: Vec<Command>,
    /// Peer address of every connection to a passive data port (also those then refused).
    pub data_from: Vec<SocketAddr>,
    /// Every address an active data connection (after PORT/EPRT) was opened to.
    pub data_to: Vec<SocketAddr>,
}

impl Observed {
    /// Whether a received line starts with `prefix` (case-insensitive).
    pub fn saw(&self, prefix: &str) -> bool {
        self.commands.iter().any(|c| {
            c.line
                .get(..prefix.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
        })
    }
}

/// A running scripted server; stopped (every connection closed) on drop.
pub struct HostileServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: UnixStream,
    acceptor: Option<JoinHandle<()>>,
}

impl HostileServer {
    /// Checks the script, listens on a free port of its host and serves each control
    /// connection in its own thread.
    pub fn start(script: Script) -> Result<HostileServer> {
        for (verb, action) in &script.actions {
            action
                .check(verb)
                .context("invalid hostile server script")?;
        }
        let listener = TcpListener::bind((script.host, 0))
            .with_context(|| format!("binding {}:0", script.host))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = UnixStream::pair().context("creating the stop signal")?;

        let mut dirs = script.dirs.clone();
        for path in script.files.keys().chain(script.dirs.iter()) {
            add_parents(&mut dirs, path);
        }
        dirs.insert("/".to_string());
        let state = State {
            files: script.files.clone(),
            dirs,
            ..State::default()
        };
        let shared = Arc::new(Shared {
            script,
            stop: stop_rx,
            state: Mutex::new(state),
            changed: Condvar::new(),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("hostile-ftp-{}", addr.port()))
                .spawn(move || accept_loop(listener, shared))
                .context("spawning the accept thread")?
        };
        Ok(HostileServer {
            addr,
            shared,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// The control address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn host(&self) -> Ipv4Addr {
        self.shared.script.host
    }

    /// The first user given to [`Script::user`], or `anonymous`.
    pub fn user(&self) -> &str {
        self.shared
            .script
            .users
            .first()
            .map_or("anonymous", |(u, _)| u)
    }

    /// That user's password (`guest` for `anonymous`).
    pub fn password(&self) -> &str {
        self.shared.script.users.first().map_or("guest", |(_, p)| p)
    }

    /// `ftp://user@host:port/path` (no password).
    pub fn url(&self, path: &str) -> String {
        format!(
            "ftp://{}@{}/{}",
            self.user(),
            self.addr,
            path.trim_start_matches('/')
        )
    }

    /// Connects and logs in as [`user`](Self::user) (with the ACCT if the script has one).
    pub fn login(&self) -> Result<RawFtp> {
        let (mut ftp, greeting) = RawFtp::connect(self.addr)?;
        ensure!(greeting.code == 220, "hostile server greeted {greeting:?}");
        let mut reply = ftp.cmd(&format!("USER {}", self.user()))?;
        if reply.code == 331 {
            reply = ftp.cmd(&format!("PASS {}", self.password()))?;
        }
        if let (332, Some(account)) = (reply.code, &self.shared.script.account) {
            reply = ftp.cmd(&format!("ACCT {account}"))?;
        }
        ensure!(reply.code == 230, "login refused: {reply:?}");
        Ok(ftp)
    }

    /// A snapshot of everything seen so far.
    pub fn observed(&self) -> Observed {
        self.shared.lock().observed.clone()
    }

    /// Every command line received, on all connections, in order (`PASS ****` masked).
    pub fn commands(&self) -> Vec<String> {
        self.shared
            .lock()
            .observed
            .commands
            .iter()
            .map(|c| c.line.clone())
            .collect()
    }

    /// The command lines received on one control connection (numbered from 0).
    pub fn commands_on(&self, connection: usize) -> Vec<String> {
        self.shared
            .lock()
            .observed
            .commands
            .iter()
            .filter(|c| c.connection == connection)
            .map(|c| c.line.clone())
            .collect()
    }

    /// Control connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.lock().observed.connections
    }

    /// Peer addresses of the connections made to its passive data ports: where data came
    /// from or went to.
    pub fn data_connections_from(&self) -> Vec<SocketAddr> {
        self.shared.lock().observed.data_from.clone()
    }

    /// Addresses it opened active data connections to (after PORT/EPRT).
    pub fn data_connections_to(&self) -> Vec<SocketAddr> {
        self.shared.lock().observed.data_to.clone()
    }

    /// The current contents of a file (scripted or uploaded), by path as in
    /// [`Script::file`].
    pub fn stored(&self, path: &str) -> Option<Vec<u8>> {
        self.shared.lock().files.get(&resolve("/", path)).cloned()
    }

    /// Paths of all files, sorted.
    pub fn files(&self) -> Vec<String> {
        self.shared.lock().files.keys().cloned().collect()
    }

    /// Waits until `done` holds for what the server has seen (checked at every change, no
    /// polling), at most `timeout`; returns that state, or an error that shows it.
    pub fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Observed) -> bool,
    ) -> Result<Observed> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if done(&state.observed) {
                return Ok(state.observed.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let o = &state.observed;
                let last: Vec<&str> = o
                    .commands
                    .iter()
                    .rev()
                    .take(20)
                    .rev()
                    .map(|c| c.line.as_str())
                    .collect();
                bail!(
                    "hostile server: condition not met within {timeout:?} ({} connections, {} \
                     closed, last commands {last:?}, data from {:?}, data to {:?})",
                    o.connections,
                    o.closed,
                    o.data_from,
                    o.data_to
                );
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
    }

    /// Waits until a command line starting with `prefix` (case-insensitive) was received.
    pub fn wait_for_command(&self, prefix: &str, timeout: Duration) -> Result<()> {
        self.wait_for(timeout, |o| o.saw(prefix))
            .with_context(|| format!("waiting for a command {prefix:?}"))
            .map(drop)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        // Every wait in every thread polls the other end of this socket pair.
        let _ = self.stop.shutdown(Shutdown::Both);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let deadline = Instant::now() + STOP_DEADLINE;
        let mut state = self.shared.lock();
        while state.live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
    }
}

struct Shared {
    script: Script,
    /// Readable (EOF) once the server is dropped.
    stop: UnixStream,
    state: Mutex<State>,
    /// Notified on every change of `state`.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    observed: Observed,
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
    /// Calls so far, by verb ("" for connections), for [`Action::Sequence`].
    calls: HashMap<String, usize>,
    /// Names handed out by STOU.
    unique: usize,
    /// Sessions not yet ended.
    live: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.lock());
        self.changed.notify_all();
        r
    }

    /// The scripted action for this call of `verb`.
    fn action(&self, verb: &str) -> Action {
        let n = self.update(|s| {
            let calls = s.calls.entry(verb.to_string()).or_insert(0);
            *calls += 1;
            *calls - 1
        });
        self.script
            .actions
            .get(verb)
            .map_or(Action::Default, |a| a.resolve(n))
    }

    fn timeout(&self) -> Duration {
        self.script.data_timeout
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match wait_fd(listener.as_raw_fd(), libc::POLLIN, &shared.stop, None) {
            Ok(Wait::Ready) => {}
            _ => return,
        }
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if is_transient_accept_error(&e) => continue,
            Err(_) => return,
        };
        let id = shared.update(|s| {
            s.live += 1;
            s.observed.connections += 1;
            s.observed.connections - 1
        });
        let guard = SessionGuard(Arc::clone(&shared));
        let session = Session::new(Arc::clone(&shared), id, stream, peer);
        // A failed spawn drops the closure and the guard in it: the count stays right.
        let _ = std::thread::Builder::new()
            .name(format!("hostile-ftp-session-{id}"))
            .spawn(move || {
                let _guard = guard;
                if let Ok(mut session) = session {
                    let _ = session.serve();
                }
            });
    }
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::Interrupted | ErrorKind::ConnectionAborted
    )
}

/// Counts a session as ended when its thread finishes, however it finishes.
struct SessionGuard(Arc<Shared>);

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.0.update(|s| {
            s.live -= 1;
            s.observed.closed += 1;
        });
    }
}

/// The session is over: the client went away, the script closed it, or the server stops.
struct Gone;

type Step = std::result::Result<(), Gone>;

enum Login {
    Start,
    NeedPass(String),
    NeedAcct,
    Done,
}

enum Data {
    None,
    Passive(TcpListener),
    Active(SocketAddrV4),
}

/// How a transfer ends, from [`Action`].
enum Shape {
    Whole { final_reply: Option<String> },
    Drop(String),
    Abort(String),
    Stall,
    WholeThenSilence,
}

impl Shape {
    fn of(action: &Action) -> Shape {
        match action {
            Action::TransferThen(r) => Shape::Whole {
                final_reply: Some(r.clone()),
            },
            Action::DropDataThen(r) => Shape::Drop(r.clone()),
            Action::AbortMidTransfer(r) => Shape::Abort(r.clone()),
            Action::StallMidTransfer => Shape::Stall,
            Action::TransferThenSilence => Shape::WholeThenSilence,
            _ => Shape::Whole { final_reply: None },
        }
    }
}

/// How pumping data ended (the session going away is `Err(Gone)`).
enum Pump {
    Done,
    /// ABOR arrived on the control connection.
    Aborted,
    /// The data connection failed or stalled.
    Failed,
}

enum Event {
    Data,
    Control,
    TimedOut,
}

struct Session {
    shared: Arc<Shared>,
    id: usize,
    ctrl: TcpStream,
    peer: SocketAddr,
    inbuf: Vec<u8>,
    /// Commands that arrived during a transfer, answered after it.
    pending: VecDeque<Vec<u8>>,
    login: Login,
    cwd: String,
    binary: bool,
    data: Data,
    rest: u64,
    rename_from: Option<String>,
    /// STOUs of this session (for [`Script::stou_names_per_session`]).
    stou_seq: usize,
}

impl Session {
    fn new(shared: Arc<Shared>, id: usize, ctrl: TcpStream, peer: SocketAddr) -> Result<Session> {
        ctrl.set_nonblocking(true)?;
        Ok(Session {
            shared,
            id,
            ctrl,
            peer,
            inbuf: Vec::new(),
            pending: VecDeque::new(),
            login: Login::Start,
            cwd: "/".to_string(),
            binary: false,
            data: Data::None,
            rest: 0,
            rename_from: None,
            stou_seq: 0,
        })
    }

    fn serve(&mut self) -> Step {
        let greeting = self.shared.action("");
        self.perform(greeting, "", "")?;
        loop {
            let line = self.next_line()?;
            let (verb, arg) = split_command(&line);
            let action = self.shared.action(&verb);
            self.perform(action, &verb, &arg)?;
        }
    }

    fn perform(&mut self, action: Action, verb: &str, arg: &str) -> Step {
        match action {
            Action::Reply(text) => self.reply(&text),
            Action::Raw(bytes) => self.write(&bytes),
            Action::Close => Err(Gone),
            Action::ReplyAndClose(text) => {
                let _ = self.reply(&text);
                Err(Gone)
            }
            Action::Silence => self.silence(),
            Action::EndlessLine { max_bytes } => self.endless_line(max_bytes),
            Action::Delayed { delay, then } => {
                match wait_fd(-1, 0, &self.shared.stop, Some(Instant::now() + delay)) {
                    Ok(Wait::Stopped) | Err(_) => Err(Gone),
                    Ok(_) => self.perform(*then, verb, arg),
                }
            }
            other => self.command(verb, arg, &other),
        }
    }

    /// Reads (and records) commands without answering, until the session ends.
    fn silence(&mut self) -> Step {
        loop {
            self.next_line()?;
        }
    }

    fn endless_line(&mut self, max_bytes: usize) -> Step {
        let head = b"200 ";
        let head = &head[..head.len().min(max_bytes)];
        self.write(head)?;
        let chunk = [b'x'; 8192];
        let mut sent = head.len();
        while sent < max_bytes {
            let n = chunk.len().min(max_bytes - sent);
            self.write(&chunk[..n])?;
            sent += n;
        }
        Err(Gone)
    }

    /// The default behaviour, shaped by a command-specific action (PASV and transfers).
    fn command(&mut self, verb: &str, arg: &str, action: &Action) -> Step {
        if !matches!(self.login, Login::Done) && !BEFORE_LOGIN.contains(&verb) {
            return self.reply("530 Please login with USER and PASS.");
        }
        match verb {
            "" => self.reply("220 bftp hostile test FTP server ready."),
            "USER" => self.user(arg),
            "PASS" => self.pass(arg),
            "ACCT" => self.acct(arg),
            "QUIT" => {
                let _ = self.reply("221 Goodbye.");
                Err(Gone)
            }
            "NOOP" => self.reply("200 NOOP ok."),
            "SYST" => self.reply("215 UNIX Type: L8"),
            "HELP" => self.reply("214 Help OK."),
            "FEAT" => {
                let mut text = "211-Features:".to_string();
                for f in &self.shared.script.features {
                    text.push_str(&format!("\n {f}"));
                }
                text.push_str("\n211 End");
                self.reply(&text)
            }
            "OPTS" if arg.eq_ignore_ascii_case("UTF8 ON") => self.reply("200 Always in UTF8 mode."),
            "OPTS" => self.reply("501 Option not understood."),
            "TYPE" => match arg.to_ascii_uppercase().as_str() {
                "I" | "L 8" => {
                    self.binary = true;
                    self.reply("200 Switching to Binary mode.")
                }
                "A" | "A N" => {
                    self.binary = false;
                    self.reply("200 Switching to ASCII mode.")
                }
                _ => self.reply("504 Command not implemented for that parameter."),
            },
            "MODE" if arg.eq_ignore_ascii_case("S") => self.reply("200 Mode set to S."),
            "STRU" if arg.eq_ignore_ascii_case("F") => self.reply("200 Structure set to F."),
            "MODE" | "STRU" => self.reply("504 Command not implemented for that parameter."),
            "PWD" | "XPWD" => {
                let text = format!("257 \"{}\" is the current directory", self.cwd);
                self.reply(&text)
            }
            "CWD" | "XCWD" => self.cwd(arg),
            "CDUP" | "XCUP" => self.cwd(".."),
            "MKD" | "XMKD" => self.mkd(arg),
            "RMD" | "XRMD" => self.rmd(arg),
            "SIZE" => self.size(arg),
            "MDTM" => {
                let path = self.path(arg);
                if self.shared.lock().files.contains_key(&path) {
                    self.reply(&format!("213 {MTIME}"))
                } else {
                    self.reply("550 Could not get file modification time.")
                }
            }
            "REST" => match arg.parse() {
                Ok(offset) => {
                    self.rest = offset;
                    self.reply(&format!("350 Restart position accepted ({offset})."))
                }
                Err(_) => self.reply("501 Bad REST argument."),
            },
            "DELE" => {
                let path = self.path(arg);
                if self.shared.update(|s| s.files.remove(&path)).is_some() {
                    self.reply("250 Delete operation successful.")
                } else {
                    self.reply("550 Delete operation failed.")
                }
            }
            "RNFR" => {
                let path = self.path(arg);
                if self.shared.lock().files.contains_key(&path) {
                    self.rename_from = Some(path);
                    self.reply("350 Ready for RNTO.")
                } else {
                    self.reply("550 RNFR command failed.")
                }
            }
            "RNTO" => self.rnto(arg),
            "PASV" => self.passive(action, false),
            "EPSV" => match arg.to_ascii_uppercase().as_str() {
                "" | "1" => self.passive(action, true),
                "ALL" => self.reply("200 EPSV ALL ok."),
                _ => self.reply("522 Network protocol not supported, use (1)"),
            },
            "PORT" => match parse_port(arg) {
                Some(addr) => self.active(addr),
                None => self.reply("501 Illegal PORT command."),
            },
            "EPRT" => match parse_eprt(arg) {
                Ok(addr) => self.active(addr),
                Err(Eprt::Family) => self.reply("522 Network protocol not supported, use (1)"),
                Err(Eprt::Syntax) => self.reply("501 Illegal EPRT command."),
            },
            "RETR" => self.retr(arg, action),
            "STOR" | "APPE" | "STOU" => self.upload(verb, arg, action),
            "NLST" | "LIST" => self.list(verb, arg, action),
            "MLSD" if self.shared.script.mlsd || matches!(action, Action::ServeData(_)) => {
                self.list(verb, arg, action)
            }
            "MLST" if self.shared.script.mlsd => self.mlst(arg),
            "ABOR" => self.reply("225 No transfer to ABOR."),
            _ => self.reply("500 Unknown command."),
        }
    }

    fn user(&mut self, arg: &str) -> Step {
        if arg.is_empty() {
            return self.reply("501 USER needs a name.");
        }
        self.login = Login::NeedPass(arg.to_string());
        self.reply("331 Please specify the password.")
    }

    fn pass(&mut self, arg: &str) -> Step {
        match std::mem::replace(&mut self.login, Login::Start) {
            Login::NeedPass(user) if self.shared.script.accepts(&user, arg) => {
                if self.shared.script.account.is_some() {
                    self.login = Login::NeedAcct;
                    self.reply("332 Need account for login.")
                } else {
                    self.login = Login::Done;
                    self.logged_in()
                }
            }
            Login::NeedPass(_) => self.reply("530 Login incorrect."),
            Login::Done => {
                self.login = Login::Done;
                self.reply("230 Already logged in.")
            }
            _ => self.reply("503 Login with USER first."),
        }
    }

    fn logged_in(&mut self) -> Step {
        let text = self.shared.script.login_reply.clone();
        self.reply(text.as_deref().unwrap_or("230 Login successful."))
    }

    fn acct(&mut self, arg: &str) -> Step {
        match self.login {
            Login::NeedAcct if self.shared.script.account.as_deref() == Some(arg) => {
                self.login = Login::Done;
                self.logged_in()
            }
            Login::NeedAcct => {
                self.login = Login::Start;
                self.reply("530 Login incorrect.")
            }
            Login::Done => self.reply("202 ACCT not needed."),
            _ => self.reply("503 Login with USER first."),
        }
    }

    fn cwd(&mut self, arg: &str) -> Step {
        let path = self.path(arg);
        if self.shared.lock().dirs.contains(&path) {
            self.cwd = path;
            self.reply("250 Directory successfully changed.")
        } else {
            self.reply("550 Failed to change directory.")
        }
    }

    fn mkd(&mut self, arg: &str) -> Step {
        let path = self.path(arg);
        let created = self.shared.update(|s| {
            if s.dirs.contains(&path) || s.files.contains_key(&path) {
                return false;
            }
            add_parents(&mut s.dirs, &path);
            s.dirs.insert(path.clone())
        });
        if created {
            self.reply(&format!("257 \"{path}\" created"))
        } else {
            self.reply("550 Create directory operation failed.")
        }
    }

    fn rmd(&mut self, arg: &str) -> Step {
        let path = self.path(arg);
        let removed = self.shared.update(|s| {
            let busy = s
                .files
                .keys()
                .chain(s.dirs.iter())
                .any(|p| parent(p) == Some(path.as_str()) && p != &path);
            path != "/" && !busy && s.dirs.remove(&path)
        });
        if removed {
            self.reply("250 Remove directory operation successful.")
        } else {
            self.reply("550 Remove directory operation failed.")
        }
    }

    fn size(&mut self, arg: &str) -> Step {
        if !self.binary {
            return self.reply("550 SIZE not allowed in ASCII mode");
        }
        let path = self.path(arg);
        let size = self.shared.lock().files.get(&path).map(Vec::len);
        match size {
            Some(size) => self.reply(&format!("213 {size}")),
            None => self.reply("550 Could not get file size."),
        }
    }

    fn rnto(&mut self, arg: &str) -> Step {
        let Some(from) = self.rename_from.take() else {
            return self.reply("503 RNFR required first.");
        };
        let to = self.path(arg);
        let moved = self.shared.update(|s| {
            let contents = s.files.remove(&from)?;
            add_parents(&mut s.dirs, &to);
            s.files.insert(to, contents);
            Some(())
        });
        match moved {
            Some(()) => self.reply("250 Rename successful."),
            None => self.reply("550 Rename failed."),
        }
    }

    fn mlst(&mut self, arg: &str) -> Step {
        let path = self.path(arg);
        let facts = {
            let s = self.shared.lock();
            if let Some(f) = s.files.get(&path) {
                Some(format!("type=file;size={};modify={MTIME};", f.len()))
            } else if s.dirs.contains(&path) {
                Some(format!("type=dir;modify={MTIME};"))
            } else {
                None
            }
        };
        match facts {
            Some(facts) => self.reply(&format!("250-Listing {path}\n {facts} {path}\n250 End.")),
            None => self.reply("550 No such file or directory."),
        }
    }

    fn passive(&mut self, action: &Action, extended: bool) -> Step {
        let host = self.shared.script.host;
        let listener = match TcpListener::bind((host, 0)).and_then(|l| {
            l.set_nonblocking(true)?;
            Ok(l)
        }) {
            Ok(l) => l,
            Err(_) => return self.reply("425 Could not open a passive port."),
        };
        let port = match listener.local_addr() {
            Ok(a) => a.port(),
            Err(_) => return self.reply("425 Could not open a passive port."),
        };
        let (shown_host, shown_port) = match action {
            Action::PasvForeignHost { host: foreign } => (Ipv4Addr::from(*foreign), port),
            Action::PasvPort(p) => (host, *p),
            _ => (host, port),
        };
        self.data = Data::Passive(listener);
        if extended {
            self.reply(&format!(
                "229 Entering Extended Passive Mode (|||{shown_port}|)"
            ))
        } else {
            self.reply(&format!(
                "227 Entering Passive Mode ({}).",
                port_arg(SocketAddrV4::new(shown_host, shown_port))
            ))
        }
    }

    fn active(&mut self, addr: SocketAddrV4) -> Step {
        if IpAddr::V4(*addr.ip()) != self.peer.ip() {
            if let Some(refusal) = self.shared.script.refuse_foreign_port.clone() {
                self.data = Data::None;
                return self.reply(&refusal);
            }
        }
        self.data = Data::Active(addr);
        self.reply("200 PORT command successful.")
    }

    fn retr(&mut self, arg: &str, action: &Action) -> Step {
        let path = self.path(arg);
        let contents = match action {
            Action::ServeData(bytes) => Some(bytes.clone()),
            _ => self.shared.lock().files.get(&path).cloned(),
        };
        let Some(contents) = contents else {
            self.rest = 0;
            return self.reply("550 Failed to open file.");
        };
        let start = usize::try_from(std::mem::take(&mut self.rest))
            .unwrap_or(usize::MAX)
            .min(contents.len());
        let Some(data) = self.open_data()? else {
            return Ok(());
        };
        let mode = if self.binary { "BINARY" } else { "ASCII" };
        self.reply(&format!(
            "150 Opening {mode} mode data connection for {arg} ({} bytes).",
            contents.len()
        ))?;
        self.send_data(data, &contents[start..], action, "226 Transfer complete.")
    }

    fn list(&mut self, verb: &str, arg: &str, action: &Action) -> Step {
        // `LIST -la dir`: options are not paths.
        let arg = arg
            .split(' ')
            .skip_while(|w| w.starts_with('-'))
            .collect::<Vec<_>>()
            .join(" ");
        let body = match action {
            Action::ServeData(bytes) => Some(bytes.clone()),
            _ => self.listing(verb, &arg),
        };
        let Some(body) = body else {
            return self.reply("550 No such file or directory.");
        };
        let Some(data) = self.open_data()? else {
            return Ok(());
        };
        self.reply("150 Here comes the directory listing.")?;
        self.send_data(data, &body, action, "226 Directory send OK.")
    }

    /// The listing `verb` sends for `arg`, or None if there is no such file or directory.
    fn listing(&self, verb: &str, arg: &str) -> Option<Vec<u8>> {
        let path = self.path(arg);
        let s = self.shared.lock();
        let kind = |p: &str| match s.files.get(p) {
            Some(f) => Kind::File(f.len()),
            None if s.dirs.contains(p) => Kind::Dir,
            None => Kind::File(0),
        };
        let entries: Vec<(Vec<u8>, Kind)> =
            if let Some(names) = self.shared.script.listings.get(&path) {
                names
                    .iter()
                    .map(|n| {
                        let full = join(&path, &String::from_utf8_lossy(n));
                        (n.clone(), kind(&full))
                    })
                    .collect()
            } else if s.dirs.contains(&path) {
                let mut children: Vec<(Vec<u8>, Kind)> = s
                    .files
                    .keys()
                    .chain(s.dirs.iter())
                    .filter(|p| *p != &path && parent(p) == Some(path.as_str()))
                    .map(|p| (basename(p).as_bytes().to_vec(), kind(p)))
                    .collect();
                children.sort_by(|a, b| a.0.cmp(&b.0));
                children
            } else if s.files.contains_key(&path) {
                let name = if verb == "NLST" { arg } else { basename(&path) };
                vec![(name.as_bytes().to_vec(), kind(&path))]
            } else {
                return None;
            };
        let mut body = Vec::new();
        for (name, kind) in entries {
            match (verb, kind) {
                ("NLST", _) => {}
                ("MLSD", Kind::File(size)) => {
                    body.extend(format!("type=file;size={size};modify={MTIME}; ").bytes())
                }
                ("MLSD", Kind::Dir) => body.extend(format!("type=dir;modify={MTIME}; ").bytes()),
                (_, Kind::File(size)) => body.extend(
                    format!("-rw-r--r--    1 ftp      ftp {size:>13} Jan 01  2024 ").bytes(),
                ),
                (_, Kind::Dir) => {
                    body.extend("drwxr-xr-x    2 ftp      ftp          4096 Jan 01  2024 ".bytes())
                }
            }
            body.extend(&name);
            body.extend(b"\r\n");
        }
        Some(body)
    }

    fn upload(&mut self, verb: &str, arg: &str, action: &Action) -> Step {
        let named = match verb {
            "STOU" => None,
            _ if arg.is_empty() => return self.reply("501 Missing file name."),
            _ => Some(self.path(arg)),
        };
        let append = verb == "APPE";
        let rest = std::mem::take(&mut self.rest);
        let Some(data) = self.open_data()? else {
            return Ok(());
        };
        let path = match named {
            Some(path) => {
                self.reply("150 Ok to send data.")?;
                path
            }
            None if self.shared.script.stou_per_session => {
                self.stou_seq += 1;
                let path = join(&self.cwd, &format!("stou.{}", self.stou_seq));
                self.reply(&format!("150 FILE: {}", basename(&path)))?;
                path
            }
            None => {
                let path = self.unique_name();
                self.reply(&format!("150 FILE: {}", basename(&path)))?;
                path
            }
        };
        let done = if verb == "STOU" {
            format!(
                "226 Transfer complete (unique file name: {}).",
                basename(&path)
            )
        } else {
            "226 Transfer complete.".to_string()
        };
        let shape = Shape::of(action);
        let (bytes, pump) = self.pump_in(
            &data,
            !matches!(shape, Shape::Whole { .. } | Shape::WholeThenSilence),
        )?;
        let renames = verb == "STOU" && self.shared.script.stou_per_session;
        self.shared.update(|s| {
            let mut path = path.clone();
            if renames && s.files.contains_key(&path) {
                let base = path.clone();
                path = (1..)
                    .map(|n| format!("{base}.{n}"))
                    .find(|p| !s.files.contains_key(p))
                    .unwrap_or(base);
            }
            let file = s.files.entry(path.clone()).or_default();
            if !append {
                file.truncate(usize::try_from(rest).unwrap_or(usize::MAX));
            }
            file.extend(bytes);
            add_parents(&mut s.dirs, &path);
        });
        self.finish(data, pump, shape, &done)
    }

    /// A new name in the current directory for STOU, reserved (as a real server creates the
    /// file at once).
    fn unique_name(&self) -> String {
        self.shared.update(|s| loop {
            s.unique += 1;
            let candidate = join(&self.cwd, &format!("stou.{}", s.unique));
            if !s.files.contains_key(&candidate) {
                s.files.insert(candidate.clone(), Vec::new());
                break candidate;
            }
        })
    }

    /// Sends `bytes` over `data` as `action` shapes it, then the final reply.
    fn send_data(&mut self, data: TcpStream, bytes: &[u8], action: &Action, done: &str) -> Step {
        let shape = Shape::of(action);
        let bytes = match shape {
            Shape::Whole { .. } | Shape::WholeThenSilence => bytes,
            _ => &bytes[..bytes.len() / 2],
        };
        let pump = self.pump_out(&data, bytes)?;
        self.finish(data, pump, shape, done)
    }

    /// Ends a transfer whose data went as far as `pump` says.
    fn finish(&mut self, data: TcpStream, pump: Pump, shape: Shape, done: &str) -> Step {
        match (pump, shape) {
            (Pump::Aborted, _) => {
                drop(data);
                match self.shared.action("ABOR") {
                    Action::Default => {
                        self.reply("426 Connection closed; transfer aborted.\n226 ABOR successful.")
                    }
                    other => self.perform(other, "ABOR", ""),
                }
            }
            (_, Shape::Abort(reply)) => {
                let _ = self.reply(&reply);
                Err(Gone)
            }
            (_, Shape::Stall) => {
                let _data = data;
                self.silence()
            }
            (_, Shape::Drop(reply)) => {
                drop(data);
                self.reply(&reply)
            }
            (Pump::Done, Shape::WholeThenSilence) => {
                drop(data);
                self.silence()
            }
            (Pump::Failed, Shape::Whole { .. } | Shape::WholeThenSilence) => {
                drop(data);
                self.reply("426 Failure on the data connection.")
            }
            (Pump::Done, Shape::Whole { final_reply }) => {
                drop(data);
                self.reply(final_reply.as_deref().unwrap_or(done))
            }
        }
    }

    /// The data connection the last PASV/EPSV/PORT/EPRT prepared; None after a 425.
    fn open_data(&mut self) -> std::result::Result<Option<TcpStream>, Gone> {
        let timeout = self.shared.timeout();
        let stream = match std::mem::replace(&mut self.data, Data::None) {
            Data::None => {
                self.reply("425 Use PORT or PASV first.")?;
                return Ok(None);
            }
            Data::Passive(listener) => {
                let deadline = Instant::now() + timeout;
                loop {
                    match wait_fd(
                        listener.as_raw_fd(),
                        libc::POLLIN,
                        &self.shared.stop,
                        Some(deadline),
                    ) {
                        Ok(Wait::Ready) => {}
                        Ok(Wait::Stopped) => return Err(Gone),
                        Ok(Wait::TimedOut) | Err(_) => break None,
                    }
                    match listener.accept() {
                        Ok((stream, from)) => {
                            self.shared.update(|s| s.observed.data_from.push(from));
                            if self.shared.script.refuse_foreign_data && from.ip() != self.peer.ip()
                            {
                                drop(stream);
                                self.reply("425 Security: Bad IP connecting.")?;
                                return Ok(None);
                            }
                            break Some(stream);
                        }
                        Err(e) if is_transient_accept_error(&e) => continue,
                        Err(_) => break None,
                    }
                }
            }
            Data::Active(to) => {
                let from = IpAddr::V4(self.shared.script.host);
                match connect_from(from, to.into(), timeout) {
                    Ok(stream) => {
                        self.shared
                            .update(|s| s.observed.data_to.push(SocketAddr::V4(to)));
                        Some(stream)
                    }
                    Err(_) => None,
                }
            }
        };
        match stream.map(|s| s.set_nonblocking(true).map(|()| s)) {
            Some(Ok(stream)) => Ok(Some(stream)),
            _ => {
                self.reply("425 Failed to establish connection.")?;
                Ok(None)
            }
        }
    }

    fn pump_out(&mut self, data: &TcpStream, bytes: &[u8]) -> std::result::Result<Pump, Gone> {
        let mut sent = 0;
        let mut deadline = Instant::now() + self.shared.timeout();
        while sent < bytes.len() {
            match self.wait_transfer(data, libc::POLLOUT, deadline)? {
                Event::Control => {
                    if self.abor_arrived()? {
                        return Ok(Pump::Aborted);
                    }
                }
                Event::TimedOut => return Ok(Pump::Failed),
                Event::Data => match (&*data).write(&bytes[sent..]) {
                    Ok(0) => return Ok(Pump::Failed),
                    Ok(n) => {
                        sent += n;
                        deadline = Instant::now() + self.shared.timeout();
                    }
                    Err(e) if is_retry(&e) => {}
                    Err(_) => return Ok(Pump::Failed),
                },
            }
        }
        Ok(Pump::Done)
    }

    /// Receives until EOF, or only the first chunk.
    fn pump_in(
        &mut self,
        data: &TcpStream,
        first_chunk_only: bool,
    ) -> std::result::Result<(Vec<u8>, Pump), Gone> {
        let mut received = Vec::new();
        let mut buf = vec![0; 64 * 1024];
        let mut deadline = Instant::now() + self.shared.timeout();
        loop {
            match self.wait_transfer(data, libc::POLLIN, deadline)? {
                Event::Control => {
                    if self.abor_arrived()? {
                        return Ok((received, Pump::Aborted));
                    }
                }
                Event::TimedOut => return Ok((received, Pump::Failed)),
                Event::Data => match (&*data).read(&mut buf) {
                    Ok(0) => return Ok((received, Pump::Done)),
                    Ok(n) => {
                        received.extend_from_slice(&buf[..n]);
                        if first_chunk_only {
                            return Ok((received, Pump::Done));
                        }
                        deadline = Instant::now() + self.shared.timeout();
                    }
                    Err(e) if is_retry(&e) => {}
                    Err(_) => return Ok((received, Pump::Failed)),
                },
            }
        }
    }

    /// Waits for the data connection to be ready for `events`, or for a command.
    fn wait_transfer(
        &self,
        data: &TcpStream,
        events: libc::c_short,
        deadline: Instant,
    ) -> std::result::Result<Event, Gone> {
        let mut fds = [
            pollfd(self.shared.stop.as_raw_fd(), libc::POLLIN),
            pollfd(self.ctrl.as_raw_fd(), libc::POLLIN),
            pollfd(data.as_raw_fd(), events),
        ];
        poll_until(&mut fds, Some(deadline)).map_err(|_| Gone)?;
        if fds[0].revents != 0 {
            Err(Gone)
        } else if fds[1].revents != 0 {
            Ok(Event::Control)
        } else if fds[2].revents != 0 {
            Ok(Event::Data)
        } else {
            Ok(Event::TimedOut)
        }
    }

    /// Reads what the control connection has during a transfer: true at ABOR; other
    /// commands wait until the transfer is over.
    fn abor_arrived(&mut self) -> std::result::Result<bool, Gone> {
        self.read_ctrl()?;
        while let Some(line) = self.take_line() {
            if split_command(&line).0 == "ABOR" {
                return Ok(true);
            }
            self.pending.push_back(line);
        }
        Ok(false)
    }

    /// The next command line (recorded as it is read).
    fn next_line(&mut self) -> std::result::Result<Vec<u8>, Gone> {
        if let Some(line) = self.pending.pop_front() {
            return Ok(line);
        }
        loop {
            if let Some(line) = self.take_line() {
                return Ok(line);
            }
            match wait_fd(self.ctrl.as_raw_fd(), libc::POLLIN, &self.shared.stop, None) {
                Ok(Wait::Ready) => self.read_ctrl()?,
                _ => return Err(Gone),
            }
        }
    }

    fn read_ctrl(&mut self) -> Step {
        let mut buf = [0; 4096];
        match (&self.ctrl).read(&mut buf) {
            Ok(0) => Err(Gone),
            Ok(n) => {
                self.inbuf.extend_from_slice(&buf[..n]);
                Ok(())
            }
            Err(e) if is_retry(&e) => Ok(()),
            Err(_) => Err(Gone),
        }
    }

    /// A complete line from the input buffer, recorded; an overlong one is cut.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let mut line: Vec<u8> = match self.inbuf.iter().position(|&b| b == b'\n') {
            Some(end) => self.inbuf.drain(..=end).collect(),
            None if self.inbuf.len() > MAX_COMMAND => std::mem::take(&mut self.inbuf),
            None => return None,
        };
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        let shown = match split_command(&line).0.as_str() {
            "PASS" => "PASS ****".to_string(),
            _ => String::from_utf8_lossy(&line).into_owned(),
        };
        let connection = self.id;
        self.shared.update(|s| {
            s.observed.commands.push(Command {
                connection,
                line: shown,
            })
        });
        Some(line)
    }

    fn reply(&mut self, text: &str) -> Step {
        let mut bytes = Vec::with_capacity(text.len() + 2);
        for line in text.split('\n') {
            bytes.extend_from_slice(line.strip_suffix('\r').unwrap_or(line).as_bytes());
            bytes.extend_from_slice(b"\r\n");
        }
        self.write(&bytes)
    }

    /// Writes all of `bytes` to the control connection, unless a write stalls for the data
    /// timeout, the client goes away or the server stops.
    fn write(&mut self, mut bytes: &[u8]) -> Step {
        let deadline = Instant::now() + self.shared.timeout();
        while !bytes.is_empty() {
            match (&self.ctrl).write(bytes) {
                Ok(0) => return Err(Gone),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if is_retry(&e) => {
                    match wait_fd(
                        self.ctrl.as_raw_fd(),
                        libc::POLLOUT,
                        &self.shared.stop,
                        Some(deadline),
                    ) {
                        Ok(Wait::Ready) => {}
                        _ => return Err(Gone),
                    }
                }
                Err(_) => return Err(Gone),
            }
        }
        Ok(())
    }

    fn path(&self, arg: &str) -> String {
        resolve(&self.cwd, arg)
    }
}

enum Kind {
    File(usize),
    Dir,
}

fn is_retry(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
}

enum Wait {
    Ready,
    Stopped,
    TimedOut,
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Waits until `fd` is ready for `events` (or fails), the server stops, or `deadline`. A
/// negative `fd` waits for the stop signal or the deadline only.
fn wait_fd(
    fd: RawFd,
    events: libc::c_short,
    stop: &UnixStream,
    deadline: Option<Instant>,
) -> io::Result<Wait> {
    let mut fds = [pollfd(stop.as_raw_fd(), libc::POLLIN), pollfd(fd, events)];
    poll_until(&mut fds, deadline)?;
    Ok(if fds[0].revents != 0 {
        Wait::Stopped
    } else if fds[1].revents != 0 {
        Wait::Ready
    } else {
        Wait::TimedOut
    })
}

/// poll(2) until something is ready or `deadline` passes (then every `revents` is 0).
fn poll_until(fds: &mut [libc::pollfd], deadline: Option<Instant>) -> io::Result<()> {
    loop {
        let timeout = match deadline {
            None => -1,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                // Rounded up, so that a timeout means the deadline has passed.
                i32::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
            }
        };
        for fd in fds.iter_mut() {
            fd.revents = 0;
        }
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` is a valid, exclusively borrowed array of `nfds` pollfd structs.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout) };
        if rc >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The verb (upper case, without any Telnet IP/Synch bytes before it) and the argument.
fn split_command(line: &[u8]) -> (String, String) {
    let start = line
        .iter()
        .position(u8::is_ascii_alphabetic)
        .unwrap_or(line.len());
    let text = String::from_utf8_lossy(&line[start..]);
    match text.split_once(' ') {
        Some((verb, arg)) => (verb.to_ascii_uppercase(), arg.to_string()),
        None => (text.to_ascii_uppercase(), String::new()),
    }
}

/// `arg` taken from directory `cwd`, as an absolute path without `.`/`..`/empty parts
/// (`..` stops at the root).
fn resolve(cwd: &str, arg: &str) -> String {
    let mut parts: Vec<&str> = if arg.starts_with('/') {
        Vec::new()
    } else {
        cwd.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in arg.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

fn join(dir: &str, name: &str) -> String {
    resolve(dir, name)
}

/// The directory holding `path`; None for the root.
fn parent(path: &str) -> Option<&str> {
    match path.rsplit_once('/') {
        _ if path == "/" => None,
        Some(("", _)) => Some("/"),
        Some((dir, _)) => Some(dir),
        None => None,
    }
}

fn basename(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, name)| name)
}

fn add_parents(dirs: &mut BTreeSet<String>, path: &str) {
    let mut p = path;
    while let Some(dir) = parent(p) {
        dirs.insert(dir.to_string());
        p = dir;
    }
}

fn parse_port(arg: &str) -> Option<SocketAddrV4> {
    let nums: Vec<u8> = arg
        .trim()
        .split(',')
        .map(|n| n.trim().parse().ok())
        .collect::<Option<_>>()?;
    let [a, b, c, d, p1, p2]: [u8; 6] = nums.try_into().ok()?;
    Some(SocketAddrV4::new(
        Ipv4Addr::new(a, b, c, d),
        u16::from(p1) << 8 | u16::from(p2),
    ))
}

enum Eprt {
    /// A network protocol other than IPv4.
    Family,
    Syntax,
}

/// `|1|132.235.1.2|6275|` (RFC 2428; any delimiter).
fn parse_eprt(arg: &str) -> std::result::Result<SocketAddrV4, Eprt> {
    let mut chars = arg.chars();
    let delim = chars.next().ok_or(Eprt::Syntax)?;
    let fields: Vec<&str> = chars.as_str().split(delim).collect();
    let [proto, host, port, ""] = fields[..] else {
        return Err(Eprt::Syntax);
    };
    match proto {
        "1" => {}
        "2" => return Err(Eprt::Family),
        _ => return Err(Eprt::Syntax),
    }
    let ip: Ipv4Addr = host.parse().map_err(|_| Eprt::Syntax)?;
    let port: u16 = port.parse().map_err(|_| Eprt::Syntax)?;
    Ok(SocketAddrV4::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_paths() {
        assert_eq!(resolve("/", "a.bin"), "/a.bin");
        assert_eq!(resolve("/in", "a.bin"), "/in/a.bin");
        assert_eq!(resolve("/in", "/out/a"), "/out/a");
        assert_eq!(resolve("/in/sub", "../../../etc"), "/etc");
        assert_eq!(resolve("/in", ""), "/in");
        assert_eq!(resolve("/in", ".."), "/");
        assert_eq!(parent("/in/a"), Some("/in"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
    }

    #[test]
    fn parses_port_and_eprt() {
        assert_eq!(
            parse_port("127,0,0,2,78,41"),
            Some("127.0.0.2:20009".parse().unwrap())
        );
        assert_eq!(parse_port("127,0,0,2,78"), None);
        assert!(matches!(
            parse_eprt("|1|127.0.0.3|20208|"),
            Ok(a) if a == "127.0.0.3:20208".parse().unwrap()
        ));
        assert!(matches!(parse_eprt("|2|::1|20208|"), Err(Eprt::Family)));
        assert!(matches!(parse_eprt("|1|127.0.0.3|"), Err(Eprt::Syntax)));
    }

    #[test]
    fn splits_commands_after_telnet_bytes() {
        assert_eq!(
            split_command(b"\xff\xf4\xff\xf2ABOR"),
            ("ABOR".to_string(), String::new())
        );
        assert_eq!(
            split_command(b"stor my file.bin"),
            ("STOR".to_string(), "my file.bin".to_string())
        );
    }

    #[test]
    fn sequences_resolve_by_call_number() {
        let seq = Action::Sequence(vec![Action::Close, Action::reply("1")]);
        assert_eq!(seq.resolve(0), Action::Close);
        assert_eq!(seq.resolve(1), Action::reply("1"));
        assert_eq!(seq.resolve(2), Action::Default);
    }

    #[test]
    fn misplaced_actions_are_refused() {
        assert!(Action::PasvPort(21).check("EPSV").is_ok());
        assert!(Action::PasvPort(21).check("NOOP").is_err());
        assert!(Action::PasvForeignHost { host: [1, 2, 3, 4] }
            .check("EPSV")
            .is_err());
        assert!(Action::ServeData(vec![]).check("STOR").is_err());
        assert!(Action::Sequence(vec![Action::StallMidTransfer])
            .check("")
            .is_err());
        assert!(Action::DropDataThen("550 x".into()).check("STOU").is_ok());
    }
}
