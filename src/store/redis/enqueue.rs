//! Registrations in groups: concurrent `enqueue` calls are gathered per shard and stored
//! by one `enqueue.lua` call, so that a busy API costs Redis one round trip per group
//! rather than one per notification. A lone registration goes at once, as a group of one.

use std::collections::BTreeMap;

use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};

use super::commit::Held;
use super::conn::Conn;
use super::reply::{earliest_at, int_at, text_at};
use super::store_error;
use crate::domain::JobId;
use crate::lifecycle::{schedule_text, transitions, JobStatus, Now};
use crate::store::keys::ShardKeys;
use crate::store::spec;
use crate::store::{Enqueued, StoreError, StoreResult};

/// Most registrations stored by one script call.
const MAX_GROUP: usize = 256;

/// One registration, ready for the script.
pub struct Item {
    pub id: JobId,
    pub spec: String,
    /// The retry intervals in ms.
    pub schedule: Vec<u64>,
    pub delay_ms: u64,
    /// The idempotency key's Redis key, how long it is kept (ms), and the fingerprint
    /// of the request.
    pub idempotency: Option<(String, u64, String)>,
    /// Its tenant as the scripts name it (`tenant_counts::counted`).
    pub tenant: String,
    /// Its ordering key's list (`ShardKeys::ordering`), if it has one.
    pub ordering: Option<String>,
}

struct Pending {
    item: Item,
    reply: oneshot::Sender<StoreResult<Enqueued>>,
}

/// Hands registrations to the task that stores them in groups.
pub struct Enqueuer {
    tx: mpsc::Sender<Pending>,
}

/// What the storing task needs.
pub struct Target {
    pub conn: Conn,
    pub script: Script,
    pub shards: Vec<ShardKeys>,
    pub wake_channel: String,
}

impl Enqueuer {
    /// Starts the storing task; it ends when the `Enqueuer` is dropped.
    pub fn start(target: Target) -> Self {
        let (tx, rx) = mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(run(target, rx));
        Self { tx }
    }

    pub async fn enqueue(&self, item: Item) -> StoreResult<Enqueued> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("the registration queue has stopped".into());
        self.tx
            .send(Pending { item, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

async fn run(target: Target, mut rx: mpsc::Receiver<Pending>) {
    let mut batch = Vec::with_capacity(MAX_GROUP);
    while rx.recv_many(&mut batch, MAX_GROUP).await > 0 {
        let mut by_shard: BTreeMap<u16, Vec<Pending>> = BTreeMap::new();
        for p in batch.drain(..) {
            by_shard.entry(p.item.id.shard()).or_default().push(p);
        }
        for (shard, group) in by_shard {
            let (items, replies): (Vec<Item>, Vec<_>) =
                group.into_iter().map(|p| (p.item, p.reply)).unzip();
            let answers = match target.shards.get(shard as usize) {
                Some(keys) => store_group(&target, keys, &items).await,
                None => Err(StoreError::Corrupt(format!("no shard {shard}"))),
            };
            match answers {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

async fn store_group(
    target: &Target,
    keys: &ShardKeys,
    items: &[Item],
) -> StoreResult<Vec<Enqueued>> {
    let mut call = target.script.key(keys.all().as_slice());
    call.arg(&target.wake_channel).arg(spec::VERSION);
    let mut extra_keys = 0;
    let mut extra_key = |key: &str| {
        call.key(key);
        extra_keys += 1;
        keys.all().len() + extra_keys
    };
    let mut per_item = Vec::with_capacity(items.len());
    for item in items {
        let (key_index, ttl, fingerprint) = match &item.idempotency {
            Some((key, ttl, fingerprint)) => (extra_key(key), *ttl, fingerprint.as_str()),
            None => (0, 1, ""),
        };
        let list_index = item.ordering.as_deref().map_or(0, &mut extra_key);
        per_item.push((key_index, ttl, fingerprint, list_index));
    }
    for (item, (key_index, ttl, fingerprint, list_index)) in items.iter().zip(per_item) {
        call.arg(item.id.to_string())
            .arg(&item.spec)
            .arg(schedule_text(&item.schedule))
            .arg(item.delay_ms)
            .arg(key_index)
            .arg(ttl)
            .arg(fingerprint)
            .arg(&item.tenant)
            .arg(list_index);
    }
    let reply: Vec<Value> = call
        .invoke_async(&mut target.conn.clone())
        .await
        .map_err(store_error)?;
    let earliest = earliest_at(&reply, 0)?;
    let now = Now::from_millis(int_at(&reply, 1)?);
    // One answer per item, in order: the item's own id, or its key's first notification.
    reply[2..]
        .chunks(3)
        .zip(items)
        .map(|(c, item)| {
            let id: JobId = text_at(c, 0)?
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("enqueue returned a bad id: {e}")))?;
            let seen = int_at(c, 1)?;
            let (duplicate, mismatch) = (seen > 0, seen == 2);
            // Registered now: by this item, or by an earlier one of the group with its key.
            let registered =
                |by: &Item| transitions::register(by.schedule.clone(), now, by.delay_ms).status();
            let status = match c.get(2) {
                Some(Value::Array(_)) => {
                    Held::parse(&id.to_string(), &c[2])?.map(|h| h.record.status())
                }
                Some(Value::Int(1)) if !duplicate => Some(JobStatus {
                    waiting: true,
                    ..registered(item)
                }),
                _ if !duplicate => Some(registered(item)),
                _ if mismatch => None,
                _ => items.iter().find(|first| first.id == id).map(registered),
            };
            Ok(Enqueued {
                id,
                status,
                duplicate,
                mismatch,
                earliest,
            })
        })
        .collect()
}
