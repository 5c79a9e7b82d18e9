//! The process-wide TLS crypto provider.

/// Install ring as rustls's process-wide crypto provider (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
