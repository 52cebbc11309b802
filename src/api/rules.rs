//! What a registration (and a replay) is checked against, from configuration: the named
//! schedules and profiles, the bounds of `delay` and `timeout`, the SSRF guard, and each
//! tenant's rules for its callbacks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};

use super::error::ApiError;
use crate::config::{EventSchemas, Profile};
use crate::domain::{
    parse_duration, CallbackUrl, Destinations, FieldError, HostAllowList, Placement, Schedule,
    Tenant, MAX_TIERS,
};

/// The setting `max_request_bytes` comes from, which a `413` names.
pub const MAX_REQUEST_KEY: &str = "server.max_body_bytes";

/// The limits a registration is checked against, from configuration.
#[derive(Debug)]
pub struct RegistrationRules {
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
    /// The JSON Schemas of topics (`events.schema_dir`).
    pub event_schemas: Arc<EventSchemas>,
    /// `server.max_body_bytes`: what one request may weigh (each item of a batch, and a
    /// registration through `postback.notify()`, too).
    pub max_request_bytes: usize,
}

/// What a tenant's callbacks must be.
#[derive(Debug, Clone, Default)]
pub struct TenantRules {
    /// The hosts it may use (`None`: any).
    pub allowed_hosts: Option<HostAllowList>,
    /// `https` only (`require_https`).
    pub require_https: bool,
}

impl RegistrationRules {
    /// Refuses a request larger than `max_request_bytes` as the API refuses a body over
    /// it: `413`, naming the setting.
    pub fn check_size(&self, raw: &[u8]) -> Result<(), ApiError> {
        match raw.len() <= self.max_request_bytes {
            true => Ok(()),
            false => Err(ApiError::too_large(self.max_request_bytes, MAX_REQUEST_KEY)),
        }
    }

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
