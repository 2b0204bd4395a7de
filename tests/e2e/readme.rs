//! The README's walkthrough, where it can be run here: the command it gives for reading the
//! mailed report, against a real report caught by aiosmtpd as the walkthrough runs it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bftp_tests::daemon::{text, Bftpd};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap()
}

/// Kills the sink when the test ends.
struct Sink(std::process::Child);

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_walkthrough_says_how_to_read_the_report_and_that_vsftpd_starts_a_service() {
    let readme = readme();
    let walkthrough = readme
        .split("## Five minutes")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the walkthrough section");
    assert!(
        walkthrough.contains("systemctl disable --now vsftpd"),
        "{walkthrough}"
    );
    assert!(walkthrough.contains("port 21"), "{walkthrough}");
    assert!(walkthrough.contains("quoted-printable"), "{walkthrough}");
    let decode = walkthrough
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("/usr/bin/python3 -c ") && l.contains("/tmp/demo-mail.txt"))
        .expect("a command that prints the mailed report decoded");

    // The walkthrough's sink: aiosmtpd's default handler, printing to a file.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mail = dir.path().join("demo-mail.txt");
    let _sink = Sink(
        Command::new("/usr/bin/python3")
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&mail).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let d = Bftpd::start_with(|dir| Bftpd::mail_config(dir, port, "")).unwrap();
    // A job that fails at its one attempt (nothing listens on port 1) is final at once.
    let o = d.bftp_env(
        None,
        &[
            "submit",
            "ftp://demo@127.0.0.1:1/outgoing/report.bin",
            "ftp://demo@127.0.0.1:1/incoming/",
            "--notify",
            "you@localhost",
            "--max-attempts",
            "1",
        ],
        &[
            ("BFTP_SOURCE_PASSWORD", "demo-pw-walk"),
            ("BFTP_DEST_PASSWORD", "demo-pw-walk"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&mail)
        .unwrap_or_default()
        .contains("END MESSAGE")
    {
        assert!(Instant::now() < deadline, "no report mailed: {}", d.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let raw = std::fs::read_to_string(&mail).unwrap();
    assert!(raw.contains("quoted-printable"), "{raw}");
    assert!(raw.contains("=E2=80=94"), "{raw}");

    let o = Command::new("sh")
        .arg("-c")
        .arg(decode.replace("/tmp/demo-mail.txt", mail.to_str().unwrap()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{decode}: {}", text(&o));
    let shown = String::from_utf8(o.stdout).unwrap();
    assert!(shown.starts_with("Outcome: failed \u{2014} "), "{shown}");
    assert!(shown.contains("BFTP job 1 finished"), "{shown}");
    // Decoded: no quoted-printable escapes or soft line breaks are left.
    assert!(!shown.contains("=E2") && !shown.contains("=\n"), "{shown}");
}
