//! The TLS of every request redrive sends — push deliveries and their validation
//! handshake, effect authorities, dependency probes, escalation webhooks, the CLI and the
//! load tool — so that one rule decides which servers are trusted.
//!
//! # Which certificates are trusted
//!
//! rustls with the `ring` provider, TLS 1.2 and 1.3, verifying the server's certificate
//! chain and host name against:
//!
//! - **the platform's trusted roots** (read once per process by `rustls-native-certs`:
//!   on Linux the distribution's bundle, or the files `SSL_CERT_FILE` / `SSL_CERT_DIR`
//!   name), because that is where an operator already manages trust: a distribution's
//!   updates reach redrive without a new build, and a company's root installed on the
//!   host is trusted as it is by every other program there. A bundled copy of the web's
//!   roots would go stale with the binary and ignore that store;
//! - **plus an extra CA bundle** ([`Trust::load`]'s `extra_ca`: a PEM file of one or more
//!   certificates), for private authorities that are not in the platform's store, named
//!   by `--ca-file`, the `ca_file` setting or `REDRIVE_CA_FILE`.
//!
//! A host without a readable store (a minimal container image) trusts only the extra
//! bundle; that is logged once at start, not a failure.
//!
//! # Telling a TLS failure apart
//!
//! [`tls_failure`] finds the TLS error in a request error's chain, so push delivery can
//! record its own outcome class for it and the CLI can say what is wrong with the
//! certificate instead of "connection error".

use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use rustls::{CertificateError, RootCertStore};

/// Why an extra CA bundle could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// The file could not be read or holds a PEM block that does not parse.
    #[error("CA file {path}: {reason}")]
    Unreadable {
        /// The file named.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The file holds no `CERTIFICATE` block.
    #[error("CA file {path}: no PEM certificate in it")]
    Empty {
        /// The file named.
        path: PathBuf,
    },
    /// A certificate in the file is not a usable trust anchor.
    #[error("CA file {path}: certificate {index} is not a usable CA certificate: {reason}")]
    BadCertificate {
        /// The file named.
        path: PathBuf,
        /// Its position in the file, from 1.
        index: usize,
        /// What rustls said.
        reason: String,
    },
}

/// The roots outgoing requests trust: the platform's and any extra CA bundle. Cheap to
/// clone (the rustls configuration is shared).
#[derive(Clone)]
pub struct Trust {
    config: Arc<rustls::ClientConfig>,
    extra: usize,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trust")
            .field("platform_roots", &platform_roots().len())
            .field("extra_roots", &self.extra)
            .finish()
    }
}

/// Two `Trust`s are equal when they are the same loaded configuration.
impl PartialEq for Trust {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for Trust {}

impl Default for Trust {
    /// The platform's roots only.
    fn default() -> Self {
        Trust::platform()
    }
}

impl Trust {
    /// The platform's roots only (shared by every caller of this process).
    pub fn platform() -> Trust {
        static PLATFORM: OnceLock<Trust> = OnceLock::new();
        PLATFORM
            .get_or_init(|| Trust::with_roots(platform_roots().clone(), 0))
            .clone()
    }

    /// The platform's roots plus, when `extra_ca` names one, every certificate of that
    /// PEM file. A file that cannot be read, holds no certificate or holds one that is not
    /// a CA certificate is an error naming it: a trust setting is never half applied.
    pub fn load(extra_ca: Option<&Path>) -> Result<Trust, TrustError> {
        let Some(path) = extra_ca else {
            return Ok(Trust::platform());
        };
        let extra = read_bundle(path)?;
        let mut roots = platform_roots().clone();
        let count = extra.len();
        for (i, cert) in extra.into_iter().enumerate() {
            roots.add(cert).map_err(|e| TrustError::BadCertificate {
                path: path.to_owned(),
                index: i + 1,
                reason: e.to_string(),
            })?;
        }
        Ok(Trust::with_roots(roots, count))
    }

    /// Only the certificates of a PEM bundle, without the platform's roots (tests that must
    /// not depend on the host's store, and callers that pin a private authority).
    pub fn only(pem: &[u8]) -> Result<Trust, TrustError> {
        let path = PathBuf::from("<memory>");
        let certs = parse_bundle(pem, &path)?;
        let count = certs.len();
        let mut roots = RootCertStore::empty();
        for (i, cert) in certs.into_iter().enumerate() {
            roots.add(cert).map_err(|e| TrustError::BadCertificate {
                path: path.clone(),
                index: i + 1,
                reason: e.to_string(),
            })?;
        }
        Ok(Trust::with_roots(roots, count))
    }

    fn with_roots(roots: RootCertStore, extra: usize) -> Trust {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            // ring supports every default protocol version; this cannot fail.
            .unwrap_or_else(|e| unreachable!("ring lacks a default TLS version: {e}"));
        Trust {
            config: Arc::new(config),
            extra,
        }
    }

    /// How many certificates the extra bundle added.
    pub fn extra_roots(&self) -> usize {
        self.extra
    }

    /// The rustls client configuration.
    pub fn config(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(&self.config)
    }

    /// A `reqwest` client builder whose `https://` requests use these roots; the caller
    /// adds its own timeouts, redirect policy, resolver and proxy rules.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder().use_preconfigured_tls((*self.config).clone())
    }
}

/// The platform's roots, read once per process; an unreadable store is logged and leaves
/// the set empty.
fn platform_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "a platform certificate store could not be read");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        if ignored > 0 {
            tracing::debug!(ignored, "platform certificates that are not usable roots");
        }
        if added == 0 {
            tracing::warn!(
                "no trusted roots found on this host: https:// requests trust only the extra CA bundle (ca_file)"
            );
        }
        roots
    })
}

fn read_bundle(path: &Path) -> Result<Vec<CertificateDer<'static>>, TrustError> {
    let bytes = std::fs::read(path).map_err(|e| TrustError::Unreadable {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    parse_bundle(&bytes, path)
}

fn parse_bundle(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TrustError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TrustError::Unreadable {
            path: path.to_owned(),
            reason: format!("not a PEM file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TrustError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// A TLS failure found in a request error's chain: the handshake failed or the server's
/// certificate was refused. Its `Display` says what is wrong in an operator's words.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFailure(rustls::Error);

impl TlsFailure {
    /// The rustls error.
    pub fn error(&self) -> &rustls::Error {
        &self.0
    }

    /// Whether the server's certificate was refused (as opposed to a handshake that failed
    /// for another reason, such as a server that does not speak TLS).
    pub fn is_certificate(&self) -> bool {
        matches!(self.0, rustls::Error::InvalidCertificate(_))
    }
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => f.write_str(
                    "TLS: the server's certificate is not issued by a trusted authority \
                     (a private CA is added with --ca-file, the ca_file setting or REDRIVE_CA_FILE)",
                ),
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => f.write_str(
                    "TLS: the server's certificate is not valid for the host name requested",
                ),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    f.write_str("TLS: the server's certificate has expired")
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    f.write_str("TLS: the server's certificate is not valid yet")
                }
                other => write!(f, "TLS: the server's certificate was refused: {other:?}"),
            },
            other => write!(f, "TLS: the handshake failed: {other}"),
        }
    }
}

/// The TLS failure behind `e`, if its chain holds one. rustls reports through
/// `std::io::Error`s (sometimes one inside another), whose `source` skips the error they
/// wrap, so each is opened rather than followed.
pub fn tls_failure(e: &(dyn StdError + 'static)) -> Option<TlsFailure> {
    let mut current = Some(e);
    while let Some(err) = current {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(TlsFailure(t.clone()));
        }
        current = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => err.source(),
        };
    }
    None
}

/// An error and its sources, `a: b: c`; when the chain holds a TLS failure, its sentence
/// ([`TlsFailure`]'s `Display`) comes first, so a reader sees what is wrong with the
/// certificate before the transport's words.
pub fn explain(e: &(dyn StdError + 'static)) -> String {
    let mut chain = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        chain.push_str(": ");
        chain.push_str(&inner.to_string());
        source = inner.source();
    }
    match tls_failure(e) {
        Some(tls) => format!("{tls} ({chain})"),
        None => chain,
    }
}

#[cfg(test)]
mod tests;
