//! `POST /notify`: parse and validate a registration, store it, answer `202`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tracing::Instrument;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::ToSchema;

use super::auth;
use super::body::Body;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::view::Registered;
use super::AppState;
use crate::access::{self, Principal, Role};
use crate::domain::{
    parse_duration, CallbackUrl, Destinations, ExtraHeaders, FieldError, HostAllowList, JobId,
    Notification, Payload, Placement, Schedule, Tenant, MAX_TIERS,
};
use crate::store::{Idempotency, JobStatus};
use crate::traces;

const MAX_LABEL: usize = 256;
const MAX_EXPECT_BODY: usize = 1024;
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// What `POST /notify` accepts, before validation. Every field is optional here so that
/// a missing one is reported by name.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyRequest {
    /// The callback, `http` or `https`.
    #[schema(required = true, example = "https://merchant.example.com/paid")]
    url: Option<String>,
    /// A JSON value (sent as `application/json`) or a string (sent as is).
    #[schema(required = true, value_type = Object, example = json!({"order": 42, "status": "paid"}))]
    body: Option<Value>,
    /// Extra request headers; hop-by-hop, `webhook-*` and `User-Agent` are refused.
    headers: Option<BTreeMap<String, String>>,
    /// Intervals between attempts (`["15s", "3m"]`, each 100ms to 7 days, at most 50) or
    /// the name of a configured schedule; default `default`.
    #[schema(required = false, schema_with = schedule_schema)]
    schedule: Option<Value>,
    /// Before the first attempt; default `0s`.
    #[schema(example = "0s")]
    delay: Option<String>,
    /// Per attempt; default `delivery.timeout`, at most `delivery.max_timeout`.
    #[schema(example = "10s")]
    timeout: Option<String>,
    /// Success also needs the trimmed response body to equal this.
    #[schema(example = "SUCCESS")]
    expect_body: Option<String>,
    /// A free label for filtering.
    #[schema(example = "payment.succeeded")]
    topic: Option<String>,
    /// The rate-limit key, within the tenant; default the URL's host.
    rate_key: Option<String>,
    /// Whose notification it is: only from a token for every tenant (default
    /// `default`); a tenant-bound token's own otherwise.
    tenant: Option<String>,
}

/// The limits a registration is checked against, from configuration.
#[derive(Debug)]
pub struct NotifyPolicy {
    pub schedules: BTreeMap<String, Schedule>,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub max_delay: Duration,
    pub idempotency_ttl: Duration,
    /// Which callback addresses are accepted (the SSRF guard).
    pub destinations: Destinations,
    /// Which shard each new notification goes to.
    pub placement: Placement,
    /// The configured tenants, each with the callback hosts it may use (`None`: any).
    pub tenants: BTreeMap<Tenant, Option<HostAllowList>>,
}

impl NotifyPolicy {
    /// A callback URL `tenant` may use: valid, past the SSRF guard, and one of the
    /// tenant's allowed hosts if it has a list.
    pub fn callback(&self, raw: &str, tenant: &Tenant) -> Result<CallbackUrl, FieldError> {
        let url = CallbackUrl::parse(raw, self.destinations)?;
        match self.tenants.get(tenant) {
            Some(Some(allowed)) if !allowed.allows(url.host()) => Err(FieldError::new(
                "url",
                format!(
                    "{} is not one of the tenant `{tenant}`'s allowed hosts",
                    url.host()
                ),
            )),
            _ => Ok(url),
        }
    }
}

/// Register a notification. Role `notify`; it belongs to the token's tenant.
#[utoipa::path(
    post,
    path = "/notify",
    operation_id = "registerNotification",
    tag = "notifications",
    request_body = NotifyRequest,
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Makes the request safe to repeat: the same key returns the same notification")),
    responses(
        (status = 202, description = "Registered (or, with a known Idempotency-Key, the earlier registration; then `Idempotent-Replayed: true`)", body = Registered),
        (status = 409, description = "The Idempotency-Key's notification was deleted by retention", body = ErrorBody),
        (status = 422, description = "A field is invalid (`field` names it), or the Idempotency-Key came with another body before (`idempotency_key_mismatch`); nothing was stored", body = ErrorBody),
        BadInput,
        CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn notify(
    State(state): State<AppState>,
    Extension(caller): Extension<Principal>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    auth::require(&caller, Role::Notify)?;
    // A value that is not visible ASCII reads as empty, which checked_key refuses.
    let key = headers
        .get("idempotency-key")
        .map(|raw| checked_key(raw.to_str().unwrap_or_default(), "Idempotency-Key"))
        .transpose()?;
    let request: NotifyRequest = parse_json(&body)?;
    let registration = prepare(&state, &caller, request, key, &body)?;
    let accepted = register(&state, registration, traceparent(&headers)).await?;
    let mut response = (
        StatusCode::ACCEPTED,
        Json(Registered::new(&accepted.id, &accepted.status)),
    )
        .into_response();
    if accepted.duplicate {
        response.headers_mut().insert(
            "idempotent-replayed",
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

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
/// `raw` is the request as sent, whose fingerprint an idempotency key keeps.
pub(super) fn prepare(
    state: &AppState,
    caller: &Principal,
    request: NotifyRequest,
    key: Option<String>,
    raw: &[u8],
) -> Result<Registration, ApiError> {
    let tenant = auth::registering_tenant(caller, request.tenant.as_deref(), |t| {
        state.policy.tenants.contains_key(t)
    })?;
    let idempotency = key.map(|key| Idempotency {
        key,
        tenant: tenant.clone(),
        fingerprint: fingerprint(raw),
        ttl: state.policy.idempotency_ttl,
    });
    let id = state
        .policy
        .placement
        .new_id(idempotency.as_ref().map(Idempotency::scoped).as_deref());
    let notification = validate(request, id, tenant, &state.policy)?;
    Ok(Registration {
        notification,
        idempotency,
    })
}

/// Stores a registration, in a span that is the child of the producer's `traceparent`.
pub(super) async fn register(
    state: &AppState,
    registration: Registration,
    traceparent: Option<&str>,
) -> Result<Accepted, ApiError> {
    let Registration {
        mut notification,
        idempotency,
    } = registration;
    let span = traces::registration(traceparent);
    notification.traceparent = traces::traceparent(&span);
    let enqueued = state
        .store
        .enqueue(&notification, idempotency.as_ref())
        .instrument(span.clone())
        .await?;
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
    if enqueued.earliest {
        state.wake.notify_one();
    }
    if !enqueued.duplicate {
        crate::metrics::accepted();
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

/// The fingerprint of a request body, kept with its idempotency key: the first 16 bytes
/// of its SHA-256, in hex.
fn fingerprint(body: &[u8]) -> String {
    access::hex(&Sha256::digest(body)[..16])
}

/// An idempotency key as sent (the header's value, or a batch item's field): 1 to
/// `MAX_IDEMPOTENCY_KEY` visible ASCII characters, trimmed.
pub(super) fn checked_key(raw: &str, field: &str) -> Result<String, FieldError> {
    let key = raw.trim();
    if key.is_empty()
        || key.len() > MAX_IDEMPOTENCY_KEY
        || !key.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(FieldError::new(
            field,
            format!("must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
        ));
    }
    Ok(key.to_string())
}

/// Parses a JSON object into `T`, naming the offending field on error.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: &serde_json::Error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
        )
    };
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "the body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let request = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            return invalid(inner);
        }
        let path = e.path().to_string();
        let message = inner.to_string();
        let field = if path == "." {
            unknown_field_name(&message).unwrap_or_default()
        } else {
            path
        };
        ApiError::from(FieldError::new(field, strip_position(&message)))
    })?;
    de.end().map_err(|e| invalid(&e))?;
    Ok(request)
}

/// `unknown field `shedule`, expected …` → `shedule`.
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest.split('`').next()?.to_string())
}

fn strip_position(message: &str) -> String {
    message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_string()
}

fn validate(
    r: NotifyRequest,
    id: JobId,
    tenant: Tenant,
    policy: &NotifyPolicy,
) -> Result<Notification, FieldError> {
    let url = policy.callback(
        r.url
            .as_deref()
            .ok_or_else(|| FieldError::new("url", "required"))?,
        &tenant,
    )?;
    let payload = Payload::from_json(r.body.unwrap_or(Value::Null))?;
    let headers = ExtraHeaders::parse(r.headers.unwrap_or_default().into_iter().collect())?;
    let schedule = schedule(r.schedule, &policy.schedules)?;
    let delay = bounded_duration(
        "delay",
        r.delay.as_deref(),
        Duration::ZERO,
        Duration::ZERO,
        policy.max_delay,
    )?;
    let timeout = bounded_duration(
        "timeout",
        r.timeout.as_deref(),
        policy.default_timeout,
        Duration::from_millis(1),
        policy.max_timeout,
    )?;
    let expect_body = label("expect_body", r.expect_body, MAX_EXPECT_BODY)?;
    let topic = label("topic", r.topic, MAX_LABEL)?;
    let rate_key =
        label("rate_key", r.rate_key, MAX_LABEL)?.unwrap_or_else(|| url.host().to_string());
    Ok(Notification {
        id,
        url,
        payload,
        headers,
        schedule,
        delay,
        timeout,
        expect_body,
        topic,
        rate_key,
        tenant,
        traceparent: None,
    })
}

/// The document's schema of a `schedule` field: a list of durations, or the name of a
/// configured schedule.
pub(super) fn schedule_schema() -> Schema {
    let intervals = ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String))
        .max_items(Some(MAX_TIERS))
        .examples([json!(["15s", "3m", "10m"])]);
    OneOfBuilder::new()
        .item(intervals)
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .examples(["default"]),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .build()
        .into()
}

pub(super) fn schedule(
    raw: Option<Value>,
    named: &BTreeMap<String, Schedule>,
) -> Result<Schedule, FieldError> {
    let lookup = |name: &str| {
        named.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = named.keys().map(String::as_str).collect();
            FieldError::new(
                "schedule",
                format!(
                    "no schedule named `{name}` (configured: {})",
                    known.join(", ")
                ),
            )
        })
    };
    match raw {
        None | Some(Value::Null) => lookup("default"),
        Some(Value::String(name)) => lookup(&name),
        Some(Value::Array(items)) => {
            let strings = items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_str().ok_or_else(|| {
                        FieldError::new(
                            format!("schedule[{i}]"),
                            "must be a duration string like \"15s\"",
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Schedule::parse(&strings).map_err(|e| e.within("schedule"))
        }
        Some(_) => Err(FieldError::new(
            "schedule",
            "must be a list of durations or the name of a configured schedule",
        )),
    }
}

pub(super) fn bounded_duration(
    field: &str,
    raw: Option<&str>,
    default: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, FieldError> {
    let Some(raw) = raw else { return Ok(default) };
    let d = parse_duration(raw).map_err(|e| e.within(field))?;
    if d < min || d > max {
        let f = humantime::format_duration;
        return Err(FieldError::new(
            field,
            format!("must be between {} and {}", f(min), f(max)),
        ));
    }
    Ok(d)
}

fn label(field: &str, raw: Option<String>, max: usize) -> Result<Option<String>, FieldError> {
    match raw {
        Some(s) if s.is_empty() || s.len() > max || s.chars().any(char::is_control) => {
            Err(FieldError::new(
                field,
                format!("must be 1 to {max} bytes without control characters"),
            ))
        }
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> NotifyPolicy {
        NotifyPolicy {
            schedules: BTreeMap::from([("default".into(), Schedule::parse(&["1s"]).unwrap())]),
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(30),
            max_delay: Duration::from_secs(3600),
            idempotency_ttl: Duration::from_secs(60),
            destinations: Destinations::PublicOnly,
            placement: Placement::new(1),
            tenants: BTreeMap::from([(Tenant::default(), None)]),
        }
    }

    fn field_of(body: &str) -> String {
        let parsed = parse_json::<NotifyRequest>(body.as_bytes());
        match parsed {
            Err(e) => format!("{e:?}"),
            Ok(r) => {
                validate(r, JobId::new(0), Tenant::default(), &policy())
                    .unwrap_err()
                    .field
            }
        }
    }

    #[test]
    fn names_the_offending_field() {
        assert_eq!(field_of(r#"{"body":{}}"#), "url");
        assert_eq!(field_of(r#"{"url":"http://a.b"}"#), "body");
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"schedule":["1s","x"]}"#),
            "schedule[1]"
        );
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"schedule":"nope"}"#),
            "schedule"
        );
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"timeout":"1h"}"#),
            "timeout"
        );
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"delay":"-1s"}"#),
            "delay"
        );
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"topic":""}"#),
            "topic"
        );
        assert!(field_of(r#"{"url":5,"body":1}"#).contains("field: Some(\"url\")"));
        assert!(field_of(r#"{"url":"http://a.b","body":1,"shedule":[]}"#).contains("shedule"));
        assert!(field_of(r#"{"url":"#).contains("invalid_json"));
        assert!(field_of("[1]").contains("must be a JSON object"));
    }

    #[test]
    fn fills_defaults() {
        let r: NotifyRequest =
            parse_json(br#"{"url":"https://pay.example.com/cb","body":{"a":1}}"#).unwrap();
        let n = validate(r, JobId::new(0), Tenant::default(), &policy()).unwrap();
        assert_eq!(n.rate_key, "pay.example.com");
        assert_eq!(n.timeout, Duration::from_secs(10));
        assert_eq!(n.schedule.max_attempts(), 2);
    }
}
