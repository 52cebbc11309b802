//! `StringList`: a list setting that may be written as a TOML array or, from an
//! environment variable, as one comma-separated string.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

#[derive(Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct StringList(Vec<String>);

impl StringList {
    /// Splits on commas, trims, and drops empty items.
    pub fn from_csv(s: &str) -> Self {
        Self(
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect(),
        )
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }
}

impl FromIterator<String> for StringList {
    fn from_iter<I: IntoIterator<Item = String>>(items: I) -> Self {
        Self(items.into_iter().collect())
    }
}

/// Lists may hold secrets (API tokens, signing keys): print only how many there are.
impl fmt::Debug for StringList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StringList({} items)", self.0.len())
    }
}

impl<'de> Deserialize<'de> for StringList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListVisitor)
    }
}

struct ListVisitor;

impl<'de> Visitor<'de> for ListVisitor {
    type Value = StringList;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of strings or a comma-separated string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<StringList, E> {
        Ok(StringList::from_csv(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<StringList, E> {
        Ok(StringList(vec![v.to_string()]))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<StringList, E> {
        Ok(StringList(vec![v.to_string()]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StringList, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<String>()? {
            out.push(item);
        }
        Ok(StringList(out))
    }
}
