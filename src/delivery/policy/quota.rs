//! `Quota`: how many deliveries a rate key may have per unit of time, written `50/s`,
//! `600/m`, `1000/h`, or `unlimited`. Deliveries are spaced evenly (`5/s`: one every
//! 200 ms), so that no second ever holds more than the quota: receivers that state a
//! limit mean it for every second, not on average.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// The rate-limit quota of every rate key (a tenant's, `shop-a/merchant-7`): its own,
/// its tenant's default, or the default; and how many sends of a key may go at once
/// (1: evenly spaced).
#[derive(Debug, Clone)]
pub struct Quotas {
    pub default: Quota,
    /// By tenant-qualified rate key.
    pub per_key: BTreeMap<String, Quota>,
    /// The default of a tenant's rate keys, by tenant.
    pub per_tenant: BTreeMap<String, Quota>,
    pub burst: u32,
}

impl Quotas {
    /// The quota of a tenant-qualified rate key (`JobSpec::quota_key`).
    pub fn of(&self, key: &str) -> Quota {
        if let Some(q) = self.per_key.get(key) {
            return *q;
        }
        key.split_once('/')
            .and_then(|(tenant, _)| self.per_tenant.get(tenant))
            .copied()
            .unwrap_or(self.default)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    Unlimited,
    Rate { count: NonZeroU32, per: Duration },
}

impl Quota {
    /// µs between two sends at this quota, rounded up so that it is never exceeded;
    /// 0 when unlimited.
    pub fn interval_us(self) -> i64 {
        match self {
            Quota::Unlimited => 0,
            Quota::Rate { count, per } => {
                let per_us = per.as_micros() as i64;
                (per_us + i64::from(count.get()) - 1) / i64::from(count.get())
            }
        }
    }
}

impl FromStr for Quota {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("unlimited") {
            return Ok(Quota::Unlimited);
        }
        let bad = || format!("`{s}` is not a quota like 50/s, 600/m, 1000/h or unlimited");
        let (count, unit) = s.split_once('/').ok_or_else(bad)?;
        let count: NonZeroU32 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        if count.get() > 1_000_000 {
            return Err(format!("`{s}`: at most 1000000 per unit; use unlimited"));
        }
        Ok(Quota::Rate { count, per })
    }
}

/// Settings write a quota as text (`50/s`); a bad one is refused when it is read.
/// A quota as written: text, or a bare number (`rate_limit = 5`), which is read as the
/// text it is so that the error says what a quota looks like.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Text(String),
    Number(u64),
    Other(de::IgnoredAny),
}

impl<'de> Deserialize<'de> for Quota {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = match Written::deserialize(d)? {
            Written::Text(text) => text,
            Written::Number(n) => n.to_string(),
            Written::Other(_) => {
                return Err(de::Error::custom(
                    "not a quota like 50/s, 600/m, 1000/h or unlimited",
                ))
            }
        };
        text.parse().map_err(de::Error::custom)
    }
}

impl Serialize for Quota {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quota::Unlimited => f.write_str("unlimited"),
            Quota::Rate { count, per } => {
                let unit = match per.as_secs() {
                    1 => "s",
                    60 => "m",
                    _ => "h",
                };
                write!(f, "{count}/{unit}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_and_unlimited() {
        for ok in ["50/s", "600/m", "1000/h", "unlimited", " 5 / s "] {
            let q: Quota = ok.parse().unwrap();
            assert_eq!(q.to_string().replace(' ', ""), ok.replace(' ', ""), "{ok}");
        }
        assert_eq!("unlimited".parse::<Quota>().unwrap().interval_us(), 0);
        assert_eq!("3/s".parse::<Quota>().unwrap().interval_us(), 333_334);
        assert_eq!("600/m".parse::<Quota>().unwrap().interval_us(), 100_000);
    }

    #[test]
    fn a_key_has_its_own_quota_else_its_tenants_else_the_default() {
        let q = |s: &str| s.parse::<Quota>().unwrap();
        let quotas = Quotas {
            default: q("100/s"),
            per_key: BTreeMap::from([("shop-a/x".into(), q("1/s"))]),
            per_tenant: BTreeMap::from([("shop-a".into(), q("5/s"))]),
            burst: 1,
        };
        assert_eq!(quotas.of("shop-a/x"), q("1/s"));
        assert_eq!(quotas.of("shop-a/y"), q("5/s"));
        assert_eq!(quotas.of("shop-b/x"), q("100/s"));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "50", "0/s", "-1/s", "5/d", "x/s", "5/", "2000000/s"] {
            assert!(bad.parse::<Quota>().is_err(), "{bad}");
        }
    }
}
