//! `GET /notifications/{id}` (one notification with its attempt history) and
//! `DELETE /notifications/{id}` (cancel one that has not finished).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};

use super::error::{ApiError, CommonErrors, ErrorBody};
use super::view::NotificationView;
use super::AppState;
use super::{audit, auth};
use crate::access::{Principal, Role};
use crate::domain::JobId;
use crate::store::{AuditAction, Cancelled, JobView};

/// One notification: state, attempts so far, next attempt, attempt history. Role `read`
/// or `notify`, for a notification of the token's tenant.
#[utoipa::path(
    get,
    path = "/notifications/{id}",
    operation_id = "getNotification",
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
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
    auth::require_any(&caller, &[Role::Read, Role::Notify])?;
    let id = parse_id(&id)?;
    current(&state, &caller, &id).await
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
    auth::require(&caller, Role::Operate)?;
    let id = parse_id(&id)?;
    // Another tenant's notification is not found, and not cancelled.
    let found = visible(&state, &caller, &id).await?;
    match state.store.cancel(&id).await? {
        Cancelled::Done | Cancelled::AfterAttempt => {
            tracing::info!(%id, actor = %caller.actor, "notification cancelled");
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

fn parse_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found("notification"))
}

/// The notification, if the caller may see it.
async fn visible(state: &AppState, caller: &Principal, id: &JobId) -> Result<JobView, ApiError> {
    state
        .store
        .get(id)
        .await?
        .filter(|v| auth::sees(caller, &v.spec.tenant))
        .ok_or_else(|| ApiError::not_found("notification"))
}

/// The notification as it is now, if the caller may see it.
async fn current(
    state: &AppState,
    caller: &Principal,
    id: &JobId,
) -> Result<Json<NotificationView>, ApiError> {
    Ok(Json(NotificationView::from(
        &visible(state, caller, id).await?,
    )))
}
