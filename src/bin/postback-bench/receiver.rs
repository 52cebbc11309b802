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
    log: Arc<Mutex<HashMap<String, Deliveries>>>,
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

    /// How many of `ids` got a 2xx answer, and when the last of those came.
    pub fn delivered_among(&self, ids: &[&str]) -> (usize, Option<SystemTime>) {
        let log = self.log.lock().expect("receiver log");
        let times = ids.iter().filter_map(|id| log.get(*id)?.delivered_at());
        times.fold((0, None), |(n, last), t| (n + 1, last.max(Some(t))))
    }

    pub fn snapshot(&self) -> HashMap<String, Deliveries> {
        self.log.lock().expect("receiver log").clone()
    }

    pub fn reset(&self) {
        self.log.lock().expect("receiver log").clear();
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
        let d = log.entry(id).or_default();
        let ok = d.arrivals.len() >= fail;
        d.arrivals.push((at, ok));
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
