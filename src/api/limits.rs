//! Limits on requests, applied before any handler runs.
//!
//! - Load shedding: at most `server.max_concurrent_requests` authenticated requests are
//!   in progress at once. The rest are answered `503 overloaded` with `Retry-After: 1`
//!   at once, before their body is read, so that a slow store or a producer pushing too
//!   hard cannot pile up waiting work and memory in the process.
//! - Header size: a request whose headers add up to more than `MAX_HEADER_BYTES` gets
//!   `431`, whatever the route.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

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
}

/// Runs the request if a place is free, and holds the place until it is answered.
pub async fn shed(State(limit): State<Limit>, request: Request, next: Next) -> Response {
    let Ok(_place) = limit.0.try_acquire_owned() else {
        metrics::request_shed();
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "too many requests in progress; try again after Retry-After",
        )
        .into_response();
    };
    next.run(request).await
}

/// Refuses a request whose headers are larger than `MAX_HEADER_BYTES` in all.
pub async fn limit_headers(request: Request, next: Next) -> Response {
    let size: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if size > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("the request's headers are larger than {MAX_HEADER_BYTES} bytes"),
        )
        .into_response();
    }
    next.run(request).await
}
