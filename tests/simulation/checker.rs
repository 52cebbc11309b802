//! postback's promises, checked against what a workload did (`Model`), what the API
//! answered and what the receivers got (`Arrival`s): every notification answered `202`
//! ends delivered, dead or cancelled as its attempts say; it reaches its URL with the
//! producer's bytes; no attempt before it is due, nor (where nothing could hold it back)
//! later than the scheduler's tick after; per ordering key, one at a time in registration
//! order; a second delivery only where a crash or a clock jump may have lost the first's
//! outcome; an idempotency key answers its first notification or event; an event reaches
//! exactly its tenant's subscriptions that take its topic; a quota's spacing kept; nothing
//! of one tenant in another tenant's answers.
//!
//! It knows nothing of how the workload ran: the simulation feeds it, and a soak against
//! real stores can.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde_json::Value;

/// How late an attempt may be where nothing held it back: the scheduler's idle sleep
/// (`delivery.max_idle_sleep`) and the settler's batching, with room.
const TICK_MS: i64 = 1_500;

/// The lease a claim holds (`delivery.lease`): a crash or a clock jump while one is held
/// may send its notification again.
const LEASE_MS: i64 = 10_000;
/// How late a notification may be claimed and still go at its reserved send time
/// (`RESERVATION_KEPT`, `src/delivery/reservations.rs`): the gap a quota keeps between
/// two sends is its spacing less this.
const QUOTA_JITTER_MS: i64 = 50;

/// What a receiver did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// `200` with a body other than the one an `expect_body` rule wants.
    WrongBody,
    Status(u16),
    RetryAfter(u64),
    /// Answered only after the attempt's timeout.
    Hang,
    /// Closed the connection without an answer.
    Reset,
    /// Answered `200` after a while, within the attempt's timeout.
    Slow,
    Redirect,
}

/// One request a receiver got, and what it answered.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// The wall clock the instance reads when it arrived, ms.
    pub at_ms: i64,
    /// The time it arrived as the world keeps it (no jumps, no stalls), ms.
    pub true_ms: i64,
    pub id: String,
    /// The URL it was sent to.
    pub url: String,
    pub body: Bytes,
    pub answer: Answer,
}

/// A notification as the workload asked for it: registered, or made for a subscription
/// by an event.
#[derive(Debug, Clone)]
pub struct Registered {
    pub tenant: String,
    pub url: String,
    pub schedule_ms: Vec<i64>,
    pub delay_ms: i64,
    pub expect_ok: bool,
    pub ordering_key: Option<String>,
    pub key: Option<String>,
    /// The whole request, as an idempotency key compares it.
    pub request: String,
    /// The producer's body, as the bytes it sent.
    pub body: String,
    /// Its place among the workload's notifications (the wall clock may go back).
    pub seq: usize,
    /// When each cycle began, wall clock ms: the registration (nothing is due before it
    /// plus the delay), then each replay and resend.
    pub cycles: Vec<i64>,
    /// How many arrivals the receivers had when each cycle after the first began (an
    /// order the wall clock, which may go back, does not keep).
    pub cycle_marks: Vec<usize>,
    pub cancelled_at: Option<i64>,
    /// A cancel of it was answered `503`: it may or may not have been taken.
    pub maybe_cancelled: bool,
    /// Made due now by hand (`attempt-now`): its next attempt may come early.
    pub hurried: bool,
    /// When it was accepted, world time ms: its send times may have been reserved in
    /// any quota in force since.
    pub accepted_true_ms: i64,
}

impl Registered {
    /// A notification of `tenant` with the settings of `request` (a `POST /notify` body or
    /// a subscription) and the producer's `body`, asked for at `asked_ms`.
    pub fn new(
        tenant: &str,
        request: &Value,
        body: &str,
        key: Option<String>,
        asked_ms: i64,
    ) -> Self {
        let ms = |text: &str| humantime::parse_duration(text).map_or(0, |d| d.as_millis() as i64);
        Self {
            tenant: tenant.to_string(),
            url: request["url"].as_str().unwrap_or_default().to_string(),
            schedule_ms: request["schedule"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| ms(s.as_str().unwrap_or_default()))
                .collect(),
            delay_ms: ms(request["delay"].as_str().unwrap_or("0ms")),
            expect_ok: request["expect_body"] == "ok",
            ordering_key: request["ordering_key"].as_str().map(str::to_string),
            key,
            request: format!("{request} {body}"),
            body: body.to_string(),
            seq: 0,
            cycles: vec![asked_ms],
            cycle_marks: Vec::new(),
            cancelled_at: None,
            maybe_cancelled: false,
            hurried: false,
            accepted_true_ms: 0,
        }
    }

    /// Whether its receiver answering `answer` delivers it: a `2xx`, with `ok` where an
    /// `expect_body` rule asks for it.
    pub fn takes(&self, answer: Answer) -> bool {
        match answer {
            Answer::Ok | Answer::Slow => true,
            Answer::WrongBody => !self.expect_ok,
            _ => false,
        }
    }
}

/// A subscription as the workload made it.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub tenant: String,
    pub topics: Vec<String>,
    /// Its settings, as `Registered::new` reads them.
    pub settings: Value,
}

impl Subscription {
    /// Whether it takes `topic`: a pattern's `*` stands for exactly one segment.
    pub fn takes(&self, topic: &str) -> bool {
        self.topics.iter().any(|pattern| {
            let (p, t): (Vec<&str>, Vec<&str>) =
                (pattern.split('.').collect(), topic.split('.').collect());
            p.len() == t.len() && p.iter().zip(&t).all(|(p, t)| *p == "*" || p == t)
        })
    }
}

/// A quota the workload set: from `true_ms` (world time), the quota tenant's sends of one
/// rate key are at least `interval_ms` apart.
#[derive(Debug, Clone, Copy)]
pub struct QuotaSpan {
    pub true_ms: i64,
    pub interval_ms: i64,
}

/// What the workload did and learnt.
#[derive(Debug, Default)]
pub struct Model {
    /// Every notification answered `202` (registered, or made for an event), by id.
    pub accepted: BTreeMap<String, Registered>,
    /// How many notifications the workload asked for, answered or not.
    pub asked: usize,
    /// Each idempotency key's notification, by tenant and key, with its request.
    pub keys: BTreeMap<(String, String), (String, String)>,
    /// Each idempotency key's event, by tenant and key, with its request.
    pub event_keys: BTreeMap<(String, String), (String, String)>,
    /// The subscriptions that exist, by id.
    pub subscriptions: BTreeMap<String, Subscription>,
    /// Every event answered `202`, by id.
    pub events: BTreeSet<String>,
    /// Endpoints paused, with their tenant.
    pub paused: BTreeMap<String, String>,
    /// When something disturbed the schedule (a crash, a restart, a clock jump or
    /// stall, a receiver down, a pause), wall clock ms: an attempt near these may be
    /// early by the clock's move, or late.
    pub disturbances: Vec<i64>,
    /// When the wall clock jumped or stalled, world time ms.
    pub clock_moves: Vec<i64>,
    /// The receivers (their URLs' origins) that failed requests or went down: their
    /// circuits may open and hold notifications back.
    pub unsteady: BTreeSet<String>,
    /// The world's time now, ms, as the workload last said.
    pub true_now_ms: i64,
    /// The tenant under a quota, and its quotas over time.
    pub quota_tenant: String,
    pub quotas: Vec<QuotaSpan>,
    /// Each notification as the API showed it at the end.
    pub ended: BTreeMap<String, Value>,
    /// What the receivers got.
    pub arrivals: Vec<Arrival>,
    /// How many of the receivers' arrivals were checked.
    pub checked: usize,
    /// Registrations and events whose answer was `503` or lost to a crash: each may or
    /// may not have been stored, and its notifications may arrive.
    pub unanswered: usize,
    /// How late an attempt may be where nothing held it back, ms, when longer than the
    /// scheduler's tick (`TICK_MS`): a real machine under load.
    pub late_after_ms: Option<i64>,
}

impl Model {
    pub fn disturbed(&mut self, at: i64) {
        self.disturbances.push(at);
    }

    /// Disturbed throughout `from..=to` (wall clock ms), at a point every 250 ms.
    pub fn disturbed_over(&mut self, from: i64, to: i64) {
        self.disturbances.extend((from..=to).step_by(250));
    }

    /// Whether the receiver at `url` answered every request it got, never down.
    fn steady(&self, url: &str) -> bool {
        !self
            .unsteady
            .iter()
            .any(|origin| url.starts_with(origin.as_str()))
    }

    /// A registration and its answer: accepted (`202`, a new notification or the one its
    /// idempotency key names), refused as the key's other request (`422`), or `503`.
    pub fn answered_registration(
        &mut self,
        mut r: Registered,
        status: u16,
        answer: &Value,
    ) -> Result<(), String> {
        r.seq = self.asked;
        self.asked += 1;
        match status {
            202 => {
                let id = answer["id"]
                    .as_str()
                    .ok_or("202 without an id")?
                    .to_string();
                if let Some(key) = &r.key {
                    let entry = (r.tenant.clone(), key.clone());
                    if let Some((first, request)) = self.keys.get(&entry) {
                        if *first != id {
                            return Err(format!("the key {key} registered {first}, and now {id}"));
                        }
                        if *request != r.request {
                            return Err(format!("the key {key} answered {id} for another request"));
                        }
                        return Ok(());
                    }
                    self.keys.insert(entry, (id.clone(), r.request.clone()));
                }
                self.accept(id, r)
            }
            422 if answer["error"]["code"] == "idempotency_key_mismatch" => {
                let key = r.key.as_ref().ok_or("a mismatch without a key")?;
                match self.keys.get(&(r.tenant.clone(), key.clone())) {
                    Some((_, request)) if *request != r.request => Ok(()),
                    _ => Err(format!("refused as another request of {key}: {answer}")),
                }
            }
            503 => {
                self.unanswered += 1;
                Ok(())
            }
            _ => Err(format!("a registration answered {status} {answer}")),
        }
    }

    fn accept(&mut self, id: String, mut r: Registered) -> Result<(), String> {
        r.accepted_true_ms = self.true_now_ms;
        match self.accepted.insert(id.clone(), r) {
            Some(_) => Err(format!("{id} answered for two notifications")),
            None => Ok(()),
        }
    }

    /// An event of `tenant` on `topic` with the producer's `body`, and its answer: `202`
    /// with one delivery for each of the tenant's subscriptions that take the topic (the
    /// earlier event, for a repeated key), `422` for a key's other request, or `503`.
    #[allow(clippy::too_many_arguments)]
    pub fn answered_event(
        &mut self,
        tenant: &str,
        topic: &str,
        body: &str,
        key: Option<&str>,
        asked_ms: i64,
        status: u16,
        answer: &Value,
    ) -> Result<(), String> {
        let request = format!("{topic} {body}");
        let entry = key.map(|k| (tenant.to_string(), k.to_string()));
        let earlier = entry.as_ref().and_then(|e| self.event_keys.get(e)).cloned();
        match status {
            202 => {
                let id = answer["id"]
                    .as_str()
                    .ok_or("an event without an id")?
                    .to_string();
                if let Some((first, first_request)) = earlier {
                    if first != id || first_request != request {
                        return Err(format!("the event key {key:?} answered {id} for {first}"));
                    }
                    return Ok(());
                }
                if let Some(entry) = entry {
                    self.event_keys.insert(entry, (id.clone(), request));
                }
                self.events.insert(id.clone());
                self.reached(&id, tenant, topic, body, asked_ms, answer)
            }
            422 if answer["error"]["code"] == "idempotency_key_mismatch" => match earlier {
                Some((_, first)) if first != request => Ok(()),
                _ => Err(format!("event refused as another request: {answer}")),
            },
            503 => {
                self.unanswered += 1;
                Ok(())
            }
            _ => Err(format!("an event answered {status} {answer}")),
        }
    }

    /// The deliveries of a new event are exactly the tenant's subscriptions that take its
    /// topic, each a notification with the subscription's settings and the event's body.
    fn reached(
        &mut self,
        event: &str,
        tenant: &str,
        topic: &str,
        body: &str,
        asked_ms: i64,
        answer: &Value,
    ) -> Result<(), String> {
        let expected: BTreeSet<&String> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.tenant == tenant && s.takes(topic))
            .map(|(id, _)| id)
            .collect();
        let deliveries = answer["deliveries"].as_array().cloned().unwrap_or_default();
        let reached: BTreeSet<String> = deliveries
            .iter()
            .filter_map(|d| d["subscription"].as_str().map(str::to_string))
            .collect();
        if reached.iter().collect::<BTreeSet<_>>() != expected {
            return Err(format!(
                "event {event} of {tenant} on {topic} reached {reached:?}, not {expected:?}"
            ));
        }
        for delivery in deliveries {
            let sub = &self.subscriptions[delivery["subscription"].as_str().unwrap_or_default()];
            let id = delivery["notification"]
                .as_str()
                .ok_or_else(|| format!("event {event}: a delivery without a notification"))?
                .to_string();
            let mut r = Registered::new(tenant, &sub.settings, body, None, asked_ms);
            r.seq = self.asked;
            self.asked += 1;
            self.accept(id, r)?;
        }
        Ok(())
    }

    pub fn cancelled(&mut self, id: &str, status: u16, at: i64) {
        if let Some(r) = self.accepted.get_mut(id) {
            match status {
                200 => {
                    r.cancelled_at.get_or_insert(at);
                }
                503 => r.maybe_cancelled = true,
                _ => {}
            }
        }
    }

    /// A new cycle (a replay or a resend) at `at`, after the receivers' first `arrivals`.
    pub fn again(&mut self, id: &str, at: i64, arrivals: usize) {
        if let Some(r) = self.accepted.get_mut(id) {
            r.cycles.push(at);
            r.cycle_marks.push(arrivals);
            r.cancelled_at = None;
            r.maybe_cancelled = false;
        }
    }

    pub fn hurried(&mut self, id: &str) {
        if let Some(r) = self.accepted.get_mut(id) {
            r.hurried = true;
        }
    }

    /// The tightest quota in force from world time `since` to `until`: a send time may
    /// have been reserved in any of them.
    fn interval_between(&self, since: i64, until: i64) -> i64 {
        let spans = self.quotas.iter().enumerate();
        let in_force = spans.filter(|(n, q)| {
            let ends = self.quotas.get(n + 1).map_or(i64::MAX, |next| next.true_ms);
            q.true_ms <= until && ends > since
        });
        in_force.map(|(_, q)| q.interval_ms).min().unwrap_or(0)
    }
}

/// After every step: what the receivers got since the last step was a notification the
/// API accepted (or one whose answer was lost), sent to its URL with the producer's
/// bytes, not before it was due, and within its tenant's quota.
pub fn after_step(model: &mut Model, arrivals: &[Arrival]) -> Result<(), String> {
    for (n, arrival) in arrivals.iter().enumerate().skip(model.checked) {
        match model.accepted.get(&arrival.id) {
            Some(r) => as_registered(arrival, n, r, &model.disturbances)?,
            None if model.unanswered > 0 => {}
            None => return Err(format!("{} arrived, which no 202 answered", arrival.id)),
        }
        within_the_quota(model, &arrivals[..=n])?;
        if let Answer::RetryAfter(secs) = arrival.answer {
            // Its `Retry-After` holds every notification of its tenant's rate key (the
            // host, which every receiver shares) until then.
            model.disturbed_over(arrival.at_ms, arrival.at_ms + secs as i64 * 1_000);
        }
    }
    model.checked = arrivals.len();
    Ok(())
}

/// The `n`-th arrival, of `r`: at its URL, with the producer's bytes, not before the
/// cycle it belongs to was due (a replay or resend begins a cycle due at once).
fn as_registered(
    arrival: &Arrival,
    n: usize,
    r: &Registered,
    disturbances: &[i64],
) -> Result<(), String> {
    let id = &arrival.id;
    if arrival.url != r.url {
        return Err(format!(
            "{id} went to {}, registered for {}",
            arrival.url, r.url
        ));
    }
    if arrival.body != r.body.as_bytes() {
        return Err(format!(
            "{id} arrived as {:?}, sent as {:?}",
            String::from_utf8_lossy(&arrival.body),
            r.body
        ));
    }
    let cycle = r.cycle_marks.iter().filter(|m| **m <= n).count();
    let began = r.cycles.get(cycle).copied().unwrap_or(r.cycles[0]);
    let due = if cycle == 0 {
        began + r.delay_ms
    } else {
        began
    };
    let at = arrival.at_ms;
    let disturbed = disturbed_between(disturbances, began.min(at) - TICK_MS, at.max(due) + TICK_MS);
    if at < due - 1 && !r.hurried && !disturbed {
        return Err(format!("{id} arrived at {at}, due at {due}"));
    }
    Ok(())
}

/// The last of `arrivals`, if it is the quota tenant's, came no sooner after that
/// tenant's one before than its quota spaces them (world time; the tightest quota in
/// force since either was accepted), unless the wall clock moved between (the quota is
/// kept on it).
fn within_the_quota(model: &Model, arrivals: &[Arrival]) -> Result<(), String> {
    let of_the_tenant = |a: &&Arrival| {
        model
            .accepted
            .get(&a.id)
            .is_some_and(|r| r.tenant == model.quota_tenant)
    };
    let mut theirs = arrivals.iter().rev().filter(of_the_tenant);
    let (Some(last), Some(before)) = (theirs.next(), theirs.next()) else {
        return Ok(());
    };
    if !std::ptr::eq(last, &arrivals[arrivals.len() - 1]) {
        return Ok(());
    }
    let since = [last, before]
        .iter()
        .map(|a| model.accepted[&a.id].accepted_true_ms)
        .min()
        .unwrap_or(before.true_ms);
    let interval = model.interval_between(since, last.true_ms);
    let moved = model
        .clock_moves
        .iter()
        .any(|m| *m >= before.true_ms - LEASE_MS && *m <= last.true_ms);
    if last.true_ms - before.true_ms < interval - QUOTA_JITTER_MS && !moved {
        return Err(format!(
            "{} sent {} ms after {}, under a quota of one per {interval} ms",
            last.id,
            last.true_ms - before.true_ms,
            before.id
        ));
    }
    Ok(())
}

/// An answer other than `expected` is allowed only as `503` (the store, or the instance
/// draining).
pub fn expected_answer(status: u16, answer: &Value, expected: &[u16]) -> Result<(), String> {
    match expected.contains(&status) || status == 503 {
        true => Ok(()),
        false => Err(format!(
            "answered {status} {answer}, expected one of {expected:?}"
        )),
    }
}

pub fn unavailable_only(status: u16, answer: &Value) -> Result<(), String> {
    expected_answer(status, answer, &[])
}

/// A tenant's list holds its own notifications only.
pub fn only_the_tenants(tenant: &str, status: u16, listed: &Value) -> Result<(), String> {
    expected_answer(status, listed, &[200])?;
    for item in listed["items"].as_array().into_iter().flatten() {
        if item["tenant"] != tenant {
            return Err(format!("{tenant}'s list holds {item}"));
        }
    }
    Ok(())
}

/// Another tenant's notification, subscription or endpoint is not found (`404`), and
/// nothing is done to it.
pub fn refused_to_another(status: u16, answer: &Value) -> Result<(), String> {
    match status {
        404 | 503 => Ok(()),
        _ => Err(format!("another tenant's was answered {status} {answer}")),
    }
}

/// At the end, every accepted notification is finished as its attempts say.
pub fn at_the_end(model: &Model) -> Result<(), String> {
    for (id, r) in &model.accepted {
        let view = model
            .ended
            .get(id)
            .ok_or_else(|| format!("{id} not read back"))?;
        finished_as_its_attempts_say(id, r, view)?;
        delivered_only_when_received(id, r, view, &model.arrivals)?;
        attempts_on_time(id, r, view, model)?;
        sent_twice_only_after_a_crash(id, r, &model.arrivals, &model.disturbances)?;
    }
    one_at_a_time_per_ordering_key(model)?;
    Ok(())
}

fn finished_as_its_attempts_say(id: &str, r: &Registered, view: &Value) -> Result<(), String> {
    let state = view["state"].as_str().unwrap_or_default();
    let (attempts, max) = (view["attempts"].as_u64(), view["max_attempts"].as_u64());
    match state {
        "delivered" | "dead" => {}
        "cancelled" if r.cancelled_at.is_some() || r.maybe_cancelled => {}
        _ => return Err(format!("{id} ended {state}: {view}")),
    }
    if attempts > max {
        return Err(format!("{id}: {attempts:?} attempts of {max:?}"));
    }
    if max != Some(r.schedule_ms.len() as u64 + 1) {
        return Err(format!(
            "{id}: {max:?} attempts for a schedule of {:?}",
            r.schedule_ms
        ));
    }
    if state == "dead" && attempts != max && !gave_up_early(view) {
        return Err(format!(
            "{id} dead after {attempts:?} of {max:?} attempts: {view}"
        ));
    }
    if view["tenant"] != r.tenant.as_str() {
        return Err(format!(
            "{id} is {}'s, registered by {}",
            view["tenant"], r.tenant
        ));
    }
    Ok(())
}

/// Delivered only where its receiver took it (`Registered::takes`).
fn delivered_only_when_received(
    id: &str,
    r: &Registered,
    view: &Value,
    arrivals: &[Arrival],
) -> Result<(), String> {
    if view["state"] != "delivered" {
        return Ok(());
    }
    match arrivals.iter().any(|a| a.id == id && r.takes(a.answer)) {
        true => Ok(()),
        false => Err(format!(
            "{id} delivered, but its receiver never took it: {view}"
        )),
    }
}

/// Dead before its last tier: a `410`, or held back past its window by an open circuit.
fn gave_up_early(view: &Value) -> bool {
    let history = view["history"].as_array().into_iter().flatten();
    history.last().is_some_and(|a| {
        a["status"] == 410 || a["error"].as_str().is_some_and(|e| e.contains("circuit"))
    })
}

/// Each attempt of a cycle no earlier than it was due; and no later than a tick after
/// where nothing may hold it back: nothing disturbed it, and it is for a receiver that
/// always answers (no circuit opens), of a tenant without a quota, with no ordering key.
fn attempts_on_time(id: &str, r: &Registered, view: &Value, model: &Model) -> Result<(), String> {
    let attempts = view["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == "attempt");
    let mut by_cycle: BTreeMap<usize, Vec<(i64, i64)>> = BTreeMap::new();
    for a in attempts {
        let (Some(cycle), Some(at)) = (a["cycle"].as_u64(), a["at"].as_str().and_then(ms_of))
        else {
            return Err(format!("{id}: an attempt without a cycle or a time: {a}"));
        };
        let took = a["duration_ms"].as_i64().unwrap_or(0);
        by_cycle.entry(cycle as usize).or_default().push((at, took));
    }
    let unhindered =
        model.steady(&r.url) && r.ordering_key.is_none() && r.tenant != model.quota_tenant;
    for (c, cycle) in by_cycle {
        let start = *r
            .cycles
            .get(c)
            .ok_or(format!("{id}: cycle {c} the workload never began"))?;
        let mut due = start + if c == 0 { r.delay_ms } else { 0 };
        for (k, (at, took)) in cycle.into_iter().enumerate() {
            let disturbed = disturbed_between(
                &model.disturbances,
                at.min(due) - TICK_MS,
                at.max(due) + TICK_MS,
            );
            let attempt = format!("{id}: attempt {} of cycle {c} at {at}, due at {due}", k + 1);
            if at < due - 1 && !r.hurried && !disturbed {
                return Err(attempt);
            }
            let late_after = model.late_after_ms.unwrap_or(TICK_MS).max(TICK_MS);
            if at > due + late_after && unhindered && !disturbed && !r.hurried {
                return Err(format!("{attempt}: late"));
            }
            due = at + took + r.schedule_ms.get(k).copied().unwrap_or(0);
        }
    }
    Ok(())
}

/// A successful delivery repeated only where a new cycle began between the two, or a
/// crash, a drain or a clock jump while it was leased may have lost the first one's
/// outcome.
fn sent_twice_only_after_a_crash(
    id: &str,
    r: &Registered,
    arrivals: &[Arrival],
    disturbances: &[i64],
) -> Result<(), String> {
    let successes: Vec<(usize, &Arrival)> = arrivals
        .iter()
        .enumerate()
        .filter(|(_, a)| a.id == id && r.takes(a.answer))
        .collect();
    for pair in successes.windows(2) {
        let ((i, first), (j, second)) = (pair[0], pair[1]);
        let new_cycle = r.cycle_marks.iter().any(|m| *m > i && *m <= j);
        let (from, to) = (first.at_ms.min(second.at_ms), first.at_ms.max(second.at_ms));
        let crash = disturbed_between(disturbances, from - LEASE_MS - TICK_MS, to);
        if !new_cycle && !crash {
            return Err(format!(
                "{id} delivered at {} and again at {}",
                first.at_ms, second.at_ms
            ));
        }
    }
    Ok(())
}

/// Notifications of one ordering key (and tenant) reach their receivers one at a time,
/// in the order they were asked for (where none was replayed or resent): none of a later
/// one arrives before the last of an earlier one.
fn one_at_a_time_per_ordering_key(model: &Model) -> Result<(), String> {
    let mut by_key: BTreeMap<(&str, &str), Vec<(&str, &Registered)>> = BTreeMap::new();
    for (id, r) in &model.accepted {
        if let (Some(key), 1) = (&r.ordering_key, r.cycles.len()) {
            by_key.entry((&r.tenant, key)).or_default().push((id, r));
        }
    }
    let arrived = |id: &str| -> Vec<usize> {
        let positions = model.arrivals.iter().enumerate();
        positions
            .filter(|(_, a)| a.id == id)
            .map(|(n, _)| n)
            .collect()
    };
    for list in by_key.values_mut() {
        list.sort_by_key(|(_, r)| r.seq);
        for pair in list.windows(2) {
            let ((a, _), (b, _)) = (pair[0], pair[1]);
            let (last_of_a, first_of_b) = (arrived(a).last().copied(), arrived(b).first().copied());
            if let (Some(last), Some(first)) = (last_of_a, first_of_b) {
                if first < last {
                    return Err(format!(
                        "{b} arrived (#{first}) before {a} was done (#{last})"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether anything in `disturbances` fell within `from..=to` (wall clock ms).
fn disturbed_between(disturbances: &[i64], from: i64, to: i64) -> bool {
    disturbances.iter().any(|d| (from..=to).contains(d))
}

fn ms_of(rfc3339: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339(rfc3339).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}
