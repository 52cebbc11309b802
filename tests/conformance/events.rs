//! Events and subscriptions: an event published once reaches every enabled
//! subscription of its tenant whose topics take it, each as a notification of its own
//! with the subscription's settings; a failing one holds up none of the others; a
//! repeated idempotency key publishes nothing new; one tenant's events never reach
//! another's subscriptions, and who may do what.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::tenants::{self, Fleet};
use support::{Postback, WAIT};

async fn call(pb: &Postback, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    pb.request(method, path, body, &[]).await
}

async fn subscribe(pb: &Postback, body: Value) -> String {
    let (status, answer) = call(pb, Method::POST, "/subscriptions", Some(body)).await;
    assert_eq!(status, 201, "{answer}");
    answer["id"].as_str().unwrap().to_string()
}

async fn publish(pb: &Postback, body: Value) -> Value {
    let (status, answer) = call(pb, Method::POST, "/events", Some(body)).await;
    assert_eq!(status, 202, "{answer}");
    answer
}

/// The notification the event `answer` made for `subscription`.
fn delivery_of(answer: &Value, subscription: &str) -> String {
    let deliveries = answer["deliveries"].as_array().unwrap();
    let d = deliveries
        .iter()
        .find(|d| d["subscription"] == subscription)
        .unwrap_or_else(|| panic!("no delivery for {subscription}: {answer}"));
    d["notification"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_each_subscription_and_a_failing_one_holds_up_none_of_the_others() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let orders = subscribe(
        &pb,
        json!({"url": receiver.url("/orders"), "topics": ["payment.*"], "description": "order system",
               "headers": {"x-merchant": "m-1"}}),
    )
    .await;
    let ledger = subscribe(
        &pb,
        json!({"url": receiver.url("/ledger"), "topics": ["payment.succeeded", "refund.*"]}),
    )
    .await;
    let broken = subscribe(
        &pb,
        json!({"url": receiver.url("/broken?fail=99"), "topics": ["payment.*"], "schedule": ["100ms", "100ms"]}),
    )
    .await;

    let answer = publish(
        &pb,
        json!({"topic": "payment.succeeded", "body": {"order": 42}}),
    )
    .await;
    let event = answer["id"].as_str().unwrap().to_string();
    assert!(event.starts_with("evt_"), "{answer}");
    assert_eq!(
        answer["deliveries"].as_array().unwrap().len(),
        3,
        "{answer}"
    );
    let (to_orders, to_ledger, to_broken) = (
        delivery_of(&answer, &orders),
        delivery_of(&answer, &ledger),
        delivery_of(&answer, &broken),
    );

    let delivered = pb.wait_state(&to_orders, "delivered", WAIT).await;
    assert_eq!(delivered["topic"], "payment.succeeded", "{delivered}");
    pb.wait_state(&to_ledger, "delivered", WAIT).await;
    let got = receiver.requests_for(&to_orders);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/orders");
    assert_eq!(
        got[0].header("x-merchant").as_deref(),
        Some("m-1"),
        "the subscription's headers"
    );
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(
        body,
        json!({"order": 42}),
        "the event's body as it was published"
    );
    assert_eq!(receiver.requests_for(&to_ledger).len(), 1);
    assert!(
        receiver.requests_for(&to_broken).len() <= 2,
        "the failing one was still retrying while the others were delivered"
    );

    let dead = pb.wait_state(&to_broken, "dead", WAIT).await;
    assert_eq!(dead["attempts"], 3, "its own schedule: {dead}");
    let (status, shown) = pb.get(&format!("/events/{event}")).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["topic"], "payment.succeeded");
    assert_eq!(shown["body"], json!({"order": 42}));
    let state_of = |sub: &str| {
        let d = shown["deliveries"].as_array().unwrap();
        d.iter().find(|d| d["subscription"] == sub).unwrap()["state"].clone()
    };
    assert_eq!(state_of(&orders), "delivered", "{shown}");
    assert_eq!(state_of(&ledger), "delivered", "{shown}");
    assert_eq!(state_of(&broken), "dead", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_patterns_take_one_segment_and_an_event_that_matches_nothing_is_kept() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let payments = subscribe(
        &pb,
        json!({"url": receiver.url("/p"), "topics": ["payment.*"]}),
    )
    .await;
    let created = subscribe(
        &pb,
        json!({"url": receiver.url("/c"), "topics": ["*.created"]}),
    )
    .await;

    let reached = |answer: &Value| -> Vec<String> {
        let d = answer["deliveries"].as_array().unwrap();
        d.iter()
            .map(|d| d["subscription"].as_str().unwrap().to_string())
            .collect()
    };
    let a = publish(&pb, json!({"topic": "payment.succeeded", "body": {}})).await;
    assert_eq!(reached(&a), vec![payments.clone()]);
    let b = publish(&pb, json!({"topic": "refund.created", "body": {}})).await;
    assert_eq!(reached(&b), vec![created.clone()]);
    let nothing = publish(
        &pb,
        json!({"topic": "payment.refund.created", "body": {"n": 1}}),
    )
    .await;
    assert_eq!(reached(&nothing), Vec::<String>::new(), "{nothing}");

    let (status, listed) = pb.get("/events").await;
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    let newest_first = [&nothing, &b, &a].map(|e| e["id"].as_str().unwrap());
    assert_eq!(ids, newest_first, "every event, newest first: {listed}");
    assert_eq!(listed["items"][0]["deliveries"], 0);
    let (_, of_topic) = pb.get("/events?topic=refund.created").await;
    assert_eq!(of_topic["items"].as_array().unwrap().len(), 1, "{of_topic}");
    assert_eq!(of_topic["items"][0]["id"], b["id"]);
    let (_, page) = pb.get("/events?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let (_, rest) = pb.get(&format!("/events?limit=2&cursor={cursor}")).await;
    assert_eq!(rest["items"][0]["id"], a["id"], "{rest}");

    let (_, topics) = pb.get("/topics").await;
    let names: Vec<&str> = topics["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "payment.refund.created",
            "payment.succeeded",
            "refund.created"
        ]
    );
    assert_eq!(topics["items"][0]["example"], json!({"n": 1}), "{topics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_idempotency_key_publishes_nothing_new() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let sub = subscribe(
        &pb,
        json!({"url": receiver.url("/once"), "topics": ["payment.succeeded"]}),
    )
    .await;
    let event = json!({"topic": "payment.succeeded", "body": {"order": 9}, "idempotency_key": "order-9-paid"});
    let first = publish(&pb, event.clone()).await;
    let notification = delivery_of(&first, &sub);
    pb.wait_state(&notification, "delivered", WAIT).await;

    let resp = reqwest::Client::new()
        .post(pb.url("/events"))
        .bearer_auth(support::instance::TOKEN)
        .json(&event)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    let again: Value = resp.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(delivery_of(&again, &sub), notification);
    assert_eq!(again["deliveries"][0]["state"], "delivered", "{again}");

    let other = json!({"topic": "payment.succeeded", "body": {"order": 10}, "idempotency_key": "order-9-paid"});
    let (status, refused) = call(&pb, Method::POST, "/events", Some(other)).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "idempotency_key_mismatch");
    pb.wait_quiet().await;
    assert_eq!(receiver.requests().len(), 1, "sent once");
    let (_, listed) = pb.get("/events").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_subscription_takes_nothing_until_enabled_and_a_deleted_one_nothing_more() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let sub = subscribe(
        &pb,
        json!({"url": receiver.url("/s"), "topics": ["order.shipped"], "enabled": false}),
    )
    .await;
    let none = publish(&pb, json!({"topic": "order.shipped", "body": {"n": 1}})).await;
    assert_eq!(none["deliveries"], json!([]), "{none}");

    let (status, changed) = call(
        &pb,
        Method::PATCH,
        &format!("/subscriptions/{sub}"),
        Some(json!({"enabled": true, "description": "shipping", "schedule": ["100ms"]})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["enabled"], true);
    assert_eq!(changed["settings"]["schedule"], json!(["100ms"]));
    let (_, shown) = pb.get(&format!("/subscriptions/{sub}")).await;
    assert_eq!(shown["description"], "shipping", "{shown}");
    let one = publish(&pb, json!({"topic": "order.shipped", "body": {"n": 2}})).await;
    let id = delivery_of(&one, &sub);
    pb.wait_state(&id, "delivered", WAIT).await;

    let (status, _) = call(
        &pb,
        Method::PATCH,
        &format!("/subscriptions/{sub}"),
        Some(json!({"schedule": null})),
    )
    .await;
    assert_eq!(status, 200);
    let (_, shown) = pb.get(&format!("/subscriptions/{sub}")).await;
    assert_eq!(
        shown["settings"],
        json!({}),
        "null removes a setting: {shown}"
    );

    let (status, _) = call(&pb, Method::DELETE, &format!("/subscriptions/{sub}"), None).await;
    assert_eq!(status, 204);
    let (status, _) = pb.get(&format!("/subscriptions/{sub}")).await;
    assert_eq!(status, 404);
    let after = publish(&pb, json!({"topic": "order.shipped", "body": {"n": 3}})).await;
    assert_eq!(after["deliveries"], json!([]), "{after}");
    let (_, listed) = pb.get("/subscriptions").await;
    assert_eq!(listed["items"], json!([]), "{listed}");
    let (_, audit) = pb.get("/audit").await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "delete_subscription",
            "update_subscription",
            "update_subscription",
            "create_subscription"
        ],
        "{audit}"
    );
    assert_eq!(
        receiver.requests().len(),
        1,
        "only the event while it was enabled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_subscriptions_and_events_are_refused_naming_the_field_and_store_nothing() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let refused = [
        (json!({"topics": ["a.b"]}), "url"),
        (json!({"url": "ftp://x/y", "topics": ["a.b"]}), "url"),
        (json!({"url": receiver.url("/x")}), "topics"),
        (json!({"url": receiver.url("/x"), "topics": []}), "topics"),
        (
            json!({"url": receiver.url("/x"), "topics": ["a.b", "a..b"]}),
            "topics[1]",
        ),
        (
            json!({"url": receiver.url("/x"), "topics": ["postback.*"]}),
            "topics[0]",
        ),
        (
            json!({"url": receiver.url("/x"), "topics": ["a"], "schedule": ["soon"]}),
            "schedule[0]",
        ),
        (
            json!({"url": receiver.url("/x"), "topics": ["a"], "profile": "nope"}),
            "profile",
        ),
        (
            json!({"url": receiver.url("/x"), "topics": ["a"], "colour": "red"}),
            "colour",
        ),
        (
            json!({"url": receiver.url("/x"), "topics": ["a"], "headers": {"webhook-id": "x"}}),
            "headers",
        ),
    ];
    for (body, field) in refused {
        let (status, answer) = call(&pb, Method::POST, "/subscriptions", Some(body.clone())).await;
        assert_eq!(status, 422, "{body} → {answer}");
        let named = answer["error"]["field"].as_str().unwrap_or_default();
        assert!(
            named.starts_with(field),
            "{body} should name {field}: {answer}"
        );
    }
    let (_, listed) = pb.get("/subscriptions").await;
    assert_eq!(listed["items"], json!([]), "nothing stored: {listed}");

    for (body, field) in [
        (json!({"body": {}}), "topic"),
        (json!({"topic": "a b", "body": {}}), "topic"),
        (
            json!({"topic": "postback.endpoint.paused", "body": {}}),
            "topic",
        ),
        (json!({"topic": "a"}), "body"),
        (
            json!({"topic": "a", "body": {}, "idempotency_key": ""}),
            "idempotency_key",
        ),
    ] {
        let (status, answer) = call(&pb, Method::POST, "/events", Some(body.clone())).await;
        assert_eq!(status, 422, "{body} → {answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    let (_, listed) = pb.get("/events").await;
    assert_eq!(listed["items"], json!([]), "nothing stored: {listed}");
    for path in ["/subscriptions/sub_nope", "/events/evt_nope"] {
        let (status, _) = pb.get(path).await;
        assert_eq!(status, 422, "{path}");
    }
}

/// Topics and rate keys that would show as something they are not: a right-to-left
/// override (`gnp.exe` shown backwards), zero-width and other invisible characters.
const INVISIBLE: [&str; 5] = [
    "paid\u{202E}gnp.exe",
    "pay\u{200B}ment",
    "paid\u{2066}x\u{2069}",
    "\u{FEFF}paid",
    "paid\u{E0041}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisible_characters_are_refused_in_topics_and_rate_keys_naming_the_field() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/x");
    for bad in INVISIBLE {
        let refused = [
            (
                "/notify",
                json!({"url": url, "body": {}, "topic": bad}),
                "topic",
            ),
            (
                "/notify",
                json!({"url": url, "body": {}, "rate_key": bad}),
                "rate_key",
            ),
            (
                "/events",
                json!({"topic": format!("a.{bad}"), "body": {}}),
                "topic",
            ),
            (
                "/subscriptions",
                json!({"url": url, "topics": [bad]}),
                "topics[0]",
            ),
            (
                "/subscriptions",
                json!({"url": url, "topics": ["a"], "rate_key": bad}),
                "rate_key",
            ),
        ];
        for (path, body, field) in refused {
            let (status, answer) = call(&pb, Method::POST, path, Some(body.clone())).await;
            assert_eq!(status, 422, "{body} → {answer}");
            assert_eq!(answer["error"]["field"], field, "{body} → {answer}");
        }
    }
    let (status, answer) = pb
        .notify(json!({"url": url, "body": {}, "topic": "支付 成功", "rate_key": "café"}))
        .await;
    assert_eq!(
        status, 202,
        "visible letters of any script are labels: {answer}"
    );
    let (_, listed) = pb.get("/subscriptions").await;
    assert_eq!(listed["items"], json!([]), "nothing stored: {listed}");
}

async fn as_token(
    f: &Fleet,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    f.call(token, method, path, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_events_never_reach_anothers_subscriptions_and_roles_hold() {
    let f = tenants::start(&[]).await;
    let r = &f.receiver;
    let sub = json!({"url": r.url("/a"), "topics": ["payment.*"]});
    let (status, a) = as_token(&f, "tok-ops-a", Method::POST, "/subscriptions", Some(sub)).await;
    assert_eq!(status, 201, "{a}");
    assert_eq!(a["tenant"], "shop-a");
    let a_sub = a["id"].as_str().unwrap().to_string();
    let sub_b = json!({"url": r.url("/b"), "topics": ["payment.*"]});
    let (status, b) = as_token(&f, "tok-all-b", Method::POST, "/subscriptions", Some(sub_b)).await;
    assert_eq!(status, 201, "{b}");

    // Refused callers: publishing needs `notify`, subscribing `operate`, reading `read`;
    // a tenant-bound token acts for its tenant only.
    let event = json!({"topic": "payment.succeeded", "body": {"for": "a"}});
    let sub_any = json!({"url": r.url("/x"), "topics": ["a"]});
    for (token, method, path, body) in [
        ("tok-reader-a", Method::POST, "/events", Some(event.clone())),
        (
            "tok-checkout-a",
            Method::POST,
            "/subscriptions",
            Some(sub_any.clone()),
        ),
        (
            "tok-reader-a",
            Method::POST,
            "/subscriptions",
            Some(sub_any.clone()),
        ),
        ("tok-checkout-a", Method::GET, "/subscriptions", None),
        ("tok-checkout-a", Method::GET, "/events", None),
        ("tok-audit-a", Method::GET, "/topics", None),
        (
            "tok-reader-a",
            Method::DELETE,
            &format!("/subscriptions/{a_sub}"),
            None,
        ),
    ] {
        let (status, answer) = as_token(&f, token, method.clone(), path, body).await;
        assert_eq!(status, 403, "{token} {method} {path}: {answer}");
    }
    let other = json!({"topic": "payment.succeeded", "body": {}, "tenant": "shop-b"});
    let (status, answer) =
        as_token(&f, "tok-checkout-a", Method::POST, "/events", Some(other)).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "tenant");

    let (status, published) =
        as_token(&f, "tok-checkout-a", Method::POST, "/events", Some(event)).await;
    assert_eq!(status, 202, "{published}");
    assert_eq!(published["tenant"], "shop-a");
    let deliveries = published["deliveries"].as_array().unwrap();
    assert_eq!(
        deliveries.len(),
        1,
        "shop-a's subscription only: {published}"
    );
    assert_eq!(deliveries[0]["subscription"], a_sub.as_str());
    let event_id = published["id"].as_str().unwrap();
    let id = deliveries[0]["notification"].as_str().unwrap();
    f.pb.wait_state(id, "delivered", WAIT).await;
    assert!(
        r.requests().iter().all(|q| q.path == "/a"),
        "nothing reached shop-b's subscription"
    );

    // shop-b sees none of shop-a's subscriptions, events or topics, and changes none.
    let b_paths = [
        format!("/subscriptions/{a_sub}"),
        format!("/events/{event_id}"),
    ];
    for path in &b_paths {
        let (status, _) = f.get("tok-all-b", path).await;
        assert_eq!(status, 404, "{path}");
    }
    let patch = Some(json!({"url": r.url("/stolen")}));
    let (status, _) = as_token(&f, "tok-all-b", Method::PATCH, &b_paths[0], patch).await;
    assert_eq!(status, 404);
    let (status, _) = as_token(&f, "tok-all-b", Method::DELETE, &b_paths[0], None).await;
    assert_eq!(status, 404);
    let resend = format!("/events/{event_id}/resend");
    let (status, _) = as_token(&f, "tok-all-b", Method::POST, &resend, None).await;
    assert_eq!(status, 404, "another tenant's event is not resent");
    let (status, _) = as_token(&f, "tok-reader-a", Method::POST, &resend, None).await;
    assert_eq!(status, 403, "resending needs operate");
    for path in ["/subscriptions", "/events", "/topics"] {
        let (status, listed) = f.get("tok-all-b", path).await;
        assert_eq!(status, 200, "{listed}");
        let text = listed.to_string();
        assert!(
            !text.contains("shop-a") && !text.contains(&a_sub),
            "{path}: {listed}"
        );
    }
    let (status, _) = f.get("tok-all-b", "/events?tenant=shop-a").await;
    assert_eq!(status, 403);
    let (_, mine) = f.get("tok-ops-a", &format!("/subscriptions/{a_sub}")).await;
    assert_eq!(mine["url"], r.url("/a"), "unchanged: {mine}");

    // A subscription's URL is held to its tenant's allowed hosts, as a notification's is.
    let elsewhere = json!({"url": "http://127.0.0.2:9/x", "topics": ["a"]});
    let (status, answer) = as_token(
        &f,
        "tok-ops-a",
        Method::POST,
        "/subscriptions",
        Some(elsewhere),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "url");
    // Every tenant's, for a token of every tenant.
    let (_, all) = f.get("tok-ops", "/subscriptions").await;
    assert_eq!(all["items"].as_array().unwrap().len(), 2, "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_publishes_each_event_on_its_own_and_answers_in_order() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let sub = subscribe(
        &pb,
        json!({"url": receiver.url("/b"), "topics": ["order.*"]}),
    )
    .await;
    let batch = json!({"items": [
        {"topic": "order.paid", "body": {"n": 1}, "idempotency_key": "o-1"},
        {"body": {"n": 2}},
        {"topic": "order.shipped", "body": {"n": 3}},
    ]});
    let (status, answer) = call(&pb, Method::POST, "/events/batch", Some(batch.clone())).await;
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["topic"], "order.paid");
    assert_eq!(items[1]["error"]["field"], "topic", "{answer}");
    assert_eq!(items[2]["topic"], "order.shipped");
    let (first, third) = (delivery_of(&items[0], &sub), delivery_of(&items[2], &sub));
    pb.wait_state(&first, "delivered", WAIT).await;
    pb.wait_state(&third, "delivered", WAIT).await;

    let again =
        json!({"items": [{"topic": "order.paid", "body": {"n": 1}, "idempotency_key": "o-1"}]});
    let (_, answer) = call(&pb, Method::POST, "/events/batch", Some(again)).await;
    assert_eq!(answer["items"][0]["idempotent_replayed"], true, "{answer}");
    assert_eq!(answer["items"][0]["id"], items[0]["id"]);
    let (status, _) = call(
        &pb,
        Method::POST,
        "/events/batch",
        Some(json!({"items": []})),
    )
    .await;
    assert_eq!(status, 422);
    pb.wait_quiet().await;
    assert_eq!(receiver.requests().len(), 2, "each event sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_resent_to_one_subscription_or_to_all_with_the_same_webhook_ids() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let one = subscribe(&pb, json!({"url": receiver.url("/one"), "topics": ["a.b"]})).await;
    let two = subscribe(&pb, json!({"url": receiver.url("/two"), "topics": ["a.b"]})).await;
    let event = publish(&pb, json!({"topic": "a.b", "body": {"x": 1}})).await;
    let id = event["id"].as_str().unwrap();
    let (to_one, to_two) = (delivery_of(&event, &one), delivery_of(&event, &two));
    pb.wait_state(&to_one, "delivered", WAIT).await;
    pb.wait_state(&to_two, "delivered", WAIT).await;

    let path = format!("/events/{id}/resend");
    let (status, answer) = call(&pb, Method::POST, &path, Some(json!({"subscription": one}))).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["count"], 1);
    let done =
        support::eventually(WAIT, || async { receiver.requests_for(&to_one).len() == 2 }).await;
    assert!(done, "sent again to the one named, with its webhook-id");
    pb.wait_state(&to_one, "delivered", WAIT).await;
    assert_eq!(receiver.requests_for(&to_two).len(), 1, "not to the other");

    let (_, answer) = call(&pb, Method::POST, &path, None).await;
    assert_eq!(answer["count"], 2, "{answer}");
    let done = support::eventually(WAIT, || async {
        receiver.requests_for(&to_one).len() == 3 && receiver.requests_for(&to_two).len() == 2
    })
    .await;
    assert!(done, "both sent again");

    let unknown = json!({"subscription": "sub_0000000000000000000000"});
    let (status, _) = call(&pb, Method::POST, &path, Some(unknown)).await;
    assert_eq!(status, 404);
    let (_, audit) = pb.get("/audit?action=resend_event").await;
    let counts: Vec<u64> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [2, 1], "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_match_its_topics_schema_is_refused_naming_where() {
    let schemas = tempfile::tempdir().unwrap();
    let schema = json!({
        "type": "object", "required": ["order", "amount"],
        "properties": {"order": {"type": "integer"}, "amount": {"type": "number", "minimum": 0}}
    });
    std::fs::write(
        schemas.path().join("payment.succeeded.json"),
        schema.to_string(),
    )
    .unwrap();
    let dir = schemas.path().to_str().unwrap();
    let (_backend, receiver, pb) = support::start_any(&[("POSTBACK_EVENTS_SCHEMA_DIR", dir)]).await;
    subscribe(
        &pb,
        json!({"url": receiver.url("/s"), "topics": ["payment.*"]}),
    )
    .await;

    for (body, field) in [
        (json!({"order": 1, "amount": -5}), "body/amount"),
        (json!({"order": "one", "amount": 5}), "body/order"),
        (json!({"order": 1}), "body"),
    ] {
        let event = json!({"topic": "payment.succeeded", "body": body});
        let (status, answer) = call(&pb, Method::POST, "/events", Some(event)).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("payment.succeeded"),
            "{answer}"
        );
    }
    let (_, listed) = pb.get("/events").await;
    assert_eq!(listed["items"], json!([]), "nothing stored: {listed}");
    publish(
        &pb,
        json!({"topic": "payment.succeeded", "body": {"order": 1, "amount": 5}}),
    )
    .await;
    publish(
        &pb,
        json!({"topic": "payment.failed", "body": "no schema, anything goes"}),
    )
    .await;
    assert!(receiver.wait_for(2, WAIT).await, "both sent");
}

/// A schema reads an event's body as values: one that holds what no value can (a number
/// beyond a double's range, a lone surrogate) is refused naming where, in a batch for
/// that item alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_its_schema_cannot_read_is_refused_naming_where_and_a_batch_answers_every_item() {
    let schemas = tempfile::tempdir().unwrap();
    let schema = json!({"type": ["object", "array"]});
    std::fs::write(
        schemas.path().join("payment.succeeded.json"),
        schema.to_string(),
    )
    .unwrap();
    let dir = schemas.path().to_str().unwrap();
    let (_backend, _receiver, pb) =
        support::start_any(&[("POSTBACK_EVENTS_SCHEMA_DIR", dir)]).await;
    let event = |body: &str| format!(r#"{{"topic": "payment.succeeded", "body": {body}}}"#);
    let post = |path: &'static str, raw: String| {
        let pb = &pb;
        async move {
            let (status, answer, _) = pb
                .request_raw(support::instance::TOKEN, Method::POST, path, &raw, &[])
                .await;
            (status, answer)
        }
    };
    let unreadable = [("[1e400]", "body/0"), (r#"{"s": "\ud800"}"#, "body/s")];
    for (body, field) in unreadable {
        let (status, answer) = post("/events", event(body)).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_field", "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("payment.succeeded"), "{answer}");
    }
    let items = [r#"{"n": 1}"#, unreadable[0].0, unreadable[1].0, "[2]"].map(event);
    let batch = format!(r#"{{"items": [{}]}}"#, items.join(", "));
    let (status, answer) = post("/events/batch", batch).await;
    assert_eq!(status, 200, "{answer}");
    let answered = answer["items"].as_array().unwrap();
    assert_eq!(answered.len(), 4, "{answer}");
    assert!(answered[0]["id"].is_string(), "{answer}");
    assert_eq!(answered[1]["error"]["field"], "body/0", "{answer}");
    assert_eq!(answered[2]["error"]["field"], "body/s", "{answer}");
    assert!(answered[3]["id"].is_string(), "{answer}");
    let (_, listed) = pb.get("/events").await;
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        2,
        "only the readable stored: {listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_topics_past_retention_are_forgotten() {
    let env = [("POSTBACK_RETENTION_FINISHED_MAX_AGE", "2s")];
    let (backend, _receiver, mut pb) = support::start_any(&env).await;
    let old = publish(
        &pb,
        json!({"topic": "order.old", "body": {"n": 1}, "idempotency_key": "k-1"}),
    )
    .await;
    let (_, listed) = pb.get("/events").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    pb.kill();
    // Time is the point: the event grows older than its retention while no instance runs.
    support::hold(std::time::Duration::from_millis(2_500)).await;

    // A new instance sweeps at once: the event, its key and its topic are gone.
    let pb = backend.postback(&env).await;
    let forgotten = support::eventually(WAIT, || async {
        let (events, topics) = (pb.get("/events").await.1, pb.get("/topics").await.1);
        events["items"] == json!([]) && topics["items"] == json!([])
    })
    .await;
    assert!(
        forgotten,
        "{} {}",
        pb.get("/events").await.1,
        pb.get("/topics").await.1
    );
    let (status, _) = pb
        .get(&format!("/events/{}", old["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 404);
    let again = publish(
        &pb,
        json!({"topic": "order.old", "body": {"n": 2}, "idempotency_key": "k-1"}),
    )
    .await;
    assert_ne!(
        again["id"], old["id"],
        "the key was forgotten with its event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_header_makes_a_publish_safe_to_repeat_as_on_notify() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let sub = subscribe(
        &pb,
        json!({"url": receiver.url("/h"), "topics": ["payment.*"]}),
    )
    .await;
    let event = json!({"topic": "payment.succeeded", "body": {"order": 3}});
    let header = [("idempotency-key", "order-3-paid")];
    let (status, first) = pb
        .request(Method::POST, "/events", Some(event.clone()), &header)
        .await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["idempotency_key"], "order-3-paid", "{first}");
    let (status, again) = pb
        .request(Method::POST, "/events", Some(event.clone()), &header)
        .await;
    assert_eq!((status, &again["id"]), (202, &first["id"]), "{again}");
    // The body's field names the same key: the same publish.
    let mut in_body = event.clone();
    in_body["idempotency_key"] = json!("order-3-paid");
    let (status, same) = pb
        .request(Method::POST, "/events", Some(in_body.clone()), &header)
        .await;
    assert_eq!((status, &same["id"]), (202, &first["id"]), "{same}");
    // Two different keys for one publish: refused, nothing published.
    let (status, refused) = pb
        .request(
            Method::POST,
            "/events",
            Some(in_body),
            &[("idempotency-key", "other")],
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "idempotency_key", "{refused}");
    // A batch's items carry their own keys; a header there would be ignored, so it is
    // refused.
    let batch = json!({"items": [event]});
    let (status, refused) = pb
        .request(Method::POST, "/events/batch", Some(batch.clone()), &header)
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "Idempotency-Key", "{refused}");
    let (status, refused) = pb
        .request(
            Method::POST,
            "/notify/batch",
            Some(json!({"items": [{"url": receiver.url("/x"), "body": {}}]})),
            &header,
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "Idempotency-Key", "{refused}");

    let notification = delivery_of(&first, &sub);
    pb.wait_state(&notification, "delivered", WAIT).await;
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1, "published once, delivered once");
    let (_, listed) = pb.get("/events").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriptions_credentials_are_write_only() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let headers =
        json!({"Authorization": "Bearer s3cr3t-token", "X-Api-Key": "k-123", "X-Merchant": "m-1"});
    let (status, created) = call(
        &pb,
        Method::POST,
        "/subscriptions",
        Some(json!({"url": receiver.url("/creds"), "topics": ["a.b"], "headers": headers})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let (_, shown) = pb.get(&format!("/subscriptions/{id}")).await;
    let (_, listed) = pb.get("/subscriptions").await;
    let changed = json!({"description": "renamed"});
    let (_, patched) = call(
        &pb,
        Method::PATCH,
        &format!("/subscriptions/{id}"),
        Some(changed),
    )
    .await;
    for view in [&created, &shown, &listed["items"][0], &patched] {
        let text = view.to_string();
        assert!(
            !text.contains("s3cr3t") && !text.contains("k-123"),
            "{view}"
        );
        let headers = &view["settings"]["headers"];
        assert_eq!(headers["Authorization"], "(withheld)", "{view}");
        assert_eq!(headers["X-Api-Key"], "(withheld)", "{view}");
        assert_eq!(headers["X-Merchant"], "m-1", "{view}");
    }
    // What was shown, sent back, keeps what it stands for.
    let round_trip = json!({"headers": shown["settings"]["headers"].clone()});
    let (status, _) = call(
        &pb,
        Method::PATCH,
        &format!("/subscriptions/{id}"),
        Some(round_trip),
    )
    .await;
    assert_eq!(status, 200);

    let answer = publish(&pb, json!({"topic": "a.b", "body": {}})).await;
    let notification = delivery_of(&answer, &id);
    pb.wait_state(&notification, "delivered", WAIT).await;
    let got = receiver.requests_for(&notification);
    assert_eq!(
        got[0].header("authorization").as_deref(),
        Some("Bearer s3cr3t-token")
    );
    assert_eq!(got[0].header("x-api-key").as_deref(), Some("k-123"));
}

/// The request the receiver got at `path`, the latest.
fn received_at(f: &Fleet, path: &str) -> support::receiver::Received {
    let mut got = f.receiver.requests().into_iter().rev();
    got.find(|r| r.path == path)
        .unwrap_or_else(|| panic!("nothing received at {path}"))
}

/// Publishes a `moved.paid` event as shop-a's producer and waits until the notification
/// it made is delivered.
async fn delivered_event(f: &Fleet) {
    let event = json!({"topic": "moved.paid", "body": {}});
    let (status, answer) =
        as_token(f, "tok-checkout-a", Method::POST, "/events", Some(event)).await;
    assert_eq!(status, 202, "{answer}");
    let id = answer["deliveries"][0]["notification"].as_str().unwrap();
    f.pb.wait_state(id, "delivered", WAIT).await;
}

/// A subscription's stored headers (an `Authorization` for its receiver) do not follow it
/// to another URL: only headers given with the new URL go there, as a replay's; the same
/// URL written back keeps them; and who may change a subscription is held to its role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_moved_to_another_url_takes_none_of_its_stored_headers_there() {
    let f = tenants::start(&[]).await;
    let r = &f.receiver;
    let headers = json!({"authorization": "Bearer secret", "x-shop": "7"});
    let sub = json!({"url": r.url("/old"), "topics": ["moved.*"], "headers": headers});
    let (status, created) =
        as_token(&f, "tok-ops-a", Method::POST, "/subscriptions", Some(sub)).await;
    assert_eq!(status, 201, "{created}");
    let path = format!("/subscriptions/{}", created["id"].as_str().unwrap());
    let patch = |token: &'static str, body: Value| {
        let (f, path) = (&f, &path);
        async move { as_token(f, token, Method::PATCH, path, Some(body)).await }
    };

    let (status, answer) = patch("tok-reader-a", json!({"url": r.url("/stolen")})).await;
    assert_eq!(
        status, 403,
        "changing a subscription needs its role: {answer}"
    );
    let (status, moved) = patch("tok-ops-a", json!({"url": r.url("/new")})).await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["settings"].get("headers"), None, "{moved}");
    delivered_event(&f).await;
    let sent = received_at(&f, "/new");
    assert_eq!(
        sent.header("authorization"),
        None,
        "not taken to the new URL"
    );
    assert_eq!(sent.header("x-shop"), None);
    assert!(f.receiver.requests().iter().all(|q| q.path != "/stolen"));

    let withheld = json!({"url": r.url("/newer"), "headers": {"authorization": "(withheld)"}});
    let (status, answer) = patch("tok-ops-a", withheld).await;
    assert_eq!(status, 422, "nothing stored for it to stand for: {answer}");
    assert_eq!(
        answer["error"]["field"], "headers.authorization",
        "{answer}"
    );
    let given = json!({"url": r.url("/newer"), "headers": {"authorization": "Bearer fresh"}});
    let (status, answer) = patch("tok-ops-a", given).await;
    assert_eq!(status, 200, "{answer}");
    let same = json!({"url": r.url("/newer"), "description": "the same URL written back"});
    let (status, answer) = patch("tok-ops-a", same).await;
    assert_eq!(status, 200, "{answer}");
    delivered_event(&f).await;
    let sent = received_at(&f, "/newer");
    assert_eq!(
        sent.header("authorization").as_deref(),
        Some("Bearer fresh"),
        "the headers given with the new URL, kept while it stays"
    );

    let (_, audit) = f
        .get("tok-audit-a", "/audit?action=update_subscription")
        .await;
    let urls: Vec<&Value> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["url"])
        .collect();
    assert_eq!(
        urls,
        [
            &Value::Null,
            &json!({"from": r.url("/new"), "to": r.url("/newer")}),
            &json!({"from": r.url("/old"), "to": r.url("/new")}),
        ],
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_nested_deeper_than_the_limit_is_refused_and_stores_nothing() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let mut rule = json!("x");
    for _ in 0..125 {
        rule = json!({"json_pointer": "/a", "json_equals": rule});
    }
    let deep = json!({"url": receiver.url("/deep"), "topics": ["a.b"], "success": rule});
    let (status, answer) = call(&pb, Method::POST, "/subscriptions", Some(deep)).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "success", "{answer}");
    let (status, listed) = pb.get("/subscriptions").await;
    assert_eq!((status, &listed["items"]), (200, &json!([])), "{listed}");
    let fine = json!({"url": receiver.url("/fine"), "topics": ["a.b"]});
    let (status, answer) = call(&pb, Method::POST, "/subscriptions", Some(fine)).await;
    assert_eq!(status, 201, "{answer}");
}

/// A subscription document an earlier build stored deeper than any reader reads: it is
/// named, costs nothing else, and can be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_that_cannot_be_read_costs_only_itself_and_can_be_deleted() {
    use postback::store::collections::{Change, Collection};
    let (backend, receiver, mut pb) = support::start_any(&[]).await;
    let good = subscribe(
        &pb,
        json!({"url": receiver.url("/good"), "topics": ["a.*"]}),
    )
    .await;
    // The embedded store's file is the instance's alone while it runs.
    pb.terminate();
    let broken = postback::domain::SubscriptionId::new().to_string();
    let rule = format!(
        "{}\"x\"{}",
        "{\"json_equals\":".repeat(140),
        "}".repeat(140)
    );
    let doc = format!(
        r#"{{"id":"{broken}","tenant":"default","url":"{}","topics":["a.*"],"enabled":true,"settings":{{"success":{rule}}},"created_at":1,"updated_at":1}}"#,
        receiver.url("/broken")
    );
    let store = backend.store().await;
    let written = store
        .write(&[
            Change::put(Collection::Subscriptions, &broken, doc),
            Change::put(
                Collection::TenantSubscriptions,
                format!("default {broken}"),
                "",
            ),
        ])
        .await;
    assert!(written.unwrap());
    drop(store);
    let pb = backend.postback(&[]).await;

    let (status, listed) = pb.get("/subscriptions").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(support::item_ids(&listed), vec![good.as_str()], "{listed}");
    assert_eq!(listed["unreadable"][0]["id"], broken, "{listed}");
    let (status, shown) = pb.get(&format!("/subscriptions/{broken}")).await;
    assert_eq!(status, 409, "{shown}");
    assert_eq!(shown["error"]["code"], "unreadable", "{shown}");
    let answer = publish(&pb, json!({"topic": "a.b", "body": {}})).await;
    pb.wait_state(&delivery_of(&answer, &good), "delivered", WAIT)
        .await;
    let (status, answer) = call(
        &pb,
        Method::POST,
        "/subscriptions",
        Some(json!({"url": receiver.url("/new"), "topics": ["a.*"]})),
    )
    .await;
    assert_eq!(status, 201, "{answer}");

    let (status, _) = call(
        &pb,
        Method::DELETE,
        &format!("/subscriptions/{broken}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (_, listed) = pb.get("/subscriptions").await;
    assert!(
        listed.get("unreadable").is_none_or(|u| u == &json!([])),
        "{listed}"
    );
    assert_eq!(support::item_ids(&listed).len(), 2, "{listed}");
}

/// What the fan-out sweep finds in the store when an event was stored and its
/// notification not registered: the event (published 20 s ago) naming `notification` for
/// `subscription`, listed among its tenant's events, and its unfinished fan-out.
fn cut_short(
    event: &str,
    subscription: &str,
    notification: &str,
) -> Vec<postback::store::collections::Change> {
    use postback::store::collections::{Change, Collection};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let doc = json!({
        "id": event, "tenant": "default", "topic": "payment.succeeded", "body": {"event": event},
        "created_at": now - 20_000, "fingerprint": "f",
        "deliveries": [{"subscription": subscription, "notification": notification}],
    });
    vec![
        Change::put(Collection::Events, event, doc.to_string()),
        Change::put(
            Collection::TenantEvents,
            format!("default {event}"),
            "payment.succeeded",
        ),
        Change::put(Collection::Fanouts, event, "1000"),
    ]
}

/// Fan-outs that cannot be finished hold up none published after them: 101 whose
/// subscription cannot be read (left out, as a deleted one is) and 3 whose
/// registration the store refuses for good (its idempotency key holds another request:
/// the event's delivery shows the error), before one that can be finished, which the
/// first sweep of a new instance registers and delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanouts_that_cannot_be_finished_hold_up_none_published_after_them() {
    use postback::domain::{EventId, JobId, SubscriptionId, Tenant};
    use postback::store::collections::{Change, Collection};
    use postback::store::Idempotency;

    let backend = support::Backend::start();
    let receiver = support::Receiver::start().await;
    let mut pb = backend.postback(&[]).await;
    let good = subscribe(
        &pb,
        json!({"url": receiver.url("/later"), "topics": ["payment.*"]}),
    )
    .await;
    pb.kill();

    let store = backend.store().await;
    let unreadable = SubscriptionId::new().to_string();
    let put = Change::put(Collection::Subscriptions, &unreadable, "not a subscription");
    assert!(store.write(&[put]).await.unwrap());
    for _ in 0..101 {
        let (event, id) = (EventId::new().to_string(), JobId::new(0).to_string());
        assert!(store
            .write(&cut_short(&event, &unreadable, &id))
            .await
            .unwrap());
    }
    let mut refused = Vec::new();
    for _ in 0..3 {
        let (event, id) = (EventId::new().to_string(), JobId::new(0).to_string());
        assert!(store.write(&cut_short(&event, &good, &id)).await.unwrap());
        let held = Idempotency {
            key: format!("event {event} {good}"),
            tenant: Tenant::default(),
            fingerprint: postback::domain::Fingerprint::of_request(b"another-request"),
            ttl: std::time::Duration::from_secs(86_400),
            moved_from: None,
        };
        let other = support::fixtures::notification(&["1s"], std::time::Duration::from_secs(3600));
        store.enqueue(&other, Some(&held)).await.unwrap();
        refused.push(event);
    }
    let (newest, notification) = (EventId::new().to_string(), JobId::new(0).to_string());
    assert!(store
        .write(&cut_short(&newest, &good, &notification))
        .await
        .unwrap());
    drop(store);

    let pb = backend.postback(&[]).await;
    let path = format!("/notifications/{notification}");
    let delivered = support::eventually(WAIT, || async {
        pb.get(&path).await.1["state"] == "delivered"
    })
    .await;
    assert!(
        delivered,
        "registered and delivered: {}",
        pb.get(&path).await.1
    );
    assert_eq!(receiver.requests_for(&notification).len(), 1);
    for event in &refused {
        let (_, shown) = pb.get(&format!("/events/{event}")).await;
        let delivery = &shown["deliveries"][0];
        assert_eq!(
            delivery["error"]["code"], "idempotency_key_mismatch",
            "{shown}"
        );
        assert_eq!(delivery["notification"], Value::Null, "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schemas_ref_is_followed_within_its_directory_and_stops_start_up_outside_it() {
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("secret.json");
    std::fs::write(&outside, r#"{"type": "object"}"#).unwrap();
    let schemas = root.path().join("schemas");
    std::fs::create_dir_all(schemas.join("defs")).unwrap();
    let amount = json!({"type": "number", "minimum": 0});
    std::fs::write(schemas.join("defs/amount.json"), amount.to_string()).unwrap();
    let paid = json!({"type": "object", "properties": {"amount": {"$ref": "defs/amount.json"}}});
    std::fs::write(schemas.join("payment.succeeded.json"), paid.to_string()).unwrap();
    let dir = schemas.to_str().unwrap();
    let (_backend, _receiver, pb) =
        support::start_any(&[("POSTBACK_EVENTS_SCHEMA_DIR", dir)]).await;
    let event = json!({"topic": "payment.succeeded", "body": {"amount": -5}});
    let (status, answer) = call(&pb, Method::POST, "/events", Some(event)).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "body/amount", "{answer}");
    drop(pb);

    for reference in [
        "../secret.json".to_string(),
        outside.to_str().unwrap().to_string(),
        format!("file://{}", outside.display()),
        "https://schemas.example/secret.json".to_string(),
    ] {
        let refund = json!({"properties": {"x": {"$ref": reference}}});
        std::fs::write(schemas.join("refund.created.json"), refund.to_string()).unwrap();
        let said = Postback::refused_start(&[("POSTBACK_EVENTS_SCHEMA_DIR", dir)]);
        assert!(
            said.contains("events.schema_dir")
                && said.contains("refund.created.json refers to")
                && said.contains("secret.json")
                && said.contains("outside the directory"),
            "{reference}: {said}"
        );
    }
}
