//! The Redis store, the embedded store and the Postgres store are one state machine:
//! random sequences of registrations (with delays, idempotency keys, ordering keys,
//! tenants), claims, outcomes, deferrals (and holds, and waits for an open circuit),
//! releases, cancels, replays (to the same URL or another), resends, attempts now,
//! discards and retention, applied to all three step by step,
//! must give the same answers and leave the same observable states (each
//! notification's state, attempts, history, whether it waits behind its ordering key or
//! is held;
//! the counts of every tenant and of one; the dead letters; idempotency keys).
//!
//! Times differ between the stores (each reads its own clock), so what is compared is
//! what does not depend on the exact millisecond: every retry interval is an hour, a
//! delay is none or an hour, and the operations are a few milliseconds apart. Send
//! times reserved in rate keys' quotas (`lua/reserve.lua` beside `policy::reserve`) are
//! asked for an hour ahead, where neither store's clock decides them.

use crate::support;

use std::time::Duration;

use postback::config::{RedisTarget, RetentionSettings, StoreSettings};
use postback::delivery::policy::{Quota, RateAsk};
use postback::domain::{
    Entry, Fingerprint, JobId, JobSpec, Notification, OrderingKey, Outcome, Schedule, Tenant,
};
use postback::store::{
    Again, Back, ClaimedJob, Deferral, EmbeddedStore, FinishedStates, Idempotency, JobView, LetGo,
    ListFilter, PostgresStore, RedisStore, Settlement, Store,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::{PostgresServer, RedisServer};

/// The stores compared, in the order their answers are.
const STORES: [&str; 3] = ["Redis", "embedded", "Postgres"];

/// Sequences tried; `POSTBACK_DIFFERENTIAL_CASES` sets more for a longer search.
const CASES: u32 = 32;
const LEASE: Duration = Duration::from_secs(600);
const LONG: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
enum Op {
    /// Registrations stored together (`enqueue_many`), or one alone (`enqueue`).
    Register(Vec<Reg>),
    Claim {
        limit: usize,
    },
    Settle {
        pick: usize,
        outcome: Outcome,
    },
    Defer {
        pick: usize,
        /// 0: later; 1: held for its paused endpoint; 2: held back by its open circuit, dead
        /// past its deadline; 3: held back while a probe is in flight.
        back: u8,
    },
    Release {
        pick: usize,
    },
    Cancel {
        pick: usize,
    },
    Replay {
        pick: usize,
        delayed: bool,
        schedule: bool,
        /// To another URL.
        redirect: bool,
    },
    ReplayMany,
    Resend {
        pick: usize,
    },
    AttemptNow {
        pick: usize,
    },
    Discard {
        pick: usize,
    },
    Trim,
}

/// One registration of a `Register` step.
#[derive(Debug, Clone)]
struct Reg {
    delayed: bool,
    tiers: usize,
    ordering: Option<u8>,
    /// The idempotency key and the body it comes with, from a few of each: a group may
    /// hold a new key twice.
    key: Option<(u8, u8)>,
    other_tenant: bool,
}

fn reg() -> impl Strategy<Value = Reg> {
    (
        any::<bool>(),
        1..4usize,
        prop::option::of(0..2u8),
        prop::option::of((0..2u8, 0..2u8)),
        any::<bool>(),
    )
        .prop_map(|(d, tiers, ordering, key, other_tenant)| Reg {
            delayed: d && ordering.is_none(),
            tiers,
            ordering,
            key,
            other_tenant,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let outcome = prop_oneof![
        1 => Just(Outcome::Delivered),
        1 => Just(Outcome::Failed),
        2 => Just(Outcome::Gone)
    ];
    prop_oneof![
        4 => reg().prop_map(|r| Op::Register(vec![r])),
        1 => prop::collection::vec(reg(), 2..5).prop_map(Op::Register),
        4 => (1..5usize).prop_map(|limit| Op::Claim { limit }),
        6 => (any::<usize>(), outcome).prop_map(|(pick, outcome)| Op::Settle { pick, outcome }),
        2 => (any::<usize>(), 0u8..4).prop_map(|(pick, back)| Op::Defer { pick, back }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => (any::<usize>(), any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(pick, delayed, schedule, redirect)| Op::Replay { pick, delayed, schedule, redirect }),
        1 => Just(Op::ReplayMany),
        1 => any::<usize>().prop_map(|pick| Op::Resend { pick }),
        1 => any::<usize>().prop_map(|pick| Op::AttemptNow { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Discard { pick }),
        1 => Just(Op::Trim),
    ]
}

/// Retention that acts within a sequence: at most two dead letters are kept.
fn retention() -> RetentionSettings {
    RetentionSettings {
        dead_max_count: 2,
        ..RetentionSettings::default()
    }
}

fn notification(id: JobId, tiers: usize, delayed: bool, tenant: &Tenant) -> Notification {
    let delay = if delayed { LONG } else { Duration::ZERO };
    let mut n = support::fixtures::notification(&vec!["1h"; tiers], delay);
    n.id = id;
    n.tenant = tenant.clone();
    n
}

/// What a reader sees of a notification, but for times.
fn seen(v: Option<JobView>) -> String {
    let Some(v) = v else { return "gone".into() };
    let s = &v.status;
    let history: Vec<String> = v
        .history
        .iter()
        .map(|e| match e {
            Entry::Attempt(a) => format!("{:?} {:?}", a.status, a.url),
            Entry::Note(n) => format!("{} {:?} {:?}", n.note.as_str(), n.cycle, n.url),
        })
        .collect();
    format!(
        "{:?} attempts {}/{} replays {} cancel_requested {} waiting {} held {} next {} finished {} history {history:?} tenant {}",
        s.state,
        s.attempts,
        s.max_attempts,
        s.replays,
        s.cancel_requested,
        s.waiting,
        s.held,
        s.next_at.is_some(),
        s.finished_at.is_some(),
        v.spec.tenant,
    )
}

/// When a store's last claim said the scheduler should look again, in the order of
/// soonest: within the longest interval and lease of these sequences, later (only a
/// held or waiting notification, which no time makes due, would be that), or never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Wake {
    Soon,
    Later,
    Never,
}

impl Wake {
    fn of(next: Option<Duration>) -> Self {
        match next {
            Some(d) if d <= LONG + LEASE => Self::Soon,
            Some(_) => Self::Later,
            None => Self::Never,
        }
    }
}

/// One store under test, with the leases it holds and its last claim's wake-up.
struct Subject {
    store: Box<dyn Store>,
    held: Vec<ClaimedJob>,
    wake: Option<Wake>,
}

impl Subject {
    /// Applies `op` (the notifications it may name are `ids`): its answer, as text.
    async fn apply(&mut self, op: &Op, ids: &[(Notification, Option<Idempotency>)]) -> String {
        let store = &*self.store;
        let pick = |i: usize| ids.get(i % ids.len().max(1)).map(|(n, _)| n.id);
        match op {
            Op::Register(regs) => {
                let new = &ids[ids.len() - regs.len()..];
                let answers = match new {
                    [(n, key)] => vec![store.enqueue(n, key.as_ref()).await],
                    _ => {
                        let group: Vec<_> = new.iter().map(|(n, k)| (n, k.as_ref())).collect();
                        store.enqueue_many(&group).await
                    }
                };
                let answers: Vec<_> = answers
                    .into_iter()
                    .map(|e| {
                        let e = e.unwrap();
                        let state = e.status.map(|s| format!("{:?} {}", s.state, s.waiting));
                        format!("{} {state:?} {} {}", e.id, e.duplicate, e.mismatch)
                    })
                    .collect();
                format!("{answers:?}")
            }
            Op::Claim { limit } => {
                let claim = store.claim(*limit, LEASE, Duration::ZERO).await.unwrap();
                let mut got: Vec<_> = claim
                    .jobs
                    .iter()
                    .map(|j| {
                        format!(
                            "{} lease {} attempt {}/{}",
                            j.id, j.lease, j.attempt, j.max_attempts
                        )
                    })
                    .collect();
                got.sort();
                self.held.extend(claim.jobs);
                self.held.sort_by_key(|j| j.id.to_string());
                self.wake = Some(Wake::of(claim.next_wake));
                format!("{got:?}")
            }
            Op::Settle { pick, outcome } => {
                let Some(job) = self.take(*pick) else {
                    return "none held".into();
                };
                let s = Settlement {
                    id: job.id,
                    lease: job.lease,
                    report: support::fixtures::report(*outcome),
                    jitter_permille: 0,
                    ended_at: job.store_now(),
                    ordered: job.spec.ordering_key.is_some(),
                    url: job.spec.url.clone(),
                };
                let settled = self.store.settle(&[s]).await.unwrap();
                let (applied, dead) = (settled.applied, settled.dead_lettered);
                format!("{applied:?} dead {dead} trimmed {}", settled.trimmed)
            }
            Op::Defer { pick, back } => {
                let Some(job) = self.take(*pick) else {
                    return "none held".into();
                };
                let back = match back {
                    0 => Back::later(LONG),
                    1 => Back::Held,
                    _ => Back::Circuit {
                        delay: LONG,
                        url: job.spec.url.clone(),
                        judged: *back == 2,
                    },
                };
                let d = Deferral {
                    id: job.id,
                    lease: job.lease,
                    back,
                };
                self.store.defer(&[d]).await.unwrap();
                "deferred".into()
            }
            Op::Release { pick } => {
                let Some(job) = self.take(*pick) else {
                    return "none held".into();
                };
                let n = self.store.release(&[(job.id, job.lease)]).await.unwrap();
                format!("released {n}")
            }
            Op::Cancel { pick: p } => match pick(*p) {
                Some(id) => format!("{:?}", store.cancel(&id).await.unwrap()),
                None => "nothing".into(),
            },
            Op::Replay {
                pick: p,
                delayed,
                schedule,
                redirect,
            } => {
                let Some(id) = pick(*p) else {
                    return "nothing".into();
                };
                let schedule = schedule.then(|| Schedule::parse(&["1h", "1h"]).unwrap());
                let delay = if *delayed { LONG } else { Duration::ZERO };
                let spec = match redirect {
                    true => store.get(&id).await.unwrap().map(|v| JobSpec {
                        url: "http://elsewhere.example.com/cb".into(),
                        ..v.spec
                    }),
                    false => None,
                };
                let status = store
                    .replay(&id, spec.as_ref(), schedule.as_ref(), delay)
                    .await
                    .unwrap();
                format!(
                    "{:?}",
                    status.map(|s| (s.state, s.attempts, s.max_attempts, s.waiting))
                )
            }
            Op::ReplayMany => {
                let all: Vec<JobId> = ids.iter().map(|(n, _)| n.id).collect();
                let n = store
                    .send_again(Again::Replay, &all, None, Duration::ZERO)
                    .await
                    .unwrap();
                format!("replayed {n}")
            }
            Op::Resend { pick: p } => match pick(*p) {
                Some(id) => {
                    let ids = [id];
                    let n = store.send_again(
                        Again::Resend(FinishedStates::ALL),
                        &ids,
                        None,
                        Duration::ZERO,
                    );
                    format!("resent {}", n.await.unwrap())
                }
                None => "nothing".into(),
            },
            Op::AttemptNow { pick: p } => match pick(*p) {
                Some(id) => format!(
                    "due now {}",
                    store.attempt_now(&id, LetGo::Now).await.unwrap()
                ),
                None => "nothing".into(),
            },
            Op::Discard { pick: p } => match pick(*p) {
                Some(id) => format!("discarded {}", store.discard(&[id]).await.unwrap()),
                None => "nothing".into(),
            },
            Op::Trim => format!("trimmed {}", store.trim().await.unwrap()),
        }
    }

    /// Takes a held lease out of the list (it is settled, deferred or released).
    fn take(&mut self, pick: usize) -> Option<ClaimedJob> {
        if self.held.is_empty() {
            return None;
        }
        Some(self.held.remove(pick % self.held.len()))
    }

    /// Everything a reader can see, but for times.
    async fn observe(&self, ids: &[(Notification, Option<Idempotency>)]) -> Vec<String> {
        let store = &*self.store;
        let mut seen_all = Vec::new();
        for (n, key) in ids {
            seen_all.push(format!(
                "{} {}",
                n.id,
                seen(store.get(&n.id).await.unwrap())
            ));
            if let Some(key) = key {
                let found = store.find_by_key(&key.tenant, &key.key).await.unwrap();
                seen_all.push(format!("key {} → {:?}", key.scoped(), found.map(|v| v.id)));
            }
        }
        for tenant in [None, Some(Tenant::parse("shop-a", "tenant").unwrap())] {
            let stats = store.stats(tenant.as_ref()).await.unwrap();
            seen_all.push(format!("{tenant:?} {:?} {:?}", stats.total, stats.trimmed));
        }
        let dead = store
            .dead_letters(&ListFilter::default(), 100, None)
            .await
            .unwrap();
        let mut dead: Vec<_> = dead.items.iter().map(|v| v.id.to_string()).collect();
        dead.sort();
        seen_all.push(format!("dead letters {dead:?}"));
        seen_all
    }
}

/// The three stores, each empty: Redis flushed, a new embedded file (in `dir`), the
/// Postgres schema dropped and migrated again.
async fn stores(redis: &RedisServer, pg: &PostgresServer, dir: &std::path::Path) -> [Subject; 3] {
    redis.query::<()>(&mut redis::cmd("FLUSHALL"));
    let target = RedisTarget::Standalone(redis.url());
    let settings = StoreSettings::default();
    let on_redis = RedisStore::connect(&target, 1, &settings, &retention())
        .await
        .unwrap();
    let embedded = EmbeddedStore::open(dir, &retention()).unwrap();
    pg.psql("DROP SCHEMA IF EXISTS postback CASCADE");
    let on_postgres = PostgresStore::connect(&pg.url(), &settings, &retention())
        .await
        .unwrap();
    let subject = |store: Box<dyn Store>| Subject {
        store,
        held: Vec::new(),
        wake: None,
    };
    [
        subject(Box::new(on_redis)),
        subject(Box::new(embedded)),
        subject(Box::new(on_postgres)),
    ]
}

/// Applies `ops` to every store, comparing every answer and, after each, what is seen,
/// with Redis's.
async fn run(redis: &RedisServer, pg: &PostgresServer, ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut subjects = stores(redis, pg, dir.path()).await;
    let mut ids: Vec<(Notification, Option<Idempotency>)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        if let Op::Register(regs) = op {
            ids.extend(regs.iter().map(registration));
        }
        // Registrations are due from the next millisecond; keep each step in its own.
        support::pace(Duration::from_millis(3)).await;
        let mut answers = Vec::new();
        for subject in &mut subjects {
            answers.push(subject.apply(op, &ids).await);
        }
        let mut seen = Vec::new();
        for subject in &subjects {
            seen.push(subject.observe(&ids).await);
        }
        // The stores that work out the next wake-up from what they hold agree on it;
        // Redis's comes from what its claims last saw of each shard, so it may be
        // sooner (a wake-up that finds nothing is cheap), never later.
        let wakes: Vec<Option<Wake>> = subjects.iter().map(|s| s.wake).collect();
        prop_assert_eq!(
            wakes[1],
            wakes[2],
            "step {} {:?}: embedded, then Postgres",
            step,
            op
        );
        prop_assert!(
            wakes[0] <= wakes[1],
            "step {} {:?}: Redis wakes {:?}, the others {:?}",
            step,
            op,
            wakes[0],
            wakes[1]
        );
        for other in 1..STORES.len() {
            prop_assert_eq!(
                &answers[0],
                &answers[other],
                "step {} {:?}: Redis, then {}",
                step,
                op,
                STORES[other]
            );
            prop_assert_eq!(
                &seen[0],
                &seen[other],
                "after step {} {:?}: Redis, then {}",
                step,
                op,
                STORES[other]
            );
        }
    }
    Ok(())
}

fn registration(r: &Reg) -> (Notification, Option<Idempotency>) {
    let tenant = match r.other_tenant {
        true => Tenant::parse("shop-a", "tenant").unwrap(),
        false => Tenant::default(),
    };
    let mut n = notification(JobId::new(0), r.tiers, r.delayed, &tenant);
    n.ordering_key = r
        .ordering
        .map(|k| OrderingKey::parse(&format!("order-{k}")).unwrap());
    let idempotency = r.key.map(|(k, body)| Idempotency {
        key: format!("key-{k}"),
        tenant,
        fingerprint: Fingerprint::of_request(format!("body-{body}").as_bytes()),
        ttl: LONG,
        moved_from: None,
    });
    (n, idempotency)
}

#[test]
fn redis_embedded_and_postgres_stores_agree_on_every_sequence() {
    let cases = std::env::var("POSTBACK_DIFFERENTIAL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (redis, pg) = (RedisServer::start(), PostgresServer::start());
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let sequences = prop::collection::vec(op(), 1..80);
    let result = runner.run(&sequences, |ops| runtime.block_on(run(&redis, &pg, &ops)));
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Retention by count, which random sequences reach only now and then.
#[test]
fn retention_by_count_deletes_the_same_dead_letters() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (redis, pg) = (RedisServer::start(), PostgresServer::start());
    let register = Op::Register(vec![Reg {
        delayed: false,
        tiers: 1,
        ordering: None,
        key: None,
        other_tenant: false,
    }]);
    let gone = Op::Settle {
        pick: 0,
        outcome: Outcome::Gone,
    };
    let mut ops = vec![register; 4];
    ops.extend([
        Op::Claim { limit: 4 },
        gone.clone(),
        gone.clone(),
        gone.clone(),
    ]);
    ops.extend([gone, Op::Trim]);
    runtime.block_on(run(&redis, &pg, &ops)).unwrap();
}

/// A notification held for its paused endpoint is due at no time: a claim that finds
/// only it says there is nothing to wake for, on every store.
#[test]
fn a_held_notification_alone_wakes_no_scheduler() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (redis, pg) = (RedisServer::start(), PostgresServer::start());
    let register = Op::Register(vec![Reg {
        delayed: false,
        tiers: 1,
        ordering: None,
        key: None,
        other_tenant: false,
    }]);
    let ops = [
        register,
        Op::Claim { limit: 1 },
        Op::Defer { pick: 0, back: 1 },
        Op::Claim { limit: 1 },
    ];
    runtime.block_on(run(&redis, &pg, &ops)).unwrap();
}

/// One ask of a sequence of reservations: a key, its quota and burst, how many send
/// times, seconds past the hour ahead they may not come before, and a pause of two hours.
type Ask = (u8, u8, u32, u32, u8, bool);

fn ask((key, quota, burst, count, later, pause): Ask, hour_ahead_us: i64) -> RateAsk {
    let quota: Quota = ["10/s", "3/s", "100/m"][usize::from(quota)]
        .parse()
        .unwrap();
    let not_before = hour_ahead_us + i64::from(later) * 1_000_000;
    let mut ask = RateAsk::new(
        &format!("shop-a/key-{key}"),
        quota,
        burst,
        count,
        not_before,
    );
    if pause {
        ask.pause_us = 2 * 3_600_000_000;
    }
    ask
}

/// What a store reserved for `asks`: per ask, its first and last send times (µs).
async fn reserved(store: &dyn Store, asks: &[RateAsk]) -> Vec<(i64, i64)> {
    let times = store.reserve(asks).await.unwrap();
    asks.iter()
        .zip(times)
        .map(|(a, t)| (t.at(0), t.at(a.count.saturating_sub(1))))
        .collect()
}

/// Whether two stores' send times agree: exactly, or, for a key a pause has moved (it
/// counts from each store's own now), within 50 ms.
fn agree(asks: &[RateAsk], paused: &[String], a: &[(i64, i64)], b: &[(i64, i64)]) -> bool {
    let near = |x: i64, y: i64| (x - y).abs() <= 50_000;
    asks.iter()
        .zip(a.iter().zip(b))
        .all(|(ask, (x, y))| match paused.contains(&ask.key) {
            true => near(x.0, y.0) && near(x.1, y.1),
            false => x == y,
        })
}

#[test]
fn redis_and_embedded_stores_reserve_the_same_send_times() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let redis = RedisServer::start();
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let one: BoxedStrategy<Ask> = (
        0..2u8,
        0..3u8,
        1..4u32,
        0..5u32,
        0..3u8,
        prop::bool::weighted(0.1),
    )
        .boxed();
    let calls = prop::collection::vec(prop::collection::vec(one, 1..4), 1..12);
    let result = runner.run(&calls, |calls| {
        runtime.block_on(async {
            redis.query::<()>(&mut redis::cmd("FLUSHALL"));
            let target = RedisTarget::Standalone(redis.url());
            let settings = StoreSettings::default();
            let on_redis = RedisStore::connect(&target, 1, &settings, &retention())
                .await
                .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let embedded = EmbeddedStore::open(dir.path(), &retention()).unwrap();
            let hour_ahead_us = (std::time::SystemTime::now() + LONG)
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as i64;
            let mut paused = Vec::new();
            for call in &calls {
                let mut asks: Vec<RateAsk> = call.iter().map(|a| ask(*a, hour_ahead_us)).collect();
                // One ask per key in a call, as the scheduler makes them.
                asks.dedup_by(|a, b| a.key == b.key);
                paused.extend(
                    asks.iter()
                        .filter(|a| a.pause_us > 0)
                        .map(|a| a.key.clone()),
                );
                let on_redis = reserved(&on_redis, &asks).await;
                let embedded = reserved(&embedded, &asks).await;
                prop_assert!(
                    agree(&asks, &paused, &on_redis, &embedded),
                    "{:?}: Redis {:?}, embedded {:?}",
                    asks,
                    on_redis,
                    embedded
                );
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
