//! `OrderingKey`: the key whose notifications are attempted one at a time, in
//! registration order (`ordering_key` on `POST /notify`), within their tenant.

use std::fmt;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::{FieldError, Tenant};

const MAX_LEN: usize = 200;

/// 1 to 200 printable ASCII characters other than space, `"` and `\`: an order or
/// account number as producers write it (`order:42`, `merchant-7/acct-9`). Without
/// spaces it can follow its tenant's name in a store key unambiguously, and without
/// quotes or backslashes it reads the same inside the stored JSON, where the scripts
/// find it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderingKey(String);

impl OrderingKey {
    /// Validates `raw`; errors are reported against `ordering_key`.
    pub fn parse(raw: &str) -> Result<Self, FieldError> {
        let ok = !raw.is_empty()
            && raw.len() <= MAX_LEN
            && raw
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
        match ok {
            true => Ok(Self(raw.to_string())),
            false => Err(FieldError::new(
                "ordering_key",
                format!(
                    "an ordering key is 1 to {MAX_LEN} printable ASCII characters, \
                     without spaces, `\"` or `\\`"
                ),
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key within `tenant`, as stores name its queue: the key itself for the
    /// default tenant, `<tenant> <key>` for another (two tenants' `x` are two keys).
    pub fn scoped(&self, tenant: &Tenant) -> String {
        match tenant.is_default() {
            true => self.0.clone(),
            false => format!("{tenant} {}", self.0),
        }
    }
}

impl fmt::Display for OrderingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for OrderingKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for OrderingKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(|e| de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_as_producers_write_them_are_accepted() {
        for ok in ["order:42", "merchant-7/acct-9", "x", &"k".repeat(MAX_LEN)] {
            assert_eq!(OrderingKey::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn empty_long_spaced_quoted_or_unprintable_keys_are_refused() {
        let long = "k".repeat(MAX_LEN + 1);
        for bad in ["", "a b", "a\"b", "a\\b", "é", "a\tb", &long] {
            let e = OrderingKey::parse(bad).unwrap_err();
            assert_eq!(e.field, "ordering_key", "{bad}");
        }
    }

    #[test]
    fn a_key_is_scoped_by_its_tenant_except_the_default_one() {
        let key = OrderingKey::parse("x").unwrap();
        assert_eq!(key.scoped(&Tenant::default()), "x");
        let shop = Tenant::parse("shop-a", "tenant").unwrap();
        assert_eq!(key.scoped(&shop), "shop-a x");
    }
}
