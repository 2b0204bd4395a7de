//! Driving a running bftpd through the `bftp` CLI and reading its job views: submit a job,
//! read its status, wait until it is final, and the small readers of a view the tests share.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::daemon::{text, Bftpd};
use crate::FtpServer;

pub fn submit(
    d: &Bftpd,
    src: &FtpServer,
    dst: &FtpServer,
    src_path: &str,
    dst_path: &str,
    extra: &[&str],
) -> u64 {
    let (s, t) = (src.url(src_path), dst.url(dst_path));
    submit_urls(d, (&s, src.password()), (&t, dst.password()), extra)
}

/// `bftp --json submit SOURCE DEST EXTRA...` with each side's (URL, password), for servers
/// of any kind (the scripted one included): the new job's id.
pub fn submit_urls(
    d: &Bftpd,
    (source, source_password): (&str, &str),
    (dest, dest_password): (&str, &str),
    extra: &[&str],
) -> u64 {
    let mut args = vec!["--json", "submit", source, dest];
    args.extend_from_slice(extra);
    let env = [
        ("BFTP_SOURCE_PASSWORD", source_password),
        ("BFTP_DEST_PASSWORD", dest_password),
    ];
    let o = d.bftp_env(None, &args, &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["job"]["id"].as_u64().unwrap()
}

pub fn status(d: &Bftpd, id: u64) -> Value {
    let o = d.bftp(&["--json", "status", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Polls the job until it is finished or cancelled (bounded).
pub fn wait_final(d: &Bftpd, id: u64, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let v = status(d, id);
        if v["state"] == "finished" || v["state"] == "cancelled" {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not final after {limit:?}: {v:#}\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The bftpd test config plus `extra` TOML tables (none of which the default config has).
pub fn config_plus(extra: &'static str) -> impl FnOnce(&Path) -> String {
    move |dir| format!("{}{extra}", Bftpd::default_config(dir))
}

pub fn member_names(v: &Value) -> Vec<String> {
    v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

/// Polls until `cond` holds (bounded).
pub fn poll(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn kinds(v: &Value) -> Vec<String> {
    v["history"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["event"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The name a succeeded unique member says it was stored as (`stored as "NAME"; ...`).
pub fn stored_as(member: &Value) -> Option<String> {
    let detail = member["detail"].as_str()?;
    let rest = detail.strip_prefix("stored as \"")?;
    Some(rest[..rest.find('"')?].to_owned())
}
