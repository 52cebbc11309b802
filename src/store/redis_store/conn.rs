//! One connection type for the three ways of reaching Redis: a standalone server, through
//! a connection that opens itself again when it broke (`dial.rs`'s `Relink`); a Redis
//! Cluster, through a `ClusterConnection` that sends each script to the primary holding
//! its keys' slot (every key of a script shares one shard's hash tag), loads scripts on
//! every node, and follows failovers and slot moves by itself, over TLS to every node
//! (the seeds and those a `MOVED` names) when the seeds are `rediss://`; or the primary
//! Redis Sentinel names, through a connection that follows it to the next
//! (`sentinel.rs`). `Place` is where the store's connections go.

use std::future::Future;

use redis::aio::{ConnectionLike, PubSub};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{ClientTlsConfig, Cmd, Pipeline, RedisFuture, RedisResult, TlsCertificates, Value};

use super::dial::{Dial, Relink};
use super::sentinel::{Followed, Primary};
use crate::config::store_tls::{Roots, SERVER_NAME};
use crate::config::{redact, RedisTarget, StoreSettings, StoreTls};
use crate::store::tls::Named;

/// Where the store's connections go: the configured server or cluster, or the primary the
/// sentinels name, which every connection to it follows.
#[derive(Clone)]
pub enum Place {
    Standalone(Dial),
    /// The seeds, and the roots and client certificate of TLS when they are `rediss://`.
    Cluster(Vec<String>, Option<TlsCertificates>),
    Sentinel(Primary),
}

impl Place {
    /// Where `target` is, reached over `tls` where it says so: with Sentinel, once a
    /// sentinel names a primary that answers.
    pub async fn find(
        target: &RedisTarget,
        settings: &StoreSettings,
        tls: &StoreTls,
    ) -> anyhow::Result<Self> {
        let timeouts = (settings.connect_timeout, settings.response_timeout);
        Ok(match target {
            RedisTarget::Standalone(url) => Self::Standalone(Dial::url(url, tls, timeouts)?),
            RedisTarget::Cluster(seeds) => {
                let tls_seeds = seeds.iter().any(|s| s.starts_with("rediss://"));
                Self::Cluster(seeds.clone(), tls_seeds.then(|| certificates(tls)))
            }
            RedisTarget::Sentinel(sentinels) => {
                Self::Sentinel(Primary::find(sentinels, settings, tls).await?)
            }
        })
    }

    /// The `turn`-th subscription's connection: to the server, to each cluster seed in
    /// turn, or to the primary as it is now.
    pub async fn pubsub(&self, turn: usize) -> RedisResult<PubSub> {
        match self {
            Self::Standalone(dial) => dial.pubsub().await,
            Self::Cluster(seeds, tls) => {
                let seed = seeds[turn % seeds.len()].as_str();
                let client = match tls {
                    Some(certs) => redis::Client::build_with_tls(seed, certs.clone())?,
                    None => redis::Client::open(seed)?,
                };
                client.get_async_pubsub().await
            }
            Self::Sentinel(primary) => primary.dial().pubsub().await,
        }
    }

    /// Returns when what this place's connections go to has moved from where it is now:
    /// never, but with Sentinel.
    pub fn moved(&self) -> impl Future<Output = ()> + Send + 'static {
        let primary = match self {
            Self::Sentinel(primary) => Some(primary.moved()),
            Self::Standalone(_) | Self::Cluster(..) => None,
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
            Self::Standalone(dial) => format!("Redis at {}", dial.address()),
            Self::Cluster(seeds, _) => format!("Redis at {}", urls(seeds)),
            Self::Sentinel(primary) => {
                format!("the primary the sentinels name, {},", primary.address())
            }
        }
    }
}

impl Place {
    /// The name a server's certificate is checked against here, and the setting that
    /// gave it; none in clear.
    pub fn named(&self) -> Option<Named> {
        match self {
            Self::Standalone(dial) => {
                dial.named("store.redis_url (POSTBACK_STORE_REDIS_URL)", SERVER_NAME)
            }
            Self::Cluster(_, None) => None,
            Self::Cluster(..) => Some(Named {
                name: "the address each node is announced by".into(),
                from: "store.cluster_urls (POSTBACK_STORE_CLUSTER_URLS)".into(),
                rename: None,
            }),
            Self::Sentinel(primary) => primary
                .dial()
                .named("the address the sentinels name", SERVER_NAME),
        }
    }
}

/// The roots and client certificate of `tls` as the redis crate takes them, for a
/// cluster's nodes.
fn certificates(tls: &StoreTls) -> TlsCertificates {
    TlsCertificates {
        client_tls: tls.identity.as_ref().map(|i| ClientTlsConfig {
            client_cert: i.cert.clone(),
            client_key: i.key.clone(),
        }),
        root_cert: match &tls.roots {
            Roots::System => None,
            Roots::File { pem, .. } => Some(pem.clone()),
        },
    }
}

#[derive(Clone)]
pub enum Conn {
    Standalone(Relink),
    Cluster(ClusterConnection),
    Sentinel(Followed),
}

impl Conn {
    /// One connection attempt to `place`.
    pub async fn open(place: &Place, settings: &StoreSettings) -> RedisResult<Self> {
        match place {
            Place::Standalone(dial) => {
                let timeouts = (settings.connect_timeout, settings.response_timeout);
                let mut conn = dial.with_timeouts(timeouts.0, timeouts.1).relink();
                redis::cmd("PING").query_async::<()>(&mut conn).await?;
                Ok(Self::Standalone(conn))
            }
            Place::Cluster(seeds, tls) => {
                let mut builder = ClusterClient::builder(seeds.clone())
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.response_timeout)
                    .retries(3);
                if let Some(certs) = tls {
                    builder = builder.certs(certs.clone());
                }
                Ok(Self::Cluster(
                    builder.build()?.get_async_connection().await?,
                ))
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
