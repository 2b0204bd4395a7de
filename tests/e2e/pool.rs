//! Logged-in pairs kept between jobs (issue 14, bftpd's `hosts/pool.rs`), against the real bftpd
//! and real servers. Each server sits behind a delay proxy (no delay) that counts the control
//! connections made to it: the servers' session counts.

use std::time::Duration;

use bftp_tests::daemon::{text, Bftpd, ALICE};
use bftp_tests::jobs::{config_plus, wait_final};
use bftp_tests::{DelayProxy, FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

struct Servers {
    src: FtpServer,
    dst: FtpServer,
    src_proxy: DelayProxy,
    dst_proxy: DelayProxy,
}

impl Servers {
    fn start() -> Servers {
        let opts = |last| FtpOptions {
            host: std::net::Ipv4Addr::new(127, 0, 0, last),
            ..FtpOptions::default()
        };
        let src = FtpServer::start(ServerKind::Vsftpd, opts(2)).unwrap();
        let dst = FtpServer::start(ServerKind::Proftpd, opts(3)).unwrap();
        for n in ["a", "b", "c"] {
            src.put_file(&format!("out/{n}.bin"), n.repeat(5000).as_bytes())
                .unwrap();
        }
        dst.mkdir("in").unwrap();
        let src_proxy = DelayProxy::for_server(&src, Duration::ZERO).unwrap();
        let dst_proxy = DelayProxy::for_server(&dst, Duration::ZERO).unwrap();
        Servers {
            src,
            dst,
            src_proxy,
            dst_proxy,
        }
    }

    /// Control connections made to (source, destination) so far.
    fn sessions(&self) -> (u64, u64) {
        (self.src_proxy.connections(), self.dst_proxy.connections())
    }

    /// A one-file job of `file` submitted as `user` (root for `None`), waited for.
    fn job(&self, d: &Bftpd, user: Option<&str>, file: &str) -> Value {
        let source = format!(
            "ftp://{}@{}:{}/out/{file}",
            self.src.user(),
            self.src.host(),
            self.src_proxy.port()
        );
        let dest = format!(
            "ftp://{}@{}:{}/in/",
            self.dst.user(),
            self.dst.host(),
            self.dst_proxy.port()
        );
        let env = [
            ("BFTP_SOURCE_PASSWORD", self.src.password()),
            ("BFTP_DEST_PASSWORD", self.dst.password()),
        ];
        let o = d.bftp_env(user, &["--json", "submit", &source, &dest], &env);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let id = v["job"]["id"].as_u64().unwrap();
        wait_final(d, id, Duration::from_secs(60))
    }
}

fn succeeded(v: &Value) {
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
}

#[test]
fn a_later_job_of_the_same_owner_and_logins_reuses_the_logged_in_pair() {
    let s = Servers::start();
    let d = Bftpd::start().unwrap();
    succeeded(&s.job(&d, None, "a.bin"));
    succeeded(&s.job(&d, None, "b.bin"));
    succeeded(&s.job(&d, None, "c.bin"));
    assert_eq!(
        s.sessions(),
        (1, 1),
        "one login on each server for three jobs"
    );
    assert_eq!(
        s.dst.read_file("in/c.bin").unwrap(),
        "c".repeat(5000).as_bytes()
    );
}

/// Issue 27 item 15: the transcript of a job on a kept pair says so, with when the pair
/// logged in and for which job, on the attempt's clock (it began with a NOOP at 7,895 ms).
#[test]
fn a_job_on_a_kept_pair_says_in_its_transcript_where_the_login_went() {
    let s = Servers::start();
    let sink = bftp_tests::SmtpSink::start().unwrap();
    let d = Bftpd::start_with(|dir| Bftpd::mail_config(dir, sink.port(), "")).unwrap();
    let first = s.job(&d, None, "a.bin");
    succeeded(&first);
    // The kept pair ages: its own clock runs ahead of the next attempt's by this much.
    let idle = Duration::from_secs(4);
    std::thread::sleep(idle);
    let second = s.job(&d, None, "b.bin");
    succeeded(&second);
    let third = s.job(&d, None, "c.bin");
    succeeded(&third);
    assert_eq!(s.sessions(), (1, 1), "the pair was kept");
    let mails = sink.wait_for(3, Duration::from_secs(60)).unwrap();
    let transcript_of = |job: &Value| -> Vec<String> {
        let id = job["id"].as_u64().unwrap();
        mails
            .iter()
            .map(|m| bftp_tests::report::parts(m).1)
            .find(|j| j["job"]["id"] == id)
            .unwrap_or_else(|| panic!("no report of job {id}"))["transcript"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect()
    };
    let a = first["id"].as_u64().unwrap();
    let b = second["id"].as_u64().unwrap();
    // `[     12 ms] [p1] source: ...`: the time of a transcript line.
    let ms = |l: &str| -> u64 {
        l.trim_start_matches('[')
            .split(" ms]")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let t = transcript_of(&first);
    assert!(
        t[0].contains("connecting to") && t.iter().any(|l| l.contains("USER")),
        "the first job logged in: {t:#?}"
    );
    for (job, tail) in [
        (&second, String::new()),
        (
            &third,
            format!(", last used by job {b} (2 jobs before this one)"),
        ),
    ] {
        let t = transcript_of(job);
        assert!(
            t[0].contains("connection pair reused, no login: logged in at 20")
                && t[0].contains(&format!("for job {a}{tail};")),
            "the first line says where the login went: {t:#?}"
        );
        assert!(t[1].contains("NOOP"), "{t:#?}");
        assert!(
            Duration::from_millis(ms(&t[1])) < idle - Duration::from_secs(1),
            "the reused pair's lines are on the attempt's clock, not the pair's: {t:#?}"
        );
        assert!(!t.iter().any(|l| l.contains("USER")), "{t:#?}");
    }
}

#[test]
fn a_kept_pair_is_never_used_for_another_unix_user() {
    let s = Servers::start();
    let d = Bftpd::start().unwrap();
    succeeded(&s.job(&d, None, "a.bin"));
    succeeded(&s.job(&d, Some(ALICE), "b.bin"));
    assert_eq!(s.sessions(), (2, 2), "alice's job logged in itself");
}

#[test]
fn a_pair_that_saw_an_error_is_not_kept() {
    let s = Servers::start();
    let d = Bftpd::start().unwrap();
    let failed = s.job(&d, None, "missing.bin");
    assert_ne!(failed["outcome"], "succeeded", "{failed:#}");
    succeeded(&s.job(&d, None, "a.bin"));
    assert_eq!(s.sessions(), (2, 2), "the failed job's pair was closed");
}

#[test]
fn a_kept_pair_is_closed_after_its_idle_timeout() {
    let s = Servers::start();
    let d = Bftpd::start_with(config_plus("[ftp]\npool_idle_timeout = \"1s\"\n")).unwrap();
    succeeded(&s.job(&d, None, "a.bin"));
    std::thread::sleep(Duration::from_millis(2500));
    succeeded(&s.job(&d, None, "b.bin"));
    assert_eq!(
        s.sessions(),
        (2, 2),
        "the idle pair was closed, a new one logged in"
    );
}

#[test]
fn no_pair_is_kept_when_the_pool_is_off() {
    let s = Servers::start();
    let d = Bftpd::start_with(config_plus("[ftp]\npool_max_idle = 0\n")).unwrap();
    succeeded(&s.job(&d, None, "a.bin"));
    succeeded(&s.job(&d, None, "b.bin"));
    assert_eq!(s.sessions(), (2, 2));
}

#[test]
fn a_kept_pair_gives_its_slots_up_to_a_job_that_needs_them() {
    // One connection per host: root's kept pair holds both slots; alice's job (another key)
    // closes it instead of waiting for its idle timeout (30 s).
    let s = Servers::start();
    let d = Bftpd::start_with(config_plus(
        "[ftp]\nmax_connections_per_host = 1\nwatch_progress = false\n",
    ))
    .unwrap();
    succeeded(&s.job(&d, None, "a.bin"));
    let t = std::time::Instant::now();
    succeeded(&s.job(&d, Some(ALICE), "b.bin"));
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "alice's job waited {:?} for the kept pair's slots",
        t.elapsed()
    );
    assert_eq!(s.sessions(), (2, 2));
    // The kept pair was closed with QUIT, and its server had ended the session before the
    // next one came: dropped without QUIT, the server's session outlived its slot, and the
    // server counted two sessions against a limit of one for a moment.
    let log = std::fs::read_to_string(s.src.log_file()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    // vsftpd's lines name the session's process: `[pid N]`.
    let pid_of = |l: &str| {
        l.split("[pid ")
            .nth(1)?
            .split(']')
            .next()
            .map(str::to_owned)
    };
    let session_of = |file: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("\"RETR out/{file}\"")))
            .and_then(|l| pid_of(l))
            .unwrap_or_else(|| panic!("no RETR of {file} in the log:\n{log}"))
    };
    let (first, second) = (session_of("a.bin"), session_of("b.bin"));
    let quit = lines
        .iter()
        .position(|l| pid_of(l).as_ref() == Some(&first) && l.contains("\"QUIT\""));
    let second_begins = lines
        .iter()
        .position(|l| pid_of(l).as_ref() == Some(&second));
    assert!(
        quit.is_some() && quit < second_begins,
        "the kept pair's source session (pid {first}) did not end with QUIT before the next \
         one (pid {second}) began:\n{log}"
    );
}
