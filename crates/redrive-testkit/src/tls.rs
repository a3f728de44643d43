//! Real TLS for tests, with certificates made in the test: a [`TestCa`] that issues
//! server certificates, and a [`TlsFront`] that terminates TLS on 127.0.0.1 in front of a
//! plain listener (a [`Receiver`](crate::Receiver), say), so an `https://` endpoint is a
//! real handshake with a real certificate. The front's certificate can be changed while
//! it runs, to make a trusted endpoint present an untrusted one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate authority made for one test.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        TestCa { cert, key }
    }

    /// Its certificate, PEM.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Writes its certificate to `dir/<file>` (a CA bundle for `--ca-file`); the path.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.pem()).expect("write the CA file");
        path
    }

    /// A trust of this CA alone (not the host's store).
    pub fn trust(&self) -> redrive_tls::Trust {
        redrive_tls::Trust::only(self.pem().as_bytes()).expect("the test CA is a usable root")
    }

    /// A server certificate for `names` (host names or IP addresses), issued by this CA.
    pub fn issue(&self, names: &[&str]) -> Issued {
        let params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("server certificate params");
        let key = KeyPair::generate().expect("a server key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a server certificate");
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
            .expect("a signing key rustls supports");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            certified: Arc::new(CertifiedKey::new(
                vec![CertificateDer::from(cert.der().to_vec())],
                signing,
            )),
        }
    }
}

/// A server certificate and its key.
#[derive(Clone)]
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
    certified: Arc<CertifiedKey>,
}

impl Issued {
    /// Writes `cert.pem` and `key.pem` into `dir` (a server's `tls_cert_file` and
    /// `tls_key_file`); their paths.
    pub fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, &self.cert_pem).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        (cert, key)
    }
}

/// The certificate a front presents, changeable while it runs.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// TLS on 127.0.0.1 in front of a plain TCP listener; stops when dropped.
pub struct TlsFront {
    /// `https://localhost:<port>`.
    pub base: String,
    /// The port it listens on.
    pub port: u16,
    current: Arc<Current>,
    /// Bumped when the certificate changes: open connections close, so the next request
    /// makes a new handshake.
    generation: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    /// Terminates TLS with `issued` and passes each connection's bytes to `backend`.
    pub async fn start(issued: &Issued, backend: SocketAddr) -> TlsFront {
        let current = Arc::new(Current(RwLock::new(issued.certified.clone())));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_cert_resolver(current.clone());
        // No resumption: every connection is a full handshake with the certificate
        // presented now (a resumed session would skip its verification).
        let mut config = config;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the TLS front");
        let port = listener.local_addr().expect("a bound address").port();
        let generation = tokio::sync::watch::Sender::new(0u64);
        let changes = generation.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let mut changed = changes.subscribe();
                changed.mark_unchanged();
                tokio::spawn(async move {
                    // A refused handshake ends here: the client saw why.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut tls, &mut plain) => {}
                        _ = changed.changed() => {}
                    }
                });
            }
        });
        TlsFront {
            base: format!("https://localhost:{port}"),
            port,
            current,
            generation,
            task,
        }
    }

    /// A front for a receiver: its `base` (`http://127.0.0.1:<port>`) is the backend.
    pub async fn before(receiver: &crate::Receiver, issued: &Issued) -> TlsFront {
        let addr = receiver
            .base
            .trim_start_matches("http://")
            .parse()
            .expect("a receiver listens on an address");
        TlsFront::start(issued, addr).await
    }

    /// `base` + `path` (`/hook`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Presents `issued` from now on: open connections are closed, so every later
    /// request makes a handshake with it.
    pub fn present(&self, issued: &Issued) {
        *self
            .current
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner) = issued.certified.clone();
        self.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
