//! Bearer tokens for every route but health and metrics: the token names the caller
//! (`access::Principal`), which must be granted every action of its route
//! (`permits::needs`) before the handler runs; the handler then asks for the tenant of
//! what it touches. Another tenant's notification is answered as if it did not exist.

use axum::extract::{MatchedPath, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::permits;
use crate::domain::{FieldError, Tenant};
use crate::store::JobState;
use crate::tenancy::access::{self, Action, Principal, Scope, TokenTable};

/// Who calls when authentication is off (`--insecure-no-auth`).
const ANONYMOUS: &str = "anonymous";

/// Names the caller of `request` (in its extensions, as a `Principal`) if its token
/// grants every action of its route.
pub fn authorize(tokens: &TokenTable, request: &mut Request) -> Result<(), ApiError> {
    let principal = if tokens.is_open() {
        Principal::everything(ANONYMOUS)
    } else {
        let token = presented(request.headers()).ok_or(ApiError::unauthorized(false))?;
        let configured = tokens.identify(token).cloned();
        configured
            .or_else(|| tokens.identify_link(token))
            .ok_or(ApiError::unauthorized(true))?
    };
    let route = request.extensions().get::<MatchedPath>();
    let needs = route.and_then(|r| permits::needs(request.method(), r.as_str()));
    let needs = needs.ok_or_else(|| forbidden(&principal, None, "this route"))?;
    for action in needs {
        require(&principal, *action)?;
    }
    request.extensions_mut().insert(principal);
    Ok(())
}

/// The bearer token a request presents, if any.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
}

/// Whether a request presents the token whose SHA-256 is `expected` (compared in
/// constant time).
pub fn presents(headers: &HeaderMap, expected: &[u8; 32]) -> bool {
    presented(headers).is_some_and(|t| bool::from(access::digest(t).ct_eq(expected)))
}

/// The token of an `Authorization` header value, whatever the case of `Bearer`.
fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// `403 forbidden` unless the caller's roles grant `action`.
pub fn require(caller: &Principal, action: Action) -> Result<(), ApiError> {
    match caller.may(action) {
        true => Ok(()),
        false => Err(forbidden(caller, Some(action), "this route")),
    }
}

/// `403 forbidden` unless the caller may resend a notification in `state`: a dead one
/// needs `replay` too, a cancelled one `cancel` (`permits::to_resend`).
pub fn require_to_resend(caller: &Principal, state: JobState) -> Result<(), ApiError> {
    match permits::to_resend(state).iter().find(|a| !caller.may(**a)) {
        None => Ok(()),
        Some(missing) => {
            let what = format!("resending a {} notification", state.as_str());
            Err(forbidden(caller, Some(*missing), &what))
        }
    }
}

/// `403 forbidden` unless the caller may also change where a replay goes (its URL or
/// headers: `redirect`) and when a replay or resend goes (its schedule or delay:
/// `reschedule`), when its body asks to.
pub fn require_changes(caller: &Principal, callback: bool, timing: bool) -> Result<(), ApiError> {
    if callback {
        require(caller, Action::Redirect)?;
    }
    if timing {
        require(caller, Action::Reschedule)?;
    }
    Ok(())
}

/// The refusal of `action` (of a route no caller may call, for `None`), naming the role
/// that would grant it to a caller of the same kind, if any does, and `what` needs it.
fn forbidden(caller: &Principal, action: Option<Action>, what: &str) -> ApiError {
    let role = action.and_then(|a| caller.role_for(a));
    let who = match caller.is_link() {
        true => "the portal link",
        false => "the token",
    };
    let message = match role {
        Some(role) => format!(
            "{who} `{}` does not have the `{role}` role {what} needs",
            caller.actor
        ),
        None => format!("{who} `{}` may not call this route", caller.actor),
    };
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

/// Which tenant a list, a count or a bulk action covers: a tenant-bound caller's own
/// (naming another is refused), or for a caller of every tenant the one it names, if any.
pub fn tenant_filter(caller: &Principal, named: Option<&str>) -> Result<Option<Tenant>, ApiError> {
    let named = named.map(|t| Tenant::parse(t, "tenant")).transpose()?;
    match (&caller.scope, named) {
        (Scope::All, named) => Ok(named),
        (Scope::One(own), Some(named)) if named != *own => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "the token `{}` acts for the tenant `{own}` only",
                caller.actor
            ),
        )),
        (Scope::One(own), _) => Ok(Some(own.clone())),
    }
}

/// The tenant of a registration: the caller's own, or for a caller of every tenant the
/// one the body names (`default` when none), which must be configured.
pub fn registering_tenant(
    caller: &Principal,
    named: Option<&str>,
    known: impl Fn(&Tenant) -> bool,
) -> Result<Tenant, FieldError> {
    let named = named.map(|t| Tenant::parse(t, "tenant")).transpose()?;
    let tenant = match (&caller.scope, named) {
        (Scope::One(own), Some(named)) if named != *own => {
            return Err(FieldError::new(
                "tenant",
                format!("this token registers for the tenant `{own}` only; leave `tenant` out"),
            ))
        }
        (Scope::One(own), _) => own.clone(),
        (Scope::All, named) => named.unwrap_or_default(),
    };
    if !known(&tenant) {
        return Err(FieldError::new(
            "tenant",
            format!("no tenant `{tenant}` is configured"),
        ));
    }
    Ok(tenant)
}

/// Whether the caller may see a notification of `tenant`; one it may not is answered as
/// not found.
pub fn sees(caller: &Principal, tenant: &Tenant) -> bool {
    caller.scope.covers(tenant)
}

/// Whether `caller` sees every tenant's (what belongs to no tenant it can tell).
pub fn sees_every_tenant(caller: &Principal) -> bool {
    matches!(caller.scope, Scope::All)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_is_matched_in_any_case() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("BEARER abc"), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearerabc"), None);
    }

    #[test]
    fn a_tenant_bound_caller_is_held_to_its_tenant() {
        let a = Tenant::parse("shop-a", "tenant").unwrap();
        let bound = Principal::new("a", Scope::One(a.clone()), &[access::Role::Read]);
        let all = Principal::everything("ops");
        assert_eq!(tenant_filter(&bound, None).unwrap(), Some(a.clone()));
        assert!(tenant_filter(&bound, Some("shop-b")).is_err());
        assert_eq!(tenant_filter(&all, None).unwrap(), None);
        assert_eq!(
            tenant_filter(&all, Some("shop-a")).unwrap(),
            Some(a.clone())
        );
        let any = |_: &Tenant| true;
        assert_eq!(registering_tenant(&bound, None, any).unwrap(), a);
        assert_eq!(
            registering_tenant(&bound, Some("shop-b"), any)
                .unwrap_err()
                .field,
            "tenant"
        );
        assert_eq!(
            registering_tenant(&all, None, any).unwrap(),
            Tenant::default()
        );
        assert!(registering_tenant(&all, Some("nope"), |t| t.is_default()).is_err());
    }
}
