//! `GET /notifications` (the queue, one state at a time), `GET /notifications/{id}`
//! (one notification with its attempt history, or why a registration made in the
//! database was refused) and `DELETE /notifications/{id}` (cancel one that has not
//! finished).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use super::error::{invalid_query, ApiError, CommonErrors, ErrorBody};
use super::view::{NotificationPage, NotificationView};
use super::AppState;
use super::{audit, auth, endpoints, paging};
use crate::domain::{Ended, FieldError, JobId};
use crate::store::{
    shown, AuditAction, Cancelled, JobView, ListFilter, Listed, Paused, WalkCursor,
};
use crate::tenancy::access::Principal;

/// One notification: state, attempts so far, next attempt, attempt history. Role `read`
/// or `notify`, for a notification of the token's tenant. On Postgres, the id of a
/// registration `postback.notify()` made and postback refused when it took it in answers
/// why, to a token of its tenant.
#[utoipa::path(
    get,
    path = "/notifications/{id}",
    operation_id = "getNotification",
    tag = "notifications",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 200, body = NotificationView),
        (status = 404, description = "No such notification (`not_found`); or a registration of `postback.notify()` refused when taken in (`refused_at_intake`: why in `message`, the field it names in `field`)", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
    let id = parse_id(&id)?;
    match seen(&state, &caller, &id).await? {
        Some(found) => {
            let found = as_shown(found, &state.pauses.paused());
            Ok(Json(NotificationView::new(&found, &caller)))
        }
        None => Err(unknown(&state, &caller, &id).await?),
    }
}

/// Why the caller finds no notification `id`: its registration was refused when taken in
/// from the database, if it was of a tenant the caller sees; else, as for any id, not
/// found.
async fn unknown(state: &AppState, caller: &Principal, id: &JobId) -> Result<ApiError, ApiError> {
    let refusal = match state.store.intake() {
        Some(intake) => intake.refusal(id).await?,
        None => None,
    };
    Ok(match refusal.filter(|r| auth::sees(caller, &r.tenant)) {
        Some(refusal) => ApiError::refused_at_intake(refusal),
        None => ApiError::not_found("notification"),
    })
}

/// Cancel a notification that has not finished. A scheduled one is never sent; one in
/// flight is not retried after its current attempt (`cancel_requested` until then). Role
/// `operate`, for a notification of the token's tenant.
#[utoipa::path(
    delete,
    path = "/notifications/{id}",
    operation_id = "cancelNotification",
    tag = "notifications",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 200, description = "Cancelled, or to be cancelled after the attempt in flight", body = NotificationView),
        (status = 404, description = "No such notification", body = ErrorBody),
        (status = 409, description = "Already delivered or dead", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
    let id = parse_id(&id)?;
    // Another tenant's notification is not found, and not cancelled.
    let found = visible(&state, &caller, &id).await?;
    match state.store.cancel(&id).await? {
        Cancelled::Done | Cancelled::AfterAttempt => {
            let last_status = Ended::last(&found.history).and_then(|a| a.status);
            tracing::info!(
                %id,
                tenant = %found.spec.tenant,
                attempts = found.status.attempts,
                last_status,
                actor = %caller.actor,
                "notification cancelled"
            );
            audit::record(&state, audit::on_one(&caller, AuditAction::Cancel, &found)).await;
            current(&state, &caller, &id).await
        }
        Cancelled::Finished(s) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "the notification is already {}",
                serde_json::to_value(s)
                    .unwrap_or_default()
                    .as_str()
                    .unwrap_or("finished")
            ),
        )),
        Cancelled::NotFound => Err(ApiError::not_found("notification")),
    }
}

pub(super) fn parse_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found("notification"))
}

/// The notification, if the caller may see it.
pub(super) async fn visible(
    state: &AppState,
    caller: &Principal,
    id: &JobId,
) -> Result<JobView, ApiError> {
    seen(state, caller, id)
        .await?
        .ok_or_else(|| ApiError::not_found("notification"))
}

/// The notification, or `None` when there is none the caller may see.
async fn seen(
    state: &AppState,
    caller: &Principal,
    id: &JobId,
) -> Result<Option<JobView>, ApiError> {
    let found = state.store.get(id).await?;
    Ok(found.filter(|v| auth::sees(caller, &v.spec.tenant)))
}

/// The notification as it is now, if the caller may see it: held from its endpoint's
/// pause on (`listing::shown`).
pub(super) async fn current(
    state: &AppState,
    caller: &Principal,
    id: &JobId,
) -> Result<Json<NotificationView>, ApiError> {
    let found = visible(state, caller, id).await?;
    let found = as_shown(found, &state.pauses.paused());
    Ok(Json(NotificationView::new(&found, caller)))
}

/// `v` as lists and views show it, its endpoint paused or not (`listing::shown`).
fn as_shown(mut v: JobView, paused: &Paused) -> JobView {
    v.status = shown(&v.status, paused.holds_view(&v));
    v
}

/// The filters and paging of `GET /notifications`; every filter given must hold.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NotificationsQuery {
    /// Which list: `scheduled`, `retrying` (scheduled after a failed attempt), `held`
    /// (its endpoint paused, from the pause on), `held_back` (its endpoint path's open
    /// circuit holds it back), `in_flight`, `delivered`, `dead` or `cancelled`. Required
    /// unless `idempotency_key` is given.
    state: Option<String>,
    /// Only this topic.
    topic: Option<String>,
    /// Only callbacks to this host.
    host: Option<String>,
    /// Only callbacks to this endpoint (`ep_…`, from `GET /endpoints`).
    endpoint: Option<String>,
    /// Only this tenant (a token bound to a tenant sees its own only).
    tenant: Option<String>,
    /// At or after this RFC 3339 time: the next attempt of a pending notification, the
    /// lease's end of one in flight, the finish of a finished one.
    #[param(format = DateTime)]
    since: Option<String>,
    /// At or before this RFC 3339 time (as `since`).
    #[param(format = DateTime)]
    until: Option<String>,
    /// The notification registered with this `Idempotency-Key` (in the tenant), while
    /// the key is kept (`idempotency_ttl`).
    idempotency_key: Option<String>,
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// The notifications in one state, cursor-paged: scheduled, retrying and in flight
/// soonest first, finished ones newest first. A walk through the pages returns each
/// notification at most once, and every one that stays in its state meanwhile; one that
/// comes back to the state during the walk is left out. A page examines at most 5,000
/// notifications per shard: with a filter that matches few it may come back short
/// (`partial`), and the cursor goes on from there. Role `read`; a tenant-bound token
/// lists its tenant's only.
#[utoipa::path(
    get,
    path = "/notifications",
    operation_id = "listNotifications",
    tag = "notifications",
    params(NotificationsQuery),
    responses(
        (status = 200, body = NotificationPage),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad state, filter, limit or cursor; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<NotificationsQuery>, QueryRejection>,
) -> Result<Json<NotificationPage>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let listed = q.state.as_deref().map(listed).transpose()?;
    let limit = paging::limit(q.limit)?;
    let cursor = paging::cursor(&state.cursors, q.cursor.as_deref(), WalkCursor::decode)?;
    let mut filter = paging::filter(q.topic, q.host, q.since.as_deref(), q.until.as_deref())?;
    filter.tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    filter.endpoint = endpoints::filter(&state, &caller, q.endpoint.as_deref()).await?;
    filter.paused = state.pauses.paused();
    if let Some(key) = q.idempotency_key {
        let found = by_key(&state, &filter, &key).await?;
        let items = found
            .map(|v| as_shown(v, &filter.paused))
            .filter(|v| listed.is_none_or(|l| Listed::of(&v.status) == l))
            .filter(|v| filter.matches(v) && within(&filter, v));
        return Ok(Json(NotificationPage::of(items.iter(), None, limit)));
    }
    let listed = listed.ok_or_else(|| {
        let names = Listed::names();
        FieldError::new(
            "state",
            format!("required ({names}) unless idempotency_key is given"),
        )
    })?;
    let page = state
        .store
        .list(listed, &filter, limit, cursor.as_ref())
        .await?;
    crate::observability::metrics::list_examined(page.examined);
    let next = page
        .next_cursor
        .as_ref()
        .map(|c| state.cursors.seal(&c.encode()));
    let items: Vec<JobView> = page
        .items
        .into_iter()
        .map(|v| as_shown(v, &filter.paused))
        .collect();
    Ok(Json(NotificationPage::of(items.iter(), next, limit)))
}

fn listed(raw: &str) -> Result<Listed, FieldError> {
    Listed::parse(raw).ok_or_else(|| {
        let names = Listed::names();
        FieldError::new("state", format!("`{raw}` is not one of {names}"))
    })
}

/// The notification `key` registered in the filter's tenant (`default` for a token of
/// every tenant that names none).
async fn by_key(
    state: &AppState,
    filter: &ListFilter,
    key: &str,
) -> Result<Option<JobView>, ApiError> {
    let tenant = filter.tenant.clone().unwrap_or_default();
    Ok(state
        .store
        .find_by_key(&tenant, key)
        .await?
        .filter(|v| v.spec.tenant == tenant))
}

/// Whether `v`'s time in its list (next attempt or finish) is within `since`/`until`.
fn within(filter: &ListFilter, v: &JobView) -> bool {
    let at = v.status.finished_at.or(v.status.next_at);
    at.is_none_or(|at| filter.since.is_none_or(|s| at >= s) && filter.until.is_none_or(|u| at <= u))
}
