//! The hold API: the calls over HTTPS as JSON.
//!
//! ```text
//! POST /v1/namespaces/{ns}/trainjobs/{name}/hold      {"instance":3,"deadline":"...","reason":"node lost"}
//! POST /v1/namespaces/{ns}/trainjobs/{name}/release   {"instance":3,"deadline":"..."}
//! POST /v1/namespaces/{ns}/trainjobs/{name}/open      {"deadline":"..."}
//! GET  /v1/namespaces/{ns}/trainjobs/{name}/status
//! GET  /v1/preflight[?namespace=NS&name=NAME]
//! GET  /v1/drift[?namespace=NS]
//! POST /v1/nodes/{node}/fence                        {}
//! GET  /v1/openapi.json                              (authenticated only: the contract)
//! ```
//!
//! The routes and bodies are described by [`contract`], committed as `api/openapi.json`.
//!
//! Every request is authenticated (TokenReview of its bearer token) and authorised
//! (SubjectAccessReview: `holdfast.dev` `trainjobs/<call>`, verb `create` for the POSTs and
//! `get` for status, preflight and drift) before anything else is read or written; the
//! apiserver's answers are remembered briefly ([`review_cache`]: 10 s when accepted, 2 s when
//! refused), so a caller's calls in a burst cost one review each. A success is
//! `200 {"result":"Ok", ...}`; a call's failure is its `HoldError` status with
//! `HoldError::body`; a refusal is 401 `Unauthenticated` or 403 `Forbidden` in the same
//! shape.

pub mod auth;
pub mod contract;
pub mod limits;
pub mod review_cache;
mod routes;
mod scope;
mod unprotected;

use std::net::SocketAddr;

use axum::Router;
use holdfast_serve::{CertFiles, TlsServer};
use tokio_util::sync::CancellationToken;

pub use auth::{Access, Caller, KubeAuth, Refusal};
pub use limits::{ApiLimits, Budget, LimitMetrics};
pub use routes::{ApiState, FenceStore, MAX_BODY_BYTES, router};
pub use unprotected::Unprotected;

/// Serves `router` over TLS on `addr` until `shutdown` is cancelled.
pub async fn serve(
    addr: SocketAddr,
    files: CertFiles,
    router: Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let server = TlsServer::bind(addr, files).await?;
    tracing::info!(addr = %server.local_addr()?, "hold API listening");
    server.serve(router, shutdown).await
}
