//! Delivery end to end: what the receiver gets, when, and the state a user then sees.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::{signatures, Backend, Postback, Receiver};

use support::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_try_success_carries_the_body_and_the_webhook_headers() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let id = pb
        .register(json!({"url": receiver.url("/paid"), "body": {"order": 42, "paid": true}, "headers": {"X-Merchant": "m-1"}, "topic": "payment.succeeded"}))
        .await;
    let done = pb.wait_state(&id, "delivered", WAIT).await;

    let got = receiver.requests_for(&id);
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.path, "/paid");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap(),
        json!({"order": 42, "paid": true})
    );
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    assert!(r.header("user-agent").unwrap().starts_with("postback/"));
    assert_eq!(r.header("x-merchant").as_deref(), Some("m-1"));
    let ts: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - ts).abs() < 30);
    assert_eq!(r.header("webhook-signature"), None, "no secret configured");

    assert_eq!(done["attempts"], 1);
    assert_eq!(done["topic"], "payment.succeeded");
    assert_eq!(done["history"][0]["status"], 200);
    assert_eq!(done["history"][0]["response"], "ok");
    assert_eq!(done["next_attempt_at"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_body_is_sent_verbatim_and_signed_when_a_secret_is_set() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend
        .postback(&[(
            "POSTBACK_SIGNING_SECRETS",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )])
        .await;

    let id = pb
        .register(json!({"url": receiver.url("/form"), "body": "trade_no=1&status=PAID"}))
        .await;
    pb.wait_state(&id, "delivered", WAIT).await;

    let r = &receiver.requests_for(&id)[0];
    assert_eq!(&r.body[..], b"trade_no=1&status=PAID");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    let sig = r.header("webhook-signature").unwrap();
    let ts = r.header("webhook-timestamp").unwrap();
    assert!(ts.parse::<i64>().is_ok(), "{ts}");
    let expected = signatures::v1("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", r);
    assert_eq!(sig, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_at_each_interval_never_early() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let id = pb
        .register(json!({"url": receiver.url("/cb?fail=2"), "body": {}, "schedule": ["100ms", "300ms", "1s"]}))
        .await;
    let done = pb.wait_state(&id, "delivered", WAIT).await;

    let got = receiver.requests_for(&id);
    assert_eq!(got.len(), 3, "two failures then success");
    for (i, interval) in [Duration::from_millis(100), Duration::from_millis(300)]
        .into_iter()
        .enumerate()
    {
        let gap = got[i + 1].at - got[i].at;
        assert!(
            gap >= interval,
            "retry {} came {gap:?} after the failure, before its {interval:?}",
            i + 1
        );
        assert!(
            gap < interval + Duration::from_millis(250),
            "retry {} late: {gap:?} for {interval:?}",
            i + 1
        );
    }
    assert!(
        got.iter().all(|r| r.id() == id),
        "the same webhook-id on every retry"
    );
    assert_eq!(done["attempts"], 3);
    let statuses: Vec<_> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].clone())
        .collect();
    assert_eq!(statuses, vec![json!(500), json!(500), json!(200)]);
    assert_eq!(done["history"][0]["error"], "HTTP 500");
}

/// Notifications falling due one after another, 5 ms apart: each reaches the receiver at
/// or after the due time the API answered, and a single Redis is asked for far fewer
/// claims than deliveries, because a claim takes what falls due in the next moments
/// together (holding each until it is due). With a claim per delivery, as well as a
/// settle, it was two script calls per delivery. (A cluster's 12 shards each get a
/// twelfth of the stream, so there a claim carries fewer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_falling_due_arrives_never_early_with_few_store_calls() {
    const N: usize = 200;
    let (backend, receiver, pb) = support::start_any(&[]).await;

    let mut due = HashMap::new();
    for i in 0..N {
        let delay = format!("{}ms", 2000 + 5 * i);
        let (status, answer) = pb
            .notify(json!({"url": receiver.url("/cb"), "body": {"i": i}, "delay": delay}))
            .await;
        assert_eq!(status, 202, "{answer}");
        let at = humantime::parse_rfc3339(answer["next_attempt_at"].as_str().unwrap()).unwrap();
        due.insert(answer["id"].as_str().unwrap().to_string(), at);
    }
    if let Backend::Standalone(redis) = &backend {
        redis.reset_stats();
    }
    assert!(receiver.wait_for(N, WAIT).await, "all delivered");

    for r in receiver.requests() {
        let due_at = due[&r.id()];
        assert!(
            r.wall >= due_at,
            "{} arrived {:?} before it was due",
            r.id(),
            due_at.duration_since(r.wall).unwrap()
        );
    }
    assert_eq!(receiver.per_id().len(), N, "each once");
    if let Backend::Standalone(redis) = &backend {
        let calls = redis.script_calls();
        assert!(
            calls < N as u64,
            "{calls} script calls for {N} deliveries: calls should carry several each"
        );
    }
}

/// A notification keeps its own schedule whether the store keeps that schedule once for
/// many (a shard keeps at most 256) or writes it out, and whichever instance reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_notification_keeps_its_schedule_whoever_reads_it() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let mut registrar = backend.postback(&[]).await;
    let retry = |path: &str, schedule: &[&str]| json!({"url": receiver.url(path), "body": {}, "schedule": schedule, "delay": "2s"});
    let early = registrar
        .register(retry("/early?fail=2", &["300ms", "300ms"]))
        .await;
    // More distinct schedules than a shard keeps once, each of 1 to 3 intervals.
    let own = (0..300usize)
        .map(|i| {
            let schedule = vec![format!("{}s", i + 1); 1 + i % 3];
            json!({"url": receiver.url("/own"), "body": {}, "schedule": schedule, "delay": "1h"})
        })
        .collect();
    let own = registrar.register_batch(own).await;
    let late = registrar.register(retry("/late?fail=1", &["400ms"])).await;
    let configured = registrar
        .register(json!({"url": receiver.url("/default"), "body": {}, "delay": "1h"}))
        .await;

    // On Redis, another instance (which has read no schedule yet) takes over.
    let reader = match backend.is_shared() {
        true => {
            registrar.terminate();
            backend.postback(&[]).await
        }
        false => registrar,
    };
    for (i, id) in own.iter().enumerate() {
        let n = reader.notification(id).await;
        assert_eq!(n["max_attempts"], 2 + i % 3, "{n}");
        assert_eq!(n["attempts"], 0, "{n}");
    }
    assert_eq!(reader.notification(&configured).await["max_attempts"], 10);
    for (id, gaps) in [(&early, vec![300, 300]), (&late, vec![400])] {
        let done = reader.wait_state(id, "delivered", WAIT).await;
        assert_eq!(done["attempts"], gaps.len() + 1, "{done}");
        let got = receiver.requests_for(id);
        for (k, ms) in gaps.into_iter().enumerate() {
            let gap = got[k + 1].at - got[k].at;
            assert!(
                gap >= Duration::from_millis(ms),
                "retry {} after {gap:?}",
                k + 1
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_schedule_lands_in_dead_letters() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let id = pb
        .register(json!({"url": receiver.url("/down?fail=99&status=503"), "body": {}, "schedule": ["100ms", "100ms"], "topic": "refund"}))
        .await;
    let dead = pb.wait_state(&id, "dead", WAIT).await;

    pb.wait_quiet().await;
    assert_eq!(
        receiver.requests_for(&id).len(),
        3,
        "1 + len(schedule) attempts, then no more"
    );
    assert_eq!(dead["attempts"], 3);
    assert_eq!(dead["max_attempts"], 3);
    assert_eq!(dead["history"].as_array().unwrap().len(), 3);
    assert_eq!(dead["next_attempt_at"], serde_json::Value::Null);

    let (status, list) = pb.get("/dead-letters").await;
    assert_eq!(status, 200);
    assert_eq!(list["items"][0]["id"], id.as_str());
    assert_eq!(list["items"][0]["last_status"], 503);
    assert_eq!(list["items"][0]["topic"], "refund");
    assert_eq!(list["next_cursor"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_body_must_match_the_trimmed_response() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let ok = pb
        .register(
            json!({"url": receiver.url("/a?reply=SUCCESS"), "body": {}, "expect_body": "SUCCESS"}),
        )
        .await;
    let wrong = pb
        .register(json!({"url": receiver.url("/b?reply=fail"), "body": {}, "expect_body": "SUCCESS", "schedule": []}))
        .await;

    pb.wait_state(&ok, "delivered", WAIT).await;
    let dead = pb.wait_state(&wrong, "dead", WAIT).await;
    assert_eq!(dead["history"][0]["status"], 200);
    assert_eq!(dead["history"][0]["response"], "fail");
    assert!(dead["history"][0]["error"]
        .as_str()
        .unwrap()
        .contains("SUCCESS"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let id = pb
        .register(json!({"url": receiver.url("/moved?redirect=1"), "body": {}, "schedule": []}))
        .await;
    let dead = pb.wait_state(&id, "dead", WAIT).await;

    assert_eq!(dead["history"][0]["status"], 302);
    assert_eq!(dead["history"][0]["error"], "redirect not followed");
    assert_eq!(receiver.count(), 1, "the Location was not fetched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_callback_records_the_error() {
    let backend = Backend::start();
    let pb = backend.postback(&[]).await;
    let closed = format!("http://127.0.0.1:{}/cb", support::free_port());

    let id = pb
        .register(json!({"url": closed, "body": {}, "schedule": []}))
        .await;
    let dead = pb.wait_state(&id, "dead", WAIT).await;
    assert_eq!(dead["history"][0]["status"], serde_json::Value::Null);
    assert!(
        dead["history"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("connect"),
        "{dead}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_callback_times_out() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let id = pb.register(json!({"url": receiver.url("/slow?sleep_ms=2000"), "body": {}, "schedule": [], "timeout": "200ms"})).await;
    let dead = pb.wait_state(&id, "dead", WAIT).await;
    assert!(
        dead["history"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("timeout"),
        "{dead}"
    );
    assert!(dead["history"][0]["duration_ms"].as_u64().unwrap() < 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_holds_the_first_attempt_back() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let registered = std::time::Instant::now();
    let (status, answer) = pb
        .notify(json!({"url": receiver.url("/later"), "body": {}, "delay": "700ms"}))
        .await;
    assert_eq!(status, 202);
    assert_eq!(answer["state"], "scheduled");
    let id = answer["id"].as_str().unwrap();
    pb.wait_state(id, "delivered", WAIT).await;

    let arrived = receiver.requests_for(id)[0].at - registered;
    assert!(
        arrived >= Duration::from_millis(700),
        "sent after {arrived:?}"
    );
    assert!(
        arrived < Duration::from_millis(700 + 300),
        "late: {arrived:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_1000_is_delivered_exactly_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let ids = register_many(&pb, &receiver, 1000).await;
    assert!(
        receiver.wait_for(1000, Duration::from_secs(60)).await,
        "only {} arrived",
        receiver.count()
    );
    pb.wait_quiet().await;
    assert_exactly_once(&receiver, &ids);
    for id in ids.iter().step_by(97) {
        pb.wait_state(id, "delivered", WAIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_deliver_each_notification_once() {
    let backend = Backend::start();
    if !backend.is_shared() {
        eprintln!("one instance per embedded store: operations/embedded.rs checks the refusal");
        return;
    }
    let receiver = Receiver::start().await;
    let a = backend.postback(&[]).await;
    let b = backend.postback(&[]).await;

    let (mut ids, more) = tokio::join!(
        register_many(&a, &receiver, 300),
        register_many(&b, &receiver, 300)
    );
    ids.extend(more);
    assert!(
        receiver.wait_for(600, Duration::from_secs(60)).await,
        "only {} arrived",
        receiver.count()
    );
    a.wait_quiet().await;
    assert_exactly_once(&receiver, &ids);
}

async fn register_many(pb: &Postback, receiver: &Receiver, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let batch = chunk
            .iter()
            .map(|i| pb.register(json!({"url": receiver.url("/burst"), "body": {"n": i}})));
        ids.extend(futures_util::future::join_all(batch).await);
    }
    ids
}

fn assert_exactly_once(receiver: &Receiver, ids: &[String]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in receiver.requests() {
        *seen.entry(r.id()).or_default() += 1;
    }
    let missing = ids.iter().filter(|id| !seen.contains_key(*id)).count();
    let doubled = seen.values().filter(|n| **n > 1).count();
    assert_eq!(
        (missing, doubled, seen.len()),
        (0, 0, ids.len()),
        "missing, duplicated, distinct"
    );
}

/// Whether one of a delivery's signatures is `secret`'s.
fn verifies(secret: &str, r: &support::receiver::Received) -> bool {
    signatures::of(r).contains(&signatures::v1(secret, r))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_secrets_during_rotation_both_verify() {
    let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let new = "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";
    let (_backend, receiver, pb) =
        support::start_any(&[("POSTBACK_SIGNING_SECRETS", &format!("{old},{new}"))]).await;
    let rotating = pb
        .register(json!({"url": receiver.url("/r"), "body": {"n": 1}, "rate_key": "shop_7"}))
        .await;
    pb.wait_state(&rotating, "delivered", WAIT).await;

    let r = &receiver.requests_for(&rotating)[0];
    assert_eq!(r.header("webhook-signature").unwrap().split(' ').count(), 2);
    assert!(verifies(old, r) && verifies(new, r), "both secrets verify");
    assert!(!pb.logs().contains("whsec_"), "secrets never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_due_after_the_failure_even_when_its_settle_is_held_up() {
    let (redis, receiver, pb) = support::start(&[]).await;
    let id = pb
        .register(json!({"url": receiver.url("/slow?fail=1&sleep_ms=300"), "body": {}, "schedule": ["1s"]}))
        .await;
    assert!(receiver.wait_for(1, WAIT).await);
    // The failure is answered 300 ms after it arrived; Redis does not answer until 900 ms.
    // The hold-up is the behaviour under test: Redis answers nothing for 900 ms.
    redis.freeze();
    support::hold(Duration::from_millis(900)).await;
    redis.thaw();

    pb.wait_state(&id, "delivered", WAIT).await;
    let got = receiver.requests_for(&id);
    let gap = got[1].at - got[0].at;
    assert!(
        gap >= Duration::from_millis(1290) && gap < Duration::from_millis(1600),
        "1 s after the failure answered at 300 ms, not after the settle: {gap:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_the_slots_of_a_slow_host_is_sent_once_each_and_never_more_at_once() {
    let (_backend, receiver, pb) = support::start_any(&[
        ("POSTBACK_DELIVERY_CONCURRENCY", "2"),
        ("POSTBACK_DELIVERY_HOST_CONCURRENCY", "2"),
    ])
    .await;
    // Each answer takes longer than a claimed notification waits for a slot (2 s), so
    // those claimed beyond the free slots go back to the store and come again.
    let url = receiver.url("/slow?sleep_ms=2300");
    let batch = (0..6).map(|i| pb.register(json!({"url": url, "body": {"n": i}})));
    let ids = futures_util::future::join_all(batch).await;
    for id in &ids {
        let done = pb
            .wait_state(id, "delivered", Duration::from_secs(30))
            .await;
        assert_eq!(done["attempts"], 1, "{done}");
    }
    assert_exactly_once(&receiver, &ids);
    assert!(
        receiver.max_concurrent() <= 2,
        "{} at once",
        receiver.max_concurrent()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_says_in_plain_text_how_each_notification_ended() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let delivered = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}}))
        .await;
    let dead = pb
        .register(json!({"url": receiver.url("/no?fail=9"), "body": {}, "schedule": ["100ms"]}))
        .await;
    pb.wait_state(&delivered, "delivered", WAIT).await;
    pb.wait_state(&dead, "dead", WAIT).await;
    let logs = pb.logs();
    assert!(!logs.contains('\u{1b}'), "no colour codes in a file");
    let line = |id: &str, what: &str| {
        logs.lines()
            .find(|l| l.contains(id) && l.contains(what))
            .unwrap_or_else(|| panic!("no `{what}` line for {id} in\n{logs}"))
            .to_string()
    };
    let ok = line(&delivered, " delivered");
    assert!(
        ok.contains("INFO") && ok.contains("default") && ok.contains("200"),
        "{ok}"
    );
    let died = line(&dead, "dead-lettered");
    assert!(
        died.contains("WARN") && died.contains("attempt=2") && died.contains("500"),
        "{died}"
    );
}
