//! Pausing an endpoint (`POST /endpoints/{id}/pause`, `/resume`): its notifications are
//! held (listed as `held`, never attempted, never dead) while it is paused, and let go
//! once resumed, each ordering key in its order; another endpoint, and the same origin of
//! another tenant, keep going meanwhile. Only a token with `operate` of the endpoint's
//! tenant pauses it. On every backend (`scripts/test.sh`).

use crate::holds::arrived;
use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::tenants::{self, Fleet};
use support::{Receiver, WAIT};

/// The id of the endpoint at `receiver`'s origin that `token` lists, once listed.
async fn endpoint_id(f: &Fleet, token: &str, receiver: &Receiver) -> String {
    let found = f.pb.endpoint_listed(token, "", &receiver.url("/")).await;
    found["id"].as_str().unwrap().to_string()
}

async fn post(f: &Fleet, token: &str, path: &str) -> (u16, Value) {
    f.call(token, Method::POST, path, None).await
}

/// Registers one notification for `key` (an ordering key, or none for "loose") with its
/// `seq` in the body.
async fn register(f: &Fleet, token: &str, url: &str, key: &str, seq: u64) -> String {
    let mut body = json!({"url": url, "body": {"key": key, "seq": seq}});
    if key != "loose" {
        body["ordering_key"] = json!(key);
    }
    f.register(token, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_endpoint_holds_its_notifications_and_resuming_lets_them_go_in_order() {
    let f = tenants::start(&[]).await;
    let elsewhere = Receiver::start().await;
    let first = register(&f, "tok-checkout-a", &f.receiver.url("/ok"), "first", 0).await;
    f.pb.wait_state(&first, "delivered", WAIT).await;
    let id = endpoint_id(&f, "tok-reader-a", &f.receiver).await;

    let (status, paused) = post(&f, "tok-ops-a", &format!("/endpoints/{id}/pause")).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["state"], "paused", "{paused}");
    assert_eq!(paused["paused"]["by"], "ops-a", "{paused}");

    let url = f.receiver.url("/ok");
    let mut ordered = Vec::new();
    for seq in 0..4 {
        ordered.push(register(&f, "tok-checkout-a", &url, "k", seq).await);
    }
    let mut loose = Vec::new();
    for seq in 0..3 {
        loose.push(register(&f, "tok-checkout-a", &url, "loose", seq).await);
    }
    let other = register(&f, "tok-checkout-a", &elsewhere.url("/ok"), "other", 0).await;
    f.pb.wait_state(&other, "delivered", WAIT).await;
    for id in loose.iter().chain(&ordered[..1]) {
        f.pb.wait_state(id, "held", WAIT).await;
    }

    // Held: listed as such, with no attempt and no time of their own, and never sent.
    let (status, held) = f.get("tok-reader-a", "/notifications?state=held").await;
    assert_eq!(status, 200, "{held}");
    let mut listed = support::item_ids(&held);
    listed.sort();
    let mut expected: Vec<&str> = loose
        .iter()
        .chain(&ordered[..1])
        .map(String::as_str)
        .collect();
    expected.sort();
    assert_eq!(listed, expected, "{held}");
    for item in held["items"].as_array().unwrap() {
        assert_eq!(
            (item["attempts"].as_u64(), &item["next_attempt_at"]),
            (Some(0), &Value::Null),
            "{item}"
        );
    }
    let waiting = f.pb.notification(&ordered[1]).await;
    assert_eq!(
        (&waiting["state"], &waiting["waiting"]),
        (&json!("scheduled"), &json!(true)),
        "{waiting}"
    );
    support::sent_after(&f.pb, "0s").await;
    assert_eq!(f.receiver.requests().len(), 1, "only the first was sent");
    // The endpoint's view counts them: the key's three behind its first are pending.
    let (_, shown) = f.get("tok-reader-a", &format!("/endpoints/{id}")).await;
    assert_eq!(
        shown["notifications"],
        json!({"pending": 3, "held": 4, "held_back": 0, "complete": true}),
        "{shown}"
    );
    let (_, listed) = f.get("tok-reader-a", "/endpoints").await;
    assert!(
        listed["items"][0].get("notifications").is_none(),
        "{listed}"
    );

    let (status, resumed) = post(&f, "tok-ops-a", &format!("/endpoints/{id}/resume")).await;
    assert_eq!(
        (status, &resumed["state"]),
        (200, &json!("healthy")),
        "{resumed}"
    );
    assert_eq!(resumed["paused"], Value::Null);
    for id in loose.iter().chain(&ordered) {
        f.pb.wait_state(id, "delivered", WAIT).await;
        assert_eq!(
            f.pb.notification(id).await["attempts"],
            1,
            "held, it spent no attempt"
        );
    }
    assert_eq!(
        arrived(&f.receiver, "k", 0),
        vec![0, 1, 2, 3],
        "the key kept its order"
    );
    // Another tenant's notifications to the same origin are not this endpoint's.
    let (_, of_b) = f
        .call(
            "tok-all-b",
            Method::POST,
            "/notify",
            Some(json!({"url": f.receiver.url("/ok"), "body": {}, "delay": "1h"})),
        )
        .await;
    assert!(of_b["id"].is_string(), "{of_b}");
    let (_, shown) = f.get("tok-reader-a", &format!("/endpoints/{id}")).await;
    assert_eq!(
        shown["notifications"],
        json!({"pending": 0, "held": 0, "held_back": 0, "complete": true}),
        "{shown}"
    );

    let mut loose_seqs = arrived(&f.receiver, "loose", 0);
    loose_seqs.sort();
    assert_eq!(loose_seqs, vec![0, 1, 2], "each held one once");

    let (_, audit) = f.get("tok-auditor", "/audit?tenant=shop-a").await;
    let actions: Vec<&Value> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["action"])
        .collect();
    assert_eq!(
        actions,
        vec!["resume_endpoint", "pause_endpoint"],
        "{audit}"
    );
    assert_eq!(audit["items"][0]["target"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_operator_of_its_tenant_pauses_an_endpoint_and_another_tenants_keeps_going() {
    let f = tenants::start(&[]).await;
    let first = register(&f, "tok-checkout-a", &f.receiver.url("/a"), "first", 0).await;
    f.pb.wait_state(&first, "delivered", WAIT).await;
    let id = endpoint_id(&f, "tok-reader-a", &f.receiver).await;
    let pause = format!("/endpoints/{id}/pause");

    assert_eq!(
        post(&f, "tok-all-b", &pause).await.0,
        404,
        "another tenant's is not found"
    );
    assert_eq!(
        post(&f, "tok-reader-a", &pause).await.0,
        403,
        "role operate is needed"
    );
    assert_eq!(post(&f, "tok-checkout-a", &pause).await.0, 403);
    let (status, _) = f.pb.request_as("", Method::POST, &pause, None, &[]).await;
    assert_eq!(status, 401);
    let (status, error) = post(&f, "tok-ops-a", "/endpoints/nope/pause").await;
    assert_eq!(
        (status, error["error"]["field"].as_str()),
        (422, Some("id")),
        "{error}"
    );
    let (_, shown) = f.get("tok-reader-a", &format!("/endpoints/{id}")).await;
    assert_eq!(
        shown["state"], "healthy",
        "nothing refused paused it: {shown}"
    );

    // The operator of every tenant may; shop-b's notifications to the same origin are
    // another endpoint's, and keep going.
    let (status, paused) = post(&f, "tok-ops", &pause).await;
    assert_eq!(
        (status, &paused["state"]),
        (200, &json!("paused")),
        "{paused}"
    );
    let (_, again) = post(&f, "tok-ops-a", &pause).await;
    assert_eq!(
        again["paused"], paused["paused"],
        "pausing a paused one changes nothing"
    );
    let b = register(&f, "tok-all-b", &f.receiver.url("/b"), "loose", 0).await;
    f.pb.wait_state(&b, "delivered", WAIT).await;
    let a = register(&f, "tok-checkout-a", &f.receiver.url("/a"), "loose", 1).await;
    f.pb.wait_state(&a, "held", WAIT).await;
    let (_, listed) = f.get("tok-reader-a", "/endpoints?state=paused").await;
    assert_eq!(support::item_ids(&listed), vec![id.as_str()], "{listed}");
    let (_, of_b) = f.get("tok-all-b", "/endpoints?state=paused").await;
    assert_eq!(of_b["items"], json!([]), "{of_b}");
    let (_, held_b) = f.get("tok-all-b", "/notifications?state=held").await;
    assert_eq!(
        held_b["items"],
        json!([]),
        "another tenant sees none of them: {held_b}"
    );

    assert_eq!(
        post(&f, "tok-all-b", &format!("/endpoints/{id}/resume"))
            .await
            .0,
        404
    );
    assert_eq!(
        post(&f, "tok-reader-a", &format!("/endpoints/{id}/resume"))
            .await
            .0,
        403
    );
    f.pb.wait_state(&a, "held", WAIT).await;
    let (status, _) = post(&f, "tok-ops-a", &format!("/endpoints/{id}/resume")).await;
    assert_eq!(status, 200);
    f.pb.wait_state(&a, "delivered", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_many_held_ones_do_not_keep_anothers_resumed_endpoint_waiting() {
    let f = tenants::start(&[]).await;
    let b_receiver = Receiver::start().await;
    let first_a = register(&f, "tok-checkout-a", &f.receiver.url("/a"), "first", 0).await;
    let first_b = register(&f, "tok-all-b", &b_receiver.url("/b"), "first", 0).await;
    f.pb.wait_state(&first_a, "delivered", WAIT).await;
    f.pb.wait_state(&first_b, "delivered", WAIT).await;
    let a = endpoint_id(&f, "tok-reader-a", &f.receiver).await;
    let b = endpoint_id(&f, "tok-all-b", &b_receiver).await;
    assert_eq!(
        post(&f, "tok-ops-a", &format!("/endpoints/{a}/pause"))
            .await
            .0,
        200
    );
    assert_eq!(
        post(&f, "tok-all-b", &format!("/endpoints/{b}/pause"))
            .await
            .0,
        200
    );

    // shop-a holds more than a drain reads at once, all due before shop-b's.
    let mut last_a = String::new();
    for _ in 0..3 {
        let items: Vec<Value> = (0..1000)
            .map(|seq| json!({"url": f.receiver.url("/a"), "body": {"seq": seq}}))
            .collect();
        let (status, answer) = f
            .call(
                "tok-checkout-a",
                Method::POST,
                "/notify/batch",
                Some(json!({"items": items})),
            )
            .await;
        assert_eq!(status, 200, "the batch was answered {status}");
        last_a = answer["items"][999]["id"].as_str().unwrap().to_string();
    }
    f.pb.wait_state(&last_a, "held", support::LONG_WAIT).await;
    let mut held_b = Vec::new();
    for seq in 0..3 {
        held_b.push(register(&f, "tok-all-b", &b_receiver.url("/b"), "loose", seq).await);
    }
    for id in &held_b {
        f.pb.wait_state(id, "held", WAIT).await;
    }

    assert_eq!(
        post(&f, "tok-all-b", &format!("/endpoints/{b}/resume"))
            .await
            .0,
        200
    );
    for id in &held_b {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }
    assert_eq!(f.pb.notification(&last_a).await["state"], "held");
}
