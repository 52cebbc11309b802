//! `POST /notify/batch`: up to `MAX_ITEMS` registrations in one request. Each item is a
//! `POST /notify` body with an optional `idempotency_key`, checked and stored on its own
//! (all at once, so that the store gathers them into a few calls per shard) and answered
//! in order: its registration, or its own error. A refused item stores nothing and
//! refuses none of the others; only a malformed request is refused whole.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType};
use utoipa::ToSchema;

use super::body::Body;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::offload::pass_over;
use super::parse::{no_key_header, parse_json, parse_json_within, split_key, BATCH_NESTING};
use super::registration::{self, Registration};
use super::view::Registered;
use super::AppState;
use crate::domain::FieldError;
use crate::tenancy::access::Principal;

/// Most notifications in one batch.
pub const MAX_ITEMS: usize = 1000;

/// What `POST /notify/batch` accepts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1 to 1,000 notifications, each a `POST /notify` body with an optional
    /// `idempotency_key` (which makes that item safe to send again, as the
    /// `Idempotency-Key` header does for `POST /notify`).
    #[schema(required = true, schema_with = items_schema)]
    items: Option<Box<RawValue>>,
}

/// The answer: one result per item, in the items' order.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchRegistered {
    items: Vec<ItemResult>,
}

/// An item's result: its registration, or why it was refused.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ItemResult {
    Registered(ItemRegistered),
    Refused(ErrorBody),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ItemRegistered {
    #[serde(flatten)]
    registered: Registered,
    /// Present (`true`) when the item's `idempotency_key` had registered it before.
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotent_replayed: Option<bool>,
}

/// The document's schema of `items`: 1 to 1,000 values of any type, since an item that
/// is not a valid `NotifyRequest` (with an optional `idempotency_key`) is refused on its
/// own in the answer, not by refusing the request.
fn items_schema() -> Schema {
    list_schema(
        "A `NotifyRequest`, with an optional `idempotency_key` (1 to 255 visible ASCII characters)",
        MAX_ITEMS,
    )
}

/// The document's schema of a batch's `items`: 1 to `max` values of any type, each
/// `described`.
pub(super) fn list_schema(described: &str, max: usize) -> Schema {
    let item = ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(described));
    ArrayBuilder::new()
        .items(item)
        .min_items(Some(1))
        .max_items(Some(max))
        .into()
}

/// Register up to 1,000 notifications. Role `notify`; each belongs to the token's
/// tenant (or, for a token of every tenant, to the one it names).
#[utoipa::path(
    post,
    path = "/notify/batch",
    operation_id = "registerNotifications",
    tag = "notifications",
    request_body = BatchRequest,
    responses(
        (status = 200, description = "One result per item, in order: `{id, state, next_attempt_at}` (with `idempotent_replayed` for a repeated key), or `{error}` for that item alone, which stored nothing", body = BatchRegistered),
        (status = 422, description = "`items` is missing, empty, not a list or longer than 1,000, or the request has another field; nothing was stored", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn register_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Json<BatchRegistered>, ApiError> {
    no_key_header(&headers)?;
    let registrations = pass_over(body.len(), || registrations(&state, &caller, &body))?;
    let traceparent = registration::traceparent(&headers);
    let results = registration::register_many(&state, registrations, traceparent).await;
    let items = results
        .into_iter()
        .map(|r| match r {
            Ok(accepted) => ItemResult::Registered(ItemRegistered {
                registered: Registered::new(&accepted.id, &accepted.status),
                idempotent_replayed: accepted.duplicate.then_some(true),
            }),
            Err(e) => ItemResult::Refused(e.into_body().1),
        })
        .collect();
    Ok(Json(BatchRegistered { items }))
}

/// The batch `body` of `caller`'s, each item checked on its own.
fn registrations(
    state: &AppState,
    caller: &Principal,
    body: &[u8],
) -> Result<Vec<Result<Registration, ApiError>>, ApiError> {
    let request: BatchRequest = parse_json_within(body, BATCH_NESTING)?;
    let items = items(request.items.as_deref(), MAX_ITEMS, "notifications")?;
    Ok(items
        .into_iter()
        .map(|item| registration(state, caller, item))
        .collect())
}

/// The list of items: 1 to `max` of them, each as sent.
pub(super) fn items<'r>(
    raw: Option<&'r RawValue>,
    max: usize,
    noun: &str,
) -> Result<Vec<&'r RawValue>, FieldError> {
    let raw = raw.ok_or_else(|| FieldError::new("items", "required"))?;
    match serde_json::from_str::<Vec<&RawValue>>(raw.get()) {
        Ok(items) if (1..=max).contains(&items.len()) => Ok(items),
        _ => Err(FieldError::new(
            "items",
            format!("must be a list of 1 to {max} {noun}"),
        )),
    }
}

/// One item checked as `POST /notify` checks its body, its key as the header's: the
/// request is the item without its `idempotency_key`, every other field as sent.
fn registration(
    state: &AppState,
    caller: &Principal,
    item: &RawValue,
) -> Result<Registration, ApiError> {
    let (request, key) = split_key(item)?;
    let raw = request.as_bytes();
    state.rules.check_size(raw)?;
    registration::prepare(state, caller, parse_json(raw)?, key, raw)
}
