//! `POST /notify`: the request, its validation into a `Notification` under the
//! `RegistrationRules`, and the handler, which stores it through `registration` and
//! answers `202`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;

use super::body::Body;
use super::error::{ApiError, BadInput, CommonErrors, ErrorBody};
use super::offload::pass_over;
use super::parse::{key_header, parse_json};
use super::registration::{prepare, register, traceparent};
use super::rules::{bounded_duration, schedule, schedule_schema, RegistrationRules};
use super::view::Registered;
use super::AppState;
use crate::config::Profile;
use crate::domain::{
    check_label, ExtraHeaders, FieldError, JobId, Notification, Payload, RawSuccess, SuccessRule,
    Tenant,
};
use crate::tenancy::access::Principal;

const MAX_LABEL: usize = 256;
const MAX_EXPECT_BODY: usize = 1024;
/// The topic prefix of postback's own notifications (`ops_events::TOPIC`).
const RESERVED_TOPICS: &str = "postback.";

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
    body: Option<Box<RawValue>>,
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
    pub(super) tenant: Option<String>,
    /// Notifications with the same key (within the tenant) are attempted one at a time,
    /// in registration order: each after the one before it is delivered, dead or
    /// cancelled. 1 to 200 printable ASCII characters without spaces, `"` or `\`.
    #[schema(example = "order-42")]
    pub(super) ordering_key: Option<String>,
}

impl NotifyRequest {
    /// The request with `body` as its body: an event's, as it was published.
    pub(super) fn with_body(self, body: Box<RawValue>) -> Self {
        Self {
            body: Some(body),
            ..self
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
    let key = key_header(&headers)?;
    let registration = pass_over(body.len(), || {
        let request: NotifyRequest = parse_json(&body)?;
        prepare(&state, &caller, request, key, &body)
    })?;
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

/// Validates a request of `tenant` into the notification `id`, every field by name.
pub(super) fn validate(
    r: NotifyRequest,
    id: JobId,
    tenant: Tenant,
    rules: &RegistrationRules,
) -> Result<Notification, FieldError> {
    let url = rules.callback(
        r.url
            .as_deref()
            .ok_or_else(|| FieldError::new("url", "required"))?,
        &tenant,
    )?;
    let body = r
        .body
        .as_deref()
        .ok_or_else(|| FieldError::new("body", "required: a JSON value or a string"))?;
    let payload = Payload::from_raw(body)?;
    let headers = ExtraHeaders::parse(r.headers.unwrap_or_default().into_iter().collect())?;
    let profile = match r.profile.as_deref() {
        Some(name) => Some((name, profile(name, &rules.profiles)?)),
        None => None,
    };
    let schedule = match (r.schedule, profile) {
        (None, Some((_, p))) => p.schedule.clone(),
        (raw, _) => schedule(raw, &rules.schedules)?,
    };
    let success = success(r.expect_body, r.success, profile.map(|(_, p)| &p.success))?;
    let delay = bounded_duration(
        "delay",
        r.delay.as_deref(),
        Duration::ZERO,
        Duration::ZERO,
        rules.max_delay,
    )?;
    let timeout = bounded_duration(
        "timeout",
        r.timeout.as_deref(),
        rules.default_timeout,
        Duration::from_millis(1),
        rules.max_timeout,
    )?;
    let topic = topic(r.topic)?;
    let rate_key = label("rate_key", r.rate_key)?.unwrap_or_else(|| url.host().to_string());
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
    let expect_body = expect_body_text(expect_body)?;
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

/// A producer's topic: a label outside the prefix `postback.`, which postback's own
/// notifications carry (`ops_events::TOPIC`).
fn topic(raw: Option<String>) -> Result<Option<String>, FieldError> {
    let topic = label("topic", raw)?;
    if topic
        .as_deref()
        .is_some_and(|t| t.starts_with(RESERVED_TOPICS))
    {
        let why = format!("topics starting with `{RESERVED_TOPICS}` are postback's own");
        return Err(FieldError::new("topic", why));
    }
    Ok(topic)
}

/// A label (`topic`, `rate_key`), if given, checked by `domain::check_label`.
fn label(field: &str, raw: Option<String>) -> Result<Option<String>, FieldError> {
    if let Some(text) = &raw {
        check_label(text, field, MAX_LABEL)?;
    }
    Ok(raw)
}

/// `expect_body`, if given. Not a label: it is compared with what a receiver answers,
/// which may hold format characters of its own (a byte order mark, U+FEFF), so only
/// control characters are refused; the command line shows it escaped.
fn expect_body_text(raw: Option<String>) -> Result<Option<String>, FieldError> {
    match raw {
        Some(s) if s.is_empty() || s.len() > MAX_EXPECT_BODY || s.chars().any(char::is_control) => {
            Err(FieldError::new(
                "expect_body",
                format!("must be 1 to {MAX_EXPECT_BODY} bytes without control characters"),
            ))
        }
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rules::TenantRules;
    use crate::domain::{Destinations, Placement, Schedule};

    fn rules() -> RegistrationRules {
        RegistrationRules {
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
            event_schemas: Default::default(),
            max_request_bytes: 256 * 1024,
        }
    }

    fn valid(body: &str) -> Notification {
        let r: NotifyRequest = parse_json(body.as_bytes()).unwrap();
        validate(r, JobId::new(0), Tenant::default(), &rules()).unwrap()
    }

    fn field_of(body: &str) -> String {
        let parsed = parse_json::<NotifyRequest>(body.as_bytes());
        match parsed {
            Err(e) => format!("{e:?}"),
            Ok(r) => {
                validate(r, JobId::new(0), Tenant::default(), &rules())
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
        let n = validate(r, JobId::new(0), Tenant::default(), &rules()).unwrap();
        assert_eq!(n.rate_key, "pay.example.com");
        assert_eq!(n.timeout, Duration::from_secs(10));
        assert_eq!(n.schedule.max_attempts(), 2);
    }
}
