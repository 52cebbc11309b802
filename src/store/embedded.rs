//! The embedded store: one instance's notifications in a `redb` file on local disk, for
//! running postback with nothing else installed. The same states and transitions as the
//! Redis store, each atomic and on disk before it is answered; transitions go through
//! one writer thread that commits concurrent ones together (`writer`), reads run on the
//! blocking pool. The file is locked: a second instance on it is refused, and so the
//! store takes back every lease in it as it opens (what a crash left in flight is due
//! again at once).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::Context;
use async_trait::async_trait;
use redb::{Database, ReadTransaction, ReadableDatabase};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::collections::{Change, Collection, Collections, Scan};
use super::spec;
use super::{
    AuditEntry, AuditFilter, AuditLog, AuditPosition, AuditRecord, Cancelled, Claim, Cursor,
    DeadPage, Deferral, Durability, DurabilityKind, EndpointHealth, EndpointPause, EndpointRecord,
    EndpointTally, Enqueued, FleetMessaging, Idempotency, JobState, JobStatus, JobView, ListFilter,
    ListPage, Listed, OperatorActions, Outcomes, Queue, RateReservations, Reads, Settled,
    Settlement, Stats, Store, StoreError, StoreResult, WalkCursor,
};
use crate::config::Retention;
use crate::delivery::policy::{RateAsk, SendTimes};
use crate::domain::{EndpointId, JobId, JobSpec, Notification, Schedule, Tenant};
use crate::endpoints::health::{EndpointNotice, EndpointRules};
use crate::lifecycle::{retention, Again, LetGo, NewCycle, Now, Record};

mod audit;
mod changes;
mod collections;
mod endpoints;
mod memory_disk;
mod reads;
mod tables;
mod upgrade;
mod writer;

pub use memory_disk::MemoryDisk;

use super::types::NewJob;
use changes::store_error;
use tables::{DbError, DbResult, Tables};
use writer::Writer;

/// The file in `store.data_dir`.
pub const FILE_NAME: &str = "postback.redb";

pub struct EmbeddedStore {
    db: Arc<Database>,
    writer: Writer,
    /// Signalled when a transition makes a notification due earlier than before.
    announced: Arc<Notify>,
    retention: retention::Policy,
    audit_max_age_ms: i64,
    path: PathBuf,
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`, refusing a file another process holds.
    pub fn open(dir: &Path, retention: impl Into<Retention>) -> anyhow::Result<Self> {
        let retention = retention.into();
        let key = "store.data_dir (POSTBACK_STORE_DATA_DIR)";
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{key}: cannot create {}", dir.display()))?;
        let path = dir.join(FILE_NAME);
        let db = match upgrade::open(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => anyhow::bail!(
                "{key}: {} is in use by another postback instance; the embedded store serves \
                 one instance (configure Redis to run several)",
                path.display()
            ),
            Err(e) => anyhow::bail!("{key}: cannot open {}: {e}", path.display()),
        };
        upgrade::upgrade_tables(&db)
            .and_then(|_| create_tables(&db))
            .and_then(|_| upgrade::index_tenants(&db))
            .and_then(|_| upgrade::index_tenant_audit(&db))
            .and_then(|_| take_back_leases(&db))
            .with_context(|| format!("{key}: cannot write {}", path.display()))?;
        let db = Arc::new(db);
        let announced = Arc::new(Notify::new());
        Ok(Self {
            writer: Writer::start(db.clone(), announced.clone())?,
            db,
            announced,
            retention: retention.policy(),
            audit_max_age_ms: retention.instance.audit_max_age.as_millis() as i64,
            path,
        })
    }

    /// A store on `disk`, in memory, whose every step and read runs on the caller's
    /// thread: for a deterministic simulation, which crashes it by opening another on
    /// `disk.crashed()`.
    pub fn open_in_memory(
        disk: MemoryDisk,
        retention: impl Into<Retention>,
    ) -> anyhow::Result<Self> {
        let retention = retention.into();
        let db = Database::builder()
            .create_with_backend(disk)
            .context("cannot open the store in memory")?;
        create_tables(&db)
            .and_then(|_| take_back_leases(&db))
            .context("cannot write the store in memory")?;
        let db = Arc::new(db);
        let announced = Arc::new(Notify::new());
        Ok(Self {
            writer: Writer::inline(db.clone(), announced.clone()),
            db,
            announced,
            retention: retention.policy(),
            audit_max_age_ms: retention.instance.audit_max_age.as_millis() as i64,
            path: PathBuf::from("(memory)"),
        })
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn announce(&self, earliest: bool) {
        if earliest {
            self.announced.notify_one();
        }
    }

    /// Runs `read` in a read transaction on the blocking pool.
    async fn read<T, F>(&self, read: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> DbResult<T> + Send + 'static,
    {
        let db = self.db.clone();
        if self.writer.is_inline() {
            let tx = db.begin_read().map_err(|e| store_error(DbError::from(e)))?;
            return read(&tx).map_err(store_error);
        }
        tokio::task::spawn_blocking(move || read(&db.begin_read().map_err(DbError::from)?))
            .await
            .map_err(|e| StoreError::Unavailable(format!("store reader: {e}")))?
            .map_err(store_error)
    }
}

/// Creates every table, so that readers find them from the start.
fn create_tables(db: &Database) -> DbResult<()> {
    let tx = db.begin_write()?;
    Tables::open(&tx, Now::read())?;
    tx.commit()?;
    Ok(())
}

/// Takes back every lease the file holds (`changes::take_back_leases`), once it is
/// upgraded: the file is this process's alone.
fn take_back_leases(db: &Database) -> DbResult<()> {
    let tx = db.begin_write()?;
    let now = Now::read();
    let taken = changes::take_back_leases(&mut Tables::open(&tx, now)?, now)?;
    if taken == 0 {
        return Ok(tx.abort()?);
    }
    tx.commit()?;
    tracing::info!(
        taken,
        "leases left by an earlier run taken back: what it had in flight is due again now"
    );
    Ok(())
}

/// Whether any of the records is due and now heads the due index.
fn any_heads(t: &Tables, records: &[(String, Record)]) -> DbResult<bool> {
    for (id, r) in records {
        if changes::heads(t, id, r)? {
            return Ok(true);
        }
    }
    Ok(false)
}

#[async_trait]
impl Queue for EmbeddedStore {
    async fn enqueue(
        &self,
        n: &Notification,
        idempotency: Option<&Idempotency>,
    ) -> StoreResult<Enqueued> {
        let job = NewJob::of(n, idempotency);
        let enqueued = self
            .writer
            .run(move |t, now| changes::enqueue(t, now, &job))
            .await?;
        self.announce(enqueued.earliest.is_some());
        Ok(enqueued)
    }

    async fn claim(&self, limit: usize, lease: Duration, ahead: Duration) -> StoreResult<Claim> {
        let asked = Instant::now();
        let ahead_ms = ahead.as_millis() as i64;
        // Nothing due and no lease ended: answer from a read, so that an idle instance
        // does not write (and fsync) its file on every wake-up.
        let now = Now::read().down();
        match self.read(reads::next_wake_at).await? {
            None => return Ok(Claim::default()),
            Some(at) if at > now + ahead_ms => {
                return Ok(Claim {
                    jobs: Vec::new(),
                    next_wake: Some(Duration::from_millis((at - now) as u64)),
                    ..Claim::default()
                })
            }
            Some(_) => {}
        }
        let lease_ms = lease.as_millis() as i64;
        self.writer
            .run(move |t, now| changes::claim(t, now, limit, (lease_ms, ahead_ms), asked))
            .await
    }

    async fn settle(&self, batch: &[Settlement]) -> StoreResult<Settled> {
        let batch = batch.to_vec();
        let policy = self.retention.clone();
        let settled = self
            .writer
            .run(move |t, now| {
                let mut settled = Settled::default();
                let mut moved = Vec::new();
                for s in &batch {
                    let record = changes::settle(t, now, s)?;
                    settled.applied.push(record.is_some());
                    let dead = record.as_ref().is_some_and(|r| r.state == JobState::Dead);
                    settled.dead_lettered += usize::from(dead);
                    moved.extend(record.map(|r| (s.id.to_string(), r)));
                }
                settled.earliest = any_heads(t, &moved)?;
                let mut went = Vec::with_capacity(moved.len());
                for (id, r) in &moved {
                    went.push((t.tenant_of(id)?, r.position().map(|p| p.0)));
                }
                let passes = retention::settle_passes(
                    &policy,
                    now.down(),
                    went.iter().map(|(tenant, to)| (tenant, *to)),
                );
                for (tenant, mut pass) in passes {
                    settled.trimmed += changes::apply_retention(t, &tenant, &mut pass)?;
                }
                changes::forget_keys(t, now.down(), retention::settle_budget(batch.len()))?;
                Ok(settled)
            })
            .await?;
        self.announce(settled.earliest);
        Ok(settled)
    }

    async fn defer(&self, batch: &[Deferral]) -> StoreResult<bool> {
        let batch = batch.to_vec();
        let earliest = self
            .writer
            .run(move |t, now| {
                let mut moved = Vec::new();
                for d in &batch {
                    let record = changes::defer(t, now, d)?;
                    moved.extend(record.map(|r| (d.id.to_string(), r)));
                }
                any_heads(t, &moved)
            })
            .await?;
        self.announce(earliest);
        Ok(earliest)
    }

    async fn release(&self, leases: &[(JobId, u64)]) -> StoreResult<usize> {
        let leases = leases.to_vec();
        let (released, earliest) = self
            .writer
            .run(move |t, now| {
                let mut moved = Vec::new();
                for (id, lease) in &leases {
                    let record = changes::release(t, now, id, *lease)?;
                    moved.extend(record.map(|r| (id.to_string(), r)));
                }
                let due = moved.iter().filter(|(_, r)| r.next_at.is_some()).count();
                Ok((due, any_heads(t, &moved)?))
            })
            .await?;
        self.announce(earliest);
        Ok(released)
    }

    async fn trim(&self) -> StoreResult<usize> {
        let mut due: Vec<Tenant> = self.read(reads::retained_tenants).await?;
        let mut trimmed = 0;
        loop {
            let chunk: Vec<Tenant> = due
                .drain(..due.len().min(retention::TENANTS_PER_CALL))
                .collect();
            let policy = self.retention.clone();
            let (n, again) = self
                .writer
                .run(move |t, now| {
                    t.forget_old_windows()?;
                    changes::forget_keys(t, now.down(), retention::SWEEP_BUDGET)?;
                    let (mut n, mut again) = (0, Vec::new());
                    let share = retention::sweep_share(chunk.len());
                    for tenant in chunk {
                        let limits = policy.of(&tenant);
                        let mut pass = retention::Pass::sweep(limits, now.down(), share);
                        let deleted = changes::apply_retention(t, &tenant, &mut pass)?;
                        n += deleted;
                        if retention::sweep_again(deleted, share) {
                            again.push(tenant);
                        }
                    }
                    Ok((n, again))
                })
                .await?;
            trimmed += n;
            due.extend(again);
            if due.is_empty() {
                return Ok(trimmed);
            }
        }
    }

    /// One instance only: there are no other instances' health reports to hear.
    async fn watch(&self, wake: Arc<Notify>, cancel: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = self.announced.notified() => wake.notify_one(),
            }
        }
    }
}

#[async_trait]
impl OperatorActions for EmbeddedStore {
    async fn cancel(&self, id: &JobId) -> StoreResult<Cancelled> {
        let id = *id;
        self.writer
            .run(move |t, now| changes::cancel(t, now, &id))
            .await
    }

    async fn replay(
        &self,
        id: &JobId,
        spec: Option<&JobSpec>,
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<Option<JobStatus>> {
        let id = *id;
        let url = spec.map(|s| s.url.clone());
        let spec = spec.map(spec::encode);
        let schedule = schedule.map(Schedule::intervals_ms);
        let delay_ms = delay.as_millis() as u64;
        let (status, earliest) = self
            .writer
            .run(move |t, now| {
                let cycle = NewCycle {
                    which: Again::Replay,
                    delay_ms,
                    schedule: schedule.as_deref(),
                    url: url.as_deref(),
                };
                let record = changes::again(t, now, &id, spec.as_deref(), &cycle)?;
                let earliest = match &record {
                    Some(r) => changes::heads(t, &id.to_string(), r)?,
                    None => false,
                };
                Ok((record.map(|r| r.status()), earliest))
            })
            .await?;
        self.announce(earliest);
        Ok(status)
    }

    async fn send_again(
        &self,
        which: Again,
        ids: &[JobId],
        schedule: Option<&Schedule>,
        delay: Duration,
    ) -> StoreResult<usize> {
        let ids = ids.to_vec();
        let schedule = schedule.map(Schedule::intervals_ms);
        let delay_ms = delay.as_millis() as u64;
        let (n, earliest) = self
            .writer
            .run(move |t, now| {
                let mut moved = Vec::new();
                let cycle = NewCycle {
                    which,
                    delay_ms,
                    schedule: schedule.as_deref(),
                    url: None,
                };
                for id in &ids {
                    let record = changes::again(t, now, id, None, &cycle)?;
                    moved.extend(record.map(|r| (id.to_string(), r)));
                }
                Ok((moved.len(), any_heads(t, &moved)?))
            })
            .await?;
        self.announce(earliest);
        Ok(n)
    }

    async fn attempt_now(&self, id: &JobId, how: LetGo) -> StoreResult<bool> {
        let id = *id;
        let (moved, earliest) = self
            .writer
            .run(move |t, now| {
                let moved = changes::attempt_now(t, now, &id, how)?;
                let earliest = match &moved {
                    Some(r) => changes::heads(t, &id.to_string(), r)?,
                    None => false,
                };
                Ok((moved.is_some(), earliest))
            })
            .await?;
        self.announce(earliest);
        Ok(moved)
    }

    async fn discard(&self, ids: &[JobId]) -> StoreResult<usize> {
        let ids = ids.to_vec();
        self.writer
            .run(move |t, _| {
                let mut n = 0;
                for id in &ids {
                    n += usize::from(changes::discard(t, id)?);
                }
                Ok(n)
            })
            .await
    }
}

#[async_trait]
impl Reads for EmbeddedStore {
    async fn get(&self, id: &JobId) -> StoreResult<Option<JobView>> {
        let id = id.to_string();
        self.read(move |tx| reads::view(tx, &id)).await
    }

    async fn find_by_key(&self, tenant: &Tenant, key: &str) -> StoreResult<Option<JobView>> {
        let (key, now) = (Idempotency::scope(key, tenant), Now::read().down());
        self.read(move |tx| reads::by_key(tx, &key, now)).await
    }

    async fn list(
        &self,
        listed: Listed,
        filter: &ListFilter,
        limit: usize,
        after: Option<&WalkCursor>,
    ) -> StoreResult<ListPage> {
        let walk_from = after.map_or_else(|| Listed::walk_start(Now::read()), |c| c.walk_from);
        let (filter, position) = (filter.clone(), after.map(|c| c.position.clone()));
        self.read(move |tx| reads::list(tx, (listed, walk_from), &filter, limit, position.as_ref()))
            .await
    }

    async fn dead_letters(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&Cursor>,
    ) -> StoreResult<DeadPage> {
        let (filter, after) = (filter.clone(), after.cloned());
        self.read(move |tx| reads::dead_letters(tx, &filter, limit, after.as_ref()))
            .await
    }

    async fn stats(&self, tenant: Option<&Tenant>) -> StoreResult<Stats> {
        let tenant = tenant.cloned();
        self.read(move |tx| reads::stats(tx, tenant.as_ref())).await
    }

    async fn outcomes(
        &self,
        tenant: Option<&Tenant>,
        first_window: i64,
        windows: usize,
    ) -> StoreResult<Vec<Outcomes>> {
        let tenant = tenant.cloned();
        self.read(move |tx| reads::outcomes(tx, tenant.as_ref(), first_window, windows))
            .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.read(|_| Ok(())).await
    }
}

#[async_trait]
impl RateReservations for EmbeddedStore {
    async fn reserve(&self, asks: &[RateAsk]) -> StoreResult<Vec<SendTimes>> {
        let asks = asks.to_vec();
        self.writer
            .run(move |t, now| changes::reserve(t, now, &asks))
            .await
    }
}

#[async_trait]
impl AuditLog for EmbeddedStore {
    async fn record_audit(&self, record: &AuditRecord) -> StoreResult<()> {
        let record = record.clone();
        let max_age = self.audit_max_age_ms;
        self.writer
            .run(move |t, now| audit::record(t, now, &record, max_age))
            .await
    }

    async fn audit_entries(
        &self,
        filter: &AuditFilter,
        before: Option<AuditPosition>,
        n: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let filter = filter.clone();
        self.read(move |tx| audit::read(tx, &filter, before, n))
            .await
    }
}

#[async_trait]
impl EndpointHealth for EmbeddedStore {
    async fn record_endpoints(
        &self,
        tallies: &[EndpointTally],
        rules: &EndpointRules,
    ) -> StoreResult<Vec<EndpointNotice>> {
        let (tallies, rules) = (tallies.to_vec(), rules.clone());
        self.writer
            .run(move |t, _| endpoints::record(t, &tallies, &rules))
            .await
    }

    async fn endpoints(
        &self,
        tenant: Option<&Tenant>,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<Vec<EndpointRecord>> {
        let (tenant, after) = (tenant.cloned(), after.map(str::to_string));
        self.read(move |tx| endpoints::list(tx, tenant.as_ref(), after.as_deref(), n))
            .await
    }

    async fn forget_endpoints(
        &self,
        idle_before: i64,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<(usize, Option<String>)> {
        let after = after.map(str::to_string);
        self.writer
            .run(move |t, _| endpoints::forget(t, idle_before, after.as_deref(), n))
            .await
    }

    async fn endpoint(
        &self,
        tenant: &Tenant,
        id: &EndpointId,
    ) -> StoreResult<Option<EndpointRecord>> {
        let key = crate::domain::endpoint_key(tenant, id);
        self.read(move |tx| endpoints::get(tx, &key)).await
    }

    async fn set_pause(&self, key: &str, pause: Option<&EndpointPause>) -> StoreResult<bool> {
        let (key, pause) = (key.to_string(), pause.cloned());
        self.writer
            .run(move |t, _| endpoints::set_pause(t, &key, pause.as_ref()))
            .await
    }

    async fn pauses(&self) -> StoreResult<Vec<(String, EndpointPause)>> {
        self.read(endpoints::pauses).await
    }
}

#[async_trait]
impl Collections for EmbeddedStore {
    async fn write(&self, changes: &[Change]) -> StoreResult<bool> {
        let changes = changes.to_vec();
        self.writer
            .run(move |t, _| collections::write(t, &changes))
            .await
    }

    async fn read(
        &self,
        collection: Collection,
        keys: &[String],
    ) -> StoreResult<Vec<Option<String>>> {
        let keys = keys.to_vec();
        self.read(move |tx| collections::read(tx, collection, &keys))
            .await
    }

    async fn scan(
        &self,
        collection: Collection,
        scan: &Scan,
    ) -> StoreResult<Vec<(String, String)>> {
        let scan = scan.clone();
        self.read(move |tx| collections::scan(tx, collection, &scan))
            .await
    }
}

impl Store for EmbeddedStore {
    /// One instance: there is no fleet to tell of endpoints' health.
    fn fleet(&self) -> Option<&dyn FleetMessaging> {
        None
    }

    fn durability(&self) -> Durability {
        Durability {
            kind: DurabilityKind::Fsync,
            detail: "each write is on disk (fsync) before it is answered".into(),
        }
    }
}
