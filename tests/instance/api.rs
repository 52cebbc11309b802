//! The API contract: authentication, validation (nothing stored for a rejected request),
//! idempotency, lookups and behaviour while Redis is down.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_but_health_requires_a_token() {
    let (backend, _receiver, pb) = support::start_any(&[]).await;

    for (path, token) in [
        ("/notify", None),
        ("/notify", Some("wrong")),
        ("/dead-letters", None),
    ] {
        let mut req = if path == "/notify" {
            pb.http.post(pb.url(path)).json(&json!({}))
        } else {
            pb.http.get(pb.url(path))
        };
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path} {token:?}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
        // A caller told what is wrong: no token, or a token this instance does not know.
        let says = match token {
            None => "header is required",
            Some(_) => "not one this instance accepts",
        };
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{path} {token:?}: {message}");
    }
    assert_eq!(pb.status_without_token("/healthz").await, 200);
    assert_eq!(pb.status_without_token("/readyz").await, 200);
    assert!(backend.holds_nothing(&pb).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_naming_the_field_and_stores_nothing() {
    let (backend, _receiver, pb) =
        support::start_any(&[("POSTBACK_SERVER_MAX_BODY_BYTES", "4096")]).await;
    let ok_url = "https://merchant.example.com/cb";

    let cases: Vec<(Value, &str)> = vec![
        (json!({"body": {}}), "url"),
        (json!({"url": ok_url}), "body"),
        (json!({"url": ok_url, "body": null}), "body"),
        (
            json!({"url": "ftp://merchant.example.com/cb", "body": {}}),
            "url",
        ),
        (json!({"url": "not a url", "body": {}}), "url"),
        (json!({"url": 42, "body": {}}), "url"),
        (
            json!({"url": ok_url, "body": {}, "schedule": ["15s", "soon"]}),
            "schedule[1]",
        ),
        (
            json!({"url": ok_url, "body": {}, "schedule": ["1ms"]}),
            "schedule[0]",
        ),
        (
            json!({"url": ok_url, "body": {}, "schedule": "no-such-schedule"}),
            "schedule",
        ),
        (
            json!({"url": ok_url, "body": {}, "schedule": 5}),
            "schedule",
        ),
        (
            json!({"url": ok_url, "body": {}, "delay": "yesterday"}),
            "delay",
        ),
        (
            json!({"url": ok_url, "body": {}, "delay": "400days"}),
            "delay",
        ),
        (
            json!({"url": ok_url, "body": {}, "timeout": "5m"}),
            "timeout",
        ),
        (
            json!({"url": ok_url, "body": {}, "headers": {"Transfer-Encoding": "chunked"}}),
            "headers.Transfer-Encoding",
        ),
        (
            json!({"url": ok_url, "body": {}, "headers": {"webhook-signature": "v1,x"}}),
            "headers.webhook-signature",
        ),
        (
            json!({"url": ok_url, "body": {}, "headers": {"bad name": "x"}}),
            "headers.bad name",
        ),
        (json!({"url": ok_url, "body": {}, "topic": ""}), "topic"),
        (
            json!({"url": ok_url, "body": {}, "shedule": ["1s"]}),
            "shedule",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = pb.notify(body.clone()).await;
        assert!((400..500).contains(&status), "{body} → {status} {answer}");
        assert_eq!(answer["error"]["field"], field, "{body} → {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{answer}"
        );
    }

    let raw = |body: &'static [u8]| {
        pb.http
            .post(pb.url("/notify"))
            .bearer_auth(support::instance::TOKEN)
            .body(body)
            .send()
    };
    let resp = raw(b"{\"url\": ").await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_json"
    );
    let resp = raw(b"\xff\xfe not utf-8").await.unwrap();
    assert_eq!(resp.status(), 400);
    let big = json!({"url": ok_url, "body": "x".repeat(10_000)});
    let (status, answer) = pb.notify(big).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_body");
    let (status, answer) = pb
        .notify_with(
            json!({"url": ok_url, "body": {}}),
            &[("Idempotency-Key", "")],
        )
        .await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (422, Some("Idempotency-Key"))
    );

    assert!(
        backend.holds_nothing(&pb).await,
        "nothing stored for rejected requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_returns_the_same_notification_and_sends_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let body = json!({"url": receiver.url("/idem"), "body": {"order": 7}, "delay": "300ms"});

    let (s1, first) = pb
        .notify_with(body.clone(), &[("Idempotency-Key", "order-7-paid")])
        .await;
    let (s2, second) = pb
        .notify_with(body.clone(), &[("Idempotency-Key", "order-7-paid")])
        .await;
    let (s3, other) = pb
        .notify_with(body.clone(), &[("Idempotency-Key", "order-8-paid")])
        .await;
    assert_eq!((s1, s2, s3), (202, 202, 202));
    assert_eq!(first["id"], second["id"]);
    assert_ne!(first["id"], other["id"]);

    let id = first["id"].as_str().unwrap();
    pb.wait_state(id, "delivered", Duration::from_secs(10))
        .await;
    pb.wait_state(
        other["id"].as_str().unwrap(),
        "delivered",
        Duration::from_secs(10),
    )
    .await;
    let (_, again) = pb
        .notify_with(body, &[("Idempotency-Key", "order-7-paid")])
        .await;
    assert_eq!(again["id"], id);
    assert_eq!(again["state"], "delivered");
    pb.wait_quiet().await;
    assert_eq!(receiver.requests_for(id).len(), 1);
    assert_eq!(receiver.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_during_the_attempt_answers_in_flight() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let body = json!({"url": receiver.url("/idem?sleep_ms=800"), "body": {"order": 9}});
    let (_, first) = pb
        .notify_with(body.clone(), &[("Idempotency-Key", "order-9-paid")])
        .await;
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);

    let (status, again) = pb
        .notify_with(body, &[("Idempotency-Key", "order-9-paid")])
        .await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(
        (&again["id"], again["state"].as_str()),
        (&first["id"], Some("in_flight"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_repeats_of_one_idempotency_key_register_once() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let body = json!({"url": receiver.url("/same"), "body": {"order": 9}});
    let repeats = (0..40).map(|i| {
        let (pb, body) = (&pb, body.clone());
        // Half with the shared key, half with keys of their own, all at once, so that
        // they are registered in groups.
        let key = if i % 2 == 0 {
            "order-9".to_string()
        } else {
            format!("other-{i}")
        };
        async move { pb.notify_with(body, &[("Idempotency-Key", &key)]).await }
    });
    let answers = futures_util::future::join_all(repeats).await;
    let shared: std::collections::BTreeSet<&str> = answers
        .iter()
        .step_by(2)
        .map(|(status, a)| {
            assert_eq!(*status, 202, "{a}");
            a["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(shared.len(), 1, "one notification for the shared key");
    assert!(receiver.wait_for(21, Duration::from_secs(10)).await);
    pb.wait_quiet().await;
    let id = *shared.iter().next().unwrap();
    assert_eq!(receiver.requests_for(id).len(), 1, "sent once");
    assert_eq!(receiver.count(), 21);
    let (_, stats) = pb.get("/stats").await;
    assert_eq!(stats["finished"], 21, "21 stored: {stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_answers_with_id_state_and_next_attempt() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;

    let (status, answer) = pb
        .notify(json!({"url": receiver.url("/x"), "body": {}, "delay": "1h", "schedule": "alipay"}))
        .await;
    assert_eq!(status, 202);
    assert_eq!(answer["state"], "scheduled");
    let id = answer["id"].as_str().unwrap();
    let seen = pb.notification(id).await;
    assert_eq!(seen["state"], "scheduled");
    assert_eq!(seen["attempts"], 0);
    assert_eq!(seen["max_attempts"], 8, "alipay has 7 intervals");
    assert_eq!(seen["next_attempt_at"], answer["next_attempt_at"]);
    assert_eq!(seen["history"], json!([]));
    assert!(seen["created_at"].as_str().unwrap().ends_with('Z'));

    assert_eq!(
        pb.get("/notifications/ntf_0_0193b0c4f5a87c1e9d2e3f4a5b6c7d8e")
            .await
            .0,
        404
    );
    assert_eq!(pb.get("/notifications/garbage").await.0, 404);
    let (status, body) = pb.get("/dead-letters?cursor=nonsense").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("cursor"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_page_newest_first_without_repeats() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let id = pb
            .register(json!({"url": receiver.url("/d?fail=9"), "body": {"i": i}, "schedule": []}))
            .await;
        pb.wait_state(&id, "dead", Duration::from_secs(10)).await;
        ids.push(id);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/dead-letters?limit=3&cursor={c}"),
            None => "/dead-letters?limit=3".to_string(),
        };
        let (status, page) = pb.get(&path).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_string()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids, "newest first, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_unresponsive_the_api_answers_503_and_nothing_is_lost() {
    let (redis, receiver, pb) = support::start(&[]).await;
    let before = pb
        .register(json!({"url": receiver.url("/r"), "body": {}, "delay": "1s"}))
        .await;

    redis.freeze();
    let started = std::time::Instant::now();
    // A timed-out registration may still reach Redis later: the producer retries it with
    // the same Idempotency-Key, and gets exactly one notification.
    let retried = json!({"url": receiver.url("/r"), "body": {}});
    let (status, answer) = pb
        .notify_with(retried.clone(), &[("Idempotency-Key", "k1")])
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "store_unavailable");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    let not_ready = support::eventually(support::WAIT, || async {
        pb.status_without_token("/readyz").await == 503
    });
    assert!(
        not_ready.await,
        "/readyz turns 503 while Redis does not answer"
    );

    redis.thaw();
    let back = support::eventually(Duration::from_secs(15), || async {
        pb.http
            .get(pb.url("/readyz"))
            .send()
            .await
            .map(|r| r.status() == 200)
            .unwrap_or(false)
    })
    .await;
    assert!(back, "{}", pb.logs());
    // Claimed while Redis was frozen, its claim's reply lost: released at once after,
    // not held for the one-minute lease.
    pb.wait_state(&before, "delivered", Duration::from_secs(8))
        .await;
    let (status, after) = pb.notify_with(retried, &[("Idempotency-Key", "k1")]).await;
    assert_eq!(status, 202);
    pb.wait_state(
        after["id"].as_str().unwrap(),
        "delivered",
        Duration::from_secs(15),
    )
    .await;
    pb.wait_quiet().await;
    assert_eq!(receiver.count(), 2, "each notification once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_stopped_the_api_answers_503_and_recovers() {
    let (mut redis, receiver, pb) = support::start(&[]).await;

    redis.stop();
    let (status, answer) = pb
        .notify(json!({"url": receiver.url("/r"), "body": {}}))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (503, Some("store_unavailable"))
    );
    redis.restart();
    let back = support::eventually(Duration::from_secs(15), || async {
        pb.notify(json!({"url": receiver.url("/r"), "body": {}}))
            .await
            .0
            == 202
    })
    .await;
    assert!(back, "{}", pb.logs());
    assert!(
        receiver.wait_for(1, Duration::from_secs(10)).await,
        "{}",
        pb.logs()
    );
}

/// Every JSON answer is a line: it ends with a newline (so that `curl` leaves the prompt
/// on a line of its own), and is the same JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_answer_ends_with_a_newline() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let registered = pb
        .http
        .post(pb.url("/notify"))
        .bearer_auth(support::instance::TOKEN)
        .json(&json!({"url": receiver.url("/ok"), "body": {}}))
        .send()
        .await
        .unwrap();
    let mut answers = vec![("POST /notify".to_string(), registered)];
    for path in ["/me", "/stats", "/nowhere", "/notifications?state=nope"] {
        let answer = pb
            .http
            .get(pb.url(path))
            .bearer_auth(support::instance::TOKEN)
            .send()
            .await
            .unwrap();
        answers.push((format!("GET {path}"), answer));
    }
    for path in ["/healthz", "/dead-letters", "/openapi.json"] {
        answers.push((path.into(), pb.http.get(pb.url(path)).send().await.unwrap()));
    }
    for (what, answer) in answers {
        let length = answer.content_length();
        let text = answer.text().await.unwrap();
        assert!(
            text.ends_with("}\n") && !text.ends_with("\n\n"),
            "{what}: {text:?}"
        );
        assert_eq!(length, Some(text.len() as u64), "{what}");
        serde_json::from_str::<Value>(&text).unwrap();
    }
}
