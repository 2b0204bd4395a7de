//! A member's intent record (`IntentV1`), and the legacy form it replaced, read by
//! `MemberV1`'s `intent` field.

use serde::{Deserialize, Serialize};

use bftp_core::Intent;

use super::RECORD_VERSION;

/// A member's intent, with its own version `v`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct IntentV1 {
    pub v: u32,
    #[serde(flatten)]
    pub op: IntentOpV1,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(crate) enum IntentOpV1 {
    Append {
        before: u64,
        source: u64,
    },
    Unique {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    Delete {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
}

/// The intent as bftpd wrote it before intents had a record of their own: JSON inside the
/// member's `intent` string.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum LegacyIntent {
    Appe { before: u64, source_size: u64 },
    Stou,
    Dele,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IntentField {
    Record(IntentV1),
    Legacy(String),
}

/// Reads a member's intent of either form; a legacy string that does not decode makes the
/// member record undecodable (`Corrupt`), never an intent silently dropped.
pub(super) fn intent_field<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<IntentV1>, D::Error> {
    use serde::de::Error;
    let field: Option<IntentField> = Option::deserialize(d)?;
    let op = match field {
        None => return Ok(None),
        Some(IntentField::Record(r)) if r.v == RECORD_VERSION => return Ok(Some(r)),
        Some(IntentField::Record(r)) => {
            return Err(D::Error::custom(format!(
                "intent record version {}, this program reads version {RECORD_VERSION}",
                r.v
            )))
        }
        Some(IntentField::Legacy(s)) => match serde_json::from_str::<LegacyIntent>(&s) {
            Ok(LegacyIntent::Appe {
                before,
                source_size,
            }) => IntentOpV1::Append {
                before,
                source: source_size,
            },
            Ok(LegacyIntent::Stou) => IntentOpV1::Unique {
                source: None,
                name: None,
            },
            Ok(LegacyIntent::Dele) => IntentOpV1::Delete { path: None },
            Err(e) => return Err(D::Error::custom(format!("undecodable intent {s:?}: {e}"))),
        },
    };
    Ok(Some(IntentV1 {
        v: RECORD_VERSION,
        op,
    }))
}

impl IntentV1 {
    pub(crate) fn from_api(i: &Intent) -> IntentV1 {
        let op = match i {
            Intent::Append {
                before,
                source_size,
            } => IntentOpV1::Append {
                before: *before,
                source: *source_size,
            },
            Intent::Unique {
                source_size,
                announced,
            } => IntentOpV1::Unique {
                source: *source_size,
                name: announced.clone(),
            },
            Intent::Delete { path } => IntentOpV1::Delete { path: path.clone() },
        };
        IntentV1 {
            v: RECORD_VERSION,
            op,
        }
    }

    pub(crate) fn to_api(&self) -> Intent {
        match &self.op {
            IntentOpV1::Append { before, source } => Intent::Append {
                before: *before,
                source_size: *source,
            },
            IntentOpV1::Unique { source, name } => Intent::Unique {
                source_size: *source,
                announced: name.clone(),
            },
            IntentOpV1::Delete { path } => Intent::Delete { path: path.clone() },
        }
    }
}
