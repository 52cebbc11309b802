//! What types alone cannot check, across keys and sections: each problem named by its
//! key and what the value must be.

use std::time::Duration;

use anyhow::{bail, Context};

use super::store_tls::{CA_FILE, CERT_FILE, KEY_FILE, SERVER_NAME};
use super::{
    DeliverySettings, PostgresTarget, RedisTarget, RetentionSettings, SentinelTarget,
    ServerSettings, Settings, StoreSettings, StoreTarget, StoreTls, TraceSettings, CLUSTER_SHARDS,
};
use crate::domain::MAX_RESPONSE_BYTES;

/// The shortest `store.shard_lease`: it is renewed every half of it.
const MIN_SHARD_LEASE: Duration = Duration::from_millis(200);

/// Every check of one section's values, and of values across sections.
pub(super) fn settings(s: &Settings) -> anyhow::Result<()> {
    check_delivery(&s.delivery)?;
    check_server(&s.server)?;
    check_retention(&s.retention)?;
    check_traces(&s.traces)?;
    check_ops(s)?;
    check_endpoints(s)?;
    check(
        s.schedules.contains_key("default"),
        "schedules.default",
        "a default schedule is required",
    )
}

/// Where the notifications are kept, and on how many shards.
pub(super) fn store(s: &StoreSettings) -> anyhow::Result<(StoreTarget, u16)> {
    check(
        !s.key_prefix.is_empty() && !s.key_prefix.contains(['{', '}']),
        "store.key_prefix",
        "must be non-empty, without braces",
    )?;
    let store = store_target(s)?;
    let shards = match (s.shards, &store) {
        (Some(n), StoreTarget::Redis(_)) => n,
        (Some(_), StoreTarget::Embedded(_)) => {
            bail!("store.shards (POSTBACK_STORE_SHARDS): applies to Redis only; the embedded store has one shard")
        }
        (Some(_), StoreTarget::Postgres(_)) => {
            bail!("store.shards (POSTBACK_STORE_SHARDS): applies to Redis only; Postgres has one shard")
        }
        (None, StoreTarget::Redis(RedisTarget::Cluster(_))) => CLUSTER_SHARDS,
        (None, _) => 1,
    };
    check(shards >= 1, "store.shards", "must be at least 1")?;
    check(
        s.shard_lease >= MIN_SHARD_LEASE,
        "store.shard_lease",
        "must be at least 200ms (it is renewed every half of it)",
    )?;
    check_replica_acks(s, &store)?;
    check_tls(s, &store)?;
    Ok((store, shards))
}

fn check_delivery(d: &DeliverySettings) -> anyhow::Result<()> {
    check(
        d.concurrency >= 1,
        "delivery.concurrency",
        "must be at least 1",
    )?;
    check(
        d.claim_batch >= 1 && d.claim_batch <= 1000,
        "delivery.claim_batch",
        "must be between 1 and 1000",
    )?;
    check(
        !d.max_timeout.is_zero(),
        "delivery.max_timeout",
        "must be more than 0s",
    )?;
    check(
        !d.timeout.is_zero() && d.timeout <= d.max_timeout,
        "delivery.timeout",
        "must be more than 0s and at most delivery.max_timeout",
    )?;
    check(
        d.lease >= d.max_timeout + Duration::from_secs(5),
        "delivery.lease",
        "must outlast delivery.max_timeout by at least 5s",
    )?;
    check(
        d.response_bytes <= MAX_RESPONSE_BYTES,
        "delivery.response_bytes",
        "must be at most 65536 (64 KiB)",
    )?;
    check(
        !d.max_idle_sleep.is_zero(),
        "delivery.max_idle_sleep",
        "must be more than 0s",
    )?;
    check(
        (1..=100_000).contains(&d.burst),
        "delivery.burst",
        "must be from 1 to 100000",
    )?;
    check(
        d.host_concurrency >= 1,
        "delivery.host_concurrency",
        "must be at least 1",
    )?;
    check(
        !d.breaker_cooldown.is_zero(),
        "delivery.breaker_cooldown",
        "must be more than 0s",
    )?;
    check(
        d.tenant_reserve.get() <= 90,
        "delivery.tenant_reserve",
        "must be from 0% to 90% (each tenant may hold the rest)",
    )?;
    check(
        d.jitter.get() <= 90,
        "delivery.jitter",
        "must be from 0% to 90%",
    )
}

fn check_server(s: &ServerSettings) -> anyhow::Result<()> {
    check(
        s.max_body_bytes >= 1024,
        "server.max_body_bytes",
        "must be at least 1024",
    )?;
    check(
        s.max_batch_bytes >= s.max_body_bytes,
        "server.max_batch_bytes",
        "must be at least server.max_body_bytes",
    )?;
    check(
        s.max_concurrent_requests >= 1,
        "server.max_concurrent_requests",
        "must be at least 1",
    )?;
    check(
        s.max_connections >= 1,
        "server.max_connections",
        "must be at least 1",
    )?;
    check(
        s.worker_threads <= 256,
        "server.worker_threads",
        "must be from 0 (one per CPU core) to 256",
    )?;
    check(
        s.portal_secret
            .as_ref()
            .is_none_or(|p| p.len() >= crate::tenancy::portal::MIN_SECRET_BYTES),
        "server.portal_secret",
        "must be at least 32 bytes (e.g. `openssl rand -hex 32`)",
    )?;
    for (ok, key) in [
        (!s.header_timeout.is_zero(), "server.header_timeout"),
        (!s.idle_timeout.is_zero(), "server.idle_timeout"),
        (!s.body_timeout.is_zero(), "server.body_timeout"),
    ] {
        check(ok, key, "must be more than 0s")?;
    }
    Ok(())
}

/// Replica acknowledgements are Redis's: the embedded store has no replicas (it fsyncs
/// each write before answering instead).
fn check_replica_acks(s: &StoreSettings, store: &StoreTarget) -> anyhow::Result<()> {
    if s.replica_acks > 0 && matches!(store, StoreTarget::Embedded(_)) {
        bail!("store.replica_acks (POSTBACK_STORE_REPLICA_ACKS): applies to Redis only; the embedded store has no replicas and fsyncs each write before answering")
    }
    if s.fsync_acks && matches!(store, StoreTarget::Embedded(_)) {
        bail!("store.fsync_acks (POSTBACK_STORE_FSYNC_ACKS): applies to Redis only; the embedded store fsyncs each write before answering")
    }
    if (s.replica_acks > 0 || s.fsync_acks) && matches!(store, StoreTarget::Postgres(_)) {
        bail!("store.replica_acks (POSTBACK_STORE_REPLICA_ACKS): applies to Redis only; on Postgres a write is answered once committed, and synchronous_commit and synchronous_standby_names say what a commit waits for")
    }
    check(
        s.replica_ack_timeout >= Duration::from_millis(10)
            && s.replica_ack_timeout <= Duration::from_secs(60),
        "store.replica_ack_timeout",
        "must be from 10ms to 1m",
    )
}

/// The embedded store when no Redis is named, otherwise the sentinels, the standalone URL
/// or the cluster's seed nodes, each checked to be a Redis URL.
fn store_target(store: &StoreSettings) -> anyhow::Result<StoreTarget> {
    let sentinels = SentinelTarget::read(store)?;
    if let Some(url) = &store.postgres_url {
        let key = "store.postgres_url (POSTBACK_STORE_POSTGRES_URL)";
        if store.redis_url.is_some() || !store.cluster_urls.is_empty() || sentinels.is_some() {
            bail!("{key}: set it or store.redis_url / store.cluster_urls / store.redis_sentinels, not both");
        }
        PostgresTarget::read(url, store)?;
        return Ok(StoreTarget::Postgres(url.clone()));
    }
    if let Some(sentinels) = sentinels {
        return Ok(StoreTarget::Redis(RedisTarget::Sentinel(sentinels)));
    }
    // A string that does not parse cannot be told apart into its parts, its password
    // among them: none of it is shown.
    let is_url = |url: &str, key: &str| {
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .with_context(|| format!("{key}: not a Redis URL"))?;
        match info.addr() {
            redis::ConnectionAddr::TcpTls { insecure: true, .. } => bail!("{key}: #insecure would take any certificate; give store.tls_ca_file the CA that signed the server's instead"),
            _ => Ok(()),
        }
    };
    if store.cluster_urls.is_empty() {
        let Some(url) = store.redis_url.clone() else {
            check(
                !store.data_dir.as_os_str().is_empty(),
                "store.data_dir (POSTBACK_STORE_DATA_DIR)",
                "must name a directory",
            )?;
            return Ok(StoreTarget::Embedded(store.data_dir.clone()));
        };
        is_url(&url, "store.redis_url (POSTBACK_STORE_REDIS_URL)")?;
        return Ok(StoreTarget::Redis(RedisTarget::Standalone(url)));
    }
    if store.redis_url.is_some() {
        bail!(
            "store.cluster_urls (POSTBACK_STORE_CLUSTER_URLS): set it or store.redis_url, not both"
        );
    }
    let seeds: Vec<String> = store.cluster_urls.iter().cloned().collect();
    if seeds.iter().any(|s| is_tls(s)) != seeds.iter().all(|s| is_tls(s)) {
        bail!("store.cluster_urls (POSTBACK_STORE_CLUSTER_URLS): some seeds are rediss:// and some redis://; a cluster is reached over TLS or not, every node alike")
    }
    for (i, url) in seeds.iter().enumerate() {
        let key = format!(
            "store.cluster_urls (POSTBACK_STORE_CLUSTER_URLS), seed {}",
            i + 1
        );
        is_url(url, &key)?;
    }
    Ok(StoreTarget::Redis(RedisTarget::Cluster(seeds)))
}

fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://")
}

/// The TLS keys, read and checked where they apply; refused where they would not, so
/// that nobody believes a connection verified that is not.
fn check_tls(s: &StoreSettings, store: &StoreTarget) -> anyhow::Result<()> {
    let files = [
        (CA_FILE, s.tls_ca_file.is_some()),
        (CERT_FILE, s.tls_cert_file.is_some()),
        (KEY_FILE, s.tls_key_file.is_some()),
        (SERVER_NAME, s.tls_server_name.is_some()),
    ];
    let set = files.iter().find(|(_, set)| *set).map(|(key, _)| *key);
    let redis = match store {
        StoreTarget::Embedded(_) => match set {
            Some(key) => {
                bail!("{key}: applies to Redis and Postgres only; the embedded store is a file")
            }
            None => return Ok(()),
        },
        StoreTarget::Postgres(_) if s.tls_server_name.is_some() => {
            bail!("{SERVER_NAME}: applies to Redis only; with Postgres, sslmode=verify-full checks the URL's host, and libpq's hostaddr= gives another address to connect to")
        }
        StoreTarget::Postgres(_) => return Ok(()),
        StoreTarget::Redis(redis) => redis,
    };
    let tls = match redis {
        RedisTarget::Standalone(url) => is_tls(url),
        RedisTarget::Cluster(seeds) if s.tls_server_name.is_some() => {
            bail!("{SERVER_NAME}: does not apply to a Redis Cluster, whose nodes are checked against the names the cluster announces them by (cluster-announce-hostname with cluster-preferred-endpoint-type hostname, or certificates that carry their IP addresses); seeds: {}", seeds.len())
        }
        RedisTarget::Cluster(seeds) => seeds.iter().any(|u| is_tls(u)),
        RedisTarget::Sentinel(t) => t.sentinels_tls || t.nodes_tls,
    };
    if let (Some(key), false) = (set, tls) {
        bail!("{key}: no connection to Redis is TLS, so it would apply to none: use rediss:// URLs, or store.redis_sentinels_tls (POSTBACK_STORE_REDIS_SENTINELS_TLS=true) through Sentinel")
    }
    StoreTls::read(s).map(drop)
}

fn check_retention(r: &RetentionSettings) -> anyhow::Result<()> {
    check_limits(r, "retention")?;
    let positive = "must be more than 0s";
    check(
        !r.sweep_interval.is_zero(),
        "retention.sweep_interval",
        positive,
    )?;
    check(
        !r.audit_max_age.is_zero(),
        "retention.audit_max_age",
        positive,
    )?;
    Ok(())
}

/// The limits of `[retention]`, or of a tenant's (`section` names where they are set).
pub(super) fn check_limits(r: &RetentionSettings, section: &str) -> anyhow::Result<()> {
    let positive = "must be more than 0s";
    check(
        !r.dead_max_age.is_zero(),
        &format!("{section}.dead_max_age"),
        positive,
    )?;
    check(
        !r.finished_max_age.is_zero(),
        &format!("{section}.finished_max_age"),
        positive,
    )?;
    check(
        r.dead_max_count >= 1,
        &format!("{section}.dead_max_count"),
        "must be at least 1",
    )
}

fn check_traces(t: &TraceSettings) -> anyhow::Result<()> {
    if let Some(endpoint) = &t.otlp_endpoint {
        let url = url::Url::parse(endpoint).ok();
        check(
            url.is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some()),
            "traces.otlp_endpoint",
            "must be an http:// or https:// URL, e.g. http://127.0.0.1:4318",
        )?;
    }
    check(
        (0.0..=1.0).contains(&t.sample_ratio),
        "traces.sample_ratio",
        "must be between 0 and 1",
    )?;
    check(
        !t.service_name.is_empty(),
        "traces.service_name",
        "must not be empty",
    )
}

fn check_ops(s: &Settings) -> anyhow::Result<()> {
    check(
        !s.ops.window.is_zero() && s.ops.window <= Duration::from_secs(3600),
        "ops.window",
        "must be more than 0s and at most 1h",
    )?;
    let day = Duration::from_secs(24 * 3600);
    check(
        !s.ops.failing_after.is_zero() && s.ops.failing_after <= day,
        "ops.failing_after",
        "must be more than 0s and at most 1d",
    )
}

/// At most 30 days: by then every schedule's notifications have died, so a pause would
/// hold nothing; a longer one is more likely a slip (`12d` for `12h`) than a wish.
fn check_endpoints(s: &Settings) -> anyhow::Result<()> {
    let most = Duration::from_secs(30 * 24 * 3600);
    let pause_after = |key: &str, after: Duration| {
        check(after <= most, key, "must be at most 30d (0s: never pause)")
    };
    pause_after("endpoints.pause_after", s.endpoints.pause_after)?;
    check(
        s.endpoints.probe_interval <= Duration::from_secs(24 * 3600),
        "endpoints.probe_interval",
        "must be at most 1d (0s: never probe)",
    )?;
    for (name, t) in &s.tenants {
        if let Some(after) = t.pause_after {
            pause_after(&format!("tenants.{name}.pause_after"), after)?;
        }
    }
    Ok(())
}

pub(super) fn check(ok: bool, key: &str, problem: &str) -> anyhow::Result<()> {
    if ok {
        Ok(())
    } else {
        bail!("{key}: {problem}")
    }
}
