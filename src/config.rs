//! Configuration: defaults, then the TOML file (`--config PATH`), then environment
//! variables `POSTBACK_<SECTION>_<KEY>`. Everything is validated at start-up; an error
//! names the key and the problem.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::access::{self, Principal, Role, Scope, TokenTable};
use crate::domain::{HostAllowList, Schedule, Tenant};
use crate::policy::{Limits, Quota, Quotas};
use crate::signing::{Keys, Secret, Signer, SigningKey};

mod percent;
mod profiles;
pub mod redact;
mod string_list;
mod tenant_tls;

pub use percent::Percent;
pub use profiles::{Profile, ProfileSettings};
pub use string_list::StringList;
pub use tenant_tls::TenantTls;

/// Sections that environment variables may address (`POSTBACK_<SECTION>_<KEY>`).
const SECTIONS: &[&str] = &[
    "server",
    "store",
    "delivery",
    "retention",
    "signing",
    "log",
    "metrics",
    "traces",
    "schedules",
    "quotas",
    "secrets",
];
// `tokens` and `tenants` nest one level deeper (`[tokens.<name>]`), which one `_` cannot
// address: they are written in the file.

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
    #[serde(with = "humantime_serde")]
    pub idempotency_ttl: Duration,
    /// When set, `/metrics` needs `Authorization: Bearer <metrics_token>`.
    pub metrics_token: Option<String>,
    /// A request's head must arrive within this of its first byte.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// A connection with no request for this long is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// A request's whole body must arrive within this (else `408`).
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
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
    /// Start even when Redis's `maxmemory-policy` may evict keys (notifications can be lost).
    pub allow_eviction: bool,
    /// Hash-tagged shards; unset means 1 on a standalone Redis, `CLUSTER_SHARDS` on a
    /// cluster.
    pub shards: Option<u16>,
    pub key_prefix: String,
    #[serde(with = "humantime_serde")]
    pub connect_wait: Duration,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub response_timeout: Duration,
    /// How long an instance's hold on its shards lasts without renewal: instances
    /// sharing a Redis divide its shards among the live ones, and a killed instance's
    /// shards are taken over within this (`store/redis_store/fleet.rs`).
    #[serde(with = "humantime_serde")]
    pub shard_lease: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliverySettings {
    pub concurrency: usize,
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub max_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    pub claim_batch: usize,
    #[serde(with = "humantime_serde")]
    pub max_idle_sleep: Duration,
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    pub response_bytes: usize,
    /// Allow callbacks to loopback, private, link-local and other internal addresses.
    pub allow_private_networks: bool,
    /// The quota of a `rate_key` without its own (`50/s`, `600/m`, `unlimited`).
    pub rate_limit: Quota,
    /// Sends of one `rate_key` that may go at once before its quota spaces the rest
    /// (1: evenly spaced).
    pub burst: u32,
    /// Deliveries in flight at once to one host, in this instance.
    pub host_concurrency: usize,
    /// The longest wait a `Retry-After` header can impose.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
    /// Consecutive failures, over every instance, that open an endpoint's circuit; 0
    /// switches the breaker off.
    pub breaker_failures: u32,
    /// How long an open circuit fails fast before it lets one probe through.
    #[serde(with = "humantime_serde")]
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
    #[serde(with = "humantime_serde")]
    pub dead_max_age: Duration,
    /// Most dead letters kept over all shards; the oldest beyond it are deleted.
    pub dead_max_count: u64,
    /// Delivered and cancelled notifications.
    #[serde(with = "humantime_serde")]
    pub finished_max_age: Duration,
    /// How often each instance sweeps when no settle has trimmed.
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// Audit log entries older than this are deleted.
    #[serde(with = "humantime_serde")]
    pub audit_max_age: Duration,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningSettings {
    pub secrets: StringList,
    /// ed25519 signing keys (`whsk_…`) of tenants without their own.
    pub keys: StringList,
}

/// What `/metrics` shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Label open-circuit series with their endpoint, which names a merchant: off by
    /// default, since `/metrics` is often scraped by systems with wider access.
    pub host_labels: bool,
}

/// OpenTelemetry traces (`crate::traces`).
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
            schedules: default_schedules(),
            profiles: profiles::default_profiles(),
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
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            redis_url: None,
            data_dir: PathBuf::from("data"),
            cluster_urls: StringList::default(),
            allow_eviction: false,
            shards: None,
            key_prefix: "postback".into(),
            connect_wait: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            shard_lease: Duration::from_secs(3),
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
            max_idle_sleep: Duration::from_secs(2),
            max_delay: Duration::from_secs(30 * 24 * 3600),
            shutdown_grace: Duration::from_secs(20),
            response_bytes: 1024,
            allow_private_networks: false,
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

/// Shards on a cluster when `store.shards` is unset: enough that a few primaries each
/// hold some, few enough that claiming every one stays cheap.
pub const CLUSTER_SHARDS: u16 = 12;

/// The shortest `store.shard_lease`: it is renewed every half of it.
const MIN_SHARD_LEASE: Duration = Duration::from_millis(200);

/// Where the notifications are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreTarget {
    /// The embedded store, a file in this directory (one instance only).
    Embedded(PathBuf),
    Redis(RedisTarget),
}

/// Which Redis keeps the notifications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Standalone(String),
    /// The seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

/// Validated configuration, ready to run with.
#[derive(Debug, Clone)]
pub struct Config {
    pub settings: Settings,
    pub store: StoreTarget,
    /// Hash-tagged shards.
    pub shards: u16,
    /// Secrets stay text in `Settings`, which is printable and comparable; these are
    /// the keys they decode to.
    pub secrets: Vec<Secret>,
    /// The instance's signing keys, as `secrets`.
    pub keys: Vec<SigningKey>,
    /// Every configured tenant (`default` always), with its secrets and allowed hosts.
    pub tenants: BTreeMap<Tenant, TenantConfig>,
    /// The API's tokens (empty: authentication is off).
    pub tokens: TokenTable,
    /// The profiles, each with its schedule and success rule.
    pub profiles: BTreeMap<String, Profile>,
}

/// A tenant's decoded settings.
#[derive(Debug, Clone, Default)]
pub struct TenantConfig {
    pub require_https: bool,
    /// Its own TLS set-up for deliveries (client certificate, roots), if any.
    pub tls: Option<TenantTls>,
    pub secrets: Vec<Secret>,
    pub keys: Vec<SigningKey>,
    pub allowed_hosts: Option<HostAllowList>,
    /// The default quota of its rate keys, if it has one.
    pub rate_limit: Option<Quota>,
    /// Quotas of some of its rate keys, by rate key.
    pub quotas: BTreeMap<String, Quota>,
    /// Delivery slots it holds at most at once, if it has a limit of its own.
    pub max_concurrency: Option<usize>,
}

impl Config {
    /// Defaults, then the TOML file if given, then `POSTBACK_*` environment variables.
    pub fn load(path: Option<&Path>, insecure_no_auth: bool) -> anyhow::Result<Self> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = path {
            if !path.exists() {
                bail!("config file {} does not exist", path.display());
            }
            figment = figment.merge(Toml::file(path));
        }
        let settings: Settings = figment
            .merge(env_provider())
            .extract()
            .map_err(named_error)?;
        Self::validate(settings, insecure_no_auth)
    }

    /// Checks what types alone cannot, naming the key of each problem.
    pub fn validate(settings: Settings, insecure_no_auth: bool) -> anyhow::Result<Self> {
        let s = &settings;
        if s.server.api_tokens.is_empty() && s.tokens.is_empty() && !insecure_no_auth {
            bail!("server.api_tokens (POSTBACK_SERVER_API_TOKENS): no API token configured; set one or a [tokens.<name>] section, or start with --insecure-no-auth");
        }
        check(
            !s.store.key_prefix.is_empty() && !s.store.key_prefix.contains(['{', '}']),
            "store.key_prefix",
            "must be non-empty, without braces",
        )?;
        check(
            s.delivery.concurrency >= 1,
            "delivery.concurrency",
            "must be at least 1",
        )?;
        check(
            s.delivery.claim_batch >= 1 && s.delivery.claim_batch <= 1000,
            "delivery.claim_batch",
            "must be between 1 and 1000",
        )?;
        check(
            !s.delivery.max_timeout.is_zero(),
            "delivery.max_timeout",
            "must be more than 0s",
        )?;
        check(
            !s.delivery.timeout.is_zero() && s.delivery.timeout <= s.delivery.max_timeout,
            "delivery.timeout",
            "must be more than 0s and at most delivery.max_timeout",
        )?;
        check(
            s.delivery.lease >= s.delivery.max_timeout + Duration::from_secs(5),
            "delivery.lease",
            "must outlast delivery.max_timeout by at least 5s",
        )?;
        check(
            !s.delivery.max_idle_sleep.is_zero(),
            "delivery.max_idle_sleep",
            "must be more than 0s",
        )?;
        check_retention(&s.retention)?;
        check_traces(&s.traces)?;
        check(
            (1..=100_000).contains(&s.delivery.burst),
            "delivery.burst",
            "must be from 1 to 100000",
        )?;
        check(
            s.delivery.host_concurrency >= 1,
            "delivery.host_concurrency",
            "must be at least 1",
        )?;
        check(
            !s.delivery.breaker_cooldown.is_zero(),
            "delivery.breaker_cooldown",
            "must be more than 0s",
        )?;
        check(
            s.server.max_body_bytes >= 1024,
            "server.max_body_bytes",
            "must be at least 1024",
        )?;
        check(
            s.server.max_batch_bytes >= s.server.max_body_bytes,
            "server.max_batch_bytes",
            "must be at least server.max_body_bytes",
        )?;
        check(
            s.server.max_concurrent_requests >= 1,
            "server.max_concurrent_requests",
            "must be at least 1",
        )?;
        check(
            s.server.max_connections >= 1,
            "server.max_connections",
            "must be at least 1",
        )?;
        for (ok, key) in [
            (!s.server.header_timeout.is_zero(), "server.header_timeout"),
            (!s.server.idle_timeout.is_zero(), "server.idle_timeout"),
            (!s.server.body_timeout.is_zero(), "server.body_timeout"),
        ] {
            check(ok, key, "must be more than 0s")?;
        }
        let store = store_target(&s.store)?;
        let shards = match (s.store.shards, &store) {
            (Some(n), StoreTarget::Redis(_)) => n,
            (Some(_), StoreTarget::Embedded(_)) => {
                bail!("store.shards (POSTBACK_STORE_SHARDS): applies to Redis only; the embedded store has one shard")
            }
            (None, StoreTarget::Redis(RedisTarget::Cluster(_))) => CLUSTER_SHARDS,
            (None, _) => 1,
        };
        check(shards >= 1, "store.shards", "must be at least 1")?;
        check(
            s.store.shard_lease >= MIN_SHARD_LEASE,
            "store.shard_lease",
            "must be at least 200ms (it is renewed four times per lease)",
        )?;
        check(
            s.schedules.contains_key("default"),
            "schedules.default",
            "a default schedule is required",
        )?;
        check(
            s.delivery.tenant_reserve.get() <= 90,
            "delivery.tenant_reserve",
            "must be from 0% to 90% (each tenant may hold the rest)",
        )?;
        check(
            s.delivery.jitter.get() <= 90,
            "delivery.jitter",
            "must be from 0% to 90%",
        )?;
        let secrets = parse_secrets(&s.signing.secrets, "signing.secrets")?;
        let keys = parse_keys(&s.signing.keys, "signing.keys")?;
        if let Some(key) = s.secrets.keys().next() {
            bail!("secrets.{key} (POSTBACK_SECRETS_{}): secrets per rate key are gone, since any producer could name a rate key; move them to the `secrets` of a [tenants.<name>] section and register that merchant's notifications with a token of that tenant", key.to_ascii_uppercase());
        }
        let tenants = tenants(&s.tenants)?;
        let profiles = profiles::profiles(&s.profiles, &s.schedules)?;
        let tokens = if insecure_no_auth && s.server.api_tokens.is_empty() && s.tokens.is_empty() {
            TokenTable::default()
        } else {
            token_table(s, &tenants)?
        };
        let config = Self {
            settings,
            store,
            shards,
            secrets,
            keys,
            tenants,
            tokens,
            profiles,
        };
        config.signer()?;
        Ok(config)
    }

    /// What signs each tenant's deliveries: its own secrets and keys, or the instance's
    /// (for the default tenant) or ones derived from them (`signing`). Refused when two
    /// tenants would sign with the same one.
    pub fn signer(&self) -> anyhow::Result<Signer> {
        let keys = |secrets: &[Secret], keys: &[SigningKey]| Keys {
            secrets: secrets.to_vec(),
            keys: keys.to_vec(),
        };
        let per_tenant = self
            .tenants
            .iter()
            .map(|(t, c)| (t.clone(), keys(&c.secrets, &c.keys)))
            .collect();
        Signer::new(keys(&self.secrets, &self.keys), per_tenant).map_err(anyhow::Error::msg)
    }

    /// The rate-limit quota of every tenant's rate keys: its own, its tenant's default,
    /// or `delivery.rate_limit`. `[quotas]` names the default tenant's keys.
    pub fn quotas(&self) -> Quotas {
        let s = &self.settings;
        let default = Tenant::default();
        let mut per_key: BTreeMap<String, Quota> = s
            .quotas
            .iter()
            .map(|(k, q)| (default.rate_key(k), *q))
            .collect();
        let mut per_tenant = BTreeMap::new();
        for (tenant, t) in &self.tenants {
            per_key.extend(t.quotas.iter().map(|(k, q)| (tenant.rate_key(k), *q)));
            if let Some(q) = t.rate_limit {
                per_tenant.insert(tenant.to_string(), q);
            }
        }
        Quotas {
            default: s.delivery.rate_limit,
            per_key,
            per_tenant,
            burst: s.delivery.burst,
        }
    }
}

/// The tenants, each name checked and its secrets and allowed hosts decoded; `default`
/// is always one of them.
fn tenants(
    raw: &BTreeMap<String, TenantSettings>,
) -> anyhow::Result<BTreeMap<Tenant, TenantConfig>> {
    let mut out = BTreeMap::from([(Tenant::default(), TenantConfig::default())]);
    for (name, t) in raw {
        let tenant = Tenant::parse(name, "tenant")
            .map_err(|e| anyhow::anyhow!("tenants.{name}: {}", e.message))?;
        let secrets = parse_secrets(&t.secrets, &format!("tenants.{name}.secrets"))?;
        let keys = parse_keys(&t.keys, &format!("tenants.{name}.keys"))?;
        let tls = TenantTls::read(t, &format!("tenants.{name}"))?;
        if t.max_concurrency == Some(0) {
            bail!("tenants.{name}.max_concurrency: must be at least 1");
        }
        let allowed_hosts = t
            .allowed_hosts
            .as_ref()
            .map(|list| HostAllowList::parse(list.as_slice()))
            .transpose()
            .map_err(|e| anyhow::anyhow!("tenants.{name}.allowed_hosts: {e}"))?;
        out.insert(
            tenant,
            TenantConfig {
                require_https: t.require_https,
                tls,
                secrets,
                keys,
                allowed_hosts,
                rate_limit: t.rate_limit,
                quotas: t.quotas.clone(),
                max_concurrency: t.max_concurrency,
            },
        );
    }
    Ok(out)
}

/// `server.api_tokens` (every tenant, every role, named `api_token_1`, …) and the named
/// `[tokens]`, each bound to `*` or a configured tenant.
fn token_table(
    s: &Settings,
    tenants: &BTreeMap<Tenant, TenantConfig>,
) -> anyhow::Result<TokenTable> {
    let mut entries = Vec::new();
    for (i, token) in s.server.api_tokens.iter().enumerate() {
        let actor = format!("api_token_{}", i + 1);
        entries.push((access::digest(token), Principal::everything(actor)));
    }
    for (name, t) in &s.tokens {
        let key = format!("tokens.{name}");
        let hash =
            access::parse_digest(&t.sha256).map_err(|e| anyhow::anyhow!("{key}.sha256: {e}"))?;
        let scope = Scope::parse(&t.tenant).map_err(|e| anyhow::anyhow!("{key}.tenant: {e}"))?;
        if let Scope::One(tenant) = &scope {
            if !tenants.contains_key(tenant) {
                bail!("{key}.tenant: no tenant `{tenant}` is configured; add a [tenants.{tenant}] section (it may be empty)");
            }
        }
        check(
            !t.roles.is_empty(),
            &format!("{key}.roles"),
            "must name at least one of notify, read, operate, audit",
        )?;
        if let Some((_, other)) = entries.iter().find(|(h, _)| *h == hash) {
            bail!(
                "{key}.sha256: the same token as {}; each token needs its own value",
                other.actor
            );
        }
        entries.push((hash, Principal::new(name.clone(), scope, &t.roles)));
    }
    Ok(TokenTable::new(entries))
}

/// A setting that could not be read, named as the configuration file and the
/// environment variable (where one can address it) would name it:
/// `delivery.jitter (POSTBACK_DELIVERY_JITTER)`.
fn named_error(e: figment::Error) -> anyhow::Error {
    let key = e.path.join(".").to_ascii_lowercase();
    let source = e.metadata.as_ref().map(|m| m.name.to_string());
    let section = key.split('.').next().unwrap_or_default();
    let name = match SECTIONS.contains(&section) {
        true => format!(
            "{key} (POSTBACK_{})",
            key.replace('.', "_").to_ascii_uppercase()
        ),
        false => key.clone(),
    };
    let place = match (key.is_empty(), source) {
        (true, _) => String::new(),
        (false, Some(source)) => format!("{name} in {source}: "),
        (false, None) => format!("{name}: "),
    };
    anyhow::anyhow!("invalid configuration: {place}{}", e.kind)
}

/// The embedded store when no Redis is named, otherwise the standalone URL or the
/// cluster's seed nodes, each checked to be a Redis URL.
fn store_target(store: &StoreSettings) -> anyhow::Result<StoreTarget> {
    let is_url = |url: &str, key: &str| {
        redis::IntoConnectionInfo::into_connection_info(url)
            .map(drop)
            .with_context(|| format!("{key}: `{url}` is not a Redis URL"))
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
    for url in &seeds {
        is_url(url, "store.cluster_urls (POSTBACK_STORE_CLUSTER_URLS)")?;
    }
    Ok(StoreTarget::Redis(RedisTarget::Cluster(seeds)))
}

fn env_provider() -> Env {
    Env::prefixed("POSTBACK_")
        .filter(|key| {
            let key = key.as_str().to_ascii_lowercase();
            SECTIONS.iter().any(|s| key.starts_with(&format!("{s}_")))
        })
        .map(|key| key.as_str().replacen('_', ".", 1).into())
}

fn parse_secrets(raw: &StringList, key: &str) -> anyhow::Result<Vec<Secret>> {
    raw.iter()
        .map(|s| Secret::parse(s).map_err(|e| anyhow::anyhow!("{key}: {e}")))
        .collect()
}

fn parse_keys(raw: &StringList, key: &str) -> anyhow::Result<Vec<SigningKey>> {
    raw.iter()
        .map(|s| SigningKey::parse(s).map_err(|e| anyhow::anyhow!("{key}: {e}")))
        .collect()
}

fn check_retention(r: &RetentionSettings) -> anyhow::Result<()> {
    let positive = "must be more than 0s";
    check(
        !r.dead_max_age.is_zero(),
        "retention.dead_max_age",
        positive,
    )?;
    check(
        !r.finished_max_age.is_zero(),
        "retention.finished_max_age",
        positive,
    )?;
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
    check(
        r.dead_max_count >= 1,
        "retention.dead_max_count",
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

fn check(ok: bool, key: &str, problem: &str) -> anyhow::Result<()> {
    if ok {
        Ok(())
    } else {
        bail!("{key}: {problem}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_token() -> Settings {
        let mut s = Settings::default();
        s.server.api_tokens = StringList::from_csv("t");
        s
    }

    #[test]
    fn defaults_are_valid_with_a_token() {
        let c = Config::validate(with_token(), false).unwrap();
        assert_eq!(c.settings.schedules["default"].max_attempts(), 10);
        assert_eq!(c.settings.schedules["wechatpay"].max_attempts(), 16);
        assert_eq!(c.store, StoreTarget::Embedded(PathBuf::from("data")));
        assert_eq!(c.shards, 1);
    }

    #[test]
    fn a_redis_url_means_redis_and_shards_apply_to_redis_only() {
        let mut s = with_token();
        s.store.redis_url = Some("redis://c:6379".into());
        let c = Config::validate(s.clone(), false).unwrap();
        let url = RedisTarget::Standalone("redis://c:6379".into());
        assert_eq!(c.store, StoreTarget::Redis(url));
        let mut s = with_token();
        s.store.shards = Some(4);
        let err = Config::validate(s, false).unwrap_err().to_string();
        assert!(err.starts_with("store.shards"), "{err}");
    }

    #[test]
    fn cluster_seeds_mean_cluster_mode_with_more_shards() {
        let mut s = with_token();
        s.store.cluster_urls = StringList::from_csv("redis://a:7000, redis://b:7001");
        let c = Config::validate(s.clone(), false).unwrap();
        let seeds = vec!["redis://a:7000".to_string(), "redis://b:7001".to_string()];
        assert_eq!(c.store, StoreTarget::Redis(RedisTarget::Cluster(seeds)));
        assert_eq!(c.shards, CLUSTER_SHARDS);
        s.store.shards = Some(3);
        assert_eq!(Config::validate(s.clone(), false).unwrap().shards, 3);
        s.store.redis_url = Some("redis://c:6379".into());
        let err = Config::validate(s.clone(), false).unwrap_err().to_string();
        assert!(err.starts_with("store.cluster_urls"), "{err}");
        s.store.redis_url = None;
        s.store.cluster_urls = StringList::from_csv("redis://a:7000,nonsense");
        let err = Config::validate(s, false).unwrap_err().to_string();
        assert!(err.contains("`nonsense` is not a Redis URL"), "{err}");
    }

    #[test]
    fn refuses_to_run_without_a_token_unless_told() {
        let err = Config::validate(Settings::default(), false).unwrap_err();
        assert!(err.to_string().contains("server.api_tokens"));
        assert!(Config::validate(Settings::default(), true).is_ok());
    }

    /// Reads settings as `Config::load` does, from TOML text instead of a file.
    fn from_toml(text: &str) -> anyhow::Result<Config> {
        let settings = Figment::from(Serialized::defaults(with_token()))
            .merge(Toml::string(text))
            .extract()
            .map_err(named_error)?;
        Config::validate(settings, false)
    }

    /// A `[tokens.x]` section of `tenant` and `roles` (written as in TOML).
    fn token(tenant: &str, roles: &str) -> String {
        format!(
            "[tokens.x]\nsha256 = \"{}\"\ntenant = \"{tenant}\"\nroles = [{roles}]",
            access::digest_hex("tok-x")
        )
    }

    #[test]
    fn names_the_bad_key() {
        let mut s = with_token();
        s.delivery.lease = Duration::from_secs(1);
        assert!(Config::validate(s, false)
            .unwrap_err()
            .to_string()
            .starts_with("delivery.lease"));
        let refused = [
            ("[schedules]\nodd = \"1s, nope\"", "schedules.odd (POSTBACK_SCHEDULES_ODD) in TOML source string: [1]: `nope` is not a duration"),
            ("[schedules]\nodd = [\"1s\", \"9d\"]", "schedules.odd (POSTBACK_SCHEDULES_ODD) in TOML source string: [1]: interval `9d` out of range"),
            ("[quotas]\nshop = \"fast\"", "quotas.shop (POSTBACK_QUOTAS_SHOP) in TOML source string: `fast` is not a quota"),
            ("[delivery]\nrate_limit = 5", "delivery.rate_limit (POSTBACK_DELIVERY_RATE_LIMIT) in TOML source string: invalid type"),
            ("[delivery]\njitter = \"95%\"", "delivery.jitter: must be from 0% to 90%"),
            ("[delivery]\njitter = 101", "delivery.jitter (POSTBACK_DELIVERY_JITTER) in TOML source string: 101% is more than 100%"),
            ("[delivery]\njitter = \"a lot\"", "delivery.jitter (POSTBACK_DELIVERY_JITTER) in TOML source string: `a lot` is not a percentage"),
            ("[signing]\nsecrets = \"not-a-secret\"", "signing.secrets: a secret must start with"),
            ("[secrets]\nshop = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"", "secrets.shop (POSTBACK_SECRETS_SHOP): secrets per rate key are gone"),
            ("[tokens.x]\nsha256 = \"abc\"\ntenant = \"*\"\nroles = [\"read\"]", "tokens.x.sha256: must be the 64 hex digits"),
            (&token("shop-z", "\"read\""), "tokens.x.tenant: no tenant `shop-z` is configured"),
            (&token("shop a", "\"read\""), "tokens.x.tenant: `shop a`: a tenant is"),
            (&token("*", "\"root\""), "tokens.x.roles.0 in TOML source string: unknown variant: found `root`"),
            (&token("*", ""), "tokens.x.roles: must name at least one"),
            ("[tokens.x]\ntenant = \"*\"\nroles = [\"read\"]", "missing field `sha256`"),
            ("[tenants.\"shop a\"]", "tenants.shop a: a tenant is"),
            ("[tenants.a]\nkeys = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]", "tenants.a.keys: a signing key must start with `whsk_`"),
            ("[signing]\nkeys = \"whsk_YWJj\"", "signing.keys: a signing key holds 32 bytes"),
            ("[profiles.p]\nschedule = \"nope\"", "profiles.p.schedule: no schedule named `nope`"),
            ("[profiles.p]\nsuccess = { status = [410] }", "profiles.p.success.status: 410 is not"),
            ("[tenants.a]\nallowed_hosts = [\"http://x\"]", "tenants.a.allowed_hosts: `http://x` is not a host name"),
            ("[tenants.a]\nsecrets = [\"nope\"]", "tenants.a.secrets: a secret must start with"),
            (&format!("{}\n[tokens.y]\nsha256 = \"{}\"\ntenant = \"*\"\nroles = [\"read\"]", token("*", "\"read\""), access::digest_hex("tok-x")), "tokens.y.sha256: the same token as x"),
        ];
        for (text, expected) in refused {
            let err = from_toml(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn tokens_and_tenants_read_what_users_write() {
        let c = from_toml(&format!(
            "{}\n[tenants.shop-a]\nrate_limit = \"10/s\"\nquotas = {{ x = \"1/s\" }}\n\
             allowed_hosts = [\"*.shop.example\"]",
            token("shop-a", "\"notify\", \"read\"")
        ))
        .unwrap();
        let quotas = c.quotas();
        assert_eq!(quotas.of("shop-a/x").to_string(), "1/s");
        assert_eq!(quotas.of("shop-a/y").to_string(), "10/s");
        assert_eq!(quotas.of("default/y").to_string(), "1000/s");
        let shop = Tenant::parse("shop-a", "tenant").unwrap();
        let allowed = c.tenants[&shop].allowed_hosts.as_ref().unwrap();
        assert!(allowed.allows("a.shop.example"));
        assert!(c.tenants.contains_key(&Tenant::default()));
        let p = c.tokens.identify("tok-x").unwrap();
        assert_eq!(p.actor, "x");
        assert!(p.may(Role::Read) && !p.may(Role::Operate));
        assert_eq!(format!("{:?}", c.tokens), "[\"api_token_1\", \"x\"]");
    }

    #[test]
    fn typed_settings_read_what_users_write() {
        let c = from_toml(
            "[delivery]\njitter = \"25%\"\nrate_limit = \"600/m\"\n\
             [quotas]\nshop = \"5/s\"\n[schedules]\nfast = \"100ms, 2s\"",
        )
        .unwrap();
        assert_eq!(c.settings.delivery.jitter, Percent::new(25).unwrap());
        let quotas = c.quotas();
        assert_eq!(quotas.default.to_string(), "600/m");
        assert_eq!(quotas.of("default/shop").to_string(), "5/s");
        let fast = &c.settings.schedules["fast"];
        assert_eq!(fast.intervals_ms(), [100, 2000]);
        assert_eq!(c.settings.schedules["default"].max_attempts(), 10);
        assert_eq!(
            from_toml("[delivery]\njitter = 10")
                .unwrap()
                .settings
                .delivery
                .jitter
                .get(),
            10
        );
    }

    #[test]
    fn the_example_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/postback.toml");
        let from_file: Settings = Figment::from(Serialized::defaults(Settings::default()))
            .merge(Toml::file(path))
            .extract()
            .unwrap();
        assert_eq!(from_file, Settings::default());
    }
}
