//! `postback receive`: a receiver to try postback against on one machine. It answers
//! `200 OK` to every request, except under `/fail`, where it answers `503`, and prints
//! one line per request: status, method, path, `webhook-id` and body.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};

use super::print;

/// Serves until interrupted.
pub async fn receive(listen: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!(
        "receiving on http://{}: 200 to every request, 503 under /fail",
        listener.local_addr()?
    );
    let app = axum::Router::new().fallback(answer);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

async fn answer(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let status = if uri.path().starts_with("/fail") {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let line = format!(
        "{} {method} {} webhook-id={id} {}\n",
        status.as_u16(),
        uri.path(),
        String::from_utf8_lossy(&body)
    );
    let _ = print::emit(&line);
    status
}
