//! `GET /endpoints` (a tenant's callback origins and their health, filtered by state),
//! `GET /endpoints/{id}` (one), and `POST /endpoints/{id}/pause` and `/resume` (its
//! notifications held while paused, let go oldest first once resumed:
//! `endpoint_pauses`). An endpoint is known from its first notification; its health is
//! what every instance's attempts there told the store (`endpoints::health`).

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use super::audit;
use super::error::{invalid_query, ApiError, CommonErrors, ErrorBody};
use super::view::{Backlog, EndpointPage, EndpointState, EndpointView};
use super::AppState;
use super::{auth, paging};
use crate::clock::now_ms;
use crate::domain::{Endpoint, EndpointId, FieldError, Tenant};
use crate::endpoints::health::EndpointNotice;
use crate::store::{
    AuditAction, EndpointPause, EndpointRecord, ListFilter, Listed, Paused, Reads, StoreResult,
};
use crate::tenancy::access::{Principal, Scope};

/// Records one page examines at most, when a state filter matches few: then the page
/// comes back short, and `next_cursor` goes on from where it stopped.
const MAX_SCAN: usize = 2_000;

/// The filter and paging of `GET /endpoints`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EndpointsQuery {
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only endpoints in this state: `healthy`, `failing` or `paused`.
    state: Option<String>,
    /// Only this tenant's (a token bound to a tenant sees its own only).
    tenant: Option<String>,
}

/// Endpoints, by tenant then id, cursor-paged, with their health. Role `read`; a
/// tenant-bound token lists its tenant's only.
#[utoipa::path(
    get,
    path = "/endpoints",
    operation_id = "listEndpoints",
    tag = "endpoints",
    params(EndpointsQuery),
    responses(
        (status = 200, body = EndpointPage),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad state, limit, cursor or tenant; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<EndpointsQuery>, QueryRejection>,
) -> Result<Json<EndpointPage>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let limit = paging::limit(q.limit)?;
    let wanted = q.state.as_deref().map(endpoint_state).transpose()?;
    let mut after = paging::cursor(&state.cursors, q.cursor.as_deref(), |c| Some(c.to_string()))?;
    let tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    let pauses: HashMap<String, EndpointPause> = state.store.pauses().await?.into_iter().collect();
    let now = now_ms();
    let mut items = Vec::with_capacity(limit);
    let mut examined = 0;
    let next = loop {
        let want = limit - items.len();
        let read = state
            .store
            .endpoints(tenant.as_ref(), after.as_deref(), want)
            .await?;
        examined += read.len();
        let Some(last) = read.last() else { break None };
        after = Some(crate::endpoints::health::key(&last.tenant, &last.id()));
        let full = read.len() == want;
        let views = read
            .iter()
            .map(|r| EndpointView::new(r, pauses.get(&r.key()), now));
        items.extend(views.filter(|v| wanted.is_none_or(|s| v.state == s)));
        if items.len() == limit || (full && examined >= MAX_SCAN) {
            break after;
        }
        if !full {
            break None;
        }
    };
    Ok(Json(EndpointPage {
        items,
        next_cursor: next.map(|c| state.cursors.seal(&c)),
    }))
}

/// One endpoint with its health. Role `read`, for an endpoint of the token's tenant
/// (another tenant's is not found).
#[utoipa::path(
    get,
    path = "/endpoints/{id}",
    operation_id = "getEndpoint",
    tag = "endpoints",
    params(("id" = String, Path, description = "The endpoint id, `ep_…`")),
    responses(
        (status = 200, body = EndpointView),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "Not an endpoint id", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let id = EndpointId::parse(&id, "id")?;
    let found = visible(&state, &caller, &id).await?;
    let found = found.ok_or_else(|| ApiError::not_found("endpoint"))?;
    view(&state, &found).await
}

/// Pause an endpoint (a merchant's maintenance window, a receiver known to be down): its
/// notifications are held, neither attempted nor dead-lettered, their schedules frozen,
/// until it is resumed. Pausing a paused one changes nothing. Role `operate`, for an
/// endpoint of the token's tenant.
#[utoipa::path(
    post,
    path = "/endpoints/{id}/pause",
    operation_id = "pauseEndpoint",
    tag = "endpoints",
    params(("id" = String, Path, description = "The endpoint id, `ep_…`")),
    responses(
        (status = 200, description = "Paused", body = EndpointView),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "Not an endpoint id", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn pause(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    set_pause(state, caller, id, true).await
}

/// Resume a paused endpoint: its held notifications are let go oldest first, in a
/// steady flow within its quota, each ordering key in its order. Resuming one that is
/// not paused changes nothing. Role `operate`, for an endpoint of the token's tenant.
#[utoipa::path(
    post,
    path = "/endpoints/{id}/resume",
    operation_id = "resumeEndpoint",
    tag = "endpoints",
    params(("id" = String, Path, description = "The endpoint id, `ep_…`")),
    responses(
        (status = 200, description = "Resumed", body = EndpointView),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "Not an endpoint id", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn resume(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    set_pause(state, caller, id, false).await
}

/// Pauses (`paused`) or resumes the endpoint `id` the caller may see, recording it in
/// the audit log when it changed.
async fn set_pause(
    state: AppState,
    caller: Principal,
    id: String,
    paused: bool,
) -> Result<Json<EndpointView>, ApiError> {
    let id = EndpointId::parse(&id, "id")?;
    let found = visible(&state, &caller, &id).await?;
    let found = found.ok_or_else(|| ApiError::not_found("endpoint"))?;
    let key = found.key();
    let pause = paused.then(|| EndpointPause {
        since: now_ms(),
        by: caller.actor.clone(),
    });
    if state.store.set_pause(&key, pause.as_ref()).await? {
        state.pauses.note(&key, pause.as_ref());
        let (action, notice) = match pause {
            Some(pause) => (
                AuditAction::PauseEndpoint,
                EndpointNotice::Paused(found.clone(), pause),
            ),
            None => (
                AuditAction::ResumeEndpoint,
                EndpointNotice::Resumed(found.clone(), caller.actor.clone()),
            ),
        };
        let done = if paused {
            "endpoint paused"
        } else {
            "endpoint resumed"
        };
        tracing::info!(endpoint = %id, tenant = %found.tenant, actor = %caller.actor, "{done}");
        audit::record(&state, audit::on_endpoint(&caller, action, &found)).await;
        state
            .ops
            .endpoints(state.store.as_ref(), &state.wake, &[notice])
            .await;
    }
    view(&state, &found).await
}

/// The view of the endpoint `found`, with its pause, its backlog and what each of its
/// circuits holds back.
async fn view(state: &AppState, found: &EndpointRecord) -> Result<Json<EndpointView>, ApiError> {
    let key = found.key();
    let pauses = state.store.pauses().await?;
    let pause = pauses.iter().find(|(k, _)| *k == key).map(|(_, p)| p);
    let mut view = EndpointView::new(found, pause, now_ms());
    let paused = Paused::of(pauses.iter().map(|(k, _)| k));
    let (backlog, by_path) = backlog(state.store.as_ref(), found, paused).await?;
    for circuit in &mut view.circuits {
        circuit.held_back = Some(by_path.get(&circuit.path).copied().unwrap_or(0));
    }
    view.notifications = Some(backlog);
    Ok(Json(view))
}

/// Pages of each list read at most to count an endpoint's backlog: a view costs a
/// bounded read however long the lists are.
const BACKLOG_PAGES: usize = 10;

/// The notifications of `found`'s endpoint that wait for an attempt, counted from its
/// tenant's lists (which hold that tenant's alone; a count reads past its other
/// endpoints'), with those held back by path. A paused endpoint's are held.
async fn backlog(
    store: &dyn Reads,
    found: &EndpointRecord,
    paused: Paused,
) -> StoreResult<(Backlog, HashMap<String, u64>)> {
    let filter = ListFilter {
        tenant: Some(found.tenant.clone()),
        endpoint: Some(found.endpoint()),
        paused,
        ..ListFilter::default()
    };
    let mut backlog = Backlog {
        complete: true,
        ..Backlog::default()
    };
    for listed in [Listed::Scheduled, Listed::Retrying, Listed::Held] {
        let (n, complete) = paging::count(store, listed, &filter, BACKLOG_PAGES).await?;
        match listed {
            Listed::Held => backlog.held += n,
            _ => backlog.pending += n,
        }
        backlog.complete &= complete;
    }
    let (by_path, complete) = held_back(store, &filter).await?;
    backlog.held_back = by_path.values().sum();
    backlog.complete &= complete;
    Ok((backlog, by_path))
}

/// The notifications `filter` matches that their circuit holds back, by their URL's
/// path, up to `BACKLOG_PAGES` pages; and whether that was all.
async fn held_back(
    store: &dyn Reads,
    filter: &ListFilter,
) -> StoreResult<(HashMap<String, u64>, bool)> {
    let (mut by_path, mut after) = (HashMap::new(), None);
    for _ in 0..BACKLOG_PAGES {
        let page = store
            .list(Listed::HeldBack, filter, paging::MAX_LIMIT, after.as_ref())
            .await?;
        for v in &page.items {
            let path = url::Url::parse(&v.spec.url).map(|u| u.path().to_string());
            *by_path.entry(path.unwrap_or_default()).or_default() += 1;
        }
        after = page.next_cursor;
        if after.is_none() {
            return Ok((by_path, true));
        }
    }
    Ok((by_path, false))
}

fn endpoint_state(raw: &str) -> Result<EndpointState, FieldError> {
    match raw {
        "healthy" => Ok(EndpointState::Healthy),
        "failing" => Ok(EndpointState::Failing),
        "paused" => Ok(EndpointState::Paused),
        _ => Err(FieldError::new(
            "state",
            "must be `healthy`, `failing` or `paused`",
        )),
    }
}

/// The endpoint a list's `endpoint` filter names, if given: one the caller may see, or
/// `422` naming the field.
pub(super) async fn filter(
    state: &AppState,
    caller: &Principal,
    raw: Option<&str>,
) -> Result<Option<Endpoint>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    let id = EndpointId::parse(raw, "endpoint")?;
    let found = visible(state, caller, &id).await?;
    let unknown = || FieldError::new("endpoint", format!("no endpoint `{id}` is known"));
    Ok(Some(found.ok_or_else(unknown)?.endpoint()))
}

/// The endpoint `id` if `caller` may see it: of its tenant, or for a caller of every
/// tenant of whichever tenant it is (ids differ between tenants), looked up in each
/// configured tenant's.
async fn visible(
    state: &AppState,
    caller: &Principal,
    id: &EndpointId,
) -> Result<Option<EndpointRecord>, ApiError> {
    if let Scope::One(tenant) = &caller.scope {
        return Ok(state.store.endpoint(tenant, id).await?);
    }
    let default = Tenant::default_tenant();
    let configured = state.rules.tenants.keys().filter(|t| !t.is_default());
    for tenant in std::iter::once(&default).chain(configured) {
        if let Some(found) = state.store.endpoint(tenant, id).await? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}
