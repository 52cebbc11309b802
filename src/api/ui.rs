//! The review page at `/ui`: static files built into the binary (`ui/` at the
//! repository's root; nothing is fetched at run time). The page holds no data of its
//! own; it asks for an API token and calls the API like any other client.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("../../ui/index.html");
const SCRIPT: &str = include_str!("../../ui/app.js");
const STYLE: &str = include_str!("../../ui/style.css");

/// `/ui` and its two assets.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|| file("text/html; charset=utf-8", INDEX)))
        .route("/ui/", get(|| file("text/html; charset=utf-8", INDEX)))
        .route(
            "/ui/app.js",
            get(|| file("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(
            "/ui/style.css",
            get(|| file("text/css; charset=utf-8", STYLE)),
        )
}

async fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
        body,
    )
}
