//! `GET /notifications/{id}`: one notification with its attempt history.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use super::error::ApiError;
use super::{view, AppState};
use crate::domain::JobId;

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: JobId = id
        .parse()
        .map_err(|_| ApiError::not_found("notification"))?;
    let found = state
        .store
        .get(&id)
        .await?
        .ok_or_else(|| ApiError::not_found("notification"))?;
    Ok(Json(view::notification(&found)))
}
