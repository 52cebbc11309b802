//! `store.replica_acks`: a registration, a replay, a cancel or a discard is answered only
//! once a replica of its shard's primary holds it, so that a failover loses no `202`;
//! a replica that does not answer in time gets the producer a `503` it can retry with
//! the same key; `/readyz`, `/stats` and the metrics say how the primary is replicated.
//! On a primary and a replica (standalone, reached through an address a failover moves)
//! and on a cluster with a replica per primary.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use support::load::{self, Load};
use support::proxy::Proxy;
use support::{Postback, Receiver, RedisCluster, RedisServer, WAIT};

/// One replica, and time enough for it on a machine busy with other tests.
const ACKS_OF_ONE: [(&str, &str); 2] = [
    ("POSTBACK_STORE_REPLICA_ACKS", "1"),
    ("POSTBACK_STORE_REPLICA_ACK_TIMEOUT", "2s"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_replica_acknowledged_is_answered_503_and_its_retry_registers_once() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let receiver = Receiver::start().await;
    let pb = Postback::start(&primary, &ACKS_OF_ONE).await;
    let body = json!({"url": receiver.url("/paid"), "body": {"order": 2}});
    let key = [("Idempotency-Key", "order-2")];

    let later = pb
        .register(json!({"url": receiver.url("/later"), "body": {}, "delay": "1h"}))
        .await;
    replica.freeze();
    let asked = Instant::now();
    let resp = pb
        .http
        .post(pb.url("/notify"))
        .bearer_auth(support::instance::TOKEN)
        .header("Idempotency-Key", "order-2")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let refused: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "replica_ack_timeout", "{refused}");
    assert!(
        asked.elapsed() >= Duration::from_secs(2),
        "waited for the replica"
    );
    let later_path = format!("/notifications/{later}");
    let cancel_later = || pb.request(Method::DELETE, &later_path, None, &[]);
    let (status, cancel) = cancel_later().await;
    assert_eq!(status, 503, "a cancel waits for the replica too: {cancel}");

    replica.thaw();
    let (status, _) = cancel_later().await;
    assert_eq!(status, 200, "cancelled once the replica answers");
    let (status, first) = pb.notify_with(body.clone(), &key).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = pb.notify_with(body, &key).await;
    assert_eq!((status, &again["id"]), (202, &first["id"]), "{again}");
    let id = first["id"].as_str().unwrap();
    pb.wait_state(id, "delivered", WAIT).await;
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1, "registered once, sent once");
    let (_, stats) = pb.get("/stats").await;
    assert_eq!(stats["scheduled"], 0, "{stats}");
    assert_eq!(stats["finished"], 2, "{stats}");
    let (_, metrics) = pb.get_text("/metrics").await;
    let timeouts = support::metric_value(&metrics, "postback_replica_ack_timeouts_total");
    assert_eq!(timeouts, Some(2.0), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_replicas_asked_for_and_stats_show_them() {
    let primary = RedisServer::start();
    let pb = Postback::start(&primary, &ACKS_OF_ONE).await;
    assert!(
        pb.logs().contains("store.replica_acks"),
        "start-up says what is missing: {}",
        pb.logs()
    );
    let (status, ready) = pb.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["error"]["code"], "replicas_missing", "{ready}");
    assert!(
        ready["error"]["message"]
            .as_str()
            .unwrap()
            .contains("0 of the 1"),
        "{ready}"
    );
    // The operator's overview says which shard and why; a tenant's does not.
    let (_, overview) = pb.get("/overview").await;
    let degraded = &overview["degraded_shards"][0];
    assert_eq!(degraded["shard"], 0, "{overview}");
    assert!(
        degraded["reason"].as_str().unwrap().contains("0 of the 1"),
        "{overview}"
    );
    let (_, stats) = pb.get("/stats").await;
    assert_eq!(stats["degraded_shards"][0]["shard"], 0, "{stats}");
    let (_, of_a_tenant) = pb.get("/overview?tenant=default").await;
    assert!(
        of_a_tenant.get("degraded_shards").is_some(),
        "a token of every tenant sees it: {of_a_tenant}"
    );

    let _replica = RedisServer::start_replica_of(&primary);
    let ready = support::eventually(WAIT, || async { pb.get("/readyz").await.0 == 200 }).await;
    assert!(ready, "ready once its replica is there");
    let (_, overview) = pb.get("/overview").await;
    assert!(overview.get("degraded_shards").is_none(), "{overview}");
    let (_, stats) = pb.get("/stats").await;
    assert_eq!(stats["replication"][0]["replicas"], 1, "{stats}");
    assert!(stats["replication"][0]["lag_bytes"].is_u64(), "{stats}");
    let (_, metrics) = pb.get_text("/metrics").await;
    let connected = support::metric_value(&metrics, r#"postback_replicas_connected{shard="0"}"#);
    assert_eq!(connected, Some(1.0), "{metrics}");
}

/// What a failover did to the registrations a producer had answered `202`.
#[derive(Debug, PartialEq)]
struct Ledger {
    accepted: usize,
    delivered: usize,
    lost: usize,
    sent_twice: usize,
}

/// A producer registers through an address a failover moves; the replica is cut off
/// from the primary for a second, the primary is killed, and the replica is promoted,
/// takes the address and gets a replica of its own. Every registration is due 3 s after it was
/// accepted, so that nothing is sent before the failover.
async fn failover_ledger(replica_acks: &str) -> Ledger {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let address = Proxy::start(primary.port).await;
    let receiver = Receiver::start().await;
    let env = [
        ("POSTBACK_STORE_REDIS_URL", address.url()),
        ("POSTBACK_STORE_REPLICA_ACKS", replica_acks.to_string()),
        ("POSTBACK_STORE_REPLICA_ACK_TIMEOUT", "200ms".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cwd = tempfile::tempdir().unwrap();
    let pb = Postback::start_in(cwd.path(), &env).await;
    let url = receiver.url("/paid");
    let producer = Load::start(
        pb.url("/notify"),
        2,
        Duration::from_millis(5),
        move |n| json!({"url": url, "body": {"n": n}, "delay": "3s"}),
    );
    registered(&pb, 20).await;
    // The replica stops (and cannot reconnect) and the primary drops its link: what the
    // primary takes from now on, no replica has.
    replica.freeze();
    primary.query::<()>(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"));
    assert!(producer.answered_more(10).await, "answered while cut off");
    primary.stop();
    replica.thaw();
    replica.promote();
    address.point_to(replica.port);
    // The new primary gets a replica of its own, as an operator (or Sentinel) gives it.
    let _new_replica = RedisServer::start_replica_of(&replica);
    assert!(
        producer.accepted_more(10).await,
        "accepted after the failover"
    );
    Ledger::after(producer, &receiver, &pb).await
}

/// Waits until the instance holds at least `n` notifications.
async fn registered(pb: &Postback, n: u64) {
    let enough = support::eventually(WAIT, || async {
        pb.get("/stats").await.1["scheduled"].as_u64() >= Some(n)
    })
    .await;
    assert!(enough, "{n} registered: {:?}", pb.get("/stats").await);
}

impl Ledger {
    /// Stops the producer and counts what became of the registrations it had accepted.
    async fn after(producer: Load, receiver: &Receiver, pb: &Postback) -> Self {
        let answers = producer.stop().await;
        let accepted: BTreeSet<String> = load::accepted(&answers).into_iter().collect();
        // Until every one arrived, or the instance has nothing left to send (what is
        // missing then is lost), and what was not lost has had the time to go twice.
        support::eventually(Duration::from_secs(30), || async {
            let (_, stats) = pb.get("/stats").await;
            let quiet = stats["scheduled"] == 0 && stats["in_flight"] == 0;
            quiet
                || accepted
                    .iter()
                    .all(|id| !receiver.requests_for(id).is_empty())
        })
        .await;
        pb.wait_quiet().await;
        let per_id = receiver.per_id();
        let (delivered, lost): (Vec<_>, Vec<_>) =
            accepted.iter().partition(|id| per_id.contains_key(*id));
        Ledger {
            accepted: accepted.len(),
            delivered: delivered.len(),
            lost: lost.len(),
            sent_twice: per_id.values().filter(|n| **n > 1).count(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_ack_no_accepted_registration_is_lost_in_a_failover() {
    let acked = failover_ledger("1").await;
    println!("replica_acks = 1: {acked:?}");
    assert!(acked.accepted >= 10, "{acked:?}");
    assert_eq!((acked.lost, acked.sent_twice), (0, 0), "{acked:?}");

    // Beside it, the same run answered by the primary alone loses what the replica had
    // not applied when the primary died.
    let unacked = failover_ledger("0").await;
    println!("replica_acks = 0: {unacked:?}");
    assert!(unacked.lost > 0, "{unacked:?}");
    assert_eq!(unacked.sent_twice, 0, "{unacked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_registration_waits_for_the_replica_of_its_shard() {
    let cluster = RedisCluster::start(3, 1);
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_cluster(&cluster, &ACKS_OF_ONE).await;
    let ready = support::eventually(WAIT, || async { pb.get("/readyz").await.0 == 200 }).await;
    assert!(
        ready,
        "every primary has its replica: {:?}",
        pb.get("/readyz").await
    );
    // Right after a first sync a replica can take a second to acknowledge: a careful
    // producer retries a 503 with its key.
    let client = reqwest::Client::new();
    let registrations = (0..24).map(|n| {
        let body = json!({"url": receiver.url("/c"), "body": {"n": n}});
        let (client, url) = (&client, pb.url("/notify"));
        async move { load::register(client, &url, &body, &format!("c-{n}")).await }
    });
    let answers = futures_util::future::join_all(registrations).await;
    let ids: Vec<String> = answers
        .iter()
        .map(|a| a.last().unwrap().id.clone().unwrap())
        .collect();
    assert!(receiver.wait_for(24, WAIT).await);
    for id in &ids {
        assert_eq!(receiver.requests_for(id).len(), 1, "{id}");
    }
    // Each shard's primary is seen with its replica. (Under load a node can miss the
    // cluster's 1 s node timeout and swap places with its replica, which then has none
    // for a moment until the old primary rejoins as its replica.)
    let replicated = support::eventually(WAIT, || async {
        let (_, stats) = pb.get("/stats").await;
        let shards = stats["replication"].as_array().cloned().unwrap_or_default();
        shards.len() == 12 && shards.iter().all(|s| s["replicas"] == 1)
    })
    .await;
    assert!(replicated, "{}", pb.get("/stats").await.1);
}

/// A producer registers on a cluster of 3 primaries with 2 replicas each (once one has
/// taken over, the other replicates it, so that writes to its shard are acknowledged
/// again), and the primary of shard 0 is killed mid-stream.
async fn cluster_failover_ledger(replica_acks: &str) -> Ledger {
    let mut cluster = RedisCluster::start(3, 2);
    let receiver = Receiver::start().await;
    let env = [
        ("POSTBACK_STORE_REPLICA_ACKS", replica_acks),
        ("POSTBACK_STORE_REPLICA_ACK_TIMEOUT", "500ms"),
    ];
    let pb = Postback::start_on_cluster(&cluster, &env).await;
    let ready = support::eventually(WAIT, || async { pb.get("/readyz").await.0 == 200 }).await;
    assert!(ready, "{:?}", pb.get("/readyz").await);
    let url = receiver.url("/paid");
    let producer = Load::start(
        pb.url("/notify"),
        2,
        Duration::from_millis(5),
        move |n| json!({"url": url, "body": {"n": n}, "delay": "5s"}),
    );
    registered(&pb, 20).await;
    let victim = cluster.primary_of("{postback:0}", 0);
    cluster.kill(victim);
    tokio::task::block_in_place(|| cluster.wait_failover("{postback:0}", victim));
    assert!(
        producer.accepted_more(10).await,
        "accepted after the failover"
    );
    Ledger::after(producer, &receiver, &pb).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_no_accepted_registration_is_lost_when_a_primary_dies() {
    let acked = cluster_failover_ledger("1").await;
    println!("cluster, replica_acks = 1: {acked:?}");
    assert!(acked.accepted >= 10, "{acked:?}");
    assert_eq!((acked.lost, acked.sent_twice), (0, 0), "{acked:?}");

    // Beside it, the same run answered by the primaries alone: what it lost, if anything
    // (only what the killed primary had not yet sent on).
    let unacked = cluster_failover_ledger("0").await;
    println!("cluster, replica_acks = 0: {unacked:?}");
    assert_eq!(unacked.sent_twice, 0, "{unacked:?}");
}

/// `store.fsync_acks` waits for the append-only file's fsync (`WAITAOF`, Redis 7.2 and
/// later): a server without it is refused at start-up by name, one with it answers once
/// its file is fsynced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_acks_need_a_redis_that_has_waitaof() {
    let redis = RedisServer::start_persistent("everysec");
    let known: Vec<redis::Value> = redis.query(redis::cmd("COMMAND").arg("INFO").arg("WAITAOF"));
    let fsync = [("POSTBACK_STORE_FSYNC_ACKS", "true")];
    if known.first().is_none_or(|c| *c == redis::Value::Nil) {
        let url = redis.url();
        let said = Postback::refused_start(&[("POSTBACK_STORE_REDIS_URL", &url), fsync[0]]);
        assert!(
            said.contains("store.fsync_acks") && said.contains("WAITAOF"),
            "{said}"
        );
        return;
    }
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, &fsync).await;
    let id = pb
        .register(json!({"url": receiver.url("/fsynced"), "body": {}}))
        .await;
    pb.wait_state(&id, "delivered", WAIT).await;
}
