//! The scenarios the engine tests repeat, one function per shape, so a test reads as its
//! input (the scripts, the limits, the request) and its expectations (what came of it):
//!
//! - [`hostile_to_vsftpd`]: a scripted hostile source, a real vsftpd destination, a pair
//!   opened between them and one copy.
//! - [`hostile_to_hostile`]: the same with a scripted destination.
//! - [`copy_once`]: one copy on a pair opened for it, between servers a test already runs.
//! - [`open_pair`]: a pair opened (or refused) and nothing else, timed.
//! - [`raw_session`]: a scripted hostile server and a raw client logged in to it in image
//!   type, for the tests of the hostile server itself.
//!
//! Each hands back the servers with what they recorded, so the test checks the wire as well
//! as the outcome. Opening the pair is not what these tests check: a refused open is an
//! error with the transcript, except in [`open_pair`], where it is the result.

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use bftp_core::{DestCommand, FtpParams, Secret};
use bftp_ftp::{AllowAll, CopyOutcome, CopyRequest, Limits, Pair, PairError, ServerLogin};

use crate::hostile::{HostileServer, Script};
use crate::{FtpOptions, FtpServer, RawFtp, ServerKind};

/// One copy on a pair opened for it: what came of it.
#[derive(Debug)]
pub struct Copied {
    pub outcome: CopyOutcome,
    /// From before the pair was opened to the end of the copy.
    pub total: Duration,
    /// The copy alone.
    pub took: Duration,
    /// Whether the pair was still usable after the copy (then it was closed with QUIT;
    /// otherwise dropped).
    pub usable: bool,
}

/// A scenario's servers after its copy: the source with its record of what it received,
/// the destination, and the copy.
pub struct Scenario<D> {
    pub src: HostileServer,
    pub dst: D,
    pub copied: Copied,
}

/// A hostile source scripted by `source`, a real vsftpd destination (default options) with
/// the directories `dirs`, a pair opened with `limits`, one copy of `request`.
pub fn hostile_to_vsftpd(
    source: Script,
    dirs: &[&str],
    limits: &Limits,
    request: &CopyRequest,
) -> Result<Scenario<FtpServer>> {
    let src = HostileServer::start(source)?;
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default())?;
    for dir in dirs {
        dst.mkdir(dir)?;
    }
    let copied = copy_once(&hostile_login(&src), &ftp_login(&dst), limits, request)?;
    Ok(Scenario { src, dst, copied })
}

/// A hostile source scripted by `source`, a hostile destination scripted by `dest`, a pair
/// opened with `limits`, one copy of `request`.
pub fn hostile_to_hostile(
    source: Script,
    dest: Script,
    limits: &Limits,
    request: &CopyRequest,
) -> Result<Scenario<HostileServer>> {
    let src = HostileServer::start(source)?;
    let dst = HostileServer::start(dest)?;
    let copied = copy_once(&hostile_login(&src), &hostile_login(&dst), limits, request)?;
    Ok(Scenario { src, dst, copied })
}

/// Opens a pair `src` → `dst` (image type, every address allowed) with `limits`, copies
/// `request` once, and closes the pair if it is still usable. `Err` if the pair does not
/// open or the copy is a job-level failure.
pub fn copy_once(
    src: &ServerLogin,
    dst: &ServerLogin,
    limits: &Limits,
    request: &CopyRequest,
) -> Result<Copied> {
    let started = Instant::now();
    block_on(async {
        let mut pair = open(src, dst, limits).await?;
        let copy_started = Instant::now();
        let outcome = pair.copy(request).await?;
        let (took, total) = (copy_started.elapsed(), started.elapsed());
        let usable = pair.is_usable();
        if usable {
            pair.close().await;
        }
        Ok(Copied {
            outcome,
            total,
            took,
            usable,
        })
    })
}

/// Opens a pair `src` → `dst` (image type, every address allowed) with `limits`; a refusal
/// is an error with the transcript.
pub async fn open(src: &ServerLogin, dst: &ServerLogin, limits: &Limits) -> Result<Pair> {
    Pair::open(src, dst, FtpParams::default(), limits, Arc::new(AllowAll))
        .await
        .map_err(|e| anyhow::anyhow!("opening the pair: {e}\n{}", e.transcript))
}

/// Opens a pair `src` → `dst` (image type, every address allowed) with `limits`: the pair
/// or the error, and how long it took. A pair that opens is closed.
pub fn open_pair(
    src: &ServerLogin,
    dst: &ServerLogin,
    limits: &Limits,
) -> (Result<(), PairError>, Duration) {
    let started = Instant::now();
    block_on(async {
        let result = Pair::open(src, dst, FtpParams::default(), limits, Arc::new(AllowAll)).await;
        let elapsed = started.elapsed();
        match result {
            Ok(pair) => {
                pair.close().await;
                (Ok(()), elapsed)
            }
            Err(e) => (Err(e), elapsed),
        }
    })
}

/// A hostile server scripted by `script`, and a raw client logged in to it (the script's
/// user) that has set image type (`TYPE I` answered 200).
pub fn raw_session(script: Script) -> Result<(HostileServer, RawFtp)> {
    let server = HostileServer::start(script)?;
    let mut ftp = server.login()?;
    ftp.expect("TYPE I", 200)?;
    Ok((server, ftp))
}

/// How the engine logs in to a hostile server.
pub fn hostile_login(server: &HostileServer) -> ServerLogin {
    login(
        server.host(),
        server.port(),
        server.user(),
        server.password(),
    )
}

/// How the engine logs in to a real FTP server.
pub fn ftp_login(server: &FtpServer) -> ServerLogin {
    login(
        server.host(),
        server.port(),
        server.user(),
        server.password(),
    )
}

fn login(host: Ipv4Addr, port: u16, user: &str, password: &str) -> ServerLogin {
    ServerLogin {
        host: host.to_string(),
        port,
        user: user.to_owned(),
        password: Some(Secret::new(password)),
        acct: None,
        tls: Default::default(),
    }
}

/// A copy of `source` to `dest` by `command`, the source's size unknown.
pub fn request(source: &str, dest: &str, command: DestCommand) -> CopyRequest {
    CopyRequest {
        source_path: source.to_owned(),
        dest_path: dest.to_owned(),
        dest_command: command,
        source_size: None,
        announce: None,
        resume_at: None,
    }
}

/// Runs `f` to its end on a fresh two-thread runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}
