//! The record of a limit learned from a server (`bftp_core::hostlimit::HostLimit`), one per
//! host, keyed by the lower-case host name.

use serde::{Deserialize, Serialize};

use bftp_core::hostlimit::HostLimit;
use bftp_core::Timestamp;

use super::{Versioned, RECORD_VERSION};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct HostLimitV1 {
    pub v: u32,
    pub limit: u32,
    /// The reply that taught it, as `bftp_core::hostlimit::taught_text` made it.
    pub reply: String,
    /// ms since the epoch.
    pub learned_at: u64,
    pub refused_at: u64,
}

impl Versioned for HostLimitV1 {
    fn version(&self) -> u32 {
        self.v
    }
}

impl HostLimitV1 {
    pub(crate) fn from_core(l: &HostLimit) -> HostLimitV1 {
        HostLimitV1 {
            v: RECORD_VERSION,
            limit: l.limit,
            reply: l.reply.clone(),
            learned_at: l.learned_at.0,
            refused_at: l.refused_at.0,
        }
    }

    pub(crate) fn to_core(&self, host: &str) -> HostLimit {
        HostLimit {
            host: host.to_owned(),
            limit: self.limit.max(1),
            reply: self.reply.clone(),
            learned_at: Timestamp(self.learned_at),
            refused_at: Timestamp(self.refused_at),
        }
    }
}
