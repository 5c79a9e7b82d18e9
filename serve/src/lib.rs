//! How holdfast's binaries serve HTTP: TLS only on the API ports, with certificates that are
//! re-read when their files change, optionally client certificates, and bounded connections;
//! a plain admin port for probes and metrics. And what else both binaries share: the flags
//! for the kube client, the admin port, the serving certificate and the log format, and
//! shutdown on a signal; and the metrics both export: build info, the process, certificate
//! expiry, the kube client's requests.
#![forbid(unsafe_code)]

pub mod admin;
pub mod build_info;
pub mod certificate_expiry;
pub mod client;
pub mod client_ca;
pub mod common_metrics;
pub mod connections;
mod crypto;
pub mod declared;
pub mod kube_requests;
pub mod logging;
pub mod process_metrics;
pub mod reload;
pub mod shutdown;
pub mod tls;

pub use admin::{AdminArgs, Readiness, admin_router};
pub use build_info::register_build_info;
pub use certificate_expiry::CertificateExpiry;
pub use client::ClientArgs;
pub use common_metrics::register_common_metrics;
pub use connections::{
    Admission, CloseReason, ConnectionHandle, ConnectionLimits, ConnectionMetrics,
};
pub use crypto::install_crypto_provider;
pub use declared::Declared;
pub use kube_requests::KubeRequestMetrics;
pub use logging::{LogArgs, LogFormat};
pub use process_metrics::ProcessCollector;
pub use reload::{CertFiles, ReloadingResolver, TlsArgs};
pub use tls::{PlainServer, TlsOptions, TlsServer};
