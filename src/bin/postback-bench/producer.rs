//! The benchmark's producer: registers notifications through `POST /notify` (or
//! `POST /notify/batch`), or publishes events through `POST /events`, with many requests
//! in flight, and keeps, per notification, when it was sent and when it is due.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use futures_util::stream::{self, StreamExt};
use reqwest::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::processes::TOKEN;

/// One registration: its id, when the request was sent and answered, and its first due
/// time.
#[derive(Debug, Clone)]
pub struct Registered {
    pub id: String,
    pub sent: SystemTime,
    pub answered: SystemTime,
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
        let answer: Answer = read_answer(response, 202).await?;
        answer.registered(sent)
    }

    /// Registers `bodies` with one `POST /notify/batch` to the next instance in turn.
    /// The request is written from the bodies as they are, and the answer read into the
    /// few fields kept, so that the producer's own work stays small beside postback's.
    async fn register_batch(&self, bodies: &[Value]) -> anyhow::Result<Vec<Registered>> {
        let sent = SystemTime::now();
        let request = serde_json::to_vec(&BatchRequest { items: bodies })?;
        let response = self
            .client
            .post(format!("{}/batch", self.next_url()))
            .bearer_auth(TOKEN)
            .header(CONTENT_TYPE, "application/json")
            .body(request)
            .send()
            .await?;
        let answer: BatchAnswer = read_answer(response, 200).await?;
        answer
            .items
            .iter()
            .map(|item| item.registered(sent))
            .collect()
    }

    /// Posts `body` to `path` of the first instance with the benchmark's token: the
    /// answer, if its status is `expected`.
    pub async fn call(&self, path: &str, body: &Value, expected: u16) -> anyhow::Result<Value> {
        let base = self.urls[0].trim_end_matches("/notify");
        let response = self
            .client
            .post(format!("{base}{path}"))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await?;
        read_answer(response, expected).await
    }

    /// Publishes every event with `in_flight` requests at a time: the notifications they
    /// made, and how long it took from the first request to the last answer.
    pub async fn publish_all(
        &self,
        events: Vec<Value>,
        in_flight: usize,
    ) -> anyhow::Result<(Vec<Registered>, Duration)> {
        let start = SystemTime::now();
        let results: Vec<anyhow::Result<Vec<Registered>>> = stream::iter(events)
            .map(|event| async move {
                let sent = SystemTime::now();
                let answer: EventAnswer =
                    serde_json::from_value(self.call("/events", &event, 202).await?)?;
                answer
                    .deliveries
                    .iter()
                    .map(|d| d.registered(sent))
                    .collect()
            })
            .buffer_unordered(in_flight)
            .collect()
            .await;
        let took = start.elapsed().unwrap_or_default();
        let mut all = Vec::new();
        for made in results {
            all.extend(made?);
        }
        Ok((all, took))
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

#[derive(Serialize)]
struct BatchRequest<'a> {
    items: &'a [Value],
}

#[derive(Deserialize)]
struct EventAnswer {
    deliveries: Vec<DeliveryAnswer>,
}

/// What the producer reads of an event's delivery.
#[derive(Deserialize)]
struct DeliveryAnswer {
    notification: Option<String>,
    state: Option<String>,
    next_attempt_at: Option<String>,
    error: Option<Value>,
}

impl DeliveryAnswer {
    fn registered(&self, sent: SystemTime) -> anyhow::Result<Registered> {
        let answer = Answer {
            id: self.notification.clone(),
            state: self.state.clone(),
            next_attempt_at: self.next_attempt_at.clone(),
            error: self.error.clone(),
        };
        answer.registered(sent)
    }
}

#[derive(Deserialize)]
struct BatchAnswer {
    items: Vec<Answer>,
}

/// What the producer reads of a registration's answer (`POST /notify`'s, or a batch
/// item's).
#[derive(Deserialize)]
struct Answer {
    id: Option<String>,
    state: Option<String>,
    next_attempt_at: Option<String>,
    error: Option<Value>,
}

/// The answer's body, read as `T` if its status is `expected`.
async fn read_answer<T: for<'de> Deserialize<'de>>(
    response: reqwest::Response,
    expected: u16,
) -> anyhow::Result<T> {
    let status = response.status();
    let body = response.bytes().await?;
    if status.as_u16() != expected {
        bail!("answered {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(serde_json::from_slice(&body)?)
}

impl Answer {
    fn registered(&self, sent: SystemTime) -> anyhow::Result<Registered> {
        if let Some(error) = &self.error {
            bail!("refused: {error}");
        }
        // One waiting behind its ordering key has no due time of its own yet: its send
        // time.
        let due = match &self.next_attempt_at {
            None if self.state.as_deref() == Some("scheduled") => sent,
            at => at
                .as_deref()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
                .context("no next_attempt_at")?,
        };
        Ok(Registered {
            id: self.id.clone().context("no id")?,
            sent,
            answered: SystemTime::now(),
            due,
        })
    }
}
