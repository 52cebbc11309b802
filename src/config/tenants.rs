//! `[tenants.*]` and `[tokens.*]`: each tenant's name checked and its secrets, keys,
//! TLS, allowed hosts and quotas decoded; each token bound to every tenant or to a
//! configured one, with its roles, in the `TokenTable`.

use std::collections::BTreeMap;

use anyhow::bail;

use super::checks::{check, check_limits};
use super::{RetentionSettings, Settings, StringList, TenantConfig, TenantSettings, TenantTls};
use crate::delivery::signing::{Secret, SigningKey};
use crate::domain::{CallbackUrl, Destinations, HostAllowList, Tenant, MAX_RESPONSE_BYTES};
use crate::tenancy::access::{self, Principal, Scope, TokenTable};

/// The tenants, each name checked and its secrets and allowed hosts decoded; `default`
/// is always one of them.
pub(super) fn tenants(
    raw: &BTreeMap<String, TenantSettings>,
    destinations: Destinations,
) -> anyhow::Result<BTreeMap<Tenant, TenantConfig>> {
    let mut out = BTreeMap::from([(Tenant::default(), TenantConfig::default())]);
    for (name, t) in raw {
        let tenant = Tenant::parse(name, "tenant")
            .map_err(|e| anyhow::anyhow!("tenants.{name}: {}", e.message))?;
        let secrets = parse_secrets(&t.secrets, &format!("tenants.{name}.secrets"))?;
        let keys = parse_keys(&t.keys, &format!("tenants.{name}.keys"))?;
        let tls = TenantTls::read(t, &format!("tenants.{name}"))?;
        let own = t.retention.over(&RetentionSettings::default());
        check_limits(&own, &format!("tenants.{name}.retention"))?;
        if t.max_concurrency == Some(0) {
            bail!("tenants.{name}.max_concurrency: must be at least 1");
        }
        check(
            t.response_bytes.is_none_or(|n| n <= MAX_RESPONSE_BYTES),
            &format!("tenants.{name}.response_bytes"),
            "must be at most 65536 (64 KiB)",
        )?;
        let allowed_hosts = t
            .allowed_hosts
            .as_ref()
            .map(|list| HostAllowList::parse(list.as_slice()))
            .transpose()
            .map_err(|e| anyhow::anyhow!("tenants.{name}.allowed_hosts: {e}"))?;
        let ops_url = t.ops_url.as_deref();
        let key = format!("tenants.{name}.ops_url");
        let ops_url = ops_url
            .map(|u| callback_setting(u, destinations, &key))
            .transpose()?;
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
                response_bytes: t.response_bytes,
                ops_url,
                pause_after: t.pause_after,
            },
        );
    }
    Ok(out)
}

/// A URL setting postback sends to, held to what callback URLs are (the SSRF guard
/// included); errors name `key`.
pub(super) fn callback_setting(
    raw: &str,
    destinations: Destinations,
    key: &str,
) -> anyhow::Result<CallbackUrl> {
    CallbackUrl::parse(raw, destinations).map_err(|e| anyhow::anyhow!("{key}: {}", e.message))
}

/// `server.api_tokens` (every tenant, every role, named `api_token_1`, …) and the named
/// `[tokens]`, each bound to `*` or a configured tenant.
pub(super) fn token_table(
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

pub(super) fn parse_secrets(raw: &StringList, key: &str) -> anyhow::Result<Vec<Secret>> {
    raw.iter()
        .map(|s| Secret::parse(s).map_err(|e| anyhow::anyhow!("{key}: {e}")))
        .collect()
}

pub(super) fn parse_keys(raw: &StringList, key: &str) -> anyhow::Result<Vec<SigningKey>> {
    raw.iter()
        .map(|s| SigningKey::parse(s).map_err(|e| anyhow::anyhow!("{key}: {e}")))
        .collect()
}
