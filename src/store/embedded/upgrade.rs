//! Opening a file that an earlier build wrote: once, a file of redb 2 (builds up to
//! 2026-11-23) is upgraded with redb 2 (redb 3 does not open redb 2's), and its tables
//! keyed by tuples are copied into redb 3's tuple encoding (redb 2's is not read as it
//! is); and idempotency keys, which earlier builds kept without the default tenant's name
//! in front, are moved to tables named for their tenant-scoped names; and a file of a
//! build before each tenant had its own indexes has them filled from its indexes. Records
//! and specs are not rewritten: their decoders read every earlier layout.

use std::path::Path;

use redb::{
    Database, Key, Legacy, ReadableTable, ReadableTableMetadata, TableDefinition, TableError,
    TableHandle, Value, WriteTransaction,
};

use super::tables::{
    DbResult, Tables, AUDIT, DEAD, DONE, DUE, IDEMPOTENCY, IDEMPOTENCY_EXPIRY, INFLIGHT,
    TENANT_AUDIT,
};
use crate::lifecycle::{Index, Now, Record};
use crate::store::AuditRecord;
use crate::store::Idempotency;

/// Idempotency keys as builds before tenant-scoped names kept them.
const LEGACY_IDEMPOTENCY: TableDefinition<&str, (&str, i64)> = TableDefinition::new("idempotency");
const LEGACY_IDEMPOTENCY_EXPIRY: TableDefinition<(i64, &str), ()> =
    TableDefinition::new("idempotency_expiry");

/// Opens (or creates) the file, upgrading an earlier build's first.
pub fn open(path: &Path) -> Result<Database, redb::DatabaseError> {
    match Database::create(path) {
        Err(redb::DatabaseError::UpgradeRequired(_)) => {
            upgrade_format(path).map_err(|e| redb::DatabaseError::Storage(e.into()))?;
            tracing::info!(path = %path.display(), "upgraded the embedded store's file to redb 3's format");
            Database::create(path)
        }
        opened => opened,
    }
}

/// Upgrades a file of redb 2's format in place, with redb 2.
fn upgrade_format(path: &Path) -> std::io::Result<()> {
    let failed = |e: &dyn std::fmt::Display| {
        std::io::Error::other(format!("upgrading {}: {e}", path.display()))
    };
    let mut old = redb2::Database::open(path).map_err(|e| failed(&e))?;
    old.upgrade().map_err(|e| failed(&e))?;
    Ok(())
}

/// Copies every table keyed (or valued) by a tuple that still has redb 2's encoding into
/// redb 3's, in one transaction. How many tables it copied (0 for a file of this build).
pub fn upgrade_tables(db: &Database) -> DbResult<usize> {
    let tx = db.begin_write()?;
    let mut copied = 0;
    for index in [DUE, INFLIGHT, DEAD, DONE, LEGACY_IDEMPOTENCY_EXPIRY] {
        copied += usize::from(copy_if_legacy::<(i64, &str), ()>(&tx, index)?);
    }
    copied += usize::from(copy_if_legacy::<&str, (&str, i64)>(
        &tx,
        LEGACY_IDEMPOTENCY,
    )?);
    let scoped = scope_idempotency_keys(&tx)?;
    tx.commit()?;
    if scoped > 0 {
        tracing::info!(
            keys = scoped,
            "moved the embedded store's idempotency keys to their tenant-scoped names"
        );
    }
    if copied > 0 {
        tracing::info!(
            tables = copied,
            "copied the embedded store's indexes into redb 3's encoding"
        );
    }
    Ok(copied)
}

/// Fills each tenant's own indexes from the indexes of a file an earlier build wrote,
/// which had none: every notification of the file is in one index and, from then on, in
/// its tenant's. How many it indexed (0 for a file of this build, whose every
/// notification is already in its tenant's indexes).
pub fn index_tenants(db: &Database) -> DbResult<usize> {
    let tx = db.begin_write()?;
    let mut t = Tables::open(&tx, Now::read())?;
    let own_empty = t.tenant_pending.is_empty()? && t.tenant_dead.is_empty()?;
    if !own_empty || !t.tenant_done.is_empty()? {
        return Ok(0);
    }
    let mut indexed = 0;
    for index in [Index::Due, Index::InFlight, Index::Dead, Index::Done] {
        let mut ids = Vec::new();
        for entry in t.index(index).iter()? {
            ids.push(entry?.0.value().1.to_string());
        }
        for id in ids {
            let Some(at) = t.record(&id)?.as_ref().and_then(Record::tenant_position) else {
                continue;
            };
            let tenant = t.tenant_of(&id)?;
            t.tenant_index(at.0)
                .insert((tenant.as_str(), at.1, id.as_str()), ())?;
            indexed += 1;
        }
    }
    drop(t);
    tx.commit()?;
    if indexed > 0 {
        tracing::info!(
            indexed,
            "gave each tenant its own indexes of its notifications"
        );
    }
    Ok(indexed)
}

/// Fills each tenant's own index of the audit log from the log of a file an earlier build
/// wrote, which had none. How many entries it indexed.
pub fn index_tenant_audit(db: &Database) -> DbResult<usize> {
    let tx = db.begin_write()?;
    let mut indexed = 0;
    {
        let mut own = tx.open_table(TENANT_AUDIT)?;
        if !own.is_empty()? {
            return Ok(0);
        }
        let log = tx.open_table(AUDIT)?;
        for entry in log.iter()? {
            let (key, json) = entry?;
            let record = serde_json::from_str::<AuditRecord>(json.value()).ok();
            if let Some(tenant) = record.and_then(|r| r.tenant) {
                let (ms, seq) = key.value();
                own.insert((tenant.as_str(), ms, seq), ())?;
                indexed += 1;
            }
        }
    }
    tx.commit()?;
    Ok(indexed)
}

/// Moves the idempotency keys of an earlier build's tables (if any) to this build's,
/// renaming the default tenant's (`Idempotency::upgraded_name`). How many it moved.
fn scope_idempotency_keys(tx: &WriteTransaction) -> DbResult<usize> {
    let legacy = tx
        .list_tables()?
        .any(|t| t.name() == LEGACY_IDEMPOTENCY.name());
    if !legacy {
        return Ok(0);
    }
    let mut moved = 0;
    {
        let from = tx.open_table(LEGACY_IDEMPOTENCY)?;
        let mut keys = tx.open_table(IDEMPOTENCY)?;
        let mut expiry = tx.open_table(IDEMPOTENCY_EXPIRY)?;
        for entry in ReadableTable::iter(&from)? {
            let (name, kept) = entry?;
            let (kept, until) = kept.value();
            let name = name.value();
            let scoped = Idempotency::upgraded_name(name).unwrap_or_else(|| name.to_string());
            keys.insert(scoped.as_str(), (kept, until))?;
            expiry.insert((until, scoped.as_str()), ())?;
            moved += 1;
        }
    }
    tx.delete_table(LEGACY_IDEMPOTENCY)?;
    tx.delete_table(LEGACY_IDEMPOTENCY_EXPIRY)?;
    Ok(moved)
}

/// A key or value type as redb 2 encoded it: tuples wrapped in `Legacy`.
trait Earlier: Value {
    type Then: Value;
}

impl Earlier for (i64, &'static str) {
    type Then = Legacy<(i64, &'static str)>;
}

impl Earlier for (&'static str, i64) {
    type Then = Legacy<(&'static str, i64)>;
}

impl Earlier for () {
    type Then = ();
}

impl Earlier for &'static str {
    type Then = &'static str;
}

/// Copies `table` into redb 3's encoding when it still has redb 2's, under the same name.
fn copy_if_legacy<K, V>(tx: &WriteTransaction, table: TableDefinition<K, V>) -> DbResult<bool>
where
    K: Key + Earlier + 'static,
    V: Value + Earlier + 'static,
    K::Then: Key + for<'a> Value<SelfType<'a> = K::SelfType<'a>>,
    V::Then: for<'a> Value<SelfType<'a> = V::SelfType<'a>>,
{
    match tx.open_table(table) {
        Ok(_) => return Ok(false),
        Err(TableError::TableTypeMismatch { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let name = table.name().to_string();
    let earlier: TableDefinition<K::Then, V::Then> = TableDefinition::new(&name);
    let staged_name = format!("{name}.upgrading");
    let staged: TableDefinition<K, V> = TableDefinition::new(&staged_name);
    {
        let from = tx.open_table(earlier)?;
        let mut to = tx.open_table(staged)?;
        for entry in ReadableTable::iter(&from)? {
            let (k, v) = entry?;
            to.insert(k.value(), v.value())?;
        }
    }
    tx.delete_table(earlier)?;
    tx.rename_table(staged, table)?;
    Ok(true)
}
