//! `GET /me`: who the caller is, as the API sees its token: the actor the audit log
//! names, its tenant (none: every tenant), its roles and the actions each grants, the
//! routes they open (`permits::open_to`), the states of the notifications it may resend
//! (`permits::resendable`), and when its credential expires.
//! The review page reads it to show a merchant's portal link only that tenant's views
//! and to offer only the controls whose routes the caller may call.

use std::collections::BTreeMap;

use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::CommonErrors;
use super::permits;
use crate::store::JobState;
use crate::tenancy::access::{Action, Principal, Scope};

#[derive(Debug, Serialize, ToSchema)]
pub struct Caller {
    /// The name the audit log gives its actions (`portal:<tenant>` for a portal link).
    #[schema(example = "portal:shop-a")]
    pub actor: String,
    /// The one tenant it acts for; null for a token of every tenant.
    #[schema(example = "shop-a")]
    pub tenant: Option<String>,
    /// Of `notify`, `read`, `operate`, `audit` for a configured token; of `read`,
    /// `operate`, `cancel`, `replay`, `redirect`, `reschedule`, `discard`, `bulk`,
    /// `subscriptions` for a portal link.
    #[schema(example = json!(["read", "operate"]))]
    pub roles: Vec<&'static str>,
    /// What its roles let it do: of `register`, `lookup`, `read`, `resend`, `pause`,
    /// `cancel`, `replay`, `redirect`, `reschedule`, `discard`, `bulk`, `subscriptions`,
    /// `audit` (the review page asks it for what a body adds beyond its route: a replay
    /// to another URL needs `redirect`).
    #[schema(example = json!(["lookup", "read", "resend", "pause"]))]
    pub may: Vec<&'static str>,
    /// Each of its roles with the actions it grants: a role is named alike on a token and
    /// a link but may grant more to a token (`operate`: every operator action on a token,
    /// only `resend` and `pause` on a link). The review page says so where it names the
    /// caller's roles.
    #[schema(example = json!({"read": ["lookup", "read"], "operate": ["resend", "pause"]}))]
    pub grants: BTreeMap<&'static str, Vec<&'static str>>,
    /// The routes it may call, as `METHOD /pattern`: those whose every action its roles
    /// grant. The review page offers a control only when the route it calls is here.
    #[schema(example = json!(["GET /me", "GET /dead-letters", "POST /dead-letters/{id}/replay"]))]
    pub routes: Vec<String>,
    /// The states of the finished notifications it may resend: `delivered` with
    /// `resend`, `dead` with `replay` too, `cancelled` with `cancel` too (what a resend
    /// brings back, one or in bulk). The review page offers a resend only of these.
    #[schema(example = json!(["delivered"]))]
    pub resendable: Vec<&'static str>,
    /// When its credential stops working (a portal link's); null for a configured token.
    pub expires_at: Option<String>,
}

/// Who the token names: actor, tenant, roles, what they grant, expiry. Any valid token.
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
        roles: caller.roles().to_vec(),
        may: caller.actions().map(Action::name).collect(),
        grants: caller
            .grants()
            .map(|(role, grants)| (role, grants.iter().map(|a| a.name()).collect()))
            .collect(),
        routes: permits::open_to(&caller),
        resendable: permits::resendable(&caller)
            .states()
            .map(JobState::as_str)
            .collect(),
        expires_at,
    })
}
