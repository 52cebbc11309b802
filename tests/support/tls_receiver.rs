//! Mutual TLS for the tests: `Pki`, a certificate authority made in the test with its
//! server certificate (for `localhost` and 127.0.0.1, which the TLS tests' Redis and
//! Postgres serve too), a client certificate and an authority that signed neither, as
//! PEM files; and `TlsReceiver`, an HTTPS receiver that requires a client certificate that
//! authority signed, and counts the requests it answered (and the HTTP version of each)
//! and the handshakes it refused; started `offering_http2`, it offers HTTP/2 by ALPN.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// A certificate authority, the receiver's certificate and a client's, made fresh.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The authority's certificate (PEM): the roots to verify the receiver against.
    pub ca: PathBuf,
    /// The client's certificate and key (PEM).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The server's certificate (for `localhost` and `127.0.0.1`) and key (PEM), which a
    /// test's Redis and Postgres serve.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Another authority's certificate (PEM), which signed none of these.
    pub other_ca: PathBuf,
    ca_der: CertificateDer<'static>,
    server: (CertificateDer<'static>, Vec<u8>),
}

impl Pki {
    pub fn new() -> Self {
        let ca_params = authority("postback test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        // Each its own name: OpenSSL (Redis, Postgres) takes a certificate whose subject
        // is its issuer's for a self-signed one.
        let signed = |names: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names.clone()).unwrap();
            params.distinguished_name = common_name(&names[0]);
            let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
            (cert, key)
        };
        let (server, server_key) = signed(vec!["localhost".into(), "127.0.0.1".into()]);
        let (client, client_key) = signed(vec!["shop-a.client".into()]);
        let other_key = KeyPair::generate().unwrap();
        let other_ca = authority("no one's CA").self_signed(&other_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, pem: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        Self {
            ca: write("ca.pem", ca.pem()),
            client_cert: write("client.crt", client.pem()),
            client_key: write("client.key", client_key.serialize_pem()),
            server_cert: write("server.crt", server.pem()),
            server_key: write("server.key", server_key.serialize_pem()),
            other_ca: write("other-ca.pem", other_ca.pem()),
            ca_der: ca.der().clone(),
            server: (server.der().clone(), server_key.serialize_der()),
            dir,
        }
    }
}

/// The parameters of a certificate authority named `name`.
fn authority(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = common_name(name);
    params
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

impl Pki {
    /// The variables that have postback verify a store's certificate against this
    /// authority and present the client certificate.
    pub fn store_env(&self) -> Vec<(String, String)> {
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            ("POSTBACK_STORE_TLS_CA_FILE".into(), path(&self.ca)),
            (
                "POSTBACK_STORE_TLS_CERT_FILE".into(),
                path(&self.client_cert),
            ),
            ("POSTBACK_STORE_TLS_KEY_FILE".into(), path(&self.client_key)),
        ]
    }

    /// The store settings that say the same.
    pub fn store_settings(&self) -> postback::config::StoreSettings {
        postback::config::StoreSettings {
            tls_ca_file: Some(self.ca.clone()),
            tls_cert_file: Some(self.client_cert.clone()),
            tls_key_file: Some(self.client_key.clone()),
            ..Default::default()
        }
    }

    /// A `[tenants.<tenant>]` section that presents the client certificate and trusts
    /// this authority.
    pub fn tenant_config(&self, tenant: &str) -> String {
        let (cert, key, ca) = (
            self.client_cert.display(),
            self.client_key.display(),
            self.ca.display(),
        );
        format!(
            "[tenants.{tenant}]\nclient_cert = \"{cert}\"\nclient_key = \"{key}\"\nca_certs = \"{ca}\"\n"
        )
    }
}

/// An HTTPS receiver on 127.0.0.1 that answers 200 only over a connection whose client
/// presented a certificate the `Pki`'s authority signed.
pub struct TlsReceiver {
    pub addr: SocketAddr,
    answered: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    versions: Arc<Mutex<Vec<http::Version>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsReceiver {
    pub async fn start(pki: &Pki) -> Self {
        Self::listen(pki, false).await
    }

    /// A receiver that offers HTTP/2 (ALPN `h2`, then `http/1.1`).
    pub async fn offering_http2(pki: &Pki) -> Self {
        Self::listen(pki, true).await
    }

    async fn listen(pki: &Pki, http2: bool) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(pki.ca_der.clone()).unwrap();
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server.1.clone()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![pki.server.0.clone()], key)
            .unwrap();
        if http2 {
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        }
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (answered, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let versions = Arc::new(Mutex::new(Vec::new()));
        let counts = (answered.clone(), refused.clone(), versions.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, (answered, refused, versions)) = (acceptor.clone(), counts.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        refused.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        answered.fetch_add(1, Ordering::SeqCst);
                        versions.lock().unwrap().push(req.version());
                        async {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                axum::body::Body::from("ok"),
                            ))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            answered,
            refused,
            versions,
            task,
        }
    }

    /// The callback URL for `path`, by the name the certificate carries.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// The HTTP version of each request answered, in order.
    pub fn versions(&self) -> Vec<http::Version> {
        self.versions.lock().unwrap().clone()
    }

    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}
