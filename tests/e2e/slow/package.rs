//! The Debian package (issue 6), in the slow group: `cargo deb -p bftpd` builds it (a release
//! build), dpkg installs it on this machine, the installed bftpd copies a file between two
//! local FTP servers for the installed bftp, and the package is purged again, also when the
//! test fails. There is no systemd PID 1 here: bftpd runs directly, as user bftpd in group
//! bftp, on the installed config with its socket and state moved into a temporary directory
//! and loopback allowed. Needs root and cargo-deb (tests/install-deps installs it).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, text, ALICE};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

const PACKAGE: &str = "bftp";
const DAEMON_USER: &str = "bftpd";
const GROUP: &str = "bftp";

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> Output {
    let o = run(cmd);
    assert!(o.status.success(), "{cmd:?}: {}", text(&o));
    o
}

fn exists(db: &str, name: &str) -> bool {
    run(Command::new("getent").args([db, name]))
        .status
        .success()
}

fn package_installed() -> bool {
    let o = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", PACKAGE]));
    String::from_utf8_lossy(&o.stdout).contains("installed")
}

/// The installed package: purged on drop, and the user and group removed if this test
/// created them (Debian's purge leaves system accounts behind on purpose).
struct Installed {
    created_user: bool,
    created_group: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let o = run(Command::new("dpkg").args(["--purge", PACKAGE]));
        if !o.status.success() {
            eprintln!("dpkg --purge {PACKAGE}: {}", text(&o));
        }
        if self.created_user {
            let _ = run(Command::new("userdel").arg(DAEMON_USER));
        }
        if self.created_group {
            let _ = run(Command::new("groupdel").arg(GROUP));
        }
    }
}

/// The daemon, killed on drop if the test did not stop it.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn build_deb(out: &Path) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    ok(Command::new(cargo)
        .current_dir(&workspace)
        .args(["deb", "-p", "bftpd", "--locked", "--output"])
        .arg(out));
    eprintln!("cargo deb -p bftpd took {:?}", started.elapsed());
    let debs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    debs.into_iter().next().unwrap()
}

/// The installed config with the socket and state in `dir`, loopback allowed (the test
/// servers live there) and mail off (nothing may go to a real relay).
fn test_config(installed: &str, dir: &Path) -> String {
    let mut config = installed.to_string();
    for (from, to) in [
        (
            "state_dir = \"/var/lib/bftpd\"".to_string(),
            format!("state_dir = \"{}\"", dir.join("state").display()),
        ),
        (
            "socket = \"/run/bftpd/bftpd.sock\"".to_string(),
            format!("socket = \"{}\"", dir.join("run/bftpd.sock").display()),
        ),
        (
            "allow_loopback = false".to_string(),
            "allow_loopback = true".to_string(),
        ),
        ("enabled = true".to_string(), "enabled = false".to_string()),
    ] {
        assert_eq!(config.matches(&from).count(), 1, "{from} in {installed}");
        config = config.replace(&from, &to);
    }
    config
}

/// `/usr/bin/bftp` as Alice, a member of group bftp (`groups` adds it for this run only).
fn bftp(
    socket: &Path,
    home: &Path,
    groups: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.args([&format!("--reuid={ALICE}"), &format!("--regid={ALICE}")]);
    match groups {
        Some(g) => cmd.arg(format!("--groups={g}")),
        None => cmd.arg("--clear-groups"),
    };
    cmd.args(["--", "/usr/bin/bftp", "--socket"])
        .arg(socket)
        .args(args)
        .env("HOME", home)
        .envs(env.iter().copied());
    run(&mut cmd)
}

#[test]
fn the_deb_installs_runs_a_transfer_and_purges() {
    assert!(
        !package_installed() && !Path::new("/usr/bin/bftpd").exists(),
        "{PACKAGE} is already installed on this machine: this test will not touch it"
    );
    let work = tempfile::Builder::new()
        .prefix("bftp-deb-")
        .tempdir()
        .unwrap();
    let deb = build_deb(&work.path().join("deb"));

    let installed = Installed {
        created_user: !exists("passwd", DAEMON_USER),
        created_group: !exists("group", GROUP),
    };
    ok(Command::new("dpkg").arg("-i").arg(&deb));

    // Files where they belong.
    for exe in ["/usr/bin/bftp", "/usr/bin/bftpd"] {
        let mode = std::fs::metadata(exe).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{exe}");
    }
    for (path, source) in [
        ("/etc/bftpd/bftpd.toml", "config/bftpd.example.toml"),
        ("/lib/systemd/system/bftpd.service", "systemd/bftpd.service"),
        ("/usr/lib/sysusers.d/bftpd.conf", "systemd/bftpd.sysusers"),
        ("/usr/lib/tmpfiles.d/bftpd.conf", "systemd/bftpd.tmpfiles"),
    ] {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(source);
        assert_eq!(
            std::fs::read(path).unwrap(),
            std::fs::read(&shipped).unwrap(),
            "{path}"
        );
    }
    let conffiles = ok(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", PACKAGE]));
    assert!(
        String::from_utf8_lossy(&conffiles.stdout).contains("/etc/bftpd/bftpd.toml"),
        "{}",
        text(&conffiles)
    );
    // The user and group, and the state directory only bftpd may enter.
    let passwd = ok(Command::new("getent").args(["passwd", DAEMON_USER]));
    let group = ok(Command::new("getent").args(["group", GROUP]));
    let gid = String::from_utf8_lossy(&group.stdout)
        .split(':')
        .nth(2)
        .unwrap()
        .to_string();
    let passwd = String::from_utf8_lossy(&passwd.stdout).to_string();
    assert_eq!(passwd.split(':').nth(3), Some(gid.as_str()), "{passwd}");
    let uid: u32 = passwd.split(':').nth(2).unwrap().parse().unwrap();
    let state = std::fs::metadata("/var/lib/bftpd").unwrap();
    assert_eq!((state.uid(), state.mode() & 0o777), (uid, 0o700));
    // postinst started nothing: systemd is not PID 1 here.
    assert!(!Path::new("/run/bftpd/bftpd.sock").exists());
    let o = ok(Command::new("/usr/bin/bftpd").args(["check-config", "/etc/bftpd/bftpd.toml"]));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "OK\n");

    // The installed daemon, as bftpd:bftp, on the installed config moved into `dir`.
    let dir = work.path().join("daemon");
    for (sub, mode) in [
        ("", 0o755),
        ("state", 0o700),
        ("run", 0o750),
        ("home", 0o777),
    ] {
        let p = dir.join(sub);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for sub in ["state", "run"] {
        ok(Command::new("chown")
            .arg(format!("{DAEMON_USER}:{GROUP}"))
            .arg(dir.join(sub)));
    }
    let config = dir.join("bftpd.toml");
    let installed_config = std::fs::read_to_string("/etc/bftpd/bftpd.toml").unwrap();
    std::fs::write(&config, test_config(&installed_config, &dir)).unwrap();
    let socket = dir.join("run/bftpd.sock");
    let log_path = dir.join("bftpd.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut daemon = Daemon(
        Command::new("setpriv")
            .args([
                &format!("--reuid={DAEMON_USER}"),
                &format!("--regid={GROUP}"),
                "--init-groups",
                "--",
                "/usr/bin/bftpd",
                "--config",
            ])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(http(&socket, "GET", "/v1/health", None, &[]), Ok((200, _))) {
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "bftpd exited: {}",
            logs()
        );
        assert!(Instant::now() < deadline, "bftpd not ready: {}", logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let sock = std::fs::metadata(&socket).unwrap();
    assert_eq!(
        (sock.uid(), sock.gid().to_string(), sock.mode() & 0o777),
        (uid, gid.clone(), 0o660)
    );
    let key = std::fs::metadata(dir.join("state/secret.key")).unwrap();
    assert_eq!((key.uid(), key.mode() & 0o777), (uid, 0o600));

    // A user outside group bftp cannot reach the socket; a member can.
    let home = dir.join("home");
    let o = bftp(&socket, &home, None, &["status"], &[]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));

    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    src.put_file("out/data.bin", &data).unwrap();
    dst.mkdir("in").unwrap();
    let passwords = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let (s, t) = (src.url("out/data.bin"), dst.url("in/"));
    let o = bftp(
        &socket,
        &home,
        Some(GROUP),
        &["--json", "submit", &s, &t],
        &passwords,
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), logs());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = v["job"]["id"].as_u64().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let v = loop {
        let o = bftp(&socket, &home, Some(GROUP), &["--json", "status", &id], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        if v["state"] == "finished" || v["state"] == "cancelled" {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "job not final: {v:#}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v["outcome"], "succeeded", "{v:#}\n{}", logs());
    assert_eq!(dst.read_file("in/data.bin").unwrap(), data);

    // SAFETY: plain kill(2) on our own child's pid (setpriv execs bftpd in place).
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = daemon.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "bftpd still running: {}", logs());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}: {}", logs());

    drop(daemon);
    drop(installed);
    assert!(!package_installed());
    for gone in [
        "/usr/bin/bftpd",
        "/usr/bin/bftp",
        "/etc/bftpd",
        "/var/lib/bftpd",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} is left after the purge");
    }
}
