//! Back-pressure of a relay through bftpd (RULES.md §14): a destination that takes 1 MB/s
//! from a source that would send at loopback speed slows the source down; bftpd holds no
//! more than its bounded buffer, whoever moves the bytes (the kernel's splice, or the
//! user-space buffer when the stream is hashed).

use std::time::{Duration, Instant};

use bftp_tests::daemon::Bftpd;
use bftp_tests::jobs::{status, submit};
use bftp_tests::procstat::status_kib;
use bftp_tests::{payload, FtpOptions, FtpServer, ServerKind};

/// The file: 12 MiB, so that a relay that read the source ahead of the destination would
/// hold several MiB more than one that waits.
const SIZE: usize = 12 << 20;
/// What bftpd's resident memory may grow by during the relay: far less than the file.
const MAX_GROWTH_KIB: u64 = 5 * 1024;

#[test]
fn a_slow_destination_slows_the_source_and_bftpd_stays_small() {
    let src = FtpServer::start(
        ServerKind::Proftpd,
        FtpOptions {
            fxp: false,
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let dst = FtpServer::start(
        ServerKind::Vsftpd,
        FtpOptions {
            fxp: false,
            max_rate: Some(1_000_000),
            ..FtpOptions::default()
        },
    )
    .unwrap();
    let data = payload(SIZE, 17);
    src.put_file("out/big.bin", &data).unwrap();
    src.put_file("out/warm.bin", b"warm").unwrap();
    dst.mkdir("in").unwrap();
    let d = Bftpd::start().unwrap();
    let pid = d.pid().unwrap();
    // Warm up: a first job pays for what any job allocates once.
    let warm = submit(&d, &src, &dst, "out/warm.bin", "in/warm.bin", &[]);
    wait(&d, warm, Duration::from_secs(30));

    for (round, extra) in [("kernel", &[][..]), ("hashed", &["--proof", "hash"][..])] {
        let before = status_kib(pid, "VmRSS:").unwrap();
        // Reset the peak (VmHWM) to the present (proc(5), clear_refs 5).
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
        let name = format!("in/{round}.bin");
        let started = Instant::now();
        let id = submit(&d, &src, &dst, "out/big.bin", &name, extra);
        let v = wait(&d, id, Duration::from_secs(120));
        let took = started.elapsed();
        let peak = status_kib(pid, "VmHWM:").unwrap();
        assert_eq!(v["outcome"], "succeeded", "{v:#}");
        assert_eq!(v["members"][0]["route"]["path"], "relay", "{v:#}");
        assert!(dst.read_file(&name).unwrap() == data, "{round}: differs");
        // The destination's pace set the relay's: about 12 s at 1 MB/s.
        assert!(took > Duration::from_secs(8), "{round}: took only {took:?}");
        let growth = peak.saturating_sub(before);
        eprintln!("{round}: {took:?}, RSS {before} KiB before, peak {peak} KiB (+{growth} KiB)");
        assert!(
            growth < MAX_GROWTH_KIB,
            "{round}: bftpd grew by {growth} KiB relaying {SIZE} bytes at 1 MB/s"
        );
    }
}

fn wait(d: &Bftpd, id: u64, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let v = status(d, id);
        if v["state"] == "finished" {
            return v;
        }
        assert!(Instant::now() < deadline, "job {id} not final: {v:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
