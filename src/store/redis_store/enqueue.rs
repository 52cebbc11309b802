//! Registrations in groups: concurrent `enqueue` calls are gathered per shard and stored
//! by one `enqueue.lua` call, so that a busy API costs Redis one round trip per group
//! rather than one per notification. A lone registration goes at once, as a group of one;
//! registrations that came together wait a moment for more while more keep coming
//! (`GAP`, `LINGER`), until there are `ENOUGH`, so that a group holds about what the
//! instance's producers have in flight rather than what arrived during one round trip.
//! Without it, producers spread over several instances gave each groups of only a few.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot, Mutex};

use super::acks::Acked;
use super::commit::Held;
use super::conn::Conn;
use super::reply::{earliest_at, int_at, text_at};
use super::schedules::ScheduleBook;
use super::script_error;
use crate::domain::JobId;
use crate::lifecycle::{schedule_text, transitions, JobStatus, Now};
use crate::store::keys::ShardKeys;
use crate::store::spec::{self, SharedSchedules};
use crate::store::{Enqueued, IdempotencyEntry, StoreError, StoreResult};

/// Most registrations stored by one script call.
const MAX_GROUP: usize = 256;

/// A group this large goes without waiting for more: what it saves of Redis's work per
/// registration is already small.
const ENOUGH: usize = 16;

/// How long registrations that came together wait for more at most. Their producers
/// wait for it (an answer comes once its group is stored), so it is short.
const LINGER: Duration = Duration::from_millis(3);
/// How long after the last arrival such a group waits for the next: a lull this long
/// means the producers with something to send have sent it. One tick of tokio's timer,
/// whose deadlines are rounded up to whole milliseconds.
const GAP: Duration = Duration::from_millis(1);

/// One registration, ready for the script.
pub struct Item {
    pub id: JobId,
    pub spec: String,
    /// The retry intervals in ms.
    pub schedule: Vec<u64>,
    pub delay_ms: u64,
    /// The idempotency key, named by its Redis key.
    pub idempotency: Option<IdempotencyEntry>,
    /// Its tenant as the scripts name it (`tenant_counts::counted`).
    pub tenant: String,
    /// Its ordering key's list (`ShardKeys::ordering`), if it has one.
    pub ordering: Option<String>,
    /// Its tenant's pending index (`ShardKeys::tenant_index`).
    pub pending: String,
}

struct Pending {
    item: Item,
    reply: oneshot::Sender<StoreResult<Enqueued>>,
}

/// Hands registrations to the task that stores them in groups.
pub struct Enqueuer {
    tx: mpsc::Sender<Pending>,
}

/// What the storing tasks need.
pub struct Target {
    /// For reads.
    pub conn: Conn,
    /// For `enqueue.lua`, one storing task each: registrations wait for the replicas
    /// these wait for. With several, a group is stored while others wait for theirs.
    pub writes: Vec<Acked>,
    pub script: Script,
    pub shards: Vec<ShardKeys>,
    pub wake_channel: String,
    pub schedules: Arc<ScheduleBook>,
}

impl Enqueuer {
    /// Starts the storing tasks, one per connection of `target.writes`; they end when
    /// the `Enqueuer` is dropped.
    pub fn start(target: Target) -> Self {
        let (tx, rx) = mpsc::channel(4 * MAX_GROUP);
        let rx = Arc::new(Mutex::new(rx));
        let target = Arc::new(target);
        for writes in target.writes.clone() {
            tokio::spawn(run(target.clone(), writes, rx.clone()));
        }
        Self { tx }
    }

    pub async fn enqueue(&self, item: Item) -> StoreResult<Enqueued> {
        self.send(item).await.wait().await
    }

    /// Queues a registration to be stored; its answer comes through what this returns.
    pub async fn send(&self, item: Item) -> Answer {
        let (reply, answer) = oneshot::channel();
        let queued = self.tx.send(Pending { item, reply }).await.is_ok();
        Answer(queued.then_some(answer))
    }
}

/// A queued registration's answer, to wait for.
pub struct Answer(Option<oneshot::Receiver<StoreResult<Enqueued>>>);

impl Answer {
    pub async fn wait(self) -> StoreResult<Enqueued> {
        let gone = || StoreError::Unavailable("the registration queue has stopped".into());
        match self.0 {
            Some(answer) => answer.await.map_err(|_| gone())?,
            None => Err(gone()),
        }
    }
}

/// Stores the groups it gathers with `writes`, while other storing tasks gather the
/// next ones.
async fn run(target: Arc<Target>, writes: Acked, rx: Arc<Mutex<mpsc::Receiver<Pending>>>) {
    let mut batch = Vec::with_capacity(MAX_GROUP);
    while gather(&mut *rx.lock().await, &mut batch).await {
        let mut by_shard: BTreeMap<u16, Vec<Pending>> = BTreeMap::new();
        for p in batch.drain(..) {
            by_shard.entry(p.item.id.shard()).or_default().push(p);
        }
        for (shard, group) in by_shard {
            let (items, replies): (Vec<Item>, Vec<_>) =
                group.into_iter().map(|p| (p.item, p.reply)).unzip();
            let answers = match target.shards.get(shard as usize) {
                Some(keys) => store_apart(&target, &writes, keys, &items).await,
                None => vec![Err(StoreError::Corrupt(format!("no shard {shard}"))); items.len()],
            };
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
        }
    }
}

/// One answer per item of a group. When the script fails for the group (a bug that some
/// item met), each item is stored again alone, so that the error is the answer of the
/// item that met it and of no other; an outage is every item's answer.
async fn store_apart(
    target: &Target,
    writes: &Acked,
    keys: &ShardKeys,
    items: &[Item],
) -> Vec<StoreResult<Enqueued>> {
    match store_group(target, writes, keys, items).await {
        Ok(answers) => answers,
        Err(StoreError::Script { .. }) if items.len() > 1 => {
            let mut answers = Vec::with_capacity(items.len());
            for item in items {
                let alone = store_group(target, writes, keys, std::slice::from_ref(item)).await;
                answers.push(alone.and_then(|mut a| a.pop().unwrap_or_else(|| Err(short()))));
            }
            answers
        }
        Err(e) => vec![Err(e); items.len()],
    }
}

fn short() -> StoreError {
    StoreError::Corrupt("enqueue answered fewer notifications than it was given".into())
}

/// Waits for a first registration; when others came with it, for more while they keep
/// coming (each within `GAP` of the last), for `LINGER` at most, until there are
/// `ENOUGH`. False when every `Enqueuer` is gone.
async fn gather(rx: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>) -> bool {
    if rx.recv_many(batch, MAX_GROUP).await == 0 {
        return false;
    }
    if batch.len() > 1 {
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < ENOUGH {
            let room = MAX_GROUP - batch.len();
            let until = deadline.min(tokio::time::Instant::now() + GAP);
            match tokio::time::timeout_at(until, rx.recv_many(batch, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    true
}

/// Stores `items` with one script call: its answers, one per item, or the call's error.
async fn store_group<'a>(
    target: &Target,
    writes: &Acked,
    keys: &ShardKeys,
    items: &'a [Item],
) -> StoreResult<Vec<StoreResult<Enqueued>>> {
    let mut call = target.script.key(keys.all().as_slice());
    call.key(keys.schedules());
    call.arg(&target.wake_channel);
    // A key named twice in a group gets one index, so that the script sees that the
    // second registration of a new idempotency key repeats the first.
    let mut extra_keys: HashMap<&str, usize> = HashMap::new();
    let first_extra = keys.all().len() + 2;
    let mut extra_key = |key: &'a str| {
        let next = first_extra + extra_keys.len();
        *extra_keys.entry(key).or_insert_with(|| {
            call.key(key);
            next
        })
    };
    let mut per_item = Vec::with_capacity(items.len());
    for item in items {
        let (key_index, ttl, fingerprint) = match &item.idempotency {
            Some(entry) => (
                extra_key(&entry.name),
                entry.ttl_ms,
                entry.fingerprint.as_str(),
            ),
            None => (0, 1, ""),
        };
        let list_index = item.ordering.as_deref().map_or(0, &mut extra_key);
        let pending_index = extra_key(&item.pending);
        per_item.push((key_index, ttl, fingerprint, list_index, pending_index));
    }
    for (item, (key_index, ttl, fingerprint, list_index, pending_index)) in
        items.iter().zip(per_item)
    {
        let schedule = schedule_text(&item.schedule);
        let reference = spec::schedule_reference(&schedule).unwrap_or_default();
        call.arg(item.id.to_string())
            .arg(&item.spec)
            .arg(schedule)
            .arg(reference)
            .arg(item.delay_ms)
            .arg(spec::delay_text(item.delay_ms))
            .arg(key_index)
            .arg(ttl)
            .arg(fingerprint)
            .arg(&item.tenant)
            .arg(list_index)
            .arg(pending_index);
    }
    let reply: Vec<Value> = call
        .invoke_async(&mut writes.on(keys.due()))
        .await
        .map_err(script_error("enqueue"))?;
    if reply.len() != 2 + REPLY_WIDTH * items.len() {
        return Err(short());
    }
    let earliest = earliest_at(&reply, 0)?;
    let now = Now::from_millis(int_at(&reply, 1)?);
    let read = |shared: &dyn SharedSchedules| answers(&reply[2..], items, now, earliest, shared);
    target.schedules.reading(&target.conn, keys, read).await
}

/// Values the script answers per item: id, duplicate, held state or waits, the
/// fingerprint kept with a repeated key.
const REPLY_WIDTH: usize = 4;

/// One answer per item, in order: the item's own id, or its key's first notification
/// (refused when its key was first used with another request). An answer that does not
/// read is that item's error alone.
fn answers(
    replies: &[Value],
    items: &[Item],
    now: Now,
    earliest: Option<Duration>,
    shared: &dyn SharedSchedules,
) -> StoreResult<Vec<StoreResult<Enqueued>>> {
    // What this group registered, for a later item that repeats one's idempotency key.
    let mut registered: HashMap<JobId, JobStatus> = HashMap::new();
    Ok(replies
        .chunks(REPLY_WIDTH)
        .zip(items)
        .map(|(c, item)| {
            let id: JobId = text_at(c, 0)?
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("enqueue returned a bad id: {e}")))?;
            let duplicate = int_at(c, 1)? > 0;
            let kept = text_at(c, 3)?;
            let mismatch = duplicate
                && item
                    .idempotency
                    .as_ref()
                    .is_some_and(|e| e.fingerprint.refuses((!kept.is_empty()).then_some(&kept)));
            let status = match c.get(2) {
                _ if mismatch => None,
                Some(Value::Array(_)) => {
                    Held::parse(&id.to_string(), &c[2], shared)?.map(|h| h.record.status())
                }
                _ if duplicate => registered.get(&id).cloned(),
                waits => {
                    let status = JobStatus {
                        waiting: matches!(waits, Some(Value::Int(1))),
                        ..transitions::register(item.schedule.clone(), now, item.delay_ms).status()
                    };
                    registered.insert(id, status.clone());
                    Some(status)
                }
            };
            Ok(Enqueued {
                id,
                status,
                duplicate,
                mismatch,
                earliest,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use tokio::task::JoinHandle;
    use tokio::time::{advance, Instant};

    use super::*;

    fn pending() -> Pending {
        let (reply, _) = oneshot::channel();
        let item = Item {
            id: JobId::new(0),
            spec: String::new(),
            schedule: Vec::new(),
            delay_ms: 0,
            idempotency: None,
            tenant: String::new(),
            ordering: None,
            pending: String::new(),
        };
        Pending { item, reply }
    }

    /// A gathering started with `first` registrations queued: what it took, and when.
    fn gathering(first: usize) -> (mpsc::Sender<Pending>, JoinHandle<(usize, Duration)>) {
        let (tx, mut rx) = mpsc::channel(MAX_GROUP);
        for _ in 0..first {
            tx.try_send(pending()).expect("room");
        }
        let task = tokio::spawn(async move {
            let (start, mut batch) = (Instant::now(), Vec::new());
            assert!(gather(&mut rx, &mut batch).await);
            (batch.len(), start.elapsed())
        });
        (tx, task)
    }

    /// Lets the clock move on by `d`, and the gathering see what came meanwhile.
    async fn after(d: Duration) {
        tokio::task::yield_now().await;
        advance(d).await;
        tokio::task::yield_now().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_registration_goes_at_once() {
        let (tx, task) = gathering(1);
        after(GAP / 2).await;
        let _ = tx.send(pending()).await;
        assert_eq!(task.await.unwrap(), (1, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn company_waits_while_more_keep_coming() {
        let (start, (tx, task)) = (Instant::now(), gathering(2));
        for _ in 0..3 {
            after(GAP / 5).await;
            let _ = tx.send(pending()).await;
        }
        // A lull of two GAPs, still short of LINGER since the first.
        after(2 * GAP).await;
        assert!(start.elapsed() < LINGER);
        assert!(task.is_finished(), "a lull ends the group before LINGER");
        let _ = tx.send(pending()).await;
        assert_eq!(task.await.unwrap().0, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_waits_no_longer_than_the_linger() {
        let (tx, task) = gathering(2);
        for _ in 0..3 * ENOUGH {
            after(LINGER / ENOUGH as u32 * 2).await;
            if task.is_finished() {
                break;
            }
            let _ = tx.send(pending()).await;
        }
        let (took, waited) = task.await.unwrap();
        assert!(took < ENOUGH, "{took}");
        assert!(waited >= LINGER && waited < LINGER + GAP, "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_large_enough_goes_at_once() {
        let (tx, task) = gathering(ENOUGH);
        after(GAP / 2).await;
        let _ = tx.send(pending()).await;
        assert_eq!(task.await.unwrap(), (ENOUGH, Duration::ZERO));
    }
}
