//! Why a queued job waits at a start gate (`bftp_core::window::Wait`), kept on its record
//! until its state moves.

use serde::{Deserialize, Serialize};

use bftp_core::window::{Wait, WaitReason};
use bftp_core::Timestamp;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct WaitV1 {
    /// `window` or `host_down`.
    pub r: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub until: u64,
}

impl WaitV1 {
    pub(crate) fn from_api(w: &Wait) -> WaitV1 {
        WaitV1 {
            r: w.reason.as_str().into(),
            host: w.host.clone(),
            until: w.until.0,
        }
    }

    /// `None` for a reason this program does not know (written by a newer one): shown as no
    /// wait, which changes nothing of what the job does.
    pub(crate) fn to_api(&self) -> Option<Wait> {
        Some(Wait {
            reason: WaitReason::parse(&self.r)?,
            host: self.host.clone(),
            until: Timestamp(self.until),
        })
    }
}
