//! `Body`: a request body read whole within `server.body_timeout` and under its route's
//! `BodyLimit` (`server.max_body_bytes`, or `server.max_batch_bytes` for
//! `POST /notify/batch`), so that a client that stalls mid-body is answered `408` and
//! gives its concurrency place back, and a body over the limit is answered `413` naming
//! it.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request};
use axum::http::StatusCode;
use axum::Extension;
use tower::layer::util::{Identity, Stack};
use tower::ServiceBuilder;

use super::error::ApiError;
use super::AppState;

/// A limit on request bodies and the setting it comes from, which a `413` names.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    pub bytes: usize,
    pub key: &'static str,
}

impl BodyLimit {
    /// The layers that apply it to routes: axum's limit, and the limit itself for `Body`
    /// to name, so that the two cannot differ. A route's own layers are read after the
    /// router's, so they win.
    pub fn layer(
        self,
    ) -> ServiceBuilder<Stack<Extension<Self>, Stack<DefaultBodyLimit, Identity>>> {
        ServiceBuilder::new()
            .layer(DefaultBodyLimit::max(self.bytes))
            .layer(Extension(self))
    }
}

pub struct Body(pub Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let body_limit = request.extensions().get::<BodyLimit>().copied();
        let limit = state.body_timeout;
        match tokio::time::timeout(limit, Bytes::from_request(request, state)).await {
            Ok(Ok(bytes)) => Ok(Self(bytes)),
            Ok(Err(rejection)) => Err(ApiError::body(rejection, body_limit)),
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
