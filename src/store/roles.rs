//! The storage port, by role: what the pipeline asks of the queue, what operators do,
//! what readers read, the fleet's rate reservations and messages, the audit log,
//! endpoints' health and collections of documents (`collections.rs`).
//! A backend implements each role it serves; `Store` is every role but fleet messaging,
//! which a backend of one instance has no use for (`Store::fleet`). Each call is atomic
//! where it changes anything.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::collections::Collections;
use super::types::{
    Claim, DeadPage, Deferral, Enqueued, HealthListener, Idempotency, IntakeCheck, IntakeRules,
    JobView, ListFilter, Refusal, Settled, Settlement, Stats, StoreResult, TakenIn,
};
use super::{
    AuditEntry, AuditFilter, AuditPosition, AuditRecord, Cursor, Durability, ListPage, Listed,
};
use super::{EndpointPause, EndpointRecord, EndpointTally, Outcomes, WalkCursor};
use crate::delivery::policy::{RateAsk, SendTimes};
use crate::domain::{EndpointId, JobId, JobSpec, Notification, Schedule, ShardHealth, Tenant};
use crate::endpoints::health::{EndpointNotice, EndpointRules};
use crate::lifecycle::{Again, Cancelled, JobStatus, LetGo};

/// The queue as the pipeline drives it: registrations in, claims out, outcomes back.
#[async_trait]
pub trait Queue: Send + Sync {
    /// Stores a notification and schedules its first attempt.
    async fn enqueue(
        &self,
        notification: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Enqueued>;

    /// Stores several registrations, each as `enqueue` would: one result each, in order.
    /// A store that gathers registrations into groups takes these as one.
    async fn enqueue_many(
        &self,
        registrations: &[(&Notification, Option<&Idempotency>)],
    ) -> Vec<StoreResult<Enqueued>> {
        let each = registrations.iter().map(|(n, i)| self.enqueue(n, *i));
        futures_util::future::join_all(each).await
    }

    /// Leases for `lease` up to `limit` notifications due now or within `ahead` (the
    /// caller holds those until they are due; `due_at` says when). A store of several
    /// shards may reach further ahead in a shard that has few due (up to four times as
    /// far), so that its claims come in larger groups.
    async fn claim(&self, limit: usize, lease: Duration, ahead: Duration) -> StoreResult<Claim>;

    /// Records attempts and moves each notification to its next state.
    async fn settle(&self, batch: &[Settlement]) -> StoreResult<Settled>;

    /// Hands leased notifications back to the due set for later, without counting an
    /// attempt. Whether one became the earliest due (schedulers should wake).
    async fn defer(&self, batch: &[Deferral]) -> StoreResult<bool>;

    /// Hands leased notifications back, due at once, without counting an attempt.
    async fn release(&self, leases: &[(JobId, u64)]) -> StoreResult<usize>;

    /// Applies retention once over every shard (bounded work per call). How many
    /// notifications were deleted.
    async fn trim(&self) -> StoreResult<usize>;

    /// Until `cancel` fires: calls `wake.notify_one()` whenever a notification becomes
    /// due earlier than any before it (registered or retried by this instance or, on a
    /// shared store, by another), and whenever this instance is handed more of the work.
    async fn watch(&self, wake: Arc<Notify>, cancel: CancellationToken);
}

/// What operators do to single notifications and dead letters.
#[async_trait]
pub trait OperatorActions: Send + Sync {
    /// Cancels a notification that has not finished.
    async fn cancel(&self, id: &JobId) -> StoreResult<Cancelled>;

    /// Schedules a dead letter again from a fresh attempt count, with a new spec or
    /// schedule when given. Its new status, or `None` when there is no such dead letter.
    async fn replay(
        &self,
        id: &JobId,
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Option<JobStatus>>;

    /// Schedules each of `ids` that `which` takes back (dead letters for a replay, any
    /// finished one for a resend) again, from a fresh attempt count, with a new schedule
    /// when given. How many were.
    async fn send_again(
        &self,
        which: Again,
        ids: &[JobId],
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<usize>;

    /// Makes a scheduled notification due now, as `how` says (`LetGo::Probe`: a held one,
    /// to probe its paused endpoint). Whether it was let go.
    async fn attempt_now(&self, id: &JobId, how: LetGo) -> StoreResult<bool>;

    /// Deletes the dead letters among `ids`. How many were deleted.
    async fn discard(&self, ids: &[JobId]) -> StoreResult<usize>;
}

/// What the API and the operator read: notifications, lists, counts.
#[async_trait]
pub trait Reads: Send + Sync {
    /// One notification with its history.
    async fn get(&self, id: &JobId) -> StoreResult<Option<JobView>>;

    /// The notification `tenant`'s idempotency `key` registered, while the key is kept.
    async fn find_by_key(&self, tenant: &Tenant, key: &str) -> StoreResult<Option<JobView>>;

    /// A page of the notifications in `listed` that `filter` matches, in its order
    /// (`Listed::soonest_first`), after `after`. A walk leaves out what came to the
    /// state after its first page (`Listed::keeps`), so that it returns each at most
    /// once. Each shard examines a bounded number per page: a page may come back short
    /// with a cursor to go on from.
    async fn list(
        &self,
        listed: Listed,
        filter: &ListFilter,
        limit: usize,
        after: Option<&WalkCursor>,
    ) -> StoreResult<ListPage>;

    /// Dead letters, newest first, `limit` at a time, after `cursor`.
    async fn dead_letters(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<DeadPage>;

    /// Counts by state and of what retention deleted, of every tenant or of one.
    async fn stats(&self, tenant: Option<&Tenant>) -> StoreResult<Stats>;

    /// How many notifications finished (delivered or cancelled) and how many were
    /// dead-lettered in each of `windows` consecutive windows (`OUTCOME_WINDOW_MS` wide,
    /// numbered from the epoch) from `first_window`, the last one open-ended; of every
    /// tenant or of one (whose windows are kept for the last `OUTCOME_WINDOWS` only).
    async fn outcomes(
        &self,
        tenant: Option<&Tenant>,
        first_window: i64,
        windows: usize,
    ) -> StoreResult<Vec<Outcomes>>;

    /// Succeeds when the store answers.
    async fn ping(&self) -> StoreResult<()>;
}

/// Send times in rate keys' quotas, for every instance of the fleet at once.
#[async_trait]
pub trait RateReservations: Send + Sync {
    /// Reserves send times (`policy::reserve`), after any pause an ask sets: per ask, in
    /// order, its send times.
    async fn reserve(&self, asks: &[RateAsk]) -> StoreResult<Vec<SendTimes>>;
}

/// Operators' actions, kept for `retention.audit_max_age`.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Adds an operator's action to the audit log, at the store's time, and deletes
    /// entries past `retention.audit_max_age`.
    async fn record_audit(&self, record: &AuditRecord) -> StoreResult<()>;

    /// Up to `n` audit entries older than `before` (or the newest), within `filter`'s
    /// time range, newest first: one bounded read, which `audit::page` pages with.
    async fn audit_entries(
        &self,
        filter: &AuditFilter,
        before: Option<AuditPosition>,
        n: usize,
    ) -> StoreResult<Vec<AuditEntry>>;
}

/// Endpoints' health (`endpoints.rs`), one record per endpoint for the whole fleet.
#[async_trait]
pub trait EndpointHealth: Send + Sync {
    /// Adds what an instance saw of endpoints to their records (`EndpointRecord::added`)
    /// under `rules`, each read and written in one transaction with the pause it decides;
    /// an endpoint not seen before gets one. What this write tells: the endpoints failing
    /// for `tell_failing_after`, and those it paused.
    async fn record_endpoints(
        &self,
        tallies: &[EndpointTally],
        rules: &EndpointRules,
    ) -> StoreResult<Vec<EndpointNotice>>;

    /// Up to `n` records in the order of their keys (`endpoints::key`), after the key
    /// `after`, of `tenant`'s endpoints or of every tenant's.
    async fn endpoints(
        &self,
        tenant: Option<&Tenant>,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<Vec<EndpointRecord>>;

    /// Retention: of up to `n` records after the key `after` (in key order), forgets
    /// those of endpoints neither registered to for the first time nor attempted since
    /// `idle_before` (ms; `endpoints::is_idle`) and not paused, each only if unchanged
    /// since it was read.
    /// How many, and the key to go on from (`None`: the last was read).
    async fn forget_endpoints(
        &self,
        idle_before: i64,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<(usize, Option<String>)>;

    /// `tenant`'s endpoint `id`, if it has been seen.
    async fn endpoint(
        &self,
        tenant: &Tenant,
        id: &EndpointId,
    ) -> StoreResult<Option<EndpointRecord>>;

    /// Pauses the endpoint of `key` (`endpoints::key`) with `pause`, or resumes it with
    /// `None`, noting the resume in its record in the same transaction (its failures
    /// count for a pause from then). Whether that changed whether it is paused.
    async fn set_pause(&self, key: &str, pause: Option<&EndpointPause>) -> StoreResult<bool>;

    /// Every paused endpoint's key with its pause.
    async fn pauses(&self) -> StoreResult<Vec<(String, EndpointPause)>>;
}

/// What the instances sharing a store tell each other of endpoints' health, so that
/// every instance's circuit breakers count every instance's failures.
#[async_trait]
pub trait FleetMessaging: Send + Sync {
    /// Tells the other instances how an attempt at `endpoint` went (best effort: a
    /// message lost costs only a circuit opened or closed a little later).
    async fn publish_health(&self, endpoint: &str, healthy: bool) -> StoreResult<()>;

    /// Calls `listener` with what other instances publish, while `Queue::watch` runs.
    fn on_health(&self, listener: HealthListener);
}

/// Registrations producers made inside their own database transactions (Postgres's
/// `postback.notify()`), waiting for an instance to check and store them.
#[async_trait]
pub trait Intake: Send + Sync {
    /// Takes up to `limit` waiting registrations, oldest first, that no other instance is
    /// taking, and in one transaction stores each that `check` accepts (as `enqueue`
    /// would), keeps each it refuses with its error, and removes them all from the
    /// intake. What became of each.
    async fn take_in(&self, limit: usize, check: &IntakeCheck) -> StoreResult<Vec<TakenIn>>;

    /// Signalled when a producer's transaction with a registration commits (while
    /// `Queue::watch` runs).
    fn arrivals(&self) -> Arc<Notify>;

    /// Writes what the database refuses at once, in the producer's transaction, as the
    /// API would (the rest is checked as each registration is taken in).
    async fn publish_rules(&self, rules: &IntakeRules) -> StoreResult<()>;

    /// Why the registration `id` was refused when it was taken in, while it is kept
    /// (`retention.dead_max_age`); `None` for one that was not.
    async fn refusal(&self, id: &JobId) -> StoreResult<Option<Refusal>>;
}

/// Every role a backend serves an instance with.
pub trait Store:
    Queue
    + OperatorActions
    + Reads
    + RateReservations
    + AuditLog
    + EndpointHealth
    + Collections
    + 'static
{
    /// The instances sharing this store, if it can be shared.
    fn fleet(&self) -> Option<&dyn FleetMessaging>;

    /// Registrations made inside producers' transactions, if the store takes them.
    fn intake(&self) -> Option<&dyn Intake> {
        None
    }

    /// Which shards can take new notifications now, if that can change (a store whose
    /// shards' primaries may lack the replicas `store.replica_acks` asks for).
    fn shard_health(&self) -> Option<Arc<ShardHealth>> {
        None
    }

    /// What it keeps of an answered write through a restart of its server, as found at
    /// start.
    fn durability(&self) -> Durability;
}
