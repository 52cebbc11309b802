//! A small HTTP `CONNECT` proxy, as corporate egress proxies are: it reads one `CONNECT
//! host:port` request a connection, records the target it was asked for (and the
//! `Proxy-Authorization` it came with), and then either opens a tunnel to it (`200`) or
//! refuses (`403`), as it was started to.

use std::sync::{Arc, Mutex};

use tokio::io::{copy_bidirectional, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct ConnectProxy {
    pub port: u16,
    targets: Arc<Mutex<Vec<Asked>>>,
    task: tokio::task::JoinHandle<()>,
}

/// One `CONNECT`: its target and its `Proxy-Authorization`, if any.
#[derive(Debug, Clone)]
struct Asked {
    target: String,
    authorization: Option<String>,
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConnectProxy {
    /// A proxy that tunnels every `CONNECT`.
    pub async fn start() -> Self {
        Self::listen(true).await
    }

    /// A proxy that refuses every `CONNECT` with `403`.
    pub async fn refusing() -> Self {
        Self::listen(false).await
    }

    /// `http://127.0.0.1:<port>`, for `POSTBACK_DELIVERY_PROXY`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `host:port` of every `CONNECT` asked for so far, in order.
    pub fn targets(&self) -> Vec<String> {
        let asked = self.targets.lock().unwrap();
        asked.iter().map(|a| a.target.clone()).collect()
    }

    /// The `Proxy-Authorization` of every `CONNECT` so far (`None` where it had none).
    pub fn authorizations(&self) -> Vec<Option<String>> {
        let asked = self.targets.lock().unwrap();
        asked.iter().map(|a| a.authorization.clone()).collect()
    }

    async fn listen(tunnels: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let seen = targets.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, seen.clone(), tunnels));
            }
        });
        Self {
            port,
            targets,
            task,
        }
    }
}

/// Reads the request head, records its target and answers it.
async fn serve(mut client: TcpStream, targets: Arc<Mutex<Vec<Asked>>>, tunnels: bool) {
    let Some(head) = read_head(&mut client).await else {
        return;
    };
    let mut words = head.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            .await;
        return;
    };
    let authorization = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_string())
    });
    targets.lock().unwrap().push(Asked {
        target: target.to_string(),
        authorization,
    });
    if !tunnels {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
        return;
    }
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_ok()
    {
        let _ = copy_bidirectional(&mut client, &mut upstream).await;
    }
}

/// The request head, up to its blank line.
async fn read_head(client: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || client.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}
