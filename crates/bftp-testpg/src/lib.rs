//! A real PostgreSQL server for the tests: one cluster per test process, a fresh database
//! per test.
//!
//! The cluster lives in a directory of its own under the temporary directory and listens on
//! a free port on 127.0.0.1 only (trust authentication: nothing but this machine can reach
//! it). `initdb` refuses to run as root, so as root the server runs as the `postgres` user
//! that Debian's packages create. A watchdog shell stops the server and removes the
//! directory once the test process is gone, however it ended.
//!
//! Only the standard library: bftp-store's tests depend on this crate, so it must not
//! depend on the store (nor on bftp-tests, which does).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Cluster {
    pub port: u16,
    /// Whether the server fsyncs (off for the tests, on for a benchmark against sled).
    fsync: bool,
    dir: PathBuf,
    bin: PathBuf,
    /// The user the server runs as, when this process is root.
    as_user: Option<&'static str>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// The process's cluster, started at the first call. Panics (failing the test) with the
/// reason when PostgreSQL is not installed or does not start.
pub fn cluster() -> &'static Cluster {
    match CLUSTER.get_or_init(Cluster::start_new) {
        Ok(c) => c,
        Err(e) => panic!("cannot start PostgreSQL for the tests: {e}"),
    }
}

/// A new, empty database on the process's cluster; its URL.
pub fn fresh_database() -> String {
    cluster().fresh_database()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The newest PostgreSQL installed from Debian's packages (`/usr/lib/postgresql/N/bin`).
fn bin_dir() -> Result<PathBuf, String> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("/usr/lib/postgresql: {e} (run tests/install-deps)"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, b)| b)
        .ok_or_else(|| "no PostgreSQL server under /usr/lib/postgresql".into())
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl Cluster {
    /// A cluster of the caller's own (a test that stops and starts the server must not take
    /// the process's shared cluster down under other tests). Stopped when the process ends.
    pub fn private() -> Cluster {
        Cluster::start_new().unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"))
    }

    /// A cluster of the caller's own that fsyncs its commits, as a production server does
    /// (for benchmarks against sled's fsync'd store).
    pub fn private_durable() -> Result<Cluster, String> {
        Cluster::start_with(true)
    }

    fn start_new() -> Result<Cluster, String> {
        Cluster::start_with(false)
    }

    fn start_with(fsync: bool) -> Result<Cluster, String> {
        let bin = bin_dir()?;
        let as_user = is_root().then_some("postgres");
        let dir = std::env::temp_dir().join(format!(
            "bftp-pg-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Some(user) = as_user {
            let ok = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(&dir)
                .status()
                .map_err(|e| e.to_string())?
                .success();
            if !ok {
                return Err(format!("cannot give {} to {user}", dir.display()));
            }
        }
        let port = free_port()?;
        let c = Cluster {
            port,
            fsync,
            dir,
            bin,
            as_user,
        };
        let data = c.data();
        c.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        c.start()?;
        c.watchdog();
        Ok(c)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        match self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let out = self
            .command(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub fn start(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync={}",
            self.port,
            self.dir.display(),
            if self.fsync { "on" } else { "off" }
        );
        let data = self.data();
        let log = self.dir.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-l",
                log.to_str().unwrap_or_default(),
                "-o",
                &opts,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
    }

    /// Stops the server: `fast` ends the sessions and shuts down cleanly; `immediate` is a
    /// crash (the next start recovers from the WAL).
    pub fn stop(&self, mode: &str) -> Result<(), String> {
        let data = self.data();
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-m",
                mode,
                "-w",
                "stop",
            ],
        )
    }

    /// A superuser URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    pub fn fresh_database(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("{e}"));
        self.url(&name)
    }

    /// Runs SQL with psql on database `db`; its output, unaligned, tuples only.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "psql {sql:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// A psql session on database `db` that runs `sql` and stays connected (holding what
    /// its session holds, such as an advisory lock) until the child is killed.
    pub fn psql_session(&self, db: &str, sql: &str) -> Result<std::process::Child, String> {
        let mut child = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("psql: {e}"))?;
        let stdin = child.stdin.as_mut().ok_or("psql: no stdin")?;
        std::io::Write::write_all(stdin, format!("{sql};\n").as_bytes())
            .map_err(|e| format!("psql: {e}"))?;
        Ok(child)
    }

    /// `pg_restore` of `file` (a `pg_dump --format=custom`) into database `db`, the objects
    /// owned by the restoring role (as an operator restores into a new database).
    pub fn restore(&self, db: &str, file: &Path) -> Result<(), String> {
        let out = Command::new(self.bin.join("pg_restore"))
            .args([
                "--no-owner",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
            ])
            .args(["-U", "postgres", "-d", db])
            .arg(file)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pg_restore: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_restore {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// The database name in one of this cluster's URLs.
    pub fn db_of(url: &str) -> &str {
        url.rsplit('/').next().unwrap_or("postgres")
    }

    /// Stops the server and removes its directory once this process has gone.
    fn watchdog(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = match self.as_user {
            Some(u) => format!("runuser -u {u} -- {}", pg_ctl.display()),
            None => pg_ctl.display().to_string(),
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {stop} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            data = self.data().display(),
            dir = self.dir.display(),
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new database owned by a new role that must log in with `password` (scram-sha-256
    /// over TCP; every other role keeps trust): its URL, which names the role and holds no
    /// password.
    pub fn password_database(&self, password: &str) -> String {
        let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
        let role = format!("pw{}_{n}", std::process::id());
        let hba = self.data().join("pg_hba.conf");
        let old = std::fs::read_to_string(&hba).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            &hba,
            format!("host all {role} 127.0.0.1/32 scram-sha-256\n{old}"),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", hba.display()));
        let ok = |r: Result<String, String>| r.unwrap_or_else(|e| panic!("{e}"));
        ok(self.psql(
            "postgres",
            &format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"),
        ));
        ok(self.psql("postgres", &format!("CREATE DATABASE {role} OWNER {role}")));
        ok(self.psql("postgres", "SELECT pg_reload_conf()"));
        format!("postgres://{role}@127.0.0.1:{}/{role}", self.port)
    }
}

/// Waits up to `limit` for `f` to hold, looking every 50 ms.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
