//! `POST /subscriptions`, `GET /subscriptions`, and `GET`, `PATCH` and `DELETE
//! /subscriptions/{id}`: a tenant's standing subscriptions, each a URL, the topics it
//! takes (`payment.*`) and the settings of the notifications an event makes for it (the
//! fields of `POST /notify`). A subscription is checked as a notification to its URL
//! would be, when it is written and again at each event (`events`). Reading needs
//! `read`, writing `operate`; another tenant's subscription is not found.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::audit;
use super::body::Body;
use super::error::{invalid_query, ApiError, BadInput, CommonErrors, ErrorBody};
use super::notify::{validate, NotifyRequest};
use super::parse::parse_json;
use super::AppState;
use super::{auth, paging};
use crate::domain::{
    headers_after_change, rfc3339, shown_value, FieldError, JobId, RawJson, SubscriptionId, Tenant,
    TopicPattern,
};
use crate::events::{self, Subscription, MAX_SUBSCRIPTIONS};
use crate::store::{AuditAction, AuditRecord, UrlChange};
use crate::tenancy::access::Principal;

/// The fields of `POST /notify` a subscription may set for its notifications.
pub(super) const SETTINGS: [&str; 9] = [
    "schedule",
    "profile",
    "expect_body",
    "success",
    "headers",
    "rate_key",
    "timeout",
    "delay",
    "ordering_key",
];
const MAX_TOPICS: usize = 50;
const MAX_DESCRIPTION: usize = 256;
/// Tries of a `PATCH` that meets another write of the same subscription.
const WRITE_TRIES: usize = 5;

/// What `POST /subscriptions` and `PATCH /subscriptions/{id}` accept. A `PATCH` changes
/// the fields it names; `null` removes a setting or the description.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct SubscriptionRequest {
    /// Where its notifications go, checked as a notification's URL is. Another URL keeps
    /// none of the stored `headers` (they were meant for the old receiver): only those
    /// given with it.
    #[schema(example = "https://merchant.example.com/hooks")]
    url: Option<String>,
    /// Topics it takes: names (`payment.succeeded`) or patterns whose `*` stands for any
    /// one segment (`payment.*`); 1 to 50.
    #[schema(example = json!(["payment.*"]))]
    topics: Option<Vec<String>>,
    #[serde(default, deserialize_with = "given")]
    #[schema(value_type = Option<String>)]
    description: Option<Value>,
    /// Default `true`; a disabled subscription takes no events.
    enabled: Option<bool>,
    /// Whose it is: only from a token for every tenant (default `default`).
    tenant: Option<String>,
    /// Any of `POST /notify`'s `schedule`, `profile`, `expect_body`, `success`,
    /// `headers`, `rate_key`, `timeout`, `delay`, `ordering_key`: what each notification
    /// made for it carries.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    settings: Map<String, Value>,
}

/// A present field, `null` included (an absent one is `None`).
fn given<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A subscription as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionView {
    #[schema(example = "sub_0352MTUd4Uo7EJoE0LjAvZ")]
    id: String,
    tenant: String,
    url: String,
    topics: Vec<String>,
    description: Option<String>,
    enabled: bool,
    /// The notifications' settings, as given, but the values of credential headers
    /// (`authorization`, `cookie`, names with key, token, secret or password), which
    /// are shown as `(withheld)`: sent back so, a header keeps its stored value.
    #[schema(value_type = Object)]
    settings: Map<String, Value>,
    created_at: String,
    updated_at: String,
}

/// What a header's value is shown as when it is a credential.
const WITHHELD: &str = "(withheld)";

impl From<&Subscription> for SubscriptionView {
    fn from(s: &Subscription) -> Self {
        let mut settings = s.settings.clone();
        if let Some(Value::Object(headers)) = settings.get_mut("headers") {
            for (name, value) in headers.iter_mut() {
                if let Value::String(text) = value {
                    *text = shown_value(name, text).to_string();
                }
            }
        }
        Self {
            id: s.id.clone(),
            tenant: s.tenant.clone(),
            url: s.url.clone(),
            topics: s.topics.clone(),
            description: s.description.clone(),
            enabled: s.enabled,
            settings,
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
        }
    }
}

/// A page of subscriptions.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionPage {
    items: Vec<SubscriptionView>,
    /// Subscriptions of this page whose documents cannot be read (stored by an earlier
    /// build deeper than the nesting limit, or damaged): they take no events; delete
    /// each and create it again. Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unreadable: Vec<UnreadableView>,
    next_cursor: Option<String>,
}

/// A subscription that cannot be read.
#[derive(Debug, Serialize, ToSchema)]
pub struct UnreadableView {
    #[schema(example = "sub_0352MTUd4Uo7EJoE0LjAvZ")]
    id: String,
    tenant: Option<String>,
    error: String,
}

/// The paging of `GET /subscriptions`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionsQuery {
    /// Items per page, 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only this tenant's (a token bound to a tenant sees its own only).
    tenant: Option<String>,
}

/// Subscribe a URL to topics. Role `operate`; it belongs to the token's tenant.
#[utoipa::path(
    post,
    path = "/subscriptions",
    operation_id = "createSubscription",
    tag = "events",
    request_body = SubscriptionRequest,
    responses(
        (status = 201, body = SubscriptionView),
        (status = 409, description = "The tenant has 200 subscriptions (`too_many_subscriptions`)", body = ErrorBody),
        (status = 422, description = "A field is invalid (`field` names it); nothing was stored", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let request: SubscriptionRequest = parse_json(&body)?;
    let tenant = auth::registering_tenant(&caller, request.tenant.as_deref(), |t| {
        state.rules.tenants.contains_key(t)
    })?;
    let now = events_now();
    let blank = Subscription {
        id: SubscriptionId::new().to_string(),
        tenant: tenant.to_string(),
        url: String::new(),
        topics: Vec::new(),
        description: None,
        enabled: true,
        settings: Map::new(),
        created_at: now,
        updated_at: now,
    };
    let new = changed(&state, &blank, request)?;
    if !events::create(state.store.as_ref(), &new).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "too_many_subscriptions",
            format!(
                "the tenant `{tenant}` has {MAX_SUBSCRIPTIONS} subscriptions, the most it may have"
            ),
        ));
    }
    tracing::info!(subscription = %new.id, %tenant, actor = %caller.actor, "subscription created");
    audit::record(
        &state,
        on_subscription(&caller, AuditAction::CreateSubscription, &new),
    )
    .await;
    Ok((StatusCode::CREATED, Json(SubscriptionView::from(&new))).into_response())
}

/// Subscriptions, by id, cursor-paged. Role `read`; a tenant-bound token lists its
/// tenant's only.
#[utoipa::path(
    get,
    path = "/subscriptions",
    operation_id = "listSubscriptions",
    tag = "events",
    params(SubscriptionsQuery),
    responses(
        (status = 200, body = SubscriptionPage),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A bad limit, cursor or tenant; `field` names it", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    query: Result<Query<SubscriptionsQuery>, QueryRejection>,
) -> Result<Json<SubscriptionPage>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let limit = paging::limit(q.limit)?;
    let after = paging::cursor(&state.cursors, q.cursor.as_deref(), |c| Some(c.to_string()))?;
    let tenant = auth::tenant_filter(&caller, q.tenant.as_deref())?;
    let store = state.store.as_ref();
    let found = events::subscriptions(store, tenant.as_ref(), after.as_deref(), limit).await?;
    let last_id = |s: &events::StoredSubscription| match s {
        Ok(s) => s.id.clone(),
        Err(u) => u.id.clone(),
    };
    let next = (found.len() == limit)
        .then(|| found.last().map(|s| state.cursors.seal(&last_id(s))))
        .flatten();
    let (mut items, mut unreadable) = (Vec::new(), Vec::new());
    for s in found {
        match s {
            Ok(s) => items.push(SubscriptionView::from(&s)),
            Err(u) => unreadable.push(UnreadableView {
                id: u.id,
                tenant: u.tenant,
                error: u.error,
            }),
        }
    }
    Ok(Json(SubscriptionPage {
        items,
        unreadable,
        next_cursor: next,
    }))
}

/// One subscription. Role `read`, for one of the token's tenant.
#[utoipa::path(
    get,
    path = "/subscriptions/{id}",
    operation_id = "getSubscription",
    tag = "events",
    params(("id" = String, Path, description = "The subscription id, `sub_…`")),
    responses(
        (status = 200, body = SubscriptionView),
        (status = 404, description = "No such subscription", body = ErrorBody),
        (status = 422, description = "Not a subscription id", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let found = readable(visible(&state, &caller, &id).await?)?;
    Ok(Json(SubscriptionView::from(&found)))
}

/// Change a subscription: the fields given replace its own (`null` removes a setting or
/// the description), and the whole is checked again. Moved to another `url`, it keeps
/// none of its stored `headers`, only those given with it (a `(withheld)` value stands for
/// nothing there); the audit log records both URLs. Role `operate`, for one of the
/// token's tenant.
#[utoipa::path(
    patch,
    path = "/subscriptions/{id}",
    operation_id = "updateSubscription",
    tag = "events",
    params(("id" = String, Path, description = "The subscription id, `sub_…`")),
    request_body = SubscriptionRequest,
    responses(
        (status = 200, body = SubscriptionView),
        (status = 404, description = "No such subscription", body = ErrorBody),
        (status = 422, description = "A field is invalid (`field` names it); nothing was changed", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> Result<Json<SubscriptionView>, ApiError> {
    let request: SubscriptionRequest = parse_json(&body)?;
    if request.tenant.is_some() {
        return Err(FieldError::new("tenant", "a subscription keeps its tenant").into());
    }
    for _ in 0..WRITE_TRIES {
        let old = readable(visible(&state, &caller, &id).await?)?;
        let mut new = changed(&state, &old, request.clone())?;
        new.updated_at = events_now().max(old.updated_at);
        if events::replace(state.store.as_ref(), &old, &new).await? {
            tracing::info!(subscription = %new.id, tenant = %new.tenant, actor = %caller.actor, "subscription changed");
            let mut entry = on_subscription(&caller, AuditAction::UpdateSubscription, &new);
            entry.url = UrlChange::between(&old.url, &new.url);
            audit::record(&state, entry).await;
            return Ok(Json(SubscriptionView::from(&new)));
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "changed_meanwhile",
        "the subscription kept changing while this change was written; try again",
    ))
}

/// Delete a subscription: events published from now on do not reach it (notifications
/// already made for it are kept). Role `operate`, for one of the token's tenant.
#[utoipa::path(
    delete,
    path = "/subscriptions/{id}",
    operation_id = "deleteSubscription",
    tag = "events",
    params(("id" = String, Path, description = "The subscription id, `sub_…`")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such subscription", body = ErrorBody),
        (status = 422, description = "Not a subscription id", body = ErrorBody),
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    for _ in 0..WRITE_TRIES {
        let store = state.store.as_ref();
        let (deleted, tenant) = match visible(&state, &caller, &id).await? {
            Ok(found) => (events::delete(store, &found).await?, found.tenant),
            Err(u) => (
                events::delete_unreadable(store, &u).await?,
                u.tenant.unwrap_or_default(),
            ),
        };
        if deleted {
            tracing::info!(subscription = %id, %tenant, actor = %caller.actor, "subscription deleted");
            let entry = AuditRecord {
                actor: caller.actor.clone(),
                tenant: Tenant::parse(&tenant, "tenant").ok(),
                action: AuditAction::DeleteSubscription,
                target: Some(id.clone()),
                filter: None,
                count: 1,
                url: None,
            };
            audit::record(&state, entry).await;
            return Ok(StatusCode::NO_CONTENT);
        }
    }
    Err(ApiError::not_found("subscription"))
}

/// The subscription `id`, read or not, if the caller may see it (another tenant's is
/// not found; so is one that cannot be read and whose tenant cannot be told, but for a
/// token of every tenant).
async fn visible(
    state: &AppState,
    caller: &Principal,
    id: &str,
) -> Result<events::StoredSubscription, ApiError> {
    let id = SubscriptionId::parse(id, "id")?;
    let found = events::subscription(state.store.as_ref(), &id).await?;
    let tenant_of = |s: &events::StoredSubscription| match s {
        Ok(s) => Some(s.tenant.clone()),
        Err(u) => u.tenant.clone(),
    };
    let sees = |tenant: Option<String>| match tenant {
        Some(t) => Tenant::parse(&t, "tenant").is_ok_and(|t| auth::sees(caller, &t)),
        None => auth::sees_every_tenant(caller),
    };
    found
        .filter(|s| sees(tenant_of(s)))
        .ok_or_else(|| ApiError::not_found("subscription"))
}

/// A subscription as read: `409 unreadable` for one that cannot be.
fn readable(stored: events::StoredSubscription) -> Result<Subscription, ApiError> {
    stored.map_err(|u| {
        ApiError::new(
            StatusCode::CONFLICT,
            "unreadable",
            format!(
                "subscription {} cannot be read ({}); delete it and create it again",
                u.id, u.error
            ),
        )
    })
}

/// `old` with what `request` changes, checked whole. Moved to another URL, it keeps none
/// of its stored headers, only those the request gives (`headers_after_change`).
fn changed(
    state: &AppState,
    old: &Subscription,
    mut request: SubscriptionRequest,
) -> Result<Subscription, ApiError> {
    let mut new = old.clone();
    if let Some(url) = request.url {
        new.url = url;
    }
    match headers_at(old, &new.url, request.settings.remove("headers"))? {
        Some(headers) => new.settings.insert("headers".into(), headers),
        None => new.settings.remove("headers"),
    };
    if let Some(topics) = request.topics {
        new.topics = topics;
    }
    if let Some(description) = request.description {
        new.description = match description {
            Value::Null => None,
            Value::String(text) => Some(text),
            _ => return Err(FieldError::new("description", "must be a string").into()),
        };
    }
    if let Some(enabled) = request.enabled {
        new.enabled = enabled;
    }
    for (name, value) in request.settings {
        if !SETTINGS.contains(&name.as_str()) {
            let known =
                "url, topics, description, enabled, tenant, ".to_string() + &SETTINGS.join(", ");
            return Err(
                FieldError::new(name, format!("unknown field; the fields are {known}")).into(),
            );
        }
        match value {
            Value::Null => new.settings.remove(&name),
            value => new.settings.insert(name, value),
        };
    }
    check(state, &new)?;
    Ok(new)
}

/// The headers of `old` once at `url` with the `headers` a request gives, if any (`null`:
/// none): moved to another URL, only those given (`headers_after_change`).
fn headers_at(
    old: &Subscription,
    url: &str,
    given: Option<Value>,
) -> Result<Option<Value>, FieldError> {
    let moved = url != old.url;
    let kept = headers_after_change(old.settings.get("headers").cloned(), None, moved);
    let given = given.map(|h| kept_credentials(h, kept.as_ref(), moved));
    let given = given.transpose()?.map(|h| Some(h).filter(|h| !h.is_null()));
    Ok(headers_after_change(kept, given, moved))
}

/// `headers` as given, each `(withheld)` value (what the view shows of a credential)
/// replaced by the value `old` (the headers the change keeps) holds under that name: none
/// when the subscription `moved` to another URL.
fn kept_credentials(
    mut headers: Value,
    old: Option<&Value>,
    moved: bool,
) -> Result<Value, FieldError> {
    let Value::Object(given) = &mut headers else {
        return Ok(headers);
    };
    for (name, value) in given.iter_mut() {
        if value.as_str() != Some(WITHHELD) {
            continue;
        }
        let stored = old
            .and_then(Value::as_object)
            .and_then(|o| o.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.clone());
        let none = match moved {
            true => "`(withheld)` stands for a stored value, and another `url` is sent none: give the value",
            false => "`(withheld)` stands for a stored value, and this header has none",
        };
        *value = stored.ok_or_else(|| FieldError::new(format!("headers.{name}"), none))?;
    }
    Ok(headers)
}

/// Refuses a subscription whose URL, topics, description or settings would not do.
fn check(state: &AppState, s: &Subscription) -> Result<(), ApiError> {
    if s.url.is_empty() {
        return Err(FieldError::new("url", "required").into());
    }
    if s.topics.is_empty() || s.topics.len() > MAX_TOPICS {
        return Err(
            FieldError::new("topics", format!("must list 1 to {MAX_TOPICS} topics")).into(),
        );
    }
    for (i, topic) in s.topics.iter().enumerate() {
        TopicPattern::parse(topic, &format!("topics[{i}]"))?;
    }
    if s.description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION)
    {
        return Err(FieldError::new(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters"),
        )
        .into());
    }
    let tenant = Tenant::parse(&s.tenant, "tenant")?;
    let body = RawJson::new(RawValue::from_string("{}".into()).expect("JSON"));
    let request = notify_request(s, &body, "subscription.check")?;
    validate(request, JobId::new(0), tenant, &state.rules)?;
    Ok(())
}

/// The `POST /notify` request a notification for `s` is checked as: its settings, its
/// URL, and the event's body and topic.
pub(super) fn notify_request(
    s: &Subscription,
    body: &RawJson,
    topic: &str,
) -> Result<NotifyRequest, ApiError> {
    let mut request = s.settings.clone();
    request.insert("url".into(), Value::String(s.url.clone()));
    request.insert("topic".into(), Value::String(topic.to_string()));
    let bytes = serde_json::to_vec(&request).expect("a JSON object serializes");
    let request: NotifyRequest = parse_json(&bytes)?;
    Ok(request.with_body(body.as_raw().to_owned()))
}

fn on_subscription(caller: &Principal, action: AuditAction, s: &Subscription) -> AuditRecord {
    AuditRecord {
        actor: caller.actor.clone(),
        tenant: Tenant::parse(&s.tenant, "tenant").ok(),
        action,
        target: Some(s.id.clone()),
        filter: None,
        count: 1,
        url: None,
    }
}

/// The store's clock is not asked for a subscription's times: the instance's will do.
fn events_now() -> i64 {
    crate::clock::now_ms()
}
