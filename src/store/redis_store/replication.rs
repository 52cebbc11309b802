//! How each shard's primary is replicated, from its `INFO replication`: the replicas
//! connected to it and how far the slowest is behind, for `/stats` and the metrics; and,
//! while `store.replica_acks` asks for replicas, which shards cannot acknowledge writes as
//! asked (`ShardHealth`): read every `CHECK_EVERY`, and noted at once when a write comes
//! back short (kept degraded `SHORT_FOR` at least), so that new notifications go to the
//! other shards and `/readyz` fails only when none can take one.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::conn::Conn;
use super::{store_error, RedisStore};
use crate::clock::now_ms;
use crate::store::keys::ShardKeys;
use crate::store::{ShardReplication, StoreError, StoreResult};

/// How often each shard's primary's replicas are read while `store.replica_acks` asks
/// for some: one `INFO` per primary.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// How long a shard a write to which came back short stays degraded at least.
const SHORT_FOR: Duration = Duration::from_secs(10);

impl RedisStore {
    /// Each shard's primary's replication, in shard order (a standalone Redis is asked
    /// once: every shard lives on it).
    pub(super) async fn replication(&self) -> StoreResult<Vec<ShardReplication>> {
        self.replication_of_each().await.into_iter().collect()
    }

    /// Each shard's primary's replication, or why it could not be read.
    pub(super) async fn replication_of_each(&self) -> Vec<StoreResult<ShardReplication>> {
        let mut out: Vec<StoreResult<ShardReplication>> = Vec::with_capacity(self.shards.len());
        for keys in &self.shards {
            let seen = match (&self.conn, out.first()) {
                (Conn::Standalone(_) | Conn::Sentinel(_), Some(first)) => first.clone(),
                _ => self.info_of_primary(keys).await.map(|info| parse(&info)),
            };
            out.push(seen);
        }
        out
    }

    /// `INFO replication` of the primary holding the shard `keys`.
    async fn info_of_primary(&self, keys: &ShardKeys) -> StoreResult<String> {
        let info = redis::cmd("INFO").arg("replication").clone();
        let reply = self
            .conn
            .on_primary(keys.due(), &info)
            .await
            .map_err(store_error)?;
        redis::from_redis_value::<String>(reply)
            .map_err(|e| StoreError::Corrupt(format!("INFO replication: {e}")))
    }

    /// Until `cancel`: reads each shard's replicas every `CHECK_EVERY` and notes which are
    /// degraded (none while `store.replica_acks` asks for none).
    pub(super) async fn watch_replication(&self, cancel: &CancellationToken) {
        if self.replica_acks == 0 {
            return;
        }
        loop {
            let replication = self.replication_of_each().await;
            self.note_replication(&replication);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
        }
    }

    /// Notes each shard degraded whose primary has fewer replicas than asked for (or
    /// does not answer), and healthy again one that has them (unless a write to it came
    /// back short lately).
    pub(super) fn note_replication(&self, replication: &[StoreResult<ShardReplication>]) {
        let now = now_ms();
        for (shard, r) in replication.iter().enumerate() {
            let reason = match r {
                Ok(r) if r.replicas >= self.replica_acks => None,
                Ok(r) => Some(format!(
                    "its primary has {} of the {} replicas store.replica_acks asks for",
                    r.replicas, self.replica_acks
                )),
                Err(e) => Some(format!("its primary does not answer: {e}")),
            };
            let short_lately =
                self.short_until[shard].load(std::sync::atomic::Ordering::Relaxed) > now;
            if reason.is_none() && short_lately {
                continue;
            }
            self.note_health(shard, reason, now);
        }
    }

    /// Notes that a write to `shard` came back with fewer acknowledgements than asked
    /// for (`e`): degraded for `SHORT_FOR` at least.
    pub(super) fn note_short_write(&self, shard: usize, e: &StoreError) {
        if self.replica_acks == 0 {
            return;
        }
        let now = now_ms();
        let until = now + SHORT_FOR.as_millis() as i64;
        self.short_until[shard].store(until, std::sync::atomic::Ordering::Relaxed);
        self.note_health(
            shard,
            Some(format!("a write to it came back short: {e}")),
            now,
        );
    }

    fn note_health(&self, shard: usize, reason: Option<String>, now: i64) {
        let degraded = reason.is_some();
        let why = reason.clone().unwrap_or_default();
        if self.shard_health.set(shard as u16, reason, now) {
            match degraded {
                true => {
                    tracing::warn!(shard, reason = %why, "shard degraded: new notifications go to the other shards")
                }
                false => tracing::info!(shard, "shard healthy again: it takes new notifications"),
            }
        }
        crate::observability::metrics::shard_degraded(shard, degraded);
    }

    /// When `store.replica_acks` asks for replicas: an error naming the first shard whose
    /// primary has fewer connected.
    pub(super) async fn check_replicas(&self) -> StoreResult<()> {
        if self.replica_acks == 0 {
            return Ok(());
        }
        let replication = self.replication().await?;
        match replication
            .iter()
            .enumerate()
            .find(|(_, r)| r.replicas < self.replica_acks)
        {
            Some((shard, r)) => Err(StoreError::ReplicasMissing {
                shard,
                connected: r.replicas,
                wanted: self.replica_acks,
            }),
            None => Ok(()),
        }
    }
}

/// The replicas online and the slowest one's lag, from `INFO replication`'s text.
fn parse(info: &str) -> ShardReplication {
    let field = |line: &str, name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    let mut primary_offset = 0u64;
    let mut replica_offsets = Vec::new();
    for line in info.lines().map(str::trim) {
        if let Some(offset) = line.strip_prefix("master_repl_offset:") {
            primary_offset = offset.parse().unwrap_or(0);
        } else if line.starts_with("slave") && line.contains(":ip=") {
            let online = field(line, "state").as_deref() == Some("online");
            let offset = field(line, "offset").and_then(|o| o.parse::<u64>().ok());
            if let (true, Some(offset)) = (online, offset) {
                replica_offsets.push(offset);
            }
        }
    }
    let slowest = replica_offsets.iter().min().copied();
    ShardReplication {
        replicas: replica_offsets.len() as u32,
        lag_bytes: slowest.map_or(0, |o| primary_offset.saturating_sub(o)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_replicas_online_and_the_slowest_ones_lag() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
            slave0:ip=127.0.0.1,port=7001,state=online,offset=900,lag=0\r\n\
            slave1:ip=127.0.0.1,port=7002,state=online,offset=1000,lag=1\r\n\
            slave2:ip=127.0.0.1,port=7003,state=wait_bgsave,offset=0,lag=0\r\n\
            master_failover_state:no-failover\r\nmaster_repl_offset:1000\r\n";
        let seen = parse(info);
        assert_eq!((seen.replicas, seen.lag_bytes), (2, 100));
        let alone = parse("role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:52\r\n");
        assert_eq!((alone.replicas, alone.lag_bytes), (0, 0));
    }
}
