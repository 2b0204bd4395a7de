//! The engine (`bftp_ftp::Pair`) between two test servers: the tests' limits and a pair
//! opened from one server to another.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use bftp_core::FtpParams;
use bftp_ftp::{AllowAll, CopyOutcome, Limits, Pair};

use crate::scenario::ftp_login as login;
use crate::{FtpOptions, FtpServer, ServerKind};

/// Short enough that a silent server fails a test in seconds, long enough for a
/// loaded CI machine.
pub fn limits() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(10),
        transfer_timeout: Duration::from_secs(60),
        ..Limits::default()
    }
}

pub fn image() -> FtpParams {
    FtpParams::default()
}

pub fn start(kind: ServerKind) -> Result<FtpServer> {
    FtpServer::start(kind, FtpOptions::default())
}

pub async fn open(src: &FtpServer, dst: &FtpServer, params: FtpParams) -> Result<Pair> {
    Pair::open(
        &login(src),
        &login(dst),
        params,
        &limits(),
        Arc::new(AllowAll),
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "opening {} -> {}: {e}\n{}",
            src.kind(),
            dst.kind(),
            e.transcript
        )
    })
}

/// The outcome, or an error with the whole story.
pub fn expect_success(outcome: &CopyOutcome, what: &str) -> Result<()> {
    if outcome.is_success() {
        return Ok(());
    }
    bail!(
        "{what}: {:?}\n{}",
        outcome.failure(),
        outcome.report().transcript
    )
}
