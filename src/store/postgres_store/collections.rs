//! Collections on Postgres: the table `postback.documents`, keyed by the collection's
//! name and the key. A write takes a transaction-scoped advisory lock per key it touches
//! (in key order, as `unnest` gives them, so that two writes never wait for each other in
//! turn) before it checks what the keys hold, so that a write expecting a key to be free
//! cannot race another.

use async_trait::async_trait;

use super::tx::{col, PgResult, Tx};
use super::{store_error, PostgresStore, CONFLICT_RETRIES};
use crate::store::collections::{Change, Collection, Collections, Scan};
use crate::store::StoreResult;

/// Applies `changes` if every expectation holds; whether they were applied.
async fn write(t: &mut Tx<'_>, changes: &[Change]) -> PgResult<bool> {
    let mut locks: Vec<String> = changes
        .iter()
        .map(|c| format!("doc {} {}", c.collection.name(), c.key))
        .collect();
    locks.sort();
    locks.dedup();
    t.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k",
        &[&locks],
    )
    .await?;
    for change in changes {
        let rows = t
            .query(
                "SELECT doc FROM postback.documents WHERE collection = $1 AND key = $2",
                &[&change.collection.name(), &change.key],
            )
            .await?;
        let held: Option<String> = rows.first().map(|r| col(r, "doc")).transpose()?;
        if !change.expect.holds(held.as_deref()) {
            return Ok(false);
        }
    }
    for change in changes {
        let name = change.collection.name();
        match &change.put {
            Some(doc) => {
                t.execute(
                    "INSERT INTO postback.documents (collection, key, doc) VALUES ($1, $2, $3)
                     ON CONFLICT (collection, key) DO UPDATE SET doc = excluded.doc",
                    &[&name, &change.key, doc],
                )
                .await?
            }
            None => {
                t.execute(
                    "DELETE FROM postback.documents WHERE collection = $1 AND key = $2",
                    &[&name, &change.key],
                )
                .await?
            }
        };
    }
    Ok(true)
}

#[async_trait]
impl Collections for PostgresStore {
    async fn write(&self, changes: &[Change]) -> StoreResult<bool> {
        if changes.is_empty() {
            return Ok(true);
        }
        in_transaction!(self, |t| write(&mut t, changes).await?)
    }

    async fn read(
        &self,
        collection: Collection,
        keys: &[String],
    ) -> StoreResult<Vec<Option<String>>> {
        let c = self.reader().await?;
        let rows = c
            .query(
                "SELECT key, doc FROM postback.documents WHERE collection = $1 AND key = ANY($2)",
                &[&collection.name(), &keys],
            )
            .await
            .map_err(|e| store_error(e.into()))?;
        let found: std::collections::HashMap<String, String> = rows
            .iter()
            .map(|r| Ok((col(r, "key")?, col(r, "doc")?)))
            .collect::<PgResult<_>>()
            .map_err(store_error)?;
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }

    async fn scan(
        &self,
        collection: Collection,
        scan: &Scan,
    ) -> StoreResult<Vec<(String, String)>> {
        let (low, high) = scan.bounds();
        let order = if scan.newest_first { "DESC" } else { "ASC" };
        let sql = format!(
            "SELECT key, doc FROM postback.documents WHERE collection = $1
             AND (key > $2 OR ($3 AND key = $2)) AND (key < $4 OR ($5 AND key = $4))
             ORDER BY key {order} LIMIT $6"
        );
        let c = self.reader().await?;
        let rows = c
            .query(
                &sql,
                &[
                    &collection.name(),
                    &low.key,
                    &low.inclusive,
                    &high.key,
                    &high.inclusive,
                    &(scan.limit as i64),
                ],
            )
            .await
            .map_err(|e| store_error(e.into()))?;
        rows.iter()
            .map(|r| Ok((col(r, "key")?, col(r, "doc")?)))
            .collect::<PgResult<_>>()
            .map_err(store_error)
    }
}
