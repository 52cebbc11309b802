//! One tenant's volume against another's, on every store: each tenant's retention counts
//! its own notifications (with its own limits where it has some), and each tenant's
//! lists read its own, so what a tenant keeps and what its pages cost never depend on
//! another tenant's volume.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};

use support::tenants::{start_on, Fleet, WAIT};
use support::Backend;

/// Index entries list pages examined, as the instance counts them.
const EXAMINED: &str = "postback_list_entries_examined_total";

/// Registers `n` notifications with `token`, `item(k)` each, in batches.
async fn register_many(f: &Fleet, token: &str, n: usize, item: impl Fn(usize) -> Value) {
    let items: Vec<Value> = (0..n).map(item).collect();
    for batch in items.chunks(500) {
        let body = json!({ "items": batch });
        let (status, answer) = f
            .call(token, Method::POST, "/notify/batch", Some(body))
            .await;
        assert_eq!(status, 200, "{answer}");
        let refused = answer["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i.get("error").is_some());
        assert!(refused.is_none(), "every item accepted: {refused:?}");
    }
}

/// `token`'s `/stats`.
async fn stats(f: &Fleet, token: &str) -> Value {
    let (status, stats) = f.get(token, "/stats").await;
    assert_eq!(status, 200, "{stats}");
    stats
}

/// Waits until every one of the `n` notifications `token`'s tenant sent to a failing
/// endpoint is dead or was deleted by retention for being beyond the count.
async fn all_dead(f: &Fleet, token: &str, n: u64) {
    let settled = support::eventually(WAIT * 4, || async {
        let s = stats(f, token).await;
        s["dead"].as_u64().unwrap() + s["trimmed"]["dead_by_count"].as_u64().unwrap() == n
    })
    .await;
    assert!(settled, "{}\n{}", stats(f, token).await, f.pb.logs());
}

/// A notification of its own endpoint that fails once and is dead: failures of one
/// endpoint would open its circuit.
fn failing(f: &Fleet, tenant: &str, k: usize) -> Value {
    let url = f.receiver.url(&format!("/down/{tenant}/{k}?fail=99"));
    json!({"url": url, "body": {"k": k}, "schedule": []})
}

/// How many index entries `token`'s `GET path` examined.
async fn examined_by(f: &Fleet, token: &str, path: &str) -> (Value, f64) {
    let before = f.pb.metric(EXAMINED).await.unwrap_or(0.0);
    let (status, page) = f.get(token, path).await;
    assert_eq!(status, 200, "{page}");
    let after = f.pb.metric(EXAMINED).await.expect("list pages are counted");
    (page, after - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_dead_letters_delete_none_of_anothers() {
    let backend = Backend::start();
    let count = (5 * backend.shards()).to_string();
    let env = [("POSTBACK_RETENTION_DEAD_MAX_COUNT", count.as_str())];
    let f = start_on(backend, "", &env).await;
    let shards = f.backend.shards();
    register_many(&f, "tok-all-b", 2, |k| failing(&f, "b", k)).await;
    all_dead(&f, "tok-all-b", 2).await;

    let beyond = 10 * shards;
    register_many(&f, "tok-checkout-a", beyond, |k| failing(&f, "a", k)).await;
    all_dead(&f, "tok-ops-a", beyond as u64).await;

    let (_, b_letters) = f.get("tok-all-b", "/dead-letters").await;
    assert_eq!(support::item_ids(&b_letters).len(), 2, "{b_letters}");
    let b = stats(&f, "tok-all-b").await;
    assert_eq!(
        (&b["dead"], &b["trimmed"]["dead_by_count"]),
        (&json!(2), &json!(0)),
        "{b}"
    );
    let a = stats(&f, "tok-ops-a").await;
    let kept = a["dead"].as_u64().unwrap();
    assert!(
        kept <= 5 * shards as u64,
        "shop-a held to its own count: {a}"
    );
    assert!(
        a["trimmed"]["dead_by_count"].as_u64().unwrap() >= 5 * shards as u64,
        "{a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_its_own_retention_is_held_to_it_and_the_others_to_the_default() {
    let backend = Backend::start();
    let own = format!(
        "\n[tenants.shop-b.retention]\ndead_max_count = {}\n",
        backend.shards()
    );
    let f = start_on(backend, &own, &[]).await;
    let shards = f.backend.shards();
    register_many(&f, "tok-checkout-a", 3, |k| failing(&f, "a", k)).await;
    all_dead(&f, "tok-ops-a", 3).await;
    register_many(&f, "tok-all-b", 3 * shards, |k| failing(&f, "b", k)).await;
    all_dead(&f, "tok-all-b", 3 * shards as u64).await;

    let b = stats(&f, "tok-all-b").await;
    assert!(b["dead"].as_u64().unwrap() <= shards as u64, "{b}");
    assert!(
        b["trimmed"]["dead_by_count"].as_u64().unwrap() >= 2 * shards as u64,
        "{b}"
    );
    assert_eq!(b["retention"]["dead_max_count"], json!(shards), "{b}");
    let a = stats(&f, "tok-ops-a").await;
    assert_eq!(
        (&a["dead"], &a["trimmed"]["dead_by_count"]),
        (&json!(3), &json!(0)),
        "{a}"
    );
    assert_eq!(a["retention"]["dead_max_count"], json!(1_000_000), "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_lists_examine_its_own_notifications_alone() {
    let f = start_on(Backend::start(), "", &[]).await;
    let ok = |tenant: &str, k: usize| json!({"url": f.receiver.url(&format!("/ok/{tenant}/{k}")), "body": {}});
    let b_dead = f.register("tok-all-b", failing(&f, "b", 0)).await;
    f.pb.wait_state(&b_dead, "dead", WAIT).await;
    let b_done = f.register("tok-all-b", ok("b", 0)).await;
    f.pb.wait_state(&b_done, "delivered", WAIT).await;
    let later = json!({"url": f.receiver.url("/ok/b"), "body": {}, "delay": "2h"});
    let b_later = f.register("tok-all-b", later).await;

    // shop-c, with no quota of its own, many of each after shop-b's.
    let n = 300;
    let delayed =
        |k: usize| json!({"url": f.receiver.url("/ok/c"), "body": {"k": k}, "delay": "1h"});
    register_many(&f, "tok-plain-c", n, delayed).await;
    register_many(&f, "tok-plain-c", n, |k| failing(&f, "c", k)).await;
    register_many(&f, "tok-plain-c", n, |k| ok("c", k)).await;
    let finished = support::eventually(WAIT * 4, || async {
        let s = stats(&f, "tok-plain-c").await;
        s["dead"] == json!(n) && s["finished"] == json!(n)
    })
    .await;
    assert!(finished, "{}", stats(&f, "tok-plain-c").await);

    for (path, id) in [
        ("/notifications?state=scheduled", &b_later),
        ("/notifications?state=dead", &b_dead),
        ("/notifications?state=delivered", &b_done),
        ("/dead-letters", &b_dead),
    ] {
        let (page, examined) = examined_by(&f, "tok-all-b", path).await;
        assert_eq!(
            support::item_ids(&page),
            vec![id.as_str()],
            "{path}: {page}"
        );
        assert!(page["next_cursor"].is_null(), "{path}: {page}");
        assert!(
            page.get("partial").is_none_or(|p| p == false),
            "{path}: {page}"
        );
        assert_eq!(
            examined, 1.0,
            "{path} examined shop-b's one notification alone"
        );
    }
    let (page, _) = examined_by(
        &f,
        "tok-ops",
        "/notifications?state=scheduled&tenant=shop-b",
    )
    .await;
    assert_eq!(support::item_ids(&page), vec![b_later.as_str()], "{page}");
}

/// Another tenant's operator's actions, past what an audit page reads, never push a
/// tenant's own entries out of its auditors' first page: each tenant's entries are read
/// from its own log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_actions_never_push_a_tenants_audit_entries_out_of_its_page() {
    use futures_util::stream::{self, StreamExt};
    let f = start_on(Backend::start(), "", &[]).await;
    let purge = |token: &'static str| {
        let body = json!({"topic": "nothing.matches"});
        f.call(token, Method::POST, "/dead-letters/purge", Some(body))
    };
    let (status, answer) = purge("tok-all-b").await;
    assert_eq!(status, 200, "{answer}");
    let beyond = postback::store::audit::SCAN_BUDGET + 100;
    let statuses: Vec<u16> = stream::iter(0..beyond)
        .map(|_| async { purge("tok-ops-a").await.0 })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200), "every purge answered");

    let (status, page) = f.get("tok-all-b", "/audit").await;
    assert_eq!(status, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(
        (&items[0]["tenant"], &items[0]["actor"]),
        (&json!("shop-b"), &json!("all-b"))
    );
    assert!(page["next_cursor"].is_null(), "{page}");
}
