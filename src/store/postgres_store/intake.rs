//! The Postgres store's side of `postback.notify()`: registrations taken from the
//! intake table, checked by the one Rust function every entry point uses and stored or
//! kept refused with their error, which the API reads back; and the rules the SQL
//! function checks first.

use deadpool_postgres::Client;

use super::changes::{enqueue, parse_id};
use super::tx::{col, corrupt, PgResult, Tx};
use crate::domain::Tenant;
use crate::store::types::NewJob;
use crate::store::{IntakeCheck, IntakeItem, IntakeRules, Refusal, TakenIn};

/// Takes up to `limit` registrations from the intake (those no other instance is
/// taking), stores each that `check` accepts and keeps each it refuses with its error,
/// and removes them all from the intake.
pub async fn take_in(t: &mut Tx<'_>, limit: usize, check: &IntakeCheck) -> PgResult<Vec<TakenIn>> {
    let rows = t
        .query(
            "SELECT seq, id, tenant, idempotency_key, request::text AS request
             FROM postback.intake ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED",
            &[&(limit as i64)],
        )
        .await?;
    let mut taken = Vec::with_capacity(rows.len());
    for row in &rows {
        let item = IntakeItem {
            id: parse_id(col(row, "id")?)?,
            tenant: col(row, "tenant")?,
            idempotency_key: col(row, "idempotency_key")?,
            request: col(row, "request")?,
        };
        taken.push(match check(&item) {
            Ok((n, idempotency)) => {
                let enqueued = enqueue(t, &NewJob::of(&n, idempotency.as_ref())).await?;
                TakenIn::Stored {
                    id: item.id,
                    enqueued,
                }
            }
            Err(error) => {
                refuse(t, &item, &error).await?;
                TakenIn::Refused { id: item.id, error }
            }
        });
        t.execute(
            "DELETE FROM postback.intake WHERE seq = $1",
            &[&col::<i64>(row, "seq")?],
        )
        .await?;
    }
    Ok(taken)
}

/// Writes the rules `postback.notify()` checks, over any written before.
pub async fn publish_rules(t: &mut Tx<'_>, rules: &IntakeRules) -> PgResult<()> {
    t.execute(
        "INSERT INTO postback.intake_rules (key_pattern, key_error, max_request_bytes, size_error)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (only_row) DO UPDATE SET key_pattern = $1, key_error = $2,
             max_request_bytes = $3, size_error = $4, written_at = clock_timestamp()",
        &[
            &rules.key_pattern,
            &rules.key_error,
            &rules.max_request_bytes,
            &rules.size_error,
        ],
    )
    .await?;
    Ok(())
}

/// Keeps a refused registration with its error, for its producer to read.
async fn refuse(t: &mut Tx<'_>, item: &IntakeItem, error: &serde_json::Value) -> PgResult<()> {
    t.execute(
        "INSERT INTO postback.intake_refused (id, tenant, request, error, registered_by, registered_at)
         SELECT id, tenant, request, $2::text::jsonb, registered_by, registered_at
         FROM postback.intake WHERE id = $1",
        &[&item.id.to_string(), &error.to_string()],
    )
    .await?;
    Ok(())
}

/// Why the registration `id` was refused, while it is kept: its tenant and the API's error.
pub async fn refusal(c: &Client, id: &str) -> PgResult<Option<Refusal>> {
    let statement = c
        .prepare_cached(
            "SELECT tenant, error ->> 'message' AS message, error ->> 'field' AS field
             FROM postback.intake_refused WHERE id = $1",
        )
        .await?;
    let Some(row) = c.query_opt(&statement, &[&id]).await? else {
        return Ok(None);
    };
    let tenant = Tenant::parse(col(&row, "tenant")?, "tenant").map_err(corrupt)?;
    Ok(Some(Refusal {
        tenant,
        message: col::<Option<String>>(&row, "message")?.unwrap_or_default(),
        field: col(&row, "field")?,
    }))
}
