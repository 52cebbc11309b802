//! Configuration: defaults, then the TOML file (`--config PATH`), then environment
//! variables `POSTBACK_<SECTION>_<KEY>` (`loading.rs`), read into the typed settings of
//! `settings.rs`; then the checks across keys (`checks.rs`) and the tenants and tokens
//! (`tenants.rs`) make the validated `Config` an instance runs with. Everything is
//! validated at start-up; an error names the key and the problem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;

use crate::delivery::egress::ProxyUrl;
use crate::delivery::policy::{Quota, Quotas};
use crate::delivery::signing::{Keys, Secret, Signer, SigningKey};
use crate::domain::{CallbackUrl, Destinations, HostAllowList, Tenant};
use crate::endpoints::health::EndpointRules;
use crate::lifecycle::retention;
use crate::tenancy::access::TokenTable;
use crate::tenancy::portal::PortalKey;

mod checks;
mod duration;
mod event_schemas;
mod loading;
mod percent;
pub mod postgres_tls;
mod profiles;
pub mod redact;
mod sentinel;
mod settings;
pub mod store_tls;
mod string_list;
mod tenant_tls;
mod tenants;

pub use event_schemas::EventSchemas;
pub use percent::Percent;
pub use postgres_tls::{PostgresTarget, SslMode};
pub use profiles::{Profile, ProfileSettings};
pub use sentinel::{Credentials, NodeAddress, SentinelTarget, DEFAULT_MASTER_NAME};
pub use settings::*;
pub use store_tls::StoreTls;
pub use string_list::StringList;
pub use tenant_tls::TenantTls;

/// Shards on a cluster when `store.shards` is unset: enough that a few primaries each
/// hold some, few enough that claiming every one stays cheap.
pub const CLUSTER_SHARDS: u16 = 12;

/// Where the notifications are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreTarget {
    /// The embedded store, a file in this directory (one instance only).
    Embedded(PathBuf),
    Redis(RedisTarget),
    /// A Postgres database, by its URL.
    Postgres(String),
}

/// Which Redis keeps the notifications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Standalone(String),
    /// The seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
    /// The primary Redis Sentinel names, followed through its failovers.
    Sentinel(SentinelTarget),
}

impl RedisTarget {
    /// The key that names it.
    pub fn key(&self) -> &'static str {
        match self {
            Self::Standalone(_) => "store.redis_url",
            Self::Cluster(_) => "store.cluster_urls",
            Self::Sentinel(_) => "store.redis_sentinels",
        }
    }
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
    /// `delivery.proxy`, read.
    pub proxy: Option<ProxyUrl>,
    /// `ops.url`, held to what callback URLs are.
    pub ops_url: Option<CallbackUrl>,
    /// `events.schema_dir`'s schemas, compiled.
    pub event_schemas: Arc<EventSchemas>,
}

/// What retention keeps, as a store is given it: the instance's `[retention]`, and the
/// limits of each tenant that sets its own.
#[derive(Debug, Clone, Default)]
pub struct Retention {
    pub instance: RetentionSettings,
    pub tenants: BTreeMap<Tenant, RetentionSettings>,
}

impl Retention {
    /// The limits of each tenant's notifications.
    pub(crate) fn policy(&self) -> retention::Policy {
        let tenants = self.tenants.iter();
        retention::Policy::new(
            retention::Limits::from(&self.instance),
            tenants.map(|(t, r)| (t.clone(), r.into())).collect(),
        )
    }
}

impl From<&RetentionSettings> for retention::Limits {
    fn from(r: &RetentionSettings) -> Self {
        Self::new(r.dead_max_age, r.dead_max_count, r.finished_max_age)
    }
}

impl From<&RetentionSettings> for Retention {
    fn from(r: &RetentionSettings) -> Self {
        Self {
            instance: r.clone(),
            tenants: BTreeMap::new(),
        }
    }
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
    /// Response bytes kept per attempt, if not `delivery.response_bytes`.
    pub response_bytes: Option<usize>,
    /// Where its ops events go, held to what callback URLs are.
    pub ops_url: Option<CallbackUrl>,
    /// How long its endpoints fail before they are paused, if not `endpoints.pause_after`.
    pub pause_after: Option<Duration>,
}

impl Config {
    /// When endpoints are told failing and paused: the instance's settings, and each
    /// tenant's own `pause_after`.
    pub fn endpoint_rules(&self) -> EndpointRules {
        let tenants = self.tenants.iter();
        EndpointRules {
            tell_failing_after: self.settings.ops.failing_after,
            pause_after: self.settings.endpoints.pause_after,
            tenants: tenants
                .filter_map(|(t, c)| Some((t.clone(), c.pause_after?)))
                .collect(),
        }
    }

    /// Defaults, then the TOML file if given, then `POSTBACK_*` environment variables.
    pub fn load(path: Option<&Path>, insecure_no_auth: bool) -> anyhow::Result<Self> {
        Self::validate(loading::read(path)?, insecure_no_auth)
    }

    /// Checks what types alone cannot, naming the key of each problem.
    pub fn validate(settings: Settings, insecure_no_auth: bool) -> anyhow::Result<Self> {
        let s = &settings;
        if s.server.api_tokens.is_empty() && s.tokens.is_empty() && !insecure_no_auth {
            bail!("server.api_tokens: no API token is configured, and the API would be open to anyone. To try postback, give it one: POSTBACK_SERVER_API_TOKENS=dev-token postback serve --config config/postback.toml (scripts/run.sh does that). To run it for real, `{}` prints a token and the [tokens.ops] lines that accept it (name it, and narrow --tenant and --roles, as you need).", crate::tenancy::access::NEW_TOKEN_COMMAND);
        }
        checks::settings(s)?;
        let (store, shards) = checks::store(&s.store)?;
        let secrets = tenants::parse_secrets(&s.signing.secrets, "signing.secrets")?;
        let keys = tenants::parse_keys(&s.signing.keys, "signing.keys")?;
        if let Some(key) = s.secrets.keys().next() {
            bail!("secrets.{key} (POSTBACK_SECRETS_{}): secrets per rate key are gone, since any producer could name a rate key; move them to the `secrets` of a [tenants.<name>] section and register that merchant's notifications with a token of that tenant", key.to_ascii_uppercase());
        }
        let destinations = Destinations::of(s.delivery.allow_private_networks);
        let tenants = tenants::tenants(&s.tenants, destinations)?;
        let proxy = s.delivery.proxy.as_deref().map(str::parse::<ProxyUrl>);
        let proxy = proxy
            .transpose()
            .map_err(|e| anyhow::anyhow!("delivery.proxy (POSTBACK_DELIVERY_PROXY): {e}"))?;
        let ops_url = s.ops.url.as_deref();
        let ops_url = ops_url
            .map(|u| tenants::callback_setting(u, destinations, "ops.url (POSTBACK_OPS_URL)"))
            .transpose()?;
        let profiles = profiles::profiles(&s.profiles, &s.schedules)?;
        let event_schemas = Arc::new(EventSchemas::load(s.events.schema_dir.as_deref())?);
        let portal = s.server.portal_secret.as_deref();
        let portal = portal.map(|p| PortalKey::new(p, tenants.keys()));
        let tokens = if insecure_no_auth && s.server.api_tokens.is_empty() && s.tokens.is_empty() {
            TokenTable::default()
        } else {
            tenants::token_table(s, &tenants)?
        };
        let tokens = tokens.with_portal(portal);
        let config = Self {
            settings,
            store,
            shards,
            secrets,
            keys,
            tenants,
            tokens,
            profiles,
            proxy,
            ops_url,
            event_schemas,
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

    /// What retention keeps: `[retention]`, and where a tenant sets some of its keys
    /// apart (`[tenants.<name>.retention]`), those for its notifications.
    pub fn retention(&self) -> Retention {
        let r = &self.settings.retention;
        let tenants = self.settings.tenants.iter();
        let own = tenants
            .filter(|(_, t)| !t.retention.is_empty())
            .filter_map(|(name, t)| {
                let tenant = Tenant::parse(name, "tenant").ok()?;
                Some((tenant, t.retention.over(r)))
            });
        Retention {
            instance: r.clone(),
            tenants: own.collect(),
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use figment::providers::{Format, Serialized, Toml};
    use figment::Figment;

    use super::loading::extract;
    use super::*;
    use crate::tenancy::access::{self, Action};

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
        let err = Config::validate(s.clone(), false).unwrap_err().to_string();
        assert!(err.contains("seed 2: not a Redis URL"), "{err}");
        s.store.cluster_urls = StringList::from_csv("redis://a:7000,redis://:pw-1@b:x");
        let err = format!("{:#}", Config::validate(s, false).unwrap_err());
        assert!(err.contains("seed 2") && !err.contains("pw-1"), "{err}");
    }

    #[test]
    fn sentinels_mean_redis_through_sentinel_set_alone() {
        let mut s = with_token();
        s.store.redis_sentinels = StringList::from_csv("10.0.0.1:26379, sentinel-2:26379");
        s.store.redis_password = Some("data-secret".into());
        let c = Config::validate(s.clone(), false).unwrap();
        let StoreTarget::Redis(RedisTarget::Sentinel(target)) = &c.store else {
            panic!("{:?}", c.store);
        };
        assert_eq!(target.master_name, DEFAULT_MASTER_NAME);
        assert_eq!(target.sentinels[1].to_string(), "sentinel-2:26379");
        assert_eq!(target.node_auth.password.as_deref(), Some("data-secret"));
        assert_eq!(c.shards, 1);
        assert!(!format!("{target:?}").contains("data-secret"), "{target:?}");

        for (other, named) in [
            ("redis_url", "store.redis_url"),
            ("cluster_urls", "store.cluster_urls"),
        ] {
            let mut both = s.clone();
            match other {
                "redis_url" => both.store.redis_url = Some("redis://c:6379".into()),
                _ => both.store.cluster_urls = StringList::from_csv("redis://a:7000"),
            }
            let err = Config::validate(both, false).unwrap_err().to_string();
            assert!(
                err.starts_with("store.redis_sentinels") && err.contains(named),
                "{err}"
            );
        }
        let mut pg = s.clone();
        pg.store.postgres_url = Some("postgres://p@h/db".into());
        let err = Config::validate(pg, false).unwrap_err().to_string();
        assert!(err.contains("store.redis_sentinels"), "{err}");

        let mut bad = s.clone();
        bad.store.redis_sentinels = StringList::from_csv("10.0.0.1:26379,redis://10.0.0.2");
        let err = Config::validate(bad, false).unwrap_err().to_string();
        assert!(
            err.starts_with("store.redis_sentinels (POSTBACK_STORE_REDIS_SENTINELS): `redis://10.0.0.2` is not host:port"),
            "{err}"
        );
        let mut spaced = s;
        spaced.store.redis_master_name = "my master".into();
        let err = Config::validate(spaced, false).unwrap_err().to_string();
        assert!(err.starts_with("store.redis_master_name"), "{err}");
    }

    #[test]
    fn keys_of_sentinel_are_refused_without_sentinels() {
        let mut s = with_token();
        s.store.redis_url = Some("redis://c:6379".into());
        s.store.redis_password = Some("p".into());
        let err = Config::validate(s.clone(), false).unwrap_err().to_string();
        assert!(
            err.starts_with("store.redis_password") && err.contains("store.redis_sentinels"),
            "{err}"
        );
        s.store.redis_password = None;
        s.store.redis_master_name = "orders".into();
        let err = Config::validate(s, false).unwrap_err().to_string();
        assert!(err.starts_with("store.redis_master_name"), "{err}");
    }

    #[test]
    fn refuses_to_run_without_a_token_unless_told() {
        let err = Config::validate(Settings::default(), false).unwrap_err();
        assert!(err.to_string().contains("server.api_tokens"));
        assert!(Config::validate(Settings::default(), true).is_ok());
    }

    /// Reads settings as `Config::load` does, from TOML text instead of a file.
    fn from_toml(text: &str) -> anyhow::Result<Config> {
        let figment = Figment::from(Serialized::defaults(with_token())).merge(Toml::string(text));
        Config::validate(extract(&figment)?, false)
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
            (
                "[schedules]\nodd = \"1s, nope\"",
                "schedules.odd: [1]: `nope` is not a duration",
            ),
            (
                "[schedules]\nodd = [\"1s\", \"9d\"]",
                "schedules.odd: [1]: interval `9d` out of range",
            ),
            (
                "[quotas]\nshop = \"fast\"",
                "quotas.shop: `fast` is not a quota",
            ),
            (
                "[delivery]\nrate_limit = 5",
                "delivery.rate_limit: `5` is not a quota like 50/s",
            ),
            (
                "[delivery]\nresponse_bytes = 70000",
                "delivery.response_bytes: must be at most 65536 (64 KiB)",
            ),
            (
                "[tenants.shop-a]\nresponse_bytes = 65537",
                "tenants.shop-a.response_bytes: must be at most 65536 (64 KiB)",
            ),
            (
                "[delivery]\njitter = \"95%\"",
                "delivery.jitter: must be from 0% to 90%",
            ),
            (
                "[server]\nlisen = \"127.0.0.1:1\"",
                "server.lisen: no such key (did you mean `listen`?); those of server are listen, ",
            ),
            (
                "[delivery]\ntimeout = 10",
                "delivery.timeout: `10` is not a duration: a number and a unit",
            ),
            (
                "[delivery]\nconcurrency = \"many\"",
                "delivery.concurrency: `many` is not a whole number",
            ),
            (
                "[delivery]\ntimeout = \"10 seconds or so\"",
                "delivery.timeout: `10 seconds or so` is not a duration: a number and a unit",
            ),
            (
                "[delivery]\njitter = 101",
                "delivery.jitter: 101% is more than 100%",
            ),
            (
                "[delivery]\njitter = \"a lot\"",
                "delivery.jitter: `a lot` is not a percentage",
            ),
            (
                "[signing]\nsecrets = \"not-a-secret\"",
                "signing.secrets: a secret must start with",
            ),
            (
                "[secrets]\nshop = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
                "secrets.shop (POSTBACK_SECRETS_SHOP): secrets per rate key are gone",
            ),
            (
                "[tokens.x]\nsha256 = \"abc\"\ntenant = \"*\"\nroles = [\"read\"]",
                "tokens.x.sha256: must be the 64 hex digits",
            ),
            (
                &token("shop-z", "\"read\""),
                "tokens.x.tenant: no tenant `shop-z` is configured",
            ),
            (
                &token("shop a", "\"read\""),
                "tokens.x.tenant: `shop a`: a tenant is",
            ),
            (
                &token("*", "\"root\""),
                "tokens.x.roles.0: unknown variant: found `root`",
            ),
            (&token("*", ""), "tokens.x.roles: must name at least one"),
            (
                "[tokens.x]\ntenant = \"*\"\nroles = [\"read\"]",
                "missing field `sha256`",
            ),
            ("[tenants.\"shop a\"]", "tenants.shop a: a tenant is"),
            (
                "[tenants.a]\nkeys = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]",
                "tenants.a.keys: a signing key must start with `whsk_`",
            ),
            (
                "[signing]\nkeys = \"whsk_YWJj\"",
                "signing.keys: a signing key holds 32 bytes",
            ),
            (
                "[profiles.p]\nschedule = \"nope\"",
                "profiles.p.schedule: no schedule named `nope`",
            ),
            (
                "[profiles.p]\nsuccess = { status = [410] }",
                "profiles.p.success.status: 410 is not",
            ),
            (
                "[tenants.a]\nallowed_hosts = [\"http://x\"]",
                "tenants.a.allowed_hosts: `http://x` is not a host name",
            ),
            (
                "[tenants.a]\nsecrets = [\"nope\"]",
                "tenants.a.secrets: a secret must start with",
            ),
            (
                &format!(
                    "{}\n[tokens.y]\nsha256 = \"{}\"\ntenant = \"*\"\nroles = [\"read\"]",
                    token("*", "\"read\""),
                    access::digest_hex("tok-x")
                ),
                "tokens.y.sha256: the same token as x",
            ),
        ];
        for (text, expected) in refused {
            let err = from_toml(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn every_key_no_setting_has_is_named_with_the_one_meant() {
        let three = "[server]\nzzz = 1\naaa = 2\n[store]\nbad = 3\nshards = \"x\"";
        let err = from_toml(three).unwrap_err().to_string();
        let named = [
            "server.zzz: no such key",
            "server.aaa: no such key",
            "store.bad: no such key",
            "store.shards: `x` is not a whole number",
        ];
        for named in named {
            assert!(err.contains(named), "{named}: {err}");
        }
        let err = from_toml("[server]\nlisten = 5\n[delivery]\ntimeout = 5")
            .unwrap_err()
            .to_string();
        for named in ["server.listen: `5` is not", "delivery.timeout: `5` is not"] {
            assert!(err.contains(named), "{named}: {err}");
        }
        let sections = [
            (
                "[tenant.shop-a]",
                "tenant: no such key (did you mean `tenants`?)",
            ),
            (
                "[token.ops]\ntenant = \"*\"",
                "token: no such key (did you mean `tokens`?)",
            ),
            (
                "[server]\nlisen = \"127.0.0.1:1\"",
                "server.lisen: no such key (did you mean `listen`?)",
            ),
        ];
        for (text, said) in sections {
            let err = from_toml(text).unwrap_err().to_string();
            assert!(err.contains(said), "{text}: {err}");
        }
        let err = from_toml("[server]\nqqqqqq = 1").unwrap_err().to_string();
        assert!(!err.contains("did you mean"), "nothing is like it: {err}");
    }

    #[test]
    fn an_error_in_a_file_names_the_file_and_no_variable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("postback.toml");
        let text = "[server]\napi_tokens = \"t\"\n[delivery]\njitter = \"a lot\"\n";
        std::fs::write(&path, text).unwrap();
        let err = Config::load(Some(&path), false).unwrap_err().to_string();
        let expected = format!("delivery.jitter in {}: `a lot`", path.display());
        assert!(err.contains(&expected), "{err}");
        assert!(!err.contains("POSTBACK_"), "{err}");
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
        assert!(p.may(Action::Read) && !p.may(Action::Cancel));
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
