//! The daemon's side of the engine, one module per concern: the `[ftp]` settings
//! (`config`), the host policy as the engine's address check (`check`), the paths of a
//! job's files (`paths`), engine results as API views (`views`), per-host connection slots
//! (`hosts`), and the two foreground operations of RULES.md §7: `verify` and `transfer`.

mod check;
mod config;
pub(crate) mod hosts;
mod paths;
pub mod tls;
mod transfer;
mod verify;
mod views;

pub use check::PolicyCheck;
pub use config::{FtpConfig, OverrideConfig};
pub use hosts::{HostLimits, Slots};
pub use paths::{copy_request, join_path, source_path};
pub use transfer::transfer;
pub use verify::verify;
pub use views::{evidence, file_result, reply_view, transcript_lines};
