//! The Postgres store in operation: its schema created and upgraded by versioned
//! migrations (and a newer one refused), several instances on one database with one of
//! them killed (`kill -9`) mid-burst, and Postgres itself killed and restarted under
//! load. Nothing the API accepted is lost; what was in flight may arrive twice.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::load::{accepted, Answer, Load};
use support::{Postback, PostgresServer, Receiver};

/// A steady producer (8 tasks) of notifications due at once, retrying each `503` under
/// its `Idempotency-Key`.
fn load(pb: &Postback, receiver: &Receiver) -> Load {
    let url = receiver.url("/r");
    Load::start(
        pb.url("/notify"),
        8,
        Duration::from_millis(10),
        move |n| json!({"url": url, "body": {"n": n}, "schedule": ["100ms", "200ms"]}),
    )
}

/// Waits until every accepted notification reached the receiver and `/stats` counts
/// exactly them as finished; how many arrived more than once.
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

fn migrate(pg: &PostgresServer) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_postback"))
        .arg("migrate")
        .env_clear()
        .env("POSTBACK_STORE_POSTGRES_URL", pg.url())
        .env("POSTBACK_STORE_CONNECT_WAIT", "1s")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postback_migrate_creates_the_schema_once_and_an_instance_uses_it() {
    let pg = PostgresServer::start();
    let first = migrate(&pg);
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{said}");
    assert!(
        said.contains("the schema postback is at version 1"),
        "{said}"
    );
    assert!(
        migrate(&pg).status.success(),
        "migrating again changes nothing"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM postback.migrations").trim(),
        "1"
    );

    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    let id = pb
        .register(json!({"url": receiver.url("/ok"), "body": {"a": 1}}))
        .await;
    pb.wait_state(&id, "delivered", support::WAIT).await;
    assert!(
        !pb.logs().contains("schema migrated"),
        "already at version 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_this_build_is_refused_naming_the_key() {
    let pg = PostgresServer::start();
    assert!(migrate(&pg).status.success());
    pg.psql("INSERT INTO postback.migrations (version) VALUES (99)");
    let said = Postback::refused_start(&[("POSTBACK_STORE_POSTGRES_URL", &pg.url())]);
    assert!(
        said.contains("store.postgres_url (POSTBACK_STORE_POSTGRES_URL)")
            && said.contains("version 99, newer than this build knows"),
        "{said}"
    );
}

#[test]
fn an_unreachable_database_stops_start_up_naming_the_key() {
    let url = format!("postgres://postgres@127.0.0.1:{}/x", support::free_port());
    let said = Postback::refused_start(&[("POSTBACK_STORE_POSTGRES_URL", &url)]);
    assert!(
        said.contains("store.postgres_url (POSTBACK_STORE_POSTGRES_URL): Postgres is unreachable"),
        "{said}"
    );
    let both = Postback::refused_start(&[
        ("POSTBACK_STORE_POSTGRES_URL", &url),
        ("POSTBACK_STORE_REDIS_URL", "redis://127.0.0.1:1"),
    ]);
    assert!(both.contains("not both"), "{both}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_instances_killed_mid_burst_loses_nothing_accepted() {
    let pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let settings = [
        ("POSTBACK_DELIVERY_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_MAX_TIMEOUT", "1s"),
        ("POSTBACK_DELIVERY_LEASE", "6s"),
    ];
    let mut doomed = Postback::start_on_postgres(&pg, &settings).await;
    let survivor = Postback::start_on_postgres(&pg, &settings).await;
    let producer = load(&survivor, &receiver);
    assert!(receiver.wait_for(300, support::LONG_WAIT).await);
    doomed.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answers = producer.stop().await;
    assert!(
        answers.iter().all(|a| a.status == 202),
        "the survivor answered every one"
    );

    let twice = all_delivered(&survivor, &receiver, &answers).await;
    eprintln!(
        "{} accepted by two instances on one database, one killed mid-burst; {twice} sent twice",
        accepted(&answers).len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_and_restarted_under_load_loses_nothing_accepted() {
    let mut pg = PostgresServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start_on_postgres(&pg, &[]).await;
    let producer = load(&pb, &receiver);
    tokio::time::sleep(Duration::from_secs(2)).await;

    pg.kill();
    let not_ready = support::eventually(Duration::from_secs(5), || async {
        pb.status_without_token("/readyz").await == 503
    })
    .await;
    assert!(not_ready, "/readyz turns 503 while Postgres is away");
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.restart();
    let restarted = Instant::now();
    let ready = support::eventually(Duration::from_secs(15), || async {
        pb.status_without_token("/readyz").await == 200
    })
    .await;
    assert!(ready, "{}", pb.logs());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answers = producer.stop().await;

    let refused: Vec<_> = answers.iter().filter(|a| a.status != 202).collect();
    assert!(
        refused
            .iter()
            .all(|a| a.status == 503 && a.code.as_deref() == Some("store_unavailable")),
        "while Postgres is away registrations get 503 store_unavailable: {:?}",
        refused.iter().find(|a| a.status != 503)
    );
    assert!(!refused.is_empty(), "the outage was under load");
    assert!(
        answers.iter().any(|a| a.status == 202 && a.at > restarted),
        "accepting again after the restart:\n{}",
        pb.logs()
    );
    let twice = all_delivered(&pb, &receiver, &answers).await;
    eprintln!(
        "{} accepted, {} refused with 503 across a kill -9 of Postgres; {twice} sent twice",
        accepted(&answers).len(),
        refused.len()
    );
}
