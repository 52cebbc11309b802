//! Ordered delivery per key (`ordering_key` on `POST /notify`, within the tenant):
//! notifications with the same key are attempted one at a time, in registration order;
//! a retry holds only its own key; a dead head releases the rest, and its replay goes to
//! the back; the order survives a `kill -9`. On every backend (`scripts/test.sh`).

use crate::support;

use std::ops::Range;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{tenants, Backend, Postback, Receiver};

/// The `seq` of each request's body that arrived for `key`, in arrival order, with its
/// time since `start` (ms) and whether it was answered with a failure (`fail=` in its
/// URL, first attempts only; see the receiver).
fn arrivals_of_key(receiver: &Receiver, key: &str, start: Instant) -> Vec<(u64, u128)> {
    receiver
        .requests()
        .into_iter()
        .filter_map(|r| {
            let body: Value = serde_json::from_slice(&r.body).ok()?;
            (body["key"] == key).then(|| {
                let seq = body["seq"].as_u64().unwrap();
                (seq, r.at.saturating_duration_since(start).as_millis())
            })
        })
        .collect()
}

fn seqs(log: &[(u64, u128)]) -> Vec<u64> {
    log.iter().map(|(s, _)| *s).collect()
}

/// Registers notifications on `key` with each `seq` of `seqs`, `seq` 0 at `first_url`.
async fn register_sequence(
    pb: &Postback,
    receiver: &Receiver,
    key: &str,
    seqs: Range<u64>,
    first_url: &str,
    schedule: &Value,
) -> Vec<String> {
    let mut ids = Vec::new();
    for seq in seqs {
        let url = match seq {
            0 => receiver.url(first_url),
            _ => receiver.url("/ok"),
        };
        let body = json!({"url": url, "body": {"key": key, "seq": seq},
            "ordering_key": key, "schedule": schedule});
        ids.push(pb.register(body).await);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_on_one_key_arrive_in_order_while_other_keys_flow_beside_them() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(&[]).await;
    let start = Instant::now();
    let schedule = json!(["600ms", "600ms", "600ms"]);
    let mut ordered =
        register_sequence(&pb, &receiver, "a", 0..2, "/first?fail=2", &schedule).await;

    // While the head retries, the rest of its key waits, scheduled with no time of its own.
    let waiting = pb.notification(&ordered[1]).await;
    assert_eq!(waiting["state"], "scheduled", "{waiting}");
    assert_eq!(waiting["ordering_key"], "a");
    assert_eq!(waiting["waiting"], true, "{waiting}");
    assert_eq!(waiting["next_attempt_at"], Value::Null, "{waiting}");

    let default = json!("default");
    let beside = register_sequence(&pb, &receiver, "b", 0..5, "/ok", &default).await;
    let mut unordered = Vec::new();
    for seq in 0..20 {
        let body = json!({"url": receiver.url("/ok"), "body": {"key": "none", "seq": seq}});
        unordered.push(pb.register(body).await);
    }
    ordered.extend(register_sequence(&pb, &receiver, "a", 2..50, "/ok", &schedule).await);

    for id in ordered.iter().chain(&beside).chain(&unordered) {
        pb.wait_state(id, "delivered", Duration::from_secs(30))
            .await;
    }
    let log = arrivals_of_key(&receiver, "a", start);
    eprintln!("arrivals of key a (seq, ms since the first registration): {log:?}");
    let mut expected = vec![0, 0];
    expected.extend(0..50);
    assert_eq!(seqs(&log), expected, "strictly in registration order");
    assert_eq!(pb.notification(&ordered[0]).await["attempts"], 3);

    // Another key's notifications and unordered ones went while `a`'s head was retrying.
    let head_delivered = log[2].1;
    for other in ["b", "none"] {
        let others = arrivals_of_key(&receiver, other, start);
        let last = others.iter().map(|(_, at)| *at).max().unwrap();
        assert!(
            last < head_delivered,
            "{other}'s last arrived at {last} ms, before a's head was delivered at {head_delivered} ms"
        );
    }
    assert_eq!(
        seqs(&arrivals_of_key(&receiver, "b", start)),
        (0..5).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_releases_the_rest_and_its_replay_goes_to_the_back() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(&[]).await;
    let start = Instant::now();
    let ids = register_sequence(
        &pb,
        &receiver,
        "k",
        0..4,
        "/first?fail=9",
        &json!(["100ms"]),
    )
    .await;
    pb.wait_state(&ids[0], "dead", Duration::from_secs(10))
        .await;
    for id in &ids[1..] {
        pb.wait_state(id, "delivered", Duration::from_secs(10))
            .await;
    }

    // One more on the key, due in 1 s; the replayed head goes behind it.
    let later = json!({"url": receiver.url("/ok"), "body": {"key": "k", "seq": 4},
        "ordering_key": "k", "delay": "1s"});
    let fifth = pb.register(later).await;
    let replay = json!({"url": receiver.url("/ok")});
    let (status, answer) = pb
        .request(
            reqwest::Method::POST,
            &format!("/dead-letters/{}/replay", ids[0]),
            Some(replay),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(pb.notification(&ids[0]).await["waiting"], true);
    pb.wait_state(&ids[0], "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(pb.notification(&fifth).await["state"], "delivered");
    let log = arrivals_of_key(&receiver, "k", start);
    eprintln!("arrivals of key k: {log:?}");
    assert_eq!(seqs(&log), vec![0, 0, 1, 2, 3, 4, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_notification_leaves_its_place_to_the_next() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(&[]).await;
    let mut ids = Vec::new();
    for (seq, delay) in [(0, "800ms"), (1, "0s"), (2, "0s")] {
        let body = json!({"url": receiver.url("/ok"), "body": {"key": "c", "seq": seq},
            "ordering_key": "c", "delay": delay});
        ids.push(pb.register(body).await);
    }
    let (status, _) = pb
        .request(
            reqwest::Method::DELETE,
            &format!("/notifications/{}", ids[1]),
            None,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    // The head keeps its own delay: the one behind it is not sent first.
    support::sent_after(&pb, "0s").await;
    assert_eq!(receiver.count(), 0, "nothing goes before the head is due");
    pb.wait_state(&ids[2], "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(pb.notification(&ids[1]).await["state"], "cancelled");
    let log = arrivals_of_key(&receiver, "c", Instant::now());
    assert_eq!(seqs(&log), vec![0, 2]);
}

/// A head with one attempt only (an empty schedule), cancelled before it is due, lets
/// the next of its key go: what the store reads of a notification's key (its spec's
/// first line, where the empty schedule is an empty word) is its key whatever its
/// schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_head_with_one_attempt_only_lets_the_next_go() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(&[]).await;
    let mut ids = Vec::new();
    for (seq, delay) in [(0, "1h"), (1, "0s")] {
        let body = json!({"url": receiver.url("/ok"), "body": {"key": "e", "seq": seq},
            "ordering_key": "e", "delay": delay, "schedule": []});
        ids.push(pb.register(body).await);
    }
    assert_eq!(pb.notification(&ids[1]).await["waiting"], true);
    let path = format!("/notifications/{}", ids[0]);
    let (status, _) = pb.request(reqwest::Method::DELETE, &path, None, &[]).await;
    assert_eq!(status, 200);
    pb.wait_state(&ids[1], "delivered", Duration::from_secs(10))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_in_two_tenants_is_two_keys() {
    let fleet = tenants::start(&[]).await;
    let start = Instant::now();
    let url = |path: &str| fleet.receiver.url(path);
    // shop-a's head of `same` keeps failing; shop-b's `same` is another key.
    let body = |tenant: &str, seq: u64, path: &str| {
        json!({"url": url(path), "body": {"key": tenant, "seq": seq},
            "ordering_key": "same", "schedule": ["2s"]})
    };
    let a_head = fleet
        .register("tok-checkout-a", body("shop-a", 0, "/first?fail=9"))
        .await;
    let a_next = fleet
        .register("tok-checkout-a", body("shop-a", 1, "/ok"))
        .await;
    let b_ids = [
        fleet.register("tok-all-b", body("shop-b", 0, "/ok")).await,
        fleet.register("tok-all-b", body("shop-b", 1, "/ok")).await,
    ];
    for id in &b_ids {
        fleet.pb.wait_state(id, "delivered", tenants::WAIT).await;
    }
    assert_eq!(
        seqs(&arrivals_of_key(&fleet.receiver, "shop-b", start)),
        vec![0, 1]
    );
    // shop-a's head may be claimed after shop-b's went (another shard on a cluster): once
    // it has failed once, and until its retry 2 s later, the next of its key waits.
    let head_failed = support::eventually(tenants::WAIT, || async {
        fleet.pb.notification(&a_head).await["attempts"] == 1
    })
    .await;
    assert!(head_failed, "{}", fleet.pb.notification(&a_head).await);
    let (_, a) = fleet
        .get("tok-reader-a", &format!("/notifications/{a_next}"))
        .await;
    assert_eq!(
        (&a["state"], &a["waiting"]),
        (&json!("scheduled"), &json!(true)),
        "{a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_sequence_keeps_the_order() {
    let settings = [
        ("POSTBACK_DELIVERY_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_MAX_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_LEASE", "6s"),
    ];
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let mut first = backend.postback(&settings).await;
    let start = Instant::now();
    let mut ids = Vec::new();
    for seq in 0..30 {
        let body = json!({"url": receiver.url("/slow?sleep_ms=40"), "body": {"key": "x", "seq": seq},
            "ordering_key": "x"});
        ids.push(first.register(body).await);
    }
    assert!(receiver.wait_for(8, Duration::from_secs(20)).await);
    first.kill();
    let at_kill = receiver.count();
    assert!(
        at_kill < 30,
        "killed mid-sequence ({at_kill} of 30 had arrived)"
    );

    let second = backend.postback(&settings).await;
    for id in &ids {
        second
            .wait_state(id, "delivered", Duration::from_secs(30))
            .await;
    }
    let log = seqs(&arrivals_of_key(&receiver, "x", start));
    eprintln!("arrivals of key x, killed after {at_kill}: {log:?}");
    // An attempt in flight (or not yet recorded) at the kill is made again: a repeat of
    // the latest, never one out of turn.
    assert!(log.windows(2).all(|w| w[0] <= w[1]), "in order: {log:?}");
    let mut distinct = log.clone();
    distinct.dedup();
    assert_eq!(distinct, (0..30).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_bad_ordering_key_is_refused_naming_the_field() {
    let backend = Backend::start();
    let pb = backend.postback(&[]).await;
    for bad in [
        json!(""),
        json!("has space"),
        json!("x".repeat(201)),
        json!(7),
    ] {
        let body = json!({"url": "http://127.0.0.1:9/x", "body": {}, "ordering_key": bad});
        let (status, answer) = pb.notify(body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], "ordering_key", "{answer}");
    }
    assert!(backend.holds_nothing(&pb).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_items_on_one_key_keep_their_order_in_the_batch() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(&[]).await;
    let start = Instant::now();
    let items = (0..20)
        .map(|seq| {
            let url = receiver.url(if seq == 0 { "/first?fail=1" } else { "/ok" });
            json!({"url": url, "body": {"key": "batch", "seq": seq}, "ordering_key": "batch",
                "schedule": ["100ms"]})
        })
        .collect();
    let ids = pb.register_batch(items).await;
    for id in &ids {
        pb.wait_state(id, "delivered", Duration::from_secs(10))
            .await;
    }
    let mut expected = vec![0];
    expected.extend(0..20);
    assert_eq!(seqs(&arrivals_of_key(&receiver, "batch", start)), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_whose_turn_came_late_is_due_at_its_turn_not_late_by_its_wait() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(&[]).await;
    // The head fails once and is retried 2 s later; the one behind it, due at once,
    // waits for those 2 s and is then due at its turn.
    let ids = register_sequence(&pb, &receiver, "t", 0..2, "/first?fail=1", &json!(["2s"])).await;
    for id in &ids {
        pb.wait_state(id, "delivered", Duration::from_secs(15))
            .await;
    }
    let lateness = "postback_scheduler_lateness_seconds";
    let attempts = pb.metric(&format!("{lateness}_count")).await;
    assert_eq!(
        attempts,
        Some(3.0),
        "the head's two attempts and the next one's"
    );
    let late = pb.metric(&format!("{lateness}_sum")).await.unwrap();
    assert!(
        late < 1.0,
        "{late} s late in all: the wait behind the head counted as lateness"
    );
}
