//! The benchmark's producer: registers notifications through `POST /notify` (or
//! `POST /notify/batch`) with many requests in flight, and keeps, per notification, when
//! it was sent and when it is due.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use futures_util::stream::{self, StreamExt};
use serde_json::Value;

use crate::processes::TOKEN;

/// One registration: its id, when the request was sent, and its first due time.
#[derive(Debug, Clone)]
pub struct Registered {
    pub id: String,
    pub sent: SystemTime,
    pub due: SystemTime,
}

/// Registers through one or more instances, each registration to the next in turn.
#[derive(Clone)]
pub struct Producer {
    client: reqwest::Client,
    urls: Arc<Vec<String>>,
    turn: Arc<AtomicUsize>,
}

impl Producer {
    pub fn new(postback_urls: &[&str]) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .tcp_nodelay(true)
            .build()?;
        Ok(Self {
            client,
            urls: Arc::new(
                postback_urls
                    .iter()
                    .map(|u| format!("{u}/notify"))
                    .collect(),
            ),
            turn: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn next_url(&self) -> &str {
        &self.urls[self.turn.fetch_add(1, Ordering::Relaxed) % self.urls.len()]
    }

    /// Posts one registration to the next instance in turn.
    async fn post(&self, body: &Value) -> reqwest::Result<reqwest::Response> {
        self.client
            .post(self.next_url())
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
    }

    /// Posts one registration; only the answer's status.
    pub async fn status_of(&self, body: &Value) -> anyhow::Result<u16> {
        Ok(self.post(body).await?.status().as_u16())
    }

    pub async fn register(&self, body: &Value) -> anyhow::Result<Registered> {
        let sent = SystemTime::now();
        let response = self.post(body).await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        if status.as_u16() != 202 {
            bail!("POST /notify answered {status}: {answer}");
        }
        registered(&answer, sent)
    }

    /// Registers `bodies` with one `POST /notify/batch` to the next instance in turn.
    async fn register_batch(&self, bodies: &[Value]) -> anyhow::Result<Vec<Registered>> {
        let sent = SystemTime::now();
        let response = self
            .client
            .post(format!("{}/batch", self.next_url()))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({ "items": bodies }))
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        if status.as_u16() != 200 {
            bail!("POST /notify/batch answered {status}: {answer}");
        }
        let items = answer["items"].as_array().context("no items")?;
        items.iter().map(|item| registered(item, sent)).collect()
    }

    /// Registers every body with `in_flight` requests at a time; the registrations in
    /// order of their answers, and how long it took from the first request to the last
    /// answer.
    pub async fn register_all(
        &self,
        bodies: Vec<Value>,
        in_flight: usize,
    ) -> anyhow::Result<(Vec<Registered>, Duration)> {
        let start = SystemTime::now();
        let results: Vec<anyhow::Result<Registered>> = stream::iter(bodies)
            .map(|body| async move { self.register(&body).await })
            .buffer_unordered(in_flight)
            .collect()
            .await;
        let took = start.elapsed().unwrap_or_default();
        Ok((results.into_iter().collect::<anyhow::Result<_>>()?, took))
    }

    /// As `register_all`, but `per_request` at a time through `POST /notify/batch`
    /// (`per_request` 0: one at a time through `POST /notify`).
    pub async fn register_in_batches(
        &self,
        bodies: Vec<Value>,
        in_flight: usize,
        per_request: usize,
    ) -> anyhow::Result<(Vec<Registered>, Duration)> {
        if per_request == 0 {
            return self.register_all(bodies, in_flight).await;
        }
        let start = SystemTime::now();
        let results: Vec<anyhow::Result<Vec<Registered>>> =
            stream::iter(bodies.chunks(per_request))
                .map(|chunk| self.register_batch(chunk))
                .buffer_unordered(in_flight)
                .collect()
                .await;
        let took = start.elapsed().unwrap_or_default();
        let mut all = Vec::with_capacity(bodies.len());
        for batch in results {
            all.extend(batch?);
        }
        Ok((all, took))
    }
}

/// A registration from its answer (`POST /notify`'s, or a batch item's).
fn registered(answer: &Value, sent: SystemTime) -> anyhow::Result<Registered> {
    if let Some(error) = answer.get("error") {
        bail!("refused: {error}");
    }
    // One waiting behind its ordering key has no due time of its own yet: its send time.
    let due = match &answer["next_attempt_at"] {
        Value::Null if answer["state"] == "scheduled" => sent,
        at => at
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .context("no next_attempt_at")?,
    };
    Ok(Registered {
        id: answer["id"].as_str().context("no id")?.to_string(),
        sent,
        due,
    })
}
