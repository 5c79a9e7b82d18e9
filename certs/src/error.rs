//! What goes wrong making or reading certificates.

/// Everything that can go wrong making or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("validity of {0:?} is out of range")]
    Validity(std::time::Duration),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("no certificate in PEM")]
    NoCertificate,
    #[error("no private key in PEM")]
    NoPrivateKey,
    #[error("PEM: {0}")]
    Pem(String),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("rotation policy: {0}")]
    Policy(String),
}

impl CertError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CertError::Generate(_) => "generate",
            CertError::Validity(_) => "validity",
            CertError::Read { .. } => "read",
            CertError::NoCertificate => "no_certificate",
            CertError::NoPrivateKey => "no_private_key",
            CertError::Pem(_) => "pem",
            CertError::Tls(_) => "tls",
            CertError::Policy(_) => "policy",
        }
    }
}
