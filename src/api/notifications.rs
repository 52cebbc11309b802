//! `GET /notifications/{id}` (one notification with its attempt history) and
//! `DELETE /notifications/{id}` (cancel one that has not finished).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use super::error::ApiError;
use super::{view, AppState};
use crate::domain::JobId;
use crate::store::Cancelled;

pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    current(&state, &id).await
}

pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    match state.store.cancel(&id).await? {
        Cancelled::Done | Cancelled::AfterAttempt => {
            tracing::info!(%id, "notification cancelled");
            current(&state, &id).await
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

fn parse_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found("notification"))
}

async fn current(state: &AppState, id: &JobId) -> Result<Json<Value>, ApiError> {
    let found = state
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found("notification"))?;
    Ok(Json(view::notification(&found)))
}
