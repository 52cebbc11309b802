//! `POST /notify/batch`: up to 1,000 registrations in one request, answered one result
//! per item in order; a refused item is refused alone and nothing of it is stored.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};

use support::LONG_WAIT as WAIT;

async fn batch(pb: &support::Postback, items: Value) -> (u16, Value) {
    pb.request(
        Method::POST,
        "/notify/batch",
        Some(json!({ "items": items })),
        &[],
    )
    .await
}

/// A batch sent as written, spacing and field order included.
async fn batch_text(pb: &support::Postback, text: String) -> (u16, Value) {
    let resp = pb
        .http
        .post(pb.url("/notify/batch"))
        .bearer_auth(support::instance::TOKEN)
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn stored(pb: &support::Postback) -> u64 {
    let (_, stats) = pb.get("/stats").await;
    ["scheduled", "in_flight", "dead", "finished"]
        .iter()
        .map(|s| stats[s].as_u64().unwrap_or(0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_is_registered_or_refused_on_its_own_in_order() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let (status, answer) = batch(
        &pb,
        json!([
            {"url": receiver.url("/a"), "body": {"order": 1}},
            {"url": "ftp://merchant.example.com/x", "body": {}},
            {"url": receiver.url("/b"), "body": {"order": 2}, "idempotency_key": "order-2"},
            {"url": receiver.url("/c"), "body": {}, "shedule": ["1m"]},
            {"url": receiver.url("/d"), "body": {}, "delay": "1h"},
            "not an object",
            {"url": receiver.url("/e"), "body": {}, "idempotency_key": ""},
        ]),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items.len(), 7, "one result per item: {answer}");
    let refused = |i: usize| items[i]["error"]["field"].as_str().unwrap_or("?");
    assert_eq!(refused(1), "url");
    assert_eq!(refused(3), "shedule");
    assert_eq!(items[5]["error"]["code"], "invalid_json", "{}", items[5]);
    assert_eq!(refused(6), "idempotency_key");
    for i in [1, 3, 5, 6] {
        assert!(items[i].get("id").is_none(), "{}", items[i]);
    }
    let id = |i: usize| items[i]["id"].as_str().unwrap().to_string();
    assert_eq!(items[4]["state"], "scheduled");
    assert!(items[4]["next_attempt_at"].is_string());
    pb.wait_state(&id(0), "delivered", WAIT).await;
    pb.wait_state(&id(2), "delivered", WAIT).await;
    assert_eq!(receiver.requests_for(&id(0))[0].path, "/a");
    assert_eq!(receiver.requests_for(&id(2))[0].path, "/b");
    assert_eq!(stored(&pb).await, 3, "nothing of a refused item is stored");

    // The idempotency key holds across batches and with POST /notify.
    let (_, again) = batch(
        &pb,
        json!([
            {"url": receiver.url("/b"), "body": {"order": 2}, "idempotency_key": "order-2"},
            {"url": receiver.url("/b"), "body": {"order": 3}, "idempotency_key": "order-2"},
        ]),
    )
    .await;
    assert_eq!(again["items"][0]["id"], id(2).as_str());
    assert_eq!(again["items"][0]["idempotent_replayed"], true);
    assert_eq!(
        again["items"][1]["error"]["code"], "idempotency_key_mismatch",
        "{again}"
    );
    assert_eq!(stored(&pb).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_item_sent_again_is_the_same_whatever_its_spacing_and_field_order() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/k");
    let (status, first) = batch_text(
        &pb,
        format!(
            r#"{{"items": [{{"url": "{url}", "body": {{"a": 1, "b": 2}}, "idempotency_key": "k-1"}},
                {{"url": "{url}", "body": {{}}, "idempotency_key": null}}]}}"#
        ),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let keyed = first["items"][0]["id"].as_str().unwrap();
    assert!(
        first["items"][1]["id"].is_string(),
        "a null key is no key: {first}"
    );
    let (status, again) = batch_text(
        &pb,
        format!(
            r#"{{"items":[ {{ "idempotency_key":"k-1","body":{{"b":2,"a":1}},   "url":"{url}" }} ]}}"#
        ),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["items"][0]["id"], keyed, "{again}");
    assert_eq!(again["items"][0]["idempotent_replayed"], true, "{again}");
    assert_eq!(stored(&pb).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_are_registered_and_each_delivered_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let items: Vec<Value> = (0..1000)
        .map(|i| json!({"url": receiver.url(&format!("/n/{i}")), "body": {"n": i}}))
        .collect();
    let (status, answer) = batch(&pb, json!(items)).await;
    assert_eq!(status, 200);
    let ids = support::item_ids(&answer);
    assert_eq!(ids.len(), 1000);
    assert!(
        receiver.wait_for(1000, WAIT).await,
        "{} arrived",
        receiver.count()
    );
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1000, "none twice");
    for (i, id) in ids.iter().enumerate() {
        let got = receiver.requests_for(id);
        assert_eq!(got.len(), 1, "{id}");
        assert_eq!(
            got[0].path,
            format!("/n/{i}"),
            "answers are in the items' order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_batch_is_refused_whole_naming_the_problem() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_SERVER_MAX_BODY_BYTES", "1024"),
        ("POSTBACK_SERVER_MAX_BATCH_BYTES", "65536"),
    ])
    .await;
    let one = json!({"url": receiver.url("/x"), "body": {}, "delay": "1h"});
    let cases = [
        (json!({}), 422, Some("items")),
        (json!({"items": []}), 422, Some("items")),
        (json!({"items": {"url": "x"}}), 422, Some("items")),
        (
            json!({"items": vec![one.clone(); 1001]}),
            422,
            Some("items"),
        ),
        (
            json!({"items": [one.clone()], "extra": 1}),
            422,
            Some("extra"),
        ),
    ];
    for (body, want, field) in cases {
        let (status, answer) = pb
            .request(Method::POST, "/notify/batch", Some(body.clone()), &[])
            .await;
        assert_eq!(status, want, "{body:.80}: {answer}");
        assert_eq!(answer["error"]["field"].as_str(), field, "{answer}");
    }
    let resp = pb
        .http
        .post(pb.url("/notify/batch"))
        .bearer_auth(support::instance::TOKEN)
        .body("{\"items\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_json");

    // Over server.max_batch_bytes: the whole request; one item over
    // server.max_body_bytes: that item alone.
    let big = json!({"url": receiver.url("/x"), "body": "x".repeat(2000)});
    let (status, answer) = batch(&pb, json!(vec![big.clone(); 40])).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("server.max_batch_bytes"));
    let (status, answer) = batch(&pb, json!([one, big])).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["items"][0]["id"].is_string());
    let too_big = &answer["items"][1]["error"];
    assert_eq!(too_big["code"], "invalid_body", "{answer}");
    assert!(too_big["message"]
        .as_str()
        .unwrap()
        .contains("server.max_body_bytes"));
    assert_eq!(stored(&pb).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_belongs_to_the_tokens_tenant_or_the_one_it_names() {
    let f = support::tenants::start(&[]).await;
    let later = |tenant: Option<&str>| {
        let mut item = json!({"url": f.receiver.url("/later"), "body": {}, "delay": "1h"});
        if let Some(t) = tenant {
            item["tenant"] = json!(t);
        }
        item
    };
    let call = |token: &'static str, items: Value| {
        f.call(
            token,
            Method::POST,
            "/notify/batch",
            Some(json!({ "items": items })),
        )
    };

    let (status, answer) = call(
        "tok-checkout-a",
        json!([later(None), later(Some("shop-b"))]),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let own = answer["items"][0]["id"].as_str().unwrap();
    assert_eq!(
        answer["items"][1]["error"]["field"], "tenant",
        "another tenant's item alone is refused"
    );
    let (_, seen) = f
        .get("tok-reader-a", &format!("/notifications/{own}"))
        .await;
    assert_eq!(seen["tenant"], "shop-a");

    let (status, answer) = call(
        "tok-producer",
        json!([later(Some("shop-b")), later(None), later(Some("nowhere"))]),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let b = answer["items"][0]["id"].as_str().unwrap();
    let (_, seen) = f.get("tok-all-b", &format!("/notifications/{b}")).await;
    assert_eq!(seen["tenant"], "shop-b");
    let (status, _) = f.get("tok-reader-a", &format!("/notifications/{b}")).await;
    assert_eq!(status, 404, "shop-a does not see shop-b's");
    assert_eq!(answer["items"][2]["error"]["field"], "tenant");

    let (status, answer) = call("tok-reader-a", json!([later(None)])).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "read is not notify"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_twice_in_one_batch_registers_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let paid =
        json!({"url": receiver.url("/p"), "body": {"order": 7}, "idempotency_key": "order-7"});
    let (status, answer) = batch(
        &pb,
        json!([
            paid,
            {"url": receiver.url("/other"), "body": {}, "idempotency_key": "order-8"},
            paid,
            {"url": receiver.url("/p"), "body": {"order": 70}, "idempotency_key": "order-7"},
        ]),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let items = &answer["items"];
    assert_eq!(items[2]["id"], items[0]["id"], "{answer}");
    assert_eq!(items[2]["idempotent_replayed"], true, "{answer}");
    assert_eq!(
        items[3]["error"]["code"], "idempotency_key_mismatch",
        "{answer}"
    );
    let id = items[0]["id"].as_str().unwrap();
    pb.wait_state(id, "delivered", WAIT).await;
    pb.wait_quiet().await;
    assert_eq!(receiver.requests_for(id).len(), 1, "sent once");
    assert_eq!(receiver.count(), 2);
    assert_eq!(stored(&pb).await, 2);
}
