//! Sending again: a finished notification resent (one, or every one a filter matches,
//! counted first with `dry_run`), and a scheduled or retrying one attempted now; who may,
//! and for which tenant.

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use support::{tenants, Postback, WAIT};

async fn post(pb: &Postback, path: &str, body: Option<Value>) -> (u16, Value) {
    pb.request(Method::POST, path, body, &[]).await
}

async fn delivered_one(pb: &Postback, url: String, extra: Value) -> String {
    let mut body = json!({"url": url, "body": {"order": 7}, "schedule": ["100ms"]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let id = pb.register(body).await;
    pb.wait_state(&id, "delivered", WAIT).await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_notification_resent_reaches_the_receiver_again_with_the_same_webhook_id() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = delivered_one(&pb, receiver.url("/paid"), json!({})).await;

    let (status, answer) = post(&pb, &format!("/notifications/{id}/resend"), None).await;
    assert_eq!(status, 200, "{answer}");
    // As it is now: due at once, it may be on its way already.
    assert_eq!(answer["cycle"], 1, "a new cycle: {answer}");
    assert_eq!(
        (&answer["resends"], &answer["replays"]),
        (&json!(1), &json!(0))
    );

    let done = pb.wait_state(&id, "delivered", WAIT).await;
    assert_eq!(done["resends"], 1);
    assert_eq!(
        done["history"].as_array().unwrap().len(),
        2,
        "both cycles' attempts: {done}"
    );
    let got = receiver.requests_for(&id);
    assert_eq!(got.len(), 2, "sent twice");
    assert!(got.iter().all(|r| r.id() == id && r.path == "/paid"));
    assert_eq!(got[0].body, got[1].body, "the same body");

    let (_, audit) = pb.get("/audit?action=resend").await;
    assert_eq!(audit["items"][0]["target"], id.as_str(), "{audit}");

    let pending = pb
        .register(json!({"url": receiver.url("/later"), "body": {}, "delay": "1h"}))
        .await;
    let (status, refused) = post(&pb, &format!("/notifications/{pending}/resend"), None).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the notification is scheduled"),
        "{refused}"
    );
    let (status, _) = post(
        &pb,
        "/notifications/ntf_0_00000000000000000000000000000000/resend",
        None,
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_one_and_a_dead_letter_are_resent_with_a_new_schedule_or_delay() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let cancelled = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "delay": "1h"}))
        .await;
    let (status, _) = pb
        .request(
            Method::DELETE,
            &format!("/notifications/{cancelled}"),
            None,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let (status, answer) = post(
        &pb,
        &format!("/notifications/{cancelled}/resend"),
        Some(json!({"schedule": ["100ms"]})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let done = pb.wait_state(&cancelled, "delivered", WAIT).await;
    assert_eq!(done["max_attempts"], 2, "the new schedule");

    let dead = support::dead_one(&pb, &receiver).await;
    let (status, answer) = post(
        &pb,
        &format!("/notifications/{dead}/resend"),
        Some(json!({"delay": "1h"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "scheduled");
    let due = humantime::parse_rfc3339(answer["next_attempt_at"].as_str().unwrap()).unwrap();
    let wait = due.duration_since(std::time::SystemTime::now()).unwrap();
    assert!(
        wait > Duration::from_secs(59 * 60),
        "due in an hour: {answer}"
    );
    assert_eq!(
        answer["history"].as_array().unwrap().len(),
        2,
        "the history stays"
    );

    let (status, refused) = post(
        &pb,
        &format!("/notifications/{dead}/resend"),
        Some(json!({"delay": "soon"})),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (422, Some("delay")),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_now_sends_a_scheduled_or_retrying_one_at_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let later = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "delay": "1h"}))
        .await;
    let (status, answer) = post(&pb, &format!("/notifications/{later}/attempt-now"), None).await;
    assert_eq!(status, 200, "{answer}");
    let done = pb.wait_state(&later, "delivered", WAIT).await;
    assert_eq!(done["attempts"], 1);

    // Failed once, its next attempt an hour away.
    let retrying = pb
        .register(json!({"url": receiver.url("/flaky?fail=1"), "body": {}, "schedule": ["1h"]}))
        .await;
    support::eventually(WAIT, || async {
        pb.notification(&retrying).await["attempts"] == 1
    })
    .await;
    let (status, answer) = post(&pb, &format!("/notifications/{retrying}/attempt-now"), None).await;
    assert_eq!(status, 200, "{answer}");
    let done = pb.wait_state(&retrying, "delivered", WAIT).await;
    assert_eq!(done["attempts"], 2, "its count goes on");
    assert_eq!(receiver.requests_for(&retrying).len(), 2);

    let (status, refused) = post(&pb, &format!("/notifications/{later}/attempt-now"), None).await;
    assert_eq!(status, 409, "delivered already: {refused}");
    let (_, audit) = pb.get("/audit?action=attempt_now").await;
    assert_eq!(audit["items"].as_array().unwrap().len(), 2, "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_one_goes_to_the_back_of_its_ordering_key() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let first = delivered_one(&pb, receiver.url("/k"), json!({"ordering_key": "k"})).await;
    let second = pb
        .register(
            json!({"url": receiver.url("/k"), "body": {}, "ordering_key": "k", "delay": "1h"}),
        )
        .await;

    let (status, answer) = post(&pb, &format!("/notifications/{first}/resend"), None).await;
    assert_eq!(status, 200, "{answer}");
    let behind = pb.notification(&first).await;
    assert_eq!(behind["waiting"], true, "behind the second: {behind}");

    post(&pb, &format!("/notifications/{second}/attempt-now"), None).await;
    pb.wait_state(&first, "delivered", WAIT).await;
    let order: Vec<String> = receiver.requests().iter().map(|r| r.id()).collect();
    assert_eq!(
        order,
        vec![first.clone(), second, first],
        "in the key's order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_resend_counts_first_and_then_resends_what_it_counted() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let mut matching = Vec::new();
    for _ in 0..3 {
        matching
            .push(delivered_one(&pb, receiver.url("/a"), json!({"topic": "refund.done"})).await);
    }
    let other = delivered_one(&pb, receiver.url("/b"), json!({"topic": "payment.done"})).await;

    let filter = json!({"state": "delivered", "topic": "refund.done", "dry_run": true});
    let (status, counted) = post(&pb, "/notifications/resend", Some(filter)).await;
    assert_eq!(status, 200, "{counted}");
    assert_eq!(counted, json!({"count": 3, "dry_run": true}));
    assert_eq!(receiver.count(), 4, "a dry run sends nothing");

    let filter = json!({"state": "delivered", "topic": "refund.done"});
    let (status, resent) = post(&pb, "/notifications/resend", Some(filter)).await;
    assert_eq!(status, 200, "{resent}");
    assert_eq!(resent, json!({"count": 3, "dry_run": false}));
    for id in &matching {
        pb.wait_state(id, "delivered", WAIT).await;
        assert_eq!(receiver.requests_for(id).len(), 2, "{id} sent again");
    }
    assert_eq!(
        receiver.requests_for(&other).len(),
        1,
        "not matched, not resent"
    );
    let (_, audit) = pb.get("/audit?action=resend_matching").await;
    let entry = &audit["items"][0];
    assert_eq!(entry["count"], 3, "{audit}");
    assert_eq!(
        entry["filter"],
        json!({"state": "delivered", "topic": "refund.done"})
    );

    let (status, refused) = post(
        &pb,
        "/notifications/resend",
        Some(json!({"state": "delivered"})),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (422, Some("all")),
        "{refused}"
    );
    let (status, refused) = post(
        &pb,
        "/notifications/resend",
        Some(json!({"state": "scheduled", "all": true})),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (422, Some("state")),
        "{refused}"
    );
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 7, "nothing more sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_resends_and_hurries_only_its_own() {
    let fleet = tenants::start(&[]).await;
    let b_url = fleet.receiver.url("/b");
    let theirs = fleet
        .register(
            "tok-all-b",
            json!({"url": b_url, "body": {}, "schedule": ["100ms"]}),
        )
        .await;
    fleet.pb.wait_state(&theirs, "delivered", WAIT).await;
    let later = fleet
        .register(
            "tok-all-b",
            json!({"url": b_url, "body": {}, "delay": "1h"}),
        )
        .await;

    let routes = [
        format!("/notifications/{theirs}/resend"),
        format!("/notifications/{later}/attempt-now"),
        "/notifications/resend".to_string(),
    ];
    for path in &routes {
        let anonymous = fleet.pb.http.post(fleet.pb.url(path)).send().await.unwrap();
        assert_eq!(anonymous.status(), 401, "{path}: no token");
        let body = json!({"state": "delivered", "all": true});
        let (status, refused) = fleet
            .call("tok-reader-a", Method::POST, path, Some(body))
            .await;
        assert_eq!(
            (status, refused["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{path}: no operate role"
        );
    }
    for path in &routes[..2] {
        let (status, _) = fleet.call("tok-ops-a", Method::POST, path, None).await;
        assert_eq!(status, 404, "{path}: another tenant's is not found");
    }
    let all = json!({"state": "delivered", "all": true});
    let (status, counted) = fleet
        .call(
            "tok-ops-a",
            Method::POST,
            "/notifications/resend",
            Some(all.clone()),
        )
        .await;
    assert_eq!(
        (status, counted["count"].as_u64()),
        (200, Some(0)),
        "{counted}"
    );
    let (status, _) = fleet
        .call(
            "tok-ops-a",
            Method::POST,
            "/notifications/resend",
            Some(json!({"state": "delivered", "tenant": "shop-b"})),
        )
        .await;
    assert_eq!(
        status, 403,
        "naming another tenant is refused as for a list"
    );

    support::sent_after(&fleet.pb, "0s").await;
    assert_eq!(fleet.receiver.requests_for(&theirs).len(), 1);
    assert_eq!(fleet.pb.notification(&later).await["state"], "scheduled");
    let (status, counted) = fleet
        .call(
            "tok-all-b",
            Method::POST,
            "/notifications/resend",
            Some(all),
        )
        .await;
    assert_eq!(
        (status, counted["count"].as_u64()),
        (200, Some(1)),
        "{counted}"
    );
}
