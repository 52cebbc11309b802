//! Redis going away under load: stopped for ten seconds, or killed (`kill -9`) and
//! restarted from its append-only file. The API answers 503 quickly while it is gone, the workers wait
//! and resume by themselves, the log says so once rather than once per request, and
//! every notification the API accepted is delivered.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::load::{accepted, Answer, Load};
use support::{Postback, Receiver, RedisServer};

/// Starts a steady producer (8 tasks) registering notifications due at once, each
/// retrying a `503` under the same `Idempotency-Key`: a registration stored just before
/// Redis went away, but answered `503`, is then accepted once rather than stored unseen.
fn load(pb: &Postback, receiver: &Receiver) -> Load {
    let url = receiver.url("/r");
    Load::start(
        pb.url("/notify"),
        8,
        Duration::from_millis(20),
        move |n| json!({"url": url, "body": {"n": n}, "schedule": ["100ms", "200ms"]}),
    )
}

/// Waits until the receiver has had every accepted notification and `/stats` counts
/// them all as finished; returns how many arrived more than once.
async fn all_delivered(pb: &Postback, receiver: &Receiver, answers: &[Answer]) -> usize {
    let ids = accepted(answers);
    let done = support::eventually(Duration::from_secs(60), || async {
        let (_, stats) = pb.get("/stats").await;
        stats["finished"].as_u64() == Some(ids.len() as u64)
    })
    .await;
    let seen = receiver.per_id();
    let missing: Vec<_> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(
        done && missing.is_empty(),
        "{} accepted, {} never arrived (e.g. {:?}); stats {}\n{}",
        ids.len(),
        missing.len(),
        missing.first(),
        pb.get("/stats").await.1,
        pb.logs()
    );
    seen.values().filter(|n| **n > 1).count()
}

fn warnings(pb: &Postback) -> Vec<String> {
    pb.logs()
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_for_ten_seconds_under_load_loses_nothing_accepted() {
    let mut redis = RedisServer::start_persistent("everysec");
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, &[]).await;
    let producer = load(&pb, &receiver);
    tokio::time::sleep(Duration::from_secs(3)).await;

    redis.shut_down();
    let stopped = Instant::now();
    let not_ready = support::eventually(Duration::from_secs(3), || async {
        pb.status_without_token("/readyz").await == 503
    })
    .await;
    assert!(not_ready, "/readyz turns 503 while Redis is away");
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(stopped.elapsed())).await;
    redis.restart();
    let restarted = Instant::now();
    let ready = support::eventually(Duration::from_secs(15), || async {
        pb.status_without_token("/readyz").await == 200
    })
    .await;
    assert!(ready, "{}", pb.logs());
    let ready_after = restarted.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answers = producer.stop().await;

    let refused: Vec<_> = answers.iter().filter(|a| a.status != 202).collect();
    assert!(
        refused
            .iter()
            .all(|a| a.status == 503 && a.code.as_deref() == Some("store_unavailable")),
        "while Redis is away registrations get 503 store_unavailable: {:?}",
        refused.iter().find(|a| a.status != 503)
    );
    let slowest = answers.iter().map(|a| a.took).max().unwrap();
    assert!(
        slowest < Duration::from_secs(3),
        "every answer within 3 s, slowest {slowest:?}"
    );
    let first_accepted_after = answers
        .iter()
        .filter(|a| a.status == 202 && a.at > restarted)
        .map(|a| a.at - restarted)
        .min()
        .expect("registrations are accepted again after the restart");
    let twice = all_delivered(&pb, &receiver, &answers).await;

    let noise = warnings(&pb);
    eprintln!(
        "{} accepted, {} refused with 503 in a 10 s outage; ready {ready_after:?} and accepting {first_accepted_after:?} after Redis came back; {twice} sent twice; {} warning lines",
        accepted(&answers).len(),
        refused.len(),
        noise.len()
    );
    assert!(refused.len() > 40, "the outage was under load");
    assert!(
        noise.len() <= 8,
        "the log says what happened once, not per request:\n{}",
        noise.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_from_its_append_only_file_loses_nothing_accepted() {
    let mut redis = RedisServer::start_persistent("always");
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, &[]).await;
    let producer = load(&pb, &receiver);
    tokio::time::sleep(Duration::from_secs(2)).await;

    redis.stop();
    redis.restart();
    let restarted = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answers = producer.stop().await;

    assert!(
        answers.iter().any(|a| a.status == 202 && a.at > restarted),
        "accepting again after the restart:\n{}",
        pb.logs()
    );
    let twice = all_delivered(&pb, &receiver, &answers).await;
    eprintln!(
        "{} accepted across a kill -9 of Redis; {twice} sent twice",
        accepted(&answers).len()
    );
}
