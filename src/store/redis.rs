//! The Redis store: notifications sharded over hash-tagged keys, time from Redis `TIME`.
//! Registration (`enqueue.lua`), claims (`claim.lua`) and retention (`trim.lua`) choose
//! by score inside Redis; every other change is worked out in Rust by `lifecycle` and
//! written by `commit.lua` where the notification is still as it was (`commit`). Scripts
//! are run with EVALSHA and a NOSCRIPT fallback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::{Script, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::keys::{wake_channel, ShardKeys};
use super::tenant_counts::{counted, TenantCounts, OUTCOME_WINDOW_MS};
use super::{
    AuditEntry, AuditFilter, AuditPosition, AuditRecord, Cancelled, Claim, ClaimedJob, Cursor,
    DeadPage, Deferral, Enqueued, HealthListener, Idempotency, JobState, JobStatus, JobView,
    ListFilter, ListPage, Listed, Outcomes, Settled, Settlement, StateCounts, Stats, Store,
    StoreError, StoreResult, Trimmed, WalkCursor,
};
use crate::backoff::backoff;
use crate::config::{RedisTarget, RetentionSettings, StoreSettings};
use crate::domain::{Attempt, JobId, JobSpec, Notification, Schedule, Tenant};
use crate::lifecycle::{retention, Record};
use crate::lifecycle::{transitions, Index, Now, WAITING_OFFSET_MS};
use crate::policy::{RateAsk, Slots};

mod audit;
mod commit;
mod conn;
mod enqueue;
mod fleet;
mod health;
mod leases;
mod page;
mod reply;
mod schedules;
mod shard_clock;

use super::spec;
use audit::AuditLog;
use commit::{commit, Change, Committed, Decision, Held, Shard};
use conn::Conn;
use enqueue::{Enqueuer, Item};
use fleet::Fleet;
use health::HealthChannel;
use leases::Leases;
use page::{Order, ShardPage};
use reply::{int_at, text_at};
use schedules::ScheduleBook;
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
    commit: Script,
    discard: Script,
    trim: Script,
    reserve: Script,
}

impl Scripts {
    fn load() -> Self {
        Self {
            enqueue: script!("enqueue"),
            claim: script!("claim"),
            commit: script!("commit"),
            discard: script!("discard"),
            trim: script!("trim"),
            reserve: Script::new(include_str!("../../lua/reserve.lua")),
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
    health: HealthChannel,
    /// Keys of rate keys' quota states start with this (`<prefix>:rate:`), within a
    /// hash tag of their own, so that each lives on its own slot of a cluster.
    rate_prefix: String,
    connect_timeout: Duration,
    /// Which shards have work, so that a claim asks only those (and one more in turn).
    clock: ShardClock,
    /// The instances sharing this Redis, and which shards this one owns.
    fleet: Fleet,
    /// Told when another instance announced a change of the fleet: renew now.
    fleet_changed: Notify,
    /// The due key of each shard, which wake-up messages name, to its index.
    due_keys: HashMap<String, usize>,
    /// Claim records of claims that failed without a reply: (shard, record key).
    unsure_claims: Mutex<Vec<(usize, String)>>,
    /// The notifications this instance holds leases on, as claimed.
    leases: Leases,
    /// The schedules shards keep once, as this instance has read them.
    schedules: Arc<ScheduleBook>,
    /// The retention policy as script arguments: dead max age ms, dead max count per
    /// shard, finished max age ms.
    retention: [u64; 3],
    scripts: Scripts,
    enqueuer: Enqueuer,
    audit: AuditLog,
}

impl RedisStore {
    /// A registration as the enqueue script takes it.
    fn item(&self, n: &Notification, idempotency: Option<&Idempotency>) -> StoreResult<Item> {
        let keys = self.keys(&n.id)?;
        Ok(Item {
            id: n.id,
            spec: spec::encode(&n.spec()),
            schedule: n.schedule.intervals_ms(),
            delay_ms: n.delay.as_millis() as u64,
            idempotency: idempotency.map(|i| {
                (
                    keys.idempotency(&i.scoped()),
                    i.ttl_ms(),
                    i.fingerprint.clone(),
                )
            }),
            tenant: counted(&n.tenant).to_string(),
            ordering: n
                .ordering_key
                .as_ref()
                .map(|k| keys.ordering(&k.scoped(&n.tenant))),
        })
    }

    /// A registration's answer; the shard's clock learns when its earliest is due.
    fn enqueued(&self, n: &Notification, enqueued: StoreResult<Enqueued>) -> StoreResult<Enqueued> {
        let enqueued = enqueued?;
        if let Some(due_in) = enqueued.earliest {
            self.clock.wake_in(usize::from(n.id.shard()), due_in);
        }
        Ok(enqueued)
    }

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
        let instance = format!("{:016x}", fastrand::u64(..));
        let shards: Vec<ShardKeys> = (0..shard_count)
            .map(|s| ShardKeys::new(&settings.key_prefix, s))
            .collect();
        let scripts = Scripts::load();
        let schedules = Arc::new(ScheduleBook::default());
        let enqueuer = Enqueuer::start(enqueue::Target {
            conn: conn.clone(),
            script: scripts.enqueue.clone(),
            shards: shards.clone(),
            wake_channel: wake_channel(&settings.key_prefix),
            schedules: schedules.clone(),
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
            health: HealthChannel::new(&settings.key_prefix, &instance),
            rate_prefix: format!("{}:rate:", settings.key_prefix),
            connect_timeout: settings.connect_timeout,
            clock: ShardClock::new(usize::from(shard_count)),
            fleet: Fleet::new(
                &settings.key_prefix,
                &instance,
                settings.shard_lease,
                usize::from(shard_count),
            ),
            fleet_changed: Notify::new(),
            due_keys,
            unsure_claims: Mutex::new(Vec::new()),
            leases: Leases::default(),
            schedules,
            retention: [
                retention.dead_max_age.as_millis() as u64,
                retention.dead_max_count.div_ceil(u64::from(shard_count)),
                retention.finished_max_age.as_millis() as u64,
            ],
            scripts,
            enqueuer,
            audit: AuditLog::new(&settings.key_prefix, retention.audit_max_age),
        })
    }

    /// This instance's id among those sharing the Redis (`fleet.rs`).
    pub fn instance(&self) -> &str {
        &self.fleet.instance
    }

    /// The counts per tenant of one shard (`store::tenant_counts`).
    async fn tenant_counts(&self, keys: &ShardKeys) -> StoreResult<TenantCounts> {
        let fields: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(keys.tenants())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(fields.into_iter().collect())
    }

    fn keys(&self, id: &JobId) -> StoreResult<&ShardKeys> {
        self.shards.get(id.shard() as usize).ok_or_else(|| {
            StoreError::Corrupt(format!("{id} names a shard this instance does not have"))
        })
    }

    /// What `commit` needs of shard `shard`.
    fn shard(&self, shard: usize) -> Shard<'_> {
        Shard {
            conn: &self.conn,
            script: &self.scripts.commit,
            keys: &self.shards[shard],
            schedules: &self.schedules,
            wake_channel: &self.wake_channel,
            retention: self.retention,
        }
    }

    /// Commits `requests`, grouped by the shard of their id (`id`), and gathers the
    /// answers in their order; wakes this instance's scheduler for a shard with a new
    /// earliest due notification.
    async fn commit_by_shard<T, A>(
        &self,
        requests: &[T],
        id: impl Fn(&T) -> &JobId,
        budget: impl Fn(usize) -> usize + Copy,
        first: impl Fn(&T) -> StoreResult<Decision<A>>,
        again: impl Fn(&T, Option<Held>, Now) -> StoreResult<Decision<A>>,
    ) -> StoreResult<Committed<A>> {
        let mut answers: Vec<Option<A>> = requests.iter().map(|_| None).collect();
        let (mut earliest, mut trimmed) = (None, 0);
        for (shard, mine) in self.by_shard(requests, id) {
            let (at, mine): (Vec<usize>, Vec<&T>) = mine.into_iter().unzip();
            let done = commit(
                &self.shard(shard),
                &mine,
                budget,
                |r| first(r),
                |r, held, now| again(r, held, now),
            )
            .await?;
            if let Some(due_in) = done.earliest {
                self.clock.wake_in(shard, due_in);
            }
            earliest = earliest.into_iter().chain(done.earliest).min();
            trimmed += done.trimmed;
            for (k, answer) in at.into_iter().zip(done.answers) {
                answers[k] = Some(answer);
            }
        }
        Ok(Committed {
            answers: answers
                .into_iter()
                .map(|a| {
                    a.ok_or_else(|| {
                        StoreError::Corrupt("an id names no shard of this instance".into())
                    })
                })
                .collect::<StoreResult<_>>()?,
            earliest,
            trimmed,
        })
    }

    /// Claims up to `limit` notifications of shard `shard`, and hands back those whose
    /// lease expired: what it claimed, how long until the shard's next due time or lease
    /// end, and whether it handed any back.
    async fn claim_shard(
        &self,
        shard: usize,
        limit: usize,
        (lease, ahead): (Duration, Duration),
    ) -> StoreResult<(Vec<ClaimedJob>, Option<i64>, bool)> {
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
                return Err(script_error("claim")(e));
            }
        };
        let now_us = int_at(&reply, 0)?;
        let now = now_us / 1000;
        let wake = int_at(&reply, 1)?;
        let expired = int_at(&reply, 2)? as usize;
        let (ended, claimed) = reply[3..].split_at((2 * expired).min(reply.len() - 3));
        self.hand_back_expired(shard, ended, Now::from_micros(now_us))
            .await?;
        let read = |shared: &dyn spec::SharedSchedules| {
            claimed
                .chunks(3)
                .map(|c| claimed_job(c, now_us, asked, shared))
                .collect::<StoreResult<Vec<_>>>()
        };
        let claimed = self.schedules.reading(&self.conn, keys, read).await?;
        let mut jobs = Vec::with_capacity(claimed.len());
        for (job, held) in claimed {
            self.leases.remember(job.id, job.lease, held, now_us, asked);
            jobs.push(job);
        }
        let wake = (wake >= 0).then(|| (wake - now).max(0));
        Ok((jobs, wake, expired > 0))
    }

    /// Hands back notifications whose lease expired (`ended`: id and state pairs from a
    /// claim's reply), due again at once (or at their due time), or cancelled when a
    /// cancel was asked for.
    async fn hand_back_expired(&self, shard: usize, ended: &[Value], now: Now) -> StoreResult<()> {
        if ended.is_empty() {
            return Ok(());
        }
        let read = |shared: &dyn spec::SharedSchedules| {
            ended
                .chunks(2)
                .map(|pair| {
                    let id = text_at(pair, 0)?;
                    Ok((id.clone(), Held::parse(&id, &pair[1], shared)?))
                })
                .collect::<StoreResult<Vec<_>>>()
        };
        let held = self
            .schedules
            .reading(&self.conn, &self.shards[shard], read)
            .await?;
        let expire = |id: &str, held: Option<Held>, now: Now| {
            let change = held.filter(|h| h.index == Index::InFlight).and_then(|h| {
                transitions::expire(&h.record, now).map(|new| Change::new(id, &h, &new))
            });
            Ok(change.map_or(Decision::Done(()), |c| Decision::Write(c, ())))
        };
        commit(
            &self.shard(shard),
            &held,
            |_| 0,
            |(id, h)| expire(id, h.clone(), now),
            |(id, _), h, now| expire(id, h, now),
        )
        .await?;
        Ok(())
    }

    /// Hands back what claims whose reply was lost had leased (their claim record names
    /// the lease deadline and the ids), so that it is due again at once rather than when
    /// the lease ends.
    async fn release_unsure_claims(&self) -> StoreResult<()> {
        let unsure = std::mem::take(&mut *self.unsure_claims.lock().expect("claim list"));
        for (i, (shard, record)) in unsure.iter().enumerate() {
            if let Err(e) = self.release_claim(*shard, record).await {
                self.unsure_claims
                    .lock()
                    .expect("claim list")
                    .extend(unsure[i..].iter().cloned());
                return Err(e);
            }
        }
        Ok(())
    }

    async fn release_claim(&self, shard: usize, record: &str) -> StoreResult<()> {
        let saved: Option<String> = redis::cmd("GET")
            .arg(record)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        let Some(saved) = saved else { return Ok(()) };
        let mut words = saved.split(' ');
        let deadline: i64 = words.next().and_then(|d| d.parse().ok()).unwrap_or(-1);
        let ids: Vec<String> = words.map(str::to_string).collect();
        // Still leased by that claim: in flight with its deadline.
        let release = |id: &String, held: Option<Held>, now: Now| {
            let change = held
                .filter(|h| h.index == Index::InFlight && h.score == deadline)
                .and_then(|h| {
                    transitions::release(&h.record, h.record.lease, now)
                        .map(|new| Change::new(id, &h, &new))
                });
            Ok(change.map_or(Decision::Done(false), |c| Decision::Write(c, true)))
        };
        let done = commit(
            &self.shard(shard),
            &ids,
            |_| 0,
            |id| Ok(Decision::Ask(id.clone())),
            release,
        )
        .await?;
        let released = done.answers.iter().filter(|&&r| r).count();
        if released > 0 {
            tracing::info!(
                released,
                "released notifications of a claim whose reply was lost"
            );
            self.clock.wake(shard);
        }
        redis::cmd("DEL")
            .arg(record)
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(store_error)
    }

    /// `items` grouped by the shard of their id, each with its position in `items`,
    /// leaving out shards with none.
    fn by_shard<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&T) -> &JobId,
    ) -> Vec<(usize, Vec<(usize, &'a T)>)> {
        (0..self.shards.len())
            .map(|shard| {
                let mine = items
                    .iter()
                    .enumerate()
                    .filter(|(_, item)| id(item).shard() as usize == shard)
                    .collect::<Vec<_>>();
                (shard, mine)
            })
            .filter(|(_, mine)| !mine.is_empty())
            .collect()
    }

    async fn views(&self, keys: &ShardKeys, ids: &[String]) -> StoreResult<Vec<JobView>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        type Scores = Vec<Option<f64>>;
        let (specs, states, histories, leased, due): (Fields, Fields, Fields, Scores, Scores) =
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
                .cmd("ZMSCORE")
                .arg(keys.due())
                .arg(ids)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
        let read = |shared: &dyn spec::SharedSchedules| {
            let mut out = Vec::with_capacity(ids.len());
            for (i, id) in ids.iter().enumerate() {
                let Some(spec) = &specs[i] else { continue };
                let record = match &states[i] {
                    Some(state) => parse_record(state)?,
                    // Never attempted: the state it has from its registration.
                    None => match spec::registration(spec, shared) {
                        Some(record) => record,
                        None => continue,
                    },
                };
                // A claim does not write the record: the in-flight index says it is in
                // flight; and the due index's score whether it waits behind its ordering
                // key.
                let record = match (leased[i], due[i]) {
                    (Some(_), _) => record.placed(Index::InFlight, 0),
                    (None, Some(score)) => record.placed(Index::Due, score as i64),
                    (None, None) => record,
                };
                out.push(job_view(
                    id,
                    spec,
                    record.status(),
                    histories[i].as_deref(),
                )?);
            }
            Ok(out)
        };
        self.schedules.reading(&self.conn, keys, read).await
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn enqueue(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Enqueued> {
        let enqueued = self.enqueuer.enqueue(self.item(n, idempotency)?).await;
        self.enqueued(n, enqueued)
    }

    /// Hands every registration to the group-storing task at once and then waits for
    /// their answers, rather than with one future each.
    async fn enqueue_many(
        &self,
        registrations: &[(&Notification, Option<&Idempotency>)],
    ) -> Vec<StoreResult<Enqueued>> {
        let mut answers = Vec::with_capacity(registrations.len());
        for (n, idempotency) in registrations {
            answers.push(match self.item(n, *idempotency) {
                Ok(item) => Ok(self.enqueuer.send(item).await),
                Err(e) => Err(e),
            });
        }
        let mut results = Vec::with_capacity(registrations.len());
        for ((n, _), answer) in registrations.iter().zip(answers) {
            let enqueued = match answer {
                Ok(answer) => answer.wait().await,
                Err(e) => Err(e),
            };
            results.push(self.enqueued(n, enqueued));
        }
        results
    }

    async fn claim(&self, limit: usize, lease: Duration, ahead: Duration) -> StoreResult<Claim> {
        self.leases.forget_older_than(lease);
        self.release_unsure_claims().await?;
        let mut claim = Claim::default();
        for ask in self.clock.to_ask(ahead) {
            let remaining = limit.saturating_sub(claim.jobs.len());
            if remaining == 0 {
                break;
            }
            let (mut jobs, mut wake, expired) = self
                .claim_shard(ask.shard, remaining, (lease, ask.ahead))
                .await?;
            // What was handed back may be due now: claim once more rather than wait for
            // the next wake-up.
            if expired && jobs.len() < remaining {
                let more = remaining - jobs.len();
                let (again, next, _) = self
                    .claim_shard(ask.shard, more, (lease, ask.ahead))
                    .await?;
                jobs.extend(again);
                wake = next;
            }
            let (took, limited) = (jobs.len(), jobs.len() == remaining);
            claim.jobs.extend(jobs);
            let next = wake.map(|ms| Duration::from_millis(ms as u64));
            self.clock.claimed(ask, took, limited, next);
        }
        claim.next_wake = self.clock.next_wake();
        Ok(claim)
    }

    async fn settle(&self, batch: &[Settlement]) -> StoreResult<Settled> {
        let first = |s: &Settlement| {
            Ok(match self.leases.take(&s.id, s.lease) {
                Some((held, _)) => settled(s, &held, Now::from_millis(s.ended_at)),
                None => Decision::Ask(s.id.to_string()),
            })
        };
        let again = |s: &Settlement, held: Option<Held>, now: Now| {
            Ok(held.map_or(Decision::Done(None), |h| settled(s, &h, now)))
        };
        let done = self
            .commit_by_shard(batch, |s| &s.id, retention::settle_budget, first, again)
            .await?;
        let dead = |state: &&Option<JobState>| **state == Some(JobState::Dead);
        Ok(Settled {
            dead_lettered: done.answers.iter().filter(dead).count(),
            applied: done.answers.iter().map(Option::is_some).collect(),
            earliest: done.earliest.is_some(),
            trimmed: done.trimmed,
        })
    }

    async fn defer(&self, batch: &[Deferral]) -> StoreResult<bool> {
        let defer = |d: &Deferral, held: Option<Held>, now: Now| {
            let id = d.id.to_string();
            let change = held.and_then(|h| {
                let delay_ms = d.delay.as_millis() as u64;
                transitions::defer(&h.record, d.lease, now, delay_ms, d.reserved)
                    .map(|new| Change::new(&id, &h, &new))
            });
            Ok(change.map_or(Decision::Done(()), |c| Decision::Write(c, ())))
        };
        let first = |d: &Deferral| match self.leases.take(&d.id, d.lease) {
            Some((held, now)) => defer(d, Some(held), now),
            None => Ok(Decision::Ask(d.id.to_string())),
        };
        let done = self
            .commit_by_shard(batch, |d| &d.id, |_| 0, first, defer)
            .await?;
        Ok(done.earliest.is_some())
    }

    async fn reserve(&self, asks: &[RateAsk]) -> StoreResult<Vec<Slots>> {
        if !matches!(self.conn, Conn::Cluster(_)) {
            return self.reserve_in_one_call(asks).await;
        }
        let calls = asks.chunks(1).map(|ask| self.reserve_in_one_call(ask));
        let answers = futures_util::future::try_join_all(calls).await?;
        Ok(answers.into_iter().flatten().collect())
    }

    async fn publish_health(&self, endpoint: &str, healthy: bool) -> StoreResult<()> {
        redis::cmd("PUBLISH")
            .arg(&self.health.channel)
            .arg(self.health.message(endpoint, healthy))
            .query_async::<i64>(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn cancel(&self, id: &JobId) -> StoreResult<Cancelled> {
        if self.keys(id).is_err() {
            return Ok(Cancelled::NotFound);
        }
        let cancel = |id: &JobId, held: Option<Held>, now: Now| {
            let Some(h) = held else {
                return Ok(Decision::Done(Cancelled::NotFound));
            };
            Ok(match transitions::cancel(&h.record, now) {
                (answer, Some(new)) => {
                    Decision::Write(Change::new(&id.to_string(), &h, &new), answer)
                }
                (answer, None) => Decision::Done(answer),
            })
        };
        let done = self
            .commit_by_shard(
                &[*id],
                |id| id,
                |_| 0,
                |id| Ok(Decision::Ask(id.to_string())),
                cancel,
            )
            .await?;
        Ok(done
            .answers
            .into_iter()
            .next()
            .unwrap_or(Cancelled::NotFound))
    }

    async fn replay(
        &self,
        id: &JobId,
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Option<JobStatus>> {
        if self.keys(id).is_err() {
            return Ok(None);
        }
        let spec = spec.map(spec::encode);
        let done = self
            .replay_ids(&[*id], spec.as_deref(), schedule, delay)
            .await?;
        let Some(mut status) = done.into_iter().next().flatten() else {
            return Ok(None);
        };
        // Whether it waits behind others of its ordering key, `commit.lua` decided: its
        // score in the due index says (none if it was claimed meanwhile: not waiting).
        let keys = self.keys(id)?;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.due())
            .arg(id.to_string())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        status.waiting = score.is_some_and(|s| s as i64 >= WAITING_OFFSET_MS);
        Ok(Some(status))
    }

    async fn replay_many(
        &self,
        ids: &[JobId],
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<usize> {
        let done = self.replay_ids(ids, None, schedule, delay).await?;
        Ok(done.iter().filter(|status| status.is_some()).count())
    }

    async fn discard(&self, ids: &[JobId]) -> StoreResult<usize> {
        let mut discarded = 0;
        for (shard, mine) in self.by_shard(ids, |id| id) {
            let mut call = self
                .scripts
                .discard
                .key(self.shards[shard].all().as_slice());
            for (_, id) in mine {
                call.arg(id.to_string());
            }
            let n: usize = call
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(script_error("discard"))?;
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
                    .map_err(script_error("trim"))?;
                trimmed += n;
                if n < retention::SWEEP_BUDGET {
                    break;
                }
            }
        }
        Ok(trimmed)
    }

    async fn stats(&self, tenant: Option<&Tenant>) -> StoreResult<Stats> {
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
            let mut shard = StateCounts {
                scheduled,
                in_flight,
                dead,
                finished,
            };
            let mut trimmed = Trimmed {
                dead_by_age: count("dead_by_age"),
                dead_by_count: count("dead_by_count"),
                finished_by_age: count("finished_by_age"),
            };
            if let Some(tenant) = tenant {
                let tenants = self.tenant_counts(keys).await?;
                shard = tenants.counts(tenant, &shard);
                trimmed = tenants.trimmed(tenant, &trimmed);
            }
            stats.total.add(&shard);
            stats.shards.push(shard);
            stats.trimmed.add(&trimmed);
        }
        Ok(stats)
    }

    async fn outcomes(
        &self,
        tenant: Option<&Tenant>,
        first_window: i64,
        windows: usize,
    ) -> StoreResult<Vec<Outcomes>> {
        let mut total = vec![Outcomes::default(); windows];
        for keys in &self.shards {
            let mut pipe = redis::pipe();
            for w in first_window..first_window + windows as i64 {
                // The last window is open-ended: times stamped by the store can be a
                // millisecond or two ahead of the caller's clock.
                let to = if w + 1 == first_window + windows as i64 {
                    "+inf".to_string()
                } else {
                    format!("({}", (w + 1) * OUTCOME_WINDOW_MS)
                };
                let from = w * OUTCOME_WINDOW_MS;
                pipe.zcount(keys.done(), from, &to)
                    .zcount(keys.dead(), from, &to);
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            let tenants = match tenant {
                Some(_) => self.tenant_counts(keys).await?,
                None => TenantCounts::default(),
            };
            let windows = (first_window..).zip(counts.chunks(2));
            for (sum, (w, pair)) in total.iter_mut().zip(windows) {
                let mut shard = Outcomes {
                    finished: pair[0],
                    dead: pair[1],
                };
                if let Some(tenant) = tenant {
                    shard = tenants.outcomes(tenant, w, shard);
                }
                sum.finished += shard.finished;
                sum.dead += shard.dead;
            }
        }
        Ok(total)
    }

    async fn release(&self, leases: &[(JobId, u64)]) -> StoreResult<usize> {
        let release = |(id, lease): &(JobId, u64), held: Option<Held>, now: Now| {
            let change = held.and_then(|h| {
                transitions::release(&h.record, *lease, now).map(|new| {
                    (
                        new.state == JobState::Scheduled,
                        Change::new(&id.to_string(), &h, &new),
                    )
                })
            });
            Ok(change.map_or(Decision::Done(false), |(due, c)| Decision::Write(c, due)))
        };
        let first = |l: &(JobId, u64)| match self.leases.take(&l.0, l.1) {
            Some((held, now)) => release(l, Some(held), now),
            None => Ok(Decision::Ask(l.0.to_string())),
        };
        let done = self
            .commit_by_shard(leases, |(id, _)| id, |_| 0, first, release)
            .await?;
        Ok(done.answers.iter().filter(|&&due| due).count())
    }

    async fn get(&self, id: &JobId) -> StoreResult<Option<JobView>> {
        let Ok(keys) = self.keys(id) else {
            return Ok(None);
        };
        Ok(self.views(keys, &[id.to_string()]).await?.pop())
    }

    async fn dead_letters(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<DeadPage> {
        let mut pages = Vec::with_capacity(self.shards.len());
        let range = (filter.since, filter.until);
        for keys in &self.shards {
            let index = (keys.dead(), Order::NewestFirst);
            let keep = |v: &JobView| filter.matches(v);
            pages.push(
                self.shard_page(keys, index, range, limit, after, &keep)
                    .await?,
            );
        }
        let (items, next_cursor) = page::merge(pages, limit, Order::NewestFirst);
        Ok(DeadPage { items, next_cursor })
    }

    async fn list(
        &self,
        listed: Listed,
        filter: &ListFilter,
        limit: usize,
        after: Option<&WalkCursor>,
    ) -> StoreResult<ListPage> {
        let walk_from = match after {
            Some(c) => c.walk_from,
            None => self.time_ms().await?,
        };
        let order = match listed.soonest_first() {
            true => Order::SoonestFirst,
            false => Order::NewestFirst,
        };
        let keep = |v: &JobView| listed.keeps(v, filter, walk_from);
        let range = (filter.since, filter.until);
        let position = after.map(|c| &c.position);
        let mut pages = Vec::with_capacity(self.shards.len());
        for keys in &self.shards {
            let index = (keys.index(listed.index()), order);
            pages.push(
                self.shard_page(keys, index, range, limit, position, &keep)
                    .await?,
            );
        }
        let (items, next) = page::merge(pages, limit, order);
        Ok(ListPage {
            items,
            next_cursor: next.map(|position| WalkCursor {
                position,
                walk_from,
            }),
        })
    }

    async fn find_by_key(&self, scoped_key: &str) -> StoreResult<Option<JobView>> {
        for keys in &self.shards {
            let kept: Option<String> = redis::cmd("GET")
                .arg(keys.idempotency(scoped_key))
                .query_async(&mut self.conn.clone())
                .await
                .map_err(store_error)?;
            let Some(kept) = kept else { continue };
            let (id, _) = super::idempotency_value(&kept);
            let id: JobId = id
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("idempotency key names `{id}`")))?;
            return self.get(&id).await;
        }
        Ok(None)
    }

    async fn record_audit(&self, record: &AuditRecord) -> StoreResult<()> {
        self.audit.record(&self.conn, record).await
    }

    async fn audit_entries(
        &self,
        filter: &AuditFilter,
        before: Option<AuditPosition>,
        n: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        self.audit.read(&self.conn, filter, before, n).await
    }

    async fn ping(&self) -> StoreResult<()> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn.clone())
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn watch(&self, wake: Arc<Notify>, health: HealthListener, cancel: CancellationToken) {
        tokio::join!(
            self.subscribe(&wake, &health, &cancel),
            self.keep_membership(&wake, &cancel)
        );
    }
}

impl RedisStore {
    /// Keeps the wake-up, health and fleet subscription, resubscribing with backoff.
    async fn subscribe(&self, wake: &Notify, health: &HealthListener, cancel: &CancellationToken) {
        let mut failures = 0u32;
        while !cancel.is_cancelled() {
            match self.listen(wake, health, cancel).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!(error = %e, "wake-up and health subscription lost; resubscribing");
                    }
                    failures += 1;
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff(failures)) => {}
            }
        }
    }

    /// Renews this instance's place in the fleet until `cancel`, then leaves it so that
    /// the others take its shards at once. Wakes the scheduler when it gains shards.
    async fn keep_membership(&self, wake: &Notify, cancel: &CancellationToken) {
        let mut failures = 0u32;
        while !cancel.is_cancelled() {
            let next = match self.fleet.renew(&self.conn).await {
                Ok(m) => {
                    if failures > 0 {
                        tracing::info!(failures, "fleet membership renewed again");
                        failures = 0;
                    }
                    crate::metrics::fleet(m.instances, m.shards.len());
                    if self.clock.own(&m.shards, m.until) {
                        wake.notify_one();
                    }
                    m.renew_in
                }
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!(error = %e, "cannot renew fleet membership; retrying");
                    }
                    crate::metrics::store_error("fleet");
                    failures += 1;
                    backoff(failures).min(self.fleet.every())
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(next) => {}
                _ = self.fleet_changed.notified() => {}
            }
        }
        match self.fleet.leave(&self.conn).await {
            Ok(()) => {
                tracing::info!(instance = %self.fleet.instance, "left the fleet: its shards are handed over")
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot leave the fleet; its shards are taken over when its lease ends")
            }
        }
    }
}

impl RedisStore {
    /// Replays each of `ids` that is dead, with a new spec (meta line and body) or
    /// schedule when given: its new status, or `None` when it is not dead.
    async fn replay_ids(
        &self,
        ids: &[JobId],
        spec: Option<&str>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Vec<Option<JobStatus>>> {
        let schedule = schedule.map(Schedule::intervals_ms);
        let delay_ms = delay.as_millis() as u64;
        let replay = |id: &JobId, held: Option<Held>, now: Now| {
            let replayed = held.and_then(|h| {
                let new = transitions::replay(&h.record, now, delay_ms, schedule.as_deref())?;
                let mut change = Change::new(&id.to_string(), &h, &new);
                if let Some(encoded) = spec {
                    let value = spec::stored(new.created_at, 0, &new.schedule, encoded);
                    change = change.with_spec(value);
                }
                Some((change, new.status()))
            });
            Ok(match replayed {
                Some((change, status)) => Decision::Write(change, Some(status)),
                None => Decision::Done(None),
            })
        };
        let done = self
            .commit_by_shard(
                ids,
                |id| id,
                |_| 0,
                |id| Ok(Decision::Ask(id.to_string())),
                replay,
            )
            .await?;
        Ok(done.answers)
    }

    /// Up to `limit` notifications of the index `key` of one shard that `keep`, in
    /// `order` after `after`, with scores in `range`, examining at most `MAX_SCAN`.
    async fn shard_page(
        &self,
        keys: &ShardKeys,
        (key, order): (&str, Order),
        range: (Option<i64>, Option<i64>),
        limit: usize,
        after: Option<&Cursor>,
        keep: &(dyn Fn(&JobView) -> bool + Sync),
    ) -> StoreResult<ShardPage> {
        let mut page = ShardPage::default();
        let mut position = after.cloned();
        let mut scanned = 0;
        loop {
            let (entries, more) = page::scan(
                &mut self.conn.clone(),
                key,
                order,
                SCAN_WINDOW,
                position.as_ref(),
                range,
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
                let found = views.remove(id).filter(|v| keep(v));
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

    /// Redis's clock, in ms.
    async fn time_ms(&self) -> StoreResult<i64> {
        let (s, us): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(s * 1000 + us / 1000)
    }

    /// Subscribes to the wake channel and forwards messages until it drops or `cancel`.
    async fn listen(
        &self,
        wake: &Notify,
        health: &HealthListener,
        cancel: &CancellationToken,
    ) -> redis::RedisResult<()> {
        let turn = self.next_pubsub.fetch_add(1, Ordering::Relaxed);
        let client = &self.pubsub[turn % self.pubsub.len()];
        let mut pubsub = tokio::time::timeout(self.connect_timeout, client.get_async_pubsub())
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting for pub/sub")
            })??;
        pubsub
            .subscribe(&[
                &self.wake_channel,
                &self.health.channel,
                &self.fleet.channel,
            ])
            .await?;
        // Anything published while unsubscribed was missed: look at every shard once, and
        // at the fleet.
        self.clock.wake_all();
        wake.notify_one();
        self.fleet_changed.notify_one();
        let mut messages = pubsub.on_message();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                msg = messages.next() => match msg {
                    Some(msg) if msg.get_channel_name() == self.fleet.channel => {
                        let from: String = msg.get_payload().unwrap_or_default();
                        if self.fleet.is_another(&from) {
                            self.fleet_changed.notify_one();
                        }
                    }
                    Some(msg) if msg.get_channel_name() == self.health.channel => {
                        let text: String = msg.get_payload().unwrap_or_default();
                        if let Some((endpoint, healthy)) = self.health.heard(&text) {
                            health(endpoint, healthy);
                        }
                    }
                    Some(msg) => {
                        let text: String = msg.get_payload().unwrap_or_default();
                        let (due_key, due_in) = wake_message(&text);
                        // Only the shard's owner claims it: the other instances'
                        // schedulers need not look again.
                        let look = match self.due_keys.get(due_key) {
                            Some(&shard) => self.clock.wake_in(shard, due_in),
                            None => {
                                self.clock.wake_all();
                                true
                            }
                        };
                        if look {
                            wake.notify_one();
                        }
                    }
                    None => return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "pub/sub connection closed").into()),
                },
            }
        }
    }

    /// Runs `reserve.lua` for `asks` in one call: on a cluster, their keys must share a
    /// slot (one ask per call does).
    async fn reserve_in_one_call(&self, asks: &[RateAsk]) -> StoreResult<Vec<Slots>> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let mut call = self.scripts.reserve.prepare_invoke();
        for ask in asks {
            call.key(format!("{{{}{}}}", self.rate_prefix, ask.key));
            call.arg(ask.interval_us)
                .arg(ask.tolerance_us)
                .arg(ask.count)
                .arg(ask.not_before_us)
                .arg(ask.pause_us);
        }
        let reply: Vec<Value> = call
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(script_error("reserve"))?;
        if reply.len() != 1 + 2 * asks.len() {
            return Err(StoreError::Corrupt(
                "reserve reply of the wrong length".into(),
            ));
        }
        let now_us = int_at(&reply, 0)?;
        let slots = asks.iter().enumerate().map(|(i, ask)| {
            Ok(Slots {
                now_us,
                start_us: int_at(&reply, 1 + 2 * i)?,
                tat_us: int_at(&reply, 2 + 2 * i)?,
                interval_us: ask.interval_us,
                tolerance_us: ask.tolerance_us,
            })
        });
        slots.collect()
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

/// A claimed notification from a claim's reply (`c`: id, state record or nil, spec), and
/// how it was claimed, for its settle.
fn claimed_job(
    c: &[Value],
    claimed_at_us: i64,
    asked: Instant,
    shared: &dyn spec::SharedSchedules,
) -> StoreResult<(ClaimedJob, Held)> {
    let id = text_at(c, 0)?;
    let spec = text_at(c, 2)?;
    let stored = match c.get(1) {
        Some(Value::Nil) | Some(Value::Boolean(false)) => None,
        _ => Some(text_at(c, 1)?),
    };
    let decoded =
        spec::decode(&spec).map_err(|e| StoreError::Corrupt(format!("spec of {id}: {e}")))?;
    let held = Held::claimed(&id, stored, (&spec, &decoded), shared)?;
    let job = ClaimedJob {
        id: id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("bad id `{id}` in due set")))?,
        lease: held.record.lease,
        attempt: held.record.attempts + 1,
        max_attempts: held.record.max_attempts,
        // A scheduled notification's `next_at` is its score in the due set.
        due_at: held.record.next_at.unwrap_or(claimed_at_us / 1000),
        claimed_at_us,
        claim_asked: asked,
        spec: decoded,
        reserved: held.record.reserved,
    };
    Ok((job, held))
}

/// A wake-up message: a shard's due key and the ms until its new earliest is due (a
/// message of earlier builds has no ms: due now).
fn wake_message(text: &str) -> (&str, Duration) {
    match text.rsplit_once(' ') {
        Some((key, ms)) => (key, Duration::from_millis(ms.parse().unwrap_or(0))),
        None => (text, Duration::ZERO),
    }
}

/// A settle of `s` worked out from `held` at `now`: written only if Redis's clock has
/// reached the attempt's end. Its answer is the new state (`None`: its lease was lost).
fn settled(s: &Settlement, held: &Held, now: Now) -> Decision<Option<JobState>> {
    let verdict = s.verdict();
    let Some(new) = transitions::settle(&held.record, s.lease, &verdict, now) else {
        return Decision::Done(None);
    };
    let ended = verdict.ended(now);
    let entry = serde_json::to_string(&s.attempt(ended)).expect("an attempt serializes");
    let change = Change::new(&s.id.to_string(), held, &new)
        .not_before(ended)
        .with_entry(entry);
    Decision::Write(change, Some(new.state))
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
        spec: spec::decode(spec).map_err(|e| corrupt("spec", e))?,
        status,
        history: match history {
            Some(h) => {
                serde_json::from_str::<Vec<Attempt>>(h).map_err(|e| corrupt("history", e))?
            }
            None => Vec::new(),
        },
    })
}

fn parse_record(state: &str) -> StoreResult<Record> {
    Record::decode(state).map_err(|e| StoreError::Corrupt(format!("state record: {e}")))
}

/// How a call of the script `script` failed. An error the script itself answered (a Lua
/// error, or a refusal of its arguments) is a bug, not an outage: logged with the script's
/// name and counted, it fails the request that met it and is not tried again. Anything
/// else is `store_error`'s.
fn script_error(script: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    move |e| match e.kind() {
        ErrorKind::Server(ServerErrorKind::ResponseError) => bug(script, e),
        _ if e.code() == Some("WRONGTYPE") => bug(script, e),
        _ => store_error(e),
    }
}

/// A script's own failure: logged with its name, counted, and never retried.
fn bug(script: &'static str, e: redis::RedisError) -> StoreError {
    crate::metrics::script_error(script);
    tracing::error!(script, error = %e, "a store script failed");
    StoreError::Script {
        script,
        message: e.to_string(),
    }
}

fn store_error(e: redis::RedisError) -> StoreError {
    use redis::ErrorKind;
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Unavailable(e.to_string()),
    }
}
