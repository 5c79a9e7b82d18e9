//! Client-certificate authentication: a verifier trusting the CA certificates of one PEM
//! file, re-read by content like the serving certificate ([`crate::reload`]).
//!
//! A client that presents no certificate, or one not signed by a trusted CA (or not meant for
//! client authentication), fails the TLS handshake: it never reaches HTTP.

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, pem::PemObject};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a client CA file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("reading the client CA file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the client CA file {path} holds no usable CA certificate")]
    NoCertificate { path: PathBuf },
    #[error("the client CA file {path}: {message}")]
    Verifier { path: PathBuf, message: String },
}

/// The trusted client CAs as last read.
#[derive(Clone)]
pub struct ClientCa {
    pub path: PathBuf,
    raw: Vec<u8>,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ClientCa {
    /// Read and parse `path`; an error here means the server cannot start.
    pub fn load(path: &Path) -> Result<Self, ClientCaError> {
        let raw = std::fs::read(path).map_err(|source| ClientCaError::Read {
            path: path.to_owned(),
            source,
        })?;
        let verifier = verifier(path, &raw)?;
        Ok(ClientCa {
            path: path.to_owned(),
            raw,
            verifier,
        })
    }

    /// Re-read the file: `Ok(Some(new))` if its contents changed and parse, `Ok(None)` if
    /// unchanged, an error (and the old one kept by the caller) otherwise.
    pub fn reload(&self) -> Result<Option<ClientCa>, ClientCaError> {
        let raw = std::fs::read(&self.path).map_err(|source| ClientCaError::Read {
            path: self.path.clone(),
            source,
        })?;
        if raw == self.raw {
            return Ok(None);
        }
        let verifier = verifier(&self.path, &raw)?;
        Ok(Some(ClientCa {
            path: self.path.clone(),
            raw,
            verifier,
        }))
    }

    pub fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.verifier.clone()
    }
}

fn verifier(path: &Path, pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>, ClientCaError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem).filter_map(Result::ok) {
        // A certificate that is not a usable trust anchor is skipped; none at all is an error.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(ClientCaError::NoCertificate {
            path: path.to_owned(),
        });
    }
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| ClientCaError::Verifier {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_certs::CertificateAuthority;
    use std::time::Duration;

    #[test]
    fn a_ca_file_loads_and_a_changed_one_is_reloaded() {
        crate::install_crypto_provider();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.crt");
        let first = CertificateAuthority::generate("a", Duration::from_secs(600)).expect("ca");
        std::fs::write(&path, first.cert_pem()).expect("write");
        let ca = ClientCa::load(&path).expect("load");
        assert!(ca.reload().expect("reload").is_none(), "unchanged");
        let second = CertificateAuthority::generate("b", Duration::from_secs(600)).expect("ca");
        std::fs::write(&path, format!("{}{}", first.cert_pem(), second.cert_pem())).expect("write");
        assert!(ca.reload().expect("reload").is_some(), "changed");
    }

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, "not a certificate").expect("write");
        assert!(matches!(
            ClientCa::load(&path),
            Err(ClientCaError::NoCertificate { .. })
        ));
        assert!(matches!(
            ClientCa::load(&dir.path().join("missing")),
            Err(ClientCaError::Read { .. })
        ));
    }
}
