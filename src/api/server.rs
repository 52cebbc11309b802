//! Serving the API on its listener, with the limits a slow or hostile client meets: at
//! most `server.max_connections` connections at once (more wait to be accepted), and a
//! request head must arrive within `server.header_timeout` of its connection being
//! ready for it, so that a connection that stalls, or a kept-alive one left idle, is
//! closed. On `stop`, no new connection is accepted, and each open one ends after the
//! request it is serving.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long to wait before accepting again after `accept` failed (out of descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What a connection may take (`server.header_timeout`, `server.max_connections`).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `stop` completes and the open connections end.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            accepted = accept(&listener, &places) => accepted,
        };
        let Some((stream, place)) = accepted else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            let _ = connection.await;
            drop(place);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The next connection, once a place is free for it; `None` when accepting failed.
async fn accept(
    listener: &TcpListener,
    places: &Arc<Semaphore>,
) -> Option<(tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit)> {
    let place = places.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, place)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot accept a connection");
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            None
        }
    }
}
