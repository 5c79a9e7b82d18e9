//! How holdfast's binaries serve HTTP: TLS only on the API ports, with certificates that are
//! re-read when their files change, optionally client certificates, and bounded connections;
//! a plain admin port for probes and metrics.
#![forbid(unsafe_code)]

pub mod admin;
pub mod client_ca;
pub mod connections;
pub mod logging;
pub mod reload;
pub mod tls;

pub use admin::{Readiness, admin_router};
pub use connections::{ConnectionHandle, ConnectionLimits, ConnectionMetrics};
pub use logging::{LogArgs, LogFormat};
pub use reload::{CertFiles, ReloadingResolver};
pub use tls::{TlsOptions, TlsServer};

/// Install ring as rustls's process-wide crypto provider (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
