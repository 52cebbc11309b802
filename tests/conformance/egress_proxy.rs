//! Deliveries through an HTTP `CONNECT` proxy (`delivery.proxy`): postback resolves and
//! checks the destination itself and asks the proxy for the checked address, keeping the
//! host name for TLS; an internal destination is refused before the proxy is asked; a
//! proxy that refuses is a failed attempt naming the proxy, retried like any other. On
//! every backend (`scripts/test.sh`).

use crate::support;

use serde_json::Value;
use support::connect_proxy::ConnectProxy;
use support::tls_receiver::{Pki, TlsReceiver};
use support::{Backend, Postback, Receiver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_go_through_the_proxy_to_the_address_postback_resolved() {
    let proxy = ConnectProxy::start().await;
    let receiver = Receiver::start().await;
    let backend = Backend::start();
    let pb = backend
        .postback(&[("POSTBACK_DELIVERY_PROXY", &proxy.url())])
        .await;

    let url = format!("http://localhost:{}/paid", receiver.port);
    let done = pb.attempted_once("default", &url).await;

    assert_eq!(done["state"], "delivered", "{done}");
    assert_eq!(receiver.count(), 1);
    let targets = proxy.targets();
    let checked = format!("127.0.0.1:{}", receiver.port);
    assert_eq!(targets.last(), Some(&checked), "{targets:?}");
    assert!(
        targets.iter().all(|t| !t.contains("localhost")),
        "the proxy is asked for addresses, never for the name: {targets:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_credentials_go_to_the_proxy_and_are_shown_redacted() {
    let proxy = ConnectProxy::start().await;
    let receiver = Receiver::start().await;
    let backend = Backend::start();
    let with_credentials = format!("http://egress:s%40cret@127.0.0.1:{}", proxy.port);
    let pb = backend
        .postback(&[("POSTBACK_DELIVERY_PROXY", &with_credentials)])
        .await;

    let done = pb.attempted_once("default", &receiver.url("/paid")).await;

    assert_eq!(done["state"], "delivered", "{done}");
    // base64("egress:s@cret")
    let basic = "Basic ZWdyZXNzOnNAY3JldA==".to_string();
    assert_eq!(proxy.authorizations(), vec![Some(basic)]);
    assert_eq!(receiver.requests()[0].header("proxy-authorization"), None);
    assert!(
        !pb.logs().contains("s%40cret"),
        "the password is not logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_through_the_proxy_verifies_the_callbacks_own_name() {
    let pki = Pki::new();
    let receiver = TlsReceiver::start(&pki).await;
    let proxy = ConnectProxy::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = support::config_file(&dir, &pki.tenant_config("shop-a"));
    let backend = Backend::start();
    let pb = backend
        .postback(&[
            ("POSTBACK_CONFIG", &config),
            ("POSTBACK_DELIVERY_PROXY", &proxy.url()),
        ])
        .await;

    let done = pb.attempted_once("shop-a", &receiver.url("/paid")).await;

    assert_eq!(done["state"], "delivered", "{done}");
    assert_eq!(receiver.answered(), 1);
    let checked = format!("127.0.0.1:{}", receiver.addr.port());
    assert_eq!(proxy.targets().last(), Some(&checked));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_destination_is_refused_before_the_proxy_is_asked() {
    let proxy = ConnectProxy::start().await;
    let receiver = Receiver::start().await;
    let backend = Backend::start();
    let pb = backend
        .postback(&[
            ("POSTBACK_DELIVERY_PROXY", &proxy.url()),
            ("POSTBACK_DELIVERY_ALLOW_PRIVATE_NETWORKS", "false"),
        ])
        .await;

    let url = format!("http://localhost:{}/paid", receiver.port);
    let dead = pb.attempted_once("default", &url).await;

    assert_eq!(dead["state"], "dead", "{dead}");
    let error = dead["history"][0]["error"].as_str().unwrap();
    assert!(error.starts_with("blocked_destination"), "{error}");
    assert_eq!(
        proxy.targets(),
        Vec::<String>::new(),
        "the proxy was not asked"
    );
    assert_eq!(receiver.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_refuses_fails_the_attempt_naming_the_proxy() {
    let proxy = ConnectProxy::refusing().await;
    let receiver = Receiver::start().await;
    let backend = Backend::start();
    let pb = backend
        .postback(&[("POSTBACK_DELIVERY_PROXY", &proxy.url())])
        .await;

    let url = format!("http://127.0.0.1:{}/paid", receiver.port);
    let dead = pb.attempted_once("default", &url).await;

    assert_eq!(dead["state"], "dead", "{dead}");
    let error = dead["history"][0]["error"].as_str().unwrap();
    assert!(error.contains("proxy") && error.contains("403"), "{error}");
    assert_eq!(
        dead["history"][0]["status"],
        Value::Null,
        "no answer from the receiver"
    );
    assert_eq!(receiver.count(), 0);
}

#[test]
fn a_proxy_that_is_not_an_http_url_is_refused_at_start_naming_the_key() {
    for bad in ["socks5://127.0.0.1:1080", "not a url", "http://"] {
        let said = Postback::refused_start(&[("POSTBACK_DELIVERY_PROXY", bad)]);
        assert!(said.contains("delivery.proxy"), "{bad}: {said}");
    }
}
