//! The running webhook: the admission router over TLS (holdfast-serve: rustls, TLS 1.2+, h2
//! and http/1.1, certificate files re-read every 5 s, connections capped in total and per
//! source address, handshake, header-read and idle timeouts, optionally client certificates,
//! graceful drain) and the admin port (`/livez`, `/healthz`, `/readyz`, `/metrics`, plain
//! HTTP).
//!
//! `/readyz` turns true once the serving certificate is loaded (binding fails otherwise) and
//! false again as soon as shutdown begins. On SIGTERM the webhook keeps serving for the
//! shutdown delay (`--shutdown-delay`, 5 s) so the endpoint is taken out of the Service
//! before the listener closes; in-flight admissions then get [`holdfast_serve::tls::DRAIN`]
//! (15 s) to finish. The pod's `terminationGracePeriodSeconds` must exceed both together.

use crate::review::Admission;
use holdfast_serve::{
    CertFiles, CertificateExpiry, ConnectionLimits, ConnectionMetrics, Readiness, TlsOptions,
    TlsServer, admin::serve_admin, admin_router,
};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where to listen, and the serving certificate.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The admission endpoints (HTTPS).
    pub addr: SocketAddr,
    /// The admin endpoints (HTTP).
    pub admin_addr: SocketAddr,
    pub cert: CertFiles,
}

/// Who may connect to the admission port, and how much they may hold; and the bounds on the
/// admin port's connections.
#[derive(Clone, Debug)]
pub struct ConnectionOptions {
    pub limits: ConnectionLimits,
    /// Require client certificates signed by a CA in this PEM file.
    pub client_ca: Option<PathBuf>,
    /// The admin port's (`/livez`, `/readyz`, `/metrics`).
    pub admin_limits: ConnectionLimits,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        ConnectionOptions {
            limits: ConnectionLimits::DEFAULT,
            client_ca: None,
            admin_limits: holdfast_serve::admin::ADMIN_LIMITS,
        }
    }
}

/// A webhook serving in the background until [`RunningWebhook::stop`].
#[derive(Debug)]
pub struct RunningWebhook {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    ready: Readiness,
    shutdown: CancellationToken,
    admin_shutdown: CancellationToken,
    serving: JoinHandle<anyhow::Result<()>>,
    admin: JoinHandle<anyhow::Result<()>>,
}

impl RunningWebhook {
    /// Load the certificate, bind both ports and start serving, with the default connection
    /// bounds and no client authentication. Fails if the certificate cannot be loaded or a
    /// port cannot be bound.
    pub async fn start(
        options: ServeOptions,
        admission: Arc<Admission>,
        registry: Registry,
    ) -> anyhow::Result<Self> {
        Self::start_with(options, ConnectionOptions::default(), admission, registry).await
    }

    /// [`start`](Self::start) with these connection bounds and, if given, client
    /// certificates required. The connection metrics join `registry` (prefix
    /// `holdfast_webhook_`), and so does the served certificate's expiry
    /// (`holdfast_certificate_expiration_timestamp_seconds{kind="serving",source="webhook"}`).
    pub async fn start_with(
        options: ServeOptions,
        connections: ConnectionOptions,
        admission: Arc<Admission>,
        mut registry: Registry,
    ) -> anyhow::Result<Self> {
        let metrics =
            ConnectionMetrics::register(registry.sub_registry_with_prefix("holdfast_webhook"));
        let admin_metrics = ConnectionMetrics::register(
            registry.sub_registry_with_prefix("holdfast_webhook_admin"),
        );
        let tls = TlsServer::bind_with(
            options.addr,
            options.cert,
            TlsOptions {
                limits: connections.limits,
                client_ca: connections.client_ca,
                metrics,
            },
        )
        .await?;
        let addr = tls.local_addr()?;
        CertificateExpiry::register(&mut registry).served("webhook", tls.resolver());
        let admin_listener = TcpListener::bind(options.admin_addr).await?;
        let admin_addr = admin_listener.local_addr()?;
        let ready = Readiness::default();
        let shutdown = CancellationToken::new();
        let admin_shutdown = CancellationToken::new();
        let admin = tokio::spawn(serve_admin(
            admin_listener,
            admin_router(Arc::new(registry), ready.clone()),
            connections.admin_limits,
            admin_metrics,
            admin_shutdown.clone(),
        ));
        let serving = tokio::spawn(tls.serve(admission.router(), shutdown.clone()));
        // The certificate is loaded (bind checked it): ready.
        ready.set(true);
        tracing::info!(%addr, %admin_addr, "holdfast-webhook serving");
        Ok(Self {
            addr,
            admin_addr,
            ready,
            shutdown,
            admin_shutdown,
            serving,
            admin,
        })
    }

    /// The address of `/mutate` and `/validate`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the admin endpoints.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    pub fn ready(&self) -> bool {
        self.ready.get()
    }

    /// Stop gracefully, as on SIGTERM: not ready at once, so the endpoint leaves the
    /// webhook's Service, but still serving for `delay`, because the apiserver keeps sending
    /// admissions to it until the endpoint change reaches it (closing at once would fail those
    /// calls, and with `failurePolicy: Fail` refuse the writes); then [`stop`](Self::stop).
    pub async fn stop_after(self, delay: Duration) -> anyhow::Result<()> {
        self.ready.set(false);
        tracing::info!(
            ?delay,
            "not ready; serving on until the endpoint is removed"
        );
        tokio::time::sleep(delay).await;
        self.stop().await
    }

    /// Stop: not ready at once, stop accepting, drain in-flight admissions, then close the
    /// admin port.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.ready.set(false);
        self.shutdown.cancel();
        let served = self.serving.await;
        self.admin_shutdown.cancel();
        let admin = self.admin.await;
        served??;
        admin??;
        tracing::info!("holdfast-webhook stopped");
        Ok(())
    }
}
