//! The store over months (issue 17): retention of old final jobs, a full disk, backup and
//! restore, against the real bftpd, real FTP servers and a real SMTP listener.

use std::time::{Duration, Instant};

use bftp_tests::daemon::{http, text, Bftpd};
use bftp_tests::files::content;
use bftp_tests::jobs::{status, submit, wait_final};
use bftp_tests::{FtpOptions, FtpServer, ServerKind, SmtpSink};
use serde_json::Value;

/// The value of the sample line `series VALUE` of a /metrics text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn metrics(d: &Bftpd) -> String {
    let (code, body) = http(d.socket(), "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(code, 200, "{body}");
    body
}

fn keyword_hits(d: &Bftpd, k: &str) -> usize {
    let o = d.bftp(&["--json", "status", "--keyword", k]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["jobs"].as_array().map_or(0, Vec::len)
}

/// Polls `f` until it holds (bounded).
fn wait_until(d: &Bftpd, what: &str, limit: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what} not within {limit:?}\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A burst of jobs finishes and is mailed; once `keep_finished` (3 s) has passed, retention
/// removes them with everything of theirs, and nothing unfinished: a queued job (due next
/// year) and a finished job whose report is still pending stay. A removed job's request key
/// makes a new job; its keyword finds nothing.
#[test]
fn retention_removes_old_final_jobs_and_nothing_unfinished() {
    let mut sink = SmtpSink::start().unwrap();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/f.dat", &content("f", 10_000)).unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(|dir| {
        Bftpd::mail_config(dir, sink.port(), "[store]\nkeep_finished = \"3s\"\n")
    })
    .unwrap();
    let queued = submit(
        &d,
        &src,
        &dst,
        "out/f.dat",
        "in/q.dat",
        &["--start", "in 300days", "--keyword", "later"],
    );
    let burst: Vec<u64> = (0..12)
        .map(|i| {
            let key = format!("burst-{i}");
            submit(
                &d,
                &src,
                &dst,
                "out/f.dat",
                &format!("in/b{i}.dat"),
                &["--keyword", "burst", "--request-key", &key],
            )
        })
        .collect();
    for &id in &burst {
        assert_eq!(
            wait_final(&d, id, Duration::from_secs(60))["outcome"],
            "succeeded"
        );
    }
    wait_until(
        &d,
        "the burst's reports delivered",
        Duration::from_secs(30),
        || {
            burst
                .iter()
                .all(|&id| status(&d, id)["report"]["state"] == "delivered")
        },
    );
    let full = metrics(&d);
    // The last job's report cannot be delivered (451, retried): it stays pending.
    sink.set_reply(Some("451 4.3.0 try again later")).unwrap();
    let pending = submit(
        &d,
        &src,
        &dst,
        "out/f.dat",
        "in/p.dat",
        &["--keyword", "pending"],
    );
    wait_final(&d, pending, Duration::from_secs(60));

    wait_until(&d, "the burst removed", Duration::from_secs(30), || {
        sample(&metrics(&d), "bftp_store_jobs_removed_total") == Some(12.0)
    });
    let after = metrics(&d);
    for &id in &burst {
        let o = d.bftp(&["status", &id.to_string()]);
        assert_eq!(
            o.status.code(),
            Some(5),
            "job {id} should be gone: {}",
            text(&o)
        );
    }
    assert_eq!(keyword_hits(&d, "burst"), 0);
    // Nothing unfinished touched, however old it is by then.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(status(&d, queued)["state"], "queued");
    let p = status(&d, pending);
    assert_eq!(
        (p["state"].as_str(), p["report"]["state"].as_str()),
        (Some("finished"), Some("pending")),
        "{p:#}"
    );
    assert_eq!(keyword_hits(&d, "later") + keyword_hits(&d, "pending"), 2);
    assert_eq!(
        sample(&full, "bftp_jobs{state=\"finished\"}"),
        Some(12.0),
        "{full}"
    );
    assert_eq!(
        sample(&after, "bftp_jobs{state=\"finished\"}"),
        Some(1.0),
        "{after}"
    );
    assert!(
        sample(&after, "bftp_store_disk_bytes").is_some_and(|b| b > 0.0),
        "{after}"
    );

    // The request key of a removed job makes a new job.
    let again = submit(
        &d,
        &src,
        &dst,
        "out/f.dat",
        "in/b0.dat",
        &["--keyword", "burst", "--request-key", "burst-0"],
    );
    assert!(!burst.contains(&again) && again > pending, "{again}");
    assert_eq!(keyword_hits(&d, "burst"), 1);
    sink.stop();
}

/// A tmpfs of `mib` MiB mounted for the test (root only), unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::Builder::new()
            .prefix("bftp-tmpfs-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let o = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(text(&o));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn free(&self) -> u64 {
        let o = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap()
    }

    /// Fills the filesystem until `leave` bytes are free.
    fn fill_to(&self, leave: u64) -> std::path::PathBuf {
        let path = self.path().join("filler");
        let size = self.free().saturating_sub(leave);
        let o = std::process::Command::new("fallocate")
            .args(["-l", &size.to_string()])
            .arg(&path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn member_states(v: &Value) -> Vec<String> {
    v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap().to_string())
        .collect()
}

/// The control host's disk fills while a job copies (a 48 MiB tmpfs holds the state
/// directory, and `[store] min_free_mib = 8`): a submit is refused with HTTP 507 and exit 9,
/// the attempt starts no new file but records the one in flight, no attempt starts while the
/// disk is full, and once space is freed the job finishes by itself; the store opens again
/// after a restart with every job.
#[test]
fn a_full_disk_refuses_submits_stops_new_files_and_recovers_by_itself() {
    let fs = match Tmpfs::mount(48) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("SKIPPED: cannot mount a tmpfs (this test needs root): {e}");
            return;
        }
    };
    let src = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            max_rate: Some(100_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    // Far more files than the pairs have in flight (4 pairs, each with the next file started
    // ahead while one is checked): the disk fills long before the last ones could begin,
    // however fast the logins are.
    let files: Vec<String> = (0..24).map(|i| format!("f{i:02}.dat")).collect();
    for f in &files {
        src.put_file(&format!("out/{f}"), &content(f, 50_000))
            .unwrap();
    }
    dst.mkdir("in").unwrap();
    let state = fs.path().join("state");
    let mut d = Bftpd::start_with(|dir| {
        format!(
            "{}[store]\nmin_free_mib = 8\n",
            Bftpd::default_config(dir).replace(
                &dir.join("state").display().to_string(),
                &state.display().to_string()
            )
        )
    })
    .unwrap();
    let job = submit(&d, &src, &dst, "out/*.dat", "in/", &["--retry-first", "1s"]);
    wait_until(&d, "a first file copied", Duration::from_secs(30), || {
        member_states(&status(&d, job))
            .iter()
            .any(|s| s == "succeeded")
    });

    let filler = fs.fill_to(6 << 20);
    // A submit is refused: nothing stored, a clear error, its own exit code.
    let env = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let o = d.bftp_env(
        None,
        &[
            "--json",
            "submit",
            &src.url("out/f00.dat"),
            &dst.url("in/x.dat"),
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(9), "{}", text(&o));
    let body = String::from_utf8_lossy(&o.stdout).into_owned();
    let e: Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| panic!("{body}"));
    assert_eq!(e["kind"], "insufficient_storage", "{body}");
    assert!(e["message"].as_str().unwrap().contains("free"), "{body}");
    let o = d.bftp_env(
        None,
        &["submit", &src.url("out/f00.dat"), &dst.url("in/y.dat")],
        &env,
    );
    assert_eq!(o.status.code(), Some(9), "{}", text(&o));
    assert!(text(&o).contains("507"), "{}", text(&o));

    // The attempt stops taking files; the one in flight is recorded; the job waits.
    wait_until(&d, "the attempt stopped", Duration::from_secs(30), || {
        status(&d, job)["state"] == "queued"
    });
    let stopped = status(&d, job);
    let states = member_states(&stopped);
    let copied = states.iter().filter(|s| *s == "succeeded").count();
    assert!(
        copied < files.len(),
        "every file copied before the disk filled: {stopped:#}"
    );
    assert!(
        states.iter().all(|s| s == "succeeded" || s == "pending"),
        "{stopped:#}"
    );
    for (f, s) in files.iter().zip(&states) {
        if s == "succeeded" {
            assert_eq!(
                dst.read_file(&format!("in/{f}")).unwrap(),
                content(f, 50_000),
                "{f}"
            );
        }
    }
    let attempts = stopped["attempts"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let still = status(&d, job);
    assert_eq!(
        (still["state"].as_str(), still["attempts"].as_u64()),
        (Some("queued"), Some(attempts)),
        "an attempt started on a full disk: {still:#}"
    );
    assert!(d.logs().contains("nearly full"), "{}", d.logs());

    // Space comes back: no restart, the job finishes, submits work again.
    std::fs::remove_file(filler).unwrap();
    let done = wait_final(&d, job, Duration::from_secs(60));
    assert_eq!(done["outcome"], "succeeded", "{done:#}");
    for f in &files {
        assert_eq!(
            dst.read_file(&format!("in/{f}")).unwrap(),
            content(f, 50_000),
            "{f}"
        );
    }
    let again = submit(&d, &src, &dst, "out/f00.dat", "in/z.dat", &[]);
    assert_eq!(
        wait_final(&d, again, Duration::from_secs(60))["outcome"],
        "succeeded"
    );

    // The store was never damaged: it opens (digest and watermark checked) with every job.
    d.terminate(Duration::from_secs(20)).unwrap();
    d.launch().unwrap();
    assert_eq!(status(&d, job)["outcome"], "succeeded");
    assert_eq!(status(&d, again)["outcome"], "succeeded");
    drop(d);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    let o = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// `bftpd backup` of a running daemon with a finished, a queued and a running job; the copy
/// restored into another state directory (the first daemon killed, as a lost machine): the
/// restored daemon starts with every job, and the job that was running is requeued and
/// finishes there.
#[test]
fn a_backup_of_a_running_daemon_restores_elsewhere_with_every_job() {
    let src = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            max_rate: Some(100_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/small.dat", &content("small", 1_000))
        .unwrap();
    src.put_file("out/slow.dat", &content("slow", 400_000))
        .unwrap();
    dst.mkdir("in").unwrap();
    let mut a = Bftpd::start().unwrap();
    let finished = submit(
        &a,
        &src,
        &dst,
        "out/small.dat",
        "in/small.dat",
        &["--keyword", "kept"],
    );
    assert_eq!(
        wait_final(&a, finished, Duration::from_secs(60))["outcome"],
        "succeeded"
    );
    let queued = submit(
        &a,
        &src,
        &dst,
        "out/small.dat",
        "in/later.dat",
        &["--start", "in 300days"],
    );
    let running = submit(
        &a,
        &src,
        &dst,
        "out/slow.dat",
        "in/slow.dat",
        &["--retry-first", "1s"],
    );
    wait_until(&a, "the slow copy running", Duration::from_secs(30), || {
        status(&a, running)["state"] == "running"
    });

    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().join("b1");
    let o = std::process::Command::new(bftp_tests::daemon::bin("bftpd"))
        .args(["backup", "--config"])
        .arg(a.config_path())
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", text(&o), a.logs());
    let answer: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(answer["jobs"], 3, "{answer:#}");
    assert!(dir.join("store/db").exists() && dir.join("secret.key").exists());
    // A second backup into the same directory is refused, naming why.
    let o = std::process::Command::new(bftp_tests::daemon::bin("bftpd"))
        .args(["backup", "--config"])
        .arg(a.config_path())
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("not empty"),
        "{}",
        text(&o)
    );
    a.kill9();

    // Another machine: a fresh state directory holding the copy.
    let b = Bftpd::start_with(|d| {
        let state = d.join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        copy_dir(&dir.join("store"), &state.join("store"));
        copy_dir(&dir.join("secret.key"), &state.join("secret.key"));
        Bftpd::default_config(d)
    })
    .unwrap();
    assert_eq!(status(&b, finished)["outcome"], "succeeded");
    assert_eq!(keyword_hits(&b, "kept"), 1);
    assert_eq!(status(&b, queued)["state"], "queued");
    let done = wait_final(&b, running, Duration::from_secs(60));
    assert_eq!(done["outcome"], "succeeded", "{done:#}\n{}", b.logs());
    assert_eq!(
        dst.read_file("in/slow.dat").unwrap(),
        content("slow", 400_000)
    );
    assert!(
        b.logs().contains("interrupted by the last stop"),
        "{}",
        b.logs()
    );
    // The restored daemon takes new jobs, with ids after the copied ones.
    let new = submit(&b, &src, &dst, "out/small.dat", "in/new.dat", &[]);
    assert!(new > running, "{new}");
}
