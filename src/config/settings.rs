//! The settings as they are written: every section of the file and its defaults, read
//! into typed values (`Schedule`, `Quota`, `Percent`, `Role`, durations) so that a bad
//! one is refused as it is read. What one setting cannot check alone is `checks.rs`'s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Percent, ProfileSettings, StringList};
use crate::delivery::policy::{Limits, Quota};
use crate::domain::Schedule;
use crate::tenancy::access::Role;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub store: StoreSettings,
    pub delivery: DeliverySettings,
    pub retention: RetentionSettings,
    pub signing: SigningSettings,
    pub log: LogSettings,
    pub metrics: MetricsSettings,
    pub traces: TraceSettings,
    pub ops: OpsSettings,
    pub endpoints: EndpointSettings,
    pub events: EventSettings,
    pub schedules: BTreeMap<String, Schedule>,
    /// Named bundles of a schedule and a success rule (`profile` on `POST /notify`).
    pub profiles: BTreeMap<String, ProfileSettings>,
    /// Rate-limit quotas per `rate_key` of the default tenant, overriding
    /// `delivery.rate_limit`.
    pub quotas: BTreeMap<String, Quota>,
    /// Per-`rate_key` secrets of earlier builds: refused at start-up, since a rate key is
    /// the caller's to choose; secrets belong to tenants now.
    pub secrets: BTreeMap<String, StringList>,
    /// API tokens by name (the actor in the audit log).
    pub tokens: BTreeMap<String, TokenSettings>,
    /// Tenants by name.
    pub tenants: BTreeMap<String, TenantSettings>,
}

/// One API token: the SHA-256 of its value, its tenant (or `*`) and roles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    pub sha256: String,
    pub tenant: String,
    pub roles: Vec<Role>,
}

/// What is a tenant's own: its signing secrets, the default quota of its rate keys and
/// quotas of some, and the callback hosts it may use (any, when unset).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantSettings {
    pub secrets: StringList,
    /// ed25519 signing keys (`whsk_…`), whose public halves `GET /signing-keys` shows.
    pub keys: StringList,
    pub rate_limit: Option<Quota>,
    pub quotas: BTreeMap<String, Quota>,
    pub allowed_hosts: Option<StringList>,
    /// Refuse plain `http` callbacks, at registration and at replay (and send none).
    pub require_https: bool,
    /// Delivery slots of an instance this tenant's notifications hold at most at once
    /// (never more than `delivery.tenant_reserve` leaves any tenant).
    pub max_concurrency: Option<usize>,
    /// Mutual TLS: the certificate chain (PEM) this tenant's deliveries present.
    pub client_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub client_key: Option<PathBuf>,
    /// The roots (PEM) this tenant's receivers are verified against, instead of the
    /// system's: a merchant's private CA.
    pub ca_certs: Option<PathBuf>,
    /// Response bytes kept per attempt of this tenant's, instead of
    /// `delivery.response_bytes` (at most `MAX_RESPONSE_BYTES`).
    pub response_bytes: Option<usize>,
    /// Where this tenant's operational events go (`ops_events`).
    pub ops_url: Option<String>,
    /// Its endpoints with no success for this long are paused, instead of
    /// `endpoints.pause_after`; `0s`: never.
    #[serde(
        with = "super::duration::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub pause_after: Option<Duration>,
    /// The keys of `[retention]` this tenant's notifications are held to apart from the
    /// rest.
    #[serde(skip_serializing_if = "TenantRetention::is_empty")]
    pub retention: TenantRetention,
}

/// `[tenants.<name>.retention]`: the limits of `[retention]` a tenant sets for its own
/// notifications (`sweep_interval` and `audit_max_age` are the instance's alone).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantRetention {
    #[serde(
        with = "super::duration::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub dead_max_age: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_max_count: Option<u64>,
    #[serde(
        with = "super::duration::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_max_age: Option<Duration>,
}

impl TenantRetention {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `default`, with what this sets in place of its keys.
    pub fn over(&self, default: &RetentionSettings) -> RetentionSettings {
        RetentionSettings {
            dead_max_age: self.dead_max_age.unwrap_or(default.dead_max_age),
            dead_max_count: self.dead_max_count.unwrap_or(default.dead_max_count),
            finished_max_age: self.finished_max_age.unwrap_or(default.finished_max_age),
            ..default.clone()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    pub api_tokens: StringList,
    pub max_body_bytes: usize,
    /// Largest `POST /notify/batch` body; each item is still held to `max_body_bytes`.
    pub max_batch_bytes: usize,
    /// Requests handled at once; those beyond are answered `503 overloaded` at once.
    pub max_concurrent_requests: usize,
    #[serde(with = "super::duration")]
    pub idempotency_ttl: Duration,
    /// When set, `/metrics` needs `Authorization: Bearer <metrics_token>`.
    pub metrics_token: Option<String>,
    /// What signs portal links (`postback portal-link`), at least 32 bytes; rotating it
    /// revokes every link. Unset: no link is issued or accepted.
    pub portal_secret: Option<String>,
    /// A request's head must arrive within this of its first byte.
    #[serde(with = "super::duration")]
    pub header_timeout: Duration,
    /// A connection with no request for this long is closed.
    #[serde(with = "super::duration")]
    pub idle_timeout: Duration,
    /// A request's whole body must arrive within this (else `408`).
    #[serde(with = "super::duration")]
    pub body_timeout: Duration,
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
    /// Threads the process runs its work on (the API, the scheduler, the deliveries);
    /// 0: one per CPU core.
    pub worker_threads: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// Unset, with no `cluster_urls` either, means the embedded store in `data_dir`.
    pub redis_url: Option<String>,
    /// Directory of the embedded store's file.
    pub data_dir: PathBuf,
    /// Seed nodes of a Redis Cluster; set means cluster mode (instead of `redis_url`).
    pub cluster_urls: StringList,
    /// Redis Sentinel's `host:port` addresses; set means Redis through Sentinel (instead
    /// of `redis_url`): the primary is asked of them and followed through a failover.
    pub redis_sentinels: StringList,
    /// The primary's name at the sentinels (their `sentinel monitor <name> …`).
    pub redis_master_name: String,
    /// The sentinels' own user and password (their `requirepass`, or an ACL user).
    pub redis_sentinel_username: Option<String>,
    pub redis_sentinel_password: Option<String>,
    /// Through Sentinel: the primary's (and its replicas') user, password and database,
    /// which a `redis_url` carries in the URL.
    pub redis_username: Option<String>,
    pub redis_password: Option<String>,
    pub redis_db: u32,
    /// A Postgres database (instead of Redis or the embedded store).
    pub postgres_url: Option<String>,
    /// Start even when Redis's `maxmemory-policy` may evict keys (notifications can be lost).
    pub allow_eviction: bool,
    /// Start even on a Redis that persists nothing (`appendonly no` and no `save` point):
    /// a restart of it loses every notification.
    pub allow_volatile: bool,
    /// The roots (PEM) a store's server certificate must chain to, instead of the
    /// system's: Redis in every mode, and Postgres unless its URL names `sslrootcert`.
    pub tls_ca_file: Option<PathBuf>,
    /// Mutual TLS: the certificate chain (PEM) postback presents to the store.
    pub tls_cert_file: Option<PathBuf>,
    /// Its private key (PEM, unencrypted).
    pub tls_key_file: Option<PathBuf>,
    /// The name a Redis server's certificate must carry where it differs from the host
    /// postback connects to (`redis_url`'s, or the data nodes' the sentinels name).
    pub tls_server_name: Option<String>,
    /// Through Sentinel: the sentinels are reached over TLS.
    pub redis_sentinels_tls: bool,
    /// Through Sentinel: the name the sentinels' certificates carry, where it differs
    /// from their addresses.
    pub redis_sentinels_tls_server_name: Option<String>,
    /// Through Sentinel: the primary and its replicas are reached over TLS; unset: as
    /// the sentinels are (`redis_sentinels_tls`).
    pub redis_tls: Option<bool>,
    /// Hash-tagged shards; unset means 1 on a standalone Redis, `CLUSTER_SHARDS` on a
    /// cluster.
    pub shards: Option<u16>,
    pub key_prefix: String,
    #[serde(with = "super::duration")]
    pub connect_wait: Duration,
    #[serde(with = "super::duration")]
    pub connect_timeout: Duration,
    #[serde(with = "super::duration")]
    pub response_timeout: Duration,
    /// How long an instance's hold on its shards lasts without renewal: instances
    /// sharing a Redis divide its shards among the live ones, and a killed instance's
    /// shards are taken over within this (`store/redis_store/fleet.rs`).
    #[serde(with = "super::duration")]
    pub shard_lease: Duration,
    /// Replicas of a shard's primary that must hold a registration, replay, cancel or
    /// discard before it is answered (`WAIT`); 0 answers once the primary has it.
    pub replica_acks: u32,
    /// How long such a write waits for its replicas before it is answered `503
    /// replica_ack_timeout`.
    #[serde(with = "super::duration")]
    pub replica_ack_timeout: Duration,
    /// Those writes also wait until the primary's append-only file (and, with
    /// `replica_acks`, that many replicas' files) has them on disk (`WAITAOF`, Redis 7.2
    /// or later).
    pub fsync_acks: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliverySettings {
    pub concurrency: usize,
    #[serde(with = "super::duration")]
    pub timeout: Duration,
    #[serde(with = "super::duration")]
    pub max_timeout: Duration,
    #[serde(with = "super::duration")]
    pub connect_timeout: Duration,
    #[serde(with = "super::duration")]
    pub lease: Duration,
    pub claim_batch: usize,
    #[serde(with = "super::duration")]
    pub max_idle_sleep: Duration,
    #[serde(with = "super::duration")]
    pub max_delay: Duration,
    #[serde(with = "super::duration")]
    pub shutdown_grace: Duration,
    pub response_bytes: usize,
    /// Allow callbacks to loopback, private, link-local and other internal addresses.
    pub allow_private_networks: bool,
    /// The HTTP `CONNECT` proxy deliveries go through (`http://[user:password@]host:port`);
    /// the SSRF guard still checks each destination, and the proxy is asked for the
    /// checked address.
    pub proxy: Option<String>,
    /// The quota of a `rate_key` without its own (`50/s`, `600/m`, `unlimited`).
    pub rate_limit: Quota,
    /// Sends of one `rate_key` that may go at once before its quota spaces the rest
    /// (1: evenly spaced).
    pub burst: u32,
    /// Deliveries in flight at once to one host, in this instance.
    pub host_concurrency: usize,
    /// The longest wait a `Retry-After` header can impose.
    #[serde(with = "super::duration")]
    pub max_retry_after: Duration,
    /// Consecutive failures, over every instance, that open an endpoint's circuit; 0
    /// switches the breaker off.
    pub breaker_failures: u32,
    /// How long an open circuit fails fast before it lets one probe through.
    #[serde(with = "super::duration")]
    pub breaker_cooldown: Duration,
    /// Retry intervals vary by up to ± this percentage (`0%` keeps them exact).
    pub jitter: Percent,
    /// With several tenants, the part of `concurrency` that no one tenant may hold: kept
    /// for the others (`tenant_shares`).
    pub tenant_reserve: Percent,
}

impl DeliverySettings {
    /// What the delivery policy needs of these settings.
    pub fn policy_limits(&self) -> Limits {
        Limits {
            host_concurrency: self.host_concurrency,
            breaker_failures: self.breaker_failures,
            breaker_cooldown: self.breaker_cooldown,
        }
    }
}

/// How long finished notifications are kept before they are deleted (and counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    #[serde(with = "super::duration")]
    pub dead_max_age: Duration,
    /// Most dead letters kept of each tenant (over all shards); the oldest beyond it
    /// are deleted.
    pub dead_max_count: u64,
    /// Delivered and cancelled notifications.
    #[serde(with = "super::duration")]
    pub finished_max_age: Duration,
    /// How often each instance sweeps when no settle has trimmed.
    #[serde(with = "super::duration")]
    pub sweep_interval: Duration,
    /// Audit log entries older than this are deleted.
    #[serde(with = "super::duration")]
    pub audit_max_age: Duration,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningSettings {
    pub secrets: StringList,
    /// ed25519 signing keys (`whsk_…`) of tenants without their own.
    pub keys: StringList,
}

/// Operational webhooks (`ops_events`): where the instance's go, and how long dead
/// letters are gathered into one `notification.dead` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpsSettings {
    /// The operator's URL for events about every tenant; unset: none are sent.
    pub url: Option<String>,
    #[serde(with = "super::duration")]
    pub window: Duration,
    /// An endpoint with no success for this long is told as `endpoint.failing`.
    #[serde(with = "super::duration")]
    pub failing_after: Duration,
}

impl Default for OpsSettings {
    fn default() -> Self {
        Self {
            url: None,
            window: Duration::from_secs(60),
            failing_after: Duration::from_secs(5 * 60),
        }
    }
}

/// Events (`POST /events`): the JSON Schemas their bodies are held to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventSettings {
    /// A directory of `<topic>.json` JSON Schemas (`config::event_schemas`).
    pub schema_dir: Option<PathBuf>,
}

/// Endpoints (`endpoints::health`): when one that keeps failing is paused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointSettings {
    /// An endpoint with no success for this long is paused, its notifications held
    /// rather than walked into the dead letters; `0s`: never. Tenants may set their own.
    #[serde(with = "super::duration")]
    pub pause_after: Duration,
    /// An endpoint postback paused is probed this often: one held notification is tried,
    /// and its delivery resumes the endpoint. `0s`: never (a resume by hand only).
    #[serde(with = "super::duration")]
    pub probe_interval: Duration,
}

impl Default for EndpointSettings {
    fn default() -> Self {
        // Half the default schedule's 25 h 45 min: an endpoint down that long is not
        // coming back within a retry, and none of the notifications on that schedule has
        // died yet when they are held. Outages of a few hours (a deploy, a night) are
        // still ridden out by the retries alone.
        // A probe each quarter hour: a receiver back up waits at most that long, and one
        // still down gets four requests an hour.
        Self {
            pause_after: Duration::from_secs(12 * 3600),
            probe_interval: Duration::from_secs(15 * 60),
        }
    }
}

/// What `/metrics` shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Label open-circuit series with their endpoint, which names a merchant: off by
    /// default, since `/metrics` is often scraped by systems with wider access.
    pub host_labels: bool,
}

/// OpenTelemetry traces (`traces.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TraceSettings {
    /// The OTLP/HTTP collector, e.g. `http://127.0.0.1:4318`; spans go to
    /// `<otlp_endpoint>/v1/traces`. Unset: no spans are exported.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans.
    pub service_name: String,
    /// Share of new traces recorded (0 to 1); a producer's trace keeps its own choice.
    pub sample_ratio: f64,
}

impl Default for TraceSettings {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "postback".into(),
            sample_ratio: 1.0,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            server: ServerSettings::default(),
            store: StoreSettings::default(),
            delivery: DeliverySettings::default(),
            retention: RetentionSettings::default(),
            signing: SigningSettings::default(),
            log: LogSettings::default(),
            metrics: MetricsSettings::default(),
            traces: TraceSettings::default(),
            ops: OpsSettings::default(),
            endpoints: EndpointSettings::default(),
            events: EventSettings::default(),
            schedules: default_schedules(),
            profiles: super::profiles::default_profiles(),
            quotas: BTreeMap::new(),
            secrets: BTreeMap::new(),
            tokens: BTreeMap::new(),
            tenants: BTreeMap::new(),
        }
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("valid address"),
            api_tokens: StringList::default(),
            max_body_bytes: 256 * 1024,
            max_batch_bytes: 2 * 1024 * 1024,
            max_concurrent_requests: 512,
            idempotency_ttl: Duration::from_secs(24 * 3600),
            metrics_token: None,
            portal_secret: None,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
            worker_threads: 0,
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            redis_url: None,
            data_dir: PathBuf::from("data"),
            cluster_urls: StringList::default(),
            redis_sentinels: StringList::default(),
            redis_master_name: "mymaster".into(),
            redis_sentinel_username: None,
            redis_sentinel_password: None,
            redis_username: None,
            redis_password: None,
            redis_db: 0,
            postgres_url: None,
            allow_eviction: false,
            allow_volatile: false,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_server_name: None,
            redis_sentinels_tls: false,
            redis_sentinels_tls_server_name: None,
            redis_tls: None,
            shards: None,
            key_prefix: "postback".into(),
            connect_wait: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            shard_lease: Duration::from_secs(6),
            replica_acks: 0,
            replica_ack_timeout: Duration::from_secs(1),
            fsync_acks: false,
        }
    }
}

impl Default for DeliverySettings {
    fn default() -> Self {
        Self {
            concurrency: 256,
            timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            lease: Duration::from_secs(60),
            claim_batch: 200,
            max_idle_sleep: Duration::from_secs(5),
            max_delay: Duration::from_secs(30 * 24 * 3600),
            shutdown_grace: Duration::from_secs(20),
            response_bytes: 1024,
            allow_private_networks: false,
            proxy: None,
            rate_limit: "1000/s".parse().expect("a valid quota"),
            burst: 1,
            host_concurrency: 32,
            max_retry_after: Duration::from_secs(3600),
            breaker_failures: 10,
            breaker_cooldown: Duration::from_secs(30),
            jitter: Percent::default(),
            tenant_reserve: Percent::new(25).expect("a percentage"),
        }
    }
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            dead_max_age: Duration::from_secs(30 * 24 * 3600),
            dead_max_count: 1_000_000,
            finished_max_age: Duration::from_secs(7 * 24 * 3600),
            sweep_interval: Duration::from_secs(60),
            audit_max_age: Duration::from_secs(90 * 24 * 3600),
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

fn default_schedules() -> BTreeMap<String, Schedule> {
    let list = |s: &str| {
        let items: Vec<&str> = s.split(',').collect();
        Schedule::parse(&items).expect("a valid schedule")
    };
    BTreeMap::from([
        ("default".into(), list("15s,3m,10m,30m,30m,1h,2h,6h,15h")),
        ("alipay".into(), list("4m,10m,10m,1h,2h,6h,15h")),
        (
            "wechatpay".into(),
            list("15s,15s,30s,3m,10m,20m,30m,30m,30m,60m,3h,3h,3h,6h,6h"),
        ),
    ])
}
