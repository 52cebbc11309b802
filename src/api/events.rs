//! `POST /events` (publish once: one notification per enabled subscription of the
//! tenant whose topics take the event's), `GET /events`, `GET /events/{id}`,
//! `POST /events/{id}/resend` and `GET /topics` (the topics catalog). An event is
//! stored with the ids of the notifications it makes before they are registered
//! (`fanout`), so that a publish cut short by a crash or an outage is finished by the
//! fan-out sweep, and a repeated `idempotency_key` answers the event it published.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::audit;
use super::body::Body;
use super::error::{invalid_query, ApiError, BadInput, CommonErrors, ErrorBody};
use super::fanout;
use super::offload::pass_over;
use super::parse::{key_header, optional_json, parse_json, without_key};
use super::view::{next_attempt_at, StateView};
use super::AppState;
use super::{auth, paging, permits};
use crate::domain::{
    rfc3339, EventId, FieldError, Fingerprint, IdempotencyKey, JobId, Payload, RawJson,
    SubscriptionId, Tenant, Topic,
};
use crate::events::{self, Delivery, Event};
use crate::store::{Again, AuditAction, AuditRecord, JobStatus};
use crate::tenancy::access::Principal;

/// Events one page of `GET /events` examines at most, when a topic or time filter
/// matches few: then the page comes back short, with a cursor to go on from.
const MAX_SCAN: usize = 2_000;

/// What `POST /events` accepts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// What the event is about: dot-separated segments (`payment.succeeded`).
    #[schema(required = true, example = "payment.succeeded")]
    topic: Option<String>,
    /// A JSON value (sent as `application/json`) or a string (sent as is).
    #[schema(required = true, value_type = Object, example = json!({"order": 42, "status": "paid"}))]
    body: Option<Box<RawValue>>,
    /// Makes the publish safe to repeat: the same key answers the same event (as the
    /// `Idempotency-Key` header does; both given, they must be the same).
    idempotency_key: Option<String>,
    /// Whose event it is: only from a token for every tenant (default `default`).
    tenant: Option<String>,
}

/// The notification an event made for one subscription.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    #[schema(example = "sub_0352MTUd4Uo7EJoE0LjAvZ")]
    subscription: String,
    /// `null` when the subscription's settings no longer pass the tenant's rules (then
    /// `error` says why).
    notification: Option<String>,
    /// `null` when the notification has been deleted by retention.
    state: Option<StateView>,
    attempts: Option<u32>,
    next_attempt_at: Option<String>,
    #[schema(value_type = Option<Object>)]
    error: Option<Value>,
}

/// An event with its deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    #[schema(example = "evt_0352MTUd4Uo7EJoE0LjAvZ")]
    id: String,
    tenant: String,
    topic: String,
    #[schema(value_type = Object)]
    body: RawJson,
    created_at: String,
    idempotency_key: Option<String>,
    /// One per subscription it reached, in the order of their ids; none when it matched
    /// nothing.
    deliveries: Vec<DeliveryView>,
}

/// An event in a list.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventSummary {
    id: String,
    tenant: String,
    topic: String,
    created_at: String,
    /// How many subscriptions it reached.
    deliveries: usize,
}

/// A page of events, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    items: Vec<EventSummary>,
    next_cursor: Option<String>,
}

/// A topic of the catalog with its latest example.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicView {
    topic: String,
    last_published_at: String,
    last_event: String,
    /// The body of the latest event of this topic.
    #[schema(value_type = Object)]
    example: RawJson,
}

/// A page of topics, in topic order.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicPage {
    items: Vec<TopicView>,
    next_cursor: Option<String>,
}

/// The filter and paging of `GET /events`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only events of this topic.
    topic: Option<String>,
    /// Only events published at or after this RFC 3339 time.
    since: Option<String>,
    /// Only this tenant's (a token bound to a tenant sees its own only).
    tenant: Option<String>,
}

/// The paging of `GET /topics`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TopicsQuery {
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// The tenant whose topics (a token for every tenant: default `default`; a
    /// tenant-bound token sees its own only).
    tenant: Option<String>,
}

/// Publish an event: one notification per enabled subscription of the tenant whose
/// topics take it, all registered or (after a failure) finished by the fan-out sweep;
/// an event that matches nothing is kept and listed. Role `notify`; it belongs to the
/// token's tenant.
#[utoipa::path(
    post,
    path = "/events",
    operation_id = "publishEvent",
    tag = "events",
    request_body = PublishRequest,
    responses(
        (status = 202, description = "Published (or, with a known `idempotency_key`, the earlier event; then `Idempotent-Replayed: true`)", body = EventView),
        (status = 422, description = "A field is invalid (`field` names it), or the `idempotency_key` came with another body before (`idempotency_key_mismatch`); nothing was stored", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn publish(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    headers: HeaderMap,
    Body(raw): Body,
) -> Result<Response, ApiError> {
    let key = key_header(&headers)?;
    let (view, replayed) = publish_one(&state, &caller, &raw, key).await?;
    let mut response = (StatusCode::ACCEPTED, Json(view)).into_response();
    if replayed {
        response.headers_mut().insert(
            "idempotent-replayed",
            "true".parse().expect("a header value"),
        );
    }
    Ok(response)
}

/// Publishes the event `raw` of `caller`'s (with `header_key`, its `Idempotency-Key`
/// header): the event as stored, and whether its idempotency key had published it
/// before.
pub(super) async fn publish_one(
    state: &AppState,
    caller: &Principal,
    raw: &[u8],
    header_key: Option<IdempotencyKey>,
) -> Result<(EventView, bool), ApiError> {
    let checked = pass_over(raw.len(), || check(state, caller, raw, header_key))?;
    let Checked {
        key,
        fingerprint,
        tenant,
        topic,
        body,
    } = checked;
    let store = state.store.as_ref();
    if let Some(key) = &key {
        if let Some(earlier) = events::event_of_key(store, &tenant, key).await? {
            return Ok((replayed(state, &earlier, &fingerprint).await?, true));
        }
    }
    let event = Event {
        id: EventId::new().to_string(),
        tenant: tenant.to_string(),
        topic: topic.to_string(),
        body,
        created_at: crate::clock::now_ms(),
        idempotency_key: key.clone(),
        fingerprint: fingerprint.as_str().to_string(),
        deliveries: Vec::new(),
    };
    let reached = events::reached(store, &tenant, &topic).await?;
    // A pass over the body for each subscription reached.
    let copies = event.body.get().len().saturating_mul(reached.len());
    let (event, registrations) = pass_over(copies, || fanout::plan(&state.rules, event, &reached));
    if !events::publish(store, &event, event.created_at).await? {
        // The key published another event meanwhile.
        let earlier = events::event_of_key(store, &tenant, key.as_deref().unwrap_or_default());
        let earlier = earlier.await?.ok_or_else(|| ApiError::not_found("event"))?;
        return Ok((replayed(state, &earlier, &fingerprint).await?, true));
    }
    let accepted = fanout::register(state, &event, registrations).await?;
    tracing::info!(event = %event.id, %tenant, topic = %event.topic, deliveries = event.deliveries.len(), "event published");
    let view = view_of(&event, |id| {
        accepted
            .iter()
            .find(|(n, _)| n == id)
            .map(|(_, s)| s.clone())
    });
    Ok((view, false))
}

/// A publish checked, before the store is asked anything.
struct Checked {
    key: Option<String>,
    /// What a repeated key is held to: the request without its key, whatever its
    /// spacing or field order.
    fingerprint: Fingerprint,
    tenant: Tenant,
    topic: Topic,
    body: RawJson,
}

/// Checks the publish `raw` of `caller`'s (with `header_key`): every field, and the body
/// against its topic's schema.
fn check(
    state: &AppState,
    caller: &Principal,
    raw: &[u8],
    header_key: Option<IdempotencyKey>,
) -> Result<Checked, ApiError> {
    let request: PublishRequest = parse_json(raw)?;
    let key = publish_key(header_key, request.idempotency_key.as_deref())?;
    let fingerprint = Fingerprint::of_request(without_key(raw)?.as_bytes());
    let tenant = auth::registering_tenant(caller, request.tenant.as_deref(), |t| {
        state.rules.tenants.contains_key(t)
    })?;
    let topic = request
        .topic
        .as_deref()
        .ok_or_else(|| FieldError::new("topic", "required"))?;
    let topic = Topic::parse(topic, "topic")?;
    let body = request
        .body
        .ok_or_else(|| FieldError::new("body", "required"))?;
    Payload::from_raw(&body)?;
    let body = RawJson::new(body);
    state.rules.event_schemas.check(&topic, &body)?;
    Ok(Checked {
        key: key.map(IdempotencyKey::into_string),
        fingerprint,
        tenant,
        topic,
        body,
    })
}

/// The event a repeated idempotency key published, unless that was published with
/// another body.
async fn replayed(
    state: &AppState,
    earlier: &Event,
    fingerprint: &Fingerprint,
) -> Result<EventView, ApiError> {
    if fingerprint.refuses(Some(&earlier.fingerprint)) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_mismatch",
            format!(
                "this idempotency key published {} with another request body; use a new key for a new event",
                earlier.id
            ),
        ));
    }
    current_view(state, earlier).await
}

/// Events, newest first, cursor-paged. Role `read`; a tenant-bound token lists its
/// tenant's only.
#[utoipa::path(
    get,
    path = "/events",
    operation_id = "listEvents",
    tag = "events",
    params(EventsQuery),
    responses(
        (status = 200, body = EventPage),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad topic, since, limit, cursor or tenant; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Json<EventPage>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let limit = paging::limit(q.limit)?;
    let topic = q
        .topic
        .as_deref()
        .map(|t| Topic::parse(t, "topic"))
        .transpose()?;
    let since = paging::time("since", q.since.as_deref())?;
    let mut before = paging::cursor(&state.cursors, q.cursor.as_deref(), |c| Some(c.to_string()))?;
    let tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    let store = state.store.as_ref();
    let (mut items, mut examined) = (Vec::with_capacity(limit), 0);
    let next = loop {
        let want = limit - items.len();
        let (ids, last) = events::event_ids(
            store,
            tenant.as_ref(),
            topic.as_ref(),
            before.as_deref(),
            want,
        )
        .await?;
        examined += want;
        let found = events::events(store, &ids).await?;
        let too_old = found
            .iter()
            .any(|e| since.is_some_and(|s| e.created_at < s));
        let fresh = found
            .iter()
            .filter(|e| since.is_none_or(|s| e.created_at >= s));
        items.extend(fresh.map(summary));
        before = last;
        if too_old || before.is_none() {
            break None;
        }
        if items.len() == limit || examined >= MAX_SCAN {
            break before;
        }
    };
    Ok(Json(EventPage {
        items,
        next_cursor: next.map(|c| state.cursors.seal(&c)),
    }))
}

/// One event, with each notification it made and how that stands. Role `read`, for
/// an event of the token's tenant (another tenant's is not found).
#[utoipa::path(
    get,
    path = "/events/{id}",
    operation_id = "getEvent",
    tag = "events",
    params(("id" = String, Path, description = "The event id, `evt_…`")),
    responses(
        (status = 200, body = EventView),
        (status = 404, description = "No such event", body = ErrorBody),
        (status = 422, description = "Not an event id", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<EventView>, ApiError> {
    let found = visible(&state, &caller, &id).await?;
    Ok(Json(current_view(&state, &found).await?))
}

/// What `POST /events/{id}/resend` may name: one subscription's delivery only.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventResendRequest {
    /// Only the notification the event made for this subscription (`sub_…`).
    subscription: Option<String>,
}

/// How many of an event's notifications were sent again.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventResent {
    count: usize,
}

/// Send an event's notifications again: each that is delivered, dead or cancelled gets
/// a new cycle under its own id (as `POST /notifications/{id}/resend`), all of them or
/// the one of `subscription`; those still pending are left as they are, and so are those
/// the token may not resend (a dead one without `replay`, a cancelled one without
/// `cancel`): `count` counts what was sent again. Role `operate`, for an event of the
/// token's tenant.
#[utoipa::path(
    post,
    path = "/events/{id}/resend",
    operation_id = "resendEvent",
    tag = "events",
    params(("id" = String, Path, description = "The event id, `evt_…`")),
    request_body(content = Option<EventResendRequest>, description = "Which subscription's; may be empty or `null` for all"),
    responses(
        (status = 200, description = "How many were sent again", body = EventResent),
        (status = 404, description = "No such event, or no delivery of it for `subscription`", body = ErrorBody),
        (status = 422, description = "Not an event or subscription id", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn resend(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
    Body(raw): Body,
) -> Result<Json<EventResent>, ApiError> {
    let request: EventResendRequest = optional_json(&raw)?;
    let found = visible(&state, &caller, &id).await?;
    let only = request
        .subscription
        .map(|s| SubscriptionId::parse(&s, "subscription").map(|s| s.to_string()))
        .transpose()?;
    let chosen: Vec<&Delivery> = found
        .deliveries
        .iter()
        .filter(|d| only.as_ref().is_none_or(|s| *s == d.subscription))
        .collect();
    if only.is_some() && chosen.is_empty() {
        return Err(ApiError::not_found(
            "delivery of this event for that subscription",
        ));
    }
    let ids: Vec<JobId> = chosen
        .iter()
        .filter_map(|d| d.notification.as_deref()?.parse().ok())
        .collect();
    let which = Again::Resend(permits::resendable(&caller));
    let count = state
        .store
        .send_again(which, &ids, None, std::time::Duration::ZERO)
        .await?;
    if count > 0 {
        state.wake.notify_one();
    }
    tracing::info!(event = %found.id, tenant = %found.tenant, count, actor = %caller.actor, "event resent");
    let record = AuditRecord {
        actor: caller.actor.clone(),
        tenant: Tenant::parse(&found.tenant, "tenant").ok(),
        action: AuditAction::ResendEvent,
        target: Some(found.id.clone()),
        filter: None,
        count: count as u64,
        url: None,
    };
    audit::record(&state, record).await;
    Ok(Json(EventResent { count }))
}

/// The event `id`, if the caller may see it (another tenant's is not found).
async fn visible(state: &AppState, caller: &Principal, id: &str) -> Result<Event, ApiError> {
    let id = EventId::parse(id, "id")?;
    let found = events::event(state.store.as_ref(), &id).await?;
    found
        .filter(|e| Tenant::parse(&e.tenant, "tenant").is_ok_and(|t| auth::sees(caller, &t)))
        .ok_or_else(|| ApiError::not_found("event"))
}

/// The topics a tenant published, in topic order, each with its latest example. Role
/// `read`.
#[utoipa::path(
    get,
    path = "/topics",
    operation_id = "listTopics",
    tag = "events",
    params(TopicsQuery),
    responses(
        (status = 200, body = TopicPage),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad limit, cursor or tenant; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn topics(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<TopicsQuery>, QueryRejection>,
) -> Result<Json<TopicPage>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let limit = paging::limit(q.limit)?;
    let after = paging::cursor(&state.cursors, q.cursor.as_deref(), |c| Some(c.to_string()))?;
    let tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?.unwrap_or_default();
    let found = events::topics(state.store.as_ref(), &tenant, after.as_deref(), limit).await?;
    let next = (found.len() == limit)
        .then(|| found.last().map(|t| state.cursors.seal(&t.topic)))
        .flatten();
    let items = found
        .into_iter()
        .map(|t| TopicView {
            topic: t.topic,
            last_published_at: rfc3339(t.last_published_at),
            last_event: t.last_event,
            example: t.example,
        })
        .collect();
    Ok(Json(TopicPage {
        items,
        next_cursor: next,
    }))
}

/// `e` with how each of its notifications stands now.
async fn current_view(state: &AppState, e: &Event) -> Result<EventView, ApiError> {
    let ids: Vec<JobId> = e.notifications().collect();
    let reads = ids.iter().map(|id| state.store.get(id));
    let read = futures_util::future::try_join_all(reads).await?;
    let statuses: Vec<(JobId, JobStatus)> = read
        .into_iter()
        .flatten()
        .map(|v| (v.id, v.status))
        .collect();
    Ok(view_of(e, |id| {
        statuses
            .iter()
            .find(|(n, _)| n == id)
            .map(|(_, s)| s.clone())
    }))
}

/// `e` with each notification's status as `status` gives it.
fn view_of(e: &Event, status: impl Fn(&JobId) -> Option<JobStatus>) -> EventView {
    let deliveries = e
        .deliveries
        .iter()
        .map(|d| {
            let id: Option<JobId> = d.notification.as_deref().and_then(|n| n.parse().ok());
            let status = id.as_ref().and_then(&status);
            DeliveryView {
                subscription: d.subscription.clone(),
                notification: d.notification.clone(),
                state: status.as_ref().map(StateView::from),
                attempts: status.as_ref().map(|s| s.attempts),
                next_attempt_at: status.as_ref().and_then(next_attempt_at),
                error: d.refused.clone(),
            }
        })
        .collect();
    EventView {
        id: e.id.clone(),
        tenant: e.tenant.clone(),
        topic: e.topic.clone(),
        body: e.body.clone(),
        created_at: rfc3339(e.created_at),
        idempotency_key: e.idempotency_key.clone(),
        deliveries,
    }
}

fn summary(e: &Event) -> EventSummary {
    EventSummary {
        id: e.id.clone(),
        tenant: e.tenant.clone(),
        topic: e.topic.clone(),
        created_at: rfc3339(e.created_at),
        deliveries: e.deliveries.len(),
    }
}

/// A publish's idempotency key: the header's or the body's field (the same, when both
/// are given).
fn publish_key(
    header: Option<IdempotencyKey>,
    field: Option<&str>,
) -> Result<Option<IdempotencyKey>, FieldError> {
    let field = field
        .map(|k| IdempotencyKey::parse(k, "idempotency_key"))
        .transpose()?;
    match (header, field) {
        (Some(h), Some(f)) if h != f => Err(FieldError::new(
            "idempotency_key",
            "differs from the Idempotency-Key header; give one key, or the same in both",
        )),
        (h, f) => Ok(h.or(f)),
    }
}
