//! What the list routes share (`GET /dead-letters`, `GET /audit`): the page size, the
//! cursor each gives back, and the RFC 3339 times of their `since` and `until`.

use crate::domain::FieldError;

const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// Items per page: `limit` if given (1 to 500), otherwise 50.
pub fn limit(raw: Option<usize>) -> Result<usize, FieldError> {
    let limit = raw.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(FieldError::new(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    Ok(limit)
}

/// The cursor of a previous page, if given, read by `decode`.
pub fn cursor<T>(
    raw: Option<&str>,
    decode: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, FieldError> {
    raw.map(|r| decode(r).ok_or_else(|| FieldError::new("cursor", "not a cursor from this API")))
        .transpose()
}

/// An RFC 3339 time (`2026-01-01T00:00:00Z`), if given, as ms since the epoch.
pub fn time(field: &str, raw: Option<&str>) -> Result<Option<i64>, FieldError> {
    let Some(raw) = raw else { return Ok(None) };
    let t = humantime::parse_rfc3339_weak(raw).map_err(|_| {
        FieldError::new(field, "must be an RFC 3339 time like 2026-01-01T00:00:00Z")
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Ok(Some(ms as i64))
}
