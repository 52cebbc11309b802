//! `GET /me`: who the caller is, as the API sees its token: the actor the audit log
//! names, its tenant (none: every tenant), its roles, and when its credential expires.
//! The review page reads it to show a merchant's portal link only that tenant's views
//! and only the actions its roles allow.

use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::CommonErrors;
use crate::access::{Principal, Scope};

#[derive(Debug, Serialize, ToSchema)]
pub struct Caller {
    /// The name the audit log gives its actions (`portal:<tenant>` for a portal link).
    #[schema(example = "portal:shop-a")]
    pub actor: String,
    /// The one tenant it acts for; null for a token of every tenant.
    #[schema(example = "shop-a")]
    pub tenant: Option<String>,
    /// Of `notify`, `read`, `operate`, `audit`.
    #[schema(example = json!(["read"]))]
    pub roles: Vec<&'static str>,
    /// When its credential stops working (a portal link's); null for a configured token.
    pub expires_at: Option<String>,
}

/// Who the token names: actor, tenant, roles, expiry. Any valid token.
#[utoipa::path(
    get,
    path = "/me",
    operation_id = "getCaller",
    tag = "operations",
    responses((status = 200, body = Caller), CommonErrors),
    security(("bearer" = []))
)]
pub async fn show(Extension(caller): Extension<Principal>) -> Json<Caller> {
    let tenant = match &caller.scope {
        Scope::All => None,
        Scope::One(t) => Some(t.to_string()),
    };
    let expires_at = caller
        .expires
        .map(|t| humantime::format_rfc3339_seconds(t).to_string());
    Json(Caller {
        actor: caller.actor.clone(),
        tenant,
        roles: caller.roles().map(|r| r.name()).collect(),
        expires_at,
    })
}
