//! Browsing the whole queue (`GET /notifications`): a list per state, with filters, in
//! the order support reads it (pending ones soonest due first, finished ones newest
//! first), paged by a cursor that neither repeats nor drops a notification that stays in
//! its state while others move.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};
use support::{Postback, Receiver};

use support::WAIT;

/// Every page of `query` (`limit` each), walked to the end: the items.
async fn walk(pb: &Postback, query: &str, limit: usize, pause: Duration) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let mut path = format!("/notifications?{query}&limit={limit}");
        if let Some(c) = &cursor {
            path += &format!("&cursor={c}");
        }
        let (status, page) = pb.get(&path).await;
        assert_eq!(status, 200, "{path}: {page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return items,
        }
        // A reader's pace between pages, while the queue moves under it.
        support::pace(pause).await;
    }
    panic!("{query}: no end after 10,000 pages");
}

async fn ids(pb: &Postback, query: &str) -> Vec<String> {
    walk(pb, query, 2, Duration::ZERO)
        .await
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}

/// One notification in each state, some twice, with topics, hosts and an idempotency key.
struct Queue {
    scheduled_soon: String,
    scheduled_later: String,
    keyed: String,
    retrying: String,
    in_flight: String,
    delivered_first: String,
    delivered_then: String,
    dead: String,
    cancelled: String,
}

async fn queue(pb: &Postback, receiver: &Receiver) -> Queue {
    let later = |delay: &str, topic: &str| json!({"url": "http://localhost:9/hooks", "body": {}, "delay": delay, "topic": topic});
    let scheduled_later = pb.register(later("2h", "order.paid")).await;
    let scheduled_soon = pb.register(later("1h", "order.paid")).await;
    let (status, keyed) = pb
        .notify_with(
            json!({"url": receiver.url("/k"), "body": {}, "delay": "3h", "topic": "refund"}),
            &[("Idempotency-Key", "order-1001")],
        )
        .await;
    assert_eq!(status, 202);
    let retrying = pb
        .register(json!({"url": receiver.url("/r?fail=9"), "body": {}, "schedule": ["1h"], "topic": "order.paid"}))
        .await;
    let in_flight = pb
        .register(json!({"url": receiver.url("/slow?sleep_ms=6000"), "body": {}}))
        .await;
    let delivered_first = pb
        .register(json!({"url": receiver.url("/ok1"), "body": {}, "topic": "order.paid"}))
        .await;
    pb.wait_state(&delivered_first, "delivered", WAIT).await;
    let delivered_then = pb
        .register(json!({"url": receiver.url("/ok2"), "body": {}}))
        .await;
    let dead = pb
        .register(json!({"url": receiver.url("/d?fail=9"), "body": {}, "schedule": ["100ms"]}))
        .await;
    let cancelled = pb.register(later("1h", "refund")).await;
    let (status, _) = pb
        .request(
            reqwest::Method::DELETE,
            &format!("/notifications/{cancelled}"),
            None,
            &[],
        )
        .await;
    assert_eq!(status, 200);
    pb.wait_state(&delivered_then, "delivered", WAIT).await;
    pb.wait_state(&dead, "dead", WAIT).await;
    pb.wait_state(&in_flight, "in_flight", WAIT).await;
    assert!(
        support::eventually(WAIT, || async {
            pb.notification(&retrying).await["attempts"] == 1
        })
        .await,
        "the retrying one never failed once"
    );
    Queue {
        scheduled_soon,
        scheduled_later,
        keyed: keyed["id"].as_str().unwrap().to_string(),
        retrying,
        in_flight,
        delivered_first,
        delivered_then,
        dead,
        cancelled,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_state_and_filter_lists_exactly_what_matches_in_order() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let q = queue(&pb, &receiver).await;

    assert_eq!(
        ids(&pb, "state=scheduled").await,
        [
            q.scheduled_soon.as_str(),
            q.scheduled_later.as_str(),
            q.keyed.as_str()
        ],
        "soonest due first"
    );
    assert_eq!(ids(&pb, "state=retrying").await, [q.retrying.as_str()]);
    assert_eq!(ids(&pb, "state=in_flight").await, [q.in_flight.as_str()]);
    assert_eq!(
        ids(&pb, "state=delivered").await,
        [q.delivered_then.as_str(), q.delivered_first.as_str()],
        "newest first"
    );
    assert_eq!(ids(&pb, "state=dead").await, [q.dead.as_str()]);
    assert_eq!(ids(&pb, "state=cancelled").await, [q.cancelled.as_str()]);

    assert_eq!(
        ids(&pb, "state=scheduled&topic=order.paid").await,
        [q.scheduled_soon.as_str(), q.scheduled_later.as_str()]
    );
    assert_eq!(
        ids(&pb, "state=scheduled&host=127.0.0.1").await,
        [q.keyed.as_str()]
    );
    assert_eq!(
        ids(&pb, "state=delivered&topic=order.paid").await,
        [q.delivered_first.as_str()]
    );
    let soon = pb.notification(&q.scheduled_soon).await;
    let due = soon["next_attempt_at"].as_str().unwrap();
    assert_eq!(
        ids(&pb, &format!("state=scheduled&until={due}")).await,
        [q.scheduled_soon.as_str()],
        "until bounds the next attempt of a pending one"
    );
    let first = pb.notification(&q.delivered_first).await;
    let finished = first["finished_at"].as_str().unwrap();
    assert_eq!(
        ids(&pb, &format!("state=delivered&until={finished}")).await,
        [q.delivered_first.as_str()],
        "and the finish of a finished one"
    );
    assert_eq!(
        ids(&pb, "idempotency_key=order-1001").await,
        [q.keyed.as_str()]
    );
    assert_eq!(
        ids(&pb, "idempotency_key=order-1001&state=scheduled").await,
        [q.keyed.as_str()]
    );
    assert!(ids(&pb, "idempotency_key=order-1001&state=dead")
        .await
        .is_empty());
    assert!(ids(&pb, "idempotency_key=order-9999").await.is_empty());

    // A notification's view says the list it is in, in the same word, and its state in
    // the lifecycle's (a retrying one is scheduled).
    for state in ["scheduled", "retrying", "delivered", "dead", "cancelled"] {
        for id in ids(&pb, &format!("state={state}")).await {
            let view = pb.notification(&id).await;
            assert_eq!(view["list"], state, "listed as {state}: {view}");
            let lifecycle = if state == "retrying" {
                "scheduled"
            } else {
                state
            };
            assert_eq!(view["state"], lifecycle, "{view}");
        }
    }

    // What a list item carries.
    let (_, page) = pb.get("/notifications?state=retrying").await;
    let item = &page["items"][0];
    assert_eq!(item["state"], "retrying");
    assert_eq!(item["attempts"], 1);
    assert_eq!(item["topic"], "order.paid");
    assert_eq!(item["url"], receiver.url("/r?fail=9"));
    assert_eq!(item["last_status"], 500);
    assert!(item["next_attempt_at"].is_string(), "{item}");
    assert!(
        item.get("body").is_none(),
        "a list leaves the body out: {item}"
    );
    let (_, page) = pb.get("/notifications?state=cancelled").await;
    assert!(page["items"][0]["finished_at"].is_string(), "{page}");

    for (query, field) in [
        ("", "state"),
        ("state=waiting", "state"),
        ("state=dead&limit=0", "limit"),
        ("state=dead&since=yesterday", "since"),
        ("state=dead&cursor=nope", "cursor"),
    ] {
        let (status, answer) = pb.get(&format!("/notifications?{query}")).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some(field)),
            "{query}: {answer}"
        );
    }
    let (status, _) = pb.get("/notifications?state=dead&colour=red").await;
    assert_eq!(status, 400, "an unknown parameter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_while_notifications_move_returns_each_at_most_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    // 500 that stay retrying (their next attempt is an hour away), and 500 that keep
    // moving between retrying and in flight while the walk goes on.
    let mut stayers = HashSet::new();
    for n in 0..500 {
        let url = receiver.url(&format!("/stay/{n}?fail=9"));
        stayers.insert(
            pb.register(json!({"url": url, "body": {}, "schedule": ["1h"]}))
                .await,
        );
    }
    // Their retries are further apart than a claim reaches ahead (up to 160 ms), so each
    // spends part of every interval retrying before it is claimed again.
    for n in 0..500 {
        let url = receiver.url(&format!("/move/{n}?fail=99"));
        pb.register(json!({"url": url, "body": {}, "schedule": vec!["300ms"; 40]}))
            .await;
    }
    assert!(
        support::eventually(Duration::from_secs(30), || async {
            receiver.count() >= 1000
        })
        .await,
        "every one attempted once"
    );
    let walked = walk(&pb, "state=retrying", 25, Duration::from_millis(10)).await;
    let mut seen = HashSet::new();
    for item in &walked {
        let id = item["id"].as_str().unwrap();
        assert!(seen.insert(id.to_string()), "{id} returned twice");
    }
    let missing: Vec<_> = stayers.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "stayed retrying, never returned: {missing:?}"
    );
    assert!(
        walked.len() > 500,
        "some that moved were listed too: {}",
        walked.len()
    );

    // Newest first while more finish: the ones finished before the walk, each once.
    let mut before = HashSet::new();
    for n in 0..200 {
        before.insert(
            pb.register(json!({"url": receiver.url(&format!("/done/{n}")), "body": {}}))
                .await,
        );
    }
    for id in &before {
        pb.wait_state(id, "delivered", WAIT).await;
    }
    let more = async {
        for n in 0..200 {
            pb.register(json!({"url": receiver.url(&format!("/more/{n}")), "body": {}}))
                .await;
        }
    };
    let (walked, ()) = tokio::join!(
        walk(&pb, "state=delivered", 10, Duration::from_millis(5)),
        more
    );
    let listed: Vec<String> = walked
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    let unique: HashSet<&String> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "none twice");
    assert!(
        before.iter().all(|id| unique.contains(id)),
        "all 200 listed"
    );
}

/// A cursor sealed as an instance that took its key from the configured tokens sealed
/// them: the key ChaCha20-Poly1305 would be under, the SHA-256 of `postback cursor key`
/// and the sorted SHA-256 digests of the tokens, which whoever reads the configuration
/// (or the tokens' `sha256` there) can compute.
fn forged_with_the_tokens(tokens: &[&str], plain: &str) -> String {
    use base64::Engine;
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
    use sha2::{Digest, Sha256};

    let mut digests: Vec<[u8; 32]> = tokens.iter().map(|t| Sha256::digest(t).into()).collect();
    digests.sort();
    let mut key = Sha256::new();
    key.update(b"postback cursor key");
    digests.iter().for_each(|d| key.update(d));
    let key = UnboundKey::new(&CHACHA20_POLY1305, &key.finalize()).unwrap();
    let nonce = [7u8; 12];
    let mut sealed = plain.as_bytes().to_vec();
    LessSafeKey::new(key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::empty(),
            &mut sealed,
        )
        .unwrap();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([&nonce[..], &sealed].concat())
}

/// The field a `422` names.
fn refused_field(answer: &(u16, Value)) -> (u16, Option<&str>) {
    (answer.0, answer.1["error"]["field"].as_str())
}

/// Cursors are sealed under a key the deployment keeps in its store: a walk begun at one
/// instance goes on at another of the same store, whatever tokens it has; a cursor
/// sealed under a key the configuration gives away, or changed on the way, is refused
/// naming `cursor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_opens_at_every_instance_of_the_store_and_nowhere_else() {
    let backend = support::Backend::start();
    let receiver = Receiver::start().await;
    let mut a = backend.postback(&[]).await;
    for n in 0..3 {
        a.register(json!({"url": receiver.url("/walk"), "body": {"n": n}, "delay": "1h"}))
            .await;
    }
    let (status, first) = a.get("/notifications?state=scheduled&limit=1").await;
    assert_eq!(status, 200, "{first}");
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    if !backend.is_shared() {
        a.terminate();
    }

    let b = backend
        .postback(&[("POSTBACK_SERVER_API_TOKENS", "another-token")])
        .await;
    let page = |cursor: &str| {
        let path = format!("/notifications?state=scheduled&limit=1&cursor={cursor}");
        let b = &b;
        async move {
            b.request_as("another-token", reqwest::Method::GET, &path, None, &[])
                .await
        }
    };
    let (status, second) = page(&cursor).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["items"].as_array().unwrap().len(), 1);
    assert_ne!(second["items"][0]["id"], first["items"][0]["id"]);

    let mut tampered = cursor.clone().into_bytes();
    let middle = tampered.len() / 2;
    tampered[middle] = if tampered[middle] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(refused_field(&page(&tampered).await), (422, Some("cursor")));

    let forged = forged_with_the_tokens(&["another-token"], "zzz");
    let listed = b
        .request_as(
            "another-token",
            reqwest::Method::GET,
            &format!("/subscriptions?cursor={forged}"),
            None,
            &[],
        )
        .await;
    assert_eq!(
        refused_field(&listed),
        (422, Some("cursor")),
        "{}",
        listed.1
    );
}
