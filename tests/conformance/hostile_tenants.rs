//! A hostile tenant against its neighbours, on every backend: nothing one tenant writes
//! (a success rule, an idempotency key, an ordering key, a timeout, a failing endpoint)
//! changes what another tenant gets. Each case plays the attack and asserts what the
//! other tenant sees.

use crate::support;

use futures_util::future::join_all;
use proptest::prelude::*;
use reqwest::Method;
use serde_json::{json, Value};

use support::tenants::{start, Fleet, WAIT};

/// A success rule whose JSON imitates what the stores keep of a notification beside
/// its spec: an ordering key with a space, and another tenant.
fn poison() -> Value {
    json!({"json_pointer": "/a", "json_equals": {"ordering_key": "x y", "tenant": "shop-b"}})
}

async fn notify_keyed(f: &Fleet, token: &str, body: &Value, key: &str) -> (u16, Value) {
    let headers = [("idempotency-key", key)];
    f.pb.request_as(token, Method::POST, "/notify", Some(body.clone()), &headers)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_success_rule_breaks_no_other_registration() {
    let f = start(&[]).await;
    let poisoned =
        json!({"url": f.receiver.url("/a"), "body": {}, "delay": "30days", "success": poison()});
    let (status, first) = notify_keyed(&f, "tok-checkout-a", &poisoned, "poison").await;
    assert_eq!(status, 202, "{first}");

    let repeats = (0..100).map(|_| notify_keyed(&f, "tok-checkout-a", &poisoned, "poison"));
    let neighbours = (0..100).map(|n| {
        f.notify(
            "tok-all-b",
            json!({"url": f.receiver.url("/b"), "body": {"n": n}, "delay": "1h"}),
        )
    });
    let (repeats, neighbours) = tokio::join!(join_all(repeats), join_all(neighbours));

    for (status, answer) in &neighbours {
        assert_eq!(*status, 202, "shop-b's own registration: {answer}");
    }
    for (status, answer) in &repeats {
        assert_eq!(*status, 202, "a repeat with the key: {answer}");
        assert_eq!(answer["id"], first["id"], "the same notification");
    }
    let (_, stats) = f.get("tok-all-b", "/stats").await;
    assert_eq!(
        stats["scheduled"], 100,
        "what shop-b was told is what was stored"
    );
    let (_, view) = f
        .get(
            "tok-checkout-a",
            &format!("/notifications/{}", first["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(view["tenant"], "shop-a", "{view}");
    assert!(
        view.get("ordering_key").is_none_or(Value::is_null),
        "{view}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_notification_that_falls_due_stops_no_shard() {
    let f = start(&[]).await;
    let (mut poisoned, mut plain) = (Vec::new(), Vec::new());
    for n in 0..6 {
        let a = json!({"url": f.receiver.url("/a"), "body": {"a": n}, "success": poison(),
                       "schedule": ["100ms"], "ordering_key": format!("o{}", n % 3)});
        poisoned.push(f.register("tok-checkout-a", a).await);
        let b = json!({"url": f.receiver.url("/b"), "body": {"n": n}});
        plain.push(f.register("tok-all-b", b).await);
    }
    for id in &plain {
        let view = f.pb.wait_state(id, "delivered", WAIT).await;
        assert_eq!(view["attempts"], 1, "{view}");
    }
    for id in &poisoned {
        let view = f.pb.wait_state(id, "dead", WAIT).await;
        assert_eq!(
            view["attempts"], 2,
            "its rule is not met, and it is tried as scheduled: {view}"
        );
    }
    assert_eq!(
        f.receiver.count(),
        plain.len() + 2 * poisoned.len(),
        "each sent as scheduled"
    );
}

/// What postback reports of a notification after storing it equals what it was given,
/// whatever the caller put in its rule, topic, ordering key and body.
fn case() -> impl Strategy<Value = (Value, Option<String>, Option<String>, String)> {
    let text = prop_oneof![
        "[ -~]{0,24}",
        Just("\"ordering_key\":\"a b\"".to_string()),
        Just("\",\"tenant\":\"shop-b\"}".to_string()),
    ];
    let rule = (text.clone(), text.clone()).prop_map(|(k, v)| {
        json!({"json_pointer": "/a", "json_equals": {k: v, "ordering_key": "x y", "tenant": "shop-b"}})
    });
    let ordering = proptest::option::of("[!#-\\[\\]-~]{1,24}");
    let topic = proptest::option::of("[a-z.]{1,16}");
    (rule, ordering, topic, text)
}

#[test]
fn what_is_stored_of_a_notification_is_what_was_registered() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let f = runtime.block_on(start(&[]));
    let config = ProptestConfig::with_cases(40);
    proptest!(config, |((rule, ordering, topic, body) in case())| {
        let (seen, stats) = runtime.block_on(async {
            let mut request = json!({"url": f.receiver.url("/p"), "body": body, "delay": "1h",
                                     "success": rule});
            if let Some(key) = &ordering {
                request["ordering_key"] = json!(key);
            }
            if let Some(topic) = &topic {
                request["topic"] = json!(topic);
            }
            let key = format!("k{}", rand_key());
            let (status, first) = notify_keyed(&f, "tok-checkout-a", &request, &key).await;
            assert_eq!(status, 202, "{first}");
            let (status, again) = notify_keyed(&f, "tok-checkout-a", &request, &key).await;
            assert_eq!(status, 202, "{again}");
            assert_eq!(again["id"], first["id"]);
            let id = first["id"].as_str().unwrap();
            let (_, seen) = f.get("tok-checkout-a", &format!("/notifications/{id}")).await;
            let (_, stats) = f.get("tok-all-b", "/stats").await;
            (seen, stats)
        });
        prop_assert_eq!(&seen["tenant"], "shop-a");
        prop_assert_eq!(seen["ordering_key"].as_str().map(String::from), ordering);
        prop_assert_eq!(seen["topic"].as_str().map(String::from), topic);
        prop_assert_eq!(&seen["state"], "scheduled");
        prop_assert_eq!(&stats["scheduled"], 0, "nothing counted for shop-b");
    });
}

fn rand_key() -> u128 {
    uuid::Uuid::now_v7().as_u128()
}

/// The errors of a notification's attempts, oldest first (`""` for none).
fn errors(view: &Value) -> Vec<String> {
    view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["error"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_failures_open_no_circuit_of_another() {
    let f = start(&[
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "3"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "30s"),
    ])
    .await;
    for n in 0..4 {
        let timing_out = json!({"url": f.receiver.url("/shared?sleep_ms=300"), "body": {"n": n},
                                "timeout": "1ms", "schedule": []});
        let id = f.register("tok-checkout-a", timing_out).await;
        f.pb.wait_state(&id, "dead", WAIT).await;
    }
    let next =
        json!({"url": f.receiver.url("/shared"), "body": {}, "schedule": ["100ms", "100ms"]});
    let a = f.register("tok-checkout-a", next.clone()).await;
    let b = f.register("tok-all-b", next).await;

    let b = f.pb.wait_state(&b, "delivered", WAIT).await;
    assert_eq!(
        errors(&b),
        vec![""],
        "shop-b's first attempt went and succeeded"
    );
    let held_back = support::eventually(WAIT, || async {
        let a = f.pb.notification(&a).await;
        errors(&a).first().map(String::as_str) == Some("circuit_open")
    });
    assert!(
        held_back.await,
        "shop-a's own circuit is open: {}",
        f.pb.notification(&a).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_of_one_tenant_never_verifies_as_another_tenants() {
    let f = start(&[]).await;
    let body = |path: &str| json!({"url": f.receiver.url(path), "body": {"pay": 100}});
    let (c, d) = (
        f.register("tok-plain-c", body("/c")).await,
        f.register("tok-producer", body("/d")).await,
    );
    for id in [&c, &d] {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }
    let got = |id: &str| f.receiver.requests_for(id).remove(0);
    let (c, d) = (got(&c), got(&d));
    let (c_secret, d_secret) = (f.signing_secret("shop-c"), f.signing_secret("default"));
    assert_ne!(c_secret, d_secret);
    assert_eq!(
        support::signatures::of(&c),
        vec![support::signatures::v1(&c_secret, &c)]
    );
    assert_eq!(
        support::signatures::of(&d),
        vec![support::signatures::v1(&d_secret, &d)]
    );
    assert_ne!(
        support::signatures::of(&c),
        vec![support::signatures::v1(&d_secret, &c)],
        "shop-c's delivery, replayed to the default tenant's receiver, does not verify there"
    );
}

/// shop-b points long attempts at a host that hangs, more of them than there are
/// delivery slots (the per-host cap set out of the way, as many hosts would put it);
/// shop-c's burst to a healthy host still goes at once, through the slots kept free
/// for the other tenants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_hanging_never_holds_every_delivery_slot() {
    let f = start(&[
        ("POSTBACK_DELIVERY_CONCURRENCY", "16"),
        ("POSTBACK_DELIVERY_HOST_CONCURRENCY", "1000"),
    ])
    .await;
    let hang = json!({"url": f.receiver.url("/hang?sleep_ms=6000"), "body": {}, "timeout": "8s"});
    let hanging = (0..200).map(|_| f.notify("tok-all-b", hang.clone()));
    for (status, answer) in join_all(hanging).await {
        assert_eq!(status, 202, "{answer}");
    }
    assert!(
        f.receiver.wait_for(12, WAIT).await,
        "shop-b's attempts hold their share of the slots"
    );
    let started = std::time::Instant::now();
    let mut burst = Vec::new();
    for n in 0..20 {
        let b = json!({"url": f.receiver.url("/fast"), "body": {"n": n}});
        burst.push(f.register("tok-plain-c", b).await);
    }
    for id in &burst {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(4),
        "shop-c waited {took:?}, as long as shop-b's hanging attempts"
    );
    let hanging = f
        .receiver
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/hang"))
        .count();
    assert_eq!(
        hanging, 12,
        "shop-b holds three quarters of the 16 slots, no more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_caller_wrote_is_not_echoed_into_every_attempt() {
    let f = start(&[]).await;
    let expected = "x".repeat(100_000);
    let body = json!({"url": f.receiver.url("/big?reply=%7B%22a%22%3A1%7D"), "body": {},
                      "success": {"json_pointer": "/a", "json_equals": expected},
                      "schedule": ["100ms", "100ms"]});
    let id = f.register("tok-all-b", body).await;
    let dead = f.pb.wait_state(&id, "dead", WAIT).await;
    for error in errors(&dead) {
        assert!(
            !error.is_empty() && error.len() <= 256,
            "{} bytes",
            error.len()
        );
    }
    assert!(
        dead["history"].to_string().len() < 2_000,
        "the history stays small"
    );
}

/// The request the receiver got at `path`.
fn sent_to(f: &Fleet, path: &str) -> support::receiver::Received {
    let got = f.receiver.requests().into_iter();
    got.rev()
        .find(|r| r.path.starts_with(path))
        .expect("a request")
}

/// A replay to a new URL sends what the operator chose, not the producer's headers
/// (an `Authorization` meant for the old receiver), and the audit log says where it went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_to_a_new_url_forwards_no_stored_header_and_is_audited_with_both_urls() {
    let f = start(&[]).await;
    let old = f.receiver.url("/old?fail=9");
    let body = json!({"url": old, "body": {}, "schedule": [],
                      "headers": {"authorization": "Bearer for-the-old-receiver"}});
    let id = f.register("tok-all-b", body).await;
    f.pb.wait_state(&id, "dead", WAIT).await;
    let new = f.receiver.url("/new");
    let path = format!("/dead-letters/{id}/replay");
    let replay = Some(json!({"url": new}));
    let (status, answer) = f.call("tok-all-b", Method::POST, &path, replay).await;
    assert_eq!(status, 200, "{answer}");
    f.pb.wait_state(&id, "delivered", WAIT).await;
    let sent = sent_to(&f, "/new");
    assert_eq!(
        sent.header("authorization"),
        None,
        "not forwarded to the new URL"
    );

    let (_, audit) = f.get("tok-all-b", "/audit?action=replay").await;
    let entry = &audit["items"][0];
    assert_eq!(entry["url"], json!({"from": old, "to": new}), "{audit}");

    let again = f
        .register("tok-all-b", json!({"url": old, "body": {}, "schedule": []}))
        .await;
    f.pb.wait_state(&again, "dead", WAIT).await;
    let headers = json!({"x-shop": "7"});
    let path = format!("/dead-letters/{again}/replay");
    let bad = json!({"url": f.receiver.url("/x"), "headers": {"webhook-id": "forged"}});
    let (status, answer) = f.call("tok-all-b", Method::POST, &path, Some(bad)).await;
    assert_eq!(
        status, 422,
        "headers are checked as at registration: {answer}"
    );
    let body = json!({"url": f.receiver.url("/newer"), "headers": headers});
    let (status, answer) = f.call("tok-all-b", Method::POST, &path, Some(body)).await;
    assert_eq!(status, 200, "{answer}");
    f.pb.wait_state(&again, "delivered", WAIT).await;
    let sent = sent_to(&f, "/newer");
    assert_eq!(
        sent.header("x-shop").as_deref(),
        Some("7"),
        "the replay's own headers"
    );
}

/// What a cursor holds, as a caller can read it: its base64 decoded, lossily.
fn readable(cursor: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).to_string()
}

/// Another tenant's volume, past what a page examines, neither empties nor cuts short a
/// tenant's pages: they read its own notifications alone; and a cursor names none of
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_volume_never_empties_a_page_and_a_cursor_names_nothing() {
    // One shard (the embedded store and Postgres have no other), so that all of shop-b's
    // notifications are where shop-c's are.
    let backend = std::env::var("POSTBACK_TEST_BACKEND");
    let one_shard: &[(&str, &str)] = match backend.as_deref() {
        Ok("embedded" | "postgres") => &[],
        _ => &[("POSTBACK_STORE_SHARDS", "1")],
    };
    let f = start(one_shard).await;
    let item = json!({"url": f.receiver.url("/b"), "body": {}, "delay": "1h"});
    let mut stored = 0;
    while stored < 6000 {
        // A producer sends again what a loaded machine answered 503 for.
        let items: Vec<Value> = (0..1000).map(|_| item.clone()).collect();
        let (status, answer) = f
            .call(
                "tok-all-b",
                Method::POST,
                "/notify/batch",
                Some(json!({"items": items})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        let items = answer["items"].as_array().unwrap();
        stored += items.iter().filter(|i| i["id"].is_string()).count();
    }
    let mut own = Vec::new();
    for delay in ["2h", "3h"] {
        let body = json!({"url": f.receiver.url("/c"), "body": {}, "delay": delay});
        own.push(json!(f.register("tok-plain-c", body).await));
    }
    let (mut found, mut cursor, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let path = format!("/notifications?state=scheduled&limit=1{cursor}");
        let (status, page) = f.get("tok-plain-c", &path).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        assert!(page.get("partial").is_none_or(|p| p == false), "{page}");
        found.extend(items.iter().map(|i| i["id"].clone()));
        pages += 1;
        match page["next_cursor"].as_str() {
            Some(next) => {
                let seen = readable(next);
                assert!(
                    !seen.contains("ntf_"),
                    "a cursor names a notification: {seen}"
                );
                cursor = format!("&cursor={next}");
            }
            None => break,
        }
    }
    assert_eq!(found, own, "each of shop-c's, a page each");
    assert!(pages <= 3, "no page empty: {pages} pages");
}

/// An ordering key is its tenant's: another tenant's notification under the same key
/// neither waits behind the first tenant's head nor takes its turn, and the first
/// tenant's keep their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordering_key_of_the_same_name_is_each_tenants_own() {
    let f = start(&[]).await;
    let on_key = |path: &str, n: u32| {
        json!({"url": f.receiver.url(path), "body": {"n": n}, "ordering_key": "k",
               "schedule": ["2s"]})
    };
    let head = f.register("tok-checkout-a", on_key("/a?fail=1", 0)).await;
    let behind = f.register("tok-checkout-a", on_key("/a", 1)).await;
    let other = f.register("tok-all-b", on_key("/b", 2)).await;

    let view = f.pb.wait_state(&other, "delivered", WAIT).await;
    assert_eq!(view["attempts"], 1, "{view}");
    let waiting = f.pb.notification(&behind).await;
    assert_eq!(
        waiting["state"], "scheduled",
        "behind shop-a's head: {waiting}"
    );
    assert_eq!(waiting["waiting"], true, "{waiting}");

    f.pb.wait_state(&head, "delivered", WAIT).await;
    f.pb.wait_state(&behind, "delivered", WAIT).await;
    let order: Vec<Value> = f
        .receiver
        .requests()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .map(|b| b["n"].clone())
        .collect();
    let shop_a: Vec<&Value> = order.iter().filter(|n| **n != json!(2)).collect();
    assert_eq!(
        shop_a,
        [&json!(0), &json!(0), &json!(1)],
        "shop-a's in order: {order:?}"
    );
    let b_at = order.iter().position(|n| *n == json!(2));
    let retry_at = order.iter().rposition(|n| *n == json!(0));
    assert!(
        b_at < retry_at,
        "shop-b's went before shop-a's head was retried: {order:?}"
    );
}
