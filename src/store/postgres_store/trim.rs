//! The Postgres store's retention: dead letters past their age or beyond their count,
//! finished notifications past their age and forgotten idempotency keys deleted in
//! bounded steps, rows chosen with `FOR UPDATE SKIP LOCKED`, each counted by tenant and
//! reason. What goes is `lifecycle::retention`'s choice; this deletes it.

use std::collections::BTreeMap;

use super::tx::{col, PgResult, Tx};
use crate::store::types::RetentionLimits as Retention;

/// Retention: deletes up to `budget` dead letters past their age, then the oldest beyond
/// their count, and up to `budget` finished notifications past their age (each when its
/// flag says so), counting each by tenant and reason; then up to `budget` forgotten
/// idempotency keys. How many notifications it deleted.
pub async fn apply_retention(
    t: &mut Tx<'_>,
    limits: &Retention,
    budget: usize,
    (dead, finished): (bool, bool),
) -> PgResult<usize> {
    let now_ms = t.now.down();
    let budget = budget as i64;
    let mut n = 0;
    if dead {
        let before = now_ms - limits.dead_max_age_ms;
        n += drop_oldest(t, ("dead", before), budget, "dead_by_age").await?;
        let rows = t
            .query(
                "SELECT count(*) AS n FROM postback.jobs WHERE idx = 'dead'",
                &[],
            )
            .await?;
        let dead: i64 = rows.first().map(|r| col(r, "n")).transpose()?.unwrap_or(0);
        let keep = limits.dead_max_count.min(i64::MAX as u64) as i64;
        let excess = (dead - keep).min(budget - n as i64);
        n += drop_oldest(t, ("dead", i64::MAX), excess, "dead_by_count").await?;
        // Registrations refused at intake are kept as long as dead letters.
        t.execute(
            "DELETE FROM postback.intake_refused WHERE id IN (
                 SELECT id FROM postback.intake_refused
                 WHERE refused_at < to_timestamp($1::int8 / 1000.0) ORDER BY refused_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&before, &budget],
        )
        .await?;
    }
    if finished {
        let before = now_ms - limits.finished_max_age_ms;
        n += drop_oldest(t, ("done", before), budget, "finished_by_age").await?;
    }
    t.execute(
        "DELETE FROM postback.idempotency WHERE (tenant, key) IN (
             SELECT tenant, key FROM postback.idempotency WHERE until <= $1 ORDER BY until
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&now_ms, &budget],
    )
    .await?;
    Ok(n)
}

/// Deletes up to `limit` of the oldest notifications of index `idx` at or before
/// `before`, counting each under `reason` for its tenant.
async fn drop_oldest(
    t: &mut Tx<'_>,
    (idx, before): (&str, i64),
    limit: i64,
    reason: &str,
) -> PgResult<usize> {
    if limit <= 0 {
        return Ok(0);
    }
    let rows = t
        .query(
            "DELETE FROM postback.jobs WHERE id IN (
                 SELECT id FROM postback.jobs WHERE idx = $1 AND at <= $2
                 ORDER BY at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING tenant",
            &[&idx, &before, &limit],
        )
        .await?;
    let mut by_tenant: BTreeMap<String, i64> = BTreeMap::new();
    for row in &rows {
        *by_tenant.entry(col(row, "tenant")?).or_default() += 1;
    }
    for (tenant, n) in &by_tenant {
        t.count_trimmed(tenant, reason, *n).await?;
    }
    Ok(rows.len())
}
