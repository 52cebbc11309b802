//! The delivery policy as the whole fleet keeps it: a rate key's quota is reserved in
//! the store, so that one instance reaches it and several together never exceed it, a
//! notification over quota is deferred once to its reserved time, and a `Retry-After`
//! one instance heard holds back every other.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{errors, Postback, Receiver};

use support::LONG_WAIT as WAIT;

/// The most arrivals within any one second (a window starting at each arrival).
fn busiest_second(mut arrivals: Vec<Instant>) -> usize {
    arrivals.sort();
    (0..arrivals.len())
        .map(|i| {
            arrivals[i..]
                .iter()
                .take_while(|t| t.duration_since(arrivals[i]) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Arrival times of the receiver's requests to `path`, oldest first.
fn arrivals(receiver: &Receiver, path: &str) -> Vec<Instant> {
    let mut at: Vec<Instant> = receiver
        .requests()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| r.at)
        .collect();
    at.sort();
    at
}

/// Registers `n` notifications of the rate key `key`, each due in a second.
async fn register_rate_limited(
    pb: &Postback,
    receiver: &Receiver,
    n: usize,
    key: &str,
) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let body = json!({"url": receiver.url(&format!("/{key}")), "body": {}, "rate_key": key, "delay": "1s"});
        ids.push(pb.register(body).await);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_key_is_sent_at_its_quota_and_each_notification_deferred_at_most_once() {
    let (_backend, receiver, pb) = support::start_any(&[("POSTBACK_QUOTAS_SHOP", "40/s")]).await;
    let ids = register_rate_limited(&pb, &receiver, 120, "shop").await;
    for id in &ids {
        let n = pb.wait_state(id, "delivered", WAIT).await;
        assert_eq!(n["attempts"], 1, "a deferral is not an attempt: {n}");
    }
    let at = arrivals(&receiver, "/shop");
    assert_eq!(at.len(), 120, "each delivered once");
    // Send times are reserved 25 ms apart; a stall of a busy machine (the receiver's or
    // postback's, of up to 150 ms) delivers the ones it held up together, so a second
    // may see a few more, but the whole run never goes faster than the quota.
    let busiest = busiest_second(at.clone());
    assert!(busiest <= 46, "{busiest} in one second, over 40/s");
    let span = at[119].duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(2_975 - 150),
        "119 intervals of 25 ms in {span:?}"
    );
    let achieved = 119.0 / span.as_secs_f64() / 40.0;
    assert!(achieved >= 0.9, "{achieved:.2} of the quota in {span:?}");
    let deferred = pb
        .metric(r#"postback_deferrals_total{reason="rate_limit"}"#)
        .await
        .expect("the rate_limit deferrals are served");
    assert!(
        deferred <= 120.0,
        "{deferred} deferrals for 120 notifications"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_allowance_lets_that_many_go_at_once_then_spaces_the_rest() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_QUOTAS_SHOP", "10/s"),
        ("POSTBACK_DELIVERY_BURST", "5"),
    ])
    .await;
    let ids = register_rate_limited(&pb, &receiver, 15, "shop").await;
    for id in &ids {
        pb.wait_state(id, "delivered", WAIT).await;
    }
    let at = arrivals(&receiver, "/shop");
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // Spaced at the quota, the first five would span 400 ms; together, a few ms. The
    // bound between leaves room for a busy machine's stall.
    assert!(
        at[4] - at[0] < Duration::from_millis(250),
        "the first five go at once: {gaps:?}"
    );
    assert!(
        gaps[5..].iter().all(|g| *g >= Duration::from_millis(60)),
        "the rest one every 100 ms: {gaps:?}"
    );
    assert!(busiest_second(at) <= 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_a_store_share_one_quota() {
    let backend = support::Backend::start();
    if !backend.is_shared() {
        return;
    }
    let receiver = Receiver::start().await;
    let env = [("POSTBACK_QUOTAS_SHOP", "30/s")];
    let a = backend.postback(&env).await;
    let b = backend.postback(&env).await;
    let c = backend.postback(&env).await;
    let mut ids = register_rate_limited(&a, &receiver, 45, "shop").await;
    ids.extend(register_rate_limited(&b, &receiver, 45, "shop").await);
    for id in &ids {
        c.wait_state(id, "delivered", WAIT).await;
    }
    let at = arrivals(&receiver, "/shop");
    assert_eq!(at.len(), 90);
    let busiest = busiest_second(at.clone());
    // The fleet reserves at most 30 send times in any second; a sender the machine
    // stalls for a moment sends late, next to the one after it, so a receiver may count
    // a few more in its busiest second.
    assert!(
        busiest <= 34,
        "{busiest} in one second over three instances, over 30/s"
    );
    let span = at[89].duration_since(at[0]);
    let achieved = 89.0 / span.as_secs_f64() / 30.0;
    assert!(achieved >= 0.9, "{achieved:.2} of the quota in {span:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_one_instance_heard_holds_back_another() {
    let backend = support::Backend::start();
    if !backend.is_shared() {
        return;
    }
    let receiver = Receiver::start().await;
    let mut first = backend.postback(&[]).await;
    first
        .register(json!({"url": receiver.url("/l?fail=1&status=429&retry_after=2"), "body": {}, "schedule": ["100ms"], "rate_key": "shop"}))
        .await;
    assert!(receiver.wait_for(1, WAIT).await);
    let asked = receiver.requests()[0].at;
    first.terminate();
    let second = backend.postback(&[]).await;
    let sibling = second
        .register(json!({"url": receiver.url("/s"), "body": {}, "rate_key": "shop"}))
        .await;
    let n = second.wait_state(&sibling, "delivered", WAIT).await;
    assert_eq!(n["attempts"], 1, "waiting is not an attempt");
    let sent = receiver.requests_for(&sibling)[0].at;
    assert!(
        sent - asked >= Duration::from_millis(1900),
        "sent {:?} after the Retry-After of 2s",
        sent - asked
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_is_kept_per_endpoint_not_per_host() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "1h"),
    ])
    .await;
    for _ in 0..3 {
        let id = pb
            .register(
                json!({"url": receiver.url("/shop-a/hook?fail=9"), "body": {}, "schedule": []}),
            )
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
    }
    let same = pb
        .register(json!({"url": receiver.url("/shop-a/hook"), "body": {}, "schedule": ["1h"]}))
        .await;
    let beside = pb
        .register(json!({"url": receiver.url("/shop-b/hook"), "body": {}}))
        .await;
    let n = pb.wait_state(&beside, "delivered", WAIT).await;
    assert_eq!(
        n["attempts"], 1,
        "another merchant's path on the host goes on"
    );
    assert!(
        support::eventually(WAIT, || async {
            errors(&pb.notification(&same).await) == ["circuit_open"]
        })
        .await
    );
    let held = pb.notification(&same).await;
    assert_eq!(held["attempts"], 0, "held back, no attempt counted: {held}");
    assert_eq!(held["history"][0]["kind"], "circuit_wait");
    assert!(receiver.requests_for(&same).is_empty());
    let (_, metrics) = pb.get_text("/metrics").await;
    assert!(
        metrics.contains("\npostback_circuits_open 1\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("postback_circuit_open{"),
        "no endpoint labels unless metrics.host_labels: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_opened_through_one_instance_holds_back_on_the_others() {
    let backend = support::Backend::start();
    if !backend.is_shared() {
        return;
    }
    let receiver = Receiver::start().await;
    let env = [
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "4"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "1h"),
    ];
    let a = backend.postback(&env).await;
    let b = backend.postback(&env).await;
    for pb in [&a, &b, &a, &b] {
        let id = pb
            .register(json!({"url": receiver.url("/down?fail=9"), "body": {}, "schedule": []}))
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
    }
    let learnt = support::eventually(WAIT, || async {
        let open = "postback_circuits_open";
        a.metric(open).await == Some(1.0) && b.metric(open).await == Some(1.0)
    });
    assert!(learnt.await, "each instance opened the circuit");
    let mut ids = Vec::new();
    for pb in [&a, &b, &a, &b] {
        let body = json!({"url": receiver.url("/down"), "body": {}, "schedule": ["1h"]});
        ids.push(pb.register(body).await);
    }
    for id in &ids {
        assert!(
            support::eventually(WAIT, || async {
                errors(&a.notification(id).await) == ["circuit_open"]
            })
            .await
        );
        let held = a.notification(id).await;
        assert_eq!(held["attempts"], 0, "held back, no attempt counted: {held}");
        assert_eq!(held["history"][0]["kind"], "circuit_wait");
    }
    assert_eq!(
        receiver.count(),
        4,
        "the fleet sent breaker_failures requests, no more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_attempt_of_a_schedule_is_a_real_request_while_the_circuit_is_open() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "2"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "1s"),
    ])
    .await;
    let id = pb
        .register(json!({"url": receiver.url("/down?fail=9"), "body": {}, "schedule": ["100ms", "100ms"]}))
        .await;
    let dead = pb.wait_state(&id, "dead", WAIT).await;
    let errs = errors(&dead);
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert_eq!(
        dead["history"][2]["status"], 500,
        "the last one was sent: {dead}"
    );
    assert_eq!(receiver.requests_for(&id).len(), 3);
}
