//! The JSON shapes of API answers, typed so that the OpenAPI document describes exactly
//! what the handlers send. Times are RFC 3339 UTC with milliseconds.

use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use super::permits;
use crate::delivery::sender::request_headers;
use crate::domain::{
    duration_text, shown_value, Attempt, Began, Cycle, Cycles, Ended, Entry, NoteKind, RawSuccess,
    ShardHealth,
};
use crate::endpoints::health::{CircuitRecord, Span};
use crate::lifecycle::{retention, Operation};
use crate::store::{
    Durability, EndpointPause, EndpointRecord, JobState, JobStatus, JobView, Listed, StateCounts,
    Stats, Trimmed,
};
use crate::tenancy::access::Principal;

pub use crate::domain::rfc3339;

// The API's own copy of `lifecycle::JobState`, so that the HTTP schema stays in `api/`.
/// Where a notification is in its life.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = JobState)]
pub enum StateView {
    Scheduled,
    /// Scheduled, and held while its endpoint is paused (from the pause on, unless it
    /// waits behind its ordering key): not attempted, its schedule frozen, until the
    /// endpoint is resumed.
    Held,
    InFlight,
    Delivered,
    Dead,
    Cancelled,
}

/// As the API spells it (`in_flight`), for the log.
impl std::fmt::Display for StateView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let spelled = serde_json::to_value(self).map_err(|_| std::fmt::Error)?;
        f.write_str(spelled.as_str().unwrap_or_default())
    }
}

// The API's spelling of `store::Listed`, so that the HTTP schema stays in `api/`.
/// The list a notification is in (`GET /notifications?state=`), as `Listed::of` places
/// it: its `state` told finer, in the words a list, the command line and the review page
/// use alike. `retrying` and `held_back` are `scheduled` in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListState {
    /// Due at its time, no attempt of its current cycle made yet.
    Scheduled,
    /// Due at its time, after a failed attempt of its current cycle.
    Retrying,
    /// Held while its endpoint is paused (from the pause on, unless it waits behind its
    /// ordering key): not attempted, its schedule frozen, until the endpoint is resumed.
    Held,
    /// Held back by its endpoint path's open circuit: no request made, no attempt
    /// counted; it goes when the circuit lets a request through.
    HeldBack,
    InFlight,
    Delivered,
    Dead,
    Cancelled,
}

impl From<Listed> for ListState {
    fn from(listed: Listed) -> Self {
        match listed {
            Listed::Scheduled => ListState::Scheduled,
            Listed::Retrying => ListState::Retrying,
            Listed::Held => ListState::Held,
            Listed::HeldBack => ListState::HeldBack,
            Listed::InFlight => ListState::InFlight,
            Listed::Delivered => ListState::Delivered,
            Listed::Dead => ListState::Dead,
            Listed::Cancelled => ListState::Cancelled,
        }
    }
}

impl From<&JobStatus> for ListState {
    fn from(status: &JobStatus) -> Self {
        Listed::of(status).into()
    }
}

impl From<&JobStatus> for StateView {
    fn from(status: &JobStatus) -> Self {
        match status.state {
            JobState::Scheduled if status.held => StateView::Held,
            JobState::Scheduled => StateView::Scheduled,
            JobState::InFlight => StateView::InFlight,
            JobState::Delivered => StateView::Delivered,
            JobState::Dead => StateView::Dead,
            JobState::Cancelled => StateView::Cancelled,
        }
    }
}

/// The answer to `POST /notify`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Registered {
    #[schema(example = "ntf_0_0352MTUd4Uo7EJoE0LjAvZ")]
    pub id: String,
    pub state: StateView,
    pub next_attempt_at: Option<String>,
}

impl Registered {
    pub fn new(id: &crate::domain::JobId, status: &JobStatus) -> Self {
        Self {
            id: id.to_string(),
            state: status.into(),
            next_attempt_at: next_attempt_at(status),
        }
    }
}

/// One entry of a notification's history: an attempt (when it started, the response
/// status (null when none came back) or the error, how long it took, the first bytes of
/// the response (`delivery.response_bytes`, or its tenant's) and its headers (at most 32
/// and 4 KiB, in the order they came; `set-cookie` withheld)), or a note of its
/// endpoint's open circuit, which is no attempt: no request was made (`status` null,
/// `error` what it means, `duration_ms` 0). Each names its cycle and the URL it went to.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    pub at: String,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response: String,
    pub response_headers: Vec<HeaderView>,
    pub kind: EntryKind,
    /// The cycle it belongs to (`cycles`).
    pub cycle: u32,
    /// The URL the attempt was sent to, or whose circuit held it back; for an attempt an
    /// earlier build recorded, its cycle's URL (null when unknown).
    pub url: Option<String>,
}

/// What a history entry is.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A request was sent (or refused by the SSRF guard).
    Attempt,
    /// Held back by its endpoint's open circuit: no request, no attempt counted; noted
    /// once, when the wait began. It waits for the circuit to let a request through.
    CircuitWait,
    /// Dead-lettered without a request: its endpoint's circuit was still open at its
    /// deadline (its cycle's start, delay and whole schedule).
    CircuitDeadline,
}

/// One cycle of a notification: its registration, or a replay or resend that sent it
/// again from a fresh attempt count.
#[derive(Debug, Serialize, ToSchema)]
pub struct CycleView {
    /// 0 for the registration's, then 1, 2, … (`cycle` of the notification is the
    /// current one).
    pub cycle: u32,
    /// What the review page and the command line call it: `Registered`, then `Replay 1`,
    /// `Resend 2`, … (`Sent again 3` for one an earlier build kept no note of).
    #[schema(example = "Replay 1")]
    pub name: String,
    /// `registered`, `replay`, `resend`, or `unrecorded` (sent again by a build that
    /// kept no note of it: its attempts are counted in the cycle before).
    #[schema(example = "replay")]
    pub began: &'static str,
    pub began_at: Option<String>,
    /// The URL its attempts went (or go) to; null when unknown.
    pub url: Option<String>,
    /// Attempts made in it.
    pub attempts: u32,
}

impl AttemptView {
    /// The view of `entry` of cycle `cycle` (`None` for a cycle's beginning, which
    /// `cycles` shows), `cycles` telling the URL of attempts that do not.
    fn of(entry: &Entry, cycle: u32, cycles: &Cycles) -> Option<Self> {
        let url = entry
            .url()
            .or_else(|| cycles.url_of(cycle))
            .map(str::to_string);
        let view = match entry {
            Entry::Attempt(a) => Self::attempt(a, cycle, url),
            Entry::Note(n) => Self {
                at: rfc3339(n.at),
                status: None,
                error: Some(n.error()?.to_string()),
                duration_ms: 0,
                response: String::new(),
                response_headers: Vec::new(),
                kind: match n.note {
                    NoteKind::CircuitDeadline => EntryKind::CircuitDeadline,
                    _ => EntryKind::CircuitWait,
                },
                cycle,
                url,
            },
        };
        Some(view)
    }
}

impl From<&Cycle> for CycleView {
    fn from(c: &Cycle) -> Self {
        Self {
            cycle: c.number,
            name: c.name(),
            began: c.began.as_str(),
            began_at: c.at.map(rfc3339),
            url: c.url.clone(),
            attempts: c.attempts,
        }
    }
}

/// A header: its name in lower case, its value.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeaderView {
    pub name: String,
    pub value: String,
}

impl AttemptView {
    fn attempt(a: &Attempt, cycle: u32, url: Option<String>) -> Self {
        Self {
            at: rfc3339(a.at),
            status: a.status,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            response: a.response.clone(),
            response_headers: a
                .headers
                .iter()
                .map(|(name, value)| HeaderView {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            kind: EntryKind::Attempt,
            cycle,
            url,
        }
    }
}

/// `GET /notifications/{id}`: state, attempts, next attempt, history (oldest first).
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationView {
    pub id: String,
    pub state: StateView,
    /// The list it is in (`GET /notifications?state=`), its `state` told finer: what
    /// the review page and the command line show.
    pub list: ListState,
    pub url: String,
    pub topic: Option<String>,
    pub rate_key: String,
    /// Whose notification it is.
    pub tenant: String,
    /// Attempted one at a time with the others of this key, in registration order.
    #[schema(example = "order-42")]
    pub ordering_key: Option<String>,
    /// Scheduled behind an earlier notification of its ordering key: it has no time of
    /// its own (`next_attempt_at` is null) until that one is delivered, dead or cancelled.
    pub waiting: bool,
    /// The configured profile it was registered with.
    #[schema(example = "alipay")]
    pub profile: Option<String>,
    /// What counts as delivered; absent for the default, any 2xx.
    pub success: Option<RawSuccess>,
    /// Attempts made in its current cycle (since the last replay or resend), of
    /// `max_attempts`.
    pub attempts: u32,
    pub max_attempts: u32,
    /// Attempts made in all its cycles: the `attempt` entries of `history`.
    pub total_attempts: u32,
    pub next_attempt_at: Option<String>,
    /// Held back by its endpoint's open circuit since then: no request made since, no
    /// attempt counted; it goes when the circuit lets a request through.
    pub held_back_since: Option<String>,
    /// While held back: when it is dead-lettered if the circuit is still open then (its
    /// cycle's start, delay and whole schedule).
    pub deadline: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// A cancel arrived during an attempt; it is cancelled once that attempt ends.
    pub cancel_requested: bool,
    /// The number of its current cycle: 0 until it is replayed or resent, then one more
    /// with each replay or resend (`cycles` says which each was).
    pub cycle: u32,
    /// How often its dead letter was replayed: the cycles a replay began.
    pub replays: u32,
    /// How often it was resent: the cycles a resend began.
    pub resends: u32,
    /// Its cycles, oldest first: its registration, then each replay or resend.
    pub cycles: Vec<CycleView>,
    /// What each attempt of its current cycle sends (earlier attempts went to the `url`
    /// their history entry names).
    pub request: RequestView,
    /// Its attempts and its circuit's notes, oldest first, each with its cycle.
    pub history: Vec<AttemptView>,
    /// What the caller may do with it now: what the lifecycle takes in its state and
    /// the caller's roles let it ask. The review page offers these and no other.
    pub actions: Vec<ActionView>,
}

/// An action on one notification, named for what it does; each is the call of one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = NotificationAction)]
pub enum ActionView {
    /// `DELETE /notifications/{id}`: scheduled (held, held back or waiting included), or
    /// in flight without a cancel asked for already.
    Cancel,
    /// `POST /notifications/{id}/attempt-now`: scheduled (held, held back or waiting
    /// included).
    AttemptNow,
    /// `POST /notifications/{id}/resend`: delivered, dead or cancelled, in a state the
    /// caller may resend (`resendable` of `GET /me`).
    Resend,
    /// `POST /dead-letters/{id}/replay`: dead.
    Replay,
    /// `DELETE /dead-letters/{id}`: dead.
    Discard,
}

impl From<Operation> for ActionView {
    fn from(op: Operation) -> Self {
        match op {
            Operation::Cancel => ActionView::Cancel,
            Operation::AttemptNow => ActionView::AttemptNow,
            Operation::Resend => ActionView::Resend,
            Operation::Replay => ActionView::Replay,
            Operation::Discard => ActionView::Discard,
        }
    }
}

/// The request each attempt of a notification sends: method, URL, the headers every
/// attempt carries (credentials `(withheld)`) and the body. Each attempt adds its own
/// `webhook-timestamp` (the attempt's time, in seconds) and `webhook-signature` over
/// `{webhook-id}.{webhook-timestamp}.{body}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RequestView {
    #[schema(example = "POST")]
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<HeaderView>,
    /// The body as it is sent.
    pub body: String,
}

impl RequestView {
    fn of(v: &JobView) -> Self {
        let mut headers: Vec<HeaderView> = Vec::with_capacity(v.spec.headers.len() + 3);
        let id = v.id.to_string();
        request_headers(&id, &v.spec, |name, value| {
            let value = shown_value(name.as_str(), value.to_str().unwrap_or_default()).to_string();
            match headers.iter_mut().find(|h| h.name == name.as_str()) {
                Some(set) => set.value = value,
                None => headers.push(HeaderView {
                    name: name.to_string(),
                    value,
                }),
            }
        });
        Self {
            method: "POST",
            url: v.spec.url.clone(),
            headers,
            body: v.spec.body.clone(),
        }
    }
}

impl NotificationView {
    /// The view of `v` to `caller`, with what it may do with it (`permits::actions`).
    pub fn new(v: &JobView, caller: &Principal) -> Self {
        let s = &v.status;
        let cycles = Cycles::of(&v.history, s.created_at, s.replays, &v.spec.url);
        let history = v.history.iter().zip(&cycles.of_entry);
        let history: Vec<AttemptView> = history
            .filter_map(|(entry, &cycle)| AttemptView::of(entry, cycle, &cycles))
            .collect();
        let held_back_since = s.circuit_since.filter(|_| s.state == JobState::Scheduled);
        Self {
            id: v.id.to_string(),
            state: s.into(),
            list: s.into(),
            url: v.spec.url.clone(),
            topic: v.spec.topic.clone(),
            rate_key: v.spec.rate_key.clone(),
            tenant: v.spec.tenant.to_string(),
            ordering_key: v.spec.ordering_key.as_ref().map(ToString::to_string),
            waiting: s.waiting,
            profile: v.spec.profile.clone(),
            success: (!v.spec.success.is_default()).then(|| v.spec.success.clone().into()),
            attempts: s.attempts,
            max_attempts: s.max_attempts,
            total_attempts: cycles.cycles.iter().map(|c| c.attempts).sum(),
            next_attempt_at: next_attempt_at(s),
            held_back_since: held_back_since.map(rfc3339),
            deadline: held_back_since.and(s.deadline).map(rfc3339),
            created_at: rfc3339(s.created_at),
            finished_at: s.finished_at.map(rfc3339),
            cancel_requested: s.cancel_requested,
            cycle: s.replays,
            replays: cycles.count(Began::Replay),
            resends: cycles.count(Began::Resend),
            cycles: cycles.cycles.iter().map(CycleView::from).collect(),
            request: RequestView::of(v),
            history,
            actions: permits::actions(caller, s)
                .into_iter()
                .map(ActionView::from)
                .collect(),
        }
    }
}

/// `GET /dead-letters/{id}`: the notification with its body and when it died.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterView {
    #[serde(flatten)]
    pub notification: NotificationView,
    /// The body as it is sent.
    pub body: String,
    pub content_type: String,
    pub dead_at: Option<String>,
}

impl DeadLetterView {
    /// The view of `v` to `caller` (`NotificationView::new`).
    pub fn new(v: &JobView, caller: &Principal) -> Self {
        Self {
            notification: NotificationView::new(v, caller),
            body: v.spec.body.clone(),
            content_type: v.spec.content_type.clone(),
            dead_at: v.status.finished_at.map(rfc3339),
        }
    }
}

/// One line of `GET /dead-letters`: what it was, when it died, and the last failure.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterItem {
    pub id: String,
    pub url: String,
    pub topic: Option<String>,
    pub tenant: String,
    pub attempts: u32,
    pub dead_at: Option<String>,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
}

impl From<&JobView> for DeadLetterItem {
    fn from(v: &JobView) -> Self {
        let last = Ended::last(&v.history);
        Self {
            id: v.id.to_string(),
            url: v.spec.url.clone(),
            topic: v.spec.topic.clone(),
            tenant: v.spec.tenant.to_string(),
            attempts: v.status.attempts,
            dead_at: v.status.finished_at.map(rfc3339),
            last_status: last.and_then(|a| a.status),
            last_error: last.and_then(|a| a.error.map(str::to_string)),
        }
    }
}

/// A page of dead letters, newest first; pass `next_cursor` back as `cursor`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterPage {
    pub items: Vec<DeadLetterItem>,
    pub next_cursor: Option<String>,
}

/// A notification as a list of the queue shows it: where it is, when it goes or went,
/// and how its last attempt ended; the body and the history are on its own page.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationItem {
    pub id: String,
    /// The list it is in, the `list` its view shows.
    pub state: ListState,
    pub url: String,
    pub topic: Option<String>,
    pub tenant: String,
    pub ordering_key: Option<String>,
    /// Waiting behind an earlier notification of its ordering key.
    pub waiting: bool,
    /// Attempts made in its current cycle (since the last replay or resend).
    pub attempts: u32,
    pub max_attempts: u32,
    pub next_attempt_at: Option<String>,
    pub finished_at: Option<String>,
    pub created_at: String,
    /// When the last attempt was made (or its endpoint's circuit held it back), its
    /// status and error.
    pub last_attempt_at: Option<String>,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
}

impl From<&JobView> for NotificationItem {
    fn from(v: &JobView) -> Self {
        let (s, last) = (&v.status, Ended::last(&v.history));
        Self {
            id: v.id.to_string(),
            state: s.into(),
            url: v.spec.url.clone(),
            topic: v.spec.topic.clone(),
            tenant: v.spec.tenant.to_string(),
            ordering_key: v.spec.ordering_key.as_ref().map(ToString::to_string),
            waiting: s.waiting,
            attempts: s.attempts,
            max_attempts: s.max_attempts,
            next_attempt_at: next_attempt_at(s),
            finished_at: s.finished_at.map(rfc3339),
            created_at: rfc3339(s.created_at),
            last_attempt_at: last.map(|a| rfc3339(a.at)),
            last_status: last.and_then(|a| a.status),
            last_error: last.and_then(|a| a.error.map(str::to_string)),
        }
    }
}

/// A page of one list of the queue; pass `next_cursor` back as `cursor`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationPage {
    pub items: Vec<NotificationItem>,
    pub next_cursor: Option<String>,
    /// The page stopped short at the bound of what one call examines (a filter that
    /// matches few): more may follow from `next_cursor`.
    pub partial: bool,
}

impl NotificationPage {
    pub fn of<'a>(
        views: impl Iterator<Item = &'a JobView>,
        next_cursor: Option<String>,
        limit: usize,
    ) -> Self {
        let items: Vec<NotificationItem> = views.map(NotificationItem::from).collect();
        Self {
            partial: next_cursor.is_some() && items.len() < limit,
            items,
            next_cursor,
        }
    }
}

/// The answer to a replay of one dead letter.
#[derive(Debug, Serialize, ToSchema)]
pub struct Replayed {
    pub id: String,
    pub state: StateView,
    pub attempts: u32,
    pub max_attempts: u32,
    pub url: String,
    pub next_attempt_at: Option<String>,
}

/// How many dead letters a bulk action changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Count {
    pub count: usize,
}

/// The answer of the health routes.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// `/readyz`: the shards that take no new notification now (the instance is ready
    /// while another can). Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded_shards: Vec<DegradedView>,
    /// `/readyz`: what the store keeps of an answered write through a restart of its
    /// server, as found at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityView>,
}

/// What the store keeps of an answered write through a restart of its server, as found
/// when the instance started.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StoreDurability)]
pub struct DurabilityView {
    /// `aof` (Redis's append-only file), `rdb` (its snapshots only: what came after the
    /// last is lost), `none` (a Redis that persists nothing, accepted by
    /// `store.allow_volatile`), `unknown` (a Redis that hides `CONFIG`), `wal`
    /// (Postgres), `fsync` (the embedded store).
    #[schema(example = "aof")]
    pub kind: &'static str,
    /// The settings found.
    #[schema(example = "appendonly yes, appendfsync everysec, save \"3600 1\"")]
    pub detail: String,
}

impl From<Durability> for DurabilityView {
    fn from(d: Durability) -> Self {
        Self {
            kind: d.kind.name(),
            detail: d.detail,
        }
    }
}

/// A shard that takes no new notification now, and why: its primary cannot acknowledge
/// writes as `store.replica_acks` asks.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = DegradedShard)]
pub struct DegradedView {
    pub shard: u16,
    #[schema(example = "its primary has 0 of the 1 replicas store.replica_acks asks for")]
    pub reason: String,
    /// Since when, as this instance saw it.
    pub since: String,
}

impl DegradedView {
    /// Every degraded shard `health` knows of.
    pub fn all(health: &ShardHealth) -> Vec<Self> {
        health
            .degraded()
            .into_iter()
            .map(|d| Self {
                shard: d.shard,
                reason: d.reason,
                since: rfc3339(d.since),
            })
            .collect()
    }
}

/// How many notifications are in each state, over all shards and per shard, and how many
/// retention deleted.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Stats)]
pub struct StatsView {
    #[serde(flatten)]
    pub total: CountsView,
    /// The same counts for each shard, in shard order.
    pub shards: Vec<CountsView>,
    pub trimmed: TrimmedView,
    /// On Redis, for a token of every tenant: each shard's primary's replicas, in shard
    /// order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replication: Vec<ReplicationView>,
    /// For a token of every tenant: the shards that take no new notification now, and
    /// why. Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded_shards: Vec<DegradedView>,
    /// For one tenant's counts: the limits its notifications are held to, its own where
    /// it has some (`[tenants.<name>.retention]`), else `[retention]`'s. Retention deletes
    /// its oldest dead letters beyond `dead_max_count` (counted in `trimmed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionView>,
    /// For a token of every tenant: what the store keeps of an answered write through a
    /// restart of its server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityView>,
}

/// The retention limits of one tenant.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = RetentionLimits)]
pub struct RetentionView {
    /// Dead letters are kept this long (a duration, `30d`).
    pub dead_max_age: String,
    /// At most this many of the tenant's dead letters are kept (each shard keeps its
    /// share).
    pub dead_max_count: u64,
    /// Delivered and cancelled notifications are kept this long.
    pub finished_max_age: String,
}

impl From<retention::Limits> for RetentionView {
    fn from(l: retention::Limits) -> Self {
        let text = |ms: i64| duration_text(Duration::from_millis(ms.max(0) as u64));
        Self {
            dead_max_age: text(l.dead_max_age_ms),
            dead_max_count: l.dead_max_count,
            finished_max_age: text(l.finished_max_age_ms),
        }
    }
}

impl From<Stats> for StatsView {
    fn from(s: Stats) -> Self {
        Self {
            total: s.total.into(),
            shards: s.shards.into_iter().map(CountsView::from).collect(),
            trimmed: s.trimmed.into(),
            replication: s
                .replication
                .into_iter()
                .map(|r| ReplicationView {
                    replicas: r.replicas,
                    lag_bytes: r.lag_bytes,
                })
                .collect(),
            degraded_shards: Vec::new(),
            retention: None,
            durability: None,
        }
    }
}

/// The replicas of one shard's primary.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Replication)]
pub struct ReplicationView {
    /// Connected and in sync.
    pub replicas: u32,
    /// How far the slowest is behind the primary, in bytes of the replication stream.
    pub lag_bytes: u64,
}

/// Notifications per state.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StateCounts)]
pub struct CountsView {
    pub scheduled: u64,
    pub in_flight: u64,
    pub dead: u64,
    /// Delivered or cancelled, not yet deleted by retention.
    pub finished: u64,
}

impl From<StateCounts> for CountsView {
    fn from(c: StateCounts) -> Self {
        Self {
            scheduled: c.scheduled,
            in_flight: c.in_flight,
            dead: c.dead,
            finished: c.finished,
        }
    }
}

/// Notifications deleted by retention since the store was created, by reason.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Trimmed)]
pub struct TrimmedView {
    pub dead_by_age: u64,
    pub dead_by_count: u64,
    pub finished_by_age: u64,
}

impl From<Trimmed> for TrimmedView {
    fn from(t: Trimmed) -> Self {
        Self {
            dead_by_age: t.dead_by_age,
            dead_by_count: t.dead_by_count,
            finished_by_age: t.finished_by_age,
        }
    }
}

/// When the next attempt is due, while one is pending, neither waiting behind its
/// ordering key nor held.
pub fn next_attempt_at(s: &JobStatus) -> Option<String> {
    let pending =
        matches!(s.state, JobState::Scheduled | JobState::InFlight) && !s.waiting && !s.held;
    s.next_at.filter(|_| pending).map(rfc3339)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_milliseconds() {
        assert_eq!(rfc3339(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
    }

    /// A view's `list` and the list it is in are one word: what `?state=` takes.
    #[test]
    fn a_list_state_is_spelled_as_the_list_of_its_name() {
        use super::{ListState, Listed};
        for listed in Listed::ALL {
            let spelled = serde_json::to_value(ListState::from(listed)).unwrap();
            assert_eq!(spelled, listed.name());
        }
    }
}

/// How an endpoint is doing: `paused` while paused (its notifications held), else
/// `failing` while its last attempts (as many as `consecutive_failures`) failed,
/// `healthy` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointState {
    Healthy,
    Failing,
    Paused,
}

/// Attempts at an endpoint over a span of time.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptCounts {
    pub attempts: u64,
    pub successes: u64,
    /// `successes / attempts`; `null` without attempts.
    pub success_rate: Option<f64>,
}

impl From<Span> for AttemptCounts {
    fn from(s: Span) -> Self {
        Self {
            attempts: s.attempts,
            successes: s.successes,
            success_rate: (s.attempts > 0).then(|| s.successes as f64 / s.attempts as f64),
        }
    }
}

/// The last failed attempt at an endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointFailure {
    pub at: String,
    /// The response's status; `null` when none came (`error` says why).
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// An endpoint: one tenant's callback origin (scheme, host and port), with its health as
/// every instance's attempts tell it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointView {
    /// `ep_` and 24 hex digits; the same origin of another tenant is another endpoint.
    pub id: String,
    pub tenant: String,
    /// The origin, `scheme://host[:port]`.
    pub url: String,
    pub state: EndpointState,
    /// When its first notification was registered (or first attempted).
    pub first_seen_at: String,
    pub last_attempt_at: Option<String>,
    pub last_success_at: Option<String>,
    /// When the failures in a row began; `null` while healthy.
    pub failing_since: Option<String>,
    pub consecutive_failures: u64,
    pub last_failure: Option<EndpointFailure>,
    pub last_hour: AttemptCounts,
    pub last_day: AttemptCounts,
    /// While paused: since when, and by whom.
    pub paused: Option<PauseView>,
    /// Its circuits, one per path that had one open (an open one, or one closed within
    /// the day), in path order: each path of an endpoint has its own breaker.
    pub circuits: Vec<CircuitView>,
    /// Its notifications waiting for an attempt: only in the view of one endpoint
    /// (`GET /endpoints/{id}`), not in a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notifications: Option<Backlog>,
}

/// An endpoint's notifications waiting for an attempt, counted when asked.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct Backlog {
    /// Scheduled or retrying: due at their time.
    pub pending: u64,
    /// Held while the endpoint is paused: every one not waiting behind its ordering key,
    /// from the pause on (those its circuits held back included).
    pub held: u64,
    /// Held back by one of its open circuits (the endpoint not paused): `circuits` says
    /// which.
    pub held_back: u64,
    /// `false` when a count stopped before the end of its list (it read as much as one
    /// view may): there are at least this many.
    pub complete: bool,
}

/// Whether a circuit lets requests through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CircuitStateView {
    /// Its path's notifications are held back, without requests, until a circuit probe
    /// succeeds.
    Open,
    Closed,
}

/// The circuit breaker of one path of an endpoint, as the instance whose request last
/// changed it told.
#[derive(Debug, Serialize, ToSchema)]
pub struct CircuitView {
    #[schema(example = "/hooks/pay")]
    pub path: String,
    pub state: CircuitStateView,
    /// While open: since when (failed circuit probes keep it open since then).
    pub open_since: Option<String>,
    /// While open: when its next circuit probe may go (the one request it lets through;
    /// not a paused endpoint's pause probe); a past time: with the next notification of
    /// the path that comes due. A resume of the endpoint, a success at another of its
    /// paths or an attempt now lets it probe at once.
    pub next_probe_at: Option<String>,
    /// When it closed.
    pub closed_at: Option<String>,
    /// Its notifications held back now: only in the view of one endpoint
    /// (`GET /endpoints/{id}`), counted as `notifications` are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_back: Option<u64>,
}

impl From<&CircuitRecord> for CircuitView {
    fn from(c: &CircuitRecord) -> Self {
        Self {
            path: c.path.clone(),
            state: match c.is_open() {
                true => CircuitStateView::Open,
                false => CircuitStateView::Closed,
            },
            open_since: c.open_since.map(rfc3339),
            next_probe_at: c.probe_at.filter(|_| c.is_open()).map(rfc3339),
            closed_at: (!c.is_open()).then(|| rfc3339(c.at)),
            held_back: None,
        }
    }
}

/// An endpoint's pause.
#[derive(Debug, Serialize, ToSchema)]
pub struct PauseView {
    pub since: String,
    /// The name of the token that paused it.
    pub by: String,
}

impl EndpointView {
    /// The view of `r`, paused by `pause` if it is.
    pub fn new(r: &EndpointRecord, pause: Option<&EndpointPause>, now: i64) -> Self {
        Self {
            id: r.id().to_string(),
            tenant: r.tenant.to_string(),
            url: r.origin.clone(),
            state: match (pause, r.is_failing()) {
                (Some(_), _) => EndpointState::Paused,
                (None, true) => EndpointState::Failing,
                (None, false) => EndpointState::Healthy,
            },
            paused: pause.map(|p| PauseView {
                since: rfc3339(p.since),
                by: p.by.clone(),
            }),
            first_seen_at: rfc3339(r.first_seen),
            last_attempt_at: r.last_attempt.map(rfc3339),
            last_success_at: r.last_success.map(rfc3339),
            failing_since: r.failing_since.map(rfc3339),
            consecutive_failures: r.consecutive_failures,
            last_failure: r.last_failure.as_ref().map(|f| EndpointFailure {
                at: rfc3339(f.at),
                status: f.status,
                error: f.error.clone(),
            }),
            last_hour: r.last_hour(now).into(),
            last_day: r.last_day(now).into(),
            circuits: r.circuits.iter().map(CircuitView::from).collect(),
            notifications: None,
        }
    }
}

/// A page of endpoints; pass `next_cursor` back as `cursor`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointPage {
    pub items: Vec<EndpointView>,
    pub next_cursor: Option<String>,
}
