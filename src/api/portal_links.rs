//! `POST /portal-links`: a portal link for one tenant's merchant, issued by the running
//! instance with its own `server.portal_secret` and tenants (`postback portal-link`
//! calls it). Issuing is an operator's power (`Action::IssueLink`, of the `operate`
//! role): a caller issues links of its own tenants only, and only with roles whose
//! actions it has itself; a portal link never issues one. Each link issued is in the
//! audit log (`issue_portal_link`: its tenant, roles and expiry; never the credential).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::audit;
use super::auth;
use super::body::Body;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::parse::parse_json;
use super::AppState;
use crate::domain::{parse_duration, FieldError, Tenant};
use crate::store::{AuditAction, AuditRecord};
use crate::tenancy::access::{LinkRole, Principal};
use crate::tenancy::portal;

/// How long a link works when the request does not say.
const DEFAULT_TTL: &str = "1h";

/// What link to issue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkRequest {
    /// The merchant's tenant: a configured one. A token bound to a tenant may leave it
    /// out (its own) or name its own only.
    #[schema(example = "shop-a")]
    tenant: Option<String>,
    /// What the link may do besides `read`, which every link has: of `operate`,
    /// `cancel`, `replay`, `redirect`, `reschedule`, `discard`, `bulk`, `subscriptions`.
    #[serde(default)]
    #[schema(example = json!(["operate"]))]
    roles: Vec<String>,
    /// How long it works, at most `24h`; default `1h`.
    #[schema(example = "1h")]
    ttl: Option<String>,
}

/// A link issued: give `path`, after the address merchants reach this instance at, to
/// the merchant. Shown once: the instance keeps no copy.
#[derive(Debug, Serialize, ToSchema)]
pub struct LinkView {
    /// The review page with the credential in its fragment, which browsers do not send.
    #[schema(example = "/ui#token=pt_eyJ0Ijoic2hvcC1hIn0.c2lnbmF0dXJl")]
    pub path: String,
    /// The credential alone (`pt_…`), a bearer token of the API.
    pub credential: String,
    pub tenant: String,
    /// Its roles, `read` first.
    #[schema(example = json!(["read", "operate"]))]
    pub roles: Vec<&'static str>,
    pub expires_at: String,
}

/// Issue a portal link for a tenant's merchant. Role `operate`, for a tenant the token
/// acts for, with link roles whose actions the token has; a portal link may not.
#[utoipa::path(
    post,
    path = "/portal-links",
    operation_id = "issuePortalLink",
    tag = "operations",
    request_body = LinkRequest,
    responses(
        (status = 201, body = LinkView),
        (status = 409, description = "`server.portal_secret` is not set on this instance (`portal_links_off`); the message gives the line to add", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn issue(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Body(body): Body,
) -> Result<(StatusCode, Json<LinkView>), ApiError> {
    let request: LinkRequest = parse_json(&body)?;
    let key = state.portal.as_deref().ok_or_else(links_off)?;
    let tenant = link_tenant(&caller, request.tenant.as_deref())?;
    let roles = link_roles(&request.roles)?;
    for role in &roles {
        for action in role.grants() {
            auth::require(&caller, *action)?;
        }
    }
    let ttl = request.ttl.as_deref().unwrap_or(DEFAULT_TTL);
    let ttl = parse_duration(ttl).map_err(|e| FieldError::new("ttl", e.message))?;
    let now = crate::clock::system_now();
    let credential = key
        .issue(&tenant, &roles, ttl, now)
        .map_err(|e| FieldError::new(e.field(), e.to_string()))?;
    let link = LinkView {
        path: portal::page_path(&credential),
        credential,
        tenant: tenant.to_string(),
        roles: LinkRole::ALL
            .into_iter()
            .filter(|r| roles.contains(r))
            .map(LinkRole::name)
            .collect(),
        expires_at: humantime::format_rfc3339_seconds(now + ttl).to_string(),
    };
    tracing::info!(%tenant, roles = %link.roles.join(","), expires_at = %link.expires_at, actor = %caller.actor, "portal link issued");
    audit::record(&state, entry(&caller, &tenant, &link)).await;
    Ok((StatusCode::CREATED, Json(link)))
}

/// The audit log's entry of a link issued: its tenant, roles and expiry.
fn entry(caller: &Principal, tenant: &Tenant, link: &LinkView) -> AuditRecord {
    let mut issued = Map::new();
    issued.insert("roles".into(), Value::from(link.roles.join(",")));
    issued.insert("expires_at".into(), Value::from(link.expires_at.clone()));
    AuditRecord {
        actor: caller.actor.clone(),
        tenant: Some(tenant.clone()),
        action: AuditAction::IssuePortalLink,
        target: None,
        filter: Some(issued),
        count: 1,
        url: None,
    }
}

/// The tenant of the link: the caller's own, or the one a caller of every tenant names.
fn link_tenant(caller: &Principal, named: Option<&str>) -> Result<Tenant, ApiError> {
    let tenant = auth::tenant_filter(caller, named)?;
    let missing = || FieldError::new("tenant", "name the tenant whose merchant the link is for");
    Ok(tenant.ok_or_else(missing)?)
}

/// The link roles named, `read` among them whether named or not.
fn link_roles(named: &[String]) -> Result<Vec<LinkRole>, FieldError> {
    let mut roles = vec![LinkRole::Read];
    for name in named {
        let role = name.parse().map_err(|e| FieldError::new("roles", e))?;
        roles.push(role);
    }
    Ok(roles)
}

/// `409 portal_links_off`, with the line that turns them on: a fresh random secret.
fn links_off() -> ApiError {
    let secret = crate::tenancy::access::new_token().map_or_else(
        |_| "<at least 32 random characters>".to_string(),
        |t| t.trim_start_matches("pbk_").to_string(),
    );
    ApiError::new(
        StatusCode::CONFLICT,
        "portal_links_off",
        format!(
            "this instance issues no portal links: server.portal_secret is not set. Add this \
             line (a fresh random secret) to the [server] section of its configuration \
             file, the same on every instance, and restart them: portal_secret = \"{secret}\" \
             (or set POSTBACK_SERVER_PORTAL_SECRET)"
        ),
    )
}
