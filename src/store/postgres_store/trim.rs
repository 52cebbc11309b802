//! The Postgres store's retention: each tenant's dead letters past their age or beyond
//! their count and finished notifications past their age, and forgotten idempotency
//! keys, deleted in bounded steps, rows chosen with `FOR UPDATE SKIP LOCKED`, each counted
//! by tenant and reason. What goes is `lifecycle::retention`'s choice (`Pass`, one per
//! tenant, held to its limits); this deletes it.

use super::changes::parse_tenant;
use super::tx::{col, PgResult, Tx};
use crate::domain::Tenant;
use crate::lifecycle::retention::{Cut, Pass, Step};

/// Retention of `tenant`'s notifications: runs `pass` (`lifecycle::retention`) over its
/// rows alone, deleting each cut it names and counting each by reason, with the tenant's
/// registrations refused at intake as old as the dead letters it deletes. How many
/// notifications it deleted.
pub async fn apply_retention(t: &mut Tx<'_>, tenant: &str, pass: &mut Pass) -> PgResult<usize> {
    loop {
        match pass.next() {
            Step::Delete(cut) => {
                let n = drop_oldest(t, tenant, &cut).await?;
                pass.deleted(n);
            }
            Step::CountDead => {
                let sql = "SELECT count(*) AS n FROM postback.jobs
                           WHERE tenant = $1 AND idx = 'dead'";
                let rows = t.query(sql, &[&tenant]).await?;
                let dead: i64 = rows.first().map(|r| col(r, "n")).transpose()?.unwrap_or(0);
                pass.counted(dead.max(0) as u64);
            }
            Step::Done => break,
        }
    }
    if pass.touched_dead() {
        t.execute(
            "DELETE FROM postback.intake_refused WHERE id IN (
                 SELECT id FROM postback.intake_refused
                 WHERE tenant = $3 AND refused_at < to_timestamp($1::int8 / 1000.0)
                 ORDER BY refused_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&pass.dead_until(), &(pass.budget() as i64), &tenant],
        )
        .await?;
    }
    Ok(pass.total())
}

/// Forgets up to `budget` idempotency keys whose time has ended.
pub async fn forget_keys(t: &mut Tx<'_>, budget: usize) -> PgResult<()> {
    let now_ms = t.now.down();
    t.execute(
        "DELETE FROM postback.idempotency WHERE (tenant, key) IN (
             SELECT tenant, key FROM postback.idempotency WHERE until <= $1 ORDER BY until
             LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&now_ms, &(budget as i64)],
    )
    .await?;
    Ok(())
}

/// Every tenant with notifications or refused registrations stored, read a tenant at a
/// time off the indexes by tenant (so that the work grows with the tenants, not with
/// what they stored).
pub async fn tenants(t: &mut Tx<'_>) -> PgResult<Vec<Tenant>> {
    let rows = t
        .query(
            "WITH RECURSIVE kept(tenant) AS (
                 (SELECT tenant FROM postback.jobs ORDER BY tenant LIMIT 1)
                 UNION ALL
                 SELECT (SELECT j.tenant FROM postback.jobs j WHERE j.tenant > kept.tenant
                         ORDER BY j.tenant LIMIT 1)
                 FROM kept WHERE kept.tenant IS NOT NULL),
             refused(tenant) AS (
                 (SELECT tenant FROM postback.intake_refused ORDER BY tenant LIMIT 1)
                 UNION ALL
                 SELECT (SELECT r.tenant FROM postback.intake_refused r
                         WHERE r.tenant > refused.tenant ORDER BY r.tenant LIMIT 1)
                 FROM refused WHERE refused.tenant IS NOT NULL)
             SELECT tenant FROM kept WHERE tenant IS NOT NULL
             UNION SELECT tenant FROM refused WHERE tenant IS NOT NULL",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| parse_tenant(&col::<String>(r, "tenant")?))
        .collect()
}

/// Deletes `tenant`'s notifications of `cut`, counting them under its counter.
async fn drop_oldest(t: &mut Tx<'_>, tenant: &str, cut: &Cut) -> PgResult<usize> {
    if cut.limit == 0 {
        return Ok(0);
    }
    let limit = i64::try_from(cut.limit).unwrap_or(i64::MAX);
    let n = t
        .execute(
            "DELETE FROM postback.jobs WHERE id IN (
                 SELECT id FROM postback.jobs WHERE tenant = $4 AND idx = $1 AND at <= $2
                 ORDER BY at, id LIMIT $3 FOR UPDATE SKIP LOCKED)",
            &[&cut.index.name(), &cut.until, &limit, &tenant],
        )
        .await?;
    if n > 0 {
        t.count_trimmed(tenant, cut.counter, n as i64).await?;
    }
    Ok(n as usize)
}
