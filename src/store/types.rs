//! What goes into the store and comes out of it, whatever the backend: the answers of
//! its roles (`roles.rs`) and the values they take, and the store's errors.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;

use super::listing::Paused;
use super::Cursor;
use crate::domain::{
    Attempt, AttemptReport, Endpoint, Entry, Fingerprint, JobId, JobSpec, Note, Notification,
    Tenant,
};
use crate::lifecycle::{transitions, JobStatus, Now, Record, Verdict};

/// The store could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The backend is unreachable or timed out; the caller may try again later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend answered with data this version cannot read.
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    /// A store script failed: a bug in it or in what postback handed it, not an outage.
    /// Only the request that met it fails, and it is not tried again.
    #[error("store script {script} failed: {message}")]
    Script {
        script: &'static str,
        message: String,
    },
    /// The write is on the primary, but fewer acknowledgements than asked for (replicas,
    /// `store.replica_acks`; append-only files, `store.fsync_acks`) came in time: a
    /// failover or a crash now could lose it. Trying again (with the same idempotency key,
    /// for a registration) waits for them once more.
    #[error("written on the primary, but {acked} of the {wanted} acknowledgements asked for (replicas, fsyncs) came in time")]
    NotReplicated { acked: u32, wanted: u32 },
    /// A shard's primary has fewer replicas connected than `store.replica_acks` asks
    /// for: writes to it are answered `replica_ack_timeout` until they connect.
    #[error("the primary of shard {shard} has {connected} of the {wanted} replicas store.replica_acks asks for")]
    ReplicasMissing {
        shard: usize,
        connected: u32,
        wanted: u32,
    },
}

impl StoreError {
    /// Whether trying again cannot help: the data or a script is at fault, not the
    /// store's reach.
    pub fn is_bug(&self) -> bool {
        !matches!(
            self,
            Self::Unavailable(_) | Self::NotReplicated { .. } | Self::ReplicasMissing { .. }
        )
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A notification as a reader sees it: what it is, where it is, what happened so far.
#[derive(Debug, Clone)]
pub struct JobView {
    pub id: JobId,
    pub spec: JobSpec,
    pub status: JobStatus,
    /// Its attempts and the notes between them, oldest first.
    pub history: Vec<Entry>,
}

/// The answer to an enqueue.
#[derive(Debug, Clone)]
pub struct Enqueued {
    pub id: JobId,
    /// `None` only for a duplicate whose notification retention has since deleted.
    pub status: Option<JobStatus>,
    /// The idempotency key was seen before; nothing new was stored.
    pub duplicate: bool,
    /// The idempotency key was first used with another request: nothing was stored, and
    /// `id` is the notification of that request.
    pub mismatch: bool,
    /// It is now the earliest due notification of its shard, due in this long:
    /// schedulers should wake then.
    pub earliest: Option<Duration>,
}

impl Enqueued {
    /// A new notification stored with `status`; `heads`: it is now its shard's earliest
    /// due (schedulers should wake at once).
    pub(crate) fn stored(id: JobId, status: JobStatus, heads: bool) -> Self {
        Self {
            id,
            status: Some(status),
            duplicate: false,
            mismatch: false,
            earliest: heads.then_some(Duration::ZERO),
        }
    }
}

/// An idempotency key, whose tenant it is, the fingerprint of the request that came
/// with it, and how long it is remembered.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// A producer's key (`IdempotencyKey`), or one of postback's own (an event's for one
    /// subscription: with spaces, so that no producer's key is one).
    pub key: String,
    pub tenant: Tenant,
    /// Of the request: a key repeated with another request is refused.
    pub fingerprint: Fingerprint,
    pub ttl: Duration,
    /// The shard the key hashes to, when that one was degraded and the notification was
    /// placed on another (`Placement`): the key may be kept there already, and is kept
    /// there before it is stored, for a repeat after the shard has recovered.
    pub moved_from: Option<u16>,
}

impl Idempotency {
    /// The key's name where a store names it by one string (Redis, the embedded store).
    pub fn scoped(&self) -> String {
        Self::scope(&self.key, &self.tenant)
    }

    /// How long the key is kept, in whole ms and at least 1 (a store would not keep a
    /// key for 0).
    pub fn ttl_ms(&self) -> u64 {
        (self.ttl.as_millis() as u64).max(1)
    }

    /// `key` within `tenant`: `<tenant> <key>`, for every tenant. A tenant's name holds
    /// no space, so the tenant is what comes before the first space whatever the key
    /// holds: no key of one tenant spells another's. (Postgres keeps the two apart in
    /// columns of their own.)
    pub fn scope(key: &str, tenant: &Tenant) -> String {
        format!("{tenant} {key}")
    }

    /// What a keyed notification's shard is chosen by (`Placement`): the key alone for
    /// the default tenant, `<tenant> <key>` for another, as earlier builds chose it, so
    /// that a repeat across an upgrade meets its first registration. It names no key.
    pub fn placement_key(&self) -> String {
        match self.tenant.is_default() {
            true => self.key.clone(),
            false => self.scoped(),
        }
    }

    /// The name of a key an earlier build stored by the name `legacy`, where it differs:
    /// the default tenant's keys had no tenant in front (a producer's key, with no
    /// space; or an event's for a subscription, `event <event id> <subscription id>`).
    pub fn upgraded_name(legacy: &str) -> Option<String> {
        let words: Vec<&str> = legacy.split(' ').collect();
        let default_tenants = match words.as_slice() {
            [_] => true,
            ["event", event, subscription] => {
                event.starts_with("evt_") && subscription.starts_with("sub_")
            }
            _ => false,
        };
        default_tenants.then(|| Self::scope(legacy, &Tenant::default()))
    }

    /// The key as a store writes it.
    pub(crate) fn entry(&self) -> IdempotencyEntry {
        IdempotencyEntry {
            name: self.scoped(),
            tenant: self.tenant.to_string(),
            key: self.key.clone(),
            ttl_ms: self.ttl_ms(),
            fingerprint: self.fingerprint.clone(),
        }
    }
}

/// A registration, ready to store: what a store that works out its records in Rust (the
/// embedded store, Postgres) writes for it.
pub(crate) struct NewJob {
    pub id: JobId,
    /// The meta line and the body (`spec::encode`).
    pub spec: String,
    /// Retry intervals in ms.
    pub schedule: Vec<u64>,
    pub delay_ms: u64,
    /// The idempotency key, named by its scoped key.
    pub idempotency: Option<IdempotencyEntry>,
}

impl NewJob {
    pub fn of(n: &Notification, idempotency: Option<&Idempotency>) -> Self {
        Self {
            id: n.id,
            spec: super::spec::encode(&n.spec()),
            schedule: n.schedule.intervals_ms(),
            delay_ms: n.delay.as_millis() as u64,
            idempotency: idempotency.map(Idempotency::entry),
        }
    }
}

/// An idempotency key as a store writes it: its name (`Idempotency::scoped`), or its
/// tenant and key apart (Postgres), for how long, and the fingerprint of the request
/// that first used it. Under it a store keeps `<id> <fingerprint>` (`kept`), read back
/// by `idempotency_value`.
#[derive(Debug, Clone)]
pub(crate) struct IdempotencyEntry {
    pub name: String,
    pub tenant: String,
    pub key: String,
    pub ttl_ms: u64,
    pub fingerprint: Fingerprint,
}

impl IdempotencyEntry {
    /// What is kept under the key for the notification `id`.
    pub fn kept(&self, id: &JobId) -> String {
        format!("{id} {}", self.fingerprint.as_str())
    }

    /// Whether `kept` (what is kept under the key) came with another request: then the
    /// registration is refused, not answered with that notification.
    pub fn mismatches(&self, kept: &str) -> bool {
        self.fingerprint.refuses(idempotency_value(kept).1)
    }
}

/// The id and fingerprint of what a store keeps under an idempotency key (`None`: kept
/// by a build before fingerprints).
pub fn idempotency_value(raw: &str) -> (&str, Option<&str>) {
    match raw.split_once(' ') {
        Some((id, fingerprint)) => (id, Some(fingerprint)),
        None => (raw, None),
    }
}

/// A registration a producer made inside its own database transaction, waiting to be
/// checked and stored (`Intake`).
#[derive(Debug, Clone)]
pub struct IntakeItem {
    /// Given when it was made, and returned to the producer then.
    pub id: JobId,
    /// The tenant its database role was granted.
    pub tenant: String,
    pub idempotency_key: Option<String>,
    /// The `POST /notify` body it stands for, as Postgres writes the `jsonb`.
    pub request: String,
}

/// The rules a registration made in the database is held to as it is made, each with
/// the error the API answers when it is broken (JSON text).
#[derive(Debug, Clone)]
pub struct IntakeRules {
    /// `IdempotencyKey::PATTERN`.
    pub key_pattern: String,
    pub key_error: String,
    /// `server.max_body_bytes`.
    pub max_request_bytes: i64,
    pub size_error: String,
}

/// What became of a registration taken in.
#[derive(Debug, Clone)]
pub enum TakenIn {
    /// Stored (or, for an idempotency key registered meanwhile over HTTP, answered with
    /// that notification).
    Stored { id: JobId, enqueued: Enqueued },
    /// Refused, with the error the API would have answered (`code`, `message`, `field`);
    /// kept for the producer to read.
    Refused { id: JobId, error: serde_json::Value },
}

/// A registration refused when it was taken in, while it is kept (`Intake::refusal`):
/// whose it was, and the error the API would have answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub tenant: Tenant,
    pub message: String,
    /// The field of the request the error names, if any.
    pub field: Option<String>,
}

/// How an instance checks a registration taken in: the notification to store and its
/// idempotency key, or the API's error.
pub type IntakeCheck = dyn Fn(&IntakeItem) -> Result<(Notification, Option<Idempotency>), serde_json::Value>
    + Send
    + Sync;

/// What to do with an endpoint's health that another instance published.
pub type HealthListener = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// A notification leased to this instance for one attempt.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub id: JobId,
    pub lease: u64,
    /// The number of this attempt (1 for the first).
    pub attempt: u32,
    /// Attempts in all: the last one is `attempt == max_attempts`.
    pub max_attempts: u32,
    /// When it was due, ms since the epoch (store clock).
    pub due_at: i64,
    /// When it was claimed, µs since the epoch (store clock, rounded down).
    pub claimed_at_us: i64,
    /// When this instance asked for the claim (its monotonic clock): the store clock read
    /// `claimed_at_us` at or after this instant.
    pub claim_asked: Instant,
    pub spec: JobSpec,
    /// Its send time is reserved in its rate key's quota: it goes when due.
    pub reserved: bool,
    /// It probes its paused endpoint (`Record::probe`): attempted although the endpoint
    /// is paused.
    pub probe: bool,
    /// Its deadline (`Record::deadline`): held back by an open circuit when due at or
    /// after it, it is dead (`transitions::dies_waiting`).
    pub deadline: Option<i64>,
    /// Since when it has waited for its endpoint's open circuit
    /// (`Record::waiting_since`).
    pub waiting_since: Option<i64>,
    /// The interval before its next attempt should this one fail (none after its last).
    pub next_interval_ms: Option<u64>,
}

impl ClaimedJob {
    /// The store clock now in ms, rounded up, from `claimed_at_us` and this instance's
    /// monotonic clock: never behind the store's own reading (it may be ahead by up to
    /// the claim's request latency plus 1 ms).
    pub fn store_now(&self) -> i64 {
        (self.store_now_us() + 999) / 1000
    }

    /// An upper bound of the store clock now, in µs: the store read `claimed_at_us`
    /// (rounded down, hence + 1) no earlier than `claim_asked`.
    fn store_now_us(&self) -> i64 {
        store_clock_us(self.claimed_at_us, self.claim_asked)
    }

    /// Whether this is its last attempt.
    pub fn is_last(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// Whether, held back now by an open circuit whose verdict stands, its deferral makes
    /// it a dead letter (`transitions::dies_waiting`).
    pub fn dies_waiting(&self) -> bool {
        transitions::dies_waiting(self.due_at, self.deadline, self.waiting_since)
    }

    /// How long to hold it before it is due, counted from when the claim's reply arrived
    /// (any moment after it will do: the store read `claimed_at_us` before answering, so
    /// `due_at - claimed_at_us` later it is due, or a little earlier).
    pub fn until_due(&self) -> Duration {
        Duration::from_micros((self.due_at * 1000 - self.claimed_at_us).max(0) as u64)
    }

    /// How late an attempt starting now is, in ms: from the due time to now on the store's
    /// clock (an upper bound, by the claim's round trip).
    pub fn lateness_ms(&self) -> i64 {
        (self.store_now_us() - self.due_at * 1000).max(0) / 1000
    }
}

/// An upper bound of the store clock now, in µs, from a claim's reading of it
/// (`claimed_at_us`, rounded down, hence + 1) taken no earlier than `asked`.
pub(crate) fn store_clock_us(claimed_at_us: i64, asked: Instant) -> i64 {
    let since = asked.elapsed();
    let elapsed_us =
        since.as_micros() as i64 + i64::from(!since.subsec_nanos().is_multiple_of(1_000));
    claimed_at_us + 1 + elapsed_us
}

/// The answer to a claim.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    pub jobs: Vec<ClaimedJob>,
    /// How long until the next notification falls due or a lease expires, if any.
    pub next_wake: Option<Duration>,
    /// The store was not asked: every part of it this instance claims failed its last
    /// claim and waits out its backoff (`next_wake`), so nothing says it is back.
    pub waiting_out_failures: bool,
}

/// What one attempt came to, to be recorded by `settle`.
#[derive(Debug, Clone)]
pub struct Settlement {
    pub id: JobId,
    pub lease: u64,
    /// How the attempt went, as the sender said (its `retry_after`: the next attempt is
    /// not due before it).
    pub report: AttemptReport,
    /// The next interval is stretched or shrunk by this many thousandths (jitter).
    pub jitter_permille: i32,
    /// When the attempt ended, store clock (`ClaimedJob::store_now`; never early). The
    /// store counts the next interval from then, not from when the settle reaches it, so
    /// that a settle held up (a busy or unreachable store) does not make the retry late.
    pub ended_at: i64,
    /// It has an ordering key, whose next notification waits for this outcome to be
    /// recorded.
    pub ordered: bool,
    /// The URL the attempt was sent to.
    pub url: String,
}

impl Settlement {
    /// Its entry in the history, when it ended at `ended` (store clock).
    pub fn attempt(&self, ended: i64) -> Attempt {
        let r = &self.report;
        Attempt {
            at: ended - r.duration_ms as i64,
            status: r.status,
            error: r.error.clone(),
            duration_ms: r.duration_ms,
            response: r.response.clone(),
            headers: r.headers.clone(),
            url: Some(self.url.clone()),
        }
    }

    /// How the attempt ended, as the lifecycle takes it.
    pub fn verdict(&self) -> Verdict {
        Verdict {
            outcome: self.report.outcome,
            ended_at: self.ended_at,
            retry_after_ms: self.report.retry_after.map_or(0, |d| d.as_millis() as i64),
            jitter_permille: self.jitter_permille,
        }
    }
}

/// A leased notification that may not be sent yet (rate limit, busy host, its endpoint
/// paused or its circuit open): handed back without counting an attempt.
#[derive(Debug, Clone)]
pub struct Deferral {
    pub id: JobId,
    pub lease: u64,
    pub back: Back,
}

/// How a deferred notification goes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Back {
    /// Due again after `delay`; `reserved` when that is its send time reserved in its
    /// rate key's quota.
    After { delay: Duration, reserved: bool },
    /// Held, out of every claim's reach, while its endpoint is paused.
    Held,
    /// Held back by the open circuit of its endpoint at `url`: due again after `delay`,
    /// when the circuit may let a request through, or, `judged` (no probe in flight, no
    /// answer from its endpoint since it was held back), dead past its deadline
    /// (`transitions::wait_for_circuit`).
    Circuit {
        delay: Duration,
        url: String,
        judged: bool,
    },
}

/// As the log writes it: `held`, `after 1s 200ms` (`, reserved` when its send time is
/// reserved), or `held back by its circuit, after 31s` (or dead, past its deadline).
impl std::fmt::Display for Back {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Back::Held => f.write_str("held"),
            Back::After { delay, reserved } => {
                let reserved = if *reserved { ", reserved" } else { "" };
                write!(f, "after {}{reserved}", humantime::format_duration(*delay))
            }
            Back::Circuit { delay, .. } => {
                let delay =
                    humantime::format_duration(Duration::from_millis(delay.as_millis() as u64));
                write!(f, "held back by its circuit, after {delay}")
            }
        }
    }
}

impl Back {
    /// Due again after `delay`, with no send time reserved.
    pub fn later(delay: Duration) -> Self {
        Back::After {
            delay,
            reserved: false,
        }
    }
}

impl Deferral {
    /// Its record once deferred, when `lease` is still its current lease, and the note
    /// its history gets, if any.
    pub fn apply(&self, r: &Record, now: Now) -> Option<(Record, Option<Note>)> {
        let lease = self.lease;
        match &self.back {
            Back::After { delay, reserved } => {
                transitions::defer(r, lease, now, delay.as_millis() as u64, *reserved)
                    .map(|r| (r, None))
            }
            Back::Held => transitions::hold(r, lease, now).map(|r| (r, None)),
            Back::Circuit { delay, url, judged } => {
                let delay_ms = delay.as_millis() as u64;
                transitions::wait_for_circuit(r, lease, now, delay_ms, url, *judged)
            }
        }
    }
}

/// The answer to a settle.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    /// Per settlement, in order: whether it was applied (false: its lease was lost).
    pub applied: Vec<bool>,
    /// A retry became the earliest due notification: schedulers should wake.
    pub earliest: bool,
    /// Finished notifications that retention deleted meanwhile.
    pub trimmed: usize,
    /// Settlements that made their notification a dead letter.
    pub dead_lettered: usize,
}

/// How many notifications are in each state, over all shards and per shard, and how many
/// retention deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    #[serde(flatten)]
    pub total: StateCounts,
    /// The same counts for each shard, in shard order.
    pub shards: Vec<StateCounts>,
    pub trimmed: Trimmed,
    /// How each shard's primary is replicated, in shard order (a store without replicas:
    /// none).
    pub replication: Vec<ShardReplication>,
}

/// The replicas of one shard's primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShardReplication {
    /// Connected and in sync.
    pub replicas: u32,
    /// How far the slowest of them is behind the primary, in bytes of the replication
    /// stream (0 with none).
    pub lag_bytes: u64,
}

/// What ended in one window of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    /// Delivered or cancelled.
    pub finished: u64,
    /// Dead-lettered.
    pub dead: u64,
}

/// Notifications per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    pub scheduled: u64,
    pub in_flight: u64,
    pub dead: u64,
    /// Delivered or cancelled, not yet deleted by retention.
    pub finished: u64,
}

impl StateCounts {
    pub fn add(&mut self, other: &StateCounts) {
        self.scheduled += other.scheduled;
        self.in_flight += other.in_flight;
        self.dead += other.dead;
        self.finished += other.finished;
    }
}

/// Notifications deleted by retention since the store was created, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Trimmed {
    pub dead_by_age: u64,
    pub dead_by_count: u64,
    pub finished_by_age: u64,
}

impl Trimmed {
    pub fn add(&mut self, other: &Trimmed) {
        self.dead_by_age += other.dead_by_age;
        self.dead_by_count += other.dead_by_count;
        self.finished_by_age += other.finished_by_age;
    }
}

/// Which notifications a list (of dead letters, or of one state of the queue) shows;
/// every condition given must hold.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub topic: Option<String>,
    /// The callback URL's host.
    pub host: Option<String>,
    /// At or after, ms since the epoch, in the time the list is ordered by (its index's
    /// score: the next attempt, the lease's end, the finish).
    pub since: Option<i64>,
    /// At or before, as `since`.
    pub until: Option<i64>,
    pub tenant: Option<Tenant>,
    /// Only notifications to this endpoint (its tenant's, at its origin).
    pub endpoint: Option<Endpoint>,
    /// The endpoints paused: their scheduled notifications are listed as held
    /// (`listing::shown`).
    pub paused: Paused,
}

impl ListFilter {
    /// Whether `v` passes the topic, host, tenant and endpoint conditions (times are the
    /// store's range).
    pub fn matches(&self, v: &JobView) -> bool {
        if self.tenant.as_ref().is_some_and(|t| *t != v.spec.tenant) {
            return false;
        }
        let tenant = &v.spec.tenant;
        let to_endpoint = |e: &Endpoint| Endpoint::of_text(tenant, &v.spec.url).as_ref() == Some(e);
        if !self.endpoint.as_ref().is_none_or(to_endpoint) {
            return false;
        }
        let topic_ok = self
            .topic
            .as_ref()
            .is_none_or(|t| v.spec.topic.as_ref() == Some(t));
        let host_ok = self
            .host
            .as_ref()
            .is_none_or(|h| v.spec.host().eq_ignore_ascii_case(h));
        topic_ok && host_ok
    }
}

/// A page of dead letters, newest first.
#[derive(Debug, Clone)]
pub struct DeadPage {
    pub items: Vec<JobView>,
    pub next_cursor: Option<Cursor>,
    /// How many notifications the page read to find its items.
    pub examined: usize,
}

#[cfg(test)]
impl ClaimedJob {
    /// A first attempt due at `due_at` (ms), claimed at `claimed_at_us`, for tests.
    pub(crate) fn example(due_at: i64, claimed_at_us: i64) -> Self {
        Self {
            id: JobId::new(0),
            lease: 1,
            attempt: 1,
            max_attempts: 3,
            due_at,
            claimed_at_us,
            claim_asked: Instant::now(),
            spec: JobSpec {
                url: "http://merchant.example.com/cb".into(),
                body: "{}".into(),
                content_type: "application/json".into(),
                headers: Vec::new(),
                timeout_ms: 1000,
                success: Default::default(),
                profile: None,
                topic: None,
                rate_key: "merchant.example.com".into(),
                traceparent: None,
                ordering_key: None,
                tenant: Default::default(),
            },
            reserved: false,
            probe: false,
            deadline: None,
            waiting_since: None,
            next_interval_ms: Some(1000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_clock_is_never_behind_a_reading_rounded_down() {
        // Read at 1000.999 ms, reported as 1000999 µs, and the reply came back at once.
        let job = ClaimedJob::example(1000, 1_000_999);
        assert!(job.store_now() >= 1001);
    }
}

/// What a store keeps of an answered write through a restart of its server, as found
/// when the instance started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    pub kind: DurabilityKind,
    /// The settings it was found with (`appendonly yes, appendfsync everysec`).
    pub detail: String,
}

/// How a store keeps what it answered, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DurabilityKind {
    /// A Redis that persists nothing (accepted by `store.allow_volatile`).
    Volatile,
    /// A Redis that hides its `CONFIG` (some managed services): not known.
    Unknown,
    /// A Redis that keeps snapshots only: what came after the last is lost.
    Snapshots,
    /// A Redis that keeps an append-only file (with or without snapshots).
    AppendOnly,
    /// Postgres: a transaction is answered once committed to its write-ahead log.
    WriteAheadLog,
    /// The embedded store: each write is on disk (fsync) before it is answered.
    Fsync,
}

impl DurabilityKind {
    /// As `/stats`, `/readyz` and the metric's label show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Volatile => "none",
            Self::Unknown => "unknown",
            Self::Snapshots => "rdb",
            Self::AppendOnly => "aof",
            Self::WriteAheadLog => "wal",
            Self::Fsync => "fsync",
        }
    }
}
