//! The audit log in the embedded file: the `audit` table, keyed by position `(ms, seq)`
//! (the host's time of the entry, and its order within that millisecond) with the
//! record's JSON. Adding an entry deletes a bounded number of those past the retention.

use redb::{ReadTransaction, ReadableTable};

use super::tables::{DbError, DbResult, Tables, AUDIT};
use crate::lifecycle::Now;
use crate::store::{AuditEntry, AuditFilter, AuditPosition};

/// Entries past the retention deleted per entry added: more than one, so the log
/// shrinks back after its retention is shortened.
const TRIM_PER_ENTRY: usize = 8;

/// Adds `json` at `now`, after the last entry of the same millisecond.
pub fn record(t: &mut Tables, now: Now, json: &str, max_age_ms: i64) -> DbResult<()> {
    let ms = now.down();
    let seq = match t.audit.last()? {
        Some((key, _)) if key.value().0 == ms => key.value().1 + 1,
        _ => 0,
    };
    t.audit.insert((ms, seq), json)?;
    let expired: Vec<(i64, u64)> = t
        .audit
        .range(..(ms - max_age_ms, 0))?
        .take(TRIM_PER_ENTRY)
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    for key in expired {
        t.audit.remove(key)?;
    }
    Ok(())
}

/// Up to `n` entries older than `before` (or the newest), within the filter's time range,
/// newest first.
pub fn read(
    tx: &ReadTransaction,
    filter: &AuditFilter,
    before: Option<AuditPosition>,
    n: usize,
) -> DbResult<Vec<AuditEntry>> {
    let table = tx.open_table(AUDIT)?;
    let low = (filter.since.unwrap_or(i64::MIN), 0);
    let entries = match (before, filter.until) {
        (Some(b), _) => table.range(low..(b.ms, b.seq))?,
        (None, Some(until)) => table.range(low..=(until, u64::MAX))?,
        (None, None) => table.range(low..)?,
    };
    let mut out = Vec::with_capacity(n);
    for entry in entries.rev().take(n) {
        let (key, json) = entry?;
        let (ms, seq) = key.value();
        let entry = AuditEntry::decode(AuditPosition { ms, seq }, json.value())
            .map_err(|e| DbError::corrupted(e.to_string()))?;
        out.push(entry);
    }
    Ok(out)
}
