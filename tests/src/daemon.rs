//! Starting the real `bftpd` binary with a generated config, and running the real `bftp`
//! against it, as root or as another Unix user.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The test users and group `tests/install-deps` creates.
pub const ALICE: &str = "bftp-alice";
pub const BOB: &str = "bftp-bob";
pub const USERS_GROUP: &str = "bftp-users";

/// `target/debug/<name>`, built by `cargo build --workspace --bins` (tests/run does it).
pub fn bin(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let profile = std::env::var("BFTP_TEST_PROFILE").unwrap_or_else(|_| "debug".into());
    let p = target.join(profile).join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (tests/run does)",
        p.display()
    );
    p
}

const NO_MAIL: &str = "[mail]\nenabled = false\n";

/// A bftpd process in its own temporary state directory.
pub struct Bftpd {
    dir: tempfile::TempDir,
    config: PathBuf,
    socket: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// Environment variables every later start gets (`NOTIFY_SOCKET`...).
    env: Vec<(String, String)>,
}

impl Bftpd {
    /// The test config: loopback allowed (the test FTP servers live there), the socket open
    /// to the test users' group, seconds-scale retry bounds, and no mail (a test that wants
    /// reports uses [`Bftpd::mail_config`]: nothing may be mailed to a real relay).
    pub fn default_config(dir: &Path) -> String {
        format!(
            "state_dir = \"{state}\"\nsocket = \"{sock}\"\nsocket_mode = \"0660\"\nsocket_group = \"{USERS_GROUP}\"\n\
             [log]\nlevel = \"debug\"\n\
             [policy]\nallow_loopback = true\n\
             [retry_bounds]\nmin_first_interval = \"1s\"\nmin_cap = \"1s\"\n\
             {NO_MAIL}",
            state = dir.join("state").display(),
            sock = dir.join("run/bftpd.sock").display(),
        )
    }

    /// The test config with reports mailed over plain SMTP to `127.0.0.1:smtp_port`, retried
    /// after 1 s, 2 s, 2 s... and `extra` TOML tables after it.
    pub fn mail_config(dir: &Path, smtp_port: u16, extra: &str) -> String {
        let mail = format!(
            "[mail]\nfrom = \"bftp@bftp-test.invalid\"\nowner_domain = \"bftp-test.invalid\"\n\
             [mail.transport]\nkind = \"smtp\"\nhost = \"127.0.0.1\"\nport = {smtp_port}\ntimeout = \"5s\"\n\
             [mail.retry]\nfirst_interval = \"1s\"\ncap = \"2s\"\n"
        );
        format!(
            "{}{extra}",
            Bftpd::default_config(dir).replace(NO_MAIL, &mail)
        )
    }

    pub fn start() -> anyhow::Result<Bftpd> {
        Bftpd::start_with(Bftpd::default_config)
    }

    /// Starts with the config that `make_config` writes for the temporary directory.
    pub fn start_with(make_config: impl FnOnce(&Path) -> String) -> anyhow::Result<Bftpd> {
        let mut d = Bftpd::prepare(make_config)?;
        d.launch()?;
        Ok(d)
    }

    /// Writes the config that `make_config` makes for a new temporary directory, without
    /// starting the daemon (start it with [`launch`](Self::launch) or [`spawn`](Self::spawn)).
    pub fn prepare(make_config: impl FnOnce(&Path) -> String) -> anyhow::Result<Bftpd> {
        let dir = tempfile::Builder::new().prefix("bftpd-test-").tempdir()?;
        // Other test users must reach the socket inside.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let run = dir.path().join("run");
        std::fs::create_dir(&run)?;
        std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let config = dir.path().join("bftpd.toml");
        std::fs::write(&config, make_config(dir.path()))?;
        let socket = dir.path().join("run/bftpd.sock");
        Ok(Bftpd {
            dir,
            config,
            socket,
            child: None,
            starts: 0,
            env: Vec::new(),
        })
    }

    /// Sets an environment variable for every later start.
    pub fn set_env(&mut self, key: &str, value: impl Into<String>) {
        self.env.push((key.to_string(), value.into()));
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub fn socket(&self) -> &Path {
        &self.socket
    }
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
    pub fn config_path(&self) -> &Path {
        &self.config
    }
    fn log_path(&self, n: u32) -> PathBuf {
        self.dir.path().join(format!("bftpd.{n}.log"))
    }

    /// Everything every bftpd run of this test wrote to stderr.
    pub fn logs(&self) -> String {
        (1..=self.starts)
            .map(|n| std::fs::read_to_string(self.log_path(n)).unwrap_or_default())
            .collect()
    }

    /// Starts the daemon process and waits until it answers on its socket.
    pub fn launch(&mut self) -> anyhow::Result<()> {
        self.spawn()?;
        self.wait_ready(Duration::from_secs(20))
    }

    /// Starts the process without waiting for it (to watch a failing start).
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        assert!(self.child.is_none(), "bftpd already running");
        self.starts += 1;
        let log = std::fs::File::create(self.log_path(self.starts))?;
        let child = Command::new(bin("bftpd"))
            .arg("--config")
            .arg(&self.config)
            .env("RUST_BACKTRACE", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting bftpd")?;
        self.child = Some(child);
        Ok(())
    }

    pub fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.as_mut().expect("spawned").try_wait()? {
                self.child = None;
                bail!("bftpd exited during start with {status}: {}", self.logs());
            }
            if let Ok((200, _)) = http(&self.socket, "GET", "/v1/health", None, &[]) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("bftpd not ready after {limit:?}: {}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a process started with [`spawn`](Self::spawn) to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().context("not running")?;
        loop {
            if let Some(st) = child.try_wait()? {
                self.child = None;
                return Ok(st);
            }
            if Instant::now() > deadline {
                bail!("bftpd still running after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: a crash, as far as the daemon can tell.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait for the exit.
    pub fn terminate(&mut self, limit: Duration) -> anyhow::Result<ExitStatus> {
        let pid = self.child.as_ref().context("not running")?.id();
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        self.wait_exit(limit)
    }

    pub fn restart_after_kill9(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.launch()
    }

    /// `bftp --socket S ARGS...` as root.
    pub fn bftp(&self, args: &[&str]) -> Output {
        self.bftp_env(None, args, &[])
    }

    /// `bftp` as the Unix user `user` (via setpriv), or root for `None`, with extra env.
    pub fn bftp_env(&self, user: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Output {
        let home = self.dir.path().join("home");
        let _ = std::fs::create_dir_all(&home);
        let mut cmd = match user {
            None => Command::new(bin("bftp")),
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={u}"),
                    &format!("--regid={u}"),
                    "--init-groups",
                    "--",
                ])
                .arg(bin("bftp"));
                c
            }
        };
        cmd.arg("--socket")
            .arg(&self.socket)
            .args(args)
            .env("HOME", &home)
            .env_remove("BFTP_SOURCE_PASSWORD")
            .env_remove("BFTP_DEST_PASSWORD");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null()).output().expect("run bftp")
    }
}

impl Drop for Bftpd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A minimal HTTP/1.1 request over the Unix socket (what `curl --unix-socket` does), for
/// checks that must bypass the front end. Returns the status and the body.
pub fn http(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, String)> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let body = body.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status: u16 = resp.get(9..12).context("short response")?.parse()?;
    let body = match resp.find("\r\n\r\n") {
        Some(i) => resp[i + 4..].to_string(),
        None => String::new(),
    };
    Ok((status, body))
}

/// One HTTP/1.1 connection to the Unix socket kept alive across requests (what a client
/// that polls does): no connection set up and torn down per request.
pub struct KeepAlive {
    stream: UnixStream,
}

impl KeepAlive {
    pub fn open(socket: &Path) -> anyhow::Result<KeepAlive> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(KeepAlive { stream })
    }

    /// The status and the body (the response must carry a Content-Length).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(u16, String)> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.stream.write_all(req.as_bytes())?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            self.stream.read_exact(&mut byte)?;
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let status: u16 = head.get(9..12).context("short response")?.parse()?;
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .context("no Content-Length")?;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body)?;
        Ok((status, String::from_utf8(body)?))
    }
}

/// stdout and stderr of a command, for messages and for secret scans.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file below `dir`, read as bytes, that contains `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    hits.push(p);
                }
            }
        }
    }
    hits
}
