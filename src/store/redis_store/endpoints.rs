//! Endpoints' health on Redis: the records in one hash, `{<prefix>:endpoints}:records`
//! (key `<tenant> <id>` → JSON), and their keys in a sorted set at one score,
//! `{<prefix>:endpoints}:keys`, which lists them in order (`ZRANGE … BYLEX`). One hash tag
//! of their own, so that on a cluster they live on one slot whatever the shards; each
//! instance writes them once a second. A record is read, worked out in Rust
//! (`EndpointRecord::added`) and written by `endpoints.lua` only if it is still as read;
//! one that another instance wrote meanwhile is read and worked out again. Paused
//! endpoints are a hash of their own on the same slot, `{<prefix>:endpoints}:paused`
//! (key → the pause's JSON), which every instance reads whole every few seconds; the
//! script sets a pause with the record write that decides it, and removes one with the
//! record's resume time, and retention keeps a paused endpoint's record.

use async_trait::async_trait;

use super::{script_error, store_error, RedisStore};
use crate::domain::{EndpointId, Tenant};
use crate::endpoints::health::{
    self, EndpointNotice, EndpointPause, EndpointRecord, EndpointRules,
};
use crate::store::{EndpointHealth, EndpointTally, StoreError, StoreResult};

/// Rounds of reading and writing before a write that keeps meeting others' gives up (it
/// is tried again with the next second's tallies).
const ROUNDS: usize = 8;

pub struct EndpointKeys {
    records: String,
    keys: String,
    paused: String,
}

impl EndpointKeys {
    pub fn new(key_prefix: &str) -> Self {
        let tag = format!("{{{key_prefix}:endpoints}}");
        Self {
            records: format!("{tag}:records"),
            keys: format!("{tag}:keys"),
            paused: format!("{tag}:paused"),
        }
    }
}

impl RedisStore {
    /// Up to `n` keys after `low` and before `high` (`endpoints::range`), in order, with
    /// their records as stored (`None`: deleted meanwhile).
    async fn read_range(
        &self,
        (low, high): (Option<(String, bool)>, Option<String>),
        n: usize,
    ) -> StoreResult<Vec<(String, Option<String>)>> {
        let keys: Vec<String> = redis::cmd("ZRANGE")
            .arg(&self.endpoint_keys.keys)
            .arg(low.map_or("-".into(), |(key, inclusive)| {
                format!("{}{key}", if inclusive { '[' } else { '(' })
            }))
            .arg(high.map_or("+".into(), |key| format!("({key}")))
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(n)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let stored = self.records(&keys).await?;
        Ok(keys.into_iter().zip(stored).collect())
    }

    /// The records under `keys`, as stored (`None`: none).
    async fn records<K: AsRef<str>>(&self, keys: &[K]) -> StoreResult<Vec<Option<String>>> {
        let keys: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
        redis::cmd("HMGET")
            .arg(&self.endpoint_keys.records)
            .arg(&keys)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)
    }

    /// A call of `endpoints.lua` with its keys; its arguments are the caller's.
    fn endpoints_script(&self) -> redis::ScriptInvocation<'_> {
        let mut call = self.scripts.endpoints.prepare_invoke();
        call.key(&self.endpoint_keys.records)
            .key(&self.endpoint_keys.keys)
            .key(&self.endpoint_keys.paused);
        call
    }

    /// Runs `call`: the keys whose record changed since it was read (nothing written),
    /// and those whose pause was set or removed.
    async fn run_endpoints(
        &self,
        call: &redis::ScriptInvocation<'_>,
    ) -> StoreResult<(Vec<String>, Vec<String>)> {
        call.invoke_async(&mut self.conn.clone())
            .await
            .map_err(script_error("endpoints"))
    }

    /// Writes the records of `tallies` (one per key), those it could, with the pauses they
    /// decide: the keys of the others, which changed since they were read, and what the
    /// records written tell.
    async fn write_endpoints(
        &self,
        tallies: &[(String, &EndpointTally)],
        rules: &EndpointRules,
    ) -> StoreResult<(Vec<String>, Vec<EndpointNotice>)> {
        let keys: Vec<&str> = tallies.iter().map(|(k, _)| k.as_str()).collect();
        let stored = self.records(&keys).await?;
        let now = crate::clock::now_ms();
        let mut call = self.endpoints_script();
        let mut added = Vec::with_capacity(tallies.len());
        for ((key, tally), stored) in tallies.iter().zip(&stored) {
            let a = EndpointRecord::added(key, stored.as_deref(), tally, now, rules)?;
            let pause = a
                .pause
                .as_ref()
                .map_or(String::new(), EndpointPause::encode);
            call.arg(key)
                .arg(stored.as_deref().unwrap_or(""))
                .arg(&a.json)
                .arg(pause);
            added.push((key, a));
        }
        let (changed, paused) = self.run_endpoints(&call).await?;
        let notices = added
            .into_iter()
            .filter(|(key, _)| !changed.contains(key))
            .flat_map(|(key, a)| a.notices(paused.contains(key)))
            .collect();
        Ok((changed, notices))
    }

    /// Resumes the endpoint of `key`, noting when in its record; whether it was paused.
    async fn resume(&self, key: &str) -> StoreResult<bool> {
        for _ in 0..ROUNDS {
            let stored = self.records(&[key]).await?.pop().flatten();
            let new = stored
                .as_deref()
                .map(|json| EndpointRecord::resumed(key, json, crate::clock::now_ms()))
                .transpose()?;
            let mut call = self.endpoints_script();
            call.arg(key)
                .arg(stored.as_deref().unwrap_or(""))
                .arg(new.as_deref().unwrap_or(""))
                .arg("-");
            let (changed, resumed) = self.run_endpoints(&call).await?;
            if changed.is_empty() {
                return Ok(!resumed.is_empty());
            }
        }
        Err(StoreError::Unavailable(format!(
            "endpoint record {key} kept changing while being resumed"
        )))
    }
}

#[async_trait]
impl EndpointHealth for RedisStore {
    async fn record_endpoints(
        &self,
        tallies: &[EndpointTally],
        rules: &EndpointRules,
    ) -> StoreResult<Vec<EndpointNotice>> {
        let mut pending: Vec<(String, &EndpointTally)> = tallies
            .iter()
            .map(|t| (health::key(&t.endpoint.tenant, &t.endpoint.id()), t))
            .collect();
        let mut told = Vec::new();
        for _ in 0..ROUNDS {
            if pending.is_empty() {
                return Ok(told);
            }
            let (changed, tell) = self.write_endpoints(&pending, rules).await?;
            told.extend(tell);
            pending.retain(|(k, _)| changed.contains(k));
        }
        Err(StoreError::Unavailable(format!(
            "{} endpoint records kept changing while being written",
            pending.len()
        )))
    }

    async fn endpoints(
        &self,
        tenant: Option<&Tenant>,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<Vec<EndpointRecord>> {
        let found = self.read_range(health::range(tenant, after), n).await?;
        let found = found
            .into_iter()
            .filter_map(|(key, json)| Some((key, json?)));
        found
            .map(|(key, json)| EndpointRecord::decode(&key, &json))
            .collect()
    }

    async fn forget_endpoints(
        &self,
        idle_before: i64,
        after: Option<&str>,
        n: usize,
    ) -> StoreResult<(usize, Option<String>)> {
        let read = self.read_range(health::range(None, after), n).await?;
        let next = (read.len() == n)
            .then(|| read.last().map(|(k, _)| k.clone()))
            .flatten();
        let idle: Vec<(&String, &String)> = read
            .iter()
            .filter_map(|(key, json)| Some((key, json.as_ref()?)))
            .filter(|(key, json)| health::is_idle(key, json, idle_before))
            .collect();
        if idle.is_empty() {
            return Ok((0, next));
        }
        let mut call = self.endpoints_script();
        for (key, json) in &idle {
            call.arg(*key).arg(*json).arg("").arg("");
        }
        let (changed, _) = self.run_endpoints(&call).await?;
        Ok((idle.len() - changed.len(), next))
    }

    async fn endpoint(
        &self,
        tenant: &Tenant,
        id: &EndpointId,
    ) -> StoreResult<Option<EndpointRecord>> {
        let key = health::key(tenant, id);
        let json: Option<String> = redis::cmd("HGET")
            .arg(&self.endpoint_keys.records)
            .arg(&key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        json.map(|j| EndpointRecord::decode(&key, &j)).transpose()
    }

    async fn set_pause(&self, key: &str, pause: Option<&EndpointPause>) -> StoreResult<bool> {
        let Some(pause) = pause else {
            return self.resume(key).await;
        };
        let set: i64 = redis::cmd("HSETNX")
            .arg(&self.endpoint_keys.paused)
            .arg(key)
            .arg(pause.encode())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        Ok(set > 0)
    }

    async fn pauses(&self) -> StoreResult<Vec<(String, EndpointPause)>> {
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&self.endpoint_keys.paused)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(store_error)?;
        all.into_iter()
            .map(|(key, json)| Ok((key.clone(), EndpointPause::decode(&key, &json)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_share_one_hash_tag() {
        let k = EndpointKeys::new("pb");
        assert_eq!(k.records, "{pb:endpoints}:records");
        assert_eq!(k.keys, "{pb:endpoints}:keys");
        assert_eq!(k.paused, "{pb:endpoints}:paused");
    }
}
