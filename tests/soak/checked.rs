//! The simulation's promises on the real stores. The simulation (`tests/simulation`)
//! cannot reach the Redis and Postgres stores' scripts and statements, leases between
//! instances or a process stopped mid-write; this soak runs a randomized workload of the
//! same kind against two instances sharing a real store, kills (`kill -9`) and stops
//! (`SIGSTOP`, then `SIGCONT`) them at random, and holds the run to the same checker
//! (`tests/simulation/checker.rs`): every accepted notification finished as its attempts
//! say, with the producer's bytes at its URL, none early, ordering keys in order, a
//! second delivery only where a fault may have lost the first's outcome, idempotency
//! keys answering their first notification.
//!
//! Not deterministic: a failure prints what the run did and its seed for the workload's
//! draws, but the processes' timing is the machine's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::checker::{self, Answer, Arrival, Model, Registered};
use crate::support::instance::TOKEN;
use crate::support::{Backend, Postback, Receiver};

/// Settings for quick recovery: a killed instance's claims come back after `LEASE`, its
/// shards are taken over within three quarters of `SHARD_LEASE`.
const SETTINGS: &[(&str, &str)] = &[
    ("POSTBACK_DELIVERY_TIMEOUT", "1s"),
    ("POSTBACK_DELIVERY_MAX_TIMEOUT", "1s"),
    ("POSTBACK_DELIVERY_LEASE", "6s"),
    ("POSTBACK_STORE_SHARD_LEASE", "2s"),
];
/// How long after a fault ended its effects may last: a claim's lease and a shard's.
const RECOVERY: Duration = Duration::from_secs(8);
/// How late an attempt may be on this machine where nothing held it back.
const LATE_AFTER_MS: i64 = 3_000;
const PRODUCERS: usize = 3;

/// The instances of the run, by slot; `None` while one is being restarted.
type Fleet = Arc<Mutex<Vec<Option<Arc<Postback>>>>>;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs the workload for `soak` on `backend` with faults, then checks the promises.
pub async fn promises_hold(backend: Backend, soak: Duration) {
    let seed = fastrand::u64(..);
    let receiver = Receiver::start().await;
    let fleet: Fleet = Arc::new(Mutex::new(vec![
        Some(Arc::new(backend.postback(SETTINGS).await)),
        Some(Arc::new(backend.postback(SETTINGS).await)),
    ]));
    let model = Arc::new(Mutex::new(Model {
        late_after_ms: Some(LATE_AFTER_MS),
        ..Model::default()
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let producer = Producer {
                name: p,
                fleet: fleet.clone(),
                model: model.clone(),
                receiver: receiver.clone(),
                next: next.clone(),
                rng: fastrand::Rng::with_seed(seed.wrapping_add(p as u64)),
                client: reqwest::Client::builder()
                    .timeout(Duration::from_secs(3))
                    .build()
                    .unwrap(),
            };
            tokio::spawn(producer.run(stop.clone()))
        })
        .collect();

    let mut faults = Vec::new();
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = std::time::Instant::now();
    // Each fault followed by a quiet spell longer than its effects last, in which
    // lateness and second deliveries are held to the promises unexcused.
    let mut quiet = Duration::from_millis(rng.u64(2_000..4_000));
    while started.elapsed() + quiet + RECOVERY < soak {
        crate::support::hold(quiet).await;
        faults.push(fault(&backend, &fleet, &model, &mut rng).await);
        quiet = RECOVERY + Duration::from_millis(rng.u64(1_000..3_000));
    }
    crate::support::hold(soak.saturating_sub(started.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.unwrap();
    }

    let pb = fleet.lock().unwrap()[0].clone().expect("an instance");
    let mut model = Arc::try_unwrap(model)
        .map_err(|_| "the producers are done")
        .unwrap()
        .into_inner()
        .unwrap();
    let finished = read_back(&pb, &mut model).await;
    let arrivals = arrivals(&receiver);
    let context = format!(
        "seed {seed}; {} accepted of {} asked ({} unanswered), {} arrivals; faults {faults:?}",
        model.accepted.len(),
        model.asked,
        model.unanswered,
        arrivals.len()
    );
    eprintln!("checked soak: {context}");
    assert!(finished, "every accepted notification finished: {context}");
    let verdict = checker::after_step(&mut model, &arrivals).and_then(|()| {
        model.arrivals = arrivals;
        checker::at_the_end(&model)
    });
    if let Err(broken) = verdict {
        panic!("{broken}\n{context}\n{}", pb.logs());
    }
    assert!(model.accepted.len() > 100, "the workload ran: {context}");
    let undisturbed = model
        .arrivals
        .iter()
        .filter(|a| {
            !model
                .disturbances
                .iter()
                .any(|d| (d - a.at_ms).abs() < 1_000)
        })
        .count();
    assert!(
        undisturbed > 50,
        "{undisturbed} arrivals were checked with nothing to excuse them: {context}"
    );
}

/// Kills or stops one instance at random and brings it back; what it did.
async fn fault(
    backend: &Backend,
    fleet: &Fleet,
    model: &Mutex<Model>,
    rng: &mut fastrand::Rng,
) -> String {
    let slot = rng.usize(..2);
    let began = now_ms();
    let what = match rng.bool() {
        true => {
            let victim = fleet.lock().unwrap()[slot].take();
            if let Some(victim) = victim {
                victim.signal("KILL");
            }
            let restarted = Arc::new(backend.postback(SETTINGS).await);
            fleet.lock().unwrap()[slot] = Some(restarted);
            format!("kill -9 of instance {slot}")
        }
        false => {
            let stopped = fleet.lock().unwrap()[slot].clone();
            let pause = Duration::from_millis(rng.u64(500..3_000));
            if let Some(pb) = stopped {
                pb.signal("STOP");
                crate::support::hold(pause).await;
                pb.signal("CONT");
            }
            format!("SIGSTOP of instance {slot} for {pause:?}")
        }
    };
    // The fleet may be disturbed by it until its effects have passed.
    let until = now_ms() + RECOVERY.as_millis() as i64;
    model.lock().unwrap().disturbed_over(began, until);
    what
}

/// One producer: registrations to the receiver, each telling it how many requests to
/// fail (`fail=N`), some with ordering keys, some with idempotency keys (and retried
/// with them, on an instance drawn again, when unanswered), in the producer's own bytes.
struct Producer {
    /// Which producer it is: its ordering keys are its own, so that their order is the
    /// order it registered them in.
    name: usize,
    fleet: Fleet,
    model: Arc<Mutex<Model>>,
    receiver: Receiver,
    next: Arc<AtomicUsize>,
    rng: fastrand::Rng,
    client: reqwest::Client,
}

impl Producer {
    async fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            self.register(n).await;
            crate::support::pace(Duration::from_millis(self.rng.u64(20..60))).await;
        }
    }

    async fn register(&mut self, n: usize) {
        let fails = [0, 0, 0, 1, 2, 9][self.rng.usize(..6)];
        let tiers = self.rng.usize(1..4);
        let schedule: Vec<String> = (0..tiers)
            .map(|_| format!("{}ms", self.rng.u64(100..600)))
            .collect();
        let mut request = json!({
            "url": self.receiver.url(&format!("/n/{n}?fail={fails}")),
            "schedule": schedule,
            "delay": format!("{}ms", [0, 0, 300, 1_500][self.rng.usize(..4)]),
            "timeout": "1s",
        });
        if self.rng.u8(..5) == 0 {
            request["ordering_key"] = json!(format!("o-{}-{}", self.name, self.rng.u8(..2)));
        }
        let key = (self.rng.u8(..3) == 0).then(|| format!("k-{n}"));
        let body = match self.rng.u8(..3) {
            0 => format!("{{\"n\":{n}}}"),
            1 => {
                format!("{{ \"amount\": 10.10, \"n\" : {n},\n \"big\": 12345678901234567890123 }}")
            }
            _ => format!("{{\"n\":{n},\"note\":\"caf\\u00e9 ☕\",\"e\":1E+2,\"z\":-0}}"),
        };
        let text = format!("{{\"body\":{body},{}", &request.to_string()[1..]);
        let asked = now_ms();
        for attempt in 0..3 {
            let (status, answer) = self.post(&text, key.as_deref(), attempt).await;
            let registered = Registered::new("default", &request, &body, key.clone(), asked);
            let answered = self
                .model
                .lock()
                .unwrap()
                .answered_registration(registered, status, &answer);
            if let Err(broken) = answered {
                panic!("{broken}: {text}");
            }
            if status == 202 || key.is_none() {
                return;
            }
        }
    }

    /// `POST /notify` on one of the instances (another on each retry): its status and
    /// answer, `503` when none came.
    async fn post(&mut self, text: &str, key: Option<&str>, attempt: usize) -> (u16, Value) {
        let pb = {
            let fleet = self.fleet.lock().unwrap();
            fleet[(attempt + self.rng.usize(..2)) % fleet.len()].clone()
        };
        let Some(pb) = pb else {
            return (503, Value::Null);
        };
        let mut asking = self
            .client
            .post(pb.url("/notify"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(text.to_string());
        if let Some(key) = key {
            asking = asking.header("idempotency-key", key);
        }
        match asking.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (503, Value::Null),
        }
    }
}

/// Waits until every accepted notification is finished, reading each back into
/// `model.ended`; whether all finished.
async fn read_back(pb: &Postback, model: &mut Model) -> bool {
    let mut pending: Vec<String> = model.accepted.keys().cloned().collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !pending.is_empty() && std::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for id in pending {
            let view = pb.notification(&id).await;
            match view["state"].as_str() {
                Some("delivered" | "dead" | "cancelled") => {
                    model.ended.insert(id, view);
                }
                _ => still.push(id),
            }
        }
        pending = still;
        if !pending.is_empty() {
            // The pace of reading back what is not finished yet (up to the deadline).
            crate::support::pace(Duration::from_millis(500)).await;
        }
    }
    pending.is_empty()
}

/// What the receiver got, each request with the answer it gave (`fail=N`: the first N
/// requests of a notification answered 500).
fn arrivals(receiver: &Receiver) -> Vec<Arrival> {
    let mut nth = std::collections::HashMap::<String, usize>::new();
    receiver
        .requests()
        .into_iter()
        .map(|r| {
            let id = r.id();
            let n = nth.entry(id.clone()).or_default();
            *n += 1;
            let query = r.query.clone().unwrap_or_default();
            let fails: usize = query
                .strip_prefix("fail=")
                .and_then(|f| f.parse().ok())
                .unwrap_or(0);
            let at_ms = r.wall.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
            Arrival {
                at_ms,
                true_ms: at_ms,
                url: receiver.url(&format!("{}?{query}", r.path)),
                body: r.body.clone(),
                answer: if *n <= fails {
                    Answer::Status(500)
                } else {
                    Answer::Ok
                },
                id,
            }
        })
        .collect()
}
