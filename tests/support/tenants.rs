//! Tenants for the tests of tokens, tenants and the audit log: a configuration file with
//! tokens of every kind and three tenants, and an instance on it.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{Backend, Postback, Receiver};

pub use super::WAIT;

pub const SECRET_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const SECRET_A2: &str = "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";
pub const SECRET_B: &str = "whsec_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
pub const GLOBAL: &str = "whsec_ERERERERERERERERERERERERERERERERERERERERERE=";

/// Each token's value, name, tenant and roles.
pub const TOKENS: &[(&str, &str, &str, &[&str])] = &[
    ("tok-checkout-a", "checkout-a", "shop-a", &["notify"]),
    ("tok-reader-a", "reader-a", "shop-a", &["read"]),
    ("tok-ops-a", "ops-a", "shop-a", &["read", "operate"]),
    ("tok-audit-a", "audit-a", "shop-a", &["audit"]),
    (
        "tok-all-b",
        "all-b",
        "shop-b",
        &["notify", "read", "operate", "audit"],
    ),
    ("tok-plain-c", "plain-c", "shop-c", &["notify", "read"]),
    ("tok-ops", "ops", "*", &["read", "operate"]),
    ("tok-producer", "producer", "*", &["notify", "read"]),
    ("tok-auditor", "auditor", "*", &["audit"]),
];

pub fn sha256_hex(token: &str) -> String {
    format!("{:x}", Sha256::digest(token.as_bytes()))
}

/// The configuration file of these tests: the tokens above, three tenants (shop-a may
/// call the receivers on 127.0.0.1 and names below `shop-a.example`), and the global
/// secret that a tenant without secrets signs with.
pub fn config() -> String {
    let mut toml = format!("[signing]\nsecrets = [\"{GLOBAL}\"]\n\n");
    for (value, name, tenant, roles) in TOKENS {
        let roles: Vec<String> = roles.iter().map(|r| format!("\"{r}\"")).collect();
        toml += &format!(
            "[tokens.{name}]\nsha256 = \"{}\"\ntenant = \"{tenant}\"\nroles = [{}]\n\n",
            sha256_hex(value),
            roles.join(", ")
        );
    }
    toml += &format!(
        "[tenants.shop-a]\nsecrets = [\"{SECRET_A}\", \"{SECRET_A2}\"]\nrate_limit = \"4/s\"\n\
         allowed_hosts = [\"127.0.0.1\", \"*.shop-a.example\"]\n\n\
         [tenants.shop-b]\nsecrets = [\"{SECRET_B}\"]\n\n[tenants.shop-c]\n"
    );
    toml
}

pub struct Fleet {
    pub backend: Backend,
    dir: tempfile::TempDir,
    pub receiver: Receiver,
    pub pb: Postback,
}

pub async fn start(env: &[(&str, &str)]) -> Fleet {
    start_on(Backend::start(), "", env).await
}

/// An instance on `backend` whose configuration file has `extra` after `config()`'s.
pub async fn start_on(backend: Backend, extra: &str, env: &[(&str, &str)]) -> Fleet {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postback.toml");
    std::fs::write(&path, config() + extra).unwrap();
    let path = path.to_str().unwrap().to_string();
    let mut env = env.to_vec();
    env.push(("POSTBACK_CONFIG", &path));
    let pb = backend.postback(&env).await;
    Fleet {
        backend,
        dir,
        receiver,
        pb,
    }
}

impl Fleet {
    pub async fn call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.pb.request_as(token, method, path, body, &[]).await
    }

    pub async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        self.call(token, Method::GET, path, None).await
    }

    /// `POST /notify` with `token`: the status and the answer.
    pub async fn notify(&self, token: &str, body: Value) -> (u16, Value) {
        self.call(token, Method::POST, "/notify", Some(body)).await
    }

    /// Registers with `token` and asserts `202`; returns the id.
    pub async fn register(&self, token: &str, body: Value) -> String {
        let (status, answer) = self.notify(token, body).await;
        assert_eq!(status, 202, "{answer}");
        answer["id"].as_str().unwrap().to_string()
    }

    /// The configuration file the instance runs on.
    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("postback.toml")
    }

    /// The shared secret that signs `tenant`'s deliveries, as `postback config signing`
    /// prints it.
    pub fn signing_secret(&self, tenant: &str) -> String {
        let path = self.dir.path().join("postback.toml");
        let secrets = super::signatures::printed(&path, tenant, "secret");
        secrets.into_iter().next().expect("a secret")
    }

    /// A dead letter of `token`'s tenant (or of `tenant`, for a `*` token), each at an
    /// endpoint path of its own: many failures at one path would open its circuit, which
    /// holds the next back until a probe of it fails.
    pub async fn dead_letter(&self, token: &str, tenant: Option<&str>, topic: &str) -> String {
        static PATHS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = PATHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let url = self.receiver.url(&format!("/dead/{n}?fail=9"));
        let mut body = json!({"url": url, "body": {}, "schedule": ["100ms"], "topic": topic});
        if let Some(t) = tenant {
            body["tenant"] = json!(t);
        }
        let id = self.register(token, body).await;
        self.pb.wait_state(&id, "dead", WAIT).await;
        id
    }
}
