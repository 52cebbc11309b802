//! The embedded store's tables and the record kept per notification. Indexes are tables
//! keyed by `(time, id)`, so that a range read gives what is due, expired or oldest, in
//! order, as Redis's sorted sets do; each tenant's own indexes (`TenantIndex`), which its
//! lists and its retention read, are keyed by `(tenant, time, id)`.

use redb::{ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction};
use serde::Deserialize;

use crate::domain::Tenant;
use crate::lifecycle::{transitions, Index, Now, Record, TenantIndex};
use crate::store::{spec, tenant_counts};

/// What a step of the embedded store gives: any error aborts its transaction.
pub type DbResult<T> = Result<T, DbError>;

/// An error of the embedded store's file (boxed: redb's errors are large).
#[derive(Debug)]
pub struct DbError(pub Box<redb::Error>);

macro_rules! from_redb {
    ($($error:ty),*) => {$(
        impl From<$error> for DbError {
            fn from(e: $error) -> Self {
                Self(Box::new(e.into()))
            }
        }
    )*};
}

from_redb!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError
);

impl DbError {
    pub fn corrupted(message: String) -> Self {
        Self(Box::new(redb::Error::Corrupted(message)))
    }
}

impl std::error::Error for DbError {}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// id → the notification's spec (`store::spec`'s layout), as registered or replaced by a
/// replay.
pub const SPECS: TableDefinition<&str, &str> = TableDefinition::new("specs");
/// id → `Record` (`lifecycle`'s JSON, as on Redis).
pub const RECORDS: TableDefinition<&str, &str> = TableDefinition::new("records");
/// id → the attempt history (a JSON array).
pub const HISTORY: TableDefinition<&str, &str> = TableDefinition::new("history");
/// (due at, id) of every scheduled notification.
pub const DUE: TableDefinition<(i64, &str), ()> = TableDefinition::new("due");
/// (lease deadline, id) of every notification in flight.
pub const INFLIGHT: TableDefinition<(i64, &str), ()> = TableDefinition::new("inflight");
/// (dead-lettered at, id).
pub const DEAD: TableDefinition<(i64, &str), ()> = TableDefinition::new("dead");
/// (finished at, id) of delivered and cancelled notifications.
pub const DONE: TableDefinition<(i64, &str), ()> = TableDefinition::new("done");
/// Idempotency key within its tenant (`Idempotency::scoped`) → (id and the request's
/// fingerprint, forgotten at).
pub const IDEMPOTENCY: TableDefinition<&str, (&str, i64)> =
    TableDefinition::new("idempotency_scoped");
/// (forgotten at, idempotency key within its tenant), for the sweep.
pub const IDEMPOTENCY_EXPIRY: TableDefinition<(i64, &str), ()> =
    TableDefinition::new("idempotency_scoped_expiry");
/// What retention deleted, by reason → count.
pub const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// Rate key → its quota's state (`policy::RateState`: theoretical arrival time, end of
/// its pause, µs), while it says more than no state would.
pub const RATES: TableDefinition<&str, (i64, i64)> = TableDefinition::new("rates");
/// (ms, seq) → an audit log entry's JSON (`store::AuditRecord`).
pub const AUDIT: TableDefinition<(i64, u64), &str> = TableDefinition::new("audit");
/// (tenant, ms, seq) of each entry about a tenant.
pub const TENANT_AUDIT: TableDefinition<(&str, i64, u64), ()> =
    TableDefinition::new("tenant_audit");
/// `<tenant> <endpoint id>` → the endpoint's health record's JSON
/// (`endpoints::health`).
pub const ENDPOINTS: TableDefinition<&str, &str> = TableDefinition::new("endpoints");
/// `<tenant> <endpoint id>` → the pause's JSON, while the endpoint is paused
/// (`store::EndpointPause`).
pub const PAUSES: TableDefinition<&str, &str> = TableDefinition::new("endpoint_pauses");
/// Counts per tenant but the default one, by field (`store::tenant_counts`).
/// `(collection name, key)` → a document (`store::collections`).
pub const DOCUMENTS: TableDefinition<(&str, &str), &str> = TableDefinition::new("documents");

pub const TENANTS: TableDefinition<&str, i64> = TableDefinition::new("tenant_counts");
/// (ordering key within its tenant, place) → id: each ordering key's notifications in
/// registration order, while they are scheduled or in flight.
pub const ORDERS: TableDefinition<(&str, u64), &str> = TableDefinition::new("orders");

/// (tenant, time, id) of each tenant's notifications in one of its indexes
/// (`TenantIndex`), scored as `Record::tenant_position` says.
type TenantTable = TableDefinition<'static, (&'static str, i64, &'static str), ()>;
pub const TENANT_PENDING: TenantTable = TableDefinition::new("tenant_pending");
pub const TENANT_DEAD: TenantTable = TableDefinition::new("tenant_dead");
pub const TENANT_DONE: TenantTable = TableDefinition::new("tenant_done");

/// The table of a tenant's `index`.
pub fn tenant_table(index: TenantIndex) -> TenantTable {
    match index {
        TenantIndex::Pending => TENANT_PENDING,
        TenantIndex::Dead => TENANT_DEAD,
        TenantIndex::Done => TENANT_DONE,
    }
}

/// The table of `index`.
pub fn index_table(index: Index) -> TableDefinition<'static, (i64, &'static str), ()> {
    match index {
        Index::Due => DUE,
        Index::InFlight => INFLIGHT,
        Index::Dead => DEAD,
        Index::Done => DONE,
    }
}

/// A move between a tenant's index entries: from, to.
type TenantMove = (Option<(TenantIndex, i64)>, Option<(TenantIndex, i64)>);

/// Every table, open in one write transaction.
pub struct Tables<'t> {
    pub specs: Table<'t, &'static str, &'static str>,
    pub records: Table<'t, &'static str, &'static str>,
    pub history: Table<'t, &'static str, &'static str>,
    pub due: Table<'t, (i64, &'static str), ()>,
    pub inflight: Table<'t, (i64, &'static str), ()>,
    pub dead: Table<'t, (i64, &'static str), ()>,
    pub done: Table<'t, (i64, &'static str), ()>,
    pub idempotency: Table<'t, &'static str, (&'static str, i64)>,
    pub idempotency_expiry: Table<'t, (i64, &'static str), ()>,
    pub counters: Table<'t, &'static str, u64>,
    pub rates: Table<'t, &'static str, (i64, i64)>,
    pub audit: Table<'t, (i64, u64), &'static str>,
    pub tenant_audit: Table<'t, (&'static str, i64, u64), ()>,
    pub endpoints: Table<'t, &'static str, &'static str>,
    pub pauses: Table<'t, &'static str, &'static str>,
    pub tenants: Table<'t, &'static str, i64>,
    pub orders: Table<'t, (&'static str, u64), &'static str>,
    pub documents: Table<'t, (&'static str, &'static str), &'static str>,
    pub tenant_pending: Table<'t, (&'static str, i64, &'static str), ()>,
    pub tenant_dead: Table<'t, (&'static str, i64, &'static str), ()>,
    pub tenant_done: Table<'t, (&'static str, i64, &'static str), ()>,
    /// The transaction's time, which window counts are kept by and turns taken at.
    now: Now,
    /// An ordering key's next notification took its turn in this transaction.
    pub turned: bool,
}

impl<'t> Tables<'t> {
    pub fn open(tx: &'t WriteTransaction, now: Now) -> DbResult<Self> {
        Ok(Self {
            specs: tx.open_table(SPECS)?,
            records: tx.open_table(RECORDS)?,
            history: tx.open_table(HISTORY)?,
            due: tx.open_table(DUE)?,
            inflight: tx.open_table(INFLIGHT)?,
            dead: tx.open_table(DEAD)?,
            done: tx.open_table(DONE)?,
            idempotency: tx.open_table(IDEMPOTENCY)?,
            idempotency_expiry: tx.open_table(IDEMPOTENCY_EXPIRY)?,
            counters: tx.open_table(COUNTERS)?,
            rates: tx.open_table(RATES)?,
            audit: tx.open_table(AUDIT)?,
            tenant_audit: tx.open_table(TENANT_AUDIT)?,
            endpoints: tx.open_table(ENDPOINTS)?,
            pauses: tx.open_table(PAUSES)?,
            tenants: tx.open_table(TENANTS)?,
            orders: tx.open_table(ORDERS)?,
            documents: tx.open_table(DOCUMENTS)?,
            tenant_pending: tx.open_table(TENANT_PENDING)?,
            tenant_dead: tx.open_table(TENANT_DEAD)?,
            tenant_done: tx.open_table(TENANT_DONE)?,
            now,
            turned: false,
        })
    }

    pub fn index(&mut self, index: Index) -> &mut Table<'t, (i64, &'static str), ()> {
        match index {
            Index::Due => &mut self.due,
            Index::InFlight => &mut self.inflight,
            Index::Dead => &mut self.dead,
            Index::Done => &mut self.done,
        }
    }

    /// A tenant's `index`.
    pub fn tenant_index(
        &mut self,
        index: TenantIndex,
    ) -> &mut Table<'t, (&'static str, i64, &'static str), ()> {
        match index {
            TenantIndex::Pending => &mut self.tenant_pending,
            TenantIndex::Dead => &mut self.tenant_dead,
            TenantIndex::Done => &mut self.tenant_done,
        }
    }

    pub fn record(&self, id: &str) -> DbResult<Option<Record>> {
        match self.records.get(id)? {
            Some(raw) => Ok(Some(Record::decode(raw.value()).map_err(corrupt)?)),
            None => Ok(None),
        }
    }

    /// Writes `new` over `old` (if any), moving the notification between indexes (its
    /// tenant's included) and counting the move for its tenant, and keeping its ordering
    /// key's order (`keep_order`). The record as saved.
    pub fn save(&mut self, id: &str, old: Option<&Record>, new: &Record) -> DbResult<Record> {
        let new = self.keep_order(id, old, new)?;
        self.save_as_is(id, old, &new)?;
        Ok(new)
    }

    /// Keeps the order of `id`'s ordering key, if it has one, as it goes from `old` to
    /// `new`: registered or sent again, it joins the back of its key (and waits behind any
    /// other); finished, it leaves, and the next of its key takes its turn. `new` as it
    /// is to be saved.
    fn keep_order(&mut self, id: &str, old: Option<&Record>, new: &Record) -> DbResult<Record> {
        let index = |r: Option<&Record>| r.and_then(Record::position).map(|(index, _)| index);
        let (from, to) = (index(old), index(Some(new)));
        let (joins, leaves) = (Index::joins_order(from, to), Index::leaves_order(from, to));
        if !(joins || leaves && self.orders.first()?.is_some()) {
            return Ok(new.clone());
        }
        let Some(key) = self.ordering_of(id)? else {
            return Ok(new.clone());
        };
        if leaves {
            self.leave_order(&key, id)?;
            return Ok(new.clone());
        }
        match self.join_order(&key, id)? {
            true => Ok(transitions::wait(new).unwrap_or_else(|| new.clone())),
            false => Ok(new.clone()),
        }
    }

    /// The ordering key (within its tenant) that `id`'s spec names.
    fn ordering_of(&self, id: &str) -> DbResult<Option<String>> {
        Ok(self.specs.get(id)?.and_then(|v| spec::ordering(v.value())))
    }

    /// Puts `id` at the back of ordering key `key`. Whether another is before it.
    fn join_order(&mut self, key: &str, id: &str) -> DbResult<bool> {
        let last = self
            .orders
            .range((key, 0)..=(key, u64::MAX))?
            .next_back()
            .transpose()?
            .map(|(k, _)| k.value().1);
        self.orders.insert((key, last.map_or(0, |at| at + 1)), id)?;
        Ok(last.is_some())
    }

    /// Takes `id` out of ordering key `key`; when it was first, the next one takes its
    /// turn.
    fn leave_order(&mut self, key: &str, id: &str) -> DbResult<()> {
        let (mut place, mut first, mut next) = (None, true, None);
        for entry in self.orders.range((key, 0)..=(key, u64::MAX))? {
            let (k, v) = entry?;
            if place.is_some() {
                next = Some(v.value().to_string());
                break;
            }
            match v.value() == id {
                true => place = Some(k.value().1),
                false => first = false,
            }
        }
        let Some(place) = place else { return Ok(()) };
        self.orders.remove((key, place))?;
        let Some(next) = next.filter(|_| first) else {
            return Ok(());
        };
        let old = self.record(&next)?;
        if let Some(new) = old
            .as_ref()
            .and_then(|r| transitions::take_turn(r, self.now))
        {
            self.save_as_is(&next, old.as_ref(), &new)?;
            self.turned = true;
        }
        Ok(())
    }

    /// Writes `new` over `old` (if any), moving the notification between indexes, its
    /// tenant's included, and counting the move for its tenant. The tenant is read from
    /// the spec only for a move its own indexes or its counts see.
    fn save_as_is(&mut self, id: &str, old: Option<&Record>, new: &Record) -> DbResult<()> {
        let (from, to) = (old.and_then(Record::position), new.position());
        let own = (old.and_then(Record::tenant_position), new.tenant_position());
        let counted_apart = from != to && (old.is_none() || !self.tenants.is_empty()?);
        let tenant = match own.0 != own.1 || counted_apart {
            true => Some(self.tenant_of(id)?),
            false => None,
        };
        if let Some(tenant) = &tenant {
            self.move_in_tenant(tenant, id, own)?;
        }
        if from != to {
            let counted = tenant.filter(|_| counted_apart).unwrap_or_default();
            if let Some((index, at)) = from {
                self.index(index).remove((at, id))?;
                self.tally(&counted, index, at, -1)?;
            }
            if let Some((index, at)) = to {
                self.index(index).insert((at, id), ())?;
                self.tally(&counted, index, at, 1)?;
            }
        }
        self.records.insert(id, new.encode().as_str())?;
        Ok(())
    }

    /// Moves `id` of `tenant` from one entry of its tenant's indexes to another.
    fn move_in_tenant(
        &mut self,
        tenant: &Tenant,
        id: &str,
        (from, to): TenantMove,
    ) -> DbResult<()> {
        if from == to {
            return Ok(());
        }
        if let Some((index, at)) = from {
            self.tenant_index(index).remove((tenant.as_str(), at, id))?;
        }
        if let Some((index, at)) = to {
            self.tenant_index(index)
                .insert((tenant.as_str(), at, id), ())?;
        }
        Ok(())
    }

    /// Deletes `id`, at `at` in `index`, from its indexes, its tenant's included; its
    /// tenant, or `None` when `index` did not hold it there (its tenant's entry, which
    /// no longer matches, is deleted alone).
    pub fn unindex(&mut self, index: Index, at: i64, id: &str) -> DbResult<Option<Tenant>> {
        let tenant = self.tenant_of(id)?;
        let own = TenantIndex::of(index);
        self.tenant_index(own).remove((tenant.as_str(), at, id))?;
        let held = self.index(index).remove((at, id))?.is_some();
        Ok(held.then_some(tenant))
    }

    /// The tenant `id`'s spec names.
    pub fn tenant_of(&self, id: &str) -> DbResult<Tenant> {
        Ok(self
            .specs
            .get(id)?
            .map_or_else(Tenant::default, |v| spec::tenant(v.value())))
    }

    /// How many dead letters `tenant` has: its count, or for the default tenant what the
    /// others leave of the total.
    pub fn dead_of(&self, tenant: &Tenant) -> DbResult<u64> {
        let total = self.dead.len()?;
        if self.tenants.is_empty()? {
            return Ok(if tenant.is_default() { total } else { 0 });
        }
        if let Some(field) = tenant_counts::field_of(tenant, Index::Dead) {
            let own = self.tenants.get(field.as_str())?.map_or(0, |v| v.value());
            return Ok(own.max(0) as u64);
        }
        let mut fields = Vec::new();
        for entry in self.tenants.iter()? {
            let (field, n) = entry?;
            fields.push((field.value().to_string(), n.value()));
        }
        let counts: tenant_counts::TenantCounts = fields.into_iter().collect();
        Ok(counts.dead(tenant, total))
    }

    /// Counts a move of one of `tenant`'s notifications into (`by` 1) or out of (-1)
    /// `index` at `at`.
    pub fn tally(&mut self, tenant: &Tenant, index: Index, at: i64, by: i64) -> DbResult<()> {
        for (field, by) in tenant_counts::tally(tenant, index, at, by, self.now.down()) {
            self.add_to_tenant(&field, by)?;
        }
        Ok(())
    }

    /// Counts a notification of `tenant` that retention deleted for `reason`.
    pub fn tally_trimmed(&mut self, tenant: &Tenant, reason: &str) -> DbResult<()> {
        match tenant_counts::trimmed_field(tenant, reason) {
            Some(field) => self.add_to_tenant(&field, 1),
            None => Ok(()),
        }
    }

    fn add_to_tenant(&mut self, field: &str, by: i64) -> DbResult<()> {
        let now = self.tenants.get(field)?.map_or(0, |v| v.value());
        self.tenants.insert(field, now + by)?;
        Ok(())
    }

    /// Deletes the window counts older than the last hour.
    pub fn forget_old_windows(&mut self) -> DbResult<()> {
        let mut old = Vec::new();
        for entry in self.tenants.iter()? {
            let field = entry?.0.value().to_string();
            if tenant_counts::is_old_window(&field, self.now.down()) {
                old.push(field);
            }
        }
        for field in old {
            self.tenants.remove(field.as_str())?;
        }
        Ok(())
    }

    /// Whether `id` at `at` heads the due index.
    pub fn heads_due(&self, at: i64, id: &str) -> DbResult<bool> {
        Ok(self
            .due
            .first()?
            .is_some_and(|(k, _)| k.value() == (at, id)))
    }

    /// Deletes the notification's records (it is in no index any more).
    pub fn forget(&mut self, id: &str) -> DbResult<()> {
        self.specs.remove(id)?;
        self.records.remove(id)?;
        self.history.remove(id)?;
        Ok(())
    }

    pub fn count(&mut self, counter: &str, by: u64) -> DbResult<()> {
        let now = self.counters.get(counter)?.map_or(0, |v| v.value());
        self.counters.insert(counter, now + by)?;
        Ok(())
    }
}

pub fn decode<T: for<'de> Deserialize<'de>>(raw: &str) -> DbResult<T> {
    serde_json::from_str(raw).map_err(corrupt)
}

/// Data this version cannot read, as a storage error (it aborts the transaction).
pub fn corrupt(e: serde_json::Error) -> DbError {
    DbError::corrupted(format!("unreadable record: {e}"))
}
