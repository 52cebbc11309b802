//! Endpoints' health, the same in every store: one record per endpoint (a tenant's
//! callback origin, `domain::Endpoint`), stored as JSON under the key `<tenant> <id>`, so
//! that a tenant's endpoints are one range of keys and every tenant's are listed in one
//! order. Each instance gathers what it sees (`EndpointTally`: registrations, attempts
//! and how they went) and adds it to the records every second (`EndpointHealth`), each
//! store reading and writing a record in one transaction; `EndpointRecord::add` is the
//! arithmetic, here once.
//!
//! A record also says when its endpoint was last told to be failing (`endpoint.failing`,
//! `ops_events`): the write that finds it failing for long enough, and not told of this
//! run of failures nor within the hour, tells it, and since each record is written in one
//! transaction, one instance of the fleet does. The same write pauses an endpoint with no
//! success for its tenant's `pause_after` (`EndpointRules`), once per run of failures;
//! a resume starts the count again, so that what a resume lets go gets `pause_after` to
//! succeed before the endpoint is paused again.
//!
//! A record keeps its endpoint's circuits too, one per path (`CircuitRecord`): open
//! (since when, its next probe) or closed, as the instance whose request last changed
//! each told it (the latest change wins). So a circuit outlives the instances that
//! opened it (one that starts reads it back before it holds back a notification), and
//! the API shows it with the endpoint. Closed ones are kept a day, at most
//! `MAX_CIRCUITS` in all.
//!
//! Attempts are counted in five-minute windows for the last hour and in hours for the
//! last day. The failures in a row, and since when, are counted from every instance's
//! tallies: a tally whose last success is the newest known sets them, one without a
//! success adds the failures it saw after the newest known success.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{Endpoint, EndpointId, Tenant};
use crate::store::{StoreError, StoreResult, OUTCOME_WINDOWS, OUTCOME_WINDOW_MS};

const HOUR_MS: i64 = 3_600_000;
/// An endpoint is told to be failing at most once in this long (`endpoint.failing`).
const RETELL_MS: i64 = HOUR_MS;
/// Hours the day's counts cover.
const HOURS: i64 = 24;
/// Circuits a record keeps at most, open ones first.
const MAX_CIRCUITS: usize = 32;
/// How long a closed circuit is kept in its endpoint's record.
const CLOSED_KEPT_MS: i64 = HOURS * HOUR_MS;

/// The key of an endpoint's record: its tenant, then its id (`domain::endpoint_key`).
pub use crate::domain::endpoint_key as key;

/// The keys of `tenant`'s records lie from this (inclusive) …
pub fn tenant_start(tenant: &Tenant) -> String {
    format!("{tenant} ")
}

/// … to this (exclusive): `!` follows the space.
pub fn tenant_end(tenant: &Tenant) -> String {
    format!("{tenant}!")
}

/// The keys a listing reads, after `after` and within `tenant`'s (if named): from the
/// first bound (its key, and whether it is included) to the second (excluded); `None`
/// leaves that end open.
pub fn range(
    tenant: Option<&Tenant>,
    after: Option<&str>,
) -> (Option<(String, bool)>, Option<String>) {
    let low = match (tenant.map(tenant_start), after) {
        (Some(start), Some(a)) if a >= start.as_str() => Some((a.to_string(), false)),
        (Some(start), _) => Some((start, true)),
        (None, Some(a)) => Some((a.to_string(), false)),
        (None, None) => None,
    };
    (low, tenant.map(tenant_end))
}

/// Whether the stored record `json` (under `key`) is of an endpoint idle since before
/// `idle_before` (ms), which retention forgets. A record that cannot be read is
/// forgotten too: it would only fail every read of its tenant's list.
pub fn is_idle(key: &str, json: &str, idle_before: i64) -> bool {
    EndpointRecord::decode(key, json).map_or(true, |r| r.last_active() < idle_before)
}

/// When endpoints are told failing and paused: the fleet's rules, a tenant's own
/// `pause_after` overriding the instance's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointRules {
    /// An endpoint failing this long is told as `endpoint.failing` (`ops.failing_after`).
    pub tell_failing_after: Duration,
    /// One with no success for this long is paused (`endpoints.pause_after`); zero: never.
    pub pause_after: Duration,
    /// Tenants' own `pause_after`.
    pub tenants: BTreeMap<Tenant, Duration>,
}

impl EndpointRules {
    /// How long `tenant`'s endpoints fail before they are paused; `None`: never.
    pub fn pause_after(&self, tenant: &Tenant) -> Option<Duration> {
        let after = self.tenants.get(tenant).unwrap_or(&self.pause_after);
        (!after.is_zero()).then_some(*after)
    }
}

/// Who pauses an endpoint that kept failing, in its pause's `by`.
pub const PAUSED_BY_POSTBACK: &str = "postback";

/// A paused endpoint: its notifications are held, not attempted, until it is resumed.
/// Kept under the endpoint's key apart from its record, so that instances read every
/// pause at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPause {
    /// When it was paused (ms).
    pub since: i64,
    /// Who paused it: the token's name, for a pause by hand.
    pub by: String,
}

impl EndpointPause {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a pause serializes")
    }

    /// The pause stored under `key`; an error naming the key when it cannot be read.
    pub fn decode(key: &str, json: &str) -> StoreResult<Self> {
        serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt(format!("endpoint pause {key}: {e}")))
    }
}

/// The last failed attempt: when, and what it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub at: i64,
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// The circuit of one path of an endpoint, as of `at` (ms): open since `open_since`,
/// its next probe at `probe_at`, or closed (neither) at `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitRecord {
    pub path: String,
    pub at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_since: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_at: Option<i64>,
}

impl CircuitRecord {
    pub fn is_open(&self) -> bool {
        self.open_since.is_some()
    }
}

/// What one instance saw of one endpoint since it last told the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointTally {
    pub endpoint: Endpoint,
    /// When it first and last saw the endpoint (a registration or an attempt), ms.
    pub first_seen: i64,
    pub last_seen: i64,
    /// Attempts and successes by five-minute window.
    pub windows: BTreeMap<i64, (u64, u64)>,
    pub last_attempt: Option<i64>,
    pub last_success: Option<i64>,
    /// Failures after `last_success` (or all, without one), and when the first was.
    pub failures_after: u64,
    pub failing_from: Option<i64>,
    pub last_failure: Option<Failure>,
    /// Its circuits' latest changes by this instance's requests, by path.
    pub circuits: BTreeMap<String, CircuitRecord>,
}

impl EndpointTally {
    pub fn new(endpoint: Endpoint, at: i64) -> Self {
        Self {
            endpoint,
            first_seen: at,
            last_seen: at,
            windows: BTreeMap::new(),
            last_attempt: None,
            last_success: None,
            failures_after: 0,
            failing_from: None,
            last_failure: None,
            circuits: BTreeMap::new(),
        }
    }

    /// Notes a change of one of its circuits, unless a later one is noted.
    pub fn circuit(&mut self, change: CircuitRecord) {
        let later = |c: &CircuitRecord| c.at > change.at;
        if !self.circuits.get(&change.path).is_some_and(later) {
            self.circuits.insert(change.path.clone(), change);
        }
    }

    /// Notes a registration at `at`.
    pub fn registered(&mut self, at: i64) {
        self.last_seen = self.last_seen.max(at);
    }

    /// Counts an attempt that ended at `at`; `failure` says how it failed, if it did.
    pub fn attempted(&mut self, at: i64, failure: Option<Failure>) {
        self.last_seen = self.last_seen.max(at);
        let counts = self
            .windows
            .entry(at.div_euclid(OUTCOME_WINDOW_MS))
            .or_default();
        counts.0 += 1;
        self.last_attempt = self.last_attempt.max(Some(at));
        match failure {
            None => {
                counts.1 += 1;
                self.last_success = self.last_success.max(Some(at));
                self.failures_after = 0;
                self.failing_from = None;
            }
            Some(failure) => {
                self.failures_after += 1;
                self.failing_from = self.failing_from.or(Some(failure.at));
                self.last_failure = Some(failure);
            }
        }
    }

    /// Adds a later tally of the same endpoint.
    pub fn merge(&mut self, later: EndpointTally) {
        self.first_seen = self.first_seen.min(later.first_seen);
        self.last_seen = self.last_seen.max(later.last_seen);
        for (w, (a, s)) in later.windows {
            let counts = self.windows.entry(w).or_default();
            counts.0 += a;
            counts.1 += s;
        }
        self.last_attempt = self.last_attempt.max(later.last_attempt);
        if later.last_success.is_some() {
            self.last_success = later.last_success;
            self.failures_after = later.failures_after;
            self.failing_from = later.failing_from;
        } else {
            self.failures_after += later.failures_after;
            self.failing_from = self.failing_from.or(later.failing_from);
        }
        if later.last_failure.is_some() {
            self.last_failure = later.last_failure;
        }
        for change in later.circuits.into_values() {
            self.circuit(change);
        }
    }
}

/// An endpoint's health as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    pub tenant: Tenant,
    pub origin: String,
    pub first_seen: i64,
    /// When it was last registered to or attempted.
    #[serde(default)]
    pub last_seen: i64,
    pub last_attempt: Option<i64>,
    pub last_success: Option<i64>,
    pub failing_since: Option<i64>,
    pub consecutive_failures: u64,
    pub last_failure: Option<Failure>,
    /// When it was last told to be failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_told_at: Option<i64>,
    /// When a write last paused it for failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<i64>,
    /// When it was last resumed: its failures count for a pause from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<i64>,
    /// Its circuits, one per path with one kept, in path order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub circuits: Vec<CircuitRecord>,
    /// `[window, attempts, successes]` for the five-minute windows of the last hour.
    minutes: Vec<[i64; 3]>,
    /// `[hour, attempts, successes]` for the hours of the last day.
    hours: Vec<[i64; 3]>,
}

/// A record once a tally is added (`EndpointRecord::added`): what to store, and what the
/// write decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The record to store (JSON).
    pub json: String,
    pub record: EndpointRecord,
    /// This write tells it to be failing.
    pub tell_failing: bool,
    /// This write pauses it: the pause to store unless it is paused already.
    pub pause: Option<EndpointPause>,
}

/// What happened to an endpoint that `ops_events` tells: decided by a write of records,
/// or by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointNotice {
    /// Failing for `tell_failing_after`.
    Failing(EndpointRecord),
    /// Paused (it was not paused before): for failing `pause_after`, or by hand.
    Paused(EndpointRecord, EndpointPause),
    /// Resumed by hand, by the token named.
    Resumed(EndpointRecord, String),
}

impl EndpointNotice {
    /// The endpoint's record.
    pub fn record(&self) -> &EndpointRecord {
        match self {
            Self::Failing(r) | Self::Paused(r, _) | Self::Resumed(r, _) => r,
        }
    }
}

impl Added {
    /// What to tell of it, once its record and pause are stored; `newly_paused`: the
    /// store took its pause (it was not paused already).
    pub fn notices(self, newly_paused: bool) -> Vec<EndpointNotice> {
        let mut notices = Vec::new();
        if self.tell_failing {
            notices.push(EndpointNotice::Failing(self.record.clone()));
        }
        if let Some(pause) = self.pause.filter(|_| newly_paused) {
            notices.push(EndpointNotice::Paused(self.record, pause));
        }
        notices
    }
}

/// Attempts and how many succeeded over a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub attempts: u64,
    pub successes: u64,
}

impl EndpointRecord {
    /// The key it is kept under (`key`).
    pub fn key(&self) -> String {
        key(&self.tenant, &self.id())
    }

    fn new(tally: &EndpointTally) -> Self {
        Self {
            tenant: tally.endpoint.tenant.clone(),
            origin: tally.endpoint.origin.clone(),
            first_seen: tally.first_seen,
            last_seen: tally.last_seen,
            last_attempt: None,
            last_success: None,
            failing_since: None,
            consecutive_failures: 0,
            last_failure: None,
            failing_told_at: None,
            paused_at: None,
            resumed_at: None,
            circuits: Vec::new(),
            minutes: Vec::new(),
            hours: Vec::new(),
        }
    }

    /// Reads a stored record; `key` names it in the error.
    pub fn decode(key: &str, json: &str) -> StoreResult<Self> {
        serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt(format!("endpoint record `{key}`: {e}")))
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            tenant: self.tenant.clone(),
            origin: self.origin.clone(),
        }
    }

    pub fn id(&self) -> EndpointId {
        self.endpoint().id()
    }

    /// When it was last registered to or attempted.
    pub fn last_active(&self) -> i64 {
        self.last_seen.max(self.first_seen)
    }

    /// Failing: its last attempt (as far as the fleet has told) failed.
    pub fn is_failing(&self) -> bool {
        self.consecutive_failures > 0
    }

    /// The attempts of the last hour at `now`.
    pub fn last_hour(&self, now: i64) -> Span {
        sum(
            &self.minutes,
            now.div_euclid(OUTCOME_WINDOW_MS) - OUTCOME_WINDOWS,
        )
    }

    /// The attempts of the last day at `now`.
    pub fn last_day(&self, now: i64) -> Span {
        sum(&self.hours, now.div_euclid(HOUR_MS) - HOURS)
    }

    /// The stored record (JSON) once `tally` is added to `stored` (none: a new endpoint),
    /// at `now`, under `rules`: whether this write tells it to be failing (failing for
    /// `tell_failing_after` or longer, and told neither of this run of failures nor within
    /// the hour), and whether it pauses it (no success for its tenant's `pause_after`
    /// since this run of failures began or it was last resumed, and not paused for this
    /// run yet). The windows older than they cover are dropped.
    pub fn added(
        key: &str,
        stored: Option<&str>,
        tally: &EndpointTally,
        now: i64,
        rules: &EndpointRules,
    ) -> StoreResult<Added> {
        let mut record = match stored {
            Some(json) => Self::decode(key, json)?,
            None => Self::new(tally),
        };
        record.add(tally, now);
        let tell_failing = record.to_tell(now, rules.tell_failing_after.as_millis() as i64);
        if tell_failing {
            record.failing_told_at = Some(now);
        }
        let pause_after = rules.pause_after(&record.tenant);
        let pause = pause_after.filter(|after| record.to_pause(now, after.as_millis() as i64));
        let pause = pause.map(|_| {
            record.paused_at = Some(now);
            EndpointPause {
                since: now,
                by: PAUSED_BY_POSTBACK.to_string(),
            }
        });
        Ok(Added {
            json: record.encode(),
            record,
            tell_failing,
            pause,
        })
    }

    /// The stored record `json` (under `key`) of an endpoint resumed at `now`.
    pub fn resumed(key: &str, json: &str, now: i64) -> StoreResult<String> {
        let mut record = Self::decode(key, json)?;
        record.resumed_at = Some(now);
        Ok(record.encode())
    }

    fn to_tell(&self, now: i64, after_ms: i64) -> bool {
        let Some(since) = self.failing_since.filter(|_| self.is_failing()) else {
            return false;
        };
        let told_of_this_run = self.failing_told_at.is_some_and(|t| t >= since);
        let told_lately = self.failing_told_at.is_some_and(|t| now - t < RETELL_MS);
        now - since >= after_ms && !told_of_this_run && !told_lately
    }

    fn to_pause(&self, now: i64, after_ms: i64) -> bool {
        let Some(since) = self.failing_since.filter(|_| self.is_failing()) else {
            return false;
        };
        let counted_from = since.max(self.resumed_at.unwrap_or(i64::MIN));
        let paused_for_this_run = self.paused_at.is_some_and(|p| p >= counted_from);
        now - counted_from >= after_ms && !paused_for_this_run
    }

    fn add(&mut self, t: &EndpointTally, now: i64) {
        self.first_seen = self.first_seen.min(t.first_seen);
        self.last_seen = self.last_seen.max(t.last_seen);
        for (&w, &(a, s)) in &t.windows {
            add_to(&mut self.minutes, w, a, s);
            add_to(
                &mut self.hours,
                (w * OUTCOME_WINDOW_MS).div_euclid(HOUR_MS),
                a,
                s,
            );
        }
        let minute_floor = now.div_euclid(OUTCOME_WINDOW_MS) - OUTCOME_WINDOWS;
        self.minutes.retain(|c| c[0] > minute_floor);
        let hour_floor = now.div_euclid(HOUR_MS) - HOURS;
        self.hours.retain(|c| c[0] > hour_floor);
        self.last_attempt = self.last_attempt.max(t.last_attempt);
        self.add_circuits(t.circuits.values(), now);
        self.add_failures(t);
        if let Some(f) = &t.last_failure {
            if self
                .last_failure
                .as_ref()
                .is_none_or(|mine| mine.at <= f.at)
            {
                self.last_failure = Some(f.clone());
            }
        }
    }

    /// The circuit of `path`, if kept.
    pub fn circuit(&self, path: &str) -> Option<&CircuitRecord> {
        self.circuits.iter().find(|c| c.path == path)
    }

    /// Takes each change later than the one kept of its path; keeps closed circuits
    /// `CLOSED_KEPT_MS`, and `MAX_CIRCUITS` in all, open and latest first.
    fn add_circuits<'c>(&mut self, changes: impl Iterator<Item = &'c CircuitRecord>, now: i64) {
        for change in changes {
            match self.circuits.iter_mut().find(|c| c.path == change.path) {
                Some(kept) if kept.at > change.at => {}
                Some(kept) => *kept = change.clone(),
                None => self.circuits.push(change.clone()),
            }
        }
        self.circuits
            .retain(|c| c.is_open() || now - c.at < CLOSED_KEPT_MS);
        if self.circuits.len() > MAX_CIRCUITS {
            self.circuits
                .sort_by_key(|c| (!c.is_open(), std::cmp::Reverse(c.at)));
            self.circuits.truncate(MAX_CIRCUITS);
        }
        self.circuits.sort_by(|a, b| a.path.cmp(&b.path));
    }

    fn add_failures(&mut self, t: &EndpointTally) {
        let newest_known = self.last_success;
        self.last_success = self.last_success.max(t.last_success);
        if t.last_success.is_some() && t.last_success >= newest_known {
            self.consecutive_failures = t.failures_after;
            self.failing_since = t.failing_from;
            return;
        }
        // Failures that all ended before the newest success known are not in a row now.
        let after_newest = t
            .last_failure
            .as_ref()
            .is_some_and(|f| Some(f.at) > self.last_success);
        if t.failures_after > 0 && after_newest {
            self.consecutive_failures += t.failures_after;
            let from = t.failing_from.max(self.last_success);
            self.failing_since = self.failing_since.or(from);
        }
    }
}

fn add_to(counts: &mut Vec<[i64; 3]>, at: i64, attempts: u64, successes: u64) {
    match counts.iter_mut().find(|c| c[0] == at) {
        Some(c) => {
            c[1] += attempts as i64;
            c[2] += successes as i64;
        }
        None => counts.push([at, attempts as i64, successes as i64]),
    }
}

fn sum(counts: &[[i64; 3]], floor: i64) -> Span {
    counts
        .iter()
        .filter(|c| c[0] > floor)
        .fold(Span::default(), |s, c| Span {
            attempts: s.attempts + c[1].max(0) as u64,
            successes: s.successes + c[2].max(0) as u64,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000;

    fn tally() -> EndpointTally {
        let tenant = Tenant::parse("shop-a", "tenant").unwrap();
        let endpoint = Endpoint::of_text(&tenant, "https://pay.example.com/n").unwrap();
        EndpointTally::new(endpoint, T0)
    }

    fn failure(at: i64) -> Option<Failure> {
        Some(Failure {
            at,
            status: Some(500),
            error: None,
        })
    }

    const MINUTE: Duration = Duration::from_secs(60);

    /// Told failing after a minute, paused after ten.
    fn rules() -> EndpointRules {
        EndpointRules {
            tell_failing_after: MINUTE,
            pause_after: 10 * MINUTE,
            tenants: BTreeMap::new(),
        }
    }

    fn record(tallies: &[EndpointTally], now: i64) -> EndpointRecord {
        let mut stored: Option<String> = None;
        for t in tallies {
            let added = EndpointRecord::added("k", stored.as_deref(), t, now, &rules()).unwrap();
            stored = Some(added.json);
        }
        EndpointRecord::decode("k", &stored.unwrap()).unwrap()
    }

    /// Adds each tally at its time; at which of them the endpoint was told failing.
    fn told_at(tallies: &[(i64, EndpointTally)]) -> Vec<i64> {
        let mut stored: Option<String> = None;
        let mut told = Vec::new();
        for (now, t) in tallies {
            let added = EndpointRecord::added("k", stored.as_deref(), t, *now, &rules()).unwrap();
            if added.tell_failing {
                told.push(*now);
            }
            stored = Some(added.json);
        }
        told
    }

    fn failed_at(at: i64) -> (i64, EndpointTally) {
        let mut t = tally();
        t.attempted(at, failure(at));
        (at, t)
    }

    fn delivered_at(at: i64) -> (i64, EndpointTally) {
        let mut t = tally();
        t.attempted(at, None);
        (at, t)
    }

    #[test]
    fn a_failing_endpoint_is_told_once_per_run_and_at_most_hourly() {
        let m = 60_000;
        let told = told_at(&[
            failed_at(T0),
            failed_at(T0 + m / 2),
            failed_at(T0 + m),
            failed_at(T0 + 2 * m),
            delivered_at(T0 + 3 * m),
            failed_at(T0 + 4 * m),
            failed_at(T0 + 6 * m),
            delivered_at(T0 + 70 * m),
            failed_at(T0 + 71 * m),
            failed_at(T0 + 73 * m),
        ]);
        // Failing a minute at T0 + 1m; the run after the success at 3m is not told
        // within the hour; the run that starts at 71m is.
        assert_eq!(told, vec![T0 + m, T0 + 73 * m]);
    }

    /// Adds each tally at its time, resuming the endpoint at the times in `resumes`; at
    /// which of them the endpoint was paused, under `rules`.
    fn paused_at(
        tallies: &[(i64, EndpointTally)],
        resumes: &[i64],
        rules: &EndpointRules,
    ) -> Vec<i64> {
        let mut stored: Option<String> = None;
        let mut paused = Vec::new();
        for (now, t) in tallies {
            if let (Some(json), true) = (&stored, resumes.contains(now)) {
                stored = Some(EndpointRecord::resumed("k", json, *now).unwrap());
            }
            let added = EndpointRecord::added("k", stored.as_deref(), t, *now, rules).unwrap();
            if let Some(pause) = &added.pause {
                assert_eq!((pause.since, pause.by.as_str()), (*now, PAUSED_BY_POSTBACK));
                paused.push(*now);
            }
            stored = Some(added.json);
        }
        paused
    }

    #[test]
    fn an_endpoint_failing_for_pause_after_is_paused_once_per_run_and_again_after_a_resume() {
        let m = 60_000;
        let run: Vec<(i64, EndpointTally)> = [0, 5, 10, 11, 15, 21, 30, 31, 42]
            .iter()
            .map(|&n| failed_at(T0 + n * m))
            .collect();
        // Failing from T0: paused at 10m, not again in this run until a resume at 15m,
        // which counts ten minutes again (paused at 30m, not at 21m).
        assert_eq!(paused_at(&run, &[], &rules()), vec![T0 + 10 * m]);
        assert_eq!(
            paused_at(&run, &[T0 + 15 * m], &rules()),
            vec![T0 + 10 * m, T0 + 30 * m]
        );
        // A success ends the run: the next one counts from its first failure.
        let mut healed = run[..3].to_vec();
        healed.extend([
            delivered_at(T0 + 12 * m),
            failed_at(T0 + 13 * m),
            failed_at(T0 + 23 * m),
        ]);
        assert_eq!(
            paused_at(&healed, &[], &rules()),
            vec![T0 + 10 * m, T0 + 23 * m]
        );
    }

    #[test]
    fn a_tenants_pause_after_overrides_the_instances_and_zero_never_pauses() {
        let m = 60_000;
        let run: Vec<(i64, EndpointTally)> =
            [0, 3, 10].iter().map(|&n| failed_at(T0 + n * m)).collect();
        let shop_a = Tenant::parse("shop-a", "tenant").unwrap();
        let mut sooner = rules();
        sooner.tenants.insert(shop_a.clone(), 3 * MINUTE);
        assert_eq!(paused_at(&run, &[], &sooner), vec![T0 + 3 * m]);
        let mut never = rules();
        never.tenants.insert(shop_a, Duration::ZERO);
        assert_eq!(paused_at(&run, &[], &never), Vec::<i64>::new());
        // Another tenant's override is not shop-a's.
        let mut other = rules();
        other
            .tenants
            .insert(Tenant::parse("shop-b", "tenant").unwrap(), Duration::ZERO);
        assert_eq!(paused_at(&run, &[], &other), vec![T0 + 10 * m]);
    }

    #[test]
    fn attempts_are_counted_by_hour_and_day_and_forgotten_after() {
        let mut t = tally();
        t.attempted(T0, None);
        t.attempted(T0 + 1, failure(T0 + 1));
        t.attempted(T0 - 2 * HOUR_MS, None);
        let r = record(&[t], T0);
        assert_eq!(
            r.last_hour(T0),
            Span {
                attempts: 2,
                successes: 1
            }
        );
        assert_eq!(
            r.last_day(T0),
            Span {
                attempts: 3,
                successes: 2
            }
        );
        assert_eq!(r.last_hour(T0 + HOUR_MS).attempts, 0);
        assert_eq!(r.last_day(T0 + 25 * HOUR_MS).attempts, 0);
    }

    #[test]
    fn failures_in_a_row_count_from_the_newest_success_of_any_instance() {
        let mut a = tally();
        a.attempted(T0, failure(T0));
        a.attempted(T0 + 10, failure(T0 + 10));
        let r = record(&[a.clone()], T0 + 20);
        assert_eq!((r.consecutive_failures, r.failing_since), (2, Some(T0)));

        let mut b = tally();
        b.attempted(T0 + 30, None);
        b.attempted(T0 + 40, failure(T0 + 40));
        let r = record(&[a.clone(), b.clone()], T0 + 50);
        assert_eq!(
            (r.consecutive_failures, r.failing_since),
            (1, Some(T0 + 40))
        );
        assert_eq!(r.last_success, Some(T0 + 30));

        // A tally whose failures all came before the newest success adds nothing.
        let r = record(&[b, a], T0 + 50);
        assert_eq!(
            (r.consecutive_failures, r.failing_since),
            (1, Some(T0 + 40))
        );
    }

    #[test]
    fn a_success_heals_it() {
        let mut t = tally();
        t.attempted(T0, failure(T0));
        t.attempted(T0 + 5, None);
        let r = record(&[t], T0 + 10);
        assert!(!r.is_failing());
        assert_eq!(r.failing_since, None);
        assert_eq!(r.last_failure.map(|f| f.at), Some(T0));
    }

    #[test]
    fn tallies_merged_count_as_one() {
        let mut a = tally();
        a.attempted(T0, failure(T0));
        let mut b = tally();
        b.attempted(T0 + 1, failure(T0 + 1));
        let mut merged = a.clone();
        merged.merge(b.clone());
        assert_eq!(record(&[merged], T0 + 2), record(&[a, b], T0 + 2));
    }

    #[test]
    fn an_endpoint_is_idle_from_its_last_registration_or_attempt() {
        let mut t = tally();
        let fresh = EndpointRecord::added("k", None, &t, T0, &rules())
            .unwrap()
            .json;
        assert!(!is_idle("k", &fresh, T0));
        assert!(is_idle("k", &fresh, T0 + 1));
        t.registered(T0 + 5);
        let registered = EndpointRecord::added("k", Some(&fresh), &t, T0 + 5, &rules())
            .unwrap()
            .json;
        assert!(!is_idle("k", &registered, T0 + 5));
        t.attempted(T0 + 10, None);
        let attempted = EndpointRecord::added("k", Some(&registered), &t, T0 + 10, &rules())
            .unwrap()
            .json;
        assert!(!is_idle("k", &attempted, T0 + 10));
        assert!(is_idle("k", "{", T0));
    }

    fn circuit(path: &str, at: i64, open: bool) -> CircuitRecord {
        CircuitRecord {
            path: path.into(),
            at,
            open_since: open.then_some(at - 10),
            probe_at: open.then_some(at + 30_000),
        }
    }

    #[test]
    fn its_circuits_are_the_latest_changes_told_per_path() {
        let (mut a, mut b) = (tally(), tally());
        a.circuit(circuit("/n", T0, true));
        a.circuit(circuit("/m", T0, true));
        b.circuit(circuit("/n", T0 + 5, false));
        b.circuit(circuit("/m", T0 - 5, false));
        let r = record(&[a.clone(), b.clone()], T0 + 10);
        assert_eq!(
            r.circuit("/n"),
            Some(&circuit("/n", T0 + 5, false)),
            "closed later"
        );
        assert_eq!(
            r.circuit("/m"),
            Some(&circuit("/m", T0, true)),
            "an older close"
        );
        assert_eq!(
            record(&[b, a.clone()], T0 + 10).circuits,
            r.circuits,
            "in any order"
        );
        let mut merged = a;
        merged.circuit(circuit("/n", T0 - 1, false));
        assert!(
            merged.circuits["/n"].is_open(),
            "a tally keeps its latest change"
        );
        let later = T0 + CLOSED_KEPT_MS + 10;
        let kept = record(&[r_tally(&r), tally()], later);
        assert_eq!(
            kept.circuits.len(),
            1,
            "a closed one is kept a day: {kept:?}"
        );
    }

    /// A tally carrying `r`'s circuits.
    fn r_tally(r: &EndpointRecord) -> EndpointTally {
        let mut t = tally();
        for c in &r.circuits {
            t.circuit(c.clone());
        }
        t
    }

    #[test]
    fn a_record_keeps_its_open_circuits_first_and_at_most_so_many() {
        let mut t = tally();
        for n in 0..MAX_CIRCUITS + 8 {
            t.circuit(circuit(&format!("/{n:03}"), T0 + n as i64, n % 2 == 0));
        }
        let r = record(&[t], T0 + 100);
        assert_eq!(r.circuits.len(), MAX_CIRCUITS);
        assert_eq!(
            r.circuits.iter().filter(|c| c.is_open()).count(),
            (MAX_CIRCUITS + 8) / 2
        );
        assert!(r.circuits.windows(2).all(|w| w[0].path < w[1].path));
    }

    #[test]
    fn a_record_that_cannot_be_read_is_named() {
        let e =
            EndpointRecord::added("shop-a ep_1", Some("{"), &tally(), T0, &rules()).unwrap_err();
        assert!(e.to_string().contains("shop-a ep_1"), "{e}");
    }
}
