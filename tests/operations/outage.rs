//! Redis going away under load: stopped for ten seconds, or killed (`kill -9`) and
//! restarted from its append-only file. The API answers 503 quickly while it is gone, the workers wait
//! and resume by themselves, the log says so once rather than once per request, and
//! every notification the API accepted is delivered.

use crate::support;

use std::time::{Duration, Instant};

use support::load::{accepted, all_delivered, refused, steady};
use support::{Postback, Receiver, RedisServer};

fn warnings(pb: &Postback) -> Vec<String> {
    pb.logs()
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(str::to_string)
        .collect()
}

/// The most lines any one warning took: its message without the time, the level and the
/// fields (`key=value`), counted over `lines`.
fn most_repeated(lines: &[String]) -> (usize, String) {
    let mut counts = std::collections::HashMap::<String, usize>::new();
    for line in lines {
        let message: Vec<&str> = line
            .split_whitespace()
            .skip(2)
            .take_while(|word| !word.contains('='))
            .collect();
        *counts.entry(message.join(" ")).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(message, n)| (n, message))
        .max()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_for_ten_seconds_under_load_loses_nothing_accepted() {
    let mut redis = RedisServer::start_persistent("everysec");
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, &[]).await;
    let producer = steady(&pb, &receiver, Duration::from_millis(20));
    assert!(producer.accepted_more(100).await, "under load");

    redis.shut_down();
    let stopped = Instant::now();
    let not_ready = support::eventually(Duration::from_secs(3), || async {
        pb.status_without_token("/readyz").await == 503
    })
    .await;
    assert!(not_ready, "/readyz turns 503 while Redis is away");
    // Time is the point: an outage of ten seconds.
    support::hold(Duration::from_secs(10).saturating_sub(stopped.elapsed())).await;
    redis.restart();
    let restarted = Instant::now();
    let ready = support::eventually(Duration::from_secs(15), || async {
        pb.status_without_token("/readyz").await == 200
    })
    .await;
    assert!(ready, "{}", pb.logs());
    let ready_after = restarted.elapsed();
    assert!(producer.accepted_more(100).await, "accepting again");
    let answers = producer.stop().await;

    let refused = refused(&answers, "Redis");
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
    let (repeated, message) = most_repeated(&noise);
    assert!(
        repeated <= 2 && noise.len() <= 16,
        "the log says what happened once, not per request ({message:?} {repeated} times):\n{}",
        noise.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_from_its_append_only_file_loses_nothing_accepted() {
    let mut redis = RedisServer::start_persistent("always");
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, &[]).await;
    let producer = steady(&pb, &receiver, Duration::from_millis(20));
    assert!(producer.accepted_more(100).await, "under load");

    redis.stop();
    redis.restart();
    let restarted = Instant::now();
    assert!(producer.accepted_more(50).await, "accepting again");
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
