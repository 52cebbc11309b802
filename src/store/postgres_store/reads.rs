//! The Postgres store's reads, each one statement or a few on a pooled connection
//! (what has been committed): a notification, pages of a list, the counts, the audit
//! log. Counts per tenant are counted from the rows, which carry their tenant.

use deadpool_postgres::Client;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::changes::{history, parse_id};
use super::tx::{col, corrupt, PgResult};
use crate::domain::Tenant;
use crate::endpoints::health::{self, EndpointRecord};
use crate::lifecycle::{Index, Record};
use crate::store::listing::MAX_SCAN;
use crate::store::spec;
use crate::store::tenant_counts::{window_of, OUTCOME_WINDOW_MS};
use crate::store::{
    idempotency_value, AuditEntry, AuditFilter, AuditPosition, Cursor, JobView, Outcomes,
    StateCounts, Stats, Trimmed,
};

/// Rows read at a time while a page is filled.
const CHUNK: i64 = 200;

async fn query(c: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
    let statement = c.prepare_cached(sql).await?;
    Ok(c.query(&statement, params).await?)
}

/// One notification with its history.
pub async fn view(c: &Client, id: &str) -> PgResult<Option<JobView>> {
    let rows = query(
        c,
        "SELECT id, spec, record, history FROM postback.jobs WHERE id = $1",
        &[&id],
    )
    .await?;
    rows.first().map(job_view).transpose()
}

fn job_view(row: &Row) -> PgResult<JobView> {
    let record = Record::decode(col(row, "record")?).map_err(corrupt)?;
    Ok(JobView {
        id: parse_id(col(row, "id")?)?,
        spec: spec::decode(col(row, "spec")?).map_err(corrupt)?,
        status: record.status(),
        history: history(col(row, "history")?)?,
    })
}

/// The notification `tenant`'s idempotency `key` registered, while it is kept at `now`.
pub async fn by_key(c: &Client, tenant: &Tenant, key: &str, now: i64) -> PgResult<Option<JobView>> {
    let rows = query(
        c,
        "SELECT kept FROM postback.idempotency WHERE tenant = $1 AND key = $2 AND until > $3",
        &[&&**tenant, &key, &now],
    )
    .await?;
    let Some(kept) = rows.first().map(|r| col::<String>(r, "kept")).transpose()? else {
        return Ok(None);
    };
    view(c, idempotency_value(&kept).0).await
}

/// Which rows of an index a page reads: in which order, within which times, of which
/// tenant.
pub struct IndexPage<'a> {
    pub index: Index,
    pub soonest_first: bool,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub tenant: Option<&'a Tenant>,
}

/// Up to `limit` notifications of the scan that `keep`, after `after`, examining at most
/// `MAX_SCAN`; and where the next page starts, if there is more, and how many it read.
pub async fn page(
    c: &Client,
    scan: &IndexPage<'_>,
    limit: usize,
    after: Option<&Cursor>,
    keep: impl Fn(&JobView) -> bool,
) -> PgResult<(Vec<JobView>, Option<Cursor>, usize)> {
    let mut from = after.map(|c| (c.at, c.id.to_string()));
    let (mut items, mut scanned) = (Vec::new(), 0);
    loop {
        let rows = chunk(c, scan, from.as_ref()).await?;
        for row in &rows {
            if items.len() == limit || scanned == MAX_SCAN {
                let next = from.map(|(at, id)| cursor(at, &id)).transpose()?;
                return Ok((items, next, scanned));
            }
            scanned += 1;
            let view = job_view(row)?;
            from = Some((col(row, "at")?, col::<String>(row, "id")?));
            if keep(&view) {
                items.push(view);
            }
        }
        if (rows.len() as i64) < CHUNK {
            return Ok((items, None, scanned));
        }
    }
}

fn cursor(at: i64, id: &str) -> PgResult<Cursor> {
    Ok(Cursor {
        at,
        id: parse_id(id)?,
    })
}

/// The next `CHUNK` rows of the scan after `from` (from its start without).
async fn chunk(
    c: &Client,
    scan: &IndexPage<'_>,
    from: Option<&(i64, String)>,
) -> PgResult<Vec<Row>> {
    let sql = match scan.soonest_first {
        true => {
            "SELECT id, spec, record, history, at FROM postback.jobs
             WHERE idx = $1 AND ($2::int8 IS NULL OR (at, id) > ($2, $3))
               AND at >= $4 AND at <= $5 AND ($6::text IS NULL OR tenant = $6)
             ORDER BY at, id LIMIT $7"
        }
        false => {
            "SELECT id, spec, record, history, at FROM postback.jobs
             WHERE idx = $1 AND ($2::int8 IS NULL OR (at, id) < ($2, $3))
               AND at >= $4 AND at <= $5 AND ($6::text IS NULL OR tenant = $6)
             ORDER BY at DESC, id DESC LIMIT $7"
        }
    };
    let (at, id) = (from.map(|f| f.0), from.map_or("", |f| f.1.as_str()));
    let (low, high) = (
        scan.since.unwrap_or(i64::MIN),
        scan.until.unwrap_or(i64::MAX),
    );
    let tenant = scan.tenant.map(|t| &**t);
    let idx = scan.index.name();
    query(c, sql, &[&idx, &at, &id, &low, &high, &tenant, &CHUNK]).await
}

/// Counts by state, and what retention deleted, of every tenant or of one.
pub async fn stats(c: &Client, tenant: Option<&Tenant>) -> PgResult<Stats> {
    let tenant = tenant.map(|t| &**t);
    let rows = query(
        c,
        "SELECT idx, count(*) AS n FROM postback.jobs
         WHERE idx IS NOT NULL AND ($1::text IS NULL OR tenant = $1) GROUP BY idx",
        &[&tenant],
    )
    .await?;
    let mut counts = StateCounts::default();
    for row in &rows {
        let n = col::<i64>(row, "n")? as u64;
        match Index::named(col(row, "idx")?) {
            Some(Index::Due) => counts.scheduled = n,
            Some(Index::InFlight) => counts.in_flight = n,
            Some(Index::Dead) => counts.dead = n,
            Some(Index::Done) => counts.finished = n,
            None => {}
        }
    }
    let rows = query(
        c,
        "SELECT reason, sum(n)::int8 AS n FROM postback.trimmed
         WHERE $1::text IS NULL OR tenant = $1 GROUP BY reason",
        &[&tenant],
    )
    .await?;
    let mut trimmed = Trimmed::default();
    for row in &rows {
        let n = col::<i64>(row, "n")?.max(0) as u64;
        match col::<&str>(row, "reason")? {
            "dead_by_age" => trimmed.dead_by_age = n,
            "dead_by_count" => trimmed.dead_by_count = n,
            "finished_by_age" => trimmed.finished_by_age = n,
            _ => {}
        }
    }
    Ok(Stats {
        total: counts.clone(),
        shards: vec![counts],
        trimmed,
        replication: Vec::new(),
    })
}

/// Finished and dead-lettered notifications per window from `first_window` (the last
/// one open-ended), of every tenant or of one.
pub async fn outcomes(
    c: &Client,
    tenant: Option<&Tenant>,
    first_window: i64,
    windows: usize,
) -> PgResult<Vec<Outcomes>> {
    let mut out = vec![Outcomes::default(); windows];
    if windows == 0 {
        return Ok(out);
    }
    let rows = query(
        c,
        "SELECT idx, at, count(*) AS n FROM postback.jobs
         WHERE idx IN ('dead', 'done') AND at >= $1 AND ($2::text IS NULL OR tenant = $2)
         GROUP BY idx, at",
        &[&(first_window * OUTCOME_WINDOW_MS), &tenant.map(|t| &**t)],
    )
    .await?;
    for row in &rows {
        let (at, n): (i64, i64) = (col(row, "at")?, col(row, "n")?);
        let slot = &mut out[((window_of(at) - first_window) as usize).min(windows - 1)];
        match col::<&str>(row, "idx")? {
            "dead" => slot.dead += n as u64,
            _ => slot.finished += n as u64,
        }
    }
    Ok(out)
}

/// Up to `n` audit entries older than `before` (or the newest), within the filter's
/// time range, newest first.
pub async fn audit(
    c: &Client,
    filter: &AuditFilter,
    before: Option<AuditPosition>,
    n: usize,
) -> PgResult<Vec<AuditEntry>> {
    let (before_at, before_seq) = match (before, filter.until) {
        (Some(b), _) => (b.ms, b.seq as i64),
        (None, Some(until)) => (until, i64::MAX),
        (None, None) => (i64::MAX, i64::MAX),
    };
    let rows = query(
        c,
        "SELECT at, seq, entry FROM postback.audit
         WHERE (at, seq) < ($1, $2) AND at >= $3 AND ($5::text IS NULL OR tenant = $5)
         ORDER BY at DESC, seq DESC LIMIT $4",
        &[
            &before_at,
            &before_seq,
            &filter.since.unwrap_or(i64::MIN),
            &(n as i64),
            &filter.tenant.as_ref().map(|t| t.as_str()),
        ],
    )
    .await?;
    rows.iter()
        .map(|row| {
            let at = AuditPosition {
                ms: col(row, "at")?,
                seq: col::<i64>(row, "seq")? as u64,
            };
            AuditEntry::decode(at, col(row, "entry")?).map_err(corrupt)
        })
        .collect()
}

/// Up to `n` endpoints' records after `after`, within `tenant`'s if named, in key order.
pub async fn endpoints(
    c: &Client,
    tenant: Option<&Tenant>,
    after: Option<&str>,
    n: usize,
) -> PgResult<Vec<EndpointRecord>> {
    let (low, high) = health::range(tenant, after);
    let (low, inclusive) = low.unwrap_or_default();
    let rows = query(
        c,
        "SELECT key, record FROM postback.endpoints
         WHERE record <> '' AND (key > $1 OR ($2 AND key = $1)) AND ($3::text IS NULL OR key < $3)
         ORDER BY key LIMIT $4",
        &[&low, &inclusive, &high, &(n as i64)],
    )
    .await?;
    rows.iter()
        .map(|r| EndpointRecord::decode(col(r, "key")?, col(r, "record")?).map_err(corrupt))
        .collect()
}

/// The record under `key`, if any.
pub async fn endpoint(c: &Client, key: &str) -> PgResult<Option<EndpointRecord>> {
    let rows = query(
        c,
        "SELECT record FROM postback.endpoints WHERE key = $1 AND record <> ''",
        &[&key],
    )
    .await?;
    rows.first()
        .map(|r| EndpointRecord::decode(key, col(r, "record")?).map_err(corrupt))
        .transpose()
}
