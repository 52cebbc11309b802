//! Instances sharing one Redis divide its shards among themselves: each claims only the
//! shards it owns, so batches stay large as instances are added. An instance that stops
//! hands its shards over at once; one killed has them taken over within three quarters
//! of a shard lease; one that joins takes its share at once. Nothing is lost or sent twice.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Postback, Receiver, RedisServer};

const OWNED: &str = "postback_shards_owned";
const DELIVERED: &str = r#"postback_attempts_total{outcome="delivered",status_class="2xx"}"#;

fn settings(shards: &'static str, lease: &'static str) -> [(&'static str, &'static str); 2] {
    [
        ("POSTBACK_STORE_SHARDS", shards),
        ("POSTBACK_STORE_SHARD_LEASE", lease),
    ]
}

/// How many shards each instance says it owns.
async fn owned(instances: &[&Postback]) -> Vec<u64> {
    let mut owned = Vec::new();
    for pb in instances {
        owned.push(pb.metric(OWNED).await.unwrap_or(-1.0) as u64);
    }
    owned
}

/// Waits until the instances own `expected` shards each, in order.
async fn wait_owned(instances: &[&Postback], expected: &[u64], within: Duration) {
    let settled =
        support::eventually(within, || async { owned(instances).await == expected }).await;
    assert!(
        settled,
        "owned {:?}, expected {expected:?} within {within:?}",
        owned(instances).await
    );
}

/// Two instances on 4 shards with `lease`, once they own two each.
async fn two_instances(lease: &'static str) -> (RedisServer, Receiver, Postback, Postback) {
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let env = settings("4", lease);
    let a = Postback::start(&redis, &env).await;
    let b = Postback::start(&redis, &env).await;
    wait_owned(&[&a, &b], &[2, 2], Duration::from_secs(5)).await;
    (redis, receiver, a, b)
}

/// Registers `n` notifications one at a time, a few ms apart so that they take the
/// shards in turn, each due `delay` after its registration: their ids and due times.
async fn register_spread(
    pb: &Postback,
    receiver: &Receiver,
    n: usize,
    delay: Duration,
) -> Vec<(String, Instant)> {
    let mut due = Vec::new();
    for i in 0..n {
        let body = json!({"url": receiver.url("/spread"), "body": {"i": i},
                          "delay": format!("{}ms", delay.as_millis())});
        let id = pb.register(body).await;
        due.push((id, Instant::now() + delay));
        // Registered in different milliseconds, so that they fall due one by one.
        support::pace(Duration::from_millis(3)).await;
    }
    due
}

/// Asserts that every one arrived exactly once, at most `late` after it was due, once
/// `pb`'s store holds nothing more to send.
async fn assert_on_time(
    pb: &Postback,
    receiver: &Receiver,
    due: &[(String, Instant)],
    late: Duration,
) {
    assert!(
        receiver.wait_for(due.len(), Duration::from_secs(15)).await,
        "{} of {} arrived",
        receiver.count(),
        due.len()
    );
    pb.wait_quiet().await;
    let seen = receiver.per_id();
    for (id, at) in due {
        assert_eq!(seen.get(id), Some(&1), "{id} arrived once");
        let arrived = receiver.requests_for(id)[0].at;
        let was = arrived.saturating_duration_since(*at);
        assert!(was <= late, "{id} was {was:?} late (at most {late:?})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_divide_the_shards_and_each_delivers_its_share_once() {
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let env = settings("6", "1s");
    let a = Postback::start(&redis, &env).await;
    let b = Postback::start(&redis, &env).await;
    let c = Postback::start(&redis, &env).await;
    wait_owned(&[&a, &b, &c], &[2, 2, 2], Duration::from_secs(5)).await;
    for pb in [&a, &b, &c] {
        assert_eq!(pb.metric("postback_fleet_instances").await, Some(3.0));
    }

    // Runs of registrations share a shard, 32 at most: 192 fill all six.
    let items: Vec<_> = (0..192)
        .map(|i| json!({"url": receiver.url("/share"), "body": {"i": i}, "delay": "300ms"}))
        .collect();
    let ids = a.register_batch(items).await;
    assert!(receiver.wait_for(192, Duration::from_secs(15)).await);
    a.wait_quiet().await;
    let seen = receiver.per_id();
    assert!(ids.iter().all(|id| seen.get(id) == Some(&1)), "each once");

    let mut sent = Vec::new();
    for pb in [&a, &b, &c] {
        sent.push(pb.metric(DELIVERED).await.unwrap_or(0.0) as u64);
    }
    assert_eq!(sent.iter().sum::<u64>(), 192, "{sent:?}");
    assert!(
        sent.iter().all(|&n| n > 0),
        "each instance delivers what its shards hold: {sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_shards_are_taken_over_within_three_quarters_of_a_lease() {
    let (_redis, receiver, a, mut b) = two_instances("1s").await;
    b.kill();
    // Due 300 ms after the kill or later; the shards of the killed instance are taken
    // over within 750 ms of its last renewal (three quarters of the 1 s lease), so
    // those due first are up to 450 ms late.
    let due = register_spread(&a, &receiver, 40, Duration::from_millis(300)).await;
    assert_on_time(&a, &receiver, &due, Duration::from_millis(800)).await;
    assert_eq!(owned(&[&a]).await, vec![4]);
    assert_eq!(a.metric("postback_fleet_instances").await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_instance_hands_its_shards_over_at_once() {
    // A lease far longer than the test: only a hand-over explains a timely delivery.
    let (_redis, receiver, a, mut b) = two_instances("30s").await;
    assert!(b.terminate().success());
    let due = register_spread(&a, &receiver, 40, Duration::from_millis(300)).await;
    assert_on_time(&a, &receiver, &due, Duration::from_millis(300)).await;
    assert_eq!(owned(&[&a]).await, vec![4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_takes_its_share_at_once() {
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let env = settings("4", "30s");
    let a = Postback::start(&redis, &env).await;
    wait_owned(&[&a], &[4], Duration::from_secs(5)).await;

    // Notifications falling due while the second instance joins: none late, none twice.
    let before = register_spread(&a, &receiver, 20, Duration::from_millis(800)).await;
    let b = Postback::start(&redis, &env).await;
    wait_owned(&[&a, &b], &[2, 2], Duration::from_secs(2)).await;
    let after = register_spread(&b, &receiver, 20, Duration::from_millis(300)).await;
    let all: Vec<_> = before.into_iter().chain(after).collect();
    assert_on_time(&a, &receiver, &all, Duration::from_millis(300)).await;
}
