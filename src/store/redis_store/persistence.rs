//! What a Redis keeps of an answered registration when it restarts, found at start from
//! each shard's primary (`CONFIG GET appendonly`, `appendfsync`, `save`): a Redis that
//! keeps neither an append-only file nor snapshots loses every notification, those
//! answered `202` included, and is refused unless `store.allow_volatile` accepts it. A
//! Redis that hides `CONFIG` (some managed services) is trusted, with one warning, as
//! `check_eviction` does. The weakest primary's is the store's, which `/readyz`,
//! `/stats` and `postback_store_durability` show.

use redis::RedisResult;

use super::conn::Conn;
use crate::store::keys::ShardKeys;
use crate::store::{Durability, DurabilityKind};

/// One primary's persistence settings.
struct Found {
    appendonly: String,
    appendfsync: String,
    save: String,
}

impl Found {
    fn durability(&self) -> Durability {
        let aof = self.appendonly == "yes";
        let rdb = !self.save.trim().is_empty();
        let kind = match (aof, rdb) {
            (true, _) => DurabilityKind::AppendOnly,
            (false, true) => DurabilityKind::Snapshots,
            (false, false) => DurabilityKind::Volatile,
        };
        let mut detail = format!("appendonly {}", self.appendonly);
        if aof {
            detail += &format!(", appendfsync {}", self.appendfsync);
        }
        detail += &format!(", save \"{}\"", self.save);
        Durability { kind, detail }
    }
}

/// The weakest persistence of the primaries holding `shards`; refused when it is none
/// and `allowed` is off.
pub async fn check(conn: &Conn, shards: &[ShardKeys], allowed: bool) -> anyhow::Result<Durability> {
    let mut weakest: Option<Durability> = None;
    for keys in primaries(conn, shards) {
        let found = match read(conn, keys.due()).await {
            Ok(found) => found.durability(),
            Err(e) => return Ok(hidden(&e)),
        };
        if weakest.as_ref().is_none_or(|w| found.kind < w.kind) {
            weakest = Some(found);
        }
    }
    let durability = weakest.unwrap_or_else(|| hidden(&"no shard"));
    if durability.kind != DurabilityKind::Volatile {
        return Ok(durability);
    }
    if allowed {
        tracing::warn!(found = %durability.detail, "Redis persists nothing: a restart of it loses every notification, those answered 202 included (store.allow_volatile is on)");
        return Ok(durability);
    }
    anyhow::bail!(
        "Redis persists nothing ({}): a restart of it loses every notification, those answered 202 included; \
         turn on its append-only file (CONFIG SET appendonly yes, and appendonly yes in redis.conf), \
         or set store.allow_volatile (POSTBACK_STORE_ALLOW_VOLATILE=true) to start anyway",
        durability.detail
    )
}

/// The shards whose primaries to ask: each shard on a cluster, where they may differ;
/// the first elsewhere, where one server holds them all.
fn primaries<'a>(conn: &Conn, shards: &'a [ShardKeys]) -> &'a [ShardKeys] {
    match conn {
        Conn::Cluster(_) => shards,
        _ => &shards[..shards.len().min(1)],
    }
}

async fn read(conn: &Conn, key: &str) -> RedisResult<Found> {
    Ok(Found {
        appendonly: config_get(conn, key, "appendonly").await?,
        appendfsync: config_get(conn, key, "appendfsync").await?,
        save: config_get(conn, key, "save").await?,
    })
}

/// `CONFIG GET name` on the primary holding `key`.
async fn config_get(conn: &Conn, key: &str, name: &str) -> RedisResult<String> {
    let reply = conn
        .on_primary(key, redis::cmd("CONFIG").arg("GET").arg(name))
        .await?;
    let pair: Vec<String> = redis::from_redis_value(reply)?;
    Ok(pair.get(1).cloned().unwrap_or_default())
}

/// What is said, once, of a Redis whose `CONFIG` cannot be read.
fn hidden(why: &dyn std::fmt::Display) -> Durability {
    tracing::warn!(error = %why, "cannot read Redis's persistence (CONFIG GET appendonly, save); make sure it keeps an append-only file: one that persists nothing loses every notification when it restarts");
    Durability {
        kind: DurabilityKind::Unknown,
        detail: format!("CONFIG GET refused: {why}"),
    }
}
