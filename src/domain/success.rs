//! `SuccessRule`: how a receiver says it took a notification, as payment providers'
//! receivers answer: an accepted status (any 2xx unless listed) and, optionally, one rule
//! on the body: equal to a text (trimmed; `success`), the same ignoring case, matching a
//! regular expression, or a JSON pointer equal to a value (`/code` = `SUCCESS`).
//!
//! Its JSON (on `POST /notify`, in a profile, in the stored spec) is flat, so that it
//! reads the same in a request and in TOML: `{"status": [200, 204], "body_equals": "…"}`,
//! or `body_equals_ignoring_case`, `body_matches`, `json_pointer` with `json_equals`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::FieldError;

/// Longest body text, pattern or JSON pointer a rule takes.
pub const MAX_RULE_LEN: usize = 1024;
/// How large a compiled pattern may grow: enough for any alternation a receiver's answer
/// needs, and a bound on what one registration can make every attempt pay.
const MAX_PATTERN_BYTES: usize = 256 * 1024;
/// Most statuses one rule lists.
const MAX_STATUSES: usize = 20;

/// What counts as delivered. The default: any 2xx, whatever the body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawSuccess", into = "RawSuccess")]
pub struct SuccessRule {
    /// Accepted statuses; empty for any 2xx.
    statuses: Vec<u16>,
    body: Option<BodyRule>,
}

/// One rule on the response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyRule {
    /// The trimmed body equals this text.
    Equals(String),
    /// The trimmed body equals this text, ignoring case.
    EqualsIgnoringCase(String),
    /// The body matches this regular expression somewhere (anchor it to match whole).
    Matches(Pattern),
    /// The body is JSON whose value at `pointer` (RFC 6901) equals `equals`.
    Json { pointer: String, equals: Value },
}

/// A compiled regular expression that compares by its source.
#[derive(Debug, Clone)]
pub struct Pattern(Regex);

/// Patterns compiled so far, by source: a rule is read back from its spec at every
/// claim, and most notifications share a few patterns (their profiles'), so each is
/// compiled once. Bounded: past `MAX_CACHED` it starts afresh.
static COMPILED: Mutex<Option<HashMap<String, Regex>>> = Mutex::new(None);
const MAX_CACHED: usize = 256;

impl Pattern {
    fn compile(source: &str) -> Result<Self, String> {
        let mut cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
        let cache = cache.get_or_insert_with(HashMap::new);
        if let Some(regex) = cache.get(source) {
            return Ok(Self(regex.clone()));
        }
        let regex = RegexBuilder::new(source)
            .size_limit(MAX_PATTERN_BYTES)
            .build()
            .map_err(|e| e.to_string())?;
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(source.to_string(), regex.clone());
        Ok(Self(regex))
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Pattern {}

/// The rule as written: every part optional, checked by `SuccessRule::parse`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSuccess {
    /// Accepted statuses (200 to 599, not 410, which always gives up); default any 2xx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = json!([200, 204]))]
    pub status: Option<Vec<u16>>,
    /// The trimmed body equals this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "success")]
    pub body_equals: Option<String>,
    /// The trimmed body equals this, ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_equals_ignoring_case: Option<String>,
    /// The body matches this regular expression (Rust `regex` syntax; anchor it with
    /// `^…$` to match the whole body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_matches: Option<String>,
    /// With `json_equals`: the body is JSON whose value at this pointer (`/code`)
    /// equals `json_equals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_pointer: Option<String>,
    /// Any JSON value, `null` too: present means given.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "given"
    )]
    #[schema(value_type = Object)]
    pub json_equals: Option<Value>,
}

/// A field that is present, whatever its value (`null` included), as `Some`; an absent
/// one is `None` by `#[serde(default)]`.
fn given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl SuccessRule {
    /// A trimmed body equal to `text` (`expect_body`), after any 2xx.
    pub fn body_equals(text: String) -> Self {
        Self {
            statuses: Vec::new(),
            body: Some(BodyRule::Equals(text)),
        }
    }

    /// Checks `raw`; errors name `field` and the part (`success.body_matches`).
    pub fn parse(raw: RawSuccess, field: &str) -> Result<Self, FieldError> {
        let part = |name: &str| format!("{field}.{name}");
        let statuses = raw.status.unwrap_or_default();
        if statuses.len() > MAX_STATUSES {
            let message = format!("at most {MAX_STATUSES} statuses");
            return Err(FieldError::new(part("status"), message));
        }
        if let Some(bad) = statuses
            .iter()
            .find(|s| !(200..=599).contains(*s) || **s == 410)
        {
            let message =
                format!("{bad} is not a status a delivery can succeed with (200 to 599, not 410)");
            return Err(FieldError::new(part("status"), message));
        }
        let text = |name: &str, t: String| match t.len() {
            1..=MAX_RULE_LEN => Ok(t),
            _ => Err(FieldError::new(
                part(name),
                format!("1 to {MAX_RULE_LEN} bytes"),
            )),
        };
        let mut rules = Vec::new();
        // The answer is compared trimmed, so the text is kept trimmed, and its length is
        // that of what is kept: a text of spaces alone would be kept empty, which a
        // stored rule read back refuses.
        if let Some(t) = raw.body_equals {
            let t = text("body_equals", t.trim().to_string())?;
            rules.push(BodyRule::Equals(t));
        }
        if let Some(t) = raw.body_equals_ignoring_case {
            let t = text("body_equals_ignoring_case", t.trim().to_string())?;
            rules.push(BodyRule::EqualsIgnoringCase(t));
        }
        if let Some(t) = raw.body_matches {
            let source = text("body_matches", t)?;
            let pattern =
                Pattern::compile(&source).map_err(|e| FieldError::new(part("body_matches"), e))?;
            rules.push(BodyRule::Matches(pattern));
        }
        match (raw.json_pointer, raw.json_equals) {
            (None, None) => {}
            (Some(pointer), Some(equals)) => {
                let pointer = text("json_pointer", pointer)?;
                if !pointer.starts_with('/') {
                    let message = "a JSON pointer starts with `/` (`/code`)";
                    return Err(FieldError::new(part("json_pointer"), message));
                }
                rules.push(BodyRule::Json { pointer, equals });
            }
            (Some(_), None) => {
                return Err(FieldError::new(
                    part("json_equals"),
                    "required with json_pointer",
                ))
            }
            (None, Some(_)) => {
                return Err(FieldError::new(
                    part("json_pointer"),
                    "required with json_equals",
                ))
            }
        }
        if rules.len() > 1 {
            let message = "at most one of body_equals, body_equals_ignoring_case, body_matches and json_pointer";
            return Err(FieldError::new(field, message));
        }
        Ok(Self {
            statuses,
            body: rules.pop(),
        })
    }

    /// Whether `status` is one this rule accepts.
    pub fn accepts_status(&self, status: u16) -> bool {
        match self.statuses.is_empty() {
            true => (200..300).contains(&status),
            false => self.statuses.contains(&status),
        }
    }

    /// Why `body` does not satisfy the rule's body rule, or `None` when it does.
    pub fn refuses_body(&self, body: &str) -> Option<String> {
        match self.body.as_ref()? {
            BodyRule::Equals(t) => {
                (body.trim() != t).then(|| format!("response body is not `{t}`"))
            }
            BodyRule::EqualsIgnoringCase(t) => (body.trim().to_lowercase() != t.to_lowercase())
                .then(|| format!("response body is not `{t}` in any case")),
            BodyRule::Matches(p) => (!p.0.is_match(body))
                .then(|| format!("response body does not match `{}`", p.0.as_str())),
            BodyRule::Json { pointer, equals } => match serde_json::from_str::<Value>(body) {
                Err(_) => Some("response body is not JSON".into()),
                Ok(v) if v.pointer(pointer) == Some(equals) => None,
                Ok(v) => Some(format!(
                    "response body's `{pointer}` is {}, not {equals}",
                    v.pointer(pointer)
                        .map_or("missing".into(), Value::to_string)
                )),
            },
        }
    }

    /// The body rule, if any.
    pub fn body(&self) -> Option<&BodyRule> {
        self.body.as_ref()
    }

    /// The body text `expect_body` would give it, when that is all the rule says.
    pub fn as_expect_body(&self) -> Option<&str> {
        match (&self.body, self.statuses.is_empty()) {
            (Some(BodyRule::Equals(t)), true) => Some(t),
            _ => None,
        }
    }

    /// Whether this is the default rule (any 2xx, any body).
    pub fn is_default(&self) -> bool {
        self.statuses.is_empty() && self.body.is_none()
    }

    /// How many bytes of the body a verdict needs to read, beyond what is recorded.
    pub fn body_bytes(&self) -> usize {
        match &self.body {
            Some(BodyRule::Equals(t) | BodyRule::EqualsIgnoringCase(t)) => t.len() + 64,
            Some(BodyRule::Json { .. }) => 16 * 1024,
            Some(BodyRule::Matches(_)) => 4 * 1024,
            None => 0,
        }
    }
}

impl fmt::Display for BodyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyRule::Equals(t) => write!(f, "body `{t}`"),
            BodyRule::EqualsIgnoringCase(t) => write!(f, "body `{t}` (any case)"),
            BodyRule::Matches(p) => write!(f, "body matching `{}`", p.0.as_str()),
            BodyRule::Json { pointer, equals } => write!(f, "JSON `{pointer}` = {equals}"),
        }
    }
}

impl fmt::Display for SuccessRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.statuses.as_slice() {
            [] => f.write_str("2xx")?,
            statuses => {
                let each: Vec<String> = statuses.iter().map(u16::to_string).collect();
                f.write_str(&each.join("|"))?;
            }
        }
        match &self.body {
            Some(rule) => write!(f, " and {rule}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<RawSuccess> for SuccessRule {
    type Error = String;

    fn try_from(raw: RawSuccess) -> Result<Self, String> {
        Self::parse(raw, "success").map_err(|e| format!("{}: {}", e.field, e.message))
    }
}

impl From<SuccessRule> for RawSuccess {
    fn from(rule: SuccessRule) -> Self {
        let mut raw = RawSuccess {
            status: (!rule.statuses.is_empty()).then_some(rule.statuses),
            ..RawSuccess::default()
        };
        match rule.body {
            None => {}
            Some(BodyRule::Equals(t)) => raw.body_equals = Some(t),
            Some(BodyRule::EqualsIgnoringCase(t)) => raw.body_equals_ignoring_case = Some(t),
            Some(BodyRule::Matches(p)) => raw.body_matches = Some(p.0.as_str().to_string()),
            Some(BodyRule::Json { pointer, equals }) => {
                raw.json_pointer = Some(pointer);
                raw.json_equals = Some(equals);
            }
        }
        raw
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(v: Value) -> Result<SuccessRule, FieldError> {
        SuccessRule::parse(serde_json::from_value(v).unwrap(), "success")
    }

    #[test]
    fn each_convention_accepts_its_answer_and_refuses_others() {
        let cases = [
            (json!({"body_equals": "success"}), " success\n", "fail"),
            (
                json!({"body_equals_ignoring_case": "SUCCESS"}),
                "Success",
                "successful",
            ),
            (
                json!({"body_matches": "^<return_code>SUCCESS</return_code>"}),
                "<return_code>SUCCESS</return_code><x/>",
                "<return_code>FAIL</return_code>",
            ),
            (
                json!({"json_pointer": "/code", "json_equals": "SUCCESS"}),
                r#"{"code":"SUCCESS","message":"ok"}"#,
                r#"{"code":"FAIL"}"#,
            ),
            (
                json!({"json_pointer": "/result/ok", "json_equals": true}),
                r#"{"result":{"ok":true}}"#,
                "not json",
            ),
        ];
        for (raw, yes, no) in cases {
            let r = rule(raw.clone()).unwrap();
            assert_eq!(r.refuses_body(yes), None, "{raw} accepts {yes}");
            assert!(r.refuses_body(no).is_some(), "{raw} refuses {no}");
        }
    }

    #[test]
    fn listed_statuses_replace_any_2xx() {
        assert!(SuccessRule::default().accepts_status(204));
        assert!(!SuccessRule::default().accepts_status(302));
        let r = rule(json!({"status": [200, 204]})).unwrap();
        assert!(r.accepts_status(204) && !r.accepts_status(201));
    }

    #[test]
    fn a_bad_rule_is_refused_naming_its_part() {
        let cases = [
            (json!({"status": [410]}), "success.status"),
            (json!({"status": [99]}), "success.status"),
            (json!({"body_matches": "("}), "success.body_matches"),
            (
                json!({"body_matches": "a{1000}{1000}"}),
                "success.body_matches",
            ),
            (json!({"body_equals": ""}), "success.body_equals"),
            (json!({"body_equals": " \n"}), "success.body_equals"),
            (
                json!({"body_equals_ignoring_case": "\t"}),
                "success.body_equals_ignoring_case",
            ),
            (
                json!({"json_pointer": "code", "json_equals": 1}),
                "success.json_pointer",
            ),
            (json!({"json_pointer": "/code"}), "success.json_equals"),
            (json!({"body_equals": "a", "body_matches": "b"}), "success"),
        ];
        for (raw, field) in cases {
            assert_eq!(rule(raw.clone()).unwrap_err().field, field, "{raw}");
        }
    }

    #[test]
    fn a_json_value_of_null_is_a_value_to_equal_not_a_missing_one() {
        let r = rule(json!({"json_pointer": "/error", "json_equals": null})).unwrap();
        assert_eq!(r.refuses_body(r#"{"error":null}"#), None);
        assert!(r.refuses_body(r#"{"error":"late"}"#).is_some());
        let back: SuccessRule = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_rule_round_trips_through_its_json() {
        let raw = json!({"status": [200], "json_pointer": "/code", "json_equals": "SUCCESS"});
        let r = rule(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), raw);
        let back: SuccessRule = serde_json::from_value(raw).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.to_string(), r#"200 and JSON `/code` = "SUCCESS""#);
    }
}
