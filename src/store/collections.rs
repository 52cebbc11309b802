//! Collections: small documents every store keeps under `(collection, key)` and lists in
//! key order, written several at once, all or none, each only if its key holds what the
//! writer expects. Subscriptions, events and the topics catalog are kept as these
//! (`crate::events` says what each document and key is), and so are the secrets the
//! instances of a deployment share (`api::paging`'s cursor key), so that their rules are
//! written once rather than once per store.

use async_trait::async_trait;

use super::StoreResult;

/// The collections, each a key space of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collection {
    /// Subscription id → the subscription.
    Subscriptions,
    /// `<tenant> <subscription id>` → nothing: a tenant's subscriptions, in id order.
    TenantSubscriptions,
    /// Event id → the event and its deliveries.
    Events,
    /// `<tenant> <event id>` → the event's topic: a tenant's events, in id (time) order.
    TenantEvents,
    /// `<tenant> <idempotency key>` → the event id and the publish's fingerprint.
    EventKeys,
    /// Event id → when it was published: events whose notifications are not all
    /// registered yet.
    Fanouts,
    /// `<tenant> <topic>` → the topic's last example.
    Topics,
    /// A secret's name → the secret, which every instance of the deployment shares: made
    /// once, from the system's randomness, by the first instance that needs it.
    Secrets,
}

impl Collection {
    /// The collection's name in every store (a Redis key's last words, a table's rows).
    pub fn name(self) -> &'static str {
        match self {
            Self::Subscriptions => "subscriptions",
            Self::TenantSubscriptions => "tenant_subscriptions",
            Self::Events => "events",
            Self::TenantEvents => "tenant_events",
            Self::EventKeys => "event_keys",
            Self::Fanouts => "fanouts",
            Self::Topics => "topics",
            Self::Secrets => "secrets",
        }
    }
}

/// What a key must hold for a write to go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Anything,
    Nothing,
    /// This document, as read.
    Exactly(String),
}

impl Expect {
    /// Whether a key holding `held` (`None`: nothing) holds what is expected.
    pub fn holds(&self, held: Option<&str>) -> bool {
        match self {
            Self::Anything => true,
            Self::Nothing => held.is_none(),
            Self::Exactly(doc) => held == Some(doc.as_str()),
        }
    }
}

/// One change of a write: `put` a document under `key`, or delete it (`None`).
#[derive(Debug, Clone)]
pub struct Change {
    pub collection: Collection,
    pub key: String,
    pub expect: Expect,
    pub put: Option<String>,
}

impl Change {
    pub fn put(collection: Collection, key: impl Into<String>, doc: impl Into<String>) -> Self {
        Self {
            collection,
            key: key.into(),
            expect: Expect::Anything,
            put: Some(doc.into()),
        }
    }

    pub fn delete(collection: Collection, key: impl Into<String>) -> Self {
        Self {
            collection,
            key: key.into(),
            expect: Expect::Anything,
            put: None,
        }
    }

    /// The same change, only if `key` holds what `expect` says.
    pub fn expecting(mut self, expect: Expect) -> Self {
        self.expect = expect;
        self
    }
}

/// Which keys of a collection a scan reads: those starting with `prefix`, after `after`
/// (before it, when `newest_first`) in key order, at most `limit`.
#[derive(Debug, Clone)]
pub struct Scan {
    pub prefix: String,
    pub after: Option<String>,
    pub newest_first: bool,
    pub limit: usize,
}

/// One end of a scan's range: a key, and whether the key itself is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub key: String,
    pub inclusive: bool,
}

impl Scan {
    /// Up to `limit` keys starting with `prefix`, after `after`, in key order.
    pub fn in_order(prefix: String, after: Option<String>, limit: usize) -> Self {
        Self {
            prefix,
            after,
            newest_first: false,
            limit,
        }
    }

    /// The lowest and the highest key the scan may read: the prefix's range, narrowed by
    /// `after` (which itself is left out).
    pub fn bounds(&self) -> (End, End) {
        let end = |key: String, inclusive| End { key, inclusive };
        let low = end(self.prefix.clone(), true);
        // Keys are text: none with the prefix sorts after the prefix and U+10FFFF.
        let high = end(format!("{}\u{10FFFF}", self.prefix), true);
        match &self.after {
            None => (low, high),
            Some(after) if self.newest_first => (low, end(after.clone(), false)),
            Some(after) => (end(after.clone(), false), high),
        }
    }
}

/// Collections, as a store keeps them.
#[async_trait]
pub trait Collections: Send + Sync {
    /// Applies every change if every change's `expect` holds, none of them otherwise.
    /// Whether they were applied.
    async fn write(&self, changes: &[Change]) -> StoreResult<bool>;

    /// The documents under `keys` (`None`: none).
    async fn read(
        &self,
        collection: Collection,
        keys: &[String],
    ) -> StoreResult<Vec<Option<String>>>;

    /// The keys and documents `scan` reads, in its order.
    async fn scan(&self, collection: Collection, scan: &Scan)
        -> StoreResult<Vec<(String, String)>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(after: Option<&str>, newest_first: bool) -> Scan {
        Scan {
            prefix: "shop-a ".into(),
            after: after.map(str::to_string),
            newest_first,
            limit: 10,
        }
    }

    #[test]
    fn bounds_keep_to_the_prefix_and_leave_out_the_cursor() {
        let (low, high) = scan(None, false).bounds();
        assert!(low.inclusive && high.inclusive);
        assert!(low.key.as_str() <= "shop-a evt_1" && "shop-a evt_1" <= high.key.as_str());
        assert!("shop-b evt_1" > high.key.as_str() && "shop-a" < low.key.as_str());
        let (low, _) = scan(Some("shop-a evt_1"), false).bounds();
        assert_eq!((low.key.as_str(), low.inclusive), ("shop-a evt_1", false));
        let (low, high) = scan(Some("shop-a evt_2"), true).bounds();
        assert_eq!((high.key.as_str(), high.inclusive), ("shop-a evt_2", false));
        assert_eq!(low.key, "shop-a ");
    }
}
