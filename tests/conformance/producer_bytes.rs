//! What the producer sent is what the merchant gets: a body is delivered, and signed, as
//! the bytes it was sent as (numbers with every digit and their written form, keys in
//! their order, strings with their escapes), whether it came through `POST /notify`,
//! `POST /notify/batch` (with or without an idempotency key) or an event to a
//! subscription; an event's body is answered as sent too. An idempotency key holds a
//! request to what it means, not to its spacing or field order.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::json_text::sample_bodies;
use support::receiver::Received;
use support::{signatures, Postback, Receiver, LONG_WAIT, WAIT};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// How deep a request may nest, its own object counted (`docs/api.md`, "Limits").
const MAX_NESTING: usize = 64;

/// A body as a payment system may write one: an integer past 2^64, a decimal with a
/// trailing zero, an exponent, a negative zero, escapes, keys out of order, and spacing.
const AWKWARD: &str = r#"{"id":12345678901234567890123,"amount":10.10,"e":1E+2,"z":-0,
  "name": "caf\u00e9 \ud83d\ude00 \"q\" \/", "nested" : {"b":1, "a":[1.0, 2e-3, -0.0, 1.5E-7]}}"#;

async fn start() -> (support::Backend, Receiver, Postback) {
    support::start_any(&[("POSTBACK_SIGNING_SECRETS", SECRET)]).await
}

/// `POST path` with `raw` as the body, as written: the status and the answer.
async fn post_raw(pb: &Postback, path: &str, raw: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let (status, answer, _) = pb
        .request_raw(support::instance::TOKEN, Method::POST, path, raw, headers)
        .await;
    (status, answer)
}

/// `POST path` with `raw` as the body, as written: the status and the answer's text.
async fn post_text(
    pb: &Postback,
    path: &str,
    raw: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut sent = pb
        .http
        .post(pb.url(path))
        .bearer_auth(support::instance::TOKEN)
        .header("content-type", "application/json")
        .body(raw.to_string());
    for (name, value) in headers {
        sent = sent.header(*name, *value);
    }
    let answer = sent.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap())
}

/// A `POST /notify` request for `url` whose body is `body`, as written.
fn request(url: &str, body: &str) -> String {
    format!(r#"{{"url": "{url}", "body": {body}}}"#)
}

/// Waits for the one delivery to `path`, and asserts its body is `body`'s bytes and its
/// signature is over them.
async fn delivered_as_sent(receiver: &Receiver, path: &str, body: &str) {
    let arrived = support::eventually(WAIT, || async {
        receiver.requests().iter().any(|r| r.path == path)
    })
    .await;
    assert!(arrived, "nothing arrived at {path}");
    let got: Vec<Received> = receiver
        .requests()
        .into_iter()
        .filter(|r| r.path == path)
        .collect();
    let got = &got[0];
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        body,
        "{path}: the bytes the producer sent"
    );
    assert!(
        signatures::of(got).contains(&signatures::v1(SECRET, got)),
        "{path}: signed as delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_reaches_the_merchant_as_the_bytes_it_was_sent_as_on_every_path() {
    let (_backend, receiver, pb) = start().await;
    let url = |path: &str| receiver.url(path);

    let (status, answer) = post_raw(&pb, "/notify", &request(&url("/one"), AWKWARD), &[]).await;
    assert_eq!(status, 202, "{answer}");
    let keyed = [("idempotency-key", "awkward-1")];
    let (status, answer) =
        post_raw(&pb, "/notify", &request(&url("/keyed"), AWKWARD), &keyed).await;
    assert_eq!(status, 202, "{answer}");
    let batch = format!(
        r#"{{"items": [{}, {{"idempotency_key": "awkward-2", "url": "{}", "body": {AWKWARD}}}]}}"#,
        request(&url("/batch"), AWKWARD),
        url("/batch-keyed"),
    );
    let (status, answer) = post_raw(&pb, "/notify/batch", &batch, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["items"][1]["id"].is_string(), "{answer}");
    let subscription = json!({"url": url("/event"), "topics": ["payment.*"]});
    let (status, answer) = pb
        .request(Method::POST, "/subscriptions", Some(subscription), &[])
        .await;
    assert_eq!(status, 201, "{answer}");
    let event = format!(r#"{{"topic": "payment.succeeded", "body": {AWKWARD}}}"#);
    let (status, answer) = post_raw(&pb, "/events", &event, &[]).await;
    assert_eq!(status, 202, "{answer}");

    for path in ["/one", "/keyed", "/batch", "/batch-keyed", "/event"] {
        delivered_as_sent(&receiver, path, AWKWARD).await;
    }
}

/// An event's body is answered as it was sent, by its own page (`GET /events/{id}`) and
/// as its topic's example (`GET /topics`): the bytes kept, never a value written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_body_is_answered_as_it_was_sent() {
    let (_backend, _receiver, pb) = start().await;
    let event = format!(r#"{{"topic": "payment.exact", "body": {AWKWARD}}}"#);
    let (status, answer) = post_text(&pb, "/events", &event, &[]).await;
    assert_eq!(status, 202, "{answer}");
    let id = serde_json::from_str::<Value>(&answer).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (path, field) in [
        (format!("/events/{id}"), "body"),
        ("/topics".into(), "example"),
    ] {
        let text = pb
            .http
            .get(pb.url(&path))
            .bearer_auth(support::instance::TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains(&format!(r#""{field}":{AWKWARD}"#)),
            "{path}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_holds_a_request_to_its_meaning_not_its_spacing() {
    let (_backend, receiver, pb) = start().await;
    let url = receiver.url("/paid");
    let key = [("idempotency-key", "order-5")];
    let first = format!(
        r#"{{"url": "{url}", "body": {{"order": 5, "total": 10.10}}, "topic": "payment"}}"#
    );
    let (status, registered) = post_raw(&pb, "/notify", &first, &key).await;
    assert_eq!(status, 202, "{registered}");

    let reordered =
        format!(r#"{{ "topic":"payment","body":{{"total":10.10,"order":5}},  "url":"{url}" }}"#);
    let (status, again) = post_raw(&pb, "/notify", &reordered, &key).await;
    assert_eq!((status, &again["id"]), (202, &registered["id"]), "{again}");

    // Another written form of a number is another request: the merchant would get
    // other bytes.
    let other =
        format!(r#"{{"url": "{url}", "body": {{"order": 5, "total": 10.1}}, "topic": "payment"}}"#);
    let (status, refused) = post_raw(&pb, "/notify", &other, &key).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "idempotency_key_mismatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_nested_to_the_limit_is_delivered_and_one_deeper_is_refused_naming_it() {
    let (backend, receiver, pb) = start().await;
    // The request's own object is one level.
    let deepest = nested(MAX_NESTING - 1);
    let (status, answer) = post_raw(
        &pb,
        "/notify",
        &request(&receiver.url("/deep"), &deepest),
        &[],
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    delivered_as_sent(&receiver, "/deep", &deepest).await;

    let deeper = nested(MAX_NESTING);
    for path in ["/notify", "/events"] {
        let raw = match path {
            "/notify" => request(&receiver.url("/deeper"), &deeper),
            _ => format!(r#"{{"topic": "payment.succeeded", "body": {deeper}}}"#),
        };
        let (status, answer) = post_raw(&pb, path, &raw, &[]).await;
        assert_eq!(status, 422, "{path}: {answer}");
        assert_eq!(answer["error"]["field"], "body", "{path}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&MAX_NESTING.to_string()),
            "{answer}"
        );
    }
    let batch = format!(
        r#"{{"items": [{}]}}"#,
        request(&receiver.url("/deeper"), &deeper)
    );
    let (status, answer) = post_raw(&pb, "/notify/batch", &batch, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["items"][0]["error"]["field"], "body", "{answer}");
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 1, "only the one within the limit");
    let (_, stats) = pb.get("/stats").await;
    assert_eq!(
        stats["finished"], 1,
        "nothing stored of the refused: {stats}"
    );
    drop(backend);
}

/// `[[…[1]…]]`, `levels` deep.
fn nested(levels: usize) -> String {
    format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bodies_reach_the_merchant_byte_for_byte_through_every_path() {
    let (_backend, receiver, pb) = start().await;
    let bodies = sample_bodies(40);
    let (status, answer) = pb
        .request(
            Method::POST,
            "/subscriptions",
            Some(json!({"url": receiver.url("/event"), "topics": ["payment.*"]})),
            &[],
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let mut expected = Vec::new();
    let mut items = Vec::new();
    for (n, body) in bodies.iter().enumerate() {
        let path = format!("/single/{n}");
        let (status, answer) =
            post_raw(&pb, "/notify", &request(&receiver.url(&path), body), &[]).await;
        assert_eq!(status, 202, "{body}: {answer}");
        expected.push((path, body));
        let path = format!("/batch/{n}");
        items.push(request(&receiver.url(&path), body));
        expected.push((path, body));
        let event = format!(r#"{{"topic": "payment.n{n}", "body": {body}}}"#);
        let (status, answer) = post_raw(&pb, "/events", &event, &[]).await;
        assert_eq!(status, 202, "{body}: {answer}");
    }
    let (status, answer) = post_raw(
        &pb,
        "/notify/batch",
        &format!(r#"{{"items": [{}]}}"#, items.join(",")),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(receiver.wait_for(bodies.len() * 3, LONG_WAIT).await);
    for (path, body) in &expected {
        delivered_as_sent(&receiver, path, body).await;
    }
    let events: Vec<Received> = receiver
        .requests()
        .into_iter()
        .filter(|r| r.path == "/event")
        .collect();
    for body in &bodies {
        assert!(
            events.iter().any(|r| r.body == body.as_bytes()),
            "an event's body as sent: {body}"
        );
    }
}

/// Bodies that are JSON text but hold what no reader of values can: a number beyond a
/// double's range, a lone surrogate.
const UNREADABLE_AS_VALUES: [&str; 2] = ["[1e400]", r#"{"s": "\ud800"}"#];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_no_reader_of_values_could_hold_is_delivered_as_sent_where_nothing_reads_it() {
    let (_backend, receiver, pb) = start().await;
    let subscription = json!({"url": receiver.url("/event"), "topics": ["raw.*"]});
    let (status, answer) = pb
        .request(Method::POST, "/subscriptions", Some(subscription), &[])
        .await;
    assert_eq!(status, 201, "{answer}");
    for (n, body) in UNREADABLE_AS_VALUES.iter().enumerate() {
        let key = [("idempotency-key", &*format!("unreadable-{n}"))];
        let single = request(&receiver.url(&format!("/keyed/{n}")), body);
        let (status, answer) = post_raw(&pb, "/notify", &single, &key).await;
        assert_eq!(status, 202, "{body}: {answer}");
        let batch = format!(
            r#"{{"items": [{}]}}"#,
            request(&receiver.url(&format!("/batch/{n}")), body)
        );
        let (status, answer) = post_raw(&pb, "/notify/batch", &batch, &[]).await;
        assert!(
            answer["items"][0]["id"].is_string(),
            "{body}: {status} {answer}"
        );
        // An event is answered with its body as sent, which a reader of values could
        // not read either: the answer is looked at as text.
        let event = format!(r#"{{"topic": "raw.one{n}", "body": {body}}}"#);
        let (status, answer) = post_text(&pb, "/events", &event, &key).await;
        assert_eq!(status, 202, "{body}: {answer}");
        assert!(answer.contains(&format!(r#""body":{body}"#)), "{answer}");
        let events = format!(r#"{{"items": [{{"topic": "raw.batch{n}", "body": {body}}}]}}"#);
        let (status, answer) = post_text(&pb, "/events/batch", &events, &[]).await;
        assert_eq!(status, 200, "{body}: {answer}");
        assert!(answer.contains(r#""id":"evt_"#), "{body}: {answer}");
    }
    for (n, body) in UNREADABLE_AS_VALUES.iter().enumerate() {
        delivered_as_sent(&receiver, &format!("/keyed/{n}"), body).await;
        delivered_as_sent(&receiver, &format!("/batch/{n}"), body).await;
    }
    let both_events = support::eventually(WAIT, || async {
        let sent = receiver.requests();
        UNREADABLE_AS_VALUES.iter().all(|body| {
            let as_sent = sent
                .iter()
                .filter(|r| r.path == "/event" && r.body == body.as_bytes());
            as_sent.count() == 2
        })
    })
    .await;
    assert!(both_events, "each event's body as sent, once per publish");
}
