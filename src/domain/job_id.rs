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
pub(crate) const BASE62_WIDTH: usize = 22;

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
            uuid: crate::clock::uuid_v7(),
            form: Form::Base62,
        }
    }

    pub fn shard(&self) -> u16 {
        self.shard
    }

    /// When it was made (ms since the epoch, by the clock of the instance that made it);
    /// `None` for an id in the hex form of earlier builds, whose time is not read.
    pub fn made_at_ms(&self) -> Option<i64> {
        let version = (self.uuid.as_u128() >> 76) & 0xf;
        (self.form == Form::Base62 && version == 7).then(|| (self.uuid.as_u128() >> 80) as i64)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}_", self.shard)?;
        match self.form {
            Form::Base62 => {
                let digits = to_base62(self.uuid.as_u128());
                f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
            }
            Form::Hex => write!(f, "{}", self.uuid.simple()),
        }
    }
}

/// 62^10, the most digits whose value fits a `u64`: the digits are taken ten at a time
/// from `u64`s, since each 128-bit division is many times slower (ids are written into
/// every record, header and answer).
const TEN_DIGITS: u128 = 839_299_365_868_340_224;

pub(crate) fn to_base62(n: u128) -> [u8; BASE62_WIDTH] {
    let mut digits = [b'0'; BASE62_WIDTH];
    let (high, low) = (n / TEN_DIGITS, (n % TEN_DIGITS) as u64);
    let (top, middle) = ((high / TEN_DIGITS) as u64, (high % TEN_DIGITS) as u64);
    let (head, rest) = digits.split_at_mut(BASE62_WIDTH - 20);
    let (mid, tail) = rest.split_at_mut(10);
    for (part, mut value) in [(head, top), (mid, middle), (tail, low)] {
        for d in part.iter_mut().rev() {
            *d = BASE62[(value % 62) as usize];
            value /= 62;
        }
    }
    digits
}

pub(crate) fn from_base62(text: &str) -> Option<u128> {
    if text.len() != BASE62_WIDTH {
        return None;
    }
    text.bytes().try_fold(0u128, |n, b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => return None,
        };
        n.checked_mul(62)?.checked_add(u128::from(digit))
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
    fn an_id_says_when_it_was_made() {
        let before = crate::clock::now_ms();
        let made = JobId::new(1).to_string().parse::<JobId>().unwrap();
        let at = made.made_at_ms().unwrap();
        assert!(
            before <= at && at <= crate::clock::now_ms() + 1,
            "{before} {at}"
        );
        let old: JobId = "ntf_2_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e".parse().unwrap();
        assert_eq!(old.made_at_ms(), None);
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

    fn base62_text(n: u128) -> String {
        String::from_utf8(to_base62(n).to_vec()).unwrap()
    }

    #[test]
    fn the_extremes_of_a_uuid_round_trip() {
        for n in [0, 1, 61, 62, u128::from(u64::MAX), u128::MAX] {
            assert_eq!(from_base62(&base62_text(n)), Some(n));
        }
        assert_eq!(from_base62("zzzzzzzzzzzzzzzzzzzzzz"), None);
    }

    /// Ids already handed out must read the same: the digits are those of the plain
    /// one-digit-at-a-time conversion.
    #[test]
    fn digits_are_those_of_the_plain_conversion() {
        let plain = |mut n: u128| {
            let mut digits = [b'0'; BASE62_WIDTH];
            for d in digits.iter_mut().rev() {
                *d = BASE62[(n % 62) as usize];
                n /= 62;
            }
            String::from_utf8(digits.to_vec()).unwrap()
        };
        let samples = (0..1000).map(|_| Uuid::now_v7().as_u128());
        for n in samples.chain([
            0,
            TEN_DIGITS - 1,
            TEN_DIGITS,
            TEN_DIGITS * TEN_DIGITS,
            u128::MAX,
        ]) {
            assert_eq!(base62_text(n), plain(n), "{n}");
        }
        assert_eq!(
            "ntf_0_0352MTUd4Uo7EJoE0LjAvZ"
                .parse::<JobId>()
                .unwrap()
                .to_string(),
            "ntf_0_0352MTUd4Uo7EJoE0LjAvZ"
        );
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
