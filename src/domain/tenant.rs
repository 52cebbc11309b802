//! `Tenant`: whom a notification belongs to (a merchant, a business unit). Its rate keys,
//! quotas, pauses, signing secrets and idempotency keys are its own, and a token bound to
//! it sees nothing of another's. `HostAllowList`: the callback hosts a tenant may use.

use std::fmt;
use std::ops::Deref;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::FieldError;

const MAX_LEN: usize = 64;

/// A tenant's name: 1 to 64 letters, digits, `-`, `_` or `.`, so that it can be written
/// in front of a rate key (`shop-a/merchant-7`) or an idempotency key without ambiguity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenant(String);

impl Tenant {
    /// The tenant of notifications registered without one.
    pub const DEFAULT: &'static str = "default";

    pub fn default_tenant() -> Self {
        Self(Self::DEFAULT.to_string())
    }

    /// Validates `raw`; errors are reported against `field`.
    pub fn parse(raw: &str, field: &str) -> Result<Self, FieldError> {
        let ok = !raw.is_empty()
            && raw.len() <= MAX_LEN
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(Self(raw.to_string()))
        } else {
            Err(FieldError::new(
                field,
                format!("a tenant is 1 to {MAX_LEN} letters, digits, `-`, `_` or `.`"),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }

    /// `rate_key` as a key of this tenant: the quota and pause it names are this
    /// tenant's alone (`shop-a/x` and `shop-b/x` are two keys).
    pub fn rate_key(&self, rate_key: &str) -> String {
        format!("{}/{rate_key}", self.0)
    }
}

impl Default for Tenant {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl Deref for Tenant {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Tenant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Tenant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw, "tenant").map_err(|e| de::Error::custom(e.message))
    }
}

/// The callback hosts a tenant may use: exact names, and `*.domain` for any name below
/// `domain` (not `domain` itself). Compared without regard to case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAllowList(Vec<String>);

impl HostAllowList {
    /// Validates each pattern; the error says which one is wrong and why.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        let mut list = Vec::with_capacity(patterns.len());
        for p in patterns {
            let p = p.as_ref().trim().to_ascii_lowercase();
            let name = p.strip_prefix("*.").unwrap_or(&p);
            if name.is_empty() || (name.contains(['*', '/', ':', ' ']) && !is_ipv6(name)) {
                return Err(format!(
                    "`{p}` is not a host name, an address or `*.domain`"
                ));
            }
            list.push(p);
        }
        Ok(Self(list))
    }

    /// Whether `host` (a URL's host, as the URL parser wrote it) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.0.iter().any(|p| match p.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
            None => *p == host,
        })
    }
}

fn is_ipv6(name: &str) -> bool {
    name.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::Ipv6Addr>()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_name_is_plain() {
        assert!(Tenant::parse("shop-a.eu_1", "tenant").is_ok());
        for bad in ["", "*", "shop a", "shop/a", "shop:a", &"x".repeat(65)] {
            assert_eq!(Tenant::parse(bad, "tenant").unwrap_err().field, "tenant");
        }
        assert_eq!(Tenant::default().rate_key("x"), "default/x");
    }

    #[test]
    fn allowed_hosts_match_exactly_or_below_a_domain() {
        let list =
            HostAllowList::parse(&["Hooks.Shop.example", "*.shop.example", "[::1]"]).unwrap();
        assert!(list.allows("hooks.shop.example"));
        assert!(list.allows("a.b.shop.example"));
        assert!(list.allows("[::1]"));
        assert!(
            !list.allows("shop.example"),
            "`*.` is below the domain only"
        );
        assert!(!list.allows("evilshop.example"));
        assert!(!list.allows("hooks.shop.example.evil.example"));
        assert!(HostAllowList::parse(&["https://x.example"]).is_err());
        assert!(HostAllowList::parse(&["a.*.example"]).is_err());
    }
}
