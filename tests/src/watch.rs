//! Driving a running bftpd's watches (RULES.md §15) through the API (`/v1/watches`): add a
//! watch between two servers, read it, wait for deliveries, and gather every file its jobs
//! copied.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::daemon::{http, Bftpd};
use crate::jobs::status;
use crate::FtpServer;

/// `POST /v1/watches`: SRC_DIR on `src` to DST_DIR on `dst`, every `every`, with the
/// watch's other fields in `extra` (`{"settle": "2s", "patterns": ["*.csv"]}`) and the job's
/// in `extra["job"]` (merged into the job's request). Returns the watch's id.
pub fn add(
    d: &Bftpd,
    (src, src_dir): (&FtpServer, &str),
    (dst, dst_dir): (&FtpServer, &str),
    every: &str,
    extra: Value,
) -> u64 {
    let (code, body) = add_raw(d, (src, src_dir), (dst, dst_dir), every, extra);
    assert_eq!(code, 201, "{body}\n{}", d.logs());
    let v: Value = serde_json::from_str(&body).unwrap();
    v["id"].as_u64().unwrap()
}

/// [`add`] returning the status and body as they came.
pub fn add_raw(
    d: &Bftpd,
    (src, src_dir): (&FtpServer, &str),
    (dst, dst_dir): (&FtpServer, &str),
    every: &str,
    extra: Value,
) -> (u16, String) {
    let endpoint = |s: &FtpServer, path: &str| {
        json!({
            "host": s.host().to_string(),
            "port": s.port(),
            "user": s.user(),
            "password": s.password(),
            "path": path,
        })
    };
    let mut job = json!({
        "source": endpoint(src, src_dir),
        "destination": endpoint(dst, dst_dir),
    });
    let mut req = json!({ "every": every });
    if let Value::Object(fields) = extra {
        for (k, v) in fields {
            if k == "job" {
                if let Value::Object(job_fields) = v {
                    for (jk, jv) in job_fields {
                        job[jk] = jv;
                    }
                }
            } else {
                req[k] = v;
            }
        }
    }
    req["job"] = job;
    http(
        d.socket(),
        "POST",
        "/v1/watches",
        Some(&req.to_string()),
        &[],
    )
    .unwrap()
}

/// `GET /v1/watches/ID`.
pub fn show(d: &Bftpd, id: u64) -> Value {
    let (code, body) = http(d.socket(), "GET", &format!("/v1/watches/{id}"), None, &[]).unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits until the watch has made at least `polls` polls and its last job is final.
pub fn wait_polls(d: &Bftpd, id: u64, polls: u64, limit: Duration) -> Value {
    wait_for(d, id, limit, &format!("{polls} polls"), |w| {
        w["polls"].as_u64().unwrap_or(0) >= polls && w["current_job"].is_null()
    })
}

/// Waits until `cond` holds of the watch's view (bounded); returns the view.
pub fn wait_for(
    d: &Bftpd,
    id: u64,
    limit: Duration,
    what: &str,
    mut cond: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let w = show(d, id);
        if cond(&w) {
            return w;
        }
        assert!(
            Instant::now() < deadline,
            "watch {id}: {what}: not after {limit:?}: {w:#}\n{}",
            d.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every job the watch made (as the watch lists them: the last twenty) with its members.
pub fn jobs(d: &Bftpd, id: u64) -> Vec<Value> {
    let w = show(d, id);
    w["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| status(d, j.as_u64().unwrap()))
        .collect()
}

/// Every (name, state) of every member of the watch's jobs, in job order.
pub fn copies(d: &Bftpd, id: u64) -> Vec<(String, String)> {
    jobs(d, id)
        .iter()
        .flat_map(|j| {
            j["members"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("").to_owned(),
                        m["state"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How many members of the watch's jobs copied `name`.
pub fn copied(d: &Bftpd, id: u64, name: &str) -> usize {
    copies(d, id)
        .iter()
        .filter(|(n, s)| n == name && s == "succeeded")
        .count()
}

/// Sets a file's modify time on the server's disk with `touch -d` (`"2 years ago"`,
/// `"+5 hours"`, `"-15724720 seconds"`).
pub fn touch(server: &FtpServer, rel: &str, when: &str) {
    let out = std::process::Command::new("touch")
        .arg("-d")
        .arg(when)
        .arg(server.path(rel))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
