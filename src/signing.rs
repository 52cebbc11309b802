//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `{id}.{timestamp}.{body}`, one signature per configured secret so that receivers can
//! rotate keys without missing a notification; a tenant may have secrets of its own.

use std::collections::BTreeMap;
use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::Tenant;

const PREFIX: &str = "whsec_";

/// A signing key (`whsec_` followed by base64). Never printed.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let encoded = raw
            .trim()
            .strip_prefix(PREFIX)
            .ok_or_else(|| format!("a secret must start with `{PREFIX}`"))?;
        let key = B64
            .decode(encoded)
            .map_err(|_| "a secret must be base64 after `whsec_`".to_string())?;
        if key.len() < 16 {
            return Err("a secret must hold at least 16 bytes".into());
        }
        Ok(Self(key))
    }

    fn sign(&self, content: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(content);
        format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Which secrets sign a delivery: those of its tenant, or the global ones when the
/// tenant has none. The tenant is the registering token's, so no caller can have a
/// delivery signed with the secret of a tenant it does not act for.
#[derive(Debug, Clone, Default)]
pub struct Signer {
    global: Vec<Secret>,
    per_tenant: BTreeMap<Tenant, Vec<Secret>>,
}

impl Signer {
    /// Tenants with no secrets sign with `global`.
    pub fn new(global: Vec<Secret>, per_tenant: BTreeMap<Tenant, Vec<Secret>>) -> Self {
        let per_tenant = per_tenant
            .into_iter()
            .filter(|(_, s)| !s.is_empty())
            .collect();
        Self { global, per_tenant }
    }

    /// Empty: no signature header.
    pub fn secrets_for(&self, tenant: &Tenant) -> &[Secret] {
        self.per_tenant.get(tenant).unwrap_or(&self.global)
    }
}

/// The `webhook-signature` header value: one `v1,` signature per secret, space-separated.
pub fn signature_header(secrets: &[Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut content = Vec::with_capacity(id.len() + body.len() + 24);
    content.extend_from_slice(format!("{id}.{timestamp}.").as_bytes());
    content.extend_from_slice(body);
    secrets
        .iter()
        .map(|s| s.sign(&content))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_test_vector() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature_header(
            &[secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn signs_once_per_secret() {
        let a = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let b = Secret::parse(&format!("whsec_{}", B64.encode([7u8; 32]))).unwrap();
        let sig = signature_header(&[a, b], "id", 1, b"{}");
        assert_eq!(sig.split(' ').count(), 2);
        assert!(sig.split(' ').all(|s| s.starts_with("v1,")));
    }

    #[test]
    fn a_tenant_with_its_own_secrets_uses_them() {
        let a = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let b = Secret::parse(&format!("whsec_{}", B64.encode([7u8; 32]))).unwrap();
        let tenant = |name| Tenant::parse(name, "tenant").unwrap();
        let signer = Signer::new(
            vec![a],
            BTreeMap::from([(tenant("shop"), vec![b]), (tenant("bare"), vec![])]),
        );
        let sign = |t| signature_header(signer.secrets_for(&tenant(t)), "id", 1, b"{}");
        assert_ne!(sign("shop"), sign("other"));
        assert_eq!(
            sign("other"),
            sign("bare"),
            "no secrets of its own: the global ones"
        );
    }

    #[test]
    fn rejects_malformed_secrets() {
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(Secret::parse("whsec_!!!").is_err());
        assert!(Secret::parse("whsec_YWJj").is_err());
    }
}
