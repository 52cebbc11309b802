//! Reading a request body: a JSON object into its request type (no deeper than
//! `MAX_NESTING`), with an error that names the offending field; an idempotency key as
//! sent, in a header or in a batch's item.

use axum::http::{HeaderMap, StatusCode};
use serde::de::{MapAccess, Visitor};
use serde::Deserializer;
use serde_json::value::RawValue;

use super::error::ApiError;
use crate::domain::{check_nesting, FieldError, IdempotencyKey, MAX_NESTING};

/// How deep a batch may nest: its items are each held to `MAX_NESTING` on their own,
/// and this keeps the batch within what serde_json reads (128 levels).
pub(super) const BATCH_NESTING: usize = 120;

/// The `Idempotency-Key` header, if sent. A value that is not visible ASCII reads as
/// empty, which the rule refuses.
pub(super) fn key_header(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, FieldError> {
    headers
        .get("idempotency-key")
        .map(|raw| IdempotencyKey::parse(raw.to_str().unwrap_or_default(), "Idempotency-Key"))
        .transpose()
}

/// Refuses an `Idempotency-Key` header on a batch, whose items carry their own keys:
/// sent there by habit, it would be ignored, and a retry would register again.
pub(super) fn no_key_header(headers: &HeaderMap) -> Result<(), FieldError> {
    match headers.contains_key("idempotency-key") {
        true => Err(FieldError::new(
            "Idempotency-Key",
            "a batch's items carry their own `idempotency_key`; this header would be ignored",
        )),
        false => Ok(()),
    }
}

/// An item of a batch split into the request it stands for (its text without its
/// `idempotency_key` field; every other field's value exactly as sent) and that key.
pub(super) fn split_key(item: &RawValue) -> Result<(String, Option<IdempotencyKey>), ApiError> {
    let not_object = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "an item must be a JSON object",
        )
    };
    let mut de = serde_json::Deserializer::from_str(item.get());
    let fields = (&mut de)
        .deserialize_map(FieldsInOrder)
        .map_err(|_| not_object())?;
    if !fields.iter().any(|(name, _)| name == "idempotency_key") {
        return Ok((item.get().to_string(), None));
    }
    let mut request = String::with_capacity(item.get().len());
    let mut key = None;
    for (name, value) in &fields {
        if name == "idempotency_key" {
            key = item_key(value)?;
            continue;
        }
        request.push(if request.is_empty() { '{' } else { ',' });
        request.push_str(&serde_json::to_string(name).expect("a string serializes"));
        request.push(':');
        request.push_str(value.get());
    }
    if request.is_empty() {
        request.push('{');
    }
    request.push('}');
    Ok((request, key))
}

/// A request's text without its `idempotency_key` field (what the key's fingerprint is
/// taken of), every other field as sent.
pub(super) fn without_key(raw: &[u8]) -> Result<String, ApiError> {
    let request: &RawValue = serde_json::from_slice(raw).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    Ok(split_key(request)?.0)
}

/// An item's `idempotency_key`: `null` is none.
fn item_key(value: &RawValue) -> Result<Option<IdempotencyKey>, FieldError> {
    match serde_json::from_str::<Option<String>>(value.get()) {
        Ok(key) => key
            .map(|k| IdempotencyKey::parse(&k, "idempotency_key"))
            .transpose(),
        Err(_) => Err(FieldError::new("idempotency_key", "must be a string")),
    }
}

/// A JSON object's fields in the order sent, each value as sent.
struct FieldsInOrder;

impl<'de> Visitor<'de> for FieldsInOrder {
    type Value = Vec<(String, &'de RawValue)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::new();
        while let Some(field) = map.next_entry::<String, &RawValue>()? {
            fields.push(field);
        }
        Ok(fields)
    }
}

/// Parses an optional JSON object into `T`: an empty body or `null` is `T`'s default.
pub(super) fn optional_json<T>(body: &[u8]) -> Result<T, ApiError>
where
    T: Default + serde::de::DeserializeOwned,
{
    match body.trim_ascii() {
        b"" | b"null" => Ok(T::default()),
        _ => parse_json(body),
    }
}

/// Parses a JSON object into `T`, naming the offending field on error; one nested deeper
/// than `MAX_NESTING` is refused before it is read (whatever is accepted can be read
/// back wherever it is stored).
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    parse_json_within(body, MAX_NESTING)
}

/// `parse_json`, for a document that may nest `limit` levels.
pub(super) fn parse_json_within<T: serde::de::DeserializeOwned>(
    body: &[u8],
    limit: usize,
) -> Result<T, ApiError> {
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
    check_nesting(body, limit)?;
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
