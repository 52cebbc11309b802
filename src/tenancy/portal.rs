//! Portal links: short-lived credentials a merchant's browser presents, scoped to one
//! configured tenant and to the link roles (`access::LinkRole`) it was issued with:
//! `read` always, and `operate`, `cancel`, `replay`… only if named. An operator asks a
//! running instance for one (`POST /portal-links`, which `postback portal-link` calls;
//! `PortalKey::issue`); the API takes it as a bearer token like any other
//! (`PortalKey::verify`), naming the caller `portal:<tenant>` in the audit log.
//!
//! A credential is `pt_<claims>.<tag>`: the claims (tenant, roles, expiry) as URL-safe
//! base64 JSON, and their HMAC-SHA256 under `server.portal_secret`. Nothing is stored:
//! a link is good until it expires or its tenant leaves the configuration, and rotating
//! the secret revokes every link at once. It lives in a URL's fragment (`/ui#token=…`),
//! which browsers do not send, so no proxy or access log sees it.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::domain::Tenant;
use crate::tenancy::access::{LinkRole, Principal};

/// What every credential starts with, so that it is told from a configured token.
pub const PREFIX: &str = "pt_";
/// The shortest `server.portal_secret`, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;
/// The longest life a link may be given.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// What a credential says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Claims {
    /// The tenant.
    t: String,
    /// The roles, by name.
    r: Vec<String>,
    /// When it expires, seconds since the epoch.
    e: u64,
}

/// Signs and checks credentials with `server.portal_secret`, for the configured
/// tenants.
pub struct PortalKey {
    key: hmac::Key,
    tenants: BTreeSet<Tenant>,
}

/// Why a link cannot be issued.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    #[error("must be more than 0s and at most 24h")]
    Ttl,
    #[error("no tenant `{asked}` is configured (configured: {}); add a [tenants.{asked}] section to the instance's configuration file (it may be empty) and restart it", names(.configured))]
    Tenant {
        asked: Tenant,
        configured: Vec<Tenant>,
    },
}

impl IssueError {
    /// The field of a request the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            IssueError::Ttl => "ttl",
            IssueError::Tenant { .. } => "tenant",
        }
    }
}

fn names(tenants: &[Tenant]) -> String {
    let names: Vec<&str> = tenants.iter().map(|t| &**t).collect();
    names.join(", ")
}

/// Where a credential opens the review page, relative to the instance's address: in the
/// fragment, which browsers do not send.
pub fn page_path(credential: &str) -> String {
    format!("/ui#token={credential}")
}

impl PortalKey {
    /// The key of `secret`, which must be at least `MIN_SECRET_BYTES` long (checked
    /// with the configuration), for links of `tenants` only.
    pub fn new<'a>(secret: &str, tenants: impl IntoIterator<Item = &'a Tenant>) -> Self {
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
            tenants: tenants.into_iter().cloned().collect(),
        }
    }

    /// A credential for `tenant` (a configured one) with `roles` (read is always among
    /// them), good for `ttl` from `now`.
    pub fn issue(
        &self,
        tenant: &Tenant,
        roles: &[LinkRole],
        ttl: Duration,
        now: SystemTime,
    ) -> Result<String, IssueError> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(IssueError::Ttl);
        }
        if !self.tenants.contains(tenant) {
            return Err(IssueError::Tenant {
                asked: tenant.clone(),
                configured: self.tenants.iter().cloned().collect(),
            });
        }
        let names = LinkRole::ALL
            .into_iter()
            .filter(|r| *r == LinkRole::Read || roles.contains(r))
            .map(|r| r.name().to_string())
            .collect();
        let claims = Claims {
            t: tenant.to_string(),
            r: names,
            e: seconds(now + ttl),
        };
        let body = B64.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let tag = hmac::sign(&self.key, body.as_bytes());
        Ok(format!("{PREFIX}{body}.{}", B64.encode(tag.as_ref())))
    }

    /// The caller a credential names, if it is one this key signed, it has not expired
    /// at `now`, and its tenant is still configured. Only the roles it names are its.
    pub fn verify(&self, credential: &str, now: SystemTime) -> Option<Principal> {
        let (body, tag) = credential.strip_prefix(PREFIX)?.split_once('.')?;
        let tag = B64.decode(tag).ok()?;
        hmac::verify(&self.key, body.as_bytes(), &tag).ok()?;
        let claims: Claims = serde_json::from_slice(&B64.decode(body).ok()?).ok()?;
        if claims.e <= seconds(now) {
            return None;
        }
        let tenant = Tenant::parse(&claims.t, "tenant").ok()?;
        if !self.tenants.contains(&tenant) {
            return None;
        }
        let roles: Vec<LinkRole> = LinkRole::ALL
            .into_iter()
            .filter(|r| claims.r.iter().any(|n| n == r.name()))
            .collect();
        let expires = UNIX_EPOCH + Duration::from_secs(claims.e);
        Some(Principal::link(tenant, &roles, expires))
    }
}

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenancy::access::{Action, Scope};

    const SECRET: &str = "a portal secret of thirty-two bytes or more";

    fn shop_a() -> Tenant {
        Tenant::parse("shop-a", "tenant").unwrap()
    }

    fn key() -> PortalKey {
        PortalKey::new(SECRET, &[shop_a(), Tenant::default()])
    }

    #[test]
    fn a_link_names_its_tenant_and_roles_until_it_expires() {
        let key = key();
        let now = crate::clock::system_now();
        let hour = Duration::from_secs(3600);
        let link = key
            .issue(&shop_a(), &[LinkRole::Operate], hour, now)
            .unwrap();
        let caller = key.verify(&link, now).unwrap();
        assert_eq!(caller.actor, "portal:shop-a");
        assert_eq!(caller.scope, Scope::One(shop_a()));
        assert_eq!(caller.roles(), ["read", "operate"]);
        assert!(caller.may(Action::Read) && caller.may(Action::Resend));
        assert!(!caller.may(Action::Cancel) && !caller.may(Action::Replay));
        assert!(!caller.may(Action::Register) && !caller.may(Action::Audit));
        assert_eq!(key.verify(&link, now + hour), None, "expired");
        let read_only = key.issue(&shop_a(), &[LinkRole::Read], hour, now).unwrap();
        assert!(!key.verify(&read_only, now).unwrap().may(Action::Resend));
    }

    #[test]
    fn a_link_changed_or_signed_with_another_secret_is_refused() {
        let key = key();
        let now = crate::clock::system_now();
        let hour = Duration::from_secs(3600);
        let link = key.issue(&shop_a(), &[LinkRole::Read], hour, now).unwrap();
        let rotated = PortalKey::new("another portal secret, thirty-two bytes", &[shop_a()]);
        assert_eq!(
            rotated.verify(&link, now),
            None,
            "rotating the secret revokes it"
        );
        let (body, tag) = link.split_once('.').unwrap();
        let claims = B64.decode(body.strip_prefix(PREFIX).unwrap()).unwrap();
        let other = String::from_utf8(claims)
            .unwrap()
            .replace("shop-a", "shop-b");
        let forged = format!("{PREFIX}{}.{tag}", B64.encode(other));
        assert_eq!(key.verify(&forged, now), None);
        assert_eq!(key.verify("pt_garbage", now), None);
        assert_eq!(key.verify(&link.replace(PREFIX, ""), now), None);
    }

    #[test]
    fn a_link_is_for_a_configured_tenant_for_a_day_at_most() {
        let key = key();
        let now = crate::clock::system_now();
        let day = Duration::from_secs(24 * 3600);
        let gone = Tenant::parse("shop-gone", "tenant").unwrap();
        let said = key.issue(&gone, &[], day, now).unwrap_err();
        assert_eq!(said.field(), "tenant");
        assert_eq!(
            said.to_string(),
            "no tenant `shop-gone` is configured (configured: default, shop-a); add a \
             [tenants.shop-gone] section to the instance's configuration file (it may be \
             empty) and restart it"
        );
        let long = key.issue(
            &shop_a(),
            &[LinkRole::Read],
            day + Duration::from_secs(1),
            now,
        );
        assert_eq!(long, Err(IssueError::Ttl));
        assert_eq!(
            key.issue(&shop_a(), &[], Duration::ZERO, now),
            Err(IssueError::Ttl)
        );
        let link = key.issue(&shop_a(), &[], day, now).unwrap();
        let without = PortalKey::new(SECRET, &[Tenant::default()]);
        assert_eq!(
            without.verify(&link, now),
            None,
            "shop-a left the configuration"
        );
    }
}
