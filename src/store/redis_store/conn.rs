//! One connection type for the two ways of reaching Redis: a standalone server, through a
//! reconnecting `ConnectionManager`, or a Redis Cluster, through a `ClusterConnection`
//! that sends each script to the primary holding its keys' slot (every key of a script
//! shares one shard's hash tag), loads scripts on every node, and follows failovers and
//! slot moves by itself.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::config::{RedisTarget, StoreSettings};

#[derive(Clone)]
pub enum Conn {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// One connection attempt to `target`.
    pub async fn open(target: &RedisTarget, settings: &StoreSettings) -> RedisResult<Self> {
        match target {
            RedisTarget::Standalone(url) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(settings.connect_timeout))
                    .set_response_timeout(Some(settings.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                let client = redis::Client::open(url.as_str())?;
                let conn = ConnectionManager::new_with_config(client, config).await?;
                Ok(Self::Standalone(conn))
            }
            RedisTarget::Cluster(seeds) => {
                let client = ClusterClient::builder(seeds.clone())
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.response_timeout)
                    .retries(3)
                    .build()?;
                Ok(Self::Cluster(client.get_async_connection().await?))
            }
        }
    }

    /// `cmd` on the primary that holds `key`'s slot (a command with no key of its own,
    /// as `INFO` or `SCAN`, goes where it is sent).
    pub async fn on_primary(&self, key: &str, cmd: &Cmd) -> RedisResult<Value> {
        match &mut self.clone() {
            Self::Standalone(c) => cmd.query_async::<Value>(c).await,
            Self::Cluster(c) => {
                let route = Route::with_slot(Slot::for_key(key), SlotAddr::Master);
                let node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                c.route_command(cmd.clone(), node).await
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Standalone(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}
