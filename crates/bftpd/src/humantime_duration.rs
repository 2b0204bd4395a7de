//! `Duration` fields in humantime syntax ("10m", "4h", "2days").

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "{s:?} is not a duration ({e}); write e.g. \"10m\" or \"4h\""
        ))
    })
}
