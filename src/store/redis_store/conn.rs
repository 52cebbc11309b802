//! One connection type for the three ways of reaching Redis: a standalone server, through
//! a reconnecting `ConnectionManager`; a Redis Cluster, through a `ClusterConnection`
//! that sends each script to the primary holding its keys' slot (every key of a script
//! shares one shard's hash tag), loads scripts on every node, and follows failovers and
//! slot moves by itself; or the primary Redis Sentinel names, through a connection that
//! follows it to the next (`sentinel.rs`). `Place` is where the store's connections go.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::sentinel::{Followed, Primary};
use crate::config::{redact, RedisTarget, StoreSettings};

/// Where the store's connections go: the configured server or cluster, or the primary the
/// sentinels name, which every connection to it follows.
#[derive(Clone)]
pub enum Place {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel(Primary),
}

impl Place {
    /// Where `target` is: with Sentinel, once a sentinel names a primary that answers.
    pub async fn find(target: &RedisTarget, settings: &StoreSettings) -> anyhow::Result<Self> {
        Ok(match target {
            RedisTarget::Standalone(url) => Self::Standalone(url.clone()),
            RedisTarget::Cluster(seeds) => Self::Cluster(seeds.clone()),
            RedisTarget::Sentinel(sentinels) => {
                Self::Sentinel(Primary::find(sentinels, settings).await?)
            }
        })
    }

    /// A client for the `turn`-th subscription: of the server, of each cluster seed in
    /// turn, or of the primary as it is now.
    pub fn pubsub_client(&self, turn: usize) -> RedisResult<redis::Client> {
        match self {
            Self::Standalone(url) => redis::Client::open(url.as_str()),
            Self::Cluster(seeds) => redis::Client::open(seeds[turn % seeds.len()].as_str()),
            Self::Sentinel(primary) => primary.client(),
        }
    }

    /// Returns when what this place's connections go to has moved from where it is now:
    /// never, but with Sentinel.
    pub fn moved(&self) -> impl Future<Output = ()> + Send + 'static {
        let primary = match self {
            Self::Sentinel(primary) => Some(primary.moved()),
            Self::Standalone(_) | Self::Cluster(_) => None,
        };
        async move {
            match primary {
                Some(moved) => moved.await,
                None => std::future::pending().await,
            }
        }
    }

    /// What the connections go to, for an error (passwords redacted).
    pub fn describe(&self) -> String {
        let urls = |urls: &[String]| {
            let shown: Vec<String> = urls.iter().map(|u| redact::address(u)).collect();
            shown.join(", ")
        };
        match self {
            Self::Standalone(url) => format!("Redis at {}", redact::address(url)),
            Self::Cluster(seeds) => format!("Redis at {}", urls(seeds)),
            Self::Sentinel(primary) => {
                format!("the primary the sentinels name, {},", primary.address())
            }
        }
    }
}

#[derive(Clone)]
pub enum Conn {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Followed),
}

impl Conn {
    /// One connection attempt to `place`.
    pub async fn open(place: &Place, settings: &StoreSettings) -> RedisResult<Self> {
        match place {
            Place::Standalone(url) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(settings.connect_timeout))
                    .set_response_timeout(Some(settings.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                let client = redis::Client::open(url.as_str())?;
                let conn = ConnectionManager::new_with_config(client, config).await?;
                Ok(Self::Standalone(conn))
            }
            Place::Cluster(seeds) => {
                let client = ClusterClient::builder(seeds.clone())
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.response_timeout)
                    .retries(3)
                    .build()?;
                Ok(Self::Cluster(client.get_async_connection().await?))
            }
            Place::Sentinel(primary) => {
                let mut conn = primary.connection(settings);
                redis::cmd("PING").query_async::<()>(&mut conn).await?;
                Ok(Self::Sentinel(conn))
            }
        }
    }

    /// `cmd` on the primary that holds `key`'s slot (a command with no key of its own,
    /// as `INFO` or `SCAN`, goes where it is sent).
    pub async fn on_primary(&self, key: &str, cmd: &Cmd) -> RedisResult<Value> {
        match &mut self.clone() {
            Self::Standalone(c) => cmd.query_async::<Value>(c).await,
            Self::Sentinel(c) => cmd.query_async::<Value>(c).await,
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
            Self::Sentinel(c) => c.req_packed_command(cmd),
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
            Self::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(c) => c.get_db(),
        }
    }
}
