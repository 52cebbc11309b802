//! The embedded store's reads, each in one read transaction (a consistent snapshot of
//! what has been committed): a notification, a page of dead letters, the counts.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::tables::{
    corrupt, decode, DbError, DbResult, COUNTERS, DEAD, DONE, DUE, HISTORY, INFLIGHT, RECORDS,
    SPECS, TENANTS,
};
use crate::domain::{Attempt, JobId, Tenant};
use crate::lifecycle::Record;
use crate::store::spec;
use crate::store::tenant_counts::{window_of, TenantCounts, OUTCOME_WINDOW_MS};
use crate::store::{Cursor, DeadFilter, DeadPage, JobView, Outcomes, StateCounts, Stats, Trimmed};

/// Dead letters examined for one page at most; past it the page ends early with a
/// cursor, so that a filter matching nothing cannot hold a reader for long.
const MAX_SCAN: usize = 5_000;

type Index = TableDefinition<'static, (i64, &'static str), ()>;

/// One notification with its history.
pub fn view(tx: &ReadTransaction, id: &str) -> DbResult<Option<JobView>> {
    let records = tx.open_table(RECORDS)?;
    let Some(record) = records.get(id)? else {
        return Ok(None);
    };
    let record = Record::decode(record.value()).map_err(corrupt)?;
    let Some(spec) = tx.open_table(SPECS)?.get(id)? else {
        return Ok(None);
    };
    let spec = spec::decode(spec.value()).map_err(corrupt)?;
    let history: Vec<Attempt> = match tx.open_table(HISTORY)?.get(id)? {
        Some(raw) => decode(raw.value())?,
        None => Vec::new(),
    };
    let id: JobId = id
        .parse()
        .map_err(|_| DbError::corrupted(format!("bad id `{id}`")))?;
    Ok(Some(JobView {
        id,
        spec,
        status: record.status(),
        history,
    }))
}

/// Up to `limit` dead letters matching `filter`, newest first after `after`.
pub fn dead_letters(
    tx: &ReadTransaction,
    filter: &DeadFilter,
    limit: usize,
    after: Option<&Cursor>,
) -> DbResult<DeadPage> {
    let dead = tx.open_table(DEAD)?;
    let since = filter.since.unwrap_or(i64::MIN);
    let top = match (after, filter.until) {
        (Some(c), Some(u)) if u < c.at => (u + 1, String::new()),
        (Some(c), _) => (c.at, c.id.to_string()),
        (None, Some(u)) => (u + 1, String::new()),
        (None, None) => (i64::MAX, String::new()),
    };
    let mut items = Vec::new();
    let mut last = None;
    for (scanned, entry) in dead.range(..(top.0, top.1.as_str()))?.rev().enumerate() {
        let key = entry?.0;
        let (at, id) = key.value();
        if at < since {
            return Ok(page(items, None));
        }
        if items.len() == limit || scanned == MAX_SCAN {
            return Ok(page(items, last));
        }
        let cursor = Cursor {
            at,
            id: id
                .parse()
                .map_err(|_| DbError::corrupted(format!("bad id `{id}`")))?,
        };
        if let Some(v) = view(tx, id)?.filter(|v| filter.matches(v)) {
            items.push(v);
        }
        last = Some(cursor);
    }
    Ok(page(items, None))
}

fn page(items: Vec<JobView>, next_cursor: Option<Cursor>) -> DeadPage {
    DeadPage { items, next_cursor }
}

/// When the earliest notification falls due or the earliest lease ends, if any.
pub fn next_wake_at(tx: &ReadTransaction) -> DbResult<Option<i64>> {
    let head = |def: Index| -> DbResult<Option<i64>> {
        Ok(tx.open_table(def)?.first()?.map(|(k, _)| k.value().0))
    };
    Ok(match (head(DUE)?, head(INFLIGHT)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// Counts by state, and what retention deleted, of every tenant or of one.
pub fn stats(tx: &ReadTransaction, tenant: Option<&Tenant>) -> DbResult<Stats> {
    let len = |def: Index| -> DbResult<u64> { Ok(tx.open_table(def)?.len()?) };
    let mut counts = StateCounts {
        scheduled: len(DUE)?,
        in_flight: len(INFLIGHT)?,
        dead: len(DEAD)?,
        finished: len(DONE)?,
    };
    let counters = tx.open_table(COUNTERS)?;
    let count = |name: &str| -> DbResult<u64> { Ok(counters.get(name)?.map_or(0, |v| v.value())) };
    let mut trimmed = Trimmed {
        dead_by_age: count("dead_by_age")?,
        dead_by_count: count("dead_by_count")?,
        finished_by_age: count("finished_by_age")?,
    };
    if let Some(tenant) = tenant {
        let tenants = tenant_counts(tx)?;
        counts = tenants.counts(tenant, &counts);
        trimmed = tenants.trimmed(tenant, &trimmed);
    }
    Ok(Stats {
        total: counts.clone(),
        shards: vec![counts],
        trimmed,
    })
}

fn tenant_counts(tx: &ReadTransaction) -> DbResult<TenantCounts> {
    let table = tx.open_table(TENANTS)?;
    let mut fields = Vec::new();
    for entry in table.iter()? {
        let (field, n) = entry?;
        fields.push((field.value().to_string(), n.value()));
    }
    Ok(fields.into_iter().collect())
}

/// Finished and dead-lettered notifications per window from `first_window` (the last
/// one open-ended), of every tenant or of one.
pub fn outcomes(
    tx: &ReadTransaction,
    tenant: Option<&Tenant>,
    first_window: i64,
    windows: usize,
) -> DbResult<Vec<Outcomes>> {
    let mut out = vec![Outcomes::default(); windows];
    if windows == 0 {
        return Ok(out);
    }
    for (def, dead) in [(DONE, false), (DEAD, true)] {
        let table = tx.open_table(def)?;
        for entry in table.range((first_window * OUTCOME_WINDOW_MS, "")..)? {
            let (at, _) = entry?.0.value();
            let slot = &mut out[((window_of(at) - first_window) as usize).min(windows - 1)];
            if dead {
                slot.dead += 1;
            } else {
                slot.finished += 1;
            }
        }
    }
    if let Some(tenant) = tenant {
        let tenants = tenant_counts(tx)?;
        for (w, slot) in (first_window..).zip(out.iter_mut()) {
            *slot = tenants.outcomes(tenant, w, *slot);
        }
    }
    Ok(out)
}
