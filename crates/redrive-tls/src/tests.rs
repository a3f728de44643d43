//! Real handshakes on 127.0.0.1 against certificates made here: a test CA, a server
//! certificate it issues for `localhost` and `127.0.0.1`, and a second CA nobody trusts.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        Ca { cert, key }
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A server certificate for `names`, and its key.
    fn issue(&self, names: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("leaf params");
        let key = KeyPair::generate().expect("a leaf key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a leaf certificate");
        (
            cert.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }
}

/// An HTTPS server on 127.0.0.1 answering every request `204`; its port.
async fn https_server(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> u16 {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .expect("a server certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let _ = tls
                    .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// A plain-TCP server that answers in HTTP, not TLS.
async fn plain_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let _ = tcp
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    port
}

async fn get(trust: &Trust, url: &str) -> Result<u16, reqwest::Error> {
    let client = trust.client_builder().no_proxy().build()?;
    Ok(client.get(url).send().await?.status().as_u16())
}

#[tokio::test]
async fn a_server_issued_by_a_trusted_ca_is_reached_by_name_and_by_address() {
    let ca = Ca::new("redrive test CA");
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"]);
    let port = https_server(cert, key).await;
    let trust = Trust::only(ca.pem().as_bytes()).expect("the CA");
    assert_eq!(trust.extra_roots(), 1);
    for host in ["localhost", "127.0.0.1"] {
        let status = get(&trust, &format!("https://{host}:{port}/"))
            .await
            .unwrap_or_else(|e| panic!("{host}: {}", chain(&e)));
        assert_eq!(status, 204, "{host}");
    }
}

#[tokio::test]
async fn a_certificate_from_an_unknown_authority_is_a_certificate_failure_that_names_ca_file() {
    let ca = Ca::new("redrive test CA");
    let other = Ca::new("someone else's CA");
    let (cert, key) = other.issue(&["localhost"]);
    let port = https_server(cert, key).await;
    let trust = Trust::only(ca.pem().as_bytes()).expect("the CA");
    let e = get(&trust, &format!("https://localhost:{port}/"))
        .await
        .expect_err("an untrusted certificate is refused");
    let failure = tls_failure(&e).unwrap_or_else(|| panic!("not TLS: {}", chain(&e)));
    assert!(failure.is_certificate(), "{failure:?}");
    assert_eq!(
        failure.error(),
        &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
    );
    assert!(failure.to_string().contains("--ca-file"), "{failure}");
    let told = explain(&e);
    assert!(
        told.starts_with("TLS: the server's certificate is not issued"),
        "{told}"
    );
    assert!(
        told.contains("UnknownIssuer"),
        "the transport's words follow: {told}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused_as_such() {
    let ca = Ca::new("redrive test CA");
    let (cert, key) = ca.issue(&["hooks.example.com"]);
    let port = https_server(cert, key).await;
    let trust = Trust::only(ca.pem().as_bytes()).expect("the CA");
    let e = get(&trust, &format!("https://localhost:{port}/"))
        .await
        .expect_err("a certificate for another name is refused");
    let failure = tls_failure(&e).unwrap_or_else(|| panic!("not TLS: {}", chain(&e)));
    assert!(failure.is_certificate());
    assert!(
        failure.to_string().contains("not valid for the host name"),
        "{failure}"
    );
}

#[tokio::test]
async fn https_to_a_server_that_does_not_speak_tls_is_a_handshake_failure() {
    let port = plain_server().await;
    let trust = Trust::platform();
    let e = get(&trust, &format!("https://127.0.0.1:{port}/"))
        .await
        .expect_err("no TLS there");
    let failure = tls_failure(&e).unwrap_or_else(|| panic!("not TLS: {}", chain(&e)));
    assert!(!failure.is_certificate(), "{failure:?}");
    assert!(failure.to_string().starts_with("TLS: the handshake failed"));
}

#[tokio::test]
async fn a_refused_connection_is_not_a_tls_failure() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("an address").port();
    drop(listener);
    let e = get(&Trust::platform(), &format!("https://127.0.0.1:{port}/"))
        .await
        .expect_err("nothing listens");
    assert_eq!(tls_failure(&e), None, "{}", chain(&e));
    assert_eq!(explain(&e), chain(&e));
}

#[test]
fn an_extra_bundle_adds_every_certificate_it_holds() {
    let dir = tempfile::tempdir().expect("a dir");
    let path = dir.path().join("cas.pem");
    let (a, b) = (Ca::new("a"), Ca::new("b"));
    std::fs::write(&path, format!("{}{}", a.pem(), b.pem())).expect("write");
    let trust = Trust::load(Some(&path)).expect("two CAs");
    assert_eq!(trust.extra_roots(), 2);
    assert_eq!(Trust::load(None).expect("platform").extra_roots(), 0);
}

#[test]
fn a_bad_bundle_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("a dir");
    let missing = dir.path().join("missing.pem");
    let e = Trust::load(Some(&missing)).expect_err("no such file");
    assert!(matches!(e, TrustError::Unreadable { .. }), "{e:?}");
    assert!(e.to_string().contains("missing.pem"), "{e}");

    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").expect("write");
    let e = Trust::load(Some(&empty)).expect_err("no certificate");
    assert!(matches!(e, TrustError::Empty { .. }), "{e:?}");

    let broken = dir.path().join("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let e = Trust::load(Some(&broken)).expect_err("a broken block");
    assert!(matches!(e, TrustError::Unreadable { .. }), "{e:?}");
}

#[test]
fn the_platform_trust_is_shared_and_a_loaded_one_is_its_own() {
    assert_eq!(Trust::platform(), Trust::platform());
    assert_eq!(Trust::default(), Trust::platform());
    let ca = Ca::new("c");
    let loaded = Trust::only(ca.pem().as_bytes()).expect("the CA");
    assert_ne!(loaded, Trust::platform());
    assert_eq!(loaded.clone(), loaded);
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}
