//! The audit log: every cancel, replay, bulk replay, discard and purge is recorded with
//! its time, actor, tenant, target or filter, and count; `GET /audit` lists it newest
//! first, filtered and cursor-paged, and a tenant-bound token sees its tenant's only.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};

use support::tenants::start;

/// Every page of `GET /audit?{query}` with `token`, followed to the end.
async fn walk(f: &support::tenants::Fleet, token: &str, query: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/audit?limit=2&{query}{cursor}");
        let (status, page) = f.get(token, &path).await;
        assert_eq!(status, 200, "{path}: {page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return items,
        }
    }
}

fn summary(items: &[Value]) -> Vec<(String, String, String, u64)> {
    items
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_string(),
                e["action"].as_str().unwrap().to_string(),
                e["tenant"].as_str().unwrap_or("*").to_string(),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operators_action_is_recorded_and_listed_newest_first() {
    let f = start(&[]).await;
    let pending = f
        .register(
            "tok-checkout-a",
            json!({"url": f.receiver.url("/p"), "body": {}, "delay": "1h"}),
        )
        .await;
    let a1 = f
        .dead_letter("tok-producer", Some("shop-a"), "refund")
        .await;
    let a2 = f
        .dead_letter("tok-producer", Some("shop-a"), "refund")
        .await;
    let a3 = f.dead_letter("tok-producer", Some("shop-a"), "paid").await;
    let b1 = f.dead_letter("tok-all-b", None, "paid").await;

    let act = |token: &'static str, method: Method, path: String, body: Option<Value>| {
        let f = &f;
        async move {
            let (status, answer) = f.call(token, method, &path, body).await;
            assert!((200..300).contains(&status), "{path}: {status} {answer}");
        }
    };
    act(
        "tok-ops-a",
        Method::DELETE,
        format!("/notifications/{pending}"),
        None,
    )
    .await;
    act(
        "tok-ops-a",
        Method::POST,
        format!("/dead-letters/{a1}/replay"),
        Some(json!({"delay": "1h"})),
    )
    .await;
    act(
        "tok-ops-a",
        Method::DELETE,
        format!("/dead-letters/{a3}"),
        None,
    )
    .await;
    act(
        "tok-ops",
        Method::POST,
        "/dead-letters/replay".into(),
        Some(json!({"topic": "refund", "delay": "1h"})),
    )
    .await;
    act(
        "tok-all-b",
        Method::POST,
        "/dead-letters/purge".into(),
        Some(json!({"all": true})),
    )
    .await;
    let (status, _) = f
        .call(
            "tok-ops-a",
            Method::DELETE,
            &format!("/dead-letters/{b1}"),
            None,
        )
        .await;
    assert_eq!(status, 404, "refused: nothing recorded");

    let all = walk(&f, "tok-auditor", "").await;
    assert_eq!(
        summary(&all),
        vec![
            ("all-b".into(), "purge".into(), "shop-b".into(), 1),
            ("ops".into(), "replay_matching".into(), "shop-a".into(), 1),
            ("ops-a".into(), "discard".into(), "shop-a".into(), 1),
            ("ops-a".into(), "replay".into(), "shop-a".into(), 1),
            ("ops-a".into(), "cancel".into(), "shop-a".into(), 1),
        ],
        "newest first, no repeats across pages"
    );
    assert_eq!(all[2]["target"], a3.as_str());
    assert_eq!(all[3]["target"], a1.as_str());
    assert_eq!(all[1]["filter"], json!({"topic": "refund"}));
    assert_eq!(all[0]["filter"], json!({"tenant": "shop-b"}));
    assert!(all[0]["target"].is_null());
    let times: Vec<&str> = all.iter().map(|e| e["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    let (_, replayed) = f.get("tok-ops", &format!("/notifications/{a2}")).await;
    assert_eq!(replayed["state"], "scheduled", "the bulk replay happened");

    let by_actor = walk(&f, "tok-auditor", "actor=ops-a").await;
    assert_eq!(by_actor.len(), 3);
    let by_action = walk(&f, "tok-auditor", "action=purge").await;
    assert_eq!(
        summary(&by_action),
        vec![("all-b".into(), "purge".into(), "shop-b".into(), 1)]
    );
    let by_tenant = walk(&f, "tok-auditor", "tenant=shop-a").await;
    assert_eq!(
        by_tenant.len(),
        4,
        "the bulk replay over every tenant changed shop-a's"
    );
    let since = all[1]["at"].as_str().unwrap();
    let recent = walk(&f, "tok-auditor", &format!("since={since}")).await;
    assert!(recent.len() >= 2 && recent.len() < 5, "{recent:?}");

    let own = walk(&f, "tok-all-b", "").await;
    assert_eq!(
        summary(&own),
        vec![("all-b".into(), "purge".into(), "shop-b".into(), 1)],
        "a tenant-bound auditor sees its tenant's entries only"
    );
    let (status, _) = f.get("tok-all-b", "/audit?tenant=shop-a").await;
    assert_eq!(status, 403);
    let (status, answer) = f.get("tok-auditor", "/audit?action=explode").await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (422, Some("action")),
        "{answer}"
    );
    let logs = f.pb.logs();
    assert!(!logs.contains("tok-ops"), "no token in the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_over_every_tenant_is_seen_by_each_tenants_auditors() {
    let f = start(&[]).await;
    for _ in 0..2 {
        f.dead_letter("tok-producer", Some("shop-a"), "paid").await;
    }
    f.dead_letter("tok-all-b", None, "paid").await;
    let body = Some(json!({"topic": "paid"}));
    let (status, answer) = f
        .call("tok-ops", Method::POST, "/dead-letters/purge", body)
        .await;
    assert_eq!((status, &answer["count"]), (200, &json!(3)), "{answer}");

    let f = &f;
    let seen = |token: &'static str| async move { summary(&walk(f, token, "").await) };
    let purge = |tenant: &str, n| {
        (
            "ops".to_string(),
            "purge".to_string(),
            tenant.to_string(),
            n,
        )
    };
    assert_eq!(seen("tok-audit-a").await, vec![purge("shop-a", 2)]);
    assert_eq!(seen("tok-all-b").await, vec![purge("shop-b", 1)]);
    let mut all = seen("tok-auditor").await;
    all.sort();
    assert_eq!(all, vec![purge("shop-a", 2), purge("shop-b", 1)]);
}
