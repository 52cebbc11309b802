//! `Cursor`: an opaque position in a newest-first list, the (time, id) of the last item
//! returned. Items after it are older, or as old with a smaller id, so paging neither
//! repeats nor skips an item while new ones arrive.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;

use crate::domain::JobId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: i64,
    pub id: JobId,
}

impl Cursor {
    pub fn encode(&self) -> String {
        B64.encode(format!("{}:{}", self.at, self.id))
    }

    /// `None` for anything that is not a cursor this module made.
    pub fn decode(s: &str) -> Option<Self> {
        let raw = String::from_utf8(B64.decode(s).ok()?).ok()?;
        let (at, id) = raw.split_once(':')?;
        Some(Self {
            at: at.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let c = Cursor {
            at: 1_700_000_000_123,
            id: JobId::new(0),
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in ["", "!!", "MTIz", "eDpudGZfMF94"] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }
}
