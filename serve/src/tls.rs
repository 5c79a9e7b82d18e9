//! An axum router served over rustls (TLS 1.2 and 1.3, h2 and http/1.1), with a header-read
//! timeout, a body limit, and graceful drain on shutdown.

use crate::reload::{CertFiles, ReloadingResolver};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight connections get to finish after shutdown begins.
pub const DRAIN: Duration = Duration::from_secs(15);
/// How often the certificate files are re-read.
pub const RELOAD_EVERY: Duration = Duration::from_secs(5);

/// A bound TLS listener, ready to serve.
pub struct TlsServer {
    listener: TcpListener,
    resolver: Arc<ReloadingResolver>,
    config: Arc<rustls::ServerConfig>,
}

impl TlsServer {
    /// Bind `addr` and load the certificate (an error if it cannot be read or does not match).
    pub async fn bind(addr: SocketAddr, files: CertFiles) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let resolver = Arc::new(ReloadingResolver::load(files)?);
        let mut config = rustls::ServerConfig::builder_with_protocol_versions(&[
            &rustls::version::TLS13,
            &rustls::version::TLS12,
        ])
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            resolver,
            config: Arc::new(config),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn resolver(&self) -> Arc<ReloadingResolver> {
        self.resolver.clone()
    }

    /// Serve until `shutdown` is cancelled, then drain for at most [`DRAIN`].
    pub async fn serve(self, router: Router, shutdown: CancellationToken) -> anyhow::Result<()> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config);
        tokio::spawn(self.resolver.clone().watch(RELOAD_EVERY, shutdown.clone()));
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            let (tcp, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = self.listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let router = router.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let tls =
                    match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        router.clone().oneshot(req.map(axum::body::Body::new))
                    });
                let mut builder = Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT);
                let conn = builder
                    .serve_connection(TokioIo::new(tls), svc)
                    .into_owned();
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
        if tokio::time::timeout(DRAIN, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after the drain period; closing");
        }
        Ok(())
    }
}
