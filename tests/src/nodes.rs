//! Several bftpd nodes on one PostgreSQL store: each node's config, signals to a node, and
//! the three-node cluster of the paused-node rounds with one round of them.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::daemon::Bftpd;
use crate::files::content;
use crate::jobs::{kinds, status, submit};
use crate::{postgres, FtpOptions, FtpServer, ServerKind};

/// A node's config: the test config with `[store]` on the shared database, a 2 s lease and
/// a 200 ms look at the queue.
pub fn node_config(url: &str, node: &str, key_from: Option<&Path>) -> impl FnOnce(&Path) -> String {
    node_config_plus(url, node, key_from, "")
}

/// [`node_config`] with `extra` TOML tables after it.
pub fn node_config_plus(
    url: &str,
    node: &str,
    key_from: Option<&Path>,
    extra: &str,
) -> impl FnOnce(&Path) -> String {
    node_config_lease(url, node, key_from, extra, "2s")
}

/// [`node_config_plus`] with another lease than the tests' 2 s.
pub fn node_config_lease(
    url: &str,
    node: &str,
    key_from: Option<&Path>,
    extra: &str,
    lease: &str,
) -> impl FnOnce(&Path) -> String {
    let store = store_table(url, node, lease);
    let extra = extra.to_string();
    let key_from = key_from.map(Path::to_path_buf);
    move |dir| {
        copy_key(dir, key_from.as_deref());
        format!("{}{store}{extra}", Bftpd::default_config(dir))
    }
}

/// A node that mails its reports to the SMTP sink on `smtp_port`, with `extra` tables.
pub fn node_config_mail(
    url: &str,
    node: &str,
    key_from: Option<&Path>,
    smtp_port: u16,
    extra: &str,
) -> impl FnOnce(&Path) -> String {
    let store = store_table(url, node, "2s");
    let extra = extra.to_string();
    let key_from = key_from.map(Path::to_path_buf);
    move |dir| {
        copy_key(dir, key_from.as_deref());
        format!("{}{store}", Bftpd::mail_config(dir, smtp_port, &extra))
    }
}

/// Every node seals and opens passwords with the same key: the first node's.
fn copy_key(dir: &Path, key_from: Option<&Path>) {
    if let Some(key) = key_from {
        let state = dir.join("state");
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&state)
            .unwrap();
        std::fs::copy(key, state.join("secret.key")).unwrap();
    }
}

fn store_table(url: &str, node: &str, lease: &str) -> String {
    format!(
        "[store]\nkind = \"postgres\"\nurl = \"{url}\"\nnode = \"{node}\"\nlease = \"{lease}\"\npoll = \"200ms\"\npool_size = 4\n"
    )
}

pub fn signal(d: &Bftpd, sig: i32) {
    let pid = d.pid().expect("running") as i32;
    // SAFETY: kill takes a pid and a signal number, no pointers.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(r, 0, "kill {pid} {sig}");
}

/// A three-node cluster for the paused-node rounds (issue 27): a throttled vsftpd source,
/// a vsftpd destination (vsftpd logs each command as it arrives, so its log says what a
/// node sent after a moment), a 3 s lease and two pairs per job.
pub struct PausedCluster {
    pub src: FtpServer,
    pub dst: FtpServer,
    pub nodes: Vec<Bftpd>,
}

impl PausedCluster {
    pub fn start() -> PausedCluster {
        let url = postgres::fresh_database();
        let opts = FtpOptions {
            passive_ports: 128,
            ..FtpOptions::default()
        };
        let src = FtpServer::start(
            ServerKind::Vsftpd,
            FtpOptions {
                max_rate: Some(PAUSED_RATE),
                ..opts.clone()
            },
        )
        .unwrap();
        // vsftpd locks a file it receives: the paused node's upload started ahead (its STOR
        // sent, its RETR not yet) would hold the lock, and the other node's STOR of the same
        // file wait for it, until the paused node runs again.
        let dst = FtpServer::start(
            ServerKind::Vsftpd,
            FtpOptions {
                vsftpd_extra: "lock_upload_files=NO\n".into(),
                ..opts
            },
        )
        .unwrap();
        let extra = "[ftp]\nparallel_pairs = 2\n";
        let mut nodes =
            vec![Bftpd::start_with(node_config_lease(&url, "n0", None, extra, "3s")).unwrap()];
        let key = nodes[0].state_dir().join("secret.key");
        for i in 1..3 {
            let config = node_config_lease(&url, &format!("n{i}"), Some(&key), extra, "3s");
            nodes.push(Bftpd::start_with(config).unwrap());
        }
        PausedCluster { src, dst, nodes }
    }

    fn all_logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("--- n{i} ---\n{}", n.logs()))
            .collect()
    }
}

/// Bytes per second the source sends per session: a 2 MiB file takes about a second.
const PAUSED_RATE: u64 = 2_000_000;
const PAUSED_FILE: usize = 2 * 1024 * 1024;
const PAUSED_FILES: usize = 6;

/// The commands a server received from `offset` of its protocol log on (vsftpd logs a
/// command as it arrives, before answering it).
fn commands_since(server: &FtpServer, offset: u64) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(server.log_file()).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut text = String::new();
    f.read_to_string(&mut text).unwrap();
    text.lines()
        .filter_map(|l| {
            l.split_once("FTP command: Client \"")?
                .1
                .split_once("\", \"")
        })
        .map(|(_, c)| c.strip_suffix('"').unwrap_or(c).to_owned())
        .collect()
}

fn log_len(server: &FtpServer) -> u64 {
    std::fs::metadata(server.log_file()).map_or(0, |m| m.len())
}

/// One round (issue 27, item 1): a multi-file replace job starts on some node, which is
/// paused with SIGSTOP while it copies; another node takes the job over and finishes it.
/// Then the paused node runs again (SIGCONT): from that moment neither server receives a
/// command other than ABOR or QUIT (nothing for the job's files, no login), every
/// destination file stays equal to its source, and the job stays as the other node left it.
/// Returns the time from the pause to the takeover.
pub fn paused_node_round(c: &PausedCluster, round: usize) -> Duration {
    let (src, dst) = (&c.src, &c.dst);
    let files: Vec<(String, Vec<u8>)> = (0..PAUSED_FILES)
        .map(|i| {
            let name = format!("r{round}-f{i}.bin");
            let data = content(&name, PAUSED_FILE);
            src.put_file(&format!("out{round}/{name}"), &data).unwrap();
            (name, data)
        })
        .collect();
    dst.mkdir(&format!("in{round}")).unwrap();
    let submit_on = &c.nodes[round % c.nodes.len()];
    let id = submit(
        submit_on,
        src,
        dst,
        &format!("out{round}/*.bin"),
        &format!("in{round}/"),
        &[],
    );
    // Whichever node claimed it is copying: its destination files grow.
    let deadline = Instant::now() + Duration::from_secs(60);
    let runner = loop {
        let v = status(submit_on, id);
        let growing = files.iter().any(|(name, _)| {
            std::fs::metadata(dst.path(&format!("in{round}/{name}"))).is_ok_and(|m| m.len() > 0)
        });
        if let (true, Some(node)) = (growing, v["node"].as_str()) {
            break node.trim_start_matches('n').parse::<usize>().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "round {round}: no node copies: {v:#}\n{}",
            c.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let paused = &c.nodes[runner];
    signal(paused, libc::SIGSTOP);
    let stopped = Instant::now();
    let other = &c.nodes[(runner + 1) % c.nodes.len()];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut taken_after = None;
    let done = loop {
        let v = status(other, id);
        if taken_after.is_none() && kinds(&v).iter().any(|k| k == "taken-over") {
            taken_after = Some(stopped.elapsed());
        }
        if v["state"] == "finished" {
            break v;
        }
        if Instant::now() > deadline {
            signal(paused, libc::SIGCONT);
            panic!("round {round}: not finished: {v:#}\n{}", c.all_logs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(done["outcome"], "succeeded", "round {round}: {done:#}");
    assert!(kinds(&done).iter().any(|k| k == "taken-over"), "{done:#}");
    let same = |when: &str| {
        for (name, data) in &files {
            let got = dst
                .read_file(&format!("in{round}/{name}"))
                .unwrap_or_default();
            assert!(
                got == *data,
                "round {round}, {when}: {name} has {} bytes, not its source's {} (node n{runner} \
                 was paused)\n{}",
                got.len(),
                data.len(),
                c.all_logs()
            );
        }
    };
    same("after the takeover");

    // The paused node runs again.
    let (src_from, dst_from) = (log_len(src), log_len(dst));
    let logs_from = paused.logs().len();
    signal(paused, libc::SIGCONT);
    // It stops its attempt (on its own deadline, or on its heartbeat's look)...
    let deadline = Instant::now() + Duration::from_secs(30);
    while !paused.logs()[logs_from..].contains("lease") {
        assert!(
            Instant::now() < deadline,
            "round {round}: n{runner} never saw its lease end\n{}",
            paused.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // ... and its attempt ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !paused.logs()[logs_from..].contains("attempt over") {
        assert!(
            Instant::now() < deadline,
            "round {round}: n{runner}'s attempt did not end\n{}",
            paused.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Commands sent just before the end arrive within moments.
    std::thread::sleep(Duration::from_millis(500));
    for (server, from) in [(src, src_from), (dst, dst_from)] {
        let late: Vec<String> = commands_since(server, from)
            .into_iter()
            .filter(|c| {
                let verb = c.split(' ').next().unwrap_or("").to_ascii_uppercase();
                verb != "ABOR" && verb != "QUIT"
            })
            .collect();
        assert!(
            late.is_empty(),
            "round {round}: the {} received {late:?} after n{runner} resumed\n{}",
            if std::ptr::eq(server, src) {
                "source"
            } else {
                "destination"
            },
            paused.logs()
        );
    }
    same("after the paused node resumed");
    let after = status(other, id);
    assert_eq!(after["members"], done["members"], "round {round}");
    assert_eq!(after["history"], done["history"], "round {round}");
    taken_after.unwrap_or_default()
}
