//! Opening a file that an earlier build wrote: once, a file of redb 2 (builds up to
//! 2026-11-23) is upgraded with redb 2 (redb 3 does not open redb 2's), and its tables
//! keyed by tuples are copied into redb 3's tuple encoding (redb 2's is not read as it
//! is); and idempotency keys, which earlier builds kept without the default tenant's name
//! in front, are moved to tables named for their tenant-scoped names. Records and specs
//! are not rewritten: their decoders read every earlier layout.

use std::path::Path;

use redb::{
    Database, Key, Legacy, TableDefinition, TableError, TableHandle, Value, WriteTransaction,
};

use super::tables::{DbResult, DEAD, DONE, DUE, IDEMPOTENCY, IDEMPOTENCY_EXPIRY, INFLIGHT};
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
        for entry in redb::ReadableTable::iter(&from)? {
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
        for entry in redb::ReadableTable::iter(&from)? {
            let (k, v) = entry?;
            to.insert(k.value(), v.value())?;
        }
    }
    tx.delete_table(earlier)?;
    tx.rename_table(staged, table)?;
    Ok(true)
}
