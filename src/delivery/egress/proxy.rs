//! `ProxyUrl`: the HTTP `CONNECT` proxy of `delivery.proxy` (`http://[user:password@]
//! host:port`), and the tunnel it opens to one checked address. The proxy itself is the
//! operator's choice and is not held to the SSRF guard; what it is asked to reach is.

use std::net::SocketAddr;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::BoxError;

/// The longest answer head a proxy may send to `CONNECT`.
const MAX_HEAD: usize = 8 * 1024;

#[derive(Clone)]
pub struct ProxyUrl {
    /// `host:port`, as connected to.
    authority: String,
    /// `Basic …`, from the URL's user and password.
    authorization: Option<String>,
}

/// The credentials stay out of logs and `Debug` output.
impl std::fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyUrl")
            .field("authority", &self.authority)
            .field("authorization", &self.authorization.is_some())
            .finish()
    }
}

impl std::str::FromStr for ProxyUrl {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        // Not shown: what does not parse cannot be told apart from its password.
        let url = url::Url::parse(raw).map_err(|e| format!("not a URL ({e})"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "`{}:` proxies are not supported: give an http:// proxy that takes CONNECT",
                url.scheme()
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            _ => return Err("it names no host".into()),
        };
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err("give only the scheme, host and port (no path or query)".into());
        }
        let port = url.port().unwrap_or(80);
        Ok(Self {
            authority: format!("{host}:{port}"),
            authorization: basic_credentials(&url),
        })
    }
}

impl ProxyUrl {
    /// A connection through the proxy to `to`, once the proxy said `200` to `CONNECT`.
    pub(super) async fn tunnel(&self, to: SocketAddr) -> Result<TcpStream, BoxError> {
        let mut tcp = TcpStream::connect(&self.authority)
            .await
            .map_err(|e| format!("proxy {}: {e}", self.authority))?;
        let mut ask = format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n");
        if let Some(credentials) = &self.authorization {
            ask.push_str(&format!("Proxy-Authorization: {credentials}\r\n"));
        }
        ask.push_str("\r\n");
        tcp.write_all(ask.as_bytes()).await?;
        let status = answer_status(&mut tcp)
            .await
            .map_err(|e| format!("proxy {}: {e}", self.authority))?;
        if !is_success(&status) {
            let why = format!("proxy {} refused CONNECT {to}: {status}", self.authority);
            return Err(why.into());
        }
        Ok(tcp)
    }
}

/// `Basic base64(user:password)` when the URL carries a user.
fn basic_credentials(url: &url::Url) -> Option<String> {
    if url.username().is_empty() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let pair = format!(
        "{}:{}",
        decode(url.username()),
        decode(url.password().unwrap_or(""))
    );
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
}

/// The status line of the proxy's answer, its head read to the blank line. Read a byte
/// at a time: whatever follows the head belongs to the tunnel.
async fn answer_status(tcp: &mut TcpStream) -> Result<String, String> {
    let mut head = Vec::with_capacity(128);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err(format!(
                "its answer to CONNECT is longer than {MAX_HEAD} bytes"
            ));
        }
        match tcp.read(&mut byte).await {
            Ok(0) => return Err("closed the connection before answering CONNECT".into()),
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(e.to_string()),
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    Ok(String::from_utf8_lossy(line).into_owned())
}

/// Whether a status line says `2xx`.
fn is_success(status_line: &str) -> bool {
    let mut words = status_line.split_whitespace();
    let version = words.next().unwrap_or_default();
    let code = words.next().unwrap_or_default();
    version.starts_with("HTTP/1.") && code.len() == 3 && code.starts_with('2')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_gives_its_address_and_credentials() {
        let p: ProxyUrl = "http://egress:s%40cret@proxy.internal:3128"
            .parse()
            .unwrap();
        assert_eq!(p.authority, "proxy.internal:3128");
        let expected = base64::engine::general_purpose::STANDARD.encode("egress:s@cret");
        assert_eq!(p.authorization, Some(format!("Basic {expected}")));
        assert!(!format!("{p:?}").contains("cret"), "{p:?}");
        let p: ProxyUrl = "http://[::1]".parse().unwrap();
        assert_eq!((p.authority.as_str(), p.authorization), ("[::1]:80", None));
    }

    #[test]
    fn what_is_not_an_http_proxy_is_refused() {
        for bad in [
            "socks5://p:1080",
            "https://p:443",
            "http://p:3128/path",
            "p:3128",
            "http://",
        ] {
            assert!(bad.parse::<ProxyUrl>().is_err(), "{bad}");
        }
        let e = "http://egress:pw-1@p:port".parse::<ProxyUrl>().unwrap_err();
        assert!(!e.contains("pw-1"), "the password is not shown: {e}");
    }

    #[test]
    fn only_a_2xx_answer_opens_the_tunnel() {
        assert!(is_success("HTTP/1.1 200 Connection established"));
        assert!(is_success("HTTP/1.0 200"));
        assert!(!is_success("HTTP/1.1 407 Proxy Authentication Required"));
        assert!(!is_success("HTTP/1.1 2000"));
        assert!(!is_success("SSH-2.0"));
    }
}
