//! Start-up checks: postback refuses to start, with a message naming the setting, when
//! Redis may evict keys or persists nothing, when Redis stays unreachable, or when the configuration is bad;
//! `postback config check` says the same without starting, and prints the effective
//! configuration with its secrets redacted; no store password (Redis's, the sentinels',
//! Postgres's), in any form a store's address takes, is printed by either, nor logged
//! once connected; the process runs on as many worker threads as
//! `server.worker_threads` says; and an instance that signs nothing says so.

use crate::support;

use support::{Postback, PostgresServer, RedisServer};

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

/// A Redis that keeps neither an append-only file nor snapshots loses everything when
/// it restarts: refused, the fix named, unless `store.allow_volatile`; what the store
/// keeps is shown by `/readyz`, `/stats` and `postback_store_durability`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_persists_nothing_is_refused_unless_allowed() {
    let redis = RedisServer::start();
    redis.query::<()>(redis::cmd("CONFIG").arg("SET").arg("save").arg(""));
    let url = redis.url();

    let err = Postback::refused_start(&[("POSTBACK_STORE_REDIS_URL", &url)]);
    assert!(
        err.contains("persists nothing")
            && err.contains("appendonly yes")
            && err.contains("store.allow_volatile"),
        "{err}"
    );

    let pb = Postback::start(&redis, &[("POSTBACK_STORE_ALLOW_VOLATILE", "true")]).await;
    let (_, ready) = pb.get("/readyz").await;
    assert_eq!(ready["durability"]["kind"], "none", "{ready}");
    let (_, stats) = pb.get("/stats").await;
    assert_eq!(stats["durability"]["kind"], "none", "{stats}");
    let shown = pb.metric("postback_store_durability{kind=\"none\"}").await;
    assert_eq!(shown, Some(1.0));
    assert!(
        pb.logs().contains("persists nothing"),
        "warned:\n{}",
        pb.logs()
    );

    redis.query::<()>(redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("yes"));
    let pb = Postback::start(&redis, &[]).await;
    let (_, ready) = pb.get("/readyz").await;
    assert_eq!(ready["durability"]["kind"], "aof", "{ready}");
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
        Some("http://egress:REDACTED@10.0.0.9:3128")
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
fn config_check_hides_the_passwords_of_redis_through_sentinel() {
    let (code, stdout, stderr) = config_check(
        &[],
        &[
            ("POSTBACK_SERVER_API_TOKENS", "t"),
            (
                "POSTBACK_STORE_REDIS_SENTINELS",
                "10.0.0.1:26379,10.0.0.2:26379",
            ),
            ("POSTBACK_STORE_REDIS_SENTINEL_PASSWORD", "sentinel-pass"),
            ("POSTBACK_STORE_REDIS_USERNAME", "postback"),
            ("POSTBACK_STORE_REDIS_PASSWORD", "data-pass"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("Redis through Sentinel"), "{stderr}");
    let effective: toml::Value = toml::from_str(&stdout).unwrap();
    let store = &effective["store"];
    assert_eq!(store["redis_sentinels"].as_array().unwrap().len(), 2);
    assert_eq!(store["redis_master_name"].as_str(), Some("mymaster"));
    assert_eq!(store["redis_username"].as_str(), Some("postback"));
    assert_eq!(store["redis_password"].as_str(), Some("REDACTED"));
    assert_eq!(store["redis_sentinel_password"].as_str(), Some("REDACTED"));
    for secret in ["sentinel-pass", "data-pass"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} shown:\n{stdout}{stderr}"
        );
    }
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

    // A number where a duration goes reads the same from a variable as from the file.
    let (code, _, stderr) = config_check(
        &[],
        &[
            ("POSTBACK_SERVER_API_TOKENS", "t"),
            ("POSTBACK_DELIVERY_TIMEOUT", "10"),
        ],
    );
    assert_eq!(code, 1);
    let said = "delivery.timeout (from POSTBACK_DELIVERY_TIMEOUT): `10` is not a duration: \
                a number and a unit, like 500ms";
    assert!(stderr.contains(said), "{stderr}");

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

/// The setting a `POSTBACK_*` variable sets: `store.redis_url` of
/// `POSTBACK_STORE_REDIS_URL`.
fn setting(variable: &str) -> String {
    let name = variable.trim_start_matches("POSTBACK_").to_lowercase();
    name.replacen('_', ".", 1)
}

/// Asserts that `said` holds no part of a password: each password of these tests has
/// `pass-` in it, and its form's own word beside.
fn no_password(said: &str) {
    assert!(!said.contains("pass-"), "a password shown:\n{said}");
}

#[test]
fn config_check_shows_no_store_password_in_any_form() {
    let token = ("POSTBACK_SERVER_API_TOKENS", "t");
    for (key, given, shown) in [
        (
            "postgres_url",
            "host=db.internal port=5432 user=pb password='kv pass-1' dbname=pb",
            "host=db.internal port=5432 user=pb password=REDACTED dbname=pb",
        ),
        (
            "postgres_url",
            "postgres://pb:url-pass-2@db.internal/pb?sslmode=disable",
            "postgres://pb:REDACTED@db.internal/pb?sslmode=disable",
        ),
        (
            "postgres_url",
            "postgresql://pb@db.internal/pb?password=query-pass-3",
            "postgresql://pb@db.internal/pb?password=REDACTED",
        ),
        (
            "redis_url",
            "redis://app:redis-pass-4@cache.internal:6380/0",
            "redis://app:REDACTED@cache.internal:6380/0",
        ),
        (
            "redis_url",
            "rediss://app:tls-pass-8@cache.internal:6380",
            "rediss://app:REDACTED@cache.internal:6380",
        ),
        (
            "postgres_url",
            "postgres://pb:tls-pass-9@db.internal/pb?sslmode=verify-full&sslrootcert=system",
            "postgres://pb:REDACTED@db.internal/pb?sslmode=verify-full&sslrootcert=system",
        ),
    ] {
        let variable = format!("POSTBACK_STORE_{}", key.to_uppercase());
        let (code, stdout, stderr) = config_check(&[], &[token, (&variable, given)]);
        assert_eq!(code, 0, "{given}: {stderr}");
        let effective: toml::Value = toml::from_str(&stdout).unwrap();
        assert_eq!(effective["store"][key].as_str(), Some(shown));
        no_password(&format!("{stdout}{stderr}"));
    }
    let seeds = (
        "POSTBACK_STORE_CLUSTER_URLS",
        "redis://:seed-pass-5@a:7000,redis://u:seed-pass-5@b:7001",
    );
    let (code, stdout, stderr) = config_check(&[], &[token, seeds]);
    assert_eq!(code, 0, "{stderr}");
    let effective: toml::Value = toml::from_str(&stdout).unwrap();
    assert_eq!(
        effective["store"]["cluster_urls"][1].as_str(),
        Some("redis://u:REDACTED@b:7001")
    );
    no_password(&format!("{stdout}{stderr}"));

    for (variable, bad) in [
        (
            "POSTBACK_STORE_POSTGRES_URL",
            "host=db passfile=/run/pg-pass-6",
        ),
        (
            "POSTBACK_STORE_POSTGRES_URL",
            "host=db password='open pass-7",
        ),
        (
            "POSTBACK_STORE_REDIS_URL",
            "redis://:redis-pass-8@cache:port",
        ),
        (
            "POSTBACK_STORE_REDIS_URL",
            "rediss://app:tls-pass-8@cache:6380/#insecure",
        ),
        (
            "POSTBACK_STORE_CLUSTER_URLS",
            "redis://a:7000,redis://:seed-pass-9@b:x",
        ),
        (
            "POSTBACK_DELIVERY_PROXY",
            "http://egress:proxy-pass-10@[::1",
        ),
    ] {
        let (code, stdout, stderr) = config_check(&[], &[token, (variable, bad)]);
        assert_eq!(code, 1, "{bad}");
        let key = setting(variable);
        assert!(stderr.contains(&key), "names the key: {stderr}");
        no_password(&format!("{stdout}{stderr}"));
    }
}

#[test]
fn a_store_that_cannot_be_reached_or_read_is_refused_without_its_password() {
    let port = support::free_port();
    for (variable, given, why) in [
        (
            "POSTBACK_STORE_POSTGRES_URL",
            format!("host=127.0.0.1 port={port} user=pb password='kv pass-1' dbname=pb"),
            "Postgres is unreachable",
        ),
        (
            "POSTBACK_STORE_POSTGRES_URL",
            format!("postgres://pb:url-pass-2@127.0.0.1:{port}/pb?password=query-pass-3"),
            "Postgres is unreachable",
        ),
        (
            "POSTBACK_STORE_REDIS_URL",
            format!("redis://app:redis-pass-4@127.0.0.1:{port}"),
            "is unreachable",
        ),
        (
            "POSTBACK_STORE_REDIS_URL",
            "redis://:redis-pass-5@127.0.0.1:port".to_string(),
            "not a Redis URL",
        ),
        (
            "POSTBACK_STORE_POSTGRES_URL",
            "host=127.0.0.1 password='open pass-6".to_string(),
            "not a Postgres",
        ),
    ] {
        let said = Postback::refused_start(&[(variable, &given)]);
        let key = setting(variable);
        assert!(said.contains(&key) && said.contains(why), "{given}: {said}");
        no_password(&said);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_store_is_logged_without_its_password() {
    let pg = PostgresServer::start();
    let kv = format!(
        "host=127.0.0.1 port={} user=postgres password='kv pass-1' dbname=postgres",
        pg.port
    );
    let pb = Postback::start_on_postgres(&pg, &[("POSTBACK_STORE_POSTGRES_URL", &kv)]).await;
    let logs = pb.logs();
    assert!(
        logs.contains("store connected") && logs.contains("password=REDACTED"),
        "{logs}"
    );
    no_password(&logs);

    let redis = RedisServer::start();
    let url = format!("redis://:redis-pass-2@127.0.0.1:{}", redis.port);
    redis.query::<()>(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("redis-pass-2"),
    );
    let pb = Postback::start(&redis, &[("POSTBACK_STORE_REDIS_URL", &url)]).await;
    let logs = pb.logs();
    assert!(
        logs.contains("store connected") && logs.contains(":REDACTED@"),
        "{logs}"
    );
    no_password(&logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_signs_nothing_says_so_as_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::config_file(&dir, "[tenants.shop-a]\n");
    let mut pb = Postback::start_embedded(dir.path(), &[("POSTBACK_CONFIG", &config)]).await;
    let logs = pb.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("deliveries are not signed"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(line.contains("tenants=default,shop-a"), "{line}");
    pb.terminate();
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let signs = [
        ("POSTBACK_CONFIG", config.as_str()),
        ("POSTBACK_SIGNING_SECRETS", secret),
    ];
    let pb = Postback::start_embedded(dir.path(), &signs).await;
    assert!(!pb.logs().contains("not signed"), "{}", pb.logs());
}

/// What `scripts/run.sh` with `args` and `env` runs: the arguments it gives `cargo` and
/// the trial settings in its environment, as a stand-in `cargo` on its `PATH` reports
/// them.
fn run_sh(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cargo = dir.path().join("cargo");
    let report = "#!/bin/sh\necho \"$@\"\nenv | grep -E '^POSTBACK_' | sort\n";
    std::fs::write(&cargo, report).unwrap();
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/run.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .env_clear()
        .env("PATH", path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn run_sh_tries_the_shipped_config_or_runs_one_of_your_own_as_it_is() {
    let trial = run_sh(&[], &[]);
    assert!(
        trial.starts_with("run --release --bin postback -- serve --config config/postback.toml\n"),
        "{trial}"
    );
    for set in [
        "POSTBACK_SERVER_API_TOKENS=dev-token",
        "POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS=true",
        "POSTBACK_SERVER_PORTAL_SECRET=",
    ] {
        assert!(trial.contains(set), "{set}: {trial}");
    }
    let token = run_sh(&[], &[("POSTBACK_SERVER_API_TOKENS", "mine")]);
    assert!(
        token.contains("POSTBACK_SERVER_API_TOKENS=mine\n"),
        "{token}"
    );

    for args in [&["--config", "my.toml"][..], &["--config=my.toml"]] {
        let own = run_sh(args, &[]);
        let first = own.lines().next().unwrap();
        assert_eq!(
            first,
            format!("run --release --bin postback -- serve {}", args.join(" "))
        );
        assert_eq!(own.lines().count(), 1, "nothing set for it: {own}");
    }
    let own = run_sh(&[], &[("POSTBACK_CONFIG", "my.toml")]);
    assert!(
        own.starts_with("run --release --bin postback -- serve\n"),
        "{own}"
    );
}
