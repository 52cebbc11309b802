//! Success rules and profiles: a receiver answering each provider's convention is judged
//! by the notification's rule (its own `success`, `expect_body`, or its profile's), on
//! every backend (`scripts/test.sh`); a notification shows its profile and rule.

use crate::support;

use serde_json::{json, Value};
use support::{Postback, Receiver};

use support::WAIT;

/// Registers one attempt (no retries) at `query` with `rule` merged into the body, and
/// waits for it to finish: its final view.
async fn judged(pb: &Postback, receiver: &Receiver, query: &str, rule: Value) -> Value {
    let mut body =
        json!({"url": receiver.url(&format!("/cb?{query}")), "body": {"order": 1}, "schedule": []});
    body.as_object_mut()
        .unwrap()
        .extend(rule.as_object().unwrap().clone());
    let id = pb.register(body).await;
    support::eventually(WAIT, || async {
        let state = pb.notification(&id).await["state"].clone();
        state == "delivered" || state == "dead"
    })
    .await;
    pb.notification(&id).await
}

fn encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_convention_is_judged_by_its_rule() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let xml = |code: &str| {
        encoded(&format!(
            "<xml><return_code><![CDATA[{code}]]></return_code></xml>"
        ))
    };
    // (rule, an answer it accepts, one it refuses, the refusal's error)
    let cases = [
        (
            json!({"profile": "alipay"}),
            "reply=success".to_string(),
            "reply=fail".to_string(),
            "response body is not `success`",
        ),
        (
            json!({"expect_body": "SUCCESS"}),
            "reply=SUCCESS".into(),
            "reply=success".into(),
            "response body is not `SUCCESS`",
        ),
        (
            json!({"success": {"body_equals_ignoring_case": "success"}}),
            "reply=Success".into(),
            "reply=successful".into(),
            "response body is not `success` in any case",
        ),
        (
            json!({"profile": "wechatpay_v2"}),
            format!("reply={}", xml("SUCCESS")),
            format!("reply={}", xml("FAIL")),
            "response body does not match `<return_code>",
        ),
        (
            json!({"success": {"json_pointer": "/code", "json_equals": "SUCCESS"}}),
            format!("reply={}", encoded(r#"{"code":"SUCCESS","message":"ok"}"#)),
            format!("reply={}", encoded(r#"{"code":"FAIL"}"#)),
            "response body's `/code` is \"FAIL\", not \"SUCCESS\"",
        ),
        (
            json!({"profile": "wechatpay"}),
            "ok_status=204".into(),
            "ok_status=201".into(),
            "HTTP 201",
        ),
        (
            json!({"profile": "adyen"}),
            "reply=%5Baccepted%5D".into(),
            "reply=ok".into(),
            "response body is not `[accepted]` in any case",
        ),
    ];
    for (rule, yes, no, why) in cases {
        let accepted = judged(&pb, &receiver, &yes, rule.clone()).await;
        assert_eq!(
            accepted["state"], "delivered",
            "{rule} with {yes}: {accepted}"
        );
        let refused = judged(&pb, &receiver, &no, rule.clone()).await;
        assert_eq!(refused["state"], "dead", "{rule} with {no}: {refused}");
        let error = refused["history"][0]["error"].as_str().unwrap();
        assert!(error.starts_with(why), "{rule} with {no}: {error}");
    }
}

#[tokio::test]
async fn a_notification_shows_its_profile_and_success_rule() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/cb");
    let id = pb
        .register(json!({"url": url, "body": {}, "profile": "alipay", "delay": "1h"}))
        .await;
    let view = pb.notification(&id).await;
    assert_eq!(view["profile"], "alipay");
    assert_eq!(view["success"], json!({"body_equals": "success"}));
    assert_eq!(view["max_attempts"], 8, "alipay's schedule: {view}");
    let plain = pb
        .register(json!({"url": url, "body": {}, "delay": "1h"}))
        .await;
    let view = pb.notification(&plain).await;
    assert_eq!(
        (&view["profile"], &view["success"]),
        (&Value::Null, &Value::Null)
    );
}

#[tokio::test]
async fn a_configured_profile_is_chosen_by_name_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    std::fs::write(
        &path,
        "[schedules]\nquick = \"100ms\"\n\n[profiles.gateway]\nschedule = \"quick\"\n\
         success = { status = [200], json_pointer = \"/status\", json_equals = 0 }\n",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let (_backend, receiver, pb) = support::start_any(&[("POSTBACK_CONFIG", config)]).await;
    let ok = encoded(r#"{"status":0}"#);
    let view = judged(
        &pb,
        &receiver,
        &format!("reply={ok}"),
        json!({"profile": "gateway"}),
    )
    .await;
    assert_eq!(view["state"], "delivered", "{view}");
    let view = judged(
        &pb,
        &receiver,
        "reply=1",
        json!({"profile": "gateway", "schedule": "quick"}),
    )
    .await;
    assert_eq!(
        (&view["state"], &view["attempts"]),
        (&json!("dead"), &json!(2)),
        "{view}"
    );

    std::fs::write(
        &path,
        "[profiles.bad]\nsuccess = { body_matches = \"(\" }\n",
    )
    .unwrap();
    let refused = Postback::refused_start(&[("POSTBACK_CONFIG", config)]);
    assert!(
        refused.contains("profiles.bad.success.body_matches"),
        "{refused}"
    );
}
