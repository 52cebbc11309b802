//! The audit log in the embedded file: the `audit` table, keyed by position `(ms, seq)`
//! (the host's time of the entry, and its order within that millisecond) with the
//! record's JSON, and `tenant_audit`, the positions of each tenant's entries, which its
//! auditors read (so that another tenant's actions never push theirs out of a page).
//! Adding an entry deletes a bounded number of those past the retention.

use redb::{ReadTransaction, ReadableTable};

use super::tables::{DbError, DbResult, Tables, AUDIT, TENANT_AUDIT};
use crate::domain::Tenant;
use crate::lifecycle::Now;
use crate::store::{AuditEntry, AuditFilter, AuditPosition, AuditRecord};

/// Entries past the retention deleted per entry added: more than one, so the log
/// shrinks back after its retention is shortened.
const TRIM_PER_ENTRY: usize = 8;

/// Adds `record` at `now`, after the last entry of the same millisecond.
pub fn record(t: &mut Tables, now: Now, record: &AuditRecord, max_age_ms: i64) -> DbResult<()> {
    let json = serde_json::to_string(record).expect("a record serializes");
    let ms = now.down();
    let seq = match t.audit.last()? {
        Some((key, _)) if key.value().0 == ms => key.value().1 + 1,
        _ => 0,
    };
    t.audit.insert((ms, seq), json.as_str())?;
    if let Some(tenant) = &record.tenant {
        t.tenant_audit.insert((tenant.as_str(), ms, seq), ())?;
    }
    let expired: Vec<((i64, u64), Option<Tenant>)> = t
        .audit
        .range(..(ms - max_age_ms, 0))?
        .take(TRIM_PER_ENTRY)
        .map(|e| e.map(|(k, v)| (k.value(), tenant_of(v.value()))))
        .collect::<Result<_, _>>()?;
    for ((ms, seq), tenant) in expired {
        t.audit.remove((ms, seq))?;
        if let Some(tenant) = tenant {
            t.tenant_audit.remove((tenant.as_str(), ms, seq))?;
        }
    }
    Ok(())
}

/// The tenant an entry's JSON names (none for one that cannot be read).
fn tenant_of(json: &str) -> Option<Tenant> {
    serde_json::from_str::<AuditRecord>(json).ok()?.tenant
}

/// Up to `n` entries older than `before` (or the newest), within the filter's time range,
/// newest first: of the filter's tenant alone when it names one.
pub fn read(
    tx: &ReadTransaction,
    filter: &AuditFilter,
    before: Option<AuditPosition>,
    n: usize,
) -> DbResult<Vec<AuditEntry>> {
    let low = (filter.since.unwrap_or(i64::MIN), 0);
    let high = match (before, filter.until) {
        (Some(b), _) => (b.ms, b.seq),
        (None, Some(until)) => (until, u64::MAX),
        (None, None) => (i64::MAX, u64::MAX),
    };
    let positions = match &filter.tenant {
        Some(tenant) => tenant_positions(tx, tenant, low, high, n)?,
        None => all_positions(tx, low, high, n)?,
    };
    let table = tx.open_table(AUDIT)?;
    let mut out = Vec::with_capacity(positions.len());
    for (ms, seq) in positions {
        let Some(json) = table.get((ms, seq))? else {
            continue;
        };
        let entry = AuditEntry::decode(AuditPosition { ms, seq }, json.value())
            .map_err(|e| DbError::corrupted(e.to_string()))?;
        out.push(entry);
    }
    Ok(out)
}

/// Up to `n` positions of every entry from `low` to before `high`, newest first (`high`
/// itself is taken only when its seq is `u64::MAX`, past any entry's).
fn all_positions(
    tx: &ReadTransaction,
    low: (i64, u64),
    high: (i64, u64),
    n: usize,
) -> DbResult<Vec<(i64, u64)>> {
    let table = tx.open_table(AUDIT)?;
    let mut out = Vec::with_capacity(n);
    for entry in table.range(low..high)?.rev().take(n) {
        out.push(entry?.0.value());
    }
    Ok(out)
}

/// The same, of `tenant`'s entries alone.
fn tenant_positions(
    tx: &ReadTransaction,
    tenant: &Tenant,
    low: (i64, u64),
    high: (i64, u64),
    n: usize,
) -> DbResult<Vec<(i64, u64)>> {
    let table = tx.open_table(TENANT_AUDIT)?;
    let name = tenant.as_str();
    let range = (name, low.0, low.1)..(name, high.0, high.1);
    let mut out = Vec::with_capacity(n);
    for entry in table.range(range)?.rev().take(n) {
        let (_, ms, seq) = entry?.0.value();
        out.push((ms, seq));
    }
    Ok(out)
}
