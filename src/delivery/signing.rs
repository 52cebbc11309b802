//! Standard Webhooks signatures over `{id}.{timestamp}.{body}`, all in one
//! `webhook-signature` header, space-separated: `v1,<base64 HMAC-SHA256>` per shared
//! secret (`whsec_…`), and `v1a,<base64 ed25519>` per signing key (`whsk_…`), which a
//! merchant verifies with the public key alone (`whpk_…`, published at
//! `GET /signing-keys`). Several of each, so that receivers can rotate without missing a
//! notification.
//!
//! No two tenants sign with the same secret or key. A tenant signs with its own; of a
//! kind it has none of, the `default` tenant signs with the instance's, and every other
//! tenant with one derived from each of the instance's, so that a delivery of one tenant
//! never verifies at another tenant's receiver: HKDF-SHA256 (RFC 5869) with the
//! instance secret's bytes (or signing key's 32-byte seed) as input keying material, no
//! salt, and the info `postback tenant secret <tenant>` (or `postback tenant key
//! <tenant>`), 32 bytes, which are the derived secret (or seed). `postback config
//! signing <tenant>` prints what signs a tenant's deliveries.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use ring::hkdf;
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

    /// `tenant`'s secret derived from this one (the module's doc says how).
    fn derive(&self, tenant: &Tenant) -> Self {
        Self(derive(&self.0, &format!("postback tenant secret {tenant}")).to_vec())
    }

    /// As configured: `whsec_` and the base64 of its bytes.
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}", B64.encode(&self.0))
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

/// 32 bytes of HKDF-SHA256 of `secret` with no salt and `info`.
fn derive(secret: &[u8], info: &str) -> [u8; SEED_LEN] {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(secret);
    let mut out = [0u8; SEED_LEN];
    prk.expand(&[info.as_bytes()], hkdf::HKDF_SHA256)
        .and_then(|okm| okm.fill(&mut out))
        .expect("HKDF-SHA256 gives 32 bytes");
    out
}

/// An ed25519 signing key (`whsk_` followed by the base64 of its 32-byte seed, or of
/// the seed and its public key, 64 bytes, as libsodium writes it). Never printed.
#[derive(Clone)]
pub struct SigningKey {
    pair: Arc<Ed25519KeyPair>,
    seed: Arc<[u8; SEED_LEN]>,
}

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
        let mut seed = [0u8; SEED_LEN];
        seed.copy_from_slice(&bytes[..SEED_LEN]);
        Ok(Self {
            pair: Arc::new(pair),
            seed: Arc::new(seed),
        })
    }

    /// `tenant`'s key derived from this one (the module's doc says how).
    fn derive(&self, tenant: &Tenant) -> Self {
        let seed = derive(&*self.seed, &format!("postback tenant key {tenant}"));
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("any 32 bytes are a seed");
        Self {
            pair: Arc::new(pair),
            seed: Arc::new(seed),
        }
    }

    /// As configured: `whsk_` and the base64 of its seed.
    pub fn expose(&self) -> String {
        format!("{KEY_PREFIX}{}", B64.encode(*self.seed))
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
            B64.encode(self.pair.public_key().as_ref())
        )
    }

    fn sign(&self, content: &[u8]) -> String {
        format!("v1a,{}", B64.encode(self.pair.sign(content).as_ref()))
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

impl Keys {
    /// What `tenant` signs with: `own`, and of a kind it has none of, the instance's
    /// (`global`) for the default tenant, or one derived from each of them for another.
    fn of(tenant: &Tenant, own: &Keys, global: &Keys) -> Self {
        Keys {
            secrets: fill(tenant, &own.secrets, &global.secrets, |s| s.derive(tenant)),
            keys: fill(tenant, &own.keys, &global.keys, |k| k.derive(tenant)),
        }
    }
}

/// A tenant's `own` of one kind, or when it has none, the instance's (`global`) for the
/// default tenant and one `derive`d from each of them for another.
fn fill<T: Clone>(tenant: &Tenant, own: &[T], global: &[T], derive: impl Fn(&T) -> T) -> Vec<T> {
    match (own.is_empty(), tenant.is_default()) {
        (false, _) => own.to_vec(),
        (true, true) => global.to_vec(),
        (true, false) => global.iter().map(derive).collect(),
    }
}

/// Which secrets and keys sign each tenant's deliveries (`Keys::of`). The tenant is the
/// registering token's, so no caller can have a delivery signed with the secret of a
/// tenant it does not act for.
#[derive(Debug, Clone, Default)]
pub struct Signer {
    global: Keys,
    per_tenant: BTreeMap<Tenant, Keys>,
}

impl Signer {
    /// The signer of `per_tenant`'s own secrets and keys and the instance's (`global`).
    /// Refused when two tenants would sign with the same secret or key.
    pub fn new(global: Keys, per_tenant: BTreeMap<Tenant, Keys>) -> Result<Self, String> {
        let per_tenant: BTreeMap<Tenant, Keys> = per_tenant
            .into_iter()
            .map(|(t, own)| (t.clone(), Keys::of(&t, &own, &global)))
            .collect();
        let mut seen: BTreeMap<String, &Tenant> = BTreeMap::new();
        for (tenant, keys) in &per_tenant {
            let secrets = keys.secrets.iter().map(Secret::expose);
            for secret in secrets.chain(keys.keys.iter().map(SigningKey::public_key)) {
                if let Some(other) = seen.insert(secret, tenant).filter(|o| *o != tenant) {
                    return Err(format!("tenants.{other} and tenants.{tenant} sign with the same secret or key; each tenant needs its own"));
                }
            }
        }
        Ok(Self { global, per_tenant })
    }

    /// The configured tenants whose deliveries carry no signature: neither they nor the
    /// instance have a secret or a key.
    pub fn unsigned(&self) -> Vec<&Tenant> {
        let none = |k: &Keys| k.secrets.is_empty() && k.keys.is_empty();
        let tenants = self.per_tenant.iter();
        tenants.filter(|(_, k)| none(k)).map(|(t, _)| t).collect()
    }

    /// The secrets and keys that sign `tenant`'s deliveries.
    pub fn keys_of(&self, tenant: &Tenant) -> Cow<'_, Keys> {
        match self.per_tenant.get(tenant) {
            Some(keys) => Cow::Borrowed(keys),
            None => Cow::Owned(Keys::of(tenant, &Keys::default(), &self.global)),
        }
    }

    /// The public keys (`whpk_…`) that verify `tenant`'s `v1a` signatures. The keys
    /// derived for `tenant` are made whoever asks, configured or not and with keys of its
    /// own or not, so that the answer costs the same for every name and how long it takes
    /// tells nobody which tenants are configured.
    pub fn public_keys(&self, tenant: &Tenant) -> Vec<String> {
        let derived = fill(tenant, &[], &self.global.keys, |k| k.derive(tenant));
        let derived = std::hint::black_box(derived);
        let keys = self.per_tenant.get(tenant).map_or(&derived, |k| &k.keys);
        keys.iter().map(SigningKey::public_key).collect()
    }

    /// The `webhook-signature` header of one of `tenant`'s deliveries; `None` when
    /// nothing signs them.
    pub fn header(&self, tenant: &Tenant, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
        let keys = self.keys_of(tenant);
        if keys.secrets.is_empty() && keys.keys.is_empty() {
            return None;
        }
        let content = signed_content(id, timestamp, body);
        let macs = keys.secrets.iter().map(|s| s.sign(&content));
        let signatures = keys.keys.iter().map(|k| k.sign(&content));
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
    const DERIVED_SHOP_A: &str = "whsec_dC/vMniTdjCAb5zwAClBwdpZ5myIf3KMY1PgbibDI+4=";

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
        let signer = Signer::new(secrets(&[VECTOR_SECRET]), BTreeMap::new()).unwrap();
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
        let signer = Signer::new(global, BTreeMap::new()).unwrap();
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
    fn a_tenant_uses_its_own_of_each_kind_and_one_derived_from_the_instances_otherwise() {
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
            global.clone(),
            BTreeMap::from([
                (tenant("shop"), shop.clone()),
                (tenant("keyed"), keyed),
                (tenant("bare"), Keys::default()),
                (Tenant::default(), Keys::default()),
            ]),
        )
        .unwrap();
        let secret = |t: &str| signer.keys_of(&tenant(t)).secrets[0].expose();
        let public = |t: &str| signer.keys_of(&tenant(t)).keys[0].public_key();
        assert_eq!(secret("shop"), shop.secrets[0].expose(), "its own");
        assert_eq!(
            public("keyed"),
            SigningKey::parse(&own_key).unwrap().public_key()
        );
        assert_eq!(
            secret("default"),
            VECTOR_SECRET,
            "the default tenant: the instance's"
        );
        assert_eq!(public("default"), global.keys[0].public_key());
        let all = ["shop", "keyed", "bare", "default", "unconfigured"];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(public(a), public(b), "{a} and {b}");
                if *a != "keyed" && *b != "keyed" {
                    assert_ne!(secret(a), secret(b), "{a} and {b}");
                }
            }
        }
        for t in all {
            let published = signer.public_keys(&tenant(t));
            assert_eq!(
                published,
                vec![public(t)],
                "{t}: what signs is what is published"
            );
        }
        assert_eq!(
            secret("bare"),
            global.secrets[0].derive(&tenant("bare")).expose(),
            "derived, and the same on every instance"
        );
    }

    #[test]
    fn a_derived_secret_is_hkdf_sha256_of_the_instance_secret_and_the_tenant() {
        // RFC 5869 HKDF-SHA256 of the vector secret's bytes, no salt, info
        // "postback tenant secret shop-a", 32 bytes; computed independently with
        // Python's `cryptography` package (HKDF(SHA256(), 32, None, info)).
        let derived = Secret::parse(VECTOR_SECRET)
            .unwrap()
            .derive(&tenant("shop-a"));
        assert_eq!(derived.expose(), DERIVED_SHOP_A);
    }

    #[test]
    fn two_tenants_configured_with_one_secret_are_refused() {
        let shared = secrets(&[VECTOR_SECRET]);
        let refused = Signer::new(
            Keys::default(),
            BTreeMap::from([(tenant("a"), shared.clone()), (tenant("b"), shared)]),
        );
        assert!(refused.unwrap_err().contains("tenants.a and tenants.b"));
        let instance = Signer::new(
            secrets(&[VECTOR_SECRET]),
            BTreeMap::from([
                (Tenant::default(), Keys::default()),
                (tenant("b"), secrets(&[VECTOR_SECRET])),
            ]),
        );
        assert!(instance.is_err(), "b's own is the default tenant's");
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
