//! Events and subscriptions as every store keeps them (`store::collections`): a tenant's
//! standing subscriptions (a URL, the topics it takes, the settings of the notifications
//! made for it), the events producers publish (a topic and a body, and the notification
//! made for each subscription it reached), the events whose notifications are not all
//! registered yet, and the topics catalog (each topic's latest example). What a
//! document holds and under which key, and which subscriptions an event reaches, is
//! decided here once.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::{EventId, JobId, RawJson, SubscriptionId, Tenant, Topic, TopicPattern};
use crate::store::collections::{Change, Collection, Collections, Expect, Scan};
use crate::store::{StoreError, StoreResult};

/// Most subscriptions a tenant may have: an event reads them all.
pub const MAX_SUBSCRIPTIONS: usize = 200;

/// A tenant's standing subscription.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Subscription {
    pub id: String,
    pub tenant: String,
    pub url: String,
    pub topics: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub enabled: bool,
    /// What each notification made for it carries besides its URL, body and topic: the
    /// fields of `POST /notify` (schedule, profile, success rule, headers, rate key,
    /// timeout, delay, ordering key), as given.
    #[serde(default)]
    pub settings: Map<String, Value>,
    /// ms since the epoch.
    pub created_at: i64,
    pub updated_at: i64,
}

impl Subscription {
    /// Whether an event of `topic` reaches it.
    pub fn takes(&self, topic: &Topic) -> bool {
        self.enabled
            && self.topics.iter().any(|p| {
                TopicPattern::parse(p, "topics").is_ok_and(|pattern| pattern.matches(topic))
            })
    }

    fn decode(json: &str) -> StoreResult<Self> {
        serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt(format!("a subscription's document: {e}")))
    }

    fn encode(&self) -> String {
        serde_json::to_string(self).expect("a subscription serializes")
    }
}

/// A document that cannot be read (stored deeper than a reader reads by a build before
/// the nesting limit, or damaged): named wherever it would be listed, so that it costs
/// only itself, and deleted by its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    pub id: String,
    /// Its tenant, as far as the document and the tenant's index tell.
    pub tenant: Option<String>,
    pub error: String,
}

/// A subscription's document, read or not.
pub type StoredSubscription = Result<Subscription, Unreadable>;

/// `doc`, the subscription `id`, read.
fn read_subscription(id: &str, doc: &str) -> StoredSubscription {
    Subscription::decode(doc).map_err(|e| Unreadable {
        id: id.to_string(),
        tenant: written_tenant(doc),
        error: e.to_string(),
    })
}

/// The tenant a document that cannot be read names first (every document postback writes
/// names its tenant before anything a caller wrote), if any.
fn written_tenant(doc: &str) -> Option<String> {
    let rest = &doc[doc.find("\"tenant\":\"")? + "\"tenant\":\"".len()..];
    let name = &rest[..rest.find('"')?];
    Tenant::parse(name, "tenant").ok().map(|t| t.to_string())
}

/// A published event and what it became.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub id: String,
    pub tenant: String,
    pub topic: String,
    /// As the producer sent it.
    pub body: RawJson,
    /// ms since the epoch.
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The fingerprint of the publish, which a repeated idempotency key is held to.
    pub fingerprint: String,
    /// One per subscription the event reached, in the order of their ids.
    pub deliveries: Vec<Delivery>,
}

/// The notification an event made for one subscription, or why it made none.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    pub subscription: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification: Option<String>,
    /// The subscription's settings no longer pass the tenant's rules (its URL's host is
    /// no longer allowed, its profile was removed): the error `POST /notify` would answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Value>,
}

impl Event {
    pub fn decode(json: &str) -> StoreResult<Self> {
        serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt(format!("an event's document: {e}")))
    }

    fn encode(&self) -> String {
        serde_json::to_string(self).expect("an event serializes")
    }

    /// The notifications it made.
    pub fn notifications(&self) -> impl Iterator<Item = JobId> + '_ {
        self.deliveries
            .iter()
            .filter_map(|d| d.notification.as_deref()?.parse().ok())
    }
}

/// A topic of the catalog: when it was last published, with that event's body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicEntry {
    pub topic: String,
    pub last_published_at: i64,
    pub last_event: String,
    pub example: RawJson,
}

impl TopicEntry {
    fn decode(json: &str) -> StoreResult<Self> {
        serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt(format!("a topic's document: {e}")))
    }
}

/// `<tenant> <rest>`: keys of what belongs to a tenant, listed tenant by tenant.
fn tenant_key(tenant: &Tenant, rest: &str) -> String {
    format!("{tenant} {rest}")
}

fn tenant_prefix(tenant: &Tenant) -> String {
    format!("{tenant} ")
}

/// The rest of a tenant's key, after its tenant.
fn after_tenant(key: &str) -> &str {
    key.split_once(' ').map_or(key, |(_, rest)| rest)
}

/// The subscription `id`, whoever's it is.
pub async fn subscription(
    store: &dyn Collections,
    id: &SubscriptionId,
) -> StoreResult<Option<StoredSubscription>> {
    let id = id.to_string();
    let stored = store
        .read(Collection::Subscriptions, std::slice::from_ref(&id))
        .await?;
    let Some(doc) = stored.into_iter().flatten().next() else {
        return Ok(None);
    };
    let read = read_subscription(&id, &doc);
    let Err(mut unreadable) = read else {
        return Ok(Some(read));
    };
    // The tenant the document names counts only if its index agrees.
    if let Some(tenant) = unreadable.tenant.take() {
        let indexed = store
            .read(Collection::TenantSubscriptions, &[format!("{tenant} {id}")])
            .await?;
        unreadable.tenant = indexed.into_iter().flatten().next().map(|_| tenant);
    }
    Ok(Some(Err(unreadable)))
}

/// Up to `n` of `tenant`'s subscriptions (of every tenant's, by id, when `None`) after
/// `after`, in id order, each read or named as unreadable.
pub async fn subscriptions(
    store: &dyn Collections,
    tenant: Option<&Tenant>,
    after: Option<&str>,
    n: usize,
) -> StoreResult<Vec<StoredSubscription>> {
    let Some(tenant) = tenant else {
        let scan = Scan::in_order(String::new(), after.map(str::to_string), n);
        let docs = store.scan(Collection::Subscriptions, &scan).await?;
        return Ok(docs
            .iter()
            .map(|(id, d)| read_subscription(id, d))
            .collect());
    };
    let scan = Scan::in_order(
        tenant_prefix(tenant),
        after.map(|a| tenant_key(tenant, a)),
        n,
    );
    let keys = store.scan(Collection::TenantSubscriptions, &scan).await?;
    let ids: Vec<String> = keys
        .iter()
        .map(|(k, _)| after_tenant(k).to_string())
        .collect();
    let docs = store.read(Collection::Subscriptions, &ids).await?;
    Ok(ids
        .iter()
        .zip(docs)
        .filter_map(|(id, doc)| {
            let read = read_subscription(id, &doc?);
            Some(read.map_err(|u| Unreadable {
                tenant: Some(tenant.to_string()),
                ..u
            }))
        })
        .collect())
}

/// The subscriptions that could be read, each unreadable one logged (it takes no event
/// until it is deleted and created again).
fn readable(stored: Vec<StoredSubscription>) -> Vec<Subscription> {
    stored
        .into_iter()
        .filter_map(|s| {
            s.map_err(|u| {
                tracing::warn!(subscription = %u.id, error = %u.error, "a subscription cannot be read; it takes no events until deleted and created again");
            })
            .ok()
        })
        .collect()
}

/// Stores a new subscription, unless its tenant has `MAX_SUBSCRIPTIONS` already: whether
/// it was stored.
pub async fn create(store: &dyn Collections, s: &Subscription) -> StoreResult<bool> {
    let tenant = Tenant::parse(&s.tenant, "tenant").map_err(corrupt)?;
    let had = subscriptions(store, Some(&tenant), None, MAX_SUBSCRIPTIONS).await?;
    if had.len() >= MAX_SUBSCRIPTIONS {
        return Ok(false);
    }
    let changes = [
        Change::put(Collection::Subscriptions, &s.id, s.encode()).expecting(Expect::Nothing),
        Change::put(
            Collection::TenantSubscriptions,
            tenant_key(&tenant, &s.id),
            "",
        ),
    ];
    store.write(&changes).await
}

/// Writes `new` over `old` if it is still as read: whether it was.
pub async fn replace(
    store: &dyn Collections,
    old: &Subscription,
    new: &Subscription,
) -> StoreResult<bool> {
    let change = Change::put(Collection::Subscriptions, &new.id, new.encode())
        .expecting(Expect::Exactly(old.encode()));
    store.write(&[change]).await
}

/// Deletes a subscription that cannot be read, with its tenant's index entry when its
/// tenant is known.
pub async fn delete_unreadable(store: &dyn Collections, u: &Unreadable) -> StoreResult<bool> {
    let mut changes = vec![Change::delete(Collection::Subscriptions, &u.id)];
    if let Some(tenant) = &u.tenant {
        let key = format!("{tenant} {}", u.id);
        changes.push(Change::delete(Collection::TenantSubscriptions, key));
    }
    store.write(&changes).await
}

/// Deletes `s`: whether it was still there.
pub async fn delete(store: &dyn Collections, s: &Subscription) -> StoreResult<bool> {
    let tenant = Tenant::parse(&s.tenant, "tenant").map_err(corrupt)?;
    let changes = [
        Change::delete(Collection::Subscriptions, &s.id).expecting(Expect::Exactly(s.encode())),
        Change::delete(Collection::TenantSubscriptions, tenant_key(&tenant, &s.id)),
    ];
    store.write(&changes).await
}

/// Every subscription of `tenant` that an event of `topic` reaches, in id order.
pub async fn reached(
    store: &dyn Collections,
    tenant: &Tenant,
    topic: &Topic,
) -> StoreResult<Vec<Subscription>> {
    let all = subscriptions(store, Some(tenant), None, MAX_SUBSCRIPTIONS).await?;
    Ok(readable(all)
        .into_iter()
        .filter(|s| s.takes(topic))
        .collect())
}

/// The event `id`, whoever's it is.
pub async fn event(store: &dyn Collections, id: &EventId) -> StoreResult<Option<Event>> {
    let stored = store.read(Collection::Events, &[id.to_string()]).await?;
    stored
        .into_iter()
        .flatten()
        .next()
        .as_deref()
        .map(Event::decode)
        .transpose()
}

/// The event `tenant`'s idempotency `key` published, with the fingerprint it was
/// published with; `None` while the key is unknown.
pub async fn event_of_key(
    store: &dyn Collections,
    tenant: &Tenant,
    key: &str,
) -> StoreResult<Option<Event>> {
    let stored = store
        .read(Collection::EventKeys, &[tenant_key(tenant, key)])
        .await?;
    let Some(id) = stored.into_iter().flatten().next() else {
        return Ok(None);
    };
    let id = EventId::parse(&id, "event").map_err(corrupt)?;
    event(store, &id).await
}

/// Stores a published event with what it is still to register (its fan-out), its
/// idempotency key and its topic's example, all at once. `false`: its idempotency key
/// published another event meanwhile (nothing stored).
pub async fn publish(store: &dyn Collections, e: &Event, now_ms: i64) -> StoreResult<bool> {
    let tenant = Tenant::parse(&e.tenant, "tenant").map_err(corrupt)?;
    let entry = TopicEntry {
        topic: e.topic.clone(),
        last_published_at: e.created_at,
        last_event: e.id.clone(),
        example: e.body.clone(),
    };
    let entry = serde_json::to_string(&entry).expect("a topic entry serializes");
    let mut changes = vec![
        Change::put(Collection::Events, &e.id, e.encode()).expecting(Expect::Nothing),
        Change::put(
            Collection::TenantEvents,
            tenant_key(&tenant, &e.id),
            &e.topic,
        ),
        Change::put(Collection::Topics, tenant_key(&tenant, &e.topic), entry),
    ];
    if e.notifications().next().is_some() {
        changes.push(Change::put(Collection::Fanouts, &e.id, now_ms.to_string()));
    }
    if let Some(key) = &e.idempotency_key {
        let key = Change::put(Collection::EventKeys, tenant_key(&tenant, key), &e.id);
        changes.push(key.expecting(Expect::Nothing));
    }
    store.write(&changes).await
}

/// Notes that every notification of event `id` is registered.
pub async fn fanned_out(store: &dyn Collections, id: &str) -> StoreResult<()> {
    store
        .write(&[Change::delete(Collection::Fanouts, id)])
        .await
        .map(|_| ())
}

/// Notes that every notification of event `id` is registered but those of `refused`
/// (subscription id → the error), which made none: each of their deliveries keeps the
/// error instead of a notification. Nothing is written when the event changed since it
/// was read, or is gone.
pub async fn refused(
    store: &dyn Collections,
    id: &str,
    refused: &[(String, Value)],
) -> StoreResult<()> {
    let stored = store.read(Collection::Events, &[id.to_string()]).await?;
    let Some(doc) = stored.into_iter().flatten().next() else {
        return Ok(());
    };
    let mut event = Event::decode(&doc)?;
    for d in &mut event.deliveries {
        if let Some((_, error)) = refused.iter().find(|(s, _)| *s == d.subscription) {
            d.notification = None;
            d.refused = Some(error.clone());
        }
    }
    let changes = [
        Change::put(Collection::Events, id, event.encode()).expecting(Expect::Exactly(doc)),
        Change::delete(Collection::Fanouts, id),
    ];
    store.write(&changes).await.map(|_| ())
}

/// Up to `n` events whose notifications are not all registered, after the event `after`
/// (from the first when `None`), oldest first, with when each was published (ms).
pub async fn unfinished(
    store: &dyn Collections,
    after: Option<&str>,
    n: usize,
) -> StoreResult<Vec<(String, i64)>> {
    let scan = Scan::in_order(String::new(), after.map(str::to_string), n);
    let read = store.scan(Collection::Fanouts, &scan).await?;
    Ok(read
        .into_iter()
        .map(|(id, at)| (id, at.parse().unwrap_or(0)))
        .collect())
}

/// Up to `n` of `tenant`'s events (of every tenant's, when `None`), newest first, before
/// the id `before`, each with its topic, of `topic` only when given. How far the scan
/// got is the last event's id (`None`: no more).
pub async fn event_ids(
    store: &dyn Collections,
    tenant: Option<&Tenant>,
    topic: Option<&Topic>,
    before: Option<&str>,
    n: usize,
) -> StoreResult<(Vec<String>, Option<String>)> {
    let (collection, prefix) = match tenant {
        Some(t) => (Collection::TenantEvents, tenant_prefix(t)),
        None => (Collection::Events, String::new()),
    };
    let scan = Scan {
        after: before.map(|b| format!("{prefix}{b}")),
        prefix,
        newest_first: true,
        limit: n,
    };
    let read = store.scan(collection, &scan).await?;
    let last = (read.len() == n)
        .then(|| {
            read.last()
                .map(|(k, _)| after_tenant_or_id(k, tenant.is_some()))
        })
        .flatten();
    let of_topic = |(_, doc): &(String, String)| {
        let event_topic = match tenant {
            Some(_) => doc.clone(),
            None => Event::decode(doc).map(|e| e.topic).unwrap_or_default(),
        };
        topic.is_none_or(|t| t.as_str() == event_topic)
    };
    let ids = read
        .iter()
        .filter(|entry| of_topic(entry))
        .map(|(k, _)| after_tenant_or_id(k, tenant.is_some()))
        .collect();
    Ok((ids, last))
}

fn after_tenant_or_id(key: &str, tenant_keyed: bool) -> String {
    match tenant_keyed {
        true => after_tenant(key).to_string(),
        false => key.to_string(),
    }
}

/// The events among `ids`, in that order (one deleted meanwhile left out).
pub async fn events(store: &dyn Collections, ids: &[String]) -> StoreResult<Vec<Event>> {
    let docs = store.read(Collection::Events, ids).await?;
    docs.into_iter()
        .flatten()
        .map(|d| Event::decode(&d))
        .collect()
}

/// `tenant`'s topics catalog, in topic order, up to `n` after `after`.
pub async fn topics(
    store: &dyn Collections,
    tenant: &Tenant,
    after: Option<&str>,
    n: usize,
) -> StoreResult<Vec<TopicEntry>> {
    let scan = Scan::in_order(
        tenant_prefix(tenant),
        after.map(|a| tenant_key(tenant, a)),
        n,
    );
    let read = store.scan(Collection::Topics, &scan).await?;
    read.iter().map(|(_, d)| TopicEntry::decode(d)).collect()
}

/// Retention: deletes up to `n` events published before `before_ms`, oldest first, with
/// their idempotency keys. How many.
pub async fn forget_events(
    store: &dyn Collections,
    before_ms: i64,
    n: usize,
) -> StoreResult<usize> {
    let scan = Scan::in_order(String::new(), None, n);
    let read = store.scan(Collection::Events, &scan).await?;
    let mut forgotten = 0;
    for (id, doc) in &read {
        let Some(changes) = forgetting(id, doc, before_ms) else {
            break;
        };
        if store.write(&changes).await? {
            forgotten += 1;
        }
    }
    Ok(forgotten)
}

/// What forgetting the event `id` (its document `doc`) deletes, if it was published
/// before `before_ms`. One that cannot be read is forgotten by its id's time, with its
/// tenant's index entry where the document names its tenant (its idempotency key then
/// expires with nothing to name).
fn forgetting(id: &str, doc: &str, before_ms: i64) -> Option<Vec<Change>> {
    let (created_at, tenant, key) = match Event::decode(doc) {
        Ok(e) => (e.created_at, Some(e.tenant), e.idempotency_key),
        Err(e) => {
            tracing::warn!(event = %id, error = %e, "an event cannot be read; forgotten by its id's time");
            let created = EventId::parse(id, "event").map_or(i64::MIN, |e| e.created_ms());
            (created, written_tenant(doc), None)
        }
    };
    if created_at >= before_ms {
        return None;
    }
    let mut changes = vec![
        Change::delete(Collection::Events, id),
        Change::delete(Collection::Fanouts, id),
    ];
    let tenant = tenant.and_then(|t| Tenant::parse(&t, "tenant").ok());
    if let Some(tenant) = &tenant {
        changes.push(Change::delete(
            Collection::TenantEvents,
            tenant_key(tenant, id),
        ));
        if let Some(key) = key {
            changes.push(Change::delete(
                Collection::EventKeys,
                tenant_key(tenant, &key),
            ));
        }
    }
    Some(changes)
}

/// Retention of the catalog: of up to `n` topics after the key `after` (every tenant's,
/// in key order), forgets those last published before `before_ms`, each only if not
/// published again since it was read. How many, and the key to go on from (`None`: the
/// last was read).
pub async fn forget_topics(
    store: &dyn Collections,
    before_ms: i64,
    after: Option<&str>,
    n: usize,
) -> StoreResult<(usize, Option<String>)> {
    let scan = Scan::in_order(String::new(), after.map(str::to_string), n);
    let read = store.scan(Collection::Topics, &scan).await?;
    let next = (read.len() == n)
        .then(|| read.last().map(|(k, _)| k.clone()))
        .flatten();
    let mut forgotten = 0;
    for (key, doc) in &read {
        // One that cannot be read is only an example: forgotten.
        let last = TopicEntry::decode(doc).map_or(i64::MIN, |e| e.last_published_at);
        if last >= before_ms {
            continue;
        }
        let change =
            Change::delete(Collection::Topics, key).expecting(Expect::Exactly(doc.clone()));
        if store.write(&[change]).await? {
            forgotten += 1;
        }
    }
    Ok((forgotten, next))
}

fn corrupt(e: crate::domain::FieldError) -> StoreError {
    StoreError::Corrupt(format!("a stored {}: {}", e.field, e.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_that_cannot_be_read_is_forgotten_by_its_ids_time() {
        let id = EventId::new();
        let made = id.created_ms();
        let doc = r#"{"id":"x","tenant":"shop-a","body":"#;
        let changes = forgetting(&id.to_string(), doc, made + 1).expect("old enough");
        let keys: Vec<(Collection, String)> =
            changes.into_iter().map(|c| (c.collection, c.key)).collect();
        assert!(keys.contains(&(Collection::Events, id.to_string())));
        assert!(keys.contains(&(Collection::TenantEvents, format!("shop-a {id}"))));
        assert!(forgetting(&id.to_string(), doc, made).is_none(), "not yet");
    }

    #[test]
    fn a_subscription_that_cannot_be_read_is_named_with_the_tenant_it_names() {
        let read = read_subscription("sub_x", r#"{"id":"sub_x","tenant":"shop-b","url":1}"#);
        let unreadable = read.unwrap_err();
        assert_eq!(unreadable.tenant.as_deref(), Some("shop-b"));
        assert_eq!(unreadable.id, "sub_x");
        let no_tenant = read_subscription("sub_y", "[");
        assert_eq!(no_tenant.unwrap_err().tenant, None);
    }
}
