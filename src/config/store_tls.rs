//! `StoreTls`: what the connections to the store verify and present over TLS, read from
//! the files `store.tls_*` name and checked at start-up: the roots a server's certificate
//! must chain to (the system's, or `tls_ca_file`'s), the client certificate and key of
//! mutual TLS, and the names certificates must carry where they differ from the
//! addresses. An error names the setting and the file, never what the file holds.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use rustls::pki_types::ServerName;

use super::StoreSettings;
use crate::delivery::egress::{read_identity, read_roots};

pub const CA_FILE: &str = "store.tls_ca_file (POSTBACK_STORE_TLS_CA_FILE)";
pub const CERT_FILE: &str = "store.tls_cert_file (POSTBACK_STORE_TLS_CERT_FILE)";
pub const KEY_FILE: &str = "store.tls_key_file (POSTBACK_STORE_TLS_KEY_FILE)";
pub const SERVER_NAME: &str = "store.tls_server_name (POSTBACK_STORE_TLS_SERVER_NAME)";
pub const SENTINELS_SERVER_NAME: &str =
    "store.redis_sentinels_tls_server_name (POSTBACK_STORE_REDIS_SENTINELS_TLS_SERVER_NAME)";

/// The roots a server's certificate must chain to.
#[derive(Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's, through the platform's verifier.
    System,
    /// One or more certificates of a PEM file, and the setting that named it.
    File {
        path: PathBuf,
        setting: &'static str,
        pem: Vec<u8>,
    },
}

impl Roots {
    /// The roots of the PEM file at `path`, named by `setting`, checked to hold
    /// certificates.
    pub fn file(path: &Path, setting: &'static str) -> anyhow::Result<Self> {
        let pem = read(path, setting)?;
        read_roots(&pem)
            .map_err(|e| anyhow!("{setting}: {}: not PEM certificates ({e})", path.display()))?;
        Ok(Self::File {
            path: path.to_path_buf(),
            setting,
            pem,
        })
    }

    /// Where they come from, for an error: the setting and its file, or the system.
    pub fn describe(&self) -> String {
        match self {
            Self::System => format!("the system's roots (set {CA_FILE} for a private CA)"),
            Self::File { path, setting, .. } => format!("{setting}, {}", path.display()),
        }
    }
}

/// A client certificate chain and its private key, as PEM, and the settings that named
/// them. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// The settings and files, for an error: `store.tls_cert_file, /etc/…`.
    pub named: String,
}

impl Identity {
    /// The chain at `cert` and the key at `key`, checked to read as a chain and a key.
    pub fn files(
        (cert, cert_setting): (&Path, &str),
        (key, key_setting): (&Path, &str),
    ) -> anyhow::Result<Self> {
        let cert_pem = read(cert, cert_setting)?;
        let key_pem = read(key, key_setting)?;
        if String::from_utf8_lossy(&key_pem).contains("ENCRYPTED") {
            bail!("{key_setting}: {}: an encrypted key, which postback cannot read; give it the key unencrypted, readable by postback's user only (mode 0600)", key.display());
        }
        let mut both = cert_pem.clone();
        both.extend_from_slice(&key_pem);
        read_identity(&both).map_err(|e| {
            anyhow!(
                "{cert_setting}, {key_setting}: {}, {}: not a PEM certificate and private key ({e})",
                cert.display(),
                key.display()
            )
        })?;
        Ok(Self {
            cert: cert_pem,
            key: key_pem,
            named: format!(
                "{cert_setting}, {key_setting} ({}, {})",
                cert.display(),
                key.display()
            ),
        })
    }
}

/// The TLS set-up of the store's connections.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreTls {
    pub roots: Roots,
    pub identity: Option<Identity>,
    /// The name a Redis server's certificate must carry, if not its address's host.
    pub server_name: Option<ServerName<'static>>,
    /// The name the sentinels' certificates must carry, if not their addresses' hosts.
    pub sentinels_server_name: Option<ServerName<'static>>,
}

impl fmt::Debug for StoreTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreTls")
            .field("roots", &self.roots.describe())
            .field("identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .field("sentinels_server_name", &self.sentinels_server_name)
            .finish()
    }
}

impl Default for StoreTls {
    fn default() -> Self {
        Self {
            roots: Roots::System,
            identity: None,
            server_name: None,
            sentinels_server_name: None,
        }
    }
}

impl StoreTls {
    /// From `s`'s `tls_*` keys: the files read and checked, the names checked to be
    /// names (or IP addresses) a certificate can carry.
    pub fn read(s: &StoreSettings) -> anyhow::Result<Self> {
        let roots = match &s.tls_ca_file {
            Some(path) => Roots::file(path, CA_FILE)?,
            None => Roots::System,
        };
        let identity = match (&s.tls_cert_file, &s.tls_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(Identity::files((cert, CERT_FILE), (key, KEY_FILE))?),
            (Some(_), None) => bail!("{KEY_FILE}: required with store.tls_cert_file"),
            (None, Some(_)) => bail!("{CERT_FILE}: required with store.tls_key_file"),
        };
        Ok(Self {
            roots,
            identity,
            server_name: server_name(s.tls_server_name.as_deref(), SERVER_NAME)?,
            sentinels_server_name: server_name(
                s.redis_sentinels_tls_server_name.as_deref(),
                SENTINELS_SERVER_NAME,
            )?,
        })
    }
}

/// `name`, checked to be a DNS name or an IP address.
fn server_name(name: Option<&str>, setting: &str) -> anyhow::Result<Option<ServerName<'static>>> {
    name.map(|n| {
        ServerName::try_from(n.to_string())
            .map_err(|_| anyhow!("{setting}: `{n}` is not a host name or an IP address"))
    })
    .transpose()
}

fn read(path: &Path, setting: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow!("{setting}: cannot read {}: {e}", path.display()))
}
