//! The Postgres store's audit log: an entry added at the transaction's time, a few past
//! the retention deleted with each.

use super::tx::{PgResult, Tx};

/// Entries past the retention deleted per entry added: more than one, so the log
/// shrinks back after its retention is shortened.
const AUDIT_TRIM_PER_ENTRY: i64 = 8;

/// Adds an audit entry about `tenant` (none: every tenant) at the transaction's time, and
/// deletes a few past `max_age_ms`.
pub async fn record_audit(
    t: &mut Tx<'_>,
    (json, tenant): (&str, Option<&str>),
    max_age_ms: i64,
) -> PgResult<()> {
    let at = t.now.down();
    t.execute(
        "INSERT INTO postback.audit (at, entry, tenant) VALUES ($1, $2, $3)",
        &[&at, &json, &tenant],
    )
    .await?;
    t.execute(
        "DELETE FROM postback.audit WHERE (at, seq) IN (
             SELECT at, seq FROM postback.audit WHERE at < $1 ORDER BY at, seq LIMIT $2)",
        &[&(at - max_age_ms), &AUDIT_TRIM_PER_ENTRY],
    )
    .await?;
    Ok(())
}
