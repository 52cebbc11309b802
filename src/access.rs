//! Who may call the API, for which tenant, to do what. A token is configured by the
//! SHA-256 of its value (the value itself is never written down), with a tenant or `*`
//! for all, and roles; a request's token is hashed and compared in constant time with
//! every configured hash, and becomes the request's `Principal`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::SystemTime;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::domain::Tenant;
use crate::portal::PortalKey;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Register notifications, and read its tenant's by id.
    Notify,
    /// Read notifications, dead letters, counts and the overview.
    Read,
    /// Cancel, replay, discard and purge.
    Operate,
    /// Read the audit log.
    Audit,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Notify, Role::Read, Role::Operate, Role::Audit];

    pub fn name(self) -> &'static str {
        match self {
            Role::Notify => "notify",
            Role::Read => "read",
            Role::Operate => "operate",
            Role::Audit => "audit",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == raw.trim())
            .ok_or_else(|| format!("`{raw}` is not one of notify, read, operate, audit"))
    }
}

/// Which tenants a token acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    One(Tenant),
}

impl Scope {
    /// `*` or a tenant's name.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw == "*" {
            return Ok(Scope::All);
        }
        Tenant::parse(raw, "tenant")
            .map(Scope::One)
            .map_err(|e| format!("`{raw}`: {}, or `*` for every tenant", e.message))
    }

    pub fn covers(&self, tenant: &Tenant) -> bool {
        match self {
            Scope::All => true,
            Scope::One(own) => own == tenant,
        }
    }
}

/// The caller of one request: the token's name (the actor in the audit log), its
/// tenants, its roles, and when its credential expires (a portal link's; configured
/// tokens do not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub actor: String,
    pub scope: Scope,
    roles: u8,
    pub expires: Option<SystemTime>,
}

impl Principal {
    pub fn new(actor: impl Into<String>, scope: Scope, roles: &[Role]) -> Self {
        Self {
            actor: actor.into(),
            scope,
            roles: roles.iter().fold(0, |acc, r| acc | r.bit()),
            expires: None,
        }
    }

    /// The same caller, whose credential expires at `at`.
    pub fn expiring(self, at: SystemTime) -> Self {
        Self {
            expires: Some(at),
            ..self
        }
    }

    /// Its roles, in the order of `Role::ALL`.
    pub fn roles(&self) -> impl Iterator<Item = Role> + '_ {
        Role::ALL.into_iter().filter(|r| self.may(*r))
    }

    /// Every tenant, every role: a token of `server.api_tokens`, or anyone when
    /// authentication is off.
    pub fn everything(actor: impl Into<String>) -> Self {
        Self::new(actor, Scope::All, &Role::ALL)
    }

    pub fn may(&self, role: Role) -> bool {
        self.roles & role.bit() != 0
    }
}

/// The configured tokens, by hash; empty means authentication is off.
#[derive(Clone, Default)]
pub struct TokenTable {
    entries: Vec<([u8; 32], Principal)>,
    /// Checks portal links, when `server.portal_secret` is set.
    portal: Option<Arc<PortalKey>>,
}

impl TokenTable {
    pub fn new(entries: Vec<([u8; 32], Principal)>) -> Self {
        Self {
            entries,
            portal: None,
        }
    }

    /// The same, accepting the portal links `portal` signed.
    pub fn with_portal(self, portal: Option<PortalKey>) -> Self {
        Self {
            portal: portal.map(Arc::new),
            ..self
        }
    }

    /// The principal of a portal link that has not expired.
    pub fn identify_link(&self, link: &str) -> Option<Principal> {
        let portal = self.portal.as_ref()?;
        portal.verify(link, std::time::SystemTime::now())
    }

    /// No token is needed (`--insecure-no-auth`).
    pub fn is_open(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal of `token`, if it is configured. Every hash is compared, in constant
    /// time, whatever matches first.
    pub fn identify(&self, token: &str) -> Option<&Principal> {
        let presented = digest(token);
        let mut found = None;
        for (hash, principal) in &self.entries {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(principal);
            }
        }
        found
    }
}

/// Names only: neither tokens nor their hashes are ever printed.
impl fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(_, p)| &p.actor))
            .finish()
    }
}

/// The SHA-256 of a token.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A configured `sha256`: 64 hex digits.
pub fn parse_digest(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    let bad = || "must be the 64 hex digits of the token's SHA-256".to_string();
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// The hex SHA-256 of a token, as configuration writes it.
pub fn digest_hex(token: &str) -> String {
    hex(&digest(token))
}

/// Bytes as lower-case hex digits.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh token: `pbk_` and 32 random bytes from the operating system, base64url.
pub fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(format!("pbk_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_known_by_its_hash_only() {
        let ops = Principal::new("ops", Scope::All, &[Role::Read, Role::Operate]);
        let table = TokenTable::new(vec![(
            parse_digest(&digest_hex("secret-1")).unwrap(),
            ops.clone(),
        )]);
        assert_eq!(table.identify("secret-1"), Some(&ops));
        assert_eq!(table.identify("secret-2"), None);
        assert_eq!(table.identify(&digest_hex("secret-1")), None);
        assert!(ops.may(Role::Operate) && !ops.may(Role::Audit));
        assert_eq!(format!("{table:?}"), "[\"ops\"]");
    }

    #[test]
    fn a_digest_is_64_hex_digits() {
        assert!(parse_digest(&"ab".repeat(32)).is_ok());
        assert!(parse_digest(&"ab".repeat(31)).is_err());
        assert!(parse_digest(&"zz".repeat(32)).is_err());
        assert!(parse_digest(&"é".repeat(32)).is_err());
    }

    #[test]
    fn fresh_tokens_differ() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert!(a.starts_with("pbk_") && a.len() == 47 && a != b);
    }

    #[test]
    fn a_scope_is_a_tenant_or_every_one() {
        assert_eq!(Scope::parse("*"), Ok(Scope::All));
        let a = Tenant::parse("shop-a", "tenant").unwrap();
        assert_eq!(Scope::parse("shop-a"), Ok(Scope::One(a.clone())));
        assert!(Scope::parse("shop a").is_err());
        assert!(Scope::One(a.clone()).covers(&a));
        assert!(!Scope::One(a).covers(&Tenant::default()));
    }
}
