//! Redis through Sentinel (`store.redis_sentinels`): the primary is asked of the
//! sentinels, and when it is killed mid-stream and they promote a replica, the instance
//! follows it without a restart. No registration answered `202` is lost but what
//! asynchronous replication explains (none with `store.replica_acks`), none is sent
//! twice, and registration and delivery go on against the promoted replica. A sentinel
//! that does not answer is named at start-up; when none answers, or none knows the
//! primary's name, the instance refuses to start, naming the key.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use support::load::{self, Answer, Load};
use support::{Postback, Receiver, SentinelGroup, WAIT};

/// What a failover did to the registrations a producer had answered `202`.
#[derive(Debug)]
struct Ledger {
    /// Of them, those answered before both replicas were seen to hold everything the
    /// primary had taken.
    replicated: usize,
    /// Those answered after the sentinels had promoted a replica.
    after_failover: usize,
    lost: usize,
    /// Lost although replicated: none may be.
    lost_replicated: usize,
    sent_twice: usize,
}

/// A producer registers through the sentinels (a silent one listed first); once 20 are
/// stored, the test waits until both replicas hold all the primary has, kills the
/// primary (SIGKILL) while the producer goes on, waits until the sentinels have promoted
/// a replica and the producer has had 25 more accepted, and stops it. Every
/// registration is due 3 s after it was accepted, so that nothing is attempted before
/// the primary dies and no outcome can be lost with it.
async fn failover_ledger(replica_acks: &str) -> Ledger {
    let mut group = SentinelGroup::start();
    let receiver = Receiver::start().await;
    let silent = format!("127.0.0.1:{}", support::free_port());
    let sentinels = format!("{silent},{}", group.addresses());
    let env = [
        ("POSTBACK_STORE_REDIS_SENTINELS", sentinels.as_str()),
        ("POSTBACK_STORE_REPLICA_ACKS", replica_acks),
        ("POSTBACK_STORE_REPLICA_ACK_TIMEOUT", "500ms"),
        // A slow machine may see the sentinels fail over twice, and without replica
        // acknowledgements a claim can outlive the settle that followed it: such a lease
        // ends within the test's wait, not a minute later.
        ("POSTBACK_DELIVERY_TIMEOUT", "2s"),
        ("POSTBACK_DELIVERY_MAX_TIMEOUT", "2s"),
        ("POSTBACK_DELIVERY_LEASE", "7s"),
    ];
    let cwd = tempfile::tempdir().unwrap();
    let pb = Postback::start_in(cwd.path(), &env).await;
    assert!(
        pb.logs().contains(&silent),
        "the silent sentinel is named:\n{}",
        pb.logs()
    );
    let url = receiver.url("/paid");
    let producer = Load::start(
        pb.url("/notify"),
        2,
        Duration::from_millis(5),
        move |n| json!({"url": url, "body": {"n": n}, "delay": "3s"}),
    );
    registered(&pb, 20).await;
    let synced = Instant::now();
    let old = group.primary_port();
    let primary = group.server(old);
    primary.query::<()>(redis::cmd("SET").arg("sentinel-probe").arg(1));
    let held: i64 = primary.query(redis::cmd("WAIT").arg(2).arg(5000));
    assert_eq!(held, 2, "both replicas hold what the primary had");
    group.kill_primary();
    let new = tokio::task::block_in_place(|| group.wait_failover(old));
    let failed_over = Instant::now();
    assert!(
        producer.accepted_more(25).await,
        "registrations go on after the failover:\n{}",
        pb.logs()
    );
    let holds = group.server(new).notification_keys();
    assert!(!holds.is_empty(), "registered on the promoted replica");
    Ledger::after(producer, &receiver, &pb, synced, failed_over).await
}

/// Waits until the instance holds at least `n` scheduled notifications.
async fn registered(pb: &Postback, n: u64) {
    let enough = support::eventually(WAIT, || async {
        pb.get("/stats").await.1["scheduled"].as_u64() >= Some(n)
    })
    .await;
    assert!(
        enough,
        "{n} registered: {:?}\n{}",
        pb.get("/stats").await,
        pb.logs()
    );
}

impl Ledger {
    /// Stops the producer and counts what became of the registrations it had accepted:
    /// `synced` is when everything accepted before was on both replicas, `failed_over`
    /// when the sentinels had promoted a replica.
    async fn after(
        producer: Load,
        receiver: &Receiver,
        pb: &Postback,
        synced: Instant,
        failed_over: Instant,
    ) -> Self {
        let answers = producer.stop().await;
        let other = answers.iter().find(|a| a.status != 202 && a.status != 503);
        assert!(other.is_none(), "only 202 or 503 (retried): {other:?}");
        let accepted: BTreeMap<String, &Answer> = answers
            .iter()
            .filter(|a| a.status == 202)
            .filter_map(|a| Some((a.id.clone()?, a)))
            .collect();
        assert_eq!(accepted.len(), load::accepted(&answers).len());
        // Until every one arrived, or the instance has nothing left to send (what is
        // missing then is lost), and what was not lost has had the time to go twice.
        support::eventually(Duration::from_secs(30), || async {
            let (_, stats) = pb.get("/stats").await;
            let quiet = stats["scheduled"] == 0 && stats["in_flight"] == 0;
            quiet
                || accepted
                    .keys()
                    .all(|id| !receiver.requests_for(id).is_empty())
        })
        .await;
        pb.wait_quiet().await;
        let per_id = receiver.per_id();
        let lost: Vec<&&Answer> = accepted
            .iter()
            .filter(|(id, _)| !per_id.contains_key(*id))
            .map(|(_, a)| a)
            .collect();
        Ledger {
            replicated: accepted.values().filter(|a| a.at < synced).count(),
            after_failover: accepted.values().filter(|a| a.at > failed_over).count(),
            lost: lost.len(),
            lost_replicated: lost.iter().filter(|a| a.at < synced).count(),
            sent_twice: per_id.values().filter(|n| **n > 1).count(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_mid_stream_is_followed_to_the_replica_the_sentinels_promote() {
    let ledger = failover_ledger("0").await;
    println!("through Sentinel, replica_acks = 0: {ledger:?}");
    assert!(ledger.replicated >= 20, "{ledger:?}");
    assert_eq!(ledger.lost_replicated, 0, "{ledger:?}");
    assert_eq!(ledger.sent_twice, 0, "{ledger:?}");
    assert!(
        ledger.after_failover > 0,
        "registrations went on: {ledger:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_ack_no_accepted_registration_is_lost_through_a_sentinel_failover() {
    let ledger = failover_ledger("1").await;
    println!("through Sentinel, replica_acks = 1: {ledger:?}");
    assert!(ledger.replicated >= 20, "{ledger:?}");
    assert_eq!((ledger.lost, ledger.sent_twice), (0, 0), "{ledger:?}");
    assert!(
        ledger.after_failover > 0,
        "registrations went on: {ledger:?}"
    );
}

#[test]
fn sentinels_that_do_not_answer_are_named_and_the_start_refused() {
    let silent: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", support::free_port()))
        .collect();
    let list = silent.join(",");
    let said = Postback::refused_start(&[("POSTBACK_STORE_REDIS_SENTINELS", &list)]);
    assert!(said.contains("store.redis_sentinels"), "{said}");
    for address in &silent {
        assert!(said.contains(address), "{address} named: {said}");
    }
}

/// A failover by hand (`SENTINEL FAILOVER`, before maintenance) demotes the primary to
/// a replica while it still runs: the instance follows the sentinels to the promoted one
/// rather than stay on it. And a primary's name no sentinel knows refuses the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_demoted_by_hand_is_left_and_an_unknown_name_refused() {
    let group = SentinelGroup::start();
    let said = Postback::refused_start(&[
        ("POSTBACK_STORE_REDIS_SENTINELS", &group.addresses()),
        ("POSTBACK_STORE_REDIS_MASTER_NAME", "elsewhere"),
    ]);
    assert!(
        said.contains("store.redis_master_name") && said.contains("elsewhere"),
        "{said}"
    );
    let pb = Postback::start_on_sentinels(&group, &[]).await;
    let receiver = Receiver::start().await;
    let first = pb
        .register(json!({"url": receiver.url("/before"), "body": {}}))
        .await;
    pb.wait_state(&first, "delivered", WAIT).await;

    let old = group.primary_port();
    group.fail_over_by_hand();
    let new = tokio::task::block_in_place(|| group.wait_failover(old));
    // The old primary takes writes until the sentinels turn it into a replica; the
    // instance leaves it as soon as one announces the switch.
    let moved =
        support::eventually(WAIT, || async { pb.logs().contains("the primary moved") }).await;
    assert!(moved, "{}", pb.logs());
    let client = reqwest::Client::new();
    let body = json!({"url": receiver.url("/after"), "body": {}, "delay": "200ms"});
    let answers = load::register(&client, &pb.url("/notify"), &body, "after-failover").await;
    let after = answers.last().unwrap().id.clone().unwrap();
    pb.wait_state(&after, "delivered", WAIT).await;
    let (status, _) = pb.get(&format!("/notifications/{first}")).await;
    assert_eq!(status, 200, "what the old primary had is on the new one");
    let on_new: bool = group
        .server(new)
        .query(redis::cmd("HEXISTS").arg("{postback:0}:jobs").arg(&after));
    assert!(on_new, "registered on the promoted replica:\n{}", pb.logs());
}
