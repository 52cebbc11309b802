//! OpenTelemetry traces over OTLP/HTTP: with `traces.otlp_endpoint` set, a registration
//! and each of its attempts are spans of one trace (the producer's, when `POST /notify`
//! carries a W3C `traceparent`), and each delivery carries a `traceparent` naming its
//! attempt's span. A second test receiver stands in for the collector and decodes what
//! it is sent.

use crate::support;

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::json;
use support::Receiver;

use support::WAIT;
const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

/// A span as the collector got it: ids in hex, attributes as text.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span the collector stand-in was sent.
fn spans(collector: &Receiver) -> Vec<Span> {
    collector
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/traces")
        .flat_map(|r| {
            assert_eq!(
                r.header("content-type").as_deref(),
                Some("application/x-protobuf")
            );
            ExportTraceServiceRequest::decode(r.body.clone())
                .unwrap()
                .resource_spans
        })
        .flat_map(|rs| rs.scope_spans)
        .flat_map(|ss| ss.spans)
        .map(|s| Span {
            name: s.name,
            trace: hex(&s.trace_id),
            id: hex(&s.span_id),
            parent: hex(&s.parent_span_id),
            attributes: s
                .attributes
                .into_iter()
                .filter_map(|kv| {
                    let text = match kv.value?.value? {
                        Any::StringValue(s) => s,
                        Any::IntValue(i) => i.to_string(),
                        Any::BoolValue(b) => b.to_string(),
                        other => format!("{other:?}"),
                    };
                    Some((kv.key, text))
                })
                .collect(),
        })
        .collect()
}

/// The notify span and the attempt spans (in attempt order) of notification `id`, once
/// the collector has `attempts` of them.
async fn trace_of(collector: &Receiver, id: &str, attempts: usize) -> (Span, Vec<Span>) {
    let of_id = |name: &str| -> Vec<Span> {
        spans(collector)
            .into_iter()
            .filter(|s| s.name == name && s.attributes.get("id").map(String::as_str) == Some(id))
            .collect()
    };
    let arrived = support::eventually(WAIT, || async {
        of_id("notify").len() == 1 && of_id("attempt").len() == attempts
    })
    .await;
    assert!(arrived, "spans for {id}: {:#?}", spans(collector));
    let mut tried = of_id("attempt");
    tried.sort_by_key(|s| s.attributes["attempt"].parse::<u32>().unwrap());
    (of_id("notify").remove(0), tried)
}

/// `(trace id, span id, flags)` of a `traceparent` header.
fn parts(traceparent: &str) -> (String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    assert_eq!(p[0], "00");
    (p[1].into(), p[2].into(), p[3].into())
}

async fn traced(collector: &Receiver) -> (support::Backend, Receiver, support::Postback) {
    support::start_any(&[
        ("POSTBACK_TRACES_OTLP_ENDPOINT", &collector.url("")),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_and_its_attempts_are_spans_of_the_producers_trace() {
    let collector = Receiver::start().await;
    let (_backend, receiver, pb) = traced(&collector).await;
    let producer = format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01");
    let (status, body) = pb
        .notify_with(
            json!({"url": receiver.url("/pay?fail=1&status=500"), "body": {"order": 7}, "schedule": ["100ms"]}),
            &[("traceparent", &producer)],
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    pb.wait_state(&id, "delivered", WAIT).await;

    let (notify, attempts) = trace_of(&collector, &id, 2).await;
    assert_eq!(notify.trace, PRODUCER_TRACE, "the producer's trace is kept");
    assert_eq!(notify.parent, PRODUCER_SPAN);
    let deliveries = receiver.requests_for(&id);
    assert_eq!(deliveries.len(), 2);
    for (n, (attempt, delivery)) in attempts.iter().zip(&deliveries).enumerate() {
        assert_eq!(attempt.trace, PRODUCER_TRACE);
        assert_eq!(
            attempt.parent, notify.id,
            "an attempt is a child of the registration"
        );
        assert_eq!(attempt.attributes["attempt"], (n + 1).to_string());
        let header = delivery
            .header("traceparent")
            .expect("a delivery's traceparent");
        let (trace, span, flags) = parts(&header);
        assert_eq!((trace.as_str(), flags.as_str()), (PRODUCER_TRACE, "01"));
        assert_eq!(span, attempt.id, "the delivery names its attempt's span");
    }
    assert_ne!(attempts[0].id, attempts[1].id);
    assert_eq!(attempts[0].attributes["http.response.status_code"], "500");
    assert_eq!(attempts[0].attributes["outcome"], "failed");
    assert_eq!(attempts[1].attributes["http.response.status_code"], "200");
    assert_eq!(attempts[1].attributes["outcome"], "delivered");
    for s in std::iter::once(&notify).chain(&attempts) {
        eprintln!(
            "{:8} trace {} span {} parent {} {:?}",
            s.name, s.trace, s.id, s.parent, s.attributes
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_traceparent_the_registration_starts_a_trace() {
    let collector = Receiver::start().await;
    let (_backend, receiver, pb) = traced(&collector).await;
    for incoming in [
        None,
        Some("not-a-traceparent"),
        Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
    ] {
        let headers: Vec<(&str, &str)> = incoming.map(|v| ("traceparent", v)).into_iter().collect();
        let (status, body) = pb
            .notify_with(json!({"url": receiver.url("/ok"), "body": {}}), &headers)
            .await;
        assert_eq!(status, 202, "{incoming:?}: {body}");
        let id = body["id"].as_str().unwrap().to_string();
        pb.wait_state(&id, "delivered", WAIT).await;
        let (notify, attempts) = trace_of(&collector, &id, 1).await;
        assert_eq!(notify.parent, "", "{incoming:?}: a root span");
        assert_ne!(notify.trace, "00000000000000000000000000000000");
        assert_eq!(attempts[0].trace, notify.trace);
        assert_eq!(attempts[0].parent, notify.id);
        let (trace, span, _) = parts(&receiver.requests_for(&id)[0].header("traceparent").unwrap());
        assert_eq!(
            (trace, span),
            (notify.trace.clone(), attempts[0].id.clone())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_deliveries_carry_only_the_producers_headers() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let plain = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    let own = format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01");
    let theirs = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "headers": {"traceparent": own}}))
        .await;
    pb.wait_state(&plain, "delivered", WAIT).await;
    pb.wait_state(&theirs, "delivered", WAIT).await;
    assert_eq!(receiver.requests_for(&plain)[0].header("traceparent"), None);
    assert_eq!(
        receiver.requests_for(&theirs)[0].header("traceparent"),
        Some(own),
        "a header the producer asked for is sent as it is"
    );
}
