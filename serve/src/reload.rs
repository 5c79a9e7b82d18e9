//! A `ResolvesServerCert` that re-reads the certificate and key files and swaps atomically.
//!
//! The files' *contents* are compared on each poll, not file events: kubelet updates a Secret
//! volume by swapping a symlink, which a watch on the file itself never sees. A new pair is
//! used only if both parse and the key matches the certificate; otherwise the old one stays.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Where a serving certificate chain and its key live (PEM).
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The serving-certificate flags, flattened into each binary's `Args` (the webhook's gives
/// them defaults, the paths its chart mounts; the controller serves its API only when both
/// are given).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsArgs {
    /// TLS certificate (PEM chain) of the HTTPS port; re-read when the file's contents change.
    #[arg(long, env = "HOLDFAST_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of the HTTPS port.
    #[arg(long, env = "HOLDFAST_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The certificate and key files, when both are given.
    pub fn files(&self) -> Option<CertFiles> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        }
    }
}

/// Why a pair was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no certificate in PEM")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no usable private key in PEM: {message}")]
    Key { path: PathBuf, message: String },
    #[error("certificate and key do not match: {0}")]
    Mismatch(rustls::Error),
}

struct Loaded {
    raw: (Vec<u8>, Vec<u8>),
    key: Arc<CertifiedKey>,
}

/// The current serving certificate, swapped in place when the files change.
pub struct ReloadingResolver {
    files: CertFiles,
    current: RwLock<Loaded>,
}

impl std::fmt::Debug for ReloadingResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingResolver")
            .field("files", &self.files)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

fn parse(files: &CertFiles, cert: &[u8], key: &[u8]) -> Result<Arc<CertifiedKey>, LoadError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(LoadError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key_der = PrivateKeyDer::from_pem_slice(key).map_err(|e| LoadError::Key {
        path: files.key.clone(),
        message: e.to_string(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain, key_der, &provider).map_err(LoadError::Mismatch)?;
    Ok(Arc::new(certified))
}

impl ReloadingResolver {
    /// Load the pair now; an error here means the server cannot start.
    pub fn load(files: CertFiles) -> Result<Self, LoadError> {
        let raw = (read(&files.cert)?, read(&files.key)?);
        let key = parse(&files, &raw.0, &raw.1)?;
        Ok(Self {
            files,
            current: RwLock::new(Loaded { raw, key }),
        })
    }

    /// Re-read the files; swap if they changed and the new pair is good.
    /// Returns whether a new certificate is now served.
    pub fn reload(&self) -> Result<bool, LoadError> {
        let raw = (read(&self.files.cert)?, read(&self.files.key)?);
        {
            let cur = self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if cur.raw == raw {
                return Ok(false);
            }
        }
        let key = parse(&self.files, &raw.0, &raw.1)?;
        let mut cur = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *cur = Loaded { raw, key };
        Ok(true)
    }

    /// The certificate served now (end entity first).
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .key
            .clone()
    }

    /// Poll the files every `every` until `stop` is cancelled. A bad pair is logged and skipped.
    pub async fn watch(
        self: Arc<Self>,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.reload() {
                Ok(true) => {
                    tracing::info!(cert = %self.files.cert.display(), "serving certificate reloaded")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "serving certificate not reloaded; keeping the current one")
                }
            }
        }
    }
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use holdfast_certs::CertificateAuthority;

    fn write_pair(dir: &Path, ca: &CertificateAuthority) -> CertFiles {
        let leaf = ca
            .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
            .expect("issue");
        let files = CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        std::fs::write(&files.cert, leaf.cert_pem).expect("write cert");
        std::fs::write(&files.key, leaf.key_pem).expect("write key");
        files
    }

    #[test]
    fn changed_files_are_swapped_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(600)).expect("ca");
        let files = write_pair(dir.path(), &ca);
        let r = ReloadingResolver::load(files.clone()).expect("load");
        let before = r.current().cert[0].clone();
        assert!(
            !r.reload().expect("reload unchanged"),
            "unchanged files are not reloaded"
        );
        write_pair(dir.path(), &ca);
        assert!(r.reload().expect("reload changed"));
        assert_ne!(r.current().cert[0], before);
    }

    #[test]
    fn a_mismatched_pair_is_refused_and_the_old_one_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(600)).expect("ca");
        let files = write_pair(dir.path(), &ca);
        let r = ReloadingResolver::load(files.clone()).expect("load");
        let before = r.current().cert[0].clone();
        // A new certificate with the old key: half-written rotation.
        let other = ca
            .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
            .expect("issue");
        std::fs::write(&files.cert, other.cert_pem).expect("write");
        assert!(matches!(r.reload(), Err(LoadError::Mismatch(_))));
        assert_eq!(r.current().cert[0], before);
    }

    #[test]
    fn garbage_is_refused_at_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = CertFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        std::fs::write(&files.cert, "not pem").expect("write");
        std::fs::write(&files.key, "not pem").expect("write");
        assert!(matches!(
            ReloadingResolver::load(files),
            Err(LoadError::NoCertificate { .. })
        ));
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        tls: TlsArgs,
    }

    #[test]
    fn files_only_when_both_are_given() {
        let files = |args: &[&str]| Flags::try_parse_from(args).map(|f| f.tls.files());
        assert!(files(&["x"]).expect("parse").is_none());
        assert!(files(&["x", "--tls-cert=c.pem"]).expect("parse").is_none());
        let both = files(&["x", "--tls-cert=c.pem", "--tls-key=k.pem"])
            .expect("parse")
            .expect("both");
        assert_eq!(both.cert, Path::new("c.pem"));
        assert_eq!(both.key, Path::new("k.pem"));
    }
}
