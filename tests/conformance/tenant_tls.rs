//! A tenant's transport rules: its client certificate, presented to receivers that
//! require mutual TLS (with its own roots to verify them), and `require_https`, which
//! refuses plain `http` callbacks at registration and at replay, and sends none; HTTP/2
//! where the receiver offers it. On every backend (`scripts/test.sh`).

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::tls_receiver::{Pki, TlsReceiver};
use support::{Backend, Postback, Receiver};

use support::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_client_certificate_is_presented_to_a_receiver_that_requires_one() {
    let pki = Pki::new();
    let receiver = TlsReceiver::start(&pki).await;
    let config = format!(
        "{}\n[tenants.shop-b]\nca_certs = \"{}\"\n",
        pki.tenant_config("shop-a"),
        pki.ca.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start();
    let pb = backend
        .postback(&[("POSTBACK_CONFIG", &support::config_file(&dir, &config))])
        .await;

    let a = pb.attempted_once("shop-a", &receiver.url("/paid")).await;
    assert_eq!(a["state"], "delivered", "{a}");
    assert_eq!(receiver.answered(), 1);

    // Another tenant trusts the receiver but has no certificate to present.
    let b = pb.attempted_once("shop-b", &receiver.url("/paid")).await;
    assert_eq!(b["state"], "dead", "{b}");
    assert!(
        receiver.refused() >= 1,
        "the receiver refused the handshake"
    );
    // The default tenant has neither: the receiver's authority is not one it trusts.
    let plain = pb.attempted_once("default", &receiver.url("/paid")).await;
    let error = plain["history"][0]["error"].as_str().unwrap_or_default();
    assert_eq!(plain["state"], "dead", "{plain}");
    assert!(
        error.contains("certificate") || error.contains("issuer"),
        "{error}"
    );
    assert_eq!(receiver.answered(), 1, "only shop-a's delivery got through");
}

#[tokio::test]
async fn a_tenants_unreadable_certificate_is_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[tenants.shop-a]\nclient_cert = \"/nonexistent/a.crt\"\nclient_key = \"/nonexistent/a.key\"\n";
    let said = Postback::refused_start(&[("POSTBACK_CONFIG", &support::config_file(&dir, config))]);
    assert!(
        said.contains("tenants.shop-a.client_cert: cannot read /nonexistent/a.crt"),
        "{said}"
    );
    let config = format!(
        "[tenants.shop-a]\nclient_cert = \"{}\"\n",
        dir.path().join("postback.toml").display()
    );
    let said =
        Postback::refused_start(&[("POSTBACK_CONFIG", &support::config_file(&dir, &config))]);
    assert!(
        said.contains("tenants.shop-a.client_key: required with client_cert"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_https_refuses_plain_http_at_registration_at_replay_and_at_send() {
    let backend = Backend::start();
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Before shop-a requires https: a dead letter with a plain http callback.
    let before = support::config_file(&dir, "[tenants.shop-a]\n");
    let pb = backend.postback(&[("POSTBACK_CONFIG", &before)]).await;
    let dead = pb
        .attempted_once("shop-a", &receiver.url("/down?fail=9"))
        .await;
    assert_eq!(dead["state"], "dead");
    let id = dead["id"].as_str().unwrap().to_string();
    drop(pb);

    let after = support::config_file(
        &dir,
        "[tenants.shop-a]\nrequire_https = true\n\n[tenants.shop-b]\n",
    );
    let pb = backend.postback(&[("POSTBACK_CONFIG", &after)]).await;
    let http = json!({"url": receiver.url("/x"), "body": {}, "tenant": "shop-a"});
    let (status, answer) = pb.notify(http).await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (422, &json!("url")),
        "{answer}"
    );
    let other = json!({"url": receiver.url("/x"), "body": {}, "tenant": "shop-b", "delay": "1h"});
    assert_eq!(pb.notify(other).await.0, 202, "another tenant may use http");

    let replay = |body: Value| {
        let path = format!("/dead-letters/{id}/replay");
        let pb = &pb;
        async move { pb.request(Method::POST, &path, Some(body), &[]).await }
    };
    let (status, answer) = replay(json!({})).await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (422, &json!("url")),
        "{answer}"
    );
    let (status, answer) = replay(json!({"url": receiver.url("/still-http")})).await;
    assert_eq!(status, 422, "{answer}");

    // A bulk replay is not refused, but nothing goes over http.
    let (status, answer) = pb
        .request(
            Method::POST,
            "/dead-letters/replay",
            Some(json!({"all": true})),
            &[],
        )
        .await;
    assert_eq!((status, &answer["count"]), (200, &json!(1)), "{answer}");
    let again = pb.wait_state(&id, "dead", WAIT).await;
    let error = again["history"][1]["error"].as_str().unwrap();
    assert!(error.contains("requires https"), "{again}");
    assert_eq!(
        receiver.requests_for(&id).len(),
        1,
        "only the attempt before the rule"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_offers_http2_is_sent_over_http2() {
    let pki = Pki::new();
    let h2 = TlsReceiver::offering_http2(&pki).await;
    let h1 = TlsReceiver::start(&pki).await;
    let config = pki.tenant_config("shop-a");
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start();
    let pb = backend
        .postback(&[("POSTBACK_CONFIG", &support::config_file(&dir, &config))])
        .await;

    let over_h2 = pb.attempted_once("shop-a", &h2.url("/paid")).await;
    let over_h1 = pb.attempted_once("shop-a", &h1.url("/paid")).await;

    assert_eq!(over_h2["state"], "delivered", "{over_h2}");
    assert_eq!(over_h1["state"], "delivered", "{over_h1}");
    assert_eq!(h2.versions(), vec![http::Version::HTTP_2]);
    assert_eq!(h1.versions(), vec![http::Version::HTTP_11]);
}
