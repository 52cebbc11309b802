//! `GET /overview` (what the review page shows first) and the page itself: counts by
//! state, what finished and died in the last hour, the hosts failing most with their
//! last error; `/ui` and its assets served from the binary without a token.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::Receiver;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_the_last_hour_and_ranks_failing_hosts() {
    let (_backend, near, pb) = support::start_any(&[]).await;
    let far = Receiver::start_on("127.0.0.2").await;
    let mut dead = Vec::new();
    for (receiver, status) in [(&near, 500), (&near, 500), (&far, 503)] {
        let url = receiver.url(&format!("/down?fail=9&status={status}"));
        dead.push(
            pb.register(json!({"url": url, "body": {}, "schedule": []}))
                .await,
        );
    }
    let ok = pb
        .register(json!({"url": near.url("/up"), "body": {}}))
        .await;
    let pending = pb
        .register(json!({"url": near.url("/later"), "body": {}, "delay": "1h"}))
        .await;
    for id in &dead {
        pb.wait_state(id, "dead", Duration::from_secs(10)).await;
    }
    pb.wait_state(&ok, "delivered", Duration::from_secs(10))
        .await;

    let (status, o) = pb.get("/overview").await;
    assert_eq!(status, 200, "{o}");
    assert_eq!(o["counts"]["dead"], 3);
    assert_eq!(o["counts"]["finished"], 1);
    assert_eq!(o["counts"]["scheduled"], 1, "{pending} waits an hour");
    let windows = o["last_hour"].as_array().unwrap();
    assert_eq!(windows.len(), 12);
    let sum = |k: &str| windows.iter().map(|w| w[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("finished"), sum("dead")), (1, 3));
    assert_eq!(windows[11]["dead"], 3, "all in the window ending now");
    let hosts = o["failing_hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{o}");
    assert_eq!(hosts[0]["host"], "127.0.0.1");
    assert_eq!(hosts[0]["dead"], 2);
    assert_eq!(hosts[0]["last_status"], 500);
    assert_eq!(hosts[1]["host"], "127.0.0.2");
    assert_eq!(hosts[1]["last_status"], 503);
    assert_eq!(o["held"], json!({"count": 0, "complete": true}), "{o}");
}

/// Held notifications are counted apart: among the scheduled, and on their own, from
/// their endpoint's pause on (one registered before the pause, not yet due, included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_the_held_apart() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let paused_url = receiver.url("/paused");
    let first = pb
        .register(json!({"url": paused_url, "body": {}, "delay": "1h"}))
        .await;
    let endpoint = support::eventually(Duration::from_secs(10), || async {
        pb.get("/endpoints").await.1["items"][0]["id"].is_string()
    });
    assert!(endpoint.await, "the endpoint is listed");
    let (_, page) = pb.get("/endpoints").await;
    let id = page["items"][0]["id"].as_str().unwrap().to_string();
    let pause = format!("/endpoints/{id}/pause");
    let (status, _) = pb.request(reqwest::Method::POST, &pause, None, &[]).await;
    assert_eq!(status, 200);
    let held = pb.register(json!({"url": paused_url, "body": {}})).await;
    pb.wait_state(&held, "held", Duration::from_secs(10)).await;
    // Shown held at once, it is claimed, found paused and put back: scheduled again.
    let back = support::eventually(Duration::from_secs(10), || async {
        pb.get("/overview").await.1["counts"]["scheduled"] == 2
    });
    assert!(back.await, "{held} put back");

    let (_, o) = pb.get("/overview").await;
    assert_eq!(o["counts"]["scheduled"], 2, "{first} and the held one: {o}");
    assert_eq!(o["held"], json!({"count": 2, "complete": true}), "{o}");
    assert_eq!(o["held_back"], json!({"count": 0, "complete": true}), "{o}");
    let (_, other) = pb.get("/overview?tenant=shop-elsewhere").await;
    assert_eq!(other["held"]["count"], 0, "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_page_is_served_from_the_binary_without_a_token() {
    let (_backend, _receiver, pb) = support::start_any(&[]).await;
    for (path, kind, marker) in [
        ("/ui", "text/html", "<title>postback"),
        ("/ui/app.js", "text/javascript", "sessionStorage"),
        ("/ui/style.css", "text/css", "@media"),
    ] {
        let r = pb.http.get(pb.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let content_type = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        assert!(r.text().await.unwrap().contains(marker), "{path}");
    }
    assert_eq!(
        pb.status_without_token("/overview").await,
        401,
        "the data needs a token"
    );
}
