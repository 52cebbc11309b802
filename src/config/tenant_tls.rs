//! `TenantTls`: a tenant's own TLS set-up for its deliveries, read from the PEM files
//! its settings name and checked at start-up: the client certificate and key presented
//! to receivers that require mutual TLS, and the roots its receivers are verified
//! against instead of the system's.

use std::path::Path;

use anyhow::{anyhow, bail};

use super::TenantSettings;

/// The PEM a tenant's deliveries use, checked to read as what it claims.
#[derive(Clone)]
pub struct TenantTls {
    /// The certificate chain and the private key, in one PEM.
    pub identity: Option<Vec<u8>>,
    /// One or more root certificates.
    pub roots: Option<Vec<u8>>,
}

impl std::fmt::Debug for TenantTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantTls")
            .field("identity", &self.identity.is_some())
            .field("roots", &self.roots.is_some())
            .finish()
    }
}

impl TenantTls {
    /// From `t`'s `client_cert`, `client_key` and `ca_certs` (errors name `key.<setting>`);
    /// `None` when it sets none of them.
    pub fn read(t: &TenantSettings, key: &str) -> anyhow::Result<Option<Self>> {
        let identity = match (&t.client_cert, &t.client_key) {
            (None, None) => None,
            (Some(cert), Some(private)) => {
                let mut pem = read(cert, &format!("{key}.client_cert"))?;
                pem.extend(read(private, &format!("{key}.client_key"))?);
                crate::delivery::egress::read_identity(&pem).map_err(|e| {
                    anyhow!("{key}.client_cert, {key}.client_key: not a PEM certificate and private key ({e})")
                })?;
                Some(pem)
            }
            (Some(_), None) => bail!("{key}.client_key: required with client_cert"),
            (None, Some(_)) => bail!("{key}.client_cert: required with client_key"),
        };
        let roots = match &t.ca_certs {
            None => None,
            Some(path) => {
                let pem = read(path, &format!("{key}.ca_certs"))?;
                crate::delivery::egress::read_roots(&pem).map_err(|e| {
                    anyhow!(
                        "{key}.ca_certs: {}: not PEM certificates ({e})",
                        path.display()
                    )
                })?;
                Some(pem)
            }
        };
        Ok((identity.is_some() || roots.is_some()).then_some(Self { identity, roots }))
    }
}

fn read(path: &Path, key: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow!("{key}: cannot read {}: {e}", path.display()))
}
