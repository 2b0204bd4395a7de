//! Unique (STOU) copies and cancelled copies against the real bftpd (issue 11, items 1, 2, 3
//! and 6): no destination file bftpd has not proven its own is deleted or claimed, a lost
//! race for a STOU name is retried, a crash after the 150 is settled from the announced
//! name, and a cancel leaves no partial file behind.

use std::collections::HashMap;
use std::time::Duration;

use bftp_tests::daemon::{text, Bftpd};
use bftp_tests::files::{content, file_len, write_payload, BIG};
use bftp_tests::hostile::{Action, HostileServer, Script};
use bftp_tests::jobs::{
    config_plus, kinds, poll, status, stored_as, submit, submit_urls, wait_final,
};
use bftp_tests::nodes::{node_config, signal};
use bftp_tests::postgres;
use bftp_tests::{FtpOptions, FtpServer, ServerKind};
use serde_json::Value;

/// Pure-FTPd tells two sessions one STOU name and stores the later upload as `NAME.1`
/// without saying so (here the scripted server does it every time: each session's first
/// STOU is told `stou.1`). Three jobs, one file each, two of them of the same size: the
/// first to store keeps `stou.1`; the others must not delete it (before: a SIZE mismatch
/// made bftpd DELE `stou.1`) nor claim it (before: an equal size made a second member
/// `succeeded, stored as stou.1`). They end `uncertain`, and every byte is still there.
#[test]
fn a_stou_name_told_to_several_jobs_stays_the_first_ones_and_nothing_is_deleted() {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let files = [
        ("a.dat", content("a", 1000)),
        ("b.dat", content("b", 2000)),
        ("c.dat", content("c", 1000)),
    ];
    for (n, c) in &files {
        src.put_file(&format!("out/{n}"), c).unwrap();
    }
    let dst = HostileServer::start(
        Script::new()
            .user("dst", "dst-pw")
            .dir("/in")
            .stou_names_per_session(),
    )
    .unwrap();
    let d = Bftpd::start().unwrap();
    let ids: Vec<(u64, &str, &Vec<u8>)> = files
        .iter()
        .map(|(n, c)| {
            let id = submit_urls(
                &d,
                (&src.url(&format!("out/{n}")), src.password()),
                (&dst.url("in/"), dst.password()),
                &["--dest-command", "unique"],
            );
            (id, *n, c)
        })
        .collect();
    let finals: Vec<(Value, &str, &Vec<u8>)> = ids
        .iter()
        .map(|(id, name, bytes)| (wait_final(&d, *id, Duration::from_secs(60)), *name, *bytes))
        .collect();
    assert_one_keeps_the_name(&dst, &finals);
}

/// The jobs' ends (`finals`: the job, the file's name, its bytes) after each was told
/// `stou.1`: exactly one claims it, holding its bytes; the others are `uncertain`; nothing
/// was deleted and every file's bytes are on the destination.
fn assert_one_keeps_the_name(dst: &HostileServer, finals: &[(Value, &str, &Vec<u8>)]) {
    let mut claimed: HashMap<String, &str> = HashMap::new();
    let mut states = Vec::new();
    for (v, name, bytes) in finals {
        let m = &v["members"][0];
        states.push(m["state"].as_str().unwrap_or("?").to_owned());
        match m["state"].as_str() {
            Some("succeeded") => {
                let stored = stored_as(m).unwrap_or_else(|| panic!("no stored name: {v:#}"));
                assert_eq!(
                    dst.stored(&format!("/in/{stored}")).as_ref(),
                    Some(*bytes),
                    "{name} claims {stored}, which does not hold its bytes: {v:#}\n{:?}",
                    dst.files()
                );
                if let Some(other) = claimed.insert(stored.clone(), name) {
                    panic!("{stored} claimed by {other} and {name}");
                }
            }
            Some("uncertain") => assert!(
                m["detail"]
                    .as_str()
                    .is_some_and(|t| t.contains("stou.1") && t.contains("not deleted")
                        || t.contains("not claimed")),
                "{v:#}"
            ),
            _ => panic!("{name}: {v:#}"),
        }
    }
    eprintln!("members: {states:?}; files: {:?}", dst.files());
    assert_eq!(claimed.len(), 1, "{states:?}");
    assert!(
        !dst.commands().iter().any(|c| c.starts_with("DELE")),
        "bftpd deleted a file it had not proven its own: {:?}",
        dst.commands()
    );
    // No byte lost: every source's content is on the destination under some name.
    let stored: Vec<Vec<u8>> = dst.files().iter().filter_map(|f| dst.stored(f)).collect();
    for (_, name, bytes) in finals {
        assert!(stored.contains(bytes), "{name}'s bytes are gone");
    }
}

/// The same over two nodes of one PostgreSQL store: node a runs the first job (told
/// `stou.1`, it keeps it), then node b the two others, one after the other (a paused
/// meanwhile, so that b runs them), c (of a's size) first, each told `stou.1` again. The
/// memory of announced names is the store's, so b knows `stou.1` is a's job's: c must not
/// claim it (before: each node remembered only the names its own copies were told, and c
/// ended `succeeded, stored as "stou.1"`, a's file). The directories' slots of all nodes
/// are all given back once the copies end.
#[test]
fn a_stou_name_told_to_jobs_on_two_pg_nodes_stays_the_first_ones_and_nothing_is_deleted() {
    let url = postgres::fresh_database();
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let files = [
        ("a.dat", content("a", 1000)),
        ("b.dat", content("b", 2000)),
        ("c.dat", content("c", 1000)),
    ];
    for (n, c) in &files {
        src.put_file(&format!("out/{n}"), c).unwrap();
    }
    let dst = HostileServer::start(
        Script::new()
            .user("dst", "dst-pw")
            .dir("/in")
            .stou_names_per_session(),
    )
    .unwrap();
    let job = |d: &Bftpd, n: &str| {
        submit_urls(
            d,
            (&src.url(&format!("out/{n}")), src.password()),
            (&dst.url("in/"), dst.password()),
            &["--dest-command", "unique"],
        )
    };
    let a = Bftpd::start_with(node_config(&url, "stou-a", None)).unwrap();
    let first = wait_final(&a, job(&a, "a.dat"), Duration::from_secs(60));
    let db = postgres::Cluster::db_of(&url);
    let stou_slots = || {
        postgres::cluster()
            .psql(
                db,
                "SELECT count(*) FROM host_slots WHERE host LIKE 'stou %'",
            )
            .unwrap()
    };
    poll(
        Duration::from_secs(10),
        "a's directory slot given back",
        || stou_slots() == "0",
    );
    let key = a.state_dir().join("secret.key");
    let b = Bftpd::start_with(node_config(&url, "stou-b", Some(&key))).unwrap();
    signal(&a, libc::SIGSTOP);
    // c first: b has not been told any name yet.
    let mut finals = vec![(first, files[0].0, &files[0].1)];
    for (n, c) in [&files[2], &files[1]] {
        finals.push((wait_final(&b, job(&b, n), Duration::from_secs(60)), *n, c));
    }
    signal(&a, libc::SIGCONT);
    for (v, _, _) in &finals[1..] {
        assert!(
            kinds(v).iter().filter(|k| *k == "start").count() == 1,
            "run once, by b: {v:#}"
        );
    }
    assert_eq!(stou_slots(), "0", "b gave its directory slot back");
    assert_one_keeps_the_name(&dst, &finals);
}

/// vsftpd answers 553 to the session that loses a race for `STOU.n`: not the file's
/// fault. The scripted destination answers the first STOU so; the member is tried again
/// in the same attempt and succeeds (before: `failed_permanent`).
#[test]
fn a_553_to_stou_is_tried_again_not_a_permanent_failure() {
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/a.dat", &content("a", 5000)).unwrap();
    let dst = HostileServer::start(Script::new().user("dst", "dst-pw").dir("/in").on(
        "STOU",
        Action::Sequence(vec![
            Action::reply("553 Could not create file."),
            Action::Default,
        ]),
    ))
    .unwrap();
    let d = Bftpd::start().unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/a.dat"), src.password()),
        (&dst.url("in/"), dst.password()),
        &["--dest-command", "unique"],
    );
    let v = wait_final(&d, id, Duration::from_secs(60));
    assert_eq!(v["outcome"], "succeeded", "{v:#}");
    assert_eq!(v["attempts"], 1, "tried again within the attempt: {v:#}");
    let name = stored_as(&v["members"][0]).unwrap();
    assert_eq!(
        dst.stored(&format!("/in/{name}")),
        Some(content("a", 5000)),
        "{:?}",
        dst.files()
    );
}

/// kill -9 of bftpd while a STOU copy waits for its 226, the file complete on the
/// destination: after the restart the member is `succeeded` under the name the server
/// announced in its 150 (recorded in the intent before the source sent a byte), not
/// `uncertain`, and nothing is copied twice.
#[test]
fn a_kill9_after_the_stou_150_is_settled_from_the_announced_name() {
    const SIZE: usize = 3 << 20;
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/big.dat", &content("big", SIZE)).unwrap();
    // The whole upload, then no 226: bftpd waits for it until it is killed.
    let dst = HostileServer::start(
        Script::new()
            .user("dst", "dst-pw")
            .dir("/in")
            .on("STOU", Action::Sequence(vec![Action::TransferThenSilence])),
    )
    .unwrap();
    let mut d = Bftpd::start().unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/big.dat"), src.password()),
        (&dst.url("in/"), dst.password()),
        &["--dest-command", "unique"],
    );
    poll(Duration::from_secs(30), "the upload complete", || {
        dst.stored("/in/stou.1").is_some_and(|b| b.len() == SIZE)
    });
    d.kill9();
    d.launch().unwrap();
    let v = wait_final(&d, id, Duration::from_secs(60));
    let m = &v["members"][0];
    assert_eq!(m["state"], "succeeded", "{v:#}\n{}", d.logs());
    assert_eq!(stored_as(m).as_deref(), Some("stou.1"), "{v:#}");
    assert!(
        m["detail"]
            .as_str()
            .is_some_and(|t| t.contains("resolved after an interruption")),
        "{v:#}"
    );
    assert_eq!(
        dst.commands()
            .iter()
            .filter(|c| c.starts_with("STOU"))
            .count(),
        1,
        "copied again: {:?}",
        dst.commands()
    );
    assert_eq!(dst.stored("/in/stou.1"), Some(content("big", SIZE)));
}

/// A cancel in the middle of a replace copy: the partial destination file is deleted (as
/// after a failed replace copy) and the member counts the attempt (before: 32 MB of a
/// 500 MiB copy stayed, and the member showed 0 attempts).
#[test]
fn a_cancel_mid_copy_deletes_the_partial_file_and_counts_the_attempt() {
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let path = src.put_file("big/data.bin", b"").unwrap();
    write_payload(&path, BIG, 3);
    dst.mkdir("in").unwrap();
    let d = Bftpd::start_with(config_plus("")).unwrap();
    let id = submit(&d, &src, &dst, "big/data.bin", "in/data.bin", &[]);
    let copy = dst.path("in/data.bin");
    poll(Duration::from_secs(30), "the transfer starting", || {
        file_len(&copy) > 0
    });
    let o = d.bftp(&["--json", "cancel", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    poll(Duration::from_secs(15), "the partial file deleted", || {
        !copy.exists()
    });
    poll(Duration::from_secs(10), "the attempt counted", || {
        status(&d, id)["members"][0]["attempts"] == 1
    });
    let v = status(&d, id);
    assert_eq!(v["state"], "cancelled", "{v:#}");
    assert!(
        v["members"][0]["detail"]
            .as_str()
            .is_some_and(|t| t.contains("partial file was deleted")),
        "{v:#}"
    );
}

/// A cancel in the middle of a unique copy: the destination stalls after the first chunk
/// (and ignores ABOR). The partial file's name was announced to this copy, nobody else
/// claims it and it is smaller than the source: provably ours, so bftpd logs in again and
/// deletes it; the member counts the attempt.
#[test]
fn a_cancel_mid_stou_deletes_the_partial_file_that_is_provably_ours() {
    let src = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    src.put_file("out/big.dat", &content("big", 4 << 20))
        .unwrap();
    let dst = HostileServer::start(
        Script::new()
            .user("dst", "dst-pw")
            .dir("/in")
            .on("STOU", Action::StallMidTransfer),
    )
    .unwrap();
    let d = Bftpd::start().unwrap();
    let id = submit_urls(
        &d,
        (&src.url("out/big.dat"), src.password()),
        (&dst.url("in/"), dst.password()),
        &["--dest-command", "unique"],
    );
    poll(Duration::from_secs(30), "the upload starting", || {
        dst.stored("/in/stou.1").is_some_and(|b| !b.is_empty())
    });
    let o = d.bftp(&["--json", "cancel", &id.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    poll(Duration::from_secs(15), "the partial file deleted", || {
        dst.stored("/in/stou.1").is_none()
    });
    poll(Duration::from_secs(10), "the attempt counted", || {
        status(&d, id)["members"][0]["attempts"] == 1
    });
    let v = status(&d, id);
    assert_eq!(v["state"], "cancelled", "{v:#}");
    assert!(
        dst.commands().iter().any(|c| c == "DELE in/stou.1"),
        "{:?}",
        dst.commands()
    );
}

/// A unique job, then an append job, between the same two real servers (vsftpd to
/// Pure-FTPd), four times. Pure-FTPd 1.0.50 turns its no-truncate mode on for the rest of a
/// session at the first STOU, and an APPE in that session then writes a new file over the old
/// one: before, the append job took the pair the unique job had kept, its file lost the
/// prefix, and the size check's retry appended the source a second time. A pair whose
/// destination was sent STOU is no longer kept. Every appended file must hold its prefix and
/// then the source, once.
#[test]
fn append_jobs_after_a_unique_job_on_the_same_servers_keep_their_prefix() {
    let src = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    let dst = FtpServer::start(ServerKind::PureFtpd, FtpOptions::default()).unwrap();
    dst.mkdir("u").unwrap();
    dst.mkdir("a").unwrap();
    let d = Bftpd::start().unwrap();
    let proxy = bftp_tests::delay::DelayProxy::for_server(&dst, Duration::ZERO).unwrap();
    let durl = |p: &str| format!("ftp://{}@{}:{}/{p}", dst.user(), dst.host(), proxy.port());
    for k in 0..4 {
        let u = content(&format!("u{k}"), 20_000 + k);
        src.put_file(&format!("out/u{k}.bin"), &u).unwrap();
        let id = submit_urls(
            &d,
            (&src.url(&format!("out/u{k}.bin")), src.password()),
            (&durl("u/"), dst.password()),
            &["--dest-command", "unique"],
        );
        let v = wait_final(&d, id, Duration::from_secs(60));
        assert_eq!(v["outcome"], "succeeded", "{v:#}");

        let a = content(&format!("a{k}"), 20_067 + k);
        let prefix = format!("prefix of a{k}\n").into_bytes();
        src.put_file(&format!("out/a{k}.bin"), &a).unwrap();
        dst.put_file(&format!("a/{k}.bin"), &prefix).unwrap();
        let id = submit_urls(
            &d,
            (&src.url(&format!("out/a{k}.bin")), src.password()),
            (&durl(&format!("a/{k}.bin")), dst.password()),
            &["--dest-command", "append"],
        );
        let v = wait_final(&d, id, Duration::from_secs(60));
        assert_eq!(v["outcome"], "succeeded", "{v:#}");
        let got = dst.read_file(&format!("a/{k}.bin")).unwrap();
        let want = [prefix.clone(), a.clone()].concat();
        assert!(
            got == want,
            "round {k}: a/{k}.bin holds {} bytes, {} expected (prefix kept: {}); job: {v:#}",
            got.len(),
            want.len(),
            got.starts_with(&prefix)
        );
    }
}
