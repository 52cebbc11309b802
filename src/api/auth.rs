//! Bearer-token authentication for every route but health and metrics.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;

/// The accepted tokens; empty means authentication is off (`--insecure-no-auth`).
#[derive(Clone)]
pub struct Tokens(pub Arc<Vec<String>>);

pub async fn require_token(
    State(tokens): State<Tokens>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if tokens.0.is_empty() {
        return Ok(next.run(request).await);
    }
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(p)
            if tokens
                .0
                .iter()
                .any(|t| constant_time_eq(t.as_bytes(), p.as_bytes())) =>
        {
            Ok(next.run(request).await)
        }
        _ => Err(ApiError::unauthorized()),
    }
}

/// Compares without returning early, so that timing does not reveal a token's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
