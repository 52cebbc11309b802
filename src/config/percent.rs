//! `Percent`: a percentage setting, written `25%`, `"25"` or `25`, from 0 to 100.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percent(u8);

impl Percent {
    pub fn new(n: u8) -> Option<Self> {
        (n <= 100).then_some(Self(n))
    }

    pub fn get(self) -> u32 {
        u32::from(self.0)
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0)
    }
}

impl Serialize for Percent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PercentVisitor)
    }
}

struct PercentVisitor;

impl Visitor<'_> for PercentVisitor {
    type Value = Percent;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a percentage from 0% to 100%")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Percent, E> {
        let n = v.trim().trim_end_matches('%').trim().parse::<u64>();
        n.map_err(|_| E::custom(format!("`{v}` is not a percentage like 25%")))
            .and_then(|n| self.visit_u64(n))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Percent, E> {
        u8::try_from(v)
            .ok()
            .and_then(Percent::new)
            .ok_or_else(|| E::custom(format!("{v}% is more than 100%")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Percent, E> {
        let n = u64::try_from(v).map_err(|_| E::custom(format!("{v}% is less than 0%")))?;
        self.visit_u64(n)
    }
}
