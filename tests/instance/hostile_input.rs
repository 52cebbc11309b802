//! Hostile input. Property tests throw arbitrary text at every parser of outside input
//! (durations, schedules, callback URLs, extra headers, bodies, ids, cursors, quotas,
//! ordering keys, success rules):
//! each answers `Ok` or an error and never panics, and what it accepts keeps the type's
//! promises. Then the HTTP edge: deep JSON, huge headers and broken encodings get a 4xx
//! and store nothing, and the worst bodies the limits allow are taken in while
//! `/healthz` keeps answering.

use crate::support;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postback::delivery::policy::Quota;
use postback::domain::{
    parse_duration, CallbackUrl, Destinations, ExtraHeaders, JobId, OrderingKey, Payload,
    RawSuccess, Schedule, SuccessRule,
};
use postback::store::Cursor;
use proptest::prelude::*;
use reqwest::Method;
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

/// The largest body the limits allow (`server.max_body_bytes`), and batch
/// (`server.max_batch_bytes`), by default.
const MAX_BODY: usize = 256 * 1024;
const MAX_BATCH: usize = 2 * 1024 * 1024;
/// A topic whose schema reads every value of a body, however deep.
const CHECKED: &str = "load.checked";
/// Requests of one shape sent at once: more than the instance's worker threads.
const AT_ONCE: usize = 4;
/// `/healthz` answers each wave must see while in flight: a wave runs about as long as
/// its requests' passes over their bodies, many times a `/healthz` answer (77 and more
/// here, on a machine with other work), unless those passes keep the instance's worker
/// threads from answering. Set well below, so that a busy machine does not fail it:
/// the passes' own bounds are counted by the unit tests of `domain::json` and
/// `api::offload`.
const HEALTH_ANSWERS: usize = 5;

/// The worst bodies the limits allow are taken in, and hold up no other request: each
/// shape is registered with an idempotency key and published as an event that its
/// topic's schema reads, `AT_ONCE` of each at once (more than the instance's two worker
/// threads), then in batches as large as allowed. Each must be taken, and `/healthz`,
/// asked one after the other meanwhile, must answer many times while at least two of a
/// wave are in flight: counted, not timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_the_worst_bodies_the_limits_allow_are_checked() {
    let (_schemas, _backend, receiver, pb) = with_a_checked_topic().await;
    // Nothing is sent while the test runs: what is measured is taking bodies in.
    let load = Load {
        url: receiver.url("/later"),
        keys: Cell::new(0),
    };
    for (shape, body) in worst_bodies(MAX_BODY - 256) {
        let wave = (0..AT_ONCE).flat_map(|_| {
            let keyed = |path, raw| Sent::keyed(path, raw, Some(load.key()));
            [
                keyed("/notify", load.notify(&body)),
                keyed("/events", load.event(&body)),
            ]
        });
        let answers = health_answers_during(&pb, wave.collect()).await;
        assert!(
            answers >= HEALTH_ANSWERS,
            "{shape}: /healthz answered {answers} times while they were taken in"
        );
    }
    let answers = health_answers_during(&pb, load.batches()).await;
    assert!(
        answers >= HEALTH_ANSWERS,
        "batches: /healthz answered {answers} times while they were taken in"
    );
}

/// An instance whose topic `CHECKED` has a schema that reads every value, with a
/// subscription to it whose notifications wait an hour; the schema's directory too.
async fn with_a_checked_topic() -> (
    tempfile::TempDir,
    support::Backend,
    support::Receiver,
    support::Postback,
) {
    let schemas = tempfile::tempdir().unwrap();
    let every_value = json!({"$ref": "#/$defs/any", "$defs": {"any": {
        "type": ["object", "array", "string", "number", "boolean", "null"],
        "additionalProperties": {"$ref": "#/$defs/any"}, "items": {"$ref": "#/$defs/any"}}}});
    let schema = schemas.path().join(format!("{CHECKED}.json"));
    std::fs::write(schema, every_value.to_string()).unwrap();
    let dir = schemas.path().to_str().unwrap();
    let env = [
        ("POSTBACK_EVENTS_SCHEMA_DIR", dir),
        ("POSTBACK_SERVER_WORKER_THREADS", "2"),
    ];
    let (backend, receiver, pb) = support::start_any(&env).await;
    let subscription = json!({"url": receiver.url("/later"), "topics": ["load.*"], "delay": "1h"});
    let (status, answer) = pb
        .request(Method::POST, "/subscriptions", Some(subscription), &[])
        .await;
    assert_eq!(status, 201, "{answer}");
    (schemas, backend, receiver, pb)
}

/// The requests of the load: registrations to `url`, due in an hour, and events of
/// `CHECKED`, each with a key of its own.
struct Load {
    url: String,
    /// Keys given so far.
    keys: Cell<usize>,
}

impl Load {
    fn key(&self) -> String {
        self.keys.set(self.keys.get() + 1);
        format!("load-{}", self.keys.get())
    }

    fn notify(&self, body: &str) -> String {
        format!(r#"{{"url":"{}","delay":"1h","body":{body}}}"#, self.url)
    }

    fn event(&self, body: &str) -> String {
        format!(r#"{{"topic":"{CHECKED}","body":{body}}}"#)
    }

    /// Batches as large as the limits allow, `AT_ONCE` in all: of registrations, eight
    /// items of many keys in `server.max_batch_bytes`, each with its key; of events, two
    /// in `server.max_body_bytes`.
    fn batches(&self) -> Vec<Sent> {
        let item = many_keys(MAX_BATCH / 8 - 512);
        let event = self.event(&many_keys(MAX_BODY / 2 - 256));
        let mut batches = Vec::new();
        for _ in 0..AT_ONCE / 2 {
            let items: Vec<String> = (0..8)
                .map(|_| {
                    let key = self.key();
                    format!(
                        r#"{{"idempotency_key":"{key}",{}"#,
                        &self.notify(&item)[1..]
                    )
                })
                .collect();
            let items = format!(r#"{{"items":[{}]}}"#, items.join(","));
            batches.push(Sent::keyed("/notify/batch", items, None));
            let events = format!(r#"{{"items":[{event},{event}]}}"#);
            batches.push(Sent::keyed("/events/batch", events, None));
        }
        batches
    }
}

/// A request of a wave: its path, its body, and its idempotency key.
struct Sent {
    path: &'static str,
    raw: String,
    key: Option<String>,
}

impl Sent {
    fn keyed(path: &'static str, raw: String, key: Option<String>) -> Self {
        Self { path, raw, key }
    }

    /// Sends it and asserts it is taken (every item of a batch).
    async fn taken(&self, pb: &support::Postback) {
        let key = self.key.as_deref().map(|k| ("idempotency-key", k));
        let headers: Vec<(&str, &str)> = key.into_iter().collect();
        let (status, answer, _) = pb
            .request_raw(
                support::instance::TOKEN,
                Method::POST,
                self.path,
                &self.raw,
                &headers,
            )
            .await;
        let (path, shown) = (self.path, short(&answer));
        assert!(matches!(status, 200 | 202), "{path}: {status} {shown}");
        let items = answer["items"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![answer]);
        assert!(items.iter().all(|i| i["id"].is_string()), "{path}: {shown}");
    }
}

/// The start of `answer`, which may echo a large body.
fn short(answer: &Value) -> String {
    answer.to_string().chars().take(300).collect()
}

/// Sends `wave` all at once and waits until each is taken; how many times `/healthz`
/// answered while at least two of them were in flight (as many as the instance has
/// worker threads), asked one after the other by a task of its own.
async fn health_answers_during(pb: &support::Postback, wave: Vec<Sent>) -> usize {
    let in_flight = Arc::new(AtomicUsize::new(wave.len()));
    let (http, url, flying) = (pb.http.clone(), pb.url("/healthz"), in_flight.clone());
    let health = tokio::spawn(async move {
        let mut answers = 0;
        while flying.load(Ordering::SeqCst) >= 2 {
            let answer = http.get(&url).send().await;
            let ok = answer.is_ok_and(|a| a.status() == 200);
            answers += usize::from(ok && flying.load(Ordering::SeqCst) >= 2);
        }
        answers
    });
    let taken = wave.iter().map(|sent| async {
        sent.taken(pb).await;
        in_flight.fetch_sub(1, Ordering::SeqCst);
    });
    futures_util::future::join_all(taken).await;
    health.await.unwrap()
}

/// The first of `worst_bodies`: many distinct keys, in `room` bytes.
fn many_keys(room: usize) -> String {
    worst_bodies(room).swap_remove(0).1
}

/// Bodies as large as the limit allows, each the worst for one pass over a body (the
/// nesting check, the parse, the canonical text and fingerprint, the schema): many
/// distinct keys, each key twice, one key over and over, long keys alike but for their
/// end, objects nested to the limit with many keys each, long strings of escapes, many
/// numbers that the canonical text writes out. Keys in an order of chance (one seed).
fn worst_bodies(room: usize) -> Vec<(&'static str, String)> {
    let mut chance = fastrand::Rng::with_seed(68);
    let mut object = |fields: &mut dyn Iterator<Item = String>, room: usize| {
        let mut len = 2;
        let fits = |field: &String| {
            len += field.len() + 1;
            len <= room
        };
        let mut kept: Vec<String> = fields.take_while(fits).collect();
        chance.shuffle(&mut kept);
        format!("{{{}}}", kept.join(","))
    };
    let distinct = object(&mut (0..).map(|i| format!(r#""{i}":{i}"#)), room);
    let twice = object(&mut (0..).map(|i| format!(r#""{}":{i}"#, i / 2)), room);
    let one = object(&mut (0..).map(|i| format!(r#""k":{i}"#)), room);
    let prefix = "p".repeat(200);
    let long = object(&mut (0..).map(|i| format!(r#""{prefix}{i:06}":0"#)), room);
    // The request's own object is one level; the body's objects nest 62 more within it.
    let levels = 62;
    let mut nested = "0".to_string();
    for level in 0..levels {
        let mut fields = (0..).map(|i| format!(r#""{i}":0"#));
        let fields = object(&mut fields, room / (levels + 1));
        nested = format!(r#"{},"{level}x":{nested}}}"#, &fields[..fields.len() - 1]);
    }
    let escape = r#"\u00e9\n\"\\\/\ud83d\ude00"#;
    let strings = format!(r#"{{"s":"{}"}}"#, escape.repeat((room - 8) / escape.len()));
    let numbers = ["1e15", "-1.5E-7", "12345678901234567890123", "0.000e-9"];
    let numbers = (0..).map(|i| numbers[i % 4].to_string());
    let numbers = format!(
        "[{}]",
        numbers.take(room / 14).collect::<Vec<_>>().join(",")
    );
    vec![
        ("distinct keys", distinct),
        ("each key twice", twice),
        ("one key repeated", one),
        ("long keys alike", long),
        ("nested to the limit", nested),
        ("long strings of escapes", strings),
        ("many numbers", numbers),
    ]
}
