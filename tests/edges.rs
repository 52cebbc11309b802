//! Hardening at the edges: browser security headers on every answer, a `413` that names
//! its limit, ids of shards the instance does not have, and `/metrics` behind its own
//! token when one is configured.

mod support;

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
            request = request.bearer_auth(support::postback::TOKEN);
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
        status(Some(support::postback::TOKEN)).await,
        401,
        "an API token is not the metrics token"
    );
    assert_eq!(status(Some("scrape-me")).await, 200);
    assert_eq!(pb.status_without_token("/healthz").await, 200);
    assert!(!pb.logs().contains("scrape-me"));
}
