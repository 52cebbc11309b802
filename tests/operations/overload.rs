//! Overload: when more requests are being handled than `server.max_concurrent_requests`
//! (because Redis is slow, or a producer pushes too hard), the API sheds the excess at
//! once with `503 overloaded` and a `Retry-After`, instead of piling up waiting work.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Value};
use support::instance::TOKEN;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_limit_are_shed_at_once_and_health_still_answers() {
    let (redis, receiver, pb) =
        support::start(&[("POSTBACK_SERVER_MAX_CONCURRENT_REQUESTS", "4")]).await;
    redis.freeze();
    let body = json!({"url": receiver.url("/r"), "body": {}});
    let shed_so_far = AtomicUsize::new(0);
    let requests = (0..12).map(|i| {
        let (pb, body, shed_so_far) = (&pb, &body, &shed_so_far);
        async move {
            // The first four are in before the rest, and wait on the frozen Redis.
            support::pace(Duration::from_millis(if i < 4 { 0 } else { 200 })).await;
            let started = Instant::now();
            let r = pb
                .http
                .post(pb.url("/notify"))
                .bearer_auth(TOKEN)
                .json(body)
                .send()
                .await
                .unwrap();
            let retry_after = r.headers().get("retry-after").cloned();
            let status = r.status().as_u16();
            let answer: Value = r.json().await.unwrap();
            if answer["error"]["code"] == "overloaded" {
                shed_so_far.fetch_add(1, Ordering::Relaxed);
            }
            (status, answer, retry_after, started.elapsed())
        }
    });
    let health = async {
        // Asked once the eight beyond the limit are shed, while the four still wait.
        let shed = support::eventually(support::WAIT, || async {
            shed_so_far.load(Ordering::Relaxed) >= 8
        });
        assert!(shed.await, "{} shed", shed_so_far.load(Ordering::Relaxed));
        pb.status_without_token("/healthz").await
    };
    let (answers, health) = tokio::join!(join_all(requests), health);
    assert_eq!(health, 200, "health answers while the API is saturated");

    let shed: Vec<_> = answers
        .iter()
        .filter(|(_, a, _, _)| a["error"]["code"] == "overloaded")
        .collect();
    assert_eq!(
        shed.len(),
        8,
        "all beyond the 4 in progress are shed: {answers:?}"
    );
    for (status, _, retry_after, took) in &shed {
        assert_eq!(*status, 503);
        assert_eq!(retry_after.as_ref().map(|v| v.to_str().unwrap()), Some("1"));
        assert!(
            *took < Duration::from_millis(500),
            "shed at once, took {took:?}"
        );
    }
    assert!(
        answers[..4]
            .iter()
            .all(|(s, a, _, _)| *s == 503 && a["error"]["code"] == "store_unavailable"),
        "the four in progress waited for Redis: {answers:?}"
    );

    redis.thaw();
    let back = support::eventually(Duration::from_secs(10), || async {
        pb.notify(body.clone()).await.0 == 202
    })
    .await;
    assert!(back, "accepting again once Redis answers\n{}", pb.logs());
}
