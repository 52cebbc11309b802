//! How postback reaches one Redis node that it names itself (the server of `redis_url`, a
//! sentinel, a data node the sentinels name): TCP or a Unix socket, then TLS when the
//! node is reached so, checked as `store::tls` says against the name of `Secured` (the
//! node's host, or `store.tls_server_name`); and `Relink`, one connection to it that is
//! opened again after an error that broke it. The redis crate's own TLS checks a
//! certificate against the host it connects to and no other name, hence these; a
//! cluster's nodes, which the cluster names, are reached by the crate's (`conn.rs`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisConnectionInfo,
    RedisError, RedisFuture, RedisResult, Value,
};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;

use crate::config::StoreTls;
use crate::store::tls::{client_config, Check, Named};

/// A byte stream to a node, in clear or over TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// TLS as a node is reached with: the roots and client certificate of `StoreTls`, and
/// the name its certificate must carry when not its host's.
#[derive(Clone)]
pub struct Secured {
    connector: TlsConnector,
    name: Option<ServerName<'static>>,
}

impl Secured {
    /// TLS with `tls`'s roots and client certificate, checking `name` if given.
    pub fn new(tls: &StoreTls, name: Option<&ServerName<'static>>) -> anyhow::Result<Self> {
        let config = client_config(tls, Check::ChainAndName)?;
        Ok(Self {
            connector: TlsConnector::from(config),
            name: name.cloned(),
        })
    }
}

/// Where a node is.
#[derive(Clone)]
enum Addr {
    Tcp(String, u16),
    Unix(PathBuf),
}

/// How to open a connection to one node: where it is, how to speak TLS to it if at all,
/// its user, password and database, and the timeouts.
#[derive(Clone)]
pub struct Dial {
    addr: Addr,
    tls: Option<Secured>,
    redis: RedisConnectionInfo,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Dial {
    /// The node of a Redis URL (`rediss://` over `tls`); the URL was checked at start.
    pub fn url(url: &str, tls: &StoreTls, timeouts: (Duration, Duration)) -> anyhow::Result<Self> {
        let info = url.into_connection_info()?;
        let (addr, secured) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (Addr::Tcp(host.clone(), *port), None),
            ConnectionAddr::TcpTls { host, port, .. } => {
                let secured = Secured::new(tls, tls.server_name.as_ref())?;
                (Addr::Tcp(host.clone(), *port), Some(secured))
            }
            ConnectionAddr::Unix(path) => (Addr::Unix(path.clone()), None),
            other => anyhow::bail!("{other}: not an address postback connects to"),
        };
        Ok(Self::to(
            addr,
            secured,
            info.redis_settings().clone(),
            timeouts,
        ))
    }

    /// The node at `host:port`, over `tls` if given.
    pub fn node(
        (host, port): (&str, u16),
        tls: Option<&Secured>,
        redis: RedisConnectionInfo,
        timeouts: (Duration, Duration),
    ) -> Self {
        Self::to(
            Addr::Tcp(host.to_string(), port),
            tls.cloned(),
            redis,
            timeouts,
        )
    }

    fn to(
        addr: Addr,
        tls: Option<Secured>,
        redis: RedisConnectionInfo,
        (connect_timeout, response_timeout): (Duration, Duration),
    ) -> Self {
        Self {
            addr,
            tls,
            redis,
            connect_timeout,
            response_timeout,
        }
    }

    /// With these timeouts instead.
    pub fn with_timeouts(&self, connect_timeout: Duration, response_timeout: Duration) -> Self {
        Self {
            connect_timeout,
            response_timeout,
            ..self.clone()
        }
    }

    /// A stream to the node, TLS's handshake done, within the connect timeout.
    async fn stream(&self) -> RedisResult<Box<dyn Io>> {
        let opening = async {
            let stream: Box<dyn Io> = match (&self.addr, &self.tls) {
                (Addr::Unix(path), _) => Box::new(UnixStream::connect(path).await?),
                (Addr::Tcp(host, port), tls) => {
                    let tcp = TcpStream::connect((host.as_str(), *port)).await?;
                    tcp.set_nodelay(true)?;
                    match tls {
                        None => Box::new(tcp),
                        Some(tls) => Box::new(tls.handshake(host, tcp).await?),
                    }
                }
            };
            Ok::<_, std::io::Error>(stream)
        };
        match tokio::time::timeout(self.connect_timeout, opening).await {
            Ok(opened) => Ok(opened?),
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting").into()),
        }
    }

    /// A multiplexed connection to the node, authenticated and on its database.
    pub async fn multiplexed(&self) -> RedisResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let stream = self.stream().await?;
        let (conn, driver) =
            MultiplexedConnection::new_with_config(&self.redis, stream, config).await?;
        tokio::spawn(driver);
        Ok(conn)
    }

    /// A connection to the node for pub/sub.
    pub async fn pubsub(&self) -> RedisResult<PubSub> {
        PubSub::new(&self.redis, self.stream().await?).await
    }

    /// One connection to the node, opened when first used and after it broke.
    pub fn relink(&self) -> Relink {
        Relink {
            dial: self.clone(),
            current: Arc::new(Mutex::new(None)),
            opened: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Where the node is, `host:port` or a socket's path, and `(TLS)` when it is
    /// reached so.
    pub fn address(&self) -> String {
        let tls = if self.tls.is_some() { " (TLS)" } else { "" };
        match &self.addr {
            Addr::Tcp(host, port) if host.contains(':') => format!("[{host}]:{port}{tls}"),
            Addr::Tcp(host, port) => format!("{host}:{port}{tls}"),
            Addr::Unix(path) => path.display().to_string(),
        }
    }

    /// The name its certificate is checked against, and the setting that gave it
    /// (`address_setting` when it is the address's host); none in clear.
    pub fn named(&self, address_setting: &str, rename: &'static str) -> Option<Named> {
        let tls = self.tls.as_ref()?;
        let (name, from) = match (&tls.name, &self.addr) {
            (Some(name), _) => (name.to_str().into_owned(), rename.to_string()),
            (None, Addr::Tcp(host, _)) => (host.clone(), address_setting.to_string()),
            (None, Addr::Unix(_)) => return None,
        };
        Some(Named {
            name,
            from,
            rename: Some(rename),
        })
    }

    /// The database selected.
    pub fn db(&self) -> i64 {
        self.redis.db()
    }
}

impl Secured {
    async fn handshake(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = match &self.name {
            Some(name) => name.clone(),
            None => ServerName::try_from(host.to_string())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
        };
        self.connector.connect(name, tcp).await
    }
}

/// One connection to a node, shared by its clones: opened on first use, and again on the
/// use after an error that broke it (as the redis crate's `ConnectionManager` does, which
/// cannot be given a stream of its own).
#[derive(Clone)]
pub struct Relink {
    dial: Dial,
    /// The connection open now, numbered.
    current: Arc<Mutex<Option<(u64, MultiplexedConnection)>>>,
    opened: Arc<AtomicU64>,
}

impl Relink {
    /// The connection, opened if there is none.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut current = self.current.lock().await;
        if let Some(open) = &*current {
            return Ok(open.clone());
        }
        let conn = self.dial.multiplexed().await?;
        let open = (self.opened.fetch_add(1, Ordering::Relaxed), conn);
        *current = Some(open.clone());
        Ok(open)
    }

    /// Drops connection `number` when `e` says it broke, so that the next use opens
    /// another.
    async fn heard(&self, number: u64, e: &RedisError) {
        if !e.is_unrecoverable_error() {
            return;
        }
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|(n, _)| *n == number) {
            *current = None;
        }
    }
}

impl ConnectionLike for Relink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (number, mut conn) = self.connection().await?;
            let reply = conn.req_packed_command(cmd).await;
            if let Err(e) = &reply {
                self.heard(number, e).await;
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (number, mut conn) = self.connection().await?;
            let replies = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &replies {
                self.heard(number, e).await;
            }
            replies
        })
    }

    fn get_db(&self) -> i64 {
        self.dial.db()
    }
}
