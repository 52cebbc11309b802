//! Dead-letter review: look at one, replay it (optionally to a new URL), discard it.

use crate::support;

use serde_json::{json, Value};
use support::Postback;

use support::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_shows_its_body_and_whole_history() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = support::dead_one(&pb, &receiver).await;

    let (status, dl) = pb.get(&format!("/dead-letters/{id}")).await;
    assert_eq!(status, 200, "{dl}");
    assert_eq!(dl["state"], "dead");
    assert_eq!(dl["body"], r#"{"order":9}"#);
    assert_eq!(dl["history"].as_array().unwrap().len(), 2);
    assert_eq!(dl["history"][1]["status"], 500);
    assert!(dl["dead_at"].as_str().is_some());

    let alive = pb
        .register(json!({"url": receiver.url("/ok"), "body": {}, "delay": "1h"}))
        .await;
    assert_eq!(
        pb.get(&format!("/dead-letters/{alive}")).await.0,
        404,
        "not dead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_with_a_new_url_delivers_it_with_a_fresh_attempt_count() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = support::dead_one(&pb, &receiver).await;

    let fixed = receiver.url("/fixed");
    let (status, answer) = pb
        .request(
            reqwest::Method::POST,
            &format!("/dead-letters/{id}/replay"),
            Some(json!({"url": fixed, "schedule": ["100ms"]})),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "scheduled");
    assert_eq!(answer["attempts"], 0);

    let done = pb.wait_state(&id, "delivered", WAIT).await;
    assert_eq!(done["attempts"], 1, "a fresh count");
    assert_eq!(done["url"], fixed.as_str());
    let last = receiver.requests().pop().unwrap();
    assert_eq!(
        (last.path.as_str(), last.id()),
        ("/fixed", id.clone()),
        "same webhook-id"
    );
    let (_, list) = pb.get("/dead-letters").await;
    assert_eq!(list["items"], json!([]));

    let (status, again) = pb
        .request(
            reqwest::Method::POST,
            &format!("/dead-letters/{id}/replay"),
            None,
            &[],
        )
        .await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (404, Some("not_found")),
        "no longer dead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_validates_like_notify_and_changes_nothing_when_rejected() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = support::dead_one(&pb, &receiver).await;
    let path = format!("/dead-letters/{id}/replay");

    for (body, field) in [
        (json!({"url": "ftp://x"}), "url"),
        (json!({"schedule": ["soon"]}), "schedule[0]"),
        (json!({"delay": "x"}), "delay"),
        (json!({"body": {}}), "body"),
    ] {
        let (status, answer) = pb
            .request(reqwest::Method::POST, &path, Some(body.clone()), &[])
            .await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some(field)),
            "{body} → {answer}"
        );
    }
    assert_eq!(pb.notification(&id).await["state"], "dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_dead_letter_is_gone() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let id = support::dead_one(&pb, &receiver).await;

    let (status, _) = pb
        .request(
            reqwest::Method::DELETE,
            &format!("/dead-letters/{id}"),
            None,
            &[],
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(pb.get(&format!("/notifications/{id}")).await.0, 404);
    assert_eq!(pb.get("/dead-letters").await.1["items"], json!([]));
    assert_eq!(
        pb.request(
            reqwest::Method::DELETE,
            &format!("/dead-letters/{id}"),
            None,
            &[]
        )
        .await
        .0,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_filters_by_topic_host_and_time_and_pages_while_letters_arrive() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let other_host = format!("http://localhost:{}/down?fail=99", receiver.port);
    let mut refunds = Vec::new();
    for i in 0..7 {
        let (topic, url) = if i % 2 == 0 {
            ("refund", receiver.url("/down?fail=99"))
        } else {
            ("payment", other_host.clone())
        };
        let id = pb
            .register(json!({"url": url, "body": {"i": i}, "schedule": [], "topic": topic}))
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
        if topic == "refund" {
            refunds.push(id);
        }
    }
    let middle = pb.notification(&refunds[1]).await["finished_at"]
        .as_str()
        .unwrap()
        .to_string();

    let ids = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, page) = pb.get("/dead-letters?topic=refund&limit=100").await;
    assert_eq!(
        ids(&page),
        refunds.iter().rev().cloned().collect::<Vec<_>>()
    );
    let (_, page) = pb.get("/dead-letters?host=localhost").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    let (_, page) = pb
        .get(&format!("/dead-letters?topic=refund&until={middle}"))
        .await;
    assert_eq!(ids(&page), vec![refunds[1].clone(), refunds[0].clone()]);
    let (_, page) = pb
        .get(&format!("/dead-letters?topic=refund&since={middle}"))
        .await;
    assert_eq!(
        ids(&page),
        vec![refunds[3].clone(), refunds[2].clone(), refunds[1].clone()]
    );
    let (status, page) = pb.get("/dead-letters?since=yesterday").await;
    assert_eq!(
        (status, page["error"]["field"].as_str()),
        (422, Some("since"))
    );

    // Page one at a time (four pages) while newer refunds die in between.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    for page_no in 0.. {
        let (_, page) = pb
            .get(&format!("/dead-letters?topic=refund&limit=1{cursor}"))
            .await;
        seen.extend(ids(&page));
        let Some(next) = page["next_cursor"].as_str() else {
            break;
        };
        cursor = format!("&cursor={next}");
        if page_no < 2 {
            let id = pb.register(json!({"url": receiver.url("/down?fail=99"), "body": {}, "schedule": [], "topic": "refund"})).await;
            pb.wait_state(&id, "dead", WAIT).await;
        }
    }
    assert_eq!(
        seen,
        refunds.iter().rev().cloned().collect::<Vec<_>>(),
        "no repeats, no gaps"
    );
}

async fn post(pb: &Postback, path: &str, body: Value) -> (u16, Value) {
    pb.request(reqwest::Method::POST, path, Some(body), &[])
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_by_topic_sends_each_once_and_twice_changes_nothing() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let mut refunds = Vec::new();
    let mut others = Vec::new();
    for i in 0..6 {
        // Fails its first attempt only: a replay delivers it.
        let topic = if i % 3 == 0 { "other" } else { "refund" };
        let id = pb
            .register(json!({"url": receiver.url("/flaky?fail=1"), "body": {"i": i}, "schedule": [], "topic": topic}))
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
        if topic == "refund" {
            refunds.push(id)
        } else {
            others.push(id)
        }
    }

    let (status, answer) = post(
        &pb,
        "/dead-letters/replay",
        json!({"topic": "refund", "schedule": ["100ms"]}),
    )
    .await;
    assert_eq!((status, &answer["count"]), (200, &json!(4)), "{answer}");
    for id in &refunds {
        let done = pb.wait_state(id, "delivered", WAIT).await;
        assert_eq!(
            (done["attempts"].as_u64(), done["replays"].as_u64()),
            (Some(1), Some(1))
        );
    }
    for id in &others {
        assert_eq!(pb.notification(id).await["state"], "dead");
    }
    let (status, again) = post(&pb, "/dead-letters/replay", json!({"topic": "refund"})).await;
    assert_eq!((status, &again["count"]), (200, &json!(0)), "{again}");
    pb.wait_quiet().await;
    for id in &refunds {
        assert_eq!(
            receiver.requests_for(id).len(),
            2,
            "one failure, one delivery"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_discards_what_the_filter_matches_and_refuses_an_empty_filter() {
    let (_backend, receiver, pb) = support::start_any(&[]).await;
    let keep = support::dead_one(&pb, &receiver).await;
    let other_host = format!("http://localhost:{}/down?fail=99", receiver.port);
    let mut gone = Vec::new();
    for _ in 0..3 {
        let id = pb
            .register(json!({"url": other_host, "body": {}, "schedule": []}))
            .await;
        pb.wait_state(&id, "dead", WAIT).await;
        gone.push(id);
    }

    for (path, body) in [
        ("/dead-letters/purge", json!({})),
        ("/dead-letters/replay", json!({"all": false})),
    ] {
        let (status, answer) = post(&pb, path, body).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some("all")),
            "{answer}"
        );
    }
    let (status, answer) = post(
        &pb,
        "/dead-letters/purge",
        json!({"host": "localhost", "delay": "1s"}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (422, Some("delay"))
    );
    assert_eq!(
        pb.get("/stats").await.1["dead"],
        4,
        "nothing purged by a rejected request"
    );

    let (status, answer) = post(&pb, "/dead-letters/purge", json!({"host": "localhost"})).await;
    assert_eq!((status, &answer["count"]), (200, &json!(3)), "{answer}");
    for id in &gone {
        assert_eq!(pb.get(&format!("/notifications/{id}")).await.0, 404);
    }
    assert_eq!(pb.notification(&keep).await["state"], "dead");
    let (_, answer) = post(&pb, "/dead-letters/purge", json!({"all": true})).await;
    assert_eq!(answer["count"], 1);
    assert_eq!(pb.get("/dead-letters").await.1["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_several_shards_the_list_is_one_newest_first_sequence() {
    let backend = support::Backend::start();
    if !backend.is_redis() {
        eprintln!("the embedded store and Postgres have one shard");
        return;
    }
    let receiver = support::Receiver::start().await;
    let pb = backend.postback(&[("POSTBACK_STORE_SHARDS", "3")]).await;
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(support::dead_one(&pb, &receiver).await);
    }
    let shards: std::collections::BTreeSet<&str> =
        ids.iter().map(|id| id.split('_').nth(1).unwrap()).collect();
    assert_eq!(shards.len(), 3, "spread over every shard: {ids:?}");

    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (_, page) = pb.get(&format!("/dead-letters?limit=2{cursor}")).await;
        for item in page["items"].as_array().unwrap() {
            seen.push(item["id"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(
        seen, ids,
        "newest first over all shards, no repeats, no gaps"
    );
    let (_, answer) = post(
        &pb,
        "/dead-letters/replay",
        json!({"all": true, "delay": "1h"}),
    )
    .await;
    assert_eq!(answer["count"], 7);
}
