//! How a notification's spec is stored, the same in every store: one value,
//! `v4 <created_at> <delay> <schedule>[ <tenant>[ <ordering key>]]\n<meta JSON>\n<body>`.
//!
//! - The first line starts with the layout's version (`v4`), then Redis's (or the
//!   embedded store's) time of the registration in ms, written in base 36 (8 digits
//!   rather than 13), the delay and the schedule, both as records keep intervals (`15s`,
//!   `24h`, a bare number of ms). Until its first change (an attempt settled, a
//!   deferral, a hand-back, a cancel), a notification on Redis has no state record and is
//!   due at `created_at + delay`: `registration` makes its record from this line, with
//!   `lifecycle::transitions::register`.
//! - The schedule is either written out (`15s,3m,1h`) or, on Redis, a reference to one
//!   kept once for the shard (`#` and 4 base-62 digits of its text's SHA-256,
//!   `SharedSchedules`): most notifications share a few configured schedules, and their
//!   text was a fifth of a pending notification's value.
//! - Then what the scripts need to know of a notification besides its content, as words
//!   of their own: its tenant (empty for the default one) and its ordering key, each left
//!   out when empty and nothing follows. Both are validated types without spaces, so a
//!   script reads them by position (`about` in `lua/common.lua`) and never looks inside
//!   the JSON or the body, which callers wrote.
//! - The meta JSON is the rest of the spec without its body, leaving out what is
//!   implied: the content type when it is JSON, the rate key when it is the URL's host,
//!   the timeout when it is 10 s.
//! - The body follows as it is sent, unescaped, to the end of the value.
//!
//! Earlier layouts are read by a decoder each: version 3 kept the tenant and the
//! ordering key as the last fields of the meta JSON (the scripts read them off the end
//! of that line); version 2 (builds up to 2026-11-25) wrote
//! the time in decimal, the delay in ms and the schedule always written out; version 1
//! (builds up to 2026-11-23) is version 2 without the `v2 ` in front, so its first line
//! starts with a digit; version 0 (earlier builds, and the embedded store's specs until
//! then) is one JSON object with the body escaped inside it. Nothing is rewritten: a
//! value keeps its layout until a replay gives it a new spec.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::domain::{JobSpec, OrderingKey, Payload, SuccessRule, Tenant, BASE62};
use sha2::{Digest, Sha256};

use crate::lifecycle::{interval_ms, schedule_intervals, schedule_text, transitions, Now, Record};

/// What this build writes in front of the first line.
pub const VERSION: &str = "v4";

/// What marks a schedule kept once for the shard, in front of its reference.
const SHARED: char = '#';
/// The digits of a reference to a shared schedule.
const REFERENCE_DIGITS: usize = 4;

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
    /// Layouts up to 3 only: since layout 4 it is a word of the first line.
    #[serde(default, skip_serializing)]
    ordering_key: Option<OrderingKey>,
    /// Layouts up to 3 only, likewise.
    #[serde(default, skip_serializing)]
    tenant: Option<Tenant>,
}

/// The spec as `enqueue.lua` takes it: the first line's last words (tenant and ordering
/// key), the meta line and the body; it puts the rest of the first line in front.
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
        ordering_key: None,
        tenant: None,
    };
    let meta = serde_json::to_string(&meta).expect("a spec serializes");
    let tenant: &str = if spec.tenant.is_default() {
        ""
    } else {
        &spec.tenant
    };
    let words = match &spec.ordering_key {
        Some(key) => format!(" {tenant} {key}"),
        None if tenant.is_empty() => String::new(),
        None => format!(" {tenant}"),
    };
    format!("{words}\n{meta}\n{}", spec.body)
}

/// The whole stored value: the first line, with the schedule written out, then
/// `encoded` (from `encode`, which ends the first line).
pub fn stored(created_at: i64, delay_ms: u64, schedule: &[u64], encoded: &str) -> String {
    format!(
        "{VERSION} {} {} {}{encoded}",
        base36(created_at),
        delay_text(delay_ms),
        schedule_text(schedule)
    )
}

/// A delay as the first line keeps it (`24h`, `250`), as records keep an interval.
pub fn delay_text(delay_ms: u64) -> String {
    schedule_text(&[delay_ms])
}

/// The reference under which a schedule (as records keep it, `15s,3m`) is kept once
/// for the shard: 4 base-62 digits of its SHA-256; `None` for one no longer than its
/// reference would be, which is written out. Two schedules may share one; the store
/// keeps the first and writes the other out (`lua/enqueue.lua`).
pub fn schedule_reference(text: &str) -> Option<String> {
    if text.len() <= 1 + REFERENCE_DIGITS {
        return None;
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let mut digits = String::with_capacity(REFERENCE_DIGITS);
    for _ in 0..REFERENCE_DIGITS {
        digits.push(BASE62[(n % 62) as usize] as char);
        n /= 62;
    }
    Some(digits)
}

/// The schedules a store keeps once, which first lines refer to as `#<reference>`.
pub trait SharedSchedules {
    /// The intervals (ms) kept under `reference`, if known.
    fn get(&self, reference: &str) -> Option<Vec<u64>>;
}

fn base36(n: i64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let (negative, mut n) = (n < 0, n.unsigned_abs());
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    if negative {
        out.push(b'-');
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// The layout of a stored value, by its first bytes.
enum Layout<'a> {
    /// One JSON object.
    V0,
    /// The first line, the meta line and the body; `line` without its version.
    Lines {
        version: u8,
        line: &'a str,
        rest: &'a str,
    },
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
        let (version, line) = match line.strip_prefix('v') {
            None => (1, line),
            Some(versioned) => match versioned.split_once(' ') {
                Some(("2", line)) => (2, line),
                Some(("3", line)) => (3, line),
                Some(("4", line)) => (4, line),
                _ => {
                    return Err(Error::custom(format!(
                        "a spec of layout `{line}`, not one this build reads"
                    )))
                }
            },
        };
        Ok(Layout::Lines {
            version,
            line,
            rest,
        })
    }
}

/// The spec of a stored value, of this build or an earlier one.
pub fn decode(raw: &str) -> serde_json::Result<JobSpec> {
    use serde::de::Error;
    let (version, line, rest) = match Layout::of(raw)? {
        Layout::V0 => return serde_json::from_str(raw),
        Layout::Lines {
            version,
            line,
            rest,
        } => (version, line, rest),
    };
    let (meta, body) = rest
        .split_once('\n')
        .ok_or_else(|| Error::custom("no body"))?;
    let mut meta: Meta = serde_json::from_str(meta)?;
    if version >= 4 {
        let (tenant, ordering_key) = words(line).map_err(Error::custom)?;
        (meta.tenant, meta.ordering_key) = (Some(tenant), ordering_key);
    }
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

/// The tenant and ordering key of a first line of layout 4 (without its version): its
/// fifth and sixth words, each empty or absent for none.
fn words(line: &str) -> Result<(Tenant, Option<OrderingKey>), String> {
    let mut words = line.split(' ').skip(3);
    let tenant = match words.next() {
        None | Some("") => Tenant::default(),
        Some(name) => Tenant::parse(name, "tenant").map_err(|e| e.message)?,
    };
    let key = match words.next() {
        None | Some("") => None,
        Some(key) => Some(OrderingKey::parse(key).map_err(|e| e.message)?),
    };
    match words.next() {
        None => Ok((tenant, key)),
        Some(_) => Err("a first line with more words than layout 4 has".into()),
    }
}

/// The tenant and ordering key a stored value names, without decoding its body (the
/// default tenant and none for a value of layout 0, or one that does not read).
fn identity(raw: &str) -> (Tenant, Option<OrderingKey>) {
    let Ok(Layout::Lines {
        version,
        line,
        rest,
    }) = Layout::of(raw)
    else {
        return (Tenant::default(), None);
    };
    if version >= 4 {
        return words(line).unwrap_or_default();
    }
    let meta = rest.split_once('\n').map_or(rest, |(meta, _)| meta);
    serde_json::from_str::<Meta>(meta)
        .map(|m| (m.tenant.unwrap_or_default(), m.ordering_key))
        .unwrap_or_default()
}

/// The tenant a stored value names (the default one for a value of layout 0, or one that
/// does not read).
pub fn tenant(raw: &str) -> Tenant {
    identity(raw).0
}

/// The ordering key a stored value names, within its tenant (`OrderingKey::scoped`).
/// `None` for none, or a value that does not read.
pub fn ordering(raw: &str) -> Option<String> {
    let (tenant, key) = identity(raw);
    key.map(|k| k.scoped(&tenant))
}

/// The record a notification has from its registration, made from the first line of its
/// stored value: what it has until its first change (on Redis, where no record is
/// written until then). `None` for a value of layout 0, which always came with a record,
/// or one whose schedule `shared` does not know.
pub fn registration(raw: &str, shared: &dyn SharedSchedules) -> Option<Record> {
    let Ok(Layout::Lines { version, line, .. }) = Layout::of(raw) else {
        return None;
    };
    let mut words = line.split(' ');
    let (created_at, delay_ms) = match version {
        3.. => (
            i64::from_str_radix(words.next()?, 36).ok()?,
            interval_ms(words.next()?),
        ),
        _ => (words.next()?.parse().ok()?, words.next()?.parse().ok()?),
    };
    let word = words.next()?;
    let schedule = match word.strip_prefix(SHARED) {
        Some(reference) if version >= 3 => shared.get(reference)?,
        _ => schedule_intervals(word),
    };
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
            "v4 loyw3v28 15s 15s,3m\n{\"url\":\"https://pay.example.com/hook\",\"topic\":\"payment.succeeded\"}\n{\"order\":1,\n\"note\":\"two\\nlines\"}"
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
        let first = raw.lines().next().unwrap();
        assert_eq!(
            first, "v4 loyw3v28 15s 15s,3m shop-7 order:7",
            "words of their own"
        );
        let meta = raw.lines().nth(1).unwrap();
        assert!(
            !meta.contains("shop-7") && !meta.contains("order:7"),
            "{meta}"
        );
        assert_eq!(decode(&raw).unwrap(), s);
        assert_eq!(tenant(&raw), s.tenant);
        assert_eq!(ordering(&raw).as_deref(), Some("shop-7 order:7"));
        assert_eq!(
            registration(&raw, &NoSharedSchedules),
            registration(&value(&spec()), &NoSharedSchedules)
        );
    }

    #[test]
    fn a_default_tenant_with_an_ordering_key_leaves_the_tenant_word_empty() {
        let s = JobSpec {
            ordering_key: Some(OrderingKey::parse("o").unwrap()),
            ..spec()
        };
        let raw = value(&s);
        assert!(raw.starts_with("v4 loyw3v28 15s 15s,3m  o\n"), "{raw}");
        assert_eq!(decode(&raw).unwrap(), s);
        assert_eq!(ordering(&raw).as_deref(), Some("o"));
    }

    #[test]
    fn what_a_caller_wrote_never_reads_as_a_tenant_or_an_ordering_key() {
        let s = JobSpec {
            success: serde_json::from_value(serde_json::json!(
                {"json_pointer": "/a", "json_equals": {"ordering_key": "x y", "tenant": "shop-b"}}
            ))
            .unwrap(),
            body: "\",\"ordering_key\":\"q\",\"tenant\":\"shop-b\"}".into(),
            ..spec()
        };
        let raw = value(&s);
        assert_eq!(tenant(&raw), Tenant::default());
        assert_eq!(ordering(&raw), None);
        assert_eq!(decode(&raw).unwrap(), s);
    }

    #[test]
    fn a_spec_of_layout_3_keeps_its_tenant_and_ordering_key_in_the_meta_line() {
        let raw = "v3 loyw3v28 15s 15s,3m\n{\"url\":\"https://pay.example.com/hook\",\"ordering_key\":\"order:7\",\"tenant\":\"shop-7\"}\n{}";
        let s = decode(raw).unwrap();
        assert_eq!(
            (&*s.tenant, s.ordering_key.as_ref().map(OrderingKey::as_str)),
            ("shop-7", Some("order:7"))
        );
        assert_eq!(ordering(raw).as_deref(), Some("shop-7 order:7"));
    }

    /// What the embedded store keeps: no schedule once.
    struct NoSharedSchedules;

    impl SharedSchedules for NoSharedSchedules {
        fn get(&self, _: &str) -> Option<Vec<u64>> {
            None
        }
    }

    /// One shared schedule, `15s,3m`.
    struct OneShared;

    impl SharedSchedules for OneShared {
        fn get(&self, reference: &str) -> Option<Vec<u64>> {
            (Some(reference) == schedule_reference("15s,3m").as_deref())
                .then(|| vec![15_000, 180_000])
        }
    }

    #[test]
    fn specs_of_earlier_layouts_are_read() {
        let s = spec();
        let this = registration(&value(&s), &NoSharedSchedules);
        assert!(this.is_some());
        let v0 = serde_json::to_string(&s).unwrap();
        assert_eq!(decode(&v0).unwrap(), s);
        assert!(registration(&v0, &NoSharedSchedules).is_none());
        let rest = value(&s).split_once('\n').unwrap().1.to_string();
        let v2 = format!("v2 1700000000000 15000 15s,3m\n{rest}");
        assert_eq!(decode(&v2).unwrap(), s);
        assert_eq!(registration(&v2, &NoSharedSchedules), this);
        let v1 = v2.replacen("v2 ", "", 1);
        assert_eq!(decode(&v1).unwrap(), s);
        assert_eq!(registration(&v1, &NoSharedSchedules), this);
    }

    #[test]
    fn a_shared_schedule_is_read_through_its_reference() {
        let s = spec();
        let written_out = value(&s);
        let reference = schedule_reference("15s,3m").unwrap();
        let shared = written_out.replacen(" 15s,3m\n", &format!(" #{reference}\n"), 1);
        assert!(shared.len() < written_out.len());
        assert_eq!(decode(&shared).unwrap(), s);
        assert_eq!(
            registration(&shared, &OneShared),
            registration(&written_out, &NoSharedSchedules)
        );
        assert!(
            registration(&shared, &NoSharedSchedules).is_none(),
            "an unknown reference is not read as no retries"
        );
    }

    #[test]
    fn a_schedule_reference_is_four_base62_digits_of_its_text() {
        let a = schedule_reference("15s,3m,10m,30m,30m,1h,2h,6h,15h").unwrap();
        assert_eq!(a.len(), REFERENCE_DIGITS);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(
            Some(&a),
            schedule_reference("15s,3m,10m,30m,30m,1h,2h,6h,15h").as_ref()
        );
        assert_ne!(
            Some(&a),
            schedule_reference("15s,3m,10m,30m,30m,1h,2h,6h,16h").as_ref()
        );
        for short in ["", "1s", "15s", "1s,1s", "24h,1h"] {
            assert_eq!(
                schedule_reference(short).is_some(),
                short.len() > 5,
                "a reference only where it is shorter: {short}"
            );
        }
    }

    #[test]
    fn a_layout_of_a_later_build_is_refused_rather_than_misread() {
        let v9 = value(&spec()).replacen("v4 ", "v9 ", 1);
        assert!(decode(&v9).is_err());
        assert!(registration(&v9, &NoSharedSchedules).is_none());
    }

    #[test]
    fn times_before_1970_and_delays_in_ms_round_trip() {
        for (created_at, delay_ms) in [(0, 0), (-1, 250), (1_700_000_000_001, 86_400_000)] {
            let raw = stored(created_at, delay_ms, &[], &encode(&spec()));
            let record = registration(&raw, &NoSharedSchedules).unwrap();
            assert_eq!(record.created_at, created_at);
            assert_eq!(record.status().next_at, Some(created_at + delay_ms as i64));
        }
    }

    #[test]
    fn a_registration_is_due_after_its_delay() {
        let record = registration(&value(&spec()), &NoSharedSchedules).unwrap();
        assert_eq!(record.status().next_at, Some(1_700_000_015_000));
        assert_eq!(
            (record.attempts, record.lease, record.max_attempts),
            (0, 0, 3)
        );
    }
}
