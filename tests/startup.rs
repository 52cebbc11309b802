//! Start-up checks: postback refuses to start, with a message naming the setting, when
//! Redis may evict keys, when Redis stays unreachable, or when the configuration is bad.

mod support;

use support::{Postback, RedisServer};

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

    let err = Postback::refused_start(&[("POSTBACK_STORE_REDIS_URL", &url)]);
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
    let err = Postback::refused_start(&[("POSTBACK_STORE_REDIS_URL", &url)]);
    assert!(
        err.contains("store.redis_url") && err.contains("unreachable"),
        "{err}"
    );
}

#[test]
fn a_bad_setting_is_refused_by_name() {
    let err = Postback::refused_start(&[("POSTBACK_DELIVERY_CONCURRENCY", "lots")]);
    assert!(err.to_lowercase().contains("delivery.concurrency"), "{err}");
    let err = Postback::refused_start(&[("POSTBACK_DELIVERY_RATE_LIMIT", "fast")]);
    assert!(err.contains("delivery.rate_limit"), "{err}");
}
