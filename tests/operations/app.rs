//! An instance built and run in process (`App::build`, `App::run`): it answers, is ready
//! while its pipeline runs, delivers, and stops when the future it was given completes.

use crate::support;

use std::time::Duration;

use postback::app::App;
use postback::config::Config;
use support::redis_server::RedisServer;
use support::Receiver;

#[tokio::test]
async fn an_instance_run_in_process_delivers_and_stops_when_told() {
    postback::install_crypto_provider();
    let redis = RedisServer::start();
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\napi_tokens = [\"in-process\"]\n\
             [store]\nredis_url = \"{}\"\n[delivery]\nallow_private_networks = true\n",
            redis.url()
        ),
    )
    .unwrap();
    let app = App::build(Config::load(Some(&path), false).unwrap())
        .await
        .unwrap();
    let api = format!("http://{}", app.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(app.run(async {
        let _ = stopped.await;
    }));

    let http = reqwest::Client::new();
    let ready = http.get(format!("{api}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "ready while its pipeline runs");
    let registered = http
        .post(format!("{api}/notify"))
        .bearer_auth("in-process")
        .json(&serde_json::json!({"url": receiver.url("/hook"), "body": {"order": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 202);
    assert!(
        receiver.wait_for(1, Duration::from_secs(10)).await,
        "delivered"
    );

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("stops when told")
        .unwrap()
        .unwrap();
    assert!(
        http.get(format!("{api}/healthz")).send().await.is_err(),
        "no longer listening"
    );
}
