//! The Postgres store: the notifications of every instance sharing one database, in the
//! schema `postback` (`migrations`). Every transition is one transaction that locks the
//! rows it changes and asks `lifecycle` what they become (`changes`, over `tx::Tx`);
//! claims take due rows with `FOR UPDATE SKIP LOCKED`, so that instances never wait on
//! each other; wake-ups and endpoints' health travel by `LISTEN/NOTIFY` (`signals`).
//! Times are the database's clock. A registration is answered once it is committed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::Context;
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::spec;
use super::{
    AuditEntry, AuditFilter, AuditLog, AuditPosition, AuditRecord, Cancelled, Claim, Cursor,
    DeadPage, Deferral, Durability, DurabilityKind, EndpointHealth, EndpointPause, EndpointRecord,
    EndpointTally, Enqueued, FleetMessaging, HealthListener, Idempotency, Intake, IntakeCheck,
    IntakeRules, JobState, JobStatus, JobView, ListFilter, ListPage, Listed, OperatorActions,
    Outcomes, Queue, RateReservations, Reads, Refusal, Settled, Settlement, Stats, Store,
    StoreError, StoreResult, TakenIn, WalkCursor,
};
use crate::config::{Retention, StoreSettings};
use crate::delivery::policy::{RateAsk, SendTimes};
use crate::domain::{EndpointId, JobId, JobSpec, Notification, Schedule, Tenant};
use crate::endpoints::health::{EndpointNotice, EndpointRules};
use crate::lifecycle::{retention, Again, Index, LetGo, NewCycle, Now};

mod audit;
mod changes;
mod endpoints;
mod intake;
mod migrations;
mod rates;
mod reads;
mod signals;
mod tls;
mod trim;
mod tx;

use changes::NewJob;
use reads::IndexPage;
use tx::{col, Commit, Fault, PgResult, Tx};

/// The configuration key that names the database.
const KEY: &str = "store.postgres_url (POSTBACK_STORE_POSTGRES_URL)";
/// Connections per instance.
const POOL_SIZE: usize = 16;
/// How often a transaction that met a deadlock or a serialization failure is run again.
pub(super) const CONFLICT_RETRIES: usize = 8;

pub struct PostgresStore {
    /// Its `fsync` and `synchronous_commit`, as found at start.
    durability: Durability,
    pool: Pool,
    /// Gathers concurrent registrations into groups.
    enqueuer: enqueuer::Enqueuer,
    /// What every connection is made with, the `LISTEN` connection's too.
    connection: tls::Connection,
    /// Names this instance in what it tells the others.
    instance: String,
    listeners: signals::Listeners,
    retention: retention::Policy,
    audit_max_age_ms: i64,
}

/// Runs `$body` (which may `.await` and use `?` on `PgResult`s) in a transaction bound to
/// `$t`, committed after it as `$commit` says (`Commit::Durable` unless given); run again
/// when it meets a deadlock or serialization failure. The body's value as a
/// `StoreResult`.
macro_rules! in_transaction {
    ($store:expr, |$t:ident| $body:expr) => {
        in_transaction!(
            $store,
            $crate::store::postgres_store::tx::Commit::Durable,
            |$t| $body
        )
    };
    ($store:expr, $commit:expr, |$t:ident| $body:expr) => {{
        let mut tries = 0;
        loop {
            let result: PgResult<_> = async {
                let mut client = $store.pool.get().await?;
                let mut $t = Tx::begin(client.transaction().await?, $commit).await?;
                let value = $body;
                $t.commit().await?;
                Ok(value)
            }
            .await;
            match result {
                Err(e) if e.is_conflict() && tries < CONFLICT_RETRIES => tries += 1,
                result => break result.map_err(store_error),
            }
        }
    }};
}

mod collections;
mod enqueuer;

impl PostgresStore {
    /// Connects to the database at `url`, creating or upgrading the schema, retrying
    /// until `settings.connect_wait` has passed.
    pub async fn connect(
        url: &str,
        settings: &StoreSettings,
        retention: impl Into<Retention>,
    ) -> anyhow::Result<Self> {
        let retention = retention.into();
        let connection = tls::Connection::of(url, settings)?;
        connection.warn_weak_mode();
        migrate_when_reachable(&connection, settings.connect_wait).await?;
        let manager = Manager::from_config(
            connection.config.clone(),
            connection.tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(
                settings.response_timeout.max(settings.connect_timeout),
            ))
            .create_timeout(Some(settings.connect_timeout))
            .build()
            .context("postgres pool")?;
        let durability = durability(&pool).await?;
        Ok(Self {
            durability,
            enqueuer: enqueuer::Enqueuer::start(pool.clone()),
            pool,
            connection,
            instance: format!("{:016x}", fastrand::u64(..)),
            listeners: signals::Listeners::default(),
            retention: retention.policy(),
            audit_max_age_ms: retention.instance.audit_max_age.as_millis() as i64,
        })
    }

    /// Creates or upgrades the schema of the database at `url` (as `connect` does).
    pub async fn migrate(url: &str, settings: &StoreSettings) -> anyhow::Result<Migrated> {
        let connection = tls::Connection::of(url, settings)?;
        let applied = migrate_when_reachable(&connection, settings.connect_wait).await?;
        Ok(Migrated {
            applied,
            version: migrations::VERSION,
        })
    }

    /// A pooled connection for a read.
    async fn reader(&self) -> StoreResult<deadpool_postgres::Client> {
        self.pool.get().await.map_err(|e| store_error(e.into()))
    }
}

/// What a migration did: the versions it applied (none when the schema was up to
/// date; version 1 among them when it created the schema), and the schema's version now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    pub applied: Vec<i32>,
    pub version: i32,
}

/// Brings the schema up to this build's version, waiting up to `wait` for the database
/// (but not once TLS refused it); the versions applied.
async fn migrate_when_reachable(via: &tls::Connection, wait: Duration) -> anyhow::Result<Vec<i32>> {
    let deadline = tokio::time::Instant::now() + wait;
    let (mut client, connection) = loop {
        match via.config.connect(via.tls.clone()).await {
            Ok(connected) => break connected,
            Err(e) if via.refused(&e).is_some() => {
                return Err(via.refused(&e).expect("refused").into())
            }
            Err(e) if tokio::time::Instant::now() >= deadline => anyhow::bail!(
                "{KEY}: Postgres is unreachable after {}: {e}",
                humantime::format_duration(wait)
            ),
            Err(e) => {
                tracing::warn!(error = %e, "waiting for Postgres");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let connection = tokio::spawn(connection);
    let applied = migrations::migrate(&mut client, KEY).await;
    drop(client);
    let _ = connection.await;
    let applied = applied?;
    for version in &applied {
        tracing::info!(version, "postgres: schema migrated");
    }
    Ok(applied)
}

/// Whether the database could not be reached or could not serve (connection lost, the
/// server shutting down, out of resources, a conflict left after retries): not a bug in
/// what postback asked, which the rest is (a statement refused, a value that did not
/// convert).
fn is_outage(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(code) => matches!(&code.code()[..2], "08" | "53" | "57" | "58" | "40"),
        None => {
            let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
            e.is_closed() || io
        }
    }
}

/// A failed transaction as the store reports it.
fn store_error(e: Fault) -> StoreError {
    match e {
        Fault::Corrupt(message) => StoreError::Corrupt(message),
        Fault::Pool(message) => StoreError::Unavailable(format!("postgres: {message}")),
        Fault::Db(e) if is_outage(&e) => StoreError::Unavailable(format!("postgres: {e}")),
        Fault::Db(e) => StoreError::Script {
            script: "postgres",
            message: e.to_string(),
        },
    }
}

#[async_trait]
impl Queue for PostgresStore {
    async fn enqueue(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Enqueued> {
        self.enqueuer.enqueue(NewJob::of(n, idempotency)).await
    }

    /// In one transaction, in order: the registrations of one ordering key keep the
    /// order they came in, and a key named twice registers once.
    async fn enqueue_many(
        &self,
        registrations: &[(&Notification, Option<&Idempotency>)],
    ) -> Vec<StoreResult<Enqueued>> {
        let jobs: Vec<NewJob> = registrations
            .iter()
            .map(|(n, idempotency)| NewJob::of(n, *idempotency))
            .collect();
        let stored = in_transaction!(self, |t| changes::enqueue_group(&mut t, &jobs).await?);
        match stored {
            Ok(answers) => answers.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e); registrations.len()],
        }
    }

    async fn claim(&self, limit: usize, lease: Duration, ahead: Duration) -> StoreResult<Claim> {
        let asked = Instant::now();
        let window = (lease.as_millis() as i64, ahead.as_millis() as i64);
        in_transaction!(self, Commit::Relaxed, |t| {
            changes::claim(&mut t, limit, window, asked).await?
        })
    }

    async fn settle(&self, batch: &[Settlement]) -> StoreResult<Settled> {
        let policy = &self.retention;
        in_transaction!(self, Commit::Relaxed, |t| {
            let applied = changes::settle(&mut t, batch).await?;
            let mut settled = Settled {
                applied: applied.iter().map(Option::is_some).collect(),
                ..Settled::default()
            };
            let (mut moved, mut went) = (Vec::new(), Vec::new());
            let settled_ones = batch.iter().zip(applied).filter_map(|(s, a)| Some((s, a?)));
            for (s, (record, tenant)) in settled_ones {
                went.push((tenant, record.position().map(|p| p.0)));
                moved.push((s.id.to_string(), record));
            }
            settled.dead_lettered = moved
                .iter()
                .filter(|(_, r)| r.state == JobState::Dead)
                .count();
            settled.earliest = changes::any_heads(&mut t, &moved).await?;
            let went = went.iter().map(|(tenant, to)| (tenant, *to));
            for (tenant, mut pass) in retention::settle_passes(policy, t.now.down(), went) {
                settled.trimmed += trim::apply_retention(&mut t, &tenant, &mut pass).await?;
            }
            trim::forget_keys(&mut t, retention::settle_budget(batch.len())).await?;
            settled
        })
    }

    async fn defer(&self, batch: &[Deferral]) -> StoreResult<bool> {
        in_transaction!(self, Commit::Relaxed, |t| {
            let records = changes::defer(&mut t, batch).await?;
            let moved = moved(batch.iter().map(|d| &d.id), records);
            changes::any_heads(&mut t, &moved).await?
        })
    }

    async fn release(&self, leases: &[(JobId, u64)]) -> StoreResult<usize> {
        in_transaction!(self, Commit::Relaxed, |t| {
            let records = changes::release(&mut t, leases).await?;
            let moved = moved(leases.iter().map(|(id, _)| id), records);
            changes::any_heads(&mut t, &moved).await?;
            moved.iter().filter(|(_, r)| r.next_at.is_some()).count()
        })
    }

    async fn trim(&self) -> StoreResult<usize> {
        let mut due = in_transaction!(self, Commit::Relaxed, |t| {
            trim::forget_keys(&mut t, retention::SWEEP_BUDGET).await?;
            trim::tenants(&mut t).await?
        })?;
        let mut trimmed = 0;
        while let Some(tenant) = due.pop() {
            let limits = self.retention.of(&tenant);
            let n = in_transaction!(self, Commit::Relaxed, |t| {
                let budget = retention::SWEEP_BUDGET;
                let mut pass = retention::Pass::sweep(limits, t.now.down(), budget);
                trim::apply_retention(&mut t, &tenant, &mut pass).await?
            })?;
            trimmed += n;
            if retention::sweep_again(n, retention::SWEEP_BUDGET) {
                due.push(tenant);
            }
        }
        Ok(trimmed)
    }

    async fn watch(&self, wake: Arc<Notify>, cancel: CancellationToken) {
        let (connection, instance) = (self.connection.clone(), self.instance.clone());
        signals::listen(connection, instance, self.listeners.clone(), wake, cancel).await
    }
}

#[async_trait]
impl OperatorActions for PostgresStore {
    async fn cancel(&self, id: &JobId) -> StoreResult<Cancelled> {
        in_transaction!(self, |t| changes::cancel(&mut t, id).await?)
    }

    async fn replay(
        &self,
        id: &JobId,
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Option<JobStatus>> {
        let url = spec.map(|s| s.url.as_str());
        let spec = spec.map(spec::encode);
        let schedule = schedule.map(Schedule::intervals_ms);
        let cycle = NewCycle {
            which: Again::Replay,
            delay_ms: delay.as_millis() as u64,
            schedule: schedule.as_deref(),
            url,
        };
        in_transaction!(self, |t| {
            let record = changes::again(&mut t, id, spec.as_deref(), &cycle);
            let record = record.await?;
            record.map(|r| r.status())
        })
    }

    async fn send_again(
        &self,
        which: Again,
        ids: &[JobId],
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<usize> {
        let mut ids = ids.to_vec();
        ids.sort_by_key(JobId::to_string);
        let schedule = schedule.map(Schedule::intervals_ms);
        let cycle = NewCycle {
            which,
            delay_ms: delay.as_millis() as u64,
            schedule: schedule.as_deref(),
            url: None,
        };
        in_transaction!(self, |t| {
            let mut n = 0;
            for id in &ids {
                let record = changes::again(&mut t, id, None, &cycle);
                n += usize::from(record.await?.is_some());
            }
            n
        })
    }

    async fn attempt_now(&self, id: &JobId, how: LetGo) -> StoreResult<bool> {
        in_transaction!(self, |t| changes::attempt_now(&mut t, id, how).await?)
    }

    async fn discard(&self, ids: &[JobId]) -> StoreResult<usize> {
        in_transaction!(self, |t| {
            let mut n = 0;
            for id in ids {
                n += usize::from(changes::discard(&mut t, id).await?);
            }
            n
        })
    }
}

#[async_trait]
impl Reads for PostgresStore {
    async fn get(&self, id: &JobId) -> StoreResult<Option<JobView>> {
        let c = self.reader().await?;
        reads::view(&c, &id.to_string()).await.map_err(store_error)
    }

    async fn find_by_key(&self, tenant: &Tenant, key: &str) -> StoreResult<Option<JobView>> {
        let c = self.reader().await?;
        let now = database_now(&c).await?;
        reads::by_key(&c, tenant, key, now.down())
            .await
            .map_err(store_error)
    }

    async fn list(
        &self,
        listed: Listed,
        filter: &ListFilter,
        limit: usize,
        after: Option<&WalkCursor>,
    ) -> StoreResult<ListPage> {
        let c = self.reader().await?;
        let walk_from = match after {
            Some(cursor) => cursor.walk_from,
            None => Listed::walk_start(database_now(&c).await?),
        };
        let scan = scan(
            listed.index(),
            listed.soonest_first(),
            listed.scores(filter),
            filter,
        );
        let after = after.map(|c| &c.position);
        let keep = |v: &JobView| listed.keeps(v, filter, walk_from);
        let (items, next, examined) = reads::page(&c, &scan, limit, after, keep)
            .await
            .map_err(store_error)?;
        Ok(ListPage::of_walk(items, next, walk_from, examined))
    }

    async fn dead_letters(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<DeadPage> {
        let c = self.reader().await?;
        let scan = scan(Index::Dead, false, (filter.since, filter.until), filter);
        let (items, next_cursor, examined) =
            reads::page(&c, &scan, limit, after, |v| filter.matches(v))
                .await
                .map_err(store_error)?;
        Ok(DeadPage {
            items,
            next_cursor,
            examined,
        })
    }

    async fn stats(&self, tenant: Option<&Tenant>) -> StoreResult<Stats> {
        let c = self.reader().await?;
        reads::stats(&c, tenant).await.map_err(store_error)
    }

    async fn outcomes(
        &self,
        tenant: Option<&Tenant>,
        first_window: i64,
        windows: usize,
    ) -> StoreResult<Vec<Outcomes>> {
        let c = self.reader().await?;
        reads::outcomes(&c, tenant, first_window, windows)
            .await
            .map_err(store_error)
    }

    async fn ping(&self) -> StoreResult<()> {
        let c = self.reader().await?;
        c.simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| store_error(e.into()))
    }
}

/// The notifications a batch changed, with their new records.
fn moved<'a>(
    ids: impl Iterator<Item = &'a JobId>,
    records: Vec<Option<crate::lifecycle::Record>>,
) -> Vec<(String, crate::lifecycle::Record)> {
    ids.zip(records)
        .filter_map(|(id, r)| Some((id.to_string(), r?)))
        .collect()
}

/// The rows of `index` with times within `since` and `until` that a list with `filter`
/// reads.
fn scan(
    index: Index,
    soonest_first: bool,
    (since, until): (Option<i64>, Option<i64>),
    filter: &ListFilter,
) -> IndexPage<'_> {
    IndexPage {
        index,
        soonest_first,
        since,
        until,
        tenant: filter.tenant.as_ref(),
    }
}

/// The database's clock now.
async fn database_now(c: &deadpool_postgres::Client) -> StoreResult<Now> {
    tx::database_now(c).await.map_err(store_error)
}

#[async_trait]
impl RateReservations for PostgresStore {
    async fn reserve(&self, asks: &[RateAsk]) -> StoreResult<Vec<SendTimes>> {
        in_transaction!(self, Commit::Relaxed, |t| {
            rates::reserve(&mut t, asks).await?
        })
    }
}

#[async_trait]
impl AuditLog for PostgresStore {
    async fn record_audit(&self, record: &AuditRecord) -> StoreResult<()> {
        let json = serde_json::to_string(record).expect("a record serializes");
        let (max_age, tenant) = (self.audit_max_age_ms, record.tenant.as_deref());
        in_transaction!(self, |t| audit::record_audit(
            &mut t,
            (&json, tenant),
            max_age
        )
        .await?)
    }

    async fn audit_entries(
        &self,
        filter: &AuditFilter,
        before: Option<AuditPosition>,
        n: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let c = self.reader().await?;
        reads::audit(&c, filter, before, n)
            .await
            .map_err(store_error)
    }
}

#[async_trait]
impl FleetMessaging for PostgresStore {
    async fn publish_health(&self, endpoint: &str, healthy: bool) -> StoreResult<()> {
        let c = self.reader().await?;
        let payload = signals::health_payload(&self.instance, endpoint, healthy);
        c.execute("SELECT pg_notify($1, $2)", &[&signals::HEALTH, &payload])
            .await
            .map(drop)
            .map_err(|e| store_error(e.into()))
    }

    fn on_health(&self, listener: HealthListener) {
        self.listeners.set_health(listener);
    }
}

#[async_trait]
impl Intake for PostgresStore {
    async fn take_in(&self, limit: usize, check: &IntakeCheck) -> StoreResult<Vec<TakenIn>> {
        in_transaction!(self, Commit::Relaxed, |t| {
            intake::take_in(&mut t, limit, check).await?
        })
    }

    fn arrivals(&self) -> Arc<Notify> {
        self.listeners.intake.clone()
    }

    async fn publish_rules(&self, rules: &IntakeRules) -> StoreResult<()> {
        in_transaction!(self, |t| intake::publish_rules(&mut t, rules).await?)
    }

    async fn refusal(&self, id: &JobId) -> StoreResult<Option<Refusal>> {
        let c = self.reader().await?;
        intake::refusal(&c, &id.to_string())
            .await
            .map_err(store_error)
    }
}

#[async_trait]
impl EndpointHealth for PostgresStore {
    async fn record_endpoints(
        &self,
        tallies: &[EndpointTally],
        rules: &EndpointRules,
    ) -> StoreResult<Vec<EndpointNotice>> {
        if tallies.is_empty() {
            return Ok(Vec::new());
        }
        in_transaction!(self, Commit::Relaxed, |t| {
            endpoints::record_endpoints(&mut t, tallies, rules).await?
        })
    }

    async fn endpoints(
        &self,
        tenant: Option<&Tenant>,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<Vec<EndpointRecord>> {
        let c = self.reader().await?;
        reads::endpoints(&c, tenant, after, n)
            .await
            .map_err(store_error)
    }

    async fn forget_endpoints(
        &self,
        idle_before: i64,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<(usize, Option<String>)> {
        in_transaction!(self, Commit::Relaxed, |t| {
            endpoints::forget_endpoints(&mut t, idle_before, after, n).await?
        })
    }

    async fn endpoint(
        &self,
        tenant: &Tenant,
        id: &EndpointId,
    ) -> StoreResult<Option<EndpointRecord>> {
        let c = self.reader().await?;
        reads::endpoint(&c, &crate::domain::endpoint_key(tenant, id))
            .await
            .map_err(store_error)
    }

    async fn set_pause(&self, key: &str, pause: Option<&EndpointPause>) -> StoreResult<bool> {
        in_transaction!(self, |t| endpoints::set_pause(&mut t, key, pause).await?)
    }

    async fn pauses(&self) -> StoreResult<Vec<(String, EndpointPause)>> {
        let c = self.reader().await?;
        let rows = c
            .query("SELECT key, pause FROM postback.endpoint_pauses", &[])
            .await
            .map_err(|e| store_error(e.into()))?;
        rows.iter()
            .map(|row| {
                let key: String = col(row, "key").map_err(store_error)?;
                let pause = EndpointPause::decode(&key, col(row, "pause").map_err(store_error)?)?;
                Ok((key, pause))
            })
            .collect()
    }
}

impl Store for PostgresStore {
    fn fleet(&self) -> Option<&dyn FleetMessaging> {
        Some(self)
    }

    fn intake(&self) -> Option<&dyn Intake> {
        Some(self)
    }

    fn durability(&self) -> Durability {
        self.durability.clone()
    }
}

/// What a commit is answered after: Postgres's `fsync` and `synchronous_commit`. With
/// either off, a crash can lose commits already answered; that is said once.
async fn durability(pool: &Pool) -> anyhow::Result<Durability> {
    let client = pool.get().await.context("postgres pool")?;
    let sql = "SELECT current_setting('fsync'), current_setting('synchronous_commit')";
    let row = client.query_one(sql, &[]).await.context(KEY)?;
    let (fsync, commit): (String, String) = (row.get(0), row.get(1));
    if fsync == "off" || commit == "off" {
        tracing::warn!(fsync, synchronous_commit = commit, "Postgres may lose notifications already answered when it crashes: fsync and synchronous_commit should be on");
    }
    Ok(Durability {
        kind: DurabilityKind::WriteAheadLog,
        detail: format!("fsync {fsync}, synchronous_commit {commit}"),
    })
}
