//! The refusal and pair memories' records (moved out of `record/mod.rs`).

use super::*;

/// A server's last transient refusal of a command (`bftp_core::refusal::RefusalMemory`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RefusalV1 {
    pub v: u32,
    pub code: u16,
    pub text: String,
    pub first_seen: u64,
    pub last_seen: u64,
    pub count: u32,
    pub last_job: u64,
    pub last_attempt: u32,
}

impl RefusalV1 {
    pub(crate) fn from_core(m: &bftp_core::refusal::RefusalMemory) -> RefusalV1 {
        RefusalV1 {
            v: RECORD_VERSION,
            code: m.code.get(),
            text: m.text.clone(),
            first_seen: m.first_seen.0,
            last_seen: m.last_seen.0,
            count: m.count,
            last_job: m.last_job,
            last_attempt: m.last_attempt,
        }
    }

    pub(crate) fn to_core(
        &self,
        key: &[u8],
    ) -> Result<bftp_core::refusal::RefusalMemory, StoreError> {
        let code =
            bftp_core::reply::ReplyCode::new(self.code).ok_or_else(|| StoreError::Corrupt {
                what: "refusal",
                key: hex(key),
                reason: format!("reply code {} is outside 100..=599", self.code),
            })?;
        Ok(bftp_core::refusal::RefusalMemory {
            code,
            text: self.text.clone(),
            first_seen: bftp_core::Timestamp(self.first_seen),
            last_seen: bftp_core::Timestamp(self.last_seen),
            count: self.count,
            last_job: self.last_job,
            last_attempt: self.last_attempt,
        })
    }
}

/// What an ordered pair of servers refused: the third party (`bftp_core::route::PairMemory`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct PairV1 {
    pub v: u32,
    /// The refusal's text, as `bftp_core::route::remember` cut it.
    pub reply: String,
    /// When it was seen (ms since the epoch).
    pub seen: u64,
}

impl PairV1 {
    pub(crate) fn from_core(m: &bftp_core::route::PairMemory) -> PairV1 {
        PairV1 {
            v: RECORD_VERSION,
            reply: m.reply.clone(),
            seen: m.seen.0,
        }
    }

    pub(crate) fn to_core(&self) -> bftp_core::route::PairMemory {
        bftp_core::route::PairMemory {
            reply: self.reply.clone(),
            seen: Timestamp(self.seen),
        }
    }
}

// ---- encoding ----
