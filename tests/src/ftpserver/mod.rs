//! Real FTP servers for tests: vsftpd, proFTPD and Pure-FTPd, unpacked by `tests/install-deps`
//! under [`testdeps_prefix`](crate::testdeps_prefix), each started in the foreground as a
//! child process with a generated configuration in a temporary directory, and SIGKILLed with
//! every session process it forked on drop.
//!
//! Every server logs in [`FTP_USER`] with [`FTP_PASSWORD`], is chrooted to [`FtpServer::root`]
//! (so `/name` on the server is `root()/name`), listens on a free port of
//! [`FtpOptions::host`], offers its own range of passive ports, and writes a transfer log in
//! the standard xferlog format.
//!
//! How each logs in (see also `tests/install-deps`):
//! - vsftpd: the system account `bftp-ftp` through PAM service `bftp-test-vsftpd` (pam_unix),
//!   its password in SHA-512 crypt like the other two servers' files (quick to check);
//!   vsftpd has no other way to check a local password.
//! - proFTPD: `AuthOrder mod_auth_file.c` with a private AuthUserFile (no PAM), mapped to the
//!   uid/gid of `bftp-ftp`.
//! - Pure-FTPd: a private PureDB (`-l puredb:`) built with `pure-pw mkdb`, same uid/gid.

use std::fs::{self, OpenOptions};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::rawftp::RawFtp;

mod kill;
use kill::{freeze_tree, listening_socket, pidfd_signal, wait_bindable, wait_released};

/// The account every test server logs in (a real system account: vsftpd needs one).
pub const FTP_USER: &str = "bftp-ftp";
/// Its password, set by `tests/install-deps`.
pub const FTP_PASSWORD: &str = "bftp-test-pw";
/// crypt(3) of [`FTP_PASSWORD`] for the proFTPD and Pure-FTPd password files, made with
/// `openssl passwd -6 -salt bftptestsalt bftp-test-pw` (SHA-512 crypt: fast to check, unlike
/// the argon2 hash `pure-pw useradd` would make).
const FTP_PASSWORD_CRYPT: &str = "$6$bftptestsalt$1eMLw4PdsN3WqTc2lLCqQWm0t4ybuAPPxOWsAdUHbR8puJ8Df2nrKj3utxqHBtCJh2JQFQZad9IAWz9FddOVC1";
/// Written by `tests/install-deps` (PAM reads services only from /etc/pam.d).
const VSFTPD_PAM_SERVICE: &str = "bftp-test-vsftpd";
/// Passive ports per server by default: enough for several parallel transfers plus
/// TIME_WAIT leftovers.
const PASSIVE_PORTS: u16 = 32;
/// Attempts at a free control port when another process takes the probed one first.
const START_ATTEMPTS: usize = 5;
/// How long [`FtpServer::kill`] waits for the killed processes to be gone and for the
/// listening socket to be closed. SIGKILL is asynchronous: a killed process still has to be
/// scheduled to exit and release its files, which on a loaded machine takes from a few
/// milliseconds to (rarely) seconds.
const KILL_DEADLINE: Duration = Duration::from_secs(20);
/// How long [`FtpServer::restart`] waits for the control port to be bindable again.
const REBIND_DEADLINE: Duration = Duration::from_secs(20);
/// How often those waits look again.
const KILL_POLL: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerKind {
    Vsftpd,
    Proftpd,
    PureFtpd,
}

impl ServerKind {
    pub const ALL: [ServerKind; 3] = [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Vsftpd => "vsftpd",
            ServerKind::Proftpd => "proftpd",
            ServerKind::PureFtpd => "pure-ftpd",
        }
    }

    fn binary(self) -> PathBuf {
        let prefix = crate::testdeps_prefix();
        match self {
            ServerKind::Vsftpd => prefix.join("vsftpd/usr/sbin/vsftpd"),
            ServerKind::Proftpd => prefix.join("proftpd/usr/sbin/proftpd"),
            ServerKind::PureFtpd => prefix.join("pure-ftpd/usr/sbin/pure-ftpd"),
        }
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug)]
pub struct FtpOptions {
    /// Allow third-party transfers: a PORT naming another host than the client, and a passive
    /// data connection from another host than the client (vsftpd `port_promiscuous` and
    /// `pasv_promiscuous`, proFTPD `AllowForeignAddress on`, Pure-FTPd `-w`). When false, the
    /// server keeps its stock refusal of both.
    pub fxp: bool,
    /// Loopback address to listen on. The default, 127.0.0.2, differs from the address a local
    /// client connects from (127.0.0.1), so a server-to-server data connection is really
    /// "foreign" to both servers and their FXP checks take effect, as between real hosts.
    pub host: Ipv4Addr,
    /// How many passive ports the server offers (default 32). Many short transfers in a row
    /// need more: a port is busy while its last connection is in TIME_WAIT, and Pure-FTPd
    /// also admits at most half this many sessions at once.
    pub passive_ports: u16,
    /// Where the server's directory (configuration, root, logs) is made; default the
    /// system's temporary directory. The FXP benchmark puts it on a tmpfs.
    pub parent: Option<PathBuf>,
    /// Bytes per second a session may move (vsftpd `local_max_rate`), so that a copy lasts
    /// long enough to be watched. vsftpd only: another kind refuses to start with it.
    pub max_rate: Option<u64>,
    /// Explicit FTPS (AUTH TLS) with these certificates; `None`: no TLS at all.
    pub tls: Option<ServerTls>,
    /// proFTPD only: load mod_digest (Debian ships it, not loaded by default), which adds
    /// HASH (with OPTS HASH), XSHA256, XSHA1, XMD5, XCRC and friends to FEAT.
    pub digest: bool,
    /// proFTPD only: lines added to its configuration (`ShowSymlinks off`, for one).
    pub proftpd_extra: String,
    /// Pure-FTPd only: arguments added to its command line (`-L 100:5`, its listing cap).
    pub pure_ftpd_args: Vec<String>,
    /// vsftpd only: lines added to its configuration (`force_dot_files=YES`, `lock_upload_files=NO`).
    pub vsftpd_extra: String,
    /// Sessions one client address may hold at once (vsftpd `max_per_ip`, proFTPD
    /// `MaxClientsPerHost`, Pure-FTPd `-C`): one more is refused with the server's own "too
    /// many connections" reply. `None`: the server's default.
    pub max_sessions_per_client: Option<u32>,
}

/// A test server's TLS setup: its certificate and key (PEM files), the CA it trusts when it
/// is the TLS client of a data connection (proFTPD after SSCN ON), and whether it demands
/// TLS before USER and on every data connection.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// TLS demanded before USER (data connections stay optional): vsftpd
    /// `force_local_logins_ssl`, proFTPD `TLSRequired ctrl`, Pure-FTPd `--tls=2`.
    pub required: bool,
    /// Implicit FTPS (proFTPD `TLSOptions UseImplicitSSL`): TLS from the first byte.
    pub implicit: bool,
}

impl Default for FtpOptions {
    fn default() -> Self {
        FtpOptions {
            fxp: true,
            host: Ipv4Addr::new(127, 0, 0, 2),
            passive_ports: PASSIVE_PORTS,
            parent: None,
            max_rate: None,
            tls: None,
            digest: false,
            proftpd_extra: String::new(),
            pure_ftpd_args: Vec::new(),
            vsftpd_extra: String::new(),
            max_sessions_per_client: None,
        }
    }
}

/// Whether an xferlog line records an upload, a download or a deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `i`: a file came in (STOR, APPE, STOU).
    Incoming,
    /// `o`: a file went out (RETR).
    Outgoing,
    /// `d`: a file was deleted.
    Deleted,
}

/// One line of a server's transfer log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XferEntry {
    /// Path relative to the server root, with a leading `/` (`/dir/name`).
    pub path: String,
    pub bytes: u64,
    pub direction: Direction,
    /// `c` (complete) rather than `i` (incomplete).
    pub complete: bool,
    /// The line as the server wrote it.
    pub raw: String,
}

/// A running (or killed, see [`FtpServer::kill`]) FTP server.
pub struct FtpServer {
    kind: ServerKind,
    opts: FtpOptions,
    port: u16,
    passive: RangeInclusive<u16>,
    dir: tempfile::TempDir,
    root: PathBuf,
    uid: u32,
    gid: u32,
    child: Option<Child>,
}

impl FtpServer {
    /// Starts a server and returns once it has greeted a client with 220.
    pub fn start(kind: ServerKind, opts: FtpOptions) -> Result<FtpServer> {
        ensure!(
            crate::is_root(),
            "FTP test servers need root (they switch to {FTP_USER} after login)"
        );
        let binary = kind.binary();
        ensure!(
            binary.exists(),
            "{} missing: run tests/install-deps as root",
            binary.display()
        );
        if kind == ServerKind::Vsftpd {
            let pam = Path::new("/etc/pam.d").join(VSFTPD_PAM_SERVICE);
            ensure!(
                pam.exists(),
                "{} missing: run tests/install-deps as root",
                pam.display()
            );
        }
        let (uid, gid) = lookup_account(FTP_USER)?;
        let host = IpAddr::V4(opts.host);

        let prefix = format!("bftp-{}-", kind.name());
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix);
        let dir = match &opts.parent {
            Some(parent) => builder.tempdir_in(parent)?,
            None => builder.tempdir()?,
        };
        // The session runs as FTP_USER and must reach root/ through this directory.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
        let root = dir.path().join("root");
        fs::create_dir(&root)?;
        std::os::unix::fs::chown(&root, Some(uid), Some(gid))?;
        // vsftpd's unprivileged helper chroots here: must be empty and not writable by others.
        fs::create_dir(dir.path().join("empty"))?;

        let passive = crate::reserve_port_range(host, opts.passive_ports.max(2))?;
        let mut server = FtpServer {
            kind,
            opts,
            port: 0,
            passive,
            dir,
            root,
            uid,
            gid,
            child: None,
        };

        let mut errors = Vec::new();
        for _ in 0..START_ATTEMPTS {
            server.port = crate::reserve_free_port(host)?;
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.kill();
                    crate::release_ports([server.port]);
                    errors.push(format!("port {}: {e:#}", server.port));
                }
            }
        }
        server.port = 0;
        bail!(
            "{kind} did not start: {}\n{}",
            errors.join("; "),
            server.diagnostics()
        )
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    pub fn options(&self) -> &FtpOptions {
        &self.opts
    }

    pub fn host(&self) -> Ipv4Addr {
        self.opts.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.opts.host), self.port)
    }

    pub fn user(&self) -> &str {
        FTP_USER
    }

    pub fn password(&self) -> &str {
        FTP_PASSWORD
    }

    /// `ftp://user@host:port/path` (no password), for a path relative to the root.
    pub fn url(&self, path: &str) -> String {
        format!(
            "ftp://{}@{}:{}/{}",
            FTP_USER,
            self.opts.host,
            self.port,
            path.trim_start_matches('/')
        )
    }

    /// The directory the server serves as `/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The local path of `rel` (a server path like `/dir/name` or `dir/name`).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// Writes a file into the root, owned by the FTP account so the server may replace or
    /// delete it; creates missing parent directories the same way.
    pub fn put_file(&self, rel: &str, contents: &[u8]) -> Result<PathBuf> {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            self.mkdir_all(parent)?;
        }
        fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        std::os::unix::fs::chown(&path, Some(self.uid), Some(self.gid))?;
        Ok(path)
    }

    /// Creates a directory (and its parents) in the root, owned by the FTP account.
    pub fn mkdir(&self, rel: &str) -> Result<PathBuf> {
        let path = self.path(rel);
        self.mkdir_all(&path)?;
        Ok(path)
    }

    fn mkdir_all(&self, path: &Path) -> Result<()> {
        if path.is_dir() {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            self.mkdir_all(parent)?;
        }
        fs::create_dir(path).with_context(|| format!("creating {}", path.display()))?;
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))?;
        Ok(())
    }

    /// Reads a file from the root.
    pub fn read_file(&self, rel: &str) -> Result<Vec<u8>> {
        let path = self.path(rel);
        fs::read(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// The passive port range this server offers.
    pub fn passive_ports(&self) -> RangeInclusive<u16> {
        self.passive.clone()
    }

    /// The transfer log (standard xferlog format), kept across [`FtpServer::restart`].
    pub fn xferlog(&self) -> PathBuf {
        self.dir.path().join("xferlog")
    }

    /// The parsed transfer log. A server writes a line when a transfer ends, before it
    /// answers the next command on that session: after any reply that follows the final 226
    /// (a NOOP will do), the line is there.
    pub fn xferlog_entries(&self) -> Result<Vec<XferEntry>> {
        let text = match fs::read_to_string(self.xferlog()) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).context("reading the xferlog"),
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| parse_xferlog_line(l, &self.root))
            .collect()
    }

    /// The server's own log of the session: vsftpd's protocol log (commands and replies),
    /// proFTPD's ExtendedLog (commands and reply codes; its system log is in
    /// [`FtpServer::output_file`]), or for Pure-FTPd, which logs only to syslog, the captured
    /// stdout/stderr.
    pub fn log_file(&self) -> PathBuf {
        match self.kind {
            ServerKind::Vsftpd | ServerKind::Proftpd => self.dir.path().join("server.log"),
            ServerKind::PureFtpd => self.output_file(),
        }
    }

    /// Captured stdout and stderr of the server process.
    pub fn output_file(&self) -> PathBuf {
        self.dir.path().join("output.log")
    }

    /// Connects and logs in.
    pub fn login(&self) -> Result<RawFtp> {
        let (mut ftp, greeting) = RawFtp::connect(self.addr())?;
        ensure!(greeting.code == 220, "{} greeted {greeting:?}", self.kind);
        ftp.login(FTP_USER, FTP_PASSWORD)?;
        Ok(ftp)
    }

    /// Whether the server process is still alive.
    /// The server's (master) process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_running(&self) -> bool {
        self.child.as_ref().is_some_and(|c| !crate::has_exited(c))
    }

    /// Simulates a crash: SIGKILL to the server and every session it forked. Open control
    /// and data connections see a reset or EOF. Idempotent.
    ///
    /// Returns once every killed process is really gone (exited, not merely signalled) and
    /// the listening socket is closed, so that nothing answers on the port any more and
    /// [`FtpServer::restart`] can bind it again (for at most 20 s; past that, a warning
    /// names what is left). This matters for Pure-FTPd: its session processes (and
    /// their privilege-separation helpers) inherit the listening socket, so the socket
    /// outlives the server process for as long as the last killed session takes to exit.
    pub fn kill(&mut self) {
        if let Err(e) = self.kill_and_wait() {
            eprintln!("warning: killing {} on {}: {e:#}", self.kind, self.addr());
        }
    }

    /// Starts the server again on the same port with the same root, users and logs (killing
    /// it first if it still runs).
    pub fn restart(&mut self) -> Result<()> {
        let (kind, port) = (self.kind, self.port);
        let context = || format!("restarting {kind} on port {port}");
        self.kill_and_wait().with_context(context)?;
        wait_bindable(self.addr(), Instant::now() + REBIND_DEADLINE).with_context(context)?;
        self.spawn_and_wait().with_context(context)
    }

    /// [`FtpServer::kill`], with what is still alive past the deadline as an error.
    fn kill_and_wait(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + KILL_DEADLINE;
        let Ok(root) = libc::pid_t::try_from(child.id()) else {
            crate::kill_tree(&mut child);
            return Ok(());
        };
        // Frozen, the tree can neither fork nor exit, and the listening socket is still
        // open to be found.
        let tree = freeze_tree(root);
        let listener = listening_socket(&tree, self.addr());
        // Each frozen process gets its SIGKILL through its own pidfd. kill_tree alone would
        // miss some: it finds the tree anew by parentage, and a process whose parent had
        // exited (a session that had just ended, reaped by the root in a SIGCHLD handler
        // that ran before its SIGSTOP took effect) has been handed to init by then. Stopped
        // and forgotten, it would hold the listening socket forever.
        for p in &tree {
            if let Some(pidfd) = &p.pidfd {
                pidfd_signal(pidfd, libc::SIGKILL);
            }
        }
        // Reaps the root (and kills whatever else it still finds).
        crate::kill_tree(&mut child);
        wait_released(&tree, listener, deadline)
    }

    /// Recent output of the server's logs, for error messages.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for path in [self.output_file(), self.dir.path().join("server.log")] {
            if let Ok(text) = fs::read_to_string(&path) {
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                out.push_str(&format!("--- {}\n", path.display()));
                for line in tail.into_iter().rev() {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    fn spawn_and_wait(&mut self) -> Result<()> {
        let token = crate::unique_token(self.kind.name());
        let mut cmd = self.command(&token)?;
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.output_file())?;
        cmd.current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {:?}", cmd.get_program()))?;
        let addr = self.addr();
        let child = self.child.insert(child);
        if self.opts.tls.as_ref().is_some_and(|t| t.implicit) {
            // Implicit FTPS greets inside TLS: the listener accepting is the sign of life
            // (the port was reserved for this server, so no neighbour holds it).
            return crate::wait_for_listener(child, addr).with_context(|| {
                format!("{} on {}\n{}", self.kind, self.addr(), self.diagnostics())
            });
        }
        crate::wait_for_greeting(child, addr, &token)
            .with_context(|| format!("{} on {}\n{}", self.kind, self.addr(), self.diagnostics()))
    }

    /// Writes the configuration for the current port and returns the command that runs it.
    fn command(&self, token: &str) -> Result<Command> {
        self.check_options()?;
        let d = self.dir.path();
        let passive = (*self.passive.start(), *self.passive.end());
        match self.kind {
            ServerKind::Vsftpd => self.vsftpd_command(d, token, passive),
            _ if self.opts.max_rate.is_some() => {
                anyhow::bail!("max_rate is only for vsftpd, not {}", self.kind)
            }
            ServerKind::Proftpd => self.proftpd_command(d, token, passive),
            ServerKind::PureFtpd => self.pure_ftpd_command(d, token, passive),
        }
    }

    /// Refuses an option meant for another server.
    fn check_options(&self) -> Result<()> {
        ensure!(
            self.opts.proftpd_extra.is_empty() || self.kind == ServerKind::Proftpd,
            "proftpd_extra is only for proFTPD, not {}",
            self.kind
        );
        ensure!(
            self.opts.pure_ftpd_args.is_empty() || self.kind == ServerKind::PureFtpd,
            "pure_ftpd_args is only for Pure-FTPd, not {}",
            self.kind
        );
        ensure!(
            self.opts.vsftpd_extra.is_empty() || self.kind == ServerKind::Vsftpd,
            "vsftpd_extra is only for vsftpd, not {}",
            self.kind
        );
        ensure!(
            !self.opts.digest || self.kind == ServerKind::Proftpd,
            "digest is only for proFTPD, not {}",
            self.kind
        );
        Ok(())
    }

    /// vsftpd: its configuration file in `d`, passive ports `lo..=hi`.
    fn vsftpd_command(&self, d: &Path, token: &str, (lo, hi): (u16, u16)) -> Result<Command> {
        let promiscuous = if self.opts.fxp { "YES" } else { "NO" };
        let conf = d.join("vsftpd.conf");
        fs::write(
            &conf,
            format!(
                "\
# Foreground, one listener, no syslog.
listen=YES
listen_ipv6=NO
listen_address={host}
listen_port={port}
background=NO
ftpd_banner={token}
# Local logins only, through the PAM service written by tests/install-deps.
anonymous_enable=NO
local_enable=YES
pam_service_name={VSFTPD_PAM_SERVICE}
userlist_enable=NO
tcp_wrappers=NO
{ssl}
write_enable=YES
local_umask=022
chroot_local_user=YES
allow_writeable_chroot=YES
local_root={root}
secure_chroot_dir={empty}
nopriv_user=nobody
# seccomp and namespaces fail in containers; isolate_network would also forbid FXP.
seccomp_sandbox=NO
isolate=NO
isolate_network=NO
pasv_enable=YES
pasv_min_port={lo}
pasv_max_port={hi}
port_enable=YES
# Port 20 would be shared by every test server on the host.
connect_from_port_20=NO
port_promiscuous={promiscuous}
pasv_promiscuous={promiscuous}
delay_failed_login=0
xferlog_enable=YES
xferlog_std_format=YES
xferlog_file={xferlog}
dual_log_enable=YES
vsftpd_log_file={log}
log_ftp_protocol=YES
syslog_enable=NO
local_max_rate={rate}
{per_client}
{extra}",
                per_client = self
                    .opts
                    .max_sessions_per_client
                    .map(|n| format!("max_per_ip={n}"))
                    .unwrap_or_default(),
                extra = self.opts.vsftpd_extra,
                rate = self.opts.max_rate.unwrap_or(0),
                ssl = self.vsftpd_tls(),
                host = self.opts.host,
                port = self.port,
                root = self.root.display(),
                empty = d.join("empty").display(),
                xferlog = self.xferlog().display(),
                log = d.join("server.log").display(),
            ),
        )?;
        let mut cmd = Command::new(self.kind.binary());
        cmd.arg(conf);
        Ok(cmd)
    }

    /// proFTPD: its configuration, users and groups in `d`, passive ports `lo..=hi`.
    fn proftpd_command(&self, d: &Path, token: &str, (lo, hi): (u16, u16)) -> Result<Command> {
        let passwd = d.join("passwd");
        fs::write(
            &passwd,
            format!(
                "{FTP_USER}:{FTP_PASSWORD_CRYPT}:{}:{}::{}:/usr/sbin/nologin\n",
                self.uid,
                self.gid,
                self.root.display()
            ),
        )?;
        fs::set_permissions(&passwd, fs::Permissions::from_mode(0o600))?;
        let group = d.join("group");
        fs::write(&group, format!("{FTP_USER}:x:{}:\n", self.gid))?;
        let foreign = if self.opts.fxp { "on" } else { "off" };
        let digest = if self.opts.digest {
            format!(
                "ModulePath {}\nLoadModule mod_digest.c\n",
                crate::testdeps_prefix()
                    .join("proftpd/usr/lib/proftpd")
                    .display()
            )
        } else {
            String::new()
        };
        let conf = d.join("proftpd.conf");
        fs::write(
            &conf,
            format!(
                "\
ServerType standalone
ServerIdent on \"{token}\"
UseIPv6 off
DefaultAddress {host}
SocketBindTight on
Port {port}
PassivePorts {lo} {hi}
AllowForeignAddress {foreign}
User nobody
Group nogroup
Umask 022
MaxInstances 100
UseReverseDNS off
WtmpLog off
DelayEngine off
ScoreboardFile {d}/scoreboard
PidFile {d}/proftpd.pid
# With -n, proFTPD's own log goes to stderr (output.log); this one has every command.
ExtendedLog {d}/server.log ALL
TransferLog {xferlog}
# Virtual login from a private file, no PAM.
AuthOrder mod_auth_file.c
AuthUserFile {passwd}
AuthGroupFile {group}
RequireValidShell off
DefaultRoot ~
AllowOverwrite on
{tls}
{digest}
{per_client}
{extra}",
                per_client = self
                    .opts
                    .max_sessions_per_client
                    .map(|n| format!("MaxClientsPerHost {n}"))
                    .unwrap_or_default(),
                extra = self.opts.proftpd_extra,
                tls = self.proftpd_tls(),
                host = self.opts.host,
                port = self.port,
                d = d.display(),
                xferlog = self.xferlog().display(),
                passwd = passwd.display(),
                group = group.display(),
            ),
        )?;
        let mut cmd = Command::new(self.kind.binary());
        cmd.arg("-n").arg("-c").arg(conf);
        Ok(cmd)
    }

    /// Pure-FTPd: its user database, greeting and TLS file in `d`, passive ports `lo..=hi`.
    fn pure_ftpd_command(&self, d: &Path, token: &str, (lo, hi): (u16, u16)) -> Result<Command> {
        let passwd = d.join("pureftpd.passwd");
        fs::write(
            &passwd,
            format!(
                "{FTP_USER}:{FTP_PASSWORD_CRYPT}:{}:{}::{}/./::::::::::::\n",
                self.uid,
                self.gid,
                self.root.display()
            ),
        )?;
        let pdb = d.join("pureftpd.pdb");
        let pure_pw = crate::testdeps_prefix().join("pure-ftpd/usr/bin/pure-pw");
        let out = Command::new(&pure_pw)
            .arg("mkdb")
            .arg(&pdb)
            .arg("-f")
            .arg(&passwd)
            .output()
            .with_context(|| format!("running {}", pure_pw.display()))?;
        ensure!(
            out.status.success(),
            "pure-pw mkdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The greeting shows this "fortune" file: the only way to put a token in it.
        let fortune = d.join("fortune");
        fs::write(&fortune, format!("{token}\n"))?;
        let mut cmd = Command::new(self.kind.binary());
        cmd.arg("-S")
            .arg(format!("{},{}", self.opts.host, self.port))
            .arg("-4")
            .arg("-l")
            .arg(format!("puredb:{}", pdb.display()))
            .arg("-p")
            .arg(format!("{lo}:{hi}"))
            .args(["-E", "-A", "-H", "-c", "100", "-C", "100"])
            .arg("-O")
            .arg(format!("xferlog:{}", self.xferlog().display()))
            .arg("-g")
            .arg(d.join("pure-ftpd.pid"))
            .arg("-F")
            .arg(fortune);
        if self.opts.fxp {
            cmd.arg("-w");
        }
        if let Some(n) = self.opts.max_sessions_per_client {
            cmd.arg("-C").arg(n.to_string());
        }
        cmd.args(&self.opts.pure_ftpd_args);
        if let Some(tls) = &self.opts.tls {
            // One PEM file with the key and the certificate; 1: TLS allowed, 2:
            // required for the login.
            let pem = d.join("pure-ftpd.pem");
            let mut both = fs::read(&tls.key)?;
            both.extend(fs::read(&tls.cert)?);
            fs::write(&pem, both)?;
            fs::set_permissions(&pem, fs::Permissions::from_mode(0o600))?;
            cmd.arg(format!("--tls={}", if tls.required { 2 } else { 1 }))
                .arg(format!("--certfile={}", pem.display()));
        }
        Ok(cmd)
    }
}

impl FtpServer {
    fn vsftpd_tls(&self) -> String {
        let Some(tls) = &self.opts.tls else {
            return "ssl_enable=NO".into();
        };
        let force = if tls.required { "YES" } else { "NO" };
        format!(
            "\
ssl_enable=YES
rsa_cert_file={cert}
rsa_private_key_file={key}
ssl_tlsv1=YES
ssl_sslv2=NO
ssl_sslv3=NO
# Without this vsftpd refuses a data connection whose TLS session is not the control's.
require_ssl_reuse=NO
# proFTPD as TLS client of an upload ends it with a TCP close, no TLS close_notify; vsftpd
# then answers 426 unless a plain end of the socket may end a TLS upload.
strict_ssl_read_eof=NO
ssl_ciphers=HIGH
force_local_logins_ssl={force}
force_local_data_ssl=NO",
            cert = tls.cert.display(),
            key = tls.key.display(),
        )
    }

    fn proftpd_tls(&self) -> String {
        let Some(tls) = &self.opts.tls else {
            return String::new();
        };
        let modules = crate::testdeps_prefix().join("proftpd/usr/lib/proftpd");
        let implicit = if tls.implicit { " UseImplicitSSL" } else { "" };
        format!(
            "\
ModulePath {modules}
LoadModule mod_tls.c
TLSEngine on
TLSLog {log}
# TLS 1.2 only: measured on Debian 12, vsftpd 3.0.3 answers 426 (Failure reading network
# stream) to an upload whose TLS client is proFTPD (SSCN ON) speaking TLS 1.3; with 1.2 it
# works. (The other direction, and every other pair, work with 1.3.)
TLSProtocol TLSv1.2
TLSRSACertificateFile {cert}
TLSRSACertificateKeyFile {key}
TLSCACertificateFile {ca}
TLSVerifyClient off
TLSRequired {required}
# As TLS server of a data connection from another server (FXP), whose TLS session is not
# the control connection's.
TLSOptions NoSessionReuseRequired{implicit}",
            modules = modules.display(),
            log = self.dir.path().join("tls.log").display(),
            cert = tls.cert.display(),
            key = tls.key.display(),
            ca = tls.ca.display(),
            required = if tls.required { "ctrl" } else { "off" },
        )
    }
}

impl Drop for FtpServer {
    fn drop(&mut self) {
        self.kill();
        crate::release_ports(self.passive.clone());
        if self.port != 0 {
            crate::release_ports([self.port]);
        }
    }
}

impl std::fmt::Debug for FtpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtpServer")
            .field("kind", &self.kind)
            .field("addr", &self.addr())
            .field("root", &self.root)
            .field("fxp", &self.opts.fxp)
            .finish()
    }
}

/// uid and gid of a system account, from /etc/passwd.
fn lookup_account(name: &str) -> Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd")?;
    for line in passwd.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() >= 4 && fields[0] == name {
            return Ok((fields[2].parse()?, fields[3].parse()?));
        }
    }
    bail!("account {name} missing: run tests/install-deps as root")
}

/// One xferlog line: `Mon Nov 30 11:41:29 2026 1 127.0.0.1 12 /hello.txt b _ i r bftp-ftp ftp
/// 0 * c`, i.e. a 5-field date, seconds, host, bytes, file name (which may contain spaces),
/// then 9 fields: type, action, direction, access mode, user, service, auth method,
/// auth user, completion. vsftpd logs the path inside its chroot, proFTPD and Pure-FTPd the
/// real path: both are made relative to `root`.
fn parse_xferlog_line(line: &str, root: &Path) -> Result<XferEntry> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    ensure!(fields.len() >= 18, "short xferlog line {line:?}");
    let tail = &fields[fields.len() - 9..];
    let bytes = fields[7]
        .parse()
        .with_context(|| format!("xferlog size in {line:?}"))?;
    let name = fields[8..fields.len() - 9].join(" ");
    let root = root.to_string_lossy();
    let path = match name.strip_prefix(root.as_ref()) {
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ => name,
    };
    let direction = match tail[2] {
        "i" => Direction::Incoming,
        "o" => Direction::Outgoing,
        "d" => Direction::Deleted,
        other => bail!("xferlog direction {other:?} in {line:?}"),
    };
    Ok(XferEntry {
        path,
        bytes,
        direction,
        complete: tail[8] == "c",
        raw: line.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_xferlog_lines_of_each_server() {
        let root = Path::new("/tmp/bftp-proftpd-x/root");
        let vsftpd =
            "Mon Nov 30 11:41:29 2026 1 127.0.0.1 12 /hello.txt b _ i r bftp-ftp ftp 0 * c";
        let e = parse_xferlog_line(vsftpd, root).unwrap();
        assert_eq!(e.path, "/hello.txt");
        assert_eq!(e.bytes, 12);
        assert_eq!(e.direction, Direction::Incoming);
        assert!(e.complete);

        let proftpd = "Mon Nov 30 11:41:37 2026 0 127.0.0.1 12 /tmp/bftp-proftpd-x/root/a b.txt b _ o r bftp-ftp ftp 0 * i";
        let e = parse_xferlog_line(proftpd, root).unwrap();
        assert_eq!(e.path, "/a b.txt");
        assert_eq!(e.direction, Direction::Outgoing);
        assert!(!e.complete);

        assert!(parse_xferlog_line("Mon Nov 30 11:41:37 2026 0", root).is_err());
    }
}
