//! Serving the API on its listener, with the limits a slow or hostile client meets: at
//! most `server.max_connections` connections at once (more wait to be accepted), a
//! request head that must end within `server.header_timeout` of its first byte, and a
//! connection closed once it has had no request for `server.idle_timeout`. On `stop`,
//! no new connection is accepted, and each open one ends after the request it is
//! serving.
//!
//! Hyper's own header timer runs from when a connection is ready for its next request,
//! which covers the idle time before it; so it is set to the idle limit, and the head's
//! own limit is kept here (`HeadDeadline`), from the head's first byte until the
//! request reaches the router.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower::ServiceExt;

/// How long to wait before accepting again after `accept` failed (out of descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What a connection may take (`server.header_timeout`, `server.idle_timeout`,
/// `server.max_connections`).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
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
        .header_read_timeout(limits.idle_timeout);
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = accept(&listener, &places) => accepted,
        };
        let Some((stream, place)) = accepted else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let requests = Arc::new(Requests::default());
        let counted = requests.clone();
        let service =
            ServiceExt::<Request<Incoming>>::map_future(router.clone(), move |response| {
                let serving = Serving::begin(counted.clone());
                async move {
                    let answer = response.await;
                    drop(serving);
                    answer
                }
            });
        let io = HeadDeadline::new(stream, limits.header_timeout, requests);
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service));
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
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
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

/// A connection's requests: how many reached the router, and how many it is serving.
#[derive(Default)]
struct Requests {
    started: AtomicU64,
    serving: AtomicUsize,
}

/// One request being served, from when it reaches the router until its answer is ready
/// (or it is dropped).
struct Serving(Arc<Requests>);

impl Serving {
    fn begin(requests: Arc<Requests>) -> Self {
        requests.started.fetch_add(1, Ordering::Relaxed);
        requests.serving.fetch_add(1, Ordering::Relaxed);
        Self(requests)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's socket that fails its reads once a request head, begun, has not
/// reached the router within `limit`: bytes read while no request is being served
/// start the clock (a body's bytes do not), and the next request to start stops it.
struct HeadDeadline {
    stream: TcpStream,
    limit: Duration,
    requests: Arc<Requests>,
    /// The clock of the head being read, and how many requests had started then.
    head: Option<(Pin<Box<Sleep>>, u64)>,
}

impl HeadDeadline {
    fn new(stream: TcpStream, limit: Duration, requests: Arc<Requests>) -> Self {
        Self {
            stream,
            limit,
            requests,
            head: None,
        }
    }
}

impl AsyncRead for HeadDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let started = this.requests.started.load(Ordering::Relaxed);
        if this.head.as_ref().is_some_and(|(_, at)| *at != started) {
            this.head = None;
        }
        if let Some((clock, _)) = this.head.as_mut() {
            if clock.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request head did not end within server.header_timeout",
                )));
            }
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let got_bytes = matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        let idle = this.requests.serving.load(Ordering::Relaxed) == 0;
        if got_bytes && idle && this.head.is_none() {
            let mut clock = Box::pin(tokio::time::sleep(this.limit));
            // Registered now, so that the connection is woken when it runs out.
            let _ = clock.as_mut().poll(cx);
            this.head = Some((clock, started));
        }
        read
    }
}

impl AsyncWrite for HeadDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
