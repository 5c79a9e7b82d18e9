//! The admin port: `/livez`, `/readyz` and Prometheus `/metrics`, plain HTTP.

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The admin flags, flattened into each binary's `Args`. The default address is the
/// controller's; the webhook's `Args` changes it to `0.0.0.0:9091` (`mut_arg`) so that both
/// can run on one host unconfigured.
#[derive(clap::Args, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminArgs {
    /// Address of the admin endpoints: /livez, /readyz, /metrics (plain HTTP).
    #[arg(long, env = "HOLDFAST_ADMIN_ADDR", default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,
}

/// Whether the process is ready to serve: set once certificates are loaded and, for the
/// controller, its watches have synced; cleared when a watch is lost.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    ready: Readiness,
}

/// The admin router for a registry and a readiness flag.
pub fn admin_router(registry: Arc<Registry>, ready: Readiness) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState { registry, ready })
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if s.ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Serve the admin router on `addr` until `shutdown` is cancelled.
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Controller {
        #[command(flatten)]
        admin: AdminArgs,
    }

    #[derive(clap::Parser)]
    #[command(mut_arg("admin_addr", |a| a.default_value("0.0.0.0:9091")))]
    struct Webhook {
        #[command(flatten)]
        admin: AdminArgs,
    }

    #[test]
    fn one_flag_with_a_default_per_binary() {
        let addr = |s: &str| s.parse::<SocketAddr>().ok();
        let c = Controller::try_parse_from(["x"]).map(|f| f.admin.admin_addr);
        assert_eq!(c.ok(), addr("0.0.0.0:9090"));
        let w = Webhook::try_parse_from(["x"]).map(|f| f.admin.admin_addr);
        assert_eq!(w.ok(), addr("0.0.0.0:9091"));
        let w = Webhook::try_parse_from(["x", "--admin-addr=127.0.0.1:1"]);
        assert_eq!(w.map(|f| f.admin.admin_addr).ok(), addr("127.0.0.1:1"));
        assert!(Controller::try_parse_from(["x", "--admin-addr=nowhere"]).is_err());
    }
}
