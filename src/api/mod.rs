//! The HTTP API: routes, shared state, authentication and the body size limit.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde_json::{json, Value};
use tokio::sync::Notify;

mod auth;
mod dead_letters;
mod error;
mod notifications;
mod notify;
mod view;

pub use auth::Tokens;
pub use error::ApiError;
pub use notify::NotifyPolicy;

use crate::store::{Stats, Store};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    /// Wakes this instance's scheduler when a registration becomes the earliest due.
    pub wake: Arc<Notify>,
    pub policy: Arc<NotifyPolicy>,
}

pub fn router(state: AppState, tokens: Tokens, max_body_bytes: usize) -> Router {
    let protected = Router::new()
        .route("/notify", post(notify::notify))
        .route(
            "/notifications/{id}",
            get(notifications::show).delete(notifications::cancel),
        )
        .route("/dead-letters", get(dead_letters::list))
        .route(
            "/dead-letters/{id}",
            get(dead_letters::show).delete(dead_letters::discard),
        )
        .route("/dead-letters/{id}/replay", post(dead_letters::replay))
        .route("/dead-letters/replay", post(dead_letters::replay_matching))
        .route("/dead-letters/purge", post(dead_letters::purge))
        .route("/stats", get(stats))
        .route_layer(middleware::from_fn_with_state(tokens, auth::require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(protected)
        .fallback(|| async { ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Counts by state and of what retention deleted.
async fn stats(State(state): State<AppState>) -> Result<Json<Stats>, ApiError> {
    Ok(Json(state.store.stats().await?))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.store.ping().await?;
    Ok(Json(json!({"status": "ready"})))
}
