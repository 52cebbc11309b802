//! The Postgres store's retention: dead letters past their age or beyond their count,
//! finished notifications past their age and forgotten idempotency keys deleted in
//! bounded steps, rows chosen with `FOR UPDATE SKIP LOCKED`, each counted by tenant and
//! reason. What goes is `lifecycle::retention`'s choice (`Pass`); this deletes it.

use std::collections::BTreeMap;

use super::tx::{col, PgResult, Tx};
use crate::lifecycle::retention::{Cut, Pass, Step};

/// Retention: runs `pass` (`lifecycle::retention`), deleting each cut it names and
/// counting each notification by tenant and reason, with the registrations refused at
/// intake as old as the dead letters it deletes; then up to its budget of forgotten
/// idempotency keys. How many notifications it deleted.
pub async fn apply_retention(t: &mut Tx<'_>, pass: &mut Pass) -> PgResult<usize> {
    loop {
        match pass.next() {
            Step::Delete(cut) => {
                let n = drop_oldest(t, &cut).await?;
                pass.deleted(n);
            }
            Step::CountDead => {
                let sql = "SELECT count(*) AS n FROM postback.jobs WHERE idx = 'dead'";
                let rows = t.query(sql, &[]).await?;
                let dead: i64 = rows.first().map(|r| col(r, "n")).transpose()?.unwrap_or(0);
                pass.counted(dead.max(0) as u64);
            }
            Step::Done => break,
        }
    }
    let (now_ms, budget) = (pass.now_ms(), pass.budget() as i64);
    if pass.touched_dead() {
        t.execute(
            "DELETE FROM postback.intake_refused WHERE id IN (
                 SELECT id FROM postback.intake_refused
                 WHERE refused_at < to_timestamp($1::int8 / 1000.0) ORDER BY refused_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&pass.dead_until(), &budget],
        )
        .await?;
    }
    t.execute(
        "DELETE FROM postback.idempotency WHERE (tenant, key) IN (
             SELECT tenant, key FROM postback.idempotency WHERE until <= $1 ORDER BY until
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&now_ms, &budget],
    )
    .await?;
    Ok(pass.total())
}

/// Deletes the notifications of `cut`, counting each under its counter for its tenant.
async fn drop_oldest(t: &mut Tx<'_>, cut: &Cut) -> PgResult<usize> {
    if cut.limit == 0 {
        return Ok(0);
    }
    let limit = i64::try_from(cut.limit).unwrap_or(i64::MAX);
    let rows = t
        .query(
            "DELETE FROM postback.jobs WHERE id IN (
                 SELECT id FROM postback.jobs WHERE idx = $1 AND at <= $2
                 ORDER BY at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING tenant",
            &[&cut.index.name(), &cut.until, &limit],
        )
        .await?;
    let mut by_tenant: BTreeMap<String, i64> = BTreeMap::new();
    for row in &rows {
        *by_tenant.entry(col(row, "tenant")?).or_default() += 1;
    }
    for (tenant, n) in &by_tenant {
        t.count_trimmed(tenant, cut.counter, *n).await?;
    }
    Ok(rows.len())
}
