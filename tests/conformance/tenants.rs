//! Tenants and scoped tokens: who may do what, for whom. Each token is configured by the
//! SHA-256 of its value with a tenant (or `*`) and roles; a tenant's notifications are
//! signed with its own secrets, limited by its own quotas and seen by its tokens only.

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use support::signatures;
use support::tenants::{sha256_hex, start, GLOBAL, SECRET_A, SECRET_A2, SECRET_B, TOKENS, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_signed_with_its_tenants_secrets_and_no_others() {
    let f = start(&[]).await;
    let url = |p: &str| f.receiver.url(p);
    let a = f
        .register(
            "tok-checkout-a",
            json!({"url": url("/a"), "body": {"n": 1}}),
        )
        .await;
    let b = f
        .register(
            "tok-all-b",
            json!({"url": url("/b"), "body": {"n": 2}, "rate_key": "127.0.0.1"}),
        )
        .await;
    let c = f
        .register("tok-plain-c", json!({"url": url("/c"), "body": {"n": 3}}))
        .await;
    let b_by_producer = f
        .register(
            "tok-producer",
            json!({"url": url("/p"), "body": {"n": 4}, "tenant": "shop-b"}),
        )
        .await;
    for id in [&a, &b, &c, &b_by_producer] {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }

    let got = |id: &str| f.receiver.requests_for(id).remove(0);
    let (ra, rb, rc, rp) = (got(&a), got(&b), got(&c), got(&b_by_producer));
    assert_eq!(
        signatures::of(&ra),
        vec![
            signatures::v1(SECRET_A, &ra),
            signatures::v1(SECRET_A2, &ra)
        ],
        "shop-a rotates: one signature per secret"
    );
    assert_eq!(
        signatures::of(&rb),
        vec![signatures::v1(SECRET_B, &rb)],
        "shop-b's own, even with another tenant's rate key's name"
    );
    assert_eq!(
        signatures::of(&rc),
        vec![signatures::v1(&f.signing_secret("shop-c"), &rc)],
        "a tenant without secrets: its own, derived from the instance's"
    );
    assert_ne!(signatures::of(&rc), vec![signatures::v1(GLOBAL, &rc)]);
    assert_eq!(
        signatures::of(&rp),
        vec![signatures::v1(SECRET_B, &rp)],
        "a `*` token registering for shop-b"
    );
    let (_, seen) = f
        .get("tok-ops", &format!("/notifications/{b_by_producer}"))
        .await;
    assert_eq!(seen["tenant"], "shop-b");

    let logs = f.pb.logs();
    for (value, ..) in TOKENS {
        assert!(
            !logs.contains(value) && !logs.contains(&sha256_hex(value)),
            "no token or hash in the logs"
        );
    }
    assert!(!logs.contains("whsec_"), "no secret in the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_token_for_every_tenant_names_the_tenant() {
    let f = start(&[]).await;
    let body = |tenant: &str| json!({"url": f.receiver.url("/t"), "body": {}, "delay": "1h", "tenant": tenant});
    let (status, answer) = f.notify("tok-checkout-a", body("shop-b")).await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (422, Some("tenant")),
        "{answer}"
    );
    let (status, answer) = f.notify("tok-producer", body("shop-z")).await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (422, Some("tenant")),
        "an unknown tenant: {answer}"
    );
    let (status, _) = f.notify("tok-checkout-a", body("shop-a")).await;
    assert_eq!(status, 202, "naming its own tenant is harmless");

    let plain = f
        .register(
            support::instance::TOKEN,
            json!({"url": f.receiver.url("/d"), "body": {}, "delay": "1h"}),
        )
        .await;
    assert_eq!(f.pb.notification(&plain).await["tenant"], "default");
}

/// Every route, the role it needs, and a request of it (`{id}` stands for a dead letter
/// of shop-a, `{pending}` for a notification of shop-a not yet due). `read*`: `read`,
/// with a token for every tenant (counts are not kept per tenant).
const ROUTES: &[(&str, &str, &str, Option<&str>)] = &[
    (
        "notify",
        "POST",
        "/notify",
        Some(r#"{"url":"http://127.0.0.1:9/x","body":{},"delay":"1h"}"#),
    ),
    (
        "notify",
        "POST",
        "/notify/batch",
        Some(r#"{"items":[{"url":"http://127.0.0.1:9/x","body":{},"delay":"1h"}]}"#),
    ),
    ("notify|read", "GET", "/notifications/{id}", None),
    ("read", "GET", "/dead-letters", None),
    ("read", "GET", "/notifications?state=dead", None),
    ("read", "GET", "/dead-letters/{id}", None),
    ("read", "GET", "/stats", None),
    ("read", "GET", "/overview", None),
    (
        "operate",
        "POST",
        "/dead-letters/{id}/replay",
        Some(r#"{"delay":"1h"}"#),
    ),
    (
        "operate",
        "POST",
        "/dead-letters/replay",
        Some(r#"{"topic":"none-such"}"#),
    ),
    (
        "operate",
        "POST",
        "/dead-letters/purge",
        Some(r#"{"topic":"none-such"}"#),
    ),
    ("operate", "DELETE", "/dead-letters/{id}", None),
    ("operate", "DELETE", "/notifications/{pending}", None),
    ("audit", "GET", "/audit", None),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_a_caller_without_a_token_or_without_its_role() {
    let f = start(&[]).await;
    for (value, name, tenant, roles) in TOKENS.iter().filter(|t| t.2 == "shop-a" || t.2 == "*") {
        for (role, method, path, body) in ROUTES {
            // A fresh dead letter each time, since some routes consume it.
            let path = if path.contains("{id}") {
                let id = f.dead_letter("tok-producer", Some("shop-a"), "roles").await;
                path.replace("{id}", &id)
            } else if path.contains("{pending}") {
                let later = json!({"url": f.receiver.url("/later"), "body": {}, "delay": "1h", "tenant": "shop-a"});
                let id = f.register("tok-producer", later).await;
                path.replace("{pending}", &id)
            } else {
                path.to_string()
            };
            let body = body.map(|b| serde_json::from_str(b).unwrap());
            let (status, answer) = f.call(value, method.parse().unwrap(), &path, body).await;
            let every_tenant = *tenant == "*";
            let allowed = match role.strip_suffix('*') {
                Some(role) => every_tenant && roles.contains(&role),
                None => role.split('|').any(|r| roles.contains(&r)),
            };
            if allowed {
                assert!(
                    (200..300).contains(&status),
                    "{name} ({tenant}) {method} {path}: {status} {answer}"
                );
            } else {
                assert_eq!(
                    (status, answer["error"]["code"].as_str()),
                    (403, Some("forbidden")),
                    "{name} has no `{role}`: {method} {path}"
                );
            }
        }
    }
    let (status, _) = f
        .get(
            "tok-reader-a",
            "/notifications/ntf_0_0000000000000000000000",
        )
        .await;
    assert_eq!(status, 404, "read: any of its tenant's notifications");

    // Without a token, or with one that is not configured: 401 on every route.
    for (_, method, path, body) in ROUTES {
        let path = path
            .replace("{id}", "ntf_0_0000000000000000000000")
            .replace("{pending}", "ntf_0_0000000000000000000000");
        for authorization in [None, Some("Bearer not-a-token")] {
            let mut request = f.pb.http.request(method.parse().unwrap(), f.pb.url(&path));
            if let Some(a) = authorization {
                request = request.header("authorization", a);
            }
            if let Some(b) = body {
                request = request.header("content-type", "application/json").body(*b);
            }
            let status = request.send().await.unwrap().status().as_u16();
            assert_eq!(status, 401, "{method} {path} with {authorization:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_matched_by_their_hash_and_any_case_of_bearer() {
    let f = start(&[]).await;
    let status = |auth: String| {
        let http = reqwest::Client::new();
        let url = f.pb.url("/stats");
        async move {
            http.get(url)
                .header("authorization", auth)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(status("Bearer tok-ops".into()).await, 200);
    assert_eq!(status("bearer tok-ops".into()).await, 200);
    assert_eq!(status("BEARER tok-ops".into()).await, 200);
    assert_eq!(
        status(format!("Bearer {}", sha256_hex("tok-ops"))).await,
        401,
        "the hash is not the token"
    );
    assert_eq!(status("Bearer tok-ops2".into()).await, 401);
    assert_eq!(status("Basic tok-ops".into()).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_one_tenant_never_sees_or_touches_another_tenants() {
    let f = start(&[]).await;
    let dead_a = f.dead_letter("tok-producer", Some("shop-a"), "t").await;
    let dead_b = f.dead_letter("tok-all-b", None, "t").await;
    let pending_b = f
        .register(
            "tok-all-b",
            json!({"url": f.receiver.url("/later"), "body": {}, "delay": "1h"}),
        )
        .await;

    for (method, path, body) in [
        ("GET", format!("/notifications/{pending_b}"), None),
        ("DELETE", format!("/notifications/{pending_b}"), None),
        ("GET", format!("/dead-letters/{dead_b}"), None),
        ("POST", format!("/dead-letters/{dead_b}/replay"), None),
        ("DELETE", format!("/dead-letters/{dead_b}"), None),
    ] {
        let (status, answer) = f
            .call("tok-ops-a", method.parse().unwrap(), &path, body)
            .await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (404, Some("not_found")),
            "another tenant's id is not found: {method} {path}"
        );
    }
    let (_, list) = f.get("tok-ops-a", "/dead-letters").await;
    let ids = support::item_ids(&list);
    assert_eq!(
        ids,
        vec![dead_a.as_str()],
        "the list holds its own tenant's only"
    );
    assert_eq!(list["items"][0]["tenant"], "shop-a");

    let (_, queue) = f.get("tok-ops-a", "/notifications?state=dead").await;
    let listed = support::item_ids(&queue);
    assert_eq!(
        listed,
        vec![dead_a.as_str()],
        "the queue holds its own tenant's only"
    );
    let (_, pending) = f.get("tok-ops-a", "/notifications?state=scheduled").await;
    assert_eq!(
        pending["items"].as_array().unwrap().len(),
        0,
        "not shop-b's pending one"
    );
    let (status, _) = f
        .get("tok-ops-a", "/notifications?state=scheduled&tenant=shop-b")
        .await;
    assert_eq!(status, 403, "nor by naming shop-b");
    let (_, own) = f.get("tok-ops-a", "/stats").await;
    assert_eq!(own["dead"], 1, "its own tenant's counts: {own}");
    let (_, all) = f.get("tok-ops", "/stats").await;
    assert_eq!(all["dead"], 2, "a `*` token counts every tenant");
    for path in ["/stats?tenant=shop-b", "/overview?tenant=shop-b"] {
        let (status, answer) = f.get("tok-ops-a", path).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "another tenant's counts: {path}"
        );
    }
    let (status, _) = f.get("tok-ops-a", "/dead-letters?tenant=shop-b").await;
    assert_eq!(
        status, 403,
        "a tenant-bound token cannot name another tenant"
    );
    let (_, listed) = f.get("tok-ops", "/dead-letters?tenant=shop-b").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(listed["items"][0]["id"], dead_b.as_str());

    let all = json!({"all": true, "delay": "1h"});
    let (_, replayed) = f
        .call("tok-ops-a", Method::POST, "/dead-letters/replay", Some(all))
        .await;
    assert_eq!(
        replayed["count"], 1,
        "bulk replay of everything: its own tenant's"
    );
    let (_, purged) = f
        .call(
            "tok-ops-a",
            Method::POST,
            "/dead-letters/purge",
            Some(json!({"all": true})),
        )
        .await;
    assert_eq!(purged["count"], 0);
    let (status, still) = f.get("tok-all-b", &format!("/dead-letters/{dead_b}")).await;
    assert_eq!(
        (status, still["state"].as_str()),
        (200, Some("dead")),
        "shop-b's dead letter untouched"
    );
    let (status, _) = f
        .get("tok-all-b", &format!("/notifications/{pending_b}"))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_hold_at_registration_and_at_replay() {
    let f = start(&[]).await;
    let try_url = |url: &str| json!({"url": url, "body": {}, "delay": "1h"});
    for url in [
        "http://hooks.shop-a.example/x",
        "https://a.b.shop-a.example/x",
        "http://127.0.0.1:9/x",
    ] {
        let (status, answer) = f.notify("tok-checkout-a", try_url(url)).await;
        assert_eq!(status, 202, "{url}: {answer}");
    }
    for url in [
        "http://shop-a.example/x",
        "http://evil.example/x",
        "http://hooks.shop-a.example.evil.example/x",
        "http://localhost:9/x",
    ] {
        let (status, answer) = f.notify("tok-checkout-a", try_url(url)).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some("url")),
            "{url}: {answer}"
        );
    }
    let (status, _) = f
        .notify("tok-all-b", try_url("http://evil.example/x"))
        .await;
    assert_eq!(status, 202, "shop-b has no allowed_hosts");

    let dead = f.dead_letter("tok-producer", Some("shop-a"), "hosts").await;
    let path = format!("/dead-letters/{dead}/replay");
    let (status, answer) = f
        .call(
            "tok-ops-a",
            Method::POST,
            &path,
            Some(json!({"url": "http://evil.example/x", "delay": "1h"})),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (422, Some("url")),
        "{answer}"
    );
    let (status, answer) = f
        .call(
            "tok-ops-a",
            Method::POST,
            &path,
            Some(json!({"url": f.receiver.url("/fixed")})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    f.pb.wait_state(&dead, "delivered", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_are_per_tenant_and_a_changed_body_is_refused() {
    let f = start(&[]).await;
    let body = json!({"url": f.receiver.url("/i"), "body": {"order": 1001}, "delay": "1h"});
    let key = [("Idempotency-Key", "order-1001")];
    let post = |token: &'static str, body: Value| {
        let pb = &f.pb;
        async move {
            pb.request_as(token, Method::POST, "/notify", Some(body), &key)
                .await
        }
    };
    let (s1, a1) = post("tok-checkout-a", body.clone()).await;
    let (s2, a2) = post("tok-checkout-a", body.clone()).await;
    let (s3, b1) = post("tok-all-b", body.clone()).await;
    assert_eq!((s1, s2, s3), (202, 202, 202));
    assert_eq!(
        a1["id"], a2["id"],
        "the same key and body: the same notification"
    );
    assert_ne!(a1["id"], b1["id"], "another tenant's key is another key");
    let fleet = &f;
    let by_key = |token: &'static str| async move {
        let (_, page) = fleet
            .get(token, "/notifications?idempotency_key=order-1001")
            .await;
        page["items"][0]["id"].clone()
    };
    assert_eq!(
        by_key("tok-reader-a").await,
        a1["id"],
        "each tenant finds its own"
    );
    assert_eq!(by_key("tok-all-b").await, b1["id"]);
    let (status, _) = f
        .get(
            "tok-checkout-a",
            "/notifications?idempotency_key=order-1001",
        )
        .await;
    assert_eq!(status, 403, "listing needs `read`, not `notify`");

    let mut changed = body.clone();
    changed["body"]["order"] = json!(1002);
    let (status, answer) = post("tok-checkout-a", changed).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("idempotency_key_mismatch")),
        "{answer}"
    );
    let (_, stats) = f.get("tok-ops", "/stats").await;
    assert_eq!(stats["scheduled"], 2, "nothing stored for the refused one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_keys_and_their_quotas_are_per_tenant() {
    // shop-a's rate keys default to 4/s; shop-b's to the instance's (unlimited here).
    let f = start(&[("POSTBACK_DELIVERY_RATE_LIMIT", "unlimited")]).await;
    let mut ids = Vec::new();
    for n in 0..4 {
        for token in ["tok-checkout-a", "tok-all-b"] {
            let body = json!({"url": f.receiver.url(&format!("/q{n}")), "body": {}, "rate_key": "merchant-x"});
            ids.push((token, f.register(token, body).await));
        }
    }
    for (_, id) in &ids {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }
    let spread = |token: &str| {
        let times: Vec<_> = ids
            .iter()
            .filter(|(t, _)| *t == token)
            .map(|(_, id)| f.receiver.requests_for(id)[0].at)
            .collect();
        *times.iter().max().unwrap() - *times.iter().min().unwrap()
    };
    assert!(
        spread("tok-checkout-a") >= Duration::from_millis(700),
        "4 at 4/s span ~750 ms: {:?}",
        spread("tok-checkout-a")
    );
    assert!(
        spread("tok-all-b") < Duration::from_millis(400),
        "shop-b's merchant-x is not shop-a's: {:?}",
        spread("tok-all-b")
    );
}

/// The counts of `path` for `token`: scheduled, in flight, dead, finished.
/// How the store is replicated is the fleet's, not a tenant's: `/stats` shows it to a
/// token of every tenant only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_token_for_every_tenant_sees_how_the_store_is_replicated() {
    let f = start(&[]).await;
    let (status, all) = f.get("tok-ops", "/stats").await;
    assert_eq!(status, 200, "{all}");
    let shards = all["replication"].as_array().map_or(0, Vec::len);
    let expected = if f.backend.is_redis() {
        f.backend.shards()
    } else {
        0
    };
    assert_eq!(shards, expected, "{all}");
    for token in ["tok-reader-a", "tok-all-b"] {
        let (status, mine) = f.get(token, "/stats").await;
        assert_eq!(status, 200, "{mine}");
        assert!(mine.get("replication").is_none(), "{token}: {mine}");
    }
    let (_, narrowed) = f.get("tok-ops", "/stats?tenant=shop-a").await;
    assert!(narrowed.get("replication").is_none(), "{narrowed}");
}

async fn counts(f: &support::tenants::Fleet, token: &str, path: &str) -> [u64; 4] {
    let (status, answer) = f.get(token, path).await;
    assert_eq!(status, 200, "{token} {path}: {answer}");
    let c = if path.starts_with("/overview") {
        &answer["counts"]
    } else {
        &answer
    };
    ["scheduled", "in_flight", "dead", "finished"].map(|k| c[k].as_u64().unwrap())
}

/// What the overview's last hour adds up to for `token`: finished, dead.
async fn last_hour(f: &support::tenants::Fleet, token: &str, path: &str) -> (u64, u64) {
    let (_, o) = f.get(token, path).await;
    let windows = o["last_hour"].as_array().unwrap();
    let sum = |k: &str| windows.iter().map(|w| w[k].as_u64().unwrap()).sum();
    (sum("finished"), sum("dead"))
}

/// A tenant's counts follow notifications of one attempt only (an empty schedule) as
/// they are claimed and finish: none is left counted as scheduled or in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_follow_notifications_of_one_attempt_only() {
    let f = start(&[]).await;
    for k in 0..3 {
        let url = f.receiver.url(&format!("/once/{k}?fail=9"));
        let body = json!({"url": url, "body": {}, "schedule": []});
        let id = f.register("tok-plain-c", body).await;
        f.pb.wait_state(&id, "dead", WAIT).await;
    }
    let (_, stats) = f.get("tok-plain-c", "/stats").await;
    let counts = ["scheduled", "in_flight", "dead"].map(|s| stats[s].clone());
    assert_eq!(counts, [json!(0), json!(0), json!(3)], "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_and_the_overview_follow_each_tenant() {
    let f = start(&[]).await;
    let later = |tenant: Option<&str>| {
        let mut body = json!({"url": f.receiver.url("/later"), "body": {}, "delay": "1h"});
        if let Some(t) = tenant {
            body["tenant"] = json!(t);
        }
        body
    };
    let now = |path: &str| json!({"url": f.receiver.url(path), "body": {}});
    let dead_a = f.dead_letter("tok-checkout-a", None, "c").await;
    let cancelled_a = f.register("tok-checkout-a", later(None)).await;
    f.call(
        "tok-ops-a",
        Method::DELETE,
        &format!("/notifications/{cancelled_a}"),
        None,
    )
    .await;
    f.register("tok-checkout-a", later(None)).await;
    f.register("tok-producer", later(Some("shop-a"))).await;
    let delivered_a = f.register("tok-checkout-a", now("/ok-a")).await;
    let slow_a = f
        .register("tok-checkout-a", now("/slow?sleep_ms=4000"))
        .await;
    f.dead_letter("tok-all-b", None, "c").await;
    f.register("tok-all-b", later(None)).await;
    let delivered_default = f.register("tok-producer", now("/ok-default")).await;
    f.register("tok-producer", later(None)).await;
    f.pb.wait_state(&delivered_a, "delivered", WAIT).await;
    f.pb.wait_state(&delivered_default, "delivered", WAIT).await;
    f.pb.wait_state(&slow_a, "in_flight", WAIT).await;

    // scheduled, in flight, dead, finished
    let a = [2, 1, 1, 2];
    assert_eq!(counts(&f, "tok-ops-a", "/stats").await, a);
    assert_eq!(counts(&f, "tok-ops-a", "/overview").await, a);
    assert_eq!(counts(&f, "tok-ops", "/stats?tenant=shop-a").await, a);
    assert_eq!(counts(&f, "tok-all-b", "/stats").await, [1, 0, 1, 0]);
    assert_eq!(
        counts(&f, "tok-ops", "/stats?tenant=default").await,
        [1, 0, 0, 1]
    );
    assert_eq!(counts(&f, "tok-ops", "/stats").await, [4, 1, 2, 3]);
    assert_eq!(counts(&f, "tok-plain-c", "/stats").await, [0, 0, 0, 0]);
    assert_eq!(last_hour(&f, "tok-ops-a", "/overview").await, (2, 1));
    assert_eq!(
        last_hour(&f, "tok-ops", "/overview?tenant=default").await,
        (1, 0)
    );
    assert_eq!(last_hour(&f, "tok-ops", "/overview").await, (3, 2));
    let (_, o) = f.get("tok-ops-a", "/overview").await;
    assert_eq!(
        o["failing_hosts"][0]["dead"], 1,
        "its own dead letters: {o}"
    );

    f.pb.wait_state(&slow_a, "delivered", WAIT).await;
    let replay = format!("/dead-letters/{dead_a}/replay");
    let (status, _) = f
        .call(
            "tok-ops-a",
            Method::POST,
            &replay,
            Some(json!({"delay": "1h"})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(counts(&f, "tok-ops-a", "/stats").await, [3, 0, 0, 3]);
    assert_eq!(
        last_hour(&f, "tok-ops-a", "/overview").await,
        (3, 0),
        "a replayed dead letter is no longer one of the hour's"
    );
    let (_, purged) = f
        .call(
            "tok-all-b",
            Method::POST,
            "/dead-letters/purge",
            Some(json!({"all": true})),
        )
        .await;
    assert_eq!(purged["count"], 1);
    assert_eq!(counts(&f, "tok-all-b", "/stats").await, [1, 0, 0, 0]);
    assert_eq!(counts(&f, "tok-ops", "/stats").await, [5, 0, 0, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_counts_what_it_deletes_per_tenant() {
    let f = start(&[
        ("POSTBACK_RETENTION_FINISHED_MAX_AGE", "1s"),
        ("POSTBACK_RETENTION_SWEEP_INTERVAL", "200ms"),
    ])
    .await;
    let body = json!({"url": f.receiver.url("/ok"), "body": {}});
    let a = f.register("tok-checkout-a", body.clone()).await;
    let b = f.register("tok-all-b", body.clone()).await;
    let other = f.register("tok-all-b", body).await;
    for id in [&a, &b, &other] {
        f.pb.wait_state(id, "delivered", WAIT).await;
    }
    let f = &f;
    let trimmed = |token: &'static str| async move {
        let (_, s) = f.get(token, "/stats").await;
        (
            s["finished"].as_u64().unwrap(),
            s["trimmed"]["finished_by_age"].as_u64().unwrap(),
        )
    };
    let swept = support::eventually(WAIT, || async { trimmed("tok-ops").await == (0, 3) });
    assert!(swept.await, "retention never ran");
    assert_eq!(trimmed("tok-ops-a").await, (0, 1));
    assert_eq!(trimmed("tok-all-b").await, (0, 2));
    assert_eq!(trimmed("tok-plain-c").await, (0, 0));
}
