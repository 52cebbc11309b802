//! The registration pipeline `POST /notify` and `POST /notify/batch` share: a checked
//! request becomes a `Registration` (its tenant, its id and shard, its idempotency key),
//! is stored in a span of its own, and the store's answer becomes what the API answers.

use axum::http::{HeaderMap, StatusCode};
use tracing::{Instrument, Span};

use super::auth;
use super::error::ApiError;
use super::notify::{validate, NotifyRequest};
use super::parse::parse_json;
use super::rules::RegistrationRules;
use super::AppState;
use crate::domain::{
    Fingerprint, IdempotencyKey, JobId, Notification, OrderingKey, PlacedBy, Tenant,
};
use crate::observability::traces;
use crate::store::{Enqueued, Idempotency, IntakeItem, JobStatus, StoreResult};
use crate::tenancy::access::{Principal, Role, Scope};

/// A registration checked and ready to store.
pub(super) struct Registration {
    notification: Notification,
    idempotency: Option<Idempotency>,
}

/// What the store made of a registration: the notification (an earlier one, for a
/// repeated idempotency key) and its status.
pub(super) struct Accepted {
    pub id: JobId,
    pub status: JobStatus,
    pub duplicate: bool,
}

/// Checks a request of `caller` into a registration: its tenant, its id, every field.
/// `raw` is the request as sent (without its idempotency key), whose fingerprint the key
/// keeps.
pub(super) fn prepare(
    state: &AppState,
    caller: &Principal,
    request: NotifyRequest,
    key: Option<IdempotencyKey>,
    raw: &[u8],
) -> Result<Registration, ApiError> {
    let rules = &state.rules;
    let tenant = auth::registering_tenant(caller, request.tenant.as_deref(), |t| {
        rules.tenants.contains_key(t)
    })?;
    let mut idempotency = key.map(|key| idempotency(rules, &tenant, key, raw));
    let ordering_key = ordering_key(&request)?;
    let id = place(rules, &tenant, ordering_key.as_ref(), idempotency.as_mut())?;
    let mut notification = validate(request, id, tenant, rules)?;
    notification.ordering_key = ordering_key;
    Ok(Registration {
        notification,
        idempotency,
    })
}

/// Checks the notification an event makes for a subscription of `tenant`, as a request
/// of a token bound to that tenant is checked: under `id` when the event named one
/// before (its fan-out finished later), else a new one, with `idempotency` scoping it
/// to the event and the subscription, so that registering it twice stores it once.
pub(super) fn prepare_delivery(
    rules: &RegistrationRules,
    tenant: &Tenant,
    request: NotifyRequest,
    mut idempotency: Idempotency,
    id: Option<JobId>,
) -> Result<Registration, ApiError> {
    let ordering_key = ordering_key(&request)?;
    let id = match id {
        Some(id) => id,
        None => place(rules, tenant, ordering_key.as_ref(), Some(&mut idempotency))?,
    };
    let mut notification = validate(request, id, tenant.clone(), rules)?;
    notification.ordering_key = ordering_key;
    Ok(Registration {
        notification,
        idempotency: Some(idempotency),
    })
}

impl Registration {
    pub(super) fn id(&self) -> JobId {
        self.notification.id
    }
}

/// A new notification's id: on its ordering key's shard (every notification of a key
/// lives on one shard, whose scripts keep the key's order; refused at once while that
/// shard cannot take it), else on its idempotency key's (or, while that one is degraded,
/// another, which `idempotency` then names), else on any healthy shard.
fn place(
    rules: &RegistrationRules,
    tenant: &Tenant,
    ordering_key: Option<&OrderingKey>,
    idempotency: Option<&mut Idempotency>,
) -> Result<JobId, ApiError> {
    let by_ordering = ordering_key.map(|k| format!("ordering {}", k.scoped(tenant)));
    let by_key = idempotency.as_ref().map(|i| i.placement_key());
    let by = match (&by_ordering, &by_key) {
        (Some(k), _) => PlacedBy::Ordering(k),
        (None, Some(k)) => PlacedBy::Idempotency(k),
        (None, None) => PlacedBy::Nothing,
    };
    let placed = rules.placement.place(by).map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shard_unavailable",
            format!("{e}; its ordering key keeps it there, try again shortly"),
        )
    })?;
    if let Some(i) = idempotency {
        i.moved_from = placed.moved_from;
    }
    Ok(placed.id)
}

/// A producer's `key` within `tenant`, holding repeats to the request `raw`.
fn idempotency(
    rules: &RegistrationRules,
    tenant: &Tenant,
    key: IdempotencyKey,
    raw: &[u8],
) -> Idempotency {
    Idempotency {
        key: key.into_string(),
        tenant: tenant.clone(),
        fingerprint: Fingerprint::of_request(raw),
        ttl: rules.idempotency_ttl,
        moved_from: None,
    }
}

fn ordering_key(request: &NotifyRequest) -> Result<Option<OrderingKey>, crate::domain::FieldError> {
    request
        .ordering_key
        .as_deref()
        .map(OrderingKey::parse)
        .transpose()
}

/// Checks a registration a producer made inside its database transaction, as a request
/// of a token bound to its tenant (which the database granted) is checked: the
/// notification under the id it was given then, and its idempotency key.
pub(super) fn prepare_intake(
    rules: &RegistrationRules,
    item: &IntakeItem,
) -> Result<(Notification, Option<Idempotency>), ApiError> {
    let raw = item.request.as_bytes();
    rules.check_size(raw)?;
    let key = item
        .idempotency_key
        .as_deref()
        .map(|k| IdempotencyKey::parse(k, "idempotency_key"))
        .transpose()?;
    let request: NotifyRequest = parse_json(raw)?;
    let tenant = Tenant::parse(&item.tenant, "tenant")?;
    let caller = Principal::new("postback.notify", Scope::One(tenant), &[Role::Notify]);
    let tenant = auth::registering_tenant(&caller, request.tenant.as_deref(), |t| {
        rules.tenants.contains_key(t)
    })?;
    let idempotency = key.map(|key| idempotency(rules, &tenant, key, raw));
    let ordering_key = ordering_key(&request)?;
    let mut notification = validate(request, item.id, tenant, rules)?;
    notification.ordering_key = ordering_key;
    Ok((notification, idempotency))
}

/// Stores a registration, in a span that is the child of the producer's `traceparent`.
pub(super) async fn register(
    state: &AppState,
    registration: Registration,
    traceparent: Option<&str>,
) -> Result<Accepted, ApiError> {
    let (registration, span) = traced(registration, traceparent);
    let enqueued = state
        .store
        .enqueue(
            &registration.notification,
            registration.idempotency.as_ref(),
        )
        .instrument(span.clone())
        .await;
    accepted(state, &registration.notification, enqueued, &span)
}

/// Stores registrations together (each in its own span, as `register` does): one
/// result each, in order, a refused one's refusal as it came.
pub(super) async fn register_many(
    state: &AppState,
    registrations: Vec<Result<Registration, ApiError>>,
    traceparent: Option<&str>,
) -> Vec<Result<Accepted, ApiError>> {
    let traced: Vec<_> = registrations
        .into_iter()
        .map(|r| r.map(|r| traced(r, traceparent)))
        .collect();
    let stored: Vec<_> = traced
        .iter()
        .flatten()
        .map(|(r, _)| (&r.notification, r.idempotency.as_ref()))
        .collect();
    let mut enqueued = state.store.enqueue_many(&stored).await.into_iter();
    traced
        .into_iter()
        .map(|r| {
            let (registration, span) = r?;
            let result = enqueued.next().expect("one result per registration stored");
            accepted(state, &registration.notification, result, &span)
        })
        .collect()
}

/// A registration with the span it is stored in, whose `traceparent` it keeps.
fn traced(mut registration: Registration, traceparent: Option<&str>) -> (Registration, Span) {
    let span = traces::registration(traceparent);
    registration.notification.traceparent = traces::traceparent(&span);
    (registration, span)
}

/// What the store made of a registration, as the API answers it.
fn accepted(
    state: &AppState,
    notification: &Notification,
    enqueued: StoreResult<Enqueued>,
    span: &Span,
) -> Result<Accepted, ApiError> {
    let enqueued = enqueued?;
    // A repeated idempotency key names the notification it registered before.
    span.record("id", tracing::field::display(&enqueued.id));
    if enqueued.mismatch {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_mismatch",
            format!(
                "this idempotency key registered {} with another request body; use a new key for a new notification",
                enqueued.id
            ),
        ));
    }
    if enqueued.earliest.is_some() {
        state.wake.notify_one();
    }
    if !enqueued.duplicate {
        crate::observability::metrics::accepted();
        let endpoints = &state.endpoints;
        endpoints.registered(&notification.tenant, notification.url.as_url());
        tracing::info!(id = %enqueued.id, host = %notification.url.host(), "notification registered");
    }
    let Some(status) = enqueued.status else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "idempotency_key_reused",
            format!(
                "this idempotency key registered {}, which has finished and been deleted by retention; use a new key to register again",
                enqueued.id
            ),
        ));
    };
    Ok(Accepted {
        id: enqueued.id,
        status,
        duplicate: enqueued.duplicate,
    })
}

/// The producer's W3C `traceparent`, if it sent one.
pub(super) fn traceparent(headers: &HeaderMap) -> Option<&str> {
    headers.get("traceparent").and_then(|v| v.to_str().ok())
}
