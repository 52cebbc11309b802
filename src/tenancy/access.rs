//! Who may call the API, for which tenant, to do what. A token is configured by the
//! SHA-256 of its value (the value itself is never written down), with a tenant or `*`
//! for all, and roles; a request's token is hashed and compared in constant time with
//! every configured hash, and becomes the request's `Principal`. What each route does is
//! an `Action`; the roles of a configured token (`Role`) and of a portal link
//! (`LinkRole`) grant actions, here and nowhere else.

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
use crate::tenancy::portal::PortalKey;

/// What a route does, as far as who may call it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Register notifications and publish events.
    Register,
    /// Read one notification by its id.
    Lookup,
    /// Read notifications, dead letters, endpoints, subscriptions, events, counts.
    Read,
    /// Resend one finished notification as it was, or make a pending one due now.
    Resend,
    /// Pause or resume an endpoint.
    Pause,
    /// Cancel a notification.
    Cancel,
    /// Replay a dead letter.
    Replay,
    /// Replay to another URL or with other headers.
    Redirect,
    /// Resend or replay with another schedule or delay.
    Reschedule,
    /// Discard a dead letter.
    Discard,
    /// Act on every notification a filter matches, or on an event's.
    Bulk,
    /// Create, change or delete subscriptions.
    Subscriptions,
    /// Read the audit log.
    Audit,
    /// Issue portal links: an operator's power, which no link has.
    IssueLink,
}

impl Action {
    pub const ALL: [Action; 14] = [
        Action::Register,
        Action::Lookup,
        Action::Read,
        Action::Resend,
        Action::Pause,
        Action::Cancel,
        Action::Replay,
        Action::Redirect,
        Action::Reschedule,
        Action::Discard,
        Action::Bulk,
        Action::Subscriptions,
        Action::Audit,
        Action::IssueLink,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::Register => "register",
            Action::Lookup => "lookup",
            Action::Read => "read",
            Action::Resend => "resend",
            Action::Pause => "pause",
            Action::Cancel => "cancel",
            Action::Replay => "replay",
            Action::Redirect => "redirect",
            Action::Reschedule => "reschedule",
            Action::Discard => "discard",
            Action::Bulk => "bulk",
            Action::Subscriptions => "subscriptions",
            Action::Audit => "audit",
            Action::IssueLink => "issue_link",
        }
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// What a configured token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Register notifications, and read its tenant's by id.
    Notify,
    /// Read notifications, dead letters, counts and the overview.
    Read,
    /// Every action on notifications, dead letters, endpoints and subscriptions, and
    /// issuing portal links.
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

    /// The actions it grants.
    pub fn grants(self) -> &'static [Action] {
        use Action::*;
        match self {
            Role::Notify => &[Register, Lookup],
            Role::Read => &[Lookup, Read],
            Role::Operate => &[
                Resend,
                Pause,
                Cancel,
                Replay,
                Redirect,
                Reschedule,
                Discard,
                Bulk,
                Subscriptions,
                IssueLink,
            ],
            Role::Audit => &[Audit],
        }
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

/// What a portal link may do: it always reads; `operate` resends, attempts now, pauses
/// and resumes; every other action needs the role of its name. A link never registers,
/// never reads the audit log and never issues links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRole {
    Read,
    Operate,
    Cancel,
    Replay,
    Redirect,
    Reschedule,
    Discard,
    Bulk,
    Subscriptions,
}

impl LinkRole {
    pub const ALL: [LinkRole; 9] = [
        LinkRole::Read,
        LinkRole::Operate,
        LinkRole::Cancel,
        LinkRole::Replay,
        LinkRole::Redirect,
        LinkRole::Reschedule,
        LinkRole::Discard,
        LinkRole::Bulk,
        LinkRole::Subscriptions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LinkRole::Read => "read",
            LinkRole::Operate => "operate",
            LinkRole::Cancel => "cancel",
            LinkRole::Replay => "replay",
            LinkRole::Redirect => "redirect",
            LinkRole::Reschedule => "reschedule",
            LinkRole::Discard => "discard",
            LinkRole::Bulk => "bulk",
            LinkRole::Subscriptions => "subscriptions",
        }
    }

    /// The actions it grants.
    pub fn grants(self) -> &'static [Action] {
        use Action::*;
        match self {
            LinkRole::Read => &[Lookup, Read],
            LinkRole::Operate => &[Resend, Pause],
            LinkRole::Cancel => &[Cancel],
            LinkRole::Replay => &[Replay],
            LinkRole::Redirect => &[Redirect],
            LinkRole::Reschedule => &[Reschedule],
            LinkRole::Discard => &[Discard],
            LinkRole::Bulk => &[Bulk],
            LinkRole::Subscriptions => &[Subscriptions],
        }
    }
}

impl FromStr for LinkRole {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let names: Vec<&str> = LinkRole::ALL.iter().map(|r| r.name()).collect();
        LinkRole::ALL
            .into_iter()
            .find(|r| r.name() == raw.trim())
            .ok_or_else(|| format!("`{raw}` is not one of {}", names.join(", ")))
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
/// tenants, its roles and the actions they grant, and when its credential expires (a
/// portal link's; configured tokens do not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub actor: String,
    pub scope: Scope,
    roles: Vec<&'static str>,
    actions: u16,
    link: bool,
    pub expires: Option<SystemTime>,
}

impl Principal {
    /// A configured token's caller.
    pub fn new(actor: impl Into<String>, scope: Scope, roles: &[Role]) -> Self {
        let roles: Vec<Role> = Role::ALL
            .into_iter()
            .filter(|r| roles.contains(r))
            .collect();
        Self {
            actor: actor.into(),
            scope,
            roles: roles.iter().map(|r| r.name()).collect(),
            actions: granted(roles.iter().flat_map(|r| r.grants())),
            link: false,
            expires: None,
        }
    }

    /// A portal link's caller: `portal:<tenant>`, until `expires`.
    pub fn link(tenant: Tenant, roles: &[LinkRole], expires: SystemTime) -> Self {
        let roles: Vec<LinkRole> = LinkRole::ALL
            .into_iter()
            .filter(|r| roles.contains(r))
            .collect();
        Self {
            actor: format!("portal:{tenant}"),
            scope: Scope::One(tenant),
            roles: roles.iter().map(|r| r.name()).collect(),
            actions: granted(roles.iter().flat_map(|r| r.grants())),
            link: true,
            expires: Some(expires),
        }
    }

    /// Its roles' names, in the order of `Role::ALL` (`LinkRole::ALL` for a link).
    pub fn roles(&self) -> &[&'static str] {
        &self.roles
    }

    /// Each of its roles, in its order, with the actions it grants: a role of the same
    /// name may grant more to a configured token than to a portal link (`operate`).
    pub fn grants(&self) -> impl Iterator<Item = (&'static str, &'static [Action])> + '_ {
        self.roles.iter().map(|&name| {
            let grants = match self.link {
                true => LinkRole::ALL
                    .into_iter()
                    .find(|r| r.name() == name)
                    .map(LinkRole::grants),
                false => Role::ALL
                    .into_iter()
                    .find(|r| r.name() == name)
                    .map(Role::grants),
            };
            (name, grants.unwrap_or_default())
        })
    }

    /// What its roles let it do, in the order of `Action::ALL`.
    pub fn actions(&self) -> impl Iterator<Item = Action> + '_ {
        Action::ALL.into_iter().filter(|a| self.may(*a))
    }

    /// Every tenant, every role: a token of `server.api_tokens`, or anyone when
    /// authentication is off.
    pub fn everything(actor: impl Into<String>) -> Self {
        Self::new(actor, Scope::All, &Role::ALL)
    }

    /// Whether its roles grant `action`: the one question every route asks.
    pub fn may(&self, action: Action) -> bool {
        self.actions & action.bit() != 0
    }

    /// The role that would grant `action` to a caller of its kind (token or link), if
    /// any does.
    pub fn role_for(&self, action: Action) -> Option<&'static str> {
        match self.link {
            true => LinkRole::ALL
                .into_iter()
                .find(|r| r.grants().contains(&action))
                .map(LinkRole::name),
            false => Role::ALL
                .into_iter()
                .find(|r| r.grants().contains(&action))
                .map(Role::name),
        }
    }

    /// Whether it is a portal link's.
    pub fn is_link(&self) -> bool {
        self.link
    }
}

/// The set of `actions`, as bits.
fn granted<'a>(actions: impl Iterator<Item = &'a Action>) -> u16 {
    actions.fold(0, |acc, a| acc | a.bit())
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

    /// What signs and checks portal links, when `server.portal_secret` is set.
    pub fn portal(&self) -> Option<Arc<PortalKey>> {
        self.portal.clone()
    }

    /// The principal of a portal link that has not expired.
    pub fn identify_link(&self, link: &str) -> Option<Principal> {
        let portal = self.portal.as_ref()?;
        portal.verify(link, crate::clock::system_now())
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

/// The command that makes a token for every tenant with every role, as messages name it.
pub const NEW_TOKEN_COMMAND: &str =
    "postback token new ops --tenant '*' --roles notify,read,operate,audit";

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
        assert!(ops.may(Action::Cancel) && !ops.may(Action::Audit));
        assert_eq!(format!("{table:?}"), "[\"ops\"]");
    }

    #[test]
    fn a_tokens_operate_does_everything_a_links_operate_resends_and_pauses() {
        let shop = Tenant::parse("shop-a", "tenant").unwrap();
        let token = Principal::new("ops", Scope::One(shop.clone()), &[Role::Operate]);
        let operating = Action::ALL.into_iter().filter(|a| {
            ![
                Action::Register,
                Action::Lookup,
                Action::Read,
                Action::Audit,
            ]
            .contains(a)
        });
        assert!(operating.clone().all(|a| token.may(a)));
        let at = crate::clock::system_now();
        let link = Principal::link(shop.clone(), &[LinkRole::Read, LinkRole::Operate], at);
        let may: Vec<Action> = link.actions().collect();
        use Action::*;
        assert_eq!(may, [Lookup, Read, Resend, Pause]);
        assert_eq!(link.roles(), ["read", "operate"]);
        let grants: Vec<_> = link.grants().collect();
        assert_eq!(
            grants,
            [("read", &[Lookup, Read][..]), ("operate", &[Resend, Pause])]
        );
        let (name, grants) = token.grants().next().unwrap();
        assert_eq!((name, grants), ("operate", Role::Operate.grants()));
        assert!(grants.len() > 2, "a token's operate is more than a link's");
        assert_eq!(link.actor, "portal:shop-a");
        assert_eq!(link.role_for(Cancel), Some("cancel"));
        assert_eq!(link.role_for(Register), None, "a link never registers");
        assert_eq!(token.role_for(Cancel), Some("operate"));
        let every = Principal::link(shop, &LinkRole::ALL, at);
        let operating_on_notifications = operating.clone().filter(|a| *a != IssueLink);
        assert!(operating_on_notifications.clone().all(|a| every.may(a)));
        assert!(!every.may(Register) && !every.may(Audit));
        assert!(!every.may(IssueLink), "a link never issues links");
        assert_eq!(every.role_for(IssueLink), None);
    }

    #[test]
    fn a_link_role_is_one_of_its_names() {
        assert_eq!("cancel".parse(), Ok(LinkRole::Cancel));
        let said = "notify".parse::<LinkRole>().unwrap_err();
        assert!(
            said.contains("`notify` is not one of read, operate"),
            "{said}"
        );
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
