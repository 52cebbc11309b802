//! A shard in trouble costs that shard, not the fleet: on a Redis Cluster with one
//! replica per primary and `store.replica_acks = 1`, a primary is killed mid-stream and
//! its replica takes over with no replica of its own, so the shards it holds cannot
//! acknowledge writes as asked. New registrations go to the other shards, one whose
//! ordering key fixes it to a degraded shard is refused at once, `/readyz` stays ready,
//! `/stats` and the metrics name the degraded shards, and nothing accepted is lost or
//! sent twice.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::load::{self, Answer};
use support::{Postback, Receiver, RedisCluster, RedisServer, LONG_WAIT, WAIT};

const REGISTRATIONS: usize = 3000;
const PRODUCERS: usize = 16;

/// `/readyz` every 50 ms until stopped: each answer that was not `200`.
fn watch_readiness(pb: &Postback, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Value>> {
    let (client, url) = (pb.http.clone(), pb.url("/readyz"));
    tokio::spawn(async move {
        let mut not_ready = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let answer = client.get(&url).send().await;
            match answer {
                Ok(r) if r.status() == 200 => {}
                Ok(r) => not_ready.push(json!({"status": r.status().as_u16(), "body": r.text().await.unwrap_or_default()})),
                Err(e) => not_ready.push(json!({"error": e.to_string()})),
            }
            // The watcher's sampling pace.
            support::pace(Duration::from_millis(50)).await;
        }
        not_ready
    })
}

/// `PRODUCERS` producers registering `REGISTRATIONS` notifications between them, each
/// with its own key, retrying a `503` with it: every answer of each registration.
fn produce(
    pb: &Postback,
    receiver: &Receiver,
    next: Arc<AtomicUsize>,
) -> tokio::task::JoinSet<Vec<Vec<Answer>>> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut producers = tokio::task::JoinSet::new();
    for _ in 0..PRODUCERS {
        let (client, url, next) = (client.clone(), pb.url("/notify"), next.clone());
        let target = receiver.url("/paid");
        producers.spawn(async move {
            let mut registrations = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= REGISTRATIONS {
                    return registrations;
                }
                let body = json!({"url": target, "body": {"n": n}, "delay": "4s"});
                registrations.push(load::register(&client, &url, &body, &format!("pay-{n}")).await);
            }
        });
    }
    producers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_left_without_a_replica_costs_its_shards_not_the_fleet() {
    let mut cluster = RedisCluster::start(3, 1);
    let receiver = Receiver::start().await;
    let env = [
        ("POSTBACK_STORE_REPLICA_ACKS", "1"),
        ("POSTBACK_STORE_REPLICA_ACK_TIMEOUT", "1s"),
    ];
    let pb = Postback::start_on_cluster(&cluster, &env).await;
    let ready = support::eventually(WAIT, || async { pb.get("/readyz").await.0 == 200 }).await;
    assert!(ready, "{:?}", pb.get("/readyz").await);

    let stop_watching = Arc::new(AtomicBool::new(false));
    let readiness = watch_readiness(&pb, stop_watching.clone());
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut producers = produce(&pb, &receiver, next.clone());
    let under_way =
        support::eventually(WAIT, || async { next.load(Ordering::Relaxed) >= 300 }).await;
    assert!(under_way);
    let victim = cluster.primary_of("{postback:0}", 0);
    cluster.kill(victim);
    tokio::task::block_in_place(|| cluster.wait_failover("{postback:0}", victim));

    // The promoted replica has no replica: the shards it holds are degraded, shard 0
    // among them (others may be named for a while too, a write to them having come back
    // short on a machine this busy).
    let shard_0 = |stats: &Value| {
        stats["degraded_shards"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["shard"] == 0).cloned())
    };
    let named = support::eventually(LONG_WAIT, || async {
        shard_0(&pb.get("/stats").await.1).is_some()
    })
    .await;
    let (_, stats) = pb.get("/stats").await;
    assert!(named, "{stats}");
    let degraded = stats["degraded_shards"].as_array().unwrap().clone();
    assert!(degraded.len() < 12, "{stats}");
    let reason = shard_0(&stats).unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("replicas store.replica_acks asks for"),
        "{stats}"
    );
    let metrics = pb.get_text("/metrics").await.1;
    assert_eq!(
        support::metric_value(&metrics, r#"postback_shard_degraded{shard="0"}"#),
        Some(1.0)
    );
    let refused_at_once = ordering_keys_on_degraded_shards(&pb, &receiver).await;
    idempotency_keys_meet_their_first(&pb, &receiver).await;

    let mut registrations = Vec::new();
    while let Some(done) = producers.join_next().await {
        registrations.extend(done.unwrap());
    }
    let took = started.elapsed();
    stop_watching.store(true, Ordering::Relaxed);
    let not_ready = readiness.await.unwrap();

    let accepted: Vec<&Answer> = registrations
        .iter()
        .filter_map(|answers| answers.last().filter(|a| a.status == 202))
        .collect();
    let retried = registrations.iter().filter(|a| a.len() > 1).count();
    let refused: Vec<_> = registrations
        .iter()
        .filter_map(|answers| answers.last().filter(|a| a.status != 202))
        .map(|a| (a.status, a.code.clone()))
        .collect();
    println!("answered other than 202 at last: {refused:?}");
    println!(
        "{} of {REGISTRATIONS} accepted in {took:?} ({retried} after a retry); {} ordering keys refused at once; degraded {degraded:?}",
        accepted.len(),
        refused_at_once
    );
    assert!(
        accepted.len() * 100 >= REGISTRATIONS * 97,
        "{} accepted",
        accepted.len()
    );
    assert!(not_ready.is_empty(), "/readyz failed: {not_ready:?}");
    let all: Vec<Answer> = registrations.into_iter().flatten().collect();
    let twice = load::all_delivered(&pb, &receiver, &all).await;
    assert_eq!(twice, 0, "nothing sent twice");
}

/// Registers with ordering keys until some land on a degraded shard: each of those is
/// refused at once (`503 shard_unavailable`, naming the shard), the others accepted. A
/// shard not yet seen degraded (its primary is the promoted one, but no write to it has
/// come back short yet) answers the first `503 replica_ack_timeout`, after which the same
/// key is refused at once. How many were refused at once.
async fn ordering_keys_on_degraded_shards(pb: &Postback, receiver: &Receiver) -> usize {
    let mut refused = 0;
    for n in 0..60 {
        let body = json!({"url": receiver.url("/ordered"), "body": {}, "ordering_key": format!("o-{n}"), "delay": "1h"});
        let (mut status, mut answer, mut took) = notify_timed(pb, &body).await;
        if status == 503 && answer["error"]["code"] == "replica_ack_timeout" {
            (status, answer, took) = notify_timed(pb, &body).await;
            assert_eq!(status, 503, "{answer}");
        }
        match status {
            503 => {
                assert_eq!(answer["error"]["code"], "shard_unavailable", "{answer}");
                assert!(
                    answer["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("shard"),
                    "{answer}"
                );
                assert!(
                    took < Duration::from_millis(500),
                    "refused without waiting: {took:?}"
                );
                refused += 1;
            }
            _ => assert_eq!(status, 202, "{answer}"),
        }
    }
    assert!(refused > 0, "some of 60 keys live on a degraded shard");
    refused
}

/// `POST /notify` with `body`: the status, the answer and how long it took.
async fn notify_timed(pb: &Postback, body: &Value) -> (u16, Value, Duration) {
    let asked = Instant::now();
    let (status, answer) = pb.notify(body.clone()).await;
    (status, answer, asked.elapsed())
}

/// Registers with idempotency keys while shards are degraded (a key whose shard is one
/// of them is moved to another): each repeat is answered with its first notification,
/// and another request under the key is refused.
async fn idempotency_keys_meet_their_first(pb: &Postback, receiver: &Receiver) {
    for n in 0..40 {
        let key = format!("moved-{n}");
        let body = json!({"url": receiver.url("/keyed"), "body": {"k": n}, "delay": "1h"});
        let first = keyed(pb, &body, &key).await;
        let again = keyed(pb, &body, &key).await;
        assert_eq!(again["id"], first["id"], "a repeat of {key}: {again}");
        let other = json!({"url": receiver.url("/keyed"), "body": {"k": -1}, "delay": "1h"});
        let (status, answer) = pb
            .notify_with(other, &[("idempotency-key", key.as_str())])
            .await;
        assert_eq!(status, 422, "another request under {key}: {answer}");
    }
}

/// `POST /notify` with `key`, until it is not `503` (a shard's failover may refuse it
/// for a moment): the answer.
async fn keyed(pb: &Postback, body: &Value, key: &str) -> Value {
    for _ in 0..50 {
        let (status, answer) = pb
            .notify_with(body.clone(), &[("idempotency-key", key)])
            .await;
        if status != 503 {
            assert_eq!(status, 202, "{answer}");
            return answer;
        }
        // A careful producer's pause before it asks again.
        support::pace(Duration::from_millis(100)).await;
    }
    panic!("{key} refused 50 times");
}

/// A registration moved off its key's degraded shard keeps the key there before it is
/// stored elsewhere; when that store fails, the key names a notification that no shard
/// holds. A repeat is answered `503` while that registration may still be under way; once
/// it is over, the key is given up and the next repeat registers the notification (it was
/// answered `503` for the key's whole day). One stored and deleted since is told apart by
/// the key at its own shard, and answered `409` as any key that outlived its notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_left_naming_a_notification_never_stored_is_given_up() {
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, &[("POSTBACK_STORE_SHARDS", "2")]).await;
    let body = json!({"url": receiver.url("/kept"), "body": {"n": 1}, "delay": "1h"});
    let first = keyed(&pb, &body, "order-1").await;
    let id = first["id"].as_str().unwrap();
    let (shard, uuid) = id["ntf_".len()..].split_once('_').unwrap();
    let name = format!("{{postback:{shard}}}:idem:default order-1");
    let kept: String = redis.query(redis::cmd("GET").arg(&name));
    let fingerprint = kept.split_once(' ').unwrap().1;
    let other = 1 - shard.parse::<u8>().unwrap();
    let keep = |named: String| {
        let _: () = redis.query(redis::cmd("SET").arg(&name).arg(named));
    };
    let repeat = || pb.notify_with(body.clone(), &[("idempotency-key", "order-1")]);

    // Named by an id made a moment ago: its registration may still store it.
    keep(format!("ntf_{other}_{uuid} {fingerprint}"));
    for _ in 0..2 {
        let (status, answer) = repeat().await;
        assert_eq!(status, 503, "{answer}");
    }
    // Named by one that the other shard stored (its key there, written with it, names
    // it) and that is gone since: as for any key that outlived its notification.
    let deleted = format!("ntf_{other}_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e {fingerprint}");
    let elsewhere = format!("{{postback:{other}}}:idem:default order-1");
    let _: () = redis.query(redis::cmd("SET").arg(&elsewhere).arg(&deleted));
    keep(deleted.clone());
    let (status, answer) = repeat().await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(
        answer["error"]["code"], "idempotency_key_reused",
        "{answer}"
    );

    // Named by one never stored (no key at its shard) whose registration is over (an id
    // of an earlier build holds no time).
    let _: () = redis.query(redis::cmd("DEL").arg(&elsewhere));
    keep(deleted);
    let (status, answer) = repeat().await;
    assert_eq!(status, 503, "{answer}");
    let (status, again) = repeat().await;
    assert_eq!(status, 202, "{again}");
    assert_ne!(again["id"], first["id"], "registered anew: {again}");
    let (status, third) = repeat().await;
    assert_eq!((status, &third["id"]), (202, &again["id"]), "{third}");
}
