//! `Cursor`: an opaque position in a list ordered by time, the (time, id) of the last
//! item returned. Items after it are further in the list's order (older in a
//! newest-first list), or at the same time with an id further on, so paging neither
//! repeats nor skips an item while new ones arrive. `WalkCursor` adds when a walk
//! through a list of the queue began.

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

/// A position in a walk through one list of the queue: the (time, id) of the last item
/// returned, in the list's order, and when the walk began (ms, the store's clock), which
/// every page of the walk keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkCursor {
    pub position: Cursor,
    pub walk_from: i64,
}

impl WalkCursor {
    pub fn encode(&self) -> String {
        let Cursor { at, id } = &self.position;
        B64.encode(format!("{}:{at}:{id}", self.walk_from))
    }

    /// `None` for anything that is not a cursor this module made.
    pub fn decode(s: &str) -> Option<Self> {
        let raw = String::from_utf8(B64.decode(s).ok()?).ok()?;
        let (walk_from, rest) = raw.split_once(':')?;
        let (at, id) = rest.split_once(':')?;
        Some(Self {
            position: Cursor {
                at: at.parse().ok()?,
                id: id.parse().ok()?,
            },
            walk_from: walk_from.parse().ok()?,
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
        assert_eq!(Cursor::decode(&c.encode()), Some(c.clone()));
        for bad in ["", "!!", "MTIz", "eDpudGZfMF94"] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
        let w = WalkCursor {
            position: c.clone(),
            walk_from: 1_700_000_000_000,
        };
        assert_eq!(WalkCursor::decode(&w.encode()), Some(w));
        assert_eq!(WalkCursor::decode(&c.encode()), None);
    }
}
