//! Dead-letter review: look at one, replay it (optionally to a new URL), discard it.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::postback::TOKEN;
use support::{Postback, Receiver};

const WAIT: Duration = Duration::from_secs(10);

async fn dead_one(pb: &Postback, receiver: &Receiver) -> String {
    let id = pb
        .register(json!({"url": receiver.url("/down?fail=99"), "body": {"order": 9}, "schedule": ["100ms"], "topic": "payment.succeeded"}))
        .await;
    pb.wait_state(&id, "dead", WAIT).await;
    id
}

async fn send(
    pb: &Postback,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = pb.http.request(method, pb.url(path)).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_shows_its_body_and_whole_history() {
    let (_redis, receiver, pb) = support::start(&[]).await;
    let id = dead_one(&pb, &receiver).await;

    let (status, dl) = pb.get(&format!("/dead-letters/{id}")).await;
    assert_eq!(status, 200, "{dl}");
    assert_eq!(dl["state"], "dead");
    assert_eq!(dl["body"], r#"{"order":9}"#);
    assert_eq!(dl["history"].as_array().unwrap().len(), 2);
    assert_eq!(dl["history"][1]["status"], 500);
    assert!(dl["dead_at"].as_str().is_some());

    let alive = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "delay": "1h"}))
        .await;
    assert_eq!(
        pb.get(&format!("/dead-letters/{alive}")).await.0,
        404,
        "not dead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_with_a_new_url_delivers_it_with_a_fresh_attempt_count() {
    let (_redis, receiver, pb) = support::start(&[]).await;
    let id = dead_one(&pb, &receiver).await;

    let fixed = receiver.url("/fixed");
    let (status, answer) = send(
        &pb,
        reqwest::Method::POST,
        &format!("/dead-letters/{id}/replay"),
        Some(json!({"url": fixed, "schedule": ["100ms"]})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "scheduled");
    assert_eq!(answer["attempts"], 0);

    let done = pb.wait_state(&id, "delivered", WAIT).await;
    assert_eq!(done["attempts"], 1, "a fresh count");
    assert_eq!(done["url"], fixed.as_str());
    let last = receiver.requests().pop().unwrap();
    assert_eq!(
        (last.path.as_str(), last.id()),
        ("/fixed", id.clone()),
        "same webhook-id"
    );
    let (_, list) = pb.get("/dead-letters").await;
    assert_eq!(list["items"], json!([]));

    let (status, again) = send(
        &pb,
        reqwest::Method::POST,
        &format!("/dead-letters/{id}/replay"),
        None,
    )
    .await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (404, Some("not_found")),
        "no longer dead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_validates_like_notify_and_changes_nothing_when_rejected() {
    let (_redis, receiver, pb) = support::start(&[]).await;
    let id = dead_one(&pb, &receiver).await;
    let path = format!("/dead-letters/{id}/replay");

    for (body, field) in [
        (json!({"url": "ftp://x"}), "url"),
        (json!({"schedule": ["soon"]}), "schedule[0]"),
        (json!({"delay": "x"}), "delay"),
        (json!({"body": {}}), "body"),
    ] {
        let (status, answer) = send(&pb, reqwest::Method::POST, &path, Some(body.clone())).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some(field)),
            "{body} → {answer}"
        );
    }
    assert_eq!(pb.notification(&id).await["state"], "dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_dead_letter_is_gone() {
    let (_redis, receiver, pb) = support::start(&[]).await;
    let id = dead_one(&pb, &receiver).await;

    let (status, _) = send(
        &pb,
        reqwest::Method::DELETE,
        &format!("/dead-letters/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(pb.get(&format!("/notifications/{id}")).await.0, 404);
    assert_eq!(pb.get("/dead-letters").await.1["items"], json!([]));
    assert_eq!(
        send(
            &pb,
            reqwest::Method::DELETE,
            &format!("/dead-letters/{id}"),
            None
        )
        .await
        .0,
        404
    );
}
