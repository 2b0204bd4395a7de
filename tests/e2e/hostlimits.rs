//! Limits learned from the servers (RULES.md §16.3): a server that allows two sessions per
//! client refuses bftpd's next login with its own "too many connections" reply; bftpd learns
//! what it held there (2 from vsftpd; from proFTPD, whose check races with logins at the same
//! moment, 2 or 3), shows it in `bftp hosts` with the reply, and copies every file of a
//! six-pair job on the pairs that fit, no file failing and no try counted; the limit is
//! remembered across a restart. A first pair refused waits and counts no try.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bftp_tests::daemon::{http, text, Bftpd, ALICE, BOB};
use bftp_tests::jobs::wait_final;
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

const FILES: usize = 12;

/// `[ftp]` for these tests: six pairs a job, more connections per host than the server
/// allows, no kept pairs (each job's connections are its own).
fn config(dir: &std::path::Path) -> String {
    format!(
        "{}[ftp]\nparallel_pairs = 6\nmax_connections_per_host = 8\npool_max_idle = 0\n",
        Bftpd::default_config(dir)
    )
}

fn hosts_json(d: &Bftpd) -> Result<Value> {
    let o = d.bftp(&["--json", "hosts"]);
    ensure!(o.status.code() == Some(0), "bftp hosts: {}", text(&o));
    Ok(serde_json::from_slice(&o.stdout)?)
}

fn host<'v>(v: &'v Value, name: &str) -> Option<&'v Value> {
    v["hosts"].as_array()?.iter().find(|h| h["host"] == name)
}

/// The limited server is `limited` (on its own address), the other one `other`; `from_limited`:
/// the limited one is the source, else the destination; `learned`: the limit it may teach.
/// `says`: a word of its refusal.
fn six_pairs_learn_the_limit(
    kind: ServerKind,
    addr: Ipv4Addr,
    from_limited: bool,
    learned: std::ops::RangeInclusive<u64>,
    says: &str,
) -> Result<()> {
    let limited = FtpServer::start(
        kind,
        FtpOptions {
            host: addr,
            max_sessions_per_client: Some(2),
            ..FtpOptions::default()
        },
    )?;
    let other = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    let (src, dst) = if from_limited {
        (&limited, &other)
    } else {
        (&other, &limited)
    };
    dst.mkdir("in")?;
    let files: Vec<Vec<u8>> = (0..FILES)
        .map(|i| payload(200_000 + i * 1000, i as u8))
        .collect();
    for (i, f) in files.iter().enumerate() {
        src.put_file(&format!("out/f{i:02}.bin"), f)?;
    }
    let mut d = Bftpd::start_with(config)?;
    let o = d.bftp_env(
        None,
        &["--json", "submit", &src.url("out/*.bin"), &dst.url("in/")],
        &[
            ("BFTP_SOURCE_PASSWORD", src.password()),
            ("BFTP_DEST_PASSWORD", dst.password()),
        ],
    );
    ensure!(o.status.code() == Some(0), "submit: {}", text(&o));
    let id = serde_json::from_slice::<Value>(&o.stdout)?["job"]["id"]
        .as_u64()
        .context("no job id")?;
    let v = wait_final(&d, id, Duration::from_secs(120));
    let members = v["members"].as_array().context("no members")?;
    ensure!(
        v["outcome"] == "succeeded"
            && v["attempts"] == 1
            && members.len() == FILES
            && members.iter().all(|m| m["state"] == "succeeded"),
        "every file copied in one try, none failed: {v:#}\n{}",
        d.logs()
    );
    for (i, f) in files.iter().enumerate() {
        ensure!(
            &dst.read_file(&format!("in/f{i:02}.bin"))? == f,
            "in/f{i:02}.bin differs"
        );
    }
    let name = addr.to_string();
    let shown = hosts_json(&d)?;
    let h = host(&shown, &name).with_context(|| format!("{name} not in {shown:#}"))?;
    let limit = h["learned"]["limit"].as_u64().unwrap_or(0);
    ensure!(
        h["configured_limit"] == 8
            && learned.contains(&limit)
            && h["limit"] == limit
            && h["learned"]["reply"]
                .as_str()
                .is_some_and(|r| r.to_lowercase().contains(says)),
        "a learned limit in {learned:?} with the server's reply: {h:#}\n{}",
        d.logs()
            .lines()
            .filter(|l| l.contains("too many") || l.contains("answered"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    ensure!(
        host(&shown, "127.0.0.2").is_some_and(|o| o["limit"] == 8 && o.get("learned").is_none()),
        "the other server keeps the configured limit: {shown:#}"
    );
    let human = d.bftp(&["hosts"]);
    ensure!(
        text(&human).contains(&format!("{name}: limit {limit} (configured 8)")),
        "bftp hosts: {}",
        text(&human)
    );
    let (_, metrics) = http(d.socket(), "GET", "/metrics", None, &[])?;
    for line in [
        format!("bftp_host_limit{{host=\"{name}\",kind=\"configured\"}} 8"),
        format!("bftp_host_limit{{host=\"{name}\",kind=\"learned\"}} {limit}"),
    ] {
        ensure!(
            metrics.contains(&line),
            "{line} not in /metrics:\n{metrics}"
        );
    }
    // A restart: the limit comes back from the store.
    d.terminate(Duration::from_secs(20))?;
    d.launch()?;
    let again = hosts_json(&d)?;
    let h =
        host(&again, &name).with_context(|| format!("{name} not after a restart: {again:#}"))?;
    ensure!(
        h["learned"]["limit"] == limit && h["limit"] == limit,
        "the learned limit after a restart: {h:#}"
    );
    Ok(())
}

/// vsftpd `max_per_ip=2` ("421 There are too many connections from your internet
/// address."), as the source.
#[test]
fn vsftpd_max_per_ip_teaches_two_and_every_file_is_copied() -> Result<()> {
    six_pairs_learn_the_limit(
        ServerKind::Vsftpd,
        Ipv4Addr::new(127, 0, 0, 41),
        true,
        2..=2,
        "too many connections",
    )
}

/// proFTPD `MaxClientsPerHost 2` ("Sorry, the maximum number of clients (2) from your host
/// are already connected."), as the destination. proFTPD checks at login, against the
/// sessions already past that check: logins at the same moment can pass it together (it
/// then holds three of bftpd's sessions), and the lesson is what bftpd held when refused, 2
/// or 3 (1 if every extra login was refused). vsftpd counts at accept: 2, always.
#[test]
fn proftpd_max_clients_per_host_teaches_what_was_held_and_every_file_is_copied() -> Result<()> {
    six_pairs_learn_the_limit(
        ServerKind::Proftpd,
        Ipv4Addr::new(127, 0, 0, 42),
        false,
        1..=3,
        "maximum number of clients",
    )
}

/// A job's first pair refused for too many (another client holds the server's two sessions)
/// is not a failed try: bftpd learns the limit (1: it held nothing there), the job waits and
/// tries again, and once the other client leaves it copies its file in its first attempt.
/// proFTPD refuses with a 530, which would otherwise end the job for good.
#[test]
fn a_first_pair_refused_for_too_many_waits_and_is_no_failed_try() -> Result<()> {
    let addr = Ipv4Addr::new(127, 0, 0, 43);
    let limited = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            host: addr,
            max_sessions_per_client: Some(2),
            ..FtpOptions::default()
        },
    )?;
    let other = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default())?;
    other.mkdir("in")?;
    let file = payload(100_000, 7);
    limited.put_file("out/a.bin", &file)?;
    let held = (limited.login()?, limited.login()?);
    let d = Bftpd::start_with(config)?;
    // Alice's job: she sees its hosts, Bob (no jobs) none, root (an admin) every one.
    let o = d.bftp_env(
        Some(ALICE),
        &[
            "--json",
            "submit",
            &limited.url("out/a.bin"),
            &other.url("in/"),
        ],
        &[
            ("BFTP_SOURCE_PASSWORD", limited.password()),
            ("BFTP_DEST_PASSWORD", other.password()),
        ],
    );
    ensure!(o.status.code() == Some(0), "submit: {}", text(&o));
    let id = serde_json::from_slice::<Value>(&o.stdout)?["job"]["id"]
        .as_u64()
        .context("no job id")?;
    let name = addr.to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let shown = hosts_json(&d)?;
        if host(&shown, &name).is_some_and(|h| h["learned"]["limit"] == 1) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "nothing learned: {shown:#}\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let as_user = |user| -> Result<Value> {
        let o = d.bftp_env(Some(user), &["--json", "hosts"], &[]);
        ensure!(o.status.code() == Some(0), "bftp hosts: {}", text(&o));
        Ok(serde_json::from_slice(&o.stdout)?)
    };
    let alices = as_user(ALICE)?;
    ensure!(
        host(&alices, &name).is_some_and(|h| h["learned"]["limit"] == 1)
            && host(&alices, "127.0.0.2").is_some(),
        "Alice sees her job's hosts: {alices:#}"
    );
    let bobs = as_user(BOB)?;
    ensure!(
        bobs["hosts"] == serde_json::json!([]),
        "Bob sees no host: {bobs:#}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let v = bftp_tests::jobs::status(&d, id);
    ensure!(v["state"] == "running", "still in its first try: {v:#}");
    drop(held);
    let v = wait_final(&d, id, Duration::from_secs(60));
    ensure!(
        v["outcome"] == "succeeded" && v["attempts"] == 1,
        "copied in its first try: {v:#}\n{}",
        d.logs()
    );
    ensure!(other.read_file("in/a.bin")? == file, "in/a.bin differs");
    Ok(())
}
