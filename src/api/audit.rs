//! The audit log: `GET /audit` (newest first, filtered, cursor-paged), and recording
//! what an operator did once it is done. An entry that cannot be written (the store
//! failed right after the action) is logged in full instead, since the action itself
//! has happened and cannot be undone.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::bulk::PerTenant;
use super::error::{invalid_query, ApiError, CommonErrors, ErrorBody};
use super::view::rfc3339;
use super::AppState;
use super::{auth, paging};
use crate::domain::{FieldError, Tenant};
use crate::store::{
    self, AuditAction, AuditEntry, AuditFilter, AuditPosition, AuditRecord, EndpointRecord,
    JobView, ListFilter, Listed, UrlChange,
};
use crate::tenancy::access::Principal;

/// Attempts at writing an entry, 100 ms apart, before it is left to the log.
const WRITE_ATTEMPTS: u32 = 3;

/// The filters and paging of `GET /audit`; every filter given must hold.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this token's actions (its configured name; `api_token_1`, … for
    /// `server.api_tokens`).
    actor: Option<String>,
    /// Only this action: `cancel`, `replay`, `replay_matching`, `discard`, `purge`,
    /// `resend`, `resend_matching`, `attempt_now`, `pause_endpoint`, `resume_endpoint`.
    action: Option<String>,
    /// Only actions on this tenant (a token bound to a tenant sees its own only).
    tenant: Option<String>,
    /// At or after this RFC 3339 time.
    #[param(format = DateTime)]
    since: Option<String>,
    /// At or before this RFC 3339 time.
    #[param(format = DateTime)]
    until: Option<String>,
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// One recorded action.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditItem {
    pub at: String,
    /// The token's name.
    pub actor: String,
    /// The tenant acted on. A bulk action over every tenant is recorded once per tenant it
    /// changed (null when it changed none).
    pub tenant: Option<String>,
    /// `cancel`, `replay`, `replay_matching`, `discard`, `purge`, `resend`,
    /// `resend_matching`, `attempt_now`, `pause_endpoint` or `resume_endpoint`.
    pub action: String,
    /// The notification, for an action on one.
    pub target: Option<String>,
    /// A bulk action's conditions (`state` for a resend, `topic`, `host`, `since`,
    /// `until`, `tenant`); `{}` for every dead letter.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Map<String, Value>>,
    /// How many notifications it changed.
    pub count: u64,
    /// A replay to a new URL, or a subscription moved to one: `{"from": <old>, "to":
    /// <new>}`; null otherwise.
    #[schema(value_type = Option<Object>)]
    pub url: Option<UrlChange>,
}

/// A page of the audit log, newest first; pass `next_cursor` back as `cursor`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPageView {
    pub items: Vec<AuditItem>,
    pub next_cursor: Option<String>,
}

impl From<AuditEntry> for AuditItem {
    fn from(e: AuditEntry) -> Self {
        let r = e.record;
        Self {
            at: rfc3339(e.at.ms),
            actor: r.actor,
            tenant: r.tenant.map(|t| t.to_string()),
            action: r.action.name().to_string(),
            target: r.target,
            filter: r.filter,
            count: r.count,
            url: r.url,
        }
    }
}

/// Who cancelled, replayed, discarded or purged what, newest first. Role `audit`; a
/// tenant-bound token sees the actions on its tenant only. A filter that matches little
/// reads at most 2,000 entries per page, so a page may come back short with a cursor.
#[utoipa::path(
    get,
    path = "/audit",
    operation_id = "listAuditEntries",
    tag = "operations",
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPageView),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad filter, limit or cursor; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<AuditPageView>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let limit = paging::limit(q.limit)?;
    let cursor = paging::cursor(&state.cursors, q.cursor.as_deref(), AuditPosition::decode)?;
    let filter = AuditFilter {
        actor: q.actor,
        action: q
            .action
            .as_deref()
            .map(|a| a.parse().map_err(|e: String| FieldError::new("action", e)))
            .transpose()?,
        tenant: auth::tenant_filter(&caller, q.tenant.as_deref())?,
        since: paging::time("since", q.since.as_deref())?,
        until: paging::time("until", q.until.as_deref())?,
    };
    let page = store::audit::page(state.store.as_ref(), &filter, limit, cursor).await?;
    Ok(Json(AuditPageView {
        items: page.items.into_iter().map(AuditItem::from).collect(),
        next_cursor: page.next_cursor.map(|c| state.cursors.seal(&c.encode())),
    }))
}

/// Records an action that has been done; when the store keeps failing, logs the whole
/// entry instead (the action stands either way).
pub async fn record(state: &AppState, record: AuditRecord) {
    for attempt in 1..=WRITE_ATTEMPTS {
        match state.store.record_audit(&record).await {
            Ok(()) => return,
            Err(e) if attempt == WRITE_ATTEMPTS => {
                crate::observability::metrics::store_error("audit");
                let filter = record.filter.clone().map(Value::Object);
                tracing::error!(
                    error = %e,
                    actor = %record.actor,
                    action = record.action.name(),
                    tenant = record.tenant.as_deref(),
                    target = record.target.as_deref(),
                    filter = filter.map(tracing::field::display),
                    count = record.count,
                    "cannot write the audit log entry of an action that was done"
                );
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The entry of an action on one notification.
pub fn on_one(caller: &Principal, action: AuditAction, on: &JobView) -> AuditRecord {
    AuditRecord {
        actor: caller.actor.clone(),
        tenant: Some(on.spec.tenant.clone()),
        action,
        target: Some(on.id.to_string()),
        filter: None,
        count: 1,
        url: None,
    }
}

/// The entry of an action on the endpoint `on`.
pub fn on_endpoint(caller: &Principal, action: AuditAction, on: &EndpointRecord) -> AuditRecord {
    AuditRecord {
        actor: caller.actor.clone(),
        tenant: Some(on.tenant.clone()),
        action,
        target: Some(on.id().to_string()),
        filter: None,
        count: 1,
        url: None,
    }
}

/// Records an action on every notification `filter` matches (in `listed`, for a resend;
/// dead letters otherwise), `done` of them per tenant:
/// one entry, or for an action over every tenant (a `*` token without `tenant`) one per
/// tenant it changed, so that each tenant's auditors see what it did to theirs.
pub async fn record_matching(
    state: &AppState,
    caller: &Principal,
    action: AuditAction,
    (listed, filter): (Option<Listed>, &ListFilter),
    done: &PerTenant,
) {
    let entry = |tenant: Option<Tenant>, count: usize| AuditRecord {
        actor: caller.actor.clone(),
        tenant,
        action,
        target: None,
        filter: Some(filter_of(listed, filter)),
        count: count as u64,
        url: None,
    };
    let entries: Vec<AuditRecord> = match &filter.tenant {
        None if !done.is_empty() => done
            .iter()
            .map(|(t, n)| entry(Some(t.clone()), *n))
            .collect(),
        tenant => vec![entry(tenant.clone(), done.values().sum())],
    };
    for e in entries {
        record(state, e).await;
    }
}

/// A filter as the log shows it: the audit log's JSON of its conditions.
pub fn shown(filter: &ListFilter) -> Value {
    Value::Object(filter_of(None, filter))
}

/// A bulk action's conditions as the audit log shows them.
fn filter_of(listed: Option<Listed>, filter: &ListFilter) -> Map<String, Value> {
    let mut map = Map::new();
    let mut put = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            map.insert(name.into(), Value::String(v));
        }
    };
    put("state", listed.map(|l| l.name().to_string()));
    put("topic", filter.topic.clone());
    put("host", filter.host.clone());
    put(
        "endpoint",
        filter.endpoint.as_ref().map(|e| e.id().to_string()),
    );
    put("since", filter.since.map(rfc3339));
    put("until", filter.until.map(rfc3339));
    put("tenant", filter.tenant.as_ref().map(|t| t.to_string()));
    map
}
