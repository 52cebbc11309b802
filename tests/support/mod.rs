//! Test support: a real `redis-server` on a free port in a temporary directory, a real
//! HTTP receiver that records what it gets, and `postback serve` as a child process.

// Each test binary uses a different part of this module.
#![allow(dead_code, unused_imports)]

pub mod load;
pub mod postback;
pub mod receiver;
pub mod redis_cluster;
pub mod redis_server;

pub use postback::Postback;
pub use receiver::Receiver;
pub use redis_cluster::RedisCluster;
pub use redis_server::RedisServer;

use std::net::TcpListener;
use std::time::Duration;

/// A fresh Redis, a receiver, and one postback instance on them with `env`.
pub async fn start(env: &[(&str, &str)]) -> (RedisServer, Receiver, Postback) {
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let pb = Postback::start(&redis, env).await;
    (redis, receiver, pb)
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 20 ms until it is true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
