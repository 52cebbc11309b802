//! The TLS set-up of a delivery client: the system's roots (through the platform
//! verifier) or a tenant's own, a tenant's client certificate for receivers that require
//! mutual TLS, and ALPN offering HTTP/2 before HTTP/1.1. Also reads the PEM a tenant's
//! settings name, so that start-up checks it with the code that will use it.

use std::sync::Arc;

use anyhow::{anyhow, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use rustls_platform_verifier::BuilderVerifierExt;

use crate::config::TenantTls;

/// The client configuration for `tls` (the instance's, with `None`).
pub fn client_config(tls: Option<&TenantTls>) -> anyhow::Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    let builder = match tls.and_then(|t| t.roots.as_deref()) {
        Some(pem) => builder.with_root_certificates(read_roots(pem)?),
        None => builder.with_platform_verifier()?,
    };
    let mut config = match tls.and_then(|t| t.identity.as_deref()) {
        Some(pem) => {
            let (chain, key) = read_identity(pem)?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A certificate chain and its private key, from one PEM.
pub fn read_identity(
    pem: &[u8],
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
    if chain.is_empty() {
        bail!("holds no certificate");
    }
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| anyhow!("its private key: {e}"))?;
    Ok((chain, key))
}

/// One or more root certificates, from PEM.
pub fn read_roots(pem: &[u8]) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert?)?;
    }
    if roots.is_empty() {
        bail!("holds no certificate");
    }
    Ok(roots)
}
