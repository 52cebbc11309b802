//! Standard Webhooks signatures checked as a receiver checks them, written here from the
//! definition rather than with postback's signer: `v1,` HMAC-SHA256 with the base64 key
//! after `whsec_`, and `v1a,` ed25519 with the public key after `whpk_`, both over
//! `{id}.{timestamp}.{body}`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use ring::signature::{UnparsedPublicKey, ED25519};
use sha2::Sha256;

use super::receiver::Received;

/// What a delivery's signatures are over.
fn content(r: &Received) -> Vec<u8> {
    let mut content = format!(
        "{}.{}.",
        r.header("webhook-id").unwrap(),
        r.header("webhook-timestamp").unwrap()
    )
    .into_bytes();
    content.extend_from_slice(&r.body);
    content
}

/// The signatures a delivery carries.
pub fn of(r: &Received) -> Vec<String> {
    let header = r.header("webhook-signature").unwrap_or_default();
    header.split(' ').map(str::to_string).collect()
}

/// The `v1,` signature of a delivery under `secret`.
pub fn v1(secret: &str, r: &Received) -> String {
    let key = B64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(&content(r));
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// Whether one of a delivery's `v1a,` signatures verifies with `public` (`whpk_…`).
pub fn v1a_verifies(public: &str, r: &Received) -> bool {
    let key = B64.decode(public.strip_prefix("whpk_").unwrap()).unwrap();
    let verifier = UnparsedPublicKey::new(&ED25519, key);
    let content = content(r);
    of(r)
        .iter()
        .filter_map(|s| s.strip_prefix("v1a,"))
        .any(|s| {
            B64.decode(s)
                .is_ok_and(|sig| verifier.verify(&content, &sig).is_ok())
        })
}

/// What `postback config signing <tenant>` prints for the configuration at `path` under
/// `label` (`secret` or `public_key`), one value per line.
pub fn printed(path: &std::path::Path, tenant: &str, label: &str) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(["config", "signing", tenant, "--config"])
        .arg(path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let prefix = format!("{label} ");
    let values = printed
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()));
    values.map(String::from).collect()
}
