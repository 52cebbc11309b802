//! Every store over TLS, against real servers started with certificates the test makes
//! (`support::Pki`: a CA, a server certificate for `127.0.0.1` and `localhost`, a
//! client certificate, and a CA that signed neither), each server requiring the client
//! certificate: a standalone Redis (`rediss://`), Redis through three sentinels (the
//! sentinels and the data nodes over TLS, replicating over TLS), a Redis Cluster of
//! three primaries (`tls-cluster yes`), and Postgres (`ssl = on`, `hostssl` only). On
//! each a registration is delivered, and a wrong CA, a wrong name and a missing client
//! certificate are each refused at start, the setting named (on a cluster, whose nodes
//! are checked against the names it announces, `store.tls_server_name` is refused by
//! the configuration's check). Through Sentinel and on the cluster a primary is killed
//! under a producer, and with `store.replica_acks = 1` nothing answered `202` is lost.
//! The conformance suite's store paths run over TLS as well: `scripts/test.sh` runs a
//! part of it on the `redis-tls` and `postgres-tls` backends.

use crate::support;

use std::time::Duration;

use serde_json::json;

use support::load;
use support::{Pki, Postback, PostgresServer, Receiver, RedisCluster, RedisServer};
use support::{SentinelGroup, WAIT};

/// The variables of `store`, as `Postback::refused_start` takes them.
fn borrowed(store: &[(String, String)]) -> Vec<(&str, &str)> {
    store
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// `store` with `variable` set to `value` (or taken out, with none).
fn with(store: &[(String, String)], variable: &str, value: Option<&str>) -> Vec<(String, String)> {
    let mut changed: Vec<(String, String)> = store
        .iter()
        .filter(|(k, _)| k != variable)
        .cloned()
        .collect();
    if let Some(value) = value {
        changed.push((variable.into(), value.into()));
    }
    changed
}

/// Asserts that postback refuses to start on `store` when it trusts another CA, checks
/// another name (`rename`, the variable that sets the name), or presents no client
/// certificate, each time naming the setting in question.
fn refuses_what_does_not_verify(store: &[(String, String)], pki: &Pki, rename: &str) {
    let other_ca = pki.other_ca.display().to_string();
    let no_certificate = with(store, "POSTBACK_STORE_TLS_CERT_FILE", None);
    let renamed = rename
        .trim_start_matches("POSTBACK_")
        .to_lowercase()
        .replacen('_', ".", 1);
    let faults = [
        (
            with(store, "POSTBACK_STORE_TLS_CA_FILE", Some(&other_ca)),
            "store.tls_ca_file",
        ),
        (with(store, rename, Some("other.example")), renamed.as_str()),
        (
            with(&no_certificate, "POSTBACK_STORE_TLS_KEY_FILE", None),
            "store.tls_cert_file",
        ),
    ];
    for (env, named) in faults {
        let said = Postback::refused_start(&borrowed(&env));
        assert!(said.contains(named), "names {named}:\n{said}");
        eprintln!(
            "refused ({named}): {}",
            said.trim().lines().last().unwrap_or("")
        );
        assert!(
            !said.contains("waited"),
            "refused at once, not waited out:\n{said}"
        );
    }
}

/// Registers one notification and waits until it is delivered; prints how the
/// instance said it reached its store, and the delivery.
async fn delivers(pb: &Postback, receiver: &Receiver) {
    let id = pb
        .register(json!({"url": receiver.url("/paid"), "body": {"over": "tls"}}))
        .await;
    let seen = pb.wait_state(&id, "delivered", WAIT).await;
    let logs = pb.logs();
    let connected = logs.lines().find(|l| l.contains("store connected"));
    eprintln!(
        "{}\n{id} {} after {} attempt",
        connected.unwrap_or_default(),
        seen["state"],
        seen["attempts"]
    );
}

/// A steady producer registers while `fail_over` kills a primary and waits until
/// another took over; every registration answered `202` is then delivered (and nothing
/// else was registered on `pb` before).
async fn nothing_accepted_is_lost(pb: &Postback, receiver: &Receiver, fail_over: impl FnOnce()) {
    let producer = load::steady(pb, receiver, Duration::from_millis(20));
    assert!(producer.accepted_more(20).await, "{}", pb.logs());
    tokio::task::block_in_place(fail_over);
    assert!(
        producer.accepted_more(20).await,
        "registrations go on after the failover:\n{}",
        pb.logs()
    );
    let answers = producer.stop().await;
    let twice = load::all_delivered(pb, receiver, &answers).await;
    eprintln!(
        "over TLS through a failover: {} answered 202, {} refused with 503, all {} delivered, {twice} sent twice",
        load::accepted(&answers).len(),
        answers.iter().filter(|a| a.status == 503).count(),
        load::accepted(&answers).len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_redis_over_tls_delivers_and_refuses_what_does_not_verify() {
    let pki = Pki::new();
    let redis = RedisServer::start_tls(&pki);
    let receiver = Receiver::start().await;
    let mut store = pki.store_env();
    store.push(("POSTBACK_STORE_REDIS_URL".into(), redis.tls_url()));
    let pb = Postback::start_in_env(&store, &[]).await;
    delivers(&pb, &receiver).await;
    let (_, ready) = pb.get("/readyz").await;
    assert_eq!(ready["durability"]["kind"], "rdb", "{ready}");
    refuses_what_does_not_verify(&store, &pki, "POSTBACK_STORE_TLS_SERVER_NAME");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinels_over_tls_a_failover_loses_nothing_accepted() {
    let pki = Pki::new();
    let mut group = SentinelGroup::start_tls(&pki);
    let receiver = Receiver::start().await;
    let mut store = pki.store_env();
    store.push((
        "POSTBACK_STORE_REDIS_SENTINELS".into(),
        group.tls_addresses(),
    ));
    store.push(("POSTBACK_STORE_REDIS_SENTINELS_TLS".into(), "true".into()));
    refuses_what_does_not_verify(
        &store,
        &pki,
        "POSTBACK_STORE_REDIS_SENTINELS_TLS_SERVER_NAME",
    );
    let renamed = with(
        &store,
        "POSTBACK_STORE_TLS_SERVER_NAME",
        Some("other.example"),
    );
    let said = Postback::refused_start(&borrowed(&renamed));
    assert!(
        said.contains("store.tls_server_name"),
        "the data nodes' name:\n{said}"
    );

    let env = [("POSTBACK_STORE_REPLICA_ACKS", "1")];
    let pb = Postback::start_in_env(&store, &env).await;
    nothing_accepted_is_lost(&pb, &receiver, || {
        let old = group.kill_primary();
        group.wait_failover(old);
    })
    .await;
    delivers(&pb, &receiver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_over_tls_a_failover_loses_nothing_accepted() {
    let pki = Pki::new();
    let mut cluster = RedisCluster::start_tls(3, 1, &pki);
    let receiver = Receiver::start().await;
    let mut store = pki.store_env();
    store.push(("POSTBACK_STORE_CLUSTER_URLS".into(), cluster.tls_urls()));
    refuses_what_does_not_verify(&store, &pki, "POSTBACK_STORE_TLS_SERVER_NAME");

    let env = [("POSTBACK_STORE_REPLICA_ACKS", "1")];
    let pb = Postback::start_in_env(&store, &env).await;
    nothing_accepted_is_lost(&pb, &receiver, || {
        let victim = cluster.primary_of("{postback:0}", 0);
        cluster.kill(victim);
        cluster.wait_failover("{postback:0}", victim);
    })
    .await;
    delivers(&pb, &receiver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_at_verify_full_delivers_and_refuses_what_does_not_verify() {
    let pki = Pki::new();
    let pg = PostgresServer::start_tls(&pki);
    let receiver = Receiver::start().await;
    let url = pg.verified_url(&pki);
    let pb = Postback::start_on(("POSTBACK_STORE_POSTGRES_URL", &url), &[]).await;
    delivers(&pb, &receiver).await;
    let (_, ready) = pb.get("/readyz").await;
    assert_eq!(ready["durability"]["kind"], "wal", "{ready}");

    let other_ca = pki.other_ca.display().to_string();
    let ca = pki.ca.display().to_string();
    let (cert, key) = (pki.client_cert.display(), pki.client_key.display());
    let faults = [
        (url.replace(&ca, &other_ca), "sslrootcert"),
        (
            format!(
                "host=other.example hostaddr=127.0.0.1 port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={ca} sslcert={cert} sslkey={key}",
                pg.port
            ),
            "is not for `other.example`",
        ),
        (
            url.replace(&format!("&sslcert={cert}&sslkey={key}"), ""),
            "store.tls_cert_file",
        ),
    ];
    for (url, named) in faults {
        let said = Postback::refused_start(&[("POSTBACK_STORE_POSTGRES_URL", &url)]);
        assert!(said.contains(named), "names {named}:\n{said}");
        eprintln!(
            "refused ({named}): {}",
            said.trim().lines().last().unwrap_or("")
        );
        assert!(
            said.contains("store.postgres_url") || named == "store.tls_cert_file",
            "{said}"
        );
    }
}
