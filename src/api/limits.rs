//! Limits on requests, applied before any handler runs.
//!
//! - Load shedding: at most `server.max_concurrent_requests` authenticated requests are
//!   in progress at once. The rest are answered `503 overloaded` with `Retry-After: 1`
//!   at once, before their body is read, so that a slow store or a producer pushing too
//!   hard cannot pile up waiting work and memory in the process.
//! - Header size: a request whose headers add up to more than `MAX_HEADER_BYTES` gets
//!   `431`, whatever the route.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ApiError;
use crate::observability::metrics;

/// The most header bytes (names and values) a request may carry.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The requests that may be in progress.
#[derive(Clone)]
pub struct Limit(Arc<Semaphore>);

impl Limit {
    pub fn new(max_concurrent_requests: usize) -> Self {
        Self(Arc::new(Semaphore::new(max_concurrent_requests)))
    }

    /// A place, if one is free, held until it is dropped (when the request is answered).
    pub fn place(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.0.clone().try_acquire_owned().map_err(|_| {
            metrics::request_shed();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "too many requests in progress; try again after Retry-After",
            )
        })
    }
}

/// Refuses headers larger than `MAX_HEADER_BYTES` in all.
pub fn check_headers(headers: &HeaderMap) -> Result<(), ApiError> {
    let size: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if size > MAX_HEADER_BYTES {
        return Err(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("the request's headers are larger than {MAX_HEADER_BYTES} bytes"),
        ));
    }
    Ok(())
}
