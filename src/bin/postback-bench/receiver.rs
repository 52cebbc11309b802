//! The benchmark's receiver: a lean in-process HTTP sink that records, per `webhook-id`,
//! when each request arrived and what it was answered. Query parameters set its answer:
//! `fail=N` answers 500 to the first N requests of each id, `sleep_ms=N` waits first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
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

async fn answer(
    State(receiver): State<Receiver>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> StatusCode {
    let at = SystemTime::now();
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let fail: usize = q.get("fail").and_then(|v| v.parse().ok()).unwrap_or(0);
    let ok = {
        let mut log = receiver.log.lock().expect("receiver log");
        let d = log.by_id.entry(id.clone()).or_default();
        let ok = d.arrivals.len() >= fail;
        let first = ok && d.delivered_at().is_none();
        d.arrivals.push((at, ok));
        if first {
            log.delivered.push((id, at));
        }
        ok
    };
    if let Some(ms) = q.get("sleep_ms").and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}
