//! How each shard's primary is replicated, from its `INFO replication`: the replicas
//! connected to it and how far the slowest is behind, for `/stats`, the metrics and
//! `/readyz`; and the check, at start-up and for `/readyz`, that each primary has the
//! replicas `store.replica_acks` asks for.

use super::conn::Conn;
use super::{store_error, RedisStore};
use crate::store::keys::ShardKeys;
use crate::store::{ShardReplication, StoreError, StoreResult};

impl RedisStore {
    /// Each shard's primary's replication, in shard order (a standalone Redis is asked
    /// once: every shard lives on it).
    pub(super) async fn replication(&self) -> StoreResult<Vec<ShardReplication>> {
        let mut out = Vec::with_capacity(self.shards.len());
        for keys in &self.shards {
            let seen = match (&self.conn, out.first()) {
                (Conn::Standalone(_), Some(first)) => *first,
                _ => parse(&self.info_of_primary(keys).await?),
            };
            out.push(seen);
        }
        Ok(out)
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
