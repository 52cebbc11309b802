//! The benchmark's receiver: a lean in-process HTTP sink that records, per `webhook-id`,
//! when each request arrived and what it was answered. Query parameters set its answer:
//! `fail=N` answers 500 to the first N requests of each id, `sleep_ms=N` waits first.
//! Like the peers' receiver, it reads what it needs in place, without copying the
//! headers or building a map of the query.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::Router;

/// Every request one id received: arrival times (wall clock, comparable with the due
/// times Redis computes on this machine) and whether each was answered 2xx.
#[derive(Debug, Default, Clone)]
pub struct Deliveries {
    pub arrivals: Vec<(SystemTime, bool)>,
}

impl Deliveries {
    /// When the first 2xx answer was given.
    pub fn delivered_at(&self) -> Option<SystemTime> {
        self.arrivals.iter().find(|(_, ok)| *ok).map(|(t, _)| *t)
    }

    /// Requests after the first 2xx: duplicates.
    pub fn duplicates(&self) -> usize {
        match self.arrivals.iter().position(|(_, ok)| *ok) {
            Some(i) => self.arrivals.len() - i - 1,
            None => 0,
        }
    }
}

#[derive(Clone, Default)]
pub struct Receiver {
    log: Arc<Mutex<Log>>,
}

#[derive(Default)]
struct Log {
    by_id: HashMap<String, Deliveries>,
    /// Each id's first 2xx answer, in order: waiting for a burst reads only what came
    /// since it last looked, so that the receiver's lock is held for little time while
    /// the notifications pour in.
    delivered: Vec<(String, SystemTime)>,
}

impl Receiver {
    /// Listens on `ip` (port chosen by the system); the address it got.
    pub async fn listen(&self, ip: &str) -> anyhow::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let app = Router::new().fallback(answer).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(addr)
    }

    /// The ids first answered 2xx since the `from`-th such answer, and when.
    pub fn delivered_since(&self, from: usize) -> Vec<(String, SystemTime)> {
        let log = self.log.lock().expect("receiver log");
        log.delivered.get(from..).unwrap_or_default().to_vec()
    }

    pub fn snapshot(&self) -> HashMap<String, Deliveries> {
        self.log.lock().expect("receiver log").by_id.clone()
    }

    pub fn reset(&self) {
        *self.log.lock().expect("receiver log") = Log::default();
    }
}

async fn answer(State(receiver): State<Receiver>, request: Request) -> StatusCode {
    let at = SystemTime::now();
    let (id, fail, sleep_ms) = read(&request);
    let ok = {
        let mut log = receiver.log.lock().expect("receiver log");
        let d = log.by_id.entry(id.clone()).or_default();
        let ok = d.arrivals.len() as u64 >= fail;
        let first = ok && d.delivered_at().is_none();
        d.arrivals.push((at, ok));
        if first {
            log.delivered.push((id, at));
        }
        ok
    };
    if let Some(ms) = sleep_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// A request's `webhook-id`, and its `fail` and `sleep_ms` parameters.
fn read(request: &Request) -> (String, u64, Option<u64>) {
    let id = request
        .headers()
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let query = |name: &str| {
        let pairs = request.uri().query().unwrap_or_default().split('&');
        pairs
            .filter_map(|pair| pair.split_once('='))
            .find_map(|(key, value)| (key == name).then(|| value.parse::<u64>().ok())?)
    };
    (id, query("fail").unwrap_or(0), query("sleep_ms"))
}
