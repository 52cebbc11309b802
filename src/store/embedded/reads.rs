//! The embedded store's reads, each in one read transaction (a consistent snapshot of
//! what has been committed): a notification, a page of dead letters, the counts.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::tables::{
    corrupt, decode, index_table, tenant_table, DbError, DbResult, COUNTERS, DEAD, DONE, DUE,
    HISTORY, IDEMPOTENCY, INFLIGHT, RECORDS, SPECS, TENANTS, TENANT_DEAD, TENANT_DONE,
};
use crate::domain::{Entry, JobId, Tenant};
use crate::lifecycle::{wakes_at, Index, Record, TenantIndex};
use crate::store::listing::MAX_SCAN;
use crate::store::spec;
use crate::store::tenant_counts::{window_of, TenantCounts, OUTCOME_WINDOW_MS};
use crate::store::{
    idempotency_value, Cursor, DeadPage, JobView, ListFilter, ListPage, Listed, Outcomes,
    StateCounts, Stats, Trimmed,
};

type IndexTable = TableDefinition<'static, (i64, &'static str), ()>;

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
    let history: Vec<Entry> = match tx.open_table(HISTORY)?.get(id)? {
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
    filter: &ListFilter,
    limit: usize,
    after: Option<&Cursor>,
) -> DbResult<DeadPage> {
    let range = (filter.since, filter.until);
    let source = Source::of(Index::Dead, filter);
    let (items, next_cursor, examined) = page(tx, (source, false), range, limit, after, |v| {
        filter.matches(v)
    })?;
    Ok(DeadPage {
        items,
        next_cursor,
        examined,
    })
}

/// A page of the list `listed` (`Reads::list`) in a walk that began at `walk_from`.
pub fn list(
    tx: &ReadTransaction,
    (listed, walk_from): (Listed, i64),
    filter: &ListFilter,
    limit: usize,
    after: Option<&Cursor>,
) -> DbResult<ListPage> {
    let source = Source::of(listed.index(), filter);
    let range = listed.scores_in(filter, source.tenant_index());
    let (items, next, examined) = page(
        tx,
        (source, listed.soonest_first()),
        range,
        limit,
        after,
        |v| listed.keeps(v, filter, walk_from),
    )?;
    Ok(ListPage::of_walk(items, next, walk_from, examined))
}

/// The notification the idempotency key `scoped` registered, while it is kept at `now`.
pub fn by_key(tx: &ReadTransaction, scoped: &str, now: i64) -> DbResult<Option<JobView>> {
    let table = tx.open_table(IDEMPOTENCY)?;
    let Some(kept) = table.get(scoped)? else {
        return Ok(None);
    };
    let (value, until) = kept.value();
    if until <= now {
        return Ok(None);
    }
    let (id, _) = idempotency_value(value);
    view(tx, id)
}

/// Where a list reads: an index of every tenant's notifications, or one tenant's own
/// (`TenantIndex`), so that a tenant's list reads its own notifications alone.
enum Source<'a> {
    All(Index),
    Tenant(TenantIndex, &'a str),
}

/// One entry of an index, in its order: its time and id.
type Entries<'t> = Box<dyn Iterator<Item = DbResult<(i64, String)>> + 't>;

impl<'a> Source<'a> {
    /// The index a list of `index` with `filter` reads: its tenant's, when it names one.
    fn of(index: Index, filter: &'a ListFilter) -> Self {
        match &filter.tenant {
            Some(tenant) => Source::Tenant(TenantIndex::of(index), tenant.as_str()),
            None => Source::All(index),
        }
    }

    fn tenant_index(&self) -> Option<TenantIndex> {
        match self {
            Source::All(_) => None,
            Source::Tenant(index, _) => Some(*index),
        }
    }

    /// Its entries from `from` on (soonest first), or before it (newest first).
    fn entries(
        &self,
        tx: &ReadTransaction,
        soonest_first: bool,
        (at, id): (i64, &str),
    ) -> DbResult<Entries<'static>> {
        let entry = |e: Result<_, redb::StorageError>| -> DbResult<(i64, String)> { Ok(e?) };
        match *self {
            Source::All(index) => {
                let table = tx.open_table(index_table(index))?;
                let range: Box<dyn Iterator<Item = _>> = match soonest_first {
                    true => Box::new(table.range((at, id)..)?),
                    false => Box::new(table.range(..(at, id))?.rev()),
                };
                Ok(Box::new(range.map(move |e| {
                    entry(e.map(|(k, _)| (k.value().0, k.value().1.to_string())))
                })))
            }
            Source::Tenant(index, tenant) => {
                let table = tx.open_table(tenant_table(index))?;
                let (first, last) = ((tenant, i64::MIN, ""), (tenant, i64::MAX, "\u{10FFFF}"));
                let range: Box<dyn Iterator<Item = _>> = match soonest_first {
                    true => Box::new(table.range((tenant, at, id)..=last)?),
                    false => Box::new(table.range(first..(tenant, at, id))?.rev()),
                };
                Ok(Box::new(range.map(move |e| {
                    entry(e.map(|(k, _)| (k.value().1, k.value().2.to_string())))
                })))
            }
        }
    }
}

/// Up to `limit` notifications of an index that `keep`, after `after`: soonest first
/// or newest first, with times within `range`, examining at most `MAX_SCAN`. Also where
/// the next page starts, if there is more, and how many it examined.
fn page(
    tx: &ReadTransaction,
    (source, soonest_first): (Source, bool),
    (since, until): (Option<i64>, Option<i64>),
    limit: usize,
    after: Option<&Cursor>,
    keep: impl Fn(&JobView) -> bool,
) -> DbResult<(Vec<JobView>, Option<Cursor>, usize)> {
    // Where the scan starts: just after `after`, or at the near end of the time range.
    let start = match (soonest_first, after) {
        (true, Some(c)) if since.is_some_and(|s| s > c.at) => (since.unwrap_or_default(), None),
        (false, Some(c)) if until.is_some_and(|u| u < c.at) => {
            (until.unwrap_or_default() + 1, None)
        }
        (_, Some(c)) => (c.at, Some(c.id.to_string())),
        (true, None) => (since.unwrap_or(i64::MIN), None),
        (false, None) => (until.map_or(i64::MAX, |u| u + 1), None),
    };
    let from = (start.0, start.1.as_deref().unwrap_or(""));
    let (mut items, mut last, mut examined) = (Vec::new(), None, 0);
    for (scanned, entry) in source.entries(tx, soonest_first, from)?.enumerate() {
        let (at, id) = entry?;
        if soonest_first && start.1.as_deref() == Some(id.as_str()) && at == start.0 {
            continue;
        }
        let past = match soonest_first {
            true => until.is_some_and(|u| at > u),
            false => since.is_some_and(|s| at < s),
        };
        if past {
            return Ok((items, None, examined));
        }
        if items.len() == limit || scanned == MAX_SCAN {
            return Ok((items, last, examined));
        }
        examined += 1;
        let cursor = Cursor {
            at,
            id: id
                .parse()
                .map_err(|_| DbError::corrupted(format!("bad id `{id}`")))?,
        };
        if let Some(v) = view(tx, &id)?.filter(|v| keep(v)) {
            items.push(v);
        }
        last = Some(cursor);
    }
    Ok((items, None, examined))
}

/// Every tenant with notifications in its dead or done index, which retention goes over.
pub fn retained_tenants(tx: &ReadTransaction) -> DbResult<Vec<Tenant>> {
    let mut names = std::collections::BTreeSet::new();
    for def in [TENANT_DEAD, TENANT_DONE] {
        let table = tx.open_table(def)?;
        let mut from = String::new();
        while let Some(entry) = table.range((from.as_str(), i64::MIN, "")..)?.next() {
            let name = entry?.0.value().0.to_string();
            // The least name after `name`: every entry of `name` sorts before it.
            from = format!("{name}\0");
            names.insert(name);
        }
    }
    let tenant = |name: String| {
        Tenant::parse(&name, "tenant")
            .map_err(|_| DbError::corrupted(format!("bad tenant `{name}` in an index")))
    };
    names.into_iter().map(tenant).collect()
}

/// When the earliest notification falls due or the earliest lease ends, if any.
pub fn next_wake_at(tx: &ReadTransaction) -> DbResult<Option<i64>> {
    // A notification waiting behind its ordering key or held is not due until let go.
    let head = |def: IndexTable| -> DbResult<Option<i64>> {
        let first = tx.open_table(def)?.first()?.map(|(k, _)| k.value().0);
        Ok(first.filter(|at| wakes_at(*at)))
    };
    Ok(match (head(DUE)?, head(INFLIGHT)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// Counts by state, and what retention deleted, of every tenant or of one.
pub fn stats(tx: &ReadTransaction, tenant: Option<&Tenant>) -> DbResult<Stats> {
    let len = |def: IndexTable| -> DbResult<u64> { Ok(tx.open_table(def)?.len()?) };
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
        replication: Vec::new(),
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
