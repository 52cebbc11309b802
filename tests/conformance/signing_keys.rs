//! Asymmetric signatures: a delivery carries a `v1a,` ed25519 signature per signing key
//! of its tenant (for a tenant without keys, one derived from each of the instance's, or
//! the instance's own for the default tenant), which a merchant verifies with the public
//! key alone, fetched without a token from `GET /signing-keys`.

use crate::support;

use std::process::Command;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{json, Value};
use support::{signatures, Postback, Receiver};

use support::WAIT;

/// A fresh key as an operator configures it (`whsk_` and the seed) and its public key
/// (`whpk_`), made here with ring rather than by postback.
fn key_pair() -> (String, String) {
    let seed: [u8; 32] = std::array::from_fn(|_| fastrand::u8(..));
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    (
        format!("whsk_{}", B64.encode(seed)),
        format!("whpk_{}", B64.encode(pair.public_key().as_ref())),
    )
}

/// The public keys `GET /signing-keys` publishes for `tenant`, asked without a token.
async fn published(pb: &Postback, tenant: &str) -> (u16, Vec<String>) {
    let (status, text) = pb.get_text(&format!("/signing-keys?tenant={tenant}")).await;
    let answer: Value = serde_json::from_str(&text).unwrap();
    let keys = answer["keys"].as_array().cloned().unwrap_or_default();
    let keys = keys
        .iter()
        .map(|k| k["public_key"].as_str().unwrap().to_string());
    (status, keys.collect())
}

async fn delivered_for(
    pb: &Postback,
    receiver: &Receiver,
    tenant: &str,
) -> support::receiver::Received {
    let body = json!({"url": receiver.url(&format!("/{tenant}")), "body": {"t": tenant}, "tenant": tenant});
    let id = pb.register(body).await;
    pb.wait_state(&id, "delivered", WAIT).await;
    receiver.requests_for(&id).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenants_deliveries_verify_with_its_published_public_keys_alone() {
    let (instance, instance_public) = key_pair();
    let (old, old_public) = key_pair();
    let (new, new_public) = key_pair();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    let config = format!(
        "[signing]\nkeys = [\"{instance}\"]\n\n[tenants.shop-a]\nkeys = [\"{old}\", \"{new}\"]\n\n[tenants.shop-b]\n"
    );
    std::fs::write(&path, config).unwrap();
    let (_backend, receiver, pb) =
        support::start_any(&[("POSTBACK_CONFIG", path.to_str().unwrap())]).await;

    assert_eq!(
        published(&pb, "shop-a").await,
        (200, vec![old_public.clone(), new_public.clone()])
    );
    let (status, b_public) = published(&pb, "shop-b").await;
    assert_eq!(status, 200);
    assert_eq!(b_public.len(), 1, "one derived from the instance's one");
    assert_ne!(b_public[0], instance_public, "shop-b's own, derived");
    assert_eq!(
        b_public,
        signatures::printed(&path, "shop-b", "public_key"),
        "as `config signing` prints it"
    );
    assert_eq!(
        published(&pb, "default").await,
        (200, vec![instance_public.clone()])
    );
    // A tenant that is not configured is answered alike (nobody learns which exist);
    // refused: a name no tenant can have, a query it does not take.
    let (status, z_public) = published(&pb, "shop-z").await;
    assert_eq!((status, z_public.len()), (200, 1), "no existence oracle");
    assert!(!z_public.contains(&b_public[0]) && !z_public.contains(&instance_public));
    assert_eq!(
        published(&pb, "shop%20a").await.0,
        422,
        "not a tenant's name"
    );
    let (status, _) = pb.get_text("/signing-keys?tenant=shop-a&secret=1").await;
    assert_eq!(status, 400, "an unknown query parameter");

    let a = delivered_for(&pb, &receiver, "shop-a").await;
    let sigs = signatures::of(&a);
    assert_eq!(
        sigs.len(),
        2,
        "one v1a per key of the tenant, no HMAC without secrets: {sigs:?}"
    );
    assert!(signatures::v1a_verifies(&old_public, &a) && signatures::v1a_verifies(&new_public, &a));
    assert!(
        !signatures::v1a_verifies(&instance_public, &a),
        "not the instance's key"
    );
    let b = delivered_for(&pb, &receiver, "shop-b").await;
    assert!(signatures::v1a_verifies(&b_public[0], &b));
    assert!(
        !signatures::v1a_verifies(&old_public, &b)
            && !signatures::v1a_verifies(&instance_public, &b),
        "neither another tenant's key nor the instance's"
    );
    let d = delivered_for(&pb, &receiver, "default").await;
    assert!(signatures::v1a_verifies(&instance_public, &d));
    assert!(!signatures::v1a_verifies(&instance_public, &a));
    assert!(!pb.logs().contains("whsk_"), "keys never logged");
}

/// `GET /signing-keys?tenant=name` without a token: its status, its headers but the
/// date, and its JSON with each public key's value left out.
async fn answer_shape(pb: &Postback, tenant: &str) -> (u16, Vec<(String, String)>, Value) {
    let answer = pb
        .http
        .get(pb.url(&format!("/signing-keys?tenant={tenant}")))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let mut headers: Vec<(String, String)> = answer
        .headers()
        .iter()
        .filter(|(name, _)| *name != "date")
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_string()))
        .collect();
    headers.sort();
    let mut body: Value = answer.json().await.unwrap();
    for key in body["keys"].as_array_mut().unwrap() {
        let public = key["public_key"].as_str().unwrap();
        assert!(public.starts_with("whpk_"), "{public}");
        key["public_key"] = json!("…");
    }
    body["tenant"] = json!("…");
    (status, headers, body)
}

/// A name no tenant is configured with is answered as a configured tenant without
/// ed25519 keys of its own is: the same status, headers and shape, a key derived for the
/// name as many as the configured one has; only the name and the key's value differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tenant_is_answered_as_a_configured_one_without_keys() {
    let (instance, instance_public) = key_pair();
    let (own, _) = key_pair();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    let config = format!(
        "[signing]\nkeys = [\"{instance}\"]\n\n[tenants.shop-a]\nkeys = [\"{own}\"]\n\n[tenants.shop-b]\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n"
    );
    std::fs::write(&path, config).unwrap();
    let (_backend, _receiver, pb) =
        support::start_any(&[("POSTBACK_CONFIG", path.to_str().unwrap())]).await;

    let configured = answer_shape(&pb, "shop-b").await;
    assert_eq!(configured.0, 200);
    assert_eq!(configured.2["keys"].as_array().unwrap().len(), 1);
    for unknown in ["shop-z", "shop-q"] {
        assert_eq!(answer_shape(&pb, unknown).await, configured, "{unknown}");
    }
    let (_, b) = published(&pb, "shop-b").await;
    let (_, z) = published(&pb, "shop-z").await;
    assert_ne!(b, z, "each name its own key");
    assert!(!z.contains(&instance_public), "not the instance's");
    assert_eq!(z, published(&pb, "shop-z").await.1, "the same each time");
}

#[tokio::test]
async fn signing_key_new_prints_a_key_whose_public_half_is_published() {
    let out = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["signing-key", "new"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let said = String::from_utf8(out.stderr).unwrap();
    let public = said
        .lines()
        .find(|l| l.starts_with("whpk_"))
        .unwrap()
        .to_string();
    assert!(key.starts_with("whsk_"), "{key}");
    let (_backend, _receiver, pb) = support::start_any(&[("POSTBACK_SIGNING_KEYS", &key)]).await;
    assert_eq!(published(&pb, "default").await, (200, vec![public]));
}
