//! The admin port: `/livez`, `/readyz` and Prometheus `/metrics`, plain HTTP/1.1, with its
//! connections bounded as the API ports' are ([`crate::tls::PlainServer`]): an idle or
//! trickling client cannot hold file descriptors, nor keep kubelet's probes out.

use crate::connections::{ConnectionLimits, ConnectionMetrics};
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The admin port's bounds by default. Its clients are kubelet's probes (a new connection
/// each, from the node's address) and a scraper or two: few connections, each answered in
/// milliseconds. A client that has not sent its request headers within 5 s, or has had no
/// request in flight for 15 s, is closed.
pub const ADMIN_LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 64,
    max_connections_per_source: 8,
    handshake_timeout: ConnectionLimits::DEFAULT.handshake_timeout,
    header_read_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(15),
    max_concurrent_streams: ConnectionLimits::DEFAULT.max_concurrent_streams,
    admission: None,
};

/// The admin flags, flattened into each binary's `Args`. The default address is the
/// controller's; the webhook's `Args` changes it to `0.0.0.0:9091` (`mut_arg`) so that both
/// can run on one host unconfigured.
#[derive(clap::Args, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminArgs {
    /// Address of the admin endpoints: /livez, /readyz, /metrics (plain HTTP).
    #[arg(long, env = "HOLDFAST_ADMIN_ADDR", default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,
    /// Open connections to the admin port, in all; more are closed at accept.
    #[arg(
        long,
        env = "HOLDFAST_ADMIN_MAX_CONNECTIONS",
        default_value_t = ADMIN_LIMITS.max_connections
    )]
    pub admin_max_connections: usize,
    /// Open connections to the admin port from one source address.
    #[arg(
        long,
        env = "HOLDFAST_ADMIN_MAX_CONNECTIONS_PER_IP",
        default_value_t = ADMIN_LIMITS.max_connections_per_source
    )]
    pub admin_max_connections_per_ip: usize,
}

impl AdminArgs {
    /// The admin port's connection bounds ([`ADMIN_LIMITS`] with the flags' caps, at least 1).
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.admin_max_connections.max(1),
            max_connections_per_source: self.admin_max_connections_per_ip.max(1),
            ..ADMIN_LIMITS
        }
    }
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

/// Serve the admin router on `listener` until `shutdown` is cancelled, its connections under
/// `limits` and counted in `metrics` (register them: [`ConnectionMetrics::register`]).
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    crate::tls::PlainServer::new(listener, limits, metrics)
        .serve(router, shutdown)
        .await
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

    #[test]
    fn the_admin_port_is_bounded_by_default_and_by_flag() {
        let c = Controller::try_parse_from(["x"]).map(|f| f.admin.limits());
        assert_eq!(c.ok(), Some(ADMIN_LIMITS));
        let c = Controller::try_parse_from([
            "x",
            "--admin-max-connections=10",
            "--admin-max-connections-per-ip=0",
        ])
        .map(|f| f.admin.limits());
        let c = c.expect("parsed");
        assert_eq!(
            (c.max_connections, c.max_connections_per_source),
            (10, 1),
            "a cap of 0 is 1"
        );
        assert_eq!(c.header_read_timeout, ADMIN_LIMITS.header_read_timeout);
    }

    /// Idle connections over the per-source cap are closed at accept and counted; another
    /// source still gets its answer, and so does this one once the idle ones are closed
    /// by the header-read timeout.
    #[tokio::test]
    async fn idle_connections_are_capped_counted_and_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = ConnectionLimits {
            max_connections: 8,
            max_connections_per_source: 2,
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(300),
            ..ADMIN_LIMITS
        };
        let mut registry = Registry::default();
        let metrics = ConnectionMetrics::register(registry.sub_registry_with_prefix("t"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let ready = Readiness::default();
        ready.set(true);
        let registry = Arc::new(registry);
        let stop = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(serve_admin(
            listener,
            admin_router(registry.clone(), ready),
            limits,
            metrics,
            stop.clone(),
        ));
        let get = |from: &'static str| async move {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket
                .bind(format!("{from}:0").parse().expect("addr"))
                .expect("bind the source");
            let mut s = socket
                .connect(format!("127.0.0.1:{port}").parse().expect("addr"))
                .await
                .expect("connect");
            s.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await
                .expect("write");
            let mut out = String::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
            out
        };
        let mut idle = Vec::new();
        for _ in 0..6 {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket
                .bind("127.0.0.2:0".parse().expect("addr"))
                .expect("bind the source");
            idle.push(
                socket
                    .connect(format!("127.0.0.1:{port}").parse().expect("addr"))
                    .await
                    .expect("connect"),
            );
        }
        assert!(
            get("127.0.0.1").await.starts_with("HTTP/1.1 200"),
            "another source"
        );
        let text = |r: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, r).expect("encode");
            out
        };
        let metrics = text(&registry);
        assert!(
            metrics.contains("t_connections_refused_total{reason=\"per_source\"} 4"),
            "{metrics}"
        );
        // The two idle ones that got in are closed by the header-read timeout.
        for mut s in idle {
            let mut buf = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
            assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
        }
        assert!(
            get("127.0.0.2").await.starts_with("HTTP/1.1 200"),
            "room again"
        );
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(20), server)
            .await
            .expect("stops")
            .expect("joined")
            .expect("served");
    }
}
