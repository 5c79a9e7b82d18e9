//! How holdfast's binaries serve HTTP: TLS only on the API ports, with certificates that are
//! re-read when their files change, optionally client certificates, and bounded connections;
//! a plain admin port for probes and metrics. And what else both binaries share: the flags
//! for the kube client, the admin port, the serving certificate and the log format, and
//! shutdown on a signal.
#![forbid(unsafe_code)]

pub mod admin;
pub mod client;
pub mod client_ca;
pub mod connections;
mod crypto;
pub mod logging;
pub mod reload;
pub mod retired;
pub mod shutdown;
pub mod tls;

pub use admin::{AdminArgs, Readiness, admin_router};
pub use client::ClientArgs;
pub use connections::{ConnectionHandle, ConnectionLimits, ConnectionMetrics};
pub use crypto::install_crypto_provider;
pub use logging::{LogArgs, LogFormat};
pub use reload::{CertFiles, ReloadingResolver, TlsArgs};
pub use tls::{TlsOptions, TlsServer};
