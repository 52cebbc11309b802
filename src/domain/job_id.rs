//! `JobId`: the notification id. It names the shard that holds the notification, so
//! any instance finds it without a lookup, and it sorts by creation time (UUID v7).

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

const PREFIX: &str = "ntf_";

/// `ntf_<shard>_<uuid v7 as 32 hex digits>`, e.g. `ntf_0_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId {
    shard: u16,
    uuid: Uuid,
}

impl JobId {
    /// A fresh id on `shard`.
    pub fn new(shard: u16) -> Self {
        Self {
            shard,
            uuid: Uuid::now_v7(),
        }
    }

    pub fn shard(&self) -> u16 {
        self.shard
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}_{}", self.shard, self.uuid.simple())
    }
}

/// The text was not a notification id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a notification id (expected ntf_<shard>_<32 hex digits>)")]
pub struct InvalidJobId;

impl FromStr for JobId {
    type Err = InvalidJobId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix(PREFIX).ok_or(InvalidJobId)?;
        let (shard, hex) = rest.split_once('_').ok_or(InvalidJobId)?;
        if shard.is_empty() || !shard.bytes().all(|b| b.is_ascii_digit()) || hex.len() != 32 {
            return Err(InvalidJobId);
        }
        let shard = shard.parse().map_err(|_| InvalidJobId)?;
        let uuid = Uuid::try_parse(hex).map_err(|_| InvalidJobId)?;
        Ok(Self { shard, uuid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text() {
        let id = JobId::new(3);
        let parsed: JobId = id.to_string().parse().unwrap();
        assert_eq!(parsed, id);
        assert_eq!(parsed.shard(), 3);
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in [
            "",
            "ntf_",
            "ntf_0_",
            "ntf_x_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e",
            "ntf_0_0193b0c4f5a87c1e9d2e3f4a5b6c7d8",
            "ntf_0_0193b0c4f5a87c1e9d2e3f4a5b6c7d8g",
            "msg_0_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e",
            "ntf_+1_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e",
        ] {
            assert!(bad.parse::<JobId>().is_err(), "{bad}");
        }
    }
}
