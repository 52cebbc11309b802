//! One run of the simulation: the world an instance lives in (its disk, its receivers,
//! the wall clock, the time the world keeps), the workload the seed draws, step by step
//! and fault by fault, and the instance itself, built again after every crash or drain on
//! what its disk kept. Every step and every answer is written in the trace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use http::{Method, Request};
use postback::app::{App, Seams};
use postback::clock::Simulated;
use postback::config::Config;
use postback::store::{EmbeddedStore, MemoryDisk, Store};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tower::ServiceExt;

use crate::checker::{self, Model, QuotaSpan, Registered, Subscription};
use crate::network::{self, Receivers, SimNetwork, RECEIVERS};

/// Steps of the workload, before everything is healed and drained.
const STEPS: usize = 120;
/// The wall clock when a run starts, ms (2026-01-01).
pub const START_MS: i64 = 1_767_225_600_000;
/// How long, at most, the final drain waits for every notification to finish.
const DRAIN_FOR: Duration = Duration::from_secs(6 * 3600);

/// The tokens of the run: the operator's (every tenant), and one per tenant.
const OPS: &str = "sim-ops";
const TENANTS: [(&str, &str); 3] = [("default", OPS), ("shop-a", "sim-a"), ("shop-b", "sim-b")];
/// The tenant under a quota, whose notifications may wait their turn; its quotas (one
/// for each incarnation, as an operator changes it and restarts) and their spacing, ms.
const QUOTA_TENANT: usize = 2;
const QUOTAS: [(&str, i64); 3] = [("2/s", 500), ("5/s", 200), ("20/s", 50)];
/// The topics events are published on, and what subscriptions take.
const TOPICS: [&str; 3] = ["payment.succeeded", "payment.failed", "order.created"];
const PATTERNS: [&[&str]; 3] = [
    &["payment.*"],
    &["payment.succeeded"],
    &["order.created", "payment.failed"],
];

/// What a run came to.
pub struct Run {
    pub verdict: Result<(), String>,
    pub trace: Vec<String>,
    pub faults: BTreeMap<&'static str, u64>,
    /// Notifications answered `202`, and requests the receivers got.
    pub accepted: u64,
    pub arrivals: u64,
}

/// Runs the seed: its workload, then everything healed and drained, checked after every
/// step and at the end.
pub fn run(seed: u64) -> Run {
    let mut world = World::new(seed);
    let verdict = world.live();
    let arrivals = world.receivers.lock().unwrap().arrivals.len() as u64;
    Run {
        verdict,
        trace: world.trace,
        faults: world.faults,
        accepted: world.model.accepted.len() as u64,
        arrivals,
    }
}

/// How an incarnation of the instance ended.
enum Ended {
    /// Killed: its tasks dropped, its disk as committed.
    Crashed,
    /// Stopped gracefully.
    Drained,
    /// The workload is done and everything finished.
    Done,
}

struct World {
    seed: u64,
    rng: fastrand::Rng,
    disk: MemoryDisk,
    receivers: Arc<Mutex<Receivers>>,
    /// The wall clock at the start of the next incarnation, ms.
    wall_ms: i64,
    /// The world's time (no jumps, no stalls) at the start of the next incarnation, ms.
    true_ms: i64,
    incarnations: u64,
    steps: usize,
    model: Model,
    trace: Vec<String>,
    faults: BTreeMap<&'static str, u64>,
}

impl World {
    fn new(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut receivers = Receivers::default();
        let mut model = Model {
            quota_tenant: TENANTS[QUOTA_TENANT].0.to_string(),
            ..Model::default()
        };
        for (n, flaky) in receivers.flakiness.iter_mut().enumerate() {
            *flaky = [0, 0, 20, 60][rng.usize(..4)];
            if *flaky > 0 {
                model.unsteady.insert(network::url(n as u16, ""));
            }
        }
        Self {
            seed,
            rng,
            disk: MemoryDisk::new(),
            receivers: Arc::new(Mutex::new(receivers)),
            wall_ms: START_MS,
            true_ms: START_MS,
            incarnations: 0,
            steps: 0,
            model,
            trace: Vec::new(),
            faults: BTreeMap::new(),
        }
    }

    /// Runs incarnations of the instance until the workload is done and drained.
    fn live(&mut self) -> Result<(), String> {
        // Read once, before any seeded draw (making its file draws from the generator).
        configs();
        loop {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a runtime");
            let ended = runtime.block_on(self.incarnation())?;
            // Dropping the runtime drops every task of the instance: a crash.
            drop(runtime);
            match ended {
                Ended::Done => return checker::at_the_end(&self.model),
                Ended::Crashed | Ended::Drained => {
                    let down = 1_000 + self.rng.i64(0..5_000);
                    self.wall_ms += down;
                    self.true_ms += down;
                    self.disk = self.disk.crashed();
                }
            }
        }
    }

    /// One incarnation: built on the disk as it is, with a quota drawn for it, run until
    /// a fault ends it.
    async fn incarnation(&mut self) -> Result<Ended, String> {
        self.incarnations += 1;
        let epoch = UNIX_EPOCH + Duration::from_millis(self.wall_ms as u64);
        let _clock = Simulated::install(epoch, self.seed.wrapping_mul(31) + self.incarnations);
        self.receivers.lock().unwrap().started = Some((self.true_ms, tokio::time::Instant::now()));
        let quota = self.rng.usize(..QUOTAS.len());
        self.model.quotas.push(QuotaSpan {
            true_ms: self.true_ms,
            interval_ms: QUOTAS[quota].1,
        });
        let config = &configs()[quota];
        let store = EmbeddedStore::open_in_memory(self.disk.clone(), &config.settings.retention)
            .map_err(|e| format!("the store did not open: {e:#}"))?;
        let seams = Seams {
            store: Some(Arc::new(store) as Arc<dyn Store>),
            network: Some(Arc::new(SimNetwork {
                receivers: self.receivers.clone(),
            })),
            in_process: true,
        };
        let app = App::build_with(config.clone(), seams)
            .await
            .map_err(|e| format!("the instance did not start: {e:#}"))?;
        let api = Api(app.router());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(app.run(async {
            let _ = stopped.await;
        }));
        // What was due while no instance ran is late by that long.
        self.model.disturbed(self.wall_ms);
        self.note(format!(
            "incarnation {} at {}, {}'s quota {}",
            self.incarnations, self.wall_ms, TENANTS[QUOTA_TENANT].0, QUOTAS[quota].0
        ));
        let ended = self.workload(&api).await?;
        match ended {
            Ended::Drained => {
                // The API is called while the shutdown drains.
                let _ = stop.send(());
                self.step(&api).await?;
                let _ = running.await;
            }
            _ => drop(stop),
        }
        self.wall_ms = postback::clock::now_ms();
        self.true_ms = self.receivers.lock().unwrap().true_ms();
        Ok(ended)
    }

    /// Steps until a fault ends the incarnation or the workload is done (then drained).
    async fn workload(&mut self, api: &Api) -> Result<Ended, String> {
        while self.steps < STEPS {
            self.steps += 1;
            match self.rng.u32(..100) {
                0..2 => return Ok(self.fault("crash", Ended::Crashed)),
                2..3 => return Ok(self.fault("drain", Ended::Drained)),
                3..4 => return Ok(self.crash_mid_request(api).await),
                4..6 => self.clock_jump(),
                6..7 => self.clock_stall(),
                7..11 => self.receiver_down_or_up(),
                _ => self.step(api).await?,
            }
            let arrivals = self.receivers.lock().unwrap().arrivals.clone();
            for a in &arrivals[self.model.checked..] {
                let line = format!(
                    "arrived {} at {} ({}): {:?}",
                    a.id,
                    a.url,
                    a.true_ms - START_MS,
                    a.answer
                );
                self.note(line);
            }
            checker::after_step(&mut self.model, &arrivals)?;
        }
        self.heal(api).await?;
        Ok(Ended::Done)
    }

    fn fault(&mut self, kind: &'static str, ended: Ended) -> Ended {
        *self.faults.entry(kind).or_default() += 1;
        self.model.disturbed(postback::clock::now_ms());
        self.note(format!("fault: {kind}"));
        ended
    }

    /// A registration or an event is asked for, and the instance crashes before (or
    /// after) it is answered: whatever of it was committed stays.
    async fn crash_mid_request(&mut self, api: &Api) -> Ended {
        let (path, text) = match self.rng.bool() {
            true => {
                let (_, request, body) = self.draw();
                ("/notify", with_body(&request, &body))
            }
            false => {
                let topic = TOPICS[self.rng.usize(..TOPICS.len())];
                let body = self.draw_body();
                ("/events", with_body(&json!({ "topic": topic }), &body))
            }
        };
        let tenant = self.rng.usize(..TENANTS.len());
        let yields = self.rng.usize(..40);
        let router = api.0.clone();
        let token = TENANTS[tenant].1;
        let asked = text.clone();
        tokio::spawn(async move {
            Api(router)
                .call(token, Method::POST, path, Some(&asked), &[])
                .await
        });
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        self.model.unanswered += 1;
        self.note(format!(
            "{path} as {} {text}, then after {yields} yields:",
            TENANTS[tenant].0
        ));
        self.fault("crash_mid_request", Ended::Crashed)
    }

    fn clock_jump(&mut self) {
        let ms = [-30_000, -2_000, 2_000, 60_000][self.rng.usize(..4)];
        *self.faults.entry("clock_jump").or_default() += 1;
        // A lease read across the jump may look expired (a second send) or young (a
        // late one): the jump disturbs both sides of it.
        self.model.disturbed(postback::clock::now_ms());
        Simulated::jump(ms);
        let after = postback::clock::now_ms();
        // Back: what was kept in the clock's time (a quota's next send time, a lease's
        // end) lies that much further ahead, so the step disturbs as long as it was.
        self.model.disturbed_over(after, after + (-ms).max(0));
        let now = self.receivers.lock().unwrap().true_ms();
        self.model.clock_moves.push(now);
        self.note(format!("clock jumps {ms} ms"));
    }

    fn clock_stall(&mut self) {
        let ms = [500, 3_000, 15_000][self.rng.usize(..3)];
        *self.faults.entry("clock_stall").or_default() += 1;
        self.model.disturbed(postback::clock::now_ms());
        Simulated::stall(Duration::from_millis(ms));
        let now = self.receivers.lock().unwrap().true_ms();
        self.model.clock_moves.extend([now, now + ms as i64]);
        self.note(format!("clock stalls for {ms} ms"));
    }

    fn receiver_down_or_up(&mut self) {
        let n = self.rng.u16(..RECEIVERS);
        let mut receivers = self.receivers.lock().unwrap();
        let down = &mut receivers.down[usize::from(n)];
        *down = !*down;
        let now_down = *down;
        drop(receivers);
        if now_down {
            *self.faults.entry("receiver_down").or_default() += 1;
            self.model.unsteady.insert(network::url(n, ""));
        }
        self.model.disturbed(postback::clock::now_ms());
        self.note(format!(
            "receiver {n} {}",
            if now_down { "down" } else { "up" }
        ));
    }

    /// One step of the workload, drawn by the seed.
    async fn step(&mut self, api: &Api) -> Result<(), String> {
        self.model.true_now_ms = self.receivers.lock().unwrap().true_ms();
        match self.rng.u32(..100) {
            0..28 => self.register(api).await,
            28..32 => self.register_batch(api).await,
            32..36 => self.subscribe(api).await,
            36..38 => self.unsubscribe(api).await,
            38..46 => self.publish(api).await,
            46..66 => {
                let ms = [10, 200, 1_000, 5_000, 30_000][self.rng.usize(..5)];
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.note(format!("{ms} ms pass"));
                Ok(())
            }
            66..71 => self.cancel(api).await,
            71..76 => {
                self.again(api, "/dead-letters/{}/replay", &[200, 404, 409])
                    .await
            }
            76..80 => {
                self.again(api, "/notifications/{}/resend", &[200, 409])
                    .await
            }
            80..84 => self.attempt_now(api).await,
            84..88 => self.pause_or_resume(api).await,
            88..94 => self.as_another_tenant(api).await,
            _ => self.list_as_a_tenant(api).await,
        }
    }

    /// A notification's settings, drawn by the seed: a receiver, a schedule, a delay,
    /// perhaps a success rule and (with `ordering`) an ordering key.
    fn draw_settings(&mut self, path: &str, ordering: Option<String>) -> Value {
        let receiver = self.rng.u16(..RECEIVERS);
        let tiers: Vec<String> = (0..self.rng.usize(..4))
            .map(|_| format!("{}s", self.rng.u32(1..30)))
            .collect();
        let mut settings = json!({
            "url": network::url(receiver, path),
            "schedule": tiers,
            "delay": format!("{}ms", [0, 0, 500, 5_000][self.rng.usize(..4)]),
            "timeout": "1s",
        });
        if self.rng.u8(..4) == 0 {
            settings["expect_body"] = json!("ok");
        }
        if let Some(key) = ordering {
            settings["ordering_key"] = json!(key);
        }
        settings
    }

    /// A producer's body as the bytes it sends: spacing, key order, escapes and number
    /// forms that a re-serialization would change.
    fn draw_body(&mut self) -> String {
        let n = self.model.asked;
        match self.rng.usize(..3) {
            0 => format!("{{\"n\":{n}}}"),
            1 => format!("{{ \"z\": 1.50, \"n\" : {n},\n \"amount\": 1e3 }}"),
            _ => format!("{{\"n\":{n},\"note\":\"caf\\u00e9 ☕\",\"tags\":[ ]}}"),
        }
    }

    /// A registration, drawn by the seed: a tenant, its settings and its body.
    fn draw(&mut self) -> (usize, Value, String) {
        let tenant = self.rng.usize(..TENANTS.len());
        let ordering = (self.rng.u8(..5) == 0).then(|| format!("o-{}", self.rng.u8(..3)));
        let settings = self.draw_settings(&format!("/n/{}", self.model.asked), ordering);
        (tenant, settings, self.draw_body())
    }

    async fn register(&mut self, api: &Api) -> Result<(), String> {
        let (tenant, request, body) = self.draw();
        let key = (self.rng.u8(..5) == 0).then(|| format!("k-{}", self.rng.u8(..6)));
        let asked = postback::clock::now_ms();
        let headers: Vec<(&str, String)> =
            key.iter().map(|k| ("idempotency-key", k.clone())).collect();
        let text = with_body(&request, &body);
        let token = TENANTS[tenant].1;
        let (status, answer) = api
            .call(token, Method::POST, "/notify", Some(&text), &headers)
            .await;
        let name = TENANTS[tenant].0;
        self.note(format!(
            "register {name} {text} key {key:?} → {status} {answer}"
        ));
        let registered = Registered::new(name, &request, &body, key, asked);
        self.model
            .answered_registration(registered, status, &answer)
    }

    async fn register_batch(&mut self, api: &Api) -> Result<(), String> {
        let tenant = self.rng.usize(..TENANTS.len());
        let items: Vec<(Value, String)> = (0..self.rng.usize(2..5))
            .map(|_| {
                let (_, request, body) = self.draw();
                (request, body)
            })
            .collect();
        let asked = postback::clock::now_ms();
        let texts: Vec<String> = items.iter().map(|(r, b)| with_body(r, b)).collect();
        let text = format!("{{\"items\":[{}]}}", texts.join(","));
        let token = TENANTS[tenant].1;
        let (status, answer) = api
            .call(token, Method::POST, "/notify/batch", Some(&text), &[])
            .await;
        let name = TENANTS[tenant].0;
        self.note(format!("batch {name} {text} → {status} {answer}"));
        if status != 200 {
            return checker::unavailable_only(status, &answer);
        }
        for ((request, body), result) in items
            .iter()
            .zip(answer["items"].as_array().into_iter().flatten())
        {
            let registered = Registered::new(name, request, body, None, asked);
            let status = if result["id"].is_string() { 202 } else { 503 };
            self.model
                .answered_registration(registered, status, result)?;
        }
        Ok(())
    }

    /// A tenant subscribes a receiver to some topics, with settings drawn by the seed; a
    /// subscription's notifications keep their own order when it has an ordering key.
    async fn subscribe(&mut self, api: &Api) -> Result<(), String> {
        let tenant = self.rng.usize(..TENANTS.len());
        let n = self.model.subscriptions.len();
        let ordering = (self.rng.u8(..3) == 0).then(|| format!("s-{n}"));
        let mut request = self.draw_settings(&format!("/s/{n}"), ordering);
        let topics = PATTERNS[self.rng.usize(..PATTERNS.len())];
        request["topics"] = json!(topics);
        let text = request.to_string();
        let (status, answer) = api
            .call(
                TENANTS[tenant].1,
                Method::POST,
                "/subscriptions",
                Some(&text),
                &[],
            )
            .await;
        let name = TENANTS[tenant].0;
        self.note(format!("subscribe {name} {text} → {status} {answer}"));
        match (status, answer["id"].as_str()) {
            (201, Some(id)) => {
                let subscription = Subscription {
                    tenant: name.to_string(),
                    topics: topics.iter().map(|t| t.to_string()).collect(),
                    settings: request,
                };
                self.model
                    .subscriptions
                    .insert(id.to_string(), subscription);
                Ok(())
            }
            _ => checker::unavailable_only(status, &answer),
        }
    }

    /// A tenant deletes one of its subscriptions.
    async fn unsubscribe(&mut self, api: &Api) -> Result<(), String> {
        let ids: Vec<String> = self.model.subscriptions.keys().cloned().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let id = ids[self.rng.usize(..ids.len())].clone();
        let tenant = &self.model.subscriptions[&id].tenant;
        let token = tenant_token(tenant);
        let path = format!("/subscriptions/{id}");
        let (status, answer) = api.call(token, Method::DELETE, &path, None, &[]).await;
        self.note(format!("unsubscribe {id} → {status}"));
        match status {
            204 => {
                self.model.subscriptions.remove(&id);
                Ok(())
            }
            _ => checker::unavailable_only(status, &answer),
        }
    }

    /// A tenant publishes an event, perhaps with an idempotency key.
    async fn publish(&mut self, api: &Api) -> Result<(), String> {
        let tenant = self.rng.usize(..TENANTS.len());
        let topic = TOPICS[self.rng.usize(..TOPICS.len())];
        let body = self.draw_body();
        let key = (self.rng.u8(..5) == 0).then(|| format!("e-{}", self.rng.u8(..4)));
        let headers: Vec<(&str, String)> =
            key.iter().map(|k| ("idempotency-key", k.clone())).collect();
        let text = with_body(&json!({ "topic": topic }), &body);
        let asked = postback::clock::now_ms();
        let (status, answer) = api
            .call(
                TENANTS[tenant].1,
                Method::POST,
                "/events",
                Some(&text),
                &headers,
            )
            .await;
        let name = TENANTS[tenant].0;
        self.note(format!(
            "publish {name} {text} key {key:?} → {status} {answer}"
        ));
        let key = key.as_deref();
        self.model
            .answered_event(name, topic, &body, key, asked, status, &answer)
    }

    /// An accepted notification, drawn by the seed, with its tenant's token.
    fn pick(&mut self) -> Option<(String, &'static str)> {
        let ids: Vec<&String> = self.model.accepted.keys().collect();
        if ids.is_empty() {
            return None;
        }
        let id = ids[self.rng.usize(..ids.len())].clone();
        let token = tenant_token(&self.model.accepted[&id].tenant);
        Some((id, token))
    }

    async fn cancel(&mut self, api: &Api) -> Result<(), String> {
        let Some((id, token)) = self.pick() else {
            return Ok(());
        };
        let at = postback::clock::now_ms();
        let path = format!("/notifications/{id}");
        let (status, answer) = api.call(token, Method::DELETE, &path, None, &[]).await;
        self.note(format!("cancel {id} → {status} {answer}"));
        self.model.cancelled(&id, status, at);
        checker::expected_answer(status, &answer, &[200, 409])
    }

    /// A replay or a resend (`route`, with `{}` for the id): a new cycle.
    async fn again(&mut self, api: &Api, route: &str, expected: &[u16]) -> Result<(), String> {
        let Some((id, token)) = self.pick() else {
            return Ok(());
        };
        let at = postback::clock::now_ms();
        let path = route.replace("{}", &id);
        let (status, answer) = api.call(token, Method::POST, &path, None, &[]).await;
        self.note(format!("{path} → {status} {answer}"));
        if status == 200 {
            let arrivals = self.receivers.lock().unwrap().arrivals.len();
            self.model.again(&id, at, arrivals);
        }
        checker::expected_answer(status, &answer, expected)
    }

    async fn attempt_now(&mut self, api: &Api) -> Result<(), String> {
        let Some((id, token)) = self.pick() else {
            return Ok(());
        };
        let path = format!("/notifications/{id}/attempt-now");
        let (status, answer) = api.call(token, Method::POST, &path, None, &[]).await;
        self.note(format!("attempt now {id} → {status} {answer}"));
        if status == 200 {
            self.model.hurried(&id);
        }
        checker::expected_answer(status, &answer, &[200, 409])
    }

    async fn pause_or_resume(&mut self, api: &Api) -> Result<(), String> {
        let tenant = self.rng.usize(..TENANTS.len());
        let token = TENANTS[tenant].1;
        let (status, listed) = api.call(token, Method::GET, "/endpoints", None, &[]).await;
        let ids: Vec<String> = listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["id"].as_str().map(str::to_string))
            .collect();
        if status != 200 || ids.is_empty() {
            return Ok(());
        }
        let id = &ids[self.rng.usize(..ids.len())];
        let action = ["pause", "resume"][self.rng.usize(..2)];
        let path = format!("/endpoints/{id}/{action}");
        let (status, answer) = api.call(token, Method::POST, &path, None, &[]).await;
        self.note(format!("{action} {id} → {status}"));
        self.model.disturbed(postback::clock::now_ms());
        if action == "pause" && status == 200 {
            let name = TENANTS[tenant].0.to_string();
            self.model.paused.insert(id.clone(), name);
        } else if status == 200 {
            self.model.paused.remove(id);
        }
        checker::expected_answer(status, &answer, &[200])
    }

    /// A tenant reaches for another's notification or subscription, by its id: cancel,
    /// resend, replay, attempt now, read, delete. It is not found, and (the end shows)
    /// nothing happened to it.
    async fn as_another_tenant(&mut self, api: &Api) -> Result<(), String> {
        let actor = TENANTS[1 + self.rng.usize(..TENANTS.len() - 1)];
        let theirs = |tenant: &String| tenant != actor.0;
        let notifications: Vec<String> = (self.model.accepted.iter())
            .filter(|(_, r)| theirs(&r.tenant))
            .map(|(id, _)| id.clone())
            .collect();
        let subscriptions: Vec<String> = (self.model.subscriptions.iter())
            .filter(|(_, s)| theirs(&s.tenant))
            .map(|(id, _)| id.clone())
            .collect();
        let (method, path) = match self.rng.usize(..7) {
            6 if !subscriptions.is_empty() => {
                let id = &subscriptions[self.rng.usize(..subscriptions.len())];
                (Method::DELETE, format!("/subscriptions/{id}"))
            }
            _ if notifications.is_empty() => return Ok(()),
            k => {
                let id = &notifications[self.rng.usize(..notifications.len())];
                match k {
                    0 => (Method::DELETE, format!("/notifications/{id}")),
                    1 => (Method::POST, format!("/notifications/{id}/resend")),
                    2 => (Method::POST, format!("/dead-letters/{id}/replay")),
                    3 => (Method::POST, format!("/notifications/{id}/attempt-now")),
                    4 => (Method::GET, format!("/notifications/{id}")),
                    _ => (Method::GET, format!("/dead-letters/{id}")),
                }
            }
        };
        let (status, answer) = api.call(actor.1, method.clone(), &path, None, &[]).await;
        self.note(format!("{method} {path} as {} → {status}", actor.0));
        checker::refused_to_another(status, &answer)
    }

    /// A tenant's list holds that tenant's notifications only.
    async fn list_as_a_tenant(&mut self, api: &Api) -> Result<(), String> {
        let tenant = 1 + self.rng.usize(..TENANTS.len() - 1);
        let state = ["scheduled", "delivered", "dead", "cancelled"][self.rng.usize(..4)];
        let path = format!("/notifications?state={state}&limit=100");
        let (status, listed) = api
            .call(TENANTS[tenant].1, Method::GET, &path, None, &[])
            .await;
        self.note(format!("list {state} as {} → {status}", TENANTS[tenant].0));
        checker::only_the_tenants(TENANTS[tenant].0, status, &listed)
    }

    /// Everything healed: receivers up and healthy, endpoints resumed; then time passes
    /// until nothing is pending, and every notification is read back.
    async fn heal(&mut self, api: &Api) -> Result<(), String> {
        {
            let mut receivers = self.receivers.lock().unwrap();
            receivers.down = [false; RECEIVERS as usize];
            receivers.flakiness = [0; RECEIVERS as usize];
        }
        self.model.disturbed(postback::clock::now_ms());
        for (id, tenant) in std::mem::take(&mut self.model.paused) {
            let path = format!("/endpoints/{id}/resume");
            let token = tenant_token(&tenant);
            api.call(token, Method::POST, &path, None, &[]).await;
        }
        self.note("healed".into());
        self.drained(api).await?;
        let ids: Vec<(String, &str)> = (self.model.accepted.iter())
            .map(|(id, r)| (id.clone(), tenant_token(&r.tenant)))
            .collect();
        for (id, token) in ids {
            let path = format!("/notifications/{id}");
            let (status, view) = api.call(token, Method::GET, &path, None, &[]).await;
            self.note(format!(
                "at the end {id}: {status} {} {}",
                view["state"], view["history"]
            ));
            self.model.ended.insert(id, view);
        }
        self.every_event_reached(api).await?;
        self.model.arrivals = self.receivers.lock().unwrap().arrivals.clone();
        Ok(())
    }

    /// Waits until nothing is pending.
    async fn drained(&mut self, api: &Api) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + DRAIN_FOR;
        loop {
            let (status, stats) = api.call(OPS, Method::GET, "/stats", None, &[]).await;
            if status == 200 && stats["scheduled"] == 0 && stats["in_flight"] == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let mut pending = Vec::new();
                for state in ["scheduled", "retrying", "held", "held_back", "in_flight"] {
                    let path = format!("/notifications?state={state}&limit=20");
                    pending.push(api.call(OPS, Method::GET, &path, None, &[]).await.1);
                }
                return Err(format!(
                    "still pending after the drain: {stats}; {pending:?}"
                ));
            }
            // Simulated time: how often the drain looks, in the run's own clock.
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }

    /// Every event stored, those whose answer a crash lost too, made each of its
    /// notifications, and each finished.
    async fn every_event_reached(&mut self, api: &Api) -> Result<(), String> {
        let mut ids: Vec<String> = Vec::new();
        let mut path = "/events?limit=500".to_string();
        loop {
            let (status, listed) = api.call(OPS, Method::GET, &path, None, &[]).await;
            checker::expected_answer(status, &listed, &[200])?;
            ids.extend(
                (listed["items"].as_array().into_iter().flatten())
                    .filter_map(|e| e["id"].as_str().map(str::to_string)),
            );
            match listed["next_cursor"].as_str() {
                Some(cursor) => path = format!("/events?limit=500&cursor={cursor}"),
                None => break,
            }
        }
        for id in &self.model.events {
            if !ids.contains(id) {
                return Err(format!("event {id} was answered 202 and is not listed"));
            }
        }
        for id in ids {
            let path = format!("/events/{id}");
            let (_, event) = api.call(OPS, Method::GET, &path, None, &[]).await;
            self.note(format!("at the end {id}: {}", event["deliveries"]));
            for delivery in event["deliveries"].as_array().into_iter().flatten() {
                let finished = ["delivered", "dead", "cancelled"];
                if !finished.iter().any(|s| delivery["state"] == *s) {
                    return Err(format!("event {id}: a delivery unfinished: {delivery}"));
                }
            }
        }
        Ok(())
    }

    fn note(&mut self, line: String) {
        let at = postback::clock::now_ms() - START_MS;
        self.trace.push(format!("{at:>9} {line}"));
    }
}

/// The token of the tenant named `name`.
fn tenant_token(name: &str) -> &'static str {
    TENANTS
        .iter()
        .find(|(tenant, _)| *tenant == name)
        .map_or(OPS, |(_, token)| token)
}

/// The request `request` with the producer's `body` in it, as the bytes it sent.
fn with_body(request: &Value, body: &str) -> String {
    let text = request.to_string();
    format!("{{\"body\":{body},{}", &text[1..])
}

/// The instance's API, called in process.
struct Api(axum::Router);

impl Api {
    /// A request with `token`: the status and the JSON answer (null when there is none).
    async fn call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, String)],
    ) -> (u16, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let body = body.map_or(Body::empty(), |b| Body::from(b.to_string()));
        let response = self
            .0
            .clone()
            .oneshot(request.body(body).expect("a request"))
            .await
            .expect("the router answers");
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

/// The configurations an instance runs with, one for each of `QUOTAS`: three tenants
/// with a token each, short timeouts and leases, no jitter, private addresses allowed
/// (the receivers are on loopback), the quota tenant's quota.
fn configs() -> &'static [Config] {
    static CONFIGS: OnceLock<Vec<Config>> = OnceLock::new();
    CONFIGS.get_or_init(|| QUOTAS.iter().map(|(quota, _)| config(quota)).collect())
}

fn config(quota: &str) -> Config {
    let hash = |t: &str| format!("{:x}", Sha256::digest(t.as_bytes()));
    let toml = format!(
        "[server]\napi_tokens = [\"{OPS}\"]\n\
         [delivery]\nallow_private_networks = true\ntimeout = \"1s\"\nmax_timeout = \"2s\"\n\
         lease = \"10s\"\nmax_idle_sleep = \"500ms\"\njitter = \"0%\"\nshutdown_grace = \"2s\"\n\
         [tokens.a]\nsha256 = \"{}\"\ntenant = \"shop-a\"\nroles = [\"notify\", \"read\", \"operate\"]\n\
         [tokens.b]\nsha256 = \"{}\"\ntenant = \"shop-b\"\nroles = [\"notify\", \"read\", \"operate\"]\n\
         [tenants.shop-a]\n[tenants.{}]\nrate_limit = \"{quota}\"\n",
        hash("sim-a"),
        hash("sim-b"),
        TENANTS[QUOTA_TENANT].0,
    );
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("postback.toml");
    std::fs::write(&path, toml).expect("the configuration written");
    Config::load(Some(&path), false).expect("a valid configuration")
}
