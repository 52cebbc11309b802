//! The ids of what postback keeps besides notifications: `EventId` (`evt_…`) and
//! `SubscriptionId` (`sub_…`), each a UUID v7 as 22 base-62 digits after its prefix, so
//! that ids sort by creation time as text (event lists are read newest first by id).

use std::fmt;
use std::marker::PhantomData;

use uuid::Uuid;

use super::job_id::{from_base62, to_base62, BASE62_WIDTH};
use super::FieldError;

/// What kind of id, by its prefix.
pub trait IdKind {
    const PREFIX: &'static str;
    /// What the id names, for errors.
    const NAMES: &'static str;
}

/// An event's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Event;
/// A subscription's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subscription;

impl IdKind for Event {
    const PREFIX: &'static str = "evt_";
    const NAMES: &'static str = "an event";
}

impl IdKind for Subscription {
    const PREFIX: &'static str = "sub_";
    const NAMES: &'static str = "a subscription";
}

/// `<prefix><uuid v7 as 22 base-62 digits>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId<K> {
    uuid: Uuid,
    kind: PhantomData<K>,
}

pub type EventId = RecordId<Event>;
pub type SubscriptionId = RecordId<Subscription>;

impl<K: IdKind> RecordId<K> {
    pub fn new() -> Self {
        Self {
            uuid: crate::clock::uuid_v7(),
            kind: PhantomData,
        }
    }

    /// When it was made, in ms since the epoch (its UUID v7's time).
    pub fn created_ms(&self) -> i64 {
        (self.uuid.as_u128() >> 80) as i64
    }

    pub fn parse(text: &str, field: &str) -> Result<Self, FieldError> {
        text.strip_prefix(K::PREFIX)
            .filter(|digits| digits.len() == BASE62_WIDTH)
            .and_then(from_base62)
            .map(|n| Self {
                uuid: Uuid::from_u128(n),
                kind: PhantomData,
            })
            .ok_or_else(|| {
                let form = format!("{}<22 base-62 digits>", K::PREFIX);
                FieldError::new(field, format!("not {} id (expected {form})", K::NAMES))
            })
    }
}

impl<K: IdKind> Default for RecordId<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: IdKind> fmt::Display for RecordId<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = to_base62(self.uuid.as_u128());
        f.write_str(K::PREFIX)?;
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_refuse_another_kind() {
        let id = EventId::new();
        let text = id.to_string();
        assert!(text.starts_with("evt_"));
        assert_eq!(EventId::parse(&text, "id").unwrap(), id);
        let err = SubscriptionId::parse(&text, "id").unwrap_err();
        assert_eq!(err.field, "id");
        assert!(SubscriptionId::parse("sub_x", "id").is_err());
    }

    #[test]
    fn later_ids_sort_after_earlier_ones() {
        let first = EventId::new().to_string();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(EventId::new().to_string() > first);
    }
}
