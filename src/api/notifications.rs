//! `GET /notifications/{id}` (one notification with its attempt history) and
//! `DELETE /notifications/{id}` (cancel one that has not finished).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, CommonErrors, ErrorBody};
use super::view::NotificationView;
use super::AppState;
use crate::domain::JobId;
use crate::store::Cancelled;

/// One notification: state, attempts so far, next attempt, attempt history.
#[utoipa::path(
    get,
    path = "/notifications/{id}",
    tag = "notifications",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 200, body = NotificationView),
        (status = 404, description = "No such notification", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
    let id = parse_id(&id)?;
    current(&state, &id).await
}

/// Cancel a notification that has not finished. A scheduled one is never sent; one in
/// flight is not retried after its current attempt (`cancel_requested` until then).
#[utoipa::path(
    delete,
    path = "/notifications/{id}",
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
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
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

async fn current(state: &AppState, id: &JobId) -> Result<Json<NotificationView>, ApiError> {
    let found = state
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found("notification"))?;
    Ok(Json(NotificationView::from(&found)))
}
