//! The Redis store: notifications sharded over hash-tagged keys, every transition one Lua
//! script from `lua/` (EVALSHA with a NOSCRIPT fallback), time from Redis `TIME`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::{Script, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::keys::{wake_channel, ShardKeys};
use super::{
    Cancelled, Claim, ClaimedJob, Cursor, DeadFilter, DeadPage, Deferral, Enqueued, Idempotency,
    JobState, JobStatus, JobView, Outcomes, Settled, Settlement, StateCounts, Stats, Store,
    StoreError, StoreResult, Trimmed,
};
use crate::config::{RedisTarget, RetentionSettings, StoreSettings};
use crate::domain::{Attempt, JobId, JobSpec, Notification, Schedule};
use crate::lifecycle::{retention, schedule_text, Record};

mod conn;
mod enqueue;
mod page;
mod record;
mod reply;
mod settle;
mod shard_clock;

use conn::Conn;
use enqueue::{Enqueuer, Item};
use page::ShardPage;
use record::{decode_spec, encode_spec, fresh_record};
use reply::{int_at, text_at};
use shard_clock::ShardClock;

/// A script from `lua/`, with the shared helpers of `lua/common.lua` in front.
macro_rules! script {
    ($name:literal) => {
        Script::new(concat!(
            include_str!("../../lua/common.lua"),
            include_str!(concat!("../../lua/", $name, ".lua"))
        ))
    };
}

/// Dead letters read per round trip while filtering a page.
const SCAN_WINDOW: usize = 200;
/// Dead letters examined for one page at most; past it the page ends early with a
/// cursor, so that a filter matching nothing cannot keep Redis busy.
const MAX_SCAN: usize = 5_000;

/// One HMGET answer: a value or nothing per requested field.
type Fields = Vec<Option<String>>;

struct Scripts {
    enqueue: Script,
    claim: Script,
    settle: Script,
    release: Script,
    cancel: Script,
    replay: Script,
    discard: Script,
    trim: Script,
    defer: Script,
}

impl Scripts {
    fn load() -> Self {
        Self {
            enqueue: script!("enqueue"),
            claim: script!("claim"),
            settle: script!("settle"),
            release: script!("release"),
            cancel: script!("cancel"),
            replay: script!("replay"),
            discard: script!("discard"),
            trim: script!("trim"),
            defer: script!("defer"),
        }
    }
}

pub struct RedisStore {
    /// Where the wake-up subscription connects: the server, or each cluster seed in turn.
    pubsub: Vec<redis::Client>,
    next_pubsub: AtomicUsize,
    conn: Conn,
    shards: Vec<ShardKeys>,
    wake_channel: String,
    connect_timeout: Duration,
    /// The shard of the next registration without an idempotency key (in turn).
    next_enqueue_shard: AtomicUsize,
    /// Which shards have work, so that a claim asks only those (and one more in turn).
    clock: ShardClock,
    /// The due key of each shard, which wake-up messages name, to its index.
    due_keys: HashMap<String, usize>,
    /// Claim records of claims that failed without a reply: (shard, record key).
    unsure_claims: Mutex<Vec<(usize, String)>>,
    /// The retention policy as script arguments: dead max age ms, dead max count per
    /// shard, finished max age ms.
    retention: [u64; 3],
    scripts: Scripts,
    enqueuer: Enqueuer,
}

impl RedisStore {
    /// Connects to `target` with `shard_count` shards, retrying until
    /// `settings.connect_wait` has passed.
    pub async fn connect(
        target: &RedisTarget,
        shard_count: u16,
        settings: &StoreSettings,
        retention: &RetentionSettings,
    ) -> anyhow::Result<Self> {
        let (key, urls) = match target {
            RedisTarget::Standalone(url) => ("store.redis_url", vec![url.clone()]),
            RedisTarget::Cluster(seeds) => ("store.cluster_urls", seeds.clone()),
        };
        let pubsub = urls
            .iter()
            .map(|url| redis::Client::open(url.as_str()))
            .collect::<redis::RedisResult<_>>()?;
        let deadline = tokio::time::Instant::now() + settings.connect_wait;
        let conn = loop {
            match Conn::open(target, settings).await {
                Ok(conn) => break conn,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!(
                        "{key}: Redis at {} is unreachable after {}: {e}",
                        urls.join(", "),
                        humantime::format_duration(settings.connect_wait)
                    )
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for Redis");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        check_eviction(&mut conn.clone(), settings.allow_eviction).await?;
        let shards: Vec<ShardKeys> = (0..shard_count)
            .map(|s| ShardKeys::new(&settings.key_prefix, s))
            .collect();
        let scripts = Scripts::load();
        let enqueuer = Enqueuer::start(enqueue::Target {
            conn: conn.clone(),
            script: scripts.enqueue.clone(),
            shards: shards.clone(),
            wake_channel: wake_channel(&settings.key_prefix),
        });
        let due_keys = shards
            .iter()
            .enumerate()
            .map(|(i, keys)| (keys.due().to_string(), i))
            .collect();
        Ok(Self {
            pubsub,
            next_pubsub: AtomicUsize::new(0),
            conn,
            shards,
            wake_channel: wake_channel(&settings.key_prefix),
            connect_timeout: settings.connect_timeout,
            next_enqueue_shard: AtomicUsize::new(0),
            clock: ShardClock::new(usize::from(shard_count)),
            due_keys,
            unsure_claims: Mutex::new(Vec::new()),
            retention: [
                retention.dead_max_age.as_millis() as u64,
                retention.dead_max_count.div_ceil(u64::from(shard_count)),
                retention.finished_max_age.as_millis() as u64,
            ],
            scripts,
            enqueuer,
        })
    }

    fn keys(&self, id: &JobId) -> StoreResult<&ShardKeys> {
        self.shards.get(id.shard() as usize).ok_or_else(|| {
            StoreError::Corrupt(format!("{id} names a shard this instance does not have"))
        })
    }

    async fn claim_shard(
        &self,
        shard: usize,
        limit: usize,
        (lease, ahead): (Duration, Duration),
    ) -> StoreResult<(Vec<ClaimedJob>, Option<i64>)> {
        let keys = &self.shards[shard];
        let record = keys.claim_record(&Uuid::now_v7().simple().to_string());
        let asked = Instant::now();
        let reply: Vec<Value> = match self
            .scripts
            .claim
            .key(keys.all().as_slice())
            .key(&record)
            .arg(limit)
            .arg(lease.as_millis() as u64)
            .arg(ahead.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // The claim may have run without its reply reaching us.
                self.unsure_claims
                    .lock()
                    .expect("claim list")
                    .push((shard, record));
                return Err(store_error(e));
            }
        };
        let now_us = int_at(&reply, 0)?;
        let now = now_us / 1000;
        let wake = int_at(&reply, 1)?;
        let jobs = reply[2..]
            .chunks(3)
            .map(|c| claimed_job(c, now_us, asked))
            .collect::<StoreResult<_>>()?;
        Ok((jobs, (wake >= 0).then(|| (wake - now).max(0))))
    }

    /// Hands back what claims whose reply was lost had leased, so that it is due again
    /// at once rather than when the lease ends.
    async fn release_unsure_claims(&self) -> StoreResult<()> {
        let unsure = std::mem::take(&mut *self.unsure_claims.lock().expect("claim list"));
        for (i, (shard, record)) in unsure.iter().enumerate() {
            let result: redis::RedisResult<usize> = self
                .scripts
                .release
                .key(self.shards[*shard].all().as_slice())
                .key(record)
                .arg(&self.wake_channel)
                .invoke_async(&mut self.conn.clone())
                .await;
            match result {
                Ok(n) if n > 0 => tracing::info!(
                    released = n,
                    "released notifications of a claim whose reply was lost"
                ),
                Ok(_) => {}
                Err(e) => {
                    self.unsure_claims
                        .lock()
                        .expect("claim list")
                        .extend(unsure[i..].iter().cloned());
                    return Err(store_error(e));
                }
            }
        }
        Ok(())
    }

    async fn settle_shard(
        &self,
        keys: &ShardKeys,
        batch: &[&Settlement],
    ) -> StoreResult<settle::Outcome> {
        let target = settle::Target {
            conn: &self.conn,
            script: &self.scripts.settle,
            keys,
            wake_channel: &self.wake_channel,
            retention: self.retention,
        };
        settle::settle(&target, batch).await
    }

    /// `items` grouped by the shard of their id, leaving out shards with none.
    fn by_shard<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&T) -> &JobId,
    ) -> Vec<(&ShardKeys, Vec<&'a T>)> {
        self.shards
            .iter()
            .enumerate()
            .map(|(shard, keys)| {
                let mine = items
                    .iter()
                    .filter(|item| id(item).shard() as usize == shard)
                    .collect::<Vec<_>>();
                (keys, mine)
            })
            .filter(|(_, mine)| !mine.is_empty())
            .collect()
    }

    async fn run_replay(
        &self,
        keys: &ShardKeys,
        spec: &str,
        schedule: Option<&Schedule>,
        delay: Duration,
        ids: &[&JobId],
    ) -> StoreResult<Vec<Value>> {
        let mut call = self.scripts.replay.key(keys.all().as_slice());
        call.arg(spec)
            .arg(schedule.map_or("-".to_string(), |s| schedule_text(&s.intervals_ms())))
            .arg(delay.as_millis() as u64)
            .arg(&self.wake_channel);
        for id in ids {
            call.arg(id.to_string());
        }
        call.invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)
    }

    async fn views(&self, keys: &ShardKeys, ids: &[String]) -> StoreResult<Vec<JobView>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (specs, states, histories, leased): (Fields, Fields, Fields, Vec<Option<f64>>) =
            redis::pipe()
                .cmd("HMGET")
                .arg(keys.jobs())
                .arg(ids)
                .cmd("HMGET")
                .arg(keys.state())
                .arg(ids)
                .cmd("HMGET")
                .arg(keys.history())
                .arg(ids)
                .cmd("ZMSCORE")
                .arg(keys.inflight())
                .arg(ids)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(spec) = &specs[i] else { continue };
            let status = match &states[i] {
                Some(state) => parse_status(state)?,
                // Never attempted: the state it has from its registration.
                None => match fresh_record(spec) {
                    Some(record) => record.status(),
                    None => continue,
                },
            };
            let mut view = job_view(id, spec, status, histories[i].as_deref())?;
            // A claim does not write the record: the in-flight index says it is in flight.
            if leased[i].is_some() {
                view.status.state = JobState::InFlight;
            }
            out.push(view);
        }
        Ok(out)
    }
}

#[async_trait]
impl Store for RedisStore {
    fn shard_for(&self, idempotency_key: Option<&str>) -> u16 {
        let n = self.shards.len();
        let i = match idempotency_key {
            Some(key) => {
                let digest = Sha256::digest(key.as_bytes());
                u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) as usize % n
            }
            None => self.next_enqueue_shard.fetch_add(1, Ordering::Relaxed) % n,
        };
        i as u16
    }

    async fn enqueue(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Enqueued> {
        let keys = self.keys(&n.id)?;
        let item = Item {
            id: n.id,
            spec: encode_spec(&n.spec()),
            schedule: schedule_text(&n.schedule.intervals_ms()),
            delay_ms: n.delay.as_millis() as u64,
            idempotency: idempotency
                .map(|i| (keys.idempotency(&i.key), (i.ttl.as_millis() as u64).max(1))),
        };
        let enqueued = self.enqueuer.enqueue(item).await?;
        if enqueued.earliest {
            self.clock.wake(usize::from(n.id.shard()));
        }
        Ok(enqueued)
    }

    async fn claim(&self, limit: usize, lease: Duration, ahead: Duration) -> StoreResult<Claim> {
        self.release_unsure_claims().await?;
        let mut claim = Claim::default();
        for ask in self.clock.to_ask(ahead) {
            let remaining = limit.saturating_sub(claim.jobs.len());
            if remaining == 0 {
                break;
            }
            let (jobs, wake) = self
                .claim_shard(ask.shard, remaining, (lease, ahead))
                .await?;
            claim.jobs.extend(jobs);
            self.clock
                .claimed(ask, wake.map(|ms| Duration::from_millis(ms as u64)));
        }
        claim.next_wake = self.clock.next_wake();
        Ok(claim)
    }

    async fn settle(&self, batch: &[Settlement]) -> StoreResult<Settled> {
        let mut applied = vec![false; batch.len()];
        let mut earliest = false;
        let mut trimmed = 0;
        for (shard, keys) in self.shards.iter().enumerate() {
            let (idx, items): (Vec<usize>, Vec<&Settlement>) = batch
                .iter()
                .enumerate()
                .filter(|(_, s)| s.id.shard() as usize == shard)
                .unzip();
            if items.is_empty() {
                continue;
            }
            let settled = self.settle_shard(keys, &items).await?;
            if settled.earliest {
                self.clock.wake(shard);
            }
            earliest |= settled.earliest;
            trimmed += settled.trimmed;
            for (i, a) in idx.into_iter().zip(settled.applied) {
                applied[i] = a;
            }
        }
        Ok(Settled {
            applied,
            earliest,
            trimmed,
        })
    }

    async fn defer(&self, batch: &[Deferral]) -> StoreResult<bool> {
        let mut earliest = false;
        for (keys, mine) in self.by_shard(batch, |d| &d.id) {
            let mut call = self.scripts.defer.key(keys.all().as_slice());
            call.arg(&self.wake_channel);
            for d in &mine {
                call.arg(d.id.to_string())
                    .arg(d.lease)
                    .arg(d.delay.as_millis() as u64);
            }
            let reply: Vec<i64> = call
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            if reply.first() == Some(&1) {
                self.clock.wake(usize::from(mine[0].id.shard()));
                earliest = true;
            }
        }
        Ok(earliest)
    }

    async fn cancel(&self, id: &JobId) -> StoreResult<Cancelled> {
        let Ok(keys) = self.keys(id) else {
            return Ok(Cancelled::NotFound);
        };
        let reply: Vec<Value> = self
            .scripts
            .cancel
            .key(keys.all().as_slice())
            .arg(id.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(match text_at(&reply, 0)?.as_str() {
            "cancelled" => Cancelled::Done,
            "requested" => Cancelled::AfterAttempt,
            "finished" => Cancelled::Finished(parse_status(&text_at(&reply, 1)?)?.state),
            _ => Cancelled::NotFound,
        })
    }

    async fn replay(
        &self,
        id: &JobId,
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Option<JobStatus>> {
        let Ok(keys) = self.keys(id) else {
            return Ok(None);
        };
        let spec = spec.map(encode_spec).unwrap_or_default();
        let reply = self.run_replay(keys, &spec, schedule, delay, &[id]).await?;
        match reply.get(1) {
            Some(Value::BulkString(_)) => Ok(Some(parse_status(&text_at(&reply, 1)?)?)),
            _ => Ok(None),
        }
    }

    async fn replay_many(
        &self,
        ids: &[JobId],
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<usize> {
        let mut replayed = 0;
        for (keys, mine) in self.by_shard(ids, |id| id) {
            let reply = self.run_replay(keys, "", schedule, delay, &mine).await?;
            replayed += int_at(&reply, 0)? as usize;
        }
        Ok(replayed)
    }

    async fn discard(&self, ids: &[JobId]) -> StoreResult<usize> {
        let mut discarded = 0;
        for (keys, mine) in self.by_shard(ids, |id| id) {
            let mut call = self.scripts.discard.key(keys.all().as_slice());
            for id in mine {
                call.arg(id.to_string());
            }
            let n: usize = call
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            discarded += n;
        }
        Ok(discarded)
    }

    async fn trim(&self) -> StoreResult<usize> {
        let mut trimmed = 0;
        for keys in &self.shards {
            loop {
                let n: usize = self
                    .scripts
                    .trim
                    .key(keys.all().as_slice())
                    .arg(&self.retention[..])
                    .arg(retention::SWEEP_BUDGET)
                    .invoke_async(&mut self.conn.clone())
                    .await
                    .map_err(store_error)?;
                trimmed += n;
                if n < retention::SWEEP_BUDGET {
                    break;
                }
            }
        }
        Ok(trimmed)
    }

    async fn stats(&self) -> StoreResult<Stats> {
        let mut stats = Stats::default();
        for keys in &self.shards {
            let (scheduled, in_flight, dead, finished, counters): (
                u64,
                u64,
                u64,
                u64,
                HashMap<String, u64>,
            ) = redis::pipe()
                .zcard(keys.due())
                .zcard(keys.inflight())
                .zcard(keys.dead())
                .zcard(keys.done())
                .hgetall(keys.counters())
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            let count = |name: &str| counters.get(name).copied().unwrap_or(0);
            let shard = StateCounts {
                scheduled,
                in_flight,
                dead,
                finished,
            };
            stats.total.add(&shard);
            stats.shards.push(shard);
            stats.trimmed.add(&Trimmed {
                dead_by_age: count("dead_by_age"),
                dead_by_count: count("dead_by_count"),
                finished_by_age: count("finished_by_age"),
            });
        }
        Ok(stats)
    }

    async fn outcomes_over(
        &self,
        from_ms: i64,
        width_ms: i64,
        buckets: usize,
    ) -> StoreResult<Vec<Outcomes>> {
        let mut total = vec![Outcomes::default(); buckets];
        for keys in &self.shards {
            let mut pipe = redis::pipe();
            for b in 0..buckets as i64 {
                // The last window is open-ended: times stamped by the store can be a
                // millisecond or two ahead of the caller's clock.
                let to = if b + 1 == buckets as i64 {
                    "+inf".to_string()
                } else {
                    format!("({}", from_ms + (b + 1) * width_ms)
                };
                let from = from_ms + b * width_ms;
                pipe.zcount(keys.done(), from, &to)
                    .zcount(keys.dead(), from, &to);
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            for (bucket, pair) in total.iter_mut().zip(counts.chunks(2)) {
                bucket.finished += pair[0];
                bucket.dead += pair[1];
            }
        }
        Ok(total)
    }

    async fn release(&self, leases: &[(JobId, u64)]) -> StoreResult<usize> {
        let mut released = 0;
        for (keys, mine) in self.by_shard(leases, |(id, _)| id) {
            let mut call = self.scripts.release.key(keys.all().as_slice());
            call.arg(&self.wake_channel);
            for (id, lease) in mine {
                call.arg(id.to_string()).arg(*lease);
            }
            let n: usize = call
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            released += n;
        }
        Ok(released)
    }

    async fn get(&self, id: &JobId) -> StoreResult<Option<JobView>> {
        let Ok(keys) = self.keys(id) else {
            return Ok(None);
        };
        Ok(self.views(keys, &[id.to_string()]).await?.pop())
    }

    async fn dead_letters(
        &self,
        filter: &DeadFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<DeadPage> {
        let mut pages = Vec::with_capacity(self.shards.len());
        for keys in &self.shards {
            pages.push(self.shard_dead_letters(keys, filter, limit, after).await?);
        }
        Ok(page::merge(pages, limit))
    }

    async fn ping(&self) -> StoreResult<()> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn.clone())
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn watch_wakeups(&self, wake: Arc<Notify>, cancel: CancellationToken) {
        let mut failures = 0u32;
        while !cancel.is_cancelled() {
            match self.listen(&wake, &cancel).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!(error = %e, "wake-up subscription lost; resubscribing");
                    }
                    failures += 1;
                }
            }
            let backoff = Duration::from_millis(100 * 2u64.pow(failures.min(5)));
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }
}

impl RedisStore {
    /// Up to `limit` dead letters of one shard that match `filter`, newest first after
    /// `after`, examining at most `MAX_SCAN`.
    async fn shard_dead_letters(
        &self,
        keys: &ShardKeys,
        filter: &DeadFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<ShardPage> {
        let mut page = ShardPage::default();
        let mut position = after.cloned();
        let mut scanned = 0;
        loop {
            let (entries, more) = page::newest_first(
                &mut self.conn.clone(),
                keys.dead(),
                SCAN_WINDOW,
                position.as_ref(),
                (filter.since, filter.until),
            )
            .await
            .map_err(store_error)?;
            let ids: Vec<String> = entries.iter().map(|(id, _)| id.clone()).collect();
            let mut views: HashMap<String, JobView> = self
                .views(keys, &ids)
                .await?
                .into_iter()
                .map(|v| (v.id.to_string(), v))
                .collect();
            for (i, (id, at)) in entries.iter().enumerate() {
                position = id.parse().ok().map(|id| Cursor { at: *at, id });
                let found = views.remove(id).filter(|v| filter.matches(v));
                if let (Some(at), Some(v)) = (&position, found) {
                    page.items.push((at.clone(), v));
                }
                if page.items.len() == limit {
                    let rest = more || i + 1 < entries.len();
                    page.scanned_to = position.filter(|_| rest);
                    return Ok(page);
                }
            }
            scanned += entries.len();
            if !more || scanned >= MAX_SCAN {
                page.scanned_to = position.filter(|_| more);
                return Ok(page);
            }
        }
    }

    /// Subscribes to the wake channel and forwards messages until it drops or `cancel`.
    async fn listen(&self, wake: &Notify, cancel: &CancellationToken) -> redis::RedisResult<()> {
        let turn = self.next_pubsub.fetch_add(1, Ordering::Relaxed);
        let client = &self.pubsub[turn % self.pubsub.len()];
        let mut pubsub = tokio::time::timeout(self.connect_timeout, client.get_async_pubsub())
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting for pub/sub")
            })??;
        pubsub.subscribe(&self.wake_channel).await?;
        // Anything published while unsubscribed was missed: look at every shard once.
        self.clock.wake_all();
        wake.notify_one();
        let mut messages = pubsub.on_message();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                msg = messages.next() => match msg {
                    Some(msg) => {
                        let due_key: String = msg.get_payload().unwrap_or_default();
                        match self.due_keys.get(&due_key) {
                            Some(&shard) => self.clock.wake(shard),
                            None => self.clock.wake_all(),
                        }
                        wake.notify_one();
                    }
                    None => return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "pub/sub connection closed").into()),
                },
            }
        }
    }
}

/// Refuses a Redis whose `maxmemory-policy` may evict keys, unless allowed: an evicted key
/// is a lost notification. A Redis that hides `CONFIG` (some managed services) is
/// trusted, with a warning.
async fn check_eviction(conn: &mut Conn, allowed: bool) -> anyhow::Result<()> {
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    let policy = match reply {
        Ok(pair) => pair.get(1).cloned().unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read Redis's maxmemory-policy; make sure it is noeviction");
            return Ok(());
        }
    };
    if policy == "noeviction" || policy.is_empty() {
        return Ok(());
    }
    if allowed {
        tracing::warn!(%policy, "Redis's maxmemory-policy may evict keys, and with them notifications (store.allow_eviction is on)");
        return Ok(());
    }
    anyhow::bail!(
        "Redis's maxmemory-policy is {policy}, which may evict keys and so lose notifications; \
         set it to noeviction, or set store.allow_eviction (POSTBACK_STORE_ALLOW_EVICTION=true) to start anyway"
    )
}

fn claimed_job(c: &[Value], claimed_at_us: i64, asked: Instant) -> StoreResult<ClaimedJob> {
    let id = text_at(c, 0)?;
    let corrupt =
        |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("{what} of {id}: {e}"));
    let spec = text_at(c, 2)?;
    let (held, text) = match c.get(1) {
        Some(Value::Nil) => {
            let fresh = fresh_record(&spec)
                .ok_or_else(|| StoreError::Corrupt(format!("spec of {id} has no first line")))?;
            let text = fresh.encode();
            (fresh, text)
        }
        _ => {
            let text = text_at(c, 1)?;
            (
                Record::decode(&text).map_err(|e| corrupt("state", e))?,
                text,
            )
        }
    };
    Ok(ClaimedJob {
        id: id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("bad id `{id}` in due set")))?,
        lease: held.lease,
        attempt: held.attempts + 1,
        // A scheduled notification's `next_at` is its score in the due set.
        due_at: held.next_at.unwrap_or(claimed_at_us / 1000),
        claimed_at_us,
        claim_asked: asked,
        spec: decode_spec(&spec).map_err(|e| corrupt("spec", e))?,
        claimed_record: Some(text),
    })
}

fn job_view(
    id: &str,
    spec: &str,
    status: JobStatus,
    history: Option<&str>,
) -> StoreResult<JobView> {
    let corrupt =
        |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("{what} of {id}: {e}"));
    Ok(JobView {
        id: id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("bad id `{id}`")))?,
        spec: decode_spec(spec).map_err(|e| corrupt("spec", e))?,
        status,
        history: match history {
            Some(h) => {
                serde_json::from_str::<Vec<Attempt>>(h).map_err(|e| corrupt("history", e))?
            }
            None => Vec::new(),
        },
    })
}

fn parse_status(state: &str) -> StoreResult<JobStatus> {
    serde_json::from_str(state).map_err(|e| StoreError::Corrupt(format!("state record: {e}")))
}

fn store_error(e: redis::RedisError) -> StoreError {
    use redis::ErrorKind;
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Unavailable(e.to_string()),
    }
}
