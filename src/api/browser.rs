//! Headers that tell a browser how to treat every answer, HTML or JSON: load nothing
//! from elsewhere, run no inline script, never be framed (clickjacking of the review
//! page), never guess a content type, send no referrer. Swagger UI at `/docs` needs
//! inline styles and `data:` images, and nothing more.

use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue};

const CONTENT_SECURITY: &str = "default-src 'self'; img-src 'self' data:; \
    style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// Sets the headers on an answer's, in place of any it had.
pub fn set_security_headers(headers: &mut HeaderMap) {
    let set = [
        (CONTENT_SECURITY_POLICY, CONTENT_SECURITY),
        (X_FRAME_OPTIONS, "DENY"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (REFERRER_POLICY, "no-referrer"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
}
