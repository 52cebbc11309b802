//! A steady producer: several tasks registering notifications through `POST /notify`
//! until stopped, recording every answer and how long it took, so that a test can
//! break things underneath and then check what was accepted. Like a careful producer,
//! it sends each registration with its own `Idempotency-Key` and retries a `503` with
//! the same key until it is accepted, as docs/operating.md advises: a registration whose
//! answer was lost (stored, but answered `503`) is then neither lost nor stored twice.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::instance::TOKEN;
use super::{Postback, Receiver};

/// How long a test waits for more answers: through a failover, or an instance catching
/// up after its store came back.
const MORE_WAIT: Duration = Duration::from_secs(30);

/// One answer to `POST /notify`.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The error code, when it is an error.
    pub code: Option<String>,
    /// The notification's id, when it was accepted.
    pub id: Option<String>,
    pub took: Duration,
    /// When the answer came.
    pub at: Instant,
}

pub struct Load {
    stop: Arc<AtomicBool>,
    /// Registrations answered `202` so far.
    accepted: Arc<AtomicUsize>,
    /// Answers so far, whatever they said (a refused registration is asked again).
    answered: Arc<AtomicUsize>,
    tasks: JoinSet<Vec<Answer>>,
}

impl Load {
    /// Starts `tasks` producers against `notify_url`, each pausing `pause` between its
    /// requests; `body(n)` is the n-th registration's body.
    pub fn start(
        notify_url: String,
        tasks: usize,
        pause: Duration,
        body: impl Fn(usize) -> Value + Send + Sync + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let body = Arc::new(body);
        let counter = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut set = JoinSet::new();
        for _ in 0..tasks {
            let (stop, body, counter) = (stop.clone(), body.clone(), counter.clone());
            let (client, url, accepted) = (client.clone(), notify_url.clone(), accepted.clone());
            let answered = answered.clone();
            set.spawn(async move {
                let mut answers = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let key = format!("load-{n}");
                    answers
                        .extend(register_counted(&client, &url, &body(n), &key, &answered).await);
                    if answers.last().is_some_and(|a| a.status == 202) {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    // The producer's pace, which the test chose.
                    super::pace(pause).await;
                }
                answers
            });
        }
        Self {
            stop,
            accepted,
            answered,
            tasks: set,
        }
    }

    /// How many registrations have been answered `202` so far.
    pub fn accepted_so_far(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Waits until `more` registrations than now have been accepted; whether they were
    /// within `MORE_WAIT`.
    pub async fn accepted_more(&self, more: usize) -> bool {
        let before = self.accepted_so_far();
        super::eventually(MORE_WAIT, || async {
            self.accepted_so_far() >= before + more
        })
        .await
    }

    /// Waits until `more` answers than now have come, whatever they said; whether they
    /// did within `MORE_WAIT`.
    pub async fn answered_more(&self, more: usize) -> bool {
        let before = self.answered.load(Ordering::Relaxed);
        super::eventually(MORE_WAIT, || async {
            self.answered.load(Ordering::Relaxed) >= before + more
        })
        .await
    }

    /// Stops the producers; every answer they got.
    pub async fn stop(mut self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        while let Some(answers) = self.tasks.join_next().await {
            all.extend(answers.unwrap());
        }
        all
    }
}

/// Registers `body` under `key`, retrying a `503` with the same key until it is
/// accepted; every answer, the last one the registration's outcome.
pub async fn register(client: &reqwest::Client, url: &str, body: &Value, key: &str) -> Vec<Answer> {
    register_counted(client, url, body, key, &AtomicUsize::new(0)).await
}

/// `register`, counting each answer in `answered` as it comes.
async fn register_counted(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    key: &str,
    answered: &AtomicUsize,
) -> Vec<Answer> {
    let mut answers = vec![register_once(client, url, body, key).await];
    answered.fetch_add(1, Ordering::Relaxed);
    while answers.last().unwrap().status == 503 {
        // A careful producer's backoff before it asks again.
        super::pace(Duration::from_millis(100)).await;
        answers.push(register_once(client, url, body, key).await);
        answered.fetch_add(1, Ordering::Relaxed);
    }
    answers
}

async fn register_once(client: &reqwest::Client, url: &str, body: &Value, key: &str) -> Answer {
    let started = Instant::now();
    let sent = client
        .post(url)
        .bearer_auth(TOKEN)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await;
    let (status, answer) = match sent {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
        Err(e) => panic!("POST /notify got no answer: {e}"),
    };
    Answer {
        status,
        code: answer["error"]["code"].as_str().map(str::to_string),
        id: answer["id"].as_str().map(str::to_string),
        took: started.elapsed(),
        at: Instant::now(),
    }
}

/// Starts a steady producer (8 tasks, each pausing `pause` between its requests) of
/// notifications due at once, at `receiver`'s `/r`, failing over two retries at most.
pub fn steady(pb: &Postback, receiver: &Receiver, pause: Duration) -> Load {
    let url = receiver.url("/r");
    Load::start(
        pb.url("/notify"),
        8,
        pause,
        move |n| json!({"url": url, "body": {"n": n}, "schedule": ["100ms", "200ms"]}),
    )
}

/// Waits until the receiver has had every accepted notification and `/stats` counts
/// exactly them as finished; returns how many arrived more than once.
pub async fn all_delivered(pb: &Postback, receiver: &Receiver, answers: &[Answer]) -> usize {
    let ids = accepted(answers);
    let done = super::eventually(Duration::from_secs(60), || async {
        let (_, stats) = pb.get("/stats").await;
        stats["finished"].as_u64() == Some(ids.len() as u64)
    })
    .await;
    let seen = receiver.per_id();
    let missing: Vec<_> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(
        done && missing.is_empty(),
        "{} accepted, {} never arrived (e.g. {:?}); stats {}\n{}",
        ids.len(),
        missing.len(),
        missing.first(),
        pb.get("/stats").await.1,
        pb.logs()
    );
    seen.values().filter(|n| **n > 1).count()
}

/// The answers that were not `202`, after checking that each is `503
/// store_unavailable` (what a producer gets while `store` is away).
pub fn refused<'a>(answers: &'a [Answer], store: &str) -> Vec<&'a Answer> {
    let refused: Vec<_> = answers.iter().filter(|a| a.status != 202).collect();
    let other = refused
        .iter()
        .find(|a| a.status != 503 || a.code.as_deref() != Some("store_unavailable"));
    assert!(
        other.is_none(),
        "while {store} is away registrations get 503 store_unavailable: {other:?}"
    );
    refused
}

/// The ids of the accepted registrations, each once.
pub fn accepted(answers: &[Answer]) -> Vec<String> {
    let ids: std::collections::BTreeSet<_> = answers.iter().filter_map(|a| a.id.clone()).collect();
    ids.into_iter().collect()
}
