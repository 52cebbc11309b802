//! API errors: a status and `{"error": {"code", "message", "field"}}`, and the error
//! answers every protected route can give, for the OpenAPI document.

use axum::extract::rejection::BytesRejection;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use utoipa::openapi::{self, ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

use super::body::BodyLimit;
use crate::domain::FieldError;
use crate::store::{Refusal, StoreError};

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, for scripts: `invalid_field`, `invalid_json`, `not_found`,
    /// `refused_at_intake`, `conflict`, `unauthorized`, `store_unavailable`,
    /// `overloaded`, …
    #[schema(example = "invalid_field")]
    pub code: &'static str,
    pub message: String,
    /// The offending field of the request, for `invalid_field`; of the registration
    /// refused, for `refused_at_intake`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// What any authenticated route may answer besides its own results (for the document).
pub struct CommonErrors;

impl IntoResponses for CommonErrors {
    fn responses() -> BTreeMap<String, RefOr<openapi::Response>> {
        error_responses(&[
            ("401", "No valid `Authorization: Bearer <token>` header"),
            ("403", "The token lacks the route's role, or names another tenant (`forbidden`)"),
            (
                "503",
                "The store is unreachable (`store_unavailable`), or `server.max_concurrent_requests` \
                 are in progress (`overloaded`); nothing was changed, try again after `Retry-After`. \
                 Or a write is on the store's primary but not yet on `store.replica_acks` replicas \
                 (`replica_ack_timeout`): try again, a registration with the same `Idempotency-Key`",
            ),
        ])
    }
}

/// What a route that reads a request body may answer besides its own results.
pub struct BadInput;

impl IntoResponses for BadInput {
    fn responses() -> BTreeMap<String, RefOr<openapi::Response>> {
        error_responses(&[
            ("400", "The body is not a JSON object"),
            ("413", "The body is larger than `server.max_body_bytes`"),
            (
                "422",
                "A field is invalid (`field` names it); nothing was stored",
            ),
        ])
    }
}

fn error_responses(list: &[(&str, &str)]) -> BTreeMap<String, RefOr<openapi::Response>> {
    list.iter()
        .map(|(status, description)| {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build();
            let response = ResponseBuilder::new()
                .description(*description)
                .content("application/json", content)
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// `404 refused_at_intake`: no notification was stored under the id that
    /// `postback.notify()` returned, because its registration was refused when taken in;
    /// why, and the field it names.
    pub fn refused_at_intake(refusal: Refusal) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            code: "refused_at_intake",
            message: format!(
                "no notification was stored: its registration (postback.notify()) was refused when taken in: {}",
                refusal.message
            ),
            field: refusal.field,
        }
    }

    /// `401 unauthorized` for a request with no bearer token, or (`presented`) with one
    /// this instance does not accept.
    pub fn unauthorized(presented: bool) -> Self {
        let message = match presented {
            false => "an `Authorization: Bearer <token>` header is required",
            true => "the bearer token is not one this instance accepts",
        };
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
}

/// `400 invalid_query`: an unknown or malformed query parameter.
pub fn invalid_query(r: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", r.body_text())
}

impl ApiError {
    /// `413`: a body, or an item of one, larger than `bytes` (the setting `key`).
    pub fn too_large(bytes: usize, key: &str) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_body",
            format!("the body is larger than {bytes} bytes ({key})"),
        )
    }

    /// A body that could not be read: larger than its route's `limit` (413, naming the
    /// limit and its key) or broken.
    pub fn body(r: BytesRejection, limit: Option<BodyLimit>) -> Self {
        if let (StatusCode::PAYLOAD_TOO_LARGE, Some(BodyLimit { bytes, key })) = (r.status(), limit)
        {
            return Self::too_large(bytes, key);
        }
        Self::new(r.status(), "invalid_body", r.body_text())
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_field",
            message: e.to_string(),
            field: Some(e.field),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => {
                crate::observability::metrics::store_error("api");
                log_unavailable(&e);
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the store is unreachable; try again shortly",
                )
            }
            StoreError::NotReplicated { .. } => {
                crate::observability::metrics::replica_ack_timeout();
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "replica_ack_timeout",
                    format!("{e}; try again shortly, a registration with the same Idempotency-Key"),
                )
            }
            StoreError::ReplicasMissing { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "replicas_missing",
                e.to_string(),
            ),
            StoreError::Corrupt(_) | StoreError::Script { .. } => {
                tracing::error!(error = %e, "store error");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

/// Logs that the API is answering 503 at most once per `UNAVAILABLE_LOG_EVERY`, with how
/// many requests it refused since the last line, so that an outage under load is a few
/// lines in the log rather than one per request.
fn log_unavailable(e: &StoreError) {
    const UNAVAILABLE_LOG_EVERY: Duration = Duration::from_secs(10);
    static REFUSED: AtomicU64 = AtomicU64::new(0);
    static LAST_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);
    REFUSED.fetch_add(1, Ordering::Relaxed);
    let mut last = LAST_LOGGED.lock().unwrap_or_else(|p| p.into_inner());
    if last.is_some_and(|at| at.elapsed() < UNAVAILABLE_LOG_EVERY) {
        return;
    }
    *last = Some(Instant::now());
    let refused = REFUSED.swap(0, Ordering::Relaxed);
    tracing::warn!(error = %e, refused, "store unavailable: the API answers 503 until it is back");
}

impl ApiError {
    /// Whether it is the request's to change (a `4xx` but `408` and `429`): the same
    /// request is refused again, where the others may pass when tried again.
    pub fn is_final(&self) -> bool {
        let later = [StatusCode::REQUEST_TIMEOUT, StatusCode::TOO_MANY_REQUESTS];
        self.status.is_client_error() && !later.contains(&self.status)
    }

    /// The error's JSON (`{"code", "message", "field"}`), as a refused registration
    /// keeps it.
    pub fn into_json(self) -> serde_json::Value {
        serde_json::to_value(self.into_body().1.error).unwrap_or_default()
    }

    /// Its status and the JSON it is answered with (a batch item's result is the JSON).
    pub fn into_body(self) -> (StatusCode, ErrorBody) {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                field: self.field,
            },
        };
        (self.status, body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.into_body();
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if status == StatusCode::UNAUTHORIZED {
            headers.insert("www-authenticate", HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
