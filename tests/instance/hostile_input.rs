//! Hostile input. Property tests throw arbitrary text at every parser of outside input
//! (durations, schedules, callback URLs, extra headers, bodies, ids, cursors, quotas,
//! ordering keys, success rules):
//! each answers `Ok` or an error and never panics, and what it accepts keeps the type's
//! promises. Then the HTTP edge: deep JSON, huge headers and broken encodings get a 4xx
//! and store nothing.

use crate::support;

use std::time::Duration;

use postback::delivery::policy::Quota;
use postback::domain::{
    parse_duration, CallbackUrl, Destinations, ExtraHeaders, JobId, OrderingKey, Payload,
    RawSuccess, Schedule, SuccessRule,
};
use postback::store::Cursor;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Text that looks like what the parsers expect often enough to reach their insides.
fn near_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{0,22} ?(ns|us|ms|s|m|h|d|w|M|y|sec|min|hours)?",
        "-?[0-9]{1,3}(\\.[0-9]+)?[a-z]{0,3}( [0-9]{1,5}[a-z]{1,2}){0,3}",
    ]
}

fn near_url() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "(https?|ftp|file|javascript|HTTP)://[a-z0-9.:\\[\\]@%_-]{0,40}(/[ -~]{0,20})?",
        "https?://(0x[0-9a-f]{1,8}|[0-9]{1,10}|[0-9]{1,3}(\\.[0-9]{1,3}){1,3}|\\[[0-9a-f:.]{2,39}\\])(:[0-9]{1,6})?/",
    ]
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn durations_parse_or_refuse(s in near_duration()) {
        let _ = parse_duration(&s);
    }

    #[test]
    fn an_accepted_schedule_has_bounded_tiers(items in prop::collection::vec(near_duration(), 0..60)) {
        if let Ok(schedule) = Schedule::parse(&items) {
            prop_assert!(schedule.intervals().len() <= 50);
            let in_range = |d: &Duration| {
                *d >= Duration::from_millis(100) && *d <= Duration::from_secs(7 * 24 * 3600)
            };
            let all_in_range = schedule.intervals().iter().all(in_range);
            prop_assert!(all_in_range);
        }
    }

    #[test]
    fn an_accepted_public_url_is_http_and_not_an_internal_literal(raw in near_url()) {
        if let Ok(url) = CallbackUrl::parse(&raw, Destinations::PublicOnly) {
            let text = url.to_string();
            prop_assert!(text.starts_with("http://") || text.starts_with("https://"), "{}", text);
            let host = url.host().trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = host.parse::<std::net::IpAddr>() {
                prop_assert!(postback::delivery::ssrf::is_public(ip), "{} accepted", raw);
            }
        }
        let _ = CallbackUrl::parse(&raw, Destinations::Any);
    }

    #[test]
    fn accepted_headers_are_never_reserved(pairs in prop::collection::vec((
        prop_oneof![any::<String>(), "(x-[a-z]{1,8}|webhook-id|host|content-length|connection|Transfer-Encoding|user-agent)"],
        any::<String>(),
    ), 0..12)) {
        if let Ok(headers) = ExtraHeaders::parse(pairs) {
            for (name, value) in headers.pairs() {
                prop_assert!(!["host", "content-length", "connection", "transfer-encoding", "webhook-id", "user-agent"].contains(&name.as_str()));
                let visible = value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
                prop_assert!(visible, "{:?}", value);
            }
        }
    }

    #[test]
    fn any_json_body_is_kept_as_sent_or_refused(value in json_value()) {
        let text = value.to_string();
        let raw = serde_json::value::RawValue::from_string(text.clone()).unwrap();
        if let Ok(p) = Payload::from_raw(&raw) {
            if !text.starts_with('"') {
                prop_assert_eq!(p.body(), text.as_str());
            }
        }
    }

    #[test]
    fn ids_and_cursors_parse_or_refuse(s in any::<String>(), shard in 0u16..1024, at in any::<i64>()) {
        let _ = s.parse::<JobId>();
        let _ = Cursor::decode(&s);
        let id = JobId::new(shard);
        prop_assert_eq!(id.to_string().parse::<JobId>().ok(), Some(id));
        let cursor = Cursor { at, id };
        prop_assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
    }

    #[test]
    fn an_accepted_ordering_key_reads_the_same_in_a_store_key_and_in_json(
        s in prop_oneof![any::<String>(), "[ -~]{0,210}"],
    ) {
        if let Ok(key) = OrderingKey::parse(&s) {
            prop_assert!(!key.as_str().contains([' ', '"', '\\']) && key.as_str().len() <= 200);
            prop_assert_eq!(serde_json::to_string(&key).unwrap(), format!("\"{s}\""));
        }
    }

    #[test]
    fn success_rules_parse_or_refuse_and_judge_any_answer(
        status in prop::option::of(prop::collection::vec(any::<u16>(), 0..4)),
        text in prop::option::of("[ -~]{0,40}"),
        pattern in prop::option::of(prop_oneof!["[ -~]{0,40}", "[()*+?{}|\\[\\]a-z0-9,]{0,40}"]),
        pointer in prop::option::of("(/[a-z~01]{0,5}){0,3}"),
        equals in prop::option::of(json_value()),
        answer in any::<String>(),
        code in any::<u16>(),
    ) {
        let raw = RawSuccess {
            status,
            body_equals: text.clone(),
            body_equals_ignoring_case: None,
            body_matches: pattern,
            json_pointer: pointer,
            json_equals: equals,
        };
        if let Ok(rule) = SuccessRule::parse(raw, "success") {
            let _ = (rule.accepts_status(code), rule.refuses_body(&answer));
            let back: SuccessRule = serde_json::from_value(serde_json::to_value(&rule).unwrap()).unwrap();
            prop_assert_eq!(back, rule);
        }
    }

    #[test]
    fn quotas_parse_or_refuse(s in prop_oneof![any::<String>(), "[0-9]{0,25}/(s|m|h|d|)", Just("unlimited".to_string())]) {
        let _ = s.parse::<Quota>();
    }
}

/// What is tried, the body, and extra headers.
type Case = (&'static str, Vec<u8>, Vec<(&'static str, Vec<u8>)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_or_broken_input_at_the_http_edge_gets_a_4xx_and_stores_nothing() {
    let (backend, receiver, pb) = support::start_any(&[]).await;
    let url = receiver.url("/r");
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    let cases: Vec<Case> = vec![
        (
            "body nested 10,000 deep",
            format!(r#"{{"url":"{url}","body":{deep}}}"#).into_bytes(),
            vec![],
        ),
        (
            "nested 10,000 deep at the top",
            format!("{{\"a\":{deep}}}").into_bytes(),
            vec![],
        ),
        (
            "a lone surrogate",
            format!(r#"{{"url":"{url}","body":"\udc00"}}"#).into_bytes(),
            vec![],
        ),
        (
            "a NUL in the url",
            format!(r#"{{"url":"{url}\u0000","body":1}}"#).into_bytes(),
            vec![],
        ),
        (
            "a huge Idempotency-Key",
            json!({"url": url, "body": 1}).to_string().into_bytes(),
            vec![("idempotency-key", vec![b'k'; 8_000])],
        ),
        (
            "an Idempotency-Key that is not UTF-8",
            json!({"url": url, "body": 1}).to_string().into_bytes(),
            vec![("idempotency-key", vec![0xff, 0xfe, b'k'])],
        ),
        (
            "100 kB of headers",
            json!({"url": url, "body": 1}).to_string().into_bytes(),
            vec![("x-filler", vec![b'a'; 100_000])],
        ),
    ];
    for (what, body, headers) in cases {
        let mut req = pb
            .http
            .post(pb.url("/notify"))
            .bearer_auth(support::instance::TOKEN)
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            req = req.header(
                name,
                reqwest::header::HeaderValue::from_bytes(&value).unwrap(),
            );
        }
        let status = req.send().await.unwrap().status().as_u16();
        assert!((400..500).contains(&status), "{what}: answered {status}");
    }
    assert_eq!(pb.status_without_token("/healthz").await, 200, "still up");
    assert!(backend.holds_nothing(&pb).await, "nothing stored");
}
