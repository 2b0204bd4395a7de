//! The API's connections (issue 11): one local user flooding the socket cannot hang it for
//! the others, idle connections are closed, and the optional TCP listener serves `/metrics`
//! and nothing else.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{bin, text, Bftpd, ALICE, BOB};
use serde_json::Value;

/// Kills the daemon when the test ends, however it ends.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Opens `argv[2]` connections to the socket `argv[1]` that send nothing, says how many,
/// then watches them for `argv[3]` seconds: for each, what it received and when it was
/// closed. Run as another Unix user, so it is a flood of that user's.
const FLOODER: &str = r#"
import json, select, socket, sys, time
path, n, watch = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    socks.append(s)
t0 = time.monotonic()
print(json.dumps({"opened": len(socks)}), flush=True)
got = {s.fileno(): b"" for s in socks}
closed = {}
open_ = {s.fileno(): s for s in socks}
while open_ and time.monotonic() - t0 < watch:
    ready, _, _ = select.select(list(open_.values()), [], [], 0.1)
    for s in ready:
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            data = b""
        if data:
            got[s.fileno()] += data
        else:
            closed[s.fileno()] = time.monotonic() - t0
            del open_[s.fileno()]
refused = sum(1 for fd in closed if got[fd].startswith(b"HTTP/1.1 429 "))
silent = sorted(closed[fd] for fd in closed if not got[fd])
print(json.dumps({"refused": refused, "closed_silently_after": silent,
                  "still_open": len(open_), "sample": next((got[fd].decode("latin-1") for fd in got if got[fd]), "")}), flush=True)
"#;

/// `bftp ARGS` as `user`, killed after `limit`: its exit code (None if it had to be
/// killed), its output and how long it took.
fn bftp_as(
    socket: &Path,
    user: &str,
    args: &[&str],
    limit: Duration,
) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new("setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
            "--",
        ])
        .arg(bin("bftp"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .spawn()
        .unwrap();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let output = format!(
        "{}{}",
        std::fs::read_to_string(out.path()).unwrap(),
        std::fs::read_to_string(err.path()).unwrap()
    );
    (code, output, started.elapsed())
}

/// bftpd with `config` (the test config and `extra`), under an open-file limit of `nofile`.
fn start(dir: &Path, extra: &str, nofile: u64) -> (Daemon, std::path::PathBuf) {
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = dir.join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.join("bftpd.toml");
    std::fs::write(&config, format!("{}{extra}", Bftpd::default_config(dir))).unwrap();
    let log = std::fs::File::create(dir.join("bftpd.log")).unwrap();
    let mut cmd = Command::new(bin("bftpd"));
    cmd.arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    // SAFETY: setrlimit(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let daemon = Daemon(cmd.spawn().unwrap());
    let socket = dir.join("run/bftpd.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while bftp_tests::daemon::http(&socket, "GET", "/v1/health", None, &[]).is_err() {
        assert!(
            Instant::now() < deadline,
            "bftpd not ready: {}",
            std::fs::read_to_string(dir.join("bftpd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (daemon, socket)
}

#[test]
fn one_user_flooding_the_socket_leaves_the_others_served_and_idle_connections_are_closed() {
    let dir = tempfile::Builder::new()
        .prefix("bftpd-flood-")
        .tempdir()
        .unwrap();
    // 256 descriptors, as systemd's 1,024 are for 1,100 connections: more connections than
    // the daemon has descriptors.
    let (_daemon, socket) = start(
        dir.path(),
        "[api]\nidle_timeout = \"6s\"\nmax_connections_per_user = 8\n",
        256,
    );
    let log = || std::fs::read_to_string(dir.path().join("bftpd.log")).unwrap_or_default();
    let flood = 300;
    let mut flooder = Command::new("setpriv")
        .args([
            &format!("--reuid={ALICE}"),
            &format!("--regid={ALICE}"),
            "--init-groups",
            "--",
            "/usr/bin/python3",
            "-c",
            FLOODER,
        ])
        .arg(&socket)
        .arg(flood.to_string())
        .arg("14")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(flooder.stdout.take().unwrap()).lines();
    let opened: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let flood_started = Instant::now();
    assert_eq!(opened["opened"], flood, "{opened}");

    // Another user is answered at once.
    let (code, out, took) = bftp_as(&socket, BOB, &["status"], Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "bob's bftp status took {took:?}: {out}\n{}",
        log()
    );
    assert!(took < Duration::from_secs(3), "bob waited {took:?}");
    eprintln!("bob's bftp status during the flood took {took:?}");
    // The flooding user gets a clear refusal while it holds its share (once the refusals
    // of the flood itself, which wait up to 2 s for a request that never comes, are done).
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(flood_started.elapsed()));
    let (code, out, _) = bftp_as(&socket, ALICE, &["status"], Duration::from_secs(10));
    assert!(
        flood_started.elapsed() < Duration::from_secs(5),
        "too slow to see alice's share still held"
    );
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("max_connections_per_user"), "{out}");

    let summary: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let _ = flooder.wait();
    // All but the user's 8 were answered 429 (within 2 s); the 8 that sent nothing were
    // closed after the idle timeout (6 s), and none is left open.
    assert_eq!(summary["refused"], flood - 8, "{summary}");
    assert!(summary["sample"]
        .as_str()
        .unwrap()
        .contains("too_many_connections"));
    let silent: Vec<f64> = summary["closed_silently_after"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(silent.len(), 8, "{summary}");
    assert!(
        silent.iter().all(|&t| (4.0..10.0).contains(&t)),
        "{summary}"
    );
    assert_eq!(summary["still_open"], 0, "{summary}");
    // And the daemon serves as before.
    let (code, out, _) = bftp_as(&socket, ALICE, &["status"], Duration::from_secs(10));
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn a_request_that_never_ends_its_headers_is_closed_after_header_read_timeout() {
    let dir = tempfile::Builder::new()
        .prefix("bftpd-slow-")
        .tempdir()
        .unwrap();
    let (_daemon, socket) = start(
        dir.path(),
        "[api]\nheader_read_timeout = \"2s\"\nidle_timeout = \"30s\"\n",
        1024,
    );
    let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // A header line a second, never the blank line that ends them.
    let mut buf = [0u8; 1024];
    for i in 0..15 {
        if s.write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
            .is_err()
        {
            break;
        }
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => panic!("answered before the headers ended"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    let took = started.elapsed();
    assert!(
        (Duration::from_secs(1)..Duration::from_secs(5)).contains(&took),
        "the trickling request was closed after {took:?}"
    );
}

/// A GET over TCP: the status and the body.
fn tcp_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[test]
fn metrics_over_tcp_serve_the_same_text_and_no_job_data() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let d = Bftpd::start_with(|dir| {
        format!(
            "{}[metrics]\nlisten = \"{addr}\"\n",
            Bftpd::default_config(dir)
        )
    })
    .unwrap();
    let o = d.bftp_env(
        Some(ALICE),
        &[
            "submit",
            "ftp://127.0.0.1:1/x",
            "ftp://127.0.0.1:1/y",
            "--start",
            "in 1h",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));

    let (status, body) = tcp_get(&addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("bftp_jobs{state=\"queued\"} 1"), "{body}");
    let (_, over_socket) =
        bftp_tests::daemon::http(d.socket(), "GET", "/metrics", None, &[]).unwrap();
    let names = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split([' ', '{']).next().map(str::to_owned))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(names(&body), names(&over_socket));
    for path in ["/v1/jobs", "/v1/jobs/1", "/v1/health"] {
        let (status, body) = tcp_get(&addr, path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(!body.contains("127.0.0.1:1"), "{path}: {body}");
    }
    assert!(
        d.logs().contains("serving /metrics over TCP"),
        "{}",
        d.logs()
    );
    assert!(!d.logs().contains("not a loopback address"), "{}", d.logs());
    // Without [metrics] no TCP listener.
    drop(d);
    let _d = Bftpd::start().unwrap();
    assert!(TcpStream::connect(&addr).is_err());
}
