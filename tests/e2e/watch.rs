//! Watches (RULES.md §15) through a running bftpd against real servers: files are taken when
//! they are whole and only once, whatever their modify times say; new content under an old
//! name is taken again; a server without MLSD gives identities from SIZE and MDTM; `move`
//! deletes a source only after its proof; the late-arrival alarm mails once.

use std::process::Command;
use std::time::{Duration, Instant};

use bftp_tests::daemon::Bftpd;
use bftp_tests::watch::{add, copied, copies, show, touch, wait_for, wait_polls};
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind, SmtpSink};
use serde_json::json;

use ServerKind::{Proftpd, PureFtpd, Vsftpd};

fn server(kind: ServerKind) -> FtpServer {
    FtpServer::start(kind, FtpOptions::default()).unwrap()
}

/// A producer that writes a file a few KiB at a time, in place, while the watch polls every
/// second: no copy is made before the file is whole, and it is copied once, byte-exact.
#[test]
fn a_file_written_slowly_is_delivered_once_and_whole() {
    let src = server(Proftpd);
    let dst = server(PureFtpd);
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "2s"}),
    );
    let data = payload(40 * 1024, 7);
    let path = src.path("out/slow.bin");
    let writer = {
        let data = data.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::File::create(&path).unwrap();
            for chunk in data.chunks(4096) {
                f.write_all(chunk).unwrap();
                f.flush().unwrap();
                std::thread::sleep(Duration::from_millis(400));
            }
        })
    };
    writer.join().unwrap();
    let w = wait_for(&d, id, Duration::from_secs(30), "slow.bin delivered", |w| {
        w["delivered"].as_u64() == Some(1)
    });
    assert_eq!(dst.read_file("in/slow.bin").unwrap(), data, "{w:#}");
    // A few polls more: nothing is taken again.
    let polls = w["polls"].as_u64().unwrap();
    wait_polls(&d, id, polls + 3, Duration::from_secs(20));
    assert_eq!(
        copies(&d, id),
        [("slow.bin".to_string(), "succeeded".to_string())]
    );
}

/// Files moved into the source with a modify time two years old, while the watch polls, are
/// all delivered, each once: the checkpoint is identities, not a time.
#[test]
fn files_moved_in_with_old_modify_times_while_polls_run_are_all_delivered_once() {
    let src = server(PureFtpd);
    let dst = server(Proftpd);
    src.mkdir("out").unwrap();
    src.mkdir("stage").unwrap();
    dst.mkdir("in").unwrap();
    for i in 0..3 {
        src.put_file(&format!("out/first{i}.dat"), &payload(1000 + i, i as u8))
            .unwrap();
    }
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "1s"}),
    );
    wait_for(&d, id, Duration::from_secs(30), "the first files", |w| {
        w["delivered"].as_u64() == Some(3)
    });
    let mut names = Vec::new();
    let start = Instant::now();
    for i in 0..12usize {
        let name = format!("moved{i:02}.dat");
        src.put_file(&format!("stage/{name}"), &payload(2000 + i, 50 + i as u8))
            .unwrap();
        touch(&src, &format!("stage/{name}"), "2 years ago");
        std::fs::rename(
            src.path(&format!("stage/{name}")),
            src.path(&format!("out/{name}")),
        )
        .unwrap();
        names.push(name);
        // Arrivals spread over several polls, some during a listing.
        std::thread::sleep(Duration::from_millis(230));
    }
    assert!(start.elapsed() > Duration::from_secs(2));
    let w = wait_for(&d, id, Duration::from_secs(60), "every moved file", |w| {
        w["delivered"].as_u64() == Some(15)
    });
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            dst.read_file(&format!("in/{name}")).unwrap(),
            payload(2000 + i, 50 + i as u8),
            "{name}"
        );
        assert_eq!(copied(&d, id, name), 1, "{name}: {w:#}");
    }
}

/// The same name with new content (another size, or only another modify time) is delivered
/// again; untouched content is not, however many polls see it.
#[test]
fn new_content_under_an_old_name_is_delivered_again_and_unchanged_content_never() {
    let src = server(Proftpd);
    let dst = server(Vsftpd);
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("out/nightly.csv", b"day one\n").unwrap();
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "1s"}),
    );
    let w = wait_for(&d, id, Duration::from_secs(30), "day one", |w| {
        w["delivered"].as_u64() == Some(1)
    });
    let polls = w["polls"].as_u64().unwrap();
    wait_polls(&d, id, polls + 8, Duration::from_secs(30));
    assert_eq!(
        copied(&d, id, "nightly.csv"),
        1,
        "unchanged content taken again"
    );

    // Another size.
    src.put_file("out/nightly.csv", b"day two, longer\n")
        .unwrap();
    wait_for(&d, id, Duration::from_secs(30), "day two", |w| {
        w["delivered"].as_u64() == Some(2)
    });
    assert_eq!(
        dst.read_file("in/nightly.csv").unwrap(),
        b"day two, longer\n"
    );
    // The same size, another modify time.
    src.put_file("out/nightly.csv", b"day 3, longer!!\n")
        .unwrap();
    touch(&src, "out/nightly.csv", "+1 hour");
    let w = wait_for(&d, id, Duration::from_secs(30), "day three", |w| {
        w["delivered"].as_u64() == Some(3)
    });
    assert_eq!(
        dst.read_file("in/nightly.csv").unwrap(),
        b"day 3, longer!!\n"
    );
    assert_eq!(copied(&d, id, "nightly.csv"), 3, "{w:#}");
}

/// `move`: each source file is deleted after its copy is proven, and never delivered twice.
#[test]
fn a_move_watch_deletes_each_source_after_its_proof_and_delivers_it_once() {
    let src = server(PureFtpd);
    let dst = server(Proftpd);
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    for i in 0..4 {
        src.put_file(&format!("out/m{i}.bin"), &payload(3000 + i, i as u8))
            .unwrap();
    }
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "0s", "job": {"disposition": "move"}}),
    );
    let w = wait_for(&d, id, Duration::from_secs(30), "four moved", |w| {
        w["delivered"].as_u64() == Some(4)
    });
    for i in 0..4 {
        assert!(
            !src.path(&format!("out/m{i}.bin")).exists(),
            "m{i} still at the source"
        );
        assert_eq!(
            dst.read_file(&format!("in/m{i}.bin")).unwrap(),
            payload(3000 + i, i as u8)
        );
    }
    let polls = w["polls"].as_u64().unwrap();
    wait_polls(&d, id, polls + 3, Duration::from_secs(20));
    assert_eq!(copies(&d, id).len(), 4, "{:#}", show(&d, id));
    // The watch's figures on /metrics, labelled by its number.
    let (code, metrics) =
        bftp_tests::daemon::http(d.socket(), "GET", "/metrics", None, &[]).unwrap();
    assert_eq!(code, 200, "{metrics}");
    for line in [
        format!("bftp_watch_files_delivered_total{{watch=\"{id}\"}} 4"),
        format!("bftp_watch_files_failed_total{{watch=\"{id}\"}} 0"),
    ] {
        assert!(metrics.contains(&line), "{line} not in {metrics}");
    }
    assert!(
        metrics.contains(&format!("bftp_watch_polls_total{{watch=\"{id}\"}}")),
        "{metrics}"
    );
}

/// `--expect 6s`: a watch that delivers nothing mails one alarm for the period; one that
/// delivered a file by then mails none.
#[test]
fn expect_mails_one_alarm_when_nothing_came_and_none_when_a_file_did() {
    let sink = SmtpSink::start().unwrap();
    let src = server(Proftpd);
    let dst = server(PureFtpd);
    src.mkdir("empty").unwrap();
    src.mkdir("busy").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("busy/one.dat", b"in time\n").unwrap();
    let d = Bftpd::start_with(|dir| Bftpd::mail_config(dir, sink.port(), "")).unwrap();
    let quiet = add(
        &d,
        (&src, "empty"),
        (&dst, "in"),
        "1s",
        json!({"expect": "6s", "job": {"notify": ["ops@example.com"]}}),
    );
    let busy = add(
        &d,
        (&src, "busy"),
        (&dst, "in"),
        "1s",
        json!({"expect": "6s", "settle": "0s", "notify_on": "never",
               "job": {"notify": ["ops@example.com"]}}),
    );
    wait_for(&d, busy, Duration::from_secs(20), "one file", |w| {
        w["delivered"].as_u64() == Some(1)
    });
    let mails = sink.wait_for(1, Duration::from_secs(30)).unwrap();
    let alarms = |mails: &[String], id: u64| {
        mails
            .iter()
            .filter(|m| m.contains(&format!("X-BFTP-Watch: {id}")))
            .count()
    };
    assert_eq!(alarms(&mails, quiet), 1, "{mails:#?}");
    assert_eq!(alarms(&mails, busy), 0, "{mails:#?}");
    let m = mails.iter().find(|m| m.contains("X-BFTP-Watch")).unwrap();
    assert!(
        m.contains(&format!("bftp watch {quiet}: no new file by")),
        "{m}"
    );
    assert!(!m.contains(src.password()), "a password in the alarm: {m}");
    // Its job mailed no report either (`notify_on = never`).
    std::thread::sleep(Duration::from_secs(1));
    let mails = sink.messages();
    assert!(
        mails.iter().all(|m| !m.contains("X-BFTP-Job")),
        "a report was mailed: {mails:#?}"
    );
}

/// A recursive watch copies the whole tree, making the destination's directories, each file
/// once; a subdirectory added later is found at the next poll.
#[test]
fn a_recursive_watch_copies_the_tree_and_makes_its_directories() {
    let src = server(Proftpd);
    let dst = server(Vsftpd);
    src.mkdir("out/a/b").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("out/top.dat", b"top\n").unwrap();
    src.put_file("out/a/mid.dat", b"mid\n").unwrap();
    src.put_file("out/a/b/deep.dat", b"deep\n").unwrap();
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "0s", "recursive": true}),
    );
    wait_for(&d, id, Duration::from_secs(30), "three files", |w| {
        w["delivered"].as_u64() == Some(3)
    });
    assert_eq!(dst.read_file("in/a/b/deep.dat").unwrap(), b"deep\n");
    src.put_file("out/c/new.dat", b"new\n").unwrap();
    let w = wait_for(
        &d,
        id,
        Duration::from_secs(30),
        "the new directory's file",
        |w| w["delivered"].as_u64() == Some(4),
    );
    assert_eq!(dst.read_file("in/c/new.dat").unwrap(), b"new\n");
    for name in ["top.dat", "a/mid.dat", "a/b/deep.dat", "c/new.dat"] {
        assert_eq!(copied(&d, id, name), 1, "{name}: {w:#}");
    }
}

/// `--ready-suffix .done`: a file waits for its marker, is taken once the marker exists, and
/// the marker itself is never copied; the view names the file waiting and why.
#[test]
fn a_file_waits_for_its_ready_marker_and_the_marker_is_not_copied() {
    let src = server(PureFtpd);
    let dst = server(Proftpd);
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    src.put_file("out/batch.csv", b"a,b\n").unwrap();
    let d = Bftpd::start().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "0s", "ready_suffix": ".done"}),
    );
    let w = wait_for(&d, id, Duration::from_secs(20), "a note of the wait", |w| {
        w["notes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["kind"] == "no_marker"))
    });
    assert_eq!(w["delivered"], 0, "{w:#}");
    assert!(dst.read_file("in/batch.csv").is_err());
    src.put_file("out/batch.csv.done", b"").unwrap();
    wait_for(&d, id, Duration::from_secs(20), "batch.csv", |w| {
        w["delivered"].as_u64() == Some(1)
    });
    assert_eq!(dst.read_file("in/batch.csv").unwrap(), b"a,b\n");
    assert!(
        dst.read_file("in/batch.csv.done").is_err(),
        "the marker was copied"
    );
}

/// `bftp watch` end to end: alice adds a watch with her password in the environment, sees it
/// in `list` and `show --json` without the password; bob can neither see, pause nor remove
/// it; alice pauses, resumes and removes it.
#[test]
fn the_cli_adds_shows_pauses_and_removes_a_watch_and_only_its_owner_may() {
    use bftp_tests::daemon::{text, ALICE, BOB};
    let src = server(Proftpd);
    let dst = server(PureFtpd);
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let env = [
        ("BFTP_SOURCE_PASSWORD", src.password()),
        ("BFTP_DEST_PASSWORD", dst.password()),
    ];
    let (s, t) = (src.url("out"), dst.url("in"));
    let o = d.bftp_env(
        Some(ALICE),
        &[
            "--json",
            "watch",
            "add",
            &s,
            &t,
            "--every",
            "10m",
            "--pattern",
            "*.csv",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = v["id"].as_u64().unwrap().to_string();
    assert_eq!(v["patterns"], json!(["*.csv"]));
    for secret in [src.password(), dst.password()] {
        assert!(!text(&o).contains(secret), "{}", text(&o));
    }
    let o = d.bftp_env(Some(ALICE), &["watch", "list"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(&s), "{}", text(&o));
    for verb in [
        &["watch", "show", &id][..],
        &["watch", "pause", &id],
        &["watch", "remove", &id],
    ] {
        let o = d.bftp_env(Some(BOB), verb, &[]);
        assert_eq!(o.status.code(), Some(5), "bob: {verb:?}: {}", text(&o));
    }
    let o = d.bftp_env(Some(BOB), &["--json", "watch", "list"], &[]);
    let bobs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(bobs["watches"], json!([]), "{bobs}");
    let o = d.bftp_env(Some(ALICE), &["--json", "watch", "pause", &id], &[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["state"], "paused", "{}", text(&o));
    let o = d.bftp_env(Some(ALICE), &["--json", "watch", "resume", &id], &[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["state"], "active", "{}", text(&o));
    let o = d.bftp_env(Some(ALICE), &["watch", "remove", &id], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = d.bftp_env(Some(ALICE), &["watch", "show", &id], &[]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    // A bad interval is refused before anything is stored.
    let o = d.bftp_env(
        Some(ALICE),
        &["watch", "add", &s, &t, "--every", "soon"],
        &env,
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
}

/// bftpd's clock 5 hours ahead of the servers' (libfaketime), then, after a kill -9, 5 hours
/// behind (a jump of 10 hours back): no file is missed or repeated, a file written slowly is
/// still taken whole only, and nothing waits for the clock to catch up.
#[test]
fn a_bftpd_clock_hours_off_and_jumping_back_misses_and_repeats_nothing() {
    const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    assert!(
        std::path::Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: run tests/install-deps"
    );
    let src = server(Proftpd);
    let dst = server(PureFtpd);
    src.mkdir("out").unwrap();
    dst.mkdir("in").unwrap();
    for i in 0..3 {
        src.put_file(&format!("out/early{i}.dat"), &payload(700 + i, i as u8))
            .unwrap();
    }
    let mut d = Bftpd::prepare(Bftpd::default_config).unwrap();
    d.set_env("LD_PRELOAD", FAKETIME);
    d.set_env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    d.set_env("FAKETIME", "+5h");
    d.launch().unwrap();
    let id = add(
        &d,
        (&src, "out"),
        (&dst, "in"),
        "1s",
        json!({"settle": "2s"}),
    );
    let w = wait_for(&d, id, Duration::from_secs(30), "the early files", |w| {
        w["delivered"].as_u64() == Some(3)
    });
    // The clock bftpd stamps with is hours ahead of the servers' and this test's.
    let created = w["created_at"].as_str().unwrap().to_owned();
    let now = String::from_utf8(
        Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        !created.starts_with(now.trim()),
        "faketime had no effect: {created} {now}"
    );
    // A file first seen at +5h, then bftpd back at -5h.
    src.put_file("out/straddle.dat", b"seen before the jump\n")
        .unwrap();
    wait_for(&d, id, Duration::from_secs(20), "straddle.dat seen", |w| {
        w["notes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["path"] == "straddle.dat"))
    });
    d.kill9();
    d.set_env("FAKETIME", "-5h");
    d.launch().unwrap();
    src.put_file("out/after.dat", b"after the jump\n").unwrap();
    let w = wait_for(&d, id, Duration::from_secs(40), "five files", |w| {
        w["delivered"].as_u64() == Some(5)
    });
    let polls = w["polls"].as_u64().unwrap();
    wait_polls(&d, id, polls + 3, Duration::from_secs(30));
    for name in [
        "early0.dat",
        "early1.dat",
        "early2.dat",
        "straddle.dat",
        "after.dat",
    ] {
        assert_eq!(copied(&d, id, name), 1, "{name}: {:#}", show(&d, id));
    }
    assert_eq!(dst.read_file("in/after.dat").unwrap(), b"after the jump\n");
}
