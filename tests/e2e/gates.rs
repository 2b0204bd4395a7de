//! Start gates (issue 31, RULES.md §16.4, §16.5): time windows and one probe for a server
//! that is down. Each server sits behind a counting proxy on its own address, so what
//! reaches it (and when) is seen from outside bftpd.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context, Result};
use bftp_tests::daemon::{http, Bftpd};
use bftp_tests::delay::DelayProxy;
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::jobs::{status, submit_urls, wait_final};
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// Whole seconds since the epoch, now.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The UTC wall time of `unix` as `HH:MM:SS`.
fn hms(unix: u64) -> String {
    let s = unix % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn rfc3339(unix: u64) -> String {
    bftp_core::Timestamp(unix * 1000).to_rfc3339()
}

/// Waits until the wall clock reads at least `unix`, then `extra` more.
fn sleep_until(unix: u64, extra: Duration) {
    let at = UNIX_EPOCH + Duration::from_secs(unix) + extra;
    if let Ok(d) = at.duration_since(SystemTime::now()) {
        std::thread::sleep(d);
    }
}

fn start(extra: String) -> Result<Bftpd> {
    Bftpd::start_with(move |dir| format!("{}{extra}", Bftpd::default_config(dir)))
}

/// `ftp://user@host:PROXY/path` for a server behind `proxy`.
fn via(server: &FtpServer, proxy: &DelayProxy, path: &str) -> String {
    format!(
        "ftp://{}@{}:{}/{path}",
        server.user(),
        server.host(),
        proxy.port()
    )
}

fn jobs(d: &Bftpd) -> Result<Vec<Value>> {
    let (code, body) = http(d.socket(), "GET", "/v1/jobs", None, &[])?;
    ensure!(code == 200, "GET /v1/jobs: {code} {body}");
    let v: Value = serde_json::from_str(&body)?;
    Ok(v["jobs"].as_array().context("no jobs")?.clone())
}

/// A window that opens in a few seconds: no connection reaches either server before it
/// opens, the job shows why it waits and until when (as data), and it runs once it opens,
/// its one attempt counted.
#[test]
fn nothing_starts_before_the_window_opens_and_everything_after() -> Result<()> {
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    let files: Vec<Vec<u8>> = (0..3).map(|i| payload(20_000 + i, i as u8)).collect();
    for (i, f) in files.iter().enumerate() {
        src.put_file(&format!("out/f{i}.bin"), f)?;
    }
    dst.mkdir("in")?;
    let (sp, dp) = (
        DelayProxy::for_server(&src, Duration::ZERO)?,
        DelayProxy::for_server(&dst, Duration::ZERO)?,
    );
    let opens = unix_now() + 5;
    let d = start(format!(
        "[[windows]]\nhosts = [\"{}\"]\nwindows = [\"{}-{}\"]\ntime_zone = \"UTC\"\n",
        dst.host(),
        hms(opens),
        hms(opens + 600)
    ))?;
    let id = submit_urls(
        &d,
        (&via(&src, &sp, "out/*.bin"), src.password()),
        (&via(&dst, &dp, "in/"), dst.password()),
        &[],
    );
    // Waiting, and why, as data.
    bftp_tests::jobs::poll(
        Duration::from_secs(5),
        "the job waits for the window",
        || status(&d, id)["waiting"]["reason"] == "window",
    );
    let v = status(&d, id);
    ensure!(
        v["state"] == "queued" && v["attempts"] == 0,
        "before the window: {v:#}"
    );
    ensure!(
        v["waiting"]["until"] == rfc3339(opens).as_str()
            && v["waiting"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("waiting for the window")),
        "the wait: {:#}",
        v["waiting"]
    );
    let shown = d.bftp(&["status", &id.to_string()]);
    ensure!(
        bftp_tests::daemon::text(&shown).contains("waiting for the window"),
        "bftp status: {}",
        bftp_tests::daemon::text(&shown)
    );
    // A foreground transfer does not wait: refused, saying when the window opens.
    let o = d.bftp_env(
        None,
        &[
            "transfer",
            &via(&src, &sp, "out/f0.bin"),
            &via(&dst, &dp, "in/"),
        ],
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    let said = bftp_tests::daemon::text(&o);
    ensure!(
        o.status.code() != Some(0)
            && said.contains("waiting for the window")
            && said.contains(&rfc3339(opens)),
        "bftp transfer during a closed window: {said}"
    );
    // Nothing reaches a server before the window opens.
    let first = loop {
        if sp.connections() + dp.connections() > 0 {
            break SystemTime::now();
        }
        ensure!(
            SystemTime::now() < UNIX_EPOCH + Duration::from_secs(opens + 10),
            "nothing started within 10 s of the window opening\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let opened = UNIX_EPOCH + Duration::from_secs(opens);
    ensure!(
        first >= opened,
        "a server was reached {:?} before the window opened",
        opened.duration_since(first).unwrap_or_default()
    );
    ensure!(
        first.duration_since(opened)? < Duration::from_secs(2),
        "the job started {:?} after the window opened",
        first.duration_since(opened)?
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    ensure!(
        v["outcome"] == "succeeded" && v["attempts"] == 1 && v["waiting"].is_null(),
        "{v:#}"
    );
    for (i, f) in files.iter().enumerate() {
        ensure!(dst.read_file(&format!("in/f{i}.bin"))? == *f, "in/f{i}.bin");
    }
    Ok(())
}

/// A window that closes while a job copies (each RETR held so the job lasts): the file in
/// flight finishes, no new file starts until the window opens again, the job shows it waits
/// meanwhile, then finishes; the stopped attempt does not count.
#[test]
fn no_new_file_starts_after_the_window_closes() -> Result<()> {
    const SLOW: Duration = Duration::from_millis(700);
    let mut script = Script::new()
        .host(std::net::Ipv4Addr::new(127, 0, 0, 1))
        .user("src", "src-pw")
        .on("RETR", Action::delayed(SLOW, Action::Default));
    let files: Vec<Vec<u8>> = (0..10).map(|i| payload(10_000 + i, i as u8)).collect();
    for (i, f) in files.iter().enumerate() {
        script = script.file(&format!("/out/f{i}.bin"), f.clone());
    }
    let src = HostileServer::start(script)?;
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    dst.mkdir("in")?;
    let now = unix_now();
    let (closes, reopens) = (now + 5, now + 11);
    let d = start(format!(
        "[ftp]\nparallel_pairs = 1\n\
         [[windows]]\nhosts = [\"{}\"]\nwindows = [\"{}-{}\", \"{}-{}\"]\n",
        dst.host(),
        hms(now - 60),
        hms(closes),
        hms(reopens),
        hms(reopens + 600)
    ))?;
    let id = submit_urls(
        &d,
        (&src.url("out/*.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
        &[],
    );
    let retrs = || {
        src.observed()
            .commands
            .iter()
            .filter(|c| c.line.starts_with("RETR"))
            .count()
    };
    // The copy in flight when the window closes finishes (within one slow RETR and its
    // proof); then the count of RETRs stands still until the window opens again.
    sleep_until(closes, SLOW * 2 + Duration::from_millis(500));
    let at_close = retrs();
    ensure!(
        (1..files.len()).contains(&at_close),
        "{at_close} files begun by the time the window closed"
    );
    let v = status(&d, id);
    ensure!(
        v["state"] == "queued"
            && v["waiting"]["reason"] == "window"
            && v["waiting"]["until"] == rfc3339(reopens).as_str(),
        "while the window is closed: {v:#}"
    );
    sleep_until(reopens, Duration::ZERO);
    let before_open = retrs();
    ensure!(
        before_open == at_close,
        "{} files begun while the window was closed",
        before_open - at_close
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    ensure!(
        v["outcome"] == "succeeded" && v["attempts"] == 1,
        "the stopped attempt does not count: {v:#}"
    );
    ensure!(
        bftp_tests::jobs::kinds(&v).iter().any(|k| k == "waiting"),
        "history: {:?}",
        bftp_tests::jobs::kinds(&v)
    );
    for (i, f) in files.iter().enumerate() {
        ensure!(dst.read_file(&format!("in/f{i}.bin"))? == *f, "in/f{i}.bin");
    }
    Ok(())
}

/// `hard = true`: the copy in flight when the window closes is aborted (ABOR to the
/// source), not finished; the job waits for the window and copies the file once it opens.
#[test]
fn a_hard_window_aborts_the_copy_in_flight() -> Result<()> {
    let f = payload(30_000, 3);
    let src = HostileServer::start(
        Script::new()
            .host(std::net::Ipv4Addr::new(127, 0, 0, 1))
            .user("src", "src-pw")
            .file("/out/f.bin", f.clone())
            .on(
                "RETR",
                Action::delayed(Duration::from_secs(8), Action::Default),
            ),
    )?;
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    dst.mkdir("in")?;
    let now = unix_now();
    // The RETR's reply comes 8 s after it: the window closes while it is awaited.
    let (closes, reopens) = (now + 5, now + 12);
    let d = start(format!(
        "[[windows]]\nhosts = [\"{}\"]\nwindows = [\"{}-{}\", \"{}-{}\"]\nhard = true\n",
        dst.host(),
        hms(now - 60),
        hms(closes),
        hms(reopens),
        hms(reopens + 600)
    ))?;
    let id = submit_urls(
        &d,
        (&src.url("out/f.bin"), src.password()),
        (&dst.url("in/"), dst.password()),
        &[],
    );
    src.wait_for_command("ABOR", Duration::from_secs(15))
        .with_context(|| {
            format!(
                "no ABOR reached the source when the hard window closed\n{}",
                d.logs()
            )
        })?;
    let aborted = unix_now();
    ensure!(
        (closes..reopens).contains(&aborted),
        "ABOR at {aborted}, the window closed at {closes} and reopens at {reopens}"
    );
    bftp_tests::jobs::poll(
        Duration::from_secs(5),
        "the job waits for the window",
        || status(&d, id)["waiting"]["reason"] == "window",
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    ensure!(
        v["outcome"] == "succeeded" && v["attempts"] == 1,
        "the aborted attempt does not count: {v:#}"
    );
    ensure!(dst.read_file("in/f.bin")? == f, "in/f.bin differs");
    Ok(())
}

/// A server that is down while 20 jobs wait for it: one job finds it down and opens its
/// breaker, the others wait without trying (one probe at a time reaches its address), and
/// all 20 (the one that found it down included) start within a second of the server coming
/// back.
#[test]
fn one_probe_for_a_server_that_is_down_and_all_its_jobs_released_at_once() -> Result<()> {
    const JOBS: usize = 20;
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    for i in 0..JOBS {
        src.put_file(&format!("out/f{i}.bin"), &payload(5_000, i as u8))?;
    }
    dst.mkdir("in")?;
    let dp = DelayProxy::for_server(&dst, Duration::ZERO)?;
    dp.set_down(true);
    let d = start(
        "[retry]\nfirst_interval = \"1s\"\ncap = \"2s\"\n\
         [scheduler]\nmax_running_jobs = 24\n\
         [ftp]\nmax_connections_per_host = 64\nprobe_first = \"200ms\"\nprobe_max = \"300ms\"\n"
            .to_string(),
    )?;
    let submit = |i: usize, extra: &[&str]| {
        submit_urls(
            &d,
            (&src.url(&format!("out/f{i}.bin")), src.password()),
            (&via(&dst, &dp, "in/"), dst.password()),
            extra,
        )
    };
    // The first job finds the server down and opens its breaker; it keeps its own retry
    // schedule (RULES.md §5: here a long one), and is released with the others.
    let first = submit(0, &["--retry-first", "10m", "--retry-cap", "10m"]);
    bftp_tests::jobs::poll(
        Duration::from_secs(20),
        "the first job's attempt fails",
        || status(&d, first)["attempts"] == 1 && status(&d, first)["state"] == "queued",
    );
    let mut ids = vec![first];
    ids.extend((1..JOBS).map(|i| submit(i, &[])));
    let (refused_before, _) = dp.refused();
    let watched = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let (refused, most_at_once) = dp.refused();
    let probes = refused - refused_before;
    // A probe every 300 ms at most (each held 300 ms by the dead server): about ten in 3 s,
    // and never two at once; without the breaker each of the 20 jobs tries on its own.
    let bound = watched.elapsed().as_millis() as u64 / 300 + 2;
    ensure!(
        probes <= bound && most_at_once == 1,
        "{probes} connections reached the dead server in {:?} (bound {bound}), {most_at_once} at once",
        watched.elapsed()
    );
    let all = jobs(&d)?;
    for v in all.iter().filter(|v| v["id"].as_u64() != Some(first)) {
        ensure!(
            v["waiting"]["reason"] == "host_down"
                && v["waiting"]["host"] == format!("{}:{}", dst.host(), dp.port()).as_str()
                && v["waiting"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("to come back (probing)")),
            "a job while the server is down: {v:#}"
        );
    }
    // `bftp hosts` shows the breaker as data: open, the jobs waiting, the probes, why.
    let server = format!("{}:{}", dst.host(), dp.port());
    let breaker = |d: &Bftpd| -> Result<Value> {
        let o = d.bftp(&["--json", "hosts"]);
        ensure!(
            o.status.success(),
            "bftp hosts: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout)?;
        v["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|h| h["breakers"].as_array().into_iter().flatten())
            .find(|b| b["server"] == server.as_str())
            .cloned()
            .with_context(|| format!("no breaker of {server} in bftp hosts: {v:#}"))
    };
    let open = breaker(&d)?;
    ensure!(
        open["state"] == "open"
            && open["waiting"].as_u64() >= Some(1)
            && open["next_probe"].is_string()
            && open["last_error"].is_string(),
        "the breaker while the server is down: {open:#}"
    );
    let attempts_before: Vec<u64> = ids
        .iter()
        .map(|&id| status(&d, id)["attempts"].as_u64().unwrap_or(0))
        .collect();
    dp.set_down(false);
    let back = Instant::now();
    let started = loop {
        let now: Vec<Value> = jobs(&d)?;
        let n = ids
            .iter()
            .zip(&attempts_before)
            .filter(|(id, before)| {
                now.iter().any(|v| {
                    v["id"].as_u64() == Some(**id) && v["attempts"].as_u64().unwrap_or(0) > **before
                })
            })
            .count();
        if n == JOBS {
            break back.elapsed();
        }
        ensure!(
            back.elapsed() < Duration::from_secs(10),
            "{n} of {JOBS} jobs started within 10 s of the server coming back\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    ensure!(
        started <= Duration::from_secs(1),
        "the jobs started {started:?} after the server came back"
    );
    for &id in &ids {
        let v = wait_final(&d, id, Duration::from_secs(60));
        ensure!(v["outcome"] == "succeeded", "{v:#}");
    }
    let closed = breaker(&d)?;
    ensure!(
        closed["state"] == "closed" && closed["next_probe"].is_null(),
        "the breaker once the server is back: {closed:#}"
    );
    Ok(())
}
