//! Running as a service (issue 6): `bftpd check-config`, the shipped systemd unit, and the
//! readiness protocol of `Type=notify` against the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{bin, http, text, Bftpd};
use bftp_tests::notify::Notify;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn check_config(path: &Path) -> std::process::Output {
    Command::new(bin("bftpd"))
        .arg("check-config")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("run bftpd check-config")
}

#[test]
fn check_config_accepts_the_shipped_configs_and_says_what_is_wrong_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    // The example names group bftp, which only the package creates: check it with a group
    // this machine has.
    let example = std::fs::read_to_string(repo("config/bftpd.example.toml")).unwrap();
    let example_here = dir.path().join("example.toml");
    std::fs::write(
        &example_here,
        example.replace("socket_group = \"bftp\"", "socket_group = \"root\""),
    )
    .unwrap();
    for good in [repo("config/bftpd.toml"), example_here] {
        let o = check_config(&good);
        assert_eq!(o.status.code(), Some(0), "{}: {}", good.display(), text(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "OK\n");
    }

    let base = "state_dir = \"s\"\nsocket = \"s.sock\"\n";
    for (bad, needle) in [
        ("socket_mode = \"0999\"\n", "octal"),
        ("[retry_bounds]\nmin_cap = \"2h\"\nmax_cap = \"1h\"\n", "retry_bounds"),
        ("[ftp]\noverrides = [{ host = \"h\", code = 42, treat_as = \"transient\" }]\n", "reply code"),
        ("socket_group = \"bftp-no-such-group\"\n", "bftp-no-such-group"),
        ("[mail]\nfrom = \"not an address\"\n", "from"),
        ("[mail.transport]\nkind = \"smtp\"\nusername = \"u\"\n", "password_file"),
        ("[mail.transport]\nkind = \"smtp\"\nusername = \"u\"\npassword_file = \"/nonexistent/pw\"\n", "/nonexistent/pw"),
        ("[sheduler]\n", "sheduler"),
        ("[metrics]\nlisten = \"localhost:9464\"\n", "invalid socket address"),
        ("[metrics]\nlisten = \"127.0.0.1:0\"\n", "needs a port"),
        ("[api]\nmax_connections_per_user = 0\n", "max_connections_per_user"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, format!("{base}{bad}")).unwrap();
        let o = check_config(&path);
        assert_eq!(o.status.code(), Some(1), "{bad:?}: {}", text(&o));
        assert!(o.stdout.is_empty(), "{bad:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{bad:?}: {err}");
        // The file is named once, whichever check found the fault.
        let named = err.matches(path.to_str().unwrap()).count();
        assert_eq!(named, 1, "{bad:?}: {err}");
    }
    // A metrics listener on loopback is fine; on any other address it is allowed, with a
    // warning.
    let path = dir.path().join("metrics.toml");
    std::fs::write(
        &path,
        format!("{base}[metrics]\nlisten = \"127.0.0.1:9464\"\n"),
    )
    .unwrap();
    let o = check_config(&path);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    std::fs::write(
        &path,
        format!("{base}[metrics]\nlisten = \"0.0.0.0:9464\"\n"),
    )
    .unwrap();
    let o = check_config(&path);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "OK\n");
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("warning: [metrics] listen = \"0.0.0.0:9464\" is not a loopback address"),
        "{}",
        text(&o)
    );
    // A checked config with mail off needs no mail settings to be valid.
    let path = dir.path().join("nomail.toml");
    std::fs::write(
        &path,
        format!("{base}[mail]\nenabled = false\nfrom = \"x\"\n"),
    )
    .unwrap();
    assert_eq!(check_config(&path).status.code(), Some(0));

    let o = check_config(&dir.path().join("missing.toml"));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("missing.toml"), "{}", text(&o));
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(repo("systemd/bftpd.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/bftpd "), "{unit}");
    // systemd's default soft limit of 1,024 descriptors is too few for a busy daemon.
    let nofile: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("the unit sets LimitNOFILE=")
        .parse()
        .unwrap();
    assert!(nofile >= 4096, "{nofile}");
    // verify checks that ExecStart's binary exists: point it at the one just built.
    let unit = unit.replace(
        "ExecStart=/usr/bin/bftpd ",
        &format!("ExecStart={} ", bin("bftpd").display()),
    );
    let path = dir.path().join("bftpd.service");
    std::fs::write(&path, unit).unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("SYSTEMD_LOG_COLOR", "0")
        .stdin(Stdio::null())
        .output()
        .expect("systemd-analyze (tests/install-deps installs systemd)");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Unknown keys and bad values are only warnings: none may name the unit.
    let out = text(&o);
    assert!(!out.contains("bftpd.service"), "{out}");
}

/// Kills the daemon if the test fails before it has stopped it.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ready_is_sent_once_the_api_answers_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let config = dir.path().join("bftpd.toml");
    std::fs::write(&config, Bftpd::default_config(dir.path())).unwrap();
    let socket = dir.path().join("run/bftpd.sock");
    let notify = Notify::bind(dir.path());
    let log = std::fs::File::create(dir.path().join("bftpd.log")).unwrap();
    let logs = || std::fs::read_to_string(dir.path().join("bftpd.log")).unwrap_or_default();
    let mut child = Child(
        Command::new(bin("bftpd"))
            .arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", &notify.path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    let ready = notify.recv(Duration::from_secs(30));
    assert_eq!(ready.as_deref(), Some("READY=1"), "{}", logs());
    // Ready means serving: the very first request after it is answered.
    let (status, body) = http(&socket, "GET", "/v1/health", None, &[]).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(notify.recv(Duration::from_millis(200)), None, "{}", logs());

    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let stopping = notify.recv(Duration::from_secs(30));
    assert_eq!(stopping.as_deref(), Some("STOPPING=1"), "{}", logs());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "bftpd still running: {}", logs());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}: {}", logs());
}

#[test]
fn without_notify_socket_bftpd_starts_as_before() {
    let mut d = Bftpd::start().unwrap();
    assert!(d.terminate(Duration::from_secs(30)).unwrap().success());
    assert!(!d.logs().contains("service manager"), "{}", d.logs());
}
