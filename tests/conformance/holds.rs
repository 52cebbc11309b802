//! A circuit and a pause on one endpoint are one hold: what the circuit holds back while
//! its endpoint is paused is held, not dead at its deadline; a resume lets the circuit
//! probe at once, and what both held goes once the endpoint answers, each ordering key in
//! its order, nothing dead-lettered. An open circuit shows on its endpoint with what it
//! holds back, and is kept by the store: a restart costs no tier. A paused endpoint's
//! notifications are held from the pause on: lists, counts and views show each as held
//! at once (but one waiting behind its ordering key), whatever the scheduler has done
//! with it yet. On every backend (`scripts/test.sh`).

use crate::circuits::open_circuit;
use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::{Postback, Receiver, LONG_WAIT, WAIT};

/// The breaker opens at the third failure and probes every 30 s (its default), so that
/// no probe is due while a test runs unless something lets it probe at once.
const HOLDS: &[(&str, &str)] = &[
    ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
    ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "30s"),
];

/// Twenty 250 ms tiers: a notification's window (its deadline) ends 5 s after it is
/// registered, after its endpoint is paused.
fn tiers() -> Value {
    json!(vec!["250ms"; 20])
}

/// Registers a notification to `url` with its `key` and `seq` in the body (an ordering
/// key unless `key` is "loose").
async fn register(pb: &Postback, url: &str, key: &str, seq: u64) -> String {
    let mut body = json!({"url": url, "body": {"key": key, "seq": seq}, "schedule": tiers()});
    if key != "loose" {
        body["ordering_key"] = json!(key);
    }
    pb.register(body).await
}

/// Waits until the open circuit of its endpoint holds `id` back; its view.
async fn held_back(pb: &Postback, id: &str) -> Value {
    let seen = support::found(WAIT, || async {
        let n = pb.notification(id).await;
        n["held_back_since"].is_string().then_some(n)
    });
    match seen.await {
        Some(n) => n,
        None => panic!("{id} never held back: {}", pb.notification(id).await),
    }
}

/// Waits until `id` is delivered or dead; its view.
async fn finished(pb: &Postback, id: &str) -> Value {
    let seen = support::found(LONG_WAIT, || async {
        let n = pb.notification(id).await;
        matches!(n["state"].as_str(), Some("delivered" | "dead")).then_some(n)
    });
    match seen.await {
        Some(n) => n,
        None => panic!("{id} never finished: {}", pb.notification(id).await),
    }
}

/// The `seq` of each of `key`'s notifications in the order their requests arrived from
/// the `from`th on.
pub fn arrived(receiver: &Receiver, key: &str, from: usize) -> Vec<u64> {
    receiver.requests()[from..]
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|b| b["key"] == key)
        .filter_map(|b| b["seq"].as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_circuit_and_a_pause_held_goes_in_order_once_resumed_with_nothing_dead() {
    let (_backend, receiver, pb) = support::start_any(HOLDS).await;
    receiver.set_down(true);
    let url = receiver.url("/hook");
    let mut ordered = Vec::new();
    let mut loose = Vec::new();
    for seq in 0..20 {
        ordered.push(register(&pb, &url, "k", seq).await);
        loose.push(register(&pb, &url, "loose", seq).await);
    }
    let origin = receiver.url("");
    let id = pb
        .endpoint_listed(support::instance::TOKEN, "", &origin)
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    for n in loose.iter().chain(&ordered[..1]) {
        held_back(&pb, n).await;
    }
    let pause = format!("/endpoints/{id}/pause");
    assert_eq!(pb.request(Method::POST, &pause, None, &[]).await.0, 200);
    // Every window has ended: what the circuit held back came due at its deadline while
    // the endpoint was paused.
    support::sent_after(&pb, "6s").await;

    receiver.set_down(false);
    let up_from = receiver.count();
    let (status, resumed) = pb
        .request(Method::POST, &format!("/endpoints/{id}/resume"), None, &[])
        .await;
    assert_eq!(status, 200, "{resumed}");
    for n in ordered.iter().chain(&loose) {
        let n = finished(&pb, n).await;
        assert_eq!(n["state"], "delivered", "nothing dead once resumed: {n}");
    }
    assert_eq!(
        arrived(&receiver, "k", up_from),
        (0..20).collect::<Vec<u64>>(),
        "the ordering key's order holds"
    );
}

/// The breaker opens at the `failures`th failure and probes every `cooldown`.
fn breaker(failures: &'static str, cooldown: &'static str) -> [(&'static str, &'static str); 2] {
    [
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", failures),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", cooldown),
    ]
}

/// Registers `n` notifications to `url` with a long window, and waits until its open
/// circuit holds each back.
async fn held_back_ones(pb: &Postback, url: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for seq in 0..n {
        let body = json!({"url": url, "body": {"seq": seq}, "schedule": vec!["30s"; 3]});
        ids.push(pb.register(body).await);
    }
    for id in &ids {
        held_back(pb, id).await;
    }
    ids
}

/// The id of the endpoint at `receiver`'s origin, once listed.
async fn endpoint_id(pb: &Postback, receiver: &Receiver) -> String {
    let found = pb
        .endpoint_listed(support::instance::TOKEN, "", &receiver.url(""))
        .await;
    found["id"].as_str().unwrap().to_string()
}

/// Waits until the view of endpoint `id` satisfies `ready`; the view.
async fn endpoint_when(pb: &Postback, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/endpoints/{id}");
    let seen = support::found(WAIT, || async {
        let (_, found) = pb.get(&path).await;
        ready(&found).then_some(found)
    });
    match seen.await {
        Some(found) => found,
        None => panic!("{id} never as expected: {}", pb.get(&path).await.1),
    }
}

/// The ids `GET /notifications?state=…` lists, sorted.
async fn listed(pb: &Postback, state: &str) -> Vec<String> {
    let (status, page) = pb.get(&format!("/notifications?state={state}")).await;
    assert_eq!(status, 200, "{page}");
    let mut ids: Vec<String> = support::item_ids(&page)
        .into_iter()
        .map(String::from)
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_shows_on_its_endpoint_with_what_it_holds_back_until_it_closes() {
    let (_backend, receiver, pb) = support::start_any(&breaker("3", "2s")).await;
    receiver.set_down(true);
    let url = receiver.url("/hook");
    open_circuit(&pb, &url, 3).await;
    let mut ids = held_back_ones(&pb, &url, 2).await;
    ids.sort();
    let id = endpoint_id(&pb, &receiver).await;

    let open = endpoint_when(&pb, &id, |e| e["circuits"][0]["state"] == "open").await;
    let circuit = &open["circuits"][0];
    assert_eq!(circuit["path"], "/hook", "{open}");
    assert!(
        circuit["open_since"].is_string() && circuit["next_probe_at"].is_string(),
        "{open}"
    );
    assert_eq!(circuit["held_back"], 2, "{open}");
    assert_eq!(open["notifications"]["held_back"], 2, "{open}");
    assert_eq!(
        open["notifications"]["pending"], 0,
        "held back is counted apart: {open}"
    );
    assert_eq!(listed(&pb, "held_back").await, ids);
    assert!(listed(&pb, "scheduled").await.is_empty() && listed(&pb, "retrying").await.is_empty());
    let (_, overview) = pb.get("/overview").await;
    assert_eq!(overview["held_back"]["count"], 2, "{overview}");
    let (_, listed_endpoints) = pb.get("/endpoints").await;
    assert_eq!(
        listed_endpoints["items"][0]["circuits"][0]["state"], "open",
        "{listed_endpoints}"
    );

    receiver.set_down(false);
    for n in &ids {
        pb.wait_state(n, "delivered", LONG_WAIT).await;
    }
    let closed = endpoint_when(&pb, &id, |e| e["circuits"][0]["state"] == "closed").await;
    let circuit = &closed["circuits"][0];
    assert!(
        circuit["closed_at"].is_string() && circuit["next_probe_at"].is_null(),
        "{closed}"
    );
    assert_eq!(circuit["held_back"], 0, "{closed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_circuit_costs_no_tier_its_circuit_kept_by_the_store() {
    // Six failures open it: a fresh breaker would spend six tiers to learn it again.
    let env = breaker("6", "3s");
    let backend = support::Backend::start();
    let receiver = Receiver::start().await;
    let mut pb = backend.postback(&env).await;
    receiver.set_down(true);
    let url = receiver.url("/hook");
    open_circuit(&pb, &url, 6).await;
    let ids = held_back_ones(&pb, &url, 8).await;
    let id = endpoint_id(&pb, &receiver).await;
    endpoint_when(&pb, &id, |e| e["circuits"][0]["state"] == "open").await;

    pb.terminate();
    let pb = backend.postback(&env).await;
    // Each came due again at the circuit's probe, or up to half a cooldown after it.
    support::sent_after(&pb, "5s").await;
    let sent: usize = ids.iter().map(|n| receiver.requests_for(n).len()).sum();
    assert!(
        sent <= 3,
        "only the circuit's probes went, one a cooldown, not one per notification: {sent}"
    );
    for n in &ids {
        let n = pb.notification(n).await;
        assert!(n["attempts"].as_u64() <= Some(1), "{n}");
        assert_eq!(n["state"], "scheduled", "{n}");
        let pending = ["held_back", "retrying"].map(serde_json::Value::from);
        assert!(pending.contains(&n["list"]), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_endpoints_notifications_are_held_from_the_pause_on() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/hook");
    let later = |seq: u64, key: Option<&str>| {
        let mut body = json!({"url": url, "body": {"seq": seq}, "delay": "1h"});
        if let Some(key) = key {
            body["ordering_key"] = json!(key);
        }
        body
    };
    let mut ids = Vec::new();
    for seq in 0..3 {
        ids.push(pb.register(later(seq, None)).await);
    }
    let head = pb.register(later(3, Some("k"))).await;
    let behind = pb.register(later(4, Some("k"))).await;
    ids.push(head);
    ids.sort();
    let id = endpoint_id(&pb, &receiver).await;

    let pause = format!("/endpoints/{id}/pause");
    let (status, paused) = pb.request(Method::POST, &pause, None, &[]).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(
        paused["notifications"],
        json!({"pending": 1, "held": 4, "held_back": 0, "complete": true}),
        "held at once, but the one waiting behind its ordering key: {paused}"
    );
    assert_eq!(listed(&pb, "held").await, ids);
    assert!(listed(&pb, "scheduled").await == vec![behind.clone()]);
    let shown = pb.notification(&ids[0]).await;
    assert_eq!(
        (&shown["state"], &shown["next_attempt_at"]),
        (&json!("held"), &Value::Null),
        "{shown}"
    );
    let (_, overview) = pb.get("/overview").await;
    assert_eq!(overview["held"]["count"], 4, "{overview}");

    let resume = format!("/endpoints/{id}/resume");
    let (_, resumed) = pb.request(Method::POST, &resume, None, &[]).await;
    assert_eq!(
        resumed["notifications"],
        json!({"pending": 5, "held": 0, "held_back": 0, "complete": true}),
        "{resumed}"
    );
    assert_eq!(pb.notification(&ids[0]).await["state"], "scheduled");
}
