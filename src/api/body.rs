//! `Body`: a request body read whole within `server.body_timeout` and under
//! `server.max_body_bytes` (`server.max_batch_bytes` for `POST /notify/batch`, whose
//! route sets that limit), so that a client that stalls mid-body is answered `408` and
//! gives its concurrency place back, and a body over the limit is answered `413` naming
//! it.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;

use super::error::ApiError;
use super::AppState;

pub struct Body(pub Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let path = request.uri().path().to_string();
        let limit = state.body_timeout;
        match tokio::time::timeout(limit, Bytes::from_request(request, state)).await {
            Ok(Ok(bytes)) => Ok(Self(bytes)),
            Ok(Err(rejection)) => Err(ApiError::body(rejection, limit_of(&path, state))),
            Err(_) => Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the body did not arrive within {} (server.body_timeout)",
                    humantime::format_duration(limit)
                ),
            )),
        }
    }
}

/// The size limit of a route's body and its key, which a `413` names.
fn limit_of(path: &str, state: &AppState) -> (usize, &'static str) {
    if path == "/notify/batch" {
        (state.max_batch_bytes, "server.max_batch_bytes")
    } else {
        (state.max_body_bytes, "server.max_body_bytes")
    }
}
