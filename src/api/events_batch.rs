//! `POST /events/batch`: up to `MAX_ITEMS` events in one request, each a `POST /events`
//! body, published on its own (all or none of its notifications, as `POST /events`) and
//! answered in order: the event, or that item's own error. A refused item publishes
//! nothing and refuses none of the others; only a malformed request is refused whole.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::{Extension, Json};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::openapi::schema::Schema;
use utoipa::ToSchema;

use super::batch::{items, list_schema};
use super::body::Body;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::events::{publish_one, EventView};
use super::offload::pass_over;
use super::parse::{no_key_header, parse_json_within, BATCH_NESTING};
use super::AppState;
use crate::tenancy::access::Principal;

/// Most events in one batch: each may reach up to 200 subscriptions.
pub const MAX_ITEMS: usize = 100;
/// Events of a batch published at once.
const AT_ONCE: usize = 16;

/// What `POST /events/batch` accepts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventBatchRequest {
    /// 1 to 100 events, each a `POST /events` body.
    #[schema(required = true, schema_with = items_schema)]
    items: Option<Box<RawValue>>,
}

/// The answer: one result per item, in the items' order.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventBatchPublished {
    items: Vec<EventResult>,
}

/// An item's result: its event, or why it was refused.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EventResult {
    Published(Box<EventPublished>),
    Refused(ErrorBody),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventPublished {
    #[serde(flatten)]
    event: EventView,
    /// Present (`true`) when the item's `idempotency_key` had published it before.
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotent_replayed: Option<bool>,
}

fn items_schema() -> Schema {
    list_schema("A `PublishRequest`", MAX_ITEMS)
}

/// Publish up to 100 events. Role `notify`; each belongs to the token's tenant (or, for
/// a token of every tenant, to the one it names).
#[utoipa::path(
    post,
    path = "/events/batch",
    operation_id = "publishEvents",
    tag = "events",
    request_body = EventBatchRequest,
    responses(
        (status = 200, description = "One result per item, in order: the event (with `idempotent_replayed` for a repeated key), or `{error}` for that item alone, which published nothing", body = EventBatchPublished),
        (status = 422, description = "`items` is missing, empty, not a list or longer than 100, or the request has another field; nothing was published", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn publish_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Json<EventBatchPublished>, ApiError> {
    no_key_header(&headers)?;
    let items = pass_over(body.len(), || batch_items(&body))?;
    let published = futures_util::stream::iter(items)
        .map(|item| {
            let (state, caller) = (state.clone(), caller.clone());
            async move { publish_item(&state, &caller, item.as_bytes()).await }
        })
        .buffered(AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    let items = published
        .into_iter()
        .map(|r| match r {
            Ok((event, replayed)) => EventResult::Published(Box::new(EventPublished {
                event,
                idempotent_replayed: replayed.then_some(true),
            })),
            Err(e) => EventResult::Refused(e.into_body().1),
        })
        .collect();
    Ok(Json(EventBatchPublished { items }))
}

/// The items of the batch `body`, each as sent.
fn batch_items(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let request: EventBatchRequest = parse_json_within(body, BATCH_NESTING)?;
    let items = items(request.items.as_deref(), MAX_ITEMS, "events")?;
    Ok(items
        .into_iter()
        .map(|item| item.get().to_string())
        .collect())
}

async fn publish_item(
    state: &AppState,
    caller: &Principal,
    raw: &[u8],
) -> Result<(EventView, bool), ApiError> {
    state.rules.check_size(raw)?;
    publish_one(state, caller, raw, None).await
}
