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
use tracing::{Instrument, Span};
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::ToSchema;

use super::auth;
use super::body::Body;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::view::Registered;
use super::AppState;
use crate::access::{self, Principal, Role};
use crate::config::Profile;
use crate::domain::{
    parse_duration, CallbackUrl, Destinations, ExtraHeaders, FieldError, HostAllowList, JobId,
    Notification, OrderingKey, Payload, Placement, RawSuccess, Schedule, SuccessRule, Tenant,
    MAX_TIERS,
};
use crate::store::{Enqueued, Idempotency, JobStatus, StoreResult};
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
    /// Success also needs the trimmed response body to equal this (the same as
    /// `success.body_equals`).
    #[schema(example = "SUCCESS")]
    expect_body: Option<String>,
    /// What counts as delivered: accepted statuses (default any 2xx) and at most one
    /// body rule. Overrides the profile's.
    success: Option<RawSuccess>,
    /// A configured profile: its schedule and success rule, unless `schedule` or
    /// `success`/`expect_body` are given too.
    #[schema(example = "alipay")]
    profile: Option<String>,
    /// A free label for filtering.
    #[schema(example = "payment.succeeded")]
    topic: Option<String>,
    /// The rate-limit key, within the tenant; default the URL's host.
    rate_key: Option<String>,
    /// Whose notification it is: only from a token for every tenant (default
    /// `default`); a tenant-bound token's own otherwise.
    tenant: Option<String>,
    /// Notifications with the same key (within the tenant) are attempted one at a time,
    /// in registration order: each after the one before it is delivered, dead or
    /// cancelled. 1 to 200 printable ASCII characters without spaces, `"` or `\`.
    #[schema(example = "order-42")]
    ordering_key: Option<String>,
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
    /// The configured tenants, each with what its callbacks must be.
    pub tenants: BTreeMap<Tenant, TenantRules>,
    /// The configured profiles.
    pub profiles: BTreeMap<String, Profile>,
}

/// What a tenant's callbacks must be.
#[derive(Debug, Clone, Default)]
pub struct TenantRules {
    /// The hosts it may use (`None`: any).
    pub allowed_hosts: Option<HostAllowList>,
    /// `https` only (`require_https`).
    pub require_https: bool,
}

impl NotifyPolicy {
    /// A callback URL `tenant` may use: valid, past the SSRF guard, one of the tenant's
    /// allowed hosts if it has a list, and `https` if it requires that.
    pub fn callback(&self, raw: &str, tenant: &Tenant) -> Result<CallbackUrl, FieldError> {
        let url = CallbackUrl::parse(raw, self.destinations)?;
        let rules = self.tenants.get(tenant).cloned().unwrap_or_default();
        if rules
            .allowed_hosts
            .is_some_and(|allowed| !allowed.allows(url.host()))
        {
            let message = format!(
                "{} is not one of the tenant `{tenant}`'s allowed hosts",
                url.host()
            );
            return Err(FieldError::new("url", message));
        }
        self.check_https(tenant, url.is_https())?;
        Ok(url)
    }

    /// Refuses a callback that is not `https` (`is_https` false) of a tenant that
    /// requires `https`.
    pub fn check_https(&self, tenant: &Tenant, is_https: bool) -> Result<(), FieldError> {
        match self.tenants.get(tenant).is_some_and(|r| r.require_https) && !is_https {
            true => Err(FieldError::new(
                "url",
                format!("the tenant `{tenant}` requires https callbacks"),
            )),
            false => Ok(()),
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
    let ordering_key = request
        .ordering_key
        .as_deref()
        .map(OrderingKey::parse)
        .transpose()?;
    // Every notification of an ordering key lives on one shard, whose scripts keep the
    // key's order; with an idempotency key too, the ordering key places it.
    let placed_by = match &ordering_key {
        Some(k) => Some(format!("ordering {}", k.scoped(&tenant))),
        None => idempotency.as_ref().map(Idempotency::scoped),
    };
    let id = state.policy.placement.new_id(placed_by.as_deref());
    let mut notification = validate(request, id, tenant, &state.policy)?;
    notification.ordering_key = ordering_key;
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
    let profile = match r.profile.as_deref() {
        Some(name) => Some((name, profile(name, &policy.profiles)?)),
        None => None,
    };
    let schedule = match (r.schedule, profile) {
        (None, Some((_, p))) => p.schedule.clone(),
        (raw, _) => schedule(raw, &policy.schedules)?,
    };
    let success = success(r.expect_body, r.success, profile.map(|(_, p)| &p.success))?;
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
        success,
        profile: profile.map(|(name, _)| name.to_string()),
        topic,
        rate_key,
        tenant,
        traceparent: None,
        ordering_key: None,
    })
}

/// The configured profile `name`.
fn profile<'a>(
    name: &str,
    profiles: &'a BTreeMap<String, Profile>,
) -> Result<&'a Profile, FieldError> {
    profiles.get(name).ok_or_else(|| {
        let known: Vec<&str> = profiles.keys().map(String::as_str).collect();
        FieldError::new(
            "profile",
            format!(
                "no profile named `{name}` (configured: {})",
                known.join(", ")
            ),
        )
    })
}

/// The success rule of a registration: `expect_body` or `success` (not both body rules),
/// else its profile's, else any 2xx.
fn success(
    expect_body: Option<String>,
    raw: Option<RawSuccess>,
    profile: Option<&SuccessRule>,
) -> Result<SuccessRule, FieldError> {
    let expect_body = label("expect_body", expect_body, MAX_EXPECT_BODY)?;
    match (expect_body, raw) {
        (Some(_), Some(raw)) if raw != RawSuccess::default() => Err(FieldError::new(
            "expect_body",
            "give expect_body or success, not both",
        )),
        (Some(text), _) => Ok(SuccessRule::body_equals(text)),
        (None, Some(raw)) => SuccessRule::parse(raw, "success"),
        (None, None) => Ok(profile.cloned().unwrap_or_default()),
    }
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
            tenants: BTreeMap::from([(Tenant::default(), TenantRules::default())]),
            profiles: BTreeMap::from([(
                "alipay".into(),
                Profile {
                    schedule: Schedule::parse(&["4m", "10m"]).unwrap(),
                    success: SuccessRule::body_equals("success".into()),
                },
            )]),
        }
    }

    fn valid(body: &str) -> Notification {
        let r: NotifyRequest = parse_json(body.as_bytes()).unwrap();
        validate(r, JobId::new(0), Tenant::default(), &policy()).unwrap()
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
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"profile":"paypol"}"#),
            "profile"
        );
        assert_eq!(
            field_of(r#"{"url":"http://a.b","body":1,"success":{"body_matches":"("}}"#),
            "success.body_matches"
        );
        assert_eq!(
            field_of(
                r#"{"url":"http://a.b","body":1,"expect_body":"a","success":{"body_equals":"b"}}"#
            ),
            "expect_body"
        );
    }

    #[test]
    fn a_profile_gives_its_schedule_and_success_rule_unless_the_request_does() {
        let n = valid(r#"{"url":"https://a.b/cb","body":1,"profile":"alipay"}"#);
        assert_eq!(
            (n.schedule.max_attempts(), n.profile.as_deref()),
            (3, Some("alipay"))
        );
        assert_eq!(n.success, SuccessRule::body_equals("success".into()));
        let n = valid(
            r#"{"url":"https://a.b/cb","body":1,"profile":"alipay","schedule":["1s"],"expect_body":"OK"}"#,
        );
        assert_eq!(n.schedule.max_attempts(), 2);
        assert_eq!(n.success, SuccessRule::body_equals("OK".into()));
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
