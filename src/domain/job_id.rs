//! `JobId`: the notification id. It names the shard that holds the notification, so
//! any instance finds it without a lookup, and it sorts by creation time (UUID v7).

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

const PREFIX: &str = "ntf_";

/// Digits in ASCII order, so that ids of the same width sort as their UUIDs do.
pub(crate) const BASE62: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Base-62 digits of a 128-bit UUID (62^22 > 2^128).
const BASE62_WIDTH: usize = 22;

/// `ntf_<shard>_<uuid v7 as 22 base-62 digits>`, e.g. `ntf_0_0352MTUd4Uo7EJoE0LjAvZ`.
/// The id is stored in every index that holds the notification, so it is kept short.
/// Ids of earlier builds, `ntf_<shard>_<32 hex digits>`, are still read, and written
/// back as they came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId {
    shard: u16,
    uuid: Uuid,
    form: Form,
}

/// How the UUID is written in the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Form {
    Base62,
    Hex,
}

impl JobId {
    /// A fresh id on `shard`.
    pub fn new(shard: u16) -> Self {
        Self {
            shard,
            uuid: Uuid::now_v7(),
            form: Form::Base62,
        }
    }

    pub fn shard(&self) -> u16 {
        self.shard
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}_", self.shard)?;
        match self.form {
            Form::Base62 => f.write_str(&to_base62(self.uuid.as_u128())),
            Form::Hex => write!(f, "{}", self.uuid.simple()),
        }
    }
}

fn to_base62(mut n: u128) -> String {
    let mut digits = [b'0'; BASE62_WIDTH];
    for d in digits.iter_mut().rev() {
        *d = BASE62[(n % 62) as usize];
        n /= 62;
    }
    digits.iter().map(|&b| b as char).collect()
}

fn from_base62(text: &str) -> Option<u128> {
    if text.len() != BASE62_WIDTH {
        return None;
    }
    text.bytes().try_fold(0u128, |n, b| {
        let digit = BASE62.iter().position(|&d| d == b)?;
        n.checked_mul(62)?.checked_add(digit as u128)
    })
}

/// The text was not a notification id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a notification id (expected ntf_<shard>_<22 base-62 digits>)")]
pub struct InvalidJobId;

impl FromStr for JobId {
    type Err = InvalidJobId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix(PREFIX).ok_or(InvalidJobId)?;
        let (shard, digits) = rest.split_once('_').ok_or(InvalidJobId)?;
        if shard.is_empty() || !shard.bytes().all(|b| b.is_ascii_digit()) {
            return Err(InvalidJobId);
        }
        let shard = shard.parse().map_err(|_| InvalidJobId)?;
        let (uuid, form) = match digits.len() {
            BASE62_WIDTH => (
                Uuid::from_u128(from_base62(digits).ok_or(InvalidJobId)?),
                Form::Base62,
            ),
            32 if digits.bytes().all(|b| b.is_ascii_hexdigit()) => (
                Uuid::try_parse(digits).map_err(|_| InvalidJobId)?,
                Form::Hex,
            ),
            _ => return Err(InvalidJobId),
        };
        Ok(Self { shard, uuid, form })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text() {
        let id = JobId::new(3);
        let text = id.to_string();
        assert_eq!(text.len(), "ntf_3_".len() + BASE62_WIDTH);
        let parsed: JobId = text.parse().unwrap();
        assert_eq!(parsed, id);
        assert_eq!(parsed.shard(), 3);
    }

    #[test]
    fn ids_of_earlier_builds_are_read_and_written_back_unchanged() {
        let old = "ntf_2_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e";
        let id: JobId = old.parse().unwrap();
        assert_eq!(id.shard(), 2);
        assert_eq!(id.to_string(), old);
    }

    #[test]
    fn later_ids_sort_after_earlier_ones_as_text() {
        let ids: Vec<String> = (0..50)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_micros(1100));
                JobId::new(0).to_string()
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
    }

    #[test]
    fn the_extremes_of_a_uuid_round_trip() {
        for n in [0, 1, 61, 62, u128::MAX] {
            assert_eq!(from_base62(&to_base62(n)), Some(n));
        }
        assert_eq!(from_base62("zzzzzzzzzzzzzzzzzzzzzz"), None);
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
            "ntf_0_02tVdGXmA8ZfLxvQbH6kR",
            "ntf_0_02tVdGXmA8ZfLxvQbH6kR-",
        ] {
            assert!(bad.parse::<JobId>().is_err(), "{bad}");
        }
    }
}
