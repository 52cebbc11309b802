//! `GET /metrics`: Prometheus text, without a token, that moves with the traffic.

use crate::support;

use serde_json::json;

use support::WAIT;

use support::metric_value as value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_attempts_lateness_and_queue_depths() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let ok = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    let flaky = pb
        .register(
            json!({"url": receiver.url("/f?fail=1&status=503"), "body": {}, "schedule": ["100ms"]}),
        )
        .await;
    pb.register(json!({"url": receiver.url("/later"), "body": {}, "delay": "1h"}))
        .await;
    pb.wait_state(&ok, "delivered", WAIT).await;
    pb.wait_state(&flaky, "delivered", WAIT).await;

    let resp = pb.http.get(pb.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "served without a token");
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = resp.text().await.unwrap();
    let v = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));

    assert_eq!(v("postback_notifications_accepted_total"), 3.0);
    assert_eq!(
        v(r#"postback_attempts_total{outcome="delivered",status_class="2xx"}"#),
        2.0
    );
    assert_eq!(
        v(r#"postback_attempts_total{outcome="failed",status_class="5xx"}"#),
        1.0
    );
    assert_eq!(v("postback_scheduler_lateness_seconds_count"), 3.0);
    assert_eq!(
        v(r#"postback_scheduler_lateness_seconds_bucket{le="+Inf"}"#),
        3.0
    );
    assert_eq!(v("postback_delivery_duration_seconds_count"), 3.0);
    assert_eq!(
        v(r#"postback_queue_depth{state="scheduled",shard="0"}"#),
        1.0
    );
    assert_eq!(
        v(r#"postback_queue_depth{state="finished",shard="0"}"#),
        2.0
    );
    assert_eq!(v(r#"postback_queue_depth{state="dead",shard="0"}"#), 0.0);
    assert!(text.contains("postback_build_info{version=\""));

    // API requests by route (its pattern, never the path with an id in it) and status.
    let (status, _) = pb.get(&format!("/notifications/{ok}")).await;
    assert_eq!(status, 200);
    pb.get("/notifications/ntf_0_0000000000000000000000").await;
    pb.get("/no/such/route").await;
    let (_, text) = pb.get_text("/metrics").await;
    let v = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    assert_eq!(
        v(r#"postback_api_requests_total{method="POST",route="/notify",status="202"}"#),
        3.0
    );
    assert!(
        v(r#"postback_api_requests_total{method="GET",route="/notifications/{id}",status="200"}"#)
            >= 1.0,
        "the waits above read it too"
    );
    assert_eq!(
        v(r#"postback_api_requests_total{method="GET",route="/notifications/{id}",status="404"}"#),
        1.0
    );
    assert_eq!(
        v(r#"postback_api_requests_total{method="GET",route="unmatched",status="404"}"#),
        1.0
    );
    assert!(!text.contains(&ok.to_string()), "no id in a label");
    assert!(
        v(r#"postback_api_request_duration_seconds_count{method="POST",route="/notify"}"#) >= 3.0
    );
    assert!(
        text.contains("# TYPE postback_retention_deleted_total counter"),
        "what retention deleted only grows: {text}"
    );
    assert_eq!(
        v(r#"postback_retention_deleted_total{reason="finished_by_age"}"#),
        0.0
    );
    every_series_is_documented(&text);
}

/// Each series an instance serves is described in `docs/operating.md`, under Metrics.
fn every_series_is_documented(exposition: &str) {
    let reference = include_str!("../../docs/operating.md");
    for name in exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
    {
        assert!(
            reference.contains(&format!("`{name}`")) || reference.contains(&format!("`{name}{{")),
            "{name} is not described in docs/operating.md"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferrals_and_open_circuits_are_counted_with_bounded_labels() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_QUOTAS_SLOW", "2/s"),
        ("POSTBACK_DELIVERY_BREAKER_FAILURES", "2"),
        ("POSTBACK_DELIVERY_BREAKER_COOLDOWN", "1m"),
        ("POSTBACK_METRICS_HOST_LABELS", "true"),
    ])
    .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            pb.register(json!({"url": receiver.url("/s"), "body": {}, "rate_key": "slow"}))
                .await,
        );
    }
    let down = format!("http://localhost:{}/down?fail=9", receiver.port);
    for _ in 0..2 {
        let id = pb
            .register(json!({"url": down, "body": {}, "schedule": []}))
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
    }
    // Its first attempt is held back by the open circuit; its last would be sent.
    let held = pb
        .register(json!({"url": down, "body": {}, "schedule": ["1h"]}))
        .await;
    assert!(
        support::eventually(WAIT, || async {
            !pb.notification(&held).await["held_back_since"].is_null()
        })
        .await
    );
    for id in &ids {
        pb.wait_state(id, "delivered", WAIT).await;
    }
    let (_, text) = pb.get_text("/metrics").await;
    let v = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    assert!(v(r#"postback_deferrals_total{reason="rate_limit"}"#) >= 2.0);
    assert_eq!(v("postback_dead_lettered_total"), 2.0, "the two that died");
    assert_eq!(v("postback_circuits_open"), 1.0);
    let endpoint = format!("http://localhost:{}/down", receiver.port);
    let labelled = format!(r#"postback_circuit_open{{tenant="default",endpoint="{endpoint}"}}"#);
    assert_eq!(v(&labelled), 1.0);
    assert!(v(r#"postback_deferrals_total{reason="circuit_open"}"#) >= 1.0);
    assert!(
        !text.contains(r#"outcome="circuit_open""#),
        "held back is no attempt: {text}"
    );
}
