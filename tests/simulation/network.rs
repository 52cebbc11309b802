//! The simulated network: receivers at loopback addresses (`127.0.0.1:9000 + n`), reached
//! by the sender through pipes in memory (`Network`), each answering an attempt as the
//! seed says: 2xx, 4xx, 5xx, `Retry-After`, a timeout, a reset, a slow body, a redirect,
//! a body that a success rule refuses; or down for a while (connections refused). Every
//! request that arrives is written in the world's log of arrivals, with the time the
//! world keeps (which the instance's clock, jumping or stalling, may not).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use postback::app::Network;

use crate::checker::{Answer, Arrival};

/// How many receivers there are.
pub const RECEIVERS: u16 = 4;
/// The first receiver's port.
const BASE_PORT: u16 = 9000;

/// The URL of receiver `n` at `path`.
pub fn url(n: u16, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", BASE_PORT + n)
}

/// What every receiver got, in order, and whether each is down.
#[derive(Debug, Default)]
pub struct Receivers {
    pub arrivals: Vec<Arrival>,
    /// The world's time (no jumps, no stalls) when the running incarnation started, ms,
    /// and tokio's instant then.
    pub started: Option<(i64, tokio::time::Instant)>,
    pub down: [bool; RECEIVERS as usize],
    /// Per receiver, how likely (of 100) a request fails, so that some endpoints are
    /// healthy and some are not.
    pub flakiness: [u32; RECEIVERS as usize],
}

impl Receivers {
    /// The world's time now, ms.
    pub fn true_ms(&self) -> i64 {
        self.started
            .map_or(0, |(ms, at)| ms + at.elapsed().as_millis() as i64)
    }
}

/// The network the instance's sender uses: pipes to `receivers`.
#[derive(Clone)]
pub struct SimNetwork {
    pub receivers: Arc<Mutex<Receivers>>,
}

impl Network for SimNetwork {
    fn connect(
        &self,
        addr: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<tokio::io::DuplexStream>> + Send>> {
        let receivers = self.receivers.clone();
        Box::pin(async move {
            let n = addr.port().wrapping_sub(BASE_PORT);
            let refused = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            if n >= RECEIVERS || receivers.lock().unwrap().down[usize::from(n)] {
                return Err(refused());
            }
            let (client, server) = tokio::io::duplex(64 * 1024);
            tokio::spawn(serve(n, server, receivers));
            Ok(client)
        })
    }
}

/// Serves one connection to receiver `n`.
async fn serve(n: u16, stream: tokio::io::DuplexStream, receivers: Arc<Mutex<Receivers>>) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let receivers = receivers.clone();
        async move { answer(n, request, &receivers).await }
    });
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// What receiver `n` answers `request`, as the seed (the thread's generator) says.
async fn answer(
    n: u16,
    request: Request<Incoming>,
    receivers: &Mutex<Receivers>,
) -> std::io::Result<Response<Full<Bytes>>> {
    use http_body_util::BodyExt;
    let id = header(&request, "webhook-id").unwrap_or_default();
    let url = url(n, request.uri().path());
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let flaky = receivers.lock().unwrap().flakiness[usize::from(n)];
    let answer = match fastrand::u32(..100) < flaky {
        false => Answer::Ok,
        true => match fastrand::u8(..8) {
            0 => Answer::WrongBody,
            1 => Answer::Status(500),
            2 => Answer::Status(404),
            3 => Answer::RetryAfter(fastrand::u64(1..5)),
            4 => Answer::Hang,
            5 => Answer::Reset,
            6 => Answer::Slow,
            _ => Answer::Redirect,
        },
    };
    {
        let mut receivers = receivers.lock().unwrap();
        let true_ms = receivers.true_ms();
        receivers.arrivals.push(Arrival {
            at_ms: postback::clock::now_ms(),
            true_ms,
            id,
            url,
            body,
            answer,
        });
    }
    respond(answer).await
}

fn header(request: &Request<Incoming>, name: &str) -> Option<String> {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The answer, or an error that closes the connection without one (a reset).
async fn respond(answer: Answer) -> std::io::Result<Response<Full<Bytes>>> {
    // The server would stamp real time in `date`; the simulated one keeps a run replayable.
    let at = std::time::UNIX_EPOCH + Duration::from_millis(postback::clock::now_ms() as u64);
    let date = httpdate::fmt_http_date(at);
    let reply = |status: u16, body: &'static str| {
        Response::builder()
            .status(status)
            .header("date", date.as_str())
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .expect("a response")
    };
    Ok(match answer {
        Answer::Reset => return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        Answer::Ok => reply(200, "ok"),
        Answer::WrongBody => reply(200, "not what was asked"),
        Answer::Status(code) => reply(code, "no"),
        Answer::RetryAfter(secs) => {
            let mut r = reply(503, "busy");
            let value = secs.to_string().parse().expect("a header value");
            r.headers_mut().insert("retry-after", value);
            r
        }
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            reply(200, "too late")
        }
        Answer::Slow => {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(100..800))).await;
            reply(200, "ok")
        }
        Answer::Redirect => {
            let mut r = reply(302, "");
            let value = "http://127.0.0.1:1/elsewhere"
                .parse()
                .expect("a header value");
            r.headers_mut().insert("location", value);
            r
        }
    })
}
