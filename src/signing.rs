//! Standard Webhooks signatures over `{id}.{timestamp}.{body}`, all in one
//! `webhook-signature` header, space-separated: `v1,<base64 HMAC-SHA256>` per shared
//! secret (`whsec_…`), and `v1a,<base64 ed25519>` per signing key (`whsk_…`), which a
//! merchant verifies with the public key alone (`whpk_…`, published at
//! `GET /signing-keys`). Several of each, so that receivers can rotate without missing a
//! notification; a tenant may have secrets and keys of its own.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use ring::signature::{Ed25519KeyPair, KeyPair};
use sha2::Sha256;

use crate::domain::Tenant;

const PREFIX: &str = "whsec_";
const KEY_PREFIX: &str = "whsk_";
const PUBLIC_PREFIX: &str = "whpk_";
const SEED_LEN: usize = 32;

/// A shared signing secret (`whsec_` followed by base64). Never printed.
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

/// An ed25519 signing key (`whsk_` followed by the base64 of its 32-byte seed, or of
/// the seed and its public key, 64 bytes, as libsodium writes it). Never printed.
#[derive(Clone)]
pub struct SigningKey(Arc<Ed25519KeyPair>);

impl SigningKey {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let encoded = raw
            .trim()
            .strip_prefix(KEY_PREFIX)
            .ok_or_else(|| format!("a signing key must start with `{KEY_PREFIX}`"))?;
        let bytes = B64
            .decode(encoded)
            .map_err(|_| format!("a signing key must be base64 after `{KEY_PREFIX}`"))?;
        let pair = match bytes.len() {
            SEED_LEN => Ed25519KeyPair::from_seed_unchecked(&bytes),
            64 => Ed25519KeyPair::from_seed_and_public_key(&bytes[..SEED_LEN], &bytes[SEED_LEN..]),
            _ => {
                return Err(
                    "a signing key holds 32 bytes (its seed) or 64 (seed and public key)".into(),
                )
            }
        }
        .map_err(|_| "not an ed25519 key (its public half does not match its seed)".to_string())?;
        Ok(Self(Arc::new(pair)))
    }

    /// A fresh key from the system's randomness: the `whsk_` and `whpk_` to configure
    /// and to publish.
    pub fn generate() -> anyhow::Result<(String, String)> {
        let mut seed = [0u8; SEED_LEN];
        getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let key = Self::parse(&format!("{KEY_PREFIX}{}", B64.encode(seed)))
            .map_err(anyhow::Error::msg)?;
        Ok((
            format!("{KEY_PREFIX}{}", B64.encode(seed)),
            key.public_key(),
        ))
    }

    /// The public key, `whpk_` and its base64.
    pub fn public_key(&self) -> String {
        format!(
            "{PUBLIC_PREFIX}{}",
            B64.encode(self.0.public_key().as_ref())
        )
    }

    fn sign(&self, content: &[u8]) -> String {
        format!("v1a,{}", B64.encode(self.0.sign(content).as_ref()))
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public_key())
    }
}

/// What signs one tenant's deliveries.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    pub secrets: Vec<Secret>,
    pub keys: Vec<SigningKey>,
}

/// Which secrets and keys sign a delivery: those of its tenant, or, of either kind the
/// tenant has none of, the instance's. The tenant is the registering token's, so no
/// caller can have a delivery signed with the secret of a tenant it does not act for.
#[derive(Debug, Clone, Default)]
pub struct Signer {
    global: Keys,
    per_tenant: BTreeMap<Tenant, Keys>,
}

impl Signer {
    pub fn new(global: Keys, per_tenant: BTreeMap<Tenant, Keys>) -> Self {
        Self { global, per_tenant }
    }

    /// The shared secrets that sign `tenant`'s deliveries.
    pub fn secrets_for(&self, tenant: &Tenant) -> &[Secret] {
        match self.per_tenant.get(tenant) {
            Some(own) if !own.secrets.is_empty() => &own.secrets,
            _ => &self.global.secrets,
        }
    }

    /// The signing keys that sign `tenant`'s deliveries.
    pub fn keys_for(&self, tenant: &Tenant) -> &[SigningKey] {
        match self.per_tenant.get(tenant) {
            Some(own) if !own.keys.is_empty() => &own.keys,
            _ => &self.global.keys,
        }
    }

    /// The `webhook-signature` header of one of `tenant`'s deliveries; `None` when
    /// nothing signs them.
    pub fn header(&self, tenant: &Tenant, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
        let (secrets, keys) = (self.secrets_for(tenant), self.keys_for(tenant));
        if secrets.is_empty() && keys.is_empty() {
            return None;
        }
        let content = signed_content(id, timestamp, body);
        let macs = secrets.iter().map(|s| s.sign(&content));
        let signatures = keys.iter().map(|k| k.sign(&content));
        Some(macs.chain(signatures).collect::<Vec<_>>().join(" "))
    }
}

/// What is signed: `{id}.{timestamp}.{body}`.
fn signed_content(id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(id.len() + body.len() + 24);
    content.extend_from_slice(format!("{id}.{timestamp}.").as_bytes());
    content.extend_from_slice(body);
    content
}

#[cfg(test)]
mod tests {
    use ring::signature::{UnparsedPublicKey, ED25519};

    use super::*;

    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn tenant(name: &str) -> Tenant {
        Tenant::parse(name, "tenant").unwrap()
    }

    fn secrets(raw: &[&str]) -> Keys {
        Keys {
            secrets: raw.iter().map(|s| Secret::parse(s).unwrap()).collect(),
            keys: Vec::new(),
        }
    }

    #[test]
    fn matches_the_standard_webhooks_test_vector() {
        let signer = Signer::new(secrets(&[VECTOR_SECRET]), BTreeMap::new());
        let sig = signer.header(
            &Tenant::default(),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn signs_once_per_secret_and_key_and_a_key_verifies_with_its_public_half() {
        let (raw, public) = SigningKey::generate().unwrap();
        let global = Keys {
            keys: vec![SigningKey::parse(&raw).unwrap()],
            ..secrets(&[VECTOR_SECRET, &format!("whsec_{}", B64.encode([7u8; 32]))])
        };
        let signer = Signer::new(global, BTreeMap::new());
        let header = signer.header(&Tenant::default(), "id", 1, b"{}").unwrap();
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 3);
        assert!(parts[..2].iter().all(|s| s.starts_with("v1,")));
        let signature = B64.decode(parts[2].strip_prefix("v1a,").unwrap()).unwrap();
        let public = B64
            .decode(public.strip_prefix(PUBLIC_PREFIX).unwrap())
            .unwrap();
        let verifier = UnparsedPublicKey::new(&ED25519, public);
        assert!(verifier.verify(b"id.1.{}", &signature).is_ok());
        assert!(verifier.verify(b"id.2.{}", &signature).is_err());
    }

    #[test]
    fn a_tenant_uses_its_own_of_each_kind_and_the_instances_otherwise() {
        let (own_key, _) = SigningKey::generate().unwrap();
        let (instance_key, _) = SigningKey::generate().unwrap();
        let global = Keys {
            keys: vec![SigningKey::parse(&instance_key).unwrap()],
            ..secrets(&[VECTOR_SECRET])
        };
        let shop = secrets(&[&format!("whsec_{}", B64.encode([7u8; 32]))]);
        let keyed = Keys {
            keys: vec![SigningKey::parse(&own_key).unwrap()],
            secrets: Vec::new(),
        };
        let signer = Signer::new(
            global,
            BTreeMap::from([
                (tenant("shop"), shop),
                (tenant("keyed"), keyed),
                (tenant("bare"), Keys::default()),
            ]),
        );
        let sign = |t: &str| signer.header(&tenant(t), "id", 1, b"{}").unwrap();
        assert_ne!(sign("shop"), sign("other"));
        assert_eq!(
            sign("other"),
            sign("bare"),
            "nothing of its own: the instance's"
        );
        let public = |t: &str| signer.keys_for(&tenant(t))[0].public_key();
        assert_ne!(public("keyed"), public("shop"));
        assert_eq!(
            public("shop"),
            public("bare"),
            "no keys of its own: the instance's"
        );
        assert_eq!(signer.secrets_for(&tenant("keyed")).len(), 1);
    }

    #[test]
    fn rejects_malformed_secrets_and_keys() {
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(Secret::parse("whsec_!!!").is_err());
        assert!(Secret::parse("whsec_YWJj").is_err());
        assert!(SigningKey::parse(VECTOR_SECRET).is_err());
        assert!(SigningKey::parse("whsk_YWJj").is_err());
        let mismatched = [[1u8; 32], [2u8; 32]].concat();
        assert!(SigningKey::parse(&format!("whsk_{}", B64.encode(mismatched))).is_err());
    }

    #[test]
    fn a_key_of_seed_and_public_half_reads_as_its_seed_alone() {
        let (raw, public) = SigningKey::generate().unwrap();
        let seed = B64.decode(raw.strip_prefix(KEY_PREFIX).unwrap()).unwrap();
        let public_bytes = B64
            .decode(public.strip_prefix(PUBLIC_PREFIX).unwrap())
            .unwrap();
        let long = format!("whsk_{}", B64.encode([seed, public_bytes].concat()));
        assert_eq!(SigningKey::parse(&long).unwrap().public_key(), public);
    }
}
