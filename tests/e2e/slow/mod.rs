//! The slow group (`cargo test -p bftp-tests --test e2e -- slow::`), run by tests/run on its own:
//! every slow test is under this module (a submodule per area), so the one filter `slow::`
//! selects the group and `--skip slow::` leaves it out. This file holds the general one.

mod engine;
mod package;
mod pg;
mod relay;
mod scheduler;
mod tree;
mod unique;
mod watch;

use bftp_tests::daemon::{text, Bftpd};
use serde_json::Value;

/// Twenty crashes, each right after a submit was acknowledged: every acknowledged job is
/// there after every restart.
#[test]
fn twenty_kill9s_after_acknowledged_submits_lose_nothing() {
    let mut d = Bftpd::start().unwrap();
    let mut acked = Vec::new();
    for round in 0..20 {
        let o = d.bftp_env(
            None,
            &[
                "--json",
                "submit",
                "ftp://127.0.0.1/pub/f",
                "ftp://127.0.0.1:2121/in/",
                "--start",
                "in 1h",
                "--keyword",
                &format!("round-{round}"),
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        acked.push(v["job"]["id"].as_u64().unwrap());
        d.restart_after_kill9().unwrap();
        let o = d.bftp(&["--json", "status", "--all"]);
        let list: Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut ids: Vec<u64> = list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_u64().unwrap())
            .collect();
        ids.sort();
        assert_eq!(ids, acked, "after crash {round}");
    }
}
