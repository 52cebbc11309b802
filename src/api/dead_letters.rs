//! The dead-letter review: list (newest first, cursor-paged), show one with its body and
//! history, replay one (optionally to a new URL or schedule), discard one, and replay or
//! purge every dead letter a filter matches.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::body::Body;
use super::bulk;
use super::error::{invalid_query, ApiError, BadInput, CommonErrors, ErrorBody};
use super::parse::{optional_json, parse_json};
use super::rules::{bounded_duration, schedule, schedule_schema, RegistrationRules};
use super::view::{Count, DeadLetterItem, DeadLetterPage, DeadLetterView, Replayed};
use super::AppState;
use super::{audit, auth, endpoints, paging};
use crate::domain::{headers_after_change, ExtraHeaders, FieldError, JobId, JobSpec, Schedule};
use crate::store::{AuditAction, Cursor, JobState, JobView, ListFilter, UrlChange};
use crate::tenancy::access::Principal;

/// The filters and paging of `GET /dead-letters`; every filter given must hold.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLettersQuery {
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only this topic.
    topic: Option<String>,
    /// Only callbacks to this host.
    host: Option<String>,
    /// Only callbacks to this endpoint (`ep_…`, from `GET /endpoints`).
    endpoint: Option<String>,
    /// Dead-lettered at or after this RFC 3339 time.
    #[param(format = DateTime)]
    since: Option<String>,
    /// Dead-lettered at or before this RFC 3339 time.
    #[param(format = DateTime)]
    until: Option<String>,
    /// Only this tenant (a token bound to a tenant sees its own only).
    tenant: Option<String>,
}

/// Dead letters, newest first, cursor-paged. Paging neither repeats nor skips one while
/// new ones arrive; a page may come back short when a filter matches little. Role
/// `read`; a tenant-bound token lists its tenant's only.
#[utoipa::path(
    get,
    path = "/dead-letters",
    operation_id = "listDeadLetters",
    tag = "dead letters",
    params(DeadLettersQuery),
    responses(
        (status = 200, body = DeadLetterPage),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad filter, limit or cursor; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<DeadLettersQuery>, QueryRejection>,
) -> Result<Json<DeadLetterPage>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let limit = paging::limit(q.limit)?;
    let cursor = paging::cursor(&state.cursors, q.cursor.as_deref(), Cursor::decode)?;
    let mut filter = paging::filter(q.topic, q.host, q.since.as_deref(), q.until.as_deref())?;
    filter.tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    filter.endpoint = endpoints::filter(&state, &caller, q.endpoint.as_deref()).await?;
    let page = state
        .store
        .dead_letters(&filter, limit, cursor.as_ref())
        .await?;
    crate::observability::metrics::list_examined(page.examined);
    Ok(Json(DeadLetterPage {
        items: page.items.iter().map(DeadLetterItem::from).collect(),
        next_cursor: page.next_cursor.map(|c| state.cursors.seal(&c.encode())),
    }))
}

/// What `POST /dead-letters/{id}/replay` may change; an empty body changes nothing.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// A new callback URL. The stored extra headers are not sent to another URL (they
    /// were meant for the old receiver): only `headers`, if given.
    url: Option<String>,
    /// Extra request headers instead of the stored ones, checked as at registration.
    headers: Option<BTreeMap<String, String>>,
    /// A new schedule: a list of durations or a configured schedule's name.
    #[schema(required = false, schema_with = schedule_schema)]
    schedule: Option<Value>,
    /// Before the first new attempt; default `0s`.
    delay: Option<String>,
}

/// One dead letter with its body and whole attempt history. Role `read`, for one of the
/// token's tenant.
#[utoipa::path(
    get,
    path = "/dead-letters/{id}",
    operation_id = "getDeadLetter",
    tag = "dead letters",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 200, body = DeadLetterView),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<DeadLetterView>, ApiError> {
    let found = dead_letter(&state, &caller, &id).await?;
    Ok(Json(DeadLetterView::new(&found, &caller)))
}

/// Schedule a dead letter again from a fresh attempt count, optionally with a new URL,
/// schedule or delay. The history is kept and `replays` counts the replays. Role
/// `operate`, for one of the token's tenant; a new URL must be one the tenant may use.
#[utoipa::path(
    post,
    path = "/dead-letters/{id}/replay",
    operation_id = "replayDeadLetter",
    tag = "dead letters",
    params(("id" = String, Path, description = "The notification id")),
    request_body(content = Option<ReplayRequest>, description = "What to change; may be empty or `null`"),
    responses(
        (status = 200, body = Replayed),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> Result<Json<Replayed>, ApiError> {
    let request: ReplayRequest = optional_json(&body)?;
    let callback = request.url.is_some() || request.headers.is_some();
    let timing = request.schedule.is_some() || request.delay.is_some();
    auth::require_changes(&caller, callback, timing)?;
    let found = dead_letter(&state, &caller, &id).await?;
    let spec = replayed_spec(&state.rules, &found.spec, &request)?;
    // The callback it goes to: a new one was checked above, the stored one is checked here.
    let url = spec.as_ref().map_or(&found.spec.url, |s| &s.url);
    state
        .rules
        .check_https(&found.spec.tenant, url.starts_with("https:"))
        .map_err(|e| {
            let hint = format!("{}: give an https `url` to replay it", e.message);
            FieldError::new(e.field, hint)
        })?;
    let (schedule, delay) =
        replay_timing(request.schedule, request.delay.as_deref(), &state.rules)?;
    let status = state
        .store
        .replay(&found.id, spec.as_ref(), schedule.as_ref(), delay)
        .await?
        .ok_or_else(|| ApiError::not_found("dead letter"))?;
    tracing::info!(id = %found.id, actor = %caller.actor, new_url = spec.is_some(), "dead letter replayed");
    state.wake.notify_one();
    let mut entry = audit::on_one(&caller, AuditAction::Replay, &found);
    entry.url = spec
        .as_ref()
        .and_then(|new| UrlChange::between(&found.spec.url, &new.url));
    audit::record(&state, entry).await;
    Ok(Json(Replayed {
        id: found.id.to_string(),
        state: (&status).into(),
        attempts: status.attempts,
        max_attempts: status.max_attempts,
        url: spec.map_or(found.spec.url, |s| s.url),
        next_attempt_at: super::view::next_attempt_at(&status),
    }))
}

/// The spec a replay gives a dead letter, if it changes it: a new URL (one the tenant may
/// use) is sent none of the stored extra headers, and new `headers` replace them
/// (`headers_after_change`).
fn replayed_spec(
    rules: &RegistrationRules,
    stored: &JobSpec,
    request: &ReplayRequest,
) -> Result<Option<JobSpec>, ApiError> {
    if request.url.is_none() && request.headers.is_none() {
        return Ok(None);
    }
    let mut new = stored.clone();
    if let Some(raw) = &request.url {
        let url = rules.callback(raw, &stored.tenant)?;
        if new.host() == new.rate_key {
            new.rate_key = url.host().to_string();
        }
        new.url = url.to_string();
    }
    let given = request.headers.as_ref().map(|headers| {
        let pairs = headers.iter().map(|(k, v)| (k.clone(), v.clone()));
        ExtraHeaders::parse(pairs.collect()).map(|h| h.pairs().to_vec())
    });
    let moved = new.url != stored.url;
    new.headers = headers_after_change(new.headers, given.transpose()?, moved);
    Ok(Some(new))
}

/// Discard a dead letter for good. Role `operate`, for one of the token's tenant.
#[utoipa::path(
    delete,
    path = "/dead-letters/{id}",
    operation_id = "discardDeadLetter",
    tag = "dead letters",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 204, description = "Discarded"),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn discard(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let found = dead_letter(&state, &caller, &id).await?;
    let id = found.id;
    if state.store.discard(&[id]).await? == 1 {
        tracing::info!(%id, actor = %caller.actor, "dead letter discarded");
        audit::record(&state, audit::on_one(&caller, AuditAction::Discard, &found)).await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("dead letter"))
    }
}

/// What `POST /dead-letters/replay` and `POST /dead-letters/purge` act on: the filters of
/// the list, or `all`; replay may also set a new schedule and delay.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// Only this topic.
    topic: Option<String>,
    /// Only callbacks to this host.
    host: Option<String>,
    /// Only callbacks to this endpoint (`ep_…`, from `GET /endpoints`): what died there
    /// during its outage, say.
    endpoint: Option<String>,
    /// Dead-lettered at or after this RFC 3339 time.
    #[schema(format = DateTime)]
    since: Option<String>,
    /// Dead-lettered at or before this RFC 3339 time.
    #[schema(format = DateTime)]
    until: Option<String>,
    /// Only this tenant (a token bound to a tenant acts on its own only).
    tenant: Option<String>,
    /// Required, as `true`, to act on every dead letter (of the token's tenant) when no
    /// filter is given.
    #[serde(default)]
    all: bool,
    /// Replay only: a new schedule, a list of durations or a configured schedule's name.
    #[schema(required = false, schema_with = schedule_schema)]
    schedule: Option<Value>,
    /// Replay only: before the first new attempt; default `0s`.
    delay: Option<String>,
}

impl BulkRequest {
    /// The filter, within the caller's tenant; an empty one is refused unless `all` says
    /// so, and an endpoint the caller cannot see is refused naming `endpoint`.
    async fn filter(&self, state: &AppState, caller: &Principal) -> Result<ListFilter, ApiError> {
        let conditions = paging::Conditions {
            topic: &self.topic,
            host: &self.host,
            since: &self.since,
            until: &self.until,
            tenant: &self.tenant,
            endpoint: &self.endpoint,
            all: self.all,
        };
        paging::bulk_filter(state, caller, conditions, "every dead letter").await
    }
}

/// Replay every dead letter a filter matches, in bounded batches. Running it twice
/// replays nothing twice. Role `operate`; a tenant-bound token replays its tenant's only.
#[utoipa::path(
    post,
    path = "/dead-letters/replay",
    operation_id = "replayMatchingDeadLetters",
    tag = "dead letters",
    request_body = BulkRequest,
    responses(
        (status = 200, description = "How many were replayed", body = Count),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn replay_matching(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Body(body): Body,
) -> Result<Json<Count>, ApiError> {
    let request: BulkRequest = parse_json(&body)?;
    let timing = request.schedule.is_some() || request.delay.is_some();
    auth::require_changes(&caller, false, timing)?;
    let filter = request.filter(&state, &caller).await?;
    let (schedule, delay) =
        replay_timing(request.schedule, request.delay.as_deref(), &state.rules)?;
    let done =
        bulk::replay_matching(state.store.as_ref(), &filter, schedule.as_ref(), delay).await?;
    let count = done.values().sum();
    tracing::info!(count, filter = %audit::shown(&filter), actor = %caller.actor, "dead letters replayed in bulk");
    state.wake.notify_one();
    let on = (None, &filter);
    audit::record_matching(&state, &caller, AuditAction::ReplayMatching, on, &done).await;
    Ok(Json(Count { count }))
}

/// Discard every dead letter a filter matches, in bounded batches. Role `operate`; a
/// tenant-bound token purges its tenant's only.
#[utoipa::path(
    post,
    path = "/dead-letters/purge",
    operation_id = "purgeDeadLetters",
    tag = "dead letters",
    request_body = BulkRequest,
    responses(
        (status = 200, description = "How many were discarded", body = Count),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn purge(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Body(body): Body,
) -> Result<Json<Count>, ApiError> {
    let request: BulkRequest = parse_json(&body)?;
    for (field, given) in [
        ("schedule", request.schedule.is_some()),
        ("delay", request.delay.is_some()),
    ] {
        if given {
            return Err(FieldError::new(field, "applies to replay only").into());
        }
    }
    let filter = request.filter(&state, &caller).await?;
    let done = bulk::discard_matching(state.store.as_ref(), &filter).await?;
    let count = done.values().sum();
    tracing::info!(count, filter = %audit::shown(&filter), actor = %caller.actor, "dead letters purged");
    audit::record_matching(&state, &caller, AuditAction::Purge, (None, &filter), &done).await;
    Ok(Json(Count { count }))
}

/// The notification `raw` names, if it is dead and the caller may see it.
async fn dead_letter(state: &AppState, caller: &Principal, raw: &str) -> Result<JobView, ApiError> {
    let id: JobId = raw
        .parse()
        .map_err(|_| ApiError::not_found("dead letter"))?;
    match state.store.get(&id).await? {
        Some(v) if v.status.state == JobState::Dead && auth::sees(caller, &v.spec.tenant) => Ok(v),
        _ => Err(ApiError::not_found("dead letter")),
    }
}

/// The new schedule (if one is given) and the delay of a replay, validated like
/// `POST /notify`.
pub(super) fn replay_timing(
    raw_schedule: Option<Value>,
    raw_delay: Option<&str>,
    rules: &RegistrationRules,
) -> Result<(Option<Schedule>, Duration), FieldError> {
    let schedule = match raw_schedule {
        Some(v) => Some(schedule(Some(v), &rules.schedules)?),
        None => None,
    };
    let delay = bounded_duration(
        "delay",
        raw_delay,
        Duration::ZERO,
        Duration::ZERO,
        rules.max_delay,
    )?;
    Ok((schedule, delay))
}
