//! Cancellation: `DELETE /notifications/{id}` stops a notification that is not finished.

use crate::support;

use std::time::Duration;

use serde_json::json;

async fn delete(pb: &support::Postback, id: &str) -> (u16, serde_json::Value) {
    let path = format!("/notifications/{id}");
    pb.request(reqwest::Method::DELETE, &path, None, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_before_its_first_attempt_it_is_never_sent() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = pb
        .register(json!({"url": receiver.url("/c"), "body": {}, "delay": "500ms"}))
        .await;

    let (status, body) = delete(&pb, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "cancelled");

    support::sent_after(&pb, "500ms").await;
    assert_eq!(receiver.count(), 0);
    assert_eq!(pb.notification(&id).await["state"], "cancelled");
    assert_eq!(
        delete(&pb, &id).await.0,
        200,
        "cancelling twice is harmless"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_while_waiting_for_a_retry_it_is_not_retried() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = pb
        .register(
            json!({"url": receiver.url("/c?fail=9"), "body": {}, "schedule": ["700ms", "700ms"]}),
        )
        .await;
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);
    support::eventually(Duration::from_secs(5), || async {
        pb.notification(&id).await["attempts"] == 1
    })
    .await;

    let (status, body) = delete(&pb, &id).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1);
    let seen = pb.notification(&id).await;
    assert_eq!(
        (seen["state"].as_str(), seen["attempts"].as_u64()),
        (Some("cancelled"), Some(1))
    );
    // The operator's log says which notification ended, whose, after how many attempts.
    let logs = pb.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("notification cancelled") && l.contains(&id))
        .unwrap_or_else(|| panic!("no line for the cancel:\n{logs}"));
    assert!(
        line.contains("tenant=default") && line.contains("attempts=1"),
        "{line}"
    );
    assert!(line.contains("last_status=500"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_during_an_attempt_it_is_not_retried_after_it() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = pb
        .register(json!({"url": receiver.url("/c?fail=9&sleep_ms=600"), "body": {}, "schedule": ["100ms"]}))
        .await;
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);

    let (status, body) = delete(&pb, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "in_flight");
    assert_eq!(body["cancel_requested"], true);
    let seen = pb
        .wait_state(&id, "cancelled", Duration::from_secs(5))
        .await;
    assert_eq!(seen["attempts"], 1, "the attempt in flight is recorded");
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_notifications_cannot_be_cancelled() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let delivered = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    let dead = pb
        .register(json!({"url": receiver.url("/no?fail=9"), "body": {}, "schedule": []}))
        .await;
    pb.wait_state(&delivered, "delivered", Duration::from_secs(5))
        .await;
    pb.wait_state(&dead, "dead", Duration::from_secs(5)).await;

    for id in [&delivered, &dead] {
        let (status, body) = delete(&pb, id).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{body}"
        );
    }
    let unknown = "ntf_0_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e";
    assert_eq!(delete(&pb, unknown).await.0, 404);
    assert_eq!(delete(&pb, "nonsense").await.0, 404);
}
