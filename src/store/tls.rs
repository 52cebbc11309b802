//! TLS to the store, over rustls as everywhere in postback: the client configuration of
//! a connection (what its server's certificate is checked against, and the client
//! certificate of mutual TLS), and what a failed handshake tells an operator: which
//! setting to look at, and what failed. A certificate that does not verify is not an
//! outage to wait out: `Refused::of` finds one in an error, so that start-up stops at
//! once.

use std::error::Error;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct};

use crate::config::store_tls::{Roots, StoreTls, CERT_FILE, KEY_FILE};
use crate::delivery::egress::read_roots;

/// What a server's certificate is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// That it chains to the roots and carries the name connected to (libpq's
    /// `verify-full`; Redis always).
    ChainAndName,
    /// That it chains to the roots, whatever name it carries (`verify-ca`).
    Chain,
    /// Nothing: the connection is encrypted against a passive listener only (libpq's
    /// `require` and `prefer` without roots).
    Nothing,
}

/// The client configuration of a connection to the store: `check` against `tls.roots`,
/// presenting `tls.identity` if it has one.
pub fn client_config(tls: &StoreTls, check: Check) -> anyhow::Result<Arc<ClientConfig>> {
    crate::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = verifier(&tls.roots, check, provider.clone())?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &tls.identity {
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(&identity.cert).collect::<Result<_, _>>()?;
            let key = PrivateKeyDer::from_pem_slice(&identity.key)?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

fn verifier(
    roots: &Roots,
    check: Check,
    provider: Arc<CryptoProvider>,
) -> anyhow::Result<Arc<dyn ServerCertVerifier>> {
    let full: Arc<dyn ServerCertVerifier> = match roots {
        Roots::System => Arc::new(rustls_platform_verifier::Verifier::new(provider.clone())?),
        Roots::File { pem, .. } => WebPkiServerVerifier::builder_with_provider(
            Arc::new(read_roots(pem)?),
            provider.clone(),
        )
        .build()?,
    };
    Ok(match check {
        Check::ChainAndName => full,
        Check::Chain => Arc::new(ChainOnly(full)),
        Check::Nothing => Arc::new(Unchecked(provider)),
    })
}

/// Checks the chain as `0` does, and takes a certificate for any name.
#[derive(Debug)]
struct ChainOnly(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now);
        match verified {
            Err(e) if is_name_error(&e) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Takes any certificate; still checks that the server holds its key.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn is_name_error(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

/// What failed in a TLS handshake with the store, as an operator acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The server's certificate is not for the name checked.
    Name,
    /// It does not chain to the roots.
    Chain,
    /// It does not verify otherwise (expired, not yet valid, revoked…).
    Certificate,
    /// The server refused postback's client certificate, or its absence.
    Client,
}

/// The alerts of a server that refused a client's certificate, or its absence.
const CLIENT_ALERTS: [AlertDescription; 6] = [
    AlertDescription::CertificateRequired,
    AlertDescription::HandshakeFailure,
    AlertDescription::BadCertificate,
    AlertDescription::UnknownCA,
    AlertDescription::AccessDenied,
    AlertDescription::CertificateUnknown,
];

impl Failure {
    fn of_error(e: &rustls::Error) -> Option<Self> {
        use rustls::Error::{AlertReceived, InvalidCertificate};
        Some(match e {
            InvalidCertificate(_) if is_name_error(e) => Self::Name,
            InvalidCertificate(
                CertificateError::UnknownIssuer
                | CertificateError::BadSignature
                | CertificateError::InvalidPurpose
                | CertificateError::Other(_),
            ) => Self::Chain,
            InvalidCertificate(_) => Self::Certificate,
            AlertReceived(alert) if CLIENT_ALERTS.contains(alert) => Self::Client,
            _ => return None,
        })
    }

    /// From rustls's words for it, where a client library kept only those (the redis
    /// crate hands a connection's error to every request waiting on it as text).
    fn of_text(text: &str) -> Option<Self> {
        if let Some((_, said)) = text.split_once("invalid peer certificate: ") {
            let chain = ["UnknownIssuer", "BadSignature", "InvalidPurpose", "Other"];
            return Some(match said {
                s if s.starts_with("certificate not valid for name") => Self::Name,
                s if s.starts_with("NotValidForName") => Self::Name,
                s if chain.iter().any(|w| s.starts_with(w)) => Self::Chain,
                _ => Self::Certificate,
            });
        }
        let (_, alert) = text.split_once("received fatal alert: ")?;
        let client = CLIENT_ALERTS
            .iter()
            .any(|a| alert.starts_with(&format!("{a:?}")));
        client.then_some(Self::Client)
    }
}

/// The TLS failure in `e`, if there is one, and rustls's words for it: found in its
/// chain of causes, or else in its text.
fn failure(e: &(dyn Error + 'static)) -> Option<(Failure, String)> {
    let mut cause = Some(e);
    while let Some(e) = cause {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        let tls = e.downcast_ref::<rustls::Error>();
        if let Some(tls) = tls.or_else(|| inner.and_then(|i| i.downcast_ref::<rustls::Error>())) {
            return Failure::of_error(tls).map(|f| (f, tls.to_string()));
        }
        cause = e.source();
    }
    let text = e.to_string();
    Failure::of_text(&text).map(|f| (f, text))
}

/// The name a server's certificate was checked against, and where it came from.
pub struct Named {
    /// The name (or IP address) checked.
    pub name: String,
    /// The setting that gave it: the address's, or a `*_server_name`.
    pub from: String,
    /// The setting that gives another, where one does.
    pub rename: Option<&'static str>,
}

/// A connection to the store that TLS refused: its certificate did not verify, or the
/// server refused postback's. Not waited out at start: `connect_wait` is for a store not
/// up yet, and this one answered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Refused {
    /// `e` explained, when TLS failed in it: the setting to look at, and what failed.
    pub fn of(e: &(dyn Error + 'static), tls: &StoreTls, named: &Named) -> Option<Self> {
        let (failure, said) = failure(e)?;
        let roots = &tls.roots;
        let Named { name, from, rename } = named;
        Some(Self(match failure {
            Failure::Name => {
                let fix = match rename {
                    Some(setting) => format!("; set {setting} to a name it carries"),
                    None => String::new(),
                };
                format!("{from}: the server's certificate is not for `{name}` ({said}){fix}")
            }
            Failure::Chain => format!(
                "{}: the server's certificate does not chain to {} ({said})",
                root_setting(roots),
                roots.describe()
            ),
            Failure::Certificate => format!(
                "{}: the server's certificate does not verify ({said})",
                root_setting(roots)
            ),
            Failure::Client => client_refused(tls, &said),
        }))
    }
}

/// The server refused postback's client certificate, or wants one: `why`.
pub fn client_refused(tls: &StoreTls, why: &str) -> String {
    match &tls.identity {
        Some(identity) => format!(
            "{}: the server refused this client certificate ({why}); it takes one its CA signed",
            identity.named
        ),
        None => format!(
            "{CERT_FILE} / {KEY_FILE}: the server requires a client certificate, and none is set ({why})"
        ),
    }
}

fn root_setting(roots: &Roots) -> &'static str {
    match roots {
        Roots::System => crate::config::store_tls::CA_FILE,
        Roots::File { setting, .. } => setting,
    }
}
