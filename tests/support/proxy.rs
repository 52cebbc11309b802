//! A TCP address that can be moved from one Redis to another, as a failover moves the
//! address clients know (a virtual IP, a Sentinel-managed name): connections accepted
//! on `port` are forwarded to the current target, and `point_to` cuts every open one, so
//! that clients reconnect to the new target.

use std::sync::Arc;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    target: Arc<watch::Sender<u16>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port, forwarding to `target`.
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, _) = watch::channel(target);
        let target = Arc::new(tx);
        let sender = target.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, sender.subscribe()));
            }
        });
        Self {
            port,
            target,
            accepting,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Forwards new connections to `target`, and cuts those open.
    pub fn point_to(&self, target: u16) {
        self.target.send_replace(target);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Forwards `client` to the target until either side closes or the target moves.
async fn forward(mut client: TcpStream, mut target: watch::Receiver<u16>) {
    let port = *target.borrow_and_update();
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    tokio::select! {
        _ = copy_bidirectional(&mut client, &mut server) => {}
        _ = target.changed() => {}
    }
}
