//! Test support: a real `redis-server` on a free port in a temporary directory, a real
//! HTTP receiver that records what it gets, and `postback serve` as a child process.

// Each test binary uses a different part of this module.
#![allow(dead_code, unused_imports)]

pub mod connect_proxy;
pub mod fixtures;
pub mod instance;
pub mod json_text;
pub mod load;
pub mod postgres_server;
pub mod proxy;
pub mod receiver;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod signatures;
pub mod tenants;
pub mod tls_receiver;

pub use instance::Postback;
pub use postgres_server::PostgresServer;
pub use receiver::Receiver;
pub use redis_cluster::RedisCluster;
pub use redis_sentinel::{LyingSentinel, SentinelGroup};
pub use redis_server::RedisServer;
pub use tls_receiver::Pki;

use std::net::TcpListener;

use serde_json::json;

use postback::store::{EmbeddedStore, PostgresStore, RedisStore, Store};
use std::time::Duration;

/// How long a test waits for what should come at once (a delivery, a state).
pub const WAIT: Duration = Duration::from_secs(10);
/// How long a test waits for what takes a while on a busy machine (many deliveries
/// under a quota, several instances).
pub const LONG_WAIT: Duration = Duration::from_secs(20);

/// A fresh Redis, a receiver, and one postback instance on them with `env`.
pub async fn start(env: &[(&str, &str)]) -> (RedisServer, Receiver, Postback) {
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, env).await;
    (redis, receiver, pb)
}

/// Where a test of the core pipeline keeps its notifications, by
/// `POSTBACK_TEST_BACKEND` (`scripts/test.sh` runs those tests once per backend): a
/// standalone Redis (unset), a local Redis Cluster of 3 primaries (`cluster`: one for the
/// whole test process, `redis_cluster::shared`, each test on a key prefix of its own), the
/// embedded store in a temporary directory (`embedded`), or a Postgres of its own
/// (`postgres`); or over TLS with a client certificate, verified against a CA the test
/// made, a standalone Redis (`redis-tls`) or a Postgres at `sslmode=verify-full`
/// (`postgres-tls`).
pub enum Backend {
    Standalone(RedisServer),
    /// The process's shared cluster, and the key prefix of this test's instances.
    Cluster(&'static RedisCluster, String),
    Embedded(tempfile::TempDir),
    Postgres(PostgresServer),
    StandaloneTls(RedisServer, Pki),
    PostgresTls(PostgresServer, Pki),
}

impl Backend {
    pub fn start() -> Self {
        match std::env::var("POSTBACK_TEST_BACKEND").as_deref() {
            Ok("cluster") => Self::on_shared_cluster(),
            Ok("embedded") => Self::Embedded(tempfile::tempdir().unwrap()),
            Ok("postgres") => Self::Postgres(PostgresServer::start()),
            Ok("redis-tls") => {
                let pki = Pki::new();
                Self::StandaloneTls(RedisServer::start_tls(&pki), pki)
            }
            Ok("postgres-tls") => {
                let pki = Pki::new();
                Self::PostgresTls(PostgresServer::start_tls(&pki), pki)
            }
            _ => Self::Standalone(RedisServer::start()),
        }
    }

    /// The process's shared Redis Cluster (`redis_cluster::shared`), under a key prefix
    /// no other test of the process uses, so that tests share the cluster's start-up and
    /// nothing else.
    pub fn on_shared_cluster() -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self::Cluster(redis_cluster::shared(), format!("pbt{n}"))
    }

    /// A postback instance on this backend, with `env`.
    pub async fn postback(&self, env: &[(&str, &str)]) -> Postback {
        match self {
            Self::Standalone(redis) => Postback::start(redis, env).await,
            Self::Cluster(cluster, prefix) => {
                let mut all = env.to_vec();
                all.push(("POSTBACK_STORE_KEY_PREFIX", prefix));
                Postback::start_on_cluster(cluster, &all).await
            }
            Self::Embedded(dir) => Postback::start_embedded(dir.path(), env).await,
            Self::Postgres(pg) => Postback::start_on_postgres(pg, env).await,
            Self::StandaloneTls(redis, pki) => {
                let mut all = pki.store_env();
                all.push(("POSTBACK_STORE_REDIS_URL".into(), redis.tls_url()));
                Postback::start_in_env(&all, env).await
            }
            Self::PostgresTls(pg, pki) => {
                let url = ("POSTBACK_STORE_POSTGRES_URL".into(), pg.verified_url(pki));
                Postback::start_in_env(&[url], env).await
            }
        }
    }

    /// The store itself, for tests of the storage port below the API.
    pub async fn store(&self) -> Box<dyn Store> {
        use postback::config::{RedisTarget, RetentionSettings, StoreSettings};
        let (target, shards) = match self {
            Self::Embedded(dir) => {
                let store = EmbeddedStore::open(dir.path(), &RetentionSettings::default());
                return Box::new(store.unwrap());
            }
            Self::Postgres(pg) => {
                let (settings, retention) =
                    (StoreSettings::default(), RetentionSettings::default());
                let store = PostgresStore::connect(&pg.url(), &settings, &retention).await;
                return Box::new(store.unwrap());
            }
            Self::PostgresTls(pg, pki) => {
                let settings = StoreSettings::default();
                let url = pg.verified_url(pki);
                let retention = RetentionSettings::default();
                let store = PostgresStore::connect(&url, &settings, &retention).await;
                return Box::new(store.unwrap());
            }
            Self::StandaloneTls(redis, pki) => {
                let target = RedisTarget::Standalone(redis.tls_url());
                let settings = pki.store_settings();
                let retention = RetentionSettings::default();
                let store = RedisStore::connect(&target, 1, &settings, &retention).await;
                return Box::new(store.unwrap());
            }
            Self::Standalone(redis) => (RedisTarget::Standalone(redis.url()), 1),
            Self::Cluster(cluster, _) => {
                let seeds = cluster.urls().split(',').map(str::to_string).collect();
                (
                    RedisTarget::Cluster(seeds),
                    postback::config::CLUSTER_SHARDS,
                )
            }
        };
        let mut settings = StoreSettings::default();
        if let Self::Cluster(_, prefix) = self {
            settings.key_prefix = prefix.clone();
        }
        let retention = RetentionSettings::default();
        Box::new(
            RedisStore::connect(&target, shards, &settings, &retention)
                .await
                .unwrap(),
        )
    }

    /// Whether the store holds nothing, as far as it can be seen while `pb` runs on it:
    /// not one key in a standalone Redis but the instances' membership and the
    /// deployment's secrets; no notification
    /// in any state otherwise.
    pub async fn holds_nothing(&self, pb: &Postback) -> bool {
        if let Self::Standalone(redis) | Self::StandaloneTls(redis, _) = self {
            return redis.notification_keys().is_empty();
        }
        let (_, stats) = pb.get("/stats").await;
        ["scheduled", "in_flight", "dead", "finished"]
            .iter()
            .all(|state| stats[state] == 0)
    }

    /// How many shards postback uses on this store by default.
    pub fn shards(&self) -> usize {
        match self {
            Self::Cluster(..) => usize::from(postback::config::CLUSTER_SHARDS),
            _ => 1,
        }
    }

    /// Whether this is Redis, whose shards' replication `/stats` shows.
    pub fn is_redis(&self) -> bool {
        matches!(
            self,
            Self::Standalone(_) | Self::Cluster(..) | Self::StandaloneTls(..)
        )
    }

    /// Whether several instances can share this store (all but the embedded one).
    pub fn is_shared(&self) -> bool {
        !matches!(self, Self::Embedded(_))
    }
}

/// Like `start`, on the backend the environment chooses.
pub async fn start_any(env: &[(&str, &str)]) -> (Backend, Receiver, Postback) {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let pb = backend.postback(env).await;
    (backend, receiver, pb)
}

/// The `id` of each of a list's (or a batch answer's) `items`, in order.
pub fn item_ids(list: &serde_json::Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect()
}

/// The `error` of each attempt in a notification's history ("" for none).
pub fn errors(n: &serde_json::Value) -> Vec<String> {
    let history = n["history"].as_array().unwrap();
    history
        .iter()
        .map(|a| a["error"].as_str().unwrap_or("").to_string())
        .collect()
}

/// A port that was free a moment ago.
/// The value of the series whose line in a Prometheus exposition starts with `series`
/// (its name and labels).
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Writes `config` to `postback.toml` in `dir`; the path, for `POSTBACK_CONFIG`.
pub fn config_file(dir: &tempfile::TempDir, config: &str) -> String {
    let path = dir.path().join("postback.toml");
    std::fs::write(&path, config).unwrap();
    path.to_str().unwrap().to_string()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An actor's own pace, which the test chose: a producer between registrations, a
/// reader between pages, a careful client before it asks again, registrations kept in
/// milliseconds of their own. With `hold`, the only time tests let pass without waiting
/// for a condition (`eventually`, `found`, `Postback::wait_quiet`).
pub async fn pace(between: Duration) {
    tokio::time::sleep(between).await;
}

/// A state held for a set time because its length is what the test is about: an outage,
/// a frozen or stopped process, a connection left idle, an instance's idle seconds
/// counted, a soak's length and its quiet spells, a receiver slow on purpose.
pub async fn hold(length: Duration) {
    tokio::time::sleep(length).await;
}

/// Polls `check` every 20 ms until it is true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    found(timeout, || {
        let checked = check();
        async move { checked.await.then_some(()) }
    })
    .await
    .is_some()
}

/// `eventually` for the servers the tests start, outside any runtime: polls `check`
/// every 20 ms, blocking the thread, until it is true or `timeout` passes.
pub fn eventually_blocking(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `probe` every 20 ms until it finds something or `timeout` passes; what it found.
pub async fn found<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(seen) = probe().await {
            return Some(seen);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Registers a notification due after `delay`, to a receiver of its own, and waits
/// until it is delivered. Whatever was due before it has been claimed by then: a test
/// that asserts something due by then was not sent (or not sent again) asserts it after
/// this rather than after a pause.
pub async fn sent_after(pb: &Postback, delay: &str) {
    let marker = Receiver::start().await;
    let body = json!({"url": marker.url("/marker"), "body": {}, "delay": delay, "schedule": []});
    let id = pb.register(body).await;
    pb.wait_state(&id, "delivered", WAIT).await;
}

/// A notification dead after two failed attempts, each at an endpoint of its own: many
/// failures at one endpoint would open its circuit, and a last attempt waits for the
/// circuit's probe.
pub async fn dead_one(pb: &Postback, receiver: &Receiver) -> String {
    static ENDPOINTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = ENDPOINTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let url = receiver.url(&format!("/down/{n}?fail=99"));
    let id = pb
        .register(json!({"url": url, "body": {"order": 9}, "schedule": ["100ms"], "topic": "payment.succeeded"}))
        .await;
    pb.wait_state(&id, "dead", WAIT).await;
    id
}
