//! What the list routes share (`GET /notifications`, `GET /dead-letters`, `GET /audit`):
//! the page size, the cursor each gives back, the RFC 3339 times of their `since` and
//! `until`, and the filter of the notification lists.

use crate::domain::FieldError;
use crate::store::ListFilter;

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

/// The filter of a notification list (or bulk action) from its parameters; the tenant is
/// the caller's to set.
pub fn filter(
    topic: Option<String>,
    host: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<ListFilter, FieldError> {
    Ok(ListFilter {
        since: time("since", since)?,
        until: time("until", until)?,
        topic,
        host,
        tenant: None,
    })
}
