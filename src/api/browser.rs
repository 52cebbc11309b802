//! Headers that tell a browser how to treat every answer, HTML or JSON: load nothing
//! from elsewhere, run no inline script, never be framed (clickjacking of the review
//! page), never guess a content type, send no referrer. Swagger UI at `/docs` needs
//! inline styles and `data:` images, and nothing more.

use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;

const CONTENT_SECURITY: &str = "default-src 'self'; img-src 'self' data:; \
    style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// `router` with the headers on every answer.
pub fn with_security_headers<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    let set =
        |name, value| SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value));
    router
        .layer(set(CONTENT_SECURITY_POLICY, CONTENT_SECURITY))
        .layer(set(X_FRAME_OPTIONS, "DENY"))
        .layer(set(X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(set(REFERRER_POLICY, "no-referrer"))
}
