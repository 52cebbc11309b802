//! Reading a request body: a JSON object into its request type, with an error that
//! names the offending field, and an idempotency key as sent.

use axum::http::StatusCode;

use super::error::ApiError;
use crate::domain::FieldError;

const MAX_IDEMPOTENCY_KEY: usize = 255;

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
