//! Hardening at the edges: browser security headers on every answer, a `413` that names
//! its limit, ids of shards the instance does not have, `/metrics` behind its own token
//! when one is configured, and clients that are slow, stall or hold connections.

use crate::support;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_the_browser_security_headers() {
    let (_redis, _receiver, pb) = support::start(&[]).await;
    for (path, authorized) in [
        ("/ui", false),
        ("/ui/app.js", false),
        ("/docs/", false),
        ("/openapi.json", false),
        ("/healthz", false),
        ("/metrics", false),
        ("/stats", true),
        ("/stats", false),
        ("/no-such-route", true),
    ] {
        let mut request = pb.http.get(pb.url(path));
        if authorized {
            request = request.bearer_auth(support::instance::TOKEN);
        }
        let answer = request.send().await.unwrap();
        let h = answer.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_naming_the_limit() {
    let (_redis, _receiver, pb) =
        support::start(&[("POSTBACK_SERVER_MAX_BODY_BYTES", "2048")]).await;
    let big = json!({"url": "http://127.0.0.1:9/x", "body": "x".repeat(4096)});
    for (method, path) in [
        (Method::POST, "/notify"),
        (Method::POST, "/dead-letters/replay"),
        (Method::POST, "/dead-letters/purge"),
        (
            Method::POST,
            "/dead-letters/ntf_0_0352crRk3eHsDGAf2pdzQz/replay",
        ),
    ] {
        let (status, answer) = pb.request(method, path, Some(big.clone()), &[]).await;
        assert_eq!(status, 413, "{path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("2048 bytes") && message.contains("server.max_body_bytes"),
            "{path}: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_of_a_shard_this_instance_does_not_have_is_not_found() {
    let (_redis, _receiver, pb) = support::start(&[]).await;
    let id = "ntf_7_0352crRk3eHsDGAf2pdzQz";
    for (method, path) in [
        (Method::GET, format!("/notifications/{id}")),
        (Method::DELETE, format!("/notifications/{id}")),
        (Method::GET, format!("/dead-letters/{id}")),
        (Method::POST, format!("/dead-letters/{id}/replay")),
        (Method::DELETE, format!("/dead-letters/{id}")),
    ] {
        let (status, answer) = pb.request(method.clone(), &path, None, &[]).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{method} {path}: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_their_token_when_one_is_configured() {
    let (_redis, _receiver, pb) =
        support::start(&[("POSTBACK_SERVER_METRICS_TOKEN", "scrape-me")]).await;
    let status = |token: Option<&'static str>| {
        let mut request = pb.http.get(pb.url("/metrics"));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(None).await, 401);
    assert_eq!(status(Some("wrong")).await, 401);
    assert_eq!(
        status(Some(support::instance::TOKEN)).await,
        401,
        "an API token is not the metrics token"
    );
    assert_eq!(status(Some("scrape-me")).await, 200);
    assert_eq!(pb.status_without_token("/healthz").await, 200);
    assert!(!pb.logs().contains("scrape-me"));
}

/// A raw connection to `pb`.
async fn connect(pb: &support::Postback) -> tokio::net::TcpStream {
    let addr = pb.url("").trim_start_matches("http://").to_string();
    tokio::net::TcpStream::connect(addr).await.unwrap()
}

/// Reads until the server closes the connection (or `within` passes); what it sent.
async fn read_until_closed(conn: &mut tokio::net::TcpStream, within: Duration) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, conn.read_to_end(&mut got)).await;
    read.ok()
        .map(|_| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_cut_off_and_an_idle_connection_later() {
    use tokio::io::AsyncWriteExt;
    let (_redis, _receiver, pb) = support::start(&[
        ("POSTBACK_SERVER_HEADER_TIMEOUT", "500ms"),
        ("POSTBACK_SERVER_IDLE_TIMEOUT", "2s"),
    ])
    .await;
    let mut conn = connect(&pb).await;
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: postback\r\nX-Slow: ")
        .await
        .unwrap();
    let started = Instant::now();
    let closed = read_until_closed(&mut conn, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "still open after 5 s");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );

    // A kept-alive connection between requests is idle, not slow: it stays open past the
    // head's limit, takes another request, and is closed once idle for the idle limit.
    let mut idle = connect(&pb).await;
    let ask = b"GET /healthz HTTP/1.1\r\nHost: postback\r\n\r\n";
    idle.write_all(ask).await.unwrap();
    // Time is the point: idle between requests past the head's limit.
    support::hold(Duration::from_millis(1200)).await;
    idle.write_all(ask).await.unwrap();
    let started = Instant::now();
    let answers = read_until_closed(&mut idle, Duration::from_secs(6))
        .await
        .unwrap();
    assert_eq!(answers.matches("HTTP/1.1 200").count(), 2, "{answers}");
    let idle_for = started.elapsed();
    assert!(
        idle_for >= Duration::from_millis(1500) && idle_for < Duration::from_secs(4),
        "closed after {idle_for:?} idle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_gets_408_and_frees_its_place() {
    use tokio::io::AsyncWriteExt;
    let (_redis, receiver, pb) = support::start(&[
        ("POSTBACK_SERVER_BODY_TIMEOUT", "500ms"),
        ("POSTBACK_SERVER_MAX_CONCURRENT_REQUESTS", "1"),
    ])
    .await;
    let mut conn = connect(&pb).await;
    let head = format!(
        "POST /notify HTTP/1.1\r\nHost: postback\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 999999\r\n\r\n{{\"url\":",
        support::instance::TOKEN
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("server.body_timeout"), "{answer}");
    let (status, _) = pb
        .notify(json!({"url": receiver.url("/x"), "body": {}}))
        .await;
    assert_eq!(status, 202, "the stalled request's place is free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_for_a_free_one() {
    use tokio::io::AsyncWriteExt;
    let (_redis, _receiver, pb) = support::start(&[
        ("POSTBACK_SERVER_MAX_CONNECTIONS", "2"),
        ("POSTBACK_SERVER_HEADER_TIMEOUT", "1s"),
        ("POSTBACK_SERVER_IDLE_TIMEOUT", "1s"),
    ])
    .await;
    // Time is the point: the harness's own kept-alive connection is closed once idle.
    support::hold(Duration::from_millis(1300)).await;
    let mut held = vec![connect(&pb).await, connect(&pb).await];
    for c in &mut held {
        c.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    }
    // Both taken in before the third comes.
    support::hold(Duration::from_millis(100)).await;
    let started = Instant::now();
    let mut third = connect(&pb).await;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: postback\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut third, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(700),
        "answered after {waited:?}, while two connections held both places"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_is_held_to_the_body_limit_not_the_heads() {
    use tokio::io::AsyncWriteExt;
    let (_redis, receiver, pb) =
        support::start(&[("POSTBACK_SERVER_HEADER_TIMEOUT", "300ms")]).await;
    let body =
        json!({"url": receiver.url("/slow-producer"), "body": {"n": 1}, "delay": "1h"}).to_string();
    let head = format!(
        "POST /notify HTTP/1.1\r\nHost: postback\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        support::instance::TOKEN,
        body.len()
    );
    let mut conn = connect(&pb).await;
    conn.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.as_bytes().chunks(body.len() / 4 + 1) {
        // A slow producer's pace, the behaviour under test.
        support::pace(Duration::from_millis(250)).await;
        conn.write_all(chunk).await.unwrap();
    }
    let answer = read_until_closed(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
}

/// A store script that fails (here `enqueue.lua`, meeting an idempotency key that is not
/// a string) is a bug, not an outage: the item that met it gets `500 internal` at once,
/// the other items of its batch are stored, and the failure is counted by script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_fails_only_the_request_that_met_it() {
    let (redis, receiver, pb) = support::start(&[]).await;
    let _: () = redis.query(
        redis::cmd("HSET")
            .arg("{postback:0}:idem:default broken")
            .arg("x")
            .arg("y"),
    );
    let item = |n: u32| json!({"url": receiver.url("/e"), "body": {"n": n}});
    let mut broken = item(0);
    broken["idempotency_key"] = json!("broken");
    let started = Instant::now();
    let (status, answer) = pb
        .request(
            Method::POST,
            "/notify/batch",
            Some(json!({"items": [item(1), broken, item(2)]})),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items[1]["error"]["code"], "internal", "{answer}");
    for n in [0, 2] {
        let id = items[n]["id"].as_str().expect("its neighbours are stored");
        pb.wait_state(id, "delivered", Duration::from_secs(10))
            .await;
    }
    let (status, alone) = pb
        .notify_with(item(3), &[("idempotency-key", "broken")])
        .await;
    assert_eq!(
        (status, &alone["error"]["code"]),
        (500, &json!("internal")),
        "{alone}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not retried as an outage"
    );
    let failed = pb
        .metric("postback_script_errors_total{script=\"enqueue\"}")
        .await
        .unwrap();
    assert!(failed >= 2.0, "{failed}");
    assert_eq!(receiver.count(), 2);
}
