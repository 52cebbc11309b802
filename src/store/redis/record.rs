//! How a notification is laid out in the `jobs` hash, the one value every pending
//! notification keeps in Redis: `<created_at> <delay> <schedule>\n<meta JSON>\n<body>`.
//!
//! - The first line is written by `enqueue.lua`: Redis's time of the registration, the
//!   delay (ms) and the schedule. Until its first change (an attempt settled, a
//!   deferral, a hand-back, a cancel), a notification has no state record and is due at
//!   `created_at + delay`; the scripts make its state from this line (`fresh_state` in
//!   `lua/common.lua`), and so does `fresh_record` here, for claims and readers.
//! - The meta JSON is the spec without its body, leaving out what is implied: the
//!   content type when it is JSON, the rate key when it is the URL's host, the timeout
//!   when it is 10 s.
//! - The body follows as it is sent, unescaped, to the end of the value.
//!
//! The schedule on the first line is written as records keep it (`lifecycle`). Specs of
//! earlier builds (one JSON object, the body escaped inside it) are still read.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::domain::{JobSpec, Payload};
use crate::lifecycle::{schedule_intervals, transitions, Now, Record};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expect_body: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topic: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_key: Option<Cow<'a, str>>,
}

/// The spec as the scripts take it: the meta line and the body (they put the first line
/// in front).
pub fn encode_spec(spec: &JobSpec) -> String {
    let host = spec.host();
    let meta = Meta {
        url: Cow::Borrowed(&spec.url),
        content_type: (spec.content_type != JSON).then_some(Cow::Borrowed(&spec.content_type)),
        headers: Cow::Borrowed(&spec.headers),
        timeout_ms: (spec.timeout_ms != IMPLIED_TIMEOUT_MS).then_some(spec.timeout_ms),
        expect_body: spec.expect_body.as_deref().map(Cow::Borrowed),
        topic: spec.topic.as_deref().map(Cow::Borrowed),
        rate_key: (spec.rate_key != host).then_some(Cow::Borrowed(&spec.rate_key)),
    };
    let meta = serde_json::to_string(&meta).expect("a spec serializes");
    format!("{meta}\n{}", spec.body)
}

/// The spec of a stored value, of this build or an earlier one.
pub fn decode_spec(raw: &str) -> serde_json::Result<JobSpec> {
    use serde::de::Error;
    if raw.starts_with('{') {
        return serde_json::from_str(raw);
    }
    let (_, rest) = raw
        .split_once('\n')
        .ok_or_else(|| Error::custom("no registration line"))?;
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
        expect_body: meta.expect_body.map(Cow::into_owned),
        topic: meta.topic.map(Cow::into_owned),
        rate_key: String::new(),
    };
    spec.rate_key = meta.rate_key.map_or_else(|| spec.host(), Cow::into_owned);
    Ok(spec)
}

/// The state record of a notification that has none yet, as `fresh_state` in
/// `lua/common.lua` makes it: scheduled at `created_at + delay`, no attempt, lease 0.
/// What a claim of it reads, and a reader sees (asking the in-flight index, as for any
/// record). `None` for a value of an earlier build, which always has a record.
pub fn fresh_record(raw: &str) -> Option<Record> {
    let (line, _) = raw.split_once('\n')?;
    let mut words = line.splitn(3, ' ');
    let created_at: i64 = words.next()?.parse().ok()?;
    let delay_ms: u64 = words.next()?.parse().ok()?;
    let schedule = schedule_intervals(words.next()?);
    let now = Now::from_millis(created_at);
    Some(transitions::register(schedule, now, delay_ms))
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
            expect_body: None,
            topic: Some("payment.succeeded".into()),
            rate_key: "pay.example.com".into(),
        }
    }

    fn stored(spec: &JobSpec) -> String {
        format!("1700000000000 15000 15s,3m\n{}", encode_spec(spec))
    }

    #[test]
    fn a_spec_round_trips_and_leaves_out_what_is_implied() {
        let s = spec();
        let raw = stored(&s);
        assert_eq!(
            raw,
            "1700000000000 15000 15s,3m\n{\"url\":\"https://pay.example.com/hook\",\"topic\":\"payment.succeeded\"}\n{\"order\":1,\n\"note\":\"two\\nlines\"}"
        );
        assert_eq!(decode_spec(&raw).unwrap(), s);
    }

    #[test]
    fn a_spec_that_differs_from_the_implied_values_keeps_them() {
        let s = JobSpec {
            content_type: "text/plain; charset=utf-8".into(),
            headers: vec![("x-shop".into(), "7".into())],
            timeout_ms: 2_500,
            expect_body: Some("success".into()),
            topic: None,
            rate_key: "merchant-7".into(),
            ..spec()
        };
        assert_eq!(decode_spec(&stored(&s)).unwrap(), s);
    }

    #[test]
    fn a_spec_of_an_earlier_build_is_read() {
        let s = spec();
        let legacy = serde_json::to_string(&s).unwrap();
        assert_eq!(decode_spec(&legacy).unwrap(), s);
        assert!(fresh_record(&legacy).is_none());
    }

    #[test]
    fn a_fresh_record_is_the_one_the_scripts_make() {
        let record = fresh_record(&stored(&spec())).unwrap();
        assert_eq!(record.status().next_at, Some(1_700_000_015_000));
        assert_eq!(
            record.encode(),
            r#"{"state":"scheduled","attempts":0,"lease":0,"max_attempts":3,"schedule":"15s,3m","created_at":1700000000000,"next_at":1700000015000}"#
        );
    }
}
