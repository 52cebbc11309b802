//! An endpoint's open circuit holds its notifications back without spending their
//! schedule: no request, no attempt counted, one note in the history for the wait; they
//! go when the circuit lets a request through, and one whose endpoint never recovers is
//! dead at its deadline (its start, delay and whole schedule).

use crate::support;

use serde_json::{json, Value};
use support::{Postback, Receiver};

use support::LONG_WAIT as WAIT;

/// The `kind` of each entry of a notification's history, oldest first.
fn kinds(n: &Value) -> Vec<String> {
    n["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn ms(time: &Value) -> i64 {
    let at = humantime::parse_rfc3339(time.as_str().unwrap()).unwrap();
    at.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Opens the circuit of `url`'s endpoint: `failures` notifications to it that die at
/// their only attempt.
pub async fn open_circuit(pb: &Postback, url: &str, failures: usize) {
    for _ in 0..failures {
        let id = pb
            .register(json!({"url": url, "body": {}, "schedule": []}))
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_spends_no_tier_and_what_it_held_back_goes_once_it_closes() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "3s"),
    ])
    .await;
    let clock = Receiver::start().await;
    receiver.set_down(true);
    let url = receiver.url("/shop");
    open_circuit(&pb, &url, 3).await;

    // Four tiers would have been spent by the time the clock ticks.
    let tiers = json!(["200ms", "200ms", "200ms", "200ms", "10s"]);
    let mut held = Vec::new();
    for n in 0..3 {
        let body = json!({"url": url, "body": {"n": n}, "schedule": tiers});
        held.push(pb.register(body).await);
    }
    // Delivered once their first tiers have passed, well before the circuit's cooldown
    // ends.
    let tick = json!({"url": clock.url("/tick"), "body": {}, "delay": "1200ms"});
    let tick = pb.register(tick).await;
    pb.wait_state(&tick, "delivered", WAIT).await;
    for id in &held {
        let n = pb.notification(id).await;
        assert_eq!(
            (
                n["state"].as_str(),
                n["list"].as_str(),
                n["attempts"].as_u64()
            ),
            (Some("scheduled"), Some("held_back"), Some(0)),
            "no tier spent while the circuit is open: {n}"
        );
        assert_eq!(kinds(&n), ["circuit_wait"], "the wait noted once: {n}");
        assert_eq!(n["history"][0]["error"], "circuit_open");
        assert_eq!(n["history"][0]["url"], url.as_str());
        assert!(n["held_back_since"].is_string(), "{n}");
        assert!(ms(&n["deadline"]) >= ms(&n["created_at"]) + 1000, "{n}");
        assert!(receiver.requests_for(id).is_empty(), "no request made");
    }

    receiver.set_down(false);
    for id in &held {
        let n = pb.wait_state(id, "delivered", WAIT).await;
        let sent = receiver.requests_for(id).len() as u64;
        assert_eq!(n["attempts"], sent, "only requests are attempts: {n}");
        assert_eq!(n["total_attempts"], sent);
        let kinds = kinds(&n);
        assert_eq!(kinds.first().map(String::as_str), Some("circuit_wait"));
        assert!(
            kinds
                .windows(2)
                .all(|w| w != ["circuit_wait", "circuit_wait"]),
            "a wait is noted once, however often the circuit turned it back: {kinds:?}"
        );
        let attempts = n["history"].as_array().unwrap().iter();
        let mut attempts = attempts.filter(|e| e["kind"] == "attempt");
        assert!(
            attempts.all(|a| !a["status"].is_null()),
            "every attempt was a request: {n}"
        );
        assert!(n["held_back_since"].is_null());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_never_recovers_leaves_its_notification_dead_at_its_deadline() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "1h"),
    ])
    .await;
    receiver.set_down(true);
    let url = receiver.url("/shop");
    open_circuit(&pb, &url, 3).await;

    let tiers = json!(["300ms", "300ms", "300ms"]);
    let id = pb
        .register(json!({"url": url, "body": {}, "schedule": tiers, "delay": "200ms"}))
        .await;
    let dead = pb.wait_state(&id, "dead", WAIT).await;
    assert_eq!(
        (dead["attempts"].as_u64(), dead["max_attempts"].as_u64()),
        (Some(0), Some(4)),
        "no tier spent: {dead}"
    );
    assert_eq!(kinds(&dead), ["circuit_wait", "circuit_deadline"], "{dead}");
    let error = dead["history"][1]["error"].as_str().unwrap();
    assert!(
        error.starts_with("circuit_open") && error.contains("deadline"),
        "a clear error: {error}"
    );
    let window = ms(&dead["finished_at"]) - ms(&dead["created_at"]);
    assert!(
        (1100..1100 + 5000).contains(&window),
        "dead at its deadline, its delay and whole schedule after its registration: {window} ms"
    );
    assert!(receiver.requests_for(&id).is_empty(), "no request made");

    let (_, letters) = pb.get("/dead-letters").await;
    let letter = letters["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == id.as_str())
        .expect("a dead letter");
    assert_eq!(letter["last_error"], error, "{letter}");
    assert_eq!(letter["attempts"], 0);
}

/// The circuit's probe, and the last attempt of a schedule, are requests: counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_fails_spends_a_tier_and_the_wait_after_it_is_noted_again() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "500ms"),
    ])
    .await;
    receiver.set_down(true);
    let url = receiver.url("/shop");
    open_circuit(&pb, &url, 3).await;

    let tiers = json!(["1s", "1s", "1s", "1s", "1s", "1s", "1s"]);
    let id = pb
        .register(json!({"url": url, "body": {}, "schedule": tiers}))
        .await;
    assert!(
        support::eventually(WAIT, || async { !receiver.requests_for(&id).is_empty() }).await,
        "a probe went"
    );
    receiver.set_down(false);
    let n = pb.wait_state(&id, "delivered", WAIT).await;
    let sent = receiver.requests_for(&id).len() as u64;
    assert_eq!(n["attempts"], sent, "{n}");
    let kinds = kinds(&n);
    let waits = kinds.iter().filter(|k| *k == "circuit_wait").count() as u64;
    assert!(
        (1..=sent).contains(&waits) && kinds.windows(2).all(|w| w[0] != w[1] || w[0] == "attempt"),
        "one note per wait, each wait ended by a request: {kinds:?}"
    );
}
