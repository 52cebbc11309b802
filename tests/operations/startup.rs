//! Start-up checks: postback refuses to start, with a message naming the setting, when
//! Redis may evict keys, when Redis stays unreachable, or when the configuration is bad;
//! `postback config check` says the same without starting, and prints the effective
//! configuration with its secrets redacted; and the process runs on as many worker
//! threads as `server.worker_threads` says.

use crate::support;

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
    assert!(
        err.contains("delivery.concurrency (from POSTBACK_DELIVERY_CONCURRENCY)"),
        "named by the variable that set it: {err}"
    );
    let err = Postback::refused_start(&[("POSTBACK_DELIVERY_RATE_LIMIT", "fast")]);
    assert!(err.contains("delivery.rate_limit"), "{err}");
    let err = Postback::refused_start(&[("POSTBACK_SERVER_WORKER_THREADS", "1000")]);
    assert!(
        err.contains("server.worker_threads") && err.contains("from 0 (one per CPU core) to 256"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_worker_thread_it_serves_and_delivers() {
    let (_backend, receiver, pb) =
        support::start_any(&[("POSTBACK_SERVER_WORKER_THREADS", "1")]).await;
    let id = pb
        .register(serde_json::json!({"url": receiver.url("/one"), "body": {}}))
        .await;
    pb.wait_state(&id, "delivered", support::WAIT).await;
    assert_eq!(receiver.requests_for(&id).len(), 1);
}

/// `postback config check` with `args`, nothing in its environment but `PATH` and `env`:
/// its exit code, stdout and stderr.
fn config_check(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_postback"));
    cmd.args(["config", "check"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn config_check_prints_the_effective_configuration_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("postback.toml");
    std::fs::write(
        &file,
        r#"
[delivery]
concurrency = 64

[signing]
secrets = ["whsec_c2VjcmV0LXNpZ25pbmcta2V5LW9mLXRoZS1pbnN0YW5jZQ=="]

[tenants.shop-a]
secrets = ["whsec_dGVuYW50LWEtc2lnbmluZy1rZXktdGhhdC1pcy1zZWNyZXQ="]
allowed_hosts = ["hooks.shop-a.example"]

[tokens.checkout]
sha256 = "9f2c5d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e"
tenant = "shop-a"
roles = ["notify"]
"#,
    )
    .unwrap();
    let (code, stdout, stderr) = config_check(
        &["--config", file.to_str().unwrap()],
        &[
            (
                "POSTBACK_SERVER_API_TOKENS",
                "tok-very-secret-1,tok-very-secret-2",
            ),
            ("POSTBACK_SERVER_METRICS_TOKEN", "metrics-secret"),
            (
                "POSTBACK_STORE_REDIS_URL",
                "redis://:redis-pass@10.0.0.5:6379/0",
            ),
            ("POSTBACK_DELIVERY_CONCURRENCY", "128"),
            (
                "POSTBACK_DELIVERY_PROXY",
                "http://egress:proxy-pass@10.0.0.9:3128",
            ),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let effective: toml::Value =
        toml::from_str(&stdout).unwrap_or_else(|e| panic!("{e}\n{stdout}"));
    assert_eq!(
        effective["delivery"]["concurrency"].as_integer(),
        Some(128),
        "the environment wins"
    );
    assert_eq!(
        effective["delivery"]["timeout"].as_str(),
        Some("10s"),
        "defaults are shown"
    );
    assert_eq!(
        effective["retention"]["audit_max_age"].as_str(),
        Some("90d"),
        "in days, not in months of an average length"
    );
    assert_eq!(
        effective["tenants"]["shop-a"]["allowed_hosts"][0].as_str(),
        Some("hooks.shop-a.example")
    );
    assert_eq!(
        effective["store"]["redis_url"].as_str(),
        Some("redis://:REDACTED@10.0.0.5:6379/0")
    );
    assert_eq!(
        effective["delivery"]["proxy"].as_str(),
        Some("http://egress:REDACTED@10.0.0.9:3128/")
    );
    for secret in [
        "tok-very-secret",
        "metrics-secret",
        "redis-pass",
        "proxy-pass",
        "c2VjcmV0LXNpZ25pbmcta2V5",
        "dGVuYW50LWEtc2lnbmluZy1rZXk",
        "9f2c5d8e7b6a5f4e",
    ] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} shown:\n{stdout}{stderr}"
        );
    }
    assert_eq!(
        effective["server"]["api_tokens"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        effective["server"]["metrics_token"].as_str(),
        Some("REDACTED")
    );
    assert_eq!(
        effective["tokens"]["checkout"]["tenant"].as_str(),
        Some("shop-a"),
        "a token's name, tenant and roles show; its hash does not"
    );
    assert_eq!(
        effective["tokens"]["checkout"]["sha256"].as_str(),
        Some("REDACTED")
    );
    assert_eq!(
        effective["signing"]["secrets"][0].as_str(),
        Some("REDACTED")
    );
    assert!(stderr.contains("valid"), "{stderr}");
}

#[test]
fn config_check_refuses_a_bad_setting_by_name_and_exits_1() {
    let (code, stdout, stderr) = config_check(
        &[],
        &[
            ("POSTBACK_SERVER_API_TOKENS", "t"),
            ("POSTBACK_DELIVERY_CLAIM_BATCH", "0"),
        ],
    );
    assert_eq!(code, 1);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("delivery.claim_batch"), "{stderr}");

    let (code, _, stderr) = config_check(&[], &[]);
    assert_eq!(code, 1, "no token is refused as serve refuses it");
    assert!(stderr.contains("server.api_tokens"), "{stderr}");
    let (code, _, stderr) = config_check(&["--insecure-no-auth"], &[]);
    assert_eq!(code, 0, "{stderr}");

    let (code, _, stderr) = config_check(
        &["--config", "/nonexistent/postback.toml"],
        &[("POSTBACK_SERVER_API_TOKENS", "t")],
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("/nonexistent/postback.toml"), "{stderr}");
}

/// The shipped file, as the README's Configuration section gives it: refused without a
/// token with a message that says how to give one, valid with the one it suggests.
#[test]
fn the_shipped_config_starts_as_the_readme_says() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/postback.toml");
    let (code, _, stderr) = config_check(&["--config", shipped], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "POSTBACK_SERVER_API_TOKENS=dev-token postback serve --config config/postback.toml"
        ),
        "says how to start: {stderr}"
    );
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(
            "POSTBACK_SERVER_API_TOKENS=dev-token postback serve --config config/postback.toml"
        ),
        "the README gives the same command"
    );
    let token = [("POSTBACK_SERVER_API_TOKENS", "dev-token")];
    let (code, _, stderr) = config_check(&["--config", shipped], &token);
    assert_eq!(code, 0, "{stderr}");
}
