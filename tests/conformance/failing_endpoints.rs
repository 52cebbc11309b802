//! An endpoint with no success for `endpoints.pause_after` is paused by postback: its
//! notifications are held instead of walking their schedules into the dead letters, its
//! tenant's ops URL and the operator's are told (`endpoint.paused`, signed), and once it
//! is resumed what it held is delivered, once each and each ordering key in order. A
//! tenant's own `pause_after` holds for its endpoints only (`0s`: never). A resume counts
//! `pause_after` afresh. Every `probe_interval` one held notification is tried; its
//! delivery resumes the endpoint, a failure holds it again. On every backend
//! (`scripts/test.sh`).

use crate::ops_events::{events, OpsRig};
use crate::support;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};
use support::signatures;
use support::tenants::SECRET_A;
use support::{Postback, Receiver, LONG_WAIT, WAIT};

/// The breaker off: what a resume lets go reaches the receiver at once, rather than
/// meeting a circuit that opened while it failed (a real endpoint's pause comes hours
/// after its circuit's cooldown).
const NO_BREAKER: &str = "[delivery]\nbreaker_failures = 0";

/// A schedule long enough (50 × 300 ms) that nothing dies while a test waits for a
/// pause, short enough that a forgotten hold would show as a dead letter.
fn schedule() -> Value {
    json!(vec!["300ms"; 50])
}

async fn register(pb: &Postback, tenant: &str, url: &str, key: &str, seq: u64) -> String {
    let mut body = json!({"url": url, "tenant": tenant, "body": {"key": key, "seq": seq}, "schedule": schedule()});
    if key != "loose" {
        body["ordering_key"] = json!(key);
    }
    pb.register(body).await
}

/// `tenant`'s endpoint at `receiver`'s origin, once listed.
async fn endpoint(pb: &Postback, tenant: &str, receiver: &Receiver) -> Value {
    let query = format!("?tenant={tenant}");
    let origin = receiver.url("/");
    pb.endpoint_listed(support::instance::TOKEN, &query, &origin)
        .await
}

/// Waits for the endpoint `id` to be in `state`; when it was seen so.
async fn wait_endpoint(
    pb: &Postback,
    id: &str,
    state: &str,
    timeout: Duration,
) -> (Instant, Value) {
    let path = format!("/endpoints/{id}");
    let seen = support::found(timeout, || async {
        let (_, found) = pb.get(&path).await;
        (found["state"] == state).then(|| (Instant::now(), found))
    })
    .await;
    match seen {
        Some(seen) => seen,
        None => panic!("{id} not {state}: {}", pb.get(&path).await.1),
    }
}

/// The endpoint events (`endpoint.*`) a receiver got, of `kind`.
fn endpoint_events(receiver: &Receiver, kind: &str) -> Vec<Value> {
    events(receiver)
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_for_pause_after_is_paused_told_and_drained_in_order_once_resumed() {
    let rig = OpsRig::start_with(
        &format!("window = \"300ms\"\n\n[endpoints]\npause_after = \"1s\"\n\n{NO_BREAKER}"),
        "pause_after = \"0s\"",
    )
    .await;
    let pb = &rig.pb;
    let merchant = Receiver::start().await;
    merchant.set_down(true);
    let url = merchant.url("/n");
    let mut ordered = Vec::new();
    for seq in 0..3 {
        ordered.push(register(pb, "shop-a", &url, "k", seq).await);
    }
    let loose = register(pb, "shop-a", &url, "loose", 0).await;
    let of_b = register(pb, "shop-b", &url, "loose", 0).await;

    let id = endpoint(pb, "shop-a", &merchant).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (paused_seen, paused) = wait_endpoint(pb, &id, "paused", WAIT).await;
    assert_eq!(paused["paused"]["by"], "postback", "{paused}");
    for held in ordered[..1].iter().chain([&loose]) {
        pb.wait_state(held, "held", WAIT).await;
    }
    // Held: not attempted while paused, and not dead.
    let attempted = merchant
        .requests()
        .iter()
        .filter(|r| r.id() == loose)
        .count();
    // Due after two more steps of its schedule, had it not been held.
    support::sent_after(pb, "600ms").await;
    let (_, view) = pb.get(&format!("/notifications/{loose}")).await;
    assert_eq!(view["state"], "held", "{view}");
    let still = merchant
        .requests()
        .iter()
        .filter(|r| r.id() == loose)
        .count();
    assert_eq!(still, attempted, "a held notification is not attempted");

    // shop-b's own `pause_after = "0s"`: its endpoint at the same origin is never paused.
    let of_b_endpoint = endpoint(pb, "shop-b", &merchant).await;
    assert_eq!(of_b_endpoint["state"], "failing", "{of_b_endpoint}");
    let (_, b_view) = pb.get(&format!("/notifications/{of_b}")).await;
    assert_ne!(b_view["state"], "held", "{b_view}");

    // Told, signed with shop-a's secret, to shop-a's ops URL and the operator's; not to
    // shop-b's.
    let told = support::eventually(WAIT, || async {
        !endpoint_events(&rig.ops_a, "endpoint.paused").is_empty()
            && !endpoint_events(&rig.operator, "endpoint.paused").is_empty()
    });
    assert!(told.await, "endpoint.paused told");
    let event = &endpoint_events(&rig.ops_a, "endpoint.paused")[0];
    assert_eq!(event["data"]["endpoint"]["id"], id.as_str(), "{event}");
    assert_eq!(event["data"]["paused_by"], "postback", "{event}");
    assert!(event["data"]["last_failure"]["at"].is_string(), "{event}");
    assert!(
        event["data"]["consecutive_failures"].as_u64() > Some(0),
        "{event}"
    );
    let request = rig
        .ops_a
        .requests()
        .into_iter()
        .find(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["type"] == "endpoint.paused")
        .unwrap();
    assert!(signatures::of(&request).contains(&signatures::v1(SECRET_A, &request)));
    assert!(endpoint_events(&rig.ops_b, "endpoint.paused").is_empty());
    assert_eq!(
        endpoint_events(&rig.ops_a, "endpoint.paused").len(),
        1,
        "told once, {:?} after the pause",
        paused_seen.elapsed()
    );

    merchant.set_down(false);
    let (status, resumed) = pb
        .request(Method::POST, &format!("/endpoints/{id}/resume"), None, &[])
        .await;
    assert_eq!(
        (status, &resumed["state"]),
        (200, &json!("failing")),
        "{resumed}"
    );
    for n in ordered.iter().chain([&loose]) {
        pb.wait_state(n, "delivered", LONG_WAIT).await;
    }
    // The last request of each is its success: their order is the key's.
    let successes: Vec<u64> = {
        let ok = merchant.requests();
        let mut seen = Vec::new();
        for r in ok.iter().filter(|r| ordered.contains(&r.id())).rev() {
            let seq = serde_json::from_slice::<Value>(&r.body).unwrap()["seq"]
                .as_u64()
                .unwrap();
            if !seen.contains(&seq) {
                seen.push(seq);
            }
        }
        seen.reverse();
        seen
    };
    assert_eq!(successes, vec![0, 1, 2], "the ordering key's order holds");
    let told = support::eventually(WAIT, || async {
        !endpoint_events(&rig.ops_a, "endpoint.resumed").is_empty()
    });
    assert!(told.await, "endpoint.resumed told");
    let event = &endpoint_events(&rig.ops_a, "endpoint.resumed")[0];
    assert_eq!(event["data"]["resumed_by"], "api_token_1", "{event}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_endpoint_gets_pause_after_again_before_it_is_paused_again() {
    let rig = OpsRig::start(&format!(
        "[endpoints]\npause_after = \"3s\"\n\n{NO_BREAKER}"
    ))
    .await;
    let pb = &rig.pb;
    let merchant = Receiver::start().await;
    merchant.set_down(true);
    let url = merchant.url("/n");
    for seq in 0..2 {
        register(pb, "shop-a", &url, "loose", seq).await;
    }
    let id = endpoint(pb, "shop-a", &merchant).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_endpoint(pb, &id, "paused", LONG_WAIT).await;

    let (status, _) = pb
        .request(Method::POST, &format!("/endpoints/{id}/resume"), None, &[])
        .await;
    assert_eq!(status, 200);
    let resumed = Instant::now();
    // Still down: what it let go fails, and the endpoint is paused again, but only once
    // three seconds without a success have passed since the resume.
    let (paused_again, again) = wait_endpoint(pb, &id, "paused", LONG_WAIT).await;
    let after = paused_again - resumed;
    assert!(
        after >= Duration::from_millis(2_800),
        "paused again {after:?} after the resume"
    );
    assert_eq!(again["paused"]["by"], "postback", "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_tries_one_held_notification_each_interval_and_its_delivery_resumes_the_endpoint() {
    let rig = OpsRig::start(&format!(
        "[endpoints]\npause_after = \"1s\"\nprobe_interval = \"1s\"\n\n{NO_BREAKER}"
    ))
    .await;
    let pb = &rig.pb;
    let (merchant, maintained) = (Receiver::start().await, Receiver::start().await);
    merchant.set_down(true);
    let mut held = Vec::new();
    for seq in 0..3 {
        held.push(register(pb, "shop-a", &merchant.url("/n"), "loose", seq).await);
    }
    let id = endpoint(pb, "shop-a", &merchant).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_endpoint(pb, &id, "paused", WAIT).await;
    for n in &held {
        pb.wait_state(n, "held", WAIT).await;
    }
    // An endpoint paused by hand is not probed.
    let by_hand = register(pb, "shop-a", &maintained.url("/n"), "loose", 0).await;
    pb.wait_state(&by_hand, "delivered", WAIT).await;
    let by_hand_id = endpoint(pb, "shop-a", &maintained).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/endpoints/{by_hand_id}/pause");
    assert_eq!(pb.request(Method::POST, &path, None, &[]).await.0, 200);
    let waiting = register(pb, "shop-a", &maintained.url("/n"), "loose", 1).await;
    pb.wait_state(&waiting, "held", WAIT).await;

    // Still down: a probe a second, each one notification, which is held again. Three
    // probes span two intervals, give or take a busy machine's stall.
    let before = merchant.count();
    assert!(merchant.wait_for(before + 3, WAIT).await, "probed");
    let probes: Vec<Instant> = merchant.requests()[before..before + 3]
        .iter()
        .map(|r| r.at)
        .collect();
    let span = probes[2] - probes[0];
    assert!(
        span >= Duration::from_millis(1_400) && span <= Duration::from_millis(3_500),
        "three probes in {span:?}, one a second"
    );
    for n in &held {
        // The last probe's notification is held again once its failure is settled.
        pb.wait_state(n, "held", WAIT).await;
    }
    assert_eq!(maintained.count(), 1, "a pause by hand is not probed");

    merchant.set_down(false);
    let (_, resumed) = wait_endpoint(pb, &id, "healthy", LONG_WAIT).await;
    assert!(resumed["paused"].is_null(), "{resumed}");
    for n in &held {
        pb.wait_state(n, "delivered", LONG_WAIT).await;
    }
    let told = support::eventually(WAIT, || async {
        !endpoint_events(&rig.ops_a, "endpoint.resumed").is_empty()
    });
    assert!(told.await, "endpoint.resumed told");
    let event = &endpoint_events(&rig.ops_a, "endpoint.resumed")[0];
    assert_eq!(event["data"]["resumed_by"], "probe", "{event}");
    // The log names it a pause probe, not a circuit's.
    let log = pb.logs();
    assert!(log.contains("pause probe failed: held again"), "{log}");
    assert!(
        log.contains("endpoint resumed: a pause probe was delivered"),
        "{log}"
    );
    let (_, still) = pb.get(&format!("/notifications/{waiting}")).await;
    assert_eq!(still["state"], "held", "{still}");
}
