//! Durations in the configuration (`#[serde(with = "duration")]`): read as humantime
//! reads them, written by `postback config check` in whole days, hours, minutes, seconds
//! and ms (`90d`, not `2months 29days 2h 52m 48s`), which read back the same.

use std::time::Duration;

use serde::{Deserializer, Serializer};

use crate::domain::duration_text;

pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&duration_text(*d))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    humantime_serde::deserialize(d)
}

/// `Option<Duration>` (`#[serde(default, with = "duration::optional")]`): unset, or a
/// duration as above.
pub mod optional {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        humantime_serde::deserialize(d)
    }
}
