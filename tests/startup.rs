//! Start-up checks: postback refuses to start, with a message naming the setting, when
//! Redis may evict keys, when Redis stays unreachable, or when the configuration is bad.

mod support;

use std::process::{Command, Output};

use support::{Postback, RedisServer};

fn serve(env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_postback"));
    cmd.arg("serve")
        .env_clear()
        .env("POSTBACK_SERVER_API_TOKENS", "t")
        .env(
            "POSTBACK_SERVER_LISTEN",
            format!("127.0.0.1:{}", support::free_port()),
        )
        .env("POSTBACK_STORE_CONNECT_WAIT", "1s");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "exits 1");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_refused_unless_allowed() {
    let redis = RedisServer::start();
    redis.query::<()>(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("allkeys-lru"),
    );
    let url = redis.url();

    let err = refused(&serve(&[("POSTBACK_STORE_REDIS_URL", &url)]));
    assert!(
        err.contains("maxmemory-policy")
            && err.contains("allkeys-lru")
            && err.contains("store.allow_eviction"),
        "{err}"
    );

    let pb = Postback::start(&redis, &[("POSTBACK_STORE_ALLOW_EVICTION", "true")]).await;
    assert_eq!(pb.status_without_token("/readyz").await, 200);
    assert!(pb.logs().contains("may evict"), "warned:\n{}", pb.logs());
}

#[test]
fn an_unreachable_redis_is_refused_after_the_wait() {
    let url = format!("redis://127.0.0.1:{}", support::free_port());
    let err = refused(&serve(&[("POSTBACK_STORE_REDIS_URL", &url)]));
    assert!(
        err.contains("store.redis_url") && err.contains("unreachable"),
        "{err}"
    );
}

#[test]
fn a_bad_setting_is_refused_by_name() {
    let err = refused(&serve(&[("POSTBACK_DELIVERY_CONCURRENCY", "lots")]));
    assert!(err.to_lowercase().contains("delivery.concurrency"), "{err}");
    let err = refused(&serve(&[("POSTBACK_DELIVERY_RATE_LIMIT", "fast")]));
    assert!(err.contains("delivery.rate_limit"), "{err}");
}
