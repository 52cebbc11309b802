//! Load shedding: at most `server.max_concurrent_requests` authenticated requests are in
//! progress at once. The rest are answered `503 overloaded` with `Retry-After: 1` at
//! once, before their body is read, so that a slow store or a producer pushing too hard
//! cannot pile up waiting work and memory in the process.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::ApiError;
use crate::metrics;

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
