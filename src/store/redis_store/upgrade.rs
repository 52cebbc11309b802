//! What an earlier build stored in Redis under names this one does not use, renamed once
//! per shard as an instance starts (and marked done in the shard's `upgrades` set, so
//! that later starts cost one command a shard): idempotency keys of the default tenant,
//! stored without their tenant in front (`Idempotency::upgraded_name`).

use redis::Value;

use super::RedisStore;
use crate::store::keys::ShardKeys;
use crate::store::{Idempotency, StoreError, StoreResult};

/// The upgrade's name in a shard's `upgrades` set.
const SCOPED_IDEMPOTENCY: &str = "idempotency-scope";
/// Keys a `SCAN` call examines.
const SCAN_COUNT: usize = 1000;

impl RedisStore {
    /// Renames, on every shard not yet upgraded, the default tenant's idempotency keys
    /// an earlier build stored; how many it renamed.
    pub(super) async fn upgrade_idempotency_keys(&self) -> StoreResult<usize> {
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
