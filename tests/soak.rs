//! The ledger. Mixed traffic for `POSTBACK_SOAK_SECONDS` (60 by default; `scripts/soak.sh`
//! runs it for longer) from a steady producer and producers that cancel, against two
//! hosts whose receivers fail at random and one that always fails, on two instances
//! sharing one Redis. One instance is restarted a third of the way in and Redis two
//! thirds of the way in. At the end the books must balance exactly: every accepted
//! notification is delivered, dead, cancelled or still pending, `/stats` counts no more
//! and no fewer, and each one's recorded attempts are exactly the requests its
//! receiver saw (an open circuit holds notifications back without an attempt).

#[path = "soak/checked.rs"]
mod checked;
// The simulation's checker; the soak's workload uses a part of what it can check.
#[allow(dead_code)]
#[path = "simulation/checker.rs"]
mod checker;
mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::load::{accepted, register, Load};
use support::{Backend, Postback, PostgresServer, Receiver, RedisServer};

const SETTINGS: &[(&str, &str)] = &[
    ("POSTBACK_DELIVERY_TIMEOUT", "2s"),
    ("POSTBACK_DELIVERY_MAX_TIMEOUT", "2s"),
    ("POSTBACK_SCHEDULES_QUICK", "100ms,200ms,300ms"),
];

fn soak_time() -> Duration {
    let seconds = std::env::var("POSTBACK_SOAK_SECONDS").map_or(60, |s| s.parse().unwrap());
    Duration::from_secs(seconds)
}

/// The n-th registration of the steady producer: mostly to flaky hosts, some to one
/// that always fails, some due a little later.
fn mixed(n: usize, flaky: &str, other_host: &str, failing: &str) -> Value {
    let schedule = json!(["100ms", "200ms", "300ms"]);
    match n % 10 {
        0..=5 => json!({"url": flaky, "body": {"n": n}, "schedule": schedule, "topic": "flaky"}),
        6 | 7 => {
            json!({"url": other_host, "body": {"n": n}, "schedule": schedule, "delay": "500ms"})
        }
        8 => json!({"url": failing, "body": {"n": n}, "schedule": schedule, "topic": "failing"}),
        _ => {
            json!({"url": flaky, "body": format!("text {n}"), "schedule": "quick", "delay": "1s"})
        }
    }
}

/// Registers notifications due in a second and cancels every other one at a random
/// moment before or around its due time; the ids it registered.
async fn cancelling_producer(
    api: String,
    target: String,
    stop: Arc<AtomicBool>,
    name: usize,
) -> Vec<String> {
    let client = reqwest::Client::new();
    let token = support::instance::TOKEN;
    let mut ids = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let body = json!({"url": target, "body": {}, "delay": "1s", "schedule": ["100ms"]});
        let key = format!("cancel-{name}-{}", ids.len());
        let answers = register(&client, &format!("{api}/notify"), &body, &key).await;
        let id = answers.last().unwrap().id.clone().expect("accepted");
        if ids.len() % 2 == 0 {
            // A producer changing its mind after a random while.
            support::pace(Duration::from_millis(fastrand::u64(0..1_500))).await;
            let _ = client
                .delete(format!("{api}/notifications/{id}"))
                .bearer_auth(token)
                .send()
                .await;
        }
        ids.push(id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_balances_after_restarts_of_an_instance_and_of_redis() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let soak = soak_time();
    let mut redis = RedisServer::start_persistent("everysec");
    let near = Receiver::start().await;
    let far = Receiver::start_on("127.0.0.2").await;
    let mut restarted = Postback::start(&redis, SETTINGS).await;
    let steady = Postback::start(&redis, SETTINGS).await;

    let (flaky, other_host, failing) = (
        near.url("/flaky?flaky=30"),
        far.url("/flaky?flaky=30"),
        near.url("/down?fail=1000"),
    );
    let producer = Load::start(
        steady.url("/notify"),
        2,
        Duration::from_millis(20),
        move |n| mixed(n, &flaky, &other_host, &failing),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let cancellers: Vec<_> = (0..4)
        .map(|name| {
            tokio::spawn(cancelling_producer(
                steady.url(""),
                near.url("/cancellable"),
                stop.clone(),
                name,
            ))
        })
        .collect();

    // Time is the point: the soak's length, an instance restarted at a third of it, Redis
    // away for two seconds at two thirds.
    let started = Instant::now();
    support::hold(soak / 3).await;
    assert_eq!(restarted.terminate().code(), Some(0));
    let _restarted_again = Postback::start(&redis, SETTINGS).await;
    support::hold((soak * 2 / 3).saturating_sub(started.elapsed())).await;
    redis.shut_down();
    support::hold(Duration::from_secs(2)).await;
    redis.restart();
    support::hold(soak.saturating_sub(started.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    let answers = producer.stop().await;
    let mut ids = accepted(&answers);
    for canceller in cancellers {
        ids.extend(canceller.await.unwrap());
    }

    let settled = support::eventually(Duration::from_secs(60), || async {
        let (_, stats) = steady.get("/stats").await;
        stats["scheduled"] == 0 && stats["in_flight"] == 0
    })
    .await;
    if !settled {
        let mut left = Vec::new();
        for state in ["scheduled", "retrying", "held", "held_back", "in_flight"] {
            let (_, page) = steady.get(&format!("/notifications?state={state}")).await;
            for item in page["items"].as_array().into_iter().flatten() {
                let id = item["id"].as_str().unwrap_or_default();
                left.push(steady.notification(id).await.to_string());
            }
        }
        panic!(
            "the queue drains: {}\nleft:\n{}\n{}",
            steady.get("/stats").await.1,
            left.join("\n"),
            steady.logs()
        );
    }

    let mut seen = near.per_id();
    for (id, n) in far.per_id() {
        *seen.entry(id).or_default() += n;
    }
    let mut by_state: HashMap<String, usize> = HashMap::new();
    let mut mismatched = Vec::new();
    let mut held_back = 0;
    for id in &ids {
        let n = steady.notification(id).await;
        let state = n["state"].as_str().unwrap().to_string();
        let history = n["history"].as_array().unwrap();
        let attempts = n["attempts"].as_u64().unwrap() as usize;
        // The failing endpoint trips its circuit breaker: its notifications are held
        // back (noted once per wait, no attempt counted) until a probe goes, or dead at
        // their deadline.
        let kind = |k: &str| history.iter().filter(|h| h["kind"] == k).count();
        held_back += kind("circuit_wait");
        let received = seen.get(id).copied().unwrap_or(0);
        let consistent = attempts == kind("attempt") && attempts == received;
        let exhausted = n["max_attempts"].as_u64() == Some(attempts as u64);
        let at_deadline = kind("circuit_deadline") == 1;
        if !consistent || (state == "dead" && !exhausted && !at_deadline) {
            let outcomes: Vec<String> = history
                .iter()
                .map(|h| format!("{}/{}", h["status"], h["error"]))
                .collect();
            mismatched.push(format!(
                "{id}: {state}, {attempts} attempts ({}), receiver saw {received}",
                outcomes.join(" ")
            ));
        }
        *by_state.entry(state).or_default() += 1;
    }
    let count = |s: &str| by_state.get(s).copied().unwrap_or(0);
    let (delivered, dead, cancelled) = (count("delivered"), count("dead"), count("cancelled"));
    let pending = count("scheduled") + count("in_flight");
    let (_, stats) = steady.get("/stats").await;
    let retried = answers.iter().filter(|a| a.status != 202).count();
    eprintln!(
        "soak of {soak:?}: {} accepted ({retried} answers 503 while Redis restarted, retried) = {delivered} delivered + {dead} dead + {cancelled} cancelled + {pending} pending; {} requests received, {held_back} waits for an open circuit; stats {stats}",
        ids.len(),
        seen.values().sum::<usize>()
    );
    assert_eq!(
        ids.len(),
        delivered + dead + cancelled + pending,
        "{by_state:?}"
    );
    assert_eq!(
        stats["finished"].as_u64().unwrap() + stats["dead"].as_u64().unwrap(),
        (delivered + cancelled + dead) as u64,
        "the store holds no notification the API did not accept"
    );
    assert!(
        mismatched.is_empty(),
        "attempts differ from what the receivers saw:\n{}",
        mismatched.join("\n")
    );
    assert!(
        delivered > 0 && dead > 0 && cancelled > 0,
        "the mix reached every end state"
    );
}

/// How long each store's checked soak runs: `POSTBACK_CHECKED_SOAK_SECONDS` (20 by
/// default).
fn checked_soak_time() -> Duration {
    let seconds = std::env::var("POSTBACK_CHECKED_SOAK_SECONDS").map_or(20, |s| s.parse().unwrap());
    Duration::from_secs(seconds)
}

/// One soak at a time: each takes the machine's cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_promises_hold_on_redis_with_instances_killed_and_stopped() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let backend = Backend::Standalone(RedisServer::start());
    checked::promises_hold(backend, checked_soak_time()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_promises_hold_on_a_redis_cluster_with_instances_killed_and_stopped() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let backend = Backend::on_shared_cluster();
    checked::promises_hold(backend, checked_soak_time()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_promises_hold_on_postgres_with_instances_killed_and_stopped() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let backend = Backend::Postgres(PostgresServer::start());
    checked::promises_hold(backend, checked_soak_time()).await;
}
