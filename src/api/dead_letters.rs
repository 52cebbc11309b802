//! The dead-letter review: list (newest first, cursor-paged), show one with its body and
//! history, replay one (optionally to a new URL or schedule), discard one.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::notify::{bounded_duration, parse_json, schedule};
use super::{view, AppState};
use crate::domain::{CallbackUrl, FieldError, JobId};
use crate::store::{Cursor, DeadFilter, JobState, JobView};

const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<usize>,
    cursor: Option<String>,
    topic: Option<String>,
    host: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query
        .map_err(|r| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", r.body_text()))?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(FieldError::new("limit", format!("must be between 1 and {MAX_LIMIT}")).into());
    }
    let cursor = match q.cursor.as_deref() {
        Some(raw) => Some(
            Cursor::decode(raw)
                .ok_or_else(|| FieldError::new("cursor", "not a cursor from this API"))?,
        ),
        None => None,
    };
    let filter = DeadFilter {
        since: q
            .since
            .as_deref()
            .map(|s| timestamp("since", s))
            .transpose()?,
        until: q
            .until
            .as_deref()
            .map(|s| timestamp("until", s))
            .transpose()?,
        topic: q.topic,
        host: q.host,
    };
    let page = state
        .store
        .dead_letters(&filter, limit, cursor.as_ref())
        .await?;
    Ok(Json(json!({
        "items": page.items.iter().map(view::dead_letter_item).collect::<Vec<_>>(),
        "next_cursor": page.next_cursor.map(|c| c.encode()),
    })))
}

/// What `POST /dead-letters/{id}/replay` may change; an empty body changes nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    url: Option<String>,
    schedule: Option<Value>,
    delay: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let found = dead_letter(&state, &id).await?;
    Ok(Json(view::dead_letter(&found)))
}

pub async fn replay(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = body?;
    let request: ReplayRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReplayRequest::default()
    } else {
        parse_json(&body)?
    };
    let found = dead_letter(&state, &id).await?;
    let mut spec = None;
    if let Some(raw) = &request.url {
        let url = CallbackUrl::parse(raw)?;
        let mut new = found.spec.clone();
        if new.host() == new.rate_key {
            new.rate_key = url.host().to_string();
        }
        new.url = url.to_string();
        spec = Some(new);
    }
    let schedule = match request.schedule {
        Some(v) => Some(schedule(Some(v), &state.policy.schedules)?),
        None => None,
    };
    let delay = bounded_duration(
        "delay",
        request.delay.as_deref(),
        Duration::ZERO,
        Duration::ZERO,
        state.policy.max_delay,
    )?;
    let status = state
        .store
        .replay(&found.id, spec.as_ref(), schedule.as_ref(), delay)
        .await?
        .ok_or_else(|| ApiError::not_found("dead letter"))?;
    tracing::info!(id = %found.id, new_url = spec.is_some(), "dead letter replayed");
    state.wake.notify_one();
    Ok(Json(json!({
        "id": found.id.to_string(),
        "state": status.state,
        "attempts": status.attempts,
        "max_attempts": status.max_attempts,
        "url": spec.map_or(found.spec.url, |s| s.url),
        "next_attempt_at": status.next_at.map(view::rfc3339),
    })))
}

pub async fn discard(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: JobId = id.parse().map_err(|_| ApiError::not_found("dead letter"))?;
    if state.store.discard(&id).await? {
        tracing::info!(%id, "dead letter discarded");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("dead letter"))
    }
}

/// The notification `raw` names, if it is dead.
async fn dead_letter(state: &AppState, raw: &str) -> Result<JobView, ApiError> {
    let id: JobId = raw
        .parse()
        .map_err(|_| ApiError::not_found("dead letter"))?;
    match state.store.get(&id).await? {
        Some(v) if v.status.state == JobState::Dead => Ok(v),
        _ => Err(ApiError::not_found("dead letter")),
    }
}

/// An RFC 3339 time (`2026-01-01T00:00:00Z`) as ms since the epoch.
fn timestamp(field: &str, raw: &str) -> Result<i64, FieldError> {
    let t = humantime::parse_rfc3339_weak(raw).map_err(|_| {
        FieldError::new(field, "must be an RFC 3339 time like 2026-01-01T00:00:00Z")
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Ok(ms as i64)
}
