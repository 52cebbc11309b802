//! Graceful shutdown: SIGTERM lets a delivery in flight finish and be settled, then the
//! process exits 0.

use crate::support;

use std::time::Duration;

use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_delivery_in_flight_and_exits_zero() {
    let (backend, receiver, mut pb) = support::start_any(&[]).await;

    let id = pb
        .register(json!({"url": receiver.url("/slow?sleep_ms=800"), "body": {}}))
        .await;
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);
    let status = pb.terminate();
    assert!(status.success(), "exit status {status:?}\n{}", pb.logs());

    let again = backend.postback(&[]).await;
    let seen = again.notification(&id).await;
    assert_eq!(seen["state"], "delivered", "{seen}");
    assert_eq!(seen["attempts"], 1);
    assert_eq!(receiver.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_outlasting_the_grace_period_is_released_due_at_once() {
    let (backend, receiver, mut pb) =
        support::start_any(&[("POSTBACK_DELIVERY_SHUTDOWN_GRACE", "200ms")]).await;

    let id = pb
        .register(json!({"url": receiver.url("/slow?sleep_ms=3000"), "body": {}}))
        .await;
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);
    assert!(pb.terminate().success(), "{}", pb.logs());

    let again = backend.postback(&[]).await;
    let seen = again
        .wait_state(&id, "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(seen["attempts"], 1, "the released attempt was not counted");
    assert_eq!(
        receiver.requests_for(&id).len(),
        2,
        "sent again at once, not after the lease"
    );
}
