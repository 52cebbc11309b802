//! What a merchant needs to debug a receiver: each attempt keeps the response's status,
//! its headers (bounded, cookies withheld) and the start of its body, up to
//! `delivery.response_bytes` or the tenant's own.

use crate::support;

use serde_json::{json, Value};
use support::WAIT;

fn header<'a>(attempt: &'a Value, name: &str) -> Option<&'a str> {
    let headers = attempt["response_headers"].as_array()?;
    let found = headers.iter().find(|h| h["name"] == name)?;
    found["value"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_keeps_the_response_status_headers_and_the_start_of_its_body() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/debug?fail=1&header=x-request-id:req-42&reply_bytes=5000");
    let id = pb
        .register(json!({"url": url, "body": {}, "schedule": ["100ms"]}))
        .await;
    let done = pb.wait_state(&id, "delivered", WAIT).await;

    let failed = &done["history"][0];
    assert_eq!(failed["status"], 500);
    assert_eq!(failed["response"], "failure");
    assert_eq!(header(failed, "x-request-id"), Some("req-42"), "{failed}");
    assert_eq!(
        header(failed, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    let delivered = &done["history"][1];
    assert_eq!(delivered["status"], 200);
    let kept = delivered["response"].as_str().unwrap();
    assert_eq!(kept.len(), 1024, "delivery.response_bytes by default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_keeps_as_much_of_a_response_as_it_is_configured_to_and_no_other_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    std::fs::write(
        &path,
        "[tenants.verbose]\nresponse_bytes = 3000\n\n[tenants.plain]\n",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let (_backend, receiver, pb) = support::start_any(&[("POSTBACK_CONFIG", config)]).await;
    let url = receiver.url("/big?reply_bytes=5000");
    let mut kept = Vec::new();
    for tenant in ["verbose", "plain"] {
        let id = pb
            .register(json!({"url": url, "body": {}, "tenant": tenant}))
            .await;
        let done = pb.wait_state(&id, "delivered", WAIT).await;
        kept.push(done["history"][0]["response"].as_str().unwrap().len());
    }
    assert_eq!(
        kept,
        [3000, 1024],
        "its own setting, the default for the other"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_shows_the_request_its_receiver_got_with_credentials_hidden() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let headers = json!({"x-merchant-ref": "m-7", "authorization": "Bearer merchant-secret"});
    let body = json!({"url": receiver.url("/paid"), "body": {"order": 7}, "headers": headers});
    let id = pb.register(body).await;
    let done = pb.wait_state(&id, "delivered", WAIT).await;
    let got = receiver.requests_for(&id).pop().unwrap();

    let request = &done["request"];
    assert_eq!(request["method"], "POST");
    assert_eq!(request["url"], receiver.url("/paid"));
    assert_eq!(request["body"].as_str().unwrap().as_bytes(), &got.body[..]);
    let shown = |name: &str| {
        let headers = request["headers"].as_array().unwrap();
        let found = headers.iter().find(|h| h["name"] == name);
        found.map(|h| h["value"].as_str().unwrap().to_string())
    };
    for name in ["content-type", "user-agent", "webhook-id", "x-merchant-ref"] {
        assert_eq!(shown(name), got.header(name), "{name}: {request}");
    }
    assert_eq!(
        got.header("authorization").unwrap(),
        "Bearer merchant-secret"
    );
    let hidden = shown("authorization").unwrap();
    assert!(!hidden.contains("merchant-secret"), "{hidden}");
    assert_eq!(shown("webhook-timestamp"), None, "set at each attempt");
}
