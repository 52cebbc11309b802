//! Endpoints you can see: a tenant's callback origins, known from their first
//! notification, with their health as the attempts there tell it (`GET /endpoints`,
//! `GET /endpoints/{id}`); each tenant sees its own only, and the same origin of two
//! tenants is two endpoints; one idle for as long as dead letters are kept is
//! forgotten. On every backend (`scripts/test.sh`).

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::tenants::{self, Fleet};
use support::{Receiver, WAIT};

/// The origin of a receiver's URLs.
fn origin(receiver: &Receiver) -> String {
    let url = receiver.url("/");
    url.trim_end_matches('/').to_string()
}

/// The endpoints `token` lists at `query`, once one lists `url` with `attempts` in the
/// last hour.
async fn listed_once(f: &Fleet, token: &str, query: &str, url: &str, attempts: u64) -> Vec<Value> {
    let ready = |e: &Value| e["last_hour"]["attempts"] == attempts;
    f.pb.endpoints_once(token, query, url, ready).await
}

fn by_url<'a>(items: &'a [Value], url: &str) -> &'a Value {
    items
        .iter()
        .find(|e| e["url"] == url)
        .unwrap_or_else(|| panic!("{url} in {items:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_shows_how_its_attempts_went_and_whether_it_is_failing() {
    let f = tenants::start(&[]).await;
    let failing = Receiver::start().await;
    for n in 0..2 {
        let body = json!({"url": f.receiver.url(&format!("/ok/{n}")), "body": {}});
        let id = f.register("tok-checkout-a", body).await;
        f.pb.wait_state(&id, "delivered", WAIT).await;
    }
    let body = json!({"url": failing.url("/x?fail=9"), "body": {}, "schedule": ["100ms", "100ms"]});
    let dead = f.register("tok-checkout-a", body).await;
    f.pb.wait_state(&dead, "dead", WAIT).await;
    // Never attempted (due in an hour): known from its registration.
    let later = json!({"url": "https://pay.shop-a.example/n", "body": {}, "delay": "1h"});
    f.register("tok-checkout-a", later).await;

    let (ok_url, bad_url) = (origin(&f.receiver), origin(&failing));
    listed_once(&f, "tok-reader-a", "", &bad_url, 3).await;
    let items = listed_once(&f, "tok-reader-a", "", "https://pay.shop-a.example", 0).await;
    assert_eq!(items.len(), 3, "{items:?}");
    let ok = by_url(&items, &ok_url);
    assert_eq!(ok["state"], "healthy", "{ok}");
    assert_eq!(ok["tenant"], "shop-a");
    assert_eq!(
        ok["last_hour"],
        json!({"attempts": 2, "successes": 2, "success_rate": 1.0})
    );
    assert_eq!(ok["last_day"]["attempts"], 2);
    assert_eq!(ok["consecutive_failures"], 0);
    assert!(
        ok["last_success_at"].is_string() && ok["failing_since"].is_null(),
        "{ok}"
    );

    let bad = by_url(&items, &bad_url);
    assert_eq!(bad["state"], "failing", "{bad}");
    assert_eq!(bad["consecutive_failures"], 3, "{bad}");
    assert_eq!(
        bad["last_hour"],
        json!({"attempts": 3, "successes": 0, "success_rate": 0.0})
    );
    assert_eq!(bad["last_failure"]["status"], 500, "{bad}");
    assert!(
        bad["failing_since"].is_string() && bad["last_success_at"].is_null(),
        "{bad}"
    );

    let waiting = by_url(&items, "https://pay.shop-a.example");
    assert_eq!(waiting["state"], "healthy", "{waiting}");
    assert!(waiting["last_attempt_at"].is_null(), "{waiting}");
    assert_eq!(waiting["last_hour"]["attempts"], 0);

    let (_, page) = f.get("tok-reader-a", "/endpoints?state=failing").await;
    let failing_only: Vec<&Value> = page["items"].as_array().unwrap().iter().collect();
    assert_eq!(failing_only, vec![bad], "{page}");
    let (status, mut shown) = f
        .get(
            "tok-reader-a",
            &format!("/endpoints/{}", bad["id"].as_str().unwrap()),
        )
        .await;
    // One endpoint's view is the listing's, with its backlog counted.
    let backlog = shown.as_object_mut().unwrap().remove("notifications");
    assert_eq!(backlog.unwrap()["pending"], 0, "{shown}");
    assert_eq!((status, &shown), (200, bad));

    let (status, error) = f.get("tok-reader-a", "/endpoints?state=paused-ish").await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["field"], "state", "{error}");
    let (status, error) = f.get("tok-reader-a", "/endpoints/pay.shop-a.example").await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["field"], "id", "{error}");

    // One endpoint's notifications, and its dead letters.
    let (ok_id, bad_id) = (ok["id"].as_str().unwrap(), bad["id"].as_str().unwrap());
    let path = format!("/notifications?state=delivered&endpoint={ok_id}");
    let (_, delivered) = f.get("tok-reader-a", &path).await;
    assert_eq!(support::item_ids(&delivered).len(), 2, "{delivered}");
    let path = format!("/notifications?state=delivered&endpoint={bad_id}");
    let (_, none) = f.get("tok-reader-a", &path).await;
    assert!(support::item_ids(&none).is_empty(), "{none}");
    let (_, letters) = f
        .get("tok-reader-a", &format!("/dead-letters?endpoint={bad_id}"))
        .await;
    assert_eq!(
        support::item_ids(&letters),
        vec![dead.as_str()],
        "{letters}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_sees_its_own_endpoints_only() {
    let f = tenants::start(&[]).await;
    let url = origin(&f.receiver);
    let a = f
        .register(
            "tok-checkout-a",
            json!({"url": f.receiver.url("/a"), "body": {}}),
        )
        .await;
    f.pb.wait_state(&a, "delivered", WAIT).await;
    // shop-b calls the same origin, and it fails for shop-b.
    let body = json!({"url": f.receiver.url("/b?fail=9"), "body": {}, "schedule": []});
    let b = f.register("tok-all-b", body).await;
    f.pb.wait_state(&b, "dead", WAIT).await;

    let seen_a = listed_once(&f, "tok-reader-a", "", &url, 1).await;
    let seen_b = listed_once(&f, "tok-all-b", "", &url, 1).await;
    assert_eq!(seen_a.len(), 1, "{seen_a:?}");
    assert_eq!(seen_b.len(), 1, "{seen_b:?}");
    let (ea, eb) = (&seen_a[0], &seen_b[0]);
    assert_eq!(
        (&ea["tenant"], &ea["state"]),
        (&json!("shop-a"), &json!("healthy"))
    );
    assert_eq!(
        (&eb["tenant"], &eb["state"]),
        (&json!("shop-b"), &json!("failing"))
    );
    assert_ne!(ea["id"], eb["id"], "one origin, two tenants: two endpoints");

    let a_path = format!("/endpoints/{}", ea["id"].as_str().unwrap());
    let (status, answer) = f.get("tok-all-b", &a_path).await;
    assert_eq!(
        status, 404,
        "another tenant's endpoint is not found: {answer}"
    );
    let (status, _) = f.get("tok-all-b", "/endpoints?tenant=shop-a").await;
    assert_eq!(status, 403);
    let a_id = ea["id"].as_str().unwrap();
    let path = format!("/notifications?state=delivered&endpoint={a_id}");
    let (status, error) = f.get("tok-all-b", &path).await;
    assert_eq!(
        (status, error["error"]["field"].as_str()),
        (422, Some("endpoint")),
        "another tenant's endpoint is no filter: {error}"
    );
    let (status, _) = f.get("tok-checkout-a", "/endpoints").await;
    assert_eq!(status, 403, "role read is needed");
    assert_eq!(f.pb.status_without_token("/endpoints").await, 401);
    assert_eq!(f.pb.status_without_token(&a_path).await, 401);
    let (status, _) = f.get("tok-checkout-a", &a_path).await;
    assert_eq!(status, 403);

    // The operator's token sees every tenant's, or the one it names.
    let (_, all) = f.get("tok-ops", "/endpoints").await;
    let tenants: Vec<&Value> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["tenant"])
        .collect();
    assert_eq!(tenants, vec!["shop-a", "shop-b"], "{all}");
    let (_, only_b) = f.get("tok-ops", "/endpoints?tenant=shop-b").await;
    assert_eq!(only_b["items"].as_array().unwrap(), &vec![eb.clone()]);
    let (status, mut shown) = f.get("tok-ops", &a_path).await;
    shown.as_object_mut().unwrap().remove("notifications");
    assert_eq!((status, &shown), (200, ea));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_kept_by_the_store_and_paged() {
    let mut f = tenants::start(&[]).await;
    let receivers = [
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    ];
    for r in &receivers {
        let id = f
            .register("tok-checkout-a", json!({"url": r.url("/n"), "body": {}}))
            .await;
        f.pb.wait_state(&id, "delivered", WAIT).await;
    }
    let last = origin(&receivers[2]);
    listed_once(&f, "tok-reader-a", "", &last, 1).await;

    f.pb.terminate();
    let dir = tempfile::tempdir().unwrap();
    let config = support::config_file(&dir, &tenants::config());
    f.pb = f.backend.postback(&[("POSTBACK_CONFIG", &config)]).await;

    let mut seen = Vec::new();
    let mut query = "?limit=2".to_string();
    loop {
        let (status, page) = f.get("tok-reader-a", &format!("/endpoints{query}")).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2, "{page}");
        seen.extend(items.iter().map(|e| e["url"].as_str().unwrap().to_string()));
        match page["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=2&cursor={c}"),
            None => break,
        }
    }
    let mut expected: Vec<String> = receivers.iter().map(origin).collect();
    expected.sort();
    seen.sort();
    assert_eq!(seen, expected, "every endpoint once, after a restart");
}

/// An endpoint idle for as long as dead letters are kept is forgotten, unless it is
/// paused: a pause is kept until someone resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_idle_for_the_dead_letters_retention_is_forgotten() {
    let retention = [
        ("POSTBACK_RETENTION_DEAD_MAX_AGE", "3s"),
        ("POSTBACK_RETENTION_SWEEP_INTERVAL", "200ms"),
    ];
    let f = tenants::start(&retention).await;
    // The paused endpoint is used first: by the time the other one is forgotten, it has
    // been idle for longer.
    let paused = Receiver::start().await;
    let to_pause = json!({"url": paused.url("/n"), "body": {}});
    let id = f.register("tok-checkout-a", to_pause).await;
    f.pb.wait_state(&id, "delivered", WAIT).await;
    let listed = listed_once(&f, "tok-reader-a", "", &origin(&paused), 1).await;
    let paused_id = by_url(&listed, &origin(&paused))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let pause = format!("/endpoints/{paused_id}/pause");
    let (status, answer) = f.call("tok-ops-a", Method::POST, &pause, None).await;
    assert_eq!(status, 200, "{answer}");
    let url = origin(&f.receiver);
    let body = json!({"url": f.receiver.url("/n"), "body": {}});
    let id = f.register("tok-checkout-a", body.clone()).await;
    f.pb.wait_state(&id, "delivered", WAIT).await;
    listed_once(&f, "tok-reader-a", "", &url, 1).await;

    let forgotten = support::eventually(WAIT, || async {
        let (_, page) = f.get("tok-reader-a", "/endpoints").await;
        let urls: Vec<&Value> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["url"])
            .collect();
        urls == [&json!(origin(&paused))]
    });
    assert!(
        forgotten.await,
        "idle for longer than retention.dead_max_age: forgotten, but for the paused one"
    );

    let id = f.register("tok-checkout-a", body).await;
    f.pb.wait_state(&id, "delivered", WAIT).await;
    let items = listed_once(&f, "tok-reader-a", "", &url, 1).await;
    assert_eq!(
        items.len(),
        2,
        "known again from its next notification, beside the paused one: {items:?}"
    );
}

/// The dead letters (or the delivered ones) at one endpoint, by its id alone: after an
/// endpoint's outage its tenant replays what died there, or purges it. Another
/// endpoint's, and another tenant's at the same origin, are left as they are; an
/// endpoint the token cannot see is no filter, and the actions need `operate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endpoints_dead_letters_are_replayed_or_purged_by_its_id() {
    let f = tenants::start(&[]).await;
    let other = Receiver::start().await;
    let dead_at = |token: &'static str, url: String| {
        let body = json!({"url": url, "body": {}, "schedule": []});
        let f = &f;
        async move {
            let id = f.register(token, body).await;
            f.pb.wait_state(&id, "dead", WAIT).await;
            id
        }
    };
    let mut down = Vec::new();
    for n in 0..2 {
        down.push(
            dead_at(
                "tok-checkout-a",
                f.receiver.url(&format!("/down/{n}?fail=1")),
            )
            .await,
        );
    }
    let elsewhere = dead_at("tok-checkout-a", other.url("/x?fail=1")).await;
    let of_b = dead_at("tok-all-b", f.receiver.url("/b?fail=1")).await;

    let origin_a = origin(&f.receiver);
    let items = listed_once(&f, "tok-reader-a", "", &origin_a, 2).await;
    let a_id = by_url(&items, &origin_a)["id"]
        .as_str()
        .unwrap()
        .to_string();
    let other_id = by_url(&items, &origin(&other))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let items = listed_once(&f, "tok-all-b", "", &origin_a, 1).await;
    let b_id = by_url(&items, &origin_a)["id"]
        .as_str()
        .unwrap()
        .to_string();

    let replay = |token: &'static str, body: Value| {
        f.call(
            token,
            reqwest::Method::POST,
            "/dead-letters/replay",
            Some(body),
        )
    };
    let (status, error) = replay("tok-all-b", json!({"endpoint": a_id})).await;
    assert_eq!(
        (status, error["error"]["field"].as_str()),
        (422, Some("endpoint")),
        "another tenant's endpoint is no filter: {error}"
    );
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no endpoint"), "{error}");
    let (status, _) = replay("tok-reader-a", json!({"endpoint": a_id})).await;
    assert_eq!(status, 403, "role operate is needed");
    let (status, error) = replay("tok-ops-a", json!({"endpoint": "pay.shop-a.example"})).await;
    assert_eq!(
        (status, error["error"]["field"].as_str()),
        (422, Some("endpoint"))
    );

    let body = json!({"endpoint": a_id, "schedule": ["100ms"]});
    let (status, answer) = replay("tok-ops-a", body).await;
    assert_eq!((status, &answer["count"]), (200, &json!(2)), "{answer}");
    for id in &down {
        let done = f.pb.wait_state(id, "delivered", WAIT).await;
        assert_eq!(done["replays"], 1, "{done}");
    }
    for id in [&elsewhere, &of_b] {
        assert_eq!(f.pb.notification(id).await["state"], "dead", "{id}");
    }

    // What was delivered there, counted for a resend; the other endpoint's letter purged.
    let body = json!({"state": "delivered", "endpoint": a_id, "dry_run": true});
    let path = "/notifications/resend";
    let (status, answer) = f
        .call("tok-ops-a", reqwest::Method::POST, path, Some(body))
        .await;
    assert_eq!((status, &answer["count"]), (200, &json!(2)), "{answer}");
    let body = json!({"endpoint": other_id});
    let path = "/dead-letters/purge";
    let (status, answer) = f
        .call("tok-ops-a", reqwest::Method::POST, path, Some(body))
        .await;
    assert_eq!((status, &answer["count"]), (200, &json!(1)), "{answer}");
    let (status, _) = f
        .get("tok-reader-a", &format!("/dead-letters/{elsewhere}"))
        .await;
    assert_eq!(status, 404, "purged");

    // shop-b's own endpoint at the same origin, by the operator's token of every tenant.
    let body = json!({"endpoint": b_id, "schedule": ["100ms"]});
    let (status, answer) = replay("tok-ops", body).await;
    assert_eq!((status, &answer["count"]), (200, &json!(1)), "{answer}");
    f.pb.wait_state(&of_b, "delivered", WAIT).await;

    let (_, audit) = f.get("tok-audit-a", "/audit?action=replay_matching").await;
    let entry = &audit["items"][0];
    assert_eq!(
        entry["filter"],
        json!({"endpoint": a_id, "tenant": "shop-a"}),
        "{audit}"
    );
}
