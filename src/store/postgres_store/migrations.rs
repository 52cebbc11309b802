//! The schema `postback` and its versions: each migration is a SQL file shipped in the
//! binary, applied once, in order, in its own transaction, and recorded in
//! `postback.migrations`. Instances starting together take turns (an advisory lock),
//! and an instance refuses a schema newer than it knows rather than misread it.

use anyhow::{bail, Context};
use tokio_postgres::Client;

/// Every migration, by version: version N is the Nth.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_tables.sql"),
    include_str!("migrations/0002_intake.sql"),
    include_str!("migrations/0003_endpoints.sql"),
    include_str!("migrations/0004_endpoint_pauses.sql"),
    include_str!("migrations/0005_collections.sql"),
    include_str!("migrations/0006_idempotency_scope.sql"),
    include_str!("migrations/0007_tenant_audit.sql"),
    include_str!("migrations/0008_refusals.sql"),
    include_str!("migrations/0009_refused_by_tenant.sql"),
];

/// The schema version this build writes and reads.
pub const VERSION: i32 = MIGRATIONS.len() as i32;

/// Held while migrating, so that instances starting at once apply each version once.
const LOCK: i64 = 0x706f_7374_6261_636b; // "postback"

/// Creates the schema or brings it up to `VERSION`. The versions applied now. Postgres's
/// notices (`schema "postback" already exists, skipping`) are not asked for: what an
/// `IF NOT EXISTS` found is nothing to report.
pub async fn migrate(client: &mut Client, key: &str) -> anyhow::Result<Vec<i32>> {
    client
        .batch_execute("SET client_min_messages = warning")
        .await
        .with_context(|| format!("{key}: cannot set up the session to migrate the schema"))?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK])
        .await
        .with_context(|| format!("{key}: cannot lock the schema to migrate it"))?;
    let applied = apply_missing(client, key).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK])
        .await;
    let applied = applied?;
    unlocked.with_context(|| format!("{key}: cannot unlock the schema"))?;
    Ok(applied)
}

async fn apply_missing(client: &mut Client, key: &str) -> anyhow::Result<Vec<i32>> {
    client
        .batch_execute(
            "CREATE SCHEMA IF NOT EXISTS postback;
             CREATE TABLE IF NOT EXISTS postback.migrations (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );",
        )
        .await
        .with_context(|| format!("{key}: cannot create the schema postback"))?;
    let current = current_version(client, key).await?;
    if current > VERSION {
        bail!(
            "{key}: the schema postback is at version {current}, newer than this build knows \
             ({VERSION}); run a postback as new as the one that migrated it"
        );
    }
    let mut applied = Vec::new();
    for (version, sql) in (1..).zip(MIGRATIONS).skip(current as usize) {
        let tx = client.transaction().await?;
        tx.batch_execute(sql)
            .await
            .with_context(|| format!("{key}: migration {version} failed"))?;
        tx.execute(
            "INSERT INTO postback.migrations (version) VALUES ($1)",
            &[&version],
        )
        .await?;
        tx.commit()
            .await
            .with_context(|| format!("{key}: migration {version} failed"))?;
        applied.push(version);
    }
    Ok(applied)
}

/// The latest version applied (0 for a new schema).
pub async fn current_version(client: &Client, key: &str) -> anyhow::Result<i32> {
    let row = client
        .query_one(
            "SELECT coalesce(max(version), 0) AS version FROM postback.migrations",
            &[],
        )
        .await
        .with_context(|| format!("{key}: cannot read the schema's version"))?;
    row.try_get("version")
        .with_context(|| format!("{key}: cannot read the schema's version"))
}
