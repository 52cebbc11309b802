//! Retention: dead letters are trimmed by age and by count when new ones arrive, finished
//! notifications expire, a periodic sweep trims while nothing happens, and every trimmed
//! notification is counted in `GET /stats`.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::Postback;

use support::WAIT;

async fn stats(pb: &Postback) -> Value {
    let (status, body) = pb.get("/stats").await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_dead_letters_beyond_the_count_are_trimmed_and_counted() {
    let (_redis, receiver, pb) =
        support::start(&[("POSTBACK_RETENTION_DEAD_MAX_COUNT", "3")]).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(support::dead_one(&pb, &receiver).await);
    }

    let (_, list) = pb.get("/dead-letters").await;
    let listed = support::item_ids(&list);
    assert_eq!(listed, vec![&ids[4], &ids[3], &ids[2]], "newest three kept");
    assert_eq!(pb.get(&format!("/notifications/{}", ids[0])).await.0, 404);
    let s = stats(&pb).await;
    assert_eq!(s["dead"], 3, "{s}");
    assert_eq!(s["trimmed"]["dead_by_count"], 2, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_dead_letters_and_finished_notifications_expire_even_when_idle() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_RETENTION_DEAD_MAX_AGE", "1s"),
        ("POSTBACK_RETENTION_FINISHED_MAX_AGE", "1s"),
        ("POSTBACK_RETENTION_SWEEP_INTERVAL", "200ms"),
    ])
    .await;
    let dead = support::dead_one(&pb, &receiver).await;
    let delivered = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    pb.wait_state(&delivered, "delivered", WAIT).await;
    let pending = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "delay": "1h"}))
        .await;

    let gone = support::eventually(Duration::from_secs(5), || async {
        pb.get(&format!("/notifications/{dead}")).await.0 == 404
            && pb.get(&format!("/notifications/{delivered}")).await.0 == 404
    })
    .await;
    assert!(gone, "both expired\n{}", pb.logs());
    assert_eq!(pb.notification(&pending).await["state"], "scheduled");
    let s = stats(&pb).await;
    assert_eq!(
        (
            &s["trimmed"]["dead_by_age"],
            &s["trimmed"]["finished_by_age"]
        ),
        (&json!(1), &json!(1)),
        "{s}"
    );
    assert_eq!(
        (&s["scheduled"], &s["dead"], &s["finished"]),
        (&json!(1), &json!(0), &json!(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_of_a_trimmed_notification_is_refused_not_reused() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_RETENTION_FINISHED_MAX_AGE", "1s"),
        ("POSTBACK_RETENTION_SWEEP_INTERVAL", "200ms"),
    ])
    .await;
    let body = json!({"url": receiver.url("/ok"), "body": {}});
    let key = [("Idempotency-Key", "order-7")];
    let (status, first) = pb.notify_with(body.clone(), &key).await;
    assert_eq!(status, 202, "{first}");
    let id = first["id"].as_str().unwrap();
    pb.wait_state(id, "delivered", WAIT).await;
    support::eventually(Duration::from_secs(5), || async {
        pb.get(&format!("/notifications/{id}")).await.0 == 404
    })
    .await;

    let (status, again) = pb.notify_with(body, &key).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "idempotency_key_reused");
    assert!(again["error"]["message"].as_str().unwrap().contains(id));
    assert_eq!(receiver.count(), 1);
}
