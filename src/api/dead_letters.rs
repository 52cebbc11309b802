//! `GET /dead-letters`: dead letters, newest first, cursor-paged.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::{view, AppState};
use crate::domain::FieldError;
use crate::store::Cursor;

const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<usize>,
    cursor: Option<String>,
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
    let page = state.store.dead_letters(limit, cursor.as_ref()).await?;
    Ok(Json(json!({
        "items": page.items.iter().map(view::dead_letter_item).collect::<Vec<_>>(),
        "next_cursor": page.next_cursor.map(|c| c.encode()),
    })))
}
