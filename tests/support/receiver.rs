//! A real HTTP receiver that records every request and answers as the query string of
//! the callback URL says:
//! `fail=N` answers `status` (default 500) to the first N requests of each webhook-id,
//! with a `Retry-After: V` header when `retry_after=V`; `flaky=P` answers 500 to a random
//! P% of requests; `reply=TEXT` is the body of a success, and `ok_status=N` its status
//! (default 200), `reply_bytes=N` a success body of N bytes instead; `header=NAME:VALUE`
//! adds a header to every answer; `redirect=1` always answers 302; `sleep_ms=N` waits
//! before answering. A receiver set down (`set_down`) answers 503 to every request until
//! set up again: a merchant's outage.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    /// The same moment on the system clock, to compare with times postback reports.
    pub wall: SystemTime,
    pub path: String,
    /// The query string of the callback URL, if it had one.
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }

    pub fn id(&self) -> String {
        self.header("webhook-id").unwrap_or_default()
    }
}

#[derive(Default)]
struct Log {
    requests: Vec<Received>,
    per_id: HashMap<String, usize>,
    /// Requests being answered now, and the most there have been at once.
    in_progress: usize,
    max_in_progress: usize,
    down: bool,
}

/// Counts a request as in progress until dropped.
struct InProgress(Arc<Mutex<Log>>);

impl InProgress {
    fn start(log: &Arc<Mutex<Log>>) -> Self {
        let mut l = log.lock().unwrap();
        l.in_progress += 1;
        l.max_in_progress = l.max_in_progress.max(l.in_progress);
        Self(log.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.lock().unwrap().in_progress -= 1;
    }
}

#[derive(Clone)]
pub struct Receiver {
    pub port: u16,
    addr: std::net::SocketAddr,
    log: Arc<Mutex<Log>>,
}

impl Receiver {
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1").await
    }

    /// A receiver on another loopback address (`127.0.0.2`), i.e. another host.
    pub async fn start_on(ip: &str) -> Self {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let port = addr.port();
        let log = Arc::new(Mutex::new(Log::default()));
        let app = Router::new().fallback(answer).with_state(log.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { port, addr, log }
    }

    /// The callback URL for `path_and_query` (e.g. `/cb?fail=2`).
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{}", self.addr, path_and_query)
    }

    /// Down (`true`: every request is answered 503) or up again.
    pub fn set_down(&self, down: bool) {
        self.log.lock().unwrap().down = down;
    }

    pub fn requests(&self) -> Vec<Received> {
        self.log.lock().unwrap().requests.clone()
    }

    pub fn requests_for(&self, id: &str) -> Vec<Received> {
        self.requests()
            .into_iter()
            .filter(|r| r.id() == id)
            .collect()
    }

    /// How many requests arrived for each webhook-id.
    pub fn per_id(&self) -> HashMap<String, usize> {
        self.log.lock().unwrap().per_id.clone()
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().requests.len()
    }

    /// The most requests it has been answering at once.
    pub fn max_concurrent(&self) -> usize {
        self.log.lock().unwrap().max_in_progress
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        super::eventually(timeout, || async { self.count() >= n }).await
    }
}

async fn answer(
    state: State<Arc<Mutex<Log>>>,
    Query(q): Query<HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let extra = q.get("header").cloned();
    let mut response = answer_as_asked(state, Query(q), uri, headers, body).await;
    if let Some((name, value)) = extra.as_deref().and_then(|h| h.split_once(':')) {
        let name = axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap();
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

async fn answer_as_asked(
    State(log): State<Arc<Mutex<Log>>>,
    Query(q): Query<HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_progress = InProgress::start(&log);
    let received = Received {
        at: Instant::now(),
        wall: SystemTime::now(),
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        headers,
        body,
    };
    let (nth, down) = {
        let mut log = log.lock().unwrap();
        let n = log.per_id.entry(received.id()).or_default();
        *n += 1;
        let nth = *n;
        log.requests.push(received);
        (nth, log.down)
    };
    if down {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    if let Some(ms) = q.get("sleep_ms") {
        super::hold(Duration::from_millis(ms.parse().unwrap())).await;
    }
    if q.contains_key("redirect") {
        return (StatusCode::FOUND, [("location", "/elsewhere")], "moved").into_response();
    }
    let fail: usize = q.get("fail").map_or(0, |f| f.parse().unwrap());
    let flaky: u8 = q.get("flaky").map_or(0, |p| p.parse().unwrap());
    if fastrand::u8(0..100) < flaky {
        return (StatusCode::INTERNAL_SERVER_ERROR, "flaky").into_response();
    }
    if nth <= fail {
        let status = StatusCode::from_u16(q.get("status").map_or(500, |s| s.parse().unwrap()));
        let mut response = (status.unwrap(), "failure").into_response();
        if let Some(v) = q.get("retry_after") {
            response
                .headers_mut()
                .insert("retry-after", v.parse().unwrap());
        }
        return response;
    }
    let ok = q.get("ok_status").map_or(200, |s| s.parse().unwrap());
    let reply = match q.get("reply_bytes") {
        Some(n) => "x".repeat(n.parse().unwrap()),
        None => q.get("reply").cloned().unwrap_or_else(|| "ok".into()),
    };
    (StatusCode::from_u16(ok).unwrap(), reply).into_response()
}
