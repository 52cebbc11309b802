//! What an earlier build stored in Redis that this one keeps otherwise, upgraded once per
//! shard as an instance starts (and marked done in the shard's `upgrades` set, so that
//! later starts cost one command a shard): idempotency keys of the default tenant, stored
//! without their tenant in front (`Idempotency::upgraded_name`), are renamed; and the
//! notifications of the shard's indexes are put into their tenants' own (`TenantIndex`),
//! which earlier builds did not keep.

use redis::Value;

use super::tenant_groups::TenantGroups;
use super::RedisStore;
use crate::lifecycle::Index;
use crate::store::keys::ShardKeys;
use crate::store::{Idempotency, StoreError, StoreResult};

/// The upgrades' names in a shard's `upgrades` set.
const SCOPED_IDEMPOTENCY: &str = "idempotency-scope";
const TENANT_INDEXES: &str = "tenant-indexes";
/// Notifications put into their tenants' indexes per script call.
const INDEX_BATCH: usize = 500;
/// Keys a `SCAN` call examines.
const SCAN_COUNT: usize = 1000;

impl RedisStore {
    /// Every upgrade of what earlier builds stored, each on the shards not yet upgraded.
    pub(super) async fn upgrade(&self) -> StoreResult<()> {
        self.upgrade_idempotency_keys().await?;
        self.upgrade_tenant_indexes().await?;
        let copied = self.audit.upgrade(&self.conn).await?;
        if copied > 0 {
            tracing::info!(
                copied,
                "gave each tenant its own audit log of the entries about it"
            );
        }
        Ok(())
    }

    /// Renames, on every shard not yet upgraded, the default tenant's idempotency keys
    /// an earlier build stored; how many it renamed.
    async fn upgrade_idempotency_keys(&self) -> StoreResult<usize> {
        let mut renamed = 0;
        for keys in &self.shards {
            let done: bool = self
                .on_primary(
                    keys.due(),
                    redis::cmd("SISMEMBER")
                        .arg(keys.upgrades())
                        .arg(SCOPED_IDEMPOTENCY),
                )
                .await
                .and_then(|v| read("SISMEMBER", v))?;
            if done {
                continue;
            }
            renamed += self.rename_legacy_keys(keys).await?;
            let mark = redis::cmd("SADD")
                .arg(keys.upgrades())
                .arg(SCOPED_IDEMPOTENCY)
                .clone();
            self.on_primary(keys.due(), &mark).await?;
        }
        if renamed > 0 {
            tracing::info!(
                renamed,
                "renamed the default tenant's idempotency keys an earlier build stored"
            );
        }
        Ok(renamed)
    }

    /// Renames one shard's keys of an earlier build's names.
    async fn rename_legacy_keys(&self, keys: &ShardKeys) -> StoreResult<usize> {
        let prefix = keys.idempotency("");
        let pattern = format!("{}*", glob_escaped(&prefix));
        let (mut cursor, mut renamed) = (0u64, 0);
        loop {
            let scan = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .clone();
            let (next, found): (u64, Vec<String>) =
                read("SCAN", self.on_primary(keys.due(), &scan).await?)?;
            for key in found {
                let Some(name) = key.strip_prefix(&prefix) else {
                    continue;
                };
                let Some(upgraded) = Idempotency::upgraded_name(name) else {
                    continue;
                };
                let rename = redis::cmd("RENAMENX")
                    .arg(&key)
                    .arg(keys.idempotency(&upgraded))
                    .clone();
                // Another instance starting at once may have renamed it first.
                if self.on_primary(keys.due(), &rename).await.is_ok() {
                    renamed += 1;
                }
            }
            if next == 0 {
                return Ok(renamed);
            }
            cursor = next;
        }
    }
}

impl RedisStore {
    /// Puts, on every shard not yet upgraded, the notifications of its indexes into their
    /// tenants' own; how many it put. Those in flight are only named among the shard's
    /// tenants, for the change that takes them out of flight keeps their tenant's
    /// indexes.
    async fn upgrade_tenant_indexes(&self) -> StoreResult<usize> {
        let mut indexed = 0;
        for keys in &self.shards {
            let marked = redis::cmd("SISMEMBER")
                .arg(keys.upgrades())
                .arg(TENANT_INDEXES)
                .clone();
            if read::<bool>("SISMEMBER", self.on_primary(keys.due(), &marked).await?)? {
                continue;
            }
            for index in [Index::Due, Index::InFlight, Index::Dead, Index::Done] {
                indexed += self.index_tenants(keys, index).await?;
            }
            let mark = redis::cmd("SADD")
                .arg(keys.upgrades())
                .arg(TENANT_INDEXES)
                .clone();
            self.on_primary(keys.due(), &mark).await?;
        }
        if indexed > 0 {
            tracing::info!(
                indexed,
                "gave each tenant its own indexes of its notifications"
            );
        }
        Ok(indexed)
    }

    /// Puts the notifications of one shard's `index` into their tenants' own, a batch at
    /// a time. How many it put.
    async fn index_tenants(&self, keys: &ShardKeys, index: Index) -> StoreResult<usize> {
        let (mut cursor, mut indexed) = (0u64, 0);
        loop {
            let scan = redis::cmd("ZSCAN")
                .arg(keys.index(index))
                .arg(cursor)
                .arg("COUNT")
                .arg(INDEX_BATCH)
                .clone();
            let (next, pairs): (u64, Vec<String>) =
                read("ZSCAN", self.on_primary(keys.due(), &scan).await?)?;
            let ids: Vec<String> = pairs.into_iter().step_by(2).collect();
            for batch in ids.chunks(INDEX_BATCH) {
                indexed += self.index_batch(keys, index, batch).await?;
            }
            if next == 0 {
                return Ok(indexed);
            }
            cursor = next;
        }
    }

    /// Puts `ids`, read in the shard's `index`, into their tenants' own.
    async fn index_batch(
        &self,
        keys: &ShardKeys,
        index: Index,
        ids: &[String],
    ) -> StoreResult<usize> {
        let tenants = self.tenants_of(keys, ids).await?;
        let mut groups = TenantGroups::after(keys.all().len());
        let named: Vec<(usize, &String)> = (tenants.iter().zip(ids))
            .filter_map(|(tenant, id)| Some((groups.of(tenant.as_ref()?), id)))
            .collect();
        let mut call = self.scripts.index_tenants.key(keys.all().as_slice());
        groups.add_keys(&mut call, keys);
        groups.add_args(&mut call, &self.retention);
        for (group, id) in named {
            call.arg(id).arg(index.name()).arg(group);
        }
        call.invoke_async(&mut self.conn.clone())
            .await
            .map_err(super::script_error("index_tenants"))
    }

    async fn on_primary(&self, key: &str, cmd: &redis::Cmd) -> StoreResult<Value> {
        self.conn
            .on_primary(key, cmd)
            .await
            .map_err(super::store_error)
    }
}

/// A reply of `command` read as `T`.
fn read<T: redis::FromRedisValue>(command: &str, reply: Value) -> StoreResult<T> {
    redis::from_redis_value(reply).map_err(|e| StoreError::Corrupt(format!("{command}: {e}")))
}

/// `text` with the characters a `MATCH` pattern reads specially escaped.
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
