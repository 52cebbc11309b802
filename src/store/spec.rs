//! How a notification's spec is stored, the same in every store: one value,
//! `v2 <created_at> <delay> <schedule>\n<meta JSON>\n<body>`.
//!
//! - The first line starts with the layout's version (`v2`), then Redis's (or the
//!   embedded store's) time of the registration, the delay (ms) and the schedule (as
//!   records keep it). Until its first change (an attempt settled, a deferral, a
//!   hand-back, a cancel), a notification on Redis has no state record and is due at
//!   `created_at + delay`: `registration` makes its record from this line, with
//!   `lifecycle::transitions::register`.
//! - The meta JSON is the spec without its body, leaving out what is implied: the
//!   content type when it is JSON, the rate key when it is the URL's host, the timeout
//!   when it is 10 s, the tenant when it is `default` (so a spec of a build before
//!   tenants is read as the default tenant's, and that build reads this one's).
//! - The body follows as it is sent, unescaped, to the end of the value.
//!
//! Earlier layouts are read by a decoder each: version 1 (builds up to 2026-11-23) is
//! the same without the `v2 ` in front, so its first line starts with a digit; version 0
//! (earlier builds, and the embedded store's specs until then) is one JSON object with
//! the body escaped inside it. Nothing is rewritten: a value keeps its layout until a
//! replay gives it a new spec.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::domain::{JobSpec, OrderingKey, Payload, SuccessRule, Tenant};
use crate::lifecycle::{schedule_intervals, schedule_text, transitions, Now, Record};

/// What this build writes in front of the first line.
pub const VERSION: &str = "v2";

/// The timeout a spec leaves out.
const IMPLIED_TIMEOUT_MS: u64 = 10_000;
/// The content type a spec leaves out.
const JSON: &str = Payload::JSON_CONTENT_TYPE;

/// The spec without its body, as stored.
#[derive(Serialize, Deserialize)]
struct Meta<'a> {
    #[serde(borrow)]
    url: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    headers: Cow<'a, [(String, String)]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    /// A success rule that is only a body text, as builds before success rules wrote it
    /// and read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expect_body: Option<Cow<'a, str>>,
    /// Any other success rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    success: Option<SuccessRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    profile: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topic: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_key: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<Cow<'a, str>>,
    /// Just before the tenant, where the scripts find it (`ordering_of` in common.lua):
    /// its characters need no escaping in JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ordering_key: Option<OrderingKey>,
    /// Last, where the scripts read it (`tenant_of` in common.lua).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<Tenant>,
}

/// The spec as `enqueue.lua` takes it: the meta line and the body (it puts the first
/// line in front).
pub fn encode(spec: &JobSpec) -> String {
    let host = spec.host();
    let meta = Meta {
        url: Cow::Borrowed(&spec.url),
        content_type: (spec.content_type != JSON).then_some(Cow::Borrowed(&spec.content_type)),
        headers: Cow::Borrowed(&spec.headers),
        timeout_ms: (spec.timeout_ms != IMPLIED_TIMEOUT_MS).then_some(spec.timeout_ms),
        expect_body: spec.success.as_expect_body().map(Cow::Borrowed),
        success: (spec.success.as_expect_body().is_none() && !spec.success.is_default())
            .then(|| spec.success.clone()),
        profile: spec.profile.as_deref().map(Cow::Borrowed),
        topic: spec.topic.as_deref().map(Cow::Borrowed),
        rate_key: (spec.rate_key != host).then_some(Cow::Borrowed(&spec.rate_key)),
        traceparent: spec.traceparent.as_deref().map(Cow::Borrowed),
        ordering_key: spec.ordering_key.clone(),
        tenant: (!spec.tenant.is_default()).then(|| spec.tenant.clone()),
    };
    let meta = serde_json::to_string(&meta).expect("a spec serializes");
    format!("{meta}\n{}", spec.body)
}

/// The whole stored value: the first line, then `encoded` (from `encode`).
pub fn stored(created_at: i64, delay_ms: u64, schedule: &[u64], encoded: &str) -> String {
    format!(
        "{VERSION} {created_at} {delay_ms} {}\n{encoded}",
        schedule_text(schedule)
    )
}

/// The layout of a stored value, by its first bytes.
enum Layout<'a> {
    /// One JSON object.
    V0,
    /// The first line, the meta line and the body; `line` without any version.
    Lines { line: &'a str, rest: &'a str },
}

impl<'a> Layout<'a> {
    fn of(raw: &'a str) -> serde_json::Result<Self> {
        use serde::de::Error;
        if raw.starts_with('{') {
            return Ok(Layout::V0);
        }
        let (line, rest) = raw
            .split_once('\n')
            .ok_or_else(|| Error::custom("no registration line"))?;
        let line = match line.strip_prefix('v') {
            None => line,
            Some(versioned) => match versioned.split_once(' ') {
                Some(("2", line)) => line,
                _ => {
                    return Err(Error::custom(format!(
                        "a spec of layout `{line}`, not one this build reads"
                    )))
                }
            },
        };
        Ok(Layout::Lines { line, rest })
    }
}

/// The spec of a stored value, of this build or an earlier one.
pub fn decode(raw: &str) -> serde_json::Result<JobSpec> {
    use serde::de::Error;
    let rest = match Layout::of(raw)? {
        Layout::V0 => return serde_json::from_str(raw),
        Layout::Lines { rest, .. } => rest,
    };
    let (meta, body) = rest
        .split_once('\n')
        .ok_or_else(|| Error::custom("no body"))?;
    let meta: Meta = serde_json::from_str(meta)?;
    let mut spec = JobSpec {
        url: meta.url.into_owned(),
        body: body.to_string(),
        content_type: meta.content_type.map_or(JSON.to_string(), Cow::into_owned),
        headers: meta.headers.into_owned(),
        timeout_ms: meta.timeout_ms.unwrap_or(IMPLIED_TIMEOUT_MS),
        success: match (meta.success, meta.expect_body) {
            (Some(rule), _) => rule,
            (None, Some(text)) => SuccessRule::body_equals(text.into_owned()),
            (None, None) => SuccessRule::default(),
        },
        profile: meta.profile.map(Cow::into_owned),
        topic: meta.topic.map(Cow::into_owned),
        rate_key: String::new(),
        traceparent: meta.traceparent.map(Cow::into_owned),
        ordering_key: meta.ordering_key,
        tenant: meta.tenant.unwrap_or_default(),
    };
    spec.rate_key = meta.rate_key.map_or_else(|| spec.host(), Cow::into_owned);
    Ok(spec)
}

/// The tenant a stored value names (the default one for a value of layout 0, or one that
/// does not read): the meta line alone is decoded, not the body.
pub fn tenant(raw: &str) -> Tenant {
    let Ok(Layout::Lines { rest, .. }) = Layout::of(raw) else {
        return Tenant::default();
    };
    let meta = rest.split_once('\n').map_or(rest, |(meta, _)| meta);
    serde_json::from_str::<Meta>(meta)
        .ok()
        .and_then(|m| m.tenant)
        .unwrap_or_default()
}

/// The ordering key a stored value names, within its tenant (`OrderingKey::scoped`):
/// the meta line alone is decoded, not the body. `None` for none, or a value that does
/// not read.
pub fn ordering(raw: &str) -> Option<String> {
    let Ok(Layout::Lines { rest, .. }) = Layout::of(raw) else {
        return None;
    };
    let meta = rest.split_once('\n').map_or(rest, |(meta, _)| meta);
    if !meta.contains("\"ordering_key\":") {
        return None;
    }
    let meta = serde_json::from_str::<Meta>(meta).ok()?;
    let tenant = meta.tenant.unwrap_or_default();
    meta.ordering_key.map(|k| k.scoped(&tenant))
}

/// The record a notification has from its registration, made from the first line of its
/// stored value: what it has until its first change (on Redis, where no record is
/// written until then). `None` for a value of layout 0, which always came with a record.
pub fn registration(raw: &str) -> Option<Record> {
    let Ok(Layout::Lines { line, .. }) = Layout::of(raw) else {
        return None;
    };
    let mut words = line.splitn(3, ' ');
    let created_at: i64 = words.next()?.parse().ok()?;
    let delay_ms: u64 = words.next()?.parse().ok()?;
    let schedule = schedule_intervals(words.next()?);
    Some(transitions::register(
        schedule,
        Now::from_millis(created_at),
        delay_ms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec {
            url: "https://pay.example.com/hook".into(),
            body: "{\"order\":1,\n\"note\":\"two\\nlines\"}".into(),
            content_type: JSON.into(),
            headers: Vec::new(),
            timeout_ms: IMPLIED_TIMEOUT_MS,
            success: SuccessRule::default(),
            profile: None,
            topic: Some("payment.succeeded".into()),
            rate_key: "pay.example.com".into(),
            traceparent: None,
            ordering_key: None,
            tenant: Tenant::default(),
        }
    }

    fn value(spec: &JobSpec) -> String {
        stored(1_700_000_000_000, 15_000, &[15_000, 180_000], &encode(spec))
    }

    #[test]
    fn a_spec_round_trips_and_leaves_out_what_is_implied() {
        let s = spec();
        let raw = value(&s);
        assert_eq!(
            raw,
            "v2 1700000000000 15000 15s,3m\n{\"url\":\"https://pay.example.com/hook\",\"topic\":\"payment.succeeded\"}\n{\"order\":1,\n\"note\":\"two\\nlines\"}"
        );
        assert_eq!(decode(&raw).unwrap(), s);
    }

    #[test]
    fn a_spec_that_differs_from_the_implied_values_keeps_them() {
        let s = JobSpec {
            content_type: "text/plain; charset=utf-8".into(),
            headers: vec![("x-shop".into(), "7".into())],
            timeout_ms: 2_500,
            success: SuccessRule::body_equals("success".into()),
            profile: Some("alipay".into()),
            topic: None,
            rate_key: "merchant-7".into(),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            ordering_key: Some(OrderingKey::parse("order:7").unwrap()),
            tenant: Tenant::parse("shop-7", "tenant").unwrap(),
            ..spec()
        };
        let raw = value(&s);
        let meta = raw.lines().nth(1).unwrap();
        assert!(
            meta.ends_with(r#","ordering_key":"order:7","tenant":"shop-7"}"#),
            "the scripts read the tenant last: {meta}"
        );
        assert_eq!(decode(&raw).unwrap(), s);
    }

    #[test]
    fn specs_of_earlier_layouts_are_read() {
        let s = spec();
        let v0 = serde_json::to_string(&s).unwrap();
        assert_eq!(decode(&v0).unwrap(), s);
        assert!(registration(&v0).is_none());
        let v1 = value(&s).replacen("v2 ", "", 1);
        assert_eq!(decode(&v1).unwrap(), s);
        assert_eq!(registration(&v1), registration(&value(&s)));
    }

    #[test]
    fn a_layout_of_a_later_build_is_refused_rather_than_misread() {
        let v9 = value(&spec()).replacen("v2 ", "v9 ", 1);
        assert!(decode(&v9).is_err());
        assert!(registration(&v9).is_none());
    }

    #[test]
    fn a_registration_is_due_after_its_delay() {
        let record = registration(&value(&spec())).unwrap();
        assert_eq!(record.status().next_at, Some(1_700_000_015_000));
        assert_eq!(
            (record.attempts, record.lease, record.max_attempts),
            (0, 0, 3)
        );
    }
}
