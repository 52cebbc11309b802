//! How a delivery reaches its receiver: the connector of the sender's HTTP client. It
//! resolves the callback's host itself, keeps only public addresses unless private
//! networks are allowed (`ssrf`), connects to one of them — directly, or through the
//! HTTP `CONNECT` proxy of `delivery.proxy`, which is asked for that address and never
//! for the name — and speaks TLS with the callback's own host name, presenting the
//! tenant's client certificate and trusting its roots where it has them. The address
//! checked is the address connected to: no DNS rebinding between check and connection,
//! and no proxy resolving a name postback did not check.

mod proxy;
mod stream;
mod tls;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use crate::delivery::ssrf::{self, Blocked};

pub use proxy::ProxyUrl;
pub use stream::Stream;
pub use tls::{client_config, read_identity, read_roots};

/// The errors a connection can fail with; the sender reports their root cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Opens the connections of one HTTP client: cheap to clone, shared by its pool.
#[derive(Clone)]
pub struct Connector(Arc<Route>);

struct Route {
    public_only: bool,
    connect_timeout: Duration,
    proxy: Option<ProxyUrl>,
    tls: tokio_rustls::TlsConnector,
    network: Option<Arc<dyn Network>>,
}

/// Where connections go instead of the host's network: a simulation's receivers, each
/// reached at a (loopback) address through a pipe in memory. The SSRF guard still
/// checks the address, and a proxy is not used.
pub trait Network: Send + Sync {
    fn connect(
        &self,
        addr: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<tokio::io::DuplexStream>> + Send>>;
}

/// Connecting (resolution, the proxy's tunnel and the TLS handshake) took longer than
/// `delivery.connect_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {}", humantime::format_duration(*.0))]
struct ConnectTimeout(Duration);

impl Connector {
    /// Connects only to public addresses when `public_only`, within `connect_timeout`,
    /// through `proxy` if there is one, with `tls` for `https`.
    pub fn new(
        public_only: bool,
        connect_timeout: Duration,
        proxy: Option<ProxyUrl>,
        tls: Arc<rustls::ClientConfig>,
    ) -> Self {
        Self(Arc::new(Route {
            public_only,
            connect_timeout,
            proxy,
            tls: tls.into(),
            network: None,
        }))
    }

    /// This connector, with its connections going over `network`.
    pub fn over(self, network: Arc<dyn Network>) -> Self {
        let route = &*self.0;
        Self(Arc::new(Route {
            public_only: route.public_only,
            connect_timeout: route.connect_timeout,
            proxy: None,
            tls: route.tls.clone(),
            network: Some(network),
        }))
    }
}

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let route = self.0.clone();
        Box::pin(async move {
            let limit = route.connect_timeout;
            match tokio::time::timeout(limit, route.connect(&uri)).await {
                Ok(stream) => stream.map(TokioIo::new),
                Err(_) => Err(ConnectTimeout(limit).into()),
            }
        })
    }
}

impl Route {
    async fn connect(&self, uri: &Uri) -> Result<Stream, BoxError> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => return Err(format!("unsupported scheme {other:?}").into()),
        };
        let host = uri.host().ok_or("the URL names no host")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs = self.resolve(host, port).await?;
        if let Some(network) = &self.network {
            let addr = addrs.first().ok_or("the host resolves to no address")?;
            return Ok(Stream::Memory(network.connect(*addr).await?));
        }
        let tcp = self.open(&addrs).await?;
        if !https {
            return Ok(Stream::Plain(tcp));
        }
        let name = ServerName::try_from(host.to_string())?;
        let tls = self.tls.connect(name, tcp).await?;
        Ok(Stream::Tls(Box::new(tls)))
    }

    /// The addresses `host` stands for, only public ones while the guard is on (`Blocked`
    /// when none is).
    async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, BoxError> {
        let found: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port)).await?.collect(),
        };
        if !self.public_only {
            return Ok(found);
        }
        let public: Vec<SocketAddr> = found
            .iter()
            .copied()
            .filter(|a| ssrf::is_public(a.ip()))
            .collect();
        if public.is_empty() {
            let ips: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
            return Err(Blocked::new(host, &ips).into());
        }
        Ok(public)
    }

    /// A connection to the first of `addrs` that accepts one, directly or through the
    /// proxy; the last failure if none does.
    async fn open(&self, addrs: &[SocketAddr]) -> Result<TcpStream, BoxError> {
        let mut failure: BoxError = "the host resolves to no address".into();
        for &addr in addrs {
            let opened = match &self.proxy {
                Some(proxy) => proxy.tunnel(addr).await,
                None => TcpStream::connect(addr).await.map_err(BoxError::from),
            };
            match opened {
                Ok(tcp) => {
                    tcp.set_nodelay(true)?;
                    return Ok(tcp);
                }
                Err(e) => failure = e,
            }
        }
        Err(failure)
    }
}
