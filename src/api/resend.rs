//! Sending again what was sent or is waiting: `POST /notifications/{id}/resend` (a
//! delivered, dead or cancelled notification gets a new cycle under the same id, so the
//! receiver sees the same `webhook-id`), `POST /notifications/resend` (every finished
//! one the filters of `GET /notifications` match, or only their count with `dry_run`),
//! and `POST /notifications/{id}/attempt-now` (a scheduled or retrying one is due now).
//! A resend revives a dead one as a replay does and undoes a cancel: it asks what those
//! ask (`permits::to_resend`), and takes back only what its caller may resend.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::body::Body;
use super::bulk;
use super::dead_letters::replay_timing;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::notifications::{current, parse_id, visible};
use super::parse::{optional_json, parse_json};
use super::rules::schedule_schema;
use super::view::{NotificationView, StateView};
use super::AppState;
use super::{audit, auth, paging, permits};
use crate::domain::FieldError;
use crate::lifecycle::LetGo;
use crate::store::{Again, AuditAction, JobView, ListFilter, Listed};
use crate::tenancy::access::Principal;

/// What a resend may change: the schedule of its new cycle, and when it starts.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResendRequest {
    /// A new schedule, a list of durations or a configured schedule's name; default:
    /// the one it had.
    #[schema(required = false, schema_with = schedule_schema)]
    schedule: Option<Value>,
    /// Before the first attempt of the new cycle; default `0s`.
    delay: Option<String>,
}

/// Send a delivered, dead or cancelled notification again: a new cycle from a fresh
/// attempt count, under the same id (the receiver sees the same `webhook-id`), with its
/// body, headers and URL as they were. Its history keeps the earlier attempts and
/// `resends` counts the resends (and `cycle` the cycles); the audit log records who asked. An ordering key's
/// notification goes to the back of its key. Role `operate`, for a notification of the
/// token's tenant: action `resend`, and for a dead one `replay` too (it is revived as a
/// replay would), for a cancelled one `cancel` (its cancel is undone); `403` without.
#[utoipa::path(
    post,
    path = "/notifications/{id}/resend",
    operation_id = "resendNotification",
    tag = "notifications",
    params(("id" = String, Path, description = "The notification id")),
    request_body(content = Option<ResendRequest>, description = "What to change; may be empty or `null`"),
    responses(
        (status = 200, description = "Scheduled again", body = NotificationView),
        (status = 404, description = "No such notification", body = ErrorBody),
        (status = 403, description = "Dead, and the token may not replay; or cancelled, and it may not cancel (`forbidden`)", body = ErrorBody),
        (status = 409, description = "It has not finished: scheduled, retrying or in flight", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn resend(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> Result<Json<NotificationView>, ApiError> {
    let request: ResendRequest = optional_json(&body)?;
    let timing = request.schedule.is_some() || request.delay.is_some();
    auth::require_changes(&caller, false, timing)?;
    let id = parse_id(&id)?;
    let found = visible(&state, &caller, &id).await?;
    auth::require_to_resend(&caller, found.status.state)?;
    let (schedule, delay) =
        replay_timing(request.schedule, request.delay.as_deref(), &state.rules)?;
    let which = Again::Resend(permits::resendable(&caller));
    let resent = state
        .store
        .send_again(which, &[id], schedule.as_ref(), delay)
        .await?;
    if resent == 0 {
        let now = visible(&state, &caller, &id).await?;
        auth::require_to_resend(&caller, now.status.state)?;
        return Err(not_in(
            &now,
            "only a delivered, dead or cancelled one is resent",
        ));
    }
    tracing::info!(id = %found.id, tenant = %found.spec.tenant, was = %StateView::from(&found.status), actor = %caller.actor, "notification resent");
    state.wake.notify_one();
    audit::record(&state, audit::on_one(&caller, AuditAction::Resend, &found)).await;
    current(&state, &caller, &id).await
}

/// Make a scheduled or retrying notification due now, instead of at its next attempt
/// time. Its attempt count and schedule stay; one waiting behind an earlier
/// notification of its ordering key is due at once when its turn comes. Role `operate`,
/// for a notification of the token's tenant.
#[utoipa::path(
    post,
    path = "/notifications/{id}/attempt-now",
    operation_id = "attemptNotificationNow",
    tag = "notifications",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 200, description = "Due now", body = NotificationView),
        (status = 404, description = "No such notification", body = ErrorBody),
        (status = 409, description = "It is in flight or has finished", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn attempt_now(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
    let id = parse_id(&id)?;
    let found = visible(&state, &caller, &id).await?;
    if !state.store.attempt_now(&id, LetGo::Now).await? {
        let now = visible(&state, &caller, &id).await?;
        return Err(not_in(&now, "only a scheduled or retrying one is made due"));
    }
    tracing::info!(id = %found.id, tenant = %found.spec.tenant, actor = %caller.actor, "notification made due now");
    state.delivery.nudge_circuit(&found.spec.target().circuit);
    state.wake.notify_one();
    audit::record(
        &state,
        audit::on_one(&caller, AuditAction::AttemptNow, &found),
    )
    .await;
    current(&state, &caller, &id).await
}

/// Which finished notifications `POST /notifications/resend` sends again: one state and
/// the filters of `GET /notifications`; and what their new cycle is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkResendRequest {
    /// `delivered`, `dead` or `cancelled`.
    state: String,
    /// Only this topic.
    topic: Option<String>,
    /// Only callbacks to this host.
    host: Option<String>,
    /// Only callbacks to this endpoint (`ep_…`, from `GET /endpoints`).
    endpoint: Option<String>,
    /// Finished at or after this RFC 3339 time.
    #[schema(format = DateTime)]
    since: Option<String>,
    /// Finished at or before this RFC 3339 time.
    #[schema(format = DateTime)]
    until: Option<String>,
    /// Only this tenant (a token bound to a tenant resends its own only).
    tenant: Option<String>,
    /// Required, as `true`, to resend every notification of the state (of the token's
    /// tenant) when no other filter is given.
    #[serde(default)]
    all: bool,
    /// `true`: resend nothing, answer how many match.
    #[serde(default)]
    dry_run: bool,
    /// A new schedule, a list of durations or a configured schedule's name.
    #[schema(required = false, schema_with = schedule_schema)]
    schedule: Option<Value>,
    /// Before the first attempt of each new cycle; default `0s`.
    delay: Option<String>,
}

/// What a bulk resend did, or with `dry_run` would do.
#[derive(Debug, Serialize, ToSchema)]
pub struct Resent {
    /// How many were resent (with `dry_run`: match now).
    pub count: usize,
    pub dry_run: bool,
}

/// Send again every finished notification the filters match, in bounded batches; with
/// `dry_run`, only count them. Running it twice resends nothing twice while the first
/// cycle runs (a resent one has left its state). Role `operate`; a tenant-bound token
/// resends its tenant's only. The `state` asks what resending one of it asks: dead
/// needs `replay` too, cancelled `cancel` (`403` without, dry run or not).
#[utoipa::path(
    post,
    path = "/notifications/resend",
    operation_id = "resendMatchingNotifications",
    tag = "notifications",
    request_body = BulkResendRequest,
    responses(
        (status = 200, description = "How many were resent, or would be", body = Resent),
        (status = 403, description = "`state` dead, and the token may not replay; or cancelled, and it may not cancel (`forbidden`)", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn resend_matching(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Body(body): Body,
) -> Result<Json<Resent>, ApiError> {
    let request: BulkResendRequest = parse_json(&body)?;
    let timing = request.schedule.is_some() || request.delay.is_some();
    auth::require_changes(&caller, false, timing)?;
    let (listed, filter) = request.filter(&state, &caller).await?;
    auth::require_to_resend(&caller, listed.state())?;
    let (schedule, delay) =
        replay_timing(request.schedule, request.delay.as_deref(), &state.rules)?;
    let store = state.store.as_ref();
    if request.dry_run {
        let count = bulk::count_matching(store, listed, &filter).await?;
        return Ok(Json(Resent {
            count,
            dry_run: true,
        }));
    }
    let may = permits::resendable(&caller);
    let resend = bulk::Resend {
        listed,
        may,
        schedule: schedule.as_ref(),
        delay,
    };
    let done = bulk::resend_matching(store, &filter, resend).await?;
    state.wake.notify_one();
    let count = done.values().sum();
    tracing::info!(count, state = listed.name(), filter = %audit::shown(&filter), actor = %caller.actor, "notifications resent in bulk");
    let on = (Some(listed), &filter);
    audit::record_matching(&state, &caller, AuditAction::ResendMatching, on, &done).await;
    Ok(Json(Resent {
        count,
        dry_run: false,
    }))
}

impl BulkResendRequest {
    /// The state and the filter, within the caller's tenant; no filter but the state is
    /// refused unless `all` says so.
    async fn filter(
        &self,
        state: &AppState,
        caller: &Principal,
    ) -> Result<(Listed, ListFilter), ApiError> {
        let listed = match Listed::parse(&self.state) {
            Some(l @ (Listed::Delivered | Listed::Dead | Listed::Cancelled)) => l,
            _ => {
                return Err(FieldError::new(
                    "state",
                    format!("`{}` is not one of delivered, dead, cancelled: only a finished notification is resent", self.state),
                )
                .into())
            }
        };
        let conditions = paging::Conditions {
            topic: &self.topic,
            host: &self.host,
            since: &self.since,
            until: &self.until,
            tenant: &self.tenant,
            endpoint: &self.endpoint,
            all: self.all,
        };
        let every = format!("every {} notification", listed.name());
        Ok((
            listed,
            paging::bulk_filter(state, caller, conditions, &every).await?,
        ))
    }
}

/// `409`: the notification is in a state the action does not apply to.
fn not_in(v: &JobView, hint: &str) -> ApiError {
    let state = Listed::of(&v.status).name();
    ApiError::new(
        StatusCode::CONFLICT,
        "conflict",
        format!("the notification is {state}; {hint}"),
    )
}
